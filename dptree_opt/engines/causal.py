"""The causal BLUE: every query estimated from the rows complete when it is answered.

Setting (docs/math.md section 9)
------------------------------------------------
The bins 0..n-1 are time steps. A released row r (a strategy row, or an exact public row such
as the total N) is *complete* at step e_r = 1 + (its last non-zero column); a workload query q
is answered at step t_q = 1 + its last non-zero column (t_q = hi for the interval [lo, hi)).
The causal estimate of q is the GLS / BLUE of q'x from the rows with e_r <= t_q only (they
involve the columns < t_q only), with variance

    Var_c(q) = q' (A_R' V_R^-1 A_R)^+ q,     R = {r : e_r <= t_q}  (exact rows: constraints),

provided q lies in the row space of A_R (q is *identified* causally). Otherwise no unbiased
linear estimate of q exists at t_q: a ValueError names the query and its step, as the
offline engine raises for rank-deficient strategies (no inf is ever returned). The offline
BLUE uses a superset of rows, so Var_c(q) >= Var_blue(q) query by query, with equality at
t_q = n (every row is complete). On the prefix workload with a tree this is the causal BLUE
of continual counting; with covering sums instead of the BLUE it would be the binary
mechanism of docs/math.md section 9.

Paths (all exact; the dense one is the oracle of the others in tests/test_causal.py)
----------------------------------------------------------------------------------
* Level-uniform trees (``is_tree_mechanism``): the rows complete at t are the nodes inside
  [0, t), i.e. the subtrees of the *maximal complete nodes* of [0, t) (the mixed-radix digits
  of t: d_l(t) = (t // w_l) mod k_l nodes of level l, plus the root at t = K). Different
  subtrees share no row and no column, so the causal GLS splits into independent
  sub-problems, one per maximal node: a prefix is the sum of its maximal nodes' totals, each
  estimated by Honaker's from-below t^- (the BLUE of a node total from its own subtree; [HON]
  eq. (8)/(10), a Kalman update of the children's sum by the node's own measurement). Any
  range [lo, t) adds, for the maximal node holding lo, the BLUE of the suffix [lo, end) inside
  that node's subtree alone (the subtree is itself a level-uniform tree, whose root is
  measured with v_l and gets no information from above). Variances:
  :mod:`dptree_opt.engines.causal_error`.
* Lower-triangular cores: when, for every t < n, exactly one measured row completes at t
  (the other rows complete at n: totals), the rows complete by t < n form a square
  lower-triangular matrix A_t with a non-zero diagonal, so the causal BLUE of q is
  q' A_t^-1 y_t. Keep those rows and one row complete at n: the square strategy A is
  lower triangular and invertible, its offline BLUE is A^-1 y and (A^-1)[:t, :t] = A_t^-1
  (the inverse of a lower-triangular matrix is lower triangular, and its leading block is the
  inverse of the leading block). Hence, with M the query matrix, M A^-1 is lower triangular in
  the sense that a query answered at t only uses y_0..y_(t-1): **the offline BLUE of the
  square core is causal, and causal = offline** (for any noise variances, since the BLUE of a
  square invertible system is A^-1 y whatever V). Examples: Toeplitz strategies and the
  square-root factorisation, the histogram, prefix sums. Queries answered at n use every row
  (offline BLUE of the whole mechanism, totals included). The structured offline engines
  (Toeplitz FFT, bridge recursion) apply to the restricted mechanism unchanged.
* Everything else (n <= MAX_CAUSAL_DENSE_BINS): :class:`DenseCausal`, a windowed covariance
  filter over time (below). Queries answered at n are the offline BLUE's (offline engine: it
  refuses them when the whole histogram is not identified, as for "blue").

The dense filter
----------------
Whitened rows b_r = a_r / sqrt(v_r) are taken in order of e_r. The filter keeps the GLS of the
*absorbed* columns U = [0, t0) from the absorbed rows (every row with e_r <= t0): estimate u^,
covariance P (positive definite). Pending rows (t0 < e_r <= t) split as [C D] over the columns
U and W = [t0, t). With S = I + C P C' = L L' (Cholesky), Y = L^-1 D, z = L^-1 C P q_U and
y~ = L^-1 (y_new - C u^), the information of (u, w) is J = [[P^-1 + C'C, C'D], [D'C, D'D]],
J_UU is invertible and its Schur complement is Phi = D' S^-1 D = Y'Y (Woodbury). By the
generalised Schur formula, q = (q_U, q_W) is identified iff r = q_W - Y'z lies in range(Y')
and then

    Var_c(q) = q_U' P q_U - ||z||^2 + r' (Y'Y)^+ r,
    q'x^     = q_U' u^ + z'y~ + r' Y^+ y~.

When Y has full column rank the pending block is absorbed (Y = Q R, Q = [Q_a Q_p]):
P_UU = P - N'N with N = Q_p' L^-1 C P, P_UW = -(L^-1 C P)' Q_a R^-T, P_WW = R^-1 R^-T,
u^ += N' Q_p' y~, w^ = R^-1 Q_a' y~. Absorbing a window of ~48 steps at once makes the
cost O(n^2 (m + n)) in matrix products (BLAS-3), O(n^2) memory (measured, one thread: 0.3 s
at n = 1000, 1.3 s at 2000, ~8 s at 4000 for a binary tree's rows); columns that stay
unidentified are carried as pending (at most _MAX_PENDING of them). Per step with queries:
one SVD of Y (pending rows x pending columns), and O(pending) per query.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import TypeAlias, overload

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..mechanism import Mechanism
from ..strategies import IntervalStrategy, LevelUniformTree, Strategy
from ..strategies.toeplitz import ToeplitzStrategy
from ..validation import check_choice
from ..workloads import KroneckerWorkload, StackedWorkload, Workload
from . import registry
from .registry import Declined
from .honaker import (check_answers, check_level_variances, honaker_recursions, level_stats,
                      tree_layout, tree_parameters)

__all__ = ["INTERVAL_WORKLOADS", "tree_causal_answers", "triangular_causal_answers",
           "dense_causal_answers", "check_causal_answers", "completion_steps", "check_causal_workload", "check_causal_inputs",
           "query_intervals",
           "not_identified", "from_below_variances", "tree_widths", "maximal_nodes",
           "check_tree_prefixes_identified", "triangular_restriction", "restrict_rows",
           "DenseCausal", "dense_causal", "CAUSAL_METHODS", "MAX_CAUSAL_DENSE_BINS"]

CAUSAL_METHODS = ("auto", "dense")
# the 1-D interval workloads the causal BLUE answers
INTERVAL_WORKLOADS = ("prefix", "identity", "all_range", "ranges", "total")
# The dense filter holds an n x n covariance and costs O(n^2 (m + n)): refused above this.
MAX_CAUSAL_DENSE_BINS = 4096
# Dense filter windows: absorb after this many steps or pending rows.
_WINDOW_COLS = 48
_WINDOW_ROWS = 96
# Columns not yet identified that the filter may carry before giving up.
_MAX_PENDING = 512
# Singular values below _RANK_RTOL * the largest count as zero; a query is identified when
# the part of r outside range(Y') is below _IDENT_RTOL of its scale.
_RANK_RTOL = 1e-9
_IDENT_RTOL = 1e-6

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"


# ------------------------------------------------------------------------ steps and queries
def completion_steps(strategy: Strategy) -> _I:
    """e_r = 1 + the last non-zero column of every row (0 for an empty row), int64.

    Interval strategies: hi; Toeplitz strategies: i + 1 for core row i (a_0 != 0), n for the
    totals (no matrix); any other strategy from its sparse matrix (O(nnz)). docs/math.md
    section 9 (rows "whose intervals end at or before t")."""
    if isinstance(strategy, IntervalStrategy):
        return np.asarray(strategy.hi, dtype=np.int64)
    n = strategy.n_bins
    if isinstance(strategy, ToeplitzStrategy):  # a_0 != 0 and row scales > 0 (validated)
        return np.concatenate([np.arange(1, n + 1, dtype=np.int64),
                               np.full(strategy.n_totals, n, dtype=np.int64)])
    a = strategy.matrix  # canonical, no stored zeros (strategies.base.frozen_csr)
    e = np.zeros(a.shape[0], dtype=np.int64)
    counts = np.diff(a.indptr)
    rows = np.flatnonzero(counts > 0)
    if rows.size:
        e[rows] = np.maximum.reduceat(a.indices, a.indptr[rows]) + 1
    return e


def check_causal_workload(workload: Workload) -> None:
    """Refuse anything but a 1-D interval workload (bins = time steps)."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a dptree_opt Workload, got {type(workload).__name__}")
    if isinstance(workload, (KroneckerWorkload, StackedWorkload)) or workload.kind not in (
            "prefix", "identity", "total", "all_range", "ranges"):
        raise ValueError("the causal estimator is defined for 1-D workloads (bins = time "
                         f"steps); a {workload.kind!r} grid workload has no time order")


