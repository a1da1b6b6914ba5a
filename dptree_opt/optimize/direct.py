"""The workload's own rows as a strategy (``optimize.best_mechanism``'s ``workload``
family): laminar (nested-or-disjoint) ranges as an interval strategy, other rows dense."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..strategies import IntervalStrategy, Strategy
from ..workloads import Workload

__all__ = ["laminar_strategy", "direct_rows", "MAX_DIRECT_ENTRIES", "MAX_STRUCTURED_DEPTH"]

MAX_DIRECT_ENTRIES = 1 << 22  # workload rows measured directly as a dense matrix: q x n floats
MAX_STRUCTURED_DEPTH = 256    # nested ranges: the bridge decomposition's exact error loops
#                               over depths (deeper ones need the dense GLS)


def laminar_strategy(n: int, lo: npt.NDArray[np.integer], hi: npt.NDArray[np.integer],
                     name: str) -> IntervalStrategy | None:
    """The distinct half-open ranges [lo, hi) as an interval strategy (one budget level),
    or None when two of them cross (not nested-or-disjoint). O(q log q + n) numpy.

    In preorder (lo ascending, longer first) a range's depth is the number of ranges
    covering its first bin, less itself and the shorter ones starting there; its parent is
    the last earlier range one level up. The result is checked (every range inside its
    parent, siblings disjoint), which holds exactly for laminar families. The smallest
    range over each bin is the last open/close event at or before it (closes first at a
    point, inner closes before outer ones, outer opens before inner ones)."""
    pairs = np.unique(np.stack([np.asarray(lo, np.int64), np.asarray(hi, np.int64)], axis=1),
                      axis=0)
    order = np.lexsort((-pairs[:, 1], pairs[:, 0]))
    lo, hi = pairs[order, 0], pairs[order, 1]
    m = lo.size
    idx = np.arange(m)
    cover = np.cumsum(np.bincount(lo, minlength=n + 1) - np.bincount(hi, minlength=n + 1))
    depth = cover[lo] - (np.searchsorted(lo, lo, side="right") - idx)
    if np.any(depth < 0):
        return None
    key = depth * (m + 1) + idx
    srt = np.argsort(key)
    pos = np.searchsorted(key[srt], (depth - 1) * (m + 1) + idx) - 1
    parent = np.where(depth > 0, srt[np.maximum(pos, 0)], -1)
    up = np.maximum(parent, 0)
    nested = (depth == 0) | ((pos >= 0) & (depth[up] == depth - 1) & (lo[up] <= lo)
                             & (hi <= hi[up]))
    sib = np.lexsort((idx, parent))
    crossing = (parent[sib][1:] == parent[sib][:-1]) & (hi[sib][:-1] > lo[sib][1:])
    if not nested.all() or crossing.any():
        return None
    at = np.concatenate([hi, lo])
    ev = np.lexsort((np.concatenate([-idx, idx]), np.repeat([0, 1], m), at))
    last = np.searchsorted(at[ev], np.arange(n), side="right") - 1
    bin_row = np.where(last >= 0, np.concatenate([parent, idx])[ev[np.maximum(last, 0)]], -1)
    rows = np.lexsort((idx, depth))              # level order, left to right
    rank = np.empty(m, dtype=np.int64)
    rank[rows] = idx
    par = parent[rows]
    return IntervalStrategy(lo[rows], hi[rows], np.where(par >= 0, rank[np.maximum(par, 0)], -1),
                            np.ones(m, dtype=np.int32), n_bins=n, depth=depth[rows],
                            bin_row=np.where(bin_row >= 0, rank[np.maximum(bin_row, 0)], -1),
                            name=name)


def direct_rows(w: Workload, name: str, max_dense_bins: int) -> Strategy | str:
    """The distinct rows of a 1-D workload as a strategy (a repeated query measured once):
    laminar ranges structured (:func:`laminar_strategy`), others dense (up to
    ``max_dense_bins`` bins and MAX_DIRECT_ENTRIES entries); a reason (str) when neither
    can be scored."""
    lo, hi = w.intervals()
    strat = laminar_strategy(w.n_bins, lo, hi, name)
    if strat is not None:
        if (w.n_bins > max_dense_bins and np.any(strat.lo > 0)
                and int(strat.depth.max()) >= MAX_STRUCTURED_DEPTH):
            return (f"its ranges nest {int(strat.depth.max()) + 1} deep: the structured "
                    f"error goes to depth {MAX_STRUCTURED_DEPTH} (prefix-like chains from "
                    f"bin 0 at any depth), the dense one to {max_dense_bins} bins")
        return strat
    if w.n_queries * w.n_bins > MAX_DIRECT_ENTRIES or w.n_bins > max_dense_bins:
        return (f"its ranges cross (not nested or disjoint) and the dense matrix is too large "
                f"({w.n_queries} x {w.n_bins}; dense scoring up to {max_dense_bins} bins)")
    return Strategy(np.unique(w.dense(), axis=0), name=name)   # each distinct range once
