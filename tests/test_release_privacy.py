"""Privacy of a release: secure sampler only, described noise = added noise, e^eps holds.

Statistical tests state their false-alarm rate; all seeds are fixed where numpy is used
(OpenDP's sampler uses OS randomness and cannot be seeded: its tests rely on the bounds)."""

import math
from itertools import combinations

import numpy as np
import pytest
from scipy.stats import beta

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt.mechanism import Mechanism, discrete_variance
from dptree_opt.data_release import release
from dptree_opt.data_release import secure_noise as sn

ALPHA = 1e-3  # family-wise false-alarm rate of each statistical test below


# ------------------------------------------------------------------ no simulation noise
def _forbid_simulation(monkeypatch):
    """Make every source of numpy noise raise. A release may use a numpy Generator only with a
    fixed integer seed, for public data-independent computations (the design search's
    multistart, the quantile tests' choice of prefixes): never fresh entropy, never the
    legacy global sampler, never the mechanism's simulation noise."""
    def boom(*args, **kwargs):
        raise AssertionError("simulation randomness used by a release")

    real_default_rng = np.random.default_rng

    def seeded_only(seed=None, *args, **kwargs):
        if type(seed) is bool or not hasattr(seed, "__index__"):
            raise AssertionError(f"unseeded randomness in a release (seed {seed!r})")
        return real_default_rng(seed, *args, **kwargs)

    for name in ("seed", "random", "rand", "randn",
                 "randint", "laplace", "normal", "standard_normal", "geometric", "uniform",
                 "choice", "exponential", "binomial", "poisson"):
        monkeypatch.setattr(np.random, name, boom)
    monkeypatch.setattr(np.random, "default_rng", seeded_only)
    monkeypatch.setattr(Mechanism, "measure", boom)
    monkeypatch.setattr(Mechanism, "sample_noise", boom)
    monkeypatch.setattr(dp.pipeline, "private_cdf", boom)


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_release_uses_the_secure_sampler_and_never_numpy(monkeypatch, budget):
    x = np.linspace(0, 99, 500)  # made before numpy.random is disabled
    _forbid_simulation(monkeypatch)
    calls = []
    real = sn._opendp_sample

    def spy(values, **kw):
        calls.append((values.size, kw["scale"]))
        return real(values, **kw)

    monkeypatch.setattr(sn, "_opendp_sample", spy)
    r = release(x, lower=0, upper=100, bins=16, tree=[4, 4], **budget)
    mech = r.mechanism
    # one OpenDP call per noisy level (root, 4 nodes, 16 leaves under add/remove; a level
    # given no budget by the optimal split is not measured and not sampled)
    assert sorted(calls) == sorted((int(np.sum(mech.released.levels == lvl)), s)
                                   for lvl, s in mech.level_scales.items() if 0 < s < np.inf)
    measured = np.isfinite(r.measurements)  # NaN: levels given no budget (not measured)
    assert np.all(r.measurements[measured] == np.round(r.measurements[measured]))
    assert r.consistent_cdf[-1] == r.total


def test_secure_measure_refuses_continuous_mechanism_and_takes_no_rng():
    mech = dp.Mechanism(S.tree(4, [2, 2]), epsilon=1.0)
    with pytest.raises(ValueError, match="needs a discrete mechanism"):
        sn.secure_measure(mech, [1, 2, 3, 4])
    with pytest.raises(TypeError):
        sn.secure_measure(mech.discretised(), [1, 2, 3, 4], np.random.default_rng(0))


def test_exact_and_unmeasured_rows():
    # swap: the root (N) is exact; a level with budget 0 is not measured (NaN)
    mech = dp.Mechanism(S.tree(4, [2, 2]), epsilon=1.0, level_budgets=[0.0, 1.0], discrete=True,
                        neighbours="swap")
    y = sn.secure_measure(mech, [1, 2, 3, 4])
    assert y[0] == 10 and np.all(np.isnan(y[1:3])) and np.all(y[3:] == np.round(y[3:]))


