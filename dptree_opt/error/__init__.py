"""Exact expected error of a mechanism + estimator on a workload (dispatching on the strategy's
structure), and its Monte Carlo check.

Every estimator here is linear and unbiased, so the expected squared error of the answers is
their total variance, in counts^2 (divide by N^2 for [RTS]'s normalised CDF error):

* "blue": trace(W Cov W') (docs/math.md section 2). On level-uniform trees for the prefix,
  identity and all-range workloads it comes from the tree's Haar structure
  (:mod:`dptree_opt.engines.tree_error`, O(h) totals, O(K) per query, no K x K matrix); on
  Toeplitz strategies with equal noise (e.g. the square-root factorisation), N private,
  public or measured by noisy total rows, for prefix, identity, all-range, total and custom ranges from the power-series
  inverse (:mod:`dptree_opt.engines.toeplitz`, O(K log K); per-query all-range O(K^2),
  ranges O(K log K + sum_q min(lo_q, K - hi_q)));
  on any other interval (laminar) strategy (OpenDP's truncated tree, padded or ragged
  trees, hierarchies, the histogram) for prefix, identity, all-range and total from the
  bridge decomposition (:mod:`dptree_opt.engines.interval`, O(K) numpy; custom ranges
  O(depth) each; per-query all-range uses the dense path);
  Privelet's Haar strategy on 2^L bins has the same structure (:mod:`dptree_opt.engines.haar`);
  the implicit Gaussian optimum (``strategies.implicit_optimum``) for prefix, identity, total
  and all-range totals from quadratures over tridiagonal resolvents (O(n) per node);
  otherwise from the dense covariance of the generic GLS (K <= 8192).
* "covering": the [RTS] covering sums, the sum of the covering rows' variances (Thm IV.1
  proof); other workloads from differences of the covering prefixes (identity and all-range
  totals structured, O(K); others from the dense covariance, K <= 8192;
  :mod:`dptree_opt.engines.covering`).
* "refined": [RTS] App. B on level-uniform trees; other workloads use differences of the
  refined prefixes. Prefix, identity and all-range are structured
  (:mod:`dptree_opt.engines.refined`, O(K)); other workloads use the estimator's exact linear
  map (K <= 4096, :mod:`dptree_opt.engines.refined` as well).
* "causal": the causal BLUE, each query (answered at step 1 + its last bin) from the rows
  complete by then (docs/math.md section 9, :mod:`dptree_opt.engines.causal`); level-uniform
  trees in O(K) / O(h) (prefix), O(h) per range; lower-triangular cores (Toeplitz,
  square-root factorisation: causal = offline) by the offline engines; interval strategies'
  prefixes in O(rows); otherwise a dense filter (n <= 4096) (:mod:`dptree_opt.engines.causal_error`).

One module per structure: ``tree`` (level-uniform trees, BLUE), ``refined`` (level-uniform
trees, refined estimator), ``toeplitz`` (Toeplitz strategies), ``interval`` (interval / laminar
strategies); this module dispatches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .. import engines
from .._progress import Progress
from ..engines.causal import check_causal_inputs
from ..limits import MAX_MONTE_CARLO_TRIALS, check_count, rescaled
from ..mechanism import RNG, Mechanism, as_generator, check_histogram
from ..workloads import Workload

__all__ = ["ESTIMATORS", "ERROR_METHODS", "expected_error", "monte_carlo_error",
           "MonteCarloResult"]

ESTIMATORS = ("blue", "covering", "refined", "causal")
ERROR_METHODS = ("auto", "dense")

# Monte Carlo: noise draws per chunk (trials x rows floats).
_MC_CHUNK_FLOATS = 1 << 22


def _check(workload: object, mechanism: object, estimator: str) -> None:
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a dptree_opt Workload, got {type(workload).__name__}")
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if workload.n_bins != mechanism.n_bins:
        raise ValueError(f"workload has {workload.n_bins} bins, mechanism has {mechanism.n_bins}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if estimator == "refined" and not engines.engine_named("tree").claims(mechanism):
        raise ValueError("the refined estimator ([RTS] App. B) is defined for level-uniform "
                         f"trees; {mechanism.released.name!r} is not one")


@overload
def expected_error(workload: Workload, mechanism: Mechanism, estimator: str = "blue",
                   per_query: Literal[False] = False, method: str = "auto") -> float: ...
@overload
def expected_error(workload: Workload, mechanism: Mechanism, estimator: str = "blue", *,
                   per_query: Literal[True], method: str = "auto") -> npt.NDArray[np.float64]: ...
@overload
def expected_error(workload: Workload, mechanism: Mechanism, estimator: str,
                   per_query: Literal[True], method: str = "auto") -> npt.NDArray[np.float64]: ...
@overload
def expected_error(workload: Workload, mechanism: Mechanism, estimator: str = "blue",
                   per_query: bool = False,
                   method: str = "auto") -> float | npt.NDArray[np.float64]: ...
def expected_error(workload: Workload, mechanism: Mechanism, estimator: str = "blue",
                   per_query: bool = False,
                   method: str = "auto") -> float | npt.NDArray[np.float64]:
    """Exact expected squared error, in counts^2.

    Returns sum_q Var(answer_q) (a float) or the per-query variances (shape (q,), in the
    workload's query order) when ``per_query``. ``estimator``: "blue" (GLS / Honaker,
    trace(W Cov W')), "covering" ([RTS] direct sums; other workloads by differences of its
    prefixes), "refined"
    ([RTS] App. B; level-uniform trees) or "causal" (each query from the rows complete at
    its step; ValueError if one is not identified then). ``method="dense"`` bypasses the
    structured tree formulas (tree, Toeplitz) for checking them against the dense covariance
    (for "causal": the dense causal filter).

    Computed on ``mechanism.normalised()`` (variances near 1) and rescaled exactly, so any
    budget whose errors are doubles works; ValueError when the variances or the errors
    leave the normal doubles (``dptree_opt.limits``)."""
    _check(workload, mechanism, estimator)
    if method not in ERROR_METHODS:
        raise ValueError(f"method must be one of {ERROR_METHODS}, got {method!r}")
    twin, c = mechanism.normalised()
    res = _expected_error(workload, twin, estimator, per_query, method)
    return res if c == 1.0 else rescaled(res, c, mechanism.noise, mechanism.requested_budget)


def _expected_error(workload: Workload, mechanism: Mechanism, estimator: str,
                    per_query: bool, method: str) -> float | npt.NDArray[np.float64]:
    """expected_error on a checked (normalised) mechanism: the registry's engine."""
    if estimator == "causal":
        check_causal_inputs(workload, mechanism, method)
    dense = method == "dense"
    generic_only = dense and estimator in ("blue", "causal")
    if per_query:
        return engines.run("per_query", mechanism, workload, estimator,
                           generic_only=generic_only, dense=dense)
    return engines.run("error", mechanism, workload, estimator, generic_only=generic_only,
                       dense=dense)


@dataclass(frozen=True)
class MonteCarloResult:
    """Mean squared error over ``trials`` simulated releases, with its standard error."""

    mean: float
    std_error: float
    trials: int

    def __iter__(self) -> Iterator[float]:  # allows ``mean, se = monte_carlo_error(...)[:2]``-style unpacking
        return iter((self.mean, self.std_error))

    def within(self, value: float, n_se: float = 4.0) -> bool:
        """Whether ``value`` lies within ``n_se`` standard errors of the mean."""
        return abs(self.mean - value) <= n_se * self.std_error


def monte_carlo_error(workload: Workload, mechanism: Mechanism, estimator: str = "blue",
                      trials: int = 1000, rng: RNG = None, *,
                      histogram: ArrayLike | None = None,
                      progress: bool = False) -> MonteCarloResult:
    """Simulated squared error sum_q (answer_q - truth_q)^2, averaged over ``trials``.

    Each trial draws fresh simulation noise for every released row, estimates, and scores
    the workload answers; trials are vectorised in chunks. ``histogram`` defaults to
    Poisson(10) counts drawn from ``rng`` (the error of these unbiased linear estimators does
    not depend on the data). Returns the mean and its standard error (sample sd / sqrt).
    At most MAX_MONTE_CARLO_TRIALS trials; memory O(chunk), not O(trials)."""
    _check(workload, mechanism, estimator)
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 2:
        raise ValueError(f"trials must be an integer >= 2, got {trials!r}")
    check_count(int(trials), MAX_MONTE_CARLO_TRIALS, f"trials = {int(trials)}",
                "the standard error falls as 1 / sqrt(trials) (10^6 trials: 0.1 % of the "
                "error); expected_error gives the exact value")
    mechanism.normalised()  # ValueError when the noise variances are not doubles
    rng = as_generator(rng)
    h = (rng.poisson(10.0, mechanism.n_bins) if histogram is None
         else check_histogram(histogram, mechanism.n_bins))
    truth = workload.matvec(h.astype(float))
    exact_answers = mechanism.released.apply(h)
    chunk = max(1, min(int(trials), _MC_CHUNK_FLOATS // max(exact_answers.size, 1)))
    total, sq = 0.0, 0.0  # sums of the errors and of their squared deviations
    shift: float | None = None
    bar = Progress(int(trials), "monte carlo", enabled=progress)
    done = 0
    while done < trials:
        size = min(chunk, int(trials) - done)
        y = exact_answers + mechanism.sample_noise(rng, size=size)  # (size, rows)
        answers = engines.run("estimate", mechanism, workload, estimator, y=y)
        if estimator != "causal":  # a histogram estimate: its workload answers
            answers = workload.matvec(answers.T).T  # (size, q)
        err = np.sum((answers - truth) ** 2, axis=1)
        if shift is None:  # deviations from the first chunk's mean: no cancellation
            shift = float(err.mean())
        total += float(err.sum())
        sq += float(np.sum((err - shift) ** 2))
        done += size
        bar.update(size)
    bar.close()
    n = int(trials)
    mean = total / n
    var = max(sq - n * (mean - (shift or 0.0)) ** 2, 0.0) / (n - 1)  # (trials >= 2: shift set)
    return MonteCarloResult(float(mean), float(np.sqrt(var / n)), n)
