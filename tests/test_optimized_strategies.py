"""Optimised strategies: the Gaussian fixed point against cvxpy and MATH.md's 8.735, the
p-Identity objective/gradient against dense algebra and finite differences, sensitivities
by brute force, the BLUE through the generic GLS, never worse than the start, fallback."""

import numpy as np
import pytest

from dptree_opt import Mechanism, blue, expected_error, workloads
from dptree_opt.optimize import beyond_trees as B
from dptree_opt.strategies import optimized as O
from dptree_opt.strategies import p_identity
from oracles import brute_loss as brute_sensitivity

FULL_RANK_RANGES = [(0, 3), (2, 9), (5, 11), (0, 11), (7, 7)] + [(i, i + 1) for i in range(11)]


def _cases():
    return [workloads.prefix(8), workloads.prefix(16), workloads.all_range(8),
            workloads.ranges(12, FULL_RANK_RANGES)]


@pytest.mark.parametrize("idx", range(4))
def test_fixed_point_agrees_with_cvxpy(idx):
    w = _cases()[idx]
    res = O.gaussian_optimal(w, tol=1e-9)
    x_cvx, val = O.gaussian_optimal_cvxpy(w)
    assert res.error == pytest.approx(val, rel=1e-5)
    assert res.lower_bound <= val * (1 + 1e-6) and res.error >= val * (1 - 1e-6)
    a = res.strategy.matrix.toarray()
    np.testing.assert_allclose(a.T @ a, x_cvx, atol=2e-3)  # the optimum is unique (strictly convex)
    assert ("tridiagonal" in res.method) == (w.kind != "ranges")


def test_never_worse_than_start_and_history():
    for w in _cases() + [workloads.prefix(100)]:
        res = O.gaussian_optimal(w, tol=1e-8)
        assert res.error <= res.start_error
        assert res.error == min(p for p, _ in res.history)
        assert res.lower_bound == max(d for _, d in res.history)
        # the start is the SVD-bound point: its dual value is the SVD bound
        from dptree_opt.bounds import svd_bound
        assert res.history[0][1] == pytest.approx(svd_bound(w), rel=1e-9)


def test_anchor_8_735_at_1024():
    # MATH.md section 6: optimal factorisation, mean prefix MSE 8.735 at n = 2^10
    res = O.gaussian_optimal(workloads.prefix(1024), tol=2e-5)
    assert res.lower_bound / 1024 == pytest.approx(8.735, abs=5e-4)
    assert res.error / 1024 == pytest.approx(8.735, abs=5e-4)


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_gaussian_strategy_sensitivity_and_blue(neighbours):
    n = 6
    w = workloads.prefix(n)
    strat = O.gaussian_optimal(w).strategy
    a = strat.matrix.toarray()
    np.testing.assert_allclose(np.linalg.norm(a, axis=0), 1.0, rtol=1e-12)
    ones = np.ones(n)
    for p in (1, 2):
        assert strat.sensitivity(ones, neighbours, p) == pytest.approx(
            brute_sensitivity(a, ones, neighbours, p), rel=1e-12)
    mech = Mechanism(strat, rho=0.5, noise="gaussian", neighbours=neighbours)
    rng = np.random.default_rng(1)
    y = mech.measure(rng.poisson(5, n), rng)
    if neighbours == "add_remove":  # square invertible: BLUE = A^-1 y, error tr(G X^-1)
        np.testing.assert_allclose(blue(mech, y), np.linalg.solve(a, y), rtol=1e-8, atol=1e-8)
        assert expected_error(w, mech) == pytest.approx(
            np.trace(w.gram_dense() @ np.linalg.inv(a.T @ a)), rel=1e-9)
    else:  # exact total as a constraint, dense KKT by hand
        v = mech.variances[:n]
        m = a.T @ (a / v[:, None])
        kkt = np.block([[m, np.ones((n, 1))], [np.ones((1, n)), np.zeros((1, 1))]])
        x = np.linalg.solve(kkt, np.concatenate([a.T @ (y[:n] / v), [y[n]]]))[:n]
        np.testing.assert_allclose(blue(mech, y), x, rtol=1e-8, atol=1e-8)


