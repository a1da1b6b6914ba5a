"""optimize.l1_local (local optimisation of the full pure-DP strategy problem) and the grid
family kron_l1_local of optimize.best_mechanism: gradients against finite differences,
errors against the dense GLS of tests/oracles.py, the start never beaten by a worse result."""

import time

import numpy as np
import pytest

from dptree_opt import optimize, strategies, workloads
from dptree_opt.error import expected_error
from dptree_opt.mechanism import Mechanism
from dptree_opt.optimize.families_grid import kron_l1_local_applies, kron_l1_local_family
from dptree_opt.optimize.family import Problem
from dptree_opt.optimize.l1_local import l1_local, l1_objective
from dptree_opt.strategies.optimized import laplace_p_identity
from oracles import brute_loss, dense_1d_workload, laplace_gls_error


# ------------------------------------------------------------------ independent oracles
def _brute_epsilon(mech: Mechanism, model: str) -> float:
    """The privacy loss max ||diag(1 / b) A (h - h')||_1 over neighbouring histograms of <= 2
    records (tests/oracles.py), rows released exactly (b = 0: the public total under swap,
    whose answer 1'(h - h') = 0 does not change) left out."""
    a = mech.released.matrix.toarray()
    b = np.asarray(mech.scales)
    assert np.all(np.abs(a[b == 0] - 1.0) == 0)   # exact rows are totals
    return brute_loss(a, np.where(b > 0, 1.0 / np.where(b > 0, b, 1.0), 0.0), model, 1)


# ------------------------------------------------------------------ the objective
@pytest.mark.parametrize("kind, n", [("prefix", 6), ("all_range", 5)])
def test_gradient_matches_finite_differences(kind, n):
    rng = np.random.default_rng(7)
    m = n + 2
    pos, neg = 0.1 + rng.random((m, n)), 0.1 + 0.5 * rng.random((m, n))  # away from the bounds
    w = workloads.prefix(n) if kind == "prefix" else workloads.all_range(n)
    f, gp, gn = l1_objective(w, pos, neg)
    # the value: tr(G (A'A)^-1) with A = (P - N) / column sums of P + N, written out
    a = (pos - neg) / (pos + neg).sum(axis=0)
    wd = dense_1d_workload(kind, n)
    assert f == pytest.approx(np.trace(wd.T @ wd @ np.linalg.inv(a.T @ a)), rel=1e-10)
    h = 1e-6
    for _ in range(3):
        dp, dn = rng.standard_normal((m, n)), rng.standard_normal((m, n))
        fd = (l1_objective(w, pos + h * dp, neg + h * dn)[0]
              - l1_objective(w, pos - h * dp, neg - h * dn)[0]) / (2 * h)
        assert np.sum(gp * dp) + np.sum(gn * dn) == pytest.approx(fd, rel=1e-6)
    # single coordinates of P and of N
    for grad, which in ((gp, 0), (gn, 1)):
        i, j = 1, n - 1
        e = np.zeros((m, n))
        e[i, j] = h
        plus = l1_objective(w, pos + e * (which == 0), neg + e * (which == 1))[0]
        minus = l1_objective(w, pos - e * (which == 0), neg - e * (which == 1))[0]
        assert grad[i, j] == pytest.approx((plus - minus) / (2 * h), rel=1e-5)


# ------------------------------------------------------------------ the optimiser
@pytest.mark.parametrize("kind, n", [("prefix", 32), ("all_range", 12)])
def test_error_is_the_dense_gls_of_the_calibrated_mechanism(kind, n):
    w = workloads.prefix(n) if kind == "prefix" else workloads.all_range(n)
    res = l1_local(w, maxiter=40)
    a = res.strategy.matrix.toarray()
    np.testing.assert_allclose(np.abs(a).sum(axis=0), 1.0, rtol=1e-12)  # unit-l1 columns
    mech = Mechanism(res.strategy, epsilon=1.0)
    assert mech.level_sensitivities[1] == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_allclose(mech.variances, 2.0, rtol=1e-12)
    want = laplace_gls_error(a, dense_1d_workload(kind, n))
    assert res.error == pytest.approx(want, rel=1e-9)
    assert expected_error(w, mech) == pytest.approx(want, rel=1e-9)
    # the default start is p-Identity, and the result is never worse
    start = laplace_p_identity(w).strategy.matrix.toarray()
    assert res.start_error == pytest.approx(laplace_gls_error(start, dense_1d_workload(kind, n)),
                                            rel=1e-9)
    assert res.error <= res.start_error


