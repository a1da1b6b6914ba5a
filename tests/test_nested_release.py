"""The secure release path of nested strategies (``strategies.nested``): the scaled integer
form ``IntegerNested`` (integer local matrices M_d = round(s S_d / 2^e_d), exact int64
answers, exact integer sensitivities per depth), ``release(design=)`` with one OpenDP call per
depth and the nested engine's BLUE, and ``stream.Counter(T, design=)`` with the noise drawn
ahead. Oracles: dense matrices built here from the M_d (Kronecker products), brute force over
neighbouring histograms, the dense GLS (tests/oracles.py), Monte Carlo within 4 standard
errors."""

import itertools
import math

import numpy as np
import pytest
from oracles import constrained_gls

import dptree_opt as dp
from dptree_opt import Mechanism, engines, expected_error, workloads
from dptree_opt.data_release import secure_noise as sn
from dptree_opt.engines.nested import nested_blue
from dptree_opt.strategies.nested import NestedStrategy, nested
from dptree_opt.strategies.scaled import IntegerNested, max_scale_bits, scaled_integer, secure_route
from dptree_opt.stream import Counter


def _locals(ks, extra, seed):
    """Random positive local matrices with unit-l1 columns, m_d = k_d + extra rows."""
    rng = np.random.default_rng(seed)
    out = []
    for k in ks:
        s = rng.random((k + extra, k)) + 0.05
        out.append(s / s.sum(axis=0))
    return out


def _dense(mats, ks):
    """The explicit nested matrix from its local matrices (row order: depth, node, local
    row), built independently of the package; int64 when the locals are."""
    blocks = []
    for d, m in enumerate(mats):
        above, below = math.prod(ks[:d]), math.prod(ks[d + 1:])
        blocks.append(np.kron(np.eye(above, dtype=m.dtype),
                              np.kron(m, np.ones((1, below), dtype=m.dtype))))
    return np.vstack(blocks)


def _levels(mats, ks):
    return np.concatenate([np.full(math.prod(ks[:d]) * m.shape[0], d + 1)
                           for d, m in enumerate(mats)])


KS = (3, 2, 4)


@pytest.fixture(scope="module")
def design():
    return Mechanism(nested(KS, _locals(KS, 1, 0)), epsilon=1.0)


# ----------------------------------------------------------------- the integer form
def test_scaled_form_is_nested_with_rounded_locals(design):
    s = design.strategy
    assert secure_route(s)[0] == "scaled"
    m = scaled_integer(s, 16, noise="laplace")
    assert isinstance(m, IntegerNested) and m.fanouts == KS
    for src, got in zip(s.locals, m.integer_locals()):
        # per depth: 2^e_d is the least power of two >= max |S_d|
        e = math.ceil(math.log2(float(np.abs(src).max())))
        assert np.array_equal(got, np.rint(src * 2.0**(16 - e)).astype(np.int64))
        assert 2**15 < np.abs(got).max() <= 2**16
    assert secure_route(m)[0] == "integer"        # released as it is
    assert m.max_entry == max(int(np.abs(g).max()) for g in m.integer_locals())


def test_exact_answers_are_the_dense_integer_product(design):
    form = sn.secure_form(design)
    mech = form.mechanism
    ints = mech.released.integer_locals()
    a = _dense(ints, KS)
    rng = np.random.default_rng(1)
    h = rng.integers(0, 10**6, math.prod(KS))
    assert np.array_equal(sn.exact_answers(mech, h), a @ h)          # int64, exact


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
@pytest.mark.parametrize("p", [1, 2])
def test_exact_sensitivities_by_brute_force(neighbours, p):
    """Per depth and for all rows: the largest ||M (x - x')||_p^p over neighbouring
    histograms (one record added, or moved between two bins), in integers."""
    ks = (2, 3, 2)
    m = scaled_integer(nested(ks, _locals(ks, 2, 5)), 10, noise="laplace")
    a = _dense(m.integer_locals(), ks).astype(object)
    lv = _levels(m.integer_locals(), ks)
    n = math.prod(ks)
    eye = np.eye(n, dtype=np.int64)
    diffs = ([eye[j] for j in range(n)] if neighbours == "add_remove" else
             [eye[i] - eye[j] for i, j in itertools.permutations(range(n), 2)])

    def brute(rows):
        return max(sum(abs(int(v)) ** p for v in a[rows] @ x) for x in diffs)

    for level in range(1, len(ks) + 1):
        assert m.exact_level_sensitivity(level, neighbours, p) == brute(lv == level)
        got = m.sensitivity((lv == level).astype(float), neighbours, p)   # calibration
        exact = brute(lv == level) ** (1.0 / p)
        assert exact <= got <= exact * (1 + 1e-11)
    assert m.exact_sensitivity(neighbours, p) == brute(np.ones(lv.size, bool))


