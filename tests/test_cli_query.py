"""`dptree-opt query RELEASE.json`: ranges, boxes, CDF values and quantiles of a saved release
(1-D and grids, text and --json), equal to the in-process release's answers; bad queries and
damaged files exit 2 with a message."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dptree_opt.cli import main
from dptree_opt.data_release import release, release_grid

RNG = np.random.default_rng(5)


@pytest.fixture(scope="module")
def one_d(tmp_path_factory):
    rel = release(np.clip(RNG.normal(size=2000), -3.9, 3.9), lower=-4, upper=4, bins=40,
                  epsilon=1.0, tree=[5, 8])
    path = tmp_path_factory.mktemp("q") / "r.json"
    rel.to_json(path)
    return rel, path


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    g = release_grid(RNG.normal(size=(1000, 2)), lower=[-3, -3], upper=[3, 3], bins=[6, 4],
                     epsilon=1.0, out_of_range="clip", tree=[[2, 3], [4]])
    path = tmp_path_factory.mktemp("q") / "g.json"
    g.to_json(path)
    return g, path


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_one_d_queries_json(one_d, capsys):
    rel, path = one_d
    out = _json(capsys, ["query", str(path), "--range", "-1.5", "0.7", "--range", "-4", "4",
                         "--cdf", "0.25", "--quantiles", "0.5", "0.9", "0.42", "--json"])
    assert out["kind"] == "1-D" and out["complete"] is True
    ans = out["answers"]
    assert [a["query"] for a in ans] == ["range", "range", "cdf", "quantile", "quantile",
                                         "quantile"]
    for a, (lo, hi) in zip(ans[:2], [(-1.5, 0.7), (-4.0, 4.0)]):
        want = rel.range_answer(lo, hi)
        assert (a["estimate"], a["standard_error"], a["consistent"]) == pytest.approx(want)
    # the whole range is the total: its consistent count is N, its estimate the BLUE of N
    assert ans[1]["consistent"] == rel.total
    assert ans[1]["estimate"] == pytest.approx(rel.raw_cdf[-1])
    assert ans[1]["standard_error"] == pytest.approx(rel.standard_errors[-1])
    want = rel.cumulative_answer(0.25)
    assert (ans[2]["estimate"], ans[2]["standard_error"]) == pytest.approx(want[:2])
    table = rel.quantile_answers([0.5, 0.9, 0.42])
    for j, a in enumerate(ans[3:]):
        for key in ("value", "lower", "upper", "noise_lower", "noise_upper"):
            assert a[key] == pytest.approx(table[key][j])
    released = list(rel.quantile_levels).index(0.5)
    assert ans[3]["lower"] == rel.quantile_lower[released]


def test_one_d_text(one_d, capsys):
    rel, path = one_d
    assert main(["query", str(path), "--range", "-1", "1", "--quantiles", "0.5"]) == 0
    text = capsys.readouterr().out
    est = rel.range_answer(-1.0, 1.0)
    assert f"range [-1, 1): {est.estimate:.6g} (SE {est.standard_error:.6g})" in text
    assert "quantile 0.5:" in text and "95% interval" in text


def test_grid_queries(grid, capsys):
    g, path = grid
    out = _json(capsys, ["query", str(path), "--box", "-1,-1.5", "2,1", "--cdf", "0,0",
                         "--json"])
    assert out["kind"] == "grid"
    box, cdf = out["answers"]
    want = g.range_count([-1, -1.5], [2, 1])
    assert (box["estimate"], box["standard_error"], box["consistent"]) == pytest.approx(want)
    want = g.range_count([-3, -3], [0, 0])
    assert (cdf["estimate"], cdf["standard_error"]) == pytest.approx(want[:2])


def test_release_then_query_from_the_shell(tmp_path, capsys):
    """The issue's scenario: a grid released from the CLI is queried later from its JSON
    (no second release); the answers are the JSON's own cells summed."""
    data = tmp_path / "d.csv"
    pts = RNG.uniform(0, 1, size=(300, 2))
    np.savetxt(data, pts, delimiter=",", header="x,y", comments="")
    out = tmp_path / "g.json"
    assert main(["release", str(data), "--columns", "x,y", "--lower", "0,0", "--upper", "1,1",
                 "--bins", "4,4", "--epsilon", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    ans = _json(capsys, ["query", str(out), "--box", "0,0", "0.5,0.75", "--json"])["answers"][0]
    cells = np.asarray(json.loads(out.read_text())["cells"]["raw"])
    assert ans["estimate"] == pytest.approx(cells[:2, :3].sum())


@pytest.mark.parametrize("argv, message", [
    (["--box", "0", "1"], "--box is for grid releases"),
    (["--range", "2", "1"], "A must be <= B"),
    (["--quantiles", "1.5"], "levels must be in"),
    (["--cdf", "abc"], "cannot read numbers"),
    ([], "give at least one query"),
])
def test_one_d_bad_queries(one_d, capsys, argv, message):
    _, path = one_d
    assert main(["query", str(path)] + argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--quantiles", "0.5"], "--quantiles needs a 1-D release"),
    (["--range", "0", "1"], "--range is for one axis"),
    (["--box", "0", "1"], "give 2 comma-separated values"),
    (["--box", "1,1", "0,0"], "low corner must be <="),
])
def test_grid_bad_queries(grid, capsys, argv, message):
    _, path = grid
    assert main(["query", str(path)] + argv) == 2
    assert message in capsys.readouterr().err


def test_damaged_file_exits_2(one_d, tmp_path, capsys):
    _, path = one_d
    bad = tmp_path / "bad.json"
    bad.write_text(path.read_text().replace('"K": 40', '"K": 41'))
    assert main(["query", str(bad), "--range", "0", "1"]) == 2
    assert "checksum does not match" in capsys.readouterr().err
