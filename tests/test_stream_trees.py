"""Issue 16 item 1: the tree counter's causal BLUE and the unbounded (hybrid) counter.

* the causal BLUE's estimates equal an independent dense GLS over the rows complete by each
  step, computed from the same noisy node values (and its variances likewise);
* exact per-step variances equal Monte Carlo within 4 SE;
* causality, privacy recomputed from the released rows, secure path without numpy noise."""

import json
import math

import numpy as np
import pytest

from dptree_opt.stream import Counter
from dptree_opt.stream import noise as stream_noise


def _record_draws(monkeypatch):
    """Log every noisy node value a counter draws (in draw order)."""
    log = []
    real = stream_noise.GroupNoise.draw

    def draw(self, group, count):
        y = real(self, group, count)
        log.append(y)
        return y

    monkeypatch.setattr(stream_noise.GroupNoise, "draw", draw)
    return log


def _dense_causal_gls(rows, y, t):
    """GLS estimate and variance of the prefix [0, t) from the rows released by step t, by
    whitening and least squares (the slow obviously-correct twin)."""
    keep = rows.release_step <= t
    A = rows.matrix.toarray()[keep][:, :t]
    var = rows.variances[keep]
    ok = np.isfinite(var)
    A, var, yy = A[ok], var[ok], np.asarray(y)[keep][ok]
    w = 1.0 / np.sqrt(var)
    Aw = A * w[:, None]
    q = np.ones(t)
    # q' x_hat with x_hat the GLS solution; identified iff q in the row space of A
    pinv = np.linalg.pinv(Aw)
    coef = q @ pinv                    # estimator weights on the whitened rows
    if not np.allclose(coef @ Aw, q, atol=1e-8):
        return math.nan, math.inf
    return float(coef @ (yy * w)), float(coef @ coef)


@pytest.mark.parametrize("T, kw", [
    (23, dict(epsilon=1.0)),
    (30, dict(rho=0.5, mechanism="kary", branching=3)),
    (40, dict(epsilon=2.0, mechanism="kary", branching=4, level_budgets=[0.8, 1.0, 0.2])),
    (17, dict(epsilon=1.0, level_budgets=[0.1, 0.2, 0.3, 0.4, 0.0])),     # no leaves (root first)
    (16, dict(rho=1.0, level_budgets=[0.1, 0.2, 0.2, 0.0, 0.5])),         # a level skipped
])
def test_causal_blue_equals_dense_gls_on_the_complete_rows(monkeypatch, T, kw):
    log = _record_draws(monkeypatch)
    c = Counter(T, rng=np.random.default_rng(7), estimator="causal", **kw)
    counts = np.random.default_rng(8).integers(0, 6, T)
    est, var = [], []
    for x in counts:
        est.append(c.update(int(x)))
        var.append(c.variance)
    rows = c.engine.strategy(T)
    assert len(log) == rows.matrix.shape[0]                 # rows in draw order
    for t in range(1, T + 1):
        g_est, g_var = _dense_causal_gls(rows, log, t)
        if math.isinf(g_var):
            assert math.isinf(var[t - 1]) and math.isnan(est[t - 1])
            continue
        assert est[t - 1] == pytest.approx(g_est, rel=1e-9, abs=1e-8)
        assert var[t - 1] == pytest.approx(g_var, rel=1e-9)
    np.testing.assert_allclose(c.step_variances(), var, rtol=1e-12)


def test_causal_blue_never_worse_than_covering_and_strictly_better_somewhere():
    T = 1000
    cov = Counter(T, epsilon=1.0, rng=np.random.default_rng(0)).step_variances()
    blue = Counter(T, epsilon=1.0, rng=np.random.default_rng(0),
                   estimator="causal").step_variances()
    assert np.all(blue <= cov * (1 + 1e-12))
    # at t = 512 the one complete level-9 node is improved by its subtree
    assert blue[511] < cov[511]
    # a leaf-only step (t odd, one node per level: t = 1) is not improved
    assert blue[0] == cov[0]


