"""Issue 16: Andersson-Pagh(-Steiner-Torkamani)'s k-ary tree with negative digits
(:mod:`dptree_opt.stream.negative_digits`).

* the node counts per step equal an independent balanced base-k expansion; the estimator's
  +-1 coefficients over the (virtual) node rows factorise the prefix matrix exactly (L R = A),
  and the closed-form variances equal sum_v L[t, v]^2 var_v;
* the released estimates are exactly L (R x + z) for the noise drawn (exact counts when the
  noise is zero), the variances match Monte Carlo within 4 SE;
* causality of the outputs, privacy recomputed from the scaled rows, the secure path uses
  OpenDP only, bad input refused; the study constants (k = 19, the factor ~4 over Honaker,
  delta = T^-0.92 against the Gaussian square-root factorisation)."""

import json
import math

import numpy as np
import pytest

from dptree_opt.stream import Counter
from dptree_opt.stream import noise as stream_noise
from dptree_opt.stream.negative_digits import (
    NegativeDigitsEngine,
    asymptotic_constants,
    balanced_digits,
    balanced_levels,
    best_levels,
    leading_constant,
    level_node_counts,
    mean_variance,
    study_constants,
)


def _engine(T, k=3, rng=0, **kw):
    kw.setdefault("noise", "laplace")
    kw.setdefault("budget", 1.0)
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    return NegativeDigitsEngine(T, branching=k, rng=rng, **kw)


def _balanced(t, k):
    """Balanced base-k digits of t >= 0, lowest first (the textbook remainder loop)."""
    m, out = (k - 1) // 2, []
    while t:
        r = t % k
        r = r - k if r > m else r
        out.append(r)
        t = (t - r) // k
    return out


