"""Issue 16: Gaussian factorisation counters for continual counting (square root and BLT).

Exact per-step variances against Monte Carlo (4 SE) and, for the square root, against exact
fractions binom(2k, k) / 4^k; the released noise against dense M C^-1 z; causality; privacy
recomputed from the explicit matrix C; the secure path uses OpenDP only; vectorised run()
equals pushing step by step; bad input refused."""

import json
import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.linalg as sla

from dptree_opt.strategies.blt import blt_loss, optimize_blt
from dptree_opt.strategies.factorization import sqrt_coefficients
from dptree_opt.stream import Counter
from dptree_opt.stream.factorization import BLTEngine, SqrtEngine, ToeplitzEngine

THETA = [0.95, 0.6, 0.2]
OMEGA = [0.05, 0.2, 0.15]

ENGINES = [
    pytest.param(SqrtEngine, {}, id="sqrt"),
    pytest.param(BLTEngine, {}, id="blt-default"),
    pytest.param(BLTEngine, dict(buffers=2, objective="max"), id="blt-max-2"),
    pytest.param(BLTEngine, dict(theta=THETA, omega=OMEGA), id="blt-given"),
]


def _push_all(engine, counts):
    out = np.array([engine.push(int(c)) for c in counts])
    return out[:, 0], out[:, 1]


def _exact_sqrt_c2(n):
    """c_k^2 = (binom(2k, k) / 4^k)^2 as exact fractions, k < n."""
    return [Fraction(math.comb(2 * k, k), 4**k) ** 2 for k in range(n)]


@pytest.mark.parametrize("cls, kw", ENGINES)
def test_step_variances_equal_monte_carlo(cls, kw):
    """1500 simulated runs of T = 40 steps: every step's empirical error variance is within
    4 standard errors (from the sample fourth moment) of the exact variance."""
    T, trials = 40, 1500
    counts = np.random.default_rng(1).integers(0, 5, T)
    truth = np.cumsum(counts)
    rng = np.random.default_rng(2)
    err = np.empty((trials, T))
    for i in range(trials):
        eng = cls(T, noise="gaussian", budget=0.7, rng=rng, **kw)
        est, var = _push_all(eng, counts)
        err[i] = est - truth
    exact = eng.step_variances()
    np.testing.assert_allclose(var, exact, rtol=1e-12)      # push reports the exact variance
    m2 = np.mean(err**2, axis=0)
    se = np.sqrt((np.mean(err**4, axis=0) - m2**2) / trials)
    assert np.all(np.abs(m2 - exact) <= 4 * se), np.max(np.abs(m2 - exact) / se)
    assert np.all(np.abs(err.mean(axis=0)) <= 4 * np.sqrt(exact / trials))


def test_sqrt_variances_equal_exact_fractions():
    T, rho = 50, 0.3
    c2 = _exact_sqrt_c2(T)
    sens2 = sum(c2)
    sigma2 = sens2 / (2 * Fraction(rho))
    exact = np.array([float(sigma2 * sum(c2[:t])) for t in range(1, T + 1)])
    eng = SqrtEngine(T, noise="gaussian", budget=rho, rng=np.random.default_rng(0))
    assert eng.sensitivity == pytest.approx(math.sqrt(float(sens2)), rel=1e-14)
    np.testing.assert_allclose(eng.step_variances(), exact, rtol=1e-13)
    _, var = _push_all(eng, np.ones(T, dtype=int))
    np.testing.assert_allclose(var, exact, rtol=1e-13)


def test_sqrt_anchor_2_10():
    """MATH.md section 7: the square root's mean prefix variance per unit sigma^2 (rho = 1/2)
    at n = 2^10 is 9.6708; the engine's equals an independent direct summation."""
    n = 1 << 10
    c = [1.0]
    for k in range(1, n):  # plain-Python recurrence c_k = c_(k-1) (2k - 1) / (2k)
        c.append(c[-1] * (2 * k - 1) / (2 * k))
    s2 = math.fsum(v * v for v in c)
    direct = s2 * math.fsum((n - k) * c[k] ** 2 for k in range(n)) / n
    eng = SqrtEngine(n, noise="gaussian", budget=0.5, rng=np.random.default_rng(0))
    got = float(eng.step_variances().mean())
    assert got == pytest.approx(direct, rel=1e-12)
    assert got == pytest.approx(9.6708, abs=5e-5)


