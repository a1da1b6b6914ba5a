"""Quantile confidence intervals: variances, noise weights, critical values, inversion, coverage.

References (independent of the code under test): the dense GLS covariance
(``blue_covariance``) for the variance formula; the estimator applied to noise
(``estimate_cdf``) for the noise weights; the Laplace tail exp(-c sqrt 2) and Monte Carlo
of the mechanism's own noise (``sample_noise``) for the critical values; a loop-by-loop
re-implementation of the test inversion; numpy's inverted-CDF quantile of real data for
coverage, with binomial bounds stated in each test."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import norm

import dptree_opt as dp
from dptree_opt import consistency, queries
from dptree_opt import quantile_intervals as QI
from dptree_opt import strategies as S

QS = (0.01, 0.1, 0.5, 0.9, 0.99)


def examples(n):
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def mech(branching, noise="laplace", neighbours="add_remove", budget=1.0, discrete=True):
    kw = {"epsilon": budget} if noise == "laplace" else {"rho": budget}
    return dp.Mechanism(S.tree(math.prod(branching), list(branching)), noise=noise,
                        neighbours=neighbours, discrete=discrete, **kw)


# ----------------------------------------------------------------------------- variances
@pytest.mark.parametrize("branching, k, neighbours", [
    ((4, 4), 16, "add_remove"), ((4, 4), 13, "add_remove"), ((3, 2, 2), 12, "swap"),
    ((2, 3, 3), 15, "swap")])
def test_dhat_variance_matches_dense_covariance(branching, k, neighbours):
    """Var(raw[b] - q Nhat) from the dense BLUE covariance: a' Cov a with a = p_b - q p_{K-1}
    (private N) or a = p_b (public N: Nhat = N exactly), b = -1..K-1 (p_{-1} = 0)."""
    m = mech(branching, neighbours=neighbours)
    cov = dp.blue_covariance(m)
    kp = m.n_bins
    prefix = np.tril(np.ones((kp, kp)))[:k]  # rows p_b, b = 0..K-1
    p = np.vstack([np.zeros(kp), prefix])   # b = -1..K-1
    cal = QI.calibrate_quantile_tests(m, k, QS)
    var, rvar, vk = cal.variances, cal.range_variances, cal.variances[-1]
    for q in (0.0, 0.3, 0.5, 1.0):
        a = p if m.public_total else p - q * p[-1]
        dense = np.einsum("ij,jk,ik->i", a, cov, a)
        formula = var if m.public_total else (1 - q) * var + q * rvar - q * (1 - q) * vk
        np.testing.assert_allclose(formula, dense, rtol=1e-9, atol=1e-9 * dense.max())


@pytest.mark.parametrize("make", [
    lambda: mech((4, 4)), lambda: mech((4, 4), neighbours="swap"),
    lambda: mech((2, 2, 3), noise="gaussian", budget=0.5),
    lambda: dp.Mechanism(S.histogram(9), epsilon=1.0, neighbours="add_remove"),
    lambda: dp.Mechanism(S.prefix_sums(7), epsilon=1.0, neighbours="swap")])
def test_noise_weights_reproduce_the_estimator(make):
    """e_b = r_b . z for the estimator's own output on pure noise (estimate_cdf is linear)."""
    m = make()
    k = m.n_bins
    bs = np.arange(-1, k)
    w = QI._prefix_weights(m, bs)
    z = np.nan_to_num(m.sample_noise(np.random.default_rng(0), size=7))
    e = np.concatenate([np.zeros((7, 1)), queries.estimate_cdf(m, z)], axis=1)
    np.testing.assert_allclose(z @ w.T, e, rtol=0, atol=1e-9 * (1 + np.abs(e).max()))


