"""Consistency post-processing: the closest CDF (or histogram) to a noisy estimate.

A noisy estimate C~ of the cumulative counts C_t = h_1 + ... + h_t (t = 1..K) is usually not a
CDF: it decreases somewhere, leaves [0, N], is not integer. ``project_cdf`` solves [RTS]
problem (Oc) (Sec. VI-1; docs/math.md section 5)::

    minimise   sum_t w_t g(c_t - C~_t)          g(d) = d^2 ("l2") or |d| ("l1"), w_t > 0
    subject to 0 <= c_1 <= c_2 <= ... <= c_K,   c_K = N when N is public (``total``),
               c integer (``integer=True``; the real relaxation otherwise).

With ``total`` given the last entry is *fixed* (c_K = N, its term is a constant) and the other
K - 1 entries are projected onto the monotone vectors in [0, N] (c_{K-1} <= c_K = N is then
just the upper bound). Caution: PAVA over all K entries followed by setting c_K = N is not
optimal (K = 2, C~ = (3, 1), N = 5: PAVA pools to (2, 2), giving (2, 5); the optimum is (3, 5)).

Upper bound when N is private (``total=None``). The constraints are then 0 <= c_1 <= ... <= c_K
only: c_K *is* the released total, and every c_t <= c_K follows from monotonicity, so no
separate bound is needed and none is invented (rounding the noisy last value C~_K into a hard
bound would let one noisy coordinate overrule the others). ``upper`` adds a bound c_K <= upper
when the caller knows a public one (e.g. a population size). The pipeline
(:func:`dptree_opt.private_cdf`) instead fixes c_K to the rounded estimated total (the BLUE of N
already pools every measurement of N).

Methods
-------
* ``method="trellis"``: the [RTS] Sec. VI-2 dynamic program, eqs. (8)-(10):
  alpha(v, 1) = g(v - C~_1), alpha(v, t) = g(v - C~_t) + min_{u <= v} alpha(u, t - 1), with the
  running prefix minimum (O(K G) time, G + 1 grid values 0..G) and one back-pointer per cell
  (uint16 or int32). Integer problems only. Grid: G = N when public, else ``upper``, else
  max(0, ceil(max C~)) (clipping any feasible c at ceil(max C~) does not increase any term, so
  an optimum lies on that grid). Refused (ValueError naming K, G and the bytes) when the
  back-pointers would exceed ``TRELLIS_MAX_BYTES`` (256 MiB) unless ``trellis_max_bytes`` is
  raised. It is the reference the fast methods are tested against.
* ``method="fast"``, l2: weighted pool-adjacent-violators (``scipy.optimize.isotonic_regression``,
  O(K)), clip to [0, U], and for integers round to the nearest integer. Exact, weights included:
  for a quadratic f_t(c) = w_t (c - C~_t)^2 the unit step f_t(m + 1) - f_t(m) equals the derivative
  f_t'(m + 1/2), so by the threshold theorem for separable convex isotonic problems (Hochbaum &
  Queyranne 2003) the integer level set {c >= m + 1} is the real level set {x >= m + 1/2}:
  c = round(x). A box common to all coordinates commutes with the level sets (clip). Ties
  x = m + 1/2 are ties of the objective; they are broken the same way inside a PAVA block.
* ``method="fast"``, l1 (and any weights): exact isotonic median regression by *partitioning*
  (Stout, "Isotonic regression via partitioning", Algorithmica 2013; the threshold theorem again):
  an optimum takes values in a finite candidate set -- the data values (reals), or floor/ceil of
  the data values (integers: the integer problem equals the real problem for the piecewise-linear
  interpolation of g between integers, whose breakpoints are those integers), clipped to [0, U],
  plus 0 and U. Bisect the candidate index: for a split value pair (a, b) the two-valued
  problem's optimal level set is the suffix minimising sum_{t >= s} (g_t(b) - g_t(a)) inside each
  segment; the left part keeps values <= a, the right part >= b. All segments of one depth are
  processed together with vectorised segment sums: O(K) numpy work per depth, ceil(log2(2K + 2))
  depths, O(K log K) in total and no Python loop over the bins.

Unbiasedness and what projections trade
---------------------------------------
No projection here keeps the BLUE (or any linear unbiased estimate) unbiased: each is a
non-linear map, and near the boundary of the set it moves the estimate one way only (a true
c_1 = 0 becomes max(., 0) >= 0: positive bias). They trade a bias for a variance reduction:

* Euclidean projections onto a closed convex set S (real l2 with weights w: the projection in
  the norm ||d||_w^2 = sum w_t d_t^2) are non-expansive, and for a truth c inside S
  ||P(C~) - c||_w <= ||C~ - c||_w for *every* noise draw (the angle at P(C~) is obtuse). The
  true CDF is in S, so the weighted l2 error never increases, in expectation or per draw.
* Rounding breaks that guarantee (K = 2, N = 2, C~ = (1.5, 2), truth (1, 2): (1, 2) and (2, 2)
  are both integer optima, the fast method returns (2, 2) with error 1 > 0.5 = the raw error),
  by at most sqrt(K) / 2 in l2 norm (triangle inequality).
* l1 projections are not non-expansive: with C~ = (3, 0), truth (1, 1) every (c, c), 0 <= c <= 3,
  is l1-optimal and c = 3 has l2 error sqrt(8) > sqrt(5), l1 error 4 > 3. The l1 optimum is not
  unique; this module returns the one the partitioning finds (lowest values on ties).

``project_histogram`` projects bin counts onto {h >= 0, sum h = N} (integer or real) and
``project_tree`` turns a projected histogram into consistent integer node counts of a strategy
(see their docstrings for why a node-metric projection is not offered).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from typing import TYPE_CHECKING, Literal, TypeAlias, cast

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.optimize import isotonic_regression

if TYPE_CHECKING:
    from .strategies import Strategy

__all__ = [
    "METRICS",
    "METHODS",
    "TRELLIS_MAX_BYTES",
    "project_cdf",
    "project_histogram",
    "project_tree",
    "objective",
    "is_consistent",
]

METRICS = ("l2", "l1")
METHODS = ("fast", "trellis")
# The trellis stores one back-pointer per (stage, grid value): at most this many bytes.
TRELLIS_MAX_BYTES = 256 * 2**20

_F: TypeAlias = "npt.NDArray[np.float64]"
#: projected counts: int64 with ``integer=True``, float64 otherwise
_Counts: TypeAlias = "npt.NDArray[np.int64] | npt.NDArray[np.float64]"


# ----------------------------------------------------------------------------- validation
def _check_vector(x: ArrayLike, name: str) -> npt.NDArray[np.float64]:
    try:
        a = np.asarray(x)
    except Exception:  # noqa: BLE001 - any conversion failure is bad input
        raise ValueError(f"{name} must be a 1-D array of numbers") from None
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer)
                               or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"{name} must hold real numbers, got dtype {a.dtype}")
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {a.shape}")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has NaN or infinite entries")
    return a


def _check_count(value: object, name: str) -> int | None:
    """A non-negative integer (int or integer-valued float) or None."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if not math.isfinite(float(value)) or float(value) != round(float(value)):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    x = float(value)    # an integer (checked above): as exact as the comparisons need
    if x < 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    if x >= 2**53:
        raise ValueError(f"{name} must be below 2^53 (exact in float64), got {value!r}")
    return int(x)


