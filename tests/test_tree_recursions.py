"""Tests for dptree_opt.engines.tree: Honaker's recursions and the [RTS] refined CDF.

Every exact check is against an independent dense oracle built here from the definitions
(the 0/1 tree strategy matrix and generalised least squares), never against the module's own
numbers. Worked values come from MATH.md section 2 and [HON] Sec. 3.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dptree_opt.engines.honaker import (
    TreeEstimates,
    honaker_recursions,
    refined_recursion,
    refined_error,
)
from oracles import tree_matrix

# --------------------------------------------------------------------------- oracle helpers


def node_variances(branching, level_variances):
    _, levels = tree_matrix(branching)
    return np.asarray(level_variances, dtype=float)[levels]


def gls_oracle(branching, level_variances, y):
    """Dense GLS: node estimates A x_hat and diag(A Cov A').

    Unmeasured (inf) rows are dropped; a 0-variance root is the equality constraint 1'x = N,
    solved with the KKT system [[A'V^-1 A, e], [e', 0]]. Requires the remaining rows to
    identify x (measured leaves).
    """
    A, _ = tree_matrix(branching)
    var = node_variances(branching, level_variances)
    K = A.shape[1]
    weighted = np.isfinite(var) & (var > 0)
    sw = 1.0 / np.sqrt(var[weighted])
    Aw, yw = A[weighted] * sw[:, None], y[weighted] * sw
    # Least squares by QR of the whitened rows (error ~ cond(Aw) eps, not cond(Aw)^2 eps as
    # the normal equations): x = x0 + B z, with B = I (private N) or an orthonormal basis of
    # 1-perp and x0 = N / K 1 (public N: the equality constraint 1'x = N).
    if level_variances[0] == 0:
        B = np.linalg.qr(np.eye(K) - 1.0 / K)[0][:, :K - 1]
        x0 = np.full(K, y[0] / K)
    else:
        B, x0 = np.eye(K), np.zeros(K)
    Q, R = np.linalg.qr(Aw @ B)
    z = scipy.linalg.solve_triangular(R, Q.T @ (yw - Aw @ x0))
    x_hat = x0 + B @ z
    G = scipy.linalg.solve_triangular(R, (A @ B).T, trans="T")   # R^-T B'A'
    return A @ x_hat, np.sum(G * G, axis=0)


def blue_oracle(A, var, y, c):
    """BLUE of c'x from rows (A, var, y): min b'Vb subject to A'b = c (rows with var inf dropped).

    Solved by the KKT system [[V, A], [A', 0]] [b; lam] = [0; c] in least squares (the system
    may be singular in lam; b is unique). Returns (estimate, variance); (nan, inf) when c'x is
    not estimable from these rows.
    """
    keep = np.isfinite(var)
    A, var, y = A[keep], var[keep], y[keep]
    r, K = A.shape
    kkt = np.block([[np.diag(var), A], [A.T, np.zeros((K, K))]])
    sol = np.linalg.lstsq(kkt, np.concatenate([np.zeros(r), c]), rcond=None)[0]
    b = sol[:r]
    if not np.allclose(A.T @ b, c, atol=1e-8):
        return np.nan, np.inf
    return b @ y, b @ (var * b)


def subtree_masks(branching):
    """in_subtree[i, j]: node j is node i or a descendant of it."""
    A, levels = tree_matrix(branching)
    contained = (A[None, :, :] <= A[:, None, :]).all(axis=-1)  # bins of j inside bins of i
    return contained & (levels[None, :] >= levels[:, None])


def measure(branching, level_variances, rng, trials=None):
    """Simulated y = A x + noise (Gaussian), NaN on unmeasured levels; root exact if v_0 = 0."""
    A, _ = tree_matrix(branching)
    var = node_variances(branching, level_variances)
    x = rng.poisson(10.0, size=A.shape[1]).astype(float)
    shape = (A.shape[0],) if trials is None else (trials, A.shape[0])
    with np.errstate(invalid="ignore"):
        y = A @ x + rng.standard_normal(shape) * np.sqrt(var)
    y[..., ~np.isfinite(var)] = np.nan
    return x, y


def prefix_matrix(K):
    return np.tril(np.ones((K, K)))


def greedy_covering(branching, inside):
    """Brute force: the nodes inside an interval none of whose ancestors is inside (the
    breadth-first greedy covering; with k_l = 1 the higher duplicate is the one used)."""
    A, levels = tree_matrix(branching)
    return [i for i in np.flatnonzero(inside)
            if not any(inside[j] and levels[j] < levels[i] and (A[j] >= A[i]).all()
                       for j in range(len(A)))]


def left_covering(branching, t):
    """Covering of [0, t)."""
    A, _ = tree_matrix(branching)
    return greedy_covering(branching, A[:, t:].sum(axis=1) == 0)


def right_covering(branching, t):
    """Covering of [t, K)."""
    A, _ = tree_matrix(branching)
    return greedy_covering(branching, A[:, :t].sum(axis=1) == 0)


def assert_var_close(actual, expected, rtol=1e-10):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert np.array_equal(np.isinf(actual), np.isinf(expected))
    fin = np.isfinite(expected)
    scale = np.max(np.abs(expected[fin]), initial=1.0)
    np.testing.assert_allclose(actual[fin], expected[fin], rtol=rtol, atol=rtol * scale)


def assert_est_close(actual, expected, rtol=1e-10):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert np.array_equal(np.isnan(actual), np.isnan(expected))
    fin = ~np.isnan(expected)
    scale = np.max(np.abs(expected[fin]), initial=1.0)
    np.testing.assert_allclose(actual[fin], expected[fin], rtol=rtol, atol=rtol * scale)


# --------------------------------------------------------------------------- hypothesis strategies


@st.composite
def trees(draw, max_leaves):
    """Branching lists of length 1-5, entries 2-7, product <= max_leaves."""
    ks = []
    length = draw(st.integers(1, 5))
    while len(ks) < length and max_leaves // math.prod(ks) >= 2:
        ks.append(draw(st.integers(2, min(7, max_leaves // math.prod(ks)))))
    return ks


@st.composite
def tree_problems(draw, max_leaves):
    """(branching, level_variances, seed): log-uniform variances over 3 decades; the root is
    public (0), private or unmeasured (inf); sometimes a middle level is unmeasured."""
    ks = draw(trees(max_leaves))
    h = len(ks)
    v = [10.0 ** draw(st.floats(-1.5, 1.5)) for _ in range(h + 1)]
    v[0] = {"public": 0.0, "private": v[0], "unmeasured": np.inf}[
        draw(st.sampled_from(["public", "private", "unmeasured"]))]
    if h >= 2 and draw(st.booleans()):
        v[draw(st.integers(1, h - 1))] = np.inf
    return ks, v, draw(st.integers(0, 2**32 - 1))


ORACLE_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_against_gls(ks, v, seed):
    _, y = measure(ks, v, np.random.default_rng(seed))
    est = honaker_recursions(ks, v, y)
    node_est, node_var = gls_oracle(ks, v, y)
    assert_est_close(est.efficient, node_est, rtol=1e-10)
    assert_var_close(est.efficient_var, node_var, rtol=1e-10)


# --------------------------------------------------------------------------- Honaker vs dense GLS


@settings(max_examples=40, **ORACLE_SETTINGS)
@given(tree_problems(max_leaves=1000))
def test_efficient_equals_dense_gls(problem):
    check_against_gls(*problem)


@pytest.mark.slow
@settings(max_examples=60, **ORACLE_SETTINGS)
@given(tree_problems(max_leaves=3000))
def test_efficient_equals_dense_gls_large(problem):
    check_against_gls(*problem)


@pytest.mark.parametrize("ks", [[1], [2, 1, 3], [1, 4], [3, 1, 1, 2], [1, 1]])
@pytest.mark.parametrize("root", [0.0, 0.7, np.inf])
def test_efficient_equals_dense_gls_with_unit_branching(ks, root):
    """k_l = 1 levels duplicate their parents; with N public the level under the root is exact."""
    v = [root] + list(np.linspace(0.5, 3.0, len(ks)))
    check_against_gls(ks, v, seed=7)


def test_h0_single_node():
    est = honaker_recursions([], [2.0], [5.0])
    for values, var in [(est.below, est.below_var), (est.above, est.above_var),
                        (est.efficient, est.efficient_var)]:
        np.testing.assert_array_equal(values, [5.0])
        np.testing.assert_array_equal(var, [2.0])
    assert refined_recursion([], [0.0], [5.0])[0].tolist() == [5.0]
    assert refined_recursion([], [0.0], [5.0])[1].tolist() == [0.0]
    est = honaker_recursions([], [np.inf], [np.nan])
    assert np.isnan(est.efficient[0]) and est.efficient_var[0] == np.inf


SMALL_CASES = [
    ([2, 2, 2], [0.0, 1.0, 2.0, 0.5]),
    ([2, 2, 2], [1.3, 1.0, 2.0, 0.5]),
    ([3, 2], [np.inf, 0.4, 2.0]),
    ([2, 1, 3], [0.0, 1.0, 3.0, 0.2]),
    ([4], [0.5, 2.0]),
    ([2, 3], [0.0, np.inf, 1.0]),
    ([2, 3], [0.8, 1.0, np.inf]),  # leaves unmeasured: leaf counts are not identifiable
    ([3, 2], [np.inf, np.inf, 1.0]),
]


@pytest.mark.parametrize("ks, v", SMALL_CASES)
def test_below_above_efficient_equal_subset_blues(ks, v):
    check_subset_blues(ks, v, seed=3)


@settings(max_examples=25, **ORACLE_SETTINGS)
@given(tree_problems(max_leaves=24))
def test_below_above_efficient_equal_subset_blues_random(problem):
    check_subset_blues(*problem)


def check_subset_blues(ks, v, seed):
    """t^- = BLUE from the node's subtree rows; t^+ = BLUE from every row except the node's
    strict descendants; t^* = BLUE from all rows (estimable-function oracle, unidentifiable
    nodes included)."""
    A, _ = tree_matrix(ks)
    var = node_variances(ks, v)
    _, y = measure(ks, v, np.random.default_rng(seed))
    est = honaker_recursions(ks, v, y)
    sub = subtree_masks(ks)
    for i in range(A.shape[0]):
        strict_desc = sub[i] & (np.arange(A.shape[0]) != i)
        for rows, values, variances in [
            (sub[i], est.below, est.below_var),
            (~strict_desc, est.above, est.above_var),
            (np.ones(A.shape[0], bool), est.efficient, est.efficient_var),
        ]:
            b_est, b_var = blue_oracle(A[rows], var[rows], y[rows], A[i])
            assert_est_close([values[i]], [b_est], rtol=1e-9)
            assert_var_close([variances[i]], [b_var], rtol=1e-9)


def test_batch_equals_row_by_row():
    ks, v = [3, 2, 2], [0.0, 0.5, 2.0, 1.0]
    _, y = measure(ks, v, np.random.default_rng(11), trials=7)
    batch = honaker_recursions(ks, v, y)
    assert isinstance(batch, TreeEstimates)
    for r in range(y.shape[0]):
        row = honaker_recursions(ks, v, y[r])
        for name in ("below", "above", "efficient"):
            assert getattr(batch, name).shape == y.shape
            np.testing.assert_allclose(getattr(batch, name)[r], getattr(row, name), rtol=1e-13)
        for name in ("below_var", "above_var", "efficient_var"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(row, name))
    cdf, var = refined_recursion(ks, v, y)
    assert cdf.shape == (7, 12) and var.shape == (12,)
    for r in range(y.shape[0]):
        np.testing.assert_allclose(cdf[r], refined_recursion(ks, v, y[r])[0], rtol=1e-13)


# --------------------------------------------------------------------------- [HON] worked numbers


S2 = 2.5  # an arbitrary common noise variance s^2


def test_hon_weights_in_t10_below():
    """[HON] eq. (9): t_10^- = (t_10 + (t_100 + t_101)/2 + (four grandchildren)/4) / (7/4)."""
    ks = [2, 2, 2]
    est = honaker_recursions(ks, [S2] * 4, np.eye(15))  # row j: y = e_j, so below[j, i] = weight
    weights = est.below[:, 1]  # node t_10 = level 1, left
    expected = np.zeros(15)
    expected[1], expected[[3, 4]], expected[[7, 8, 9, 10]] = 4 / 7, 2 / 7, 1 / 7
    np.testing.assert_allclose(weights, expected, atol=1e-15)
    assert est.below_var[1] == pytest.approx(4 * S2 / 7, rel=1e-14)


def test_hon_t10_above_known_total():
    """[HON] eq. (12): se(t_10^+) = s / sqrt(11/4) in the 8-leaf tree with N known."""
    est = honaker_recursions([2, 2, 2], [0.0] + [S2] * 3, np.zeros(15))
    assert est.above_var[1] == pytest.approx(4 * S2 / 11, rel=1e-14)


@pytest.mark.parametrize("root, expected", [(0.0, 15 / 30), (S2, 16 / 31)])
def test_hat_matrix_identity(root, expected):
    """Equal variances: mean var(t^*)/s^2 over the noisy nodes = free parameters / noisy nodes."""
    est = honaker_recursions([2] * 4, [root] + [S2] * 4, np.zeros(31))
    noisy = slice(1, None) if root == 0 else slice(None)
    assert np.mean(est.efficient_var[noisy]) / S2 == pytest.approx(expected, rel=1e-13)


def test_tall_tree_limits():
    """[HON] Sec. 3.2: var(t^-) -> s^2/2 at the top of a tall tree (exactly s^2/(2 - 2^-(h-d))
    at depth d); Sec. 3.3: var(t^+) -> s^2/3 at depth 1 with N known."""
    h = 20
    est = honaker_recursions([2] * h, [0.0] + [S2] * h, np.zeros(2 ** (h + 1) - 1))
    assert abs(est.below_var[1] / S2 - 0.5) < 1e-6
    assert abs(est.above_var[1] / S2 - 1 / 3) < 1e-6
    small = honaker_recursions([2] * 6, [S2] * 7, np.zeros(127))
    depth = np.repeat(np.arange(7), 2 ** np.arange(7))
    np.testing.assert_allclose(small.below_var / S2, 1 / (2 - 2.0 ** -(6 - depth)), rtol=1e-14)


def test_hon_sec34_erratum():
    """MATH.md section 2 erratum of [HON] Sec. 3.4: with var(t^-) = var(t^-_sibling) = s^2/2 and
    var(t^+_parent) = s^2/3 (a depth-2 node of a tall binary tree with N known: its parent is the
    depth-1 best case of Sec. 3.3), var(t^*) = 5 s^2/16, not (0.202 s)^2; the best case is a
    depth-1 node with N known, s^2/4."""
    assert 1 / (2 + 1 / (1 / 3 + 1 / 2)) == pytest.approx(5 / 16, rel=1e-15)
    h = 20
    est = honaker_recursions([2] * h, [0.0] + [S2] * h, np.zeros(2 ** (h + 1) - 1))
    depth1, depth2 = est.efficient_var[1] / S2, est.efficient_var[3] / S2
    assert depth2 == pytest.approx(5 / 16, abs=1e-5)
    assert depth1 == pytest.approx(1 / 4, abs=1e-5)
    assert abs(depth2 - (math.sqrt(2) / 7) ** 2) > 0.2  # [HON]'s printed 0.202 s is far off


def test_hon_sec4_simulation_ratios():
    """MATH.md / [HON] Sec. 4 (16 leaves, sd 3, N known): MSE ratio about 1/4 at depth 1 and
    about 0.6 at the leaves."""
    est = honaker_recursions([2] * 4, [0.0] + [9.0] * 4, np.zeros(31))
    assert abs(est.efficient_var[1] / 9.0 - 0.25) < 0.03
    assert abs(est.efficient_var[-1] / 9.0 - 0.6) < 0.02


# --------------------------------------------------------------------------- refined CDF


REFINED_CASES = [
    ([2, 2, 2], [0.0, 1.0, 1.0, 1.0]),
    ([3, 2, 2], [0.0, 0.3, 2.0, 1.0]),
    ([4, 3], [1.5, 0.3, 2.0]),
    ([2, 1, 3], [0.0, 1.0, 0.5, 2.0]),
    ([2, 5], [np.inf, 0.7, 1.2]),
    ([3, 3], [0.0, np.inf, 1.0]),
    ([5], [0.9, 1.0]),
]


def refined_linear_map(ks, v):
    """R with refined_recursion(y) = R y: feed unit vectors as a batch (NaN on unmeasured levels)."""
    var = node_variances(ks, v)
    Y = np.eye(len(var))
    Y[:, ~np.isfinite(var)] = np.nan
    return refined_recursion(ks, v, Y)[0].T


@pytest.mark.parametrize("ks, v", REFINED_CASES)
def test_refined_linear_map_unbiased_and_variances(ks, v):
    check_refined_linear_map(ks, v)


@settings(max_examples=25, **ORACLE_SETTINGS)
@given(tree_problems(max_leaves=64))
def test_refined_linear_map_random(problem):
    check_refined_linear_map(*problem[:2])


def check_refined_linear_map(ks, v):
    """R A = prefix matrix (unbiased) and diag(R V R') = the returned variances."""
    A, _ = tree_matrix(ks)
    var = node_variances(ks, v)
    R = refined_linear_map(ks, v)
    unmeasured = ~np.isfinite(var)
    np.testing.assert_array_equal(R[:, unmeasured], 0.0)
    np.testing.assert_allclose(R @ A, prefix_matrix(A.shape[1]), atol=1e-12)
    cov_diag = (R[:, ~unmeasured] ** 2) @ var[~unmeasured]
    returned = refined_recursion(ks, v, np.zeros(len(var)))[1]
    np.testing.assert_allclose(returned, cov_diag, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(refined_error(ks, v, per_query=True), returned, rtol=0, atol=0)
    assert refined_error(ks, v) == pytest.approx(cov_diag.sum(), rel=1e-12)


@pytest.mark.parametrize("ks, v", REFINED_CASES)
def test_refined_matches_explicit_coverings(ks, v):
    """Step 2 rebuilt by brute force: L_t = sum of t^- over the left covering, R_t = y_root -
    sum over the right covering, inverse-variance combined; t = K gives t^-_root."""
    _, y = measure(ks, v, np.random.default_rng(5))
    est = honaker_recursions(ks, v, y)
    K = math.prod(ks)
    expected = np.empty(K)
    for t in range(1, K):
        left, right = left_covering(ks, t), right_covering(ks, t)
        var_l = est.below_var[left].sum()
        var_r = v[0] + est.below_var[right].sum()
        est_l = est.below[left].sum()
        if np.isinf(var_r):
            expected[t - 1] = est_l
        else:
            est_r = y[0] - est.below[right].sum()
            expected[t - 1] = (est_l / var_l + est_r / var_r) / (1 / var_l + 1 / var_r)
    expected[K - 1] = est.below[0]
    np.testing.assert_allclose(refined_recursion(ks, v, y)[0], expected, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("ks, v", REFINED_CASES)
def test_refined_never_beats_blue(ks, v):
    """The refined estimator is linear unbiased, so the BLUE of each prefix is at least as good."""
    A, _ = tree_matrix(ks)
    var = node_variances(ks, v)
    K = A.shape[1]
    P = prefix_matrix(K)
    _, y = measure(ks, v, np.random.default_rng(2))
    blue_var = np.array([blue_oracle(A, var, y, P[t])[1] for t in range(K)])
    refined_var = refined_error(ks, v, per_query=True)
    assert np.all(refined_var >= blue_var * (1 - 1e-9) - 1e-12)
    assert refined_var[-1] == pytest.approx(blue_var[-1], rel=1e-9, abs=1e-12)


def test_refined_unidentifiable_prefixes():
    """Leaves and root unmeasured: prefixes not on a level-1 boundary have variance inf."""
    ks, v = [2, 3], [np.inf, 1.0, np.inf]
    y = np.full(9, np.nan)
    y[1:3] = [4.0, 6.0]
    cdf, var = refined_recursion(ks, v, y)
    assert np.isinf(var).tolist() == [True, True, False, True, True, False]
    assert np.isnan(cdf).tolist() == [True, True, False, True, True, False]
    assert cdf[2] == 4.0 and cdf[5] == 10.0 and var[2] == 1.0 and var[5] == 2.0
    assert refined_error(ks, v) == np.inf


@pytest.mark.parametrize("ks, v", [([2, 2, 2, 2], [0.0, 1.0, 2.0, 1.5, 1.0]),
                                   ([4, 4], [3.0, 0.5, 1.0])])
def test_refined_monte_carlo(ks, v):
    trials = 20000
    x, y = measure(ks, v, np.random.default_rng(20240917), trials=trials)
    cdf = refined_recursion(ks, v, y)[0]
    sq = ((cdf - np.cumsum(x)) ** 2).sum(axis=1)
    se = sq.std(ddof=1) / math.sqrt(trials)
    assert abs(sq.mean() - refined_error(ks, v)) < 4 * se


@pytest.mark.slow
def test_refined_error_large_matches_refined_cdf():
    ks, v = [2] * 20, [0.0] + [1.0] * 20
    var = refined_error(ks, v, per_query=True)
    assert var.shape == (2**20,)
    _, returned = refined_recursion(ks, v, np.zeros(2**21 - 1))
    np.testing.assert_array_equal(var, returned)
    assert refined_error(ks, v) == pytest.approx(var.sum(), rel=1e-12)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("branching", [[2, 0], [2.0, 2], [True, 2], "ab", 3, [2, -1]])
def test_bad_branching(branching):
    with pytest.raises(ValueError, match="branching"):
        honaker_recursions(branching, [1.0, 1.0, 1.0], np.zeros(7))


@pytest.mark.parametrize("v", [[1.0, 1.0], [1.0, -1.0, 1.0], [1.0, np.nan, 1.0], [1.0, 0.0, 1.0]])
def test_bad_level_variances(v):
    for f in (lambda: honaker_recursions([2, 2], v, np.zeros(7)),
              lambda: refined_recursion([2, 2], v, np.zeros(7)),
              lambda: refined_error([2, 2], v)):
        with pytest.raises(ValueError, match="level_variances"):
            f()


def test_bad_y():
    with pytest.raises(ValueError, match="y"):
        honaker_recursions([2, 2], [0.0, 1.0, 1.0], np.zeros(6))
    with pytest.raises(ValueError, match="y"):
        honaker_recursions([2, 2], [0.0, 1.0, 1.0], 0.0)
    y = np.zeros(7)
    y[2] = np.nan
    with pytest.raises(ValueError, match="y"):
        refined_recursion([2, 2], [0.0, 1.0, 1.0], y)
    # NaN on an unmeasured level is ignored
    est = honaker_recursions([2, 2], [0.0, np.inf, 1.0], y)
    assert np.isfinite(est.efficient).all()
