"""Tree counters at large budgets: every budget a counter accepts gives finite estimates and
finite, positive variances, and the causal BLUE refuses, before any OpenDP call, a budget
whose level variances are below the smallest normal double.

Regressions (audit): ``Counter(64, epsilon=5000, estimator="causal")`` fed ``update(1)`` gave
63 NaN estimates with variance 0.0 (1 / v overflowed for a subnormal v);
``Counter(64, epsilon=4830, estimator="causal")`` fed ``update(10**8)`` gave 57 non-finite
estimates although v = 2.2e-300 is normal (a / v overflowed); ``Counter(None,
epsilon=1490, estimator="causal")`` gave 64 NaN of 64; the CLI said "complete" with null
estimates.

Expected numbers do not come from the code under test: the discrete noise variances from
their closed form (Laplace) or an exact sum (Gaussian), the node layout from the tree's
definition, covering sums from base-k digits, the causal BLUE by a dense least-squares solve
over the nodes complete at each step (equal variances within a tree: ordinary least
squares), and a block total's combination in exact rational arithmetic."""

import io
import json
import math
import sys
import warnings
from fractions import Fraction

import numpy as np
import pytest

from dptree_opt.cli import main
from dptree_opt.engines.honaker import ivw
from dptree_opt.stream import Counter
from dptree_opt.stream import noise as stream_noise
from dptree_opt.stream.tree import combine

MIN_NORMAL = sys.float_info.min
# the level budget a (epsilon or rho) at which the discrete noise's variance, about 2 e^-a,
# is the smallest normal double: 1023 ln 2 = 709.09
A_STAR = math.log(2.0 / MIN_NORMAL)


def _variance(name: str, a: float) -> float:
    """Variance of OpenDP's integer noise at level budget ``a`` (sensitivity 1): discrete
    Laplace of scale 1/a, 2 q / (1 - q)^2 with q = e^-a ([GRS12]); discrete Gaussian with
    sigma^2 = 1 / (2 a), sum z^2 e^(-a z^2) / sum e^(-a z^2), summed while terms matter."""
    if name == "epsilon":
        return 2.0 * math.exp(-a) / math.expm1(-a) ** 2
    z = range(1, int(math.sqrt(750.0 / a)) + 2)
    num = 2.0 * math.fsum(k * k * math.exp(-a * k * k) for k in z)
    den = 1.0 + 2.0 * math.fsum(math.exp(-a * k * k) for k in z)
    return num / den


def _levels(length: int, k: int) -> int:
    """Levels of a k-ary tree counter over ``length`` steps: l = 0.. while k^l <= length."""
    return sum(1 for l in range(64) if k**l <= length)


def _record_draws(monkeypatch):
    """Every noisy node value a tree counter draws, in draw order (the real draw runs)."""
    log = []
    real = stream_noise.GroupNoise.draw

    def draw(self, group, count):
        y = real(self, group, count)
        log.append((count, y))
        return y
    monkeypatch.setattr(stream_noise.GroupNoise, "draw", draw)
    return log


def _ols(rows, y, lo, t):
    """Estimate and unit variance q' (A'A)^+ q of the sum of steps [lo, t) from the nodes
    ``rows`` ((start, end) pairs inside [lo, t)) with values y: ordinary least squares."""
    A = np.zeros((len(rows), t - lo))
    for i, (s, e) in enumerate(rows):
        A[i, s - lo:e - lo] = 1.0
    x = np.linalg.lstsq(A, np.asarray(y, dtype=float), rcond=None)[0]
    q = np.ones(t - lo)
    return float(x.sum()), float(q @ np.linalg.pinv(A.T @ A) @ q)