def test_opendp_privacy_map_guards_the_calibration():
    """OpenDP's own map must agree with our per-level calibration; a scale too small for the
    budget is refused before any sampling."""
    with pytest.raises(ValueError, match="calibration error: OpenDP's privacy map"):
        sn._opendp_sample(np.zeros(3, dtype=np.int64), noise="laplace", scale=1.0,
                          sensitivity=2.0, budget=1.0)
    with pytest.raises(ValueError, match="calibration error"):
        sn._opendp_sample(np.zeros(3, dtype=np.int64), noise="gaussian", scale=1.0,
                          sensitivity=2.0, budget=1.0)
    out = sn._opendp_sample(np.arange(3, dtype=np.int64), noise="gaussian", scale=1.0,
                            sensitivity=math.sqrt(2.0), budget=1.0)  # rho = 2 / 2 = 1
    assert out.dtype == np.int64 and out.shape == (3,)


# ------------------------------------------------------------------ discrete variances
def _pmf(scale, noise, width=None):
    width = width or int(60 * scale + 20)
    z = np.arange(-width, width + 1, dtype=float)
    logw = -np.abs(z) / scale if noise == "laplace" else -z * z / (2 * scale * scale)
    w = np.exp(logw - logw.max())
    return z, w / w.sum()


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.5, 17.0])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_discrete_variance_formula(noise, scale):
    z, p = _pmf(scale, noise)
    assert discrete_variance(scale, noise) == pytest.approx(np.sum(z * z * p), rel=1e-10)
    cont = 2 * scale**2 if noise == "laplace" else scale**2
    assert discrete_variance(scale, noise) <= cont * (1 + 1e-12)


@pytest.mark.parametrize("noise,budget", [("laplace", {"epsilon": 9.0}),
                                          ("gaussian", {"rho": 9.375})])
def test_described_noise_is_the_noise_added(noise, budget):
    """Empirical mean of z^2 per level (z = y - A h from OpenDP) vs the described discrete
    variance v_l: |mean - v_l| <= 5 sqrt((E z^4 - v_l^2) / n_l) (CLT; false alarm ~6e-7 per
    level), for every level with >= 1000 nodes. The scales are small (1/3 and sigma = 0.4), so
    the discrete variance is about half the continuous one (~17 standard deviations away):
    the test also rejects the continuous value."""
    h = np.random.default_rng(0).poisson(20, 4096)
    mech = dp.Mechanism(S.tree(4096, [4, 1024]), neighbours="add_remove", noise=noise,
                        discrete=True, **budget)
    y = sn.secure_measure(mech, h)
    z = y - sn.exact_answers(mech, h)
    assert np.all(z == np.round(z))
    levels = mech.released.levels
    checked = 0
    for lvl, scale in mech.level_scales.items():
        zl = z[levels == lvl]
        if zl.size < 1000:
            continue
        v = mech.level_variances[lvl]
        grid, p = _pmf(scale, noise)
        sd = math.sqrt((np.sum(grid**4 * p) - v * v) / zl.size)
        assert abs(np.mean(zl**2) - v) <= 5 * sd, (lvl, np.mean(zl**2), v)
        cont = 2 * scale**2 if noise == "laplace" else scale**2
        assert abs(np.mean(zl**2) - cont) > 5 * sd  # the continuous variance is rejected
        checked += 1
    assert checked == 1


def test_opendp_discrete_laplace_has_the_exact_pmf():
    """OpenDP's samples vs the discrete Laplace pmf (chi-square over |z| <= 6 and a tail
    cell; false alarm 1e-4): this is what lets the e^eps test below use an exactly equivalent
    numpy sampler for its many draws."""
    from scipy.stats import chi2
    scale = 1.5
    n = 20000
    z = sn._opendp_sample(np.zeros(n, dtype=np.int64), noise="laplace", scale=scale,
                          sensitivity=1.0, budget=1 / scale)
    grid, p = _pmf(scale, "laplace")
    cells = np.clip(z, -7, 7) + 7
    expected = np.array([p[grid <= -7].sum()] + [p[grid == k].sum() for k in range(-6, 7)]
                        + [p[grid >= 7].sum()]) * n
    observed = np.bincount(cells, minlength=15)
    stat = np.sum((observed - expected) ** 2 / expected)
    assert stat < chi2.ppf(1 - 1e-4, df=14)


