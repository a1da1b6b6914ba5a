"""Tree estimators for mechanisms on level-uniform trees (the O(n) fast paths).

Wraps the pure recursions of :mod:`dptree_opt.engines.honaker` with a mechanism's
branching factors and per-level noise variances (root: 0 when N is public, inf when the
root is not measured).
"""

from __future__ import annotations

import numpy as np

from ..mechanism import Mechanism
from ..strategies import LevelUniformTree
from .honaker import TreeEstimates, honaker_recursions, refined_error, refined_recursion

__all__ = ["is_tree_mechanism", "tree_parameters", "tree_estimates", "tree_blue",
           "refined_cdf", "refined_variances", "TreeEstimates"]


def is_tree_mechanism(mechanism: Mechanism) -> bool:
    """Whether the fast tree paths apply: the released strategy is a level-uniform tree with
    budgets per level (not ``row_budgets``) whose non-root levels are noisy or unmeasured (a non-root level is exact only when it repeats
    the root, e.g. one bin under swap; the generic solver handles that)."""
    if not isinstance(mechanism.released, LevelUniformTree) or mechanism.row_budgets is not None:
        return False  # budgets per row: not level-uniform noise (the bridge engine applies)
    return all(v > 0 for lvl, v in mechanism.level_variances.items() if lvl > 0)


def tree_parameters(mechanism: Mechanism) -> tuple[tuple[int, ...], np.ndarray]:
    """(branching, level variances v_0..v_h) of a mechanism on a level-uniform tree."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if not is_tree_mechanism(mechanism):
        raise ValueError(f"{mechanism.released.name!r} is not a level-uniform tree with noisy "
                         "non-root levels (use strategies.tree, or the generic estimators)")
    tree = mechanism.released
    variances = mechanism.level_variances
    return tree.branching, np.array([variances[lvl] for lvl in range(tree.height + 1)])


def _check_y(mechanism: Mechanism, y) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    rows = mechanism.released.n_rows
    if y.ndim == 0 or y.shape[-1] != rows:
        raise ValueError(f"y must have {rows} entries per trial (one per released row), got "
                         f"shape {y.shape}")
    return y


def tree_estimates(mechanism: Mechanism, y) -> TreeEstimates:
    """[HON] node estimates t^-, t^+, t^* and their variances, in the strategy's row order.

    y: noisy answers, shape (nodes,) or (trials, nodes). O(nodes), vectorised per level."""
    ks, v = tree_parameters(mechanism)
    return honaker_recursions(ks, v, _check_y(mechanism, y))


def tree_blue(mechanism: Mechanism, y) -> np.ndarray:
    """The BLUE of the histogram on a tree: the leaf level of t^* ([HON] = GLS)."""
    est = tree_estimates(mechanism, y)
    leaves = mechanism.released.level_slice(mechanism.released.height)
    if not np.all(np.isfinite(est.efficient_var[leaves])):
        raise ValueError("the strategy cannot identify the histogram (no measured level "
                         "resolves the leaves)")
    return est.efficient[..., leaves]


def refined_cdf(mechanism: Mechanism, y) -> np.ndarray:
    """[RTS] App. B refined estimates of the K cumulative counts (shape (K,) or (trials, K)):
    estimation from below, then inverse-variance combination of the left covering sum and
    the total minus the right covering sum (see ``honaker.refined_recursion``)."""
    ks, v = tree_parameters(mechanism)
    return refined_recursion(ks, v, _check_y(mechanism, y))[0]


def refined_variances(mechanism: Mechanism) -> np.ndarray:
    """Exact variance of each refined prefix estimate, t = 1..K; O(K)."""
    ks, v = tree_parameters(mechanism)
    return refined_error(ks, v, per_query=True)
