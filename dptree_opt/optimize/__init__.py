"""Choosing the tree: branching factors and per-level budgets.

[RTS] Sec. IV (covering estimator; cvxpy): ``budgets`` (O1), ``branching`` (O2), ``joint``
(Thm IV.3), ``degenerate_optimum``, ``psi`` / ``optimal_branching_factor`` (Lemma IV.3),
``optimal_height``. [RTS] Sec. V and beyond: ``level_uniform``, the exact integer search over
(padded) ordered factorisations scored by the exact error of the covering, refined or BLUE
estimator. Beyond [RTS]: ``optimal_blue_budgets`` (optimal per-level budgets for the BLUE,
Laplace and Gaussian); ``optimal_node_budgets`` (a budget per node: every root-to-leaf path
sums to the total; exact adjoint gradient, O(K) per step); ``optimal_grid_budgets`` (budgets
per level tuple of Kronecker trees and quadtrees on grids); ``best_grid_hierarchy`` (which
Kronecker tree / quadtree for a grid, equal or optimal budgets) and ``flat_grid_error``. Every
1-D tree result is a ``TreeDesign``. Beyond trees: ``optimized_strategy``
(the Gaussian optimum / HDMM's p-Identity, never worse than ``best_tree``); ``optimal_nested`` / ``best_nested`` (nested strategies for pure DP at
scale, docs/math.md section 12); ``l1_local`` (local
optimisation of the full pure-DP strategy problem from p-Identity, ``l1_objective`` its
objective and gradient).
"""

from .beyond_trees import best_tree, clear_cache, optimized_strategy
from .blue_budgets import optimal_blue_budgets
from .levels import level_variances, noisy_levels
from .node_budgets import NodeBudgets, optimal_node_budgets, tree_cdf_error
from .grid import GridDesign, GridSearch, best_grid_hierarchy, flat_grid_error
from .grid_budgets import GridBudgets, optimal_grid_budgets
from .result import TreeDesign, error_unit
from .rts import (
    branching,
    budgets,
    budgets_closed_form,
    branching_closed_form,
    degenerate_optimum,
    joint,
    optimal_branching_factor,
    optimal_height,
    psi,
)
from .factorisations import finest_refinement
from .search import design_error, level_uniform
from .design import Design
from .banded_toeplitz import BandedToeplitzResult, banded_toeplitz
from .participation_optimum import (ParticipationBound, ParticipationOptimum,
                                    participation_lower_bound, participation_optimum)
from .best import best_mechanism
from .l1_local import l1_local, l1_objective
from .nested_design import (NestedDesign, best_nested, nested_fanouts, nested_prefix_error,
                            optimal_nested)

__all__ = ["TreeDesign", "error_unit", "budgets", "branching", "budgets_closed_form",
           "branching_closed_form", "joint", "degenerate_optimum", "psi",
           "optimal_branching_factor", "optimal_height", "level_uniform", "design_error",
           "finest_refinement",
           "optimal_blue_budgets", "optimal_node_budgets", "NodeBudgets", "tree_cdf_error",
           "optimal_grid_budgets", "GridBudgets", "best_grid_hierarchy", "flat_grid_error",
           "GridDesign", "GridSearch",
           "level_variances", "noisy_levels", "best_tree",
           "optimized_strategy", "clear_cache", "best_mechanism", "Design",
           "banded_toeplitz", "BandedToeplitzResult", "ParticipationBound",
           "ParticipationOptimum", "participation_lower_bound", "participation_optimum",
           "l1_local", "l1_objective", "NestedDesign", "best_nested", "nested_fanouts",
           "nested_prefix_error", "optimal_nested"]
