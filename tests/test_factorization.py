"""Square-root factorisation L (L @ L = prefix matrix): coefficients, the error closed form
sigma^2 S(t) S(n) (MATH.md section 6, 9.671 at n = 2^10), sensitivities by brute force and
against the generic Strategy, and the BLUE = L y."""

import itertools
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from dptree_opt import Mechanism, blue, expected_error, workloads
from dptree_opt.strategies import Strategy, sqrt_factorization
from dptree_opt.strategies.factorization import (sqrt_coefficients,
                                                 sqrt_factorization_variances)
from oracles import brute_loss as brute_sensitivity


def test_coefficients_are_central_binomials():
    c = sqrt_coefficients(40)
    exact = [Fraction(comb(2 * k, k), 4**k) for k in range(40)]
    np.testing.assert_allclose(c, [float(x) for x in exact], rtol=1e-14)


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_square_root_of_prefix_matrix(n):
    L = sqrt_factorization(n).matrix.toarray()
    np.testing.assert_allclose(L @ L, np.tril(np.ones((n, n))), atol=1e-12)
    assert np.allclose(L, np.tril(L))


def closed_form_exact(n):
    """sigma^2 S(t) S(n) with S(t) = sum_{k<t} c_k^2, in exact rational arithmetic."""
    c2 = [Fraction(comb(2 * k, k), 4**k) ** 2 for k in range(n)]
    s = list(itertools.accumulate(c2))
    return np.array([float(s[t - 1] * s[-1]) for t in range(1, n + 1)])


@pytest.mark.parametrize("n", [1, 5, 32, 100])
def test_error_equals_closed_form(n):
    # expected_error goes through Mechanism (sensitivity) and the generic GLS covariance
    mech = Mechanism(sqrt_factorization(n), rho=0.5, noise="gaussian", neighbours="add_remove")
    got = expected_error(workloads.prefix(n), mech, per_query=True)
    np.testing.assert_allclose(got, closed_form_exact(n), rtol=1e-9)
    np.testing.assert_allclose(sqrt_factorization_variances(n), closed_form_exact(n), rtol=1e-12)


def test_anchor_9_671_at_1024():
    # MATH.md section 6: mean prefix MSE 9.671 at n = 2^10, sigma^2 = 1 per unit l2 sensitivity
    assert closed_form_exact(1024).mean() == pytest.approx(9.671, abs=5e-4)
    assert sqrt_factorization_variances(1024).mean() == pytest.approx(9.671, abs=5e-4)


@pytest.mark.slow
def test_anchor_through_the_mechanism_at_1024():
    mech = Mechanism(sqrt_factorization(1024), rho=0.5, noise="gaussian",
                     neighbours="add_remove")
    assert expected_error(workloads.prefix(1024), mech) / 1024 == pytest.approx(9.671, abs=5e-4)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("model", ["swap", "add_remove"])
@pytest.mark.parametrize("p", [1, 2])
def test_sensitivity_brute_force(n, model, p):
    strat = sqrt_factorization(n)
    a = strat.matrix.toarray()
    w = np.full(n, 0.8)
    assert strat.sensitivity(w, model, p) == pytest.approx(brute_sensitivity(a, w, model, p),
                                                           rel=1e-12)
    wr = np.random.default_rng(n).random(n)  # non-uniform weights: generic fallback
    assert strat.sensitivity(wr, model, p) == pytest.approx(brute_sensitivity(a, wr, model, p),
                                                            rel=1e-12)
    tot = strat.with_total_row()
    wt = np.append(w, 0.3)
    assert tot.sensitivity(wt, model, p) == pytest.approx(
        brute_sensitivity(tot.matrix.toarray(), wt, model, p), rel=1e-12)


