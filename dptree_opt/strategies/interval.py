"""Strategies whose rows are bin ranges forming a laminar family: trees, hierarchies,
the histogram and the prefix sums.

Each row r measures x[lo_r:hi_r].sum(); any two rows are nested or disjoint, so the rows
form a forest (``parent``, -1 for a forest root, ``depth`` 0 at the roots). ``bin_row[c]`` is
the smallest row containing bin c (-1 if none). This structure gives, without the matrix:

* add/remove sensitivity: max over bins c of the weight of the rows containing c (a
  difference array, O(m + n));
* swap sensitivity: max over bins a != b of the weight of the rows containing exactly one of
  them. With P(v) = weight of the path from v up to its root, that is
  P(bin_row[a]) + P(bin_row[b]) - 2 P(lca), maximised by a bottom-up pass over depths that
  keeps, per row, the two heaviest child branches (O(m) numpy work per pass, one pass per
  depth level);
* the [RTS] covering of every prefix (see ``dptree_opt.engines.covering``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..limits import (INTERVAL_BYTES_PER_BIN, INTERVAL_BYTES_PER_ROW, TREE_BYTES_PER_ROW,
                      check_memory)
from ..validation import check_int, check_n
from ..participation import Participation, Sensitivity
from .base import Strategy, check_neighbours, check_norm, frozen_csr, readonly
from .interval_participation import interval_sensitivity

if TYPE_CHECKING:
    import networkx as nx

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"


def interval_matrix(lo: npt.NDArray[np.integer[Any]], hi: npt.NDArray[np.integer[Any]],
                    n_bins: int) -> sp.csr_matrix:
    """CSR 0/1 matrix whose row r is the indicator of bins [lo_r, hi_r). O(nnz)."""
    counts = (hi - lo).astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = np.arange(indptr[-1], dtype=np.int64) - np.repeat(indptr[:-1] - lo, counts)
    return sp.csr_matrix((np.ones(indptr[-1]), indices, indptr), shape=(lo.size, n_bins))


def _top_two(values: _F, groups: _I) -> tuple[_I, _F, _F]:
    """Distinct groups and, per group, the largest and second-largest value (-inf if none)."""
    ids, inv = np.unique(groups, return_inverse=True)
    b1 = np.full(ids.size, -np.inf)
    np.maximum.at(b1, inv, values)
    is_max = values == b1[inv]
    n_max = np.bincount(inv[is_max], minlength=ids.size)
    b2 = np.full(ids.size, -np.inf)
    np.maximum.at(b2, inv[~is_max], values[~is_max])
    return ids, b1, np.where(n_max >= 2, b1, b2)


class IntervalStrategy(Strategy):
    """A strategy whose rows are the 0/1 indicators of nested-or-disjoint bin ranges."""

    # hierarchy(): the graph node of each row (set only on strategies built from a graph)
    node_labels: list[Hashable]

    def __init__(self, lo: ArrayLike, hi: ArrayLike, parent: ArrayLike, levels: ArrayLike, *,
                 n_bins: int, depth: ArrayLike, bin_row: ArrayLike, name: str) -> None:
        self._n_bins = int(n_bins)
        # copies: a caller's arrays are neither frozen nor shared
        self._lo = readonly(np.array(lo, dtype=np.int64))
        self._hi = readonly(np.array(hi, dtype=np.int64))
        self._parent = readonly(np.array(parent, dtype=np.int64))
        self._depth = readonly(np.array(depth, dtype=np.int64))
        self._bin_row = readonly(np.array(bin_row, dtype=np.int64))
        self._levels = self._check_levels(levels, self._lo.size)
        self.name = name
        self._check_level_zero()

    # structure (subclasses may compute these lazily)
    @property
    def lo(self) -> _I:
        """First bin of each row's range."""
        return self._lo

    @property
    def hi(self) -> _I:
        """One past the last bin of each row's range."""
        return self._hi

    @property
    def parent(self) -> _I:
        """Index of the smallest row strictly containing each row (-1 for forest roots)."""
        return self._parent

    @property
    def depth(self) -> _I:
        """Depth of each row in the forest (0 at forest roots)."""
        return self._depth

    @property
    def bin_row(self) -> _I:
        """For each bin, the smallest row containing it (-1 if no row does)."""
        return self._bin_row

    @cached_property
    def matrix(self) -> sp.csr_matrix:
        """A as CSR (canonical, read-only), built on first use from the ranges (size
        checked first: one nonzero per bin of every row, e.g. n (n + 1) / 2 for the prefix
        sums)."""
        nnz = int(np.sum(self.hi - self.lo, dtype=np.int64))
        check_memory(16 * nnz + 8 * self.n_rows, f"the explicit matrix of {self.name!r} "
                     f"({self.n_rows} rows, {nnz} nonzeros)",
                     "use the structured paths (apply, sensitivity, the estimators), which "
                     "need no matrix, or fewer bins")
        return frozen_csr(interval_matrix(self.lo, self.hi, self.n_bins), copy=False)

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """Rows whose range is every bin (the total N)."""
        return (self.lo == 0) & (self.hi == self.n_bins)

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r) via cumulative sums, O(m + n), no matrix."""
        x = np.asarray(x, dtype=float)
        s = np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(x, axis=0)])
        return s[self.hi] - s[self.lo]

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u for u of shape (m,) or (m, r) via a difference array, O(m + n), no
        matrix."""
        u = np.asarray(u, dtype=float)
        if u.shape[:1] != (self.n_rows,):
            raise ValueError(f"u must have {self.n_rows} rows, got shape {u.shape}")
        d = np.zeros((self.n_bins + 1,) + u.shape[1:])
        np.add.at(d, self.lo, u)
        np.subtract.at(d, self.hi, u)
        return np.cumsum(d[:-1], axis=0)

    def with_total_row(self) -> "IntervalStrategy":
        """A copy with a total row appended (last row, level 0) as the new forest root."""
        m = self.n_rows
        parent = np.where(self.parent < 0, m, self.parent)
        return IntervalStrategy(
            np.append(self.lo, 0), np.append(self.hi, self.n_bins), np.append(parent, -1),
            np.append(self.levels, 0), n_bins=self.n_bins, depth=np.append(self.depth + 1, 0),
            bin_row=np.where(self.bin_row < 0, m, self.bin_row), name=self.name,
        )

    # -------------------------------------------------------- sensitivity
    def _add_remove_loss(self, w: _F, p: int) -> float:
        wp = w if p == 1 else w * w
        n = self.n_bins
        # weight of rows containing bin c, via a difference array: O(m + n)
        cover = np.cumsum(np.bincount(self.lo, wp, n + 1) - np.bincount(self.hi, wp, n + 1))[:n]
        best = float(cover.max())
        return best if p == 1 else float(np.sqrt(max(best, 0.0)))

    def _swap_loss(self, w: _F, p: int) -> float:
        wp = w if p == 1 else w * w
        m = self.n_rows
        par = np.where(self.parent < 0, m, self.parent)  # m = virtual super-root
        direct = np.bincount(np.where(self.bin_row < 0, m, self.bin_row), minlength=m + 1)
        n_child = np.bincount(par, minlength=m + 1)
        best1 = np.full(m + 1, -np.inf)
        best2 = np.full(m + 1, -np.inf)
        depth = self.depth
        order = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[order], np.arange(depth.max() + 2))
        for d in range(int(depth.max()), -1, -1):  # one vectorised pass per depth
            rows = order[bounds[d]:bounds[d + 1]]
            # heaviest path from a bin up to (and including) this row
            floor = np.where(direct[rows] > 0, 0.0, -np.inf)
            down = wp[rows] + np.maximum(best1[rows], floor)
            ids, b1, b2 = _top_two(down, par[rows])
            best1[ids], best2[ids] = b1, b2
        # a pair of bins whose paths meet at u: two child branches, or one branch and a bin
        # attached directly to u, or two bins attached to u (loss 0)
        cand = np.where(n_child >= 2, best1 + best2,
                        np.where((n_child == 1) & (direct >= 1), best1,
                                 np.where(direct >= 2, 0.0, -np.inf)))
        best = float(max(cand.max(), 0.0))
        return best if p == 1 else float(np.sqrt(best))

    def _participation_loss(self, w: _F, part: Participation, p: int) -> Sensitivity:
        # 0/1 interval rows, X >= 0: exact from the ranges alone, no matrix
        # (strategies.interval_participation; docs/math.md section 11)
        return interval_sensitivity(self.lo, self.hi, w, self.n_bins, part, p, self.depth)