def test_beats_p_identity_on_prefix_8():
    """At 8 bins p-Identity leaves identity rows of tiny weight (Theta cannot send them to
    zero); the full problem removes them: strictly below p-Identity's dense GLS error."""
    wd = dense_1d_workload("prefix", 8)
    pid = laplace_gls_error(laplace_p_identity(workloads.prefix(8)).strategy.matrix.toarray(), wd)
    res = l1_local(workloads.prefix(8), maxiter=100)
    got = laplace_gls_error(res.strategy.matrix.toarray(), wd)
    assert got == pytest.approx(res.error, rel=1e-9)
    assert got < pid * (1 - 1e-6)


def test_poor_start_improves_and_optimal_start_is_kept():
    rng = np.random.default_rng(3)
    w = workloads.prefix(10)
    wd = dense_1d_workload("prefix", 10)
    start = rng.random((14, 10)) - 0.3            # signed; columns rescaled to unit l1
    res = l1_local(w, start, maxiter=200)
    unit = start / np.abs(start).sum(axis=0)
    assert res.start_error == pytest.approx(laplace_gls_error(unit, wd), rel=1e-9)
    assert res.error == pytest.approx(laplace_gls_error(res.strategy.matrix.toarray(), wd),
                                      rel=1e-9)
    assert res.error < 0.5 * res.start_error
    assert res.strategy.n_rows == 14
    a = res.strategy.matrix.toarray()
    assert (a < 0).any()                          # a signed strategy: privacy brute-forced
    for model in ("add_remove", "swap"):
        mech = Mechanism(res.strategy, epsilon=1.0, neighbours=model)
        assert _brute_epsilon(mech, model) == pytest.approx(1.0, rel=1e-12)
    # identity workload: with unit-l1 columns diag(A'A) <= 1, so tr((A'A)^-1) >=
    # sum 1 / (A'A)_ii >= n: the histogram (error 2 n) is optimal and comes back
    ident = l1_local(workloads.identity(6), strategies.histogram(6), maxiter=20)
    assert ident.error == pytest.approx(12.0, rel=1e-12)
    assert ident.error <= ident.start_error


def test_time_limit_stops_after_one_iteration():
    w = workloads.prefix(16)
    res = l1_local(w, np.eye(16) + 0.5, maxiter=10**6, time_limit=1e-9)
    assert res.iterations <= 1
    assert res.error <= res.start_error


