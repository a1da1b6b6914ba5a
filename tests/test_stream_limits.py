"""Streaming counters held to the release's rules before the first draw: budget sanity
(noise identically 0 or saturating is refused with ZERO OpenDP calls, budgets just inside the
limits run), size limits checked by arithmetic (``step_variances``, huge horizons), unknown
or inapplicable options refused by name, and a property test: a random small secure counter
is either refused before any draw or runs every step.

Regressions (issue): ``Counter(4, epsilon=1e-300).update(1)`` returned -9.22e18 (OpenDP's
64-bit sampler saturated) and ``epsilon=1e300`` published exact counts;
``Counter(2**40, ...).step_variances(2**40)`` tried to allocate 8 TiB;
``Counter(8, rho=1, mechanism="sqrt", estimator="causal")`` raised TypeError."""

import math
import sys
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dptree_opt.data_release import secure_noise as sn
from dptree_opt.stream import Counter
from dptree_opt.stream import base as stream_base
from dptree_opt.stream.base import MAX_STRATEGY_STEPS, MAX_VARIANCE_BYTES

THETA, OMEGA = [0.9, 0.3], [0.1, 0.2]
SIM = np.random.default_rng


# ------------------------------------------------------------------ extreme budgets
CASES = [  # (horizon, mechanism, options, budget names)
    (8, "binary", {}, ("epsilon", "rho")),
    (9, "kary", dict(branching=3, estimator="causal"), ("epsilon", "rho")),
    (4, "negative_digits", dict(branching=3), ("epsilon", "rho")),
    (8, "tree_blue", {}, ("epsilon", "rho")),
    (8, "sqrt", {}, ("rho",)),
    (8, "blt", dict(theta=THETA, omega=OMEGA), ("rho",)),
    (8, "blt", {}, ("rho",)),
    (None, "binary", {}, ("epsilon", "rho")),
    (None, "kary", dict(branching=4, estimator="causal"), ("epsilon", "rho")),
]
EXTREMES = [(5e-324, "too small"), (1e-323, "too small"), (2e-323, "too small"),
            (1e-300, "too small"), (1e-40, "too small"), (1e300, "too large"),
            (1.7976931348623157e308, "too large")]


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "simulation"])
@pytest.mark.parametrize("horizon, mechanism, options, names", CASES)
def test_extreme_budgets_are_refused_before_any_opendp_call(opendp_calls, horizon, mechanism,
                                                            options, names, secure):
    for name in names:
        for budget, why in EXTREMES:
            with pytest.raises(ValueError, match=f"{name} = .* is {why}"):
                Counter(horizon, mechanism=mechanism, rng=None if secure else SIM(0),
                        **{name: budget}, **options)
    assert opendp_calls.events == []          # nothing built, nothing drawn


def test_the_reported_saturation_is_gone(opendp_calls):
    """Counter(4, epsilon=1e-300).update(1) returned -9.223372036854776e18."""
    with pytest.raises(ValueError, match="epsilon = 1e-300 is too small.*2\\^53"):
        Counter(4, epsilon=1e-300)
    with pytest.raises(ValueError, match="epsilon = 1e\\+300 is too large.*exact counts"):
        Counter(4, epsilon=1e300)
    assert opendp_calls.events == []


