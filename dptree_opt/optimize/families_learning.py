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
"""

from __future__ import annotations

from ..strategies import banded_inverse_sqrt, banded_sqrt, normalise_columns
from .banded_toeplitz import banded_toeplitz
from .family import Candidate, Problem

__all__ = ["learning_applies", "banded_sqrt_family", "banded_inverse_sqrt_family",
           "banded_toeplitz_family"]


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
