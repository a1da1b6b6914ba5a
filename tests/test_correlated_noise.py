"""stream.CorrelatedNoise: the training-loop noise generator (docs/math.md sections 9, 11).

Oracles: the noise of step t must equal row t of B z for the SAME row noise z, with B built
here densely and independently: M C^-1 by numpy's inverse for square factorisations, the dense
(causal) GLS of tests/oracles.py for the tree estimators and the offline BLUE, and a
hand-built covering of each prefix by maximal complete nodes. Variances: the exact per-step
variances come from expected_error (the engines), the empirical ones from dim independent
coordinates, with a stated bound.
"""

import copy
import math
import pickle

import numpy as np
import pytest
from oracles import causal_gls, constrained_gls

from dptree_opt import Mechanism, participation, strategies
from dptree_opt.engines import NotServed
from dptree_opt.strategies.factorization import sqrt_coefficients
from dptree_opt.strategies.restarted import restarted
from dptree_opt.strategies.toeplitz import series_inverse
from dptree_opt.stream import CorrelatedNoise

N = 12
PART = participation.fixed_epoch(3, 4)


def _dense(strategy):
    return np.asarray(strategy.matrix.toarray(), dtype=float)


def _prefix(n):
    return np.tril(np.ones((n, n)))


def _bisr(n, bands):
    """Banded inverse square root (Kalinin & Lampert 2024): C^-1 = T(u), u the first
    `bands` coefficients of (1 - z)^(1/2); C = T(1 / u(z))."""
    u = np.zeros(n)
    u[0] = 1.0
    for k in range(1, bands):
        u[k] = u[k - 1] * (k - 1.5) / k
    return strategies.toeplitz(series_inverse(u, n), name="bisr")


def _lower_random(n, seed=3):
    rng = np.random.default_rng(seed)
    c = np.tril(rng.uniform(0.1, 1.0, (n, n)))
    c[np.diag_indices(n)] += 1.0
    return strategies.Strategy(c, np.ones(n, dtype=np.int32), name="dense lower")


def _column_normalised_banded(n, bands):
    rng = np.random.default_rng(5)
    c = np.tril(np.triu(rng.uniform(0.2, 1.0, (n, n)), -(bands - 1)))
    c /= np.linalg.norm(c, axis=0)
    return strategies.banded(c, bands)


# (name, strategy, estimator, participation, oracle kind)
CASES = [
    ("blt", lambda: strategies.blt(N, theta=[0.9, 0.6, 0.2], omega=[0.3, 0.2, 0.1]), "auto",
     PART, "square"),
    ("sqrt", lambda: strategies.sqrt_factorization(N), "auto", PART, "square"),
    ("toeplitz", lambda: strategies.toeplitz(1.0 / (1.0 + np.arange(N))), "blue", PART,
     "square"),
    ("bisr", lambda: _bisr(N, 4), "auto", PART, "square"),
    ("bsr", lambda: strategies.banded(sqrt_coefficients(N), 4), "auto",
     participation.min_sep(3, 4), "square"),
    ("banded_colnorm", lambda: _column_normalised_banded(N, 3), "auto", PART, "square"),
    ("dense_lower", lambda: _lower_random(N), "causal", participation.single(), "square"),
    ("tree_causal", lambda: strategies.truncated_tree(N, [2, 2, 2, 2]), "auto", PART,
     "causal"),
    ("tree_covering", lambda: strategies.truncated_tree(N, [2, 2, 2, 2]), "covering", PART,
     "covering"),
    ("binary_causal", lambda: strategies.binary_tree(16), "causal",
     participation.fixed_epoch(4, 4), "causal"),
    ("ternary_covering", lambda: strategies.tree(9, 3), "covering", participation.single(),
     "covering"),
    ("tree_blue_ahead", lambda: strategies.truncated_tree(N, [2, 2, 2, 2]), "blue", PART,
     "blue"),
    ("restarted_tree_causal", lambda: restarted(strategies.binary_tree(4), 10), "auto",
     participation.fixed_epoch(2, 5), "causal"),
    ("restarted_tree_covering", lambda: restarted(strategies.binary_tree(4), 10), "covering",
     participation.min_sep(3, 3), "covering"),
    ("restarted_blt", lambda: restarted(strategies.blt(4, theta=[0.7, 0.2], omega=[0.3, 0.1]),
                                        N), "auto", PART, "square"),
    ("restarted_bsr", lambda: restarted(strategies.banded(sqrt_coefficients(6), 3), N),
     "auto", participation.min_sep(2, 5), "square"),
    ("restarted_blt_tail_ahead", lambda: restarted(strategies.blt(5, theta=[0.6],
                                                                  omega=[0.3]), N),
     "auto", participation.min_sep(2, 5), "blue"),
    ("restarted_tree_blue_ahead", lambda: restarted(strategies.binary_tree(4), N), "blue",
     PART, "blue"),
    ("p_identity_ahead", lambda: strategies.p_identity(
        np.random.default_rng(1).uniform(0, 1, (3, N))), "blue", participation.single(),
     "blue"),
]