@pytest.mark.parametrize("k", [3, 5, 7, 19])
def test_digits_and_node_counts_match_the_balanced_expansion(k):
    T = k**3 if k < 19 else k**2
    H = balanced_levels(T, k)
    assert (k**H - 1) // 2 >= T > (k ** (H - 1) - 1) // 2
    t = np.arange(1, T + 1)
    digits = balanced_digits(t, k, H)
    assert np.all(np.abs(digits) <= (k - 1) // 2)
    np.testing.assert_array_equal((digits * (k ** np.arange(H))[:, None]).sum(axis=0), t)
    for s in range(1, T + 1):
        ref = _balanced(s, k)
        np.testing.assert_array_equal(digits[:len(ref), s - 1], ref)
    # T a power of k: no node lies past the horizon, so n_l(t) = |b_l(t)|
    np.testing.assert_array_equal(level_node_counts(t, k, H, T), np.abs(digits))
    # the mean number of nodes at T = k^h: h (k^2 - 1) / (4k) + 1/2, + |b(T)| / T
    h = round(math.log(T, k))
    mean = level_node_counts(t, k, H, T).sum() / T
    assert mean == pytest.approx(h * (k * k - 1) / (4 * k) + 0.5 + 0.5 / T, rel=1e-12)


@pytest.mark.parametrize("T, k, kw", [
    (26, 3, {}), (27, 3, {}), (28, 3, {}), (41, 3, {}), (60, 5, {}), (124, 5, {}),
    (50, 7, {}), (100, 19, {}), (400, 19, {}),
    (40, 3, dict(levels=2)),                       # free top digit (up to 4 top nodes)
    (90, 5, dict(levels=1)),                       # leaves only
    (40, 3, dict(noise="gaussian", budget=0.5, level_budgets=[0.1, 0.1, 0.1, 0.2])),
])
def test_coefficients_factorise_the_prefix_matrix_and_give_the_variances(T, k, kw):
    """L R = A (every t, every step), each row's coefficient in {-1, +1} where used, and the
    closed-form variance sum_l n_l(t) v_l equals sum_v L[t, v]^2 var_v; n_l(t) is the
    number of level-l rows the estimate uses."""
    e = _engine(T, k, **kw)
    rows = e.strategy(T)
    L, R = rows.coefficients, rows.matrix
    np.testing.assert_array_equal((L @ R).toarray(), np.tril(np.ones((T, T))))
    assert set(np.unique(L.data)) <= {-1.0, 1.0}
    np.testing.assert_allclose(e.step_variances(T), L.multiply(L) @ rows.variances,
                               rtol=1e-12)
    counts = level_node_counts(np.arange(1, T + 1), k, e.levels, T)
    for level in range(e.levels):
        np.testing.assert_array_equal(
            counts[level], (abs(L[:, rows.level == level]) > 0).sum(axis=1).A1)
    # the same on a prefix of the horizon (rows restricted to the first steps)
    s = T // 2
    part = e.strategy(s)
    np.testing.assert_array_equal((part.coefficients @ part.matrix).toarray(),
                                  np.tril(np.ones((s, s))))
    np.testing.assert_allclose(e.step_variances(s), e.step_variances(T)[:s], rtol=0)


def _record_draws(monkeypatch, zero=False):
    log = []
    real = stream_noise.GroupNoise.draw

    def draw(self, group, count):
        y = float(count) if zero else real(self, group, count)
        log.append((group, count, y))
        return y

    monkeypatch.setattr(stream_noise.GroupNoise, "draw", draw)
    return log


@pytest.mark.parametrize("T, k, kw", [(40, 3, {}), (61, 5, dict(levels=2)),
                                      (300, 19, dict(noise="gaussian", budget=0.3))])
def test_estimates_are_the_linear_map_of_the_virtual_rows(monkeypatch, T, k, kw):
    """The engine draws each used node's noise once, in the strategy's row order, as the
    noise of a zero count; its estimates are y = L (R x + z) with those draws; with zero noise
    they are the exact running counts."""
    log = _record_draws(monkeypatch)
    x = np.random.default_rng(11).integers(0, 7, T)
    e = _engine(T, k, **kw)
    y = np.array([e.push(int(c))[0] for c in x])
    rows = e.strategy(T)
    used = rows.first_use <= T
    assert np.all(used[:used.sum()]) and len(log) == used.sum()     # used rows come first
    assert all(count == 0 for _, count, _ in log)
    np.testing.assert_array_equal([g for g, _, _ in log], rows.level[used])
    z = np.zeros(rows.matrix.shape[0])
    z[used] = [v for _, _, v in log]
    noisy = rows.matrix @ x + z
    np.testing.assert_allclose(y, rows.coefficients @ noisy, rtol=1e-12, atol=1e-9)
    # the noise a step's estimate uses was drawn no later than that step
    first = np.array([np.flatnonzero(rows.coefficients[:, j].toarray().ravel()).min() + 1
                      for j in np.flatnonzero(used)])
    np.testing.assert_array_equal(first, rows.first_use[used])

    zero_log = _record_draws(monkeypatch, zero=True)
    e0 = _engine(T, k, **kw)
    np.testing.assert_array_equal([e0.push(int(c))[0] for c in x], np.cumsum(x))
    assert len(zero_log) == used.sum()


@pytest.mark.parametrize("k", [3, 5, 19])
def test_outputs_are_causal(k):
    """Fixed noise: changing the counts after step s leaves every output up to s unchanged
    (y_t = exact count of the first t steps + data-independent noise); negative digits use
    nodes before they complete, but no row involves a step at or after its release step."""
    T, s = 200, 77
    a = np.random.default_rng(3).integers(0, 9, T)
    b = a.copy()
    b[s:] = np.random.default_rng(4).integers(0, 9, T - s)
    ea, eb = _engine(T, k, rng=5), _engine(T, k, rng=5)
    ya = np.array([ea.push(int(c))[0] for c in a])
    yb = np.array([eb.push(int(c))[0] for c in b])
    np.testing.assert_array_equal(ya[:s], yb[:s])
    np.testing.assert_allclose(ya - np.cumsum(a), yb - np.cumsum(b), rtol=0, atol=1e-9)
    rows = ea.strategy(T)
    dense = rows.matrix.toarray()
    last = np.array([np.flatnonzero(r).max() for r in dense])
    assert np.all(last < rows.release_step)
    assert np.any(rows.first_use < rows.release_step)    # a subtracted node, used early


@pytest.mark.parametrize("T, k", [(7, 3), (26, 3), (30, 5), (100, 19), (365, 19)])
@pytest.mark.parametrize("noise, budget, levels", [("laplace", 1.3, None),
                                                   ("gaussian", 0.7, None),
                                                   ("laplace", 0.9, 1)])
def test_privacy_recomputed_from_the_scaled_rows(T, k, noise, budget, levels):
    """Every (virtual) node meeting the horizon, scaled by its level's noise scale: the
    largest change of the scaled answers when one step's count moves by one is the budget
    (l1 for Laplace; rho = D2^2 / 2 for Gaussian)."""
    e = _engine(T, k, noise=noise, budget=budget, levels=levels)
    rows = e.strategy(T)
    A = rows.matrix.toarray() / rows.scale[:, None]
    loss = (np.abs(A).sum(axis=0).max() if noise == "laplace"
            else 0.5 * (A**2).sum(axis=0).max())
    assert loss == pytest.approx(budget, rel=1e-12)
    # and the per-level budgets in the account sum to the total
    acc = e.account()
    json.dumps(acc)
    assert sum(lv["budget"] for lv in acc["levels"]) == pytest.approx(budget, rel=1e-12)


def _monte_carlo(T, trials, make, seed=2):
    counts = np.random.default_rng(1).integers(0, 5, T)
    truth = np.cumsum(counts)
    rng = np.random.default_rng(seed)
    err = np.empty((trials, T))
    for i in range(trials):
        e = make(rng)
        err[i] = [e.push(int(c))[0] for c in counts] - truth
    exact = e.step_variances(T)
    m2 = np.mean(err**2, axis=0)
    se = np.sqrt((np.mean(err**4, axis=0) - m2**2) / trials)
    assert np.all(np.abs(m2 - exact) <= 4 * se), np.max(np.abs(m2 - exact) / se)
    assert np.all(np.abs(err.mean(axis=0)) <= 4 * np.sqrt(exact / trials))
    # the variance each push reports is that step's exact one
    e = make(np.random.default_rng(0))
    np.testing.assert_allclose([e.push(1)[1] for _ in range(T)], exact, rtol=1e-12)


@pytest.mark.parametrize("T, k, kw", [
    (40, 3, dict(budget=1.0)),
    (45, 5, dict(noise="gaussian", budget=0.5, level_budgets=[0.1, 0.3, 0.1])),
    (40, 3, dict(budget=2.0, levels=2)),
])
def test_step_variances_equal_monte_carlo(T, k, kw):
    """1500 simulated runs: each step's mean squared error is within 4 SE of the exact
    variance (SE from the fourth moment), the mean error within 4 SE of 0."""
    _monte_carlo(T, 1500, lambda rng: _engine(T, k, rng=rng, **kw))


def test_step_variances_equal_monte_carlo_k19():
    _monte_carlo(300, 500, lambda rng: _engine(300, 19, rng=rng, budget=0.8))


@pytest.mark.slow
@pytest.mark.parametrize("T, k", [(2000, 19), (800, 7)])
def test_step_variances_equal_monte_carlo_heavy(T, k):
    _monte_carlo(T, 2000, lambda rng: _engine(T, k, rng=rng, budget=1.0))


@pytest.mark.parametrize("rng", [0, None])
def test_an_unmeasured_level_gives_nan_exactly_where_it_is_used(rng):
    """level budget 0: the steps whose expansion uses that level get estimate NaN and
    variance inf, the others stay finite (and step_variances agrees)."""
    rng = None if rng is None else np.random.default_rng(rng)
    e = NegativeDigitsEngine(30, noise="laplace", budget=1.0, rng=rng, branching=3,
                             level_budgets=[0.0, 0.0, 0.5, 0.5])   # root first
    out = np.array([e.push(1) for _ in range(30)])
    sv = e.step_variances(30)
    uses_top = level_node_counts(np.arange(1, 31), 3, 4, 30)[2:].sum(axis=0) > 0
    np.testing.assert_array_equal(np.isinf(sv), uses_top)
    np.testing.assert_array_equal(np.isnan(out[:, 0]), uses_top)
    np.testing.assert_allclose(out[~uses_top, 1], sv[~uses_top], rtol=1e-12)


def test_memory_is_a_window_per_level():
    """O(k H) memory: below the top level at most k + 2 nodes' noise is kept per level."""
    for k in (3, 5):
        e = _engine(5000, k)
        worst = 0
        for _ in range(5000):
            e.push(1)
            worst = max(worst, max(len(d) for d in e._kept))
        assert worst <= k + 2


def test_secure_path_uses_opendp_and_no_numpy_noise(opendp_calls, no_numpy_noise):
    """No numpy generator can be made or used (conftest), and every noise draw is a call of an
    OpenDP measurement checked at sensitivity 1."""
    calls, draws = opendp_calls.built, opendp_calls.drawn
    e = NegativeDigitsEngine(60, noise="laplace", budget=1.0, rng=None, branching=5)
    assert e.secure and len(calls) == e.levels == 3     # (5^3 - 1) / 2 = 62 >= 60
    assert all(c["sensitivity"] == 1.0 for c in calls)
    out = [e.push(1) for _ in range(60)]
    assert draws and all(d == [0] for d in draws)      # node noise = measurement of 0
    assert len(draws) == (e.strategy(60).first_use <= 60).sum()
    assert all(y == round(y) for y, _ in out)
    q = math.exp(-1.0 / 3)                              # eps_l = 1/3, discrete Laplace
    assert e.level_variances[0] == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-12)
    np.testing.assert_allclose(e.step_variances(60), [v for _, v in out], rtol=1e-12)
    acc = e.account()
    json.dumps(acc)
    assert "OpenDP" in acc["sampler"] and acc["unit"].startswith("event")
    g = NegativeDigitsEngine(30, noise="gaussian", budget=0.5, rng=None, branching=3)
    assert all(math.isfinite(g.push(2)[0]) for _ in range(30))