def test_signed_digit_weight_brute_force():
    """Fewest signed node widths summing to n, by breadth-first search over sums."""
    widths = [24, 12, 4, 1]  # tree (2, 3, 4)
    got = QI._signed_digit_weight(widths, np.arange(25), root_free=False)
    best = {0: 0}
    frontier = [0]
    for d in range(1, 8):
        nxt = []
        for v in frontier:
            for w in widths:
                for s in (v + w, v - w):
                    if -60 <= s <= 60 and s not in best:
                        best[s] = d
                        nxt.append(s)
        frontier = nxt
    np.testing.assert_array_equal(got, [best[n] for n in range(25)])


# ----------------------------------------------------------------------------- critical values
def test_single_laplace_critical_value():
    """One continuous Laplace term: P(|X| > c sd) = exp(-c sqrt 2), so c = ln(1/alpha)/sqrt 2
    (2.1183 at alpha = 0.05). The CF result may exceed it only by the smoothing: a shift of
    4 x 0.01 sd plus the target lowered by 2 P(N(0,1) < -4) = 6.3e-5, and the 0.002 grid."""
    for alpha in (0.05, 0.01, 1e-4):
        exact = math.log(1 / alpha) / math.sqrt(2)
        smoothed = math.log(1 / (alpha - 2 * norm.sf(4))) / math.sqrt(2) + 0.04 + 0.002
        c = QI._tail_critical(np.array([1.0]), np.array([1.0]), np.array([2.0]),
                              np.array([3.0]), "laplace", False, alpha)
        assert exact - 1e-3 <= c <= smoothed + 1e-3


@pytest.mark.parametrize("sigma", [0.3, 0.9, 1.0, 2.5])
def test_discrete_gaussian_characteristic_function(sigma):
    """The tabulated log CF (with its periodic reduction and interpolation) against the
    direct sum over |z| <= 60 of exp(-z^2 / 2 s^2) cos(u z), normalised (compared as phi:
    the products of CFs use phi, and the direct sum loses relative accuracy below 1e-10)."""
    z = np.arange(-60, 61, dtype=float)
    w = np.exp(-z * z / (2 * sigma * sigma))
    u = np.linspace(-20.0, 20.0, 1001)
    direct = np.cos(np.outer(u, z)) @ w / w.sum()  # phi itself (cancels below ~1e-12)
    got = QI._log_cf(u, sigma, "gaussian", True, QI._dgauss_table(sigma))
    np.testing.assert_allclose(np.exp(got), direct, rtol=1e-6, atol=1e-10)
    lap = QI._log_cf(u, sigma, "laplace", True)  # discrete Laplace: direct sum too
    wl = np.exp(-np.abs(z) / sigma)
    np.testing.assert_allclose(lap, np.log(np.cos(np.outer(u, z)) @ wl / wl.sum()),
                               rtol=0, atol=1e-9)


def test_normal_critical_value_for_large_sigma_gaussian():
    """sigma >= 3 on every level: the discrete Gaussian is normal to double precision."""
    m = mech((4, 4), noise="gaussian", budget=0.01)
    assert min(m.level_scales[lvl] for lvl in m.level_scales if m.level_scales[lvl] > 0) >= 3
    cal = QI.calibrate_quantile_tests(m, 16, (0.5,), 0.9)
    assert cal.method == "normal"
    assert cal.critical[0] == pytest.approx(norm.ppf(0.95), abs=1e-12)


@pytest.mark.parametrize("noise, budget, neighbours", [
    ("laplace", 1.0, "add_remove"), ("laplace", 6.0, "swap"), ("gaussian", 8.0, "swap")])
