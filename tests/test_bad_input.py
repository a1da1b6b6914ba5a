"""Bad input must raise ValueError with a message naming the offending parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dptree_opt import Mechanism, blue, expected_error, strategies, workloads
from dptree_opt.strategies import Strategy


@pytest.fixture
def tree8():
    return strategies.tree(8, 2)


# ------------------------------------------------------------------------- budgets
@pytest.mark.parametrize("eps", [0, 0.0, -1.0, -1e-300, math.nan, math.inf, -math.inf])
def test_bad_epsilon(tree8, eps):
    with pytest.raises(ValueError, match="epsilon"):
        Mechanism(tree8, epsilon=eps)


@pytest.mark.parametrize("eps", [None, "1", True, [1.0], np.array([1.0])])
def test_epsilon_not_a_number(tree8, eps):
    with pytest.raises(ValueError, match="epsilon"):
        Mechanism(tree8, epsilon=eps)


@pytest.mark.parametrize("rho", [0, -0.5, math.nan, math.inf, None])
def test_bad_rho(tree8, rho):
    with pytest.raises(ValueError, match="rho"):
        Mechanism(tree8, rho=rho, noise="gaussian")


def test_epsilon_with_gaussian(tree8):
    with pytest.raises(ValueError, match="epsilon"):
        Mechanism(tree8, epsilon=1.0, noise="gaussian")
    with pytest.raises(ValueError, match="epsilon"):
        Mechanism(tree8, epsilon=1.0, rho=1.0, noise="gaussian")


def test_rho_with_laplace(tree8):
    # rho alone implies Gaussian noise (issue 14); rho with Laplace noise is an error
    assert Mechanism(tree8, rho=1.0).noise == "gaussian"
    with pytest.raises(ValueError, match="rho"):
        Mechanism(tree8, rho=1.0, noise="laplace")
    with pytest.raises(ValueError, match="rho"):
        Mechanism(tree8, rho=1.0, epsilon=1.0, noise="laplace")


def test_level_budgets_must_sum_to_total(tree8):
    with pytest.raises(ValueError, match="level_budgets"):
        Mechanism(tree8, epsilon=1.0, level_budgets=[0.3, 0.3, 0.3], neighbours="swap")
    with pytest.raises(ValueError, match="level_budgets"):
        Mechanism(tree8, epsilon=1.0, level_budgets=[0.5, 0.5, 0.5], neighbours="swap")
    with pytest.raises(ValueError, match="level_budgets"):
        Mechanism(tree8, rho=1.0, noise="gaussian", level_budgets=[0.2, 0.2, 0.2],
                  neighbours="swap")
    # sanity: a valid split is accepted
    Mechanism(tree8, epsilon=1.0, level_budgets=[0.2, 0.3, 0.5], neighbours="swap")


@pytest.mark.parametrize("budgets", [[0.5, 0.5], [0.25, 0.25, 0.25, 0.25], [1.0], 1.0,
                                     [[0.5, 0.5]]])
def test_level_budgets_wrong_count(tree8, budgets):
    # swap: the tree over 8 bins has 3 noisy levels (the root is exact)
    with pytest.raises(ValueError, match="level_budgets"):
        Mechanism(tree8, epsilon=1.0, level_budgets=budgets, neighbours="swap")


def test_level_budgets_count_follows_neighbour_model(tree8):
    # add/remove: 4 noisy levels (root included); 3 is now wrong
    with pytest.raises(ValueError, match="level_budgets"):
        Mechanism(tree8, epsilon=1.0, neighbours="add_remove", level_budgets=[0.2, 0.3, 0.5])
    Mechanism(tree8, epsilon=1.0, neighbours="add_remove", level_budgets=[0.1, 0.2, 0.3, 0.4])


@pytest.mark.parametrize("budgets", [[-0.5, 1.0, 0.5], [1.0, math.nan, 0.0],
                                     [math.inf, 0.0, 0.0], ["a", 0.5, 0.5]])
def test_level_budgets_negative_or_non_finite(tree8, budgets):
    with pytest.raises(ValueError, match="level_budgets"):
        Mechanism(tree8, epsilon=1.0, level_budgets=budgets)


# ---------------------------------------------------------------- neighbours, noise, total
def test_public_total_false_under_swap(tree8):
    with pytest.raises(ValueError, match="public_total"):
        Mechanism(tree8, epsilon=1.0, public_total=False, neighbours="swap")
    with pytest.raises(ValueError, match="public_total"):
        Mechanism(tree8, epsilon=1.0, neighbours="swap", public_total=False)


# Regression (bug found by these tests, since fixed in mechanism.py): the swap check tested
# `public_total is False`, so np.False_ slipped through and was silently treated as True.
def test_public_total_numpy_false_under_swap(tree8):
    with pytest.raises(ValueError, match="public_total"):
        Mechanism(tree8, epsilon=1.0, public_total=np.bool_(False), neighbours="swap")


@pytest.mark.parametrize("value", [1, 0, "yes", "True"])
def test_public_total_not_bool(tree8, value):
    with pytest.raises(ValueError, match="public_total"):
        Mechanism(tree8, epsilon=1.0, neighbours="add_remove", public_total=value)


@pytest.mark.parametrize("neighbours", ["Swap", "add-remove", "addremove", "", None, "bounded"])
def test_unknown_neighbours(tree8, neighbours):
    with pytest.raises(ValueError, match="neighbours"):
        Mechanism(tree8, epsilon=1.0, neighbours=neighbours)


@pytest.mark.parametrize("noise", ["Laplace", "normal", "gauss", "", 0, "none"])
def test_unknown_noise(tree8, noise):
    with pytest.raises(ValueError, match="noise"):
        Mechanism(tree8, epsilon=1.0, noise=noise)


def test_noise_none_is_inferred(tree8):
    # None (the default) means: Gaussian with rho alone, Laplace otherwise (issue 14)
    assert Mechanism(tree8, epsilon=1.0, noise=None).noise == "laplace"
    assert Mechanism(tree8, rho=1.0, noise=None).noise == "gaussian"


def test_strategy_not_a_strategy():
    with pytest.raises(ValueError, match="strategy"):
        Mechanism(np.eye(4), epsilon=1.0)


def test_sensitivity_bad_arguments(tree8):
    w = np.ones(tree8.n_rows)
    with pytest.raises(ValueError, match="neighbours"):
        tree8.sensitivity(w, "both", 1)
    with pytest.raises(ValueError, match="norm"):
        tree8.sensitivity(w, "swap", 3)
    with pytest.raises(ValueError, match="weights"):
        tree8.sensitivity(np.ones(3), "swap", 1)
    with pytest.raises(ValueError, match="weights"):
        tree8.sensitivity(-w, "swap", 1)


# ------------------------------------------------------------------------- branching
def test_tree_power_ok():
    assert strategies.tree(1000, 10).branching == (10, 10, 10)
    assert strategies.tree(12, [2, 3, 2]).branching == (2, 3, 2)
    assert strategies.tree(6, [2, 1, 3]).branching == (2, 1, 3)


def test_tree_not_a_power_names_n_and_k():
    with pytest.raises(ValueError, match=r"n=100\b.*branching.*k=3\b"):
        strategies.tree(100, 3)
    with pytest.raises(ValueError, match=r"n=1001\b.*branching.*k=10\b"):
        strategies.tree(1001, 10)


def test_tree_list_not_matching_names_n_and_branching():
    with pytest.raises(ValueError, match="n=12") as err:
        strategies.tree(12, [2, 5])
    msg = str(err.value)
    assert "branching" in msg and "[2, 5]" in msg


@pytest.mark.parametrize("ks", [[2, 0, 4], [2, -1, -4], [0], [2.5, 4], [2, 4.5], [math.nan],
                                ["x", 2], None, 2.0])
def test_tree_bad_branching_entries(ks):
    with pytest.raises(ValueError, match="branching"):
        strategies.tree(8, ks)


@pytest.mark.parametrize("k", [1, 0, -2])
def test_tree_int_branching_below_two(k):
    with pytest.raises(ValueError, match="branching"):
        strategies.tree(8, k)


@pytest.mark.parametrize("ks", ["22", "4"])
# Regression (bug found by these tests, since fixed in interval.py resolve_branching): a
# string was iterated, so tree(4, '22') was accepted as branching (2, 2).
def test_tree_string_branching_rejected(ks):
    with pytest.raises(ValueError, match="branching"):
        strategies.tree(4, ks)


@pytest.mark.parametrize("n", [0, -4, 2.0, "8", None, True])
def test_bad_n_bins(n):
    for make in (strategies.histogram, strategies.prefix_sums, strategies.binary_tree):
        with pytest.raises(ValueError, match=r"n \(number of bins\)"):
            make(n)


# ------------------------------------------------------------------------- histograms
@pytest.fixture
def mech8():
    return Mechanism(strategies.tree(8, 2), epsilon=1.0, neighbours="swap")  # exact root


@pytest.mark.parametrize("h", [
    np.ones(7, dtype=int),  # wrong length
    np.ones(9, dtype=int),
    [],
    np.ones((2, 8), dtype=int),  # 2-D
    np.ones((8, 1), dtype=int),
    5,  # scalar
])
def test_histogram_wrong_shape(mech8, h):
    with pytest.raises(ValueError, match="histogram"):
        mech8.measure(h, 0)


@pytest.mark.parametrize("h", [
    [1, 2, -1, 0, 0, 0, 0, 0],  # negative
    [1, 2, 2.5, 0, 0, 0, 0, 0],  # non-integer
    [1, 2, math.nan, 0, 0, 0, 0, 0],  # NaN
    [1, 2, math.inf, 0, 0, 0, 0, 0],  # inf
    [1, 2, -0.5, 0, 0, 0, 0, 0],
    np.array([True] * 8),  # booleans are not counts
    ["1"] * 8,  # strings
])
def test_histogram_bad_counts(mech8, h):
    with pytest.raises(ValueError, match="histogram"):
        mech8.measure(h, 0)


def test_histogram_float_integers_ok(mech8):
    y = mech8.measure([1.0, 2.0, 0.0, 0.0, 3.0, 0.0, 0.0, 1.0], 0)
    assert y[0] == 7.0


@pytest.mark.parametrize("h", [np.array([1e19, 0.0]), np.array([1e300, 0.0]),
                               np.array([2**63, 1], dtype=np.uint64)])
# Regression (bug found by these tests, since fixed in mechanism.py check_histogram): the final
# cast to int64 came after the checks, so counts >= 2^63 wrapped to -2^63 and measure()
# silently returned negative garbage.
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
def test_histogram_counts_too_large_for_int64(h):
    mech = Mechanism(strategies.histogram(2), epsilon=1.0)
    with pytest.raises(ValueError, match="histogram"):
        mech.measure(h, 0)


@pytest.mark.parametrize("rng", ["seed", 1.5, object()])
def test_bad_rng(mech8, rng):
    with pytest.raises(ValueError, match="rng"):
        mech8.measure(np.ones(8, dtype=int), rng)


# ------------------------------------------------------------------------- workloads
@pytest.mark.parametrize("intervals", [[(3, 1)], [(0, 2), (5, 4)]])
def test_ranges_a_greater_than_b(intervals):
    with pytest.raises(ValueError, match="intervals"):
        workloads.ranges(8, intervals)


@pytest.mark.parametrize("intervals", [[(0, 8)], [(-1, 2)], [(8, 8)], [(2, 100)]])
def test_ranges_out_of_range(intervals):
    with pytest.raises(ValueError, match="intervals"):
        workloads.ranges(8, intervals)


@pytest.mark.parametrize("intervals", [[], [(1, 2, 3)], [(0.5, 2)], [1, 2], [(0, math.nan)]])
def test_ranges_malformed(intervals):
    with pytest.raises(ValueError, match="intervals"):
        workloads.ranges(8, intervals)


@pytest.mark.parametrize("n", [0, -1, 3.0])
def test_workload_bad_n(n):
    for make in (workloads.prefix, workloads.identity, workloads.all_range):
        with pytest.raises(ValueError, match=r"n \(number of bins\)"):
            make(n)


# ------------------------------------------------------------------- expected_error / blue
def test_expected_error_mismatched_bins():
    mech = Mechanism(strategies.tree(16, 2), epsilon=1.0)
    with pytest.raises(ValueError, match="workload has 8 bins"):
        expected_error(workloads.prefix(8), mech)
    with pytest.raises(ValueError, match="bins"):
        expected_error(workloads.prefix(32), mech, "covering")


def test_expected_error_bad_estimator(mech8):
    with pytest.raises(ValueError, match="estimator"):
        expected_error(workloads.prefix(8), mech8, "ols")


def test_expected_error_bad_types(mech8):
    with pytest.raises(ValueError, match="workload"):
        expected_error(np.eye(8), mech8)
    with pytest.raises(ValueError, match="mechanism"):
        expected_error(workloads.prefix(8), strategies.tree(8, 2))


def test_covering_estimator_other_workloads_refused_when_dense_is_too_big():
    """Off the prefix workload the covering estimator answers by differences of its
    prefixes: custom ranges structured at any size (O(h) per range on a fully measured
    tree), the dense covariance (method="dense") refused above 8192 bins."""
    mech = Mechanism(strategies.tree(16384, [128, 128]), epsilon=1.0)
    ranges = workloads.ranges(16384, [(1, 3)])
    # C_4 - C_1: the coverings of [0, 4) (leaves 0..3) and [0, 1) (leaf 0) differ by 3 leaves
    assert expected_error(ranges, mech, "covering") == pytest.approx(
        3 * mech.level_variances[2], rel=1e-12)
    with pytest.raises(ValueError, match="covering"):
        expected_error(ranges, mech, "covering", method="dense")
    assert expected_error(workloads.identity(16384), mech, "covering") > 0


def test_covering_estimator_needs_interval_strategy():
    a = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0]])  # not laminar
    mech = Mechanism(Strategy(a), epsilon=1.0)
    with pytest.raises(ValueError, match="covering estimator"):
        expected_error(workloads.prefix(3), mech, "covering")


def test_covering_estimator_with_unmeasured_leaves():
    mech = Mechanism(strategies.tree(8, 2), epsilon=1.0, level_budgets=[0.5, 0.5, 0.0],
                     neighbours="swap")
    with pytest.raises(ValueError, match="covering estimator"):
        expected_error(workloads.prefix(8), mech, "covering")


IDENTICAL_COLUMNS = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
@pytest.mark.parametrize("method", ["auto", "sparse", "dense"])
def test_blue_identical_columns_not_identified(neighbours, method):
    """Bins 0 and 1 are measured only together: their split is not identifiable (the exact
    total row appended under swap does not help)."""
    mech = Mechanism(Strategy(IDENTICAL_COLUMNS), epsilon=1.0, neighbours=neighbours)
    y = mech.released.apply(np.array([3.0, 1.0, 4.0]))
    with pytest.raises(ValueError, match="cannot identify the histogram"):
        blue(mech, y, method=method)


@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
@pytest.mark.parametrize("workload", [workloads.prefix(3), workloads.identity(3)])
def test_expected_error_identical_columns_not_identified(neighbours, workload):
    mech = Mechanism(Strategy(IDENTICAL_COLUMNS), epsilon=1.0, neighbours=neighbours)
    with pytest.raises(ValueError, match="cannot identify the histogram"):
        expected_error(workload, mech, "blue")


def test_identical_columns_wider():
    a = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    mech = Mechanism(Strategy(a), epsilon=1.0)
    with pytest.raises(ValueError, match="cannot identify the histogram"):
        expected_error(workloads.prefix(4), mech)


@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
def test_blue_bin_covered_by_no_row(neighbours):
    a = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # bin 2 in no row
    mech = Mechanism(Strategy(a), epsilon=1.0, neighbours=neighbours)
    if neighbours == "swap":
        # the exact total row covers bin 2: x_2 = N - x_0 - x_1 is identified
        assert math.isfinite(expected_error(workloads.prefix(3), mech))
    else:
        with pytest.raises(ValueError, match="cannot identify the histogram"):
            expected_error(workloads.prefix(3), mech)
        with pytest.raises(ValueError, match="bin 2"):
            blue(mech, np.zeros(2))


@pytest.mark.parametrize("method", ["auto", "sparse", "dense"])
def test_blue_unmeasured_leaf_level_not_identified(method):
    # leaves get no budget: the two bins under each level-1 node cannot be separated
    mech = Mechanism(strategies.tree(4, 2), epsilon=1.0, level_budgets=[1.0, 0.0],
                     neighbours="swap")
    with pytest.raises(ValueError, match="cannot identify the histogram"):
        blue(mech, np.zeros(7), method=method)


def test_blue_wrong_answer_length(mech8):
    with pytest.raises(ValueError, match="y"):
        blue(mech8, np.zeros(5))
    y = np.zeros(15)
    y[3] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        blue(mech8, y)


@pytest.mark.parametrize("neighbours, budgets", [("swap", [1.0, 0.0]),
                                                 ("swap", [0.5, 0.5, 0.0]),
                                                 ("add_remove", [0.3, 0.3, 0.4, 0.0])])
@pytest.mark.parametrize("workload", ["prefix", "identity", "all_range"])
def test_expected_error_tree_unmeasured_leaves_not_identified(neighbours, budgets, workload):
    """A level-uniform tree whose leaf level gets no budget cannot split its lowest measured
    nodes among their children (whatever path expected_error takes for trees)."""
    height = len(budgets) if neighbours == "swap" else len(budgets) - 1  # root noisy or not
    n = 2**height
    mech = Mechanism(strategies.tree(n, 2), epsilon=1.0, neighbours=neighbours,
                     level_budgets=budgets)
    wl = getattr(workloads, workload)(n)
    with pytest.raises(ValueError, match="identif"):
        expected_error(wl, mech, "blue")


@pytest.mark.parametrize("ks", [[float("inf")], [float("nan")], [2.0, 5], [True, 10], ["2", 5],
                                [2.5, 4], [0, 10]])
def test_tree_branching_must_be_positive_integers(ks):
    """tree(10, [inf]) raised OverflowError (issue 12 item 11); floats, bools and strings are
    not branching factors."""
    with pytest.raises(ValueError, match="branching"):
        strategies.tree(10, ks)