def check_causal_inputs(workload: Workload, mechanism: Mechanism, method: str) -> None:
    """ValueError unless ``method`` is in CAUSAL_METHODS, ``mechanism`` is a Mechanism and
    ``workload`` a 1-D interval workload on its bins (the entry points' shared check)."""
    check_choice(method, "method", CAUSAL_METHODS)
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    check_causal_workload(workload)
    if workload.n_bins != mechanism.n_bins:
        raise ValueError(f"workload has {workload.n_bins} bins, mechanism has "
                         f"{mechanism.n_bins}")


def query_intervals(workload: Workload) -> tuple[_I, _I]:
    """(lo, hi) of a 1-D interval workload (query [lo, hi) is answered at step hi)."""
    check_causal_workload(workload)
    lo, hi = workload.intervals()
    return np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)


def not_identified(index: int, lo: int, hi: int, why: str = "") -> ValueError:
    """The ValueError for a query with no unbiased causal estimate."""
    return ValueError(f"query {index} (bins [{lo}, {hi - 1}]) is not identified by the rows "
                      f"complete at its step t = {hi}: it has no unbiased causal linear "
                      f"estimate{' (' + why + ')' if why else ''}")


def _answers(x: _F, lo: _I, hi: _I) -> _F:
    """sum x[:, lo:hi] per query for histogram estimates x of shape (trials, n)."""
    cs = np.zeros((x.shape[0], x.shape[1] + 1))
    np.cumsum(x, axis=1, out=cs[:, 1:])
    return cs[:, hi] - cs[:, lo]


