"""Lower-triangular Toeplitz strategies without a matrix: power-series inverse, FFT products,
exact sensitivities (brute force, generic search, direct sums), exact BLUE error for prefix /
identity / all-range / total (N private and public) against the dense GLS, the BLUE against
the generic solver, and MATH.md section 7's square-root numbers at 2^10, 2^16, 2^20."""

import math

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import brute_loss

from dptree_opt import Mechanism, blue, expected_error, monte_carlo_error, workloads
from dptree_opt.engines.toeplitz import is_toeplitz_mechanism
from dptree_opt.strategies import (
    SqrtFactorization,
    Strategy,
    ToeplitzStrategy,
    sqrt_factorization,
    toeplitz,
)
from dptree_opt.strategies.toeplitz import series_inverse, toeplitz_swap_sensitivity


def dense(a):
    """Lower-triangular Toeplitz matrix with first column a (scipy, independent)."""
    a = np.asarray(a, dtype=float)
    return sla.toeplitz(a, np.zeros(a.size))


def well_conditioned(rng, n, monotone=False):
    """a_0 dominates (sum_{k>=1} |a_k| < |a_0|): 1/a(z) has bounded coefficients."""
    if monotone:
        a = np.sort(rng.random(n))[::-1] + 0.1
        return a / a.sum() * 1.5 * a[0] if n > 1 else a
    a = rng.uniform(-1.0, 1.0, n)
    a0 = rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 2.0)
    tail = np.abs(a[1:]).sum()
    if tail > 0:
        a[1:] *= 0.9 * abs(a0) / tail
    a[0] = a0
    return a


# ------------------------------------------------------------------ construction, input
@pytest.mark.parametrize("bad", [[], [0.0, 1.0], [1.0, np.nan], [np.inf], [[1.0, 2.0]], "ab"])
def test_bad_coefficients(bad):
    with pytest.raises(ValueError):
        toeplitz(bad)


def test_matrix_is_lazy_and_refused_above_8192():
    s = toeplitz(np.ones(8193))
    assert s.n_bins == 8193 and s.n_rows == 8193
    with pytest.raises(ValueError, match="8192"):
        _ = s.matrix
    small = toeplitz([2.0, 0.0, -1.0])
    np.testing.assert_array_equal(small.matrix.toarray(), dense([2.0, 0.0, -1.0]))


@pytest.mark.parametrize("a", [[1.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0]])
def test_levels_and_total_rows_match_generic(a):
    s = toeplitz(a).with_total_row().with_total_row()
    generic = Strategy(s.matrix, s.levels)
    np.testing.assert_array_equal(s.levels, [1] * len(a) + [0, 0])
    np.testing.assert_array_equal(s.total_row_mask(), generic.total_row_mask())
    assert isinstance(s, ToeplitzStrategy) and s.n_totals == 2


def test_apply_batched_and_with_totals():
    rng = np.random.default_rng(1)
    for n in (1, 5, 70, 300):
        a = rng.normal(size=n)
        a[0] = 1.0
        s = toeplitz(a).with_total_row()
        full = np.vstack([dense(a), np.ones((1, n))])
        x = rng.normal(size=n)
        np.testing.assert_allclose(s.apply(x), full @ x, rtol=1e-10, atol=1e-10)
        xs = rng.normal(size=(n, 4))
        np.testing.assert_allclose(s.apply(xs), full @ xs, rtol=1e-10, atol=1e-10)
        us = rng.normal(size=(n + 1, 3))
        np.testing.assert_allclose(s.rmatvec(us), full.T @ us, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(s.rmatvec(us[:, 0]), full.T @ us[:, 0], rtol=1e-10,
                                   atol=1e-10)
        c = well_conditioned(rng, n)  # random normal a would make A^-1 astronomically large
        np.testing.assert_allclose(toeplitz(c).solve(dense(c) @ xs), xs, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ power-series inverse
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 64), seed=st.integers(0, 2**31))
def test_series_inverse_is_dense_inverse(n, seed):
    a = well_conditioned(np.random.default_rng(seed), n)
    np.testing.assert_allclose(series_inverse(a), np.linalg.inv(dense(a))[:, 0],
                               rtol=1e-10, atol=1e-12)


