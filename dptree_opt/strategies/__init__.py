"""Strategies A: the queries a mechanism measures (rows) over the bins (columns).

``histogram``, ``prefix_sums``, ``tree`` / ``binary_tree`` (level-uniform trees, [RTS]
Def. IV.1) and ``hierarchy`` (any rooted networkx tree) are laminar families of bin ranges
with structured exact sensitivities; ``Strategy`` wraps any other matrix.
"""

from .base import NEIGHBOURS, Strategy
from .interval import (
    IntervalStrategy,
    LevelUniformTree,
    PrefixSums,
    binary_tree,
    hierarchy,
    histogram,
    prefix_sums,
    resolve_branching,
    tree,
)

__all__ = [
    "NEIGHBOURS",
    "Strategy",
    "IntervalStrategy",
    "LevelUniformTree",
    "PrefixSums",
    "binary_tree",
    "hierarchy",
    "histogram",
    "prefix_sums",
    "resolve_branching",
    "tree",
]