@pytest.mark.parametrize("kw, match", [
    (dict(branching=4), "branching"),
    (dict(branching=2), "branching"),
    (dict(branching=1), "branching"),
    (dict(branching=19.0), "branching"),
    (dict(branching=True), "branching"),
    (dict(level_budgets=[0.5, 0.5]), "level_budgets"),
    (dict(level_budgets=[0.5, 0.5, 0.5, -0.5]), "level_budgets"),
    (dict(level_budgets=[0.2, 0.2, 0.2, 0.2]), "level_budgets"),
    (dict(budget=-1.0), "epsilon"),
    (dict(budget=float("inf")), "epsilon"),
    (dict(noise="gaussian", budget=0.0), "rho"),
    (dict(noise="uniform"), "noise"),
    (dict(levels=0), "levels"),
    (dict(levels=5), "levels"),
    (dict(rng=0), "rng"),
])
def test_bad_arguments_are_refused(kw, match):
    base = dict(noise="laplace", budget=1.0, rng=None, branching=3)   # T = 30: 4 levels
    base.update(kw)
    with pytest.raises(ValueError, match=match):
        NegativeDigitsEngine(30, **base)


@pytest.mark.parametrize("horizon", [0, -1, True, 2.0, 2**41])
def test_bad_horizon_is_refused(horizon):
    with pytest.raises(ValueError, match="horizon"):
        NegativeDigitsEngine(horizon, noise="laplace", budget=1.0, branching=3)