# ------------------------------------------------------------------------------------ trees
def from_below_variances(branching: Sequence[int], level_variances: ArrayLike) -> _F:
    """F_l = Var(t^-) of a level-l node (the BLUE of its count from its own subtree), root first.

    F_h = v_h (leaves), F_l = 1 / (1/v_l + 1/(k_(l+1) F_(l+1))) ([HON] eq. (10), docs/math.md
    section 2; the ``below`` variances of :mod:`dptree_opt.engines.honaker`) with
    1/inf = 0 (unmeasured level, or a subtree that does not identify its count) and
    1/0 = inf (public root: F_0 = 0). inf means the node count is not identified. O(h).
    ValueError for bad branching or variances."""
    ks = tree_layout(branching)[0]
    return level_stats(ks, check_level_variances(level_variances, len(ks)))[0]


def tree_widths(ks: Sequence[int]) -> _I:
    """Node widths w_0 = K, .., w_h = 1 of a level-uniform tree (int64; [HON] layout)."""
    return tree_layout(ks)[2]


def maximal_nodes(branching: Sequence[int], lo: _I, hi: _I
                  ) -> Iterator[tuple[int, _I, _I, _I, npt.NDArray[np.bool_], _I]]:
    """Per level l (root first): (l, g0, g1, gs, straddle, r) for the queries [lo, hi).

    The maximal complete nodes of [0, t), t = hi, at level l are the nodes g0 <= g < g1
    (global index within the level, node g = [g w_l, (g + 1) w_l)): g1 = t // w_l and
    g0 = (t // w_(l-1)) k_l (root: 0 and t // K); d_l(t) = g1 - g0 is the l-th mixed-radix
    digit of t. Those inside [lo, t) are gs <= g < g1; ``straddle`` marks the queries whose
    lo lies strictly inside one of them (node lo // w_l, suffix [r, w_l) of its subtree,
    r = lo mod w_l); at most one level straddles a query."""
    ks = tuple(int(k) for k in branching)
    w = tree_widths(ks)
    for lvl in range(len(ks) + 1):
        wl = int(w[lvl])
        g1 = hi // wl
        g0 = np.zeros_like(hi) if lvl == 0 else (hi // int(w[lvl - 1])) * ks[lvl - 1]
        gs = np.clip(-((-lo) // wl), g0, g1)  # ceil(lo / w)
        r = lo % wl
        straddle = (r != 0) & (lo > g0 * wl) & (lo < g1 * wl)
        yield lvl, g0, g1, gs, straddle, r


def check_tree_prefixes_identified(ks: Sequence[int], F: _F) -> None:
    """Raise for the first prefix C_t whose maximal nodes include one with F_l = inf."""
    w = tree_widths(ks)
    K = int(w[0])
    bad_t: list[int] = []
    if not np.isfinite(F[0]):
        bad_t.append(K)
    for lvl in range(1, len(ks) + 1):
        if ks[lvl - 1] >= 2 and not np.isfinite(F[lvl]):
            bad_t.append(int(w[lvl]))  # the first t with d_l(t) = 1
    if bad_t:
        t = min(bad_t)
        raise not_identified(t - 1, 0, t, "a maximal complete node's count is not determined "
                             "by its subtree")


def _subtree_leaf_estimates(ks: Sequence[int], v: _F, y: _F, lvl: int) -> _F:
    """BLUE of every bin from its level-``lvl`` subtree alone (each level-lvl node as the
    root of a level-uniform tree measured with v_lvl.. v_h, no information from above):
    all m_lvl subtrees batched as trials through Honaker's recursions. (trials, K)."""
    _, m, w, off = tree_layout(ks)
    T, ml = y.shape[0], int(m[lvl])
    parts = [y[:, off[d]:off[d + 1]].reshape(T, ml, int(m[d] // ml))
             for d in range(lvl, len(ks) + 1)]
    sub = np.concatenate(parts, axis=2).reshape(T * ml, -1)
    est = honaker_recursions(ks[lvl:], v[lvl:], sub)
    return est.efficient[:, -int(w[lvl]):].reshape(T, -1)


def _tree_answers(mechanism: Mechanism, y: _F, lo: _I, hi: _I, prefix: bool) -> _F:
    """Causal tree estimates (trials, q): the maximal nodes' t^- plus, for a straddled node,
    the suffix of its subtree's own BLUE (module docstring). NaN where not identified."""
    ks, v = tree_parameters(mechanism)
    est = honaker_recursions(ks, v, y)
    _, _, w, off = tree_layout(ks)
    F = est.below_var[off[:-1]]  # from_below_variances, one per level
    out = np.zeros((y.shape[0], lo.size))
    for lvl, _, g1, gs, straddle, r in maximal_nodes(ks, lo, hi):
        used = g1 > gs
        if used.any():
            if np.isfinite(F[lvl]):
                out += _answers(est.below[:, off[lvl]:off[lvl + 1]], gs, g1)
            else:
                out[:, used] = np.nan
        if not prefix and straddle.any():  # at most one level per query: one pass per level
            s = np.flatnonzero(straddle)
            out[:, s] += _answers(_subtree_leaf_estimates(ks, v, y, lvl), lo[s],
                                  lo[s] - r[s] + int(w[lvl]))
    return out


# ---------------------------------------------------------------- lower-triangular cores
_RESTRICTED: "weakref.WeakKeyDictionary[Mechanism, Mechanism | None]" = (
    weakref.WeakKeyDictionary())


def restrict_rows(mechanism: Mechanism, keep: ArrayLike) -> Mechanism:
    """The same mechanism with the rows outside ``keep`` unmeasured (variance and scale inf):
    the sub-mechanism of the kept rows, for the offline engines. Budgets, guarantee and the
    other attributes are shared (it is an analysis device, not a release)."""
    keep = np.asarray(keep, dtype=bool)
    new = object.__new__(Mechanism)
    for name, value in vars(mechanism).items():
        if name != "_frozen":
            object.__setattr__(new, name, value)
    var = np.where(keep, mechanism.variances, np.inf)
    scale = np.where(keep, mechanism.scales, np.inf)
    exact = mechanism.exact_rows & keep
    for arr in (var, scale, exact):
        arr.flags.writeable = False
    object.__setattr__(new, "_variances", var)
    object.__setattr__(new, "_scales", scale)
    object.__setattr__(new, "_exact", exact)
    object.__setattr__(new, "_frozen", True)
    return new


def triangular_restriction(mechanism: Mechanism) -> Mechanism | None:
    """The square lower-triangular core of ``mechanism`` (module docstring), or None.

    Applies when exactly one measured row completes at every step t < n and at least one at
    n. Returns ``mechanism`` itself when it has exactly n measured rows (causal = offline for
    every query), else the restriction to the rows complete before n plus the first measured
    row complete at n (noisy preferred), the others (totals) unmeasured: its offline BLUE is
    the causal BLUE of every query answered before n. Level-uniform trees have their own path
    and give None. Cached per mechanism."""
    if mechanism in _RESTRICTED:
        return _RESTRICTED[mechanism]
    out = None
    strat = mechanism.released
    if not isinstance(strat, LevelUniformTree):
        try:
            e = completion_steps(strat)
        except ValueError:  # an implicit strategy too large for its matrix
            e = None
        if e is not None:
            n = strat.n_bins
            var = np.asarray(mechanism.variances, dtype=float)
            measured = np.isfinite(var) & (e > 0)
            counts = np.bincount(e[measured], minlength=n + 1)
            if np.all(counts[1:n] == 1) and counts[n] >= 1:
                at_end = np.flatnonzero(measured & (e == n))
                if at_end.size == 1:
                    out = mechanism
                else:
                    noisy = at_end[var[at_end] > 0]
                    keep = measured & (e < n)
                    keep[noisy[0] if noisy.size else at_end[0]] = True
                    out = restrict_rows(mechanism, keep)
    _RESTRICTED[mechanism] = out
    return out


# ------------------------------------------------------------------------------- dense filter
class DenseCausal:
    """The exact causal GLS of any strategy by a windowed filter over time (module docstring).

    ``run(lo, hi, y=None)`` returns the causal variances of the queries [lo, hi) answered
    before step n (NaN for those answered at n: every row is complete there, so they are the
    offline BLUE's, left to the caller) and, given measurements y (trials, rows), their
    causal estimates (trials, q). Raises ValueError for the first query that is not
    identified. n <= MAX_CAUSAL_DENSE_BINS; O(n^2 (m + n)) time, O(n^2) memory."""

    def __init__(self, mechanism: Mechanism) -> None:
        n = mechanism.n_bins
        if n > MAX_CAUSAL_DENSE_BINS:
            raise ValueError(f"the dense causal path is refused for {n} > "
                             f"{MAX_CAUSAL_DENSE_BINS} bins (structured paths: level-uniform "
                             "trees, lower-triangular strategies, interval strategies for the "
                             "prefix workload)")
        strat = mechanism.released
        e = completion_steps(strat)
        var = np.asarray(mechanism.variances, dtype=float)
        measured = np.isfinite(var) & (e > 0)
        early_exact = np.flatnonzero(measured & (var == 0) & (e < n))
        if early_exact.size:
            raise ValueError(f"row {int(early_exact[0])} is exact (variance 0) and complete "
                             f"at step {int(e[early_exact[0]])} < n: the dense causal path "
                             "supports exact rows only at the last step (public totals)")
        rows = np.flatnonzero(measured & (var > 0) & (e < n))
        rows = rows[np.argsort(e[rows], kind="stable")]
        self.n = n
        self._rows = rows
        self._e = e[rows]
        self._w = 1.0 / np.sqrt(var[rows])
        self._b = sp.csr_matrix(sp.diags(self._w) @ sp.csr_matrix(strat.matrix)[rows])

    @staticmethod
    def _suffix_quad(P: _F, starts: _I) -> _F:
        """q_U' P q_U = sum of P[a:, a:] for each a in ``starts`` (a = t0 gives 0). O(t0^2):
        directly for a few distinct starts (prefixes: one), else T[a] = T[a + 1] + P[a, a] +
        2 sum_(j > a) P[a, j] for all a."""
        t0 = P.shape[0]
        uniq, inv = np.unique(starts, return_inverse=True)
        if uniq.size <= 4:
            vals = np.array([float(P[a:, a:].sum()) if a < t0 else 0.0 for a in uniq])
            return vals[inv]
        out = np.zeros(t0 + 1)
        row = np.diag(P) + 2.0 * np.triu(P, 1).sum(axis=1)
        out[:t0] = np.cumsum(row[::-1])[::-1]
        return out[starts]

    @overload
    def run(self, lo: ArrayLike, hi: ArrayLike, y: None = ...) -> tuple[_F, None]: ...
    @overload
    def run(self, lo: ArrayLike, hi: ArrayLike, y: ArrayLike) -> tuple[_F, _F]: ...
    def run(self, lo: ArrayLike, hi: ArrayLike,
            y: ArrayLike | None = None) -> tuple[_F, _F | None]:
        """(causal variances (q,), estimates (trials, q) or None) of the queries [lo, hi)
        answered before n; NaN for those answered at n (class and module docstrings)."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        n, e = self.n, self._e
        var = np.full(lo.size, np.nan)
        est = None
        if y is not None:
            y = np.asarray(y, dtype=float)
            yw = (y[:, self._rows] * self._w).T  # (rows', trials)
            if not np.all(np.isfinite(yw)):
                raise ValueError("y has NaN or infinite values on measured rows")
            n_trials = y.shape[0]
            est = np.full((n_trials, lo.size), np.nan)
            u = np.zeros((0, n_trials))
        sel = np.flatnonzero(hi < n)
        order = sel[np.argsort(hi[sel], kind="stable")]
        steps = hi[order]
        if order.size == 0:
            return var, est
        t_last = int(steps[-1])
        t0, done, qpos = 0, 0, 0
        P = np.zeros((0, 0))
        while qpos < order.size:
            r0 = int(np.searchsorted(e, t0, side="right"))
            t1 = min(t_last, done + _WINDOW_COLS)
            if r0 + _WINDOW_ROWS < e.size:
                t1 = min(t1, max(done + 1, int(e[r0 + _WINDOW_ROWS]) - 1))
            if t1 - t0 > _MAX_PENDING:
                raise ValueError(f"the dense causal path carries at most {_MAX_PENDING} columns "
                                 f"not yet identified; bins {t0}..{t1 - 1} are not all "
                                 f"identified by the rows complete at step {t1}")
            r1 = int(np.searchsorted(e, t1, side="right"))
            p = r1 - r0
            blk = self._b[r0:r1]
            C = blk[:, :t0].toarray()
            D = blk[:, t0:t1].toarray()
            CP = C @ P  # O(p t0^2)
            S = CP @ C.T
            S[np.diag_indices(p)] += 1.0
            L = np.linalg.cholesky(S) if p else S
            Y = sla.solve_triangular(L, D, lower=True) if p else D
            if y is not None:
                yt = sla.solve_triangular(L, yw[r0:r1] - C @ u, lower=True) if p else yw[r0:r1]
            stop = int(np.searchsorted(steps, t1, side="right"))
            if stop > qpos:
                qi = order[qpos:stop]
                lo_u = np.minimum(lo[qi], t0)
                CPc = np.zeros((p, t0 + 1))
                np.cumsum(CP, axis=1, out=CPc[:, 1:])
                Z = CPc[:, [t0]] - CPc[:, lo_u]
                if p:
                    Z = sla.solve_triangular(L, Z, lower=True)
                quad = self._suffix_quad(P, lo_u)
                if y is not None:
                    ucs = np.zeros((t0 + 1, n_trials))
                    np.cumsum(u, axis=0, out=ucs[1:])
                    base = (ucs[t0][:, None] - ucs[lo_u].T)  # (trials, q)
                bounds = np.flatnonzero(np.diff(steps[qpos:stop])) + 1
                for a, b in zip(np.r_[0, bounds], np.r_[bounds, qi.size]):
                    t = int(steps[qpos + a])
                    pt = int(np.searchsorted(e, t, side="right")) - r0
                    bt = t - t0
                    jj = np.arange(a, b)
                    q_ids = qi[jj]
                    if pt == 0 or e[r0 + pt - 1] != t:
                        j = int(q_ids[0])
                        raise not_identified(j, int(lo[j]), int(hi[j]),
                                             f"no measured row completes at step {t}")
                    Yt = Y[:pt, :bt]
                    U, s, Vt = np.linalg.svd(Yt, full_matrices=False)
                    k = int(np.sum(s > _RANK_RTOL * s[0])) if s.size and s[0] > 0 else 0
                    z = Z[:pt, jj]
                    start = np.maximum(lo[q_ids], t0) - t0
                    qw = (np.arange(bt)[:, None] >= start[None, :]).astype(float)
                    yz = Yt.T @ z
                    rr = qw - yz
                    c = Vt[:k] @ rr
                    resid = np.linalg.norm(rr - Vt[:k].T @ c, axis=0)
                    scale = np.linalg.norm(qw, axis=0) + np.linalg.norm(yz, axis=0)
                    bad = resid > _IDENT_RTOL * scale
                    if bad.any():
                        j = int(q_ids[np.flatnonzero(bad)[0]])
                        raise not_identified(j, int(lo[j]), int(hi[j]))
                    cs = c / s[:k, None]
                    var[q_ids] = quad[jj] - np.sum(z * z, axis=0) + np.sum(cs * cs, axis=0)
                    if est is not None:  # q'x^ = q_U'u^ + z'y~ + r'Y^+ y~ (module docstring)
                        ytt = yt[:pt]
                        est[:, q_ids] = (base[:, jj] + (z.T @ ytt).T
                                         + (cs.T @ (U[:, :k].T @ ytt)).T)
            qpos, done = stop, t1
            if qpos >= order.size:
                break
            bw = t1 - t0
            if p >= bw:
                s_all = np.linalg.svd(Y, compute_uv=False)
                if s_all.size == bw and s_all[-1] > _RANK_RTOL * s_all[0]:
                    Q, R = np.linalg.qr(Y, mode="complete")
                    Ri = sla.solve_triangular(R[:bw], np.eye(bw))
                    Kt = sla.solve_triangular(L, CP, lower=True)  # (p, t0) = (P C' L^-T)'
                    N = Q[:, bw:].T @ Kt
                    Pn = np.empty((t1, t1))
                    np.subtract(P, N.T @ N, out=Pn[:t0, :t0])  # O(t0^2 p)
                    Pn[:t0, t0:] = -(Kt.T @ Q[:, :bw]) @ Ri.T
                    Pn[t0:, :t0] = Pn[:t0, t0:].T
                    Pn[t0:, t0:] = Ri @ Ri.T
                    P = Pn
                    if y is not None:
                        u = np.vstack([u + N.T @ (Q[:, bw:].T @ yt), Ri @ (Q[:, :bw].T @ yt)])
                    t0 = t1
        return var, est


_DENSE: "weakref.WeakKeyDictionary[Mechanism, DenseCausal]" = weakref.WeakKeyDictionary()


def dense_causal(mechanism: Mechanism) -> DenseCausal:
    """The (cached) dense causal filter of a mechanism."""
    hit = _DENSE.get(mechanism)
    if hit is None:
        hit = DenseCausal(mechanism)
        _DENSE[mechanism] = hit
    return hit


# ------------------------------------------------------------------------------- estimator
def tree_causal_answers(mechanism: Mechanism, flat: np.ndarray, workload: Workload) -> np.ndarray:
    """Causal BLUE answers (trials, q) on a level-uniform tree by Honaker's from-below
    estimates, O(K h) per trial. Declined (the dense filter decides) when a subtree does not
    identify its own histogram and n is small enough; ValueError when it is not."""
    lo, hi = query_intervals(workload)
    ks, v = tree_parameters(mechanism)
    prefix = workload.kind == "prefix"
    if prefix:
        check_tree_prefixes_identified(ks, from_below_variances(ks, v))
    ans = _tree_answers(mechanism, flat, lo, hi, prefix)
    if np.all(np.isfinite(ans)):
        return ans
    if mechanism.n_bins > MAX_CAUSAL_DENSE_BINS:
        j = int(np.flatnonzero(~np.all(np.isfinite(ans), axis=0))[0])
        raise not_identified(j, int(lo[j]), int(hi[j]), "a maximal complete node's "
                             "subtree does not identify it")
    raise Declined("a subtree does not identify its own histogram")


def triangular_causal_answers(mechanism: Mechanism, core: Mechanism, flat: np.ndarray,
                              workload: Workload) -> np.ndarray:
    """Causal BLUE answers (trials, q) from a lower-triangular core: the core's offline BLUE
    for the queries answered before n, the mechanism's for those answered at n."""
    lo, hi = query_intervals(workload)
    last = hi == mechanism.n_bins
    out = np.empty((flat.shape[0], lo.size))
    if np.any(~last):
        out[:, ~last] = _answers(_blue(core, flat), lo[~last], hi[~last])
    if np.any(last):
        out[:, last] = _answers(_blue(mechanism, flat), lo[last], hi[last])
    return out


def dense_causal_answers(mechanism: Mechanism, flat: np.ndarray, workload: Workload) -> np.ndarray:
    """Causal BLUE answers (trials, q) by the dense filter (n <= MAX_CAUSAL_DENSE_BINS)."""
    lo, hi = query_intervals(workload)
    _, out = dense_causal(mechanism).run(lo, hi, flat)
    last = hi == mechanism.n_bins
    if np.any(last):
        out[:, last] = _answers(_blue(mechanism, flat), lo[last], hi[last])
    return out


def _blue(mechanism: Mechanism, y: np.ndarray) -> np.ndarray:
    """The offline BLUE of the histogram, from the registry."""
    return registry.run("estimate", mechanism, None, "blue", y=y)


def check_causal_answers(mechanism: Mechanism, y: ArrayLike) -> _F:
    """y as floats of shape (..., rows) for the causal BLUE (ValueError otherwise)."""
    return check_answers(mechanism, y)
