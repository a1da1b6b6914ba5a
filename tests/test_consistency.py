"""Consistency projections: fast methods vs the [RTS] trellis DP and independent solvers.

Independent references: the trellis DP (integer problems; a different algorithm from the fast
ones), scipy.optimize.linprog (real l1), cvxpy (real l2 QP), a heap-based slope-trick
isotonic median regression written here, and brute-force enumeration (histograms).
"""

import itertools
import math

import numpy as np
import pytest
import scipy.optimize as so
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt.consistency import (
    objective,
    project_cdf,
    project_histogram,
    project_tree,
)
from oracles import slope_trick_l1


def examples(n):
    """Hypothesis settings: n examples, no deadline (the machine may be shared)."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- helpers
def assert_cdf_constraints(c, total, integer, upper=None, atol=0.0):
    c = np.asarray(c)
    assert c.ndim == 1
    if integer:
        assert c.dtype == np.int64
    else:
        assert c.dtype == np.float64
    assert c[0] >= -atol
    assert np.all(np.diff(c) >= -atol)
    if total is not None:
        assert c[-1] == total
        assert np.all(c <= total + atol)
    if upper is not None:
        assert np.all(c <= upper + atol)


@st.composite
def instances(draw, max_k=8, max_n=12):
    """(y, N, weights): noisy cumulative counts around a random CDF, sometimes far outside."""
    k = draw(st.integers(1, max_k))
    n = draw(st.integers(0, max_n))
    y = draw(st.lists(st.one_of(st.integers(-3, n + 3).map(float),
                                st.floats(-4.0, n + 4.0, allow_nan=False)),
                      min_size=k, max_size=k))
    weighted = draw(st.booleans())
    w = (draw(st.lists(st.floats(0.1, 10.0), min_size=k, max_size=k)) if weighted else None)
    return np.array(y), n, (None if w is None else np.array(w))


def rel_close(a, b, tol=1e-9):
    return abs(a - b) <= tol * (1.0 + abs(b))


# ----------------------------------------------------------------------------- fast == trellis
def _check_fast_equals_trellis(inst):
    y, n, w = inst
    for metric in ("l2", "l1"):
        for kw in ({"total": n}, {}, {"upper": n}):
            fast = project_cdf(y, metric=metric, weights=w, **kw)
            ref = project_cdf(y, metric=metric, weights=w, method="trellis", **kw)
            assert_cdf_constraints(fast, kw.get("total"), True, kw.get("upper"))
            assert_cdf_constraints(ref, kw.get("total"), True, kw.get("upper"))
            assert rel_close(objective(fast, y, metric, w), objective(ref, y, metric, w))


@examples(400)
@given(instances())
def test_fast_equals_trellis_integer(inst):
    """Both metrics, N public and private (and a public upper bound), weighted or not:
    the fast solution's objective equals the trellis DP's (400 examples x 6 problems)."""
    _check_fast_equals_trellis(inst)


@pytest.mark.slow
@examples(5000)
@given(instances(max_k=12, max_n=25))
def test_fast_equals_trellis_integer_many(inst):
    """The same on 5000 larger examples (30,000 problems)."""
    _check_fast_equals_trellis(inst)


def test_fast_equals_trellis_seeded_bulk():
    """2000 more seeded instances, larger (K <= 30, N <= 60), noise as from a tree."""
    rng = np.random.default_rng(20240905)
    for _ in range(2000):
        k, n = int(rng.integers(2, 31)), int(rng.integers(0, 61))
        truth = np.sort(rng.integers(0, n + 1, k))
        truth[-1] = n
        y = truth + rng.laplace(0, rng.uniform(0.1, 8.0), k)
        w = rng.uniform(0.2, 5.0, k) if rng.random() < 0.5 else None
        metric = ("l2", "l1")[int(rng.integers(2))]
        total = n if rng.random() < 0.7 else None
        fast = project_cdf(y, total, metric, weights=w)
        ref = project_cdf(y, total, metric, weights=w, method="trellis")
        assert rel_close(objective(fast, y, metric, w), objective(ref, y, metric, w))


# ----------------------------------------------------------------------------- real problems
def _linprog_l1(y, w, total, upper):
    """min sum w |c - y| s.t. 0 <= c_1 <= ... (c_K = total | c <= upper): LP in (c, s)."""
    k = y.size
    w = np.ones(k) if w is None else w
    cost = np.concatenate([np.zeros(k), w])
    eye = np.eye(k)
    a_ub = [np.hstack([eye, -eye]), np.hstack([-eye, -eye])]  # +-(c - y) <= s
    b_ub = [y, -y]
    if k > 1:
        diff = np.zeros((k - 1, 2 * k))
        diff[np.arange(k - 1), np.arange(k - 1)] = 1.0
        diff[np.arange(k - 1), np.arange(1, k)] = -1.0  # c_t - c_{t+1} <= 0
        a_ub.append(diff)
        b_ub.append(np.zeros(k - 1))
    hi = total if total is not None else upper
    bounds = [(0, hi)] * k + [(0, None)] * k
    a_eq = b_eq = None
    if total is not None:
        a_eq = np.zeros((1, 2 * k))
        a_eq[0, k - 1] = 1.0
        b_eq = [total]
    res = so.linprog(cost, A_ub=np.vstack(a_ub), b_ub=np.concatenate(b_ub), A_eq=a_eq,
                     b_eq=b_eq, bounds=bounds, method="highs")
    assert res.status == 0
    return res.fun


def _check_l1_real(inst):
    y, n, w = inst
    for kw in ({"total": n}, {"upper": n}, {}):
        c = project_cdf(y, metric="l1", integer=False, weights=w, **kw)
        assert_cdf_constraints(c, kw.get("total"), False, kw.get("upper"), atol=0.0)
        ref = _linprog_l1(y, w, kw.get("total"), kw.get("upper"))
        # the LP optimum is the reference (HiGHS: 1e-7 feasibility / optimality)
        assert abs(objective(c, y, "l1", w) - ref) <= 1e-6 * (1 + abs(ref))


@examples(100)
@given(instances())
def test_fast_l1_real_matches_linprog(inst):
    _check_l1_real(inst)


@pytest.mark.slow
@examples(2000)
@given(instances(max_k=12, max_n=25))
def test_fast_l1_real_matches_linprog_many(inst):
    _check_l1_real(inst)


def _qp_l2(y, w, total, upper):
    import cvxpy as cp
    k = y.size
    w = np.ones(k) if w is None else w
    c = cp.Variable(k)
    cons = [c >= 0]
    if k > 1:
        cons.append(cp.diff(c) >= 0)
    if total is not None:
        cons += [c <= total, c[k - 1] == total]
    elif upper is not None:
        cons.append(c <= upper)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.multiply(w, cp.square(c - y)))), cons)
    prob.solve(solver=cp.CLARABEL)
    if prob.status != cp.OPTIMAL:  # Clarabel 0.11 can stop at its iteration limit
        prob.solve(solver=cp.SCS, eps=1e-12, max_iters=200_000)
    assert prob.status == cp.OPTIMAL, prob.status  # an oracle must have converged
    return prob.value


def _check_l2_real(inst):
    y, n, w = inst
    for kw in ({"total": n}, {}):
        c = project_cdf(y, metric="l2", integer=False, weights=w, **kw)
        assert_cdf_constraints(c, kw.get("total"), False)
        ref = _qp_l2(y, w, kw.get("total"), None)
        assert abs(objective(c, y, "l2", w) - ref) <= 1e-6 * (1 + abs(ref))


@examples(25)
@given(instances())
def test_fast_l2_real_matches_qp(inst):
    _check_l2_real(inst)


@pytest.mark.slow
@examples(400)
@given(instances(max_k=12, max_n=25))
def test_fast_l2_real_matches_qp_many(inst):
    _check_l2_real(inst)


@pytest.mark.parametrize("integer", [True, False])
def test_fast_l1_matches_slope_trick_at_larger_k(integer):
    rng = np.random.default_rng(7)
    for k in (500, 3000):
        y = np.cumsum(rng.poisson(3, k)) + rng.laplace(0, 15, k)
        y[rng.integers(0, k, 20)] += rng.normal(0, 500, 20)  # outliers
        w = rng.uniform(0.1, 4.0, k)
        ref = np.maximum(slope_trick_l1(y, w, integer), 0.0)  # clip to [0, inf): exact (box)
        c = project_cdf(y, metric="l1", integer=integer, weights=w)
        assert rel_close(objective(c, y, "l1", w), objective(ref, y, "l1", w), 1e-10)


# ----------------------------------------------------------------------------- properties
@st.composite
def truth_and_noise(draw):
    k = draw(st.integers(1, 12))
    n = draw(st.integers(0, 40))
    truth = np.sort(np.array(draw(st.lists(st.integers(0, n), min_size=k, max_size=k))))
    truth[-1] = n
    noise = np.array(draw(st.lists(st.floats(-30, 30), min_size=k, max_size=k)))
    w = np.array(draw(st.lists(st.floats(0.05, 20.0), min_size=k, max_size=k)))
    return truth, noise, n, w


@examples(300)
@given(truth_and_noise(), st.booleans())
def test_projection_never_increases_l2_error(data, weighted):
    """Real (weighted) l2 projection onto the convex set containing the truth is
    non-expansive: ||P(y) - c||_w <= ||y - c||_w for every draw; rounding adds at most
    sqrt(K)/2 (unweighted norm, triangle inequality)."""
    truth, noise, n, w = data
    w = w if weighted else np.ones_like(noise)
    y = truth + noise
    for total in (n, None):
        p = project_cdf(y, total, "l2", integer=False, weights=w)
        assert np.sum(w * (p - truth) ** 2) <= np.sum(w * (y - truth) ** 2) * (1 + 1e-12) + 1e-9
        q = project_cdf(y, total, "l2", integer=True)
        bound = np.linalg.norm(y - truth) + math.sqrt(truth.size) / 2
        assert np.linalg.norm(q - truth) <= bound + 1e-9


def test_documented_examples():
    # PAVA over all K entries then c_K = N would give (2, 5); the optimum keeps c_1 = 3
    assert project_cdf([3, 1], total=5).tolist() == [3, 5]
    assert project_cdf([3, 1], total=5, method="trellis").tolist() == [3, 5]
    # rounding can increase the error against a truth in the set: (1.5, 2) -> (2, 2), truth (1, 2)
    real = project_cdf([1.5, 2.0], total=2, integer=False)
    assert real.tolist() == [1.5, 2.0]
    integer = project_cdf([1.5, 2.0], total=2)
    assert abs(integer[0] - 1) == 1  # either optimum (1 or 2) is at distance 0.5 from 1.5
    # hand-computed: y = (4, 2, 0) unweighted l2, N private -> mean 2 pooled: (2, 2, 2)
    assert project_cdf([4, 2, 0]).tolist() == [2, 2, 2]
    # weights 3:1 pool to the weighted mean (3*4 + 1*0) / 4 = 3
    assert project_cdf([4, 0], weights=[3, 1], integer=False).tolist() == [3.0, 3.0]
    # l1 with y = (5, 1, 3): |5 - c_1| + |1 - c_2| >= 4 for c_1 <= c_2, and (1, 1, 3) costs 4
    assert objective(project_cdf([5, 1, 3], metric="l1"), [5, 1, 3], "l1") == 4.0


def test_total_zero_and_single_bin():
    assert project_cdf([-3.0, 2.0, 7.0], total=0).tolist() == [0, 0, 0]
    assert project_cdf([5.4], total=9).tolist() == [9]
    assert project_cdf([5.4]).tolist() == [5]
    assert project_cdf([-5.4], metric="l1").tolist() == [0]
    assert project_cdf([2.5], metric="l1", integer=False).tolist() == [2.5]


def test_large_fast_shapes_and_constraints():
    rng = np.random.default_rng(3)
    k, n = 2**16, 10**9
    truth = np.sort(rng.integers(0, n, k))
    truth[-1] = n
    y = truth + rng.laplace(0, 1e5, k)
    for metric in ("l2", "l1"):
        c = project_cdf(y, n, metric)
        assert_cdf_constraints(c, n, True)
        # optimality certificate for l2 (KKT of the real problem + exact rounding):
        # |c - x| <= 1/2 where x is the real projection
        if metric == "l2":
            x = project_cdf(y, n, "l2", integer=False)
            assert np.max(np.abs(c - x)) <= 0.5


# ----------------------------------------------------------------------------- histograms
def _brute_histogram(y, n, w, metric):
    best = math.inf
    for h in itertools.product(range(n + 1), repeat=y.size):
        if sum(h) == n:
            best = min(best, objective(np.array(h, float), y, metric, w))
    return best


@examples(200)
@given(st.integers(1, 4), st.integers(0, 7), st.data())
def test_histogram_integer_matches_brute_force(k, n, data):
    y = np.array(data.draw(st.lists(st.floats(-3, 9), min_size=k, max_size=k)))
    w = (np.array(data.draw(st.lists(st.floats(0.1, 10), min_size=k, max_size=k)))
         if data.draw(st.booleans()) else None)
    for metric in ("l2", "l1"):
        h = project_histogram(y, n, metric, weights=w)
        assert h.dtype == np.int64 and np.all(h >= 0) and h.sum() == n
        assert rel_close(objective(h, y, metric, w), _brute_histogram(y, n, w, metric))


def _cvx_histogram(y, n, w, metric):
    import cvxpy as cp
    h = cp.Variable(y.size)
    w = np.ones(y.size) if w is None else w
    loss = cp.square(h - y) if metric == "l2" else cp.abs(h - y)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.multiply(w, loss))), [h >= 0, cp.sum(h) == n])
    prob.solve(solver=cp.CLARABEL)
    if prob.status != cp.OPTIMAL:  # Clarabel 0.11 can stop at its iteration limit
        prob.solve(solver=cp.SCS, eps=1e-12, max_iters=200_000)
    assert prob.status == cp.OPTIMAL, prob.status  # an oracle must have converged
    return prob.value


@examples(25)
@given(st.integers(1, 10), st.integers(0, 50), st.data())
def test_histogram_real_matches_cvxpy(k, n, data):
    y = np.array(data.draw(st.lists(st.floats(-10, 30), min_size=k, max_size=k)))
    w = (np.array(data.draw(st.lists(st.floats(0.1, 10), min_size=k, max_size=k)))
         if data.draw(st.booleans()) else None)
    for metric in ("l2", "l1"):
        h = project_histogram(y, n, metric, integer=False, weights=w)
        assert np.all(h >= 0) and abs(h.sum() - n) <= 1e-9 * (1 + n)
        ref = _cvx_histogram(y, n, w, metric)
        assert abs(objective(h, y, metric, w) - ref) <= 1e-6 * (1 + abs(ref))


def test_histogram_without_total_and_large():
    assert project_histogram([-1.2, 0.4, 2.6]).tolist() == [0, 0, 3]
    assert project_histogram([-1.2, 0.4, 2.6], integer=False).tolist() == [0.0, 0.4, 2.6]
    rng = np.random.default_rng(0)
    y = rng.poisson(1000, 2**18) + rng.laplace(0, 30, 2**18)
    n = int(rng.poisson(1000 * 2**18))
    for metric in ("l2", "l1"):
        h = project_histogram(y, n, metric)
        assert h.sum() == n and h.min() >= 0
        # the l2 integer optimum is within 1 of the real one in every bin (same lambda)
        if metric == "l2":
            assert np.max(np.abs(h - project_histogram(y, n, "l2", False))) <= 1.0


def test_project_tree_is_consistent():
    tree = S.tree(12, [2, 3, 2])
    rng = np.random.default_rng(5)
    est = rng.normal(3, 4, 12)
    nodes = project_tree(est, tree, total=40)
    h = project_histogram(est, 40)
    assert nodes.dtype == np.int64 and nodes[0] == 40 and np.all(nodes >= 0)
    np.testing.assert_array_equal(nodes[-12:], h)  # leaves last, left to right
    for lvl in range(tree.height):  # children sum to their parent
        parent = nodes[tree.level_slice(lvl)]
        child = nodes[tree.level_slice(lvl + 1)].reshape(parent.size, -1).sum(axis=1)
        np.testing.assert_array_equal(child, parent)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, match", [
    ({"cumulative_counts": [1.0, np.nan]}, "cumulative_counts"),
    ({"cumulative_counts": [[1.0, 2.0]]}, "cumulative_counts"),
    ({"cumulative_counts": []}, "cumulative_counts"),
    ({"cumulative_counts": ["a", "b"]}, "cumulative_counts"),
    ({"total": -1}, "total"),
    ({"total": 2.5}, "total"),
    ({"total": True}, "total"),
    ({"metric": "l3"}, "metric"),
    ({"method": "dp"}, "method"),
    ({"integer": "yes"}, "integer"),
    ({"weights": [1.0, 0.0, 1.0]}, "weights"),
    ({"weights": [1.0, 1.0]}, "weights"),
    ({"weights": [1.0, np.inf, 1.0]}, "weights"),
    ({"total": 3, "upper": 3}, "upper"),
    ({"upper": -2}, "upper"),
    ({"method": "trellis", "integer": False}, "trellis"),
    ({"method": "trellis", "trellis_max_bytes": 0}, "trellis_max_bytes"),
])
def test_bad_input(kwargs, match):
    args = {"cumulative_counts": [1.0, 2.0, 3.0], **kwargs}
    with pytest.raises(ValueError, match=match):
        project_cdf(**args)


def test_trellis_refuses_large_instances_naming_sizes():
    with pytest.raises(ValueError, match=r"1000 stages x 1000001 grid values"):
        project_cdf(np.arange(1001.0), total=10**6, method="trellis")
    # the fast method handles it
    assert project_cdf(np.arange(1001.0), total=10**6)[-1] == 10**6


def test_histogram_bad_input():
    with pytest.raises(ValueError, match="counts"):
        project_histogram([1.0, np.inf])
    with pytest.raises(ValueError, match="total"):
        project_histogram([1.0, 2.0], total=-3)
    with pytest.raises(ValueError, match="metric"):
        project_histogram([1.0, 2.0], metric="linf")
    with pytest.raises(ValueError, match="strategy"):
        project_tree([1.0, 2.0], "tree")
    with pytest.raises(ValueError, match="bins"):
        project_tree([1.0, 2.0], S.tree(4, [2, 2]))


def test_exported():
    assert dp.consistency.project_cdf is project_cdf