def test_blt_anchor_2_10():
    """The default BLT engine (4 buffers, mean objective) at T = 2^10, rho = 1/2: its mean
    step variance is the strategy's loss, between the optimal factorisation 8.7348 (a lower
    bound for every factorisation) and jax_privacy's max-objective BLT 9.692 (MATH.md)."""
    n = 1 << 10
    eng = BLTEngine(n, noise="gaussian", budget=0.5, rng=np.random.default_rng(0))
    got = float(eng.step_variances().mean())
    assert got == pytest.approx(blt_loss(eng.theta, eng.omega, n, "mean"), rel=1e-10)
    assert 8.7348 <= got <= 9.692
    assert got < 9.6708  # beats the square root
    acc = eng.account()
    assert acc["mean_step_variance"] == pytest.approx(got, rel=1e-10)
    assert acc["final_step_variance"] == pytest.approx(eng.step_variances()[-1], rel=1e-10)


@pytest.mark.parametrize("cls, kw", ENGINES)
def test_noise_is_dense_m_c_inverse_z(cls, kw):
    """With the same draws z (the engine's rng replayed), estimate - prefix = M C^-1 z, with
    C = T(c) from the released rows and the inverse taken densely; and (for BLT) the buffer
    recurrence gives C^-1 z."""
    T, sigma_seed = 30, 5
    eng = cls(T, noise="gaussian", budget=0.4, rng=np.random.default_rng(sigma_seed), **kw)
    counts = np.random.default_rng(3).integers(0, 9, T)
    est, _ = _push_all(eng, counts)
    z = np.random.default_rng(sigma_seed).normal(0.0, eng.sigma, T)
    C = eng.strategy(T).matrix.toarray()
    np.testing.assert_allclose(C, sla.toeplitz(eng.coefficients(T), np.zeros(T)), atol=0)
    M = np.tril(np.ones((T, T)))
    dense = M @ np.linalg.solve(C, z)
    np.testing.assert_allclose(est - np.cumsum(counts), dense, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(eng.correlate(z), dense, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(eng.noise_coefficients(T), (M @ np.linalg.inv(C))[:, 0],
                               rtol=1e-10, atol=1e-12)
    if cls is SqrtEngine:  # C^2 = M, so B = C
        np.testing.assert_allclose(C @ C, M, atol=1e-12)


@pytest.mark.parametrize("cls, kw", ENGINES)
def test_causal(cls, kw):
    T, s = 40, 17
    a = np.random.default_rng(4).integers(0, 6, T)
    b = a.copy()
    b[s:] += np.random.default_rng(5).integers(1, 4, T - s)
    ea, _ = _push_all(cls(T, budget=1.0, rng=np.random.default_rng(9), **kw), a)
    eb, _ = _push_all(cls(T, budget=1.0, rng=np.random.default_rng(9), **kw), b)
    np.testing.assert_array_equal(ea[:s], eb[:s])
    assert np.all(ea[s:] != eb[s:])


@pytest.mark.parametrize("cls, kw", ENGINES)
@pytest.mark.parametrize("rho", [0.1, 2.5])
def test_privacy_from_explicit_matrix(cls, kw, rho):
    """rho = (max column l2 norm of C / sigma)^2 / 2 over the horizon equals the budget;
    column 0 is the largest; row i only involves inputs before its release step i + 1."""
    T = 64
    eng = cls(T, noise="gaussian", budget=rho, rng=np.random.default_rng(0), **kw)
    rows = eng.strategy(T)
    C = rows.matrix.toarray()
    norms = np.sqrt((C**2).sum(axis=0))
    assert np.argmax(norms) == 0
    assert np.all(rows.variances == eng.sigma**2)
    assert (norms.max() / eng.sigma) ** 2 / 2 == pytest.approx(rho, rel=1e-12)
    assert norms.max() == pytest.approx(eng.sensitivity, rel=1e-12)
    np.testing.assert_array_equal(rows.release_step, np.arange(1, T + 1))
    i, j = np.nonzero(C)
    assert np.all(j < rows.release_step[i])
    # the rows over fewer steps are a sub-release: their loss is at most the budget
    small = eng.strategy(10).matrix.toarray()
    assert (np.sqrt((small**2).sum(axis=0)).max() / eng.sigma) ** 2 / 2 <= rho


@pytest.mark.parametrize("cls, kw", ENGINES)
def test_run_equals_push(cls, kw):
    T = 300
    counts = np.random.default_rng(6).integers(0, 4, T)
    e1 = cls(T, budget=0.5, rng=np.random.default_rng(8), **kw)
    est1, var1 = _push_all(e1, counts[:200])
    e2 = cls(T, budget=0.5, rng=np.random.default_rng(8), **kw)
    est2, var2 = e2.run(counts[:200])
    np.testing.assert_allclose(est2, est1, rtol=1e-11, atol=1e-10)
    np.testing.assert_allclose(var2, var1, rtol=1e-12)
    # after run(), pushing continues the same stream
    tail1, tv1 = _push_all(e1, counts[200:])
    tail2, tv2 = _push_all(e2, counts[200:])
    np.testing.assert_allclose(tail2, tail1, rtol=1e-11, atol=1e-10)
    np.testing.assert_allclose(tv2, tv1, rtol=1e-11)
    with pytest.raises(ValueError):
        e2.run(counts)  # not fresh


@pytest.mark.parametrize("cls, kw", [(SqrtEngine, {}),
                                     (BLTEngine, dict(theta=THETA, omega=OMEGA))])
def test_secure_path_uses_opendp_only(cls, kw, opendp_calls, no_numpy_noise):
    """rng=None: one OpenDP float Gaussian measurement is built (its privacy map checked)
    when the engine is made, nothing drawn; every draw is a call of it, ahead in blocks (16,
    then 32: not one call per step); numpy's random entry points are booby-trapped."""
    eng = cls(100, noise="gaussian", budget=0.5, rng=None, **kw)
    assert eng.secure and opendp_calls.events == ["built"]
    assert opendp_calls.built == [{"noise": "float_gaussian", "scale": eng.sigma}]
    est, var = _push_all(eng, np.ones(40, dtype=int))
    assert np.all(np.isfinite(est))
    # 40 steps: blocks of 16 then 32 draws, each a vector of zeros
    assert opendp_calls.events == ["built", "drawn", "drawn"]
    assert [len(v) for v in opendp_calls.drawn] == [16, 32]
    assert all(x == 0.0 for v in opendp_calls.drawn for x in v)
    assert np.allclose(var, eng.step_variances(40))
    eng2 = cls(100, noise="gaussian", budget=0.5, rng=None, **kw)
    est2, _ = eng2.run(np.ones(50, dtype=int))
    assert np.all(np.isfinite(est2))
    assert opendp_calls.events[3:] == ["built", "drawn"] and len(opendp_calls.drawn[-1]) == 50
    acc = eng.account()
    assert acc["sampler"].startswith("OpenDP") and acc["secure"] is True


@pytest.mark.parametrize("cls, kw", ENGINES)
def test_account_is_json(cls, kw):
    eng = cls(128, noise="gaussian", budget=0.25, rng=np.random.default_rng(0), **kw)
    acc = json.loads(json.dumps(eng.account()))
    assert acc["mechanism"].startswith(eng.name) and acc["noise"] == "gaussian"
    assert acc["budget"] == {"rho": 0.25}
    assert acc["rho"] == 0.25 and acc["unit"] == "event (one step's count changes by 1)"
    assert acc["sigma"] == pytest.approx(acc["l2_sensitivity"] / math.sqrt(0.5), rel=1e-14)
    assert "numpy simulation" in acc["sampler"] and "double precision" in acc["caveat"]
    assert isinstance(eng, ToeplitzEngine)


def test_blt_memory_is_constant():
    eng = BLTEngine(1 << 20, budget=0.5, rng=np.random.default_rng(0), buffers=3)
    for _ in range(3000):
        eng.push(1)
    arrays = [v for v in vars(eng).values() if isinstance(v, np.ndarray)]
    assert max(a.size for a in arrays) <= 3


def test_blt_default_parameters_are_the_optimum_for_the_horizon():
    eng = BLTEngine(500, budget=0.5, rng=np.random.default_rng(0), buffers=3, objective="max")
    th, om, _ = optimize_blt(500, 3, "max")
    np.testing.assert_array_equal(eng.theta, th)
    np.testing.assert_array_equal(eng.omega, om)
    assert eng.account()["objective"] == "max" and eng.buffers == 3


@pytest.mark.parametrize("kw", [
    dict(noise="laplace"), dict(budget=0.0), dict(budget=-1.0), dict(budget=math.inf),
    dict(budget="1"), dict(horizon=0), dict(horizon=2.5), dict(horizon=True),
    dict(rng=np.random.RandomState(0)), dict(rng=3),
])
@pytest.mark.parametrize("cls", [SqrtEngine, BLTEngine])
def test_bad_common_input_refused(cls, kw):
    args = dict(horizon=16, noise="gaussian", budget=0.5, rng=np.random.default_rng(0))
    args.update(kw)
    horizon = args.pop("horizon")
    with pytest.raises(ValueError) as info:
        cls(horizon, **args)
    if kw.get("noise") == "laplace":
        assert "Gaussian only" in str(info.value)


@pytest.mark.parametrize("kw", [
    dict(buffers=0), dict(buffers=13), dict(buffers=1.5), dict(buffers=True),
    dict(theta=[0.5, 1.0], omega=[0.1, 0.1]), dict(theta=[0.0], omega=[0.1]),
    dict(theta=[1.2], omega=[0.1]), dict(theta=[0.5, 0.4], omega=[0.1]),
    dict(theta=[0.5]), dict(omega=[0.1]), dict(theta=[0.5, 0.4], omega=[0.1, 0.1], buffers=3),
    dict(objective="median"), dict(theta=[0.5], omega=[-3.0]),  # unstable C^-1
])
def test_bad_blt_options_refused(kw):
    with pytest.raises(ValueError):
        BLTEngine(16, noise="gaussian", budget=0.5, rng=np.random.default_rng(0), **kw)


def test_horizon_limits():
    with pytest.raises(ValueError):
        SqrtEngine((1 << 24) + 1, budget=0.5, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        BLTEngine((1 << 40) + 1, budget=0.5, rng=np.random.default_rng(0),
                  theta=THETA, omega=OMEGA)


@pytest.mark.parametrize("cls", [SqrtEngine, BLTEngine])
def test_bad_steps_and_counts_refused(cls):
    eng = cls(5, budget=0.5, rng=np.random.default_rng(0))
    for bad in (-1, 1.5, True, "3", None):
        with pytest.raises(ValueError):
            eng.push(bad)
    assert eng.t == 0
    for _ in range(5):
        eng.push(2)
    with pytest.raises(ValueError):
        eng.push(1)  # beyond the horizon
    for steps in (-1, 6, 2.0):
        with pytest.raises(ValueError):
            eng.step_variances(steps)
    for steps in (0, 6, 2.0):
        with pytest.raises(ValueError):
            eng.strategy(steps)
    assert eng.step_variances(0).shape == (0,)
    fresh = cls(5, budget=0.5, rng=np.random.default_rng(0))
    for counts in ([], [1, 2, 3, 4, 5, 6], [1, -1], [1.5, 2], [[1, 2]], [True, False]):
        with pytest.raises(ValueError):
            fresh.run(counts)
    assert fresh.t == 0


@pytest.mark.parametrize("mech, cls", [("sqrt", SqrtEngine), ("blt", BLTEngine)])
def test_through_counter(mech, cls):
    """stream.Counter(mechanism='sqrt' | 'blt').update gives the engine's numbers."""
    T = 30
    counts = np.random.default_rng(1).integers(0, 5, T)
    counter = Counter(T, rho=0.5, mechanism=mech, rng=np.random.default_rng(4))
    got = [counter.update(int(c)) for c in counts]
    ref, var = _push_all(cls(T, noise="gaussian", budget=0.5,
                             rng=np.random.default_rng(4)), counts)
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert counter.variance == var[-1]


def test_blt_at_2_20():
    T = 1 << 20
    eng = BLTEngine(T, budget=0.5, rng=np.random.default_rng(0), buffers=5)
    var = eng.step_variances()
    assert var.mean() == pytest.approx(blt_loss(eng.theta, eng.omega, T, "mean"), rel=1e-9)
    assert var.mean() < 28.2753  # beats the square root (MATH.md section 7)
    est, v = eng.run(np.ones(T, dtype=np.int64))
    assert np.all(np.isfinite(est)) and v[-1] == var[-1]
    err = est - np.arange(1, T + 1)
    assert abs(err[-1]) < 6 * math.sqrt(var[-1])  # one draw: a loose sanity bound
    # the closed-form sensitivity equals the direct sum over the horizon's coefficients
    c = eng.coefficients(T)
    assert eng.sensitivity**2 == pytest.approx(float(c @ c), rel=1e-12)


def test_sqrt_engine_large_horizon_sensitivity():
    T = (1 << 20) + 12345  # crosses the chunked summation
    eng = SqrtEngine(T, budget=0.5, rng=np.random.default_rng(0))
    c = sqrt_coefficients(T)
    assert eng.sensitivity == pytest.approx(math.sqrt(float(c @ c)), rel=1e-12)