@pytest.mark.parametrize("kw", [dict(epsilon=1.0, estimator="causal"),
                                dict(rho=0.5, mechanism="kary", branching=3,
                                     estimator="causal"),
                                dict(epsilon=1.0, horizon=None),
                                dict(rho=0.5, horizon=None, estimator="causal",
                                     mechanism="kary", branching=3, split=0.3)])
def test_step_variances_equal_monte_carlo(kw):
    """1500 simulated runs of 40 steps: each step's mean squared error is within 4 SE of the
    exact variance (SE from the fourth moment), and the mean error within 4 SE of 0."""
    kw = dict(kw)
    horizon = kw.pop("horizon", 40)
    T, trials = 40, 1500
    counts = np.random.default_rng(1).integers(0, 5, T)
    truth = np.cumsum(counts)
    rng = np.random.default_rng(2)
    err = np.empty((trials, T))
    for i in range(trials):
        c = Counter(horizon, rng=rng, **kw)
        err[i] = [c.update(int(x)) for x in counts] - truth
    exact = c.step_variances(T)
    m2 = np.mean(err**2, axis=0)
    se = np.sqrt((np.mean(err**4, axis=0) - m2**2) / trials)
    assert np.all(np.abs(m2 - exact) <= 4 * se), np.max(np.abs(m2 - exact) / se)
    assert np.all(np.abs(err.mean(axis=0)) <= 4 * np.sqrt(exact / trials))


@pytest.mark.parametrize("estimator", ["covering", "causal"])
@pytest.mark.parametrize("k", [2, 3])
def test_unbounded_counter_matches_its_rows_and_privacy(monkeypatch, estimator, k):
    """The unbounded counter over 3 blocks and a bit: its estimates are the stated linear
    functions of its released rows (dense GLS over block rows reproduces the causal ones'
    variances), every row is released only once complete, and each step's l1 loss over the
    scaled rows is exactly eps (block tree + block total)."""
    T = k**3 + 3
    eps = 1.5
    log = _record_draws(monkeypatch)
    c = Counter(None, epsilon=eps, mechanism="kary", branching=k, estimator=estimator,
                rng=np.random.default_rng(3))
    counts = np.random.default_rng(4).integers(0, 4, T)
    est = np.array([c.update(int(x)) for x in counts])
    var = c.step_variances(T)
    rows = c.engine.strategy(T)
    A = rows.matrix.toarray()
    # a row never involves a step at or after its release
    last = np.array([np.flatnonzero(r).max() for r in A])
    assert np.all(last < rows.release_step)
    # privacy: scale b_r = sqrt(var_r / 2) (continuous Laplace), loss_j = sum_r |A_rj| / b_r
    b = np.sqrt(rows.variances / 2)
    loss = (np.abs(A) / b[:, None]).sum(axis=0)
    # steps whose block is complete within T carry the full eps; the open block's steps
    # carry its tree's share plus (not yet released) nothing for the total
    np.testing.assert_allclose(loss.max(), eps, rtol=1e-12)
    if estimator == "causal":
        assert len(log) == A.shape[0]
        for t in range(1, T + 1):
            g_est, g_var = _dense_causal_gls(rows, log, t)
            assert est[t - 1] == pytest.approx(g_est, rel=1e-9, abs=1e-8)
            assert var[t - 1] == pytest.approx(g_var, rel=1e-9)