def test_series_inverse_recurrence_at_3000():
    # b_k = -(1/a_0) sum_{j=1..k} a_j b_{k-j}: the O(n^2) recurrence, independent
    a = well_conditioned(np.random.default_rng(3), 3000)
    b = np.zeros(a.size)
    b[0] = 1.0 / a[0]
    for k in range(1, a.size):
        b[k] = -(a[1:k + 1] @ b[k - 1::-1]) / a[0]
    np.testing.assert_allclose(series_inverse(a), b, rtol=1e-9, atol=1e-13)


def test_series_inverse_closed_forms():
    n = 1 << 16
    np.testing.assert_allclose(series_inverse(np.ones(n))[:3], [1.0, -1.0, 0.0])
    assert np.all(series_inverse(np.ones(n))[2:] == pytest.approx(0.0, abs=1e-12))
    # 1 / (1 - z)^(-1/2) = (1 - z)^(1/2): coefficients -c_k / (2k - 1), k >= 1
    k = np.arange(n, dtype=float)
    c = np.exp(np.array([math.lgamma(2 * j + 1) - 2 * math.lgamma(j + 1) for j in range(n)])
               - k * math.log(4.0))
    expect = np.where(k == 0, 1.0, -c / (2 * k - 1))
    # FFT products: absolute rounding ~ 1e-16 ||c||_1 ||b||_1 log n (~2e-12 seen), relative
    # to b_0 = 1; the tail coefficients are ~1e-8, so the bound is absolute
    np.testing.assert_allclose(series_inverse(c), expect, rtol=1e-9, atol=2e-11)


# ------------------------------------------------------------------ sensitivities
@pytest.mark.parametrize("n", [2, 3, 5, 7])
@pytest.mark.parametrize("model", ["swap", "add_remove"])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("kind", ["general", "monotone_up", "monotone_down", "signed"])
def test_sensitivity_brute_force(n, model, p, kind):
    rng = np.random.default_rng(n * 7 + p)
    a = {"general": rng.normal(size=n), "monotone_up": np.sort(rng.normal(size=n)),
         "monotone_down": np.sort(rng.normal(size=n))[::-1],
         "signed": rng.choice([-1.0, 1.0], n) * rng.random(n)}[kind]
    a[0] = a[0] if a[0] != 0 else 1.0
    s = toeplitz(a)
    w = np.full(n, 0.7)
    assert s.sensitivity(w, model, p) == pytest.approx(brute_loss(dense(a), w, model, p),
                                                       rel=1e-12)
    tot = s.with_total_row()
    wt = np.append(w, 0.4)
    full = np.vstack([dense(a), np.ones((1, n))])
    assert tot.sensitivity(wt, model, p) == pytest.approx(brute_loss(full, wt, model, p),
                                                          rel=1e-12)
    wr = rng.random(n)  # non-uniform: generic search on the (small) matrix
    assert s.sensitivity(wr, model, p) == pytest.approx(brute_loss(dense(a), wr, model, p),
                                                        rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**31),
       shape=st.sampled_from(["normal", "sparse", "increasing", "decreasing", "constant"]),
       model=st.sampled_from(["swap", "add_remove"]), p=st.sampled_from([1, 2]),
       totals=st.integers(0, 2))