def test_critical_values_against_monte_carlo(noise, budget, neighbours):
    """Monte Carlo of the mechanism's own noise, 40000 draws: for every prefix b the fraction
    of |Z_b| > c is <= alpha + 4 SE (SE = sqrt(alpha (1 - alpha) / n) = 0.0011; 4 SE covers the
    maximum over 17 correlated prefixes), and c is not loose: some prefix exceeds c - 0.1 more
    often than alpha - 4 SE."""
    m = mech((4, 4), noise=noise, neighbours=neighbours, budget=budget)
    k, alpha, n = 16, 0.05, 40000
    qs = (0.3,)
    cal = QI.calibrate_quantile_tests(m, k, qs, 1 - alpha)
    c = cal.critical[0]
    z = m.sample_noise(np.random.default_rng(7), size=n)
    e = queries.estimate_cdf(m, z)
    q = qs[0]
    dh = np.concatenate([np.zeros((n, 1)), e], axis=1)
    if not m.public_total:
        dh = dh - q * e[:, [-1]]
    sd = np.sqrt(cal.variances if m.public_total else
                 (1 - q) * cal.variances + q * cal.range_variances
                 - q * (1 - q) * cal.variances[-1])
    ok = sd > 1e-9
    zs = np.abs(dh[:, ok]) / sd[ok]
    se = math.sqrt(alpha * (1 - alpha) / n)
    assert np.max(np.mean(zs > c, axis=0)) <= alpha + 4 * se
    assert np.max(np.mean(zs > c - 0.1, axis=0)) >= alpha - 4 * se


def test_subsample_of_prefixes_finds_the_maximum():
    """At K = 256 the maximum over the checked prefixes equals the maximum over all of them
    (every critical value computed)."""
    m = mech((4, 8, 8), neighbours="swap", budget=3.0)
    k = 256
    checked = QI._checked_prefixes(m, k)
    assert checked.size < k
    noisy = (m.variances > 0) & np.isfinite(m.variances)
    s, rv = m.scales[noisy], m.variances[noisy]
    kurt = np.array([QI._level_kurtosis(float(v), "laplace", True) for v in s])
    w = QI._prefix_weights(m, np.arange(-1, k))[:, noisy]
    c_all = np.array([QI._tail_critical(a, s, rv, kurt, "laplace", True, 0.05) if np.any(a)
                      else 0.0 for a in w])
    cal = QI.calibrate_quantile_tests(m, k, (0.5,))
    assert cal.critical[0] == pytest.approx(c_all.max(), abs=1e-12)


# ----------------------------------------------------------------------------- inversion
def brute_interval(raw, edges, q, c, var, rvar, public, total):
    """Loop-by-loop test inversion (module docstring of quantile_intervals)."""
    k = raw.size
    kept = []
    for b in range(k):
        def stat(j):  # (Dhat_j, sd_j) for j = -1..K-1
            r = 0.0 if j < 0 else raw[j]
            if public:
                return r, math.sqrt(var[j + 1])
            qq = q
            return (r - qq * raw[-1],
                    math.sqrt(max((1 - qq) * var[j + 1] + qq * rvar[j + 1]
                                  - qq * (1 - qq) * var[-1], 0.0)))
        if public:
            m = max(math.ceil(q * total), 1)
            t1, t2 = m, m - 1
        else:
            t1, t2 = (1.0, 0.0) if q == 0 else (0.0, 0.0)
        d1, s1 = stat(b)
        d0, s0 = stat(b - 1)
        if not (d1 + c * s1 < t1 - 1e-9) and not (d0 - c * s0 > t2 + 1e-9):
            kept.append(b)
    return (edges[kept[0]], edges[kept[-1] + 1]) if kept else None


