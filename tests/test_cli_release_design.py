"""`dptree-opt release --design auto`: the best releasable design of optimize.best_mechanism
released instead of the optimal tree, the winner and its exact error printed next to the
default's; the default unchanged without the flag; bad combinations refused before any
noise."""

import json

import numpy as np
import pytest
from oracles import constrained_gls

from dptree_opt import Mechanism, strategies, workloads
from dptree_opt.cli import main

K = 64
RNG = np.random.default_rng(5)


def _counts(tmp_path, n=K):
    path = tmp_path / "counts.txt"
    path.write_text("\n".join(str(int(v)) for v in RNG.integers(0, 30, n)) + "\n")
    return path


def _release(tmp_path, *extra):
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    argv = ["release", "--counts", str(_counts(tmp_path)), "--lower", "0", "--upper", "1",
            "--bins", str(K), "--rho", "0.5", "--quantiles", "", "--out", str(out), *extra]
    return argv, out


def _printed(line: str, after: str) -> float:
    return float(line.split(after, 1)[1].split()[0])


def test_design_auto_releases_the_winner_and_prints_it_beside_the_default(tmp_path, capsys,
                                                                          opendp_calls):
    """The winner is named, released (its family in the JSON), its printed mean error is at
    most the default's (the default's family is among those searched), and the printed
    default error is the dense oracle's mean CDF variance of the default release's tree
    under continuous noise of its scales (rebuilt from the default release's account)."""
    argv, out = _release(tmp_path, "--design", "auto", "--design-time-limit", "30")
    assert main(argv) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "exact mean CDF error per prefix" in ln)
    family = text.split("design auto: ", 1)[1].split()[0]
    design_err = _printed(line, "per prefix: ")
    default_err = _printed(line, "level-uniform tree): ")
    assert design_err <= default_err * (1 + 1e-6)
    doc = json.loads(out.read_text())
    assert doc["expected_error"]["design"]["family"] == family
    assert doc["expected_error"]["mean_prefix_mse"] <= design_err * (1 + 1e-3)
    assert "design: " + family in text and "tree: branching" not in text
    # the default release, and its tree rebuilt with continuous noise, on the dense oracle
    argv, out = _release(tmp_path)
    assert main(argv) == 0
    default = json.loads(out.read_text())
    ks = default["tree"]["branching"]
    levels = [lv for lv in default["privacy"]["levels"] if lv["released"] == "with noise"]
    mech = Mechanism(strategies.tree(int(np.prod(ks)), ks), rho=0.5,
                     level_budgets=[lv["budget"] for lv in levels])
    _, var, ok = constrained_gls(mech.released.matrix.toarray(), mech.variances,
                                 workloads.prefix(mech.n_bins).dense()[:K])
    assert ok.all() and default_err == pytest.approx(float(np.mean(var)), rel=1e-5)


def test_without_design_the_release_is_the_default(tmp_path, capsys):
    argv, out = _release(tmp_path)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "tree: branching" in text and "design auto" not in text
    doc = json.loads(out.read_text())
    assert "design" not in doc["expected_error"]
    assert doc["privacy"]["design"].startswith("optimize.level_uniform")


@pytest.mark.parametrize("extra, match", [
    (["--design", "auto", "--tree", "4,4,4"], "leave out --tree"),
    (["--design", "auto", "--budgets", "equal"], "leave out --tree and --budgets"),
    (["--design-time-limit", "5"], "needs --design auto"),
    (["--design", "auto", "--design-time-limit", "0"], "seconds > 0"),
    (["--design", "auto", "--design-time-limit", "nan"], "seconds > 0"),
])
def test_bad_design_flags_are_refused_before_any_noise(extra, match, tmp_path, capsys,
                                                       opendp_calls):
    argv, out = _release(tmp_path, *extra)
    assert main(argv) == 2
    assert match in capsys.readouterr().err
    assert opendp_calls.events == [] and not out.exists()


def test_design_auto_on_a_grid(tmp_path, capsys, opendp_calls):
    """A grid release (--columns) with --design auto: the best releasable grid design for
    all boxes, printed beside the default's error per box, released through OpenDP."""
    data = tmp_path / "points.csv"
    pts = RNG.uniform(0, 1, (200, 2))
    data.write_text("x,y\n" + "\n".join(f"{a},{b}" for a, b in pts) + "\n")
    out = tmp_path / "grid.json"
    assert main(["release", str(data), "--columns", "x,y", "--lower", "0,0", "--upper", "1,1",
                 "--bins", "4x4", "--epsilon", "1", "--design", "auto",
                 "--design-time-limit", "20", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "exact mean error per box" in ln)
    assert _printed(line, "per box: ") <= _printed(line, "trees): ") * (1 + 1e-6)
    assert text.split("design auto: ", 1)[1].startswith("grid_")
    assert opendp_calls.events.count("drawn") >= 1
    assert json.loads(out.read_text())["complete"]


def test_help_lists_design_auto(capsys):
    with pytest.raises(SystemExit):
        main(["release", "--help"])
    text = capsys.readouterr().out
    assert "--design {auto}" in text and "--design-time-limit" in text