def _covering_oracle(a):
    """Row t: the indicator of the maximal complete rows covering [0, t + 1), read from the
    dense 0/1 matrix ``a``: a greedy walk from the left, the widest complete row first (of
    identical ranges the first row, the ancestor in these strategies' root-first order)."""
    nz = a != 0
    lo = np.argmax(nz, axis=1)
    hi = a.shape[1] - np.argmax(nz[:, ::-1], axis=1)
    n = a.shape[1]
    coef = np.zeros((n, a.shape[0]))
    for t in range(1, n + 1):
        start = 0
        while start < t:
            ok = np.flatnonzero((lo == start) & (hi <= t))
            r = ok[np.argmax(hi[ok])]                 # argmax: the first of the widest
            coef[t - 1, r] = 1.0
            start = int(hi[r])
    return coef


def _oracle(mech, kind):
    a = _dense(mech.released)
    n = a.shape[1]
    if kind == "square":
        return _prefix(n) @ np.linalg.inv(a)
    if kind == "covering":
        return _covering_oracle(a)
    gls = causal_gls if kind == "causal" else constrained_gls
    coef, _, ok = gls(a, mech.variances, _prefix(n))
    assert ok.all()
    return coef


def _run(strategy, dim, estimator, part, seed, noise="gaussian"):
    """The generator's whole output with injected z (returned too), and the mechanism."""
    budget = {"rho": 0.7} if noise == "gaussian" else {"epsilon": 1.3}
    mech = Mechanism(strategy, participation=part, **budget)
    rng = np.random.default_rng(seed)
    unit = (rng.standard_normal((mech.released.n_rows, dim)) if noise == "gaussian"
            else rng.laplace(0.0, 1.0, (mech.released.n_rows, dim)))
    z = unit * mech.scales[:, None]
    asked = []

    def source(rows):
        asked.extend(rows.tolist())
        return z[rows]

    gen = CorrelatedNoise(strategy, dim, participation=part, estimator=estimator,
                          noise_source=source, **budget)
    out = np.array(list(gen))
    assert len(asked) == len(set(asked))            # every row's noise drawn once
    return gen, mech, z, out


@pytest.mark.parametrize("dim", [1, 5])
@pytest.mark.parametrize("name,make,estimator,part,kind", CASES, ids=[c[0] for c in CASES])
def test_outputs_equal_dense_estimate(name, make, estimator, part, kind, dim):
    gen, mech, z, out = _run(make(), dim, estimator, part, seed=11 + dim)
    expected = _oracle(mech, kind) @ z
    assert out.shape == (mech.n_bins, dim)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-9 * scale)


def test_laplace_outputs_equal_dense_estimate():
    for make, kind in ((lambda: strategies.blt(N, theta=[0.8, 0.3], omega=[0.4, 0.1]),
                        "square"),
                       (lambda: strategies.truncated_tree(N, [2, 2, 2, 2]), "causal")):
        gen, mech, z, out = _run(make(), 3, "auto", PART, seed=4, noise="laplace")
        assert gen.epsilon == mech.epsilon and gen.rho is None
        np.testing.assert_allclose(out, _oracle(mech, kind) @ z, rtol=0,
                                   atol=1e-9 * np.abs(out).max())