def test_rounding_cost_is_the_nested_engine_on_the_rounded_locals(design):
    """The released mechanism's exact CDF error: the dense GLS on its explicit matrix (the
    discrete noise's variances), and under continuous noise that of the nested strategy
    with locals M_d / 2^16 (scaling the rows of a depth scales its noise alike)."""
    form = sn.secure_form(design)
    mech = form.mechanism
    n = mech.n_bins
    w = workloads.prefix(n)
    ints = mech.released.integer_locals()
    _, var, ok = constrained_gls(_dense(ints, KS).astype(float), mech.variances, w.dense())
    assert ok.all()
    assert float(expected_error(w, mech)) == pytest.approx(var.sum(), rel=1e-9)
    budgets = [design.level_budgets[lvl] for lvl in sorted(design.level_budgets)]
    twin = Mechanism(nested(KS, [g / 2.0**16 for g in ints]), epsilon=1.0,
                     level_budgets=budgets)
    assert form.rounded_error == pytest.approx(float(expected_error(w, twin)), rel=1e-9)
    assert abs(form.rounding_increase) <= sn.ROUNDING_TOLERANCE


def test_largest_answer_of_nested_strategies(design):
    m = sn.secure_form(design).mechanism.released
    top = max(int(np.abs(g).max()) for g in m.integer_locals())
    assert sn.largest_answer(m, 7) == top * 7
    # a real-valued nested strategy: its largest entry, rounded up (not 1)
    s = nested([2, 2], [[[2.5, 0.5]], [[1.0, 0.0], [0.0, 1.0]]])
    assert sn.largest_answer(s, 3) == 9
    # every answer is within the bound, for all the records in the worst bin
    h = np.zeros(m.n_bins, dtype=np.int64)
    h[int(np.argmax(np.abs(_dense(m.integer_locals(), KS)).max(axis=0)))] = 5
    assert np.abs(sn.exact_answers(sn.secure_form(design).mechanism, h)).max() == top * 5


def test_scale_bits_for_nested_count_rows_per_column():
    """max_scale_bits: rows that meet one column (sum_d m_d), not all rows."""
    ks = (16, 16, 16, 16)
    s = nested(ks, [np.eye(k) for k in ks])
    assert s.n_rows > 2**16
    assert max_scale_bits(s) == (52 - math.ceil(math.log2(64))) // 2 == 23


# ----------------------------------------------------------------- release
def _spy(monkeypatch):
    calls = []
    real = sn._opendp_sample

    def spy(values, **kw):
        calls.append((values.size, kw))
        return real(values, **kw)

    monkeypatch.setattr(sn, "_opendp_sample", spy)
    return calls


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_release_draws_one_sampler_call_per_depth(monkeypatch, budget):
    """One OpenDP call per depth (its P_d m_d rows, at the depth's exact integer
    sensitivity: D1, or D2^2 under Gaussian noise); integer measurements; the raw CDF is the
    nested engine's BLUE of them."""
    design = Mechanism(nested(KS, _locals(KS, 1, 0)), **budget)
    p = 1 if "epsilon" in budget else 2
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 40, design.n_bins)
    calls = _spy(monkeypatch)
    r = dp.release(counts=counts, lower=0.0, upper=1.0, bins=design.n_bins, design=design)
    mech = r.mechanism
    rel = mech.released
    assert isinstance(rel, IntegerNested) and mech.discrete
    assert [c[0] for c in calls] == [rel.nodes[d] * rel.locals[d].shape[0]
                                     for d in range(len(KS))]
    assert [c[1]["exact"] for c in calls] == [rel.exact_level_sensitivity(d + 1, "add_remove", p)
                                             for d in range(len(KS))]
    y = r.measurements
    assert np.all(y == np.round(y)) and np.ptp(y - sn.exact_answers(mech, counts)) > 0
    assert engines.select("estimate", mech).name == "nested"
    assert np.allclose(r.cdf.raw, np.cumsum(nested_blue(mech, y)), rtol=1e-12, atol=1e-6)
    assert r.privacy["scaled_integer"]["exact_sensitivity"] == [c[1]["exact"] for c in calls]


def test_release_without_quantiles_never_builds_the_matrix(monkeypatch):
    """The secure form, the answers, the noise and the estimate of a fresh design, with the
    explicit matrix of every nested strategy made to raise (the quantile tests' calibration
    reads the matrix: none asked)."""
    def boom(self):
        raise AssertionError("the explicit matrix of a nested strategy was built")

    fresh = Mechanism(nested(KS, _locals(KS, 2, 3)), epsilon=1.0)
    monkeypatch.setattr(NestedStrategy, "matrix", property(boom))
    calls = _spy(monkeypatch)
    r = dp.release(counts=np.ones(fresh.n_bins, dtype=np.int64), lower=0.0, upper=1.0,
                   bins=fresh.n_bins, design=fresh, quantiles=())
    assert len(calls) == len(KS) and r.complete and np.all(np.isfinite(r.cdf.raw))


