"""Exact participation sensitivities of strategies whose rows are 0/1 interval indicators
(trees, hierarchies, prefix sums, restarted trees; docs/math.md section 11).

Rows r measure x[lo_r:hi_r].sum() with weights w_r >= 0, so the Gram X = A' diag(w^2) A is
entrywise >= 0: X_ij = sum of w_r^2 over the rows containing both i and j. For a pattern P
the vector l2 sensitivity^2 is then sum X_PP = sum_r w_r^2 c_r(P)^2 (c_r(P): participations
inside row r; vector = scalar, docs/math.md section 11), and the l1 one is
max_P sum_(i in P) colnorm_i (colnorm_i = sum of w_r over the rows containing i).

* l1: the O(n k) dynamic programme over the column norms (exact).
* l2, fixed_epoch(k, b) (pattern = one residue class mod b): c_r(o) is q_r or q_r + 1
  (row width = q_r b + e_r), q_r + 1 exactly for the e_r residues of the cyclic window
  starting at lo_r mod b, so every offset's value comes from one difference array over the
  residues: O(rows + b) (:func:`cyclic_values`, also the "every s-th step" orders of
  Kairouz et al. 2021, App. D).
* l2, min_sep(k, b): participations >= b apart share only rows wider than b ("big" rows),
  so sum X_PP = sum_(i in P) d_i + sum_(big r) w_r^2 c_r(P)^2 (d = diag X). Exact branch
  and bound over patterns in increasing order (:func:`min_sep_l2`): the bound of a partial
  pattern P with r participations left is F(P) + max over the feasible continuations Q of
  sum_(q in Q) (g_P(q) + U_r(q)), g_P(q) = X_qq + 2 sum_(p in P) X_pq the marginal gain and
  U_r(q) = sum over big rows s containing q of w_s^2 (min(r, ceil(width_s / b)) - 1) a bound
  on q's pairs inside the continuation; one O(n r) dynamic programme gives the bound of
  every child at once. Positions with the same big rows (an "atom") differ only by d, so
  in each atom only the prefix maxima of d can start a better continuation (dominance).
  Pruning at bound <= best (1 + 1e-12): exact to 12 digits. After ``MIN_SEP_NODES``
  expansions it stops and returns the largest open bound (a certified upper bound, labelled
  so, with the best pattern found as the lower value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..participation import Participation, Sensitivity, column_norms_sensitivity, max_linear

__all__ = ["column_weights", "cyclic_values", "min_sep_l2", "interval_sensitivity",
           "MIN_SEP_NODES"]

_F = npt.NDArray[np.float64]
_I = npt.NDArray[np.int64]

# branch and bound: expansions before it stops with a certified upper bound
MIN_SEP_NODES = 20000
_TOL = 1e-12


def column_weights(lo: _I, hi: _I, wp: _F, n: int) -> _F:
    """sum of wp_r over the rows r = [lo_r, hi_r) containing each column, shape (n,):
    a difference array, O(rows + n)."""
    return np.cumsum(np.bincount(lo, wp, n + 1) - np.bincount(hi, wp, n + 1))[:n]


def cyclic_values(lo: _I, hi: _I, w2: _F, b: int) -> _F:
    """For each residue o in [0, b): sum_r w2_r c_r(o)^2 with c_r(o) = #{i in [lo_r, hi_r):
    i = o mod b} (the pattern "every b-th step from o"), shape (b,). O(rows + b) (module
    docstring)."""
    width = hi - lo
    q, e = np.divmod(width, b)
    base = float(np.sum(w2 * q * q))
    extra = w2 * (2 * q + 1)                    # added on the e_r residues of the window
    start = lo % b
    stop = start + e                            # window [start, stop), cyclic mod b
    diff = np.bincount(start, extra, 2 * b + 1) - np.bincount(stop, extra, 2 * b + 1)
    acc = np.cumsum(diff)[:2 * b]
    return base + acc[:b] + acc[b:]


def _dp_grid(h: _F, grid: _I, n: int, b: int, r: int) -> _F:
    """f[j][i] = max over sets Q of <= j positions in [grid_i, n) with gaps >= b of
    sum h_Q, j = 0..r, at the grid points (sorted, the first the start), shape (r + 1,
    len(grid)). Exact when h is constant between consecutive grid points and the grid
    holds t - i b (down to the start, i < r) for every point t where h changes and for
    t = n: then every f_j is constant on [grid_i, grid_(i+1)) and
    f_j(t) = max(f_j(next), h(t) + f_(j-1)(t + b)). O(r len(grid))."""
    f = np.zeros((r + 1, grid.size))
    ahead = grid + b
    idx = np.searchsorted(grid, ahead, side="right") - 1
    inside = ahead < n
    hg = h[grid]
    for j in range(1, r + 1):
        cand = hg + np.where(inside, f[j - 1, idx], 0.0)
        f[j] = np.maximum.accumulate(cand[::-1])[::-1]
    return f


def _lookup(f: _F, grid: _I, x: _I, n: int) -> _F:
    """A step function f (constant on [grid_i, grid_(i+1))) at positions x (0 at >= n)."""
    i = np.searchsorted(grid, x, side="right") - 1
    return np.where(x < n, f[np.maximum(i, 0)], 0.0)


def _group_pair_bounds(cap: _I, w2: _F, group: _I, kmax: int) -> _F:
    """PL(r), r = 0..kmax: a bound on sum_s w2_s c_s (c_s - 1) over any r participations,
    c_s <= cap_s, when the rows of each group are pairwise disjoint (sum of c_s over a group
    <= r): per group its largest w2 times the fill of the largest caps first (the convex
    c (c - 1) is largest when the participations are packed)."""
    order = np.lexsort((-cap, group))
    g, c = group[order], cap[order]
    first = np.r_[True, g[1:] != g[:-1]]
    before = np.cumsum(c) - c
    before -= np.maximum.accumulate(np.where(first, before, 0))   # caps before, in group
    gid = np.cumsum(first) - 1
    wmax = np.zeros(int(gid[-1]) + 1)
    np.maximum.at(wmax, gid, w2[order])
    out = np.zeros(kmax + 1)
    for r in range(2, kmax + 1):
        cnt = np.clip(r - before, 0, c)
        out[r] = float(np.sum(wmax[gid] * cnt * (cnt - 1)))
    return out


@dataclass
class _Frame:
    """A node of the branch and bound: F(P), the marginal gains g_P, participations left,
    its children's positions and bounds (ascending) and the next child to take (from the
    end)."""

    value: float
    gain: _F
    left: int
    positions: _I
    bounds: _F
    next: int


def min_sep_l2(lo: _I, hi: _I, w2: _F, n: int, part: Participation, group: _I | None = None,
               max_nodes: int | None = None) -> Sensitivity:
    """The l2 sensitivity of 0/1 interval rows with squared weights w2 under
    ``min_sep(k, b)``: exact branch and bound (module docstring), or after ``max_nodes``
    expansions (default :data:`MIN_SEP_NODES`) a certified upper bound (exact=False).
    ``group``: optional row groups of pairwise disjoint rows (e.g. depths in a laminar
    family), for a second bound on the continuation's pairs (:func:`_group_pair_bounds`)."""
    b = part.b
    kmax = part.max_participations(n)
    keep = w2 > 0
    lo, hi, w2 = lo[keep], hi[keep], w2[keep]
    group = None if group is None else np.asarray(group, dtype=np.int64)[keep]
    d = column_weights(lo, hi, w2, n)
    big = (hi - lo) > b
    if not big.any() or kmax == 1:
        return Sensitivity(math.sqrt(float(max_linear(d, part))), True,
                           "no row holds two participations: diagonal over the worst pattern")
    bl, bh, bw = lo[big], hi[big], w2[big]
    cap = -(-(bh - bl) // b)
    u = np.stack([column_weights(bl, bh, bw * np.maximum(np.minimum(r, cap) - 1, 0), n)
                  for r in range(kmax + 1)])
    pair = (np.full(kmax + 1, np.inf) if group is None
            else _group_pair_bounds(cap, bw, group[big], kmax))
    # atoms: maximal runs of positions inside the same big rows; static candidates: the
    # strict prefix maxima of d inside each atom
    bounds = np.unique(np.concatenate([[0, n], bl, bh]))
    atom = np.searchsorted(bounds, np.arange(n), side="right") - 1
    atom_start = bounds[atom] == np.arange(n)
    key = atom * (2.0 * float(d.max()) + 1.0) + d
    cm = np.maximum.accumulate(key)
    static = atom_start.copy()
    static[1:] |= key[1:] > cm[:-1]
    static_pos = np.flatnonzero(static)
    limit = MIN_SEP_NODES if max_nodes is None else max_nodes

    # positions where h can change: atom boundaries and changes of d
    breaks = np.union1d(bounds[:-1], np.flatnonzero(np.r_[True, d[1:] != d[:-1]]))
    shifts = b * np.arange(kmax, dtype=np.int64)

    def children(g: _F, f_value: float, start: int, r: int) -> tuple[_I, _F]:
        """Children positions of a node and their bounds, sorted by bound ascending."""
        base = np.r_[start, breaks[np.searchsorted(breaks, start, side="right"):], n]
        if base.size * r < n - start:
            grid = (base[:, None] - shifts[None, :r]).ravel()
            grid = np.unique(grid[(grid >= start) & (grid < n)])
        else:   # as many grid points as positions: every position
            grid = np.arange(start, n, dtype=np.int64)
        h = g + u[r]
        f = _dp_grid(h, grid, n, b, r - 1)[r - 1]
        f2 = _dp_grid(g, grid, n, b, r - 1)[r - 1] if np.isfinite(pair[r]) else f
        pos = static_pos[np.searchsorted(static_pos, start):]
        a_end = int(bounds[atom[start] + 1])
        seg = d[start:a_end]                      # the start's atom, from start on
        run = np.maximum.accumulate(seg)
        dyn = start + np.flatnonzero(np.r_[True, seg[1:] > run[:-1]])
        pos = np.union1d(pos[pos >= a_end], dyn)
        ahead = pos + b
        ub = f_value + np.minimum(h[pos] + _lookup(f, grid, ahead, n),
                                  g[pos] + _lookup(f2, grid, ahead, n) + pair[r])
        order = np.argsort(ub, kind="stable")
        return pos[order], ub[order]

    def row_of(t: int) -> _F:
        inside = (bl <= t) & (bh > t)
        return column_weights(bl[inside], bh[inside], bw[inside], n)

    best = 0.0
    g0 = d.copy()
    pos, ub = children(g0, 0.0, 0, kmax)
    root_bound = float(ub[-1]) if ub.size else 0.0
    stack = [_Frame(0.0, g0, kmax, pos, ub, pos.size - 1)]
    nodes = 0
    while stack:
        fr = stack[-1]
        i = fr.next
        if i < 0 or fr.bounds[i] <= best * (1 + _TOL):
            stack.pop()
            continue
        if nodes >= limit:  # every open subtree is bounded by its frame's next bound
            open_bound = max(float(o.bounds[o.next]) for o in stack if o.next >= 0)
            value = max(best, min(open_bound, root_bound))
            return Sensitivity(math.sqrt(value), False,
                               f"upper bound: branch and bound over patterns stopped after "
                               f"{limit} expansions (largest open bound)", math.sqrt(best))
        fr.next = i - 1
        nodes += 1
        t = int(fr.positions[i])
        f_child = fr.value + float(fr.gain[t])
        best = max(best, f_child)
        if fr.left == 1 or t + b >= n:
            continue
        g_child = fr.gain + 2.0 * row_of(t)
        cp, cu = children(g_child, f_child, t + b, fr.left - 1)
        stack.append(_Frame(f_child, g_child, fr.left - 1, cp, cu, cp.size - 1))
    return Sensitivity(math.sqrt(best), True,
                       f"every pattern by branch and bound ({nodes} expansions; pruning "
                       "relative 1e-12)", math.sqrt(best))


def interval_sensitivity(lo: _I, hi: _I, w: _F, n: int, part: Participation, p: int,
                         group: _I | None = None) -> Sensitivity:
    """The sensitivity of 0/1 interval rows [lo_r, hi_r) with weights w >= 0 over n steps
    under a non-single schema (module docstring): l1 exact O(n k); l2 fixed_epoch exact
    O(rows + b); l2 min_sep by :func:`min_sep_l2` (``group``: pairwise disjoint row groups,
    e.g. the depths of a laminar family, for its second bound)."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    w = np.asarray(w, dtype=float)
    if p == 1:
        return column_norms_sensitivity(column_weights(lo, hi, w, n), part, 1,
                                        nonnegative=True)
    w2 = w * w
    if part.kind == "fixed_epoch":
        vals = cyclic_values(lo, hi, w2, part.b)
        return Sensitivity(math.sqrt(max(float(vals.max()), 0.0)), True,
                           "interval rows: counts per row for every offset (exact)")
    return min_sep_l2(lo, hi, w2, n, part, group)
