"""Tests of dptree_opt.engines.tree_error against an independent dense GLS oracle and MATH.md anchors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings

from dptree_opt.engines.tree_error import (
    MAX_ALL_RANGE_PER_QUERY_K,
    blue_covariance_coefficients,
    blue_error,
    blue_haar_variances,
)
from oracles import tree_matrix as dense_strategy
from builders import tree_variances

WORKLOADS = ("prefix", "identity", "all_range")
RTOL = 1e-9


# ---------------------------------------------------------------------------------------------
# Dense oracle: explicit strategy matrix, generalised least squares, explicit workload matrix.
# ---------------------------------------------------------------------------------------------
def dense_information(branching, level_variances):
    """A_n' V_n^-1 A_n over the noisy rows (0 < v < inf)."""
    A, levels = dense_strategy(branching)
    v = np.asarray(level_variances, dtype=float)[levels]
    noisy = np.isfinite(v) & (v > 0)
    An = A[noisy]
    return An.T @ (An / v[noisy][:, None])


def dense_identifiable(branching, level_variances):
    M = dense_information(branching, level_variances)
    if level_variances[0] == 0:
        M = M + np.ones_like(M)  # the public total fixes the constant direction
    eig = np.linalg.eigvalsh(M)
    return eig[0] > 1e-9 * max(eig[-1], 1.0)


def dense_cov(branching, level_variances):
    """BLUE covariance: inverse information, or the KKT (1,1) block when N is public."""
    M = dense_information(branching, level_variances)
    K = M.shape[0]
    if level_variances[0] == 0:
        kkt = np.zeros((K + 1, K + 1))
        kkt[:K, :K] = M
        kkt[:K, K] = 1.0
        kkt[K, :K] = 1.0
        return np.linalg.inv(kkt)[:K, :K]
    return np.linalg.inv(M)


def dense_workload(name, K):
    if name == "prefix":
        return np.tril(np.ones((K, K)))
    if name == "identity":
        return np.eye(K)
    a, b = np.triu_indices(K)
    cols = np.arange(K)
    return ((cols >= a[:, None]) & (cols <= b[:, None])).astype(float)


def dense_per_query(cov, name):
    """diag(W Cov W'); for all_range at larger K via 2-D cumulative sums of the dense Cov."""
    K = cov.shape[0]
    if name != "all_range" or K <= 256:
        W = dense_workload(name, K)
        return ((W @ cov) * W).sum(axis=1)
    S = np.zeros((K + 1, K + 1))
    S[1:, 1:] = cov.cumsum(0).cumsum(1)
    a, b = np.triu_indices(K)
    e = b + 1
    return S[e, e] - S[a, e] - S[e, a] + S[a, a]


def assert_close(actual, expected, rtol=RTOL):
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = max(np.abs(expected).max(initial=0.0), 1e-300)
    assert np.abs(actual - expected).max(initial=0.0) <= rtol * scale


# ---------------------------------------------------------------------------------------------
# Random trees
# ---------------------------------------------------------------------------------------------
def check_against_oracle(ks, v):
    if not dense_identifiable(ks, v):
        with pytest.raises(ValueError, match="unidentifiable"):
            blue_error(ks, v)
        return
    cov = dense_cov(ks, v)
    for name in WORKLOADS:
        expected = dense_per_query(cov, name)
        assert_close(blue_error(ks, v, name, per_query=True), expected)
        assert blue_error(ks, v, name) == pytest.approx(expected.sum(), rel=RTOL)


@settings(max_examples=100, deadline=None)
@given(tree_variances(max_k=512))
def test_matches_dense_oracle(tree):
    check_against_oracle(*tree)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(tree_variances(max_k=2048))
def test_matches_dense_oracle_large(tree):
    check_against_oracle(*tree)


@pytest.mark.parametrize(
    "ks, v",
    [
        ([2, 2, 2, 2], [0.0, 1.0, 2.0, 3.0, 4.0]),
        ([3, 1, 4], [5.0, 1.0, 0.5, 2.0]),
        ([1, 2], [math.inf, 1.0, 3.0]),
        ([2, 1], [1.0, 2.0, math.inf]),  # leaves unmeasured, but their duplicate level is
        ([4, 4, 2], [0.0, math.inf, 2.0, 0.1]),
        ([5], [math.inf, 1.0]),
        ([], [1.0]),
        ([1, 1], [0.0, math.inf, math.inf]),  # K = 1 with N public: no error at all
        ([2, 3, 2, 2, 3], [0.3, 30.0, 1.0, math.inf, 7.0, 0.2]),
    ],
)
def test_fixed_trees_against_oracle(ks, v):
    check_against_oracle(ks, v)


