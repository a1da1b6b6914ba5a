"""No replay of a stream's noise: a secure counter (every mechanism, before and after some
updates), its engine and its noise objects refuse copy.copy, copy.deepcopy, pickle (protocols
0..5), copy.replace and the hooks behind them (``__reduce__``, ``__reduce_ex__``,
``__getstate__``, ``__setstate__``, ``__replace__``, copyreg / Pickler dispatch tables), with a
TypeError that says why, and without drawing anything. Simulation counters can be copied and
pickled, and the copies replay the same simulated noise.

Regression (issue: a ``tree_blue`` / ``sqrt`` / ``blt`` counter deep-copied or pickled and fed
other data released outputs differing by exactly the data difference; the tree and
negative-digit counters refused only because a ctypes object cannot be pickled)."""

import copy
import copyreg
import io
import pickle

import numpy as np
import pytest

from dptree_opt.stream import Counter
from dptree_opt.stream.secret import NoiseBuffer, SecretState

THETA, OMEGA = [0.9, 0.3], [0.1, 0.2]
T = 12
CASES = [
    pytest.param(T, "binary", dict(epsilon=1.0), id="binary"),
    pytest.param(T, "kary", dict(epsilon=1.0, branching=3, estimator="causal"), id="kary"),
    pytest.param(T, "negative_digits", dict(rho=0.5, branching=3), id="negative_digits"),
    pytest.param(T, "tree_blue", dict(epsilon=1.0), id="tree_blue"),
    pytest.param(T, "sqrt", dict(rho=0.5), id="sqrt"),
    pytest.param(T, "blt", dict(rho=0.5, theta=THETA, omega=OMEGA), id="blt"),
    pytest.param(None, "binary", dict(epsilon=1.0), id="unbounded"),
]
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def _copiers():
    """(name, function of an object) for every way to copy or serialise it."""
    out = [("copy.copy", copy.copy), ("copy.deepcopy", copy.deepcopy)]
    out += [(f"pickle protocol {p}", lambda o, p=p: pickle.loads(pickle.dumps(o, protocol=p)))
            for p in PROTOCOLS]
    replace = getattr(copy, "replace", None)       # Python >= 3.13
    out.append(("copy.replace", replace if replace else lambda o: o.__replace__()))
    return out


COPIERS = _copiers()


def _secret_parts(counter):
    """Every object of the counter that holds secure noise or sampler state."""
    parts, seen, todo = [], set(), [counter]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, SecretState):
            parts.append(obj)
            todo.extend(v for v in vars(obj).values() if isinstance(v, SecretState))
    return parts


@pytest.mark.parametrize("steps", [0, 5])
@pytest.mark.parametrize("horizon, mechanism, kw", CASES)
def test_secure_counters_refuse_every_copy(opendp_calls, horizon, mechanism, kw, steps):
    c = Counter(horizon, mechanism=mechanism, **kw)
    for x in range(steps):
        c.update(x)
    parts = _secret_parts(c)
    names = {type(p).__name__ for p in parts}
    # the front end, the engine and its noise (group noise or drawn-ahead buffers)
    assert "Counter" in names and len(parts) >= 3, names
    drawn = opendp_calls.count("drawn")
    for obj in parts:
        for name, copier in COPIERS:
            with pytest.raises(TypeError, match="replay") as err:
                copier(obj)
            assert type(obj).__name__ in str(err.value), name
        for hook in (lambda o: o.__reduce__(), lambda o: o.__getstate__(),
                     lambda o: object.__reduce_ex__(o, 2), lambda o: copyreg._reduce_ex(o, 0),
                     *[lambda o, p=p: o.__reduce_ex__(p) for p in PROTOCOLS]):
            with pytest.raises(TypeError, match="replay"):
                hook(obj)
    assert opendp_calls.count("drawn") == drawn          # nothing drawn by the attempts
    # the counter still runs to its horizon
    for _ in range(steps, 8):
        assert np.isfinite(c.update(1))


