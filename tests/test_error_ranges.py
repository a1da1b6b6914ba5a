"""Custom range workloads on level-uniform trees: exact BLUE error in O(h) per range
(``error.tree.blue_range_variances`` through ``expected_error``), against the dense GLS."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt import workloads as W

from test_tree_paths import tree_mechanisms


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mech=tree_mechanisms(max_leaves=300), data=st.data())
def test_ranges_structured_equal_dense(mech, data):
    n = mech.n_bins
    q = data.draw(st.integers(1, 40))
    a = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=q, max_size=q)))
    length = np.array(data.draw(st.lists(st.integers(0, n), min_size=q, max_size=q)))
    b = np.minimum(a + length, n - 1)
    wl = W.ranges(n, np.column_stack([a, b]))
    fast = dp.expected_error(wl, mech, "blue", per_query=True)
    dense = dp.expected_error(wl, mech, "blue", per_query=True, method="dense")
    np.testing.assert_allclose(fast, dense, rtol=1e-9, atol=1e-9 * (1.0 + dense.max()))
    assert dp.expected_error(wl, mech, "blue") == pytest.approx(dense.sum(), rel=1e-9,
                                                                abs=1e-9 * (1.0 + dense.max()))


def test_total_workload_and_unmeasured_levels():
    """The total workload is the range [0, K): with N public its BLUE variance is 0."""
    swap = dp.Mechanism(S.tree(64, [4, 4, 4]), epsilon=1.0, neighbours="swap")
    assert dp.expected_error(W.total(64), swap, "blue") == pytest.approx(0.0, abs=1e-9)
    mech = dp.Mechanism(S.tree(64, [4, 4, 4]), epsilon=1.0, neighbours="add_remove",
                        level_budgets=[0.0, 0.5, 0.0, 0.5])
    for wl in (W.total(64), W.ranges(64, [[0, 63], [5, 5], [3, 40], [16, 31]])):
        assert dp.expected_error(wl, mech, "blue", per_query=True) == pytest.approx(
            dp.expected_error(wl, mech, "blue", per_query=True, method="dense"), rel=1e-9)


def test_many_ranges_at_2_20_without_a_matrix():
    """500 ranges at K = 2^20 (the dense path refuses above 8192 bins): the prefix ranges
    [0, t) reproduce the structured per-prefix variances of the prefix workload."""
    k = 2**20
    mech = dp.Mechanism(S.tree(k, [16] * 5), epsilon=1.0, neighbours="add_remove")
    t = np.linspace(1, k, 500).astype(np.int64)
    got = dp.expected_error(W.ranges(k, np.column_stack([np.zeros_like(t), t - 1])), mech,
                            "blue", per_query=True)
    prefix = dp.expected_error(W.prefix(k), mech, "blue", per_query=True)
    np.testing.assert_allclose(got, prefix[t - 1], rtol=1e-9)
