"""Lower bounds for pure-DP (Laplace) linear mechanisms (docs/laplace_bounds.md).

Checked here: the support function of {A'A : column l1 norms <= 1} is the maximum of s'Lambda s
over sign vectors (by enumeration, against random strategies); Nesterov's pi/2 step; the
Gaussian-based bound against the published anchors (2 x 8.7348 per prefix at 2^10, docs/math.md
section 7; the l1 SVD bound 16.9) and below every mechanism built here; the convex-hull bound
against an independent convex solve (cvxpy over the cut polytope), above 2 x the Gaussian
dual and below the best strategies found by a local search of the full l1 problem at tiny K;
and the ceiling: the prefix Gaussian optimum lies in the cut polytope (an explicit convex
combination of sign matrices from a linear program, and the arcsine test at 64 bins).
"""

import itertools
import math

import numpy as np
import pytest
import scipy.optimize as sopt

from dptree_opt import Mechanism, bounds, expected_error, workloads
from dptree_opt import strategies as S
from dptree_opt.strategies.optimized import gaussian_optimal, laplace_p_identity

GAUSS_1024 = 8.7348      # Gaussian optimum per prefix at 2^10, per unit sigma^2 (math.md sec. 7)
GAUSS_65536 = 18.1759    # ... at 2^16
L1_SVD_1024 = 16.93      # the l1 SVD analogue per prefix at 2^10 (eps = 1)


def _all_signs(n):
    """Every sign vector, one of each pair +-s (independent of the package's enumeration)."""
    return np.array([(1.0,) + s for s in itertools.product((1.0, -1.0), repeat=n - 1)])


def _max_form(lam):
    s = _all_signs(lam.shape[0])
    return float(np.einsum("si,ij,sj->s", s, lam, s).max())


def _random_psd(rng, n):
    m = rng.standard_normal((n, int(rng.integers(1, n + 1))))
    return m @ m.T


def _unit_l1_columns(rng, m, n):
    """A random m x n strategy whose columns have l1 norm exactly 1 (random sparsity)."""
    a = rng.standard_normal((m, n)) * (rng.random((m, n)) < rng.uniform(0.2, 1.0))
    a[rng.integers(0, m, n), np.arange(n)] += 1.0          # no zero column
    return a / np.abs(a).sum(axis=0)


def _laplace_error(gram, a):
    """2 tr(G (A'A)^-1) at l1 sensitivity 1 (eps = 1, add/remove), dense."""
    x = a.T @ a
    return 2.0 * float(np.trace(np.linalg.solve(x, gram))) * np.abs(a).sum(axis=0).max() ** 2


