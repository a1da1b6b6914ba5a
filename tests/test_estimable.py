"""Errors of workloads a rank-deficient strategy still estimates (W in the row space of the
measured rows), against an independent limit: the same strategy plus every bin measured with
a huge variance (a full-rank GLS whose BLUE of W x tends to the estimable one as the extra
variance grows; relative difference O(1 / variance))."""

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import strategies as S, workloads as W


def _limit_variances(mech, w, ratio=1e9):
    """The limit oracle with the extra bins' variance ``ratio`` times the largest row variance
    (bias O(1 / ratio) relative, rounding O(ratio * eps))."""
    a = mech.released.matrix.toarray()
    var = np.asarray(mech.variances, dtype=float)
    keep = np.isfinite(var)
    a, var = a[keep], var[keep]
    big = ratio * float(var.max())
    exact = var == 0
    a2 = np.vstack([a[~exact], np.eye(mech.n_bins)])
    v2 = np.concatenate([var[~exact], np.full(mech.n_bins, big)])
    m = a2.T @ (a2 / v2[:, None])
    e = a[exact]
    if e.shape[0]:  # exact rows as equality constraints: the bordered system
        kkt = np.block([[m, e.T], [e, np.zeros((e.shape[0], e.shape[0]))]])
        cov = np.linalg.inv(kkt)[: mech.n_bins, : mech.n_bins]
    else:
        cov = np.linalg.inv(m)
    wd = w.dense()
    return np.einsum("qi,ij,qj->q", wd, cov, wd)


def _random_ranges(rng, n):
    """A random set of ranges of [0, n) that does not identify every bin."""
    k = int(rng.integers(2, n))
    lo = rng.integers(0, n - 1, size=k)
    hi = np.minimum(lo + rng.integers(1, n, size=k), n)
    return np.column_stack([lo, hi - 1])


@pytest.mark.parametrize("seed", range(12))
def test_measured_ranges_are_estimable(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 24))
    pairs = _random_ranges(rng, n)
    strat = S.Strategy(W.ranges(n, pairs).dense(), name="ranges")
    neighbours = ("add_remove", "swap")[seed % 2]
    mech = dp.Mechanism(strat, epsilon=1.0, neighbours=neighbours)
    # the measured ranges, and sums / differences of them, are estimable
    w = W.ranges(n, pairs)
    ours = dp.expected_error(w, mech, per_query=True)
    np.testing.assert_allclose(ours, _limit_variances(mech, w), rtol=1e-5)
    assert dp.expected_error(w, mech) == pytest.approx(float(ours.sum()), rel=1e-12)


def test_laminar_brackets_between_gaps():
    """Nested and disjoint ranges with unmeasured gaps: [0,12), [0,6), [6,12), [2,4). Each
    range is measured once with Laplace scale 3 (every bin of [2,4) lies in three ranges), so
    variance 18; [0,6) and [6,12) also sum to [0,12): combining the three measurements of the
    top split by inverse variance gives 18 * 2/3 = 12 for each of them."""
    pairs = np.array([[0, 11], [0, 5], [6, 11], [2, 3]])
    mech = dp.Mechanism(S.Strategy(W.ranges(12, pairs).dense()), epsilon=1.0,
                        neighbours="add_remove")
    w = W.ranges(12, pairs)
    np.testing.assert_allclose(dp.expected_error(w, mech, per_query=True),
                               [12.0, 12.0, 12.0, 18.0], rtol=1e-9)


def test_not_estimable_is_refused_by_query():
    pairs = np.array([[0, 5], [2, 3]])
    mech = dp.Mechanism(S.Strategy(W.ranges(8, pairs).dense()), epsilon=1.0,
                        neighbours="add_remove")
    with pytest.raises(ValueError, match="query 1 .* not estimable"):
        dp.expected_error(W.ranges(8, [[0, 5], [0, 0]]), mech, per_query=True)