def test_sensitivity_equals_generic(n, seed, shape, model, p, totals):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    if shape == "sparse":
        a[rng.random(n) < 0.6] = 0.0
    elif shape == "increasing":
        a = np.sort(a)
    elif shape == "decreasing":
        a = np.sort(a)[::-1]
    elif shape == "constant":
        a = np.full(n, -1.5)
    a[0] = a[0] if a[0] != 0 else 0.3
    s = toeplitz(a)
    for _ in range(totals):
        s = s.with_total_row()
    w = np.concatenate([np.full(n, rng.uniform(0.1, 2.0)), rng.random(totals)])
    generic = Strategy(s.matrix, s.levels)
    assert s.sensitivity(w, model, p) == pytest.approx(generic.sensitivity(w, model, p),
                                                       rel=1e-12, abs=1e-12)
    for lvl in (0, 1):
        assert s.level_sensitivity(lvl, model, p) == pytest.approx(
            generic.level_sensitivity(lvl, model, p), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("model", ["swap", "add_remove"])
@pytest.mark.parametrize("p", [1, 2])
def test_sensitivity_equals_generic_at_300(model, p):
    rng = np.random.default_rng(11)
    for a in (rng.normal(size=300), np.sort(rng.random(300))[::-1] + 0.5):
        w = np.full(300, 1.7)
        assert toeplitz(a).sensitivity(w, model, p) == pytest.approx(
            Strategy(dense(a)).sensitivity(w, model, p), rel=1e-12)


def test_l2_swap_fft_path_equals_direct_sums():
    # n > 4096 uses the FFT autocorrelation: compare with max_D ||col_0 - col_D||^2 summed
    rng = np.random.default_rng(5)
    n = 5000
    a = rng.normal(size=n)
    s2 = np.concatenate([[0.0], np.cumsum(a * a)])
    best = max(s2[d] + float(np.sum((a[d:] - a[:n - d]) ** 2)) for d in range(1, n))
    assert toeplitz_swap_sensitivity(a, 2) == pytest.approx(math.sqrt(best), rel=1e-12)
    s1 = np.concatenate([[0.0], np.cumsum(np.abs(a))])
    best1 = max(s1[d] + float(np.sum(np.abs(a[d:] - a[:n - d]))) for d in range(1, n))
    assert toeplitz_swap_sensitivity(a, 1) == pytest.approx(best1, rel=1e-12)


def test_refusals_instead_of_approximations():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(1 << 15) + 1)
    a[0] = 1.0
    with pytest.raises(ValueError, match="O\\(n\\^2\\)"):
        toeplitz(a).sensitivity(np.ones(a.size), "swap", 1)
    assert toeplitz(a).sensitivity(np.ones(a.size), "swap", 2) > 0  # FFT: fine
    w = np.ones(a.size)
    w[3] = 0.5  # non-uniform weights need the explicit matrix
    with pytest.raises(ValueError, match="8192"):
        toeplitz(a).sensitivity(w, "add_remove", 2)


# ------------------------------------------------------------------ exact error
KINDS = ["prefix", "identity", "all_range", "total"]


def _mechanism(a, noise, neighbours, public):
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    if neighbours == "add_remove":
        kw["public_total"] = public
    return Mechanism(toeplitz(a), noise=noise, neighbours=neighbours, **kw)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 64), seed=st.integers(0, 2**31),
       noise=st.sampled_from(["laplace", "gaussian"]),
       setting=st.sampled_from([("add_remove", False), ("add_remove", True), ("swap", True)]),
       monotone=st.booleans())
def test_error_equals_dense_gls(n, seed, noise, setting, monotone):
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, n, monotone)
    mech = _mechanism(a, noise, *setting)
    assert is_toeplitz_mechanism(mech)
    iv = np.sort(rng.integers(0, n, (40, 2)), axis=1)
    for kind in KINDS + ["ranges"]:
        wl = workloads.ranges(n, iv) if kind == "ranges" else getattr(workloads, kind)(n)
        for per_query in (False, True):
            got = np.asarray(expected_error(wl, mech, per_query=per_query))
            ref = np.asarray(expected_error(wl, mech, per_query=per_query, method="dense"))
            # absolute slack for the public total (exactly 0 here, rounding in the dense GLS)
            atol = 1e-9 * (float(np.max(np.abs(ref))) + n * mech.variances[0])
            np.testing.assert_allclose(got, ref, rtol=1e-8, atol=atol)


