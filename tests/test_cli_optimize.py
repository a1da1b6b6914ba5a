"""`dptree-opt optimize` prints what the library computes, in text and JSON."""

import json

import pytest

from dptree_opt import optimize
from dptree_opt.cli import main


def test_optimize_json_matches_library(capsys):
    assert main(["optimize", "--bins", "1000", "--epsilon", "1", "--estimator", "covering",
                 "--neighbours", "swap", "--budgets", "equal", "--json"]) == 0   # [RTS]
    out = json.loads(capsys.readouterr().out)
    design = optimize.level_uniform(1000, 1.0, estimator="covering", neighbours="swap",
                                    budgets="equal")
    assert out["best"]["branching"] == list(design.branching) == [10, 10, 10]
    assert out["best"]["error"] == pytest.approx(design.error)
    # [RTS] equal-budget covering error of (10,10,10): c h^2 sum (k_l - 1), c = 4K/eps^2
    assert out["best"]["error"] == pytest.approx(4 * 1000 * 9 * 27)
    assert len(out["alternatives"]) == 10
    assert all(a["error"] >= out["best"]["error"] for a in out["alternatives"])


def test_optimize_text(capsys):
    assert main(["optimize", "--bins", "1024", "--epsilon", "1", "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "recommended tree" in text and "rank" in text


@pytest.mark.parametrize("args", [["--bins", "0", "--epsilon", "1"],
                                  ["--bins", "64", "--noise", "gaussian", "--epsilon", "1"],
                                  ["--bins", "64", "--epsilon", "-1"]])
def test_optimize_bad_input(args, capsys):
    assert main(["optimize", *args]) == 2
    assert "error" in capsys.readouterr().err


def test_optimize_workload_flag(capsys):
    """--workload all_range: the same search as level_uniform(workload="all_range"); mean per
    range printed; other estimators refused with the library's message."""
    import dptree_opt as dp
    assert main(["optimize", "--bins", "200", "--epsilon", "1", "--neighbours", "add_remove",
                 "--workload", "all_range", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best = dp.optimize.level_uniform(200, 1.0, estimator="blue", neighbours="add_remove",
                                     workload="all_range")
    assert out["workload"] == "all_range"
    assert out["best"]["branching"] == list(best.branching)
    assert out["best"]["mean_error_per_query"] == pytest.approx(best.error / (200 * 201 / 2))
    assert out["best"]["mean_error_per_prefix"] is None
    assert main(["optimize", "--bins", "200", "--epsilon", "1", "--workload", "all_range"]) == 0
    assert "mean per range" in capsys.readouterr().out
    assert main(["optimize", "--bins", "200", "--epsilon", "1", "--workload", "all_range",
                 "--estimator", "covering"]) == 2
    assert "estimator='blue' only" in capsys.readouterr().err
    # identity: the exhaustive search; under swap the flat histogram (variance 8 (1 - 1/K))
    assert main(["optimize", "--bins", "64", "--epsilon", "1", "--workload", "identity",
                 "--neighbours", "swap", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["branching"] == [64]
    assert out["best"]["mean_error_per_query"] == pytest.approx(8.0 * (1 - 1 / 64))


def test_optimize_node_budgets(capsys):
    """--budgets node: budgets per node on a complete tree of K bins; the JSON budgets build a
    Mechanism (row_budgets) whose exact error and privacy loss are recomputed independently
    (dense GLS, the scaled matrix's largest column sum)."""
    import numpy as np

    import dptree_opt as dp
    assert main(["optimize", "--bins", "48", "--epsilon", "1", "--neighbours", "add_remove",
                 "--budgets", "node", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ks = out["branching"]
    assert int(np.prod(ks)) == 48
    tree = dp.strategies.tree(48, ks)
    mech = dp.Mechanism(tree, epsilon=1.0, neighbours="add_remove",
                        row_budgets=out["node_budgets"])
    assert abs(tree.matrix).T @ np.asarray(out["node_budgets"]) == pytest.approx(
        np.ones(48), abs=1e-9)                                    # paths sum to eps
    dense = dp.expected_error(dp.workloads.prefix(48), mech, method="dense")
    assert out["error"] == pytest.approx(dense, rel=1e-9)
    assert out["mean_error_per_prefix"] <= out["per_level_mean_error_per_prefix"]
    assert main(["optimize", "--bins", "48", "--epsilon", "1", "--budgets", "node"]) == 0
    assert "budgets per node" in capsys.readouterr().out
    for bad in (["--workload", "all_range"], ["--estimator", "covering"]):
        assert main(["optimize", "--bins", "48", "--epsilon", "1", "--budgets", "node",
                     *bad]) == 2
        assert "--budgets node" in capsys.readouterr().err


def test_optimize_grid_mode_ranks_hierarchies_by_their_dense_error(capsys):
    """`dptree-opt optimize --bins 8x8 --json`: the best design's reported mean equals the
    dense GLS of its mechanism on the real cells' workload; the ranking is sorted; the flat
    grid's mean is the closed form 2 * mean box size (Laplace eps 1, add/remove)."""
    import numpy as np

    from dptree_opt import Mechanism, expected_error, strategies, workloads

    code = main(["optimize", "--bins", "8x8", "--epsilon", "1", "--neighbours", "add_remove",
                  "--workload", "all_range", "--json", "--top", "4"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    means = [r["mean_error_per_query"] for r in d["ranked"]]
    assert means == sorted(means) and len(means) == 4
    # flat: Var(box) = 2 |box|; mean box size over all ranges of 8 per axis = (10 / 3)^2
    assert d["flat_mean"] == pytest.approx(2 * (10 / 3) ** 2, rel=1e-12)
    best = d["ranked"][0]
    chains = best["branching"]
    if best["family"] == "kron":
        strat = strategies.kron(*[strategies.tree(int(np.prod(c)), c) for c in chains])
    else:
        strat = strategies.quadtree(tuple(best["padded_shape"]), chains)
    mech = Mechanism(strat, epsilon=1.0, neighbours="add_remove",
                     level_budgets=best["budgets"])
    assert best["padded_shape"] == [8, 8]
    w = workloads.all_range((8, 8))
    dense = expected_error(w, mech, method="dense") / w.n_queries
    assert best["mean_error_per_query"] == pytest.approx(dense, rel=1e-9)


def test_optimize_family_auto(capsys):
    """--family auto: optimize.best_mechanism's Design, as JSON (its ranked alternatives and
    skipped families) and as text; the best is no worse than the per-level optimum the
    default search finds (level_uniform, BLUE, optimal budgets: an independent optimiser)."""
    assert main(["optimize", "--bins", "32", "--epsilon", "1", "--neighbours", "add_remove",
                 "--family", "auto", "--time-limit", "30", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    per_level = optimize.level_uniform(32, 1.0, estimator="blue", neighbours="add_remove",
                                       budgets="optimal")
    assert out["mean_error_per_query"] <= per_level.error / 32 * (1 + 1e-9)
    means = [out["mean_error_per_query"]] + [a["mean_error_per_query"]
                                             for a in out["alternatives"]]
    assert means == sorted(means) and len(out["alternatives"]) <= 10
    skipped = {s["family"]: s["reason"] for s in out["skipped"]}
    assert skipped["grid_quadtree"] == "Kronecker (grid) workloads only"
    assert main(["optimize", "--bins", "4x4", "--rho", "0.5", "--family", "auto",
                 "--releasable", "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("best mechanism: ") and "skipped:" in text
    assert "not releasable" in text and "releasable: yes" in text


@pytest.mark.parametrize("args, message", [
    (["--family", "auto", "--public-total"], "--public-total"),
    (["--family", "auto", "--estimator", "covering"], "--estimator blue"),
    (["--family", "auto", "--budgets", "node"], "--budgets"),
    (["--family", "auto", "--time-limit", "0"], "--time-limit"),
    (["--time-limit", "5"], "--family auto"),
    (["--family", "kron"], "--family auto works for K bins"),
])
def test_optimize_family_auto_bad_input(args, message, capsys):
    assert main(["optimize", "--bins", "16", "--epsilon", "1", *args]) == 2
    assert message in capsys.readouterr().err


def test_optimize_defaults_to_add_remove_blue_and_optimal_budgets(capsys):
    """Without flags: add/remove neighbours, the BLUE, optimal budgets (1-D and grid); the
    printed design's error is the generic engine's error of the mechanism it describes."""
    import dptree_opt as dp
    from dptree_opt import strategies, workloads
    assert main(["optimize", "--bins", "60", "--epsilon", "1", "--json", "--top", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["neighbours"], out["estimator"], out["budgets_rule"]) == \
        ("add_remove", "blue", "optimal")
    assert out["public_total"] is False
    best = out["best"]
    mech = dp.Mechanism(strategies.tree(best["padded_bins"], best["branching"]), epsilon=1.0,
                        neighbours="add_remove", level_budgets=best["budgets"])
    per = dp.expected_error(workloads.prefix(best["padded_bins"]), mech, per_query=True)
    assert best["error"] == pytest.approx(per[:60].sum(), rel=1e-9)
    assert main(["optimize", "--bins", "4x4", "--epsilon", "1", "--json", "--top", "1"]) == 0
    grid = json.loads(capsys.readouterr().out)
    assert (grid["neighbours"], grid["budgets_rule"]) == ("add_remove", "optimal")