# ------------------------------------------------------------------ the limits, independently
# Integer noise, sensitivity 1 per level: Laplace scale 1 / eps_l, Gaussian 1 / sqrt(2 rho_l).
# Saturation: 64 scale >= 2^53, i.e. eps_l <= 2^-47 / rho_l <= 2^-95. Identically zero in
# double: P(z = 1) ~ exp(-eps_l) (Laplace) or exp(-rho_l) (Gaussian, 1 / (2 sigma^2) = rho_l)
# underflows: exp(-745) > 0 = exp(-746).
# tree_blue's BLUE divides by the variances: they must be normal doubles, and the variance
# is ~ 2 exp(-eps_l) (both noises: the z = +-1 terms), so eps_l = 710 is refused; its exact
# BLUE variances (about half a node's) must be normal doubles too: 700 works.
assert math.exp(-745.0) > 0 and math.exp(-746.0) == 0.0
assert 2 * math.exp(-700.0) / 8 > sys.float_info.min > 2 * math.exp(-710.0)
_SAT = {"epsilon": 2.0**-47, "rho": 2.0**-95}
_ZERO = {"tree_blue": (700.0, 710.0)}          # (inside, outside) per level; else 745, 746
# (horizon, mechanism, options, levels: the budget is split equally over them); the
# unbounded counter: its first block's single level and its totals get half the budget each,
# the block holding step 2^62, [2^61, 2^62), has floor(log2 2^61) + 1 = 62 levels sharing
# the other half
INTEGER = [(8, "binary", {}, 4, 4),                  # 2^3 <= 8: levels 0..3
           (9, "kary", dict(branching=3), 3, 3),     # 3^2 <= 9: levels 0..2
           (4, "negative_digits", dict(branching=3), 2, 2),   # (3^2 - 1) / 2 = 4 >= T
           (8, "tree_blue", {}, 4, 4),               # root, 4, 2, 1: 4 levels
           (None, "binary", {}, 2, 2 * 62)]


@pytest.mark.parametrize("name", ["epsilon", "rho"])
@pytest.mark.parametrize("horizon, mechanism, options, zero_parts, sat_parts", INTEGER)
def test_integer_noise_limits(opendp_calls, horizon, mechanism, options, zero_parts,
                              sat_parts, name):
    """Just inside both limits a secure counter runs every step; just outside it is refused
    with zero OpenDP calls."""
    def make(budget):
        return Counter(horizon, mechanism=mechanism, **{name: budget}, **options)

    inside, outside = _ZERO.get(mechanism, (745.0, 746.0))
    for budget, why in ((outside * zero_parts, "too large"),
                        (_SAT[name] * sat_parts, "too small")):
        with pytest.raises(ValueError, match=why):
            make(budget)
    assert opendp_calls.events == []
    for budget in (inside * zero_parts, _SAT[name] * sat_parts * 1.01):
        c = make(budget)
        ys = [c.update(3) for _ in range(horizon or 20)]
        assert np.all(np.isfinite(ys)) and opendp_calls.count("drawn") > 0


def _exact_sqrt_sensitivity2(T):
    """sum_(k<T) (binom(2k, k) / 4^k)^2, exactly."""
    return float(sum(Fraction(math.comb(2 * k, k), 4**k) ** 2 for k in range(T)))


def _blt_sums(theta, omega, T):
    """(sum c_k^2, sum b_k^2) from the dense matrices: c_0 = 1, c_i = sum_j omega_j
    theta_j^(i-1); b = first column of M C^-1 (M the prefix matrix)."""
    i = np.arange(1, T)
    c = np.concatenate([[1.0], (np.asarray(omega) * np.asarray(theta) ** (i[:, None] - 1))
                        .sum(axis=1)])
    C = sla.toeplitz(c, np.zeros(T))
    b = np.tril(np.ones((T, T))) @ np.linalg.solve(C, np.eye(T)[:, 0])
    return float(c @ c), float(b @ b)


@pytest.mark.parametrize("mechanism, options", [("sqrt", {}),
                                                ("blt", dict(theta=THETA, omega=OMEGA))])
def test_float_gaussian_limits(opendp_calls, mechanism, options):
    """sigma = sens / sqrt(2 rho); vanishing: 64 sigma < 2^-53 (rho > sens^2 2^117);
    saturating: 64 sigma sqrt(sum b^2) >= 2^53 (rho <= sens^2 sum b^2 / 2^95)."""
    T = 8
    sens2, b2 = ((_exact_sqrt_sensitivity2(T),) * 2 if mechanism == "sqrt"
                 else _blt_sums(THETA, OMEGA, T))
    vanish, saturate = sens2 * 2.0**117, sens2 * b2 / 2.0**95
    for rho, why in ((vanish * 1.01, "too large.*half an ulp"),
                     (saturate / 1.01, "too small")):
        with pytest.raises(ValueError, match=why):
            Counter(T, rho=rho, mechanism=mechanism, **options)
    assert opendp_calls.events == []
    for rho in (vanish / 1.01, saturate * 1.01):
        c = Counter(T, rho=rho, mechanism=mechanism, **options)
        ys = [c.update(3) for _ in range(T)]
        assert np.all(np.isfinite(ys)) and opendp_calls.count("drawn") > 0


