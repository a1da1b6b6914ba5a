"""Implicit workloads against their dense matrices built from the definitions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dptree_opt import workloads as W
from oracles import dense_1d_workload


def make(kind, n, intervals):
    return W.ranges(n, intervals) if kind == "ranges" else getattr(W, kind)(n)


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(["prefix", "identity", "total", "all_range", "ranges"]),
       n=st.integers(1, 25), seed=st.integers(0, 10**6))
def test_workload_products_and_gram(kind, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, size=7)
    b = rng.integers(0, n, size=7)
    intervals = list(zip(np.minimum(a, b), np.maximum(a, b)))
    wl = make(kind, n, intervals)
    dense = dense_1d_workload(kind, n, intervals)
    assert wl.shape == dense.shape
    np.testing.assert_array_equal(wl.dense(), dense)
    x = rng.normal(size=n)
    u = rng.normal(size=dense.shape[0])
    np.testing.assert_allclose(wl.matvec(x), dense @ x, atol=1e-9)
    np.testing.assert_allclose(wl.rmatvec(u), dense.T @ u, atol=1e-9)
    np.testing.assert_allclose(wl.gram_matvec(x), dense.T @ dense @ x, atol=1e-9)
    np.testing.assert_allclose(wl.gram_dense(), dense.T @ dense, atol=1e-9)
    x2 = rng.normal(size=(n, 3))
    np.testing.assert_allclose(wl.gram() @ x2, dense.T @ dense @ x2, atol=1e-9)
    np.testing.assert_allclose(wl.as_linear_operator() @ x2, dense @ x2, atol=1e-9)
    # error helpers: diag(W C W') and trace(W C W') for a random covariance
    g = rng.normal(size=(n, n))
    cov = g @ g.T
    np.testing.assert_allclose(wl.query_variances(cov), np.diag(dense @ cov @ dense.T), rtol=1e-9)
    assert wl.total_variance(cov) == pytest.approx(np.trace(dense @ cov @ dense.T), rel=1e-9)


def test_all_range_counts_and_order():
    wl = W.all_range(4)
    assert wl.n_queries == 10
    lo, hi = wl.intervals()
    assert list(zip(lo, hi - 1))[:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 1)]
    # the Gram of all_range(2^20) is available as an operator without listing 5.5e11 queries
    big = W.all_range(2**20)
    v = np.zeros(2**20)
    v[0] = 1.0
    col = big.gram_matvec(v)  # (W'W)_{i0} = (min(i,0)+1)(n - max(i,0)) = n - i
    assert col[0] == 2**20 and col[-1] == 1


@pytest.mark.parametrize("bad", [[(3, 2)], [(0, 10)], [(-1, 2)], [(0.5, 2)], [], [[1, 2, 3]]])
def test_ranges_bad_input(bad):
    with pytest.raises(ValueError, match="interval"):
        W.ranges(10, bad)


@pytest.mark.parametrize("n", [0, -3, 2.5, "8", True])
def test_bad_n(n):
    with pytest.raises(ValueError, match="n"):
        W.prefix(n)
