"""Closed-form errors from [RTS] (swap neighbours, N public), for checking the exact trace.

All return the expected squared l2 error of the K cumulative counts summed over t = 1..K,
E||C_hat - C||^2, in counts^2 by default. [RTS] normalises the CDF by N (F = C / N):
pass ``n_records=N`` to divide by N^2 and get the paper's E||F_hat - F||^2. Each is
evaluated at unit budget and rescaled (``limits.at_budget``), so any budget and N whose
result is a double work; ValueError otherwise.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .limits import TINY, at_budget

__all__ = [
    "lemma_iii_1",
    "lemma_iii_2",
    "theorem_iv_1",
    "theorem_iv_1_gaussian",
    "covering_error_from_variances",
]


def _positive(value: float, name: str) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return value


def _bins(n_bins: float) -> int:
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    return int(n_bins)


def _per_records(value: float, n_records: float) -> float:
    """value / N^2, ValueError when a positive value leaves the normal doubles."""
    n = _positive(n_records, "n_records")
    out = value / n / n
    if value > 0 and not (math.isfinite(out) and out >= TINY):
        raise ValueError(f"n_records = {n:g}: the normalised error (about "
                         f"1e{round(math.log10(value) - 2 * math.log10(n)):+d}) is beyond "
                         "double precision; use the error in counts^2 (n_records = 1)")
    return out


def lemma_iii_1(n_bins: int, epsilon: float, n_records: float = 1.0) -> float:
    """Range (threshold) mechanism: C_j + Lap((K-1)/eps) for j < K, C_K = N.

    [RTS] Lemma III.1: error 2 (K-1)^3 / (N^2 eps^2)."""
    k = _bins(n_bins)
    eps = _positive(epsilon, "epsilon")
    return _per_records(at_budget(2.0 * (k - 1) ** 3, "laplace", eps), n_records)


def lemma_iii_2(n_bins: int, epsilon: float, n_records: float = 1.0) -> float:
    """Histogram mechanism: h_i + Lap(2/eps), cumulative sums, C_K = N.

    [RTS] Lemma III.2: error 4 K (K-1) / (N^2 eps^2)."""
    k = _bins(n_bins)
    eps = _positive(epsilon, "epsilon")
    return _per_records(at_budget(4.0 * k * (k - 1), "laplace", eps), n_records)


def covering_error_from_variances(branching: Sequence[int], level_variances: ArrayLike,
                                  n_records: float = 1.0) -> float:
    """Covering-estimator error of a level-uniform tree from per-node variances v_1..v_h.

    Level l is used K (k_l - 1) / 2 times over all prefixes ([RTS] Thm IV.1 proof), so the
    error is (K / 2) sum_l (k_l - 1) v_l / N^2 (root public)."""
    ks = np.asarray(branching, dtype=float)
    v = np.asarray(level_variances, dtype=float)
    if ks.shape != v.shape:
        raise ValueError(f"need one variance per level: {ks.size} levels, {v.size} variances")
    if np.any(ks < 1) or np.any(v < 0):
        raise ValueError("branching factors must be >= 1 and variances >= 0")
    k = float(np.prod(ks))
    return _per_records(0.5 * k * float(np.sum((ks - 1) * v)), n_records)


def theorem_iv_1(branching: Sequence[int], level_epsilons: ArrayLike,
                 n_records: float = 1.0) -> float:
    """Level-uniform tree, Laplace, covering estimator ([RTS] Theorem IV.1):
    error (4K / N^2) sum_l (k_l - 1) / eps_l^2 (node noise Lap(2/eps_l), variance 8/eps_l^2)."""
    eps = np.asarray(level_epsilons, dtype=float)
    if np.any(~np.isfinite(eps)) or np.any(eps <= 0):
        raise ValueError(f"level_epsilons must be finite and > 0, got {eps.tolist()}")
    top = float(eps.max())  # at budgets eps / top (<= 1), restated at top
    unit = covering_error_from_variances(branching, 8.0 / (eps / top) ** 2)
    return _per_records(at_budget(unit, "laplace", top), n_records)


def theorem_iv_1_gaussian(branching: Sequence[int], level_rhos: ArrayLike,
                          n_records: float = 1.0) -> float:
    """Gaussian analogue of Theorem IV.1 (docs/math.md section 1): swap l2 sensitivity of a level
    is sqrt(2), so sigma_l^2 = 2 / (2 rho_l) = 1 / rho_l and the error is
    (K / (2 N^2)) sum_l (k_l - 1) sigma_l^2."""
    rho = np.asarray(level_rhos, dtype=float)
    if np.any(~np.isfinite(rho)) or np.any(rho <= 0):
        raise ValueError(f"level_rhos must be finite and > 0, got {rho.tolist()}")
    top = float(rho.max())  # at budgets rho / top (<= 1), restated at top
    unit = covering_error_from_variances(branching, 1.0 / (rho / top))
    return _per_records(at_budget(unit, "gaussian", top), n_records)