def test_covariance_coefficients_rebuild_dense_cov():
    for ks, v in [([2, 3, 2], [0.0, 1.0, 4.0, 0.5]), ([3, 1, 4], [2.0, 1.0, math.inf, 3.0])]:
        K = math.prod(ks)
        c = blue_covariance_coefficients(ks, v)
        cov = np.zeros((K, K))
        m = 1
        for level, coef in enumerate(c):
            if level:
                m *= ks[level - 1]
            cov += coef * np.kron(np.eye(m), np.ones((K // m, K // m)))
        assert_close(cov, dense_cov(ks, v))


def test_haar_variances_are_eigenvalues():
    ks, v = [2, 3, 2], [4.0, 1.0, 2.0, 0.5]
    mu = blue_haar_variances(ks, v)
    eig = np.sort(np.linalg.eigvalsh(dense_cov(ks, v)))
    # subspace dims: D_0 = 1, D_j = m_{j-1} (k_j - 1)
    expected = np.sort(np.repeat(mu, [1, 1, 2 * 2, 6 * 1]))
    assert_close(eig, expected)
    assert blue_haar_variances(ks, [0.0, *v[1:]])[0] == 0.0


# ---------------------------------------------------------------------------------------------
# Known numbers (MATH.md sections 2 and 6)
# ---------------------------------------------------------------------------------------------
def node_variances(ks, v):
    """var((A x_hat)_node) per level from Cov = sum_j c_j P_j, P_j = I_{m_j} kron J_{w_j}:
    for a level-l node, 1' P_j 1 = w_l^2 if j <= l (one level-j node holds it), else w_l w_j."""
    c = blue_covariance_coefficients(ks, v)
    K = math.prod(ks)
    widths = [K // math.prod(ks[:j]) for j in range(len(ks) + 1)]
    return np.array(
        [sum(c[j] * (wl * wl if j <= l else wl * widths[j]) for j in range(len(ks) + 1))
         for l, wl in enumerate(widths)]
    )


@pytest.mark.parametrize("public, expected", [(True, 15 / 30), (False, 16 / 31)])
def test_hat_matrix_identity(public, expected):
    """MATH.md sec. 2: equal variance s^2, 16 leaves: mean var(t*)/s^2 = free params / noisy."""
    s2 = 9.0
    ks = [2, 2, 2, 2]
    v = [0.0 if public else s2] + [s2] * 4
    per_level = node_variances(ks, v)
    counts = np.array([1, 2, 4, 8, 16])
    noisy = slice(1, None) if public else slice(None)
    mean = (per_level[noisy] * counts[noisy]).sum() / counts[noisy].sum() / s2
    assert mean == pytest.approx(expected, rel=1e-12)
    A, levels = dense_strategy(ks)
    dense_nodes = ((A @ dense_cov(ks, v)) * A).sum(axis=1)
    assert_close(per_level[levels], dense_nodes)


def test_hon_worked_numbers():
    """MATH.md sec. 2 (corrected [HON] 3.4): depth-1 node of a tall tree with N known -> s^2/4."""
    per_level = node_variances([2] * 20, [0.0] + [1.0] * 20)
    assert per_level[1] == pytest.approx(0.25, rel=1e-5)
    assert per_level[0] == 0.0


@pytest.mark.parametrize("log2n, expected", [(10, 298.9), (16, 1002.8), (20, 1824.3)])
def test_hay_binary_ols_anchor(log2n, expected):
    """MATH.md sec. 6: eps = 1, add/remove, Laplace, equal eps over log2(n)+1 levels incl. root:
    v_l = 2 (log2 n + 1)^2; mean prefix-count MSE over t = 1..n."""
    n = 2**log2n
    v = [2.0 * (log2n + 1) ** 2] * (log2n + 1)
    mean = blue_error([2] * log2n, v, "prefix") / n
    assert round(mean, 1) == expected
    assert blue_error([2] * log2n, v, "prefix", per_query=True).mean() == pytest.approx(mean)


# ---------------------------------------------------------------------------------------------
# Closed-form totals vs per-query sums, structure and scaling
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ks, v",
    [
        ([16, 16, 16], [0.0, 1.0, 2.0, 3.0]),
        ([2] * 12, [math.inf] + [1.5] * 12),
        ([7, 1, 5, 3, 4], [2.0, 0.1, math.inf, 1.0, 10.0, 0.3]),
    ],
)
@pytest.mark.parametrize("name", WORKLOADS)
def test_total_equals_sum_of_per_query(ks, v, name):
    if name == "all_range" and math.prod(ks) > 1024:
        ks, v = ks[:2], v[:3]
    assert blue_error(ks, v, name) == pytest.approx(blue_error(ks, v, name, per_query=True).sum(),
                                                    rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("k, h", [(2, 12), (16, 3), (4, 6)])
def test_all_range_per_query_at_max_K(k, h):
    """K = 4096: the int32 per-query path stays exact and sums to the closed-form total."""
    v = list(np.random.default_rng(h).uniform(0.5, 5.0, h + 1))
    per_query = blue_error([k] * h, v, "all_range", per_query=True)
    assert per_query.shape == (4096 * 4097 // 2,) and per_query.min() > 0
    assert blue_error([k] * h, v, "all_range") == pytest.approx(per_query.sum(), rel=1e-12)


def test_public_total_and_identity_shape():
    ks, v = [4, 4, 4], [0.0, 1.0, 1.0, 1.0]
    prefix = blue_error(ks, v, "prefix", per_query=True)
    assert prefix.shape == (64,) and prefix[-1] == 0.0  # C_K = N is public
    ident = blue_error(ks, v, "identity", per_query=True)
    assert np.all(ident == ident[0])
    assert blue_error(ks, v, "all_range", per_query=True).shape == (64 * 65 // 2,)


def test_variance_scaling_and_large_K_totals():
    ks = [2] * 40  # K = 2^40: totals are O(h), exact integer level sums
    v = [3.0] * 41
    for name in WORKLOADS:
        t = blue_error(ks, v, name)
        assert np.isfinite(t) and t > 0
        assert blue_error(ks, [10 * x for x in v], name) == pytest.approx(10 * t, rel=1e-12)


def test_unmeasured_root_equals_private_root_limit():
    ks = [3, 4]
    assert blue_error(ks, [math.inf, 1.0, 2.0]) == pytest.approx(
        blue_error(ks, [1e15, 1.0, 2.0]), rel=1e-9)
    assert blue_error(ks, [0.0, 1.0, 2.0]) == pytest.approx(
        blue_error(ks, [1e-15, 1.0, 2.0]), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(branching=[2, 0], level_variances=[1, 1, 1]), "branching"),
        (dict(branching=[2.5], level_variances=[1, 1]), "branching"),
        (dict(branching=[True, 2], level_variances=[1, 1, 1]), "branching"),
        (dict(branching=4, level_variances=[1, 1]), "branching"),
        (dict(branching=[2, 2], level_variances=[1, 1]), "level_variances"),
        (dict(branching=[2], level_variances=[1, -1]), "level_variances"),
        (dict(branching=[2], level_variances=[1, math.nan]), "level_variances"),
        (dict(branching=[2], level_variances=[1, 0]), "level_variances"),
        (dict(branching=[2], level_variances=["a", 1]), "level_variances"),
        (dict(branching=[2], level_variances=[1, 1], workload="ranges"), "workload"),
        (dict(branching=[2], level_variances=[1, 1], per_query="yes"), "per_query"),
    ],
)
def test_invalid_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        blue_error(**kwargs)


@pytest.mark.parametrize(
    "ks, v",
    [
        ([2, 2], [1.0, 1.0, math.inf]),  # leaves unmeasured
        ([2, 1], [1.0, math.inf, math.inf]),  # leaves and their duplicate unmeasured
        ([1], [math.inf, math.inf]),  # K = 1, nothing measured
        ([3], [math.inf, math.inf]),
    ],
)
def test_unidentifiable(ks, v):
    assert not dense_identifiable(ks, v)
    for f in (blue_haar_variances, blue_covariance_coefficients, blue_error):
        with pytest.raises(ValueError, match="unidentifiable"):
            f(ks, v)


def test_all_range_per_query_size_limit():
    ks = [2] * 13
    assert math.prod(ks) > MAX_ALL_RANGE_PER_QUERY_K
    with pytest.raises(ValueError, match="all_range"):
        blue_error(ks, [1.0] * 14, "all_range", per_query=True)
    assert blue_error(ks, [1.0] * 14, "all_range") > 0


@pytest.mark.parametrize("ks,n", [((2, 2, 2), 6), ((3, 4), 10), ((4, 2, 3), 17),
                                  ((2, 3, 2, 2), 23), ((5, 5), 21), ((7, 3), 21), ((4, 4), 16)])
def test_all_range_weights_of_the_first_n_bins_equal_dense(ks, n):
    """haar_workload_weights(ks, "all_range", n): the ranges within the first n bins of a
    padded tree; sum_j q_j mu_j equals the dense GLS error of those ranges."""
    from dptree_opt import Mechanism, strategies
    from dptree_opt.engines.tree_error import blue_haar_variances, haar_workload_weights
    from dptree_opt.estimation.blue import blue_covariance

    kp = math.prod(ks)
    mech = Mechanism(strategies.tree(kp, list(ks)), epsilon=1.0, neighbours="add_remove",
                     level_budgets=list(np.linspace(0.1, 0.3, len(ks) + 1) /
                                        np.linspace(0.1, 0.3, len(ks) + 1).sum()))
    v = np.array([mech.level_variances[lv] for lv in range(len(ks) + 1)])
    got = float(haar_workload_weights(ks, "all_range", n) @ blue_haar_variances(ks, v))
    z = np.zeros((kp + 1, kp + 1))
    z[1:, 1:] = np.cumsum(np.cumsum(blue_covariance(mech), 0), 1)
    zk = z[:n + 1, :n + 1]
    assert got == pytest.approx((n + 1) * np.trace(zk) - zk.sum(), rel=1e-10)
