"""Noise calibration and privacy accounting (MATH.md section 0).

* Laplace, pure eps-DP: a query set with l1 sensitivity D released with Lap(b), b = D / eps,
  is eps-DP; Var Lap(b) = 2 b^2.
* Gaussian, rho-zCDP: l2 sensitivity D2 released with N(0, sigma^2), sigma^2 = D2^2 / (2 rho).
* Per-level budgets compose by sum. The loss of a whole mechanism (any strategy, any per-row
  scales s_r) is the sensitivity of diag(1/s) A under the neighbour model:
  eps = ||diag(1/s) A (x - x')||_1 maximised over neighbours; rho = (same with l2)^2 / 2.
"""

from __future__ import annotations

import math

import numpy as np

NOISES = ("laplace", "gaussian")


def check_noise(noise: str) -> str:
    """Validate a noise name: "laplace" (eps-DP) or "gaussian" (rho-zCDP)."""
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    return noise


def infer_noise(noise, epsilon=None, rho=None) -> str:
    """The noise to use: ``noise`` when given (validated); otherwise Gaussian when only
    ``rho`` is given (zCDP) and Laplace else (issue 14: passing rho implies Gaussian noise)."""
    if noise is None:
        return "gaussian" if rho is not None and epsilon is None else "laplace"
    return check_noise(noise)


def norm_of(noise: str) -> int:
    """The sensitivity norm a noise calibrates to: 1 for Laplace, 2 for Gaussian."""
    return 1 if check_noise(noise) == "laplace" else 2


def check_budget(value, name: str) -> float:
    """A total privacy budget: a finite number > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return value


def resolve_budget(noise: str, epsilon=None, rho=None) -> float:
    """The total budget for ``noise``: epsilon (Laplace, pure eps-DP) or rho (Gaussian,
    rho-zCDP), checked finite > 0; ValueError when the other one is given (or neither)."""
    if check_noise(noise) == "laplace":
        if rho is not None:
            raise ValueError("rho is for noise='gaussian'; Laplace noise takes epsilon")
        return check_budget(epsilon, "epsilon")
    if epsilon is not None:
        raise ValueError("epsilon is for noise='laplace'; Gaussian noise takes rho (zCDP)")
    return check_budget(rho, "rho")


def resolve_public(neighbours: str, public_total=None) -> bool:
    """Whether the total N is public: always under swap (N never changes; ``False`` is an
    error), under add/remove only when the caller declares it (``public_total=True``)."""
    if neighbours not in ("swap", "add_remove"):
        raise ValueError(f"neighbours must be 'swap' or 'add_remove', got {neighbours!r}")
    if public_total is not None and not isinstance(public_total, (bool, np.bool_)):
        raise ValueError(f"public_total must be True, False or None, got {public_total!r}")
    if neighbours == "swap":
        if public_total is not None and not public_total:
            raise ValueError("public_total=False is impossible under swap neighbours (N never "
                             "changes); use neighbours='add_remove' for a private N")
        return True
    return bool(public_total)


def split_budget(total: float, n_levels: int, level_budgets=None, *, name: str = "epsilon"):
    """One budget per noisy level: the equal split by default, else validated user values.

    ``level_budgets`` are absolute (they must sum to ``total`` to 1e-9 relative); a level
    may get 0 (it is then not measured). With no noisy level (everything public, e.g. one
    bin under swap) nothing is spent."""
    if n_levels == 0 and level_budgets is not None and len(level_budgets):
        raise ValueError("level_budgets: every row is released exactly; there is no noisy level")
    if level_budgets is None or n_levels == 0:
        return np.full(n_levels, total / max(n_levels, 1))
    try:
        b = np.asarray(level_budgets, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"level_budgets must be a sequence of numbers, got {level_budgets!r}") \
            from None
    if b.ndim != 1 or b.size != n_levels:
        raise ValueError(
            f"level_budgets must have one entry per noisy level ({n_levels}), got {b.size}")
    if not np.all(np.isfinite(b)) or np.any(b < 0):
        raise ValueError(f"level_budgets must be finite and >= 0, got {b.tolist()}")
    if not math.isclose(b.sum(), total, rel_tol=1e-9, abs_tol=0.0):
        raise ValueError(
            f"level_budgets sum to {b.sum()!r}, but {name} = {total!r}; they must be equal")
    return b


def calibrate(sensitivity: float, budget: float, noise: str) -> tuple[float, float]:
    """(scale, variance) of the noise for one level: Laplace b = D/eps, var 2 b^2; Gaussian
    sigma = D2 / sqrt(2 rho), var sigma^2. A zero budget gives infinite noise (the level is
    not measured); zero sensitivity gives zero noise (the rows do not depend on the data)."""
    if sensitivity == 0:
        return 0.0, 0.0
    if budget == 0:
        return math.inf, math.inf
    if check_noise(noise) == "laplace":
        b = sensitivity / budget
        return b, 2.0 * b * b
    sigma = sensitivity / math.sqrt(2.0 * budget)
    return sigma, sigma * sigma


def loss_from_sensitivity(sensitivity: float, noise: str) -> float:
    """Privacy loss of a release whose scaled sensitivity is ``sensitivity``: eps = D1 for
    Laplace (scales already divided out), rho = D2^2 / 2 for Gaussian."""
    return sensitivity if check_noise(noise) == "laplace" else 0.5 * sensitivity**2