@examples(80)
@given(st.integers(1, 12), st.booleans(), st.floats(0, 1), st.floats(0.5, 3.0), st.data())
def test_inversion_matches_brute_force(k, public, q, c, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    total = int(data.draw(st.integers(1, 40)))
    raw = np.sort(rng.normal(0, 10, k)) + np.linspace(0, total, k)
    var = np.concatenate([[0.0], rng.uniform(1, 30, k)])
    rvar = np.concatenate([[var[-1]], rng.uniform(1, 30, k - 1), [0.0]]) if k > 1 else \
        np.array([var[-1], 0.0])
    if public:
        raw[-1] = total
    cal = QI.QuantileCalibration(qs=np.array([q]), level=0.9, critical=np.array([c]),
                                 variances=var, range_variances=rvar, total_public=public,
                                 n_bins=k, method="test", prefixes_checked=0, seconds=0.0)
    m = mech((k,), neighbours="swap" if public else "add_remove") if k > 1 else \
        dp.Mechanism(S.histogram(1), epsilon=1.0, neighbours="swap" if public else "add_remove")
    edges = np.cumsum(np.concatenate([[0.0], rng.uniform(0.5, 2, k)]))
    res = QI.quantile_intervals(m, raw, edges, [q], total_public=public, total=total,
                                level=0.9, calibration=cal)
    want = brute_interval(raw, edges, q, c, var, rvar, public, total)
    if want is None:
        assert res.empty[0]
    else:
        assert (res.lower[0], res.upper[0]) == want


def test_noise_interval_is_the_hull_of_accepted_points():
    """On a fine grid of x (bin-linear Dhat and sd), every x with |Dhat(x)| <= c sd(x) lies in
    [noise_lower, noise_upper] and the ends are accepted points (to the grid step)."""
    rng = np.random.default_rng(3)
    k, c, q = 20, 1.5, 0.4
    raw = np.cumsum(rng.poisson(2.5, k)) + rng.normal(0, 3, k)
    var = np.concatenate([[0.0], rng.uniform(4, 9, k)])
    rvar = np.concatenate([[var[-1]], rng.uniform(4, 9, k - 1), [0.0]])
    cal = QI.QuantileCalibration(qs=np.array([q]), level=0.9, critical=np.array([c]),
                                 variances=var, range_variances=rvar, total_public=False,
                                 n_bins=k, method="test", prefixes_checked=0, seconds=0.0)
    m = mech((k,))
    edges = np.linspace(-1, 3, k + 1)
    res = QI.quantile_intervals(m, raw, edges, [q], total_public=False, level=0.9,
                                calibration=cal)
    x = np.linspace(edges[0], edges[-1], 200001)
    dh = np.interp(x, edges, np.concatenate([[0.0], raw]) - q * raw[-1])
    sd_e = np.sqrt(np.maximum((1 - q) * var + q * rvar - q * (1 - q) * var[-1], 0))
    sd = np.interp(x, edges, sd_e)
    lo = x[np.flatnonzero(dh + c * sd >= 0)[0]]
    up = x[np.flatnonzero(dh - c * sd <= 0)[-1]]
    step = x[1] - x[0]
    assert abs(res.noise_lower[0] - lo) <= step and abs(res.noise_upper[0] - up) <= step


# ----------------------------------------------------------------------------- totality
M_SMALL = {"add_remove": mech((2, 4)), "swap": mech((2, 4), neighbours="swap"),
           "pad": mech((3, 3), neighbours="add_remove"),
           "one": dp.Mechanism(S.tree(1, []), epsilon=1.0, neighbours="add_remove")}


@examples(150)
@given(st.sampled_from(sorted(M_SMALL)), st.data())
def test_never_raises_after_the_noise(name, data):
    m = M_SMALL[name]
    k = 7 if name == "pad" else m.n_bins
    raw = np.array(data.draw(st.lists(
        st.one_of(st.just(0.0), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)),
        min_size=k, max_size=k)))
    if data.draw(st.booleans()):
        raw = np.sort(raw)
    qs = data.draw(st.lists(st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0, 1)),
                            min_size=1, max_size=4))
    level = data.draw(st.sampled_from([0.5, 0.95, 0.999999, 1e-6]))
    est = data.draw(st.one_of(st.none(), st.lists(
        st.one_of(st.just(math.nan), st.floats(-5, 15)), min_size=len(qs), max_size=len(qs))))
    total = data.draw(st.sampled_from([None, 0, 1, 17, 10**6]))
    edges = np.linspace(0.0, 10.0, k + 1)
    QI.check_quantile_intervals(m, edges, qs, level, total_public=m.public_total)
    res = QI.quantile_intervals(m, raw, edges, qs, total_public=m.public_total, total=total,
                                level=level, estimates=est)
    for arr in (res.lower, res.upper, res.noise_lower, res.noise_upper):
        assert arr.shape == (len(qs),)
    both = np.isfinite(res.lower) & np.isfinite(res.upper)
    assert np.all(res.lower[both] <= res.upper[both])
    if est is not None:
        e = np.array(est)
        fin = np.isfinite(e) & both
        assert np.all((res.lower[fin] <= e[fin]) & (e[fin] <= res.upper[fin]))
        nfin = np.isfinite(e) & np.isfinite(res.noise_lower)
        assert np.all((res.noise_lower[nfin] <= e[nfin]) & (e[nfin] <= res.noise_upper[nfin]))
    assert isinstance(res.notes, tuple)