@pytest.mark.parametrize("make, match", [
    (lambda d: dict(design=Mechanism(d.strategy, epsilon=1.0, public_total=True)),
     "releases N"),
    (lambda d: dict(design=Mechanism(nested(KS, _locals(KS, 1, 0)), epsilon=1.0,
                                     row_budgets=np.full(d.strategy.n_rows, 0.1))),
     "budgets per row"),
    (lambda d: dict(design=d, epsilon=0.5), "made for epsilon = 1.0"),
    (lambda d: dict(design=d, counts=np.full(d.n_bins, 2**40)), "too large|2\\^53"),
])
def test_release_refuses_before_drawing(design, monkeypatch, make, match):
    calls = _spy(monkeypatch)
    kw = dict(counts=np.ones(design.n_bins, dtype=np.int64), lower=0.0, upper=1.0,
              bins=design.n_bins)
    kw.update(make(design))
    with pytest.raises(ValueError, match=match):
        dp.release(**kw)
    assert calls == []


# ----------------------------------------------------------------- counters
def test_secure_counter_runs_a_nested_design(design, opendp_calls, no_numpy_noise):
    T = design.n_bins
    c = Counter(T, design=design)
    L = len(KS)
    assert opendp_calls.events == ["built"] * L + ["drawn"] * L
    mech = c.engine.mechanism
    assert isinstance(mech.released, IntegerNested)
    var = c.step_variances()
    _, oracle, ok = constrained_gls(_dense(mech.released.integer_locals(), KS).astype(float),
                                    mech.variances, workloads.prefix(T).dense())
    assert ok.all() and var == pytest.approx(oracle, rel=1e-9)
    own = float(expected_error(workloads.prefix(T), design)) / T     # the offline design's
    assert abs(var.mean() / own - 1) <= sn.ROUNDING_TOLERANCE
    counts = np.arange(T) % 3
    ys = np.array([c.update(int(x)) for x in counts])
    assert np.all(np.isfinite(ys)) and np.ptp(ys - np.cumsum(counts)) > 0


def test_simulated_counter_error_is_the_offline_mean_per_prefix(design):
    """Monte Carlo (numpy's integer samplers, the same discrete mechanism): the mean over
    steps of the squared errors, averaged over trials, is within 4 standard errors of the
    offline design's exact mean error per prefix (of its released form)."""
    T, trials = design.n_bins, 300
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 5, T)
    per_trial = np.empty(trials)
    for i in range(trials):
        c = Counter(T, design=design, rng=rng)
        err = np.array([c.update(int(x)) for x in counts]) - np.cumsum(counts)
        per_trial[i] = np.mean(err**2)
    exact = float(expected_error(workloads.prefix(T), c.engine.mechanism)) / T
    se = per_trial.std(ddof=1) / math.sqrt(trials)
    assert abs(per_trial.mean() - exact) <= 4 * se
    assert c.step_variances().mean() == pytest.approx(exact, rel=1e-12)


# ----------------------------------------------------------------- 2^16 (slow)
@pytest.mark.slow
def test_nested_design_at_2_16_releases_and_streams(monkeypatch):
    ks = (64, 32, 32)
    mech = Mechanism(nested(ks, _locals(ks, 4, 7)), epsilon=1.0)
    n = mech.n_bins
    rng = np.random.default_rng(8)
    counts = rng.integers(0, 100, n)
    calls = _spy(monkeypatch)
    r = dp.release(counts=counts, lower=0.0, upper=1.0, bins=n, design=mech)
    assert len(calls) == len(ks)
    assert np.allclose(r.cdf.raw, np.cumsum(nested_blue(r.mechanism, r.measurements)),
                       rtol=1e-12, atol=1e-3)
    form = sn.secure_form(mech)
    assert abs(form.rounding_increase) <= sn.ROUNDING_TOLERANCE
    exact = float(expected_error(workloads.prefix(n), form.mechanism)) / n
    for rng_ in (None, np.random.default_rng(9)):
        c = Counter(n, design=mech, rng=rng_)
        assert c.step_variances().mean() == pytest.approx(exact, rel=1e-12)
        ys = np.array([c.update(int(x)) for x in counts[:256]])
        assert np.all(np.isfinite(ys))


def test_opendp_measurement_of_a_nested_design():
    """make_private_cdf runs a nested design in its secure form: one group per depth at its
    exact integer sensitivity, the privacy map within the budget."""
    from dptree_opt.opendp import make_private_cdf
    odp = sn.opendp_prelude()
    odp.enable_features("honest-but-curious")
    for budget, metric in (({"epsilon": 1.0}, odp.l1_distance(T="i64")),
                           ({"rho": 0.5}, odp.l2_distance(T="i64"))):
        mech = Mechanism(nested(KS, _locals(KS, 1, 0)), **budget)
        meas = make_private_cdf(odp.vector_domain(odp.atom_domain(T="i64")), metric, mech)
        assert meas.map(1) <= next(iter(budget.values()))
        assert np.asarray(meas([1] * mech.n_bins)).shape == (mech.n_bins,)