@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
def test_error_equals_explicit_covariance(neighbours):
    # Cov = v A^-1 A^-T, and with N public Cov - Cov 1 1' Cov / (1' Cov 1), by dense algebra
    n = 30
    a = well_conditioned(np.random.default_rng(8), n)
    mech = _mechanism(a, "gaussian", neighbours, neighbours == "swap")
    ai = np.linalg.inv(dense(a))
    cov = mech.variances[0] * ai @ ai.T
    if neighbours == "swap":
        c1 = cov.sum(axis=1)
        cov = cov - np.outer(c1, c1) / c1.sum()
    for kind in ("prefix", "identity", "all_range"):
        w = getattr(workloads, kind)(n).dense()
        ref = np.diag(w @ cov @ w.T)
        np.testing.assert_allclose(expected_error(getattr(workloads, kind)(n), mech,
                                                  per_query=True), ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
def test_custom_ranges_head_and_tail_sums(neighbours):
    # ranges near the left end sum R(D, j) over the head, near the right end over the tail
    n = 700
    mech = _mechanism(np.sort(np.random.default_rng(4).random(n))[::-1] + 0.2, "laplace",
                      neighbours, neighbours == "swap")
    iv = [(0, 0), (0, n - 1), (1, n - 2), (3, 10), (n - 10, n - 1), (n - 1, n - 1), (300, 400),
          (250, 650), (5, 690), (0, 350), (350, n - 1)]
    wl = workloads.ranges(n, iv)
    ref = expected_error(wl, mech, per_query=True, method="dense")
    np.testing.assert_allclose(expected_error(wl, mech, per_query=True), ref, rtol=1e-9,
                               atol=1e-12 * ref.max())  # the full range is exact under swap


def test_noisy_total_row_on_a_general_toeplitz_strategy():
    """A noisy total row is structured too (Sherman-Morrison step), for any coefficients."""
    n = 20
    a = well_conditioned(np.random.default_rng(2), n)
    mech = Mechanism(toeplitz(a).with_total_row(), rho=0.5, noise="gaussian",
                     neighbours="add_remove", public_total=False)
    assert is_toeplitz_mechanism(mech)
    got = expected_error(workloads.prefix(n), mech)
    assert got == pytest.approx(expected_error(workloads.prefix(n), mech, method="dense"),
                                rel=1e-9)


def test_all_range_per_query_refused_when_too_many():
    mech = Mechanism(sqrt_factorization(14143), rho=0.5, noise="gaussian",
                     neighbours="add_remove")
    with pytest.raises(ValueError, match="queries"):
        expected_error(workloads.all_range(14143), mech, per_query=True)


# ------------------------------------------------------------------ BLUE
@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 64), seed=st.integers(0, 2**31),
       setting=st.sampled_from([("add_remove", False), ("add_remove", True), ("swap", True)]),
       noise=st.sampled_from(["laplace", "gaussian"]))
def test_blue_equals_generic_gls(n, seed, setting, noise):
    rng = np.random.default_rng(seed)
    mech = _mechanism(well_conditioned(rng, n), noise, *setting)
    h = rng.poisson(5, n)
    y = np.stack([mech.measure(h, rng) for _ in range(3)])
    got = blue(mech, y)
    ref = blue(mech, y, method="dense")
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())
    np.testing.assert_allclose(blue(mech, y[0]), ref[0], rtol=1e-8,
                               atol=1e-8 * np.abs(ref).max())
    if setting[1]:
        np.testing.assert_allclose(got.sum(axis=1), h.sum(), rtol=1e-12)


