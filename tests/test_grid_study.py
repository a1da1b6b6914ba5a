"""experiments/grid_study.py (issue 15 item 7) in quick mode: its numbers against independent
computations (closed forms, the dense GLS of hand-built mechanisms, the 1-D search), its
checks, and its place in `dptree-opt figures`."""

from __future__ import annotations

import itertools
import json

import pytest

from dptree_opt import Mechanism, expected_error, optimize, strategies, workloads
from oracles import factorisations
from dptree_opt.cli import figures_cmd
from dptree_opt.cli._scripts import load_script




@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid_study")
    return out, load_script("experiments", "grid_study").run(out, quick=True)


def test_outputs_and_checks(study):
    out, res = study
    assert (out / "grid_study.png").stat().st_size > 10_000
    data = json.loads((out / "grid_study.json").read_text())
    assert data["rows_2d"] and data["rows_dimension"] and data["verdict"] == res["verdict"]
    assert len(res["checks"]) >= 14 and all(c["ok"] for c in res["checks"]), [
        c["what"] for c in res["checks"] if not c["ok"]]
    assert "grid_study" in figures_cmd.EXPERIMENT_ITEMS


def test_two_d_rows_against_independent_values(study):
    """Flat: 2 (mean box volume) in closed form (add/remove, eps 1: variance 2 per cell);
    binary families at 16 x 16: the dense GLS of the hand-built Mechanism; the best quadtree
    with equal budgets at 16 x 16: the minimum over every quadtree built by hand."""
    _, res = study
    rows = [r for r in res["rows"] if "workload" in r]
    for r in rows:
        n = r["n"]
        mean_len = (n + 1) / 2 if r["workload"] == "prefix" else (n + 2) / 3
        assert r["flat"] == pytest.approx(2 * mean_len**2, rel=1e-12)
    kw = {"epsilon": 1.0, "neighbours": "add_remove"}
    for kind in ("prefix", "all_range"):
        r = next(x for x in rows if x["workload"] == kind and x["n"] == 16)
        W = getattr(workloads, kind)((16, 16))
        q = W.n_queries

        def dense(A):
            return expected_error(W, Mechanism(A, **kw), method="dense") / q
        binary = strategies.tree(16, [2, 2, 2, 2])
        assert r["kron_binary_equal"] == pytest.approx(dense(strategies.kron(binary, binary)),
                                                       rel=1e-9)
        assert r["quad_binary_equal"] == pytest.approx(dense(strategies.quadtree((16, 16))),
                                                       rel=1e-9)
        quads = [dense(strategies.quadtree((16, 16), [list(a), list(b)]))
                 for a, b in itertools.product(factorisations(16), repeat=2) if len(a) == len(b)]
        assert r["quad_best_equal"] == pytest.approx(min(quads), rel=1e-9)
        assert r["quad_best_equal_candidates"] == len(quads) == 20
        assert r["best_optimal"] <= min(r[k] for k in ("flat", "kron_best_equal",
                                                       "quad_best_equal")) * (1 + 1e-9)


def test_dimension_rows_are_powers_of_the_1d_ratio(study):
    """Kronecker with equal budgets, N private: ratio to flat = (1-D ratio)^d, the 1-D ratio
    from optimize.level_uniform (its own branch and bound) and the closed-form flat."""
    _, res = study
    rows = [r for r in res["rows"] if "d" in r]
    assert {r["d"] for r in rows} == {1, 2, 3, 4}
    for r in rows:
        n = r["side"]
        tree = optimize.level_uniform(n, 1.0, estimator="blue", workload="all_range",
                                      neighbours="add_remove", allow_padding=False,
                                      budgets="equal")
        one = (tree.error / (n * (n + 1) // 2)) / (2 * (n + 2) / 3)
        assert r["kron_equal_ratio"] == pytest.approx(one ** r["d"], rel=1e-9)
        assert r["optimal_ratio"] <= 1 + 1e-9
    # the 2-D Kronecker hierarchy beats flat exactly when the 1-D tree does: from side 128
    r128 = next(r for r in rows if r["d"] == 2 and r["side"] == 128)
    r64 = next(r for r in rows if r["d"] == 2 and r["side"] == 64)
    assert r128["kron_equal_ratio"] < 1 < r64["kron_equal_ratio"]
