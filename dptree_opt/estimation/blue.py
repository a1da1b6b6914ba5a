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
import numpy.typing as npt
from numpy.typing import ArrayLike

from .. import engines
from ..engines.gls import DenseEngine, gls
from ..mechanism import Mechanism

__all__ = ["BLUE_METHODS", "blue", "blue_covariance"]

# method names that are not engine names: the GLS solver's modes, and two older names
_GLS_MODES = {"generic": "auto", "sparse": "sparse", "dense": "dense"}
_ENGINE_OF = {"laminar": "interval", "kronecker": "kron_tree"}
BLUE_METHODS = ("auto", "tree", "toeplitz", "laminar", "haar", "kronecker", "generic", "sparse",
                "dense")


def blue(mechanism: Mechanism, y: ArrayLike, method: str = "auto") -> npt.NDArray[np.float64]:
    """The BLUE x_hat of the histogram: shape (n,), or (trials, n) for y of shape (trials, m).

    Generalised least squares with weights 1 / variance and exact rows as equality
    constraints (docs/math.md section 2); any W x_hat is then the BLUE of W x. ``method``:
    "auto" (the engine the registry picks for the strategy's structure: tree recursions,
    the Toeplitz inverse, the bridge recursion on interval strategies, Haar, per-axis Haar
    transforms on Kronecker trees, the quadtree's Morton tree, ...; else the generic GLS;
    ``dptree-opt engines`` lists them), an engine's name ("tree", "toeplitz", "interval" or
    "laminar", "haar", "kron_tree" or "kronecker", "quadtree", "implicit", ...), "generic"
    (the GLS solver's own choice), "sparse" (KKT LU) or "dense" (Cholesky)."""
    names = BLUE_METHODS + tuple(e.name for e in engines.registered())
    if method not in names:
        raise ValueError(f"method must be one of {names}, got {method!r}")
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if method == "auto":
        return engines.run("estimate", mechanism, None, "blue", y=y)
    y = np.asarray(y, dtype=float)
    if method in _GLS_MODES:
        dense = engines.engine_named("dense")
        assert isinstance(dense, DenseEngine)  # registered by dptree_opt.engines
        return dense.estimate(mechanism, y, None, "blue", mode=_GLS_MODES[method])
    return engines.engine_named(_ENGINE_OF.get(method, method)).estimate(mechanism, y, None,
                                                                          "blue")


def blue_covariance(mechanism: Mechanism) -> np.ndarray:
    """Dense covariance (n, n) of the BLUE (generic solver; n up to gls.MAX_DENSE_BINS)."""
    return gls(mechanism).covariance()
