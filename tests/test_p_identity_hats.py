"""HDMM's p-Identity from the multi-scale hat start (``hat_start``,
``laplace_p_identity(hats=True, time_limit=...)``) and the ``p_identity_hats`` family of
``optimize.best_mechanism``: the start's shape and partition of unity, errors against a dense
GLS of tests/oracles.py, privacy by brute force over neighbouring histograms, the measured gain over
the dyadic start, the time limit and the family's refusals."""

import time

import numpy as np
import pytest
import scipy.sparse as sp

from dptree_opt import limits, optimize, workloads
from dptree_opt.mechanism import Mechanism
from dptree_opt.optimize.best import FAMILIES
from dptree_opt.optimize.family import Problem
from dptree_opt.strategies import p_identity_sparse
from dptree_opt.strategies.optimized import (hat_start, laplace_p_identity, p_identity,
                                             trace_gram_inverse)
from oracles import brute_loss, dense_1d_workload, laplace_gls_error


# ------------------------------------------------------------------ the start
@pytest.mark.parametrize("n", [2, 3, 8, 33, 40, 256, 300, 1024, 2049])
def test_hat_start_is_a_partition_of_unity_per_scale(n):
    th = hat_start(n)
    x = np.arange(n) + 0.5                      # bin centres
    scales = [h for h in (16, 64, 256, 1024) if 2 * h < n] or [max(1, n // 4)]
    assert th.min() >= 0 and np.all(th.max(axis=1) > 0)
    start = 0
    for h in scales:
        # one row per centre 0, h, 2h, .. whose triangle meets a bin centre
        centres = [c for c in range(0, n + h, h) if np.any(np.abs(x - c) < h)]
        block = th[start:start + len(centres)]
        for row, c in zip(block, centres):
            np.testing.assert_allclose(row, np.clip(1 - np.abs(x - c) / h, 0, None), atol=1e-15)
        np.testing.assert_allclose(block.sum(axis=0), 1.0, rtol=0, atol=1e-12)
        start += len(centres)
    assert start == th.shape[0]


@pytest.mark.parametrize("bad", [1, 0, -5, 2.5, "8", None, True])
def test_hat_start_refuses_bad_sizes(bad):
    with pytest.raises(ValueError):
        hat_start(bad)


# ------------------------------------------------------------------ the optimiser
@pytest.mark.parametrize("kind, n", [("prefix", 40), ("prefix", 64), ("all_range", 36)])
def test_error_is_the_dense_gls_error_and_never_worse_than_without_hats(kind, n):
    w = getattr(workloads, kind)(n)
    wd = dense_1d_workload(kind, n)
    plain = laplace_p_identity(w, max_iter=300)
    res = laplace_p_identity(w, max_iter=300, hats=True)
    a = res.strategy.matrix.toarray()
    np.testing.assert_allclose(np.abs(a).sum(axis=0), 1.0, rtol=1e-12)
    assert res.error == pytest.approx(laplace_gls_error(a, wd), rel=1e-9)
    # the same dyadic and random starts plus the hat start: never worse
    assert res.error <= plain.error * (1 + 1e-12)
    assert res.error <= res.start_error * (1 + 1e-12)
    assert "hats" in res.method


@pytest.mark.parametrize("n", [6, 9])
def test_privacy_by_brute_force(n):
    # every column of l1 norm 1: eps = 1 over every pair of neighbouring histograms (<= 2
    # records), computed from the calibrated mechanism's own scales
    res = laplace_p_identity(workloads.prefix(n), hats=True, max_iter=100)
    mech = Mechanism(res.strategy, epsilon=1.0)
    a = mech.released.matrix.toarray()
    loss = brute_loss(a, 1.0 / np.asarray(mech.scales), "add_remove", 1)
    assert loss == pytest.approx(1.0, rel=1e-12)


def test_hats_beat_the_dyadic_start_at_256_bins():
    # measured (strategies.optimized docstring): 3000 iterations, dyadic 54.96, hats 53.66 per
    # prefix; asserted: a gain of at least 1 % (the dense GLS error of both computed here)
    w = workloads.prefix(256)
    wd = dense_1d_workload("prefix", 256)
    dyadic = laplace_p_identity(w, starts=1, max_iter=3000)
    hats = laplace_p_identity(w, starts=0, hats=True, max_iter=3000)
    e_dyadic = laplace_gls_error(dyadic.strategy.matrix.toarray(), wd)
    e_hats = laplace_gls_error(hats.strategy.matrix.toarray(), wd)
    assert e_hats < 0.99 * e_dyadic


@pytest.mark.parametrize("sparse", [False, True])
def test_time_limit_stops_the_search_with_a_valid_strategy(monkeypatch, sparse):
    # a fake clock (one second per reading, seen only by the optimiser's module): with a
    # 5-second limit the search stops after a few iterations and skips the later starts, where
    # 100000 iterations would otherwise run to convergence (thousands at 512 bins)
    import types
    from dptree_opt.strategies import optimized, p_identity_sparse
    ticks = iter(range(10**6))
    fake = types.SimpleNamespace(perf_counter=lambda: float(next(ticks)))
    monkeypatch.setattr(p_identity_sparse if sparse else optimized, "time", fake)
    w = workloads.prefix(512)
    res = (laplace_p_identity_hats(w, max_iter=100000, time_limit=5) if sparse else
           laplace_p_identity(w, starts=3, hats=True, max_iter=100000, time_limit=5))
    assert 1 <= res.iterations <= 6
    assert res.error <= res.start_error
    assert np.abs(res.strategy.matrix.toarray()).sum(axis=0) == pytest.approx(1.0)


@pytest.mark.parametrize("kw", [{"hats": 1}, {"hats": "yes"}, {"time_limit": 0}, {"starts": 0},
                                {"starts": -1},
                                {"time_limit": -1.0}, {"time_limit": float("nan")},
                                {"time_limit": True}])
def test_bad_options_are_refused(kw):
    with pytest.raises(ValueError):
        laplace_p_identity(workloads.prefix(16), **kw)


# ------------------------------------------------------------------ the family
def _problem(w, noise="laplace", budget=1.0, seconds=60.0):
    from dptree_opt.participation import single
    return Problem(w, noise, budget, "add_remove", time.perf_counter() + seconds, single())


@pytest.mark.parametrize("w, noise, why", [
    (workloads.identity(256), "laplace", "all_range"),
    (workloads.prefix(256), "gaussian", "Laplace"),
    (workloads.prefix(128), "laplace", "256..4096"),
    (workloads.prefix(8192), "laplace", "256..4096"),
])
def test_family_applies_only_where_measured(w, noise, why):
    assert why in FAMILIES["p_identity_hats"].applies(_problem(w, noise))


def test_family_skips_when_its_share_of_time_is_too_short():
    out = FAMILIES["p_identity_hats"].build(_problem(workloads.prefix(4096), seconds=1.0))
    assert isinstance(out, str) and "time limit" in out


def test_best_mechanism_picks_it_and_scores_it_exactly():
    w = workloads.prefix(256)
    d = optimize.best_mechanism(w, epsilon=2.0, families=["p_identity_hats", "dense_optimum",
                                                          "node_budgets"], time_limit=60)
    assert d.family == "p_identity_hats"
    a = d.mechanism().released.matrix.toarray()
    wd = dense_1d_workload("prefix", 256)
    # eps = 2: a quarter of the unit-budget error; the dense GLS written here
    assert d.error == pytest.approx(laplace_gls_error(a, wd) / 4.0, rel=1e-9)
    assert {a.family for a in d.alternatives} == {"dense_optimum", "node_budgets"}
    assert d.error < min(a.error for a in d.alternatives)


# ------------------------------------------------------------------ the sparse support
from hypothesis import given, settings, strategies as st  # noqa: E402

from dptree_opt.strategies.optimized import _PIdentityObjective  # noqa: E402
from dptree_opt.strategies.p_identity_sparse import (  # noqa: E402
    MAX_SPARSE_P_IDENTITY_BINS, _SparseObjective, hat_support, laplace_p_identity_hats,
    sparse_p_identity_objective)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["prefix", "all_range", "identity", "ranges"]),
       n=st.integers(3, 40), p=st.integers(1, 6), density=st.floats(0.05, 0.9),
       intervals=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_sparse_objective_equals_the_dense_one(kind, n, p, density, intervals, seed):
    # the O(p^3 + p nnz + n p) evaluation against the dense p-Identity objective (Woodbury
    # over every entry), value and gradient on the support, supports as intervals or not
    rng = np.random.default_rng(seed)
    w = (workloads.ranges(n, [(0, n - 1), (1, n // 2), (n // 3, n - 1)]) if kind == "ranges"
         else getattr(workloads, kind)(n))
    if intervals:
        lo = rng.integers(0, n, p)
        hi = np.minimum(n, lo + 1 + rng.integers(0, n, p))
        mask = (np.arange(n)[None, :] >= lo[:, None]) & (np.arange(n)[None, :] < hi[:, None])
    else:
        mask = rng.random((p, n)) < density
        mask[np.arange(p), rng.integers(0, n, p)] = True     # every row non-empty
    rows, cols = np.nonzero(mask)
    perm = rng.permutation(rows.size)                      # any order of the support
    rows, cols = rows[perm], cols[perm]
    vals = rng.random(rows.size) * rng.choice([0.1, 1.0, 5.0])
    f, g = sparse_p_identity_objective(w, rows, cols, vals, p)
    theta = np.zeros((p, n))
    theta[rows, cols] = vals
    fd, gd = _PIdentityObjective(w, p)(theta.ravel())
    gd = gd.reshape(p, n)
    assert f == pytest.approx(fd, rel=1e-11)
    np.testing.assert_allclose(g, gd[rows, cols], rtol=1e-9, atol=1e-10 * np.abs(gd).max())
    assert _SparseObjective(w, p, rows, cols).intervals or not intervals


@pytest.mark.parametrize("n", [2, 40, 256, 1000])
def test_hat_support_widens_the_hats(n):
    th = hat_start(n)
    r1, c1, v1 = hat_support(n, 1.0)
    full = np.zeros_like(th)
    full[r1, c1] = v1
    np.testing.assert_array_equal(full, th)                # widen 1: the hats themselves
    r2, c2, v2 = hat_support(n, 2.0)
    on = np.zeros(th.shape, dtype=bool)
    on[r2, c2] = True
    assert np.all(on[th > 0])                              # a superset ...
    np.testing.assert_array_equal(np.diff(np.nonzero(on[0])[0]), 1)   # ... of intervals
    lengths = on.sum(axis=1)
    assert np.all(lengths <= np.minimum(n, 2 * (th > 0).sum(axis=1) + 2))
    assert np.all(v2[~(th[r2, c2] > 0)] == 0)


@pytest.mark.parametrize("n", [300, 2100])
def test_sparse_result_error_is_the_dense_gls_error(n):
    # below 2048 bins the error comes from a dense solve, above from the Woodbury value: both
    # against the GLS written in this file
    w = workloads.prefix(n)
    res = laplace_p_identity_hats(w, max_iter=30)
    a = res.strategy.matrix.toarray()
    np.testing.assert_allclose(np.abs(a).sum(axis=0), 1.0, rtol=1e-12)
    assert res.error == pytest.approx(laplace_gls_error(a, dense_1d_workload("prefix", n)),
                                      rel=1e-8)
    assert res.error <= res.start_error and res.iterations <= 30


@pytest.mark.parametrize("n", [6, 9])
def test_sparse_privacy_by_brute_force(n):
    res = laplace_p_identity_hats(workloads.prefix(n), max_iter=50)
    mech = Mechanism(res.strategy, epsilon=1.0)
    loss = brute_loss(mech.released.matrix.toarray(), 1.0 / np.asarray(mech.scales),
                      "add_remove", 1)
    assert loss == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("kw", [{"widen": 0.5}, {"widen": float("inf")}, {"widen": "2"},
                                {"max_iter": 0}, {"time_limit": 0.0}])
def test_sparse_bad_options_are_refused(kw):
    with pytest.raises(ValueError):
        laplace_p_identity_hats(workloads.prefix(32), **kw)


def test_sparse_refuses_sizes_before_allocating():
    with pytest.raises(ValueError, match="bins"):
        laplace_p_identity_hats(workloads.prefix(MAX_SPARSE_P_IDENTITY_BINS + 1))


def test_sparse_and_dense_errors_refuse_memory_before_allocating(monkeypatch):
    # the optimiser's (n, p) work arrays and the dense error check, refused under a 1 MB limit
    monkeypatch.setattr(limits, "memory_limit", lambda: 1 << 20)
    with pytest.raises(ValueError, match="sparse p-Identity over 4096 bins"):
        laplace_p_identity_hats(workloads.prefix(4096), max_iter=1)
    with pytest.raises(ValueError, match="dense error check"):
        trace_gram_inverse(p_identity(np.ones((2, 512))), workloads.prefix(512))


def test_woodbury_error_above_the_recheck_size_is_flagged_and_accurate(monkeypatch):
    # every u_k counts as large (_U_WOODBURY = 0): at 128 bins the error is a dense solve when
    # the recheck reaches 128 bins, else the Woodbury value with a note; both against the GLS
    # written in tests/oracles.py
    w = workloads.prefix(128)
    gls = dense_1d_workload("prefix", 128)
    monkeypatch.setattr(p_identity_sparse, "_U_WOODBURY", 0.0)
    monkeypatch.setattr(p_identity_sparse, "_DENSE_CHECK_BINS", 64)
    for recheck, noted in ((128, False), (64, True)):
        monkeypatch.setattr(p_identity_sparse, "_MAX_RECHECK_BINS", recheck)
        res = laplace_p_identity_hats(w, max_iter=20)
        assert ("error by Woodbury" in res.method) is noted
        assert res.error == pytest.approx(laplace_gls_error(res.strategy.matrix.toarray(), gls),
                                          rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_p_identity_of_a_sparse_theta_equals_the_dense_one(seed):
    rng = np.random.default_rng(seed)
    th = rng.random((5, 40)) * (rng.random((5, 40)) < 0.3)
    a = p_identity(sp.csr_matrix(th)).matrix.toarray()
    np.testing.assert_allclose(a, p_identity(th).matrix.toarray(), rtol=0, atol=1e-15)
    u = 1.0 + th.sum(axis=0)                                  # A = [I; Theta] / u, by hand
    np.testing.assert_allclose(a, np.vstack([np.eye(40), th]) / u, rtol=1e-14)
    bad = sp.csr_matrix(th)
    bad.data[0] = -1.0
    with pytest.raises(ValueError, match="non-negative"):
        p_identity(bad)


@pytest.mark.parametrize("bad", [
    dict(rows=[0, 0], cols=[1, 1], values=[1.0, 1.0]),      # a repeated pair
    dict(rows=[0], cols=[99], values=[1.0]),                # outside the domain
    dict(rows=[0], cols=[1], values=[-1.0]),                # negative
    dict(rows=[0], cols=[1], values=[np.nan]),
    dict(rows=[0.5], cols=[1], values=[1.0]),               # not integers
    dict(rows=[], cols=[], values=[]),
])
def test_sparse_objective_refuses_bad_supports(bad):
    with pytest.raises(ValueError):
        sparse_p_identity_objective(workloads.prefix(8), **bad)


@pytest.mark.slow
def test_widened_support_loses_nothing_measurable_at_1024():
    # widen 2 against the unrestricted optimiser from the same hat start (both run here)
    w = workloads.prefix(1024)
    sparse = laplace_p_identity_hats(w, max_iter=5000)
    dense = laplace_p_identity(w, starts=0, hats=True, max_iter=5000)
    assert sparse.error <= dense.error * 1.001


def test_all_ranges_too_scored_exactly():
    # all ranges of 256 bins (32,896 queries): the family beats the best tree with optimal
    # budgets, and its error is the dense GLS error of the workload matrix written out
    w = workloads.all_range(256)
    d = optimize.best_mechanism(w, epsilon=1.0, families=["p_identity_hats", "tree_optimal"],
                                time_limit=60)
    assert d.family == "p_identity_hats"
    a = d.mechanism().released.matrix.toarray()
    wd = dense_1d_workload("all_range", 256)
    assert d.error == pytest.approx(laplace_gls_error(a, wd), rel=1e-9)
    assert d.error < d.alternatives[0].error


def test_family_runs_the_unrestricted_optimiser_up_to_1024_bins():
    # the widened support costs 0.7 % at 512 bins (p_identity_sparse docstring): the family
    # runs the dense optimiser there, and its result is the hat start's unrestricted optimum
    w = workloads.prefix(512)
    d = optimize.best_mechanism(w, epsilon=1.0, families=["p_identity_hats"], time_limit=60)
    assert "laplace_p_identity(hats=True)" in d.method
    alone = laplace_p_identity(w, starts=0, hats=True, max_iter=3000)
    assert d.error == pytest.approx(alone.error, rel=1e-3)