def test_toeplitz_method_refused_elsewhere():
    from dptree_opt.strategies import binary_tree

    mech = Mechanism(binary_tree(4), epsilon=1.0, neighbours="add_remove")  # not Toeplitz
    with pytest.raises(ValueError, match="Toeplitz"):
        blue(mech, np.zeros(mech.released.n_rows), method="toeplitz")


def test_monte_carlo_at_2_16():
    n = 1 << 16
    mech = Mechanism(sqrt_factorization(n), rho=0.5, noise="gaussian", neighbours="swap")
    exact = expected_error(workloads.prefix(n), mech)
    mc = monte_carlo_error(workloads.prefix(n), mech, trials=200, rng=7)
    assert mc.within(exact, 4.0)


# ------------------------------------------------------------------ MATH.md section 7
def _sqrt_mean_prefix(n):
    """S2(n) sum_k (n - k) c_k^2 / n, c_k = C(2k, k)/4^k by lgamma (independent)."""
    k = np.arange(n, dtype=float)
    from scipy.special import gammaln
    c2 = np.exp(2 * (gammaln(2 * k + 1) - 2 * gammaln(k + 1) - k * math.log(4.0)))
    return float(c2.sum() * ((n - k) @ c2) / n)


@pytest.mark.parametrize("n, value", [(1 << 10, 9.6708), (1 << 16, 19.6643),
                                      (1 << 20, 28.2753)])
def test_sqrt_factorization_numbers(n, value):
    assert _sqrt_mean_prefix(n) == pytest.approx(value, abs=5e-5)
    mech = Mechanism(sqrt_factorization(n), rho=0.5, noise="gaussian", neighbours="add_remove")
    got = expected_error(workloads.prefix(n), mech) / n
    assert got == pytest.approx(_sqrt_mean_prefix(n), rel=1e-9)
    assert got == pytest.approx(value, abs=5e-5)


def test_sqrt_factorization_is_toeplitz():
    s = sqrt_factorization(1 << 20)
    assert isinstance(s, SqrtFactorization) and isinstance(s, ToeplitzStrategy)
    assert isinstance(s.with_total_row(), SqrtFactorization)
    assert s.name == "sqrt_factorization"
    # the inverse of L is the square root of the first difference: L^-1 L^-1 = P^-1
    b = s.inverse_coefficients()[:5]
    np.testing.assert_allclose(np.convolve(b, b)[:5], [1.0, -1.0, 0.0, 0.0, 0.0], atol=1e-15)


@pytest.mark.parametrize("n_totals,budgets,noise", [
    (1, [0.2, 0.3], "gaussian"), (2, [0.15, 0.35], "gaussian"), (1, [0.0, 0.5], "gaussian"),
    (1, [0.4, 0.6], "laplace"),
])
def test_noisy_total_rows_match_dense_gls(n_totals, budgets, noise):
    """Noisy total rows (add/remove, the total level funded): the Sherman-Morrison step
    x - h (1'x - y_N) / (q + v_N / v) and its rank-one covariance equal the dense GLS; an
    unfunded total level (budget 0) is the private case."""
    from dptree_opt.strategies.toeplitz import ToeplitzStrategy

    n = 48
    a = sqrt_factorization(n).coefficients
    kw = {"rho": 0.5} if noise == "gaussian" else {"epsilon": 1.0}
    mech = Mechanism(ToeplitzStrategy(a, n_totals=n_totals), noise=noise,
                     neighbours="add_remove", level_budgets=budgets, **kw)
    assert is_toeplitz_mechanism(mech)
    iv = [(0, 5), (3, 40), (10, 10), (0, n - 1)]
    for wl in (workloads.prefix(n), workloads.identity(n), workloads.all_range(n),
               workloads.total(n), workloads.ranges(n, iv)):
        per = wl.kind != "all_range"
        fast = np.atleast_1d(expected_error(wl, mech, per_query=per))
        dense = np.atleast_1d(expected_error(wl, mech, per_query=per, method="dense"))
        np.testing.assert_allclose(fast, dense, rtol=1e-9)
    y = np.random.default_rng(5).normal(size=(4, mech.released.n_rows)) * 3
    np.testing.assert_allclose(blue(mech, y), blue(mech, y, method="dense"), atol=1e-9)