# ------------------------------------------------------------------ empirical e^eps
def _cp_bounds(k, n, a):
    """Clopper-Pearson one-sided bounds at level a: (lower, upper) of a binomial p."""
    lo = beta.ppf(a, k, n - k + 1) if k > 0 else 0.0
    up = beta.ppf(1 - a, k + 1, n - k) if k < n else 1.0
    return lo, up


def _violations(y0, y1, a0, a1, eps, alpha=ALPHA):
    """Events E (orthants of the coordinates that differ between the neighbours, shifted by
    t in {-1, 0, 1, 2} towards the second dataset) and both ratios P(E | D_i) <= e^eps
    P(E | D_j): a violation is claimed only when the Clopper-Pearson lower bound of one side
    exceeds e^eps times the upper bound of the other, each at level alpha / (2 * tests) --
    family-wise false-alarm rate <= alpha (Bonferroni)."""
    d = np.sign(a1 - a0)
    changed = np.flatnonzero(d)
    events = [(s, t) for r in range(1, changed.size + 1) for s in combinations(changed, r)
              for t in (-1, 0, 1, 2)]
    a = alpha / (2 * 2 * len(events))
    bad = []
    for s, t in events:
        s = list(s)
        hit0 = np.all(d[s] * (y0[:, s] - a0[s]) >= t, axis=1)
        hit1 = np.all(d[s] * (y1[:, s] - a0[s]) >= t, axis=1)
        k0, k1, n0, n1 = int(hit0.sum()), int(hit1.sum()), hit0.size, hit1.size
        lo0, up0 = _cp_bounds(k0, n0, a)
        lo1, up1 = _cp_bounds(k1, n1, a)
        if lo1 > math.exp(eps) * up0 or lo0 > math.exp(eps) * up1:
            bad.append((tuple(s), t, k0 / n0, k1 / n1))
    return bad


# neighbours under add/remove: D' = D plus one record in bin 0 (root, node [0,2), leaf 0 +1)
H0, H1 = np.array([3, 1, 0, 2]), np.array([4, 1, 0, 2])


def _mechanism(eps=1.0):
    return dp.Mechanism(S.tree(4, [2, 2]), epsilon=eps, neighbours="add_remove", discrete=True)


def _secure_draws(mech, h, n):
    """n independent secure releases of the noisy tree, batched: one OpenDP call per level
    over n copies of the level's answers (the same i.i.d. draws as n separate calls)."""
    exact = sn.exact_answers(mech, h)
    levels = mech.released.levels
    y = np.empty((n, exact.size))
    for lvl, scale in mech.level_scales.items():
        rows = levels == lvl
        vals = np.tile(exact[rows], n)
        y[:, rows] = sn._opendp_sample(
            vals, noise="laplace", scale=scale, sensitivity=mech.level_sensitivities[lvl],
            budget=mech.level_budgets[lvl]).reshape(n, -1)
    return y


def test_empirical_dp_with_the_secure_sampler():
    """K = 4 binary tree, eps = 1, add/remove: 3000 secure releases per neighbour; no event
    may show a ratio above e^eps (false alarm <= 1e-3). The tight event (all three changed
    nodes at or above their D' value) has ratio exactly e^eps."""
    mech = _mechanism()
    assert mech.epsilon == pytest.approx(1.0)
    a0, a1 = sn.exact_answers(mech, H0), sn.exact_answers(mech, H1)
    y0, y1 = _secure_draws(mech, H0, 3000), _secure_draws(mech, H1, 3000)
    assert _violations(y0, y1, a0, a1, 1.0) == []


@pytest.mark.slow
def test_empirical_dp_with_the_secure_sampler_many_draws():
    mech = _mechanism()
    a0, a1 = sn.exact_answers(mech, H0), sn.exact_answers(mech, H1)
    y0, y1 = _secure_draws(mech, H0, 60000), _secure_draws(mech, H1, 60000)
    assert _violations(y0, y1, a0, a1, 1.0) == []