def test_level_budgets_are_checked_per_level(opendp_calls):
    """A tiny share on one level is refused by name even when the total is fine; a level with
    budget 0 is unmeasured, not refused."""
    with pytest.raises(ValueError, match=r"level_budgets\[2\] \(nodes of width 2\) has scale "
                                         ".*its budget 1e-20"):   # root first
        Counter(8, epsilon=1.0, level_budgets=[0.25 - 1e-20, 0.25, 1e-20, 0.5])
    with pytest.raises(ValueError, match=r"level_budgets\[1\] \(nodes of width 1\) has scale "
                                         ".*its budget 1e-30"):   # root first: the leaves
        Counter(4, rho=0.5, mechanism="negative_digits", branching=3,
                level_budgets=[0.5 - 1e-30, 1e-30])   # 2 levels: (3^2 - 1) / 2 = 4 >= T
    assert opendp_calls.events == []
    c = Counter(8, epsilon=1.0, level_budgets=[0, 0, 0.5, 0.5])
    assert np.isfinite(c.update(1)) and opendp_calls.count("built") == 2


# ------------------------------------------------------------------ size limits
def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
    except ValueError as exc:
        err = exc
    else:
        err = None
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, err


@pytest.mark.parametrize("horizon, mechanism, options", [
    (2**40, "binary", {}), (2**40, "kary", dict(branching=7)),
    (2**40, "negative_digits", {}), (2**40, "blt", dict(theta=THETA, omega=OMEGA)),
    (None, "binary", {})])
def test_huge_horizons_build_small_and_refuse_huge_variances(horizon, mechanism, options):
    """Counter(2^40, ...) is made in bounded memory (measured, not timed); asking for the
    variances of 2^40 steps is refused by arithmetic, with the size, the limit and what to
    do, before anything is allocated."""
    budget = {"rho": 1.0} if mechanism == "blt" else {"epsilon": 1.0}
    peak, err = _peak_bytes(lambda: Counter(horizon, mechanism=mechanism, rng=SIM(0),
                                            **budget, **options))
    assert err is None and peak < 16 << 20
    c = Counter(horizon, mechanism=mechanism, rng=SIM(0), **budget, **options)
    peak, err = _peak_bytes(lambda: c.step_variances(2**40))
    assert err is not None and peak < 1 << 20
    assert "steps = 1099511627776" in str(err) and "GiB" in str(err)
    assert "limit of 2 GiB" in str(err) and "at most" in str(err)
    most = int(str(err).split("at most ")[1].split()[0])
    assert most * c.engine.variance_bytes_per_step <= MAX_VARIANCE_BYTES
    assert len(c.step_variances(1000)) == 1000


def test_variance_limit_sits_at_the_declared_bytes():
    """The largest allowed steps is MAX_VARIANCE_BYTES // bytes per step; one more refused."""
    c = Counter(2**40, epsilon=1.0, rng=SIM(0))
    most = MAX_VARIANCE_BYTES // c.engine.variance_bytes_per_step
    with pytest.raises(ValueError, match=f"at most {most} steps"):
        c.step_variances(most + 1)


@pytest.mark.parametrize("mechanism, kw, limit", [("sqrt", dict(rho=1.0), 2**24),
                                                  ("tree_blue", dict(epsilon=1.0), 2**22)])
def test_horizon_limits_of_the_drawn_ahead_counters(opendp_calls, mechanism, kw, limit):
    peak, err = _peak_bytes(lambda: Counter(limit + 1, mechanism=mechanism, **kw))
    assert isinstance(err, ValueError) and str(limit) in str(err) and peak < 1 << 20
    assert "use mechanism" in str(err) and opendp_calls.events == []