def test_unbounded_counter_is_causal_and_runs_long():
    a = np.random.default_rng(3).integers(0, 9, 300)
    b = a.copy()
    b[100:] += 1
    ca = Counter(None, epsilon=1.0, rng=np.random.default_rng(5))
    cb = Counter(None, epsilon=1.0, rng=np.random.default_rng(5))
    ya = np.array([ca.update(int(x)) for x in a])
    yb = np.array([cb.update(int(x)) for x in b])
    np.testing.assert_array_equal(ya[:100], yb[:100])
    assert not np.array_equal(ya[100:], yb[100:])
    # variance grows like log^3 t: at t = 2^k it is (k + 1) block totals
    v = ca.step_variances(1024)
    assert v[1023] == pytest.approx(11 * 2 * (2 / 1.0) ** 2, rel=1e-12)
    assert ca.variance == pytest.approx(v[299], rel=1e-12)


def test_secure_unbounded_counter_uses_opendp_only(opendp_calls, no_numpy_noise):
    c = Counter(None, rho=0.5, estimator="causal")
    ys = [c.update(1) for _ in range(20)]
    # blocks [0,1) [1,2) [2,4) [4,8) [8,16) complete, [16,32) has 4 steps: tree nodes
    # 1 + 1 + 3 + 7 + 15 + (4 + 2 + 1) and 5 block totals
    assert opendp_calls.count("drawn") == 1 + 1 + 3 + 7 + 15 + 7 + 5
    assert all(math.isfinite(y) for y in ys)
    acc = c.account()
    json.dumps(acc)
    assert acc["horizon"] is None and "OpenDP" in acc["sampler"]
    # the secure variances are the discrete Gaussian's, computed without drawing
    np.testing.assert_allclose(c.step_variances(20)[-1], c.variance, rtol=1e-12)


@pytest.mark.parametrize("kw, match", [
    (dict(epsilon=1.0, estimator="blue"), "estimator"),
    (dict(epsilon=1.0, split=1.0), "split"),
    (dict(epsilon=1.0, split=True), "split"),
    (dict(epsilon=1.0, level_budgets=[0.5, 0.5]), "split"),
    (dict(epsilon=1.0, mechanism="sqrt"), "unbounded"),
])
def test_unbounded_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        Counter(None, **kw)


def test_account_is_json_and_sums_to_the_budget():
    c = Counter(100, epsilon=2.0, mechanism="kary", branching=4,
                level_budgets=[0.5, 0.5, 0.5, 0.5], rng=np.random.default_rng(0))
    acc = c.account()
    json.dumps(acc)
    assert sum(level["budget"] for level in acc["levels"]) == pytest.approx(2.0)
    assert "NO privacy" in acc["sampler"]


# ---------------------------------------------------------------- the offline BLUE, noise ahead
from dptree_opt import Mechanism, blue, expected_error, strategies, workloads  # noqa: E402


@pytest.mark.parametrize("T, kw", [(16, dict(epsilon=1.0)),
                                   (27, dict(rho=0.5, branching=3)),
                                   (20, dict(epsilon=2.0, branching=[3, 8])),      # padded
                                   (16, dict(epsilon=1.0, level_budgets=[0, .1, .2, .3, .4]))])
