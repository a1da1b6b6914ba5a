"""Branch and bound over level-uniform trees: the exact engine behind ``optimize.level_uniform``
([RTS] Sec. V; docs/math.md section 4).

A tree is a chain of node widths K' = w_0 > w_1 > ... > w_h = 1, w_l = w_(l-1) / k_l; a tree's
score is the exact error of the first K prefix counts (or of all ranges within the K bins),
from the closed-form level sums of :mod:`dptree_opt.engines.tree_sums` (covering: digit sums
F_l; BLUE: Haar sums H_j over S_j = w_j + ... + w_h; refined: the O(h^3) closed form).

The search (exact, not heuristic, for equal budgets and for the covering estimator)
------------------------------------------------------------------------------------
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
4. Refined estimator: the same search with the BLUE error as the bound (the BLUE is the best
   linear unbiased estimator, so its error lower-bounds the refined one), scoring the refined
   error of every chain that passes; more than ``max_scored`` of them raises
   :class:`TooManyTrees` (``level_uniform`` then scores a pool of the best trees by the BLUE).

Budgets: "equal" splits the total equally over the noisy levels; "optimal" with the covering
estimator is [RTS] Thm IV.2(a) generalised to padded trees and every noise / neighbour model
(minimise sum_l A_l / b_l^2 (Laplace) or sum_l A_l / b_l (Gaussian) with A_l = unit variance x
F_l: b_l proportional to A_l^(1/3) or A_l^(1/2)); the search is then exact too (the cost
sum_l A_l^(1/p) is additive over levels).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import combinations_with_replacement
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..engines.tree_error import (all_range_level_weight, all_range_parent_energy,
                                  haar_workload_weights)
from ..engines.tree_sums import (blue_level_sums, chain_widths, covering_level_sums, digit_sum,
                                 haar_sum, haar_sum_float, node_gram_sum, refined_prefix_error)
from .factorisations import Divisors, max_padded
from .levels import noisy_levels, unit_variances

__all__ = ["SearchSetting", "BranchAndBound", "RankedTable", "TooManyTrees", "covering_score",
           "refined_equal_error"]

_SAFE = 1.0 - 1e-9  # float bounds are shrunk by this factor before pruning
_SIEVE_CHUNK = 1 << 21  # (entry, factor) pairs the sieve evaluates at once

_F = npt.NDArray[np.float64]
_I = npt.NDArray[np.int64]
Branching = tuple[int, ...]
Budgets = tuple[float, ...]
# a ranked tree: (score, branching, budgets or None when equal)
Ranked = tuple[float, Branching, Budgets | None]
_Pareto = tuple[_F, _I]  # (costs, widths)


# --------------------------------------------------------------------------- the setting
@dataclass
class SearchSetting:
    """What a tree search scores: K bins, the total budget, noise, neighbours, whether N is
    public, the estimator ("covering", "refined", "blue"), budgets ("equal", "optimal") and
    the workload ("prefix" or "all_range"); caches the unit variances per height."""

    K: int
    budget: float
    noise: str
    neighbours: str
    public: bool
    estimator: str
    budgets: str
    workload: str = "prefix"  # "prefix" (the CDF) or "all_range" (BLUE only)
    p: int = field(init=False)  # Laplace: variance ~ 1/b^2 (p = 3 in Thm IV.2(a)); Gaussian 2

    def __post_init__(self) -> None:
        self.p = 3 if self.noise == "laplace" else 2
        self._unit: dict[int, _F] = {}
        self._v_equal: dict[int, float] = {}

    @property
    def T(self) -> int:
        return self.K + 1

    def unit(self, h: int) -> _F:
        """Unit-budget variances v_0..v_h of trees of height h (all factors >= 2)."""
        if h not in self._unit:
            self._unit[h] = unit_variances(h, noise=self.noise, neighbours=self.neighbours,
                                           public_total=self.public)
        return self._unit[h]

    def n_noisy(self, h: int) -> int:
        return h if self.public else h + 1

    def scale(self, b: ArrayLike) -> _F:
        """Variance multiplier of a level with budget b (Laplace 1/b^2, Gaussian 1/b)."""
        ba = np.asarray(b, dtype=float)
        with np.errstate(divide="ignore"):
            return 1.0 / ba**2 if self.noise == "laplace" else 1.0 / ba

    def v_equal(self, h: int) -> float:
        """The common variance of every noisy level under the equal split (height h)."""
        if h not in self._v_equal:
            self._v_equal[h] = float(self.unit(h)[1] * self.scale(self.budget / self.n_noisy(h)))
        return self._v_equal[h]

    def equal_budgets(self, h: int) -> Budgets:
        return (self.budget / self.n_noisy(h),) * self.n_noisy(h)

    def variances(self, h: int, budgets: ArrayLike) -> _F:
        """v_0..v_h from per-noisy-level budgets (the ``levels`` rules, unit scaled)."""
        unit = self.unit(h)
        v = np.zeros(h + 1)
        b = np.asarray(budgets, dtype=float)
        lv = noisy_levels(h, self.neighbours, self.public)
        with np.errstate(divide="ignore"):
            v[list(lv)] = unit[list(lv)] * self.scale(b)
        return v


# --------------------------------------------------------------------------- exact scores
def _covering_optimal(s: SearchSetting, ks: Branching,
                      F: Sequence[float]) -> tuple[float, Budgets]:
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


def covering_score(s: SearchSetting, ks: Branching) -> tuple[float, Budgets]:
    """Exact covering error of the first K prefixes and the budgets (noisy-level order)."""
    F: list[float] = list(covering_level_sums(ks, s.K))
    h = len(ks)
    if s.budgets == "equal":
        v = s.variances(h, s.equal_budgets(h))
        err = sum(v[l] * F[l] for l in range(h + 1) if F[l])
        return float(err), s.equal_budgets(h)
    if s.public:
        return _covering_optimal(s, ks, F)
    best = _covering_optimal(s, ks, F)
    if F[0]:  # K' = K: the root may stay unmeasured; then t = K takes k_1 level-1 nodes
        G: list[float] = [0, F[1] + ks[0]] + F[2:]
        best = min(best, _covering_optimal(s, ks, G))
    return best


def _blue_equal(s: SearchSetting, ks: Branching) -> float:
    """Exact BLUE error of the workload over the first K bins, equal budgets (module
    docstring: sum_j H_j / S_j times the common variance)."""
    h = len(ks)
    H = (haar_workload_weights(ks, "all_range", s.K) if s.workload == "all_range"
         else blue_level_sums(ks, s.K))
    w = chain_widths(ks)
    S = np.cumsum(np.array(w[::-1], dtype=float))[::-1]  # S_l = w_l + ... + w_h
    v = s.v_equal(h)
    err = sum(H[j] / S[j] for j in range(1, h + 1))
    if not s.public:
        err += H[0] / S[0]  # mu_0 = v / (K' + S_1) = v / S_0 (v_0 = v under the equal split)
    return float(v * err)


def refined_equal_error(s: SearchSetting, ks: Branching) -> float:
    """Exact refined error of the first K prefixes of the tree ``ks``, equal budgets."""
    h = len(ks)
    return refined_prefix_error(ks, s.variances(h, s.equal_budgets(h)), s.K)


# --------------------------------------------------------------------------- the ranked table
class RankedTable:
    """The best ``size`` trees found so far (max-heap on the score); theta = admission bar."""

    def __init__(self, size: int) -> None:
        self.size = size
        # (-score, tie, ks, extra)
        self.heap: list[tuple[float, tuple[int, ...], Branching, Budgets | None]] = []
        self.seen: set[Branching] = set()

    @property
    def theta(self) -> float:
        return -self.heap[0][0] if len(self.heap) >= self.size else math.inf

    def offer(self, score: float, ks: Branching, extra: Budgets | None = None) -> None:
        if ks in self.seen or not score <= self.theta:
            return
        self.seen.add(ks)
        item = (-score, tuple(-k for k in ks), ks, extra)
        if len(self.heap) < self.size:
            heapq.heappush(self.heap, item)
        else:
            out = heapq.heappushpop(self.heap, item)
            self.seen.discard(out[2])

    def ranked(self) -> list[Ranked]:
        return sorted(((-s, ks, extra) for s, _, ks, extra in self.heap),
                      key=lambda x: (x[0], len(x[1]), x[1]))


class TooManyTrees(Exception):
    """The exhaustive refined search would score more trees than allowed."""


# --------------------------------------------------------------------------- the engine
class BranchAndBound:
    """Branch and bound over chains of widths for one setting (see the module docstring).

    Engine units: covering/equal -> digit sums F (error = v_eq(h) x units); BLUE/equal and
    refined (bound) -> sum_j H_j / S_j (error >= v_eq(h) x units); covering/optimal ->
    sum_l (u_l F_l)^(1/p) (error = units^p / B^(p-1))."""

    def __init__(self, s: SearchSetting, table: RankedTable, *, allow_padding: bool,
                 max_padding: float, max_height: int | None, height: int | None) -> None:
        self.s = s
        self.table = table
        self.pad = allow_padding
        self.max_pad = max_padding
        self.mode = ("blue" if s.estimator in ("blue", "refined")
                     else "cov_opt" if s.budgets == "optimal" else "cov")
        self.T = s.K + 1
        self.all_range = s.workload == "all_range"
        self.div = Divisors(s.K)
        self._par: dict[tuple[int, int, int], _Pareto] = {}
        self._haar_cache: dict[tuple[int, int], int] = {}
        self._ar_cache: dict[tuple[int, int], float] = {}
        self._num_cache: dict[int, _F] = {}
        # the layers' widths, sorted (for vectorised membership)
        self.layer_arrays: dict[int, _I] | None = None
        self.max_scored: float = math.inf  # refined: refined errors to compute before giving up
        # padded search: {m: set of the widths the sieve kept}
        self.layers: dict[int, set[int]] | None = None
        self.leaves = 0
        self.scored = 0
        K = s.K
        hmax = max(1, max_padded(K, max_padding).bit_length() - 1) if allow_padding else \
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
        """haar_sum(T, W, w), memoised (the search asks for the same pairs many times)."""
        key = (W, w)
        val = self._haar_cache.get(key)
        if val is None:
            val = self._haar_cache[key] = haar_sum(self.T, W, w)
        return val

    # ---- exact level costs (engine units)
    def level_cost(self, h: int, W: int, w: int, S: int) -> float:
        if self.mode == "cov":
            return float(digit_sum(self.T, W, w))
        if self.mode == "cov_opt":
            return (self._cu(h) * digit_sum(self.T, W, w)) ** (1.0 / self.s.p)
        return self._num(W, w) / S

    # ---- BLUE level numerators: error = v sum_j num(w_(j-1), w_j) / S_j (+ root)
    def _num(self, W: int, w: int) -> float:
        """The level's workload weight q_j (prefix: H_j = haar sum / W; all ranges:
        engines.tree_error.all_range_level_weight), memoised."""
        if not self.all_range:
            return self._haar(W, w) / W
        val = self._ar_cache.get((W, w))
        if val is None:
            val = self._ar_cache[(W, w)] = float(all_range_level_weight(self.s.K, W, w))
        return val

    def _num_all(self, W: int) -> _F:
        """_num_vec(W, W // d) for every divisor d >= 2 of W (memoised per W)."""
        val = self._num_cache.get(W)
        if val is None:
            val = self._num_cache[W] = self._num_vec(W, W // self.div.divisor_array(W))
        return val

    def _num_vec(self, W: int | _I, w: _I) -> _F:
        """_num for one W (or one per child) and an array of child widths (float64)."""
        if not self.all_range:
            return haar_sum_float(self.T, W, w) / W
        # int64 widths work (numpy promotes them); tree_error's float alias is narrower
        weight = all_range_level_weight(
            self.s.K, W, w)  # type: ignore[arg-type]  # int64 widths, see above
        return np.asarray(weight, dtype=float)

    def _root_num(self, Kp: int) -> float:
        """The root's weight q_0 = 1'G1 / K' (G: the workload's Gram over the K bins)."""
        K = self.s.K
        if self.all_range:
            return node_gram_sum("all_range", K, K) / Kp  # 1'G1, exact integer
        return (K * (K + 1) * (2 * K + 1) // 6) / Kp

    # ---- exact completion: Pareto set of (cost below, widths below) for m levels below u
    def par(self, h: int, u: int, m: int) -> _Pareto:
        """Pareto set of (cost of the m levels below u, sum of their widths) over the chains
        below u (only the smallest cost for the covering), as two arrays (costs, widths)
        sorted by decreasing width. Memoised; the height matters only for the covering with
        optimal budgets (its unit variance)."""
        key = (h if self.mode == "cov_opt" else 0, u, m)
        if key in self._par:
            return self._par[key]
        costs: list[_F] = []
        sums: list[_I] = []
        if m == 0:
            if u == 1:
                costs, sums = [np.zeros(1)], [np.zeros(1, np.int64)]
        elif self.div.omega(u) >= m:
            cand = u // self.div.divisor_array(u)          # child widths, decreasing
            if self.layer_arrays is not None:  # set with self.layers
                # only widths the sieve kept: every chain below another v is too costly
                lay = self.layer_arrays[m - 1]
                pos = np.minimum(np.searchsorted(lay, cand), lay.size - 1)
                sel = np.flatnonzero(lay[pos] == cand) if lay.size else np.empty(0, np.int64)
            else:
                sel = np.arange(cand.size)
            vs: list[int] = []
            subs: list[_Pareto] = []
            idx: list[int] = []
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
        arrays = self.layer_arrays
        assert arrays is not None  # the padded search's run() sets the layers first
        need = {m: [int(u) for u in tops.tolist() if (0, int(u), m) not in memo]}
        pairs: dict[int, tuple[_I, _I, _I]] = {}
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
            lay = arrays[j - 1]
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
    def finish(self, ks: Branching) -> None:
        self.leaves += 1
        s = self.s
        if s.estimator == "covering":
            score, b = covering_score(s, ks)
            self.table.offer(score, ks, b)
        elif s.estimator == "blue":
            self.table.offer(_blue_equal(s, ks), ks)
        else:
            # the BLUE error lower-bounds the refined error: score only if it can enter
            if _blue_equal(s, ks) * _SAFE <= self.table.theta:
                self.scored += 1
                if self.scored > self.max_scored:
                    raise TooManyTrees
                self.table.offer(refined_equal_error(s, ks), ks)

    # ---- top-level cost of a chain (K', w_1) (engine units, exact or a lower bound)
    def top_terms(self, h: int, Kp: int, w1: int, S1: int) -> float:
        """Exact cost of level 1 (and of the root under a private N) given S_1."""
        s = self.s
        if self.mode == "cov":
            c = float(digit_sum(self.T, Kp, w1))
            if not s.public and Kp == s.K:
                c += 1.0  # equal split: the root is measured and covers t = K
            return c
        if self.mode == "cov_opt":
            f1 = digit_sum(self.T, Kp, w1)
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

        def bound(levels: list[tuple[float, int]], u: int, mrem: int,
                  cost_fixed: float) -> float:
            c, sb = self.par(h, u, mrem)
            if not c.size:
                return math.inf
            tot = cost_fixed + c
            if blue:
                for H, P in levels:
                    tot = tot + H / (P + sb)
            return float(tot.min())

        top_levels: list[tuple[float, int]]
        if blue:
            top_levels = [(self._num(Kp, w1), w1)]
            if not self.s.public:
                top_levels.append((self._root_num(Kp), Kp + w1))
            fixed = 0.0
        else:
            top_levels = []
            fixed = self.top_terms(h, Kp, w1, 0)

        def rec(levels: list[tuple[float, int]], fixed: float, u: int, mrem: int,
                ks: Branching) -> None:
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
    def tops(self, h: int) -> list[tuple[int, int]]:
        """Unpadded (K' = K) candidates (K, w_1) of height h: w_1 = K / k_1, k_1 | K."""
        K = self.s.K
        if h == 1:
            return [(K, 1)]
        return [(K, K // d) for d in self.div.divisors(K)
                if K // d > 1 and self.div.omega(K // d) >= h - 1]

    def seed(self) -> None:
        """Offer near-balanced trees of every height first, so that the admission bar is
        finite before the sieve (lower chains: multisets of factors near K^(1/h))."""
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
        inverse of a minorant of _phi that increases with d: BLUE prefix (d - 1) u / (12 S_u)
        (max(1 - W/T, 1/2) >= 1/2, (W u + 1) / W >= u); all ranges (d - 1) u K^2 / (48 T S_u);
        covering (d - 1) / 4, to the power 1/p with optimal budgets."""
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
        return haar_sum_float(self.T, kp, w1) / (kp.astype(float) * self._s_bound(w1, c))

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
        layers: dict[int, set[int]] = {0: {1}}
        arrays: dict[int, _I] = {0: np.array([1], np.int64)}
        self.layers, self.layer_arrays = layers, arrays
        hmin = min(self.heights)
        for h in range(1, max(self.heights) + 1):
            if h >= 2:
                U, C, G = self._sieve_step(h, U, C, G, Wmax)
                widths = np.unique(U)
                layers[h - 1] = set(widths.tolist())
                arrays[h - 1] = widths
            if h < hmin:
                continue
            if h == 1:
                self.dfs(1, K, 1)
                continue
            if U.size == 0:
                if math.isfinite(self.table.theta):
                    break
                continue
            kps = -(-K // U) * U
            ok = (kps <= self.max_pad * K) & (U < K)
            w1s, kps, c, g = U[ok], kps[ok], C[ok], G[ok]
            if w1s.size == 0:
                continue
            lb = self._top_lb(h, kps, w1s, c) + self._per_bin_scale(h) * g
            if self.mode == "blue":  # every top's completions at once (vectorised)
                self._par_batch(np.unique(w1s[lb * _SAFE <= self.units_bar(h)]), h - 1)
            order = np.argsort(lb, kind="stable")
            done: set[int] = set()
            for i in order:
                if lb[i] * _SAFE > self.units_bar(h):
                    break
                if int(w1s[i]) in done:
                    continue
                done.add(int(w1s[i]))
                self.dfs(h, int(kps[i]), int(w1s[i]))

    def _cap(self, h: int) -> float:
        """Largest sieve value a chain of height >= h can have and still enter the table."""
        bar = self.units_bar(h)
        if not math.isfinite(bar):
            return math.inf
        return bar / self._per_bin_scale(h)

    def _sieve_step(self, h: int, U: _I, C: _I, G: _F, Wmax: int) -> tuple[_I, _I, _F]:
        """Layer h - 1 from layer h - 2: a factor d above u gives the level of node width u
        (cost bound _phi with S_u from u's child factor) and the entry (d u, d)."""
        cap = self._cap(h) / _SAFE
        keep = G <= cap
        U, C, G = U[keep], C[keep], G[keep]
        if U.size == 0:
            return U, C, G
        sb = self._s_bound(U, C)
        blue = self.mode == "blue"
        ws: list[_I] = []
        cs: list[_I] = []
        vs: list[_F] = []

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
