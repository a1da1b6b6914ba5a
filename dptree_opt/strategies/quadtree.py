"""Quadtrees (and their d-D analogues) over a row-major grid (docs/math.md section 8).

A quadtree node splits every axis: with per-axis branchings k_(i, 1..h) (one per level, the
same height h on every axis) a level-l node is a box, the product of one level-l node of each
axis's level-uniform tree T_i. So the quadtree is

* a level-uniform tree with branching prod_i k_(i, l) per level over the cells in Morton (Z)
  order (a cell's leaf index interleaves the axes' digits level by level): Honaker's
  recursions, the sensitivities and the row layout are that tree's (``.tree``), with the
  columns permuted (``.morton``: the Morton index of every row-major cell);
* the Kronecker product T_1 x .. x T_d restricted to the diagonal level tuples (l, .., l):
  on Kronecker workloads its exact error is the eigen-sum of ``error.kronecker`` with
  lambda_j = sum over l >= max_i j_i of prod_i w_(i, l) / v_l.

``strategies.quadtree((n, n))`` is the classic quadtree (branching 2 on both axes: a 4-ary
tree); a int ``branching`` b gives b per axis and level, and a sequence of per-axis
sequences any mixed split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..limits import check_memory
from .base import Strategy, frozen_csr, readonly
from .interval import LevelUniformTree

__all__ = ["QuadtreeStrategy", "quadtree"]

MAX_MATRIX_CELLS = 1 << 16

_F: TypeAlias = "npt.NDArray[np.float64]"


def _morton(shape: tuple[int, ...],
            axis_branchings: Sequence[Sequence[int]]) -> npt.NDArray[np.int64]:
    """Morton leaf index of every row-major cell: level by level (root first), the level's
    child digit is the mixed-radix code of the axes' digits (axis 0 most significant)."""
    h = len(axis_branchings[0])
    idx = np.indices(shape).reshape(len(shape), -1)
    m = np.zeros(idx.shape[1], np.int64)
    widths = [np.cumprod((1,) + tuple(ks[::-1]))[::-1][1:] for ks in axis_branchings]
    for lv in range(h):
        digit = np.zeros_like(m)
        for i, ks in enumerate(axis_branchings):
            digit = digit * ks[lv] + (idx[i] // widths[i][lv]) % ks[lv]
        m = m * math.prod(ks[lv] for ks in axis_branchings) + digit
    return m


class QuadtreeStrategy(Strategy):
    """A quadtree over a row-major grid (module docstring). Rows are the Morton tree's rows
    (level by level, root first); columns the row-major cells."""

    def __init__(self, shape: Sequence[int], axis_branchings: Sequence[Sequence[int]], *,
                 name: str | None = None) -> None:
        self._shape = tuple(int(n) for n in shape)
        self._axis_branchings = tuple(tuple(int(k) for k in ks) for ks in axis_branchings)
        h = len(self._axis_branchings[0])
        ks = tuple(math.prod(b[lv] for b in self._axis_branchings) for lv in range(h))
        self._n_bins = math.prod(self._shape)
        rows, size = 1, 1  # exact integers, before any array
        for k in ks:
            size *= k
            rows += size
        check_memory(4 * rows + 8 * self._n_bins, f"a quadtree over {self._n_bins} cells "
                     f"({rows} rows)", "use a coarser grid")
        self._axes = tuple(LevelUniformTree(n, ks) for n, ks in
                           zip(self._shape, self._axis_branchings))
        self._tree = LevelUniformTree(self._n_bins, ks)
        self._levels = self._tree.levels
        self._morton = readonly(_morton(self._shape, self._axis_branchings))
        self._lazy_matrix: sp.csr_matrix | None = None
        self.name = name or ("quadtree " + "x".join(map(str, self._shape)))

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """(n_1, .., n_d)."""
        return self._shape

    @property
    def axis_trees(self) -> tuple[LevelUniformTree, ...]:
        """The per-axis level-uniform trees whose level-l nodes multiply into the boxes."""
        return self._axes

    @property
    def tree(self) -> LevelUniformTree:
        """The level-uniform tree over the Morton-ordered cells (branching prod_i k_(i, l))."""
        return self._tree

    @property
    def morton(self) -> npt.NDArray[np.int64]:
        """Morton leaf index of each row-major cell (shape (cells,))."""
        return self._morton

    @property
    def matrix(self) -> sp.csr_matrix:
        """A = the Morton tree's matrix with its columns in row-major cell order (up to
        MAX_MATRIX_CELLS cells; canonical, read-only)."""
        if self._lazy_matrix is None:
            if self._n_bins > MAX_MATRIX_CELLS:
                raise ValueError(f"the quadtree's explicit matrix is refused for "
                                 f"{self._n_bins} > {MAX_MATRIX_CELLS} cells (use apply / "
                                 "rmatvec and the structured paths)")
            self._lazy_matrix = frozen_csr(self._tree.matrix[:, self._morton], copy=False)
        return self._lazy_matrix

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """The root row (the total)."""
        return self._levels == 0

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for row-major cells x of shape (cells,) or (cells, r): box sums, O(cells h)."""
        x = np.asarray(x, dtype=float)
        if x.shape[0] != self._n_bins:
            raise ValueError(f"x has {x.shape[0]} rows, the grid has {self._n_bins} cells")
        xm = np.empty_like(x)
        xm[self._morton] = x
        return self._tree.apply(xm)

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u (shape (cells,) or (cells, r)), row-major cells."""
        u = np.asarray(u, dtype=float)
        if u.shape[0] != self.n_rows:
            raise ValueError(f"u has {u.shape[0]} rows, the quadtree has {self.n_rows}")
        t = self._tree
        out = np.zeros((self._n_bins,) + u.shape[1:])
        for lv in range(t.height + 1):   # each node's value spread over its Morton cells
            out += np.repeat(u[t.level_slice(lv)], int(t.level_widths[lv]), axis=0)
        return out[self._morton]

    def with_total_row(self) -> "QuadtreeStrategy":
        """The quadtree already measures the total (its root)."""
        return self

    def sensitivity(self, weights: ArrayLike, neighbours: str, norm: int) -> float:
        """The Morton tree's (a column permutation changes no neighbour's loss)."""
        return self._tree.sensitivity(weights, neighbours, norm)

    def level_sensitivity(self, level: int, neighbours: str, norm: int) -> float:
        """One level's sensitivity at unit scale: the Morton tree's."""
        return self._tree.level_sensitivity(level, neighbours, norm)


def quadtree(shape: Sequence[int], branching: int | Sequence[Sequence[int]] = 2, *,
             name: str | None = None) -> QuadtreeStrategy:
    """A quadtree over the grid ``shape`` (d >= 2 axes): every node splits every axis.
    ``branching``: an int b (every axis splits b ways at every level: n_i = b^h with one h
    for all axes) or a sequence of per-axis sequences of equal length (k_(i, 1..h), with
    prod_l k_(i, l) = n_i)."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise ValueError(f"shape must be a sequence of >= 2 axis lengths, got {shape!r}") \
            from None
    if len(dims) < 2 or any(isinstance(n, bool) or not isinstance(n, (int, np.integer))
                            or n < 1 for n in dims):
        raise ValueError(f"shape must be a sequence of >= 2 positive integers, got {shape!r}")
    if isinstance(branching, (int, np.integer)) and not isinstance(branching, bool):
        b = int(branching)
        if b < 2:
            raise ValueError(f"branching must be >= 2, got {branching!r}")
        heights: set[int] = set()
        for n in dims:
            h = round(math.log(n, b)) if n > 1 else 0
            if b ** h != n:
                raise ValueError(f"branching {b}: every axis length must be a power of {b}, "
                                 f"got {n}")
            heights.add(h)
        if len(heights) != 1:
            raise ValueError(f"branching {b}: the axes need one height (a square grid), got "
                             f"{dims}; pass per-axis branchings for other shapes")
        per_axis = [(b,) * heights.pop()] * len(dims)
    else:
        if (isinstance(branching, (str, bytes, bool)) or not isinstance(branching, Iterable)
                or any(isinstance(ks, (str, bytes)) for ks in branching)):
            raise ValueError("branching must be an int or one sequence of ints per axis, "
                             f"got {branching!r}")
        try:
            per_axis = [tuple(int(k) for k in ks) for ks in branching]
        except (TypeError, ValueError):
            raise ValueError("branching must be an int or one sequence of ints per axis, got "
                             f"{branching!r}") from None
        if len(per_axis) != len(dims) or len({len(ks) for ks in per_axis}) != 1:
            raise ValueError("branching: one sequence per axis, all of the same length")
        for n, ks in zip(dims, per_axis):
            if any(k < 1 for k in ks) or math.prod(ks) != n:
                raise ValueError(f"branching {ks} does not multiply to the axis length {n}")
        if any(all(ks[lv] == 1 for ks in per_axis) for lv in range(len(per_axis[0]))):
            raise ValueError("branching: every level must split at least one axis")
    if not per_axis[0]:
        raise ValueError("a quadtree needs at least one level")
    return QuadtreeStrategy(dims, per_axis, name=name)