def _covering(nodes, lo, u, k, levels):
    """Sum and count of the maximal nodes covering [lo, lo + u) (base-k digits of u):
    ``nodes`` maps (start, end) to its noisy value."""
    total, count, start = 0.0, 0, lo
    for level in range(levels - 1, -1, -1):
        w = k**level
        for _ in range((u // w) % k):
            total += nodes[(start, start + w)]
            count += 1
            start += w
    assert start == lo + u
    return total, count


def _expected_tree(log, T, k, c, name, budget, estimator):
    """(estimates, variances) of a bounded k-ary tree counter from its recorded draws."""
    levels = _levels(T, k)
    v = _variance(name, budget / levels)
    nodes, order = {}, iter(log)
    est, var = [], []
    for t in range(1, T + 1):
        for level in range(levels):
            if t % k**level:
                break
            count, y = next(order)
            assert count == c * k**level          # the node's exact count
            nodes[(t - k**level, t)] = y
        if estimator == "covering":
            e, n = _covering(nodes, 0, t, k, levels)
            est.append(e), var.append(n * v)
        else:
            done = [key for key in nodes if key[1] <= t]
            e, g = _ols(done, [nodes[key] for key in done], 0, t)
            est.append(e), var.append(v * g)
    assert next(order, None) is None
    return np.array(est), np.array(var)


def _expected_unbounded(log, T, k, c, name, budget, estimator):
    """(estimates, variances) of the unbounded counter (blocks [0, 1), [k^(i-1), k^i); each
    a k-ary tree with half the budget split over its levels, plus a noisy total with the
    other half) from its recorded draws."""
    v_total = _variance(name, budget / 2)
    order = iter(log)
    est, var = [], []
    done_e, done_v = 0.0, Fraction(0)
    block, t = 0, 0
    while t < T:
        lo, hi = (0, 1) if block == 0 else (k ** (block - 1), k**block)
        levels = _levels(hi - lo, k)
        v_tree = _variance(name, budget / 2 / levels)
        nodes = {}
        for u in range(1, hi - lo + 1):
            t += 1
            for level in range(levels):
                if u % k**level:
                    break
                count, y = next(order)
                assert count == c * k**level
                nodes[(lo + u - k**level, lo + u)] = y
            if u == hi - lo:                   # the block ends: its noisy total
                count, y = next(order)
                assert count == c * (hi - lo)
                if estimator == "covering":
                    block_e, block_v = y, Fraction(v_total)
                else:   # BLUE of the total: the tree's OLS estimate and the noisy total
                    tree_e, g = _ols(list(nodes), list(nodes.values()), lo, hi)
                    va, vb = Fraction(v_total), Fraction(v_tree) * Fraction(g)
                    w = vb / (va + vb)
                    block_e, block_v = float(w) * y + float(1 - w) * tree_e, va * w
                done_e += block_e
                done_v += block_v
                est.append(done_e), var.append(float(done_v))
            elif estimator == "covering":
                e, n = _covering(nodes, lo, u, k, levels)
                est.append(done_e + e), var.append(float(done_v + Fraction(n * v_tree)))
            else:
                e, g = _ols(list(nodes), list(nodes.values()), lo, lo + u)
                est.append(done_e + e), var.append(float(done_v + Fraction(v_tree * g)))
            if t == T:
                break
        block += 1
    assert next(order, None) is None
    return np.array(est), np.array(var)


# level budgets a: up to just inside the limit (causal: the smallest normal variance;
# covering: the variance must not underflow to 0, at a = 1076 ln 2 = 745.8)
ACCEPTED = {"causal": [0.5, 3.0, 40.0, 300.0, A_STAR * (1 - 1e-4)],
            "covering": [0.5, 3.0, 40.0, 300.0, A_STAR * (1 + 1e-3), 740.0]}
REFUSED = {"causal": [A_STAR * (1 + 1e-4), 745.0], "covering": [750.0, 1e4]}


@pytest.mark.parametrize("name", ["epsilon", "rho"])
@pytest.mark.parametrize("estimator", ["covering", "causal"])
@pytest.mark.parametrize("horizon, k", [(16, 2), (9, 3), (None, 2), (None, 3)],
                         ids=["binary", "kary3", "unbounded-binary", "unbounded-kary3"])
def test_every_accepted_budget_gives_finite_exact_numbers(monkeypatch, opendp_calls, name,
                                                          estimator, horizon, k):
    """A sweep of budgets up to the refusal limit, secure noise, counts 1 and 10^8: the
    estimates and variances are finite (variances > 0) and equal the independent
    computation from the same noisy nodes; just past the limit the counter is refused with
    no OpenDP call."""
    mech = dict(mechanism="binary") if k == 2 else dict(mechanism="kary", branching=k)
    steps = horizon or {2: 16, 3: 9}[k]
    parts = 2 if horizon is None else _levels(horizon, k)   # the largest level budget: B / parts
    for a in REFUSED[estimator]:
        with pytest.raises(ValueError, match=f"{name} = .* is too large"):
            Counter(horizon, estimator=estimator, **{name: a * parts}, **mech)
    assert opendp_calls.events == []
    log = _record_draws(monkeypatch)
    for a in ACCEPTED[estimator]:
        for c in (1, 10**8):
            log.clear()
            ctr = Counter(horizon, estimator=estimator, **{name: a * parts}, **mech)
            got = np.array([(ctr.update(c), ctr.variance) for _ in range(steps)])
            assert np.all(np.isfinite(got)) and np.all(got[:, 1] > 0), (a, c)
            expect = (_expected_tree if horizon else _expected_unbounded)(
                log, steps, k, c, name, a * parts, estimator)
            np.testing.assert_allclose(got[:, 0], expect[0], rtol=1e-10, atol=1e-6)
            # a subnormal level variance (covering, a > 709) holds few significant bits
            smallest = _variance(name, a)
            np.testing.assert_allclose(got[:, 1], expect[1],
                                       rtol=max(1e-9, 8 * 5e-324 / smallest))
            if a > 300:   # P(any noise != 0) < 100 x 2 e^-700: the exact running counts
                np.testing.assert_allclose(got[:, 0], c * np.arange(1, steps + 1), rtol=1e-12)
    assert opendp_calls.count("drawn") > 0


@pytest.mark.parametrize("name", ["epsilon", "rho"])
def test_the_reported_budgets(opendp_calls, name):
    for horizon, budget in ((64, 5000.0), (None, 1490.0)):
        with pytest.raises(ValueError, match="below the smallest normal double"):
            Counter(horizon, estimator="causal", **{name: budget})
    assert opendp_calls.events == []
    # epsilon 4830 over 7 levels: v = 2 e^-690 = 2.2e-300, normal; counts of 10^8
    ctr = Counter(64, estimator="causal", **{name: 4830.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # no overflow anywhere
        got = np.array([(ctr.update(10**8), ctr.variance) for _ in range(64)])
    np.testing.assert_allclose(got[:, 0], 1e8 * np.arange(1, 65), rtol=1e-15)
    v = _variance(name, 4830.0 / 7)
    assert 1e-300 < v < 1e-299
    rows = [(t - 2**lvl, t) for t in range(1, 65) for lvl in range(7) if t % 2**lvl == 0]
    for t in (1, 2, 3, 37, 63, 64):
        done = [r for r in rows if r[1] <= t]
        g = _ols(done, np.zeros(len(done)), 0, t)[1]
        assert got[t - 1, 1] == pytest.approx(v * g, rel=1e-9)


def test_the_reported_cli_run_is_complete_and_finite(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("100000000\n" * 64))
    out = tmp_path / "r.json"
    assert main(["stream", "--counts", "-", "--horizon", "64", "--epsilon", "4830",
                 "--estimator", "causal", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["status"] == "complete" and None not in doc["estimate"] + doc["standard_error"]
    np.testing.assert_allclose(doc["estimate"], 1e8 * np.arange(1, 65), rtol=1e-15)
    assert "Warning" not in cap.err and "nan" not in cap.out.lower()
    assert main(["stream", "--counts", "-", "--horizon", "64", "--epsilon", "5000",
                 "--estimator", "causal"]) == 2
    assert "below the smallest normal double" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["epsilon", "rho"])
def test_drawn_ahead_and_negative_digit_counters_at_their_limits(opendp_calls, name):
    """tree_blue (the offline BLUE weighs by the variances: the levels' and the running
    counts' variances must be normal doubles) and negative digits (sums: the noise must not
    vanish), just inside and just outside their limits."""
    # tree_blue over 16 steps: a complete binary tree, 5 levels of equal budget a; the
    # offline BLUE's variance after t steps is v(a) g(t), g from OLS over all 31 nodes
    nodes = [(s, s + w) for w in (16, 8, 4, 2, 1) for s in range(0, 16, w)]
    A = np.array([[s <= j < e for j in range(16)] for s, e in nodes], dtype=float)
    prefix = np.tril(np.ones((16, 16)))
    g = np.einsum("ij,jk,ik->i", prefix, np.linalg.inv(A.T @ A), prefix)
    assert g.min() < 1           # so the running counts set the limit: v(a) g >= 2^-1022
    limit = A_STAR + math.log(g.min())
    for a in (A_STAR * (1 + 1e-4), A_STAR * (1 - 1e-4), limit * (1 + 1e-5)):
        with pytest.raises(ValueError, match=f"{name} = .* is too large"):
            Counter(16, mechanism="tree_blue", **{name: a * 5})
    # negative digits, k = 3: H = min{H : (3^H - 1) / 2 >= 16} = 4 levels
    with pytest.raises(ValueError, match="too large"):
        Counter(16, mechanism="negative_digits", branching=3, **{name: 750.0 * 4})
    assert opendp_calls.events == []
    a = limit * (1 - 1e-5)
    blue = Counter(16, mechanism="tree_blue", **{name: a * 5})
    nd = Counter(16, mechanism="negative_digits", branching=3, **{name: 740.0 * 4})
    for ctr in (blue, nd):
        got = np.array([(ctr.update(10**8), ctr.variance) for _ in range(16)])
        assert np.all(np.isfinite(got)) and np.all(got[:, 1] > 0)
        np.testing.assert_allclose(got[:, 0], 1e8 * np.arange(1, 17), rtol=1e-15)
    np.testing.assert_allclose(blue.step_variances(), _variance(name, a) * g, rtol=1e-9)
    assert blue.step_variances().min() >= MIN_NORMAL


@pytest.mark.parametrize("va, vb", [(1e-300, 3e-300), (2.2e-308, 1e-307), (5e-310, 1.0),
                                    (1.0, 2.0), (1e300, 1e299), (1.7e308, 1.7e308),
                                    (7.0, 1e-300)])
@pytest.mark.parametrize("a, b", [(1e8, 1e8 + 3.0), (-5.0, 9e15), (0.0, 1.0)])
def test_inverse_variance_combinations_never_overflow(va, vb, a, b):
    """The BLUE of two estimates (stream) and Honaker's weights (the from-below recursion)
    against exact rational arithmetic, at variances where 1 / v or a / v overflow."""
    fa, fb = Fraction(va), Fraction(vb)
    w = fb / (fa + fb)
    est, var = combine(a, va, b, vb)
    assert est == pytest.approx(float(w * Fraction(a) + (1 - w) * Fraction(b)), rel=1e-14,
                                abs=1e-14 * (abs(a) + abs(b)))
    assert var == pytest.approx(float(fa * w), rel=1e-14) and var > 0
    w_a, v = ivw(va, vb)
    assert float(w_a) == pytest.approx(float(w), rel=1e-14)
    assert float(v) == pytest.approx(float(fa * w), rel=1e-14)


def test_inverse_variance_combination_limits():
    """Exact inputs win, absent ones drop out, both absent: no estimate."""
    assert combine(1.0, 0.0, 2.0, 3.0) == (1.0, 0.0)
    assert combine(1.0, 3.0, 2.0, 0.0) == (2.0, 0.0)
    assert combine(1.0, math.inf, 2.0, 3.0) == (2.0, 3.0)
    assert combine(1.0, 3.0, 2.0, math.inf) == (1.0, 3.0)
    w, v = ivw(np.array([0.0, 1.0, np.inf, 1.0, np.inf, 0.0]),
                np.array([1.0, 0.0, 2.0, np.inf, np.inf, 0.0]))
    np.testing.assert_array_equal(w, [1.0, 0.0, 0.0, 1.0, np.nan, 1.0])
    np.testing.assert_array_equal(v, [0.0, 0.0, 2.0, 1.0, np.inf, 0.0])
