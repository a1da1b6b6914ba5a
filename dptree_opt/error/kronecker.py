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
           "axis_workload_weights",
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
