"""The implicit Gaussian optimum (strategies.implicit_optimum): tridiagonal resolvent pieces and
the T^(-1/2) quadrature against dense eigendecompositions, the BLUE moments against the dense
covariance, the solver against the dense fixed point and cvxpy, the strategy (apply / solve /
sensitivity / BLUE / errors) against its explicit matrix, MATH.md's optima."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dptree_opt import Mechanism, blue, expected_error, workloads
from dptree_opt.strategies import implicit_optimum as IO
from dptree_opt.strategies import optimized as O
from dptree_opt.strategies.base import Strategy

from oracles import brute_loss


def _tridiag(a, b):
    return np.diag(a) + np.diag(b, 1) + np.diag(b, -1)


@st.composite
def spd_tridiagonal(draw):
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    b = rng.uniform(-1.0, 1.0, n - 1) * draw(st.sampled_from([1e-3, 1.0, 10.0]))
    radius = np.zeros(n)
    radius[:-1] += np.abs(b)
    radius[1:] += np.abs(b)
    a = radius + rng.uniform(1e-4, 3.0, n)  # strictly diagonally dominant: SPD
    return a, b


@settings(max_examples=60, deadline=None)
@given(spd_tridiagonal(), st.floats(0.0, 5.0))
def test_resolvent_pieces_match_dense(ab, shift):
    a, b = ab
    n = a.size
    t = _tridiag(a, b) + shift * np.eye(n)
    r = IO._Resolvent(a, b, shift)
    inv = np.linalg.inv(t)
    np.testing.assert_allclose(r.diag, np.diag(inv), rtol=1e-10)
    u = np.random.default_rng(n).normal(size=n)
    np.testing.assert_allclose(r.solve(u), inv @ u, rtol=1e-9, atol=1e-12 * np.abs(inv @ u).max())
    low = np.eye(n) + np.diag(r.l, -1) if n > 1 else np.eye(1)
    np.testing.assert_allclose(r.forward(r.solve(u)), np.linalg.solve(low, u), rtol=1e-8,
                               atol=1e-10 * np.abs(u).max())
    np.testing.assert_allclose(IO.tridiagonal_inverse_diagonal(a + shift, b), np.diag(inv),
                               rtol=1e-10)


@settings(max_examples=40, deadline=None)
@given(spd_tridiagonal())
def test_inverse_sqrt_diagonal_matches_eigh(ab):
    a, b = ab
    lam, v = np.linalg.eigh(_tridiag(a, b))
    exact = np.einsum("ik,k,ik->i", v, lam ** -0.5, v)
    lo, hi = IO.spectral_bounds(a, b)
    assert lo <= lam[0] * (1 + 1e-12) and lam[-1] <= hi * (1 + 1e-12)  # rigorous enclosure
    np.testing.assert_allclose(IO.inverse_sqrt_diagonal(a, b, lo, hi), exact, rtol=1e-11)
    fast = IO.inverse_sqrt_diagonal(a, b, lo, hi, step=IO.FAST[0], truncation=IO.FAST[1])
    err = IO.quadrature_error(lo, hi, *IO.FAST)
    assert np.all(np.abs(fast / exact - 1.0) <= 2.0 * err + 1e-13)


def _dense_cov(kind, n, d, e):
    """Cov of the BLUE for the strategy with Gram diag(sqrt(d)/e) X(d) diag(sqrt(d)/e)."""
    g = getattr(workloads, kind)(n).gram_dense()
    sd = np.sqrt(d)
    lam, v = np.linalg.eigh(sd[:, None] * g * sd[None, :])
    s = (v * np.sqrt(lam)) @ v.T
    x = s / sd[:, None] / sd[None, :]
    r = sd / e
    return np.linalg.inv(r[:, None] * x * r[None, :])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.sampled_from(["prefix", "all_range", "identity"]),
       st.integers(0, 2**31), st.booleans())
def test_factorization_moments_match_dense(n, kind, seed, weighted):
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.2, 5.0, n) * n
    e = rng.uniform(0.3, 3.0, n) if weighted else np.sqrt(d)
    ga, gb, gd = IO._gram_inverse(getattr(workloads, kind)(n))
    m = IO.factorization_moments(ga, gb, gd, d, weights=e, all_range=True)
    cov = _dense_cov(kind, n, d, e)
    np.testing.assert_allclose(m["prefix"], workloads.prefix(n).query_variances(cov), rtol=1e-9)
    np.testing.assert_allclose(m["identity"], np.diag(cov), rtol=1e-9)
    assert m["all_range_total"] == pytest.approx(workloads.all_range(n).total_variance(cov),
                                                 rel=1e-9)


@pytest.mark.parametrize("kind", ["prefix", "all_range"])
@pytest.mark.parametrize("n", [8, 64, 1024])
def test_solver_brackets_the_dense_optimum(kind, n):
    w = getattr(workloads, kind)(n)
    imp = IO.gaussian_optimal_implicit(w, tol=1e-7)
    dense = O.gaussian_optimal(w, tol=1e-7)
    # both certify: each one's lower bound is below the other's primal value
    assert imp.lower_bound <= dense.error * (1 + 1e-12)
    assert dense.lower_bound <= imp.error * (1 + 1e-12)
    assert imp.gap <= 1e-7 + 1e-12
    assert imp.error == pytest.approx(dense.error, rel=2e-7)
    assert imp.error == min(p for p, _ in imp.history if not np.isnan(p))
    assert imp.lower_bound == max(q for _, q in imp.history)


def test_primal_every_and_time_limit():
    """Primal values only every k-th iteration and at the last; the certified bracket holds."""
    w = workloads.prefix(512)
    ref = IO.gaussian_optimal_implicit(w, tol=1e-8)
    res = IO.gaussian_optimal_implicit(w, tol=1e-4, primal_every=4, max_iter=9)
    prim = [p for p, _ in res.history]
    assert all(np.isnan(p) == (i % 4 != 0 and i != len(prim)) for i, p in enumerate(prim, 1))
    assert res.lower_bound <= ref.error * (1 + 1e-12) and ref.lower_bound <= res.error
    quick = IO.gaussian_optimal_implicit(w, tol=1e-12, time_limit=0.0)
    assert quick.iterations == 1 and not np.isnan(quick.history[0][0])
    with pytest.raises(ValueError, match="primal_every"):
        IO.gaussian_optimal_implicit(w, primal_every=0)


def test_solver_agrees_with_cvxpy():
    w = workloads.prefix(8)
    _, val = O.gaussian_optimal_cvxpy(w)
    imp = IO.gaussian_optimal_implicit(w, tol=1e-8)
    assert imp.lower_bound <= val * (1 + 1e-6) and imp.error >= val * (1 - 1e-6)
    assert imp.error == pytest.approx(val, rel=1e-5)


def test_math_md_optima():
    """MATH.md section 7: the optimum at 2^10 is 8.7348 (dense solver, prefix), at 2^12
    11.4906; the all-range optimum at 2^10 is checked against the dense solver above."""
    for n, want in ((1024, 8.7348), (4096, 11.4906)):
        res = IO.gaussian_optimal_implicit(workloads.prefix(n), tol=1e-6)
        assert res.lower_bound / n <= want + 1e-4 and res.error / n >= want - 1e-4
        assert res.error / n == pytest.approx(want, abs=1e-4)


@pytest.mark.slow
def test_math_md_optimum_2_16():
    """MATH.md section 7: the optimum at 2^16 is 18.1759 per unit sigma^2 (dual 18.175834
    after 10 iterations, primal 18.175889 after 190 in the prototype); issue 14 asks for
    <= 18.20 with a certified gap <= 0.1 %."""
    n = 1 << 16
    res = IO.gaussian_optimal_implicit(workloads.prefix(n), tol=1e-3)
    assert res.gap <= 1e-3
    assert res.error / n <= 18.20
    assert res.lower_bound / n <= 18.1759 + 1e-4 <= res.error / n + 2e-4


@pytest.mark.parametrize("kind", ["prefix", "all_range"])
def test_strategy_matches_its_matrix(kind):
    n = 96
    w = getattr(workloads, kind)(n)
    res = IO.gaussian_optimal_implicit(w, tol=1e-4)
    a = res.strategy
    mat = a.matrix.toarray()
    # unit column norms (normalised point); the Gram is the dense X~ at the same dual point
    # columns normalised with the dual iterations' diag(S) (relative error ~tol / 50), their
    # norms reported from the ~1e-9 rule, the largest scaled to 1
    norms2 = np.linalg.norm(mat, axis=0) ** 2
    np.testing.assert_allclose(norms2, a.column_norms_squared, rtol=1e-8)
    np.testing.assert_allclose(norms2, 1.0, rtol=1e-5)
    assert a.column_norms_squared.max() == pytest.approx(1.0, rel=1e-15)
    assert a.sensitivity(np.ones(n), "add_remove", 2) >= np.sqrt(norms2.max())
    # the Gram is diag(r) S diag(r) with S = (D^1/2 G D^1/2)^(1/2) at the dual point
    d = a.dual_point
    g = w.gram_dense()
    sd = np.sqrt(d)
    lam, v = np.linalg.eigh(sd[:, None] * g * sd[None, :])
    big_s = (v * np.sqrt(lam)) @ v.T
    r = np.sqrt(a.column_norms_squared / np.diag(big_s))
    np.testing.assert_allclose(mat.T @ mat, r[:, None] * big_s * r[None, :], rtol=1e-7,
                               atol=1e-9)
    x = np.random.default_rng(0).normal(size=(n, 3))
    np.testing.assert_allclose(a.apply(x), mat @ x, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(a.rmatvec(x), mat.T @ x, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(a.solve(mat @ x), x, rtol=1e-8, atol=1e-8)


def test_strategy_mechanism_errors_and_blue_match_generic():
    n = 120
    res = IO.gaussian_optimal_implicit(workloads.prefix(n), tol=1e-4)
    a = res.strategy
    generic = Strategy(a.matrix, name="explicit")
    for model in ("add_remove", "swap"):
        for noise, budget in (("gaussian", {"rho": 0.5}), ("laplace", {"epsilon": 1.0})):
            m = Mechanism(a, noise=noise, neighbours=model, **budget)
            mg = Mechanism(generic, noise=noise, neighbours=model, **budget)
            # add/remove L2: exact from diag(A'A) times 1 + 1e-9 + 2 x 2.6e-9 (the slack for
            # the quadratures; variances scale with its square); others via the matrix
            np.testing.assert_allclose(m.variances[:n], mg.variances[:n], rtol=2e-8)
    m = Mechanism(a, rho=0.5, noise="gaussian", neighbours="add_remove")
    mg = Mechanism(generic, rho=0.5, noise="gaussian", neighbours="add_remove")
    assert float(m.variances[0]) >= float(mg.variances[0])  # the slack never under-calibrates
    for wk in (workloads.prefix(n), workloads.identity(n), workloads.total(n)):
        np.testing.assert_allclose(expected_error(wk, m, per_query=True),
                                   expected_error(wk, mg, per_query=True) * m.variances[0]
                                   / mg.variances[0], rtol=1e-8)
    w = workloads.all_range(n)
    assert expected_error(w, m) == pytest.approx(
        expected_error(w, mg) * m.variances[0] / mg.variances[0], rel=1e-8)
    # the per-query error at unit noise is the solver's value
    assert expected_error(workloads.prefix(n), m) / m.variances[0] == pytest.approx(
        res.error, rel=1e-8)
    y = np.random.default_rng(1).normal(size=(4, n))
    np.testing.assert_allclose(blue(m, y), blue(mg, y), rtol=1e-8, atol=1e-8)
    # add/remove L2 sensitivity against the brute force over neighbouring datasets (small n)
    small = IO.gaussian_optimal_implicit(workloads.prefix(6), tol=1e-6).strategy
    want = brute_loss(small.matrix.toarray(), np.ones(6), "add_remove", 2)
    assert small.sensitivity(np.ones(6), "add_remove", 2) == pytest.approx(want, rel=1e-8)
    assert small.sensitivity(np.ones(6), "add_remove", 2) >= want


def test_strategy_constructor_checks():
    ga, gb, gd = IO._gram_inverse(workloads.prefix(5))
    with pytest.raises(ValueError, match="shapes"):
        IO.ImplicitFactorization(ga, gb, gd, np.ones(4))
    with pytest.raises(ValueError, match="Stieltjes"):
        IO.ImplicitFactorization(ga, -gb, gd, np.ones(5))
    with pytest.raises(ValueError, match="positive"):
        IO.ImplicitFactorization(ga, gb, gd, np.zeros(5))


def test_bad_input_and_refusals():
    with pytest.raises(ValueError, match="tridiagonal inverse"):
        IO.gaussian_optimal_implicit(workloads.ranges(5, [(0, 4), (1, 2)]))
    with pytest.raises(ValueError, match="Workload"):
        IO.gaussian_optimal_implicit(np.eye(3))
    with pytest.raises(ValueError, match="tol"):
        IO.gaussian_optimal_implicit(workloads.prefix(4), tol=0)
    with pytest.raises(ValueError, match="max_iter"):
        IO.gaussian_optimal_implicit(workloads.prefix(4), max_iter=0)
    with pytest.raises(ValueError, match="d0"):
        IO.gaussian_optimal_implicit(workloads.prefix(4), d0=np.ones(3))
    with pytest.raises(ValueError, match="d0"):
        IO.gaussian_optimal_implicit(workloads.prefix(4), d0=[1.0, -1.0, 1.0, 1.0])
    big = IO.gaussian_optimal_implicit(workloads.prefix(4096), max_iter=1).strategy
    with pytest.raises(ValueError, match="refused"):
        big.matrix
    with pytest.raises(ValueError, match="refused"):  # swap / L1 need the matrix
        Mechanism(big, epsilon=1.0, neighbours="add_remove")
    m = Mechanism(big, rho=0.5, noise="gaussian", neighbours="add_remove")
    with pytest.raises(ValueError, match="rows"):
        big.apply(np.ones(5))
    with pytest.raises(ValueError):
        blue(m, np.full(4096, np.nan))


@pytest.mark.parametrize("setting", [dict(neighbours="swap"),
                                     dict(neighbours="add_remove", public_total=True),
                                     dict(neighbours="add_remove", level_budgets=[0.3, 0.2])])
def test_total_rows_rank_one_step_matches_generic(setting):
    """N public (swap, or declared) or measured by a noisy total row: the BLUE and every
    error carry the rank-one step; equal to the GLS on the explicit matrix."""
    n = 150
    a = IO.gaussian_optimal_implicit(workloads.prefix(n), tol=1e-4).strategy
    if "level_budgets" in setting:
        a = a.with_total_row()  # a noisy total row at level 0 with its own budget
    m = Mechanism(a, rho=0.5, noise="gaussian", **setting)
    for wk in (workloads.prefix(n), workloads.identity(n), workloads.total(n)):
        got = expected_error(wk, m, per_query=True)
        want = expected_error(wk, m, per_query=True, method="dense")  # GLS on the matrix
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-9 * n * m.variances[0])
    w = workloads.all_range(n)
    assert expected_error(w, m) == pytest.approx(expected_error(w, m, method="dense"), rel=1e-8)
    y = m.measure(np.random.default_rng(3).integers(0, 40, n), np.random.default_rng(4))
    np.testing.assert_allclose(blue(m, y), blue(m, y, method="dense"), rtol=1e-7, atol=1e-7)


def test_swap_bracket_contains_the_exact_sensitivity():
    """Above 512 bins the swap L2 loss is the certified upper end of [x_0 + x_(n-1) -
    2 (A'A)_(0,n-1), top two x]; the exact value (explicit matrix, brute force over column
    pairs) lies inside, and the bracket is within 1e-3."""
    n = 600
    a = IO.gaussian_optimal_implicit(workloads.prefix(n), tol=1e-4).strategy
    low, high = a.swap_bracket()
    mat = a.matrix.toarray()
    gram = mat.T @ mat
    sq = np.diag(gram)[:, None] + np.diag(gram)[None, :] - 2.0 * gram
    np.fill_diagonal(sq, -np.inf)
    exact = float(sq.max())
    assert low - 1e-8 <= exact <= high + 1e-8
    assert high - low <= 1e-3 * high
    assert gram.min() >= -1e-12  # A'A >= 0 entrywise (the Stieltjes argument)
    loss = a.sensitivity(np.ones(n), "swap", 2)
    assert loss >= np.sqrt(exact) and loss == pytest.approx(np.sqrt(high), rel=1e-8)
