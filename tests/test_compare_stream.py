"""`dptree-opt compare --stream --horizon T` / ``compare.compare_stream``: the ranking of the
streaming counters by their exact variances, checked against closed forms and a dense BLUE
built here, and the counters it reports rebuilt from its own options."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dptree_opt import compare, optimize, stream
from dptree_opt.cli import main

T = 365


@pytest.fixture(scope="module")
def ranking():
    return compare.compare_stream(T, epsilon=1.0)


def dense_prefix_variances(horizon, branching, budgets_root_first):
    """The offline BLUE of the running counts of a tree truncated to ``horizon`` leaves
    (nodes entirely past the horizon absent), Laplace noise 2 / b_l^2 on every node of level
    l (each step lies in one node per level: sensitivity 1 per level), unfunded levels not
    measured; dense numpy, from the definition."""
    rows, var = [], []
    width = math.prod(branching)
    for depth, b in enumerate(budgets_root_first):
        if depth:
            width //= branching[depth - 1]
        for start in range(0, horizon, width):
            if b > 0:
                row = np.zeros(horizon)
                row[start:min(start + width, horizon)] = 1.0
                rows.append(row)
                var.append(2.0 / b**2)
    a, v = np.array(rows), np.array(var)
    cov = np.linalg.inv(a.T @ (a / v[:, None]))
    p = np.tril(np.ones((horizon, horizon)))
    return np.einsum("ti,ij,tj->t", p, cov, p)


def test_best_counter_at_365_is_tree_blue_on_the_optimal_tree_8_3x_the_default(ranking):
    """T = 365, eps = 1. The default counter (binary tree, 9 levels of eps / 9, covering sums)
    releases step t as popcount(t) nodes of variance 2 x 9^2: mean 661.76. The best is the
    offline BLUE (tree_blue) on the tree optimize.level_uniform finds for the 365 prefixes
    with optimal budgets: its variances, from the dense BLUE built here, average 79.89,
    8.28x less."""
    popcount = np.array([bin(t).count("1") for t in range(1, T + 1)])
    default = 2 * 9**2 * popcount
    assert ranking.default.mechanism == "binary" and ranking.default.options == {}
    assert ranking.default.mean == pytest.approx(default.mean(), rel=1e-12)
    assert ranking.default.max == pytest.approx(default.max(), rel=1e-12)
    best = ranking.rows[0]
    tree = optimize.level_uniform(T, epsilon=1.0, estimator="blue", neighbours="add_remove",
                                  budgets="optimal", top=0)
    assert best.mechanism == "tree_blue" and best.options["branching"] == list(tree.branching)
    want = dense_prefix_variances(T, list(tree.branching), list(tree.budgets))
    assert best.mean == pytest.approx(want.mean(), rel=1e-9)
    assert best.max == pytest.approx(want.max(), rel=1e-9)
    assert round(default.mean() / want.mean(), 1) == 8.3
    means = [r.mean for r in ranking.rows if r.available]
    assert means == sorted(means) and len(means) >= 50


def test_reported_options_rebuild_the_counters(ranking):
    """Each of the first rows, and the best of each mechanism, rebuilt from its mechanism and
    options (what ``call`` prints) has the variances the ranking reports."""
    firsts = {}
    for r in ranking.rows:
        if r.available:
            firsts.setdefault(r.mechanism, r)
    for r in list(ranking.rows[:3]) + list(firsts.values()):
        c = stream.Counter(T, epsilon=1.0, mechanism=r.mechanism,
                           rng=np.random.default_rng(1), **r.options)
        v = c.step_variances()
        assert (v.mean(), v.max()) == pytest.approx((r.mean, r.max), rel=1e-12)
        assert r.call(T, {"epsilon": 1.0}).startswith(f"Counter({T}, epsilon=1, "
                                                      f"mechanism={r.mechanism!r}")
    assert {"binary", "kary", "negative_digits", "tree_blue"} <= set(firsts)
    gaussian_only = {r.mechanism: r.note for r in ranking.rows if not r.available}
    assert set(gaussian_only) == {"sqrt", "blt"}
    assert all("Gaussian only" in note for note in gaussian_only.values())


def test_gaussian_ranking_includes_the_factorisations():
    """rho-zCDP: the square-root factorisation's and BLT's rows are computed (Gaussian
    only), and every configuration can be built."""
    res = compare.compare_stream(16, rho=0.5, max_branching=4)
    sqrt = next(r for r in res.rows if r.mechanism == "sqrt")
    c = stream.Counter(16, rho=0.5, mechanism="sqrt", rng=np.random.default_rng(0))
    assert sqrt.mean == pytest.approx(c.step_variances().mean(), rel=1e-12)
    assert any(r.mechanism == "blt" for r in res.rows)
    assert all(r.available for r in res.rows)


def test_stream_bad_input():
    with pytest.raises(ValueError, match="horizon"):
        compare.compare_stream(0, epsilon=1.0)
    with pytest.raises(ValueError, match="horizon"):
        compare.compare_stream(2**23, epsilon=1.0)
    with pytest.raises(ValueError, match="exactly one"):
        compare.compare_stream(10, epsilon=1.0, rho=0.5)
    with pytest.raises(ValueError, match="max_branching"):
        compare.compare_stream(10, epsilon=1.0, max_branching=1)
    with pytest.raises(ValueError, match="time_limit"):
        compare.compare_stream(10, epsilon=1.0, time_limit=0)


def test_cli_stream_table_and_json(capsys):
    code = main(["compare", "--stream", "--horizon", "365", "--epsilon", "1", "--top", "5"])
    out = capsys.readouterr().out
    assert code == 0
    assert "horizon T = 365" in out and "8.28x" in out
    assert "best: Counter(365, epsilon=1, mechanism='tree_blue', branching=[" in out
    code = main(["compare", "--stream", "--horizon", "40", "--rho", "0.5", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["horizon"] == 40 and d["rho"] == 0.5
    assert d["rows"][0]["vs_default"] == pytest.approx(d["default"]["mean"]
                                                       / d["rows"][0]["mean"])
    for argv, msg in ((["--stream", "--epsilon", "1"], "--horizon"),
                      (["--horizon", "10", "--bins", "8", "--epsilon", "1"], "--stream"),
                      (["--stream", "--horizon", "10", "--bins", "8", "--epsilon", "1"],
                       "--bins"),
                      (["--stream", "--horizon", "10", "--epsilon", "1", "--neighbours",
                        "swap"], "event level"),
                      (["--epsilon", "1"], "--bins")):
        code = main(["compare", *argv])
        err = capsys.readouterr().err
        assert code == 2 and msg in err, (argv, err)