def test_post_noise_oddities_give_notes_not_exceptions():
    m = M_SMALL["swap"]
    edges = np.arange(9.0)
    res = QI.quantile_intervals(m, np.full(8, np.nan), edges, [0.5], total_public=True)
    assert np.isnan(res.lower[0]) and res.notes
    res = QI.quantile_intervals(m, np.zeros(3), edges, [0.5], total_public=True)
    assert np.isnan(res.lower[0]) and "shape" in " ".join(res.notes)
    res = QI.quantile_intervals(m, np.zeros(8), edges, [0.5], total_public=True, total=0)
    assert np.isnan(res.lower[0]) and "N = 0" in " ".join(res.notes)
    res = QI.quantile_intervals(m, np.arange(8.0), edges, [0.5], total_public=True)
    assert np.isfinite(res.lower[0]) and "total was not given" in " ".join(res.notes)


def test_check_rejects_bad_arguments():
    m = M_SMALL["swap"]
    e = np.arange(9.0)
    for bad in (dict(level=1.0), dict(level=0), dict(level=True), dict(qs=[1.5]),
                dict(qs=[np.nan]), dict(bin_edges=[0.0]), dict(qs=[[0.5]]),
                dict(bin_edges=np.arange(20.0)), dict(bin_edges=e[::-1]), dict(total_public=False), dict(mechanism="m")):
        kw = dict(mechanism=m, bin_edges=e, qs=[0.5], level=0.95, total_public=True)
        kw.update(bad)
        with pytest.raises(ValueError):
            QI.check_quantile_intervals(kw.pop("mechanism"), kw.pop("bin_edges"), kw.pop("qs"),
                                        kw.pop("level"), total_public=kw.pop("total_public"))
    with pytest.raises(ValueError):
        QI.calibrate_quantile_tests(m, 9, [0.5])


# ----------------------------------------------------------------------------- coverage
def one_run(m, hist, k, edges, qs, cal, rng):
    full = np.zeros(m.n_bins, dtype=np.int64)
    full[:k] = hist
    est = dp.cdf_from_measurements(m, m.measure(full, rng), consistency=None)
    raw = np.asarray(est.raw)[:k]
    total = est.total if m.public_total else max(0, int(np.rint(raw[-1])))
    if total > 0:
        cons = consistency.project_cdf(raw, total=total, metric="l2", integer=True)
        qv = queries.quantiles(cons, edges, qs, total)
    else:
        qv = np.full(len(qs), np.nan)
    return QI.quantile_intervals(m, raw, edges, qs, total_public=m.public_total, total=total,
                                 estimates=qv, calibration=cal)


