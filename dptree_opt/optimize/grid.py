"""Which grid hierarchy: Kronecker products of trees and quadtrees ranked by the exact BLUE
error (docs/math.md section 8); the budgets per level tuple are ``optimize.grid_budgets``.

Which hierarchy: with optimal budgets a refinement never loses, because the coarser
hierarchy's rows are level tuples of the finer product (give the others budget 0). A
quadtree level, whatever it splits, is one level tuple of the product of its per-axis trees.
A chain (k_1..k_h) is refined by splitting each factor into its prime factors, in any order
within the factor; for a side with several primes no single ordering refines every chain
(over 12 bins (3, 4) is refined by (3, 2, 2) but not by (2, 2, 3)). So the best of all
Kronecker trees and quadtrees over a grid with optimal budgets is a product of finest chains
(every ordering of each side's primes; binary x binary for powers of 2): exactly with
Gaussian noise (a convex problem per hierarchy); with Laplace noise the budget problem is
not convex and the local search can miss it (:func:`best_grid_hierarchy` starts each finest
product from the budgets of the designs it refines, embedded, so it is never reported worse
than them). Tested on 8 x 8 (every pair of ordered factorisations and several quadtrees) and
6 x 12 (every ordering of the primes) in tests/test_grids.py and tests/test_grid_search.py.

Which hierarchy, searched (:func:`best_grid_hierarchy`): every Kronecker product of per-axis
trees (ordered factorisations of each side, optionally padded as the 1-D search pads) and
every quadtree whose levels split every axis, ranked by the exact error. With equal budgets
the Kronecker eigenvalues factor over the axes (one variance v on every level tuple:
lambda_j = prod_i S_(i, j_i) / v, S_j = sum_(l >= j) w_l), so E = v (prod_i e_i - [N public]
prod_i c_i), e_i = sum_j q_(i, j) / S_(i, j), c_i = q_(i, 0) / S_(i, 0): exact per-axis
dominance pruning makes the ranking exhaustive over 2.6 x 10^9 padded products at 1024^2 in
under a second. With N private the error is separable: the best Kronecker tree with equal
budgets is the product of the 1-D equal-budget optima, and its ratio to the flat grid is the
product of the 1-D ratios. The flat grid (``flat_grid_error``) is the leaf level tuple alone.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass, replace
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .. import workloads as wl
from ..engines.tree_sums import chain_widths, haar_level_weight, sum_of_squares
from ..limits import (MAX_GRID_LEVEL_TUPLES, MAX_KRON_PRODUCTS, MAX_QUADTREE_CANDIDATES,
                      MAX_SEARCH_CELLS, at_budget, check_count)
from ..mechanism import Mechanism
from ..privacy import infer_noise, resolve_budget, resolve_public
from ..strategies import kron, quadtree, tree
from ..strategies.base import Strategy, check_neighbours
from ..workloads import KroneckerWorkload, Workload
from .factorisations import (count_factorisations, factorisations, factorisations_by_height,
                             finest_refinement, padded_chain_count, prime_orderings)
from .grid_budgets import minimise_grid_budgets
from .levels import unit_variances

__all__ = ["GridDesign", "GridSearch", "best_grid_hierarchy", "flat_grid_error", "FAMILIES",
           "GRID_BUDGETS", "GRID_WORKLOADS", "MAX_AXIS_CHAINS"]

FAMILIES = ("kron", "quadtree", "both")
GRID_BUDGETS = ("equal", "optimal")
GRID_WORKLOADS = ("prefix", "all_range", "identity", "total")
MAX_AXIS_CHAINS = 600_000       # per-axis trees enumerated (n = 4096 padded: 560 737)
_BLOCK = 1 << 22                 # floats per block of candidate combinations
_MAX_FINEST = 64                 # products of finest chains optimised (orderings of primes)

_F = npt.NDArray[np.float64]
_Chain = tuple[int, ...]
_Chains = tuple[_Chain, ...]     # one chain (k_1..k_h) per axis
_Ranked = list[tuple[float, _Chains]]
# (error, equal-budget error, family, chains, budgets)
_Found = tuple[float, float, str, _Chains, tuple[float, ...]]


@dataclass(frozen=True)
class _AxisGroup:
    """The trees of one height h on one axis: chains (N,), widths and Haar workload weights
    (N, h + 1), w_0 = K' first."""

    chains: tuple[_Chain, ...]
    widths: np.ndarray
    q: np.ndarray