def test_strategy_is_for_small_steps_only():
    for c in (Counter(2**40, epsilon=1.0, rng=SIM(0)),
              Counter(2**40, epsilon=1.0, mechanism="negative_digits", rng=SIM(0)),
              Counter(None, epsilon=1.0, rng=SIM(0))):
        with pytest.raises(ValueError, match=f"at most {MAX_STRATEGY_STEPS}"):
            c.engine.strategy(2**40)


def test_the_unbounded_counter_stops_at_its_documented_reach(opendp_calls):
    """Budget sanity covers the blocks up to step 2^62: a step beyond is refused (nothing
    drawn)."""
    c = Counter(None, epsilon=1.0)
    c.update(1)
    drawn = opendp_calls.count("drawn")
    c.engine.t = 2**62
    with pytest.raises(ValueError, match="2\\^62"):
        c.update(1)
    assert opendp_calls.count("drawn") == drawn


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("horizon, mechanism, budget, options, accepted", [
    (8, "sqrt", "rho", dict(estimator="causal"), "takes no options"),
    (8, "blt", "rho", dict(estimator="causal"), "buffers, objective, theta, omega"),
    (8, "blt", "rho", dict(branching=3), "buffers, objective, theta, omega"),
    (8, "negative_digits", "epsilon", dict(estimator="causal"), "branching, level_budgets, "
                                                                 "levels"),
    (8, "tree_blue", "epsilon", dict(estimator="causal"), "branching, level_budgets"),
    (8, "binary", "epsilon", dict(buffers=3), "branching, level_budgets, estimator"),
    (8, "binary", "epsilon", dict(split=0.5), "branching, level_budgets, estimator"),
    (8, "kary", "epsilon", dict(branching=3, levels=2), "branching, level_budgets, estimator"),
    (8, "binary", "epsilon", dict(noise="gaussian"), "branching, level_budgets, estimator"),
    (None, "binary", "epsilon", dict(levels=3, foo=1), "branching, estimator, split"),
])
def test_inapplicable_options_name_the_mechanism_and_its_options(
        opendp_calls, horizon, mechanism, budget, options, accepted):
    with pytest.raises(ValueError) as err:
        Counter(horizon, mechanism=mechanism, **{budget: 1.0}, **options)
    msg = str(err.value)
    assert f"mechanism {mechanism!r}" in msg and accepted in msg
    assert all(name in msg for name in options)
    assert opendp_calls.events == []


@pytest.mark.parametrize("horizon, mechanism, branching", [
    (8, "kary", 2**63), (None, "kary", 2**63), (8, "kary", 1), (8, "kary", 2.5),
    (8, "tree_blue", 2**63), (8, "tree_blue", 2.5), (8, "tree_blue", [2**40, 2**40]),
    (8, "tree_blue", [4, 1, 2]), (8, "tree_blue", "ab"), (8, "tree_blue", []),
    (8, "tree_blue", [2, 2]), (8, "binary", 3)])
def test_bad_branching_is_a_value_error_naming_the_mechanism(opendp_calls, horizon, mechanism,
                                                            branching):
    """Not an OverflowError (k^l or node bounds beyond int64) nor a TypeError (a float)."""
    with pytest.raises(ValueError, match=f"mechanism '{mechanism}'.* branching"):
        Counter(horizon, mechanism=mechanism, epsilon=1.0, branching=branching)
    assert opendp_calls.events == []
    big = Counter(horizon, mechanism=mechanism, epsilon=1.0, rng=SIM(0),
                  branching=2**62 if mechanism != "binary" else 2)
    assert np.isfinite([big.update(1) for _ in range(8)]).all()   # the widest k still runs


def test_level_budgets_of_the_unbounded_counter_get_the_hint():
    with pytest.raises(ValueError, match="different heights; give split="):
        Counter(None, epsilon=1.0, level_budgets=[0.5, 0.5])