def _check_weights(weights: ArrayLike | None, k: int) -> npt.NDArray[np.float64] | None:
    if weights is None:
        return None
    w = _check_vector(weights, "weights")
    if w.size != k:
        raise ValueError(f"weights must have shape ({k},), got ({w.size},)")
    if np.any(w <= 0):
        raise ValueError("weights must be positive (inverse variances)")
    return w


def _check_options(metric: str, integer: object, method: str | None = None) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if not isinstance(integer, (bool, np.bool_)):
        raise ValueError(f"integer must be a bool, got {integer!r}")
    if method is not None and method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _loss(metric: str, d: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return d * d if metric == "l2" else np.abs(d)


def objective(c: ArrayLike, cumulative_counts: ArrayLike, metric: str = "l2",
              weights: ArrayLike | None = None) -> float:
    """The (Oc) objective sum_t w_t g(c_t - C~_t) (g = d^2 for "l2", ``|d|`` for "l1")."""
    _check_options(metric, True)
    y = _check_vector(cumulative_counts, "cumulative_counts")
    c = _check_vector(c, "c")
    if c.size != y.size:
        raise ValueError(f"c has shape ({c.size},), cumulative_counts ({y.size},)")
    w = _check_weights(weights, y.size)
    loss = _loss(metric, c - y)
    return float(np.sum(loss if w is None else w * loss))


def is_consistent(c: ArrayLike, total: int | None = None, integer: bool = True,
                  atol: float = 0.0) -> bool:
    """Whether c satisfies every constraint of (Oc): 0 <= c_1 <= ... <= c_K (<= total, and
    c_K == total when given), integer entries when ``integer``; ``atol`` loosens the
    inequalities for real vectors."""
    c = np.asarray(c, dtype=float)
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)):
        return False
    ok = bool(c[0] >= -atol and np.all(np.diff(c) >= -atol))
    if integer:
        ok &= bool(np.all(c == np.round(c)))
    if total is not None:
        ok &= bool(abs(c[-1] - total) <= atol and np.all(c <= total + atol))
    return ok


