"""Choosing the tree: branching factors and per-level budgets.

[RTS] Sec. IV (covering estimator): ``budgets`` (O1), ``branching`` (O2), ``joint`` (Thm IV.3),
``optimal_branching_factor`` / ``psi`` (Lemma IV.3), ``optimal_height``. Beyond [RTS]:
``optimal_blue_budgets`` (optimal per-level budgets for the BLUE, Laplace and Gaussian).
"""

from .blue_budgets import optimal_blue_budgets
from .convex import (
    branching,
    budgets,
    degenerate_joint_example,
    joint,
    optimal_branching_factor,
    optimal_height,
    psi,
)
from .result import TreeDesign, error_unit

__all__ = ["TreeDesign", "error_unit", "budgets", "branching", "joint",
           "degenerate_joint_example", "psi", "optimal_branching_factor", "optimal_height",
           "optimal_blue_budgets"]