# ----------------------------------------------------------------- the support function of K
@pytest.mark.parametrize("n", [3, 5, 8, 12])
def test_support_function_is_the_max_over_sign_vectors(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        lam = _random_psd(rng, n)
        top = _max_form(lam)
        for m in (1, 2, n, 2 * n):
            a = _unit_l1_columns(rng, m, n)
            assert np.trace(lam @ a.T @ a) <= top * (1 + 1e-12)
            # the vertices of the product of l1 balls: every column a signed unit vector
            v = np.zeros((m, n))
            v[rng.integers(0, m, n), np.arange(n)] = rng.choice((-1.0, 1.0), n)
            assert np.trace(lam @ v.T @ v) <= top * (1 + 1e-12)
        s = _all_signs(n)
        best = s[np.argmax(np.einsum("si,ij,sj->s", s, lam, s))][None, :]   # one sign row
        assert np.abs(best).sum(axis=0).max() == 1.0
        assert np.trace(lam @ best.T @ best) == pytest.approx(top, rel=1e-12)


@pytest.mark.parametrize("n", [4, 7, 10])
def test_sign_maximum_is_at_least_2_over_pi_of_every_correlation_bound(n):
    """Nesterov's pi/2 step: max_s s'Lambda s >= (2/pi) tr(Lambda Y) for every correlation
    matrix Y (Y psd, unit diagonal) and psd Lambda."""
    rng = np.random.default_rng(10 + n)
    for _ in range(10):
        lam = _random_psd(rng, n)
        b = rng.standard_normal((n, n))
        y = b @ b.T
        y /= np.sqrt(np.outer(np.diag(y), np.diag(y)))
        for corr in (y, lam / np.sqrt(np.outer(np.diag(lam), np.diag(lam)))):
            assert _max_form(lam) >= 2 / math.pi * np.trace(lam @ corr) * (1 - 1e-12)


# ----------------------------------------------------------------- the Gaussian-based bound
def test_laplace_bound_at_1024_from_the_gaussian_dual():
    w = workloads.prefix(1024)
    res = S.gaussian_optimal_implicit(w, tol=1e-5)
    lb = bounds.laplace_lower_bound(w, gaussian_dual=res.lower_bound)
    assert lb.mean == pytest.approx(2 * GAUSS_1024, abs=2e-3)
    assert "Gaussian optimum" in lb.method and lb.n_queries == 1024
    svd = bounds.laplace_lower_bound(w)
    assert svd.mean == pytest.approx(L1_SVD_1024, abs=0.01) and "SVD" in svd.method
    assert lb.total > svd.total
    # a dual value below the SVD bound: the SVD bound is kept, and says so
    weak = bounds.laplace_lower_bound(w, gaussian_dual=0.5 * res.lower_bound)
    assert weak.total == svd.total and "SVD" in weak.method
    # error ~ 1 / eps^2
    assert bounds.laplace_lower_bound(w, epsilon=2.0, gaussian_dual=res.lower_bound
                                      ).total == pytest.approx(lb.total / 4, rel=1e-12)


def test_laplace_bound_is_below_every_mechanism_built_here():
    n = 64
    w = workloads.prefix(n)
    lb = bounds.laplace_lower_bound(w, gaussian_dual=gaussian_optimal(w, tol=1e-8).lower_bound)
    built = [S.histogram(n), S.binary_tree(n), S.tree(n, 4), S.tree(n, 8), S.prefix_sums(n),
             S.haar(n), laplace_p_identity(w).strategy]
    errors = [expected_error(w, Mechanism(s, epsilon=1.0)) for s in built]
    assert min(errors) >= lb.total
    assert min(errors) / lb.total < 4      # not vacuous: the best is within a small factor


@pytest.mark.parametrize("bad", [-math.inf, math.nan, "1", True])
def test_laplace_bound_refuses_a_bad_dual(bad):
    with pytest.raises(ValueError, match="gaussian_dual"):
        bounds.laplace_lower_bound(workloads.prefix(8), gaussian_dual=bad)


def test_laplace_bound_refuses_a_bad_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        bounds.laplace_lower_bound(workloads.prefix(8), epsilon=0.0)


# ----------------------------------------------------------------- the convex-hull bound
def _local_l1_search(gram, m, starts, seed):
    """Best 2 tr(G (A'A)^-1) found by L-BFGS-B over strategies A = (U - V) / colsum(U + V),
    U, V >= 0 (every column l1 norm 1), m rows, from random starts."""
    n = gram.shape[0]

    def fun(z):
        u, v = z[:m * n].reshape(m, n), z[m * n:].reshape(m, n)
        c = (u + v).sum(axis=0)
        a = (u - v) / c
        try:
            xinv = np.linalg.inv(np.linalg.cholesky(a.T @ a))
        except np.linalg.LinAlgError:
            return 1e12, np.zeros_like(z)
        xinv = xinv.T @ xinv
        g = -2.0 * a @ xinv @ gram @ xinv                    # d tr(G X^-1) / dA
        s = (g * a).sum(axis=0)
        return float(np.trace(gram @ xinv)), np.concatenate(
            [((g - s) / c).ravel(), ((-g - s) / c).ravel()])

    rng = np.random.default_rng(seed)
    best = math.inf
    for _ in range(starts):
        z0 = rng.exponential(size=2 * m * n) ** 2
        r = sopt.minimize(fun, z0, jac=True, method="L-BFGS-B",
                          bounds=[(0, None)] * z0.size, options={"maxiter": 400})
        u, v = r.x[:m * n].reshape(m, n), r.x[m * n:].reshape(m, n)
        best = min(best, _laplace_error(gram, (u - v) / (u + v).sum(axis=0)))
    return best


@pytest.mark.parametrize("n", [4, 5, 6])
def test_hull_bound_between_twice_the_gaussian_and_the_best_strategy_found(n):
    w = workloads.prefix(n)
    gram = w.gram_dense()
    hull = bounds.laplace_hull_bound(w)
    gauss = gaussian_optimal(w, tol=1e-10, max_iter=5000)
    assert hull.total >= 2 * gauss.lower_bound * (1 - 1e-6)
    assert hull.total <= hull.ceiling <= hull.total * (1 + 1e-6)
    assert hull.total >= bounds.laplace_lower_bound(w).total      # the l1 SVD analogue
    found = {
        "identity": _laplace_error(gram, np.eye(n)),
        "prefix": _laplace_error(gram, w.dense()),
        "local search": _local_l1_search(gram, 2 * n, 4, n),
        **{name: expected_error(w, Mechanism(s, epsilon=1.0)) for name, s in (
            ("binary tree", S.truncated_tree(n, (2, 2, 2))), ("haar", S.haar(n)),
            ("p-identity", laplace_p_identity(w).strategy))},
    }
    assert found["identity"] == pytest.approx(n * (n + 1))          # 2 tr(G) = n (n + 1)
    assert hull.total <= min(found.values())


def test_hull_bound_equals_an_independent_convex_solve():
    """min over the cut polytope of 2 tr(W X^-1 W') by cvxpy (matrix_frac over the weights
    of the 2^(n-1) sign matrices) equals the hull bound: it is the convex-hull optimum."""
    cp = pytest.importorskip("cvxpy")
    for w in (workloads.prefix(4), workloads.ranges(5, [(0, 4), (1, 3), (2, 2), (0, 1),
                                                         (3, 4), (0, 0), (4, 4)])):
        n = w.n_bins
        s = _all_signs(n)
        p = cp.Variable(s.shape[0], nonneg=True)
        x = sum(p[i] * np.outer(s[i], s[i]) for i in range(s.shape[0]))
        prob = cp.Problem(cp.Minimize(cp.matrix_frac(w.dense().T, x)), [cp.sum(p) == 1])
        prob.solve()
        hull = bounds.laplace_hull_bound(w)
        assert hull.total == pytest.approx(2 * prob.value, rel=1e-4)


def test_hull_bound_at_two_bins_by_hand():
    """n = 2 prefix: CUT_2 = {[[1, c], [c, 1]] : |c| <= 1}, tr(G X^-1) = (3 - 2c) / (1 - c^2)
    (G = [[2, 1], [1, 1]]), minimal at c = (3 - sqrt 5) / 2 with value (3 + sqrt 5) / 2; the
    total error bound is twice it over 2 queries."""
    hull = bounds.laplace_hull_bound(workloads.prefix(2))
    assert hull.mean == pytest.approx((3 + math.sqrt(5)) / 2, rel=1e-8)
    assert hull.ceiling == pytest.approx(3 + math.sqrt(5), rel=1e-8)


def test_hull_bound_refuses_more_than_20_bins():
    with pytest.raises(ValueError, match="20"):
        bounds.laplace_hull_bound(workloads.prefix(21))
    with pytest.raises(ValueError, match="tol"):
        bounds.laplace_hull_bound(workloads.prefix(4), tol=0.0)


# ----------------------------------------------------------------- the ceiling for prefix sums
@pytest.mark.parametrize("n", [5, 7])
def test_prefix_gaussian_optimum_is_a_convex_combination_of_sign_matrices(n):
    """The Gaussian optimum X* (unit diagonal) is in the cut polytope conv{ss'}: a linear
    program finds weights p >= 0, sum 1, with sum_s p_s ss' = X*. Hence no convex argument on
    A'A bounds the Laplace error above 2 x the Gaussian optimum (docs/laplace_bounds.md)."""
    w = workloads.prefix(n)
    opt = gaussian_optimal(w, tol=1e-10, max_iter=5000)
    r = opt.strategy.matrix.toarray()
    x = r.T @ r
    s = _all_signs(n)
    iu = np.triu_indices(n, 1)
    a_eq = np.vstack([np.ones(s.shape[0]), (s[:, iu[0]] * s[:, iu[1]]).T])
    b_eq = np.concatenate([[1.0], x[iu]])
    lp = sopt.linprog(np.zeros(s.shape[0]), A_eq=a_eq, b_eq=b_eq, bounds=(0, None),
                      method="highs")
    assert lp.status == 0
    comb = np.einsum("s,si,sj->ij", lp.x, s, s)
    np.testing.assert_allclose(comb, x, atol=1e-8)
    hull = bounds.laplace_hull_bound(w)
    assert hull.ceiling <= 2 * opt.error * (1 + 1e-6)


def test_prefix_gaussian_optimum_passes_the_arcsine_test_at_64():
    """sin(pi X*/2) psd => X* = E[sign(g) sign(g)'] with g ~ N(0, sin(pi X*/2)) (Sheppard's
    identity E[sign(g_i) sign(g_j)] = (2/pi) arcsin(Y_ij)), so X* is in the cut polytope."""
    w = workloads.prefix(64)
    r = gaussian_optimal(w, tol=1e-9, max_iter=3000).strategy.matrix.toarray()
    x = r.T @ r
    np.testing.assert_allclose(np.diag(x), 1.0, atol=1e-12)
    assert np.linalg.eigvalsh(np.sin(0.5 * np.pi * x))[0] > 0.02


@pytest.mark.parametrize("n", [12, 16, pytest.param(20, marks=pytest.mark.slow)])
def test_hull_bound_equals_twice_the_gaussian_optimum_for_prefix(n):
    """The hull bound at n = 12..20 is 2 x the Gaussian optimum, from both sides (the ceiling
    for prefix sums, docs/laplace_bounds.md)."""
    w = workloads.prefix(n)
    opt = gaussian_optimal(w, tol=1e-10, max_iter=5000)
    hull = bounds.laplace_hull_bound(w)
    assert 2 * opt.lower_bound * (1 - 1e-6) <= hull.total <= 2 * opt.error * (1 + 1e-6)


# ----------------------------------------------------------------- heavier (slow)
@pytest.mark.slow
def test_laplace_bound_at_65536():
    w = workloads.prefix(1 << 16)
    res = S.gaussian_optimal_implicit(w, tol=1e-5)
    lb = bounds.laplace_lower_bound(w, gaussian_dual=res.lower_bound)
    assert lb.mean == pytest.approx(2 * GAUSS_65536, abs=5e-3)