# ----------------------------------------------------------------------------- fast methods
def _pava_l2(y: _F, w: _F | None, upper: float | None, integer: bool) -> _Counts:
    """Weighted isotonic regression, clipped to [0, upper], rounded for integers (exact)."""
    x = isotonic_regression(y, weights=w, increasing=True).x  # O(K) PAVA
    np.clip(x, 0.0, np.inf if upper is None else float(upper), out=x)
    return np.rint(x).astype(np.int64) if integer else x


def _candidates(y: _F, upper: float | None, integer: bool) -> _F:
    """A sorted finite set that contains the values of an optimal solution (l1)."""
    hi = np.inf if upper is None else float(upper)
    if integer:
        base = np.floor(y)
        cand = np.concatenate([base, base + 1.0])
    else:
        cand = y
    extra = [0.0] if upper is None else [0.0, hi]
    return np.unique(np.concatenate([np.clip(cand, 0.0, hi), extra]))


def _unit_steps(metric: str, a: _F, b: _F, y_seg: _F) -> _F:
    """(g(b - y) - g(a - y)) / (b - a) for a < b, in closed form (no cancellation when b - a
    is tiny next to |y|): l2: a + b - 2 y; l1: clip((a + b - 2 y) / (b - a), -1, 1) (-1 for
    y >= b, +1 for y <= a). Dividing by b - a > 0 scales one segment's threshold problem (same
    minimiser) and keeps the sums O(K max w). ``a``, ``b`` are per element (repeated)."""
    g = a + b
    g -= 2.0 * y_seg
    if metric == "l1":
        with np.errstate(over="ignore"):  # tiny b - a: +-inf, clipped to +-1 (exact sign)
            g /= b - a
        np.clip(g, -1.0, 1.0, out=g)
    return g


