"""Checks shared by the 1-D and the grid releases (``core``, ``grid``), all run before the
noise is drawn: the budget asked for, the budget split, budgets hopeless before any design,
noise scales that are identically 0 or saturate, and the exact total of the counts."""

from __future__ import annotations

import math

import numpy as np

from ..mechanism import Mechanism
from ..privacy import EXACT_LIMIT, NOISE_TAIL, check_budget, check_noise_scales
from .secure_noise import largest_answer

__all__ = ["DEFAULT_QUANTILES", "budget_choice", "check_budgets", "check_tiny_budget",
           "check_mechanism_noise", "exact_total", "check_histogram_total"]

DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def budget_pair(budget_name: str, budget: float) -> tuple[float | None, float | None]:
    """(epsilon, rho) keywords of a Mechanism / search for the budget ``budget_name``."""
    return (budget, None) if budget_name == "epsilon" else (None, budget)


def budget_choice(epsilon: float | None, rho: float | None) -> tuple[str, str, float]:
    """(noise, budget name, value) from exactly one of epsilon / rho."""
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (pure eps-DP, discrete Laplace noise) or "
                         "rho (rho-zCDP, discrete Gaussian noise)"
                         + ("; got both" if epsilon is not None else "; got neither"))
    if epsilon is not None:
        return "laplace", "epsilon", check_budget(epsilon, "epsilon")
    return "gaussian", "rho", check_budget(rho, "rho")


def check_budgets(budgets: str) -> str:
    """The budget split of a tree release: "equal" or "optimal" (ValueError otherwise)."""
    if budgets not in ("equal", "optimal"):
        raise ValueError(f"budgets must be 'equal' or 'optimal', got {budgets!r}")
    return budgets


def check_mechanism_noise(mech: Mechanism, budget_name: str, budget: float) -> None:
    """Refuse budgets whose noise is meaningless (:func:`dptree_opt.privacy.check_noise_scales`):
    a level whose discrete noise is identically 0 in double precision (the release would
    publish exact counts), or so wide that answers + noise leave the exact integer range of
    doubles (NOISE_TAIL scales reach 2^53)."""
    if mech.row_budgets is None:
        levels = sorted(mech.level_scales)
        check_noise_scales([mech.level_scales[lvl] for lvl in levels],
                           [mech.level_variances[lvl] for lvl in levels],
                           budget_name=budget_name, budget=budget,
                           groups=[f"level {lvl}" for lvl in levels])
        return
    # budgets per row: the smallest and the largest scale are the ones that can fail
    noisy = np.flatnonzero(np.isfinite(mech.scales) & (mech.scales > 0))
    if noisy.size:
        pick = noisy[[int(np.argmin(mech.scales[noisy])), int(np.argmax(mech.scales[noisy]))]]
        check_noise_scales(mech.scales[pick], mech.variances[pick], budget_name=budget_name,
                           budget=budget, groups=[f"row {int(r)}" for r in pick])


def check_tiny_budget(noise: str, budget_name: str, budget: float) -> None:
    """Refuse hopeless budgets before any design search (whose error formulas divide by the
    budget squared): every noisy level has sensitivity >= 1 and at most the whole budget, so
    its scale is at least 1 / eps (Laplace) or 1 / sqrt(2 rho) (Gaussian), with the continuous
    variance least^2; :func:`dptree_opt.privacy.check_noise_scales` on that best case (a
    variance underflowing to 0 means the design search cannot tell noisy from exact rows;
    after the design, any level whose discrete noise is identically 0 is refused by
    :func:`check_mechanism_noise`)."""
    least = 1 / budget if noise == "laplace" else 1 / math.sqrt(2 * budget)
    # least is 0 when 2 rho overflows: variance 0, refused (the true scale goes in the message)
    check_noise_scales([least or math.sqrt(0.5 / budget)], [least * least],
                       budget_name=budget_name, budget=budget, group_budgets=[budget],
                       groups=["a level given the whole budget"])


def exact_total(hist: np.ndarray) -> int:
    """The exact sum of non-negative int64 counts as a Python int (int64 sums can wrap: a
    file of 4096 counts of 2^52 once summed to 100). O(K): a float sum decides whether the
    int64 sum is safe (below 2^62 it cannot have wrapped); only near the limit are the counts
    summed as Python ints."""
    approx = float(np.sum(hist, dtype=np.float64))  # relative error <= K * 2^-53
    if approx < 2.0**62:
        return int(np.sum(hist, dtype=np.int64))
    return sum(int(v) for v in hist.tolist())  # rare: only for absurd totals


def check_histogram_total(hist: np.ndarray, mechanism: Mechanism) -> int:
    """The exact total N of the counts; refuse N >= 2^53 and N + noise tail >= 2^53 (the
    node answers and the noisy answers must be exact integers in int64 and float64)."""
    total = exact_total(hist)
    if total >= EXACT_LIMIT:
        raise ValueError(f"the counts sum to {total} >= 2^53: too large to release exactly "
                         "(cumulative counts must be exact integers in double precision)")
    scales = mechanism.scales[np.isfinite(mechanism.scales)]
    top = float(scales.max(initial=0.0))
    answer = largest_answer(mechanism.released, total)   # N, or max|entry| x N (scaled)
    if top > 0 and answer + NOISE_TAIL * top >= EXACT_LIMIT:
        raise ValueError(f"the counts sum to {total}: with noise scale {top:.3g} the noisy "
                         "counts could exceed 2^53; use a larger budget or smaller counts")
    if answer >= EXACT_LIMIT:
        raise ValueError(f"the counts sum to {total}: the design's answers (up to "
                         f"{answer:.3g}) would not be exact integers in double precision")
    return total