# ------------------------------------------------------------------ row scalings D T(a)
@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), st.integers(0, 10**6))
def test_row_scaled_sensitivities_and_products_equal_the_matrix(n, seed):
    """ScaledToeplitzStrategy: A x, A' u, A^-1 y and the exact sensitivities (both neighbour
    models, l1 and l2, equal weights and with a total row) equal the explicit matrix's."""
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, n)
    d = rng.uniform(0.3, 3.0, n)
    strat = toeplitz(a, row_scale=d)
    generic = Strategy(strat.matrix, np.ones(n, dtype=np.int32))
    x = rng.normal(size=(n, 2))
    np.testing.assert_allclose(strat.apply(x), generic.apply(x), atol=1e-9)
    np.testing.assert_allclose(strat.rmatvec(x), strat.matrix.T @ x, atol=1e-9)
    np.testing.assert_allclose(strat.solve(strat.apply(x)), x, atol=1e-7)
    for nb in ("add_remove", "swap"):
        for p in (1, 2):
            assert strat.sensitivity(np.ones(n), nb, p) == pytest.approx(
                generic.sensitivity(np.ones(n), nb, p), rel=1e-9)
    withtot = strat.with_total_row()
    w = np.append(np.ones(n), 0.5)
    gt = Strategy(withtot.matrix, np.append(np.ones(n, dtype=np.int32), 0))
    assert withtot.sensitivity(w, "add_remove", 1) == pytest.approx(
        gt.sensitivity(w, "add_remove", 1), rel=1e-9)


@pytest.mark.parametrize("neighbours,public", [("add_remove", None), ("swap", None),
                                               ("add_remove", True)])
def test_row_scaled_errors_and_blue_match_dense_gls(neighbours, public):
    n = 48
    rng = np.random.default_rng(9)
    d = rng.uniform(0.5, 2.0, n)
    mech = Mechanism(toeplitz(sqrt_factorization(n).coefficients, row_scale=d), rho=0.5,
                     noise="gaussian", neighbours=neighbours, public_total=public)
    assert is_toeplitz_mechanism(mech)
    for wl in (workloads.prefix(n), workloads.identity(n), workloads.all_range(n),
               workloads.total(n), workloads.ranges(n, [(0, 4), (5, 30)])):
        for per in (False, True):
            fast = np.atleast_1d(expected_error(wl, mech, per_query=per))
            dense = np.atleast_1d(expected_error(wl, mech, per_query=per, method="dense"))
            np.testing.assert_allclose(fast, dense, rtol=1e-9, atol=1e-9)
    y = rng.normal(size=(3, mech.released.n_rows)) * 4
    np.testing.assert_allclose(blue(mech, y), blue(mech, y, method="dense"), atol=1e-9)


def test_row_scaled_input_checks_and_swap_limit():
    with pytest.raises(ValueError, match="row_scale"):
        toeplitz([1.0, 0.5], row_scale=[1.0])
    with pytest.raises(ValueError, match="row_scale"):
        toeplitz([1.0, 0.5], row_scale=[1.0, 0.0])
    n = 8200
    strat = toeplitz(sqrt_factorization(n).coefficients, row_scale=np.linspace(1, 2, n))
    mech = Mechanism(strat, rho=0.5, noise="gaussian", neighbours="add_remove")
    assert expected_error(workloads.prefix(n), mech) > 0     # structured, no matrix
    with pytest.raises(ValueError, match="swap sensitivity of a row-scaled"):
        Mechanism(strat, rho=0.5, noise="gaussian", neighbours="swap")
