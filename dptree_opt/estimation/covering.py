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
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..mechanism import Mechanism
from ..strategies import IntervalStrategy

__all__ = ["covering_cdf", "covering_variances", "covering_operator"]


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


def covering_cdf(mechanism: Mechanism, y) -> np.ndarray:
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