def test_p_identity_objective_and_gradient():
    rng = np.random.default_rng(0)
    for w in (workloads.prefix(20), workloads.all_range(20),
              workloads.ranges(20, [(0, 3), (2, 9), (5, 19)] + [(i, i) for i in range(20)])):
        th = rng.random((3, 20))
        f, g = O.p_identity_objective(w, th)
        a = p_identity(th).matrix.toarray()
        assert f == pytest.approx(np.trace(w.gram_dense() @ np.linalg.inv(a.T @ a)), rel=1e-10)
        h = 1e-6
        for r, c in [(0, 0), (1, 5), (2, 19)]:
            e = np.zeros_like(th)
            e[r, c] = h
            fd = (O.p_identity_objective(w, th + e)[0]
                  - O.p_identity_objective(w, th - e)[0]) / (2 * h)
            assert g[r, c] == pytest.approx(fd, rel=1e-5, abs=1e-6 * abs(f))


@pytest.mark.parametrize("model", ["swap", "add_remove"])
@pytest.mark.parametrize("p", [1, 2])
def test_p_identity_sensitivity_brute_force(model, p):
    th = np.random.default_rng(2).random((2, 6))
    strat = p_identity(th)
    a = strat.matrix.toarray()
    np.testing.assert_allclose(np.abs(a).sum(axis=0), 1.0, rtol=1e-12)
    wts = np.random.default_rng(3).random(strat.n_rows)
    for wt in (np.ones(strat.n_rows), wts):
        assert strat.sensitivity(wt, model, p) == pytest.approx(
            brute_sensitivity(a, wt, model, p), rel=1e-12)


def test_p_identity_optimiser_error_is_exact_and_never_worse():
    w = workloads.prefix(64)
    res = O.laplace_p_identity(w, p=8, starts=2, max_iter=200)
    assert res.error <= res.start_error
    mech = Mechanism(res.strategy, epsilon=1.0, neighbours="add_remove")
    assert mech.level_sensitivities[1] == pytest.approx(1.0, rel=1e-12)
    assert expected_error(w, mech) == pytest.approx(res.error, rel=1e-9)
    # the dyadic start is itself a p-Identity strategy with the reported start error
    start = p_identity(O._dyadic_start(64, 8))
    start_err = expected_error(w, Mechanism(start, epsilon=1.0, neighbours="add_remove"))
    assert res.start_error <= start_err * (1 + 1e-9)


def test_optimized_strategy_laplace_compares_with_best_tree_and_caches():
    B.clear_cache()
    w = workloads.prefix(64)
    tree_err, tree_strat = B.best_tree(w)
    res = B.optimized_strategy(w, "laplace", p=8, max_iter=300)
    assert res.error <= tree_err * (1 + 1e-12)
    assert B.optimized_strategy(w, "laplace", p=8, max_iter=300) is res
    mech = Mechanism(res.strategy, epsilon=1.0, neighbours="add_remove")
    assert expected_error(w, mech) == pytest.approx(res.error, rel=1e-9)
    # a crippled optimiser (one iteration from the poor dyadic start) falls back to the tree
    bad = B.optimized_strategy(w, "laplace", p=4, starts=1, max_iter=1)
    assert "fallback" in bad.method and bad.error == pytest.approx(tree_err, rel=1e-12)
    assert bad.strategy.name == tree_strat.name
    B.clear_cache()


def test_optimized_strategy_gaussian_beats_every_tree():
    w = workloads.prefix(64)
    res = B.optimized_strategy(w, "gaussian")
    tree_err, _ = B.best_tree(w, noise="gaussian")
    assert res.error < tree_err
    mech = Mechanism(res.strategy, rho=0.5, noise="gaussian", neighbours="add_remove")
    assert expected_error(w, mech) == pytest.approx(res.error, rel=1e-9)


def test_bad_input():
    with pytest.raises(ValueError, match="noise"):
        B.optimized_strategy(workloads.prefix(4), "cauchy")
    with pytest.raises(ValueError, match="theta"):
        p_identity(-np.ones((1, 3)))
    with pytest.raises(ValueError, match="full column rank"):
        O.gaussian_optimal(workloads.ranges(5, [(0, 4), (1, 2)]))


def test_laplace_p_identity_reports_its_exact_error():
    """The Woodbury objective lost ~4e-6 relative here (reported 20.0, exact 20.0000781):
    the reported error is now tr(G (A'A)^-1) of the returned matrix (numpy inverse here)."""
    w = workloads.prefix(4)
    r = O.laplace_p_identity(w, p=2)
    a = r.strategy.matrix.toarray()
    exact = 2.0 * np.trace(w.gram_dense() @ np.linalg.inv(a.T @ a))
    assert r.error == pytest.approx(exact, rel=1e-12)