def test_structures_from_the_registry():
    picked = {name: CorrelatedNoise(make(), 1, rho=1.0, participation=part,
                                    estimator=estimator, rng=np.random.default_rng(0)).structure
              for name, make, estimator, part, _ in CASES}
    assert picked["blt"] == picked["sqrt"] == picked["bisr"] == "toeplitz"
    assert picked["bsr"] == picked["banded_colnorm"] == picked["dense_lower"] == \
        "lower_triangular"
    assert picked["tree_causal"] == picked["tree_covering"] == "tree"
    assert picked["tree_blue_ahead"] == picked["p_identity_ahead"] == "ahead"
    assert picked["restarted_tree_causal"] == picked["restarted_blt"] == \
        picked["restarted_bsr"] == "restarted"
    # a truncated last copy of a factorisation is not square (its later rows measure the
    # first steps too): only the offline BLUE, drawn ahead
    assert picked["restarted_tree_blue_ahead"] == picked["restarted_blt_tail_ahead"] == "ahead"


# Empirical variance over DIM independent coordinates against the exact per-step variance.
# Gaussian: Var(s^2 / sigma^2) = 2 / (DIM - 1); Laplace combinations have excess kurtosis
# <= 3, so Var(s^2 / sigma^2) <= 5 / DIM (+ O(1 / DIM^2)). A 6-sd bound per step (two-sided
# tail < 2e-9 Gaussian; Chebyshev-free normal approximation at DIM = 20000) over <= 16 steps.
DIM = 20000


@pytest.mark.parametrize("name,make,estimator,part,kind",
                         [c for c in CASES if c[0] in ("blt", "bsr", "tree_causal",
                                                       "tree_covering", "tree_blue_ahead",
                                                       "sqrt")],
                         ids=["blt", "sqrt", "bsr", "tree_causal", "tree_covering", "ahead"])
def test_empirical_variance_matches_exact(name, make, estimator, part, kind):
    gen = CorrelatedNoise(make(), DIM, rho=0.7, participation=part, estimator=estimator,
                          rng=np.random.default_rng(2024))
    exact = gen.step_variances()
    out = np.array(list(gen))
    ratio = out.var(axis=1, ddof=1) / exact
    assert np.all(np.abs(ratio - 1.0) <= 6.0 * math.sqrt(2.0 / (DIM - 1)))
    assert np.all(np.abs(out.mean(axis=1)) <= 6.0 * np.sqrt(exact / DIM))


def test_empirical_variance_laplace():
    gen = CorrelatedNoise(strategies.binary_tree(16), DIM, epsilon=2.0,
                          participation=participation.fixed_epoch(2, 8), estimator="causal",
                          rng=np.random.default_rng(7))
    exact = gen.step_variances()
    ratio = np.array(list(gen)).var(axis=1, ddof=1) / exact
    assert np.all(np.abs(ratio - 1.0) <= 6.0 * math.sqrt(5.0 / DIM))


def test_account_is_the_mechanisms():
    for part in (participation.single(), PART, participation.min_sep(2, 5)):
        s = strategies.banded(sqrt_coefficients(N), 4)
        mech = Mechanism(s, rho=0.3, participation=part)
        gen = CorrelatedNoise(s, 2, rho=0.3, participation=part, rng=np.random.default_rng(0))
        assert gen.rho == mech.rho and gen.epsilon is None
        assert gen.participation == mech.participation == part
        assert gen.sensitivity == mech.sensitivity
        np.testing.assert_array_equal(gen.mechanism.scales, mech.scales)
    # a Mechanism is used as it is
    gen = CorrelatedNoise(mech, 2, rng=np.random.default_rng(0))
    assert gen.mechanism is mech
    with pytest.raises(ValueError, match="already calibrated"):
        CorrelatedNoise(mech, 2, rho=1.0, rng=np.random.default_rng(0))


def test_horizon_and_stop_iteration():
    gen = CorrelatedNoise(strategies.binary_tree(8), 2, rho=1.0, rng=np.random.default_rng(0))
    assert gen.horizon == 8 and gen.steps_taken == 0 and gen.estimator == "causal"
    for t in range(8):
        assert next(gen).shape == (2,)
        assert gen.steps_taken == t + 1
    with pytest.raises(StopIteration):
        next(gen)
    assert "steps taken: 8 of 8" in gen.describe()


