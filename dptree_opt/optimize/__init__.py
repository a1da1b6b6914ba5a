"""Choosing the tree: branching factors and per-level budgets (issue 4; being assembled)."""

from .result import TreeDesign, error_unit

__all__ = ["TreeDesign", "error_unit"]
