"""The BLUE on the implicit Gaussian optimum (:class:`~dptree_opt.strategies.implicit_optimum.
ImplicitFactorization`): a square invertible strategy, so with one noise variance on its n rows
and no total rows (add/remove, N private) the BLUE is A^-1 y (``ImplicitFactorization.solve``,
quadrature over tridiagonal resolvents, O(n) per node). Other settings use the generic GLS
(n <= 2048, through the explicit matrix)."""

from __future__ import annotations

import numpy as np

from ..mechanism import Mechanism
from ..strategies.implicit_optimum import ImplicitFactorization

__all__ = ["is_implicit_mechanism", "implicit_blue"]


def is_implicit_mechanism(mechanism: Mechanism) -> bool:
    """Whether the A^-1 y path applies: an ImplicitFactorization without total rows whose
    rows share one finite variance v > 0."""
    if not isinstance(mechanism, Mechanism):
        return False
    released = mechanism.released
    if not isinstance(released, ImplicitFactorization) or released.n_totals:
        return False
    var = mechanism.variances
    return bool(np.isfinite(var[0]) and var[0] > 0 and np.all(var == var[0]))


def implicit_blue(mechanism: Mechanism, y) -> np.ndarray:
    """x_hat = A^-1 y: shape (n,), or (trials, n) for y of shape (trials, n)."""
    if not is_implicit_mechanism(mechanism):
        raise ValueError("the implicit-optimum BLUE needs an ImplicitFactorization without total "
                         "rows and one noise variance")
    y = np.asarray(y, dtype=float)
    n = mechanism.n_bins
    if y.shape[-1] != n or y.ndim not in (1, 2):
        raise ValueError(f"y must have shape ({n},) or (trials, {n}), got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y has non-finite entries")
    return mechanism.released.solve(y.T).T
