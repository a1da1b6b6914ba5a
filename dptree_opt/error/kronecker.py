"""Exact BLUE error of Kronecker products of level-uniform trees on Kronecker workloads.

Setting (MATH.md section 8; issue 15 item 3): the strategy is T_1 x .. x T_d
(``strategies.kron`` of ``strategies.tree`` factors, complete: K_i = prod of the branching) and
every row of the level tuple l = (l_1, .., l_d) carries noise of variance v_l (budgets per
level tuple, ``Mechanism(..., level_budgets=...)``). The workload is W_1 x .. x W_d with 1-D
factors of kind prefix, identity, total or all_range.

On axis i, the level-l rows' Gram A_il'A_il acts on the tree's generalised Haar subspaces
D_ij (``error.tree``): it is w_il I on D_ij for j <= l (those vectors are constant on level-l
nodes) and 0 for j > l (they sum to zero on every level-l node). The d-D information matrix
sum_l v_l^-1 (x)_i A_il'A_il is therefore diagonal on the product subspaces
D_j = D_1j_1 x .. x D_dj_d, with eigenvalue

    lambda_j = sum over l >= j (componentwise) of prod_i w_(i, l_i) / v_l,

and the BLUE's covariance is sum_j D_j / lambda_j. The workload's weight on D_j is
prod_i q_(i, j_i) (q = ``error.tree.haar_workload_weights``; q = (K, 0, .., 0) for the
total), so

    E = sum_j prod_i q_(i, j_i) / lambda_j,

an O(prod_i (h_i + 1)) sum: the 2-D CDF over 4096 x 4096 cells costs as much as over 4 x 4.
lambda is a reverse cumulative sum of the level-tuple information along every axis. A public
grand total (the level tuple (0, .., 0) exact, swap neighbours) fixes D_(0,..,0): its term is
0 and the exact row leaves every other lambda unchanged. Checked against the dense GLS on
small grids (tests/test_grids.py).
"""

from __future__ import annotations

import numpy as np

from ..estimation.kronecker import (grid_trees, is_kron_tree_mechanism, is_quadtree_mechanism,
                                   level_tuple_lambdas)
from ..mechanism import Mechanism
from ..strategies import LevelUniformTree
from ..workloads import KroneckerWorkload
from .tree import haar_workload_weights

__all__ = ["is_kron_tree_mechanism", "is_grid_tree_mechanism", "kron_tree_error",
           "axis_workload_weights", "axis_interval_weights", "kron_box_variances",
           "KRON_TREE_WORKLOADS"]

KRON_TREE_WORKLOADS = ("prefix", "identity", "total", "all_range")


def is_grid_tree_mechanism(mechanism: Mechanism) -> bool:
    """A Kronecker product of complete trees or a quadtree, budgets per level (tuple)."""
    return is_kron_tree_mechanism(mechanism) or is_quadtree_mechanism(mechanism)


def axis_workload_weights(tree: LevelUniformTree, workload) -> np.ndarray:
    """q_0..q_h of a 1-D workload factor on one axis's tree (``error.tree.
    haar_workload_weights``; the total: (K, 0, .., 0), all of 1'1 on the constants)."""
    if workload.kind == "total":
        q = np.zeros(tree.height + 1)
        q[0] = float(tree.n_bins)   # (1'1)^2 / K on the constants, nothing on D_j, j >= 1
        return q
    return haar_workload_weights(tree.branching, workload.kind)


def kron_tree_error(mechanism: Mechanism, workload: KroneckerWorkload) -> float:
    """sum_q Var(answer_q) of the BLUE for ``workload`` (module docstring). Raises
    ValueError when the structure does not apply or the grid is not identified."""
    if not is_grid_tree_mechanism(mechanism):
        raise ValueError("kron_tree_error needs a Kronecker product of complete level-uniform "
                         "trees or a quadtree, with budgets per level (tuple)")
    strat = mechanism.released
    if not isinstance(workload, KroneckerWorkload) or workload.grid_shape != strat.grid_shape:
        raise ValueError("the workload must be a Kronecker workload over the strategy's grid "
                         f"{strat.grid_shape}")
    if any(f.kind not in KRON_TREE_WORKLOADS for f in workload.factors):
        raise ValueError(f"per-axis workloads must be one of {KRON_TREE_WORKLOADS}")
    trees = grid_trees(strat)
    dims = tuple(t.height + 1 for t in trees)
    lam, public = level_tuple_lambdas(mechanism)
    q = np.ones(dims)
    for i, (t, w) in enumerate(zip(trees, workload.factors)):
        shape = [1] * len(trees)
        shape[i] = dims[i]
        q = q * axis_workload_weights(t, w).reshape(shape)
    if public:
        q.flat[0] = 0.0                  # the constant direction is known exactly
    need = q > 0
    if np.any(need & ~(lam > 0)):
        raise ValueError("the strategy cannot identify the grid: some level tuples needed "
                         "by the workload are unmeasured")
    return float(np.sum(np.where(need, q / np.where(lam > 0, lam, 1.0), 0.0)))


