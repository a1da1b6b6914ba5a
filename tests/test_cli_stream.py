"""Issue 16 item 3: `dptree-opt stream` -- counts files, standard input, a data column of event
times; JSON with the privacy account; bad input refused before any noise is drawn."""

import io
import json

import numpy as np
import pytest

from dptree_opt.cli import main


def _lines(text):
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_counts_file_secure_release_writes_json(tmp_path, capsys, opendp_calls):
    f = tmp_path / "c.txt"
    counts = np.random.default_rng(0).integers(0, 9, 37)
    f.write_text("count\n" + "\n".join(map(str, counts)) + "\n")
    out = tmp_path / "run.json"
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--estimator", "causal",
                 "--out", str(out)]) == 0
    rows = _lines(capsys.readouterr().out)
    assert rows[0] == "step,estimate,standard_error" and len(rows) == 38
    doc = json.loads(out.read_text())
    assert doc["steps"] == 37 and doc["account"]["horizon"] == 37
    assert doc["status"] == "complete" and doc["stopped"] is None and not doc["simulation"]
    assert doc["account"]["budget"] == {"epsilon": 1.0}
    assert "OpenDP" in doc["account"]["sampler"] and opendp_calls.count("drawn") == 71
    # 71 = the nodes complete within 37 steps: 37 + 18 + 9 + 4 + 2 + 1 (levels 0..5).
    # The printed SEs are the square roots of the exact (discrete Laplace) variances:
    from dptree_opt.stream import Counter
    v = Counter(37, epsilon=1.0, estimator="causal").step_variances()
    se = [float(r.split(",")[2]) for r in rows[1:]]
    np.testing.assert_allclose(se, np.sqrt(v), rtol=1e-5)


def test_standard_input_is_answered_line_by_line(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("3\n1\n\n4\n1\n5\n"))
    assert main(["stream", "--counts", "-", "--horizon", "8", "--rho", "0.5",
                 "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# SIMULATION, NOT PRIVATE")
    assert len(_lines(out)) == 1 + 5


def test_standard_input_bad_line_stops_with_earlier_steps_kept(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("3\n1\n-4\n1\n"))
    assert main(["stream", "--counts", "-", "--unbounded", "--epsilon", "1",
                 "--seed", "1"]) == 2
    cap = capsys.readouterr()
    assert len(_lines(cap.out)) == 1 + 2 and "line 3" in cap.err


def test_event_column_is_binned_into_steps(tmp_path, capsys):
    f = tmp_path / "events.csv"
    times = np.random.default_rng(2).uniform(0, 24, 500)
    f.write_text("time\n" + "\n".join(f"{t:.6f}" for t in times) + "\n")
    out = tmp_path / "r.json"
    assert main(["stream", str(f), "--column", "time", "--lower", "0", "--upper", "24",
                 "--steps", "24", "--epsilon", "1", "--mechanism", "kary", "--branching", "3",
                 "--seed", "0", "--quiet", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["steps"] == 24 and "500" not in doc["source"]   # the total is protected
    # every event is counted: the truth 500 is within 6 SE of the final estimate
    # (Chebyshev: P(|error| > 6 SE) < 1/36; with this fixed seed it is deterministic)
    assert abs(doc["estimate"][-1] - 500) <= 6 * doc["standard_error"][-1]


@pytest.mark.parametrize("make, argv, match", [
    (lambda p: p.write_text("1\n2\nx\n"), ["--epsilon", "1"], "not a number"),
    (lambda p: p.write_text("1\n2\n-3\n"), ["--epsilon", "1"], "non-negative"),
    (lambda p: p.write_text("1\n2\n3\n"), ["--epsilon", "1", "--horizon", "2"], "exceed"),
    (lambda p: p.write_text("1\n2\n"), ["--epsilon", "1", "--rho", "1"], "exactly one"),
    (lambda p: p.write_text("1\n2\n"), ["--epsilon", "0"], "epsilon"),
    (lambda p: p.write_text("1\n2\n"), ["--epsilon", "nan"], "epsilon"),
    (lambda p: p.write_text("1\n2\n"), ["--epsilon", "1", "--mechanism", "kary"], "branching"),
    (lambda p: p.write_text("1\n2\n"), ["--epsilon", "1", "--unbounded", "--horizon", "4"],
     "one"),
    (lambda p: p.write_text("1\n2\n"), ["--epsilon", "1", "--lower", "0"], "--lower"),
    (lambda p: p.write_text(""), ["--epsilon", "1"], "empty"),
    (lambda p: p.write_text("9007199254740993\n"), ["--epsilon", "1"], "2\\^53"),
    (lambda p: p.write_text("1000000000000,5\n"), ["--epsilon", "1"], "one count per line"),
    (lambda p: p.write_bytes(b"\xef\xbb\xbf1\r\n\r\n2\r\nx\r\n"), ["--epsilon", "1"],
     "line 4"),
])
def test_bad_input_is_refused_before_any_noise(tmp_path, capsys, opendp_calls, make, argv,
                                               match):
    f = tmp_path / "c.txt"
    make(f)
    assert main(["stream", "--counts", str(f), *argv]) == 2
    err = capsys.readouterr().err
    assert __import__("re").search(match, err), err
    assert opendp_calls.count("drawn") == 0


def test_output_over_the_input_is_refused(tmp_path, capsys):
    f = tmp_path / "c.json"
    f.write_text("1\n2\n")
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--out", str(f)]) == 2
    assert f.read_text() == "1\n2\n"
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--plot", "x.jpg"]) == 2


def test_plot_is_written(tmp_path, capsys):
    f = tmp_path / "c.txt"
    f.write_text("\n".join(["2"] * 20))
    png = tmp_path / "s.png"
    assert main(["stream", "--counts", str(f), "--rho", "1", "--seed", "0", "--quiet",
                 "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_help_explains_itself(capsys):
    with pytest.raises(SystemExit):
        main(["stream", "--help"])
    out = capsys.readouterr().out
    assert "--counts" in out and "examples" in out and "--unbounded" in out
