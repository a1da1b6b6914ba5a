"""The tree fast paths through the public API agree with the generic (dense) solver."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt import workloads as W


@st.composite
def tree_mechanisms(draw, max_leaves=600):
    ks = draw(st.lists(st.integers(2, 7), min_size=1, max_size=5)
              .filter(lambda k: np.prod(k) <= max_leaves))
    n = int(np.prod(ks))
    nb = draw(st.sampled_from(["swap", "add_remove"]))
    public = draw(st.sampled_from([None, True])) if nb == "add_remove" else None
    noise = draw(st.sampled_from(["laplace", "gaussian"]))
    n_levels = len(ks) + (nb == "add_remove" and not public)
    raw = np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=n_levels, max_size=n_levels)))
    total = 1.3
    split = raw / raw.sum() * total
    split[-1] = total - split[:-1].sum()
    budget = {"epsilon": total} if noise == "laplace" else {"rho": total}
    return dp.Mechanism(S.tree(n, ks), neighbours=nb, public_total=public, noise=noise,
                        level_budgets=list(split), **budget)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mech=tree_mechanisms(), seed=st.integers(0, 10**6))
def test_tree_blue_equals_generic(mech, seed):
    rng = np.random.default_rng(seed)
    n = mech.n_bins
    y = mech.measure(rng.poisson(5, n), rng)
    fast = dp.blue(mech, y)
    generic = dp.blue(mech, y, method="generic")
    np.testing.assert_allclose(fast, generic, atol=1e-8 * (1 + np.abs(generic).max()))
    # node estimates and their variances = A x_hat and diag(A Cov A')
    est = dp.tree_estimates(mech, y)
    a = mech.released.matrix
    np.testing.assert_allclose(est.efficient, a @ generic, atol=1e-8 * (1 + np.abs(generic).max()))
    cov = dp.blue_covariance(mech)
    node_var = np.einsum("ij,ij->i", (a @ cov), a.toarray())
    np.testing.assert_allclose(est.efficient_var, node_var, rtol=1e-9, atol=1e-12 * node_var.max())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mech=tree_mechanisms(max_leaves=400))
def test_structured_error_equals_dense(mech):
    """Structured exact error (O(h) / O(K)) = trace(W Cov W') from the dense GLS covariance,
    BLUE and refined, prefix / identity / all-range, totals and per query (1e-9 relative)."""
    n = mech.n_bins
    for wl in (W.prefix(n), W.identity(n), W.all_range(n)):
        for est in ("blue", "refined"):
            fast = dp.expected_error(wl, mech, est, per_query=True)
            dense = dp.expected_error(wl, mech, est, per_query=True, method="dense")
            np.testing.assert_allclose(fast, dense, rtol=1e-9, atol=1e-12 * dense.max())
            assert dp.expected_error(wl, mech, est) == pytest.approx(dense.sum(), rel=1e-9)


def test_refined_between_blue_and_covering():
    """The refined estimator combines two unbiased estimates: never worse than the covering
    sums, never better than the BLUE, per prefix."""
    for ks in ((2,) * 8, (4, 4, 4, 4), (17, 17)):
        n = int(np.prod(ks))
        mech = dp.Mechanism(S.tree(n, list(ks)), epsilon=1.0)
        cdf = W.prefix(n)
        cov = dp.expected_error(cdf, mech, "covering", per_query=True)
        ref = dp.expected_error(cdf, mech, "refined", per_query=True)
        blue = dp.expected_error(cdf, mech, "blue", per_query=True)
        assert np.all(blue <= ref * (1 + 1e-12)) and np.all(ref <= cov * (1 + 1e-12))
        assert blue.sum() < ref.sum() < cov.sum()


def test_refined_estimates_are_unbiased_and_public():
    mech = dp.Mechanism(S.tree(64, [4, 16]), epsilon=1.0)
    h = np.arange(64) % 7
    exact = mech.released.apply(h)
    np.testing.assert_allclose(dp.refined_cdf(mech, exact), np.cumsum(h), atol=1e-9)
    with pytest.raises(ValueError, match="level-uniform"):
        dp.refined_cdf(dp.Mechanism(S.histogram(8), epsilon=1.0), np.zeros(9))


@pytest.mark.parametrize("estimator,workload", [("blue", W.prefix(256)),
                                                ("refined", W.prefix(256)),
                                                ("blue", W.all_range(64)),
                                                ("refined", W.identity(64))])
def test_tree_monte_carlo_within_4_se(estimator, workload):
    """Monte Carlo through the tree fast paths agrees with the structured exact error
    (fixed seed; a correct implementation fails with probability ~6e-5)."""
    n = workload.n_bins
    mech = dp.Mechanism(S.tree(n, 4), epsilon=0.5, neighbours="add_remove")
    exact = dp.expected_error(workload, mech, estimator)
    result = dp.monte_carlo_error(workload, mech, estimator, trials=3000, rng=2024)
    assert result.within(exact, 4.0), (result, exact)


def test_honaker_figure_4_setting():
    """[HON] Sec. 4: 10,000 binary trees with 16 leaves, Gaussian noise sd 3 on every node,
    N known. Per-depth MSE of t^* matches the exact variance (4 standard errors), the top
    ratio is about 1/4 and the leaf ratio about 0.6 (MATH.md section 2)."""
    # sigma = 3 on each of the 4 noisy levels: swap l2 sensitivity sqrt(2) -> rho_l = 1/9
    mech = dp.Mechanism(S.binary_tree(16), rho=4 / 9, noise="gaussian", neighbours="swap")
    assert mech.level_variances[1] == pytest.approx(9.0)
    rng = np.random.default_rng(4)
    h = rng.poisson(10, 16)
    truth = mech.released.apply(h)
    y = truth + mech.sample_noise(rng, size=10_000)
    est = dp.tree_estimates(mech, y)
    sq = (est.efficient - truth) ** 2
    depth = mech.released.levels
    for d in range(1, 5):
        per_node = sq[:, depth == d].mean(axis=1)  # node-averaged per tree (independent trees)
        exact = est.efficient_var[depth == d].mean()
        se = per_node.std(ddof=1) / np.sqrt(per_node.size)
        assert abs(per_node.mean() - exact) < 4 * se
    ratio = est.efficient_var / 9.0
    assert ratio[depth == 1].mean() == pytest.approx(4 / 15, abs=1e-12)  # ~ 1/4 at the top
    assert ratio[depth == 4].mean() == pytest.approx(0.6, abs=0.01)  # ~ 0.6 at the leaves