def _partition(y: _F, w: _F | None, cand: _F, metric: str) -> _F:
    """Exact isotonic regression with values in ``cand`` (sorted, unique) by partitioning.

    State: a partition of 0..K-1 into segments [start, end), each with a candidate index range
    [lo, hi) known to contain the optimal values of its elements (ranges of successive
    segments are disjoint and increasing). One pass splits every segment with hi - lo > 1 at
    m = (lo + hi) // 2: the elements with optimal value >= cand[m] form the suffix [s, end)
    minimising sum_{t >= s} (g_t(cand[m]) - g_t(cand[m - 1])) (Stout 2013; threshold theorem;
    ties -> the largest s, i.e. the lowest values). Suffix sums come from one reversed
    cumulative sum, minima and argmins from segment reductions. O(K) numpy work per pass,
    ceil(log2 |cand|) passes; the only Python loop is over the passes."""
    k = y.size
    idx = np.arange(k, dtype=np.int64)
    starts = np.zeros(1, dtype=np.int64)
    seg_lo = np.zeros(1, dtype=np.int64)
    seg_hi = np.full(1, cand.size, dtype=np.int64)
    while True:
        active = seg_hi - seg_lo > 1
        if not active.any():
            break
        ends = np.append(starts[1:], k)
        lengths = ends - starts
        m = (seg_lo + seg_hi) // 2
        m_safe = np.where(active, m, 1)
        a_seg, b_seg = cand[m_safe - 1], cand[m_safe]
        g = _unit_steps(metric, np.repeat(a_seg, lengths), np.repeat(b_seg, lengths), y)
        if w is not None:
            g *= w
        g *= np.repeat(active.astype(np.float64), lengths)  # finished segments: no change
        rev = np.empty(k + 1)
        rev[k] = 0.0
        np.cumsum(g[::-1], out=rev[k - 1::-1])  # rev[i] = sum_{j >= i} g_j
        suffix = rev[:-1] - np.repeat(rev[ends], lengths)  # sum over [i, segment end)
        best = np.minimum.reduceat(suffix, starts)
        last = np.maximum.reduceat(np.where(suffix == np.repeat(best, lengths), idx, -1), starts)
        split = np.where(best < 0.0, last, ends)  # the empty suffix (split = end) has sum 0
        # children: [start, split) keeps [lo, m), [split, end) gets [m, hi); drop empty ones
        left_ok = (split > starts) | ~active
        right_ok = active & (split < ends)
        new_starts = np.stack([starts, split], axis=1)
        new_lo = np.stack([seg_lo, m], axis=1)
        new_hi = np.stack([np.where(active, m, seg_hi), seg_hi], axis=1)
        keep = np.stack([left_ok, right_ok], axis=1)
        starts, seg_lo, seg_hi = new_starts[keep], new_lo[keep], new_hi[keep]
    return np.repeat(cand[seg_lo], np.diff(np.append(starts, k)))


def _fast(y: _F, w: _F | None, upper: float | None, metric: str, integer: bool) -> _Counts:
    if y.size == 0:
        return np.zeros(0, dtype=np.int64) if integer else np.zeros(0)
    if metric == "l2":
        return _pava_l2(y, w, upper, integer)
    x = _partition(y, w, _candidates(y, upper, integer), "l1")
    return x.astype(np.int64) if integer else x


# ----------------------------------------------------------------------------- trellis
def _trellis(y: _F, w: _F | None, grid_max: int, metric: str,
             max_bytes: int) -> npt.NDArray[np.int64]:
    """[RTS] Sec. VI-2 trellis DP over the integer grid 0..grid_max (eqs. (8)-(10))."""
    n = y.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    width = grid_max + 1
    dtype = np.uint16 if width <= 2**16 else np.int32
    nbytes = n * width * np.dtype(dtype).itemsize
    if nbytes > max_bytes:
        raise ValueError(
            f"trellis refused: {n} stages x {width} grid values (K x (N + 1) = {n * width} "
            f"cells, {nbytes} bytes of back-pointers) exceeds trellis_max_bytes = {max_bytes}; "
            "use method='fast' (exact) or raise trellis_max_bytes")
    grid = np.arange(width, dtype=np.float64)
    idx = np.arange(width, dtype=dtype)
    back = np.empty((n, width), dtype=dtype)
    run = np.zeros(width)  # min_{u <= v} alpha(u, t - 1); zero before the first stage
    for t in range(n):  # reference implementation: O(G) numpy work per stage
        alpha = _loss(metric, grid - y[t])
        if w is not None:
            alpha *= w[t]
        alpha += run
        np.minimum.accumulate(alpha, out=run)
        np.maximum.accumulate(np.where(alpha <= run, idx, 0), out=back[t])  # prefix argmin
    c = np.empty(n, dtype=np.int64)
    c[-1] = back[-1, -1]  # eq. (9): argmin over the last free stage
    for t in range(n - 2, -1, -1):  # eq. (10): backtrack
        c[t] = back[t, c[t + 1]]
    return c


