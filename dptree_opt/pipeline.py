"""The private-CDF pipeline: measure -> estimate -> make consistent, with uncertainty.

    private_cdf(histogram, mechanism, rng)
        = cdf_from_measurements(mechanism, mechanism.measure(histogram, rng))

``cdf_from_measurements`` is the post-measurement half (pure post-processing of the answers
y, so it costs no privacy); a real release draws y with a secure sampler and calls it
directly. It

1. estimates the K cumulative counts (``estimator``: "blue" = np.cumsum of the BLUE histogram
   (default), "covering" = [RTS] covering sums, "refined" = [RTS] App. B);
2. computes their exact standard errors (``queries.cdf_standard_errors``, O(K) on trees);
3. fixes the total: when N is public (swap neighbours, or ``public_total=True``) N is read
   from the exact total row of y and the CDF must end at N; when N is private (add_remove)
   N_hat = max(0, round(raw[-1])) -- the estimator's own total (for the BLUE, the best linear
   estimate of N from every measurement) rounded to a count and clipped at 0 -- and the
   consistent CDF is made to end at N_hat (``PrivateCDF.total_public`` tells which);
4. projects with ``consistency.project_cdf`` ("l2", "l1"; None keeps the raw estimate).

The result, :class:`PrivateCDF`, answers quantiles, ranges, bands, intervals for the true
quantiles (``quantile_intervals``, :mod:`dptree_opt.quantile_intervals`) and plots itself
(``plot``, :mod:`dptree_opt.plotting`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from . import consistency as _consistency
from . import queries as _queries
from .mechanism import RNG, Mechanism
from .plotting import plot_cdf
from .quantile_intervals import check_quantile_intervals, quantile_intervals
from .validation import check_bool, check_choice

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from .quantile_intervals import QuantileIntervals

__all__ = ["PrivateCDF", "private_cdf", "cdf_from_measurements", "CONSISTENCY"]

CONSISTENCY = ("l2", "l1", None)
SIMULATION_NOTE = ("SIMULATION: numpy noise from rng, not a private release: no privacy "
                   "guarantee (real releases: dptree_opt.release)")


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class PrivateCDF:
    """A released CDF estimate with its uncertainty (immutable; arrays are read-only).

    Attributes
    ----------
    raw : float64 (K,)
        The unprojected cumulative-count estimate (unbiased, linear in y).
    consistent : (K,)
        The projected cumulative counts: int64, non-decreasing, in [0, total], ending at
        ``total`` (``integer=True``); a float copy of ``raw`` when ``consistency`` is None.
    standard_errors : float64 (K,)
        Exact standard errors of ``raw`` (0 for C_K when N is public).
    total : int or None
        The N the consistent CDF ends at (public N, or the rounded estimate when private);
        None only when ``consistency`` is None and N is private.
    total_public : bool
        Whether ``total`` is the exact public N (else an estimate).
    description : str
        ``mechanism.describe()``.
    consistency : "l2" | "l1" | None;  estimator : "blue" | "covering" | "refined";
    integer : bool;  weighted : bool (l2/l1 weights 1 / se^2 used in the projection).
    mechanism : the Mechanism (for range standard errors and simulated bands; not compared).
    """

    raw: np.ndarray
    consistent: np.ndarray
    standard_errors: np.ndarray
    total: int | None
    total_public: bool
    description: str
    consistency: str | None
    estimator: str
    integer: bool = True
    weighted: bool = False
    mechanism: Mechanism | None = field(default=None, repr=False, compare=False)

    @property
    def n_bins(self) -> int:
        """K."""
        return int(self.raw.size)

    def cdf(self) -> np.ndarray:
        """The consistent CDF normalised to [0, 1] (F = consistent / total), shape (K,)."""
        return _queries.cdf(self.consistent, self.total)

    def quantiles(self, bin_edges: ArrayLike, qs: ArrayLike) -> npt.NDArray[np.float64]:
        """Quantiles of the consistent CDF (linear inside bins; rule in ``queries``)."""
        return _queries.quantiles(self.consistent, bin_edges, qs, self.total)

    def range_count(self, a: ArrayLike, b: ArrayLike,
                    raw: bool = False) -> npt.NDArray[np.float64]:
        """Counts of the inclusive bin ranges [a, b] from the consistent (or ``raw``) CDF."""
        return _queries.range_count(self.raw if raw else self.consistent, a, b)

    def range_standard_errors(self, a: ArrayLike, b: ArrayLike) -> npt.NDArray[np.float64]:
        """Exact standard errors of the raw range estimates [a, b] (inclusive)."""
        return _queries.range_standard_errors(self._need_mechanism(), a, b, self.estimator)

    def band(self, level: float = 0.95, simultaneous: bool = False, method: str | None = None,
             rng: RNG = None, draws: int = 2000, monotone: bool = False,
             ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Confidence band (lower, upper) for the true cumulative counts around ``raw``.

        Pointwise: ``method`` "normal" (default; z quantile, exact for Gaussian noise) or
        "simulated" (per-prefix Monte Carlo quantile of the mechanism's own noise; use it for
        Laplace). Simultaneous: "sidak" (default), "bonferroni" or "simulated" (max-``|Z|`` Monte
        Carlo). ``monotone`` (simultaneous only) tightens the band with
        ``queries.monotone_envelope`` (integer counts in [0, N]; N only when public)."""
        simultaneous = bool(simultaneous)
        allowed = ("sidak", "bonferroni", "simulated") if simultaneous else ("normal", "simulated")
        method = allowed[0] if method is None else method
        if method not in allowed:
            raise ValueError(f"method must be one of {allowed} for simultaneous={simultaneous}, "
                             f"got {method!r}")
        if monotone and not simultaneous:
            raise ValueError("monotone=True is only valid for a simultaneous band")
        if method == "simulated":
            crit = _queries.simulated_critical_value(
                self._need_mechanism(), level, self.estimator, simultaneous, draws, rng,
                standard_errors=self.standard_errors)
            lo, up = _queries.confidence_band(self.raw, self.standard_errors, level,
                                              critical=crit)
        else:
            lo, up = _queries.confidence_band(self.raw, self.standard_errors, level,
                                              "pointwise" if method == "normal" else method)
        if monotone:
            lo, up = _queries.monotone_envelope(lo, up, self.total if self.total_public else None,
                                                integer=True)
        return lo, up

    def quantile_bounds(self, bin_edges: ArrayLike, qs: ArrayLike, level: float = 0.95,
                        method: str = "sidak", rng: RNG = None, draws: int = 2000,
                        ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Simultaneous confidence bounds (lower, upper) for the true quantiles (N public).

        From the monotone simultaneous band L <= C <= U: the quantile rule is non-increasing in
        the counts, so Q_U(q) <= Q_C(q) <= Q_L(q) for every q at once, with targets q N."""
        if not self.total_public:
            raise ValueError("quantile_bounds needs a public total N (swap neighbours)")
        lo, up = self.band(level, True, method, rng, draws, monotone=True)
        return (_queries.quantiles(up, bin_edges, qs, self.total),
                _queries.quantiles(lo, bin_edges, qs, self.total))

    def quantile_intervals(self, bin_edges: ArrayLike, qs: ArrayLike, level: float = 0.95,
                           estimates: Literal["auto"] | ArrayLike | None = "auto",
                           ) -> QuantileIntervals:
        """Confidence intervals for the TRUE quantiles of the data (coverage >= ``level`` for
        every data set; exact test inversion per bin, critical values from the noise law:
        :mod:`dptree_opt.quantile_intervals`), and noise-only intervals of the estimates.

        bin_edges : (K + 1,); qs : probabilities; ``estimates`` : "auto" (the quantiles of the
        consistent CDF, when there is one and N > 0), None, or an array (len(qs),) that both
        intervals are widened to contain. BLUE only. Returns a ``QuantileIntervals``."""
        mechanism = self._need_mechanism()
        if self.estimator != "blue":
            raise ValueError("quantile intervals are derived for the BLUE estimator, not "
                             f"{self.estimator!r}")
        edges, q, level = check_quantile_intervals(mechanism, bin_edges, qs, level,
                                                   total_public=self.total_public)
        if edges.size != self.n_bins + 1:
            raise ValueError(f"bin_edges must have K + 1 = {self.n_bins + 1} entries, got "
                             f"{edges.size}")
        if isinstance(estimates, str):
            if estimates != "auto":
                raise ValueError(f"estimates must be 'auto', None or an array, got "
                                 f"{estimates!r}")
            estimates = (self.quantiles(edges, q) if self.consistency is not None
                         and self.total else None)
        return quantile_intervals(mechanism, self.raw, edges, q,
                                  total_public=self.total_public, total=self.total,
                                  level=level, estimates=estimates)

    def plot(self, bin_edges: ArrayLike | None = None, ax: Axes | None = None,
             band: Literal["pointwise", "simultaneous"] | None = "pointwise",
             level: float = 0.95, truth: ArrayLike | None = None) -> Axes:
        """Plot the consistent CDF (step function over the bin edges, or bin index), the raw
        estimate faintly, a ``band`` ("pointwise", "simultaneous" or None) at ``level``
        shaded and, for simulations, the ``truth`` (true cumulative counts); the title names
        the mechanism and its guarantee. Returns the matplotlib Axes (``plotting.plot_cdf``;
        matplotlib is imported only when it draws)."""
        return plot_cdf(self, bin_edges=bin_edges, ax=ax, band=band, level=level, truth=truth)

    def _need_mechanism(self) -> Mechanism:
        if self.mechanism is None:
            raise ValueError("this PrivateCDF carries no mechanism")
        return self.mechanism


def _public_total_from(mechanism: Mechanism, y: np.ndarray) -> int:
    """N from the exact total row (level 0, released without noise)."""
    rows = np.flatnonzero(mechanism.exact_rows & mechanism.released.total_row_mask())
    if rows.size == 0:
        raise ValueError("the mechanism declares N public but releases no exact total row")
    value = float(y[rows[0]])
    if not np.isfinite(value) or value < 0 or abs(value - round(value)) > 1e-6 * max(1.0, value):
        raise ValueError(f"y holds {value!r} on the exact total row: not a non-negative integer "
                         "count")
    return int(round(value))


def cdf_from_measurements(mechanism: Mechanism, y: ArrayLike,
                          consistency: Literal["l2", "l1"] | None = "l2",
                          estimator: str = "blue", *, integer: bool = True,
                          weighted: bool = False) -> PrivateCDF:
    """Estimate, make consistent and qualify a CDF from the mechanism's answers y (rows,).

    Parameters
    ----------
    mechanism : Mechanism
        The mechanism whose released rows y answers (simulated or securely sampled).
    y : array of shape (rows,)
        NaN allowed only on unmeasured rows.
    consistency : "l2" (default), "l1" or None
        The projection (None: no projection).
    estimator : "blue" (default), "covering" or "refined"
        See ``queries.estimate_cdf``.
    integer : bool
        Project onto integer counts ([RTS] (Oc); default) or the real relaxation.
    weighted : bool
        Weight the projection by 1 / se_t^2 (inverse variances of the raw estimate);
        prefixes with se_t = 0 other than the fixed last one are not allowed then.

    Returns
    -------
    PrivateCDF
        Post-processing only: no further privacy cost.
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    check_choice(consistency, "consistency", CONSISTENCY)
    integer = check_bool(integer, "integer")
    weighted = check_bool(weighted, "weighted")
    y = np.asarray(y, dtype=np.float64)
    rows = mechanism.released.n_rows
    if y.shape != (rows,):
        raise ValueError(f"y must have shape ({rows},) (one answer per released row), got "
                         f"{y.shape}")
    raw = np.asarray(_queries.estimate_cdf(mechanism, y, estimator), dtype=np.float64)
    if not np.all(np.isfinite(raw)):
        raise ValueError("the estimate is not finite: y has NaN or infinite values on "
                         "measured rows")
    se = _queries.cdf_standard_errors(mechanism, estimator)
    total: int | None
    if mechanism.public_total:
        total, public = _public_total_from(mechanism, y), True
    else:
        total, public = max(0, int(np.rint(raw[-1]))), False  # the estimator's own total
    consistent: npt.NDArray[np.int64] | npt.NDArray[np.float64]
    if consistency is None:
        consistent = raw.copy()
        if not public:
            total = None
    else:
        weights = None
        if weighted:
            var = se ** 2
            var[-1] = 1.0  # the last entry is fixed to the total: its weight is unused
            if np.any(var <= 0):
                raise ValueError("weighted=True needs positive variances on every free prefix")
            weights = 1.0 / var
        consistent = _consistency.project_cdf(raw, total=total, metric=consistency,
                                              integer=bool(integer), weights=weights)
    return PrivateCDF(raw=_readonly(raw), consistent=_readonly(consistent),
                      standard_errors=_readonly(se), total=total, total_public=public,
                      description=mechanism.describe(), consistency=consistency,
                      estimator=estimator, integer=bool(integer), weighted=bool(weighted),
                      mechanism=mechanism)


def private_cdf(histogram: ArrayLike, mechanism: Mechanism, rng: RNG,
                consistency: Literal["l2", "l1"] | None = "l2", estimator: str = "blue",
                **kwargs: bool) -> PrivateCDF:
    """Measure the histogram with the mechanism (simulation noise from ``rng``; NOT a secure
    release), then :func:`cdf_from_measurements` (keywords ``integer``, ``weighted`` pass
    through). Returns a :class:`PrivateCDF`."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    res = cdf_from_measurements(mechanism, mechanism.measure(histogram, rng), consistency,
                                estimator, **kwargs)
    return replace(res, description=SIMULATION_NOTE + "\n" + res.description)
