"""Interval (laminar) strategies: the BLUE as a hierarchy of Gaussian bridges, O(K) numpy work.

Setting: the released strategy is an :class:`~dptree_opt.strategies.IntervalStrategy` (rows
are bin ranges, any two nested or disjoint: level-uniform or ragged trees, OpenDP's truncated
tree, hierarchies from networkx, the histogram, padded trees) with noisy, unmeasured
(variance inf) or duplicated rows, and at most the total released exactly (a public N).

In cumulative coordinates x_p = c_0 + .. + c_(p-1) (x_0 = 0, p = 0..K') a row [lo, hi)
measures x_hi - x_lo, so the information matrix is a weighted graph Laplacian on the points
and GLS is invariant under the change of coordinates (docs/math.md section 2). Nodes are the
distinct ranges (duplicates merged: weights add); a virtual root [0, K') with weight 0 is
added when the top level is not one range. For a node v = [a, b) the end points of its
children that lie strictly inside split it into a chain a = s_0 < s_1 < .. < s_m = b whose
segments are children or gaps.

Bottom-up (series / parallel reduction = Honaker 2015's from-below pass, generalised): a
node's effective conductance between its end points is g_v = w_v + 1 / R_v, R_v = sum of the
chain's segment resistances r = 1 / g_child (a gap has r = inf, then 1 / R_v = 0).

Top-down: given x_a, x_b the chain points are independent of everything outside v's subtree
(Markov property), and, with rho_j the resistance from a to s_j and sigma_j = R - rho_j,

    x_j = (1 - t_j) x_a + t_j x_b + beta_j,  t_j = rho_j / R,
    Cov(beta_j, beta_l) = rho_j sigma_l / R   (j <= l: a Brownian bridge in resistance time).

If the chain has gaps it splits: points before the first gap follow a Brownian motion from
a (t = 0, Cov = rho_min), points after the last gap one from b (t = 1, Cov = sigma_max), and
points between two gaps are not identifiable. The beta's of different nodes are independent,
so each chain point's variance, each child's end-point covariance and each bin's variance
Var(x_(j+1) - x_j) = (dt)^2 D_v + r (R - r) / R (D_v = Var(x_b - x_a), dt = r / R; stable,
no cancellation) follow by one pass per depth. The BLUE itself is the same two passes:
z_v = (w_v y_v + Z_v / R_v) / g_v bottom-up (Z_v = sum of the children's z), then
x_j = x_a + (z's up to s_j) + t_j (x_b - x_a - Z_v) top-down.

Every per-node formula is vectorised over all nodes of one depth (Python loops over depths
only). Checked against the dense GLS (tests/test_laminar.py). Used by
:mod:`dptree_opt.estimation.blue` and :mod:`dptree_opt.engines.interval`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeAlias, overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..mechanism import Mechanism
from ..strategies import IntervalStrategy

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"

__all__ = ["Laminar", "SegmentPlan", "laminar_model", "is_laminar_mechanism", "laminar_blue",
           "star_moments", "point_moments", "point_sum_variance", "range_variances",
           "has_noisy_leaves", "laminar_covariance", "MAX_DEPTH",
           "COVARIANCE_BLOCK"]

# The passes loop over depths in Python (each step vectorised over the depth's nodes); a
# hierarchy deeper than this uses the generic paths, except prefix sums (every range starts
# at bin 0: K nested ranges, closed form in star_moments).
MAX_DEPTH = 256


class SegmentPlan:
    """Runs [ptr[i], ptr[i+1]) of an axis of length E, for repeated segmented cumulative sums.

    Runs are grouped by length class (powers of two) into padded 2-D gathers (padding reads
    a zero appended at position E), so every sum is local to its run: no cancellation
    against a global cumulative sum. A gather is laid out (offset in the run, run), so the
    cumulative sum runs over the short axis with the runs contiguous (numpy adds whole rows;
    along a last axis of length 2-8 it is ~2x slower). O(E) per call."""

    def __init__(self, ptr: np.ndarray):
        ptr = np.asarray(ptr, dtype=np.int64)
        self.size = int(ptr[-1]) if ptr.size else 0
        starts, lengths = ptr[:-1], np.diff(ptr)
        keep = lengths > 0
        starts, lengths = starts[keep], lengths[keep]
        self.blocks = []
        if starts.size == 0:
            return
        cls = np.ceil(np.log2(lengths)).astype(np.int64)
        for c in np.flatnonzero(np.bincount(cls)):
            sel = cls == c
            st, ln = starts[sel], lengths[sel]
            offs = np.arange(1 << int(c))
            valid = offs[:, None] < ln[None, :]                      # (offset, run)
            fwd = np.where(valid, st[None, :] + offs[:, None], self.size)
            rev = np.where(valid, st[None, :] + ln[None, :] - 1 - offs[:, None], self.size)
            self.blocks.append((fwd, rev, valid, fwd[valid], rev[valid]))

    def cumsum(self, values: np.ndarray, reverse: bool = False) -> np.ndarray:
        """Inclusive cumulative sums of ``values`` (shape (..., E)) within each run (from the
        run's end if ``reverse``)."""
        values = np.asarray(values, dtype=float)
        lead = values.shape[:-1]
        ext = np.concatenate([values, np.zeros(lead + (1,))], axis=-1)
        out = np.zeros_like(values)
        for fwd, rev, valid, fwd_at, rev_at in self.blocks:
            g = ext[..., rev if reverse else fwd]                    # (..., offset, run)
            np.cumsum(g, axis=-2, out=g)
            out[..., rev_at if reverse else fwd_at] = g[..., valid]
        return out


@overload
def _unique_sorted(a: _I, return_inverse: Literal[False] = ...) -> _I: ...
@overload
def _unique_sorted(a: _I, return_inverse: Literal[True]) -> tuple[_I, _I]: ...
def _unique_sorted(a: _I, return_inverse: bool = False) -> _I | tuple[_I, _I]:
    """np.unique by sorting (numpy's hash-based unique is ~5x slower on 10^6 int64 keys)."""
    if not return_inverse:
        s = np.sort(a)
        keep = np.ones(s.size, bool)
        keep[1:] = s[1:] != s[:-1]
        return s[keep]
    order = np.argsort(a, kind="stable")
    s = a[order]
    keep = np.ones(s.size, bool)
    keep[1:] = s[1:] != s[:-1]
    inv = np.empty(a.size, np.int64)
    inv[order] = np.cumsum(keep) - 1
    return s[keep], inv


@dataclass(frozen=True, eq=False)
class Laminar:
    """The bridge decomposition of an interval strategy's BLUE (module docstring).

    Nodes are numbered by depth (root first); ``node_ptr[d]:node_ptr[d+1]`` are the nodes of
    the d-th depth. Entries (chain points) are sorted by node, then point:
    ``ent_ptr[v]:ent_ptr[v+1]`` is node v's chain s_0 < .. < s_m. Per entry e: ``seg_child``
    (the child covering [s_e, s_(e+1)), -1 for a gap or the chain's last entry), ``r``
    (that segment's resistance), ``t``, ``f``, ``g`` (Cov(beta_j, beta_l) = f_j g_l for
    j <= l in one run ``run_ptr``), ``mid`` (not identifiable), ``dt`` and ``dvar`` (the
    segment's Var(x_(e+1) - x_e) = dt^2 D_v + dvar). ``row_node`` maps released rows to
    nodes (-1 for exact rows), ``row_w`` their weights."""

    n_points: int
    lo: np.ndarray
    hi: np.ndarray
    w: np.ndarray
    parent: np.ndarray
    node_ptr: np.ndarray
    root_exact: bool
    cond: np.ndarray          # effective conductance g_v
    R: np.ndarray             # chain resistance R_v (inf with gaps)
    ent_ptr: np.ndarray
    ent_node: np.ndarray
    ent_pt: np.ndarray
    seg_child: np.ndarray
    r: np.ndarray
    t: np.ndarray
    f: np.ndarray
    g: np.ndarray
    mid: np.ndarray
    dt: np.ndarray
    dvar: np.ndarray
    run_ptr: np.ndarray
    row_node: np.ndarray
    row_w: np.ndarray
    exact_rows: np.ndarray
    plan: SegmentPlan         # runs = chains (ent_ptr)
    run_plan: SegmentPlan     # runs = covariance blocks (run_ptr)
    first: np.ndarray         # entry is its chain's a
    last: np.ndarray          # entry is its chain's b

    @property
    def n_nodes(self) -> int:
        """Number of nodes (distinct ranges, plus the virtual root if one was added)."""
        return self.lo.size

    def depth_slices(self) -> Iterator[tuple[slice, slice]]:
        """(node slice, entry slice) per depth, root first."""
        for d in range(self.node_ptr.size - 1):
            n0, n1 = int(self.node_ptr[d]), int(self.node_ptr[d + 1])
            yield slice(n0, n1), slice(int(self.ent_ptr[n0]), int(self.ent_ptr[n1]))


def is_laminar_mechanism(mechanism: Mechanism) -> bool:
    """Whether the bridge decomposition applies: an interval strategy, no exact row other
    than the total, and depth <= MAX_DEPTH."""
    if not isinstance(mechanism, Mechanism):
        return False
    strat = mechanism.released
    if not isinstance(strat, IntervalStrategy):
        return False
    var = np.asarray(mechanism.variances)
    exact = var == 0
    if np.any(exact & ~((strat.lo == 0) & (strat.hi == strat.n_bins))):
        return False
    return bool(strat.depth.size == 0 or int(strat.depth.max()) < MAX_DEPTH
                or np.all(strat.lo == 0))


def star_moments(mechanism: Mechanism) -> tuple[_F, sp.csr_matrix] | None:
    """Rows that all start at bin 0 (prefix sums): each measures one x_p directly, so the
    x_p are independent with Var(x_p) = 1 / (sum of the weights of the rows [0, p)) (0 for
    the exact total; inf if unmeasured). Returns (var of x_0..x_K', estimate matrix S with
    x_hat = y S': shape (K' + 1, rows)) or None when some row does not start at 0."""
    strat = _interval_strategy(mechanism)
    if not np.all(strat.lo == 0):
        return None
    kp = strat.n_bins
    var = np.asarray(mechanism.variances, dtype=float)
    hi = np.asarray(strat.hi, np.int64)
    noisy = np.isfinite(var) & (var > 0)
    w = np.where(noisy, 1.0 / np.where(noisy, var, 1.0), 0.0)
    W = np.bincount(hi, w, minlength=kp + 1)
    v = np.where(W > 0, 1.0 / np.where(W > 0, W, 1.0), np.inf)
    exact = var == 0
    coef = np.where(noisy, w / np.where(W[hi] > 0, W[hi], 1.0), 0.0)
    if np.any(exact):
        v[kp] = 0.0
        coef = np.where(hi == kp, 0.0, coef)
        first = np.flatnonzero(exact)[0]
        coef[first] = 1.0
    v[0] = 0.0
    S = sp.csr_matrix((coef, (hi, np.arange(hi.size))), shape=(kp + 1, hi.size))
    return v, S


_CACHE: "weakref.WeakKeyDictionary[Mechanism, Laminar]" = weakref.WeakKeyDictionary()


def _interval_strategy(mechanism: Mechanism) -> IntervalStrategy:
    """The mechanism's released strategy, which must be an interval strategy."""
    strat = mechanism.released
    if not isinstance(strat, IntervalStrategy):
        raise ValueError(f"an interval (laminar) strategy is needed, got {strat.name!r}")
    return strat


def laminar_model(mechanism: Mechanism) -> Laminar:
    """The bridge decomposition of ``mechanism`` (cached per mechanism); O(m + K) numpy work
    plus a loop over depths. Raises ValueError when the strategy is not laminar-eligible."""
    if not is_laminar_mechanism(mechanism):
        raise ValueError("the laminar (bridge) path needs an interval strategy with noisy or "
                         "unmeasured rows (only the total may be exact) and depth <= "
                         f"{MAX_DEPTH}")
    strat = _interval_strategy(mechanism)
    if int(strat.depth.max(initial=0)) >= MAX_DEPTH:
        raise ValueError(f"the hierarchy is deeper than {MAX_DEPTH} (use star_moments for "
                         "prefix sums)")
    hit = _CACHE.get(mechanism)
    if hit is None:
        hit = _build(strat, np.asarray(mechanism.variances, dtype=float))
        _CACHE[mechanism] = hit
    return hit


def laminar_model_of(strategy: IntervalStrategy, variances: ArrayLike) -> Laminar:
    """The bridge decomposition for an interval strategy with any per-row noise variances
    (shape (rows,); inf = unmeasured, 0 = exact, allowed for total rows only), without a
    Mechanism: for studies of per-row (per-node) noise allocations, whose privacy the caller
    accounts for. Not cached."""
    if not isinstance(strategy, IntervalStrategy):
        raise ValueError(f"strategy must be an IntervalStrategy, got {type(strategy).__name__}")
    var = np.asarray(variances, dtype=float)
    if var.shape != (strategy.n_rows,) or np.any(np.isnan(var)) or np.any(var < 0):
        raise ValueError(f"variances must be {strategy.n_rows} numbers >= 0 (inf allowed)")
    exact = var == 0
    if np.any(exact & ~((strategy.lo == 0) & (strategy.hi == strategy.n_bins))):
        raise ValueError("only total rows may be exact (variance 0)")
    if int(strategy.depth.max(initial=0)) >= MAX_DEPTH:
        raise ValueError(f"the hierarchy is deeper than {MAX_DEPTH}")
    return _build(strategy, var)


def _build(strat: IntervalStrategy, var: np.ndarray) -> Laminar:
    kp = int(strat.n_bins)
    P = kp + 1
    lo_r, hi_r = np.asarray(strat.lo, np.int64), np.asarray(strat.hi, np.int64)
    exact = var == 0
    noisy = np.isfinite(var) & (var > 0)
    w_row = np.where(noisy, 1.0 / np.where(noisy, var, 1.0), 0.0)
    # distinct ranges -> nodes; the outermost duplicate (least depth) gives the parent
    depth_r = np.asarray(strat.depth, np.int64)
    par_r = np.asarray(strat.parent, np.int64)
    pr = np.maximum(par_r, 0)
    # laminar: equal ranges are nested, so a duplicate is its own row's parent's range
    if not np.any((par_r >= 0) & (lo_r[pr] == lo_r) & (hi_r[pr] == hi_r)):
        inv = np.arange(lo_r.size)
        m = lo_r.size
        parent, depth, lo, hi = par_r.copy(), depth_r.copy(), lo_r, hi_r
    else:
        uniq, inv = _unique_sorted(lo_r * P + hi_r, return_inverse=True)
        m = uniq.size
        order = np.lexsort((depth_r, inv))
        head = np.ones(order.size, bool)
        head[1:] = inv[order][1:] != inv[order][:-1]
        rep = order[head]                    # rep[node] = its outermost row
        parent = np.where(par_r[rep] >= 0, inv[pr[rep]], -1)
        depth = depth_r[rep].copy()
        lo, hi = uniq // P, uniq % P
    w = np.bincount(inv, w_row, minlength=m)
    roots = np.flatnonzero(parent < 0)
    if not (roots.size == 1 and lo[roots[0]] == 0 and hi[roots[0]] == kp):
        # virtual root [0, K') with no measurement
        lo, hi, w = np.append(lo, 0), np.append(hi, kp), np.append(w, 0.0)
        parent = np.where(parent < 0, m, parent)
        parent = np.append(parent, -1)
        depth = np.append(depth + 1, 0)
        m += 1
        row_node = inv
    else:
        row_node = inv.copy()
    root_exact = bool(np.any(exact))
    # number nodes by (depth, lo) (already so for trees laid out level by level)
    if np.all((depth[1:] > depth[:-1]) | ((depth[1:] == depth[:-1]) & (lo[1:] > lo[:-1]))):
        newid = np.arange(m)
    else:
        perm = np.lexsort((lo, depth))       # new -> old
        newid = np.empty(m, np.int64)
        newid[perm] = np.arange(m)
        lo, hi, w, depth = lo[perm], hi[perm], w[perm], depth[perm]
        parent = np.where(parent[perm] >= 0, newid[np.maximum(parent[perm], 0)], -1)
    row_node = np.where(exact, -1, newid[row_node])
    bounds = np.flatnonzero(np.diff(depth)) + 1
    node_ptr = np.concatenate([[0], bounds, [m]])
    n_depths = node_ptr.size - 1
    # chain entries of the internal nodes (leaves have no chain):
    # (v, lo_v), (v, hi_v), (parent c, lo_c), (parent c, hi_c)
    kids = np.flatnonzero(parent >= 0)
    inner = _unique_sorted(np.append(parent[kids], 0))
    ekey = _unique_sorted(np.concatenate([inner * P + lo[inner], inner * P + hi[inner],
                                          parent[kids] * P + lo[kids],
                                          parent[kids] * P + hi[kids]]))
    ent_node, ent_pt = ekey // P, ekey % P
    E = ekey.size
    ent_ptr = np.searchsorted(ent_node, np.arange(m + 1))
    lens = np.diff(ent_ptr)
    starts, ends = ent_ptr[:-1][lens > 0], ent_ptr[1:][lens > 0] - 1
    first = np.zeros(E, bool)
    first[starts] = True
    last = np.zeros(E, bool)
    last[ends] = True
    seg_child = np.full(E, -1, np.int64)
    seg_child[np.searchsorted(ekey, parent[kids] * P + lo[kids])] = kids
    # bottom-up effective conductances
    cond = np.zeros(m)
    R = np.full(m, np.inf)
    for d in range(n_depths - 1, -1, -1):
        n0, n1 = node_ptr[d], node_ptr[d + 1]
        e0, e1 = ent_ptr[n0], ent_ptr[n1]
        sc = seg_child[e0:e1]
        gc = np.where(sc >= 0, cond[np.maximum(sc, 0)], 0.0)
        rs = np.where(last[e0:e1], 0.0, np.where(gc > 0, 1.0 / np.where(gc > 0, gc, 1.0),
                                                   np.inf))
        Rd = np.bincount(ent_node[e0:e1] - n0, rs, minlength=n1 - n0).astype(float)
        Rd[lens[n0:n1] == 0] = np.inf  # a leaf: no chain
        R[n0:n1] = Rd
        cond[n0:n1] = w[n0:n1] + np.where(np.isfinite(Rd), 1.0 / np.where(Rd > 0, Rd, 1.0), 0.0)
    gc = np.where(seg_child >= 0, cond[np.maximum(seg_child, 0)], 0.0)
    r = np.where(last, 0.0, np.where(gc > 0, 1.0 / np.where(gc > 0, gc, 1.0), np.inf))
    # rho (resistance from a), sigma (to b), and the gaps before / after each entry
    shifted = np.concatenate([[0.0], r[:-1]])
    shifted[first] = 0.0
    inf_s = np.isinf(shifted)
    inf_r = np.isinf(r)
    plan = SegmentPlan(ent_ptr)
    rho = plan.cumsum(np.where(inf_s, 0.0, shifted))
    sigma = plan.cumsum(np.where(inf_r, 0.0, r), reverse=True)
    # gap counts: integer cumulative sums are exact globally
    cs_s = np.cumsum(inf_s)
    nl = lens[lens > 0]
    gaps_before = cs_s - np.repeat(cs_s[starts] - inf_s[starts], nl)
    cs_r = np.cumsum(inf_r[::-1])[::-1]
    gaps_after = cs_r - np.repeat(cs_r[ends] - inf_r[ends], nl)
    Rn = R[ent_node]
    bridge = np.isfinite(Rn)
    a_side = ~bridge & (gaps_before == 0)
    b_side = ~bridge & (gaps_after == 0)
    mid = ~bridge & ~a_side & ~b_side
    Rs = np.where(bridge, Rn, 1.0)
    t = np.where(bridge, rho / Rs, np.where(b_side, 1.0, 0.0))
    f = np.where(bridge | a_side, rho, np.where(b_side, 1.0, 0.0))
    g = np.where(bridge, sigma / Rs, np.where(a_side, 1.0, np.where(b_side, sigma, 0.0)))
    # runs of one covariance block: a whole bridge chain, or its a-side / b-side parts
    comp = np.where(bridge | a_side, 0, np.where(b_side, 2, 1))
    brk = np.ones(E, bool)
    brk[1:] = (ent_node[1:] != ent_node[:-1]) | (comp[1:] != comp[:-1])
    run_ptr = np.append(np.flatnonzero(brk), E)
    # segments: Var(x_(e+1) - x_e) = dt^2 D_v + dvar
    nxt = np.minimum(np.arange(E) + 1, E - 1)
    with np.errstate(invalid="ignore"):  # inf * 0 in branches np.where discards
        dvar = np.where(bridge, r * (rho + sigma[nxt]) / Rs,   # r (R - r) / R, stable
                        np.where((comp == comp[nxt]) & ~last, r,
                                 f * g + f[nxt] * g[nxt]))
    dt = np.where(last, 0.0, t[nxt] - t)
    dvar = np.where(last, 0.0, dvar)
    return Laminar(P, lo, hi, w, parent, node_ptr, root_exact, cond, R, ent_ptr, ent_node,
                   ent_pt, seg_child, r, t, f, g, mid, dt, dvar, run_ptr, row_node, w_row,
                   exact, plan, SegmentPlan(run_ptr), first, last)


@dataclass(frozen=True)
class PointMoments:
    """Variances of the BLUE's cumulative counts x_p (``var``, shape (K' + 1,), inf where not
    identifiable) and of each bin x_(c+1) - x_c (``bin_var``, shape (K',), inf where not
    identifiable), from the top-down pass."""

    var: np.ndarray
    bin_var: np.ndarray


def point_moments(lam: Laminar) -> PointMoments:
    """Top-down pass: Var(x_p) for every point and Var of every bin. O(K) numpy."""
    m = lam.n_nodes
    Va, Vb, D = np.zeros(m), np.zeros(m), np.zeros(m)
    bad_a, bad_b = np.zeros(m, bool), np.zeros(m, bool)
    root = 0
    if lam.root_exact:
        vroot = 0.0
    elif lam.cond[root] > 0:
        vroot = 1.0 / lam.cond[root]
    else:
        vroot = np.inf
    Vb[root] = D[root] = 0.0 if not np.isfinite(vroot) else vroot
    bad_b[root] = not np.isfinite(vroot)
    E = lam.ent_pt.size
    ent_var = np.zeros(E)
    ent_bad = np.zeros(E, bool)
    seg_var = np.zeros(E)
    seg_bad = np.zeros(E, bool)
    # values of entries flagged bad (unidentified) are NaN and never used
    with np.errstate(invalid="ignore"):
        for ns, es in lam.depth_slices():
            v = lam.ent_node[es]
            t = lam.t[es]
            ent_var[es] = ((1 - t) * Va[v] + t * Vb[v] - t * (1 - t) * D[v]
                           + lam.f[es] * lam.g[es])
            ent_bad[es] = lam.mid[es] | ((t < 1) & bad_a[v]) | ((t > 0) & bad_b[v])
            e = np.arange(es.start, es.stop)
            nx = np.minimum(e + 1, E - 1)
            seg_var[es] = lam.dt[es] ** 2 * D[v] + lam.dvar[es]
            seg_bad[es] = ent_bad[es] | ent_bad[nx]
            c = lam.seg_child[es]
            has = c >= 0
            cc, ee = c[has], e[has]
            Va[cc], Vb[cc], D[cc] = ent_var[ee], ent_var[ee + 1], seg_var[ee]
            bad_a[cc], bad_b[cc] = ent_bad[ee], ent_bad[ee + 1]
    P = lam.n_points
    var = np.full(P, np.inf)
    var[lam.ent_pt] = np.where(ent_bad, np.inf, ent_var)  # every entry of p has p's variance
    var[0] = 0.0
    var[P - 1] = vroot
    bin_var = np.full(P - 1, np.inf)
    unit = ~lam.last                                      # a chain's last entry: no segment
    nx = np.minimum(np.arange(E) + 1, E - 1)
    unit &= (lam.ent_pt[nx] - lam.ent_pt) == 1
    bin_var[lam.ent_pt[unit]] = np.where(seg_bad[unit], np.inf, seg_var[unit])
    return PointMoments(var, bin_var)


def point_sum_variance(lam: Laminar, weights: np.ndarray) -> float:
    """Var(sum_p u_p x_p) for point weights u (shape (K' + 1,)): the bottom-up push of u
    through the chains' interpolation weights plus each chain's semiseparable quadratic form
    sum_(j, l) u_j u_l f_min(j,l) g_max(j,l). O(K) numpy; inf if u touches an unidentifiable
    point."""
    U = np.asarray(weights, dtype=float).copy()
    U[0] = 0.0  # x_0 = 0
    interior = ~lam.first & ~lam.last
    for ns, es in reversed(list(lam.depth_slices())):
        it = interior[es]
        v = lam.ent_node[es][it]
        pts = lam.ent_pt[es][it]
        t = lam.t[es][it]
        u = U[pts]
        P = U.size
        U += np.bincount(lam.lo[v], (1 - t) * u, minlength=P)
        U += np.bincount(lam.hi[v], t * u, minlength=P)
    ue = np.where(interior, U[lam.ent_pt], 0.0)
    if np.any(lam.mid & (ue != 0)):
        return float("inf")
    uf = ue * lam.f
    Fin = lam.run_plan.cumsum(uf)               # inclusive sum of u_j f_j in the run
    quad = float(np.sum(ue * ue * lam.f * lam.g) + 2.0 * np.sum(ue * lam.g * (Fin - uf)))
    uroot = U[lam.n_points - 1]
    if lam.root_exact or uroot == 0:
        return quad
    return quad + uroot * uroot / lam.cond[0] if lam.cond[0] > 0 else float("inf")


def laminar_blue(mechanism: Mechanism, y: ArrayLike) -> _F:
    """The BLUE of the histogram for an interval strategy: shape (K',), or (trials, K') for y
    of shape (trials, m). Bottom-up z_v = (w_v y_v + Z_v / R_v) / g_v, then top-down
    interpolation along every chain (module docstring). O(K) numpy per trial."""
    star = star_moments(mechanism) if is_laminar_mechanism(mechanism) else None
    if star is not None:
        v, S = star
        y = np.asarray(y, dtype=float)
        if y.ndim == 0 or y.shape[-1] != S.shape[1]:
            raise ValueError(f"y must have {S.shape[1]} entries per trial (one per released "
                             f"row), got shape {y.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError("the strategy cannot identify the histogram (singular system): "
                             "some prefixes are not measured")
        used = np.asarray(abs(S).sum(axis=0)).ravel() > 0
        if not np.all(np.isfinite(y[..., used])):
            raise ValueError("y must be finite on the measured rows")
        y = np.where(used, y, 0.0)
        x = (S @ np.moveaxis(y, -1, 0)).reshape((S.shape[0],) + y.shape[:-1])
        return np.moveaxis(np.diff(x, axis=0), 0, -1)
    lam = laminar_model(mechanism)
    y = np.asarray(y, dtype=float)
    m_rows = lam.row_node.size
    if y.ndim == 0 or y.shape[-1] != m_rows:
        raise ValueError(f"y must have {m_rows} entries per trial (one per released row), "
                         f"got shape {y.shape}")
    single = y.ndim == 1
    Y = y.reshape(-1, m_rows)
    if not np.all(np.isfinite(Y[:, (lam.row_w > 0) | lam.exact_rows])):
        raise ValueError("y must be finite on the measured rows")
    mom = point_moments(lam)
    if not np.all(np.isfinite(mom.bin_var)):
        raise ValueError("the strategy cannot identify the histogram (singular system): "
                         f"{int(np.sum(~np.isfinite(mom.bin_var)))} bins are not determined "
                         "by the measured ranges")
    rows = np.flatnonzero((lam.row_node >= 0) & (lam.row_w > 0))
    agg = sp.csr_matrix((lam.row_w[rows], (lam.row_node[rows], rows)),
                        shape=(lam.n_nodes, m_rows))         # w_v y_v = sum of w_r y_r
    wy = np.asarray((agg @ Y.T).T)
    top = Y[:, np.flatnonzero(lam.exact_rows)[0]] if lam.root_exact else None
    x = _bridge_solve(lam, wy, top)
    out = np.diff(x, axis=1)
    return out[0] if single else out


def _bridge_solve(lam: Laminar, wy: np.ndarray, top: np.ndarray | None) -> np.ndarray:
    """The BLUE's two passes from the nodes' weighted answers ``wy`` (shape (T, nodes): w_v y_v
    = sum of y_r / v_r over the node's noisy rows) and ``top`` (shape (T,): the exact total,
    when the root is exact; else None): the cumulative counts x_0..x_K', shape (T, K' + 1).
    Bottom-up z_v = (w_v y_v + Z_v / R_v) / g_v, then top-down interpolation along every chain
    (module docstring). O(K) numpy per row of wy."""
    T = wy.shape[0]
    mnodes = lam.n_nodes
    z = np.zeros((T, mnodes))
    E = lam.ent_pt.size
    sc = lam.seg_child
    lens = np.diff(lam.ent_ptr)
    slices = list(lam.depth_slices())
    for ns, es in reversed(slices):
        c = sc[es]
        zent = np.where(c >= 0, z[:, np.maximum(c, 0)], 0.0)
        Z = np.zeros((T, ns.stop - ns.start))
        inner = np.flatnonzero(lens[ns] > 0)
        if inner.size:  # the chain's entries are contiguous: Z_v = sum over them
            Z[:, inner] = np.add.reduceat(zent, lam.ent_ptr[ns][inner] - es.start, axis=1)
        Rv = lam.R[ns]
        inv_r = np.where(np.isfinite(Rv), 1.0 / np.where(Rv > 0, Rv, 1.0), 0.0)
        gv = lam.cond[ns]
        z[:, ns] = np.where(gv > 0, (wy[:, ns] + Z * inv_r) / np.where(gv > 0, gv, 1.0), 0.0)
    x = np.zeros((T, lam.n_points))
    x[:, -1] = z[:, 0] if top is None else top
    zseg = np.zeros((T, E))  # segment estimates z_c (0 on gaps and last entries)
    zseg[:, sc >= 0] = z[:, sc[sc >= 0]]
    shifted = np.zeros((T, E))
    shifted[:, 1:] = zseg[:, :-1]
    shifted[:, lam.first] = 0.0
    before = lam.plan.cumsum(shifted)                  # z's of segments before s_e
    after = lam.plan.cumsum(zseg, reverse=True)        # z's of segments from s_e on
    total = before + after                                   # Z_v on every entry
    interior = ~lam.first & ~lam.last
    for ns, es in slices:
        e = np.arange(es.start, es.stop)[interior[es]]
        v = lam.ent_node[e]
        xa, xb = x[:, lam.lo[v]], x[:, lam.hi[v]]
        t = lam.t[e]
        bridge = np.isfinite(lam.R[v])
        a_side = ~bridge & (t == 0)
        x[:, lam.ent_pt[e]] = np.where(
            bridge, xa + before[:, e] + t * (xb - xa - total[:, e]),
            np.where(a_side, xa + before[:, e], xb - after[:, e]))
    return x


def _leaf_nodes(lam: Laminar) -> np.ndarray | None:
    """The node of each bin's range [b, b + 1) (shape (K',)) when every bin is measured by a
    noisy row of its own (a leaf node of positive weight), else None. O(nodes)."""
    kp = lam.n_points - 1
    leaf = (lam.hi - lam.lo == 1) & (lam.w > 0)
    node = np.full(kp, -1, np.int64)
    node[lam.lo[leaf]] = np.flatnonzero(leaf)
    return node if np.all(node >= 0) else None


def has_noisy_leaves(mechanism: Mechanism) -> bool:
    """Whether :func:`laminar_covariance` applies: the bridge decomposition applies (depth
    < MAX_DEPTH, only the total exact) and every bin is a noisy row of its own."""
    if not is_laminar_mechanism(mechanism):
        return False
    strat = _interval_strategy(mechanism)
    if int(strat.depth.max(initial=0)) >= MAX_DEPTH:
        return False
    var = np.asarray(mechanism.variances)
    single = (strat.hi - strat.lo == 1) & np.isfinite(var) & (var > 0)
    return bool(np.all(np.bincount(strat.lo[single], minlength=strat.n_bins) > 0))


# columns of U per bridge pass: at most this many (column, chain entry) pairs (8 MiB per
# (columns, entries) array of the pass)
COVARIANCE_BLOCK = 1 << 20


def laminar_covariance(mechanism: Mechanism, u: ArrayLike) -> _F:
    """Cov @ u for the BLUE of an interval strategy in which every bin is a noisy row of its
    own (:func:`has_noisy_leaves`), u of shape (K',) or (K', m): one BLUE pass per column,
    O(K) numpy each, columns in blocks (no matrix is formed).

    Derivation (docs/math.md section 2 for the BLUE). Let N be the noisy rows (V_N their
    variances), E the exact rows (at most the total), M = A_N' V_N^-1 A_N. The BLUE from
    answers y_N, y_E = e is x_hat = G A_N' V_N^-1 y_N + H e with
    G = M^-1 - M^-1 E' S^-1 E M^-1, S = E M^-1 E', H = M^-1 E' S^-1 (G = M^-1 without exact
    rows), and its covariance is G M G = G (E G = 0). Hence for any c with A_N' c = u, the
    BLUE of the synthetic answers y_N = V_N c, e = 0 is G A_N' c = G u = Cov u. Such a c exists
    for every u exactly when the noisy rows alone have rank K'; it is explicit when every bin
    b is a noisy row [b, b + 1) of its own: c = u_b on that row (one per bin), 0 elsewhere,
    so A_N' c = sum_b u_b e_b = u (and M >= diag(1 / v_b) is positive definite). That is the
    condition here; nothing else is needed: the other rows may be nested or disjoint ranges
    with any variances, unmeasured, or an exact total. In the bridge passes, which read the answers only through w_v y_v (the sum of
    y_r / v_r over a node's rows), the synthetic answers are w_v y_v = u_b on the node
    [b, b + 1) and 0 on every other node; the exact total is 0."""
    lam = laminar_model(mechanism)
    node = _leaf_nodes(lam)
    if node is None:
        raise ValueError("the laminar covariance needs every bin measured by a noisy row of "
                         "its own")
    kp = lam.n_points - 1
    ua = np.asarray(u, dtype=float)
    if ua.ndim not in (1, 2) or ua.shape[0] != kp or not np.all(np.isfinite(ua)):
        raise ValueError(f"u must be finite with shape ({kp},) or ({kp}, m), got shape "
                         f"{ua.shape}")
    cols = ua.reshape(kp, -1)
    out = np.empty_like(cols)
    step = max(1, COVARIANCE_BLOCK // max(lam.ent_pt.size, lam.n_nodes, 1))
    for j in range(0, cols.shape[1], step):   # a block of columns per pass, O(K) each
        blk = cols[:, j:j + step].T                              # (T, K')
        wy = np.zeros((blk.shape[0], lam.n_nodes))
        wy[:, node] = blk                                        # w_v y_v = u_b on [b, b+1)
        top = np.zeros(blk.shape[0]) if lam.root_exact else None
        out[:, j:j + step] = np.diff(_bridge_solve(lam, wy, top), axis=1).T
    return out.reshape(ua.shape)


def range_variances(lam: Laminar, lo: ArrayLike, hi: ArrayLike,
                    chunk: int = 1 << 16) -> _F:
    """Var(x_hi - x_lo) of the BLUE for each half-open range [lo, hi) (int arrays of one
    shape), O(depth) numpy work per range, no matrix.

    The functional u = e_hi - e_lo is pushed up the hierarchy like in
    :func:`point_sum_variance`, but sparsely: a point p interior to node v (depth d) is
    replaced, when depth d is processed, by v's end points with weights (1 - t_p, t_p), after
    adding its chain's covariance terms u_i u_j f_min g_max with the other points of the
    same chain. Each side of a range then has at most two frontier points (the end points of
    its current ancestor), so four slots per range suffice. inf where the range is not
    identified."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    shape = lo.shape
    lo, hi = lo.ravel(), hi.ravel()
    P = lam.n_points
    kp = P - 1
    E = lam.ent_pt.size
    interior = ~lam.first & ~lam.last
    home = np.full(P, -1, np.int64)
    home[lam.ent_pt[interior]] = np.flatnonzero(interior)
    n_depths = lam.node_ptr.size - 1
    ent_depth = np.searchsorted(lam.node_ptr, lam.ent_node, side="right") - 1
    run_id = np.searchsorted(lam.run_ptr, np.arange(E), side="right") - 1
    if lam.root_exact:
        vroot = 0.0
    else:
        vroot = 1.0 / lam.cond[0] if lam.cond[0] > 0 else np.inf
    out = np.empty(lo.size)
    for s in range(0, lo.size, chunk):
        a, b = lo[s:s + chunk], hi[s:s + chunk]
        Q = a.size
        pts = np.full((Q, 4), -1, np.int64)
        wts = np.zeros((Q, 4))
        pts[:, 0], wts[:, 0] = b, 1.0
        pts[:, 1], wts[:, 1] = a, -1.0
        var = np.zeros(Q)
        bad = np.zeros(Q, bool)
        for d in range(n_depths - 1, -1, -1):
            e = np.where(pts >= 0, home[np.maximum(pts, 0)], -1)
            act = (e >= 0) & (ent_depth[np.maximum(e, 0)] == d) & (wts != 0)
            if not act.any():
                continue
            ec = np.maximum(e, 0)
            bad |= np.any(act & lam.mid[ec], axis=1)
            # chain covariance among the active slots of one node and one run
            for i in range(4):
                for j in range(4):
                    pair = (act[:, i] & act[:, j] & (run_id[ec[:, i]] == run_id[ec[:, j]]))
                    if not pair.any():
                        continue
                    e1 = np.minimum(ec[:, i], ec[:, j])
                    e2 = np.maximum(ec[:, i], ec[:, j])
                    var += np.where(pair, wts[:, i] * wts[:, j] * lam.f[e1] * lam.g[e2], 0.0)
            # push the active slots to their node's end points
            v = lam.ent_node[ec]
            t = lam.t[ec]
            new_pts = np.concatenate([np.where(act, lam.lo[v], pts),
                                      np.where(act, lam.hi[v], -1)], axis=1)
            new_w = np.concatenate([np.where(act, wts * (1 - t), wts),
                                    np.where(act, wts * t, 0.0)], axis=1)
            new_pts = np.where(new_w != 0, new_pts, -1)
            order = np.argsort(np.where(new_pts < 0, P, new_pts), axis=1, kind="stable")
            new_pts = np.take_along_axis(new_pts, order, axis=1)
            new_w = np.take_along_axis(new_w, order, axis=1)
            for j in range(1, 8):  # merge equal points (sorted): carry sums to the last copy
                same = (new_pts[:, j] == new_pts[:, j - 1]) & (new_pts[:, j] >= 0)
                new_w[:, j] += np.where(same, new_w[:, j - 1], 0.0)
                new_w[:, j - 1] = np.where(same, 0.0, new_w[:, j - 1])
            new_pts = np.where(new_w != 0, new_pts, -1)
            order = np.argsort(np.where(new_pts < 0, P, new_pts), axis=1, kind="stable")
            new_pts = np.take_along_axis(new_pts, order, axis=1)
            new_w = np.take_along_axis(new_w, order, axis=1)
            if np.any(new_pts[:, 4:] >= 0):  # pragma: no cover - laminar invariant
                raise RuntimeError("range_variances: more than four frontier points")
            pts, wts = new_pts[:, :4], new_w[:, :4]
        # what remains: x_0 = 0, x_K' (the root's), or points no row determines
        left = (pts >= 0) & (pts != 0) & (wts != 0)
        at_root = left & (pts == kp)
        bad |= np.any(left & ~at_root, axis=1)
        wroot = np.sum(np.where(at_root, wts, 0.0), axis=1)
        with np.errstate(invalid="ignore"):
            var += np.where(wroot != 0, wroot * wroot * vroot, 0.0)
        out[s:s + chunk] = np.where(bad, np.inf, var)
    return out.reshape(shape)
