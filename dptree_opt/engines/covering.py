"""The [RTS] covering estimator of the cumulative counts (the papers' direct sums).

C_hat_t (t = 1..K, the first t bins) is the sum of the noisy answers of the greedy
breadth-first covering of [0, t) ([RTS] Sec. IV, Lemma IV.1): the maximal measured rows
contained in [0, t). For a laminar family of ranges, row r belongs to that covering exactly
when hi_r <= t < hi_{parent(r)} (parent = the nearest *measured* ancestor; a forest root has
hi_parent = infinity). So every row adds its answer to a contiguous range of t: one sparse
difference matrix and a cumulative sum give all K estimates and their variances in
O(rows + K), for any number of trials at once.

For ``histogram`` this is the cumulative sum of the noisy bins; for ``prefix_sums`` the
measured prefixes; C_K is N when the total is public (the exact total row covers [0, K)).

Other workloads are answered from these prefixes (a range [lo, hi) by C_hi - C_lo, C_0 = 0,
as a user differencing the released CDF would): row r enters C_hi - C_lo iff exactly one of
lo, hi lies in its prefix range I_r = [start_r, stop_r), so Var(bin i) is the sum of v_r
over rows with start_r = i + 1 or stop_r = i + 1, and the all-range total over the first K
bins is sum_r v_r n_r (K + 1 - n_r), n_r = |I_r & [0, K]| (:func:`covering_moments`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
import scipy.sparse as sp

from ..mechanism import Mechanism
from ..strategies import IntervalStrategy, LevelUniformTree

__all__ = ["covering_range_variances", "tree_covering_range_variances", "all_levels_measured",
           "covering_cdf", "covering_variances", "covering_operator", "covering_moments",
           "covering_covariance", "MAX_COVERING_DENSE_BINS"]

MAX_COVERING_DENSE_BINS = 8192  # covering_covariance: dense (K, K)


def covering_operator(mechanism: Mechanism) -> sp.csr_matrix:
    """Sparse (K + 1, rows) difference matrix D: C_hat = cumsum(D @ y)[1:]; O(rows)."""
    strat = mechanism.released
    if not isinstance(strat, IntervalStrategy):
        raise ValueError("the covering estimator needs a tree-like strategy (rows are nested or "
                         f"disjoint bin ranges); {strat.name!r} is not. Use the BLUE instead.")
    k = strat.n_bins
    measured = np.isfinite(mechanism.variances)
    parent = strat.parent
    up = parent.copy()
    need = (up >= 0) & ~measured[np.maximum(up, 0)]
    while need.any():  # climb past unmeasured ancestors: at most depth iterations
        up[need] = parent[up[need]]
        need = (up >= 0) & ~measured[np.maximum(up, 0)]
    rows = np.flatnonzero(measured)
    start = strat.hi[rows]
    stop = np.where(up[rows] >= 0, strat.hi[np.maximum(up[rows], 0)], k + 1)
    keep = start < stop
    rows, start, stop = rows[keep], start[keep], np.minimum(stop[keep], k + 1)
    ones = np.ones(rows.size)
    d = sp.csr_matrix(
        (np.concatenate([ones, -ones]), (np.concatenate([start, stop]), np.concatenate([rows, rows]))),
        shape=(k + 2, strat.n_rows))[: k + 1]
    # every prefix must be exactly tiled by its covering
    widths = np.cumsum(d @ (strat.hi - strat.lo).astype(float))[1:]
    if not np.array_equal(widths, np.arange(1, k + 1, dtype=float)):
        t = int(np.flatnonzero(widths != np.arange(1, k + 1))[0]) + 1
        raise ValueError(f"the covering estimator is undefined: the prefix of {t} bins is not a "
                         "union of measured rows (are the leaves measured?)")
    return d


def covering_cdf(mechanism: Mechanism, y: ArrayLike) -> npt.NDArray[np.float64]:
    """[RTS] covering estimates of the K cumulative counts from answers y.

    y: shape (rows,) or (trials, rows) -> returns (K,) or (trials, K)."""
    d = covering_operator(mechanism)
    y = np.asarray(y, dtype=float)
    if y.shape[-1] != d.shape[1]:
        raise ValueError(f"y must have {d.shape[1]} entries per trial, got {y.shape[-1]}")
    used = np.asarray(abs(d).sum(axis=0)).ravel() > 0
    if not np.all(np.isfinite(y[..., used])):
        raise ValueError("y has NaN or infinite values on rows the covering uses")
    y = np.where(used, y, 0.0)
    return np.cumsum(d @ y.T, axis=0)[1:].T


def covering_variances(mechanism: Mechanism) -> np.ndarray:
    """Exact variance of each covering estimate C_hat_t, t = 1..K (independent noise:
    the sum of the variances of the covering rows; [RTS] Thm IV.1 proof, eq. (6))."""
    d = covering_operator(mechanism)
    v = np.where(np.asarray(abs(d).sum(axis=0)).ravel() > 0, mechanism.variances, 0.0)
    return np.cumsum(d @ v)[1:]


def _prefix_ranges(mechanism: Mechanism) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                                 npt.NDArray[np.float64]]:
    """(start, stop, variance) of every row the covering uses: row r is in the covering of
    C_t exactly for t in [start_r, stop_r) (the +1 and -1 of its column of D)."""
    d = covering_operator(mechanism).tocsc()
    var = np.asarray(mechanism.variances, dtype=float)
    used = np.flatnonzero(np.diff(d.indptr) > 0)
    col_of = np.repeat(np.arange(d.shape[1]), np.diff(d.indptr))
    pos = d.data > 0
    start = np.zeros(d.shape[1], np.int64)
    stop = np.full(d.shape[1], d.shape[0], np.int64)  # no -1: runs to t = K
    start[col_of[pos]] = d.indices[pos]
    stop[col_of[~pos]] = d.indices[~pos]
    return start[used], stop[used], var[used]


def covering_moments(mechanism: Mechanism, n_bins: int | None = None) -> dict:
    """Exact variances of the covering estimator's answers on the first ``n_bins`` bins
    (default K'): ``"identity"`` (Var of each bin C_(i+1) - C_i, shape (K,)) and
    ``"all_range_total"`` (sum over the K (K + 1) / 2 ranges). O(rows + K). Module docstring."""
    start, stop, v = _prefix_ranges(mechanism)
    kp = mechanism.released.n_bins
    K = kp if n_bins is None else int(n_bins)
    # C_t for t = 1..K; point t = 0 is C_0 = 0 (no row)
    ident = (np.bincount(np.minimum(start, kp + 1), v, minlength=kp + 2)[1:K + 1]
             + np.bincount(np.minimum(stop, kp + 1), v, minlength=kp + 2)[1:K + 1])
    n_r = np.clip(np.minimum(stop, K + 1) - start, 0, None).astype(float)
    total = float(np.sum(v * n_r * (K + 1 - n_r)))
    return {"identity": ident, "all_range_total": total}


def covering_covariance(mechanism: Mechanism) -> np.ndarray:
    """Dense (K', K') covariance of the bins implied by the covering prefixes (x_hat =
    diff(C_hat)); K' <= MAX_COVERING_DENSE_BINS. For per-query errors of any workload."""
    kp = mechanism.released.n_bins
    if kp > MAX_COVERING_DENSE_BINS:
        raise ValueError(f"covering_covariance is dense: refused for {kp} > "
                         f"{MAX_COVERING_DENSE_BINS} bins")
    d = covering_operator(mechanism)
    v = np.where(np.asarray(abs(d).sum(axis=0)).ravel() > 0, mechanism.variances, 0.0)
    # bins: x_hat_i = C_(i+1) - C_i = (D y)_(i+1) row of the difference matrix
    b = d[1:kp + 1]
    return np.asarray((b @ sp.diags(v) @ b.T).todense())


def covering_range_variances(mechanism: Mechanism, lo: ArrayLike,
                             hi: ArrayLike) -> npt.NDArray[np.float64]:
    """Var(C_hi - C_lo) of the covering sums for ranges [lo, hi) (C_0 = 0), from the sparse
    covering operator: O(nnz) per range, any interval strategy."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    d = covering_operator(mechanism)  # C_t = sum_{s <= t} (D y)_s, t = 1..K
    v = np.where(np.isfinite(mechanism.variances), mechanism.variances, 0.0)
    m = _cumsum_rows(d)
    diff = m[hi] - m[lo]  # row t of m is the covering of the first t bins (t = 0..K)
    return np.asarray(diff.multiply(diff) @ v).ravel()


def _cumsum_rows(d: sp.csr_matrix) -> sp.csr_matrix:
    """Row-wise cumulative sum of the covering difference matrix without densifying: column r
    holds +1 at row start_r and -1 at row stop_r (or nothing when stop_r is past the end), so
    its cumulative sum is the indicator of rows [start_r, stop_r). O(nnz of the result)."""
    coo = d.tocoo()
    n_rows, n_cols = d.shape
    starts = np.full(n_cols, -1, dtype=np.int64)
    stops = np.full(n_cols, n_rows, dtype=np.int64)
    pos = coo.data > 0
    starts[coo.col[pos]] = coo.row[pos]
    stops[coo.col[~pos]] = coo.row[~pos]
    used = starts >= 0
    starts, stops, cols = starts[used], stops[used], np.flatnonzero(used)
    lengths = stops - starts
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    rows = offsets + np.arange(int(lengths.sum()), dtype=np.int64)
    return sp.csr_matrix((np.ones(rows.size), (rows, np.repeat(cols, lengths))), shape=d.shape)


def all_levels_measured(mechanism: Mechanism) -> bool:
    """A level-uniform tree whose levels are all measured (finite variances)."""
    return (isinstance(mechanism.released, LevelUniformTree)
            and mechanism.row_budgets is None
            and all(np.isfinite(v) for v in mechanism.level_variances.values()))


def tree_covering_range_variances(mechanism: Mechanism, lo: np.ndarray,
                                   hi: np.ndarray) -> np.ndarray:
    """Var(C_hi - C_lo) of the covering sums on a fully measured level-uniform tree, O(h) each.

    The covering of [0, t) uses, at level l, the level-l nodes with indices in
    [floor(t / w_{l-1}) k_l, floor(t / w_l)) (the left siblings of the level-l ancestor of bin
    t, [RTS] Lemma IV.1; level 0: [0, floor(t / K))). Independent noise, so
    Var(C_hi - C_lo) = sum_l v_l (n_l(lo) + n_l(hi) - 2 shared_l), shared_l = the overlap of
    the two index ranges."""
    tree = mechanism.released
    if not isinstance(tree, LevelUniformTree):
        raise ValueError("mechanism: the O(h) covering variances need a level-uniform tree")
    var = np.zeros(lo.shape, dtype=np.float64)
    widths = tree.level_widths
    for lvl in range(tree.height + 1):
        v = mechanism.level_variances[lvl]
        if v == 0:
            continue
        w = int(widths[lvl])
        k = int(tree.branching[lvl - 1]) if lvl else 1
        parent_w = int(widths[lvl - 1]) if lvl else int(widths[0]) * 2  # root: no parent
        s_lo, e_lo = (lo // parent_w) * k, lo // w
        s_hi, e_hi = (hi // parent_w) * k, hi // w
        shared = np.maximum(0, np.minimum(e_lo, e_hi) - np.maximum(s_lo, s_hi))
        var += v * ((e_lo - s_lo) + (e_hi - s_hi) - 2 * shared)
    return var