def _never(rows):
    raise AssertionError("noise drawn before every check passed")


def test_checks_before_the_first_draw():
    s = strategies.sqrt_factorization(N)
    with pytest.raises(ValueError, match="dim"):
        CorrelatedNoise(s, 0, rho=1.0, noise_source=_never)
    with pytest.raises(ValueError, match="memory"):     # history of 12 x 2^60 floats
        CorrelatedNoise(s, 1 << 60, rho=1.0, noise_source=_never)
    with pytest.raises(NotServed, match="covering"):
        CorrelatedNoise(s, 2, rho=1.0, estimator="covering", noise_source=_never)
    with pytest.raises(ValueError, match="estimator"):
        CorrelatedNoise(s, 2, rho=1.0, estimator="best", noise_source=_never)
    with pytest.raises(ValueError, match="fixed_epoch"):
        CorrelatedNoise(s, 2, rho=1.0, participation=participation.fixed_epoch(5, 5),
                        noise_source=_never)
    with pytest.raises(ValueError, match="rho"):
        CorrelatedNoise(s, 2, noise_source=_never)
    with pytest.raises(ValueError, match="secure"):
        CorrelatedNoise(s, 2, rho=1.0, secure=True, rng=np.random.default_rng(0))
    unmeasured_leaves = Mechanism(strategies.binary_tree(8), rho=1.0,
                                  level_budgets=[0.5, 0.25, 0.25, 0.0])
    with pytest.raises(ValueError, match="not identified"):
        CorrelatedNoise(unmeasured_leaves, 2, estimator="causal", noise_source=_never)
    with pytest.raises(ValueError, match="noise_source returned shape"):
        next(CorrelatedNoise(s, 2, rho=1.0, noise_source=lambda rows: np.zeros((1, 3))))


def test_secure_refuses_copy_and_pickle():
    pytest.importorskip("opendp")
    gen = CorrelatedNoise(strategies.blt(4, theta=[0.5], omega=[0.2]), 2, rho=1.0)
    assert gen.secure and "OpenDP" in gen.describe()
    first = next(gen)
    assert first.shape == (2,) and np.all(np.isfinite(first))
    for action in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="secure"):
            action(gen)
    tree = CorrelatedNoise(strategies.binary_tree(4), 2, rho=1.0, secure=True)
    next(tree)
    with pytest.raises(TypeError, match="secure"):
        pickle.dumps(tree)


def test_simulation_copy_replays():
    gen = CorrelatedNoise(strategies.binary_tree(8), 3, rho=1.0, rng=np.random.default_rng(5))
    next(gen)
    twin = copy.deepcopy(gen)
    np.testing.assert_array_equal(next(gen), next(twin))
    assert "SIMULATION" in gen.describe()


@pytest.mark.slow
def test_published_bsr_anchor_end_to_end():
    """Banded square root with b bands at n = 2052, fixed_epoch(k=6, b=342), rho = 1/2:
    row variance sens^2 = 17.5399 and mean loss 80.6074 (docs/math.md section 11, published
    anchors). The generated noise's empirical variance, averaged over the 2052 steps, lies
    within 6 sd of the exact mean: each step's ratio s_t^2 / var_t has sd sqrt(2 / (dim - 1)),
    so their weighted mean has sd at most that, whatever their correlation."""
    n, dim = 2052, 4000
    gen = CorrelatedNoise(strategies.banded(sqrt_coefficients(n), 342), dim, rho=0.5,
                          participation=participation.fixed_epoch(6, 342),
                          rng=np.random.default_rng(3))
    assert gen.mechanism.scales[0] ** 2 == pytest.approx(17.5399, abs=1e-4)
    exact = gen.step_variances()
    assert exact.mean() == pytest.approx(80.6074, abs=1e-4)
    empirical = np.array([z.var(ddof=1) for z in gen])
    assert abs(empirical.mean() / exact.mean() - 1.0) <= 6.0 * math.sqrt(2.0 / (dim - 1))