@pytest.mark.parametrize("model", ["swap", "add_remove"])
@pytest.mark.parametrize("p", [1, 2])
def test_closed_form_sensitivity_equals_generic(model, p):
    strat = sqrt_factorization(200)
    generic = Strategy(strat.matrix)
    w = np.full(200, 1.3)
    assert strat.sensitivity(w, model, p) == pytest.approx(generic.sensitivity(w, model, p),
                                                           rel=1e-12)


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_blue_is_L_y_without_public_total_and_gls_with_it(neighbours):
    n = 24
    mech = Mechanism(sqrt_factorization(n), epsilon=1.0, neighbours=neighbours)
    rng = np.random.default_rng(5)
    h = rng.poisson(4, n)
    y = mech.measure(h, rng)
    L = sqrt_factorization(n).matrix.toarray()
    prefix = np.cumsum(blue(mech, y))
    if neighbours == "add_remove":
        np.testing.assert_allclose(prefix, L @ y, rtol=1e-9, atol=1e-9)
    else:  # N public: equality-constrained GLS, dense, by hand
        v = mech.variances[:n]
        m = L.T @ (L / v[:, None])
        kkt = np.block([[m, np.ones((n, 1))], [np.ones((1, n)), np.zeros((1, 1))]])
        x = np.linalg.solve(kkt, np.concatenate([L.T @ (y[:n] / v), [y[n]]]))[:n]
        np.testing.assert_allclose(blue(mech, y), x, rtol=1e-9, atol=1e-9)
        assert y[n] == h.sum()


# ------------------------------------------------------------- at scale (no matrix)
def _s2_lgamma(n):
    """Cumulative sums of c_k^2, c_k = C(2k, k)/4^k by lgamma (independent of the library)."""
    from scipy.special import gammaln
    k = np.arange(n, dtype=float)
    return np.cumsum(np.exp(2 * (gammaln(2 * k + 1) - 2 * gammaln(k + 1) - k * np.log(4.0))))


def test_is_toeplitz_and_keeps_its_api_at_2_20():
    from dptree_opt.strategies import SqrtFactorization, ToeplitzStrategy
    n = 1 << 20
    s = sqrt_factorization(n)  # no n(n+1)/2-nonzero matrix: instant
    assert isinstance(s, SqrtFactorization) and isinstance(s, ToeplitzStrategy)
    np.testing.assert_allclose(s.coefficients, sqrt_coefficients(n))
    tot = s.with_total_row()
    assert isinstance(tot, SqrtFactorization) and tot.n_rows == n + 1
    with pytest.raises(ValueError, match="8192"):
        _ = s.matrix
    x = np.random.default_rng(0).poisson(3.0, n).astype(float)
    # L @ (L @ x) = prefix sums of x
    np.testing.assert_allclose(s.apply(s.apply(x)), np.cumsum(x), rtol=1e-9)


@pytest.mark.parametrize("n", [1 << 12, 1 << 16])
def test_per_prefix_error_equals_closed_form_at_scale(n):
    mech = Mechanism(sqrt_factorization(n), rho=0.5, noise="gaussian", neighbours="add_remove")
    s2 = _s2_lgamma(n)
    # lgamma differences of ~1e6-sized numbers: the oracle itself is good to ~1e-10
    assert mech.level_sensitivities[1] ** 2 == pytest.approx(s2[-1], rel=1e-9)
    got = expected_error(workloads.prefix(n), mech, per_query=True)
    np.testing.assert_allclose(got, s2 * s2[-1], rtol=1e-9)
    np.testing.assert_allclose(sqrt_factorization_variances(n), s2 * s2[-1], rtol=1e-9)


def test_swap_l1_sensitivity_closed_form_at_scale():
    # c decreasing and positive: swap l1 = max_D 2 S1(D) + S1(n - D) - S1(n) (module docstring),
    # here from lgamma coefficients and a direct max
    from scipy.special import gammaln
    n = 1 << 16
    k = np.arange(n, dtype=float)
    c = np.exp(gammaln(2 * k + 1) - 2 * gammaln(k + 1) - k * np.log(4.0))
    s1 = np.concatenate([[0.0], np.cumsum(c)])
    d = np.arange(1, n)
    expect = np.max(2 * s1[d] + s1[n - d] - s1[n])
    assert sqrt_factorization(n).sensitivity(np.ones(n), "swap", 1) == pytest.approx(expect,
                                                                                   rel=1e-9)


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_blue_fast_path_equals_generic_at_256(neighbours):
    n = 256
    mech = Mechanism(sqrt_factorization(n), rho=0.5, noise="gaussian", neighbours=neighbours)
    rng = np.random.default_rng(3)
    y = np.stack([mech.measure(rng.poisson(4, n), rng) for _ in range(4)])
    np.testing.assert_allclose(blue(mech, y), blue(mech, y, method="generic"),
                               rtol=1e-9, atol=1e-9)
    for kind in ("prefix", "identity", "all_range", "total"):
        w = getattr(workloads, kind)(n)
        assert expected_error(w, mech) == pytest.approx(
            expected_error(w, mech, method="dense"), rel=1e-9, abs=1e-9)