def _axis_groups(n: int, kind: str, padding: bool,
                 heights: set[int] | None) -> dict[int, _AxisGroup]:
    """{h: _AxisGroup} of the axis trees over n bins: the ordered factorisations of n, and with
    ``padding`` every subtree chain (k_2..k_h) of width w_1 < n under the smallest top
    factor k_1 = ceil(n / w_1) (K' = k_1 w_1 < 2n; ``optimize.level_uniform``'s rule), the
    workload restricted to the first n bins. ``heights``: None (all) or a set of h."""
    if padding:   # counted before any tree is listed (an axis of 2^23 bins: 7.5 GB)
        if padded_chain_count(n, MAX_AXIS_CHAINS) > MAX_AXIS_CHAINS:
            raise ValueError(f"an axis of {n} bins has more than {MAX_AXIS_CHAINS} padded "
                             "trees to search: search the exact trees only "
                             "(allow_padding=False; dptree-opt optimize --no-padding) or use "
                             "fewer bins")
        chains = [(-(-n // w1),) + sub for w1 in range(1, n) for sub in factorisations(w1)]
    else:
        count = count_factorisations(n)
        if count > MAX_AXIS_CHAINS:
            raise ValueError(f"an axis of {n} bins has {count} trees (ordered factorisations) "
                             f"to search, more than {MAX_AXIS_CHAINS}: use fewer bins")
        chains = list(factorisations(n))
    by_h: dict[int, list[_Chain]] = {}
    for c in chains:
        if heights is None or len(c) in heights:
            by_h.setdefault(len(c), []).append(c)
    out: dict[int, _AxisGroup] = {}
    for h, cs in sorted(by_h.items()):
        ks = np.array(cs, dtype=np.int64).reshape(len(cs), h)
        widths = np.ones((len(cs), h + 1), dtype=np.int64)
        for lvl in range(h - 1, -1, -1):   # w_l = k_(l+1) w_(l+1), w_h = 1
            widths[:, lvl] = widths[:, lvl + 1] * ks[:, lvl]
        parents = np.concatenate([widths[:, :1], widths[:, :-1]], axis=1)  # W = u at j = 0
        pairs, inv = np.unique(np.stack([parents.ravel(), widths.ravel()], axis=1), axis=0,
                               return_inverse=True)
        vals = np.array([haar_level_weight(kind, n, int(W), int(u)) for W, u in pairs])
        out[h] = _AxisGroup(tuple(cs), widths.astype(float),
                            vals[inv.ravel()].reshape(widths.shape))
    return out


def _reverse_cumsum(a: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.flip(np.cumsum(np.flip(a, axis), axis=axis), axis)


def _kron_equal_terms(g: _AxisGroup) -> tuple[np.ndarray, np.ndarray]:
    """(e, c) per tree: with one variance v on every level tuple the Kronecker eigenvalues
    factor, lambda_j = prod_i S_(i, j_i) / v, S_j = sum_(l >= j) w_l, so the error is
    v (prod_i e_i - [N public] prod_i c_i), e = sum_j q_j / S_j, c = q_0 / S_0 (the
    constant direction, known when N is public)."""
    S = _reverse_cumsum(g.widths)
    return (g.q / S).sum(axis=1), g.q[:, 0] / S[:, 0]


def _dominance_prune(e: np.ndarray, c: np.ndarray, k: int, public: bool) -> np.ndarray:
    """Indices of the trees with fewer than k others at least as good in both e (<=) and c
    (>=): the error is increasing in e and decreasing in c whatever the other axes hold,
    so no other tree can enter the best k of any combination (exact pruning)."""
    order = np.lexsort((-c, e))
    if not public:
        return order[:k]
    keep: list[int] = []
    heap: list[float] = []
    for i in order:
        ci = float(c[i])
        if len(heap) < k or heap[0] < ci:
            keep.append(i)
        if len(heap) < k:
            heapq.heappush(heap, ci)
        elif heap[0] < ci:
            heapq.heapreplace(heap, ci)
    return np.array(keep, dtype=np.int64)


def _outer(arrays: Sequence[np.ndarray]) -> np.ndarray:
    out = arrays[0]
    for a in arrays[1:]:
        out = np.multiply.outer(out, a)
    return out


def _best_k(values: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the k smallest values, sorted."""
    flat = values.ravel()
    if flat.size > k:
        part = np.argpartition(flat, k - 1)[:k]
    else:
        part = np.arange(flat.size)
    return part[np.argsort(flat[part], kind="stable")]


@dataclass(frozen=True)
class _Setting:
    shape: tuple[int, ...]
    kinds: tuple[str, ...]
    noise: str
    neighbours: str
    public: bool
    total: float
    unit: float        # a level (tuple)'s variance at budget 1: v(b) = unit / b^s
    s: int             # 2 (Laplace) or 1 (Gaussian)

    def equal_variance(self, m: int) -> float:
        """v of each of m noisy levels sharing the total equally."""
        return self.unit * (m / self.total) ** self.s

    @property
    def n_queries(self) -> int:
        return math.prod(_axis_queries(k, n) for k, n in zip(self.kinds, self.shape))


def _axis_queries(kind: str, n: int) -> int:
    return {"prefix": n, "identity": n, "total": 1, "all_range": n * (n + 1) // 2}[kind]


def _kron_equal_search(st: _Setting, groups: Sequence[dict[int, _AxisGroup]],
                       k: int) -> _Ranked:
    """The k best Kronecker trees with equal budgets: [(error, chains)], exact."""
    d = len(groups)
    terms = [{h: _kron_equal_terms(g) for h, g in gr.items()} for gr in groups]
    kept = [{h: _dominance_prune(e, c, k, st.public) for h, (e, c) in t.items()}
            for t in terms]
    n = math.prod(sum(len(x) for x in kd.values()) for kd in kept)
    check_count(n, MAX_KRON_PRODUCTS, f"the number of Kronecker trees left to compare after "
                f"per-axis pruning ({n})", "the search compares ~6e7 a second; use fewer axes "
                "or fewer bins per axis, or the quadtrees only (family='quadtree'; "
                "--family quadtree)")
    found: _Ranked = []
    for hs in itertools.product(*[sorted(gr) for gr in groups]):
        m = math.prod(h + 1 for h in hs) - st.public
        v = st.equal_variance(m)
        idx = [kept[i][h] for i, h in enumerate(hs)]
        e = [terms[i][h][0][idx[i]] for i, h in enumerate(hs)]
        c = [terms[i][h][1][idx[i]] for i, h in enumerate(hs)]
        rest = math.prod(len(x) for x in idx[1:])
        step = max(1, _BLOCK // max(rest, 1))
        for a in range(0, len(idx[0]), step):
            blk = slice(a, a + step)
            E = _outer([e[0][blk]] + e[1:])
            if st.public:
                E = E - _outer([c[0][blk]] + c[1:])
            E = v * E
            for flat in _best_k(E, k):
                pos = np.unravel_index(flat, E.shape)
                pick = [idx[0][blk][pos[0]]] + [idx[i][pos[i]] for i in range(1, d)]
                found.append((float(E[pos]), tuple(groups[i][h].chains[pick[i]]
                                                   for i, h in enumerate(hs))))
    found.sort(key=lambda x: (x[0], x[1]))
    return found[:k]


def _quadtree_equal_errors(st: _Setting, gs: Sequence[_AxisGroup]) -> np.ndarray:
    """Equal-budget errors of every quadtree whose axis trees are the height-h groups ``gs``
    (one per axis), shape (N_1, .., N_d): lambda_j = T_(max j) / v with T_l = sum over
    l' >= l of prod_i w_(i, l') (engines.kronecker, quadtrees), so E = v sum_l R_l / T_l with
    R_l = prod_i C_(i, l) - prod_i C_(i, l - 1), C the cumulative sums of q (the weight of the
    level tuples j with max j = l; R_0 = 0 when N is public)."""
    h = gs[0].widths.shape[1] - 1
    v = st.equal_variance(h + 1 - st.public)
    d = len(gs)
    out = np.empty(tuple(len(g.chains) for g in gs))
    rest = math.prod(len(g.chains) for g in gs[1:]) * (h + 1)
    step = max(1, _BLOCK // max(rest, 1))
    cums = [np.cumsum(g.q, axis=1) for g in gs]
    for a in range(0, len(gs[0].chains), step):
        blk = slice(a, a + step)

        def outer_levels(arrs: Sequence[np.ndarray]) -> np.ndarray:
            o = arrs[0]
            for x in arrs[1:]:
                o = o[..., None, :] * x.reshape((1,) * (o.ndim - 1) + x.shape)
            return o
        wv = outer_levels([gs[0].widths[blk]] + [g.widths for g in gs[1:]])
        cv = outer_levels([cums[0][blk]] + cums[1:])
        T = _reverse_cumsum(wv)
        R = np.diff(cv, axis=-1, prepend=0.0)
        if st.public:
            R[..., 0] = 0.0
        out[blk] = v * np.sum(R / T, axis=-1)
    assert out.ndim == d
    return out


def _quadtree_equal_search(st: _Setting, qgroups: Sequence[dict[int, _AxisGroup]],
                           k: int) -> _Ranked:
    """The k best quadtrees with equal budgets: [(error, chains)], every one evaluated."""
    found: _Ranked = []
    for h in sorted(set.intersection(*[set(g) for g in qgroups])):
        gs = [g[h] for g in qgroups]
        E = _quadtree_equal_errors(st, gs)
        for flat in _best_k(E, k):
            pos = np.unravel_index(flat, E.shape)
            found.append((float(E[pos]), tuple(g.chains[p] for g, p in zip(gs, pos))))
    found.sort(key=lambda x: (x[0], x[1]))
    return found[:k]


def _budget_problem(st: _Setting, family: str, chains: _Chains
                    ) -> tuple[tuple[int, ...], tuple[npt.NDArray[np.intp], ...], _F, _F]:
    """(dims, idx, coef, Q) of ``grid_budgets.minimise_grid_budgets`` for one hierarchy:
    noisy level tuples in level-code order (row-major tuples for Kronecker trees, the
    diagonal for quadtrees), precision coefficient prod_i w_(i, l_i) / unit."""
    widths = [np.array(chain_widths(c), dtype=float) for c in chains]
    q = [np.array([haar_level_weight(kind, n, int(w[max(j - 1, 0)]), int(w[j]))
                   for j in range(len(w))]) for kind, n, w in zip(st.kinds, st.shape, widths)]
    dims = tuple(len(c) + 1 for c in chains)
    Q = _outer(q)
    if st.public:
        Q.flat[0] = 0.0
    W = _outer(widths)
    idx = tuple(_noisy_tuples(st, family, dims))
    return dims, idx, W[idx] / st.unit, Q


def _noisy_tuples(st: _Setting, family: str,
                  dims: tuple[int, ...]) -> npt.NDArray[np.intp]:
    """The noisy level tuples (d, m) in level-code order (``_budget_problem``)."""
    d = len(dims)
    if family == "kron":
        return np.indices(dims).reshape(d, -1)[:, int(st.public):]
    return np.tile(np.arange(int(st.public), dims[0]), (d, 1))


def _embed_budgets(st: _Setting, family: str, chains: _Chains, budgets: ArrayLike,
                   target: _Chains) -> _F:
    """The budgets of a hierarchy as budgets of the Kronecker product of ``target`` chains
    that refine its axis trees (every node width of chains[i] is one of target[i]'s): each
    level (tuple) is the target's level tuple of the same node widths, the other tuples get
    0 (the dominance argument of the module docstring, made constructive)."""
    d = len(chains)
    maps = []
    for c, f in zip(chains, target):
        pos = {int(w): j for j, w in enumerate(chain_widths(f))}
        maps.append(np.array([pos[int(w)] for w in chain_widths(c)]))
    src = _noisy_tuples(st, family, tuple(len(c) + 1 for c in chains))
    tdims = tuple(len(f) + 1 for f in target)
    flat = np.ravel_multi_index(tuple(maps[i][src[i]] for i in range(d)), tdims)
    out = np.zeros(math.prod(tdims))
    np.add.at(out, flat, np.asarray(budgets, dtype=float))
    return out[int(st.public):]


@dataclass(frozen=True)
class GridDesign:
    """One grid hierarchy and its exact BLUE error (``best_grid_hierarchy``).

    ``family``: "kron" (T_1 x .. x T_d, a budget per level tuple) or "quadtree" (every
    level splits every axis; a budget per level). ``branching``: one chain (k_1..k_h) per
    axis. ``shape``: the real grid; ``padded_shape``: prod of each chain (>= shape; the
    extra cells are empty, the queries stay within the real cells). ``budgets``: one per
    noisy level in level order (``Mechanism(level_budgets=...)``). ``error``: exact total
    squared error of the workload's queries (counts^2), ``mean`` per query; ``equal_mean``:
    the same hierarchy with the equal split."""

    family: str
    branching: _Chains
    shape: tuple[int, ...]
    padded_shape: tuple[int, ...]
    kinds: tuple[str, ...]
    budgets: tuple[float, ...]
    error: float
    mean: float
    equal_mean: float
    noise: str
    neighbours: str
    public_total: bool
    total_budget: float

    def strategy(self) -> Strategy:
        """The strategy over ``padded_shape``: ``strategies.kron`` of trees or
        ``strategies.quadtree``."""
        if self.family == "kron":
            return kron(*[tree(int(math.prod(c)), list(c)) for c in self.branching])
        return quadtree(self.padded_shape, [list(c) for c in self.branching])

    def mechanism(self) -> Mechanism:
        """The design as a ``Mechanism`` over ``padded_shape`` with its budgets."""
        laplace = self.noise == "laplace"
        return Mechanism(self.strategy(), noise=self.noise, neighbours=self.neighbours,
                         public_total=self.public_total if self.neighbours == "add_remove"
                         else None, level_budgets=list(self.budgets),
                         epsilon=self.total_budget if laplace else None,
                         rho=None if laplace else self.total_budget)

    def workload(self) -> Workload:
        """The workload over ``padded_shape`` whose error is ``error``: the per-axis kinds, or
        on a padded axis the same queries restricted to the first n_i cells
        (``workloads.ranges``)."""
        factors: list[Workload] = []
        for kind, n, K in zip(self.kinds, self.shape, self.padded_shape):
            if K == n:
                factors.append(getattr(wl, kind)(n))
            elif kind == "prefix":
                factors.append(wl.ranges(K, [(0, t) for t in range(n)]))
            elif kind == "identity":
                factors.append(wl.ranges(K, [(t, t) for t in range(n)]))
            elif kind == "total":
                factors.append(wl.ranges(K, [(0, n - 1)]))
            else:
                factors.append(wl.ranges(K, [(a, b) for a in range(n) for b in range(a, n)]))
        return wl.kron(*factors)


@dataclass(frozen=True)
class GridSearch:
    """Result of ``best_grid_hierarchy``: ``ranked`` designs (best first), ``flat_mean`` (the
    flat grid's mean per-query error in the same setting, ``flat_grid_error``),
    ``candidates`` ({family: number of hierarchies considered}), ``optimised`` (how many had
    their budgets optimised), ``method`` (what is exhaustive / certified), ``seconds``."""

    ranked: tuple[GridDesign, ...]
    flat_mean: float
    candidates: dict[str, int]
    optimised: int
    method: str
    seconds: float

    @property
    def best(self) -> GridDesign:
        """The best design."""
        return self.ranked[0]


def _resolve_grid(shape: int | Sequence[int], workload: str | Workload
                  ) -> tuple[tuple[int, ...], tuple[str, ...]]:
    given = (shape,) if isinstance(shape, (int, np.integer)) else shape
    raw: tuple[Any, ...] | None  # user input, checked below
    try:
        raw = tuple(given)
    except TypeError:
        raw = None
    if (raw is None or isinstance(shape, (str, bytes)) or not raw
            or any(isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer))
                   or n < 2 for n in raw)):
        raise ValueError(f"shape must be a non-empty sequence of integer axis lengths >= 2, "
                         f"got {shape!r}")
    dims = tuple(int(n) for n in raw)
    if isinstance(workload, str):
        if workload not in GRID_WORKLOADS:
            raise ValueError(f"workload must be one of {GRID_WORKLOADS} or a Kronecker "
                             f"workload, got {workload!r}")
        return dims, (workload,) * len(dims)
    factors = (workload.factors if isinstance(workload, KroneckerWorkload)
               else (workload,) if len(dims) == 1 and hasattr(workload, "kind") else None)
    if factors is None or tuple(f.n_bins for f in factors) != dims or any(
            f.kind not in GRID_WORKLOADS for f in factors):
        raise ValueError(f"workload must be one of {GRID_WORKLOADS} or a Kronecker workload "
                         f"over the grid {dims} with per-axis kinds in {GRID_WORKLOADS}")
    return dims, tuple(f.kind for f in factors)


def _setting(shape: tuple[int, ...], kinds: tuple[str, ...], epsilon: float | None,
             rho: float | None, noise: str | None, neighbours: str,
             public_total: bool | None) -> _Setting:
    noise = infer_noise(noise, epsilon, rho)
    total = resolve_budget(noise, epsilon, rho)
    neighbours = check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    # a level (tuple)'s unit-budget variance: every noisy level of these hierarchies has
    # the sensitivity of a tree level below a splitting root (1 add/remove; swap: 2 in l1,
    # sqrt 2 in l2), from the strategy class via optimize.levels
    unit = float(unit_variances(1, noise=noise, neighbours=neighbours,
                                public_total=public_total)[1])
    return _Setting(shape, kinds, noise, neighbours, public, total, unit,
                    2 if noise == "laplace" else 1)


def _box_moments(kind: str, n: int) -> tuple[int, int]:
    """(sum of query lengths, sum of squared lengths) over one axis's queries."""
    if kind == "prefix":
        return n * (n + 1) // 2, sum_of_squares(n)
    if kind == "all_range":   # n - L + 1 ranges of length L
        return n * (n + 1) * (n + 2) // 6, n * (n + 1) ** 2 * (n + 2) // 12
    if kind == "identity":
        return n, n
    return n, n * n


def flat_grid_error(shape: int | Sequence[int], workload: str | Workload = "prefix",
                    epsilon: float | None = None, *, rho: float | None = None,
                    noise: str | None = None, neighbours: str = "add_remove",
                    public_total: bool | None = None) -> float:
    """Exact total squared error (counts^2) of the flat grid: every cell counted once with
    the whole budget (``strategies.kron`` of ``histogram`` factors; the Kronecker product of
    one-level trees), BLUE, for ``workload`` ("prefix": the d-D CDF, "all_range": all boxes,
    "identity", "total", or a Kronecker workload of those kinds).

    One noisy level of variance v (``Mechanism``'s calibration: Laplace 2 (D / eps)^2,
    Gaussian D^2 / (2 rho), D = 1 add/remove, 2 (l1) or sqrt 2 (l2) swap). A box B then has
    variance v ``|B|``, or v (``|B| - |B|^2 / N_cells``) when N is public (the BLUE with
    1'x = N has Cov = v (I - J / N_cells)). Over a Kronecker workload the boxes are all
    products of per-axis intervals, so the sums of ``|B|`` and ``|B|^2`` are products of
    per-axis sums: O(d)."""
    dims, kinds = _resolve_grid(shape, workload)
    st = _setting(dims, kinds, epsilon, rho, noise, neighbours, public_total)
    m1, m2 = zip(*[_box_moments(k, n) for k, n in zip(kinds, dims)])
    v = st.unit  # at unit budget, restated at the total (homogeneity, dptree_opt.limits)
    cells = math.prod(dims)
    err = v * math.prod(m1)
    if st.public:
        err -= v * (math.prod(m2) / cells)
    return at_budget(float(err), st.noise, st.total)


def best_grid_hierarchy(shape: int | Sequence[int], workload: str | Workload = "prefix",
                        epsilon: float | None = None, *, rho: float | None = None,
                        noise: str | None = None, neighbours: str = "add_remove",
                        public_total: bool | None = None, budgets: str = "optimal",
                        family: str = "both", height: int | Sequence[int] | None = None,
                        allow_padding: bool = True,
                        top: int = 10, pool: int = 24, exhaustive: int = 100,
                        starts: int = 4, seed: int = 0) -> GridSearch:
    """Rank every Kronecker product of per-axis trees and every quadtree over a grid by the
    exact BLUE error of a Kronecker workload (docs/math.md section 8).

    Parameters
    ----------
    shape : (n_1, .., n_d), every n_i >= 2 (d = 1: 1-D trees; quadtrees need d >= 2).
    workload : "prefix" (the d-D CDF), "all_range" (all boxes), "identity", "total" (per
        axis), or a ``workloads.kron`` of such 1-D factors over ``shape``.
    epsilon / rho, noise, neighbours, public_total : as for ``Mechanism``.
    budgets : "optimal" (default; per design, ``optimal_grid_budgets``' programme) or
        "equal" (the total split equally over the noisy level tuples / levels, as
        ``Mechanism`` does by default; Qardaji-Yang-Li's setting).
    family : "kron", "quadtree" or "both".
    height : None (all), an int (every axis tree / the quadtree has that height) or, for
        Kronecker trees, one height per axis.
    allow_padding : Kronecker trees: also every axis tree over K'_i in (n_i, 2 n_i): each
        subtree (k_2..k_h) of width w_1 < n_i under the smallest top factor
        k_1 = ceil(n_i / w_1) (``optimize.level_uniform``'s rule); the extra cells are empty
        and the queries stay within the real cells. Quadtrees: exact factorisations only.
    top : how many designs ``ranked`` holds.
    pool, exhaustive, starts, seed : budgets="optimal": when all the candidates number at
        most ``exhaustive`` every one is optimised; else the ``pool`` best of each family
        by the equal-budget error, their finest refinements, and the products of the finest
        chains of the sides (every ordering of the prime factors, up to 64 products; for
        quadtrees those of equal length). ``starts``: Laplace restarts (non-convex).

    Candidates and exactness
    ------------------------
    Kronecker trees: all products of the per-axis trees (ordered factorisations of n_i into
    factors >= 2, plus the padded ones). Quadtrees: per-axis ordered factorisations of one
    common height h, every level splitting every axis (k_(i, l) >= 2). Errors are the
    eigen-sum of ``engines.kronecker`` from per-axis Haar weights in exact integer arithmetic.
    Equal budgets: with one variance v on every level tuple the Kronecker eigenvalues
    factor (lambda_j = prod_i S_(i, j_i) / v), so E = v (prod_i e_i - [N public] prod_i c_i)
    and, per axis and height, a tree with ``top`` others at least as good in (e, c) cannot
    be in the top list: the ranking is exact (every candidate counted, the dominated ones
    skipped); every quadtree is evaluated (O(h) each). With add/remove (N private) the
    error is separable: the best Kronecker tree is the product of the 1-D trees minimising
    (h + 1)^s e, i.e. of the 1-D equal-budget optima. Optimal budgets: with Gaussian noise,
    exact factorisations and no height restriction, every Kronecker tree and quadtree is
    dominated by a product of finest chains (module docstring), all of which are optimised
    when at most 64: the best design is then the global optimum over both families; Laplace
    budgets are a local search (``starts``). ``method`` says which case applies.

    Returns
    -------
    GridSearch (``.best``, ``.ranked``, ``.flat_mean``, ``.candidates``, ``.method``). The
    search runs at unit total budget and is restated at the given one (exact: the errors
    are homogeneous in the budget, ``dptree_opt.limits``).
    """
    noise = infer_noise(noise, epsilon, rho)
    total = resolve_budget(noise, epsilon, rho)
    dims, kinds = _resolve_grid(shape, workload)
    # a Kronecker tree has one budget per level tuple, prod_i (h_i + 1) of them; the tallest
    # axis tree has Omega(n_i) levels (padded: at most floor(log2(2 n_i - 1)))
    padded = isinstance(allow_padding, (bool, np.bool_)) and bool(allow_padding)
    tallest = [((2 * n - 1).bit_length() - 1) if padded else len(finest_refinement((n,)))
               for n in dims]
    check_count(math.prod(dims), MAX_SEARCH_CELLS, f"the grid {'x'.join(map(str, dims))} "
                f"({math.prod(dims)} cells)", "the search takes minutes beyond it (30 s at "
                "2^32 cells); use fewer bins per axis")
    check_count(math.prod(h + 1 for h in tallest), MAX_GRID_LEVEL_TUPLES,
                f"the number of budget levels of the tallest Kronecker tree over {dims}",
                "use fewer or coarser axes (each axis of n cells adds up to log2(n) + 1 "
                "levels per level of the others)")
    q = math.prod(_axis_queries(k, n) for k, n in zip(kinds, dims))
    res = _best_grid_hierarchy(shape, workload, noise, neighbours, public_total, budgets,
                               family, height, allow_padding, top, pool, exhaustive, starts,
                               seed)

    def scaled(d: GridDesign) -> GridDesign:
        err = at_budget(d.error, noise, total)
        return replace(d, budgets=tuple(float(b) * total for b in d.budgets), error=err,
                       mean=err / q, equal_mean=at_budget(d.equal_mean, noise, total),
                       total_budget=total)
    return replace(res, ranked=tuple(scaled(d) for d in res.ranked),
                   flat_mean=at_budget(res.flat_mean, noise, total))


def _best_grid_hierarchy(shape: int | Sequence[int], workload: str | Workload, noise: str,
                         neighbours: str, public_total: bool | None, budgets: str,
                         family: str, height: int | Sequence[int] | None,
                         allow_padding: bool, top: int, pool: int, exhaustive: int,
                         starts: int, seed: int) -> GridSearch:
    """best_grid_hierarchy at unit total budget."""
    t0 = time.perf_counter()
    epsilon, rho = (1.0, None) if noise == "laplace" else (None, 1.0)
    dims, kinds = _resolve_grid(shape, workload)
    d = len(dims)
    st = _setting(dims, kinds, epsilon, rho, noise, neighbours, public_total)
    if budgets not in GRID_BUDGETS:
        raise ValueError(f"budgets must be one of {GRID_BUDGETS}, got {budgets!r}")
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if family == "quadtree" and d < 2:
        raise ValueError("quadtrees need a grid of d >= 2 axes")
    if not isinstance(allow_padding, (bool, np.bool_)):
        raise ValueError(f"allow_padding must be True or False, got {allow_padding!r}")
    for name, val, lo in (("top", top, 1), ("pool", pool, 1), ("exhaustive", exhaustive, 0),
                          ("starts", starts, 0), ("seed", seed, 0)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {val!r}")
    kh: list[set[int]] | None
    qh: int | None
    if height is None:
        kh = qh = None
    elif isinstance(height, (int, np.integer)) and not isinstance(height, bool) and height >= 1:
        kh = [{int(height)}] * d
        qh = int(height)
    else:
        try:
            if isinstance(height, (int, np.integer)):  # < 1 or a bool: not a sequence either
                raise TypeError
            hs = tuple(int(h) for h in height)
        except (TypeError, ValueError):
            raise ValueError(f"height must be None, an int >= 1 or one int per axis, got "
                             f"{height!r}") from None

        if len(hs) != d or any(h < 1 for h in hs) or any(
                isinstance(h, bool) for h in height):
            raise ValueError(f"height must be None, an int >= 1 or one int >= 1 per axis, "
                             f"got {height!r}")
        if family != "kron":
            raise ValueError("per-axis heights are for family='kron' only (a quadtree has "
                             "one height)")
        kh, qh = [{h} for h in hs], None
    fams = ("kron", "quadtree") if family == "both" else (family,)
    if d < 2:
        fams = ("kron",)
    k = max(top, pool) if budgets == "optimal" else top

    found: dict[str, _Ranked] = {}
    counts: dict[str, int] = {}
    if "kron" in fams:
        groups = [_axis_groups(n, kind, bool(allow_padding), None if kh is None else kh[i])
                  for i, (n, kind) in enumerate(zip(dims, kinds))]
        if any(not g for g in groups):
            raise ValueError(f"no Kronecker tree of the requested height fits {dims}")
        counts["kron"] = math.prod(sum(len(g.chains) for g in gr.values()) for gr in groups)
        found["kron"] = _kron_equal_search(st, groups, k)
    if "quadtree" in fams:   # counted before any axis tree is listed
        by_h = [factorisations_by_height(n) for n in dims]
        common = set.intersection(*[set(f) for f in by_h])
        if qh is not None:
            common &= {qh}
        counts["quadtree"] = sum(math.prod(f[h] for f in by_h) for h in common)
        check_count(counts["quadtree"], MAX_QUADTREE_CANDIDATES, f"the number of quadtrees "
                    f"to evaluate ({counts['quadtree']})", "each is evaluated exactly, in "
                    "memory; use fewer axes or fewer bins per axis, or the Kronecker trees "
                    "only (family='kron'; --family kron)")
        qgroups = [_axis_groups(n, kind, False, None if qh is None else {qh})
                   for n, kind in zip(dims, kinds)]
        if not common:
            if family == "quadtree":
                raise ValueError(f"no quadtree (every level splitting every axis) of the "
                                 f"requested height fits {dims}")
        else:
            found["quadtree"] = _quadtree_equal_search(st, qgroups, k)
    n_all = sum(counts.values())

    designs: list[_Found] = []          # (error, equal_error, family, chains, budgets)
    if budgets == "equal":
        for fam, lst in found.items():
            for err, chains in lst:
                m = (math.prod(len(c) + 1 for c in chains) if fam == "kron"
                     else len(chains[0]) + 1) - st.public
                designs.append((err, err, fam, chains, (st.total / m,) * m))
        how = (f"exhaustive: all {n_all} candidates ranked by the exact equal-budget error "
               "(Kronecker trees: exact per-axis dominance pruning)")
        optimised = 0
    else:
        cands: list[tuple[str, _Chains]] = []
        if n_all <= exhaustive:
            if "kron" in fams:
                cands += [("kron", ch) for ch in itertools.product(*[
                    [c for g in gr.values() for c in g.chains] for gr in groups])]
            if "quadtree" in fams and found.get("quadtree") is not None:
                cands += [("quadtree", ch) for h in sorted(common) for ch in
                          itertools.product(*[g[h].chains for g in qgroups])]
            how = f"exhaustive: budgets optimised for all {n_all} candidates"
            how += ("; Gaussian: each a convex problem, so the ranking is certified"
                    if st.noise == "gaussian" else
                    "; Laplace budgets: local search (non-convex), not certified")
        else:
            for fam, lst in found.items():
                cands += [(fam, ch) for _, ch in lst[:pool]]
            if "kron" in fams:
                if allow_padding:   # the padded trees crowd the pool: also the best exact ones
                    exact = [_axis_groups(n, kind, False, None if kh is None else kh[i])
                             for i, (n, kind) in enumerate(zip(dims, kinds))]
                    if all(exact):
                        cands += [("kron", ch) for _, ch in _kron_equal_search(st, exact, pool)]
                cands += [("kron", tuple(finest_refinement(c) for c in ch)) for fam, ch in cands
                          if fam == "kron"]
            orderings = [prime_orderings(n, _MAX_FINEST) for n in dims]
            listed = [f for f in orderings if f is not None]
            fin_ok = (len(listed) == len(orderings)
                      and math.prod(len(f) for f in listed) <= _MAX_FINEST)
            finest: list[list[_Chain]] = (
                listed if fin_ok else [[finest_refinement((n,))] for n in dims])
            if "kron" in fams:
                cands += [("kron", ch) for ch in itertools.product(*finest)]
            if "quadtree" in fams:
                cands += [("quadtree", ch) for ch in itertools.product(*finest)
                          if len({len(c) for c in ch}) == 1]
            how = (f"budgets optimised for a pool of the {pool} best candidates of each "
                   f"family by the equal-budget error (exhaustive ranking of {n_all}; with "
                   "padding also the best unpadded ones), their finest refinements and the "
                   "products of the sides' finest chains, each finest product also started "
                   "from the best pool design it refines")
            dominated = (st.noise == "gaussian" and not allow_padding and height is None
                         and fin_ok and "kron" in fams)
            if dominated:
                how += ("; certified: every Kronecker tree and quadtree is dominated by a "
                        "product of finest chains (all optimised; Gaussian: convex), so the "
                        "best is the global optimum over both families")
            elif st.noise == "laplace":
                how += "; Laplace budgets: local search (non-convex), not certified"
            else:
                how += "; not certified (padding, a fixed height or too many finest products)"
        rs = starts if st.noise == "laplace" else 0

        def fits(fam: str, ch: _Chains) -> bool:   # the height restriction, for the refinements
            if kh is None:
                return True
            if fam == "quadtree":
                return len(ch[0]) == qh
            return all(len(c) in hs_i for c, hs_i in zip(ch, kh))
        flat_ch = tuple((n,) for n in dims)   # the one-level trees: the flat grid inside
        if "kron" in fams and ("kron", flat_ch) not in cands:
            cands.append(("kron", flat_ch))
        cands = [(fam, ch) for fam, ch in cands if fits(fam, ch)]
        best_of: dict[tuple[str, _Chains], _Found] = {}
        for fam, ch in cands:
            if (fam, ch) in best_of:
                continue
            dims_l, idx, coef, Q = _budget_problem(st, fam, ch)
            init = None
            if fam == "kron" and ch == flat_ch:   # all on the cells: the flat grid
                init = np.zeros(len(coef))
                init[-1] = st.total
            err, b, e0, _ = minimise_grid_budgets(dims_l, idx, coef, Q, st.total, st.s, rs, seed,
                                              init=init)
            best_of[(fam, ch)] = (err, e0, fam, ch, tuple(float(x) for x in b))
        # the dominance made constructive: each design's budgets, embedded in the product of
        # its finest chains, start that product's search, so the finest product is never
        # reported worse than a design it refines (Laplace: a local search otherwise can)
        ordered = sorted(best_of.values(), key=lambda x: x[0])
        warm: dict[tuple[str, _Chains], _F] = {}
        for _, _, fam, ch, bud in ordered[:pool]:
            tgt = ("kron", tuple(finest_refinement(c) for c in ch))
            if tgt not in warm and "kron" in fams and fits(*tgt):
                warm[tgt] = _embed_budgets(st, fam, ch, bud, tgt[1])

        for tgt, b0 in warm.items():
            dims_l, idx, coef, Q = _budget_problem(st, *tgt)
            err, b, e0, _ = minimise_grid_budgets(dims_l, idx, coef, Q, st.total, st.s, 0, seed,
                                              init=b0)
            if tgt not in best_of or err < best_of[tgt][0]:
                best_of[tgt] = (err, e0, tgt[0], tgt[1], tuple(float(x) for x in b))
        designs = list(best_of.values())
        optimised = len(best_of)
    # ties (a finest product carrying a coarser design's budgets): the coarser one first
    designs.sort(key=lambda x: (float(f"{x[0]:.9e}"), sum(map(len, x[3])), x[2], x[3]))
    q = st.n_queries
    ranked = tuple(GridDesign(
        family=fam, branching=ch, shape=dims, padded_shape=tuple(math.prod(c) for c in ch),
        kinds=kinds, budgets=b, error=float(err), mean=float(err) / q,
        equal_mean=float(e0) / q, noise=st.noise, neighbours=st.neighbours,
        public_total=st.public, total_budget=st.total)
        for err, e0, fam, ch, b in designs[:top])
    flat = flat_grid_error(dims, workload, epsilon, rho=rho, noise=noise,
                           neighbours=neighbours, public_total=public_total) / q
    secs = time.perf_counter() - t0
    return GridSearch(ranked, flat, counts, optimised, f"{how}; {secs:.3g} s", secs)
