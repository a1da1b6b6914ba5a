"""Level-uniform trees, [RTS] App. B refined estimator: exact error on the histogram and all-range
workloads (structured), and its dense covariance for other workloads.

Setting and notation (docs/math.md sections 0-2; layout and variance conventions of
:mod:`dptree_opt.engines.honaker`)
----------------------------------------------------------------------------------------------
Level-uniform tree over K bins, branching (k_1, ..., k_h), level variances v_0..v_h root first
(v_0 = 0: public total; v_0 = inf: unmeasured root; inf: unmeasured level). Level l has nodes of
width w_l; the mixed-radix digits of t in [0, K) are d_l(t) = (t // w_l) mod k_l. The refined
estimator ([RTS] App. B, :func:`~dptree_opt.engines.honaker.refined_recursion`) releases

    C_t = alpha_t L_t + beta_t (rho - M_t),   t = 1..K-1,      C_K = T,      C_0 = 0,

L_t = sum of t^- over the left covering of [0, t) (d_l(t) nodes at level l), M_t = the same over
the right covering of [t, K) (the level counts of the left covering of [0, K - t)), rho the raw
root (exact N when v_0 = 0), T = t^-_root, alpha_t = ivw weight of L_t against rho - M_t and
beta_t = 1 - alpha_t (beta_t = 0 when the root is unmeasured).

Covariance structure (derived here, verified against the dense linear map in the tests)
----------------------------------------------------------------------------------------------
b_l = var(t^-) at level l; a_l = the weight on a level-l node's own measurement in t^-
([HON] eq. (10); a_h = 1), so t^-_u = a_l y_u + (1 - a_l) (children's t^- sum). For u an
ancestor of w (levels p <= q), Cov(t^-_u, t^-_w) = P(p, q) b_q, P(p, q) = prod_{m=p}^{q-1} (1 - a_m);
disjoint subtrees are uncorrelated and rho is independent of every non-root t^-
(Cov(rho, T) = a_0 v_0 = b_0). A covering is a set of disjoint nodes, so every covariance between
two coverings is a sum over their *nested* pairs. For 0 < s < t < K let c be the first level where
the digits of s and t differ (s, t share the level-(c-1) node A) and p_s the deepest level with
d_l(s) > 0 (the level of the first node of the right covering of [s, K)). Then, with
B_c(x) = sum_{l > c} d_l(x) P(c, l) b_l,

    Cov(L_s, L_t) = sum_{l <= c} d_l(s) b_l + B_c(s)                          (common nodes, plus
                                                       s's nodes below the level-c node z_s)
    Cov(M_s, M_t) = the same for the mirrored pair (K - t, K - s)           (mirror symmetry)
    Cov(L_s, M_t) = 0                                                       (disjoint ranges)
    Cov(M_s, L_t) = P(min(p_s, c), c) [(d_c(t) - d_c(s) - 1 + [p_s <= c]) b_c + B_c(K - s) + B_c(t)]

(the last one: inside A the two coverings overlap on [s, t) in one node pair per covering node:
M_s's nodes inside z_s against L_t's z_s, identical level-c children between z_s and t's child,
and M_s's child d_c(t) against L_t's nodes inside it; if s is the start of A (p_s < c) the single
right-covering node at level p_s contains A and every L_t node inside A). t = K fits with
d_0(K) = 1, c = 0, alpha_K = 1, beta_K = 0 plus the extra term beta_s Cov(rho, T) = beta_s b_0.

Workloads
----------------------------------------------------------------------------------------------
* identity: for adjacent prefixes t, t + 1 (t = 0..K-1) let z be the node ending at t + 1 at the
  carry level j = p_{t+1} (last node of L_{t+1}) and z' the node starting at t at level p = p_t
  (first node of M_t). Then L_t = Com + D, L_{t+1} = Com + z, M_t = Com' + z', M_{t+1} = Com' + D',
  D (D') = the covering of z (z') without its last (first) bin, so

      x_t = da Com + alpha_{t+1} z - alpha_t D + db (Com' - rho) + beta_t z' - beta_{t+1} D',

  da = alpha_{t+1} - alpha_t, db = beta_t - beta_{t+1}. Only z and z' (both hold bin t) are
  nested across groups, hence, with per-level tables W_j = var(z - D) (a sum of squares over the
  measurements of z's subtree: coefficient P(j, l) a_l on the last-bin path, P(j, l) - 1 on the
  (k_l - 1) other children's t^-) and Z_j = cov(z, D) - var(D) = sum_{l > j} (k_l - 1) b_l (P(j, l) - 1),

      Var(x_t) = da^2 VL_t + alpha_{t+1}^2 W_j + 2 alpha_{t+1} da Z_j
               + db^2 (v_0 + VL_{K-1-t}) + beta_t^2 W_p + 2 beta_t db Z_p
               + 2 alpha_{t+1} beta_t P(min(j, p), max(j, p)) b_max(j, p)  [- 2 beta_{K-1} b_0, t = K-1],

  VL_t = var(L_t) = sum_l d_l(t) b_l (C_0: alpha = beta = 0; C_K = T: alpha = 1, beta = 0, z = root,
  and the last term is the rho inside T). This avoids the cancellation of V_t + V_{t+1} - 2 Cov
  (var(C_t) can exceed var(x_t) by a factor ~K). O(K) time and memory.
* all-range total: the queries are C_e - C_s over all pairs 0 <= s < e <= K, and for any K + 1
  random variables sum_{s<e} Var(C_e - C_s) = (K + 1) sum_t V_t - Var(sum_t C_t). The single
  functional S = sum_t C_t = sum_u g_u t^-_u + (sum_t beta_t) rho + T is pushed down the tree
  (the adjoint of the t^- recursion): the coefficient of node u's own measurement is a_l G_u with
  G_u = g_u + (1 - a_{l-1}) G_parent, where g_u = sum of alpha_t over the t whose left covering
  holds u (t in the later siblings' ranges) minus sum of beta_t over the t whose right covering
  holds u (t - 1 in the earlier siblings' ranges). So Var(S) = sum_u v_u (a_l G_u)^2, O(n).
* all-range per query: the general pair formula above, vectorised over the K (K + 1) / 2 pairs
  (c and its mirror are step functions of e along each row, generated with np.repeat; the rest
  are gathers from (h + 1) x (K + 1) tables): O(K^2) (K <= MAX_ALL_RANGE_PER_QUERY_K).

Unidentifiable trees (no measurement at or below some level J with a k >= 2 at depth >= J): a
prefix C_t has variance inf unless t is a multiple of w_{J-1}; such queries get inf (totals
inf), the others are computed on the tree truncated at level J - 1, which gives the same
estimates on that grid. Trailing unmeasured k = 1 levels are dropped the same way (no effect).
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .honaker import (
    ivw,
    left_cover_sums,
    level_stats,
    refined_error,
    refined_recursion,
    sum_variance,
)
from .honaker import tree_parameters
from ..mechanism import Mechanism
from ..validation import check_bool, check_choice
from .tree_error import MAX_ALL_RANGE_PER_QUERY_K, check_tree

_F: TypeAlias = "npt.NDArray[np.float64]"

__all__ = ["refined_workload_error", "REFINED_WORKLOADS"]

REFINED_WORKLOADS = ("prefix", "identity", "all_range")
# The refined estimator's dense linear map is built for at most this many bins.
MAX_REFINED_DENSE_BINS = 4096

# per-query all-range: at most this many pairs are processed at once (memory ~ 100 bytes each)
_PAIR_CHUNK = 1 << 21


# --------------------------------------------------------------------------- per-level tables


class _Tree:
    """Per-level quantities of an identifiable level-uniform tree (every b_l finite)."""

    def __init__(self, ks: Sequence[int], v: npt.NDArray[np.float64]) -> None:
        self.ks = tuple(ks)
        self.h = h = len(ks)
        self.v = v
        self.K = K = math.prod(ks)
        self.widths = [K]
        for k in ks:
            self.widths.append(self.widths[-1] // k)
        self.b = b = level_stats(ks, v)[0]  # var(t^-) per level, all finite here
        a = np.ones(h + 1)  # weight on the node's own measurement in t^-; leaves: t^- = t
        for lev in range(h):
            a[lev] = ivw(v[lev], sum_variance(ks[lev], b[lev + 1]))[0]
        self.a = a
        # P[p, q] = prod_{m=p}^{q-1} (1 - a_m) for p <= q (0 below the diagonal, unused)
        P = np.zeros((h + 1, h + 1))
        for p in range(h + 1):
            P[p, p:] = np.concatenate(([1.0], np.cumprod(1.0 - a[p:h])))
        self.P = P
        kk = np.array([0] + [k - 1 for k in ks], dtype=np.float64)  # (k_l - 1), l = 0..h
        # W_j = var(t^-_z - sum of t^- over z's covering without its last leaf), z at level j,
        # as a sum of squares over the measurements: the path to the last leaf (coefficient
        # P(j, l) a_l on its level-l measurement) and the (k_l - 1) other children at each
        # level (coefficient P(j, l) - 1 on their t^-). Z_j = cov(z, D) - var(D) <= 0.
        own = np.zeros(h + 1)
        measured = np.isfinite(v) & (a > 0)
        own[measured] = v[measured] * a[measured] ** 2
        self.W = np.array([(own[p:] * P[p, p:] ** 2).sum()
                           + (kk[p + 1:] * b[p + 1:] * (P[p, p + 1:] - 1.0) ** 2).sum()
                           for p in range(h + 1)])
        self.Z = np.array([(kk[p + 1:] * b[p + 1:] * (P[p, p + 1:] - 1.0)).sum()
                           for p in range(h + 1)])
        self.v0 = float(v[0]) if np.isfinite(v[0]) else 0.0  # only ever multiplied by beta
        self.rho_T = float(b[0]) if np.isfinite(v[0]) else 0.0  # Cov(rho, T) = a_0 v_0 = b_0

    def prefix_stats(self) -> tuple[_F, _F, _F, _F]:
        """(VL, alpha, beta, V) for t = 0..K: var(L_t), the weights, var(C_t) (O(K))."""
        K, ks, b = self.K, self.ks, self.b
        digits = [np.arange(k, dtype=np.float64) for k in ks]
        VL = np.empty(K + 1)
        VL[:K] = left_cover_sums(ks, [d * b[lev] for lev, d in enumerate(digits, 1)], ())
        VL[K] = b[0]  # the "left covering" of [0, K) is the root (only used for t = K)
        alpha, beta, V = np.zeros(K + 1), np.zeros(K + 1), np.zeros(K + 1)
        if K > 1:
            w_left, var = ivw(VL[1:K], self.v[0] + VL[K - 1:0:-1])
            alpha[1:K], V[1:K] = w_left, var
            beta[1:K] = 1.0 - w_left
        alpha[K], V[K] = 1.0, b[0]
        return VL, alpha, beta, V


def _deepest_digit_levels(ks: Sequence[int]) -> npt.NDArray[np.int16]:
    """p[t] = deepest level l with d_l(t) > 0 (0 for t = 0 and t = K), t = 0..K; int16, O(K)."""
    p = np.zeros(1, dtype=np.int16)
    for lev, k in enumerate(ks, 1):
        nonzero = np.arange(k) > 0
        p = np.where(nonzero, np.int16(lev), p[:, None]).reshape(-1)
    return np.append(p, np.int16(0))


def _effective_tree(ks: tuple[int, ...], v: _F) -> tuple[tuple[int, ...] | None, _F | None, int]:
    """Drop the levels below the last one that is identified.

    Returns (ks_eff, v_eff, step): the truncated tree and the width ``step`` of its leaves in
    bins; ``step == 1`` iff every prefix (hence every query) is identifiable. ``ks_eff`` is None
    when nothing is measured at all (no query identified).
    """
    b = level_stats(ks, v)[0]
    bad = np.flatnonzero(~np.isfinite(b))
    if bad.size == 0:
        return ks, v, 1
    J = int(bad[0])  # every level >= J is unmeasured (b is finite iff some level >= l is)
    if J == 0:
        return None, None, math.prod(ks)
    return ks[:J - 1], v[:J], math.prod(ks[J - 1:])


# --------------------------------------------------------------------------- identity


def _identity_per_query(tree: _Tree) -> np.ndarray:
    """Var(C_{t+1} - C_t), t = 0..K-1, from the adjacent-pair decomposition (module docstring).

    Written as a sum of variances of independent pieces (plus the small cross terms), not as
    V_t + V_{t+1} - 2 Cov, which would cancel catastrophically when var(C_t) >> var(x_t)."""
    K, b, P = tree.K, tree.b, tree.P
    VL, alpha, beta, _ = tree.prefix_stats()
    p_all = _deepest_digit_levels(tree.ks)
    p, j = p_all[:K], p_all[1:]  # j_t = p_{t+1}: the level where t + 1 carries (0 for t = K-1)
    lo, hi = np.minimum(j, p), np.maximum(j, p)
    a_next, b_here = alpha[1:], beta[:K]
    d_left = alpha[1:] - alpha[:K]  # weight change on the common left part
    d_right = beta[:K] - beta[1:]  # weight change on the common right part
    W, Z = tree.W, tree.Z
    out = d_left * d_left * VL[:K]
    out += a_next * a_next * W[j]
    out += 2.0 * a_next * d_left * Z[j]
    out += d_right * d_right * (tree.v0 + VL[K - 1::-1])  # VL[K-1-t] = var(M_{t+1})
    out += b_here * b_here * W[p]
    out += 2.0 * b_here * d_right * Z[p]
    out += 2.0 * a_next * b_here * (P[lo, hi] * b[hi])  # the two nodes holding bin t
    out[K - 1] -= 2.0 * beta[K - 1] * tree.rho_T  # C_K = T contains a_0 rho
    return np.maximum(out, 0.0)


# --------------------------------------------------------------------------- all-range total


def _sum_variance(tree: _Tree, alpha: _F, beta: _F, n: int | None = None) -> float:
    """Var(sum_{t=1}^{n} C_t) by pushing the functional's node coefficients down the tree, O(K).

    ``alpha``, ``beta``: the refined weights for t = 0..K (length K + 1). ``n`` < K (the
    first n prefixes of a padded tree): the weights beyond n are dropped and C_K = T (the
    root's t^-) leaves the sum (checked against the dense refined covariance)."""
    ks, K, a, v = tree.ks, tree.K, tree.a, tree.v
    root_coef = 1.0
    if n is not None and n < K:
        alpha, beta = alpha.copy(), beta.copy()
        alpha[n + 1:] = 0.0
        beta[n + 1:] = 0.0
        root_coef = 0.0
    # per-node sums over the node's bins tau of alpha_tau and of beta_{tau + 1} (tau = 0..K-1)
    node_alpha = [alpha[:K].copy()]
    node_beta = [beta[1:].copy()]  # beta_K = 0
    for k in reversed(ks):
        node_alpha.append(node_alpha[-1].reshape(-1, k).sum(axis=1))
        node_beta.append(node_beta[-1].reshape(-1, k).sum(axis=1))
    node_alpha.reverse()
    node_beta.reverse()
    G = np.full(1, root_coef)  # root: C_K = T contributes 1 to the coefficient of T = t^-_root
    total = 0.0
    if 0.0 < v[0] < np.inf:
        total += v[0] * (a[0] * root_coef + beta.sum()) ** 2
    for lev, k in enumerate(ks, 1):
        fa = node_alpha[lev].reshape(-1, k)
        fb = node_beta[lev].reshape(-1, k)
        g = np.zeros_like(fa)
        if k > 1:
            # later siblings' alpha (left coverings) minus earlier siblings' beta (right ones)
            g[:, :-1] = np.cumsum(fa[:, :0:-1], axis=1)[:, ::-1]
            g[:, 1:] -= np.cumsum(fb[:, :-1], axis=1)
        g += (1.0 - a[lev - 1]) * G[:, None]
        G = g.reshape(-1)
        if np.isfinite(v[lev]):
            total += v[lev] * a[lev] ** 2 * float(np.dot(G, G))
    return total


def _all_range_total(tree: _Tree, n: int | None = None) -> float:
    """Sum over the ranges within the first n bins (default K) of Var(C_b - C_a):
    (n + 1) sum_{t <= n} V_t - Var(sum_{t <= n} C_t). O(K)."""
    _, alpha, beta, V = tree.prefix_stats()
    n = tree.K if n is None else int(n)
    return float((n + 1) * V[:n + 1].sum() - _sum_variance(tree, alpha, beta, n))


def padded_refined_all_range_total(branching: Sequence[int], level_variances: ArrayLike,
                                   n: int) -> float:
    """The refined estimator's all-range total over the first n bins of a (padded)
    level-uniform tree, O(K'). Needs every prefix identified (all levels below the root
    measured at the leaves' resolution); raises ValueError otherwise."""
    ks = tuple(int(k) for k in branching)
    v = np.asarray(level_variances, dtype=float)
    ks_eff, v_eff, step = _effective_tree(ks, v)
    if ks_eff is None or step != 1:
        raise ValueError("the refined estimator does not identify every bin of this tree")
    K = math.prod(ks)
    if not 1 <= n <= K:
        raise ValueError(f"n must be in [1, {K}], got {n!r}")
    return _all_range_total(_Tree(ks, v), n)


# --------------------------------------------------------------------------- all-range per query


def _all_range_per_query(tree: _Tree) -> np.ndarray:
    """Var(C_e - C_s) for all 0 <= s < e <= K, lexicographic in (s, e - 1).

    O(K h^2) for the per-level tables, then O(1) gathers per pair: O(K^2) time, memory
    O(K^2) for the output plus O(_PAIR_CHUNK) temporaries."""
    K, h, ks, widths, b, P = tree.K, tree.h, tree.ks, tree.widths, tree.b, tree.P
    _, alpha, beta, V = tree.prefix_stats()
    x = np.arange(K + 1)
    # digits d_l(x), l = 0..h (d_0(x) = x // K), and the tables D_c(x) = sum_{1<=l<=c} d_l b_l,
    # B_c(x) = sum_{l > c} d_l P(c, l) b_l; A = D + B; flattened as [c * (K + 1) + x]
    d = np.stack([x // K] + [(x // widths[lev]) % ks[lev - 1] for lev in range(1, h + 1)])
    db = d[1:] * b[1:, None]
    D = np.zeros((h + 1, K + 1))
    D[1:] = np.cumsum(db, axis=0)
    B: npt.NDArray[np.float64] = np.zeros((h + 1, K + 1))
    for lev in range(h):
        B[lev] = (P[lev, lev + 1:, None] * db[lev:]).sum(axis=0)
    A = (D + B).ravel()
    B = B.ravel()
    d = d.ravel()
    pdeep = _deepest_digit_levels(ks).astype(np.int64)
    wl = np.array(widths, dtype=np.int64)
    desc = np.arange(h, -1, -1)  # within a row (e ascending) both levels below decrease

    out = np.empty(K * (K + 1) // 2)
    rows = np.arange(K, 0, -1)  # row s holds e = s + 1 .. K
    row_end = np.cumsum(rows)
    s0, pos = 0, 0
    while s0 < K:  # chunks of whole rows, ~_PAIR_CHUNK pairs each
        s1 = int(np.searchsorted(row_end, pos + _PAIR_CHUNK, side="right"))
        s1 = min(max(s1, s0 + 1), K)
        cnt = rows[s0:s1]
        n = int(cnt.sum())
        sr = np.arange(s0, s1)
        s = np.repeat(sr, cnt)
        e = np.arange(n) - np.repeat(np.cumsum(cnt) - cnt, cnt) + s + 1
        # c = first level where the digits of s and e differ = #{l : e < end_l(s)}, end_l(s) =
        # end of s's level-l node: a step function of e along the row (lengths of its steps)
        end = np.empty((sr.size, h + 2), dtype=np.int64)
        end[:, 0] = K + 1
        end[:, 1:] = (sr[:, None] // wl + 1) * wl
        c = np.repeat(np.tile(desc, sr.size), (end[:, :-1] - end[:, 1:])[:, ::-1].ravel())
        # cm = the same for the mirrored pair (K - e, K - s) = #{l : e <= g_l(s)},
        # g_l(s) = K - (start of the level-l node holding K - s)
        g = np.empty((sr.size, h + 2), dtype=np.int64)
        g[:, 0] = K
        g[:, 1:] = K - ((K - sr[:, None]) // wl) * wl
        cm = np.repeat(np.tile(desc, sr.size), (g[:, :-1] - g[:, 1:])[:, ::-1].ravel())
        cs = c * (K + 1)
        ps = pdeep[s]
        ll = A[cs + s]
        mm = A[cm * (K + 1) + (K - e)]
        ml = (d[cs + e] - d[cs + s] - 1 + (ps <= c)) * b[c]
        ml += B[cs + (K - s)]
        ml += B[cs + e]
        ml *= P[np.minimum(ps, c), c]
        a_s, b_s, a_e, b_e = alpha[s], beta[s], alpha[e], beta[e]
        cov = a_s * a_e * ll - b_s * a_e * ml + b_s * b_e * (tree.v0 + mm)
        cov += np.where(e == K, b_s * tree.rho_T, 0.0)
        res = V[s] + V[e] - 2.0 * cov
        out[pos:pos + n] = np.maximum(res, 0.0)
        pos += n
        s0 = s1
    return out


# --------------------------------------------------------------------------- public API


def refined_workload_error(branching: Sequence[int], level_variances: ArrayLike,
                           workload: str,
                           per_query: bool = False) -> float | npt.NDArray[np.float64]:
    """Exact error of the [RTS] App. B refined estimator on a workload, without any K x K matrix.

    The workload answers are derived from the refined prefixes C_0 = 0, C_1..C_K of
    :func:`dptree_opt.engines.honaker.refined_recursion`:

    * ``"prefix"``: C_t, t = 1..K (delegates to :func:`~dptree_opt.engines.honaker.refined_error`);
    * ``"identity"``: x_i = C_{i+1} - C_i, i = 0..K-1;
    * ``"all_range"``: every [a, b], 0 <= a <= b < K, answered by C_{b+1} - C_a, lexicographic in
      (a, b) like :func:`dptree_opt.workloads.all_range`.

    Returns the total variance sum_q Var(answer_q) (float, counts^2; divide by N^2 for the
    normalised CDF scale) or, with ``per_query``, the per-query variances (ndarray). The estimator
    is linear and unbiased, so these are the expected squared errors. Queries the tree does not
    identify (some level with k >= 2 has no measurement at or below it) get variance inf, as in
    ``refined_error``.

    Args:
        branching: sequence of ints k_1..k_h >= 1 (K = prod k_l).
        level_variances: h + 1 variances, root first; v_0 = 0: public total, inf: unmeasured.
        workload: "prefix", "identity" or "all_range".
        per_query: return per-query variances (all-range: K <= MAX_ALL_RANGE_PER_QUERY_K).

    Complexity (derivation in the module docstring): identity O(K) (total and per query),
    all-range total O(K) (Var(sum_t C_t) by one adjoint pass over the nodes), all-range per query
    O(K^2). Exact up to rounding: identity per query and all-range totals have no cancellation
    beyond a modest factor; an all-range per-query entry is V_s + V_e - 2 Cov and loses about
    log10(var(C) / var(range)) digits (at most ~log10 K, K <= 4096).

    Raises:
        ValueError naming the offending parameter.
    """
    ks, _, v = check_tree(branching, level_variances)
    check_choice(workload, "workload", REFINED_WORKLOADS)
    per_query = check_bool(per_query, "per_query")
    K = math.prod(ks)
    if workload == "prefix":
        return refined_error(ks, v, per_query=bool(per_query))
    if per_query and workload == "all_range" and K > MAX_ALL_RANGE_PER_QUERY_K:
        raise ValueError(
            f"per_query=True with workload='all_range' needs K <= {MAX_ALL_RANGE_PER_QUERY_K} "
            f"(K (K + 1) / 2 outputs), got K = {K}; the total (per_query=False) works at any K")

    ks_eff, v_eff, step = _effective_tree(ks, v)
    if ks_eff is None:  # nothing measured: no query is identified
        if not per_query:
            return math.inf
        return np.full(K if workload == "identity" else K * (K + 1) // 2, np.inf)
    assert v_eff is not None  # returned with ks_eff
    if step > 1:  # some prefixes unidentified: inf, except on the grid of multiples of step
        if not per_query:
            return math.inf
        if workload == "identity":
            return np.full(K, np.inf)
        out = np.full(K * (K + 1) // 2, np.inf)
        coarse = _all_range_per_query(_Tree(ks_eff, v_eff))
        Kc = K // step
        sc, ec = np.triu_indices(Kc)  # coarse (a', b'): s = a' step, e = (b' + 1) step
        s, e = sc * step, (ec + 1) * step
        # lexicographic index of (a, b) = (s, e - 1): row offset of s plus (e - 1 - s)
        out[s * K - s * (s - 1) // 2 + (e - 1 - s)] = coarse
        return out
    tree = _Tree(ks_eff, v_eff)
    if workload == "identity":
        var = _identity_per_query(tree)
        return var if per_query else float(var.sum())
    if per_query:
        return _all_range_per_query(tree)
    return _all_range_total(tree)


# --------------------------------------------------------------------------- dense path


def refined_histogram_covariance(mechanism: Mechanism) -> np.ndarray:
    """Covariance (K, K) of the histogram implied by the refined prefixes, x_i = C_{i+1} - C_i.

    The refined estimate is C = R'y (linear; the public total enters as a zero-variance row):
    R is built by feeding unit answer vectors in chunks, Cov_C = sum_r v_r R_r R_r'. O(rows K)
    work per chunk row; K <= MAX_REFINED_DENSE_BINS."""
    k = mechanism.n_bins
    if k > MAX_REFINED_DENSE_BINS:
        raise ValueError(f"the refined estimator's error for this workload needs its dense "
                         f"covariance: refused for {k} > {MAX_REFINED_DENSE_BINS} bins")
    ks, v = tree_parameters(mechanism)
    var = mechanism.variances
    rows = np.flatnonzero(np.isfinite(var) & (var > 0))
    cov_c = np.zeros((k, k))
    step = max(1, (1 << 22) // max(var.size, 1))
    for start in range(0, rows.size, step):
        chunk = rows[start:start + step]
        unit = np.zeros((chunk.size, var.size))
        unit[np.arange(chunk.size), chunk] = 1.0
        coef = refined_recursion(ks, v, unit)[0]  # (chunk, K): d C_t / d y_r
        cov_c += coef.T @ (coef * var[chunk, None])
    diff = np.eye(k) - np.eye(k, k=-1)  # x = D C
    return diff @ cov_c @ diff.T