def adversarial(n, q, k, rng):
    """m - 1 records in bin j - 1, one in the quantile's bin j, the rest in bin j + 1: both
    tests are tight at b* = j (C_{b*-1} = m - 1, C_{b*} = m) and the neighbours are decided by
    the same errors, so coverage is close to the level when sd << m."""
    m = max(math.ceil(q * n), 1)
    j = int(rng.integers(k // 4, 3 * k // 4))
    return np.concatenate([np.full(m - 1, j - 1), [j], np.full(n - m, j + 1)])


@pytest.mark.parametrize("noise, neighbours", [("laplace", "add_remove"), ("gaussian", "swap")])
def test_coverage_fast(noise, neighbours):
    """300 runs on adversarial data (the worst case for the test), K = 64: coverage >=
    0.95 - 3.5 SE, SE = sqrt(0.95 * 0.05 / 300) = 0.0126 (bound 0.906)."""
    m = mech((4, 16), noise=noise, neighbours=neighbours, budget=1.0 if noise == "laplace"
             else 0.5)
    k, n, q, runs = 64, 200, 0.5, 300
    rng = np.random.default_rng(11)
    data = adversarial(n, q, k, rng)
    hist = np.bincount(data, minlength=k)
    edges = np.arange(k + 1.0)
    truth = np.quantile(data, q, method="inverted_cdf")
    cal = QI.calibrate_quantile_tests(m, k, (q,))
    hits = 0
    for _ in range(runs):
        res = one_run(m, hist, k, edges, (q,), cal, rng)
        hits += res.lower[0] <= truth <= res.upper[0]
    assert hits / runs >= 0.95 - 3.5 * math.sqrt(0.95 * 0.05 / runs)


@pytest.mark.slow
def test_coverage_grid_slow():
    """Every cell (q in QS, N in {200, 10^4}, Laplace eps 1 / Gaussian rho 0.5, add_remove /
    swap, data: adversarial (one data set per q) and skewed, K = 64) over 1000 runs has
    coverage >= 0.95 - 3 SE, SE = sqrt(0.95 * 0.05 / 1000) = 0.0069 (bound 0.929): a valid
    cell falls below with probability < 0.0015, so < 0.15 false alarms over the 80 cells."""
    k, runs = 64, 1000
    bound = 0.95 - 3 * math.sqrt(0.95 * 0.05 / runs)
    edges = np.linspace(0.0, 1.0, k + 1)
    failures = []
    for noise, budget in (("laplace", 1.0), ("gaussian", 0.5)):
        for neighbours in ("add_remove", "swap"):
            m = mech((4, 16), noise=noise, neighbours=neighbours, budget=budget)
            cal = QI.calibrate_quantile_tests(m, k, QS)
            for n in (200, 10**4):
                rng = np.random.default_rng(n)
                sets = [("skewed", None, np.minimum((rng.exponential(0.15, n) * k).astype(int),
                                                    k - 1))]
                sets += [("adversarial", iq, adversarial(n, q, k, rng))
                         for iq, q in enumerate(QS)]
                for kind, only, data in sets:
                    hist = np.bincount(data, minlength=k)
                    truth = np.quantile(edges[data], QS, method="inverted_cdf")
                    hits = np.zeros(len(QS))
                    for _ in range(runs):
                        res = one_run(m, hist, k, edges, QS, cal, rng)
                        hits += (res.lower <= truth) & (truth <= res.upper)
                    for iq in (range(len(QS)) if only is None else [only]):
                        if hits[iq] / runs < bound:
                            failures.append((noise, neighbours, n, kind, QS[iq], hits[iq] / runs))
    assert not failures, failures


@pytest.mark.parametrize("scale", [0.2, 1.0, 7.0, 40.0])
def test_discrete_laplace_kurtosis_closed_form_matches_direct_sum(scale):
    """3 + (1 - q)^2 / (2 q) (G1 - G2 cumulants) against the moments summed directly over
    |z| <= 60 s (the tail beyond is below e^-60); the closed form also works at s = 1e12,
    where the direct sum would need petabytes."""
    from dptree_opt.quantile_intervals import _level_kurtosis

    q = np.exp(-1.0 / scale)
    z = np.arange(-math.ceil(60 * scale) - 2, math.ceil(60 * scale) + 3, dtype=float)
    w = q ** np.abs(z)
    w /= w.sum()
    m2, m4 = np.sum(w * z**2), np.sum(w * z**4)
    assert _level_kurtosis(scale, "laplace", True) == pytest.approx(m4 / m2**2 - 3, rel=1e-9)
    assert _level_kurtosis(1e12, "laplace", True) == pytest.approx(3.0)
