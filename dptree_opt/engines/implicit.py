"""The BLUE on the implicit Gaussian optimum (:class:`~dptree_opt.strategies.implicit_optimum.
ImplicitFactorization`): a square invertible strategy, so with one noise variance v on its n
rows the BLUE from those rows is x = A^-1 y (``ImplicitFactorization.solve``, quadratures
over tridiagonal resolvents, O(n) per node). Total rows (N public under swap, or measured
with noise) add the rank-one step of the constrained / combined GLS, as on Toeplitz
strategies: x - h (1'x - N^) / (q + r) with h = Cov(x, 1'x) / v (``total_cov``),
q = 1'h and r = v_N / v (0 for an exact N)."""

from __future__ import annotations

import numpy as np

from ..mechanism import Mechanism
from ..strategies.implicit_optimum import ImplicitFactorization
from .toeplitz import square_core_mechanism, total_observation, total_rows_ratio

__all__ = ["is_implicit_mechanism", "implicit_blue", "implicit_parameters"]


def is_implicit_mechanism(mechanism: Mechanism) -> bool:
    """Whether the A^-1 y path applies: an ImplicitFactorization whose n rows share one
    finite variance v > 0 (total rows: exact, noisy or unmeasured)."""
    return square_core_mechanism(mechanism, ImplicitFactorization)


def implicit_parameters(mechanism: Mechanism):
    """(strategy, v, r, h): r = v_N / v or None (no total measured), h the unit-variance
    Cov(x^, 1'x^) of the unconstrained BLUE."""
    if not is_implicit_mechanism(mechanism):
        raise ValueError("the implicit-optimum paths need an ImplicitFactorization whose rows "
                         "share one finite noise variance")
    strat = mechanism.released
    v = float(mechanism.variances[0])
    m = strat.moments()
    h = m["total_cov"]  # rescaled so 1'h = Var(N^) / v exactly as the prefix moments give it
    return strat, v, total_rows_ratio(mechanism, v), h * (float(m["prefix"][-1]) / float(h.sum()))


def implicit_blue(mechanism: Mechanism, y) -> np.ndarray:
    """x_hat: shape (n,), or (trials, n) for y of shape (rows,) or (trials, rows)."""
    strat, _, r, h = implicit_parameters(mechanism)
    y = np.asarray(y, dtype=float)
    if y.shape[-1] != strat.n_rows or y.ndim not in (1, 2):
        raise ValueError(f"y must have shape ({strat.n_rows},) or (trials, {strat.n_rows}), "
                         f"got {y.shape}")
    n = strat.n_bins
    tv = np.asarray(mechanism.variances[n:])
    measured = np.concatenate([np.ones(n, bool), np.isfinite(tv)])
    if not np.all(np.isfinite(y[..., measured])):
        raise ValueError("y has NaN or infinite values on measured rows")
    flat = y.reshape(-1, y.shape[-1])
    x = strat.solve(flat[:, :n].T).T
    if r is not None:
        resid = x.sum(axis=-1) - total_observation(mechanism, flat)
        x = x - np.multiply.outer(resid, h / (float(h.sum()) + r))
    return x.reshape(y.shape[:-1] + (n,))