class PrefixSums(IntervalStrategy):
    """Rows C_1..C_n (row j = bins [0, j]); the chain's swap loss has a closed form."""

    def _swap_loss(self, w: _F, p: int) -> float:
        # moving a record from bin a to bin b > a changes rows a..b-1; weights are >= 0, so
        # the worst pair is (0, n-1): all rows but the total.
        wp = w[:-1] if p == 1 else w[:-1] ** 2
        s = float(wp.sum())
        return s if p == 1 else float(np.sqrt(s))


def tree_level_sensitivity(branching: Sequence[int], level: int, neighbours: str,
                           norm: int) -> float:
    """One level's sensitivity at unit scale in the level-uniform tree with ``branching``
    (k_1..k_h), O(h), no tree built (``LevelUniformTree.level_sensitivity``; docs/math.md
    section 1): add/remove 1 (every leaf lies under one node of the level); swap 2^(1/p)
    below the first level that splits, else 0 (two leaves differ on two nodes of the level
    exactly when they are split above it)."""
    check_neighbours(neighbours)
    p = check_norm(norm)
    if not 0 <= level <= len(branching):
        return 0.0
    if neighbours == "add_remove":
        return 1.0
    split = [lvl for lvl, k in enumerate(branching) if k >= 2]
    return 2.0 ** (1.0 / p) if split and level > split[0] else 0.0