def test_bad_counts_steps_and_step_ranges_are_refused():
    e = _engine(2, 3)
    for bad in (-1, 1.5, True, "3", None):
        with pytest.raises(ValueError, match="count"):
            e.push(bad)
    assert e.t == 0
    e.push(np.int64(3))
    e.push(0)
    with pytest.raises(ValueError, match="horizon"):
        e.push(1)
    for bad in (-1, 3, 1.0, True):
        with pytest.raises(ValueError, match="steps"):
            e.step_variances(bad)
    for fn in (mean_variance, best_levels):
        with pytest.raises(ValueError, match="branching"):
            fn(100, 4)


def test_study_constants_reproduce_the_papers_claims():
    """[APST]: k = 19 is the best odd branching; the mean squared error is about 4 times
    below Honaker's (the best earlier pure-DP mechanism), ~8 below the binary mechanism; it
    beats the Gaussian square-root factorisation when delta = O(T^-0.92)."""
    c = asymptotic_constants(19)
    assert c["best_odd_k"] == 19
    assert c["c_log2"] == pytest.approx(360 / (38 * math.log2(19) ** 3), rel=1e-14)
    assert c["factor_vs_honaker"] == pytest.approx(4.0456, abs=1e-4)
    assert c["factor_vs_binary"] == pytest.approx(8.0912, abs=1e-4)
    assert round(c["gaussian_sqrt_delta_exponent"], 2) == 0.92
    assert leading_constant(19, math.e) == pytest.approx(c["c_log2"] / math.log(2) ** 3)
    # exact mean variances: the study function equals the engine's mean per-step variance
    for T, k, levels in [(1000, 19, None), (1000, 19, 2), (500, 5, None)]:
        e = _engine(T, k, budget=0.7, levels=levels)
        assert mean_variance(T, k, 0.7, levels=levels) == pytest.approx(
            e.step_variances(T).mean(), rel=1e-12)
    # T = k^h: (h (k^2 - 1)/(4k) + 1/2 + 1/(2T)) nodes of variance 2 (h + 1)^2 / eps^2
    T = 19**3
    assert mean_variance(T) == pytest.approx(
        (3 * 360 / 76 + 0.5 + 0.5 / T) * 2 * 16, rel=1e-12)
    rows = {r["T"]: r for r in study_constants([10, 16, 20])}
    # the baselines at T = 2^20 (21 binary levels, v = 2 * 21^2 per node, eps = 1), by hand:
    # bit l < 20 of t = 1..2^20 is set for half the steps, bit 20 once; binary: popcount
    # nodes of variance v; Honaker: a level-l node's from-below variance v 2^l / (2^(l+1) - 1)
    T, v, unit = 2**20, 2.0 * 21**2, 20.0**3
    honaker = sum(v * 2**lv / (2 ** (lv + 1) - 1) / 2 for lv in range(20)) \
        + v * 2**20 / (2**21 - 1) / T
    assert rows[T]["binary"] * unit == pytest.approx((10 + 1 / T) * v, rel=1e-12)
    assert rows[T]["honaker"] * unit == pytest.approx(honaker, rel=1e-12)
    assert 3.5 < rows[T]["honaker_over_ours"] < 4.5          # [APST]: "about 4 times"
    # (19^5 - 1) / 2 >= 2^16 > (19^4 - 1) / 2: 5 balanced levels; fewer levels do better
    assert rows[2**16]["levels"] == 5 and rows[2**16]["best_levels"] < 5
    assert rows[2**16]["ours_best"] < rows[2**16]["ours"]


def test_through_the_counter_front_end():
    c = Counter(120, epsilon=1.0, mechanism="negative_digits", branching=19,
                rng=np.random.default_rng(9))
    e = _engine(120, 19, rng=9)
    x = np.random.default_rng(10).integers(0, 4, 120)
    np.testing.assert_array_equal([c.update(int(v)) for v in x], [e.push(int(v))[0] for v in x])
    np.testing.assert_allclose(c.step_variances(), e.step_variances(120), rtol=0)
    assert c.variance == e.step_variances(120)[-1]
    acc = c.account()
    json.dumps(acc)
    assert acc["horizon"] == 120 and acc["branching"] == 19
    with pytest.raises(ValueError, match="branching"):
        Counter(120, epsilon=1.0, mechanism="negative_digits", branching=18)