def test_empirical_dp_with_an_equivalent_sampler_and_the_test_has_power():
    """200,000 draws per neighbour from numpy's discrete Laplace (G1 - G2 geometric: exactly
    the distribution OpenDP samples, see the pmf test above): no violation at eps = 1; and
    the same test flags a mechanism whose noise is half as large as described (true loss
    2 eps), so it can detect a calibration error of that size."""
    mech = _mechanism()
    a0, a1 = sn.exact_answers(mech, H0), sn.exact_answers(mech, H1)
    rng = np.random.default_rng(7)
    n = 200_000
    y0 = a0 + mech.sample_noise(rng, n)
    y1 = a1 + mech.sample_noise(rng, n)
    assert _violations(y0, y1, a0, a1, 1.0) == []
    loose = _mechanism(eps=2.0)  # scales halved, but we claim eps = 1
    y0 = a0 + loose.sample_noise(rng, n)
    y1 = a1 + loose.sample_noise(rng, n)
    assert len(_violations(y0, y1, a0, a1, 1.0)) > 0


# ------------------------------------------------------------------ discrete mechanisms
@pytest.mark.parametrize("noise,budget", [("laplace", {"epsilon": 2.0}),
                                          ("gaussian", {"rho": 1.0})])
def test_discrete_mechanism_keeps_guarantee_and_scales(noise, budget):
    strat = S.tree(64, [4, 16])
    cont = dp.Mechanism(strat, noise=noise, neighbours="add_remove", **budget)
    disc = dp.Mechanism(strat, noise=noise, neighbours="add_remove", discrete=True, **budget)
    assert disc.discrete and not cont.discrete and cont.discretised().discrete
    np.testing.assert_array_equal(disc.scales, cont.scales)
    np.testing.assert_array_equal(disc.variances, cont.discretised().variances)
    assert (disc.epsilon, disc.rho) == (cont.epsilon, cont.rho)
    assert disc.level_budgets == cont.level_budgets
    for lvl, s in disc.level_scales.items():
        assert disc.level_variances[lvl] == discrete_variance(s, noise)
        assert disc.level_variances[lvl] < cont.level_variances[lvl]
    assert "discrete " + noise in disc.describe() and "discrete" not in cont.describe()
    with pytest.raises(ValueError, match="discrete must be True or False"):
        dp.Mechanism(strat, noise=noise, discrete="yes", **budget)
    # numpy simulation of a discrete mechanism draws integers with the described variance
    z = disc.sample_noise(np.random.default_rng(5), 20000)
    assert np.all(z == np.round(z))
    np.testing.assert_allclose(z.var(axis=0).mean(), disc.variances.mean(), rtol=0.02)


def test_secure_measure_checks_every_group_before_drawing_any_noise(monkeypatch):
    """A calibration refused for one group of rows (here the second checked) must stop
    secure_measure before the first noise is drawn, for budgets per level and per row."""
    from dptree_opt.optimize.node_budgets import path_budgets
    levels = dp.Mechanism(S.tree(8, [2, 2, 2]), epsilon=1.0, discrete=True)
    b = path_budgets((2, 2, 2), np.linspace(0.2, 0.8, 15), 1.0)   # several distinct scales
    rows = dp.Mechanism(S.tree(8, [2, 2, 2]), epsilon=1.0, neighbours="add_remove",
                        row_budgets=b, discrete=True)
    real = sn.opendp_measurement
    for mech in (levels, rows):
        seen, drawn = [], []

        def check(**kw):
            seen.append(kw)
            if len(seen) == 2:
                raise ValueError("calibration error: refused for the test")
            return real(**kw)

        monkeypatch.setattr(sn, "opendp_measurement", check)
        monkeypatch.setattr(sn, "_opendp_sample", lambda *a, **k: drawn.append(1))
        with pytest.raises(ValueError, match="refused for the test"):
            sn.secure_measure(mech, np.arange(8))
        assert drawn == []
