"""The exact-error engines live in the ``dptree_opt.error`` package; the old module paths
(``dptree_opt.tree_error``, ``dptree_opt.refined_error``, ``compare.interval_blue_errors``,
``estimation.toeplitz.toeplitz_error``) stay importable and name the same objects."""

import importlib

import dptree_opt as dp
from dptree_opt import compare, error
from dptree_opt.error import interval, refined, toeplitz, tree


def test_entry_points():
    for name in ("expected_error", "monte_carlo_error", "MonteCarloResult", "ESTIMATORS",
                 "ERROR_METHODS", "interval_blue_errors"):
        assert hasattr(error, name), name
    assert dp.expected_error is error.expected_error
    assert dp.monte_carlo_error is error.monte_carlo_error
    assert dp.MonteCarloResult is error.MonteCarloResult


def test_alias_modules():
    old_tree = importlib.import_module("dptree_opt.tree_error")
    for name in old_tree.__all__:
        assert getattr(old_tree, name) is getattr(tree, name), name
    assert "MAX_ALL_RANGE_PER_QUERY_K" in old_tree.__all__
    old_refined = importlib.import_module("dptree_opt.refined_error")
    for name in old_refined.__all__:
        assert getattr(old_refined, name) is getattr(refined, name), name
    assert compare.interval_blue_errors is interval.interval_blue_errors
    assert compare.MAX_LAMINAR_DENSE_BINS == interval.MAX_LAMINAR_DENSE_BINS
    from dptree_opt.estimation.toeplitz import TOEPLITZ_WORKLOADS, toeplitz_error
    assert toeplitz_error is toeplitz.toeplitz_error
    assert TOEPLITZ_WORKLOADS is toeplitz.TOEPLITZ_WORKLOADS
