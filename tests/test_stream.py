"""Issue 16 item 1 (part): ``stream.Counter`` -- the k-ary tree mechanism with covering sums
for continual counting. Exact per-step variances against Monte Carlo (4 SE) and the binary
mechanism's popcount formula; causality; privacy recomputed from the node structure; the
secure path uses OpenDP only; bad input refused before anything is drawn."""

import math

import numpy as np
import pytest

from dptree_opt.stream import Counter


def _run(counter, counts):
    return np.array([counter.update(int(c)) for c in counts]), counter


@pytest.mark.parametrize("kw", [dict(epsilon=1.0), dict(rho=0.5),
                                dict(epsilon=2.0, mechanism="kary", branching=3),
                                dict(rho=1.0, mechanism="kary", branching=5,
                                     level_budgets=[0.7, 0.2, 0.1])])  # root first
def test_step_variances_equal_monte_carlo(kw):
    """Over 1500 simulated runs of T = 40 steps, the empirical variance of every step's error
    is within 4 standard errors (from the sample's fourth moment) of the exact variance."""
    T, trials = 40, 1500
    counts = np.random.default_rng(1).integers(0, 5, T)
    truth = np.cumsum(counts)
    rng = np.random.default_rng(2)
    err = np.empty((trials, T))
    for i in range(trials):
        est, c = _run(Counter(T, rng=rng, **kw), counts)
        err[i] = est - truth
    exact = c.step_variances()
    m2 = np.mean(err**2, axis=0)
    se = np.sqrt((np.mean(err**4, axis=0) - m2**2) / trials)
    assert np.all(np.abs(m2 - exact) <= 4 * se + 1e-12), np.max(np.abs(m2 - exact) / se)
    assert np.all(np.abs(err.mean(axis=0)) <= 4 * np.sqrt(exact / trials))
    # the variance reported after each step is the exact one of that step
    c2 = Counter(T, rng=np.random.default_rng(0), **kw)
    for t, v in enumerate(exact):
        c2.update(1)
        assert c2.variance == pytest.approx(v, rel=1e-12)


def test_binary_mechanism_variance_is_popcount_times_the_level_variance():
    """Chan-Shi-Song / Dwork et al.: with an equal split over the L + 1 levels, the count
    after t steps sums popcount(t) nodes, each of variance 2 ((L + 1) / eps)^2."""
    T, eps = 1000, 0.5
    c = Counter(T, epsilon=eps, rng=np.random.default_rng(0))
    levels = math.floor(math.log2(T)) + 1                         # 2^9 <= 1000 < 2^10
    v = 2 * (levels / eps) ** 2
    expected = np.array([bin(t).count("1") * v for t in range(1, T + 1)])
    np.testing.assert_allclose(c.step_variances(), expected, rtol=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_outputs_are_causal(k):
    """Fixed noise (the same seed): changing the inputs after step s leaves every output up to
    s unchanged."""
    T, s = 60, 23
    a = np.random.default_rng(3).integers(0, 9, T)
    b = a.copy()
    b[s:] = np.random.default_rng(4).integers(0, 9, T - s)
    kw = dict(epsilon=1.0, mechanism="kary", branching=k)
    ya, _ = _run(Counter(T, rng=np.random.default_rng(5), **kw), a)
    yb, _ = _run(Counter(T, rng=np.random.default_rng(5), **kw), b)
    np.testing.assert_array_equal(ya[:s], yb[:s])
    assert not np.array_equal(ya[s:], yb[s:])


@pytest.mark.parametrize("T, k", [(7, 2), (10, 3), (16, 2), (30, 4)])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_privacy_recomputed_from_the_nodes(T, k, noise):
    """The measured nodes (width k^l <= T, complete within the horizon), each scaled by its
    level's noise scale: the largest change of the scaled answers when one step's count moves
    by one is the budget (l1 for Laplace; rho = D2^2 / 2 for Gaussian)."""
    kw = {"epsilon": 1.3} if noise == "laplace" else {"rho": 0.7}
    c = Counter(T, mechanism="kary", branching=k, rng=np.random.default_rng(0), **kw)
    rows = []
    for level in range(c.levels):
        w = k**level
        for i in range(T // w):
            r = np.zeros(T)
            r[i * w:(i + 1) * w] = 1 / c.level_scales[level]
            rows.append(r)
    A = np.array(rows)
    if noise == "laplace":
        loss = np.abs(A).sum(axis=0).max()
    else:
        loss = 0.5 * (A**2).sum(axis=0).max()
    assert loss == pytest.approx(next(iter(kw.values())), rel=1e-12)


def test_secure_counter_uses_opendp_and_integer_noise(opendp_calls, no_numpy_noise):
    c = Counter(20, epsilon=1.0)
    assert c.secure and opendp_calls.count("built") == c.levels == 5  # 2^4 <= 20: levels 0..4
    ys = [c.update(1) for _ in range(20)]
    # one draw per node complete within 20 steps: 20 + 10 + 5 + 2 + 1
    assert opendp_calls.count("drawn") == 38
    assert all(y == round(y) for y in ys)
    # the discrete Laplace variance q / (1 - q)^2 * 2 with q = exp(-eps_l)
    q = math.exp(-0.2)
    assert c.level_variances[0] == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-12)


@pytest.mark.parametrize("args, kw, match", [
    ((0,), dict(epsilon=1.0), "horizon"),
    ((True,), dict(epsilon=1.0), "horizon"),
    ((2**41,), dict(epsilon=1.0), "horizon"),
    ((10,), dict(), "exactly one"),
    ((10,), dict(epsilon=1.0, rho=1.0), "exactly one"),
    ((10,), dict(epsilon=-1.0), "epsilon"),
    ((10,), dict(epsilon=1.0, mechanism="fenwick"), "mechanism"),
    ((10,), dict(epsilon=1.0, mechanism="kary"), "branching"),
    ((10,), dict(epsilon=1.0, mechanism="binary", branching=3), "kary"),
    ((10,), dict(epsilon=1.0, rng=0), "Generator"),
    ((10,), dict(epsilon=1.0, level_budgets=[0.5, 0.5]), "one entry per noisy level"),
])
def test_bad_arguments_are_refused(args, kw, match):
    with pytest.raises(ValueError, match=match):
        Counter(*args, **kw)


def test_bad_counts_and_steps_beyond_the_horizon_are_refused():
    c = Counter(2, epsilon=1.0, rng=np.random.default_rng(0))
    for bad in (-1, 1.5, True, "3", None):
        with pytest.raises(ValueError, match="non-negative integer"):
            c.update(bad)
    assert c.t == 0
    c.update(np.int64(3))
    c.update(0)
    with pytest.raises(ValueError, match="horizon"):
        c.update(1)
