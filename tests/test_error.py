"""Exact errors against the papers' closed forms, MATH.md anchor numbers and Monte Carlo."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import closed_forms as cf
from dptree_opt import strategies as S
from dptree_opt import workloads as W


@settings(max_examples=60, deadline=None)
@given(ks=st.lists(st.integers(1, 7), min_size=1, max_size=5).filter(lambda k: np.prod(k) <= 5000),
       raw=st.lists(st.floats(0.05, 1.0), min_size=5, max_size=5),
       eps=st.floats(0.1, 5.0))
def test_covering_error_equals_theorem_iv_1(ks, raw, eps):
    """[RTS] Theorem IV.1: (4K / N^2) sum_l (k_l - 1) / eps_l^2, random branching and budgets."""
    n = int(np.prod(ks))
    split = np.array(raw[: len(ks)]) / np.sum(raw[: len(ks)]) * eps
    split[-1] = eps - split[:-1].sum()
    mech = dp.Mechanism(S.tree(n, ks), epsilon=eps, level_budgets=list(split), neighbours="swap")
    expected = 4 * n * np.sum((np.array(ks) - 1) / split**2)  # Thm IV.1 with N = 1
    assert dp.expected_error(W.prefix(n), mech, "covering") == pytest.approx(expected, rel=1e-10)
    assert cf.theorem_iv_1(ks, split) == pytest.approx(expected, rel=1e-12)
    assert cf.theorem_iv_1(ks, split, n_records=10) == pytest.approx(expected / 100, rel=1e-12)


@pytest.mark.parametrize("ks", [(2, 2, 2, 2), (4, 8), (3, 1, 5)])
def test_covering_error_gaussian_analogue(ks):
    """Gaussian analogue of Thm IV.1: (K / 2) sum_l (k_l - 1) sigma_l^2, sigma_l^2 = 1/rho_l."""
    n = int(np.prod(ks))
    rho = 0.5
    mech = dp.Mechanism(S.tree(n, ks), rho=rho, noise="gaussian", neighbours="swap")
    rho_l = rho / len(ks)
    assert mech.level_variances[1] == pytest.approx(1 / rho_l)  # l2 sensitivity sqrt(2), swap
    expected = 0.5 * n * sum(k - 1 for k in ks) / rho_l
    assert dp.expected_error(W.prefix(n), mech, "covering") == pytest.approx(expected, rel=1e-12)
    assert cf.theorem_iv_1_gaussian(ks, [rho_l] * len(ks)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [2, 5, 64, 300])
@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_lemmas_iii_1_and_iii_2(n, eps):
    """[RTS] Lemma III.1 (range: 2 (K-1)^3 / eps^2) and III.2 (histogram: 4 K (K-1) / eps^2)."""
    rng_mech = dp.Mechanism(S.prefix_sums(n), epsilon=eps, neighbours="swap")
    hist_mech = dp.Mechanism(S.histogram(n), epsilon=eps, neighbours="swap")
    cdf = W.prefix(n)
    assert dp.expected_error(cdf, rng_mech, "covering") == pytest.approx(2 * (n - 1) ** 3 / eps**2)
    assert dp.expected_error(cdf, hist_mech, "covering") == pytest.approx(4 * n * (n - 1) / eps**2)
    assert cf.lemma_iii_1(n, eps) == pytest.approx(2 * (n - 1) ** 3 / eps**2)
    assert cf.lemma_iii_2(n, eps) == pytest.approx(4 * n * (n - 1) / eps**2)
    # the range strategy is square and invertible given N: its BLUE is the covering estimate
    assert dp.expected_error(cdf, rng_mech, "blue") == pytest.approx(2 * (n - 1) ** 3 / eps**2,
                                                                      rel=1e-9)
    # the histogram's BLUE uses N: each prefix C_t = t bins vs N - (K - t) bins -> the exact
    # variance of the constrained mean is 8/eps^2 * t (K - t) / K
    t = np.arange(1, n + 1)
    blue_hist = np.sum(8 / eps**2 * t * (n - t) / n)
    assert dp.expected_error(cdf, hist_mech, "blue") == pytest.approx(blue_hist, rel=1e-9,
                                                                       abs=1e-9)


def test_histogram_beats_range_from_k_4():
    """[RTS] Sec. III: the histogram beats the range mechanism for K >= 4."""
    for k in (2, 3, 4, 5, 10):
        assert (cf.lemma_iii_2(k, 1.0) < cf.lemma_iii_1(k, 1.0)) == (k >= 4)


def test_anchor_binary_tree_covering_add_remove():
    """MATH.md section 6: binary tree, covering sums, root included, eps = 1, add/remove,
    mean prefix MSE 1210 (n = 2^10) and 4624 (n = 2^16), to the printed precision."""
    for n, anchor in ((2**10, 1210), (2**16, 4624)):
        mech = dp.Mechanism(S.binary_tree(n), epsilon=1.0, neighbours="add_remove")
        mean = dp.expected_error(W.prefix(n), mech, "covering") / n
        assert round(mean) == anchor


def test_anchor_binary_tree_ols():
    """MATH.md section 6: binary tree + OLS (equal variances, root noised), n = 2^10: 298.9."""
    mech = dp.Mechanism(S.binary_tree(1024), epsilon=1.0, neighbours="add_remove")
    assert len(set(mech.level_variances.values())) == 1  # OLS = BLUE with equal variances
    mean = dp.expected_error(W.prefix(1024), mech, "blue") / 1024
    assert round(mean, 1) == 298.9


def test_anchor_google_default():
    """MATH.md section 6: Google's default (b = 16, root not noised, covering sums) at
    n = 2^10 = 297.1: the 16-ary tree over 16^3 bins, the first 1024 prefixes."""
    mech = dp.Mechanism(S.tree(4096, 16), epsilon=1.0, neighbours="add_remove",
                        level_budgets=[0.0, 1 / 3, 1 / 3, 1 / 3])
    per_query = dp.expected_error(W.prefix(4096), mech, "covering", per_query=True)
    assert round(per_query[:1024].mean(), 1) == 297.1


def test_per_query_sums_to_total():
    mech = dp.Mechanism(S.tree(64, [4, 16]), epsilon=1.0, neighbours="add_remove")
    for wl in (W.prefix(64), W.identity(64), W.all_range(64), W.total(64),
               W.ranges(64, [(0, 5), (3, 3), (10, 63)])):
        per = dp.expected_error(wl, mech, per_query=True)
        assert per.shape == (wl.n_queries,)
        assert per.sum() == pytest.approx(dp.expected_error(wl, mech), rel=1e-10)
        cov = dp.blue_covariance(mech)
        dense = wl.dense()
        np.testing.assert_allclose(per, np.einsum("qi,ij,qj->q", dense, cov, dense), rtol=1e-9)


def test_blue_never_worse_than_covering():
    """The BLUE is the minimum-variance unbiased linear estimator: per-prefix variances are
    at most the covering ones."""
    for strat in (S.binary_tree(64), S.tree(64, [4, 4, 4]), S.histogram(20), S.prefix_sums(20)):
        for nb in ("swap", "add_remove"):
            mech = dp.Mechanism(strat, epsilon=1.0, neighbours=nb)
            cdf = W.prefix(strat.n_bins)
            blue = dp.expected_error(cdf, mech, "blue", per_query=True)
            cov = dp.expected_error(cdf, mech, "covering", per_query=True)
            assert np.all(blue <= cov * (1 + 1e-9) + 1e-9)


MC_CASES = [
    (S.tree(64, [4, 4, 4]), dict(epsilon=1.0), "blue", W.prefix(64)),
    (S.tree(64, [4, 4, 4]), dict(epsilon=1.0), "covering", W.prefix(64)),
    (S.binary_tree(32), dict(epsilon=0.5, neighbours="add_remove"), "blue", W.all_range(32)),
    (S.tree(27, 3), dict(rho=0.2, noise="gaussian", neighbours="add_remove"), "blue",
     W.identity(27)),
    (S.histogram(30), dict(epsilon=2.0), "covering", W.prefix(30)),
    (S.tree(64, [4, 4, 4]), dict(epsilon=1.0), "covering", W.identity(64)),
    (S.binary_tree(32), dict(epsilon=0.5, neighbours="add_remove"), "covering", W.all_range(32)),
    (S.prefix_sums(16), dict(epsilon=1.0, neighbours="add_remove"), "blue", W.ranges(16, [(2, 9)])),
]


@pytest.mark.parametrize("strat,kwargs,estimator,workload", MC_CASES)
def test_monte_carlo_agrees_with_exact(strat, kwargs, estimator, workload):
    """Simulated mean squared error within 4 standard errors of the exact value (fixed seed;
    a correct implementation fails with probability ~6e-5 per case)."""
    mech = dp.Mechanism(strat, **kwargs)
    exact = dp.expected_error(workload, mech, estimator)
    result = dp.monte_carlo_error(workload, mech, estimator, trials=4000, rng=12345)
    assert result.within(exact, 4.0), (result, exact)
    assert result.std_error < 0.1 * exact  # the check has power: SE is a few % of the value


def test_monte_carlo_detects_a_wrong_value():
    """The 4-SE check is not vacuous: a 20% error is rejected."""
    mech = dp.Mechanism(S.tree(64, [4, 4, 4]), epsilon=1.0)
    exact = dp.expected_error(W.prefix(64), mech)
    result = dp.monte_carlo_error(W.prefix(64), mech, trials=4000, rng=7)
    assert not result.within(1.2 * exact, 4.0)


@pytest.mark.parametrize("strat,kw,K", [
    (S.tree(64, [4, 4, 4]), dict(epsilon=1.0), 64),
    (S.tree(81, [3, 3, 3, 3]), dict(epsilon=1.0, neighbours="add_remove"), 81),
    (S.tree(81, [3, 3, 3, 3]), dict(epsilon=1.0, neighbours="add_remove"), 70),   # padded use
    (S.tree(60, [3, 4, 5]), dict(rho=0.3, noise="gaussian", neighbours="swap",
                                 level_budgets=[0.1, 0.1, 0.1]), 60),
    (S.histogram(20), dict(epsilon=1.0, neighbours="add_remove"), 20),
])
def test_covering_identity_and_all_range_from_prefix_differences(strat, kw, K):
    """The covering estimator answers bins and ranges by C_hi - C_lo: its structured
    identity / all-range errors equal the covariance of the estimator's own linear map
    (covering_cdf applied to unit answers)."""
    from dptree_opt.engines.covering import covering_cdf, covering_moments

    mech = dp.Mechanism(strat, **kw)
    rows = mech.released.n_rows
    lin = covering_cdf(mech, np.eye(rows)).T          # (K', rows): C_hat = lin @ y
    v = np.where(np.any(lin != 0, axis=0), mech.variances, 0.0)
    cov_c = (lin * v) @ lin.T                          # Cov of C_1..C_K'
    z = np.zeros((cov_c.shape[0] + 1,) * 2)
    z[1:, 1:] = cov_c
    zk = z[:K + 1, :K + 1]
    dz = np.diag(zk)
    mom = covering_moments(mech, K)
    np.testing.assert_allclose(mom["identity"], dz[1:] + dz[:-1] - 2 * np.diag(zk, 1),
                               rtol=1e-12, atol=1e-9)
    assert mom["all_range_total"] == pytest.approx((K + 1) * dz.sum() - zk.sum(), rel=1e-12)
    if K == strat.n_bins:
        per = dp.expected_error(W.all_range(K), mech, "covering", per_query=True)
        assert per.sum() == pytest.approx(mom["all_range_total"], rel=1e-10)
        assert dp.expected_error(W.identity(K), mech, "covering") == pytest.approx(
            mom["identity"].sum(), rel=1e-12)