# ----------------------------------------------------------------------------- public API
def project_cdf(cumulative_counts: ArrayLike, total: int | None = None,
                metric: Literal["l2", "l1"] = "l2", integer: bool = True,
                method: Literal["fast", "trellis"] = "fast", weights: ArrayLike | None = None,
                *, upper: int | None = None,
                trellis_max_bytes: int | None = None) -> _Counts:
    """Optimal consistent cumulative counts closest to a noisy estimate ([RTS] problem (Oc)).

    Parameters
    ----------
    cumulative_counts : array (K,)
        Noisy cumulative counts C~_1..C~_K (finite reals), e.g. ``np.cumsum(blue(mech, y))``.
    total : int, optional
        Public total N: the output ends at c_K = N and lies in [0, N]. None (N private): the
        output is only non-negative and non-decreasing; its last entry is the released total
        (see the module docstring for why no bound is derived from the data).
    metric : "l2" | "l1"
        sum_t w_t (c_t - C~_t)^2 or sum_t w_t ``|c_t - C~_t|``.
    integer : bool
        Integer counts (problem (Oc)); False solves the real relaxation.
    method : "fast" | "trellis"
        "fast": PAVA + clip + round (l2), partitioning isotonic median regression (l1); exact,
        O(K) / O(K log K). "trellis": [RTS] Sec. VI-2 DP, O(K N) time and memory, integer only.
    weights : array (K,), optional
        Positive weights w_t, typically inverse variances of the estimates (weighted l2 is the
        projection in the estimate's own precision metric). Default all ones. With ``total``
        the weight of the fixed last entry is irrelevant.
    upper : int, optional (keyword)
        A public upper bound on the total when ``total`` is None (c_K <= upper).
    trellis_max_bytes : int, optional (keyword)
        Memory bound of the trellis back-pointers (default ``TRELLIS_MAX_BYTES`` = 256 MiB).

    Returns
    -------
    ndarray (K,): int64 when ``integer`` else float64; non-decreasing, >= 0, <= N and ending
    at N when ``total`` is given.

    Raises
    ------
    ValueError naming the parameter: NaN/inf or wrong shape, negative or non-integer total,
    unknown metric or method, non-positive weights, ``total`` and ``upper`` both given, the
    trellis asked for a real problem or for more memory than allowed.
    """
    _check_options(metric, integer, method)
    y = _check_vector(cumulative_counts, "cumulative_counts")
    total = _check_count(total, "total")
    upper = _check_count(upper, "upper")
    if total is not None and upper is not None:
        raise ValueError("give either total (public N, c_K = N) or upper (c_K <= upper), not both")
    w = _check_weights(weights, y.size)
    if method == "trellis" and not integer:
        raise ValueError("method='trellis' solves the integer problem only (integer=True)")
    if trellis_max_bytes is None:
        trellis_max_bytes = TRELLIS_MAX_BYTES
    elif (isinstance(trellis_max_bytes, (bool, np.bool_))
          or not isinstance(trellis_max_bytes, Integral) or trellis_max_bytes <= 0):
        raise ValueError(f"trellis_max_bytes must be a positive integer, got {trellis_max_bytes!r}")

    bound: int | None
    if total is not None:  # c_K = N is fixed; the rest is the bounded problem on [0, N]
        free_y, free_w, bound = y[:-1], (None if w is None else w[:-1]), total
    else:
        free_y, free_w, bound = y, w, upper
    if method == "fast":
        free = _fast(free_y, free_w, bound, metric, integer)
    else:
        grid_max = bound if bound is not None else max(0, int(np.ceil(free_y.max())))
        free = _trellis(free_y, free_w, grid_max, metric, int(trellis_max_bytes))
    if total is None:
        return free
    return cast("_Counts", np.append(free, np.asarray(total, dtype=free.dtype)))  # free's dtype


