"""Answers from a CDF estimate: the normalised CDF, quantiles, range counts, and their uncertainty.

Conventions (shared with :mod:`dptree_opt.workloads`): bins are 0-based; the cumulative
counts are an array ``C`` of shape (K,) with ``C[t - 1] = h_0 + ... + h_{t-1}`` (the first t
bins, t = 1..K), so ``C[-1]`` is the total; ``bin_edges`` has K + 1 increasing entries and bin i
is [e_i, e_{i+1}).

Quantile rule. The CDF is taken linear inside each bin (the data spread uniformly over their
bin): F(e_0) = 0, F(e_{i+1}) = C[i] / N, linear in between. The q-quantile is its generalised
inverse restricted to [e_0, e_K],

    Q(q) = inf {x in [e_0, e_K] : F(x) >= q}:
    Q(0) = e_0; for q > 0, with i the first bin with C[i] >= q N,
    Q(q) = e_i + (q N - C[i-1]) / (C[i] - C[i-1]) (e_{i+1} - e_i)      (C[-1] := 0).

Empty bins are skipped (Q never lands strictly inside an empty bin). The float target q N is
compared with the counts with a tolerance of 1e-12 N. For an exact CDF and
q = m / N this equals ``np.quantile(z, q, method="inverted_cdf")`` of the binned data z in which
the h_i points of bin i sit at e_i + j (e_{i+1} - e_i) / h_i, j = 1..h_i (tests pin it).

Uncertainty. Standard errors are exact, from the estimator's covariance, never from a K x K
matrix on trees: per-prefix variances via ``expected_error(prefix(K), ..., per_query=True)``
(O(K) on level-uniform trees); range variances for the BLUE on level-uniform trees in O(h) per
range from the generalised Haar form Cov = sum_j mu_j D_j (docs/math.md section 3; formula in
:func:`range_standard_errors`), for the covering estimator in O(nnz) from its sparse
operator, otherwise through ``workloads.ranges`` and the dense covariance (small K). They are
the standard errors of the *raw* linear unbiased estimate; a consistent (projected) estimate is
biased and has no such per-query standard error.

Bands (:func:`confidence_band`) are est +- c * se with

* "pointwise": c = z_{(1 + level) / 2} (normal quantile) -- exact coverage for Gaussian noise
  (the estimate is a linear function of Gaussian noise);
* "bonferroni": c = z_{1 - (1 - level) / (2 n)} over the n queries with se > 0 -- simultaneous,
  valid for any correlation (union bound), Gaussian noise;
* "sidak": c = z_{(1 + level^(1/n)) / 2} -- simultaneous, valid for any centred multivariate
  normal by Sidak's inequality (1967), slightly narrower than Bonferroni;
* a ``critical`` value from :func:`simulated_critical_value`: the Monte Carlo quantile of
  max_t ``|e_t|`` / se_t (or of ``|e_t|`` / se_t per t) where e = R z is the estimator
  applied to fresh mechanism noise z. The estimators are linear, so e is exactly the
  estimation error's distribution (Laplace included: no normal approximation), up to Monte
  Carlo error.

Laplace noise makes the normal-quantile bands approximate (its tails are heavier); use the
simulated critical value for pure-DP releases when coverage matters.
A simultaneous band of a CDF can be tightened with :func:`monotone_envelope` without losing
coverage (the truth is monotone, integer and in [0, N]).
Intervals for the true quantiles with coverage >= level for every data set (exact test
inversion per bin, critical values from the noise law): :mod:`dptree_opt.quantile_intervals`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.special import ndtri  # standard normal quantile (scipy.stats costs 0.75 s to import)

from . import workloads
from .error import ESTIMATORS, expected_error
from .estimation.blue import blue
from .engines.covering import covering_cdf
from .engines.tree import refined_cdf
from .mechanism import RNG, Mechanism, as_generator
from .validation import check_choice, check_int, check_real

__all__ = [
    "BAND_METHODS",
    "cdf",
    "quantiles",
    "range_count",
    "cdf_standard_errors",
    "range_standard_errors",
    "critical_value",
    "simulated_critical_value",
    "confidence_band",
    "monotone_envelope",
    "estimate_cdf",
]

BAND_METHODS = ("pointwise", "bonferroni", "sidak")
# Simulated pointwise critical values keep draws x K floats: at most this many.
MAX_SIMULATED_POINTWISE_FLOATS = 2**26
_SIM_CHUNK_FLOATS = 2**22


# ----------------------------------------------------------------------------- validation
def _vector(x: ArrayLike, name: str) -> npt.NDArray[np.float64]:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1-D array of numbers") from None
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has NaN or infinite entries")
    return a


def _total(total: float | None, default: float) -> float:
    if total is None:
        n = float(default)
    else:
        n = check_real(total, "total (N)", above=0)
    if not np.isfinite(n) or n <= 0:
        raise ValueError(f"total (N) must be positive and finite to normalise, got {n!r}")
    return n


def check_level(level: float, name: str = "level") -> float:
    """A confidence level: a real number in (0, 1) (ValueError naming ``name``)."""
    return check_real(level, name, above=0, below=1)


def check_probabilities(qs: ArrayLike, name: str = "qs") -> npt.NDArray[np.float64]:
    """Quantile levels: a 1-D float array of probabilities in [0, 1] (empty allowed; a
    string is refused rather than read as characters). ValueError naming ``name``."""
    if isinstance(qs, (str, bytes)):
        raise ValueError(f"{name} must be probabilities in [0, 1], got {qs!r}")
    try:
        q = np.atleast_1d(np.asarray(qs, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be probabilities in [0, 1], got {qs!r}") from None
    if q.ndim != 1 or not np.all(np.isfinite(q)) or np.any((q < 0) | (q > 1)):
        raise ValueError(f"{name} must be probabilities in [0, 1] (a 1-D list), got {qs!r}")
    return q


def _check_mechanism(mechanism: object, estimator: str) -> None:
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    check_choice(estimator, "estimator", ESTIMATORS)


# ----------------------------------------------------------------------------- answers
def cdf(cumulative_counts: ArrayLike, total: float | None = None) -> npt.NDArray[np.float64]:
    """The CDF at the right bin edges, F = C / N, shape (K,).

    N = ``total`` (public N) or the last cumulative count. A consistent input (see
    :mod:`dptree_opt.consistency`) gives values in [0, 1] ending at 1; a raw estimate is only
    divided (nothing is clipped)."""
    c = _vector(cumulative_counts, "cumulative_counts")
    return c / _total(total, c[-1])


def _check_edges(bin_edges: ArrayLike, k: int) -> npt.NDArray[np.float64]:
    e = _vector(bin_edges, "bin_edges")
    if e.size != k + 1:
        raise ValueError(f"bin_edges must have K + 1 = {k + 1} entries, got {e.size}")
    if np.any(np.diff(e) <= 0):
        raise ValueError("bin_edges must be strictly increasing")
    return e


def quantiles(cdf_counts: ArrayLike, bin_edges: ArrayLike, qs: ArrayLike,
              total: float | None = None) -> npt.NDArray[np.float64]:
    """Quantiles Q(q) of a consistent CDF with linear interpolation inside bins.

    Rule (module docstring): Q(0) = e_0; for q > 0, i = the first bin with C[i] >= q N and
    Q(q) = e_i + (q N - C[i-1]) / (C[i] - C[i-1]) (e_{i+1} - e_i), C[-1] := 0.

    Parameters
    ----------
    cdf_counts : (K,) cumulative counts, non-negative and non-decreasing (project first).
    bin_edges : (K + 1,) strictly increasing bin edges.
    qs : scalar or array of probabilities in [0, 1].
    total : N used for the targets q N; default the last count. With a smaller total than
        ``cdf_counts[-1]`` targets above the total never exceed the data; with a larger one
        (q N > C[-1]) the quantile is e_K.

    Returns an array of the shape of ``qs`` (float64). O(K + len(qs) log K).
    """
    c = _vector(cdf_counts, "cdf_counts")
    e = _check_edges(bin_edges, c.size)
    if c[0] < 0 or np.any(np.diff(c) < 0):
        raise ValueError("cdf_counts must be non-negative and non-decreasing (a consistent CDF:"
                         " use consistency.project_cdf first)")
    q = np.asarray(qs, dtype=np.float64)
    if not np.all(np.isfinite(q)) or np.any((q < 0) | (q > 1)):
        raise ValueError("qs must be probabilities in [0, 1]")
    n = _total(total, c[-1])
    target = q * n
    # first bin with C[i] >= target; q N is a float product (15/29 * 29 > 15), so a target
    # within 1e-12 N of a count counts as reaching it (else an empty bin would be skipped wrongly)
    i = np.searchsorted(c, target - 1e-12 * n, side="left")
    inside = (q > 0) & (i < c.size)
    ii = np.minimum(i, c.size - 1)
    prev = np.where(ii > 0, c[np.maximum(ii - 1, 0)], 0.0)
    frac = (target - prev) / np.where(c[ii] > prev, c[ii] - prev, 1.0)
    out = np.where(inside, e[ii] + np.clip(frac, 0.0, 1.0) * (e[ii + 1] - e[ii]),
                   np.where(q > 0, e[-1], e[0]))
    return out


def range_count(cumulative_counts: ArrayLike, a: ArrayLike,
                b: ArrayLike) -> npt.NDArray[np.float64]:
    """Counts of the bin ranges [a, b] (0-based bin indices, both inclusive, a <= b):
    C[b] - C[a - 1] (C[-1] := 0). ``a`` and ``b`` broadcast (scalars or arrays)."""
    c = _vector(cumulative_counts, "cumulative_counts")
    a, b = _check_ranges(a, b, c.size)
    padded = np.concatenate(([0.0], c))
    return padded[b + 1] - padded[a]


def _check_ranges(a: ArrayLike, b: ArrayLike,
                  k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    try:
        a_arr, b_arr = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    except ValueError:
        raise ValueError("a and b must broadcast to a common shape") from None
    for name, arr in (("a", a_arr), ("b", b_arr)):
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                     or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"{name} must hold integer bin indices")
        if np.issubdtype(arr.dtype, np.floating) and (
                not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr))):
            raise ValueError(f"{name} must hold integer bin indices")
    a_arr, b_arr = a_arr.astype(np.int64), b_arr.astype(np.int64)
    bad = (a_arr < 0) | (b_arr >= k) | (a_arr > b_arr)
    if bad.any():
        j = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), bad.shape)
        raise ValueError(f"(a, b) = ({a_arr[j]}, {b_arr[j]}) is not an inclusive bin range "
                         f"0 <= a <= b < K = {k}")
    return a_arr, b_arr


# ----------------------------------------------------------------------------- estimates
def estimate_cdf(mechanism: Mechanism, y: ArrayLike,
                 estimator: str = "blue") -> npt.NDArray[np.float64]:
    """Raw cumulative-count estimate (K,) (or (trials, K)) from answers y: ``np.cumsum`` of the
    BLUE histogram, the [RTS] covering sums, or the [RTS] App. B refined estimate."""
    _check_mechanism(mechanism, estimator)
    if estimator == "blue":
        return np.cumsum(blue(mechanism, y), axis=-1)
    if estimator == "covering":
        return covering_cdf(mechanism, y)
    return refined_cdf(mechanism, y)


# ----------------------------------------------------------------------------- standard errors
def cdf_standard_errors(mechanism: Mechanism, estimator: str = "blue") -> np.ndarray:
    """Exact standard errors of the K raw cumulative-count estimates, shape (K,).

    sqrt of ``expected_error(workloads.prefix(K), mechanism, estimator, per_query=True)``:
    O(K) on level-uniform trees (Haar form), the covering rows' variances for "covering",
    the dense GLS covariance otherwise (K <= 8192)."""
    _check_mechanism(mechanism, estimator)
    var = expected_error(workloads.prefix(mechanism.n_bins), mechanism, estimator,
                         per_query=True)
    return np.sqrt(np.maximum(np.asarray(var, dtype=np.float64), 0.0))


def range_standard_errors(mechanism: Mechanism, a: ArrayLike, b: ArrayLike,
                          estimator: str = "blue") -> npt.NDArray[np.float64]:
    """Exact standard errors of the raw estimates of the range counts [a, b] (inclusive,
    0-based; ``a``, ``b`` broadcast), as computed by :func:`range_count` on the raw estimate.

    * "blue" on a level-uniform tree: O(h) per range from the Haar form (no matrix);
    * "covering": Var(C_{b+1} - C_a) = sum_r v_r [row r is in exactly one of the two coverings]:
      O(h) per range on fully measured level-uniform trees, else from the sparse covering
      operator (O(nnz) per range);
    * otherwise ``expected_error(workloads.ranges(K, pairs), ..., per_query=True)`` (dense
      covariance: K <= 8192 for the BLUE, 4096 for "refined")."""
    _check_mechanism(mechanism, estimator)
    k = mechanism.n_bins
    a_arr, b_arr = _check_ranges(a, b, k)
    shape = a_arr.shape
    lo, hi = a_arr.ravel(), b_arr.ravel() + 1  # half-open [lo, hi)
    var = expected_error(workloads.ranges(k, np.column_stack([lo, hi - 1])), mechanism,
                         estimator, per_query=True)     # the engine of the strategy
    return np.sqrt(np.maximum(np.asarray(var, dtype=np.float64), 0.0)).reshape(shape)


# ----------------------------------------------------------------------------- bands
def critical_value(level: float = 0.95, method: str = "pointwise", n_queries: int = 1) -> float:
    """Normal critical value c of a band est +- c se: "pointwise" z_{(1+level)/2};
    "bonferroni" z_{1-(1-level)/(2n)}; "sidak" z_{(1+level^(1/n))/2} (n = ``n_queries``)."""
    level = check_level(level)
    check_choice(method, "method", BAND_METHODS)
    n_queries = check_int(n_queries, "n_queries", 1)
    if method == "pointwise" or n_queries == 1:
        return float(ndtri(0.5 + level / 2))
    if method == "bonferroni":
        return float(-ndtri((1 - level) / (2 * n_queries)))
    # 1 - level^(1/n) computed without cancellation
    tail = -np.expm1(np.log(level) / n_queries)
    return float(-ndtri(tail / 2))


def simulated_critical_value(mechanism: Mechanism, level: float = 0.95, estimator: str = "blue",
                             simultaneous: bool = True, draws: int = 2000, rng: RNG = None,
                             standard_errors: ArrayLike | None = None,
                             ) -> float | npt.NDArray[np.float64]:
    """Monte Carlo critical value(s) from the mechanism's own noise distribution.

    Draws z from the mechanism (``mechanism.sample_noise``), applies the estimator (linear, so
    e = estimate(z) is exactly the estimation error), and returns the ``level`` quantile of
    max_t ``|e_t|`` / se_t (``simultaneous``: one float) or of ``|e_t|`` / se_t per prefix (an array
    (K,)). Prefixes with se_t = 0 (e.g. C_K when N is public) are exact and ignored.
    ``standard_errors`` may cover only the first K <= K' prefixes of a mechanism over K' bins
    (a padded tree whose last K' - K bins are empty, as a release builds it): the band is then
    for those K prefixes only.
    Cost: draws x (rows + estimator) work, chunked; the pointwise version keeps draws x K
    floats (at most ``MAX_SIMULATED_POINTWISE_FLOATS``)."""
    _check_mechanism(mechanism, estimator)
    level = check_level(level)
    draws = check_int(draws, "draws", 10)
    rng = as_generator(rng)
    k_all = mechanism.n_bins
    se = (cdf_standard_errors(mechanism, estimator) if standard_errors is None
          else _vector(standard_errors, "standard_errors"))
    if se.size > k_all:
        raise ValueError(f"standard_errors must have at most K' = {k_all} entries (one per "
                         f"prefix of the mechanism's bins), got {se.size}")
    k = se.size  # the first k prefixes (k < K': padding bins after them)
    scale = np.where(se > 0, 1.0 / np.where(se > 0, se, 1.0), 0.0)
    if not simultaneous and draws * k > MAX_SIMULATED_POINTWISE_FLOATS:
        raise ValueError(f"pointwise simulation keeps draws x K = {draws * k} floats > "
                         f"{MAX_SIMULATED_POINTWISE_FLOATS}; lower draws")
    rows = mechanism.released.n_rows
    chunk = max(1, min(int(draws), _SIM_CHUNK_FLOATS // max(rows + k_all, 1)))
    stats: list[npt.NDArray[np.float64]] = []
    done = 0
    while done < draws:
        size = min(chunk, int(draws) - done)
        z = mechanism.sample_noise(rng, size=size)  # (size, rows); exact rows 0
        ratio = np.abs(estimate_cdf(mechanism, z, estimator)[:, :k]) * scale
        stats.append(ratio.max(axis=1) if simultaneous else ratio)
        done += size
    all_stats = np.concatenate(stats, axis=0)
    return (float(np.quantile(all_stats, level)) if simultaneous
            else np.quantile(all_stats, level, axis=0))


def confidence_band(estimate: ArrayLike, standard_errors: ArrayLike, level: float = 0.95,
                    method: str = "pointwise", critical: ArrayLike | None = None,
                    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(lower, upper) = estimate -+ c * standard_errors.

    c = ``critical`` (a float or per-query array, e.g. from :func:`simulated_critical_value`)
    or the normal critical value of ``method`` ("pointwise", "bonferroni", "sidak"; the
    simultaneous ones over the queries with se > 0). Shapes (K,)."""
    est = _vector(estimate, "estimate")
    se = _vector(standard_errors, "standard_errors")
    if se.shape != est.shape:
        raise ValueError(f"standard_errors has shape {se.shape}, estimate {est.shape}")
    if np.any(se < 0):
        raise ValueError("standard_errors must be non-negative")
    c: float | npt.NDArray[np.float64]
    if critical is None:
        c = critical_value(level, method, max(int(np.sum(se > 0)), 1))
    else:
        c = np.asarray(critical, dtype=np.float64)
        if not np.all(np.isfinite(c)) or np.any(c < 0) or c.ndim > 1 or \
                (c.ndim == 1 and c.shape != est.shape):
            raise ValueError("critical must be a non-negative float or an array like estimate")
    return est - c * se, est + c * se


def monotone_envelope(lower: ArrayLike, upper: ArrayLike, total: float | None = None,
                      integer: bool = True,
                      ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Tighten a *simultaneous* band of cumulative counts without losing coverage.

    If L_t <= C_t <= U_t for all t and C is non-decreasing, in [0, N] (integer), then
    max_{s <= t} L_s <= C_t <= min_{s >= t} U_s, clipped to [0, N], with ceil / floor for
    integer counts. (A pointwise band must not be tightened this way.) Returns (lower, upper)."""
    lo = _vector(lower, "lower")
    up = _vector(upper, "upper")
    if lo.shape != up.shape:
        raise ValueError(f"lower has shape {lo.shape}, upper {up.shape}")
    lo = np.maximum.accumulate(np.maximum(lo, 0.0))
    up = np.minimum.accumulate(up[::-1])[::-1]
    if total is not None:
        n = _total(total, 1.0)
        lo, up = np.minimum(lo, n), np.minimum(up, n)
        lo[-1] = up[-1] = n
    up = np.maximum(up, 0.0)
    if integer:
        lo, up = np.ceil(lo - 1e-9), np.floor(up + 1e-9)
    return lo, up