# ------------------------------------------------------------------ property
_MECHANISMS = ["binary", "kary", "negative_digits", "tree_blue", "sqrt", "blt", "unbounded"]


@st.composite
def _settings(draw):
    mech = draw(st.sampled_from(_MECHANISMS))
    horizon = draw(st.integers(1, 40))
    gaussian_only = mech in ("sqrt", "blt")
    name = "rho" if gaussian_only or draw(st.booleans()) else "epsilon"
    # half near the usable range, half over every double (extremes and the limits)
    budget = 10.0 ** draw(st.one_of(st.floats(-16, 4), st.floats(-320, 308)))
    options = {}
    if mech == "kary" or (mech == "unbounded" and draw(st.booleans())):
        options["branching"] = draw(st.integers(2, 5))
    if mech in ("binary", "kary", "unbounded") and draw(st.booleans()):
        options["estimator"] = draw(st.sampled_from(["covering", "causal"]))
    if mech == "negative_digits":
        options["branching"] = draw(st.sampled_from([3, 5, 7]))
    if mech == "tree_blue" and draw(st.booleans()):
        options["branching"] = draw(st.integers(2, 4))
    if mech == "blt":
        options.update(theta=THETA, omega=OMEGA)
    if mech == "unbounded" and draw(st.booleans()):
        options["split"] = draw(st.floats(0.01, 0.99))
    counts = draw(st.lists(st.integers(0, 50), min_size=horizon, max_size=horizon))
    return mech, horizon, name, budget, options, counts


def _refused_before_any_draw_or_complete(opendp_calls, setting):
    """A secure counter from ``setting`` is refused with no draw, or runs every step."""
    mech, horizon, name, budget, options, counts = setting
    if mech == "unbounded":
        mech, horizon = ("kary" if "branching" in options else "binary"), None
    before = opendp_calls.count("drawn")
    try:
        c = Counter(horizon, mechanism=mech, **{name: budget}, **options)
    except ValueError:
        assert opendp_calls.count("drawn") == before      # built is fine, drawn is not
        event("refused")
        return
    event("ran")
    ys = [c.update(x) for x in counts]                   # must not raise
    assert len(ys) == len(counts) and c.t == len(counts)
    assert np.all(np.isfinite(ys))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_settings())
def test_a_random_secure_counter_is_refused_before_any_draw_or_runs_to_the_end(opendp_calls,
                                                                               setting):
    _refused_before_any_draw_or_complete(opendp_calls, setting)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_settings())
def test_many_random_secure_counters(opendp_calls, setting):
    _refused_before_any_draw_or_complete(opendp_calls, setting)


# ------------------------------------------------------------------ nothing raises after a draw
ENGINES = [  # (horizon, mechanism, options): every engine, secure
    (8, "binary", dict(epsilon=1.0)),
    (9, "kary", dict(epsilon=1.0, branching=3, estimator="causal")),
    (8, "negative_digits", dict(rho=0.5, branching=3)),
    (8, "tree_blue", dict(epsilon=1.0)),
    (8, "sqrt", dict(rho=0.5)),
    (8, "blt", dict(rho=0.5, theta=THETA, omega=OMEGA)),
    (None, "binary", dict(epsilon=1.0)),
]


@pytest.mark.parametrize("horizon, mechanism, options", ENGINES)
def test_every_engine_checks_the_step_before_anything_changes_or_is_drawn(
        opendp_calls, horizon, mechanism, options):
    """An engine's push refuses a bad count, a running count reaching 2^53 and a step past
    its horizon (2^62 unbounded) with a ValueError, before it draws or changes anything
    (the tree, drawn-ahead and unbounded engines used to take -5 or 2^70 as a count and
    corrupt their state; "tree_blue" past its horizon raised IndexError); the front end
    reads the engine's step count, so the two never disagree."""
    c = Counter(horizon, mechanism=mechanism, **options)
    e = c.engine
    c.update(2)
    drawn = opendp_calls.count("drawn")
    for bad in (-5, 1.5, True, "3", None, 2**53 - 2, 2**70):
        with pytest.raises(ValueError, match="count"):
            e.push(bad)
        with pytest.raises(ValueError, match="count"):
            c.update(bad)
    assert opendp_calls.count("drawn") == drawn and e.t == c.t == 1 and c.total == 2
    assert np.isfinite(c.update(2**53 - 3)) and c.total == 2**53 - 1     # the last exact one
    with pytest.raises(ValueError, match="2\\^53"):
        c.update(1)
    for _ in range(2, horizon or 8):
        c.update(0)
    assert c.t == e.t == (horizon or 8)
    if horizon is None:
        e.t = 2**62
    drawn = opendp_calls.count("drawn")
    with pytest.raises(ValueError, match="no more steps"):
        e.push(0)
    assert opendp_calls.count("drawn") == drawn