def test_tree_blue_ahead_is_the_blue_of_the_node_release(T, kw):
    """The outputs equal the offline BLUE applied to R x + z for the same noise z (the
    post-processing identity the privacy rests on), their variances are the offline BLUE's,
    every output depends on past steps only, and the key identity of the adaptive coupling:
    shifting step j by delta and the noise by -R e_j delta leaves every output unchanged."""
    counts = np.random.default_rng(1).integers(0, 7, T)
    c = Counter(T, mechanism="tree_blue", rng=np.random.default_rng(5), **kw)
    ys = np.array([c.update(int(x)) for x in counts])
    mech = c.engine.mechanism
    z = mech.sample_noise(np.random.default_rng(5))        # the same draw as the counter's
    A = mech.released.matrix.toarray()
    x_full = np.zeros(A.shape[1])
    x_full[:T] = counts
    offline = np.cumsum(blue(mech, A @ x_full + z))[:T]
    np.testing.assert_allclose(ys, offline, rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(c.step_variances(), expected_error(
        workloads.prefix(T), mech, "blue", per_query=True), rtol=1e-12)
    # coupling: x + delta e_j with z - R e_j delta gives the same outputs (L R = W)
    j, delta = T // 3, 5
    x2 = x_full.copy()
    x2[j] += delta
    z2 = z - A[:, j] * delta
    np.testing.assert_allclose(np.cumsum(blue(mech, A @ x2 + z2))[:T], offline, atol=1e-8)
    # privacy from the scaled rows: Laplace sum_r |A_rj| / b_r <= eps, = eps for real steps
    if "epsilon" in kw:
        b = np.asarray(mech.scales)
        ok = np.isfinite(b)
        loss = (np.abs(A[ok]) / b[ok, None]).sum(axis=0)[:T]
        np.testing.assert_allclose(loss.max(), kw["epsilon"], rtol=1e-12)


def test_tree_blue_ahead_beats_the_causal_blue_and_matches_offline():
    T = 1024
    ahead = Counter(T, epsilon=1.0, mechanism="tree_blue",
                    rng=np.random.default_rng(0)).step_variances()
    causal = Counter(T, epsilon=1.0, estimator="causal",
                     rng=np.random.default_rng(0)).step_variances()
    offline = expected_error(workloads.prefix(T), Mechanism(
        strategies.tree(T, 2), epsilon=1.0, neighbours="add_remove"), per_query=True)
    np.testing.assert_allclose(ahead, offline, rtol=1e-12)
    # MATH.md section 6: the binary tree + OLS (= BLUE, equal budgets) has mean 298.9 at 2^10
    assert ahead.mean() == pytest.approx(298.93, abs=0.01)
    assert ahead.mean() < causal.mean() / 2


def test_tree_blue_ahead_step_variances_equal_monte_carlo():
    T, trials = 30, 1500
    counts = np.random.default_rng(1).integers(0, 5, T)
    rng = np.random.default_rng(2)
    err = np.empty((trials, T))
    for i in range(trials):
        c = Counter(T, rho=0.5, mechanism="tree_blue", branching=3, rng=rng)
        err[i] = [c.update(int(x)) for x in counts] - np.cumsum(counts)
    exact = c.step_variances()
    m2 = np.mean(err**2, axis=0)
    se = np.sqrt((np.mean(err**4, axis=0) - m2**2) / trials)
    assert np.all(np.abs(m2 - exact) <= 4 * se)


def test_tree_blue_ahead_secure_uses_opendp_only(opendp_calls, no_numpy_noise):
    c = Counter(64, epsilon=1.0, mechanism="tree_blue", branching=4)
    # one measurement per level of 4^3, each drawn once (a vector of that level's nodes)
    assert opendp_calls.events == ["built"] * 4 + ["drawn"] * 4
    ys = [c.update(2) for _ in range(64)]
    assert all(math.isfinite(y) for y in ys)
    acc = c.account()
    json.dumps(acc)
    assert "caveat" in acc
    with pytest.raises(ValueError, match="covers"):
        Counter(100, epsilon=1.0, mechanism="tree_blue", branching=[4, 4])


def test_level_budgets_run_root_first():
    """level_budgets are given root first, like every budget list of the package: over T = 8
    steps the binary tree has nodes of widths 8, 4, 2, 1, and level l's Laplace scale is
    1 / eps_l (sensitivity 1); the leaves get the last entry."""
    c = Counter(8, epsilon=1.0, level_budgets=[0.4, 0.3, 0.2, 0.1], rng=np.random.default_rng(0))
    assert list(c.level_budgets) == [0.4, 0.3, 0.2, 0.1]
    widths = [level["node_width"] for level in c.account()["levels"]]
    scales = dict(zip(widths, c.level_scales))
    assert scales == pytest.approx({8: 1 / 0.4, 4: 1 / 0.3, 2: 1 / 0.2, 1: 1 / 0.1}, rel=1e-12)
