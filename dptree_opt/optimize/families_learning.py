"""The private-learning families of ``optimize.best_mechanism``: strategies built for one
user's data entering several steps of a stream (``participation=``; docs/math.md section 11).
Each runs for the 1-D prefix workload (the running sums of a training loop) under a
participation schema with a separation or epoch length b:

* ``banded_sqrt``: the square root's coefficients truncated to b bands (BSR), as it is and
  with its columns normalised to unit norm;
* ``banded_inverse_sqrt``: BISR, the Toeplitz strategy whose inverse is the inverse square
  root truncated to b bands;
* ``banded_toeplitz``: the banded Toeplitz strategy with b bands optimised for the schema
  (``optimize.banded_toeplitz``; l2 for Gaussian noise, l1 for Laplace).
* ``participation_optimum`` (Gaussian, fixed epoch): the optimal factorisation with its
  certified dual bound (``optimize.participation_optimum``), when its predicted time fits.

Lower bound under a schema (Gaussian): the relaxation bound of
``optimize.participation_lower_bound``, valid for every factorisation (any iterate of its
fixed point is a bound, so a time limit only loosens it).
"""

from __future__ import annotations

from ..limits import at_budget
from ..strategies import banded_inverse_sqrt, banded_sqrt, normalise_columns
from .banded_toeplitz import banded_toeplitz
from .family import Candidate, Problem, too_slow
from .participation_optimum import (MAX_OPTIMUM_BINS, participation_lower_bound,
                                    participation_optimum)

__all__ = ["learning_applies", "banded_sqrt_family", "banded_inverse_sqrt_family",
           "banded_toeplitz_family", "optimum_applies", "participation_optimum_family",
           "participation_bound"]

# participation_optimum: one dual evaluation (an eigendecomposition) at 2052 steps, measured
# on one core; a solve needs at least this many, plus the certification (a dense
# sensitivity and an exact error, about 10 evaluations' worth)
OPTIMUM_EVAL_SECONDS = 1.5
OPTIMUM_MIN_EVALS = 30
OPTIMUM_SHARE = 0.6
BOUND_SECONDS = 5.0      # the relaxation bound's fixed point: at most this long


def learning_applies(p: Problem) -> str | None:
    """None for the prefix workload over a stream under a participation schema."""
    if p.participation.is_single:
        return "built for multiple participations (give participation=)"
    if not p.one_d or p.workload.kind != "prefix":
        return "the prefix workload (running sums) only"
    return None


def _bands(p: Problem) -> int:
    """b (the separation or epoch length), at most n: columns b apart are then orthogonal,
    so the banded sensitivities are exact and cheap."""
    return min(p.participation.b, p.n)


def banded_sqrt_family(p: Problem) -> list[Candidate]:
    b = _bands(p)
    bsr = banded_sqrt(p.n, b)
    return [Candidate(p.mechanism(bsr), f"banded square root, {b} bands "
                      "(strategies.banded_sqrt)"),
            Candidate(p.mechanism(normalise_columns(bsr)), f"banded square root, {b} bands, "
                      "columns normalised (strategies.normalise_columns)")]


def banded_inverse_sqrt_family(p: Problem) -> list[Candidate]:
    b = _bands(p)
    return [Candidate(p.mechanism(banded_inverse_sqrt(p.n, b)), f"banded inverse square root, "
                      f"{b} bands (strategies.banded_inverse_sqrt)")]


def banded_toeplitz_family(p: Problem) -> list[Candidate]:
    b = _bands(p)
    norm = 1 if p.noise == "laplace" else 2
    res = banded_toeplitz(p.n, b, p.participation, objective="mean", norm=norm)
    return [Candidate(p.mechanism(res.strategy), f"banded Toeplitz, {b} bands, optimised for "
                      f"the mean loss under {p.participation.describe()} (l{norm}; "
                      f"optimize.banded_toeplitz: {res.iterations} L-BFGS iterations)")]


def optimum_applies(p: Problem) -> str | None:
    """None for Gaussian noise under a fixed-epoch schema up to MAX_OPTIMUM_BINS steps."""
    why = learning_applies(p)
    if why is not None:
        return why
    if p.noise != "gaussian":
        return "Gaussian noise only (rho)"
    if p.participation.kind != "fixed_epoch":
        return "fixed-epoch schemas only (min-sep: its lower bound is reported)"
    if p.n > MAX_OPTIMUM_BINS:
        return f"dense: an eigendecomposition per iteration, up to {MAX_OPTIMUM_BINS} steps"
    return None


def _per_unit_noise(p: Problem, loss: float) -> float:
    """A loss per unit noise (mean per step at sigma = the sensitivity, rho = 1/2) as the
    total error over the n prefixes at the problem's rho: loss n / (2 rho) (the total at
    rho = 1 is loss n / 2, restated by ``limits.at_budget``)."""
    return float(at_budget(loss * p.n / 2.0, "gaussian", p.budget))


def participation_optimum_family(p: Problem) -> list[Candidate] | str:
    per_eval = OPTIMUM_EVAL_SECONDS * (p.n / 2052) ** 3
    slow = too_slow((OPTIMUM_MIN_EVALS + 10) * per_eval, p)
    if slow:
        return slow
    res = participation_optimum(p.n, p.participation,
                                time_limit=max(p.share(OPTIMUM_SHARE) - 10 * per_eval, 1.0))
    return [Candidate(p.mechanism(res.strategy), f"optimize.participation_optimum: "
                      f"{res.method}; gap {res.gap:.2g}", _per_unit_noise(p, res.lower_bound),
                      "dual of the optimal factorisation under the schema, certified")]


def participation_bound(p: Problem) -> tuple[float | None, str]:
    """(bound, what): the relaxation bound for Gaussian noise on the prefix workload under a
    schema (total counts^2 at the problem's rho), else (None, "")."""
    if learning_applies(p) is not None or p.noise != "gaussian":
        return None, ""
    res = participation_lower_bound(p.n, p.participation,
                                    time_limit=min(BOUND_SECONDS, p.share(0.1)))
    return _per_unit_noise(p, res.value), (f"relaxation bound under "
                                           f"{p.participation.describe()} ({res.family})")