class LevelUniformTree(IntervalStrategy):
    """The level-uniform tree of [RTS] Sec. IV: branching (k_1..k_h), prod k_l = n.

    Level l has m_l = k_1 ... k_l nodes of width w_l = n / m_l; node i of level l covers
    bins [i w_l, (i+1) w_l); rows are in level order, root first, left to right. The ranges,
    parents and the sparse matrix are built only when asked for, so huge trees (n = 2^24)
    cost O(rows) memory for levels and variances only.
    """

    def __init__(self, n_bins: int, branching: Sequence[int], *, name: str | None = None):
        self._n_bins = int(n_bins)
        self.branching = tuple(int(k) for k in branching)
        self.height = len(self.branching)
        rows, size = 1, 1  # exact integers, before any array
        for k in self.branching:
            size *= k
            rows += size
        check_memory(rows * TREE_BYTES_PER_ROW, f"a level-uniform tree over {n_bins} bins "
                     f"({rows} rows)", "use fewer bins")
        self.level_sizes = readonly(np.concatenate([[1], np.cumprod(self.branching,
                                                                     dtype=np.int64)]))
        self.level_widths = readonly(self._n_bins // self.level_sizes)
        self.level_offsets = readonly(np.concatenate([[0], np.cumsum(self.level_sizes)]))
        self._levels = readonly(
            np.repeat(np.arange(self.height + 1, dtype=np.int32), self.level_sizes))
        self.name = name or "tree(" + ",".join(map(str, self.branching)) + ")"

    def __repr__(self) -> str:
        return f"<LevelUniformTree {self.branching}: {self.n_rows} rows x {self.n_bins} bins>"

    def level_slice(self, level: int) -> slice:
        """Rows of one level."""
        return slice(int(self.level_offsets[level]), int(self.level_offsets[level + 1]))

    def _node_index(self) -> tuple[_I, _I]:
        """(index within level, width) of every row."""
        check_memory(24 * self.n_rows, f"the node ranges of a tree with {self.n_rows} rows",
                     "use fewer bins")
        idx = np.arange(self.n_rows, dtype=np.int64) - np.repeat(
            self.level_offsets[:-1], self.level_sizes)
        return idx, np.repeat(self.level_widths, self.level_sizes)

    @cached_property
    def lo(self) -> _I:
        idx, width = self._node_index()
        return readonly(idx * width)

    @cached_property
    def hi(self) -> _I:
        idx, width = self._node_index()
        return readonly((idx + 1) * width)

    @cached_property
    def parent(self) -> _I:
        idx, _ = self._node_index()
        k = np.repeat(np.array((1,) + self.branching, dtype=np.int64), self.level_sizes)
        lvl = self.levels.astype(np.int64)
        off = self.level_offsets[np.maximum(lvl - 1, 0)]
        return readonly(np.where(lvl == 0, -1, off + idx // k))

    @property
    def depth(self) -> _I:
        return readonly(self.levels.astype(np.int64))

    @cached_property
    def bin_row(self) -> _I:
        return readonly(np.arange(self.n_bins, dtype=np.int64) + self.level_offsets[-2])

    def level_weights(self, weights: _F) -> _F | None:
        """Per-level weight if ``weights`` is constant on every level, else None."""
        starts = self.level_offsets[:-1]
        lo_w = np.minimum.reduceat(weights, starts)
        hi_w = np.maximum.reduceat(weights, starts)
        return lo_w if np.array_equal(lo_w, hi_w) else None

    def level_sensitivity(self, level: int, neighbours: str, norm: int) -> float:
        """One level at unit scale, O(1): every leaf lies under exactly one node of the level
        (add/remove: 1); a swap changes two nodes of the level by 1 if the level lies below
        the first split, else none (2^(1/p) or 0)."""
        return tree_level_sensitivity(self.branching, level, neighbours, norm)

    def sensitivity(self, weights: ArrayLike, neighbours: str, norm: int) -> float:
        """Exact loss; closed form when weights are constant per level (docs/math.md section 1):
        add/remove: ||(W_0..W_h)||_p (every leaf lies under one node per level);
        swap: ||(W_{u+1}..W_h)||_p * 2^(1/p), u = the first level with k_{u+1} >= 2 (two
        leaves split at u differ on every node below it)."""
        w = self._check_weights(weights)
        check_neighbours(neighbours)
        p = check_norm(norm)
        per_level = self.level_weights(w)
        if per_level is None:
            return super().sensitivity(w, neighbours, p)
        if neighbours == "add_remove":
            return float(np.linalg.norm(per_level, ord=p))
        split = [lvl for lvl, k in enumerate(self.branching) if k >= 2]
        if not split:
            return 0.0
        below = per_level[split[0] + 1:]
        return float(np.linalg.norm(below, ord=p) * 2.0 ** (1.0 / p))


# ------------------------------------------------------------------ constructors
def _check_interval_size(rows: int, n: int, what: str) -> None:
    """ValueError before an interval strategy of ``rows`` rows over ``n`` bins is built when
    its arrays would not fit (``limits.check_memory``)."""
    check_memory(rows * INTERVAL_BYTES_PER_ROW + n * INTERVAL_BYTES_PER_BIN,
                 f"{what} over {n} bins ({rows} rows)", "use fewer bins")


def histogram(n: int) -> IntervalStrategy:
    """A = I over n bins: each bin measured once (all rows at level 1; no total row). The
    grid version (a shape (n_1, .., n_d)) is ``strategies.histogram`` (module kronecker)."""
    n = check_n(n)
    _check_interval_size(n, n, "the histogram")
    idx = np.arange(n)
    return IntervalStrategy(idx, idx + 1, np.full(n, -1), np.ones(n, dtype=np.int32),
                            n_bins=n, depth=np.zeros(n), bin_row=idx, name="histogram")


def prefix_sums(n: int) -> PrefixSums:
    """A = the prefix matrix: row j measures C_{j+1} = x_0 + ... + x_j ([RTS] Sec. III-A).

    The last row is the total N (level 0, exact under swap); the others are level 1."""
    n = check_n(n)
    _check_interval_size(n, n, "the prefix sums")
    idx = np.arange(n)
    levels = np.ones(n, dtype=np.int32)
    levels[-1] = 0
    parent = np.append(idx[:-1] + 1, -1)
    return PrefixSums(np.zeros(n), idx + 1, parent, levels, n_bins=n, depth=n - 1 - idx,
                      bin_row=idx, name="prefix")


def padded_height(n: int, k: int) -> int:
    """Smallest h with k^h >= n: the height of a k-ary tree over n bins padded to k^h
    (exact integer arithmetic; 0 for n = 1)."""
    k = check_int(k, "branching factor k", 2)
    h, size = 0, 1
    while size < n:
        size *= int(k)
        h += 1
    return h


def resolve_branching(n: int, branching: int | Sequence[int]) -> tuple[int, ...]:
    """The branching list for ``tree(n, branching)``; ValueError if it does not match n."""
    n = check_n(n)
    if isinstance(branching, (int, np.integer)) and not isinstance(branching, bool):
        k = int(branching)
        if k < 2:
            raise ValueError(f"branching k={k} cannot build a tree over n={n} bins: an int "
                             "branching factor must be >= 2")
        h = padded_height(n, k)
        if k**h != n:
            raise ValueError(f"n={n} bins is not a power of branching factor k={k}")
        return (k,) * h
    if isinstance(branching, (str, bytes)):
        raise ValueError(f"branching must be an int or a list of ints, got {branching!r}")
    try:
        orig = list(cast("Sequence[int]", branching))  # checked below (a bool: TypeError)
    except TypeError:
        raise ValueError(f"branching must be an int or a list of ints, got {branching!r}") from None
    # integers only: no bools, no floats (2.0, inf, nan), no strings
    if any(isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1
           for k in orig):
        raise ValueError(f"branching factors must be integers >= 1, got {orig!r}")
    ks = [int(k) for k in orig]
    prod = int(np.prod(ks, dtype=object)) if ks else 1
    if prod != n:
        raise ValueError(
            f"branching {ks} does not match n={n} bins: the factors multiply to {prod}")
    return tuple(ks)


def tree(n: int, branching: int | Sequence[int]) -> LevelUniformTree:
    """Level-uniform tree over n bins ([RTS] Def. IV.1) with its root row (level 0).

    ``branching``: an int k (n must be a power of k) or a list [k_1..k_h] with product n."""
    return LevelUniformTree(check_n(n), resolve_branching(n, branching))


def truncated_tree(n: int, branching: Sequence[int]) -> IntervalStrategy:
    """The level-uniform tree with branching (k_1..k_h) over K' = prod k_l >= n bins,
    truncated to the first n bins: the padding bins are known zeros, so nodes lying entirely
    in them are dropped and the last node of each level keeps only [lo, n) (OpenDP's
    convention, ``make_consistent_b_ary_tree``). Node i of level d (width
    w_d = k_(d+1) ... k_h) covers [i w_d, min((i + 1) w_d, n)); its parent is node i // k_d
    of level d - 1; rows in level order, levels = depth. O(rows) numpy, one step per level.
    With K' = n it is the level-uniform tree itself (as an IntervalStrategy)."""
    n = check_n(n)
    ks = tuple(int(k) for k in branching)
    if any(k < 1 for k in ks):
        raise ValueError(f"branching factors must be >= 1, got {branching!r}")
    widths = [int(np.prod(ks[d:], dtype=object)) for d in range(len(ks) + 1)]
    if widths[0] < n:
        raise ValueError(f"branching {ks} covers {widths[0]} < n = {n} bins")
    counts = [-(-n // w) for w in widths]
    _check_interval_size(sum(counts), n, "the truncated tree")
    offsets = np.concatenate(([0], np.cumsum(counts)))
    lo: list[_I] = []
    hi: list[_I] = []
    parent: list[_I] = []
    depths: list[_I] = []
    for d, (w, c) in enumerate(zip(widths, counts)):
        i = np.arange(c, dtype=np.int64)
        lo.append(i * w)
        hi.append(np.minimum((i + 1) * w, n))
        parent.append(offsets[d - 1] + i // ks[d - 1] if d else np.full(c, -1, dtype=np.int64))
        depths.append(np.full(c, d, dtype=np.int64))
    depth = np.concatenate(depths)
    return IntervalStrategy(
        np.concatenate(lo), np.concatenate(hi), np.concatenate(parent), depth.astype(np.int32),
        n_bins=n, depth=depth, bin_row=offsets[-2] + np.arange(n),
        name="truncated_tree(" + ",".join(map(str, ks)) + f"; {n})")


def binary_tree(n: int) -> LevelUniformTree:
    """The binary tree mechanism's strategy ([SU]; n must be a power of 2)."""
    return tree(n, 2)


def hierarchy(graph: nx.Graph[Any], root: Hashable | None = None) -> IntervalStrategy:
    """Strategy of an arbitrary rooted tree (networkx): one row per node, bins = leaves.

    ``graph``: a networkx DiGraph arborescence (edges parent -> child; the root is found) or
    an undirected tree with ``root`` given. Children are taken in the graph's insertion
    order; the leaves, left to right, are bins 0..n-1. Rows are in level order (levels =
    depth, root = level 0), left to right; ``.node_labels`` maps rows to graph nodes.
    """
    import networkx as nx

    if not isinstance(graph, nx.Graph):
        raise ValueError(f"graph must be a networkx graph, got {type(graph).__name__}")
    if graph.number_of_nodes() == 0:
        raise ValueError("graph has no nodes")
    if graph.is_directed():
        if not nx.is_arborescence(graph):
            raise ValueError("graph must be a rooted tree (an arborescence: edges parent -> child)")
        digraph = cast("nx.DiGraph[Any]", graph)
        roots = [v for v, d in digraph.in_degree() if d == 0]
        if root is not None and root != roots[0]:
            raise ValueError(f"root={root!r} is not the arborescence's root {roots[0]!r}")
        root = roots[0]

        def children(v: Hashable, parent: Hashable | None) -> list[Hashable]:
            return list(digraph.successors(v))
    else:
        if not nx.is_tree(graph):
            raise ValueError("graph must be a tree (connected, acyclic)")
        if root is None or root not in graph:
            raise ValueError("root: an undirected tree needs root=<a node of the graph>")

        def children(v: Hashable, parent: Hashable | None) -> list[Hashable]:
            return [u for u in graph.neighbors(v) if u != parent]

    # iterative DFS (input conversion: O(nodes) Python, as networkx itself)
    labels: list[Hashable] = []
    parent_of: list[int] = []
    depth: list[int] = []
    lo: list[int] = []
    n_leaves = 0
    stack: list[tuple[Hashable, Hashable | None, int, int]] = [(root, None, -1, 0)]
    while stack:
        v, pv, pidx, d = stack.pop()
        me = len(labels)
        labels.append(v)
        parent_of.append(pidx)
        depth.append(d)
        lo.append(n_leaves)
        kids = children(v, pv)
        if not kids:
            n_leaves += 1
        stack.extend((u, v, me, d + 1) for u in reversed(kids))
    parent_pre = np.array(parent_of)
    depth_pre = np.array(depth)
    lo_pre = np.array(lo)
    # hi = lo of the next node in preorder that is not a descendant = lo + leaves in subtree
    leaves = np.zeros(len(labels), dtype=np.int64)
    is_leaf = np.ones(len(labels), dtype=bool)
    is_leaf[parent_pre[parent_pre >= 0]] = False
    leaves[is_leaf] = 1
    for d in range(int(depth_pre.max()), 0, -1):  # accumulate subtree leaf counts by depth
        sel = depth_pre == d
        np.add.at(leaves, parent_pre[sel], leaves[sel])
    # rows: level order (depth), left to right (preorder within a depth)
    order = np.lexsort((np.arange(len(labels)), depth_pre))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    par = parent_pre[order]
    par = np.where(par >= 0, rank[np.maximum(par, 0)], -1)
    lo_rows = lo_pre[order]
    hi_rows = lo_rows + leaves[order]
    n = int(n_leaves)
    bin_row = np.empty(n, dtype=np.int64)
    leaf_rows = np.flatnonzero(is_leaf[order])
    bin_row[lo_rows[leaf_rows]] = leaf_rows
    strat = IntervalStrategy(lo_rows, hi_rows, par, depth_pre[order].astype(np.int32), n_bins=n,
                             depth=depth_pre[order], bin_row=bin_row, name="hierarchy")
    strat.node_labels = [labels[i] for i in order]
    return strat