def test_bad_input():
    w = workloads.prefix(8)
    cases = [
        (lambda: l1_local("prefix"), "workload"),
        (lambda: l1_local(workloads.prefix(2048)), "2048 > 1024"),
        (lambda: l1_local(w, strategies.histogram(9)), "start"),
        (lambda: l1_local(w, np.ones((3, 7))), r"start must have shape \(m, 8\)"),
        (lambda: l1_local(w, np.c_[np.eye(8)[:, :7], np.zeros(8)]), "every column"),
        (lambda: l1_local(w, np.ones((8, 8))), "full column rank"),
        (lambda: l1_local(w, np.full((8, 8), np.nan)), "non-finite"),
        (lambda: l1_local(w, "eye"), "start must be"),
        (lambda: l1_local(w, maxiter=0), "maxiter"),
        (lambda: l1_local(w, maxiter=True), "maxiter"),
        (lambda: l1_local(w, maxcor=0), "maxcor"),
        (lambda: l1_local(w, time_limit=-1.0), "time_limit"),
        (lambda: l1_objective(w, -np.ones((9, 8)), np.zeros((9, 8))), "non-negative"),
        (lambda: l1_objective(w, np.ones((9, 8)), np.zeros((9, 7))), "one shape"),
        (lambda: l1_objective(w, np.ones((9, 8)), np.zeros((9, 8))), "full column rank"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    # memory refused by arithmetic before anything of that size exists
    with pytest.raises(ValueError, match="memory"):
        l1_local(workloads.prefix(1024), strategies.histogram(1024), maxcor=10**6)


# ------------------------------------------------------------------ the grid family
def _problem(w, noise="laplace", neighbours="add_remove"):
    return Problem(w, noise, 1.0, neighbours, time.perf_counter() + 60.0)


@pytest.mark.parametrize("shape", [(8, 8), (8, 12)])
def test_kron_family_is_exact_and_below_kron_p_identity(shape):
    w = workloads.prefix(shape)
    (cand,) = kron_l1_local_family(_problem(w))
    a = cand.mech.strategy.matrix.toarray()
    wd = np.kron(dense_1d_workload("prefix", shape[0]), dense_1d_workload("prefix", shape[1]))
    want = laplace_gls_error(a, wd)
    np.testing.assert_allclose(cand.mech.variances, 2.0, rtol=1e-12)
    assert expected_error(w, cand.mech) == pytest.approx(want, rel=1e-9)
    pid = laplace_gls_error(strategies.kron_p_identity(w).strategy.matrix.toarray(), wd)
    assert want < pid * (1 - 1e-6)


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_kron_family_privacy_brute_forced(neighbours):
    (cand,) = kron_l1_local_family(_problem(workloads.prefix((4, 8)), neighbours=neighbours))
    assert _brute_epsilon(cand.mech, neighbours) == pytest.approx(1.0, rel=1e-12)


def test_kron_family_applies_only_where_it_can():
    assert kron_l1_local_applies(_problem(workloads.prefix((8, 8)))) is None
    assert kron_l1_local_applies(_problem(workloads.all_range((4, 8)))) is None
    assert "Laplace" in kron_l1_local_applies(_problem(workloads.prefix((8, 8)), "gaussian"))
    assert "prefix" in kron_l1_local_applies(_problem(workloads.identity((8, 8))))
    assert "Kronecker" in kron_l1_local_applies(_problem(workloads.prefix(64)))
    assert "1024" in kron_l1_local_applies(_problem(workloads.prefix((2048, 2))))
    assert "swap" in kron_l1_local_applies(_problem(workloads.prefix((128, 128)),
                                                    neighbours="swap"))
    assert kron_l1_local_applies(_problem(workloads.prefix((8, 8)), neighbours="swap")) is None


def test_best_mechanism_runs_the_family_on_a_small_grid():
    w = workloads.prefix((8, 8))
    d = optimize.best_mechanism(w, epsilon=1.0, families=["kron_p_identity", "kron_l1_local"])
    assert d.family == "kron_l1_local"
    (pid,) = d.alternatives
    assert pid.family == "kron_p_identity" and d.error < pid.error


@pytest.mark.slow
def test_best_mechanism_256_grid_beats_kron_p_identity():
    """The 2-D CDF on 256 x 256 (eps = 1, add/remove): Kronecker p-Identity 1488.2 per query
    (docs/math.md section 8); the product of the l1 local optima is below it and its error is
    2 f^2, f = tr(G (A'A)^-1) of the 1-D factor computed densely here."""
    w = workloads.prefix((256, 256))
    d = optimize.best_mechanism(w, epsilon=1.0)
    assert d.family == "kron_l1_local"
    pid = next(a for a in d.alternatives if a.family == "kron_p_identity")
    assert d.error < pid.error and d.mean < 1488.2
    f1 = d.mechanism().strategy.factors[0].matrix.toarray()
    assert np.abs(f1).sum(axis=0).max() == pytest.approx(1.0, rel=1e-12)
    wd = dense_1d_workload("prefix", 256)
    f = np.trace(wd.T @ wd @ np.linalg.inv(f1.T @ f1))
    assert d.error == pytest.approx(2.0 * f * f, rel=1e-9)
