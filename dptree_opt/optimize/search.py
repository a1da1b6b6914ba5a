"""Exact integer search over level-uniform trees ([RTS] Sec. V; docs/math.md section 4).

:func:`level_uniform` enumerates the ordered factorisations k_1..k_h of K (and, with padding,
of K' in (K, max_padding K], the extra bins being empty), scores every tree by the exact
expected squared error of the first K prefix counts (the CDF) for the chosen estimator, and
returns the best tree with a ranked table of runners-up.

Exact per-level error sums (verified against the generic oracles in the tests)
--------------------------------------------------------------------------------
A tree is a chain of node widths K' = w_0 > w_1 > ... > w_h = 1, w_l = w_{l-1} / k_l. The
prefixes are [0, t), t = 1..K, and T = K + 1 (t = 0 contributes nothing).

* covering ([RTS] Thm IV.1 proof): C_hat_t uses d_l(t) = floor(t / w_l) mod k_l nodes of level
  l (mixed-radix digits; t = K' wraps to the public root), so the error is
  sum_l v_l F_l with F_l = sum_{t < T} (floor(t / w_l) mod k_l), in closed form from the full
  cycles of length w_{l-1} and one partial cycle (:func:`covering_level_sums`). Unpadded,
  F_l = K (k_l - 1) / 2 (Thm IV.1); padded, the top level is truncated and F_1 is not that.
  With a private root (add/remove) the prefix t = K' = K is the root itself (F_0 = 1).
* BLUE (docs/math.md section 3, ``error.tree``): q' Cov q = mu_0 (1'q)^2 / K' + sum_j mu_j
  N_j(t mod w_{j-1}) / w_{j-1}, N_j(R) = i (k - i) w^2 - 2 i w r + (k - 1) r^2 for
  R = i w + r, w = w_j; summed over t < T in closed form (:func:`blue_level_sums`). With equal
  per-level variances v, mu_j = v / S_j, S_j = w_j + ... + w_h.
* refined ([RTS] App. B): :func:`refined_prefix_error`, an O(h^3) closed form found here
  (per prefix the left and right covering variances sum to a constant M_p that depends only
  on the deepest nonzero digit p of t; see its docstring), equal to
  ``honaker.refined_error(per_query=True)[:K].sum()``. The BLUE is the best linear unbiased
  estimator, so its error lower-bounds the refined one and prunes the refined search.

Search (exact, not heuristic, for budgets="equal" and for the covering estimator)
----------------------------------------------------------------------------------
1. Padding needs only the smallest K' for a given subtree: for fixed w_1 (the chain below the
   top), every estimator's error of the first K prefixes grows with k_1 (covering: the digits
   of t < K do not depend on k_1, and t = K is the free root only when K' = K; BLUE: only
   -mu_1 t^2 / K' and mu_0 depend on k_1, both increase with K'; refined: the right covering
   of [t, K') grows). So k_1 = ceil(K / w_1) and K' = k_1 w_1, for every w_1 < K
   (``tests/test_optimize_search.py`` checks this against the enumeration of every K').
2. For each height h, a sieve over all widths w < K computes a lower bound G[w, m] on the
   per-bin cost of the m levels below w (every level below the top is swept by
   a >= floor(T / w_1) full cycles, a w_1 > T / 2), only over widths that can still beat the
   current N-th best (smooth widths). Top widths w_1 are taken in increasing order of
   (exact top cost + a w_1 G[w_1, h - 1]) until that bound exceeds the N-th best.
3. Below each surviving w_1, a depth-first enumeration with the *exact* best completion
   (memoised dynamic programme over divisors; for the BLUE the Pareto set of (cost, S) of the
   subchains, since mu_j depends on the widths below) keeps every chain that can enter the
   ranked table.
4. Refined estimator: the same search with the BLUE error as the bound, scoring the refined
   error of every chain that passes. The refined error is about 1.2-1.4x the BLUE's, so for
   large K too many chains pass (K = 2^16: ~4 x 10^5); after ``max_refined`` of them the
   search instead scores the ``refined_pool`` best chains by the BLUE error and reports in
   ``method`` whether the table is certified exact or an optimality-gap bound.

The ranked table lists each subtree (k_2..k_h) once, with its smallest admissible padding
(item 1): a larger top factor over the same subtree is never better and is not listed.

Budgets: "equal" splits the total equally over the noisy levels (``Mechanism``'s default).
"optimal" for the covering estimator is Thm IV.2(a) generalised to padded trees and every
noise / neighbour model (minimise sum_l A_l / b_l^2 (Laplace) or sum_l A_l / b_l (Gaussian)
with A_l = unit variance x F_l: b_l proportional to A_l^(1/3) or A_l^(1/2)); the search is
then exact too (the cost sum_l A_l^(1/p) is additive over levels). For the refined estimator
(scipy SLSQP over the simplex on the O(h^3) closed form) and the BLUE
(``blue_budgets.optimal_blue_budgets``) the budgets are optimised for a candidate pool, the
best ``pool`` trees of the exhaustive equal-budget search: a heuristic restriction, not an
exhaustive search over trees. For the BLUE the pool also holds each pool tree's finest
refinement and K's own prime factorisation: with optimal budgets a refinement never hurts
(the coarse tree is the refinement with its inserted levels unfunded), so for K = 2^m the
binary tree is found; and the finest trees of the 3-smooth K' = 2^a 3^b within the padding.
With Gaussian noise and few candidate K' (at most MAX_EXHAUSTIVE_FINEST_TREES finest trees in
all, K <= ~400) every finest tree of every K' is optimised: the answer is then the global
optimum over all trees (tested against brute force over every ordered factorisation). Else,
and always for Laplace (non-convex per tree), the search is heuristic across padded K' and
``method`` states a certified lower bound on every mechanism instead (the dual of the
Gaussian optimum, or the SVD bound).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from numbers import Integral, Real

import numpy as np

from ..privacy import check_budget, check_noise, infer_noise, resolve_budget
from ..strategies.base import check_neighbours
from ..engines.tree_error import (_block_gram, all_range_level_weight, all_range_parent_energy,
                          haar_workload_weights)
from .levels import level_variances, noisy_levels, resolve_public, unit_variances
from ..limits import (MAX_SEARCH_BINS, SEARCH_BYTES_PER_BIN, at_budget, check_count,
                      check_memory)
from .result import TreeDesign, at_total_budget, error_unit

__all__ = ["level_uniform", "design_error", "covering_level_sums", "blue_level_sums",
           "refined_prefix_error",
           "ESTIMATORS", "BUDGETS"]

ESTIMATORS = ("covering", "refined", "blue")
BUDGETS = ("equal", "optimal")
_SAFE = 1.0 - 1e-9  # float bounds are shrunk by this factor before pruning
_SIEVE_CHUNK = 1 << 21  # (entry, factor) pairs the sieve evaluates at once


# --------------------------------------------------------------------------- exact level sums
def _widths(ks) -> list[int]:
    w = [math.prod(ks)]
    for k in ks:
        w.append(w[-1] // k)
    return w


def _digit_sum(T: int, W: int, w: int) -> int:
    """sum_{t < T} (floor(t / w) mod k), k = W / w: full cycles of W plus one partial cycle."""
    k = W // w
    a, r = divmod(T, W)
    b, c = divmod(r, w)
    return a * w * k * (k - 1) // 2 + w * b * (b - 1) // 2 + b * c


@lru_cache(maxsize=1 << 16)
def _haar_sum(T: int, W: int, w: int) -> int:
    """sum_{t < T} N(t mod W), N(R) = i (k - i) w^2 - 2 i w r + (k - 1) r^2, R = i w + r.

    One full cycle sums to (k - 1) W (W w + 1) / 6 (exact integer); the partial cycle of
    R < rem = b w + c adds the b full children and the first c offsets of child b."""
    k = W // w
    a, rem = divmod(T, W)
    full = (k - 1) * W * (W * w + 1) // 6
    b, c = divmod(rem, w)
    s_i, s_i2 = b * (b - 1) // 2, (b - 1) * b * (2 * b - 1) // 6
    s_r, s_r2 = w * (w - 1) // 2, (w - 1) * w * (2 * w - 1) // 6
    part = w**3 * (k * s_i - s_i2) - 2 * w * s_r * s_i + (k - 1) * b * s_r2
    part += (b * (k - b) * w * w * c - 2 * b * w * (c * (c - 1) // 2)
             + (k - 1) * ((c - 1) * c * (2 * c - 1) // 6))
    return a * full + part


def _haar_sum_float(T: int, W, w):
    """_haar_sum in float64, vectorised over arrays W, w (relative error ~1e-15; used only
    for the search's bounds, which are shrunk by _SAFE before pruning)."""
    T = float(T)
    Wf = np.asarray(W, dtype=float)
    wf = np.asarray(w, dtype=float)
    k = Wf / wf
    a = np.floor(T / Wf)
    rem = T - a * Wf
    full = (k - 1) * Wf * (Wf * wf + 1) / 6
    b = np.floor(rem / wf)
    c = rem - b * wf
    s_i, s_i2 = b * (b - 1) / 2, (b - 1) * b * (2 * b - 1) / 6
    s_r, s_r2 = wf * (wf - 1) / 2, (wf - 1) * wf * (2 * wf - 1) / 6
    part = wf**3 * (k * s_i - s_i2) - 2 * wf * s_r * s_i + (k - 1) * b * s_r2
    part += b * (k - b) * wf * wf * c - 2 * b * wf * (c * (c - 1) / 2) \
        + (k - 1) * ((c - 1) * c * (2 * c - 1) / 6)
    return np.maximum(a * full + part, 0.0)


def covering_level_sums(branching, n_prefixes: int | None = None) -> tuple[int, ...]:
    """(F_0, F_1..F_h): how often each level's nodes are used by the covering estimator over
    the first ``n_prefixes`` prefixes of the tree (default all K' = prod k_l).

    F_l = sum_{t=1}^{K} (floor(t / w_l) mod k_l) for l >= 1 (mixed-radix digits); F_0 = 1 if the
    total K' is among the prefixes (the root alone covers it), else 0. Unpadded,
    F_l = K (k_l - 1) / 2 ([RTS] Thm IV.1 proof). Exact integers, O(h)."""
    ks = tuple(int(k) for k in branching)
    w = _widths(ks)
    K = w[0] if n_prefixes is None else int(n_prefixes)
    if not 1 <= K <= w[0]:
        raise ValueError(f"n_prefixes must be in [1, {w[0]}], got {n_prefixes!r}")
    return (int(K == w[0]),) + tuple(_digit_sum(K + 1, w[l - 1], w[l])
                                     for l in range(1, len(ks) + 1))


def blue_level_sums(branching, n_prefixes: int | None = None) -> tuple[float, ...]:
    """(H_0, H_1..H_h) with the BLUE error of the first K prefixes = sum_j mu_j H_j
    (mu_j = Haar eigenvalues of the BLUE covariance, ``error.tree.blue_haar_variances``):
    H_0 = sum_{t<=K} t^2 / K', H_j = sum_{t<=K} N_j(t mod w_{j-1}) / w_{j-1}. O(h)."""
    ks = tuple(int(k) for k in branching)
    w = _widths(ks)
    K = w[0] if n_prefixes is None else int(n_prefixes)
    if not 1 <= K <= w[0]:
        raise ValueError(f"n_prefixes must be in [1, {w[0]}], got {n_prefixes!r}")
    h0 = K * (K + 1) * (2 * K + 1) // 6 / w[0]
    return (h0,) + tuple(_haar_sum(K + 1, w[l - 1], w[l]) / w[l - 1]
                         for l in range(1, len(ks) + 1))


def _below_variances(ks, v) -> list[float]:
    """var(t^-) per level ([HON] estimation from below): leaves v_h, then
    1 / (1 / v_l + 1 / (k_{l+1} var_{l+1})) with 1/inf = 0 and 1/0 = inf."""
    h = len(ks)
    vb = [0.0] * (h + 1)
    vb[h] = float(v[h])
    for lev in range(h - 1, -1, -1):
        prec = 0.0
        for var in (float(v[lev]), ks[lev] * vb[lev + 1]):
            prec += 0.0 if math.isinf(var) else (math.inf if var == 0 else 1.0 / var)
        vb[lev] = math.inf if prec == 0 else (0.0 if math.isinf(prec) else 1.0 / prec)
    return vb


def refined_prefix_error(branching, level_variances, n_prefixes: int | None = None) -> float:
    """Total variance of the [RTS] App. B refined estimates of the first ``n_prefixes``
    prefix counts of a (possibly padded) level-uniform tree, in closed form, O(h^3).

    Equal to ``honaker.refined_error(branching, v, per_query=True)[:n].sum()`` (tests), which
    costs O(K'). Derivation: with b_l = var(t^-) of level l and the digits d_l of t,
    L_t = sum_l d_l b_l. If p is the deepest level with d_p > 0, the right covering of [t, K')
    has digits k_l - 1 - d_l (l < p), k_p - d_p (l = p), 0 (l > p) (K' - t = (K' - 1 - t) + 1), so
    L_t + R_t = v_0 + sum_{l<p} (k_l - 1) b_l + k_p b_p = M_p depends on p only and
    var_t = L_t R_t / (L_t + R_t) = L_t - L_t^2 / M_p. Summing over the prefixes with a given
    p needs only the mean and variance of L_t (independent uniform digits); t < K splits into
    the usual mixed-radix blocks (digits of K fixed above level j, d_j < D_j, free below).
    t = K' is the root's t^- (variance vb_0)."""
    ks = tuple(int(k) for k in branching)
    h = len(ks)
    v = [float(x) for x in level_variances]
    Kp = math.prod(ks)
    K = Kp if n_prefixes is None else int(n_prefixes)
    vb = _below_variances(ks, v)
    b = vb[1:]
    M, acc = [], 0.0
    for p in range(h):
        M.append(v[0] + acc + ks[p] * b[p])
        acc += (ks[p] - 1) * b[p]
    free_mean = [b[l] * (ks[l] - 1) / 2.0 for l in range(h)]
    free_var = [b[l] ** 2 * (ks[l] ** 2 - 1) / 12.0 for l in range(h)]
    last_mean = [b[l] * ks[l] / 2.0 for l in range(h)]  # d_p uniform on [1, k_p)
    last_var = [b[l] ** 2 * (ks[l] ** 2 - 2 * ks[l]) / 12.0 for l in range(h)]

    def group(p, n, mean, var):
        if n == 0:
            return 0.0
        s1, s2 = n * mean, n * (var + mean * mean)
        return s1 if math.isinf(M[p]) else s1 - s2 / M[p]

    def single(digits):
        L = sum(d * bl for d, bl in zip(digits, b) if d)
        p = max(i for i, d in enumerate(digits) if d > 0)
        return L if math.isinf(M[p]) else L * (M[p] - L) / M[p]

    total = 0.0
    if K == Kp:  # t = 1..K'-1: every nonzero digit tuple, then t = K'
        count, mean, var = 1, 0.0, 0.0
        for p in range(h):
            total += group(p, count * (ks[p] - 1), mean + last_mean[p], var + last_var[p])
            count *= ks[p]
            mean += free_mean[p]
            var += free_var[p]
        return total + vb[0]
    w = _widths(ks)
    D = [(K // w[l + 1]) % ks[l] for l in range(h)]
    A = 0.0
    for j in range(h):
        Dj = D[j]
        if Dj > 0:
            if any(D[:j]):  # deepest nonzero digit above j: one prefix
                total += single(D[:j] + [0] * (h - j))
            if Dj >= 2:  # p = j, d_j in [1, D_j)
                total += group(j, Dj - 1, A + b[j] * Dj / 2.0,
                               b[j] ** 2 * ((Dj - 1) ** 2 - 1) / 12.0)
            count, mean = Dj, A + b[j] * (Dj - 1) / 2.0
            var = b[j] ** 2 * (Dj**2 - 1) / 12.0
            for p in range(j + 1, h):  # d_j < D_j, free digits between, d_p in [1, k_p)
                total += group(p, count * (ks[p] - 1), mean + last_mean[p], var + last_var[p])
                count *= ks[p]
                mean += free_mean[p]
                var += free_var[p]
        A += Dj * b[j]
    return total + single(D)


# --------------------------------------------------------------------------- the setting
@dataclass
class _Setting:
    K: int
    budget: float
    noise: str
    neighbours: str
    public: bool
    estimator: str
    budgets: str
    workload: str = "prefix"  # "prefix" (the CDF) or "all_range" (BLUE only)
    p: int = field(init=False)  # Laplace: variance ~ 1/b^2 (p = 3 in Thm IV.2(a)); Gaussian 2

    def __post_init__(self):
        self.p = 3 if self.noise == "laplace" else 2
        self._unit = {}
        self._v_equal = {}

    @property
    def T(self) -> int:
        return self.K + 1

    def unit(self, h: int) -> np.ndarray:
        """Unit-budget variances v_0..v_h of trees of height h (all factors >= 2)."""
        if h not in self._unit:
            self._unit[h] = unit_variances(h, noise=self.noise, neighbours=self.neighbours,
                                           public_total=self.public)
        return self._unit[h]

    def n_noisy(self, h: int) -> int:
        return h if self.public else h + 1

    def scale(self, b):
        """Variance multiplier of a level with budget b (Laplace 1/b^2, Gaussian 1/b)."""
        b = np.asarray(b, dtype=float)
        with np.errstate(divide="ignore"):
            return 1.0 / b**2 if self.noise == "laplace" else 1.0 / b

    def v_equal(self, h: int) -> float:
        """The common variance of every noisy level under the equal split (height h)."""
        if h not in self._v_equal:
            self._v_equal[h] = float(self.unit(h)[1] * self.scale(self.budget / self.n_noisy(h)))
        return self._v_equal[h]

    def equal_budgets(self, h: int) -> tuple:
        return (self.budget / self.n_noisy(h),) * self.n_noisy(h)

    def variances(self, h: int, budgets) -> np.ndarray:
        """v_0..v_h from per-noisy-level budgets (the ``levels`` rules, unit scaled)."""
        unit = self.unit(h)
        v = np.zeros(h + 1)
        b = np.asarray(budgets, dtype=float)
        lv = noisy_levels(h, self.neighbours, self.public)
        with np.errstate(divide="ignore"):
            v[list(lv)] = unit[list(lv)] * self.scale(b)
        return v


# --------------------------------------------------------------------------- exact scores
def _covering_optimal(s: _Setting, ks, F) -> tuple[float, tuple]:
    """Thm IV.2(a) generalised: minimise sum_l A_l / b_l^(p-1) s.t. sum b_l = B, A_l = u_l F_l:
    b_l = B A_l^(1/p) / sum_m A_m^(1/p), error (sum_l A_l^(1/p))^p / B^(p-1)."""
    h = len(ks)
    unit = s.unit(h)
    lv = noisy_levels(h, s.neighbours, s.public)
    A = np.array([unit[l] * F[l] for l in lv], dtype=float)
    r = A ** (1.0 / s.p)
    tot = r.sum()
    err = float(np.power(np.float64(tot), s.p) / np.power(np.float64(s.budget), s.p - 1))
    b = s.budget * r / tot
    return float(err), tuple(float(x) for x in b)


def _covering_score(s: _Setting, ks) -> tuple[float, tuple]:
    """Exact covering error of the first K prefixes and the budgets (noisy-level order)."""
    F = list(covering_level_sums(ks, s.K))
    h = len(ks)
    if s.budgets == "equal":
        v = s.variances(h, s.equal_budgets(h))
        err = sum(v[l] * F[l] for l in range(h + 1) if F[l])
        return float(err), s.equal_budgets(h)
    if s.public:
        return _covering_optimal(s, ks, F)
    best = _covering_optimal(s, ks, F)
    if F[0]:  # K' = K: the root may stay unmeasured; then t = K takes k_1 level-1 nodes
        G = [0, F[1] + ks[0]] + F[2:]
        best = min(best, _covering_optimal(s, ks, G))
    return best


def _blue_equal(s: _Setting, ks) -> float:
    h = len(ks)
    H = (haar_workload_weights(ks, "all_range", s.K) if s.workload == "all_range"
         else blue_level_sums(ks, s.K))
    w = _widths(ks)
    S = np.cumsum(np.array(w[::-1], dtype=float))[::-1]  # S_l = w_l + ... + w_h
    v = s.v_equal(h)
    err = sum(H[j] / S[j] for j in range(1, h + 1))
    if not s.public:
        err += H[0] / S[0]  # mu_0 = v / (K' + S_1) = v / S_0 (v_0 = v under the equal split)
    return float(v * err)


def _refined_equal(s: _Setting, ks) -> float:
    h = len(ks)
    return refined_prefix_error(ks, s.variances(h, s.equal_budgets(h)), s.K)


def _equal_score(s: _Setting, ks) -> float:
    if s.estimator == "covering":
        return _covering_score(s, ks)[0]
    if s.estimator == "blue":
        return _blue_equal(s, ks)
    return _refined_equal(s, ks)


def design_error(n_bins: int, branching, budgets=None, *, estimator: str = "covering",
               noise: str = "laplace", neighbours: str = "swap", public_total=None,
               total_budget: float = 1.0) -> float:
    """Exact error (counts^2) of the first ``n_bins`` prefixes of a (possibly padded) tree,
    as scored by :func:`level_uniform` (fast structured formulas; see the module docstring).

    ``budgets``: one per noisy level; default the equal split of ``total_budget``. Scored
    at unit total budget and restated (``limits.at_budget``: exact; ValueError when the
    error is not a double)."""
    ks = tuple(int(k) for k in branching)
    noise = check_noise(noise)
    if budgets is None:
        total = check_budget(total_budget, "total_budget")
        b = None
    else:
        b = np.asarray(tuple(float(x) for x in budgets), dtype=float)
        total = float(b.sum()) if np.all(np.isfinite(b)) and b.sum() > 0 else 1.0
        b = tuple(b / total)
    s = _Setting(int(n_bins), 1.0, noise, check_neighbours(neighbours),
                 resolve_public(neighbours, public_total), estimator, "equal")
    h = len(ks)
    b = s.equal_budgets(h) if b is None else b
    v = level_variances(ks, b, noise=noise, neighbours=neighbours, public_total=public_total)
    if estimator == "covering":
        F = covering_level_sums(ks, s.K)
        err = float(sum(v[l] * F[l] for l in range(h + 1) if F[l]))
    elif estimator == "refined":
        err = refined_prefix_error(ks, v, s.K)
    elif estimator == "blue":
        from ..engines.tree_error import blue_haar_variances
        mu = blue_haar_variances(ks, v)
        err = float(np.dot(mu, blue_level_sums(ks, s.K)))
    else:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return at_budget(err, noise, total)


# --------------------------------------------------------------------------- integers
@lru_cache(maxsize=4)
def _spf(limit: int) -> np.ndarray:
    """Smallest prime factor of every n <= limit (numpy sieve)."""
    spf = np.zeros(limit + 1, dtype=np.int64)
    spf[1:] = 1
    for p in range(2, math.isqrt(limit) + 1):
        if spf[p] == 1:
            block = spf[p * p:: p]
            block[block == 1] = p
    idx = np.arange(limit + 1)
    spf[(spf == 1) & (idx >= 2)] = idx[(spf == 1) & (idx >= 2)]
    return spf


class _Divisors:
    """Memoised divisors and Omega (prime factors with multiplicity) via a sieve."""

    def __init__(self, limit: int):
        self.spf = _spf(max(limit, 2)) if limit <= 1 << 23 else None
        self._div = {}
        self._arr = {}
        self._omega = {}

    def _factor(self, n: int) -> dict:
        f = {}
        if self.spf is not None and n < self.spf.size:
            while n > 1:
                p = int(self.spf[n])
                f[p] = f.get(p, 0) + 1
                n //= p
            return f
        p = 2
        while p * p <= n:
            while n % p == 0:
                f[p] = f.get(p, 0) + 1
                n //= p
            p += 1
        if n > 1:
            f[n] = f.get(n, 0) + 1
        return f

    def omega(self, n: int) -> int:
        if n not in self._omega:
            self._omega[n] = sum(self._factor(n).values())
        return self._omega[n]

    def divisor_array(self, n: int) -> np.ndarray:
        """The divisors d >= 2 of n as an increasing int64 array (memoised): products of
        the prime powers, one outer product per distinct prime."""
        arr = self._arr.get(n)
        if arr is None:
            ds = np.ones(1, np.int64)
            for p, e in self._factor(n).items():
                ds = np.multiply.outer(ds, p ** np.arange(e + 1, dtype=np.int64)).ravel()
            ds.sort()
            arr = self._arr[n] = ds[1:]
        return arr

    def divisors(self, n: int) -> list[int]:
        """Divisors d >= 2 of n, increasing (a list, memoised)."""
        if n not in self._div:
            self._div[n] = self.divisor_array(n).tolist()
        return self._div[n]


# --------------------------------------------------------------------------- the ranked table
class _Table:
    """The best ``size`` trees found so far (max-heap on the score); theta = admission bar."""

    def __init__(self, size: int):
        self.size = size
        self.heap = []  # (-score, tie, ks, extra)
        self.seen = set()

    @property
    def theta(self) -> float:
        return -self.heap[0][0] if len(self.heap) >= self.size else math.inf

    def offer(self, score: float, ks: tuple, extra=None) -> None:
        if ks in self.seen or not score <= self.theta:
            return
        self.seen.add(ks)
        item = (-score, tuple(-k for k in ks), ks, extra)
        if len(self.heap) < self.size:
            heapq.heappush(self.heap, item)
        else:
            out = heapq.heappushpop(self.heap, item)
            self.seen.discard(out[2])

    def ranked(self):
        return sorted(((-s, ks, extra) for s, _, ks, extra in self.heap),
                      key=lambda x: (x[0], len(x[1]), x[1]))


class _TooMany(Exception):
    """The exhaustive refined search would score more trees than allowed."""


# --------------------------------------------------------------------------- the engine
class _Engine:
    """Branch and bound over chains of widths for one setting (see the module docstring).

    Engine units: covering/equal -> digit sums F (error = v_eq(h) x units); BLUE/equal and
    refined (bound) -> sum_j H_j / S_j (error >= v_eq(h) x units); covering/optimal ->
    sum_l (u_l F_l)^(1/p) (error = units^p / B^(p-1))."""

    def __init__(self, s: _Setting, table: _Table, *, allow_padding: bool,
                 max_padding: float, max_height: int | None, height: int | None):
        self.s = s
        self.table = table
        self.pad = allow_padding
        self.max_pad = max_padding
        self.mode = ("blue" if s.estimator in ("blue", "refined")
                     else "cov_opt" if s.budgets == "optimal" else "cov")
        self.T = s.K + 1
        self.all_range = s.workload == "all_range"
        self.div = _Divisors(s.K)
        self._par = {}
        self._haar_cache = {}
        self._num_cache = {}
        self.layer_arrays = None  # the layers' widths, sorted (for vectorised membership)
        self.max_scored = math.inf  # refined: refined errors to compute before giving up
        self.layers = None  # padded search: {m: set of the widths the sieve kept}
        self.leaves = 0
        self.scored = 0
        K = s.K
        hmax = max(1, _max_padded(K, max_padding).bit_length() - 1) if allow_padding else \
            max(1, self.div.omega(K)) if K > 1 else 1
        if max_height is not None:
            hmax = min(hmax, max_height)
        self.heights = [height] if height is not None else list(range(1, hmax + 1))

    # ---- unit conversions
    def units_bar(self, h: int) -> float:
        """The current admission bar in engine units for height h."""
        th = self.table.theta
        if not math.isfinite(th):
            return math.inf
        s = self.s
        if self.mode == "cov_opt":
            return float(np.power(th * np.power(np.float64(s.budget), s.p - 1), 1.0 / s.p))
        return th / s.v_equal(h)

    def _cu(self, h: int) -> float:
        """cov_opt: the unit variance of the levels below the root (all equal)."""
        return float(self.s.unit(h)[1])

    def _haar(self, W: int, w: int) -> int:
        """_haar_sum(T, W, w), memoised (the search asks for the same pairs many times)."""
        key = (W, w)
        val = self._haar_cache.get(key)
        if val is None:
            val = self._haar_cache[key] = _haar_sum(self.T, W, w)
        return val

    # ---- exact level costs (engine units)
    def level_cost(self, h: int, W: int, w: int, S: int) -> float:
        if self.mode == "cov":
            return float(_digit_sum(self.T, W, w))
        if self.mode == "cov_opt":
            return (self._cu(h) * _digit_sum(self.T, W, w)) ** (1.0 / self.s.p)
        return self._num(W, w) / S

    # ---- BLUE level numerators: error = v sum_j num(w_(j-1), w_j) / S_j (+ root)
    def _num(self, W: int, w: int) -> float:
        """The level's workload weight q_j (prefix: H_j = haar sum / W; all ranges:
        error.tree.all_range_level_weight), memoised."""
        if not self.all_range:
            return self._haar(W, w) / W
        key = ("ar", W, w)
        val = self._haar_cache.get(key)
        if val is None:
            val = self._haar_cache[key] = float(all_range_level_weight(self.s.K, W, w))
        return val

    def _num_all(self, W: int) -> np.ndarray:
        """_num_vec(W, W // d) for every divisor d >= 2 of W (memoised per W)."""
        val = self._num_cache.get(W)
        if val is None:
            val = self._num_cache[W] = self._num_vec(W, W // self.div.divisor_array(W))
        return val

    def _num_vec(self, W: int, w: np.ndarray) -> np.ndarray:
        """_num for one W and an array of child widths (float64)."""
        if not self.all_range:
            return _haar_sum_float(self.T, W, w) / W
        return all_range_level_weight(self.s.K, W, w)

    def _root_num(self, Kp: int) -> float:
        """The root's weight q_0 = 1'G1 / K' (G: the workload's Gram over the K bins)."""
        K = self.s.K
        if self.all_range:
            return float(_block_gram(1.0, K, 0.0, K)) / Kp
        return (K * (K + 1) * (2 * K + 1) // 6) / Kp

    # ---- exact completion: Pareto set of (cost below, widths below) for m levels below u
    def par(self, h: int, u: int, m: int):
        """Pareto set of (cost of the m levels below u, sum of their widths) over the chains
        below u (only the smallest cost for the covering), as two arrays (costs, widths)
        sorted by decreasing width. Memoised; the height matters only for the covering with
        optimal budgets (its unit variance)."""
        key = (h if self.mode == "cov_opt" else 0, u, m)
        if key in self._par:
            return self._par[key]
        costs, sums = [], []
        if m == 0:
            if u == 1:
                costs, sums = [np.zeros(1)], [np.zeros(1, np.int64)]
        elif self.div.omega(u) >= m:
            cand = u // self.div.divisor_array(u)          # child widths, decreasing
            if self.layers is not None:
                # only widths the sieve kept: every chain below another v is too costly
                lay = self.layer_arrays[m - 1]
                pos = np.minimum(np.searchsorted(lay, cand), lay.size - 1)
                sel = np.flatnonzero(lay[pos] == cand) if lay.size else np.empty(0, np.int64)
            else:
                sel = np.arange(cand.size)
            vs, subs, idx = [], [], []
            memo, hk = self._par, key[0]
            for i in sel.tolist():
                v = int(cand[i])
                sub = memo.get((hk, v, m - 1))  # inline memo hit: no call
                if sub is None:
                    sub = self.par(h, v, m - 1)
                if sub[0].size:
                    vs.append(v)
                    subs.append(sub)
                    idx.append(i)
            if vs and self.mode == "blue":
                # level cost H(u, v) / S with S = v + (widths below v), for every subchain
                v_arr = np.array(vs, dtype=np.int64)
                sizes = [sub[0].size for sub in subs]
                sv = np.repeat(v_arr, sizes) + np.concatenate([sub[1] for sub in subs])
                num = np.repeat(self._num_all(u)[idx], sizes)
                costs = [np.concatenate([sub[0] for sub in subs]) + num / sv]
                sums = [sv]
            elif vs:
                costs = [np.array([sub[0][0] + self.level_cost(h, u, v, 0)
                                   for v, sub in zip(vs, subs)])]
                sums = [np.zeros(len(vs), np.int64)]
        if not costs:
            res = (np.empty(0), np.empty(0, np.int64))
        else:
            c, sv = np.concatenate(costs), np.concatenate(sums)
            order = np.lexsort((c, -sv))  # widths decreasing, then cost increasing
            c, sv = c[order], sv[order]
            best_before = np.empty_like(c)
            best_before[0] = math.inf
            np.minimum.accumulate(c[:-1], out=best_before[1:])
            # a subchain costing more than the admission bar of the lowest height that can
            # contain it (m + 1 levels; the bar falls with the height) is useless everywhere
            cut = self.units_bar(m + 1) / _SAFE if self.mode != "cov_opt" else math.inf
            keep = (c < best_before) & (c <= cut)
            res = (c[keep], sv[keep])
        self._par[key] = res
        return res

    def _par_batch(self, tops: np.ndarray, m: int) -> None:
        """BLUE, padded search: ``par(., u, m)`` for every u in ``tops`` and, below, for every
        width their chains can reach, into the memo, one vectorised pass per level instead of
        a Python loop over children (the same sets and order as ``par``; tests compare)."""
        memo = self._par
        need = {m: [int(u) for u in tops.tolist() if (0, int(u), m) not in memo]}
        pairs = {}
        for j in range(m, 0, -1):            # discover the widths each level needs
            us = need[j]
            if not us:
                need[j - 1] = []
                continue
            divs = [self.div.divisor_array(u) for u in us]
            sizes = np.fromiter((d.size for d in divs), np.int64, len(us))
            u_arr = np.repeat(np.array(us, dtype=np.int64), sizes)
            grp = np.repeat(np.arange(len(us)), sizes)
            v = u_arr // np.concatenate(divs) if divs else np.empty(0, np.int64)
            lay = self.layer_arrays[j - 1]
            pos = np.minimum(np.searchsorted(lay, v), max(lay.size - 1, 0))
            ok = lay[pos] == v if lay.size else np.zeros(v.size, bool)
            pairs[j] = (grp[ok], u_arr[ok], v[ok])
            need[j - 1] = [x for x in np.unique(v[ok]).tolist() if (0, x, j - 1) not in memo]
        for x in need[0]:
            memo[(0, x, 0)] = ((np.zeros(1), np.zeros(1, np.int64)) if x == 1
                               else (np.empty(0), np.empty(0, np.int64)))
        for j in range(1, m + 1):            # then the Pareto sets, bottom-up
            us = need[j]
            if not us:
                continue
            grp, u, v = pairs[j]
            omega_ok = np.array([self.div.omega(x) >= j for x in us], bool)
            keep = omega_ok[grp]
            grp, u, v = grp[keep], u[keep], v[keep]
            vals = np.unique(v)
            subs = [memo[(0, x, j - 1)] for x in vals.tolist()]
            lens = np.fromiter((sub[0].size for sub in subs), np.int64, len(subs))
            ptr = np.concatenate([[0], np.cumsum(lens)])
            sub_c = np.concatenate([sub[0] for sub in subs]) if subs else np.empty(0)
            sub_s = (np.concatenate([sub[1] for sub in subs]) if subs
                     else np.empty(0, np.int64))
            vi = np.searchsorted(vals, v)
            cnt = lens[vi]
            num_p = self._num_vec(u, v)
            cut = self.units_bar(j + 1) / _SAFE
            # a Pareto set runs from its widest (first) to its cheapest (last) entry: a pair
            # whose cheapest cost with the widest S exceeds the cut has no useful entry
            pk = np.flatnonzero(cnt > 0)
            pk = pk[sub_c[ptr[vi[pk] + 1] - 1] + num_p[pk] / (v[pk] + sub_s[ptr[vi[pk]]])
                    <= cut]
            grp, v, vi, cnt, num_p = grp[pk], v[pk], vi[pk], cnt[pk], num_p[pk]
            e = np.repeat(ptr[vi], cnt) + (np.arange(int(cnt.sum()))
                                           - np.repeat(np.cumsum(cnt) - cnt, cnt))
            g = np.repeat(grp, cnt)
            sv = np.repeat(v, cnt) + sub_s[e]
            cost = sub_c[e] + np.repeat(num_p, cnt) / sv
            keep = cost <= cut                   # useless for any top (as in par)
            g, cost, sv = g[keep], cost[keep], sv[keep]
            order = np.lexsort((cost, -sv, g))   # per top: widths decreasing, then cost
            g, cost, sv = g[order], cost[order], sv[order]
            n = cost.size
            if n:  # Pareto: keep an entry iff it costs less than every wider one of its top
                rank = np.empty(n, np.int64)
                rank[np.argsort(cost, kind="stable")] = np.arange(n)
                key = (len(us) - 1 - g) * (n + 1) + rank   # earlier groups: larger keys
                prev = np.empty(n, np.int64)
                prev[0] = np.iinfo(np.int64).max
                np.minimum.accumulate(key[:-1], out=prev[1:])
                keep = key < prev
                g, cost, sv = g[keep], cost[keep], sv[keep]
            bounds = np.searchsorted(g, np.arange(len(us) + 1))
            for i, x in enumerate(us):
                a, b = bounds[i], bounds[i + 1]
                memo[(0, x, j)] = (cost[a:b], sv[a:b])

    # ---- scoring of complete chains
    def finish(self, ks: tuple) -> None:
        self.leaves += 1
        s = self.s
        if s.estimator == "covering":
            score, b = _covering_score(s, ks)
            self.table.offer(score, ks, b)
        elif s.estimator == "blue":
            self.table.offer(_blue_equal(s, ks), ks)
        else:
            # the BLUE error lower-bounds the refined error: score only if it can enter
            if _blue_equal(s, ks) * _SAFE <= self.table.theta:
                self.scored += 1
                if self.scored > self.max_scored:
                    raise _TooMany
                self.table.offer(_refined_equal(s, ks), ks)

    # ---- top-level cost of a chain (K', w_1) (engine units, exact or a lower bound)
    def top_terms(self, h: int, Kp: int, w1: int, S1: int) -> float:
        """Exact cost of level 1 (and of the root under a private N) given S_1."""
        s = self.s
        if self.mode == "cov":
            c = float(_digit_sum(self.T, Kp, w1))
            if not s.public and Kp == s.K:
                c += 1.0  # equal split: the root is measured and covers t = K
            return c
        if self.mode == "cov_opt":
            f1 = _digit_sum(self.T, Kp, w1)
            c = (self._cu(h) * f1) ** (1.0 / s.p)
            if not s.public and Kp == s.K:
                root = float(s.unit(h)[0]) ** (1.0 / s.p)
                c = min(c + root, (self._cu(h) * (f1 + Kp // w1)) ** (1.0 / s.p))
            return c
        c = self._num(Kp, w1) / S1
        if not s.public:
            c += self._root_num(Kp) / (Kp + S1)
        return c

    # ---- depth-first enumeration below w_1
    def dfs(self, h: int, Kp: int, w1: int) -> None:
        """Every chain (K', w_1, ..., 1) of height h whose exact error can enter the table."""
        m = h - 1
        blue = self.mode == "blue"
        # chosen levels: (numerator H_l = N_l / W_l, P_l = w_l + ... + w_current)
        k1 = Kp // w1

        def bound(levels, u, mrem, cost_fixed):
            c, sb = self.par(h, u, mrem)
            if not c.size:
                return math.inf
            tot = cost_fixed + c
            if blue:
                for H, P in levels:
                    tot = tot + H / (P + sb)
            return float(tot.min())

        if blue:
            top_levels = [(self._num(Kp, w1), w1)]
            if not self.s.public:
                top_levels.append((self._root_num(Kp), Kp + w1))
            fixed = 0.0
        else:
            top_levels = []
            fixed = self.top_terms(h, Kp, w1, 0)

        def rec(levels, fixed, u, mrem, ks):
            if mrem == 0:
                if u == 1:
                    self.finish(ks)
                return
            below = None if self.layers is None else self.layers[mrem - 1]
            for d in self.div.divisors(u):
                v = u // d
                if self.div.omega(v) < mrem - 1 or (below is not None and v not in below):
                    continue
                if blue:
                    nl = [(H, P + v) for H, P in levels]
                    nl.append((self._num(u, v), v))
                    nf = fixed
                else:
                    nl = levels
                    nf = fixed + self.level_cost(h, u, v, 0)
                bd = bound(nl, v, mrem - 1, nf)
                if not math.isfinite(bd) or bd * _SAFE > self.units_bar(h):
                    continue
                rec(nl, nf, v, mrem - 1, ks + (d,))

        bd = bound(top_levels, w1, m, fixed)
        if not math.isfinite(bd) or bd * _SAFE > self.units_bar(h):
            return
        rec(top_levels, fixed, w1, m, (k1,))

    # ---- candidate tops and the sieve bound
    def tops(self, h: int):
        """Unpadded (K' = K) candidates (K, w_1) of height h: w_1 = K / k_1, k_1 | K."""
        K = self.s.K
        if h == 1:
            return [(K, 1)]
        return [(K, K // d) for d in self.div.divisors(K)
                if K // d > 1 and self.div.omega(K // d) >= h - 1]

    def seed(self) -> None:
        """Offer near-balanced trees of every height first, so that the admission bar is
        finite before the sieve (lower chains: multisets of factors near K^(1/h))."""
        from itertools import combinations_with_replacement

        K = self.s.K
        for h in self.heights:
            if h == 1:
                self.finish((K,))
                continue
            lo = max(2, int(math.floor(K ** (1.0 / h))))
            choices = sorted({max(2, lo - 1), lo, lo + 1, lo + 2})
            for lower in combinations_with_replacement(choices, h - 1):
                w1 = math.prod(lower)
                if w1 >= K:
                    continue
                k1 = -(-K // w1)
                if k1 * w1 != K and not (self.pad and k1 * w1 <= self.max_pad * K):
                    continue
                for order in (lower, lower[::-1]):
                    self.finish((k1,) + tuple(order))

    def _phi(self, d: float, u: np.ndarray, sb: np.ndarray) -> np.ndarray:
        """Lower bound of one non-top level's cost divided by T: its factor d, node width u,
        parent width W = d u, and S_u <= sb (BLUE). Valid wherever the level sits below the
        top: its parent is swept a >= floor(T / W) times with a W >= T / 2 and >= T - W.

        covering: F >= max(T (d - 1) / 2 - d W / 8, (T - W) (d - 1) / 2, T (d - 1) / 4) (full
        cycles, plus the partial cycle's sum of floor(t / u) >= r (r - u) / (2 u));
        BLUE: N-sum / (W S_u) >= max(T - W, T / 2) (d - 1) (W u + 1) / (6 W S_u);
        covering, optimal budgets: (unit F)^(1/p) = (unit T)^(1/p) (F / T)^(1/p)."""
        u = u.astype(float)
        T = float(self.T)
        W = d * u
        if self.mode == "blue" and self.all_range:
            return self._phi_all_range(d, u, sb)
        if self.mode == "blue":
            return np.maximum(1.0 - W / T, 0.5) * (d - 1.0) * (W * u + 1.0) / (6.0 * W * sb)
        cov = np.maximum(np.maximum((d - 1.0) / 2.0 - d * W / (8.0 * T),
                                    (1.0 - W / T) * (d - 1.0) / 2.0), (d - 1.0) / 4.0)
        return cov if self.mode == "cov" else cov ** (1.0 / self.s.p)

    def _d_limit(self, u: np.ndarray, sb: np.ndarray, slack: np.ndarray) -> np.ndarray:
        """Per entry, the largest factor d whose level can cost at most ``slack`` (>= 0): the
        inverse of a minorant of _phi that increases with d: BLUE prefix (d - 1) u / (12 S_u) (max(1 - W/T, 1/2) >= 1/2, (W u + 1) / W >= u);
        all ranges (d - 1) u K^2 / (48 T S_u); covering (d - 1) / 4, to the power 1/p with
        optimal budgets."""
        u = u.astype(float)
        slack = np.maximum(slack, 0.0)
        if self.mode == "blue" and self.all_range:
            K, T = float(self.s.K), float(self.T)
            return 1.0 + 48.0 * T * sb * slack / (u * K * K)
        if self.mode == "blue":
            return 1.0 + 12.0 * sb * slack / u
        if self.mode == "cov":
            return 1.0 + 4.0 * slack
        return 1.0 + 4.0 * slack ** self.s.p

    def _phi_all_range(self, d: float, u: np.ndarray, sb: np.ndarray,
                       tight: bool = True) -> np.ndarray:
        """All ranges: a level below the top (parent width W = d u <= K - 1) has
        q_j >= floor(K / W) E(d, u) (the cut parent adds a non-negative energy), with
        E = (K + 1)(d - 1)(W u + 1) / 6 - u W (W + u) (d - 1) / 12 (``tight``: this, per S_u
        and per T as the sieve's values). Since E >= (d - 1) W u K / 24 (W + u <= 1.5 (K - 1))
        and floor(K / W) >= K / (2 W), q_j / S_u >= (d - 1) u K^2 / (48 S_u): the minorant
        that increases with d (``tight=False``)."""
        K = float(self.s.K)
        T = float(self.T)
        loose = (d - 1.0) * u * K * K / (48.0 * T * sb)
        if not tight:
            return loose
        E = all_range_parent_energy(K, d, u)
        return np.maximum(np.floor(K / (d * u)) * E / (T * sb), loose)

    def _per_bin_scale(self, h: int) -> float:
        """Multiplier turning a sieve value into a lower bound of the levels' cost."""
        if self.mode == "cov_opt":
            return (self._cu(h) * self.T) ** (1.0 / self.s.p)
        return float(self.T)

    @staticmethod
    def _s_bound(u: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Upper bound of S_u = u + (widths below): the level below has width u / c and its
        own S <= 2 u / c - 1 (exact, u / c + 1 ... , when it is the leaf level); 1 at a leaf."""
        uf, cf = u.astype(float), c.astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(c >= 2, uf + 2.0 * uf / np.maximum(cf, 1.0) - 1.0, 1.0)

    def _top_lb(self, h: int, kp: np.ndarray, w1: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Vectorised lower bound of the top level's (and the root's) cost; c = the factor
        of level 2 (w_1's child factor; 0 when h = 1)."""
        if self.mode in ("cov", "cov_opt"):
            k = kp // w1
            a, r = np.divmod(self.T, kp)
            b, cc = np.divmod(r, w1)
            f1 = (a * w1 * k * (k - 1) // 2 + w1 * b * (b - 1) // 2 + b * cc).astype(float)
            exact = kp == self.s.K
            if self.mode == "cov":
                return f1 + ((not self.s.public) & exact)
            cu = self._cu(h)
            out = (cu * f1) ** (1.0 / self.s.p)
            if not self.s.public:
                alt = (cu * (f1 + k)) ** (1.0 / self.s.p)
                root = float(self.s.unit(h)[0]) ** (1.0 / self.s.p)
                out = np.where(exact, np.minimum(out + root, alt), out)
            return out
        # BLUE: level 1 with S_1 <= s_bound(w_1, c), float arithmetic (shrunk by _SAFE later)
        if self.all_range:
            return all_range_level_weight(self.s.K, kp, w1) / self._s_bound(w1, c)
        return _haar_sum_float(self.T, kp, w1) / (kp.astype(float) * self._s_bound(w1, c))

    def run(self) -> None:
        s = self.s
        K = s.K
        self.seed()
        if not self.pad:
            for h in self.heights:
                for kp, w1 in self.tops(h):
                    self.dfs(h, kp, w1)
            return
        Wmax = K - 1
        # sieve layer m: entries (width u, child factor c, lower bound G of the per-T cost of
        # the m levels below u); m = 0: the leaf (1, 0, 0). Only entries that can still enter.
        U, C, G = np.array([1], np.int64), np.array([0], np.int64), np.array([0.0])
        self.layers = {0: {1}}
        self.layer_arrays = {0: np.array([1], np.int64)}
        hmin = min(self.heights)
        for h in range(1, max(self.heights) + 1):
            if h >= 2:
                U, C, G = self._sieve_step(h, U, C, G, Wmax)
                widths = np.unique(U)
                self.layers[h - 1] = set(widths.tolist())
                self.layer_arrays[h - 1] = widths
            if h < hmin:
                continue
            if h == 1:
                self.dfs(1, K, 1)
                continue
            if U.size == 0:
                if math.isfinite(self.table.theta):
                    break
                continue
            kp = -(-K // U) * U
            ok = (kp <= self.max_pad * K) & (U < K)
            w1, kp, c, g = U[ok], kp[ok], C[ok], G[ok]
            if w1.size == 0:
                continue
            lb = self._top_lb(h, kp, w1, c) + self._per_bin_scale(h) * g
            if self.mode == "blue":  # every top's completions at once (vectorised)
                self._par_batch(np.unique(w1[lb * _SAFE <= self.units_bar(h)]), h - 1)
            order = np.argsort(lb, kind="stable")
            done = set()
            for i in order:
                if lb[i] * _SAFE > self.units_bar(h):
                    break
                if int(w1[i]) in done:
                    continue
                done.add(int(w1[i]))
                self.dfs(h, int(kp[i]), int(w1[i]))

    def _cap(self, h: int) -> float:
        """Largest sieve value a chain of height >= h can have and still enter the table."""
        bar = self.units_bar(h)
        if not math.isfinite(bar):
            return math.inf
        return bar / self._per_bin_scale(h)

    def _sieve_step(self, h, U, C, G, Wmax):
        """Layer h - 1 from layer h - 2: a factor d above u gives the level of node width u
        (cost bound _phi with S_u from u's child factor) and the entry (d u, d)."""
        cap = self._cap(h) / _SAFE
        keep = G <= cap
        U, C, G = U[keep], C[keep], G[keep]
        if U.size == 0:
            return U, C, G
        sb = self._s_bound(U, C)
        blue = self.mode == "blue"
        ws, cs, vs = [], [], []
        # entry i can take factor d only while its minorant of _phi (increasing in d) plus
        # G_i stays under the cap: d <= dlim_i; the active entries only shrink as d grows
        # and its parent d u must stay below Wmax: every (entry, d) pair at once, in chunks
        dlim = self._d_limit(U, sb, cap - G) * (1 + 1e-9) + 1e-9
        dmax = np.minimum(np.floor(np.minimum(dlim, float(Wmax))).astype(np.int64), Wmax // U)
        count = np.maximum(dmax - 1, 0)
        ends = np.cumsum(count)
        lo = 0
        while lo < U.size:
            base = int(ends[lo - 1]) if lo else 0
            hi = max(int(np.searchsorted(ends, base + _SIEVE_CHUNK, side="right")), lo + 1)
            cnt = count[lo:hi]
            tot = int(cnt.sum())
            if tot:
                idx = np.repeat(np.arange(lo, hi), cnt)
                start = np.repeat(np.cumsum(cnt) - cnt, cnt)
                d = 2 + np.arange(tot, dtype=np.int64) - start
                u = U[idx]
                val = self._phi(d, u, sb[idx]) + G[idx]
                sel = val <= cap
                ws.append(u[sel] * d[sel])
                vs.append(val[sel])
                cs.append(d[sel] if blue else np.zeros(int(sel.sum()), np.int64))
            lo = hi
        w = np.concatenate(ws) if ws else np.empty(0, np.int64)
        if w.size == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
        c, v = np.concatenate(cs), np.concatenate(vs)
        key = w * (int(c.max()) + 1) + c
        order = np.argsort(key)
        key, w, c, v = key[order], w[order], c[order], v[order]
        first = np.ones(key.size, bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)   # the smallest value of every (width, child factor)
        return w[starts], c[starts], np.minimum.reduceat(v, starts)


# ------------------------------------------------ identity and custom ranges: exhaustive
MAX_WORKLOAD_SEARCH_TREES = 20000  # trees scored one by one for identity / custom ranges


def _resolve_workload(workload, K: int):
    """"prefix" / "all_range" (the branch and bound), or a Workload (identity, ranges: the
    exhaustive search); "identity" as a string means workloads.identity(K)."""
    from ..workloads import Workload, identity

    if workload is None:
        return "prefix"
    if isinstance(workload, Workload):
        if workload.n_bins != K:
            raise ValueError(f"workload has {workload.n_bins} bins, n_bins is {K}")
        if workload.kind in ("prefix", "all_range"):
            return workload.kind
        if workload.kind in ("identity", "ranges", "total"):
            return workload
        raise ValueError(f"unsupported workload kind {workload.kind!r}")
    if workload in ("prefix", "all_range"):
        return workload
    if workload == "identity":
        return identity(K)
    raise ValueError(f"workload must be None, 'prefix', 'all_range', 'identity' or a "
                     f"Workload (e.g. workloads.ranges(K, ...)), got {workload!r}")


def _ordered_factorisations(n: int, max_height=None):
    """Every ordered factorisation of n into factors >= 2 (n = 1: the empty one)."""
    if n == 1:
        yield ()
        return
    if max_height is not None and max_height <= 0:
        return
    for d in range(2, n + 1):
        if n % d == 0:
            for rest in _ordered_factorisations(n // d, None if max_height is None
                                                else max_height - 1):
                yield (d,) + rest


def _workload_search(K, budget, noise, neighbours, public, estimator, budgets, workload,
                     allow_padding, max_padding, max_height, height, top) -> TreeDesign:
    """The best level-uniform tree for the BLUE of an identity / custom-ranges workload over
    the first K bins, equal budgets: every ordered factorisation of every K' in
    [K, max_padding K] (or K' = K) scored exactly (``error.tree.blue_error`` per bin,
    ``blue_range_variances`` per range, O(h) each); refused above
    MAX_WORKLOAD_SEARCH_TREES trees."""
    from ..engines.tree_error import blue_error, blue_range_variances

    if estimator != "blue":
        raise ValueError(f"identity / custom-range workloads are searched for estimator='blue' "
                         f"only, got {estimator!r}")
    if budgets != "equal":
        raise ValueError("identity / custom-range workloads are searched with budgets='equal' "
                         "only so far")
    t0 = time.perf_counter()
    # each K' adds at least one tree: beyond K + MAX_WORKLOAD_SEARCH_TREES the limit is hit
    top_kp = (int(math.floor(min(max_padding * K, K + MAX_WORKLOAD_SEARCH_TREES + 1)))
              if allow_padding else K)
    shapes = []
    for kp in range(K, top_kp + 1):
        for ks in _ordered_factorisations(kp, max_height):
            if height is None or len(ks) == height:
                shapes.append(ks)
                if len(shapes) > MAX_WORKLOAD_SEARCH_TREES:
                    raise ValueError(
                        f"the identity / custom-range search scores trees one by one: more than "
                        f"{MAX_WORKLOAD_SEARCH_TREES} trees for n_bins={K} (lower max_padding "
                        "or max_height, or allow_padding=False)")
    if not shapes:
        raise ValueError(f"no level-uniform tree with factors >= 2 fits n_bins={K} with the "
                         "given height / padding constraints")
    lo, hi = workload.intervals()
    scored = []
    for ks in shapes:
        n_noisy = len(noisy_levels(len(ks), neighbours, public))
        b = (budget / n_noisy,) * n_noisy
        v = level_variances(ks, b, noise=noise, neighbours=neighbours, public_total=public)
        if workload.kind == "identity":
            err = float(blue_error(ks, v, "identity", per_query=True)[:K].sum())
        else:
            err = float(blue_range_variances(ks, v, lo, hi).sum())
        scored.append((err, len(ks), ks, b))
    scored.sort(key=lambda x: (x[0], x[1], x[2]))
    secs = time.perf_counter() - t0
    span = f"K' <= {max_padding:g} K" if allow_padding else "K' = K"
    method = (f"exhaustive enumeration of {len(shapes)} trees ({span}), {workload.kind} "
              f"workload, {secs:.2g} s")
    unit = error_unit(K, budget, noise)

    def design(err, ks, b):
        return TreeDesign(K, ks, b, err, err / unit, estimator, noise, neighbours, public, method)

    best = scored[0]
    alts = tuple(design(e, ks, b) for e, _, ks, b in scored[1:top + 1])
    return replace(design(best[0], best[2], best[3]), alternatives=alts)


# --------------------------------------------------------------------------- public API
def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _design(s: _Setting, ks: tuple, error: float, budgets: tuple, method: str) -> TreeDesign:
    return TreeDesign(n_bins=s.K, branching=tuple(int(k) for k in ks),
                      budgets=tuple(float(b) for b in budgets), error=float(error),
                      normalised_error=float(error) / error_unit(s.K, s.budget, s.noise),
                      estimator=s.estimator, noise=s.noise, neighbours=s.neighbours,
                      public_total=s.public, method=method)


def level_uniform(n_bins, epsilon=None, *, rho=None, estimator: str = "covering",
                  noise: str | None = None, neighbours: str = "swap", public_total=None,
                  allow_padding: bool = True, max_padding: float = 2.0,
                  budgets: str = "equal", max_height=None, height=None, top: int = 10,
                  pool: int = 24, max_refined: int = 5000,
                  refined_pool: int = 500, workload=None) -> TreeDesign:
    """The best level-uniform tree for the CDF of ``n_bins`` bins, by exact integer search
    ([RTS] Sec. V, Thm V.1-V.2, Cor. V.1-V.2, Lemma V.2; search method: module docstring);
    with ``workload="all_range"`` and the BLUE, for all ranges within the K bins.

    Parameters
    ----------
    n_bins : K >= 2, the number of bins (the CDF workload is the first K prefix counts).
    epsilon / rho : the total budget (``epsilon`` for Laplace noise, ``rho`` for Gaussian).
    estimator : "covering" ([RTS] direct sums), "refined" ([RTS] App. B) or "blue".
    noise, neighbours, public_total : as for ``Mechanism`` (swap: N public; noise defaults
        to Gaussian when only ``rho`` is given).
    allow_padding : also consider trees over K' in (K, max_padding K] (the extra bins empty);
        the reported error is that of the first K prefixes. A ``max_padding`` above 2 finds
        nothing more: every tree over K' >= 2K has a better one over K' < 2K (the smallest
        padding of its subtree, module docstring item 1).
    budgets : "equal" (the equal split over the noisy levels) or "optimal" (per tree:
        Thm IV.2(a) generalised for the covering estimator, numerical for the others; see the
        module docstring for what is exhaustive).
    max_height : the largest height considered (default: all, up to log2(max_padding K)).
    height : search this height only (e.g. for [RTS] Thm V.1).
    top : how many runners-up to return in ``.alternatives`` (ranked, best first).
    pool : budgets="optimal" with the refined/BLUE estimator: how many of the best
        equal-budget trees get their budgets optimised.
    max_refined, refined_pool : the refined estimator's search scores the refined error
        (O(h^3) each) of every tree whose BLUE error (a lower bound) can enter the table; if
        that exceeds ``max_refined`` trees (large K: the refined error is ~1.3x the BLUE's),
        it scores the ``refined_pool`` best trees by the BLUE error instead, and ``method``
        says whether the table is certified (every other tree has BLUE error, hence refined
        error, above it) or gives the optimality gap bound.
    workload : None or "prefix" (the CDF: the first K prefix counts) or "all_range" (the
        K (K + 1) / 2 ranges within the K bins; estimator="blue" only so far), or
        "identity" / a ``Workload`` over the K bins (``workloads.identity``, ``ranges``,
        ``total``; BLUE, equal budgets: every tree scored exactly, up to
        MAX_WORKLOAD_SEARCH_TREES trees). For all
        ranges the BLUE error is sum_j q_j mu_j with the closed-form level weights
        ``error.tree.all_range_level_weight`` (padding included), and the same branch and
        bound applies: the smallest padding of a subtree is best (q_1 = Q_1 / w_1 - 1'G1 / K'
        grows with K' faster than the root term falls), and non-top levels are bounded
        below by (d - 1) u K^2 / 48 per S (``_Engine._phi_all_range``).

    Returns
    -------
    TreeDesign: the best tree (``branching`` may multiply to a padded K'), its budgets (one
    per noisy level), its exact error (counts^2) and ``normalised_error = error / c``;
    ``alternatives`` = the next ``top`` trees, ranked. ``method`` records the search.

    Limits: n_bins <= ``limits.MAX_SEARCH_BINS`` (2^26: about a minute); the search runs at
    unit budget and is restated at the given one (``result.at_total_budget``: exact), so a
    budget is refused only when the errors are not doubles.
    """
    K = _check_int(n_bins, "n_bins", 2)
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    neighbours = check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if budgets not in BUDGETS:
        raise ValueError(f"budgets must be one of {BUDGETS}, got {budgets!r}")
    if not isinstance(allow_padding, (bool, np.bool_)):
        raise ValueError(f"allow_padding must be True or False, got {allow_padding!r}")
    if (isinstance(max_padding, (bool, np.bool_)) or not isinstance(max_padding, Real)
            or not math.isfinite(max_padding) or max_padding < 1):
        raise ValueError(f"max_padding must be a finite number >= 1, got {max_padding!r}")
    if max_height is not None:
        max_height = _check_int(max_height, "max_height", 1)
    if height is not None:
        height = _check_int(height, "height", 1)
        if 2**height > (max_padding * K if allow_padding else K):
            raise ValueError(f"height={height} is impossible: a tree of that height has at "
                             f"least 2^{height} bins")
    top = _check_int(top, "top", 0)
    pool = _check_int(pool, "pool", 1)
    check_count(K, MAX_SEARCH_BINS, f"n_bins = {K}",
                "the search takes minutes beyond it; use fewer bins")
    check_memory(K * SEARCH_BYTES_PER_BIN, f"the tree search over {K} bins", "use fewer bins")
    workload = _resolve_workload(workload, K)
    if not isinstance(workload, str):  # identity / custom ranges: exhaustive enumeration
        return at_total_budget(_workload_search(
            K, 1.0, noise, neighbours, public, estimator, budgets, workload,
            bool(allow_padding), float(max_padding), max_height, height, top), budget)
    if workload == "all_range" and estimator != "blue":
        raise ValueError("workload='all_range' is searched for estimator='blue' only (the "
                         f"covering and refined searches are for the CDF), got {estimator!r}")
    max_refined = _check_int(max_refined, "max_refined", 0)
    refined_pool = _check_int(refined_pool, "refined_pool", 1)
    if max_height is not None and height is not None and height > max_height:
        raise ValueError(f"height={height} exceeds max_height={max_height}")

    t0 = time.perf_counter()
    # searched at unit budget, then restated at ``budget`` (at_total_budget: exact)
    s = _Setting(K, 1.0, noise, neighbours, public, estimator, budgets, workload)
    numerical = budgets == "optimal" and estimator != "covering"
    search_s = replace(s, budgets="equal") if numerical else s
    search_s.__post_init__()
    size = top + 1
    if numerical:
        size = max(size, pool)
    table = _Table(size)
    kw = dict(allow_padding=bool(allow_padding), max_padding=float(max_padding),
              max_height=max_height, height=height)
    eng = _Engine(search_s, table, **kw)
    span = f"K' <= {max_padding:g} K" if allow_padding else "K' = K"
    certificate = ""
    if estimator == "refined":
        eng.max_scored = max_refined
    try:
        eng.run()
        ranked = table.ranked()
        how = f"exhaustive branch and bound ({span}; {eng.leaves} trees reached)"
    except _TooMany:
        # Fallback: the best `refined_pool` trees by the BLUE (exhaustive B&B), refined scored.
        # Unscored trees have refined >= BLUE >= the pool's BLUE bar: a certificate / a gap.
        blue_s = replace(search_s, estimator="blue")
        blue_s.__post_init__()
        btable = _Table(max(refined_pool, size))
        beng = _Engine(blue_s, btable, **kw)
        beng.run()
        pool_trees = btable.ranked()
        bar = btable.theta
        ranked = sorted(((_refined_equal(search_s, ks), ks, None) for _, ks, _ in pool_trees),
                        key=lambda x: (x[0], len(x[1]), x[1]))[:size]
        nth = ranked[min(len(ranked), size) - 1][0]
        if nth <= bar:
            certificate = "certified exact"
        else:
            gap = ranked[0][0] / bar - 1.0 if ranked[0][0] > bar else 0.0
            certificate = (f"NOT certified: trees outside the pool have refined error >= "
                           f"{bar:.6g}; the best is within {100 * gap:.3g}% of optimal")
        how = (f"refined error of the {len(pool_trees)} best trees by the BLUE error "
               f"(exhaustive BLUE branch and bound, {span}); {certificate}")
    if not ranked:
        raise ValueError(f"no level-uniform tree with factors >= 2 fits n_bins={K} with the "
                         f"given height / padding constraints")
    if numerical:
        designs, exhaustive = _optimise_pool(s, ranked, eng, pool, top)
        how = (f"budgets optimised for {len(designs)} trees (the best equal-budget trees, "
               f"their finest refinements, the finest 3-smooth trees"
               + (", and every finest tree of every K': the global optimum over all trees, "
                  "since a refinement never loses with optimal budgets" if exhaustive else "")
               + f") from: {how}")
    else:
        designs = [(score, ks, extra) for score, ks, extra in ranked]
    out = []
    for score, ks, extra in designs:
        if estimator == "covering":
            b = extra
        elif numerical:
            b = extra
        else:
            b = s.equal_budgets(len(ks))
        out.append(_design(s, ks, score, b, ""))
    out.sort(key=lambda d: (d.error, d.height, d.branching))
    out = out[: top + 1]
    if numerical:  # the pool is not exhaustive: certify against every mechanism instead
        how += "; " + _bound_certificate(s, out[0].error, budget)
    secs = time.perf_counter() - t0
    if workload != "prefix":
        how = f"workload {workload}: {how}"
    method = f"{how}; {secs:.3g} s"
    return at_total_budget(replace(out[0], method=method, alternatives=tuple(
        replace(d, method=how) for d in out[1:])), budget)


def _refined_optimal_budgets(s: _Setting, ks: tuple) -> tuple[float, tuple]:
    """Budgets minimising the refined error of one tree: scipy SLSQP over the simplex
    (sum = B, b >= 0) on the closed form, from the equal split and the covering optimum."""
    from scipy.optimize import minimize

    h = len(ks)
    n = s.n_noisy(h)
    B = s.budget

    f0 = refined_prefix_error(ks, s.variances(h, s.equal_budgets(h)), s.K)

    def f(x):  # relative to the equal split, so that SLSQP's tolerances are meaningful
        b = np.maximum(x, 0.0) * B
        return refined_prefix_error(ks, s.variances(h, b), s.K) / f0

    starts = [np.full(n, 1.0 / n)]
    cov = _covering_score(replace(s, estimator="covering", budgets="optimal"), ks)[1]
    starts.append(np.asarray(cov) / B)
    best_x, best_f = starts[0], f(starts[0])
    for x0 in starts:
        res = minimize(f, x0, method="SLSQP", bounds=[(0.0, 1.0)] * n,
                       constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1.0}],
                       options={"ftol": 1e-12, "maxiter": 500})
        x = np.maximum(res.x, 0.0)
        x /= x.sum()
        fx = f(x)
        if np.isfinite(fx) and fx < best_f:
            best_x, best_f = x, fx
    return float(best_f * f0), tuple(float(v) for v in best_x * B)


def finest_refinement(ks) -> tuple:
    """Split every branching factor into its prime factors (ascending), level by level: the
    tree keeps all of ks's nodes and gains intermediate levels."""
    out = []
    for k in ks:
        f, d = [], 2
        while d * d <= k:
            while k % d == 0:
                f.append(d)
                k //= d
            d += 1
        if k > 1:
            f.append(k)
        out.extend(f)
    return tuple(out)


def _bound_certificate(s: _Setting, error: float, budget: float) -> str:
    """'certified within X of any mechanism': the SVD lower bound on the error of every
    mechanism (tree or not) for the workload (``bounds.error_lower_bound``; exactly what
    the best tree can at most lose against the best tree, and more), from the setting's
    budget and ``error`` at it, the bound stated at the total ``budget``."""
    from .. import bounds, workloads

    wl = workloads.prefix(s.K) if s.workload == "prefix" else workloads.all_range(s.K)
    kw = {"epsilon": s.budget} if s.noise == "laplace" else {"rho": s.budget}
    lb = bounds.error_lower_bound(wl, noise=s.noise, neighbours=s.neighbours,
                                  public_total=s.public, **kw)
    kind = "l1 SVD bound, loose" if s.noise == "laplace" else "SVD bound"
    if s.noise == "gaussian" and s.neighbours == "add_remove" and not s.public:
        # the dual of the Gaussian optimum (docs/math.md section 7): a bound at every iterate,
        # per unit sigma^2 at unit column norm, i.e. times 1 / (2 rho)
        from ..strategies import gaussian_optimal_implicit
        dual = gaussian_optimal_implicit(wl, tol=1e-2, max_iter=40, time_limit=5.0)
        if dual.lower_bound / (2.0 * s.budget) > lb:
            lb, kind = dual.lower_bound / (2.0 * s.budget), "dual of the Gaussian optimum"
    try:
        shown = f"{at_budget(lb, s.noise, budget):.6g}"  # lb at unit budget (s)
    except ValueError:  # the bound alone is not a double at this budget
        shown = f"{lb:.6g} at {'epsilon' if s.noise == 'laplace' else 'rho'} = {s.budget:g}"
    return (f"certified: no mechanism has error below {shown} ({kind}), so this tree is "
            f"within a factor {error / lb:.4g} of the best tree")


def _max_padded(K: int, max_padding: float) -> int:
    """The largest padded K' the searches consider: floor(min(max_padding, 2) K). Larger
    paddings cannot help: a tree over K' >= 2K has top factor k_1 > ceil(K / w_1), so the
    same subtree under the smallest top factor (K' < 2K) is at least as good (module
    docstring, item 1); this also keeps K' an exact integer for any finite max_padding."""
    return int(math.floor(min(float(max_padding), 2.0) * K))


def _smooth_finest_trees(K: int, max_pad: float):
    """Both orders (2s first, 3s first) of the prime factors of every K' = 2^a 3^b in
    [K, max_pad K] (max_pad above 2: as 2, ``_max_padded``)."""
    out = []
    top = _max_padded(K, max_pad)
    b, p3 = 0, 1
    while p3 <= top:
        a, kp = 0, p3
        while kp < K:
            a, kp = a + 1, kp * 2
        while kp <= top:
            out += [(2,) * a + (3,) * b, (3,) * b + (2,) * a]
            a, kp = a + 1, kp * 2
        b, p3 = b + 1, p3 * 3
    return [ks for ks in dict.fromkeys(out) if ks]


# budgets="optimal" with the BLUE and Gaussian noise (each tree's optimum exact, PAVA): when
# the padded K' have at most this many finest trees in all (distinct orders of their prime
# factors; K <= ~400), all of them are optimised: the search is then exhaustive over every
# tree (a refinement never loses with optimal budgets) and its answer the global optimum.
# Not for Laplace: each tree's budgets are a non-convex multistart search (~30 ms a tree)
MAX_EXHAUSTIVE_FINEST_TREES = 3000


def _distinct_orders(counts: dict) -> list:
    """Every distinct ordering of the multiset {p: multiplicity} (multinomial many)."""
    if not counts:
        return [()]
    out = []
    for p in sorted(counts):
        rest = dict(counts)
        rest[p] -= 1
        if not rest[p]:
            del rest[p]
        out += [(p,) + tail for tail in _distinct_orders(rest)]
    return out


def _all_finest_trees(s: _Setting, eng) -> list | None:
    """All finest trees (prime factors in every distinct order) of every K' the search may
    use ([K, max_padding K] with padding, else K) whose height is allowed; None when there
    are more than MAX_EXHAUSTIVE_FINEST_TREES."""
    hi = _max_padded(s.K, eng.max_pad) if eng.pad else s.K
    out, total = [], 0
    for kp in range(max(s.K, 2), hi + 1):
        f = eng.div._factor(kp)
        n = math.factorial(sum(f.values()))
        for e in f.values():
            n //= math.factorial(e)
        total += n
        if total > MAX_EXHAUSTIVE_FINEST_TREES:
            return None
        out += [ks for ks in _distinct_orders(f) if len(ks) in eng.heights]
    return out


def _optimise_pool(s: _Setting, ranked, eng, pool: int, top: int):
    """Optimal budgets for each tree of the pool (the best equal-budget trees); with the BLUE
    for every finest tree when there are few (exhaustive). Returns (designs, exhaustive)."""
    out = []
    exhaustive = False
    if s.estimator == "blue":
        from .blue_budgets import optimal_blue_budgets  # (imports search's siblings lazily)
        # with optimal budgets a refinement never hurts (a coarse tree is its refinement with
        # the inserted levels unfunded), so each pool tree's finest refinement joins the pool
        candidates = dict.fromkeys(ks for _, ks, _ in ranked[:pool])
        candidates.update(dict.fromkeys(finest_refinement(ks) for ks in list(candidates)))
        if s.K > 1:  # and the finest unpadded tree: K's prime factorisation
            candidates.setdefault(finest_refinement((s.K,)), None)
        # and the finest trees over the 3-smooth K' = 2^a 3^b within the padding: tall trees
        # with optimal budgets often win (K = 5000, rho = 0.1: binary over 8192) but rank low
        # with equal budgets (many levels share the budget)
        for ks in _smooth_finest_trees(s.K, eng.max_pad if eng.pad else 1.0):
            if len(ks) in eng.heights:
                candidates.setdefault(ks, None)
        # Gaussian only: Laplace budgets are a non-convex multistart search (~30 ms a tree)
        finest = _all_finest_trees(s, eng) if s.noise == "gaussian" else None
        if finest is not None:
            exhaustive = True
            candidates.update(dict.fromkeys(finest))
        for ks in candidates:
            d = optimal_blue_budgets(ks, s.budget, noise=s.noise, neighbours=s.neighbours,
                                     public_total=s.public, workload=s.workload, n_queries=s.K)
            out.append((d.error, ks, d.budgets))
    else:
        for _, ks, _ in ranked[:pool]:
            err, b = _refined_optimal_budgets(s, ks)
            out.append((err, ks, b))
    return out, exhaustive