# ------------------------------------------------------------------ boxes, one at a time
def axis_interval_weights(tree: LevelUniformTree, lo, hi) -> np.ndarray:
    """||D_j u||^2, j = 0..h, of the fractional interval indicators u on one axis's tree.

    u is the indicator of [lo, hi) in bin coordinates (real 0 <= lo <= hi <= K; bin t is
    [t, t + 1), so a fraction of a bin counts with its overlap, the linear interpolation
    inside bins). With M_j the averaging onto the level-j nodes (width w_j = K / (k_1 ..
    k_j)), ||M_j u||^2 = sum over nodes of overlap^2 / w_j: nodes wholly inside [lo, hi)
    give w_j each, and at most two are cut, so it is O(1) per level; D_j = M_j - M_(j-1)
    (M_(-1) = 0, M_0 the grand mean). Shapes: lo, hi (m,) -> (m, h + 1). Summed over the
    prefixes [0, t) it is ``error.tree.haar_workload_weights`` (tested)."""
    lo = np.atleast_1d(np.asarray(lo, dtype=float))
    hi = np.atleast_1d(np.asarray(hi, dtype=float))
    K = tree.n_bins
    if lo.shape != hi.shape or lo.ndim != 1:
        raise ValueError("lo and hi must be 1-D arrays of the same length")
    if np.any(~np.isfinite(lo) | ~np.isfinite(hi)) or np.any((lo < 0) | (lo > hi) | (hi > K)):
        raise ValueError(f"intervals must satisfy 0 <= lo <= hi <= {K} (bin coordinates)")
    widths = np.asarray(tree.level_widths, dtype=float)          # w_0 = K, .., w_h = 1
    w = widths[None, :]
    L = np.floor(lo[:, None] / w)
    R = np.floor(hi[:, None] / w)
    same = L == R
    left = (L + 1) * w - lo[:, None]
    right = hi[:, None] - R * w
    m = np.where(same, (hi - lo)[:, None] ** 2 / w,
                 (left * left + right * right) / w + (R - L - 1) * w)
    p = np.diff(m, axis=1, prepend=0.0)
    return np.maximum(p, 0.0)                                      # rounding below 0


def kron_box_variances(mechanism: Mechanism, lo, hi) -> np.ndarray:
    """Exact variances of the BLUE's answers to boxes [lo_1, hi_1) x .. x [lo_d, hi_d) (bin
    coordinates of the mechanism's grid, fractions allowed: linear interpolation inside
    cells), for a Kronecker product of complete trees with a variance per level tuple, or a
    quadtree (its information matrix is diagonal on the same product Haar subspaces: only the
    diagonal level tuples are measured, ``level_tuple_lambdas``).

    The box is the Kronecker product of its per-axis indicators u_i, and the BLUE's
    covariance is sum_j D_j / lambda_j with D_j the product Haar projectors (module
    docstring), so Var = sum_j prod_i ||D_(i, j_i) u_i||^2 / lambda_j: O(sum_i h_i + prod_i
    (h_i + 1)) per box, no grid-sized matrix. A public grand total removes the j = 0 term.
    Shapes: lo, hi (d,) or (m, d) -> () or (m,). Tested against the dense GLS."""
    if not is_grid_tree_mechanism(mechanism):
        raise ValueError("kron_box_variances needs a Kronecker product of complete "
                         "level-uniform trees with budgets per level tuple, or a quadtree")
    trees = grid_trees(mechanism.released)
    d = len(trees)
    lo_a, hi_a = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    single = lo_a.ndim == 1
    lo_a, hi_a = np.atleast_2d(lo_a), np.atleast_2d(hi_a)
    if lo_a.shape != hi_a.shape or lo_a.ndim != 2 or lo_a.shape[1] != d:
        raise ValueError(f"lo and hi must have shape (d,) or (m, d) with d = {d}")
    lam, public = level_tuple_lambdas(mechanism)
    inv = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), np.inf)
    if public:
        inv.flat[0] = 0.0
    acc = None                                    # contract axis by axis: (m, rest of lambda)
    for i, t in enumerate(trees):
        p = axis_interval_weights(t, lo_a[:, i], hi_a[:, i])    # (m, h_i + 1)
        big = (p > 1e-12 * t.n_bins).astype(float)          # above the rounding of p
        if acc is None:
            acc = np.einsum("mj,j...->m...", p, np.where(np.isinf(inv), 0.0, inv))
            bad = np.einsum("mj,j...->m...", big, np.isinf(inv).astype(float))
        else:
            acc = np.einsum("mj,mj...->m...", p, acc)
            bad = np.einsum("mj,mj...->m...", big, bad)
    if np.any(bad > 0):
        raise ValueError("a box depends on an unmeasured level tuple: the strategy cannot "
                         "estimate it")
    return acc[0] if single else acc