@pytest.mark.parametrize("horizon, mechanism, kw", CASES)
def test_copyreg_and_dispatch_tables_do_not_open_a_door(horizon, mechanism, kw):
    """A reducer registered with copyreg for the front end still meets the engine's refusal;
    a Pickler that reduces every secret object to (class, its __dict__) and drops OpenDP's
    measurements writes bytes that cannot be loaded (``__setstate__`` refuses a secure
    state)."""
    c = Counter(horizon, mechanism=mechanism, **kw)
    c.update(2)

    def by_dict(obj):
        return object.__new__, (type(obj),), dict(vars(obj))

    copyreg.pickle(Counter, by_dict)
    try:
        with pytest.raises(TypeError, match="replay"):
            pickle.dumps(c)
        for copier in (copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match="replay"):
                copier(c)
    finally:
        del copyreg.dispatch_table[Counter]

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, SecretState):
                return by_dict(obj)
            if type(obj).__module__.startswith("opendp"):
                return str, ("an OpenDP measurement",)
            return NotImplemented

    buf = io.BytesIO()
    Pickler(buf).dump(c)
    with pytest.raises(TypeError, match="replay"):
        pickle.loads(buf.getvalue())


def test_setstate_refuses_a_secure_state_and_a_missing_flag():
    """Restoring state into a blank object: refused unless the state says simulation."""
    for state in ({"secure": True}, {}, {"values": np.zeros(3)}, None, [("secure", False)]):
        with pytest.raises(TypeError, match="replay"):
            object.__new__(NoiseBuffer).__setstate__(state)
    buf = object.__new__(NoiseBuffer)
    buf.__setstate__({"secure": False, "values": np.zeros(2)})
    assert len(buf) == 2


def test_attribute_forwarding_never_forwards_private_or_special_names():
    """The front end forwards public engine attributes (levels, branching, ...) only: copy and
    pickle hooks, private state and the engine's own noise are not reachable through it."""
    c = Counter(8, epsilon=1.0)
    assert c.levels == c.engine.levels
    for name in ("__deepcopy__", "__copy__", "__reduce_ex__", "__getstate__", "_noise",
                 "_kept", "__setstate__", "__replace__"):
        with pytest.raises(AttributeError):
            Counter.__getattr__(c, name)
    # the special methods found on the class are the front end's own refusals
    assert Counter.__deepcopy__ is SecretState.__deepcopy__


@pytest.mark.parametrize("steps", [0, 4])
@pytest.mark.parametrize("horizon, mechanism, kw", CASES)
def test_simulation_copies_replay_the_same_noise(horizon, mechanism, kw, steps):
    """A simulation counter (numpy Generator) can be copied and pickled; every copy is
    independent and REPLAYS the original's noise: fed the same data it releases the same
    numbers, fed other data it releases them shifted by exactly the data difference (which is
    why a secure counter refuses)."""
    c = Counter(horizon, mechanism=mechanism, rng=np.random.default_rng(7), **kw)
    for x in range(steps):
        c.update(x)
    base = copy.deepcopy(c)
    copies = [copier(c) for name, copier in COPIERS if name != "copy.replace"]
    with pytest.raises(TypeError, match="copy.replace"):
        COPIERS[-1][1](c)
    data = np.random.default_rng(1).integers(0, 9, 6)
    ours = np.array([c.update(int(x)) for x in data])
    for d in copies:
        assert d.t == steps and d.engine is not c.engine
        np.testing.assert_array_equal([d.update(int(x)) for x in data], ours)
    # fed other data, a copy's outputs move by exactly the data difference: the noise cancels
    other = copy.deepcopy(base)
    shifted = np.array([other.update(int(x) + 100) for x in data])
    np.testing.assert_allclose(shifted - ours, 100 * np.arange(1, 7), rtol=0, atol=1e-6)
    assert c.t == steps + 6                        # the copies never moved the original