def _histogram_counts(y: _F, w: _F, lam: float, metric: str, cap: float) -> _F:
    """Integer l1/l2: per bin, the number of unit slots t >= 1 whose marginal cost
    w_i (g(t - y_i) - g(t - 1 - y_i)) is <= lam (capped at ``cap``)."""
    mu = lam / w
    if metric == "l2":  # w (2 t - 1 - 2 y) <= lam
        n = np.floor((mu + 1.0) / 2.0 + y)
    else:  # w phi(t - y), phi(s) = |s| - |s - 1| in [-1, 1]
        n = np.where(mu < -1.0, 0.0, np.where(mu >= 1.0, cap, np.floor(y + (mu + 1.0) / 2.0)))
    return np.clip(n, 0.0, cap)


def _slot_cost(y: _F, w: _F, t: _F | float, metric: str) -> _F:
    return w * (_loss(metric, t - y) - _loss(metric, t - 1.0 - y))


def project_histogram(counts: ArrayLike, total: int | None = None,
                      metric: Literal["l2", "l1"] = "l2", integer: bool = True,
                      weights: ArrayLike | None = None) -> _Counts:
    """Closest non-negative (integer) histogram, summing to ``total`` when it is given.

    minimise sum_i w_i g(h_i - y_i) subject to h_i >= 0 (integer when ``integer``) and
    sum_i h_i = N (when ``total`` = N is given); g = d^2 ("l2") or ``|d|`` ("l1").

    Method (exact). Integer: the objective is separable convex, so it is the sum of the
    marginal costs of the chosen unit "slots" (slot t of bin i costs w_i (g(t - y_i) -
    g(t - 1 - y_i)), non-decreasing in t); the optimum takes the N cheapest slots overall
    (a greedy resource allocation, e.g. Hochbaum 1994). The N-th cheapest slot value lambda is
    found by bisection on the count of slots <= lambda (O(K) per step, ~60-1100 steps to float
    resolution), ties at lambda are filled in bin order. Real l2: h_i = max(0, y_i + lambda /
    (2 w_i)) (weighted simplex projection), lambda by bisection then solved exactly on the
    support. Real l1: move every negative y_i to 0, then remove the excess (or add the
    shortfall) at the bins of smallest weight (spread proportionally / equally on ties).
    Without ``total``: h = max(0, round(y)) (integer) or max(0, y).

    Parameters: counts (K,) finite reals; total: non-negative int or None; metric, integer,
    weights as in :func:`project_cdf`. Returns int64 (integer) or float64, shape (K,).
    Projections are biased (see the module docstring); real l2 never increases the weighted
    l2 error against a true histogram with the same total.
    """
    _check_options(metric, integer)
    y = _check_vector(counts, "counts")
    total = _check_count(total, "total")
    w = _check_weights(weights, y.size)
    ones = np.ones_like(y) if w is None else w
    if total is None:
        return (np.maximum(np.rint(y), 0.0).astype(np.int64) if integer
                else np.maximum(y, 0.0))
    if total == 0:
        return np.zeros(y.size, dtype=np.int64) if integer else np.zeros(y.size)
    n = float(total)
    if integer:
        lo = float(np.min(_slot_cost(y, ones, 1.0, metric))) - 1.0  # no slot <= lo
        hi = float(np.max(_slot_cost(y, ones, n, metric)))  # >= N slots in every bin
        step = 1.0 + abs(hi)
        while _histogram_counts(y, ones, hi, metric, n).sum() < n:  # float rounding in floor
            hi += step
            step *= 2.0
        for _ in range(2000):  # bisection to float resolution (count(lo) < N <= count(hi))
            mid = 0.5 * (lo + hi)
            if not lo < mid < hi:
                break
            if _histogram_counts(y, ones, mid, metric, n).sum() >= n:
                hi = mid
            else:
                lo = mid
        h = _histogram_counts(y, ones, lo, metric, n)
        extra = _histogram_counts(y, ones, hi, metric, n) - h  # slots with cost in (lo, hi]
        need = n - h.sum()
        before = np.cumsum(extra) - extra
        h += np.clip(need - before, 0.0, extra)
        return h.astype(np.int64)
    if metric == "l2":
        inv = 1.0 / ones
        lo, hi = -2.0 * float(np.max(y * ones)) - 1.0, 2.0 * float(np.max((n - y) * ones)) + 1.0
        for _ in range(2000):
            mid = 0.5 * (lo + hi)
            if not lo < mid < hi:
                break
            if np.maximum(y + 0.5 * mid * inv, 0.0).sum() >= n:
                hi = mid
            else:
                lo = mid
        support = y + 0.5 * hi * inv > 0.0
        lam = 2.0 * (n - y[support].sum()) / inv[support].sum()  # exact on the support
        return np.where(support, np.maximum(y + 0.5 * lam * inv, 0.0), 0.0)
    h = np.maximum(y, 0.0)
    excess = h.sum() - n
    if excess < 0:  # add the shortfall at the cheapest bins (cost w_i per unit)
        cheapest = ones == ones.min()
        return h + np.where(cheapest, -excess / cheapest.sum(), 0.0)
    # remove the excess from the cheapest bins first (cost w_i per unit), equal weights together
    order = np.argsort(ones, kind="stable")
    ws, hs = ones[order], h[order]
    starts = np.flatnonzero(np.concatenate(([True], ws[1:] != ws[:-1])))
    cap = np.add.reduceat(hs, starts)
    done_before = np.cumsum(cap) - cap
    with np.errstate(over="ignore"):  # a tiny cap gives +inf, clipped to 1 (bin emptied)
        frac = np.clip((excess - done_before) / np.where(cap > 0, cap, 1.0), 0.0, 1.0)
    frac = np.where(cap > 0, frac, 0.0)
    out = np.empty_like(h)
    out[order] = hs * (1.0 - np.repeat(frac, np.diff(np.append(starts, ws.size))))
    return out


