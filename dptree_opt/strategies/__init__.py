"""Strategies A: the queries a mechanism measures (rows) over the bins (columns).

``histogram``, ``prefix_sums``, ``tree`` / ``binary_tree`` (level-uniform trees, [RTS]
Def. IV.1) and ``hierarchy`` (any rooted networkx tree) are laminar families of bin ranges
with structured exact sensitivities; ``Strategy`` wraps any other matrix. Beyond trees:
``haar`` (Privelet), ``toeplitz`` (any lower-triangular Toeplitz strategy, kept implicit:
FFT products, exact sensitivities without a matrix), ``sqrt_factorization`` (the Toeplitz
L with L @ L = prefix matrix), ``kron`` (Kronecker products over a row-major grid, kept
implicit: per-axis products, exact sensitivities from per-axis profiles) and the optimisers
of ``strategies.optimized`` (the Gaussian optimum, HDMM's p-Identity for Laplace and its
Kronecker products ``kron_p_identity`` / ``kron_gaussian_optimal`` for grids; with the best-tree safety net:
``optimize.optimized_strategy``).
"""

from ..privacy import NEIGHBOURS
from .base import Strategy
from .interval import (
    IntervalStrategy,
    LevelUniformTree,
    PrefixSums,
    binary_tree,
    hierarchy,
    padded_height,
    prefix_sums,
    resolve_branching,
    tree,
    truncated_tree,
)
from .restarted import RestartedStrategy, online_tree, restarted
from .factorization import SqrtFactorization, banded_inverse_sqrt, banded_sqrt, sqrt_factorization
from .blt import BLTStrategy, blt
from .haar import haar
from .toeplitz import ScaledToeplitzStrategy, ToeplitzStrategy, toeplitz
from .banded import BandedStrategy, banded, normalise_columns
from .kronecker import KroneckerStrategy, histogram, kron
from .quadtree import QuadtreeStrategy, quadtree
from .optimized import OptimizedStrategy, kron_gaussian_optimal, kron_p_identity, p_identity
from . import implicit_optimum
from .implicit_optimum import ImplicitFactorization, gaussian_optimal_implicit
from .nested import NestedStrategy, nested

__all__ = ["NestedStrategy", "nested", 
    "NEIGHBOURS",
    "Strategy",
    "IntervalStrategy",
    "LevelUniformTree",
    "PrefixSums",
    "binary_tree",
    "hierarchy",
    "histogram",
    "padded_height",
    "prefix_sums",
    "resolve_branching",
    "tree",
    "truncated_tree",
    "restarted",
    "RestartedStrategy",
    "online_tree",
    "haar",
    "toeplitz",
    "ScaledToeplitzStrategy",
    "ToeplitzStrategy",
    "banded",
    "banded_sqrt",
    "banded_inverse_sqrt",
    "normalise_columns",
    "BandedStrategy",
    "kron",
    "KroneckerStrategy",
    "quadtree",
    "QuadtreeStrategy",
    "sqrt_factorization",
    "SqrtFactorization",
    "blt",
    "BLTStrategy",
    "OptimizedStrategy",
    "implicit_optimum",
    "ImplicitFactorization",
    "gaussian_optimal_implicit",
    "p_identity",
    "kron_p_identity",
    "kron_gaussian_optimal",
]
