"""Exact expected error of a mechanism + estimator on a workload, and its Monte Carlo check.

Both estimators are linear and unbiased, so the expected squared error of the answers is
their total variance: trace(W Cov W') for the BLUE (MATH.md section 2), the sum of the
covering rows' variances for the [RTS] covering estimator (Thm IV.1 proof). Values are in
counts^2 (divide by N^2 for [RTS]'s normalised CDF error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._progress import Progress
from .estimation.covering import covering_cdf, covering_variances
from .estimation.gls import blue, blue_covariance
from .mechanism import Mechanism, as_generator, check_histogram
from .workloads import Workload

__all__ = ["ESTIMATORS", "expected_error", "monte_carlo_error", "MonteCarloResult"]

ESTIMATORS = ("blue", "covering")

# Monte Carlo: noise draws per chunk (trials x rows floats).
_MC_CHUNK_FLOATS = 1 << 22


def _check(workload, mechanism, estimator) -> None:
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a dptree_opt Workload, got {type(workload).__name__}")
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if workload.n_bins != mechanism.n_bins:
        raise ValueError(f"workload has {workload.n_bins} bins, mechanism has {mechanism.n_bins}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if estimator == "covering" and workload.kind != "prefix":
        raise ValueError("the covering estimator is defined for the prefix (CDF) workload only; "
                         f"use estimator='blue' for {workload.kind!r}")


def expected_error(workload: Workload, mechanism: Mechanism, estimator: str = "blue",
                   per_query: bool = False):
    """Exact expected squared error, in counts^2.

    Returns sum_q Var(answer_q) (a float) or the per-query variances (shape (q,), in the
    workload's query order) when ``per_query``. ``estimator``: "blue" (GLS, trace(W Cov W'))
    or "covering" ([RTS] direct sums; prefix workload only)."""
    _check(workload, mechanism, estimator)
    if estimator == "covering":
        var = covering_variances(mechanism)
        return var if per_query else float(var.sum())
    cov = blue_covariance(mechanism)
    return workload.query_variances(cov) if per_query else workload.total_variance(cov)


@dataclass(frozen=True)
class MonteCarloResult:
    """Mean squared error over ``trials`` simulated releases, with its standard error."""

    mean: float
    std_error: float
    trials: int

    def __iter__(self):  # allows ``mean, se = monte_carlo_error(...)[:2]``-style unpacking
        return iter((self.mean, self.std_error))

    def within(self, value: float, n_se: float = 4.0) -> bool:
        """Whether ``value`` lies within ``n_se`` standard errors of the mean."""
        return abs(self.mean - value) <= n_se * self.std_error


def monte_carlo_error(workload: Workload, mechanism: Mechanism, estimator: str = "blue",
                      trials: int = 1000, rng=None, *, histogram=None,
                      progress: bool = False) -> MonteCarloResult:
    """Simulated squared error sum_q (answer_q - truth_q)^2, averaged over ``trials``.

    Each trial draws fresh simulation noise for every released row, estimates, and scores
    the workload answers; trials are vectorised in chunks. ``histogram`` defaults to
    Poisson(10) counts drawn from ``rng`` (the error of these unbiased linear estimators does
    not depend on the data). Returns the mean and its standard error (sample sd / sqrt)."""
    _check(workload, mechanism, estimator)
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 2:
        raise ValueError(f"trials must be an integer >= 2, got {trials!r}")
    rng = as_generator(rng)
    h = (rng.poisson(10.0, mechanism.n_bins) if histogram is None
         else check_histogram(histogram, mechanism.n_bins))
    truth = workload.matvec(h.astype(float))
    exact_answers = mechanism.released.apply(h)
    chunk = max(1, min(int(trials), _MC_CHUNK_FLOATS // max(exact_answers.size, 1)))
    errors = np.empty(int(trials))
    bar = Progress(int(trials), "monte carlo", enabled=progress)
    done = 0
    while done < trials:
        size = min(chunk, int(trials) - done)
        y = exact_answers + mechanism.sample_noise(rng, size=size)  # (size, rows)
        if estimator == "covering":
            answers = covering_cdf(mechanism, y)  # (size, K)
        else:
            answers = workload.matvec(blue(mechanism, y).T).T  # (size, q)
        errors[done:done + size] = np.sum((answers - truth) ** 2, axis=1)
        done += size
        bar.update(size)
    bar.close()
    return MonteCarloResult(float(errors.mean()), float(errors.std(ddof=1) / np.sqrt(trials)),
                            int(trials))