def test_the_counter_does_not_forward_the_engines_stepping_methods(opendp_calls):
    """``Counter.push`` / ``Counter.run`` reached the engine around ``update``: -5 was added
    as a count and the front end's step count fell behind the engine's."""
    c = Counter(8, epsilon=1.0)
    s = Counter(8, rho=1.0, mechanism="sqrt")
    for obj, name in ((c, "push"), (c, "run"), (s, "run"), (s, "push")):
        with pytest.raises(AttributeError, match="update"):
            getattr(obj, name)
    assert opendp_calls.count("drawn") == 0 and c.t == s.t == 0
    assert c.levels == 4                            # other engine attributes still forwarded


def test_a_refused_block_start_draws_nothing_for_that_step(monkeypatch, opendp_calls):
    """The unbounded counter makes each block's tree (its OpenDP measurements built and
    checked) when the block's first step arrives, before that step draws anything: a
    refusal there (injected) leaves the counter as it was, and the step can be retried.
    It used to start the next block after the previous one's last draws: the step's release
    was lost and the counter's state no longer matched its step count."""
    spied = sn.opendp_measurement
    fail = {"armed": False, "fired": 0}

    def faulty(**kw):
        if fail["armed"]:
            fail["armed"] = False
            fail["fired"] += 1
            raise ValueError("injected: OpenDP refused the measurement")
        return spied(**kw)

    # level budgets >= 1000 / 2 / 4 = 125: P(any noise != 0) < 100 x 2 e^-125, so the
    # released running counts are the exact ones
    c = Counter(None, epsilon=1000.0)
    monkeypatch.setattr(sn, "opendp_measurement", faulty)
    out = []
    for step in range(1, 9):                   # blocks [0,1), [1,2), [2,4), [4,8)
        fail["armed"] = step in (2, 3, 5)       # the first step of blocks 1, 2, 3
        drawn, t = opendp_calls.count("drawn"), c.t
        try:
            out.append(c.update(3))
        except ValueError as exc:
            assert "injected" in str(exc)
            assert opendp_calls.count("drawn") == drawn and c.t == t == step - 1
            out.append(c.update(3))             # the retry runs the step
    assert fail["fired"] == 3 and c.block == 3
    np.testing.assert_array_equal(out, 3 * np.arange(1, 9))
    assert c.variance == c.step_variances(8)[-1]


def test_run_refuses_by_size_before_drawing(monkeypatch, opendp_calls):
    """The factorisation counters' ``run`` computed the variances (refused above the memory
    limit) after drawing every step's noise; now before."""
    monkeypatch.setattr(stream_base, "MAX_VARIANCE_BYTES", 10 * 32)   # 10 steps at 32 B
    for mechanism, options in (("sqrt", {}), ("blt", dict(theta=THETA, omega=OMEGA))):
        e = Counter(64, rho=1.0, mechanism=mechanism, **options).engine
        with pytest.raises(ValueError, match="at most 10 steps"):
            e.run(np.ones(11, dtype=int))
        assert opendp_calls.count("drawn") == 0 and e.t == 0
        est, _ = e.run(np.ones(10, dtype=int))
        assert len(est) == 10 and e.t == 10 and opendp_calls.count("drawn") > 0
        opendp_calls.events.clear()