def project_tree(histogram_estimate: ArrayLike, strategy: Strategy, total: int | None = None,
                 metric: Literal["l2", "l1"] = "l2", integer: bool = True,
                 weights: ArrayLike | None = None) -> _Counts:
    """Consistent node counts of a strategy: ``strategy.apply(project_histogram(...))``.

    Every consistent set of node counts (non-negative integers, children summing to their
    parent, root = N) is A h for a consistent histogram h, so the leaf projection followed by
    aggregation is consistent by construction and exact *in the leaf metric* (the metric of
    :func:`project_histogram`). It is not the projection in the node metric
    sum_v (A h - t_v)^2 / var_v: that objective equals (h - x_hat)' A'V^-1 A (h - x_hat) + const
    (x_hat the BLUE), a non-separable quadratic in h, so neither the threshold theorem nor the
    greedy applies; its real version is a dense QP and its integer version an integer least
    squares problem, with no exact O(K) method. Feed it the BLUE histogram (``dp.blue``), which
    is already linearly consistent, with weights 1 / Var(x_hat_i) if desired.

    Returns int64 (integer) or float64 node counts, shape (strategy.n_rows,), in row order.
    """
    if not hasattr(strategy, "apply") or not hasattr(strategy, "n_bins"):
        raise ValueError(f"strategy must be a dptree_opt Strategy, got {type(strategy).__name__}")
    h = project_histogram(histogram_estimate, total, metric, integer, weights)
    if h.size != strategy.n_bins:
        raise ValueError(f"histogram_estimate has {h.size} bins, strategy has {strategy.n_bins}")
    nodes = np.asarray(strategy.apply(h.astype(np.float64)))
    return np.rint(nodes).astype(np.int64) if integer else nodes
