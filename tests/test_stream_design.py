"""Streams of designs (``stream.Counter(T, design=d)``): an offline design's BLUE with its
noise drawn ahead, in the secure form of the releases; the secure-noise rules (every
measurement checked before the first draw, no numpy noise, no copies); exact variances
against the dense oracle and Monte Carlo; refusals before anything is drawn."""

import copy
import functools
import pickle

import numpy as np
import pytest
from oracles import constrained_gls

from dptree_opt import Mechanism, optimize, strategies, workloads
from dptree_opt.data_release import secure_noise as sn
from dptree_opt.stream import Counter


@functools.lru_cache(maxsize=8)
def _design(family: str, n: int, **kw):
    return optimize.best_mechanism(workloads.prefix(n), families=[family], **kw)


def _oracle_variances(mech) -> np.ndarray:
    """The exact variances of the BLUE's running counts, from the dense GLS oracle."""
    _, var, ok = constrained_gls(mech.released.matrix.toarray(), mech.variances,
                                 workloads.prefix(mech.n_bins).dense())
    assert ok.all()
    return var


def test_secure_design_counter_draws_ahead_with_opendp_only(opendp_calls, no_numpy_noise):
    """The Gaussian optimum as a counter: one OpenDP measurement (the one level of its scaled
    integer strategy, at its exact sensitivity) built before its one draw of T integers;
    the running counts are the exact counts plus that noise's BLUE path; the variances are
    the dense oracle's on the released mechanism, within the rounding tolerance of the
    design's own (oracle on the real strategy)."""
    T = 24
    d = _design("gaussian_optimum", T, rho=0.5)
    c = Counter(T, design=d)
    assert opendp_calls.events == ["built", "drawn"]
    assert len(opendp_calls.drawn[0]) == T and set(opendp_calls.drawn[0]) == {0}
    m = c.engine.mechanism
    assert opendp_calls.built[0]["exact"] == m.released.exact_sensitivity("add_remove", 2)
    counts = np.arange(T) % 4
    ys = np.array([c.update(int(x)) for x in counts])
    noise = ys - np.cumsum(counts)
    assert np.all(np.isfinite(noise)) and np.ptp(noise) > 0
    var = c.step_variances()
    assert var == pytest.approx(_oracle_variances(m), rel=1e-9)
    design = _oracle_variances(d.mechanism())
    assert var.sum() <= design.sum() * (1 + sn.ROUNDING_TOLERANCE)
    assert c.variance == pytest.approx(var[-1])
    acc = c.account()
    assert acc["design"]["route"] == "scaled" and acc["design"]["scale"] >= 2**16
    assert "OpenDP" in acc["sampler"]


def test_simulated_design_counter_matches_its_variances():
    """Monte Carlo (simulation noise: the same discrete mechanism with numpy's integer
    samplers): the mean squared error of every running count is within 4 standard errors
    of ``step_variances``, and the mean error within 4 standard errors of 0."""
    T, trials = 16, 600
    d = _design("sqrt", T, rho=0.5)
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 5, T)
    err = np.empty((trials, T))
    for i in range(trials):
        c = Counter(T, design=d, rng=rng)
        err[i] = [c.update(int(x)) for x in counts] - np.cumsum(counts)
    exact = c.step_variances()
    m2 = np.mean(err**2, axis=0)
    se = np.sqrt((np.mean(err**4, axis=0) - m2**2) / trials)
    assert np.all(np.abs(m2 - exact) <= 4 * se)
    assert np.all(np.abs(err.mean(axis=0)) <= 4 * np.sqrt(exact / trials))


def test_node_budgets_and_trees_by_design(opendp_calls):
    """Budgets per node (Laplace) and a tree with optimal budgets as designs: every noise
    group built and checked before the first draw, the variances the oracle's (the
    discrete noise's), at most the design's continuous ones."""
    T = 16
    for d in (_design("node_budgets", T, epsilon=1.0), _design("tree_optimal", T, rho=0.5)):
        opendp_calls.events.clear()
        c = Counter(T, design=d)
        ev = opendp_calls.events
        assert ev[:ev.index("drawn")].count("built") == ev.count("built") >= ev.count("drawn")
        var = c.step_variances()
        assert var == pytest.approx(_oracle_variances(c.engine.mechanism), rel=1e-9)
        assert var.sum() <= _oracle_variances(d.mechanism()).sum() * (1 + 1e-12)
        for _ in range(T):
            c.update(1)
        with pytest.raises(ValueError, match="horizon"):
            c.update(1)


def test_design_budget_and_mechanism_are_the_designs():
    """The budget may be left out (the design's), or given equal to it; simulation
    counters copy and pickle, secure ones refuse (their noise is drawn)."""
    T = 12
    d = _design("blt", T, rho=0.5)
    a = Counter(T, design=d, rho=0.5, rng=np.random.default_rng(0))
    b = Counter(T, design=d, rng=np.random.default_rng(0))
    assert a.noise == b.noise == "gaussian" and a.budget == b.budget == 0.5
    assert [a.update(1) for _ in range(T)] == [b.update(1) for _ in range(T)]
    sim = Counter(T, design=d, rng=np.random.default_rng(1))
    twin = pickle.loads(pickle.dumps(sim))
    assert twin.update(3) == sim.update(3)
    secure = Counter(T, design=d)
    for action in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="secure"):
            action(secure)


@pytest.mark.parametrize("make, match", [
    (lambda d, g: Counter(13, design=d), "made for 12 steps"),
    (lambda d, g: Counter(12, design=d, rho=0.25), "made for rho = 0.5"),
    (lambda d, g: Counter(12, design=d, epsilon=1.0), "gaussian noise"),
    (lambda d, g: Counter(12, design=d, mechanism="binary"), "not both"),
    (lambda d, g: Counter(12, design=d, branching=2), "does not take the option branching"),
    (lambda d, g: Counter(None, design=d), "horizon"),
    (lambda d, g: Counter(16, design=g), "grid design"),
    (lambda d, g: Counter(12, design="sqrt"), "design must be a Design"),
    (lambda d, g: Counter(12, design=Mechanism(strategies.sqrt_factorization(12), rho=0.5,
                                               neighbours="swap")), "one event"),
    (lambda d, g: Counter(6, design=Mechanism(strategies.Strategy(
        np.vstack([np.eye(6), 0.3 * np.tril(np.ones((6, 6)))]), levels=[1] * 6 + [2] * 6),
        rho=0.5)), "several noise levels"),
])
def test_bad_designs_are_refused_before_any_draw(make, match, opendp_calls):
    d = _design("sqrt", 12, rho=0.5)
    g = optimize.best_mechanism(workloads.prefix((4, 4)), epsilon=1.0,
                                families=["grid_quadtree"])
    with pytest.raises(ValueError, match=match):
        make(d, g)
    assert opendp_calls.events == []
