"""Noise calibration and privacy accounting (docs/math.md section 0).

* Laplace, pure eps-DP: a query set with l1 sensitivity D released with Lap(b), b = D / eps,
  is eps-DP; Var Lap(b) = 2 b^2.
* Gaussian, rho-zCDP: l2 sensitivity D2 released with N(0, sigma^2), sigma^2 = D2^2 / (2 rho).
* Per-level budgets compose by sum. The loss of a whole mechanism (any strategy, any per-row
  scales s_r) is the sensitivity of diag(1/s) A under the neighbour model:
  eps = ||diag(1/s) A (x - x')||_1 maximised over neighbours; rho = (same with l2)^2 / 2.
* Budget sanity (:func:`check_noise_scales`): noise that is identically 0 in double precision
  (an exact release) or so wide that noisy counts leave the exact integers of doubles is
  refused before anything is drawn, by the releases and the streaming counters alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence, Sized

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .validation import check_bool, check_choice, check_positive

# neighbouring datasets: swap (change one record: N public) or add/remove (N private)
NEIGHBOURS = ("swap", "add_remove")


def check_neighbours(neighbours: str) -> str:
    """Validate a neighbour model: "swap" (N public) or "add_remove" (docs/math.md section 0)."""
    return check_choice(neighbours, "neighbours", NEIGHBOURS)


NOISES = ("laplace", "gaussian")
# Counts and noisy counts must stay exact integers in float64 (and far from int64 saturation).
EXACT_LIMIT = 2**53
# |noise| <= NOISE_TAIL scales except with probability exp(-64) ~ 1.6e-28 per draw (Laplace;
# far less for the Gaussian): the tail that must stay below EXACT_LIMIT.
NOISE_TAIL = 64.0
# Half a unit in the last place of a count of 1: float noise below it vanishes when added to
# any count >= 1.
HALF_ULP_OF_ONE = 2.0**-53


def check_noise(noise: str) -> str:
    """Validate a noise name: "laplace" (eps-DP) or "gaussian" (rho-zCDP)."""
    return check_choice(noise, "noise", NOISES)


def infer_noise(noise: str | None, epsilon: float | None = None,
                rho: float | None = None) -> str:
    """The noise to use: ``noise`` when given (validated); otherwise Gaussian when only
    ``rho`` is given (zCDP) and Laplace else : passing rho alone implies Gaussian noise."""
    if noise is None:
        return "gaussian" if rho is not None and epsilon is None else "laplace"
    return check_noise(noise)


def norm_of(noise: str) -> int:
    """The sensitivity norm a noise calibrates to: 1 for Laplace, 2 for Gaussian."""
    return 1 if check_noise(noise) == "laplace" else 2


def check_budget(value: object, name: str) -> float:
    """A total privacy budget ``name`` (epsilon or rho): a finite number > 0, as a float."""
    return check_positive(value, name)


def resolve_budget(noise: str, epsilon: float | None = None, rho: float | None = None) -> float:
    """The total budget for ``noise``: epsilon (Laplace, pure eps-DP) or rho (Gaussian,
    rho-zCDP), checked finite > 0; ValueError when the other one is given (or neither)."""
    if check_noise(noise) == "laplace":
        if rho is not None:
            raise ValueError("rho is for noise='gaussian'; Laplace noise takes epsilon")
        return check_budget(epsilon, "epsilon")
    if epsilon is not None:
        raise ValueError("epsilon is for noise='laplace'; Gaussian noise takes rho (zCDP)")
    return check_budget(rho, "rho")


def resolve_public(neighbours: str, public_total: bool | None = None) -> bool:
    """Whether the total N is public: always under swap (N never changes; ``False`` is an
    error), under add/remove only when the caller declares it (``public_total=True``)."""
    check_neighbours(neighbours)
    public_total = check_bool(public_total, "public_total", none=True)
    if neighbours == "swap":
        if public_total is not None and not public_total:
            raise ValueError("public_total=False is impossible under swap neighbours (N never "
                             "changes); use neighbours='add_remove' for a private N")
        return True
    return bool(public_total)


def split_budget(total: float, n_levels: int, level_budgets: ArrayLike | None = None, *,
                 name: str = "epsilon") -> npt.NDArray[np.float64]:
    """One budget per noisy level: the equal split by default, else validated user values.

    ``level_budgets`` are absolute (they must sum to ``total`` to 1e-9 relative); a level
    may get 0 (it is then not measured). With no noisy level (everything public, e.g. one
    bin under swap) nothing is spent."""
    if n_levels == 0 and level_budgets is not None and (
            not isinstance(level_budgets, Sized) or len(level_budgets)):
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
    sensitivity, budget = float(sensitivity), float(budget)   # Python floats: inf, no warning
    if sensitivity == 0:
        return 0.0, 0.0
    if budget == 0:
        return math.inf, math.inf
    if check_noise(noise) == "laplace":
        b = sensitivity / budget
        return b, 2.0 * b * b
    two_rho = 2.0 * budget
    sigma = (sensitivity / math.sqrt(two_rho) if math.isfinite(two_rho)
             else sensitivity * math.sqrt(0.5 / budget))      # rho > 2^1023: no overflow to 0
    return sigma, sigma * sigma


def loss_from_sensitivity(sensitivity: float, noise: str) -> float:
    """Privacy loss of a release whose scaled sensitivity is ``sensitivity``: eps = D1 for
    Laplace (scales already divided out), rho = D2^2 / 2 for Gaussian."""
    return sensitivity if check_noise(noise) == "laplace" else 0.5 * sensitivity**2


def check_noise_scales(scales: ArrayLike, variances: ArrayLike, *, budget_name: str,
                       budget: float, groups: Sequence[str],
                       group_budgets: ArrayLike | None = None, resolution: float = 0.0,
                       min_variance: float = 0.0) -> None:
    """Refuse a budget whose noise is meaningless, before anything is drawn (ValueError naming
    the budget, the group and what to do). A group is measured when its budget is > 0 (with
    ``group_budgets``; else when its scale is finite); a measured group of scale 0 is exact
    (data-independent rows). For every other measured group:

    * identically zero (budget too large): its variance is not > 0 in double precision (integer
      noise: every draw is 0, the exact counts would be published), or ``NOISE_TAIL`` x scale
      is below ``resolution`` (float noise: pass ``HALF_ULP_OF_ONE``; then except with
      probability ~exp(-2048) every draw is below half an ulp of 1 and vanishes when added to
      any count >= 1); or, for estimators that divide by the variances (inverse-variance
      weights), its variance is below ``min_variance`` (pass ``sys.float_info.min``);
    * saturating (budget too small): ``NOISE_TAIL`` x scale >= ``EXACT_LIMIT`` = 2^53 (noisy
      counts would leave the range where doubles hold every integer; OpenDP's 64-bit integer
      samplers saturate at 2^63), including an infinite scale from a positive budget.

    With ``group_budgets``, a positive ``budget`` whose every group's share underflows to 0 is
    refused too (nothing would be measured). ``scales``, ``variances``: one per group (the
    noise actually added, e.g. the discrete variance for integer noise); ``groups``: their
    names in messages ("level 0", ...); ``group_budgets``: the budget of each group."""
    scales = np.asarray(scales, dtype=float).ravel()
    variances = np.asarray(variances, dtype=float).ravel()
    if group_budgets is None:
        measured = np.isfinite(scales)
    else:
        shares = np.asarray(group_budgets, dtype=float).ravel()
        measured = shares > 0
        if budget > 0 and not np.any(measured):
            raise ValueError(f"{budget_name} = {budget!r} is too small: its share of every "
                             f"group ({', '.join(groups)}) underflows to 0 in double "
                             f"precision, so nothing would be measured. Use a larger "
                             f"{budget_name}")
    noisy = measured & (scales > 0)
    with np.errstate(over="ignore", invalid="ignore"):
        tail = NOISE_TAIL * scales
    zero = noisy & np.isfinite(scales) & (~(variances > 0) | (tail < resolution)
                                          | (variances < min_variance))
    wide = noisy & (tail >= EXACT_LIMIT)
    for bad, size, fix in ((zero, "large", "smaller"), (wide, "small", "larger")):
        if not np.any(bad):
            continue
        i = int(np.flatnonzero(bad)[0])
        share = "" if group_budgets is None else f" (its budget {float(shares[i]):.3g})"
        what = f"the noise of {groups[i]} has scale {scales[i]:.3g}{share}"
        if size == "large":
            if not variances[i] > 0:
                why = ("so small that it is identically 0 in double precision (its variance "
                       "underflows to 0)")
            elif variances[i] < min_variance:
                why = (f"so small that its variance {variances[i]:.3g} is below the smallest "
                       f"normal double {min_variance:.3g} (the estimates weigh the rows by it)")
            else:
                why = (f"so small that {NOISE_TAIL:g} scales stay below half an ulp of a count "
                       "of 1 (it vanishes when added to any count >= 1)")
            consequence = "the exact counts would be published"
        else:
            why = f"so wide that {NOISE_TAIL:g} scales reach 2^53"
            consequence = ("the noisy counts would leave the range where doubles hold every "
                           "integer (2^53)")
        raise ValueError(f"{budget_name} = {budget!r} is too {size}: {what}, {why}; "
                         f"{consequence}. Use a {fix} {budget_name}")
