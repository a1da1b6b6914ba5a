"""The BLUE of the histogram: one entry point, exact on every path.

On a level-uniform tree it is Honaker's O(n) efficient estimator (the leaf level of t^*); on a
Toeplitz strategy with equal noise it is A^-1 y by the FFT power-series inverse, plus the
rank-one step when N is public or measured by noisy total rows
(:mod:`dptree_opt.engines.toeplitz`, O(n log n));
on any other interval (laminar) strategy the bridge recursion of
:mod:`dptree_opt.engines.laminar` (O(n), Honaker's passes on any hierarchy), on Haar
(n = 2^L) its top-down solve (:mod:`dptree_opt.engines.haar`), on the implicit Gaussian
optimum A^-1 y (:mod:`dptree_opt.engines.implicit`); otherwise the
generic GLS (sparse KKT LU or dense Cholesky). All paths give the same answer
to rounding (tests pin it)."""

from __future__ import annotations

import numpy as np

from ..mechanism import Mechanism
from ..engines.gls import gls
from ..engines.haar import haar_blue, is_haar_mechanism
from ..engines.implicit import implicit_blue, is_implicit_mechanism
from ..engines.kronecker import (is_kron_tree_mechanism, is_quadtree_mechanism, kron_tree_blue,
                        quadtree_blue)
from ..engines.laminar import is_laminar_mechanism, laminar_blue
from ..engines.toeplitz import is_toeplitz_mechanism, toeplitz_blue
from ..engines.tree import is_tree_mechanism, tree_blue

__all__ = ["BLUE_METHODS", "blue", "blue_covariance"]

BLUE_METHODS = ("auto", "tree", "toeplitz", "laminar", "haar", "kronecker", "generic", "sparse",
                "dense")


def blue(mechanism: Mechanism, y, method: str = "auto") -> np.ndarray:
    """The BLUE x_hat of the histogram: shape (n,), or (trials, n) for y of shape (trials, m).

    Generalised least squares with weights 1 / variance and exact rows as equality
    constraints (MATH.md section 2); any W x_hat is then the BLUE of W x. ``method``:
    "auto" (tree recursions on level-uniform trees, the Toeplitz inverse on Toeplitz
    strategies with equal noise, the bridge recursion on other interval strategies and on
    Privelet's Haar strategy, per-axis Haar transforms on Kronecker products of trees, Honaker's recursions on a
    quadtree's Morton tree, else
    generic), "tree", "toeplitz", "laminar", "haar", "kronecker", "generic"
    (the GLS solver's own choice), "sparse" (KKT LU) or "dense" (Cholesky)."""
    if method not in BLUE_METHODS:
        raise ValueError(f"method must be one of {BLUE_METHODS}, got {method!r}")
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if method == "tree" or (method == "auto" and is_tree_mechanism(mechanism)):
        return tree_blue(mechanism, y)
    if method == "toeplitz" or (method == "auto" and is_toeplitz_mechanism(mechanism)):
        return toeplitz_blue(mechanism, y)
    if method == "laminar" or (method == "auto" and is_laminar_mechanism(mechanism)):
        return laminar_blue(mechanism, y)
    if method == "haar" or (method == "auto" and is_haar_mechanism(mechanism)):
        return haar_blue(mechanism, y)
    if method == "auto" and is_implicit_mechanism(mechanism):
        return implicit_blue(mechanism, y)
    if method == "kronecker" or (method == "auto" and is_kron_tree_mechanism(mechanism)):
        return kron_tree_blue(mechanism, y)
    if method == "auto" and is_quadtree_mechanism(mechanism):
        return quadtree_blue(mechanism, y)
    return gls(mechanism, "auto" if method == "generic" else method).estimate(y)


def blue_covariance(mechanism: Mechanism) -> np.ndarray:
    """Dense covariance (n, n) of the BLUE (generic solver; n up to gls.MAX_DENSE_BINS)."""
    return gls(mechanism).covariance()
