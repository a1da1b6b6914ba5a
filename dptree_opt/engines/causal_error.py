"""Exact error of the causal BLUE (each query from the rows complete when it is answered).

Definitions, identification and the estimator: :mod:`dptree_opt.engines.causal`. A query
that is not identified causally raises ValueError (naming the query and its step), as the
offline engine does for rank-deficient strategies. Paths:

Level-uniform trees, prefix workload (O(K) per query, O(h) total)
-----------------------------------------------------------------
The rows complete at step t are the nodes inside [0, t): the subtrees of the maximal
complete nodes, d_l(t) = (t // w_l) mod k_l of them at level l (the mixed-radix digits of t;
the root at t = K). The subtrees are disjoint in rows and in columns and the noise is
independent, so the causal GLS is a sum of independent sub-problems and the BLUE of C_t is
the sum of the maximal nodes' from-below estimates t^- (the BLUE of a node count from its own
subtree). By induction t^- is the inverse-variance combination of the node's measurement
(v_l) and of the sum of its k_(l+1) children's t^- (independent, variance k_(l+1) F_(l+1)):
a Kalman update of the children's sum by a scalar measurement of the same quantity
([HON] eq. (10)). Hence, per level (root first, 1/inf = 0, 1/0 = inf),

    F_h = v_h,   F_l = 1 / (1/v_l + 1/(k_(l+1) F_(l+1))),
    Var_t = sum_l d_l(t) F_l,          sum_(t=1..K) Var_t = F_0 + (K/2) sum_(l>=1) (k_l - 1) F_l

(each digit value j < k_l occurs K / k_l times over t < K; d_l(K) = 0 for l >= 1 and the
root, d_0(K) = 1, enters only the last prefix, which is the offline BLUE of N). F_l = inf (a
count that no row of its subtree determines, e.g. unmeasured leaves) with d_l(t) > 0 means
C_t is not identified. Per query: d_l(t) depends on t mod w_(l-1) only, so the table is built
on [0, w_(l-1)) and tiled k_l times going up, O(sum_l w_(l-1)) = O(K) (as the offline
``error.tree._prefix_per_query``).

Level-uniform trees, other intervals (identity, total, ranges, all ranges)
--------------------------------------------------------------------------
A range [lo, t) is the sum of the maximal nodes of [0, t) that lie inside it (from-below
estimates, F_l each) plus, when lo falls strictly inside a maximal level-l node, the BLUE of
the suffix [r, w_l) (r = lo mod w_l) of that node's subtree alone: a level-uniform tree with
branching (k_(l+1), .., k_h) and variances (v_l, .., v_h), whose exact range variance is the
offline Haar formula of :mod:`dptree_opt.engines.tree_error` (by mirror symmetry the suffix of length
w_l - r has the variance of the subtree's prefix of that length: one O(w_l) table per level,
O(K) in all). O(h) per query after the tables.
The all-range total has a closed form: for each t the ranges [a, t) starting in a maximal
node u contribute F_u + S_(l_u) + w_u (sum of F over the maximal nodes after u), where
S_l = sum_(r=1..w_l-1) Var(suffix r) = (offline prefix total of the level-l subtree) - F_l
(the tree is mirror-symmetric: suffixes and prefixes have the same variances). Summing the
digits over t (sum d_l = K (k_l - 1)/2, sum d_l (d_l - 1)/2 = (K / w_(l-1)) w_l k(k-1)(k-2)/6,
sum d_l P_l with P_l = t - t mod w_(l-1) the start of the level-l maximal nodes) gives O(h^2).
If a subtree does not identify its own histogram (some suffixes may still be identified) the
dense path decides (n <= MAX_CAUSAL_DENSE_BINS).

Interval (laminar) strategies, prefix workload (O(rows))
--------------------------------------------------------
In cumulative coordinates the rows are edges (lo, hi) of a resistor network with
conductances 1 / v (``estimation.laminar``), and Var(C_t) is the effective resistance between
the points 0 and t in the sub-network of complete edges (hi <= t). The maximal complete nodes
(hi_v <= t < hi_parent(v)) are disjoint and connect to the rest only at their end points, so
if they tile [0, t) they are in series: Var_t = sum over them of 1 / g_v, g_v the node's
effective conductance (bottom-up series/parallel reduction = the from-below pass); a gap
leaves t disconnected from 0 (not identified). Node v enters the t in [hi_v, hi_parent): one
difference array. Truncated (padded) trees, ragged hierarchies, per-node budgets.

Lower-triangular cores and everything else
------------------------------------------
Square lower-triangular cores (Toeplitz, square-root factorisation, histogram, prefix sums):
the offline error of the restricted core before n, of the whole mechanism at n (proof in
:mod:`dptree_opt.engines.causal`), so the structured offline engines apply. Otherwise the
dense filter :class:`dptree_opt.engines.causal.DenseCausal` (n <= 4096), queries answered
at step n by the offline engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .. import workloads
from . import registry
from .base import Capability, Engine
from .causal import (INTERVAL_WORKLOADS, MAX_CAUSAL_DENSE_BINS, check_tree_prefixes_identified,
                     dense_causal, from_below_variances, maximal_nodes, not_identified,
                     query_intervals, tree_widths, triangular_causal_answers,
                     triangular_restriction)
from .registry import Declined
from .laminar import laminar_model
from .honaker import tree_parameters
from ..limits import check_memory
from ..mechanism import Mechanism
from ..workloads import Workload
from . import tree_error as tree

__all__ = ["TriangularEngine", "tree_causal_error", "triangular_causal_error",
           "dense_causal_error", "tree_causal_prefix_variances", "tree_causal_range_variances",
           "tree_causal_all_range_total", "laminar_causal_prefix_variances"]

_QUERY_CHUNK = 1 << 18


class _SubtreeNotIdentified(ValueError):
    """A subtree does not identify its own histogram: the structured range formula is not
    available (the dense path decides query by query)."""


def tree_causal_prefix_variances(branching: Sequence[int], level_variances: ArrayLike,
                                 per_query: bool = True) -> float | npt.NDArray[np.float64]:
    """Causal BLUE variance of every prefix C_t, t = 1..K (shape (K,)), or their sum, on a
    level-uniform tree: Var_t = sum_l d_l(t) F_l, F_l of [HON] eq. (10) (module docstring;
    docs/math.md section 9). O(K) per query, O(h) total; ValueError if some prefix is not
    identified."""
    ks, _, v = tree.check_tree(branching, level_variances)
    F = from_below_variances(ks, v)
    check_tree_prefixes_identified(ks, F)
    w = tree_widths(ks)
    K = int(w[0])
    if not per_query:
        return float(F[0] + 0.5 * K * sum((k - 1) * F[lvl] for lvl, k in
                                          enumerate(ks, start=1) if k >= 2))
    check_memory(24 * K, f"the causal variances of {K} prefixes", "use fewer bins, or "
                 "per_query=False (their sum in O(h))")
    acc = np.zeros(K)
    for lvl in range(len(ks), 0, -1):  # acc[:W] = sum of the levels >= lvl as a function of t mod W
        k = ks[lvl - 1]
        if k == 1:
            continue
        W, wl = int(w[lvl - 1]), int(w[lvl])
        block = acc[:W].reshape(k, wl)
        block[1:] = block[0]
        block += (np.arange(k) * F[lvl])[:, None]
    out = np.empty(K)
    out[:-1] = acc[1:]
    out[-1] = F[0]
    return out


def _suffix_table(ks: Sequence[int], v: npt.NDArray[np.float64], lvl: int) -> npt.NDArray[np.float64]:
    """Var of the suffixes [r, w_l), r = 0..w_l - 1, of a level-l subtree alone: by the
    tree's mirror symmetry the offline prefixes of length w_l - r of that subtree
    (``error.tree`` per-query prefix, O(w_l))."""
    try:
        return tree.blue_error(ks[lvl:], v[lvl:], "prefix", per_query=True)[::-1]
    except ValueError as exc:
        raise _SubtreeNotIdentified(str(exc)) from None


def tree_causal_range_variances(branching: Sequence[int], level_variances: ArrayLike,
                                lo: ArrayLike, hi: ArrayLike) -> npt.NDArray[np.float64]:
    """Causal BLUE variance of the ranges [lo, hi) (answered at step hi) on a level-uniform
    tree: full maximal nodes (F_l, [HON] eq. (10)) plus the straddled node's suffix (offline
    subtree variance, :func:`dptree_opt.engines.tree_error.blue_error`; module docstring). O(K)
    tables, then O(h) per range. ValueError unless 0 <= lo <= hi <= K (integers, 1-D)."""
    ks, w, v = tree.check_tree(branching, level_variances)
    F = from_below_variances(ks, v)
    try:
        lo_f, hi_f = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("lo and hi must be arrays of integers") from None
    if lo_f.ndim != 1 or lo_f.shape != hi_f.shape:
        raise ValueError(f"lo and hi must be 1-D arrays of one shape, got {lo_f.shape} and "
                         f"{hi_f.shape}")
    with np.errstate(invalid="ignore"):  # NaN / inf: refused below
        lo, hi = lo_f.astype(np.int64), hi_f.astype(np.int64)
    if (np.any(lo != lo_f) or np.any(hi != hi_f) or np.any(lo < 0) or np.any(hi > w[0])
            or np.any(lo > hi)):
        raise ValueError(f"ranges [lo, hi) must be integers with 0 <= lo <= hi <= K = {w[0]}")
    out = np.zeros(lo.size)
    tables = {}
    for c0 in range(0, lo.size, _QUERY_CHUNK):
        lc, hc = lo[c0:c0 + _QUERY_CHUNK], hi[c0:c0 + _QUERY_CHUNK]
        var = out[c0:c0 + _QUERY_CHUNK]
        for lvl, _, g1, gs, straddle, r in maximal_nodes(ks, lc, hc):
            nfull = g1 - gs
            if np.isfinite(F[lvl]):
                var += nfull * F[lvl]
            elif np.any(nfull > 0):
                j = int(np.flatnonzero(nfull > 0)[0])
                raise not_identified(c0 + j, int(lc[j]), int(hc[j]), "a maximal complete "
                                     "node's count is not determined by its subtree")
            if straddle.any():
                if lvl not in tables:
                    tables[lvl] = _suffix_table(ks, v, lvl)
                var[straddle] += tables[lvl][r[straddle]]
    return out


def tree_causal_all_range_total(branching: Sequence[int], level_variances: ArrayLike) -> float:
    """Sum of the causal variances of all K (K + 1) / 2 ranges on a level-uniform tree, O(h^2)
    (closed form over the mixed-radix digits of t with F_l of [HON] eq. (10) and the offline
    subtree prefix totals of :func:`dptree_opt.engines.tree_error.blue_error`; module docstring)."""
    ks, w, v = tree.check_tree(branching, level_variances)
    F = from_below_variances(ks, v)
    check_tree_prefixes_identified(ks, F)  # every level with digits > 0 must be identified
    K = w[0]

    def s_level(lvl: int) -> float:  # sum over r = 1..w_l - 1 of the suffix variances of a level-l subtree
        if w[lvl] == 1:
            return 0.0
        try:
            return tree.blue_error(ks[lvl:], v[lvl:], "prefix") - F[lvl]
        except ValueError as exc:
            raise _SubtreeNotIdentified(str(exc)) from None

    total = F[0] + s_level(0)
    for lvl in range(1, len(ks) + 1):
        k = ks[lvl - 1]
        if k == 1:
            continue
        W, wl = w[lvl - 1], w[lvl]
        c = K // W  # parents of width W
        total += (F[lvl] + s_level(lvl)) * K * (k - 1) / 2.0
        total += F[lvl] * W * wl * k * (k - 1) / 2.0 * c * (c - 1) / 2.0  # sum d_l P_l F_l
        total += wl * F[lvl] * c * wl * k * (k - 1) * (k - 2) / 6.0  # w_l F_l sum d(d-1)/2
    return float(total)


def laminar_causal_prefix_variances(mechanism: Mechanism) -> np.ndarray:
    """Causal variance of every prefix C_t (t = 1..K) on an interval (laminar) strategy:
    the series sum of 1 / g_v over the maximal complete nodes of [0, t), g_v the effective
    conductances of :func:`dptree_opt.engines.laminar.laminar_model` (Honaker's
    from-below pass as series / parallel reduction; module docstring). O(rows). ValueError
    for the first prefix that is not identified or a strategy that is not laminar."""
    lam = laminar_model(mechanism)
    K = mechanism.n_bins
    hi_v = np.asarray(lam.hi, dtype=np.int64)
    lo_v = np.asarray(lam.lo, dtype=np.int64)
    par = np.asarray(lam.parent, dtype=np.int64)
    h_par = np.where(par >= 0, hi_v[np.maximum(par, 0)], K + 1)
    with np.errstate(divide="ignore"):
        res = 1.0 / np.asarray(lam.cond, dtype=float)
    fin = np.isfinite(res)

    def sweep(weights: npt.NDArray[np.float64], mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        d = (np.bincount(hi_v[mask], weights[mask], minlength=K + 2)
             - np.bincount(h_par[mask], weights[mask], minlength=K + 2))
        return np.cumsum(d)[1:K + 1]

    var = sweep(res, fin)
    n_inf = sweep(np.ones(res.size), ~fin)
    cover = sweep((hi_v - lo_v).astype(float), np.ones(res.size, bool))
    bad = (n_inf > 0.5) | (np.abs(cover - np.arange(1, K + 1)) > 0.5)
    if lam.root_exact:  # the public total: C_K = N exactly
        var[-1], bad[-1] = 0.0, False
    if bad.any():
        t = int(np.flatnonzero(bad)[0]) + 1
        raise not_identified(t - 1, 0, t, "the maximal complete rows do not determine it")
    return np.maximum(var, 0.0)


# ------------------------------------------------------------------------------- dispatch
def _offline(workload: Workload, mechanism: Mechanism, per_query: bool,
             dense: bool = False) -> float | npt.NDArray[np.float64]:
    """The offline BLUE error, from the registry (``dense``: the generic engine only)."""
    if per_query:
        return registry.run("per_query", mechanism, workload, "blue", generic_only=dense)
    return registry.run("error", mechanism, workload, "blue", generic_only=dense)


def _last_step_ranges(workload: Workload, lo: npt.NDArray[np.int64] | None = None,
                      hi: npt.NDArray[np.int64] | None = None) -> Workload | None:
    """The queries answered at step n (hi == n) as a ranges workload, in workload order, or
    None if there are none (all_range: the n ranges [a, n), not listed)."""
    n = workload.n_bins
    if workload.kind == "all_range":
        a = np.arange(n)
        return workloads.ranges(n, np.column_stack([a, np.full(n, n - 1)]))
    if lo is None or hi is None:
        raise ValueError("lo, hi: the query ranges are needed for this workload")
    last = hi == n
    if not last.any():
        return None
    return workloads.ranges(n, np.column_stack([lo[last], hi[last] - 1]))


def triangular_causal_error(workload: Workload, mechanism: Mechanism, core: Mechanism,
                            per_query: bool, dense: bool = False) -> float | npt.NDArray[np.float64]:
    """Causal error from a lower-triangular core (``causal.triangular_restriction``): the
    offline error of the core before n, of the mechanism at n."""
    if core is mechanism:
        return _offline(workload, mechanism, per_query, dense)
    lo = hi = None
    if workload.kind != "all_range" or per_query:
        lo, hi = query_intervals(workload)
    last_wl = _last_step_ranges(workload, lo, hi)
    if per_query:
        var = np.array(_offline(workload, core, True, dense), dtype=float)
        if last_wl is not None:
            var[hi == workload.n_bins] = _offline(last_wl, mechanism, True, dense)
        return var
    total = _offline(workload, core, False, dense)
    if last_wl is not None:
        total += _offline(last_wl, mechanism, False, dense) - _offline(last_wl, core, False,
                                                                        dense)
    return float(total)


def dense_causal_error(workload: Workload, mechanism: Mechanism, per_query: bool,
                       dense: bool = False) -> float | npt.NDArray[np.float64]:
    """Causal error by the dense filter (n <= MAX_CAUSAL_DENSE_BINS); the queries answered
    at n from the offline BLUE."""
    lo, hi = query_intervals(workload)
    var, _ = dense_causal(mechanism).run(lo, hi)
    last_wl = _last_step_ranges(workload, lo, hi)
    if last_wl is not None:
        var[hi == workload.n_bins] = _offline(last_wl, mechanism, True, dense)
    return var if per_query else float(var.sum())


def tree_causal_error(workload: Workload, mechanism: Mechanism,
                      per_query: bool) -> float | npt.NDArray[np.float64]:
    """Causal error on a level-uniform tree: prefix O(K), ranges O(h) each, the all-range
    total O(h^2). Declined (the dense filter decides) when a subtree does not identify its
    own histogram and n is small enough; ValueError when it is not."""
    try:
        return _tree_error(workload, mechanism, per_query)
    except _SubtreeNotIdentified as exc:
        if mechanism.n_bins > MAX_CAUSAL_DENSE_BINS:
            raise ValueError(f"a subtree of the tree does not identify its own histogram "
                             f"({exc}); the dense causal path decides query by query but is "
                             f"refused for {mechanism.n_bins} > {MAX_CAUSAL_DENSE_BINS} "
                             "bins") from None
        raise Declined(str(exc)) from None


def _tree_error(workload: Workload, mechanism: Mechanism, per_query: bool) -> float | npt.NDArray[np.float64]:
    ks, v = tree_parameters(mechanism)
    kind = workload.kind
    if kind == "prefix":
        return tree_causal_prefix_variances(ks, v, per_query=per_query)
    if kind == "all_range" and not per_query:
        return tree_causal_all_range_total(ks, v)
    if kind == "all_range" and mechanism.n_bins > tree.MAX_ALL_RANGE_PER_QUERY_K:
        raise ValueError(f"per_query=True with workload='all_range' needs K <= "
                         f"{tree.MAX_ALL_RANGE_PER_QUERY_K}, got K = {mechanism.n_bins}; the "
                         "total (per_query=False) works at any K")
    lo, hi = query_intervals(workload)
    var = tree_causal_range_variances(ks, v, lo, hi)
    return var if per_query else float(var.sum())


class TriangularEngine(Engine):
    """Strategies with a square lower-triangular core (one measured row completes at every
    step: Toeplitz, the square root factorisation, BLT, prefix sums, banded): the causal BLUE
    of the queries answered before n is the offline BLUE of the core, so the offline engines
    serve it."""

    name = "triangular"
    structure = "a lower-triangular core (one row completes per step)"
    capabilities = (
        Capability("estimate", "causal", INTERVAL_WORKLOADS, "the core's offline BLUE"),
        Capability("error", "causal", INTERVAL_WORKLOADS, "the core's offline error"),
        Capability("per_query", "causal", INTERVAL_WORKLOADS, "the core's offline error"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return triangular_restriction(mechanism) is not None

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        core = triangular_restriction(mechanism)
        if workload is None or core is None:
            raise ValueError("workload: the causal estimate answers a workload")
        return triangular_causal_answers(mechanism, core, y, workload)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        core = triangular_restriction(mechanism)
        assert core is not None  # claims(): a triangular core
        return triangular_causal_error(workload, mechanism, core, per_query, dense)
