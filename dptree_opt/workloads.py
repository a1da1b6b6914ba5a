"""Workloads W: the linear queries a user wants answered from the histogram.

Every workload here is a set of interval queries over the K bins (a query sums the bins
a..b, inclusive, 0-based), so each one multiplies with vectors in O(n + q) through cumulative
sums and knows its own Gram matrix W'W without materialising W:

=============  ===================================  =================================
workload       queries (order)                       Gram (W'W)_ij
=============  ===================================  =================================
prefix(n)      C_t = x_0 + ... + x_{t-1}, t = 1..n   n - max(i, j)
identity(n)    x_i, i = 0..n-1                       [i == j]
total(n)       x_0 + ... + x_{n-1}                   1
all_range(n)   [a, b] for a <= b, lexicographic      (min(i, j) + 1) (n - max(i, j))
ranges(n, I)   the given inclusive pairs, in order   sum over queries containing i and j
=============  ===================================  =================================

The error of an unbiased linear estimate with covariance Cov is trace(W Cov W') =
sum_ij Cov_ij (W'W)_ij; ``total_variance`` and ``query_variances`` compute it (and the
per-query diagonal) from a dense covariance in O(n^2) without forming W.

Grids (docs/math.md section 8): the cells of a grid of shape (n_1, .., n_d) are
flattened in row-major (C) order. ``prefix(shape)`` (the d-D CDF: every dominance box
[0, a_1] x .. x [0, a_d]), ``all_range(shape)`` (every axis-aligned box) and ``kron(W_1, ..,
W_d)`` are Kronecker products of 1-D workloads (:class:`KroneckerWorkload`: W = W_1 x .. x
W_d, queries in ``np.kron`` order, W'W = W_1'W_1 x .. x W_d'W_d); ``marginals(shape, axes)``
the marginal tables over the kept axes (identity on them, total on the others), several
marginals stacked (:class:`StackedWorkload`). An int shape (or a 1-tuple) keeps the 1-D
meaning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.sparse.linalg import LinearOperator

from .limits import WORKLOAD_BYTES_PER_QUERY, check_memory
from .validation import check_n

__all__ = [
    "Workload",
    "KroneckerWorkload",
    "StackedWorkload",
    "prefix",
    "identity",
    "total",
    "all_range",
    "ranges",
    "kron",
    "marginals",
]

# dense W / W'W of grid workloads only up to this many cells (tests, small grids)
MAX_DENSE_GRID_CELLS = 8192

# all_range with more bins than this has more than ~10^8 queries: refuse per-query output.
_MAX_ALL_RANGE_QUERIES = 10**8

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"
# a 1-D map applied along one grid axis: (n_axis, r) -> (m_axis, r)
_AxisMap: TypeAlias = "Callable[[_F], _F]"


def _sum_arrays(arrays: Iterable[_F]) -> _F:
    """The elementwise sum of one or more arrays of one shape."""
    it = iter(arrays)
    out = next(it)
    for a in it:
        out = out + a
    return out


def _check_queries(n_queries: int, what: str) -> None:
    """ValueError before the (lo, hi) arrays of ``n_queries`` queries are allocated when
    they would not fit (``limits.check_memory``)."""
    check_memory(n_queries * WORKLOAD_BYTES_PER_QUERY, what, "use fewer bins")


def _check_dense(rows: int, cols: int, what: str) -> None:
    """ValueError before a dense (rows, cols) float64 array is allocated when it would not
    fit (``limits.check_memory``)."""
    check_memory(8 * rows * cols, f"{what} ({rows} x {cols} dense)",
                 "use the structured products (matvec, gram_matvec) or fewer bins")


def _double_cumsum(cov: _F) -> _F:
    """S with S[a, b] = sum of cov[:a, :b] (shape (n+1, n+1)); O(n^2)."""
    n = cov.shape[0]
    s = np.zeros((n + 1, n + 1))
    np.cumsum(cov, axis=0, out=s[1:, 1:])
    np.cumsum(s[1:, 1:], axis=1, out=s[1:, 1:])
    return s


@dataclass(frozen=True, eq=False)
class Workload:
    """A set of interval queries over ``n_bins`` bins.

    ``lo`` / ``hi`` hold each query's half-open bin range [lo, hi) (query = x[lo:hi].sum()).
    ``kind`` names the structure ("prefix", "identity", "total", "all_range", "ranges"); the
    all-range workload stores no interval arrays (it has n(n+1)/2 queries) and generates them
    only on request.
    """

    kind: str
    n_bins: int
    lo: _I | None = field(repr=False, default=None)
    hi: _I | None = field(repr=False, default=None)

    # ----------------------------------------------------------------- shape
    @property
    def n_queries(self) -> int:
        """Number of queries (rows of W)."""
        if self.kind == "all_range":
            return self.n_bins * (self.n_bins + 1) // 2
        return int(self.intervals()[0].size)

    @property
    def shape(self) -> tuple[int, int]:
        """(queries, bins)."""
        return (self.n_queries, self.n_bins)

    def intervals(self) -> tuple[_I, _I]:
        """(lo, hi) arrays of the half-open query ranges, in query order. O(q)."""
        if self.kind == "all_range":
            if self.n_queries > _MAX_ALL_RANGE_QUERIES:
                raise ValueError(
                    f"all_range({self.n_bins}) has {self.n_queries} queries; too many to list"
                )
            a, b = np.triu_indices(self.n_bins)  # lexicographic (a, b), a <= b
            return a.astype(np.int64), b.astype(np.int64) + 1
        if self.lo is None or self.hi is None:
            raise ValueError(f"a {self.kind!r} workload needs lo and hi (the query ranges); "
                             "build it with workloads.prefix, identity, total or ranges")
        return self.lo, self.hi

    # ------------------------------------------------------------ products
    def matvec(self, x: ArrayLike) -> _F:
        """W @ x for x of shape (n,) or (n, r). O(n + q) via cumulative sums."""
        x = np.asarray(x, dtype=float)
        if x.shape[0] != self.n_bins:
            raise ValueError(f"x has {x.shape[0]} rows, workload has {self.n_bins} bins")
        s = np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(x, axis=0)])
        lo, hi = self.intervals()
        return s[hi] - s[lo]

    def rmatvec(self, u: ArrayLike) -> _F:
        """W' @ u for u of shape (q,) or (q, r). O(n + q) via a difference array."""
        u = np.asarray(u, dtype=float)
        if u.shape[0] != self.n_queries:
            raise ValueError(f"u has {u.shape[0]} rows, workload has {self.n_queries} queries")
        lo, hi = self.intervals()
        d = np.zeros((self.n_bins + 1,) + u.shape[1:])
        np.add.at(d, lo, u)
        np.subtract.at(d, hi, u)
        return np.cumsum(d[:-1], axis=0)

    def as_linear_operator(self) -> LinearOperator:
        """W as a scipy LinearOperator (q x n)."""
        return LinearOperator(
            self.shape, matvec=self.matvec, rmatvec=self.rmatvec,
            matmat=self.matvec, rmatmat=self.rmatvec, dtype=float,
        )

    def aslinearoperator(self) -> LinearOperator:
        """W as a scipy LinearOperator (q x n), scipy's spelling of
        :meth:`as_linear_operator` (matvec / rmatvec / matmat / rmatmat: the workload's own
        O(n + q) products, per axis for Kronecker products; never a dense matrix)."""
        return self.as_linear_operator()

    def dense(self) -> _F:
        """W as a dense (q, n) array: only for small workloads."""
        _check_dense(self.n_queries, self.n_bins, "the workload matrix")
        lo, hi = self.intervals()
        cols = np.arange(self.n_bins)
        return ((cols >= lo[:, None]) & (cols < hi[:, None])).astype(float)

    # ---------------------------------------------------------------- Gram
    def gram_matvec(self, v: ArrayLike) -> _F:
        """(W'W) @ v for v of shape (n,) or (n, r), in O(n) (O(n + q) for ``ranges``)."""
        v = np.asarray(v, dtype=float)
        n = self.n_bins
        if v.shape[0] != n:
            raise ValueError(f"v has {v.shape[0]} rows, workload has {n} bins")
        ex = (slice(None),) + (None,) * (v.ndim - 1)
        i = np.arange(n, dtype=float)[ex]
        if self.kind == "identity":
            return v.copy()
        if self.kind == "total":
            return np.broadcast_to(v.sum(axis=0), v.shape).copy()
        # G_ij = f(min(i,j)) g(max(i,j)) for prefix (f=1, g=n-j) and all_range
        # (f=j+1, g=n-j): (G v)_i = g(i) sum_{j<=i} f(j) v_j + f(i) sum_{j>i} g(j) v_j.
        if self.kind in ("prefix", "all_range"):
            f = np.ones_like(i) if self.kind == "prefix" else i + 1.0
            g = n - i
            low = np.cumsum(f * v, axis=0)
            high = np.cumsum((g * v)[::-1], axis=0)[::-1]
            high = np.concatenate([high[1:], np.zeros((1,) + v.shape[1:])])
            return g * low + f * high
        return self.rmatvec(self.matvec(v))

    def gram(self) -> LinearOperator:
        """W'W as a symmetric n x n LinearOperator (never materialised)."""
        n = self.n_bins
        return LinearOperator(
            (n, n), matvec=self.gram_matvec, rmatvec=self.gram_matvec,
            matmat=self.gram_matvec, rmatmat=self.gram_matvec, dtype=float,
        )

    def gram_dense(self) -> _F:
        """W'W as a dense (n, n) array (closed form where there is one)."""
        n = self.n_bins
        _check_dense(n, n, "the workload Gram matrix")
        i = np.arange(n)
        mn = np.minimum.outer(i, i)
        mx = np.maximum.outer(i, i)
        if self.kind == "prefix":
            return (n - mx).astype(float)
        if self.kind == "all_range":
            return ((mn + 1) * (n - mx)).astype(float)
        if self.kind == "identity":
            return np.eye(n)
        if self.kind == "total":
            return np.ones((n, n))
        return self.gram_matvec(np.eye(n))

    # -------------------------------------------------------- error helpers
    def _check_cov(self, cov: ArrayLike) -> _F:
        cov = np.asarray(cov, dtype=float)
        if cov.shape != (self.n_bins, self.n_bins):
            raise ValueError(
                f"covariance has shape {cov.shape}, expected ({self.n_bins}, {self.n_bins})"
            )
        return cov

    def query_variances(self, cov: ArrayLike) -> _F:
        """diag(W Cov W') from a dense (n, n) covariance, in query order. O(n^2 + q)."""
        cov = self._check_cov(cov)
        if self.kind == "identity":
            return np.diag(cov).copy()
        s = _double_cumsum(cov)
        lo, hi = self.intervals()
        # var(sum_{lo<=i<hi} x_i) = S[hi,hi] - S[lo,hi] - S[hi,lo] + S[lo,lo]
        return s[hi, hi] - s[lo, hi] - s[hi, lo] + s[lo, lo]

    def total_variance(self, cov: ArrayLike) -> float:
        """trace(W Cov W') = sum_ij Cov_ij (W'W)_ij from a dense covariance. O(n^2)."""
        cov = self._check_cov(cov)
        if self.kind == "identity":
            return float(np.trace(cov))
        if self.kind == "all_range":  # n^2/2 queries: use the closed-form Gram instead
            return float(np.einsum("ij,ij->", cov, self.gram_dense()))
        return float(self.query_variances(cov).sum())


# ------------------------------------------------------------------ grids
def along_axis(x: _F, axis: int, fn: _AxisMap) -> _F:
    """Apply a 1-D map fn ((n_axis, r) -> (m_axis, r)) along ``axis`` of the grid tensor x,
    the other axes batched as columns; that axis becomes m_axis long. The one per-axis
    kernel of every Kronecker product (workloads, strategies.kron, estimation.kronecker)."""
    moved = np.moveaxis(x, axis, 0)
    out = fn(moved.reshape(moved.shape[0], -1))
    return np.moveaxis(out.reshape((out.shape[0],) + moved.shape[1:]), 0, axis)


@dataclass(frozen=True, eq=False)
class KroneckerWorkload(Workload):
    """W = W_1 x .. x W_d over a row-major grid of shape (n_1, .., n_d) (module docstring).

    ``factors`` are 1-D :class:`Workload` s; ``kind`` is "kron". Products apply each factor
    along its own axis (no grid-sized matrix); the Gram is the Kronecker product of the
    factors' Grams. Dense W, W'W and the per-query variances from a dense covariance only
    up to MAX_DENSE_GRID_CELLS cells."""

    factors: tuple[Workload, ...] = ()

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """(n_1, .., n_d)."""
        return tuple(f.n_bins for f in self.factors)

    @property
    def n_queries(self) -> int:
        return math.prod(f.n_queries for f in self.factors)

    def intervals(self) -> tuple[_I, _I]:
        raise ValueError("a grid workload's queries are boxes, not intervals: use "
                         ".factors[i].intervals() per axis")

    def _per_axis(self, x: ArrayLike, maps: Sequence[_AxisMap], shape_in: Sequence[int],
                  size_out: int, name: str) -> _F:
        """Apply maps[i] along axis i of x (rows shaped ``shape_in``, columns kept)."""
        x = np.asarray(x, dtype=float)
        if x.shape[0] != math.prod(shape_in):
            raise ValueError(f"{name} has {x.shape[0]} rows, expected {math.prod(shape_in)}")
        y = x.reshape(tuple(shape_in) + x.shape[1:])
        for i, fn in enumerate(maps):
            y = along_axis(y, i, fn)
        return y.reshape((size_out,) + x.shape[1:])

    def matvec(self, x: ArrayLike) -> _F:
        """W @ x for x of shape (cells,) or (cells, r), one factor per axis."""
        return self._per_axis(x, [f.matvec for f in self.factors], self.grid_shape,
                              self.n_queries, "x")

    def rmatvec(self, u: ArrayLike) -> _F:
        """W' @ u for u of shape (queries,) or (queries, r)."""
        return self._per_axis(u, [f.rmatvec for f in self.factors],
                              tuple(f.n_queries for f in self.factors), self.n_bins, "u")

    def gram_matvec(self, v: ArrayLike) -> _F:
        """(W'W) @ v, one factor Gram per axis."""
        return self._per_axis(v, [f.gram_matvec for f in self.factors], self.grid_shape,
                              self.n_bins, "v")

    def _check_small(self, what: str) -> None:
        if self.n_bins > MAX_DENSE_GRID_CELLS:
            raise ValueError(f"{what} of a grid workload is built only up to "
                             f"{MAX_DENSE_GRID_CELLS} cells, got {self.n_bins}")

    def dense(self) -> _F:
        """W as a dense (queries, cells) array (np.kron of the factors; small grids)."""
        self._check_small("the dense matrix")
        out: _F = np.ones((1, 1))
        for f in self.factors:
            out = np.asarray(np.kron(out, f.dense()), dtype=np.float64)
        return out

    def gram_dense(self) -> _F:
        """W'W dense: np.kron of the factors' Grams (small grids)."""
        self._check_small("the dense Gram")
        out: _F = np.ones((1, 1))
        for f in self.factors:
            out = np.asarray(np.kron(out, f.gram_dense()), dtype=np.float64)
        return out

    def query_variances(self, cov: ArrayLike) -> _F:
        """diag(W Cov W') from a dense covariance, in query order (small grids)."""
        cov = self._check_cov(cov)
        W = self.dense()
        return np.einsum("qi,ij,qj->q", W, cov, W)

    def total_variance(self, cov: ArrayLike) -> float:
        """trace(W Cov W') = sum_ij Cov_ij (W'W)_ij (small grids)."""
        cov = self._check_cov(cov)
        return float(np.einsum("ij,ij->", cov, self.gram_dense()))


@dataclass(frozen=True, eq=False)
class StackedWorkload(Workload):
    """Several workloads over the same cells, their queries one after the other (W stacked
    vertically): W'W and the error are sums over the parts. ``kind`` is "stacked"."""

    parts: tuple[Workload, ...] = ()

    @property
    def n_queries(self) -> int:
        return sum(p.n_queries for p in self.parts)

    def intervals(self) -> tuple[_I, _I]:
        raise ValueError("a stacked workload has no single interval list: use .parts")

    def matvec(self, x: ArrayLike) -> _F:
        """W @ x: the parts' answers, concatenated."""
        return np.concatenate([p.matvec(x) for p in self.parts])

    def rmatvec(self, u: ArrayLike) -> _F:
        """W' @ u: the sum of the parts' W_i' u_i."""
        u = np.asarray(u, dtype=float)
        if u.shape[0] != self.n_queries:
            raise ValueError(f"u has {u.shape[0]} rows, expected {self.n_queries}")
        bounds = np.cumsum([0] + [p.n_queries for p in self.parts])
        return _sum_arrays(p.rmatvec(u[a:b])
                           for p, a, b in zip(self.parts, bounds[:-1], bounds[1:]))

    def gram_matvec(self, v: ArrayLike) -> _F:
        """(W'W) v = sum over the parts of W_i'W_i v."""
        return _sum_arrays(p.gram_matvec(v) for p in self.parts)

    def dense(self) -> _F:
        """W dense: the parts' matrices stacked (small grids)."""
        return np.vstack([p.dense() for p in self.parts])

    def gram_dense(self) -> _F:
        """W'W dense: the sum of the parts' Grams."""
        return _sum_arrays(p.gram_dense() for p in self.parts)

    def query_variances(self, cov: ArrayLike) -> _F:
        """The parts' per-query variances, concatenated in query order."""
        return np.concatenate([p.query_variances(cov) for p in self.parts])

    def total_variance(self, cov: ArrayLike) -> float:
        """trace(W Cov W'): the sum over the parts."""
        return float(sum(p.total_variance(cov) for p in self.parts))


def _grid_shape(shape: int | ArrayLike) -> tuple[int, ...] | None:
    """None for a 1-D int n; the validated tuple (n_1, .., n_d) for a sequence."""
    if not isinstance(shape, (tuple, list, np.ndarray)) or np.ndim(shape) == 0:
        return None  # an int n (anything else is refused by check_n's message)
    dims = tuple(np.asarray(shape, dtype=object).ravel().tolist())
    if not dims:
        raise ValueError("shape must have at least one axis")
    return tuple(check_n(n) for n in dims)


def kron(*factors: Workload) -> Workload:
    """W_1 x .. x W_d over the grid (W_1.n_bins, .., W_d.n_bins), queries in np.kron order
    (docs/math.md section 8). One factor returns it unchanged."""
    if not factors:
        raise ValueError("kron needs at least one workload")
    for f in factors:
        if not isinstance(f, Workload) or isinstance(f, (KroneckerWorkload, StackedWorkload)):
            raise ValueError("kron takes 1-D workloads (workloads.prefix(n), identity(n), "
                             f"total(n), all_range(n), ranges(n, ...)), got {f!r}")
    if len(factors) == 1:
        return factors[0]
    cells = math.prod(f.n_bins for f in factors)
    return KroneckerWorkload("kron", cells, factors=tuple(factors))


def _per_axis(fn: Callable[[int], Workload], shape: int | ArrayLike) -> Workload | None:
    """The Kronecker product of ``fn(n_i)`` over a grid shape; None for a 1-D int n."""
    dims = _grid_shape(shape)
    if dims is None:
        return None
    return kron(*[fn(n) for n in dims])


def marginals(shape: int | Sequence[int], axes: Iterable[int] | Iterable[Iterable[int]]
              ) -> Workload:
    """Marginal tables of a grid: for one tuple of axes (e.g. (0,) or (0, 2)), the counts of
    every combination of the kept axes' cells, summed over the others (identity on kept
    axes, total on the rest, Kronecker); for a sequence of such tuples, those marginals
    stacked. ``axes=()`` is the grand total."""
    dims = _grid_shape(shape)
    if dims is None:
        dims = (check_n(shape),)
    try:
        items: list[Any] = list(axes)  # validated below, any user input
    except TypeError:
        raise ValueError(f"axes must be a tuple of axes or a sequence of them, got {axes!r}")\
            from None
    if items and all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                     for a in items):
        groups = [tuple(items)]
    elif not items:
        groups = [()]
    else:
        try:
            groups = [tuple(g) for g in items]
        except TypeError:
            raise ValueError(f"axes must be a tuple of axes or a sequence of them, got "
                             f"{axes!r}") from None
    parts = []
    for g in groups:
        if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not
               0 <= a < len(dims) for a in g) or len(set(g)) != len(g):
            raise ValueError(f"axes {g!r}: distinct integers in [0, {len(dims)}) expected")
        parts.append(kron(*[identity(n) if i in g else total(n) for i, n in enumerate(dims)]))
    if len(parts) == 1:
        return parts[0]
    return StackedWorkload("stacked", parts[0].n_bins, parts=tuple(parts))


# ---------------------------------------------------------------- constructors
def prefix(n: int | Sequence[int]) -> Workload:
    """The CDF workload: the n cumulative counts C_t = x_0 + ... + x_{t-1}, t = 1..n; for a
    grid shape (n_1, .., n_d) the d-D CDF, every dominance box [0, a_1] x .. x [0, a_d]
    (Kronecker product of 1-D prefixes)."""
    grid = _per_axis(prefix, n)
    if grid is not None:
        return grid
    n = check_n(n)
    _check_queries(n, f"the prefix workload over {n} bins")
    return Workload("prefix", n, np.zeros(n, dtype=np.int64), np.arange(1, n + 1, dtype=np.int64))


def identity(n: int | Sequence[int]) -> Workload:
    """The histogram itself: query i is bin i (every cell of a grid shape)."""
    grid = _per_axis(identity, n)
    if grid is not None:
        return grid
    n = check_n(n)
    _check_queries(n, f"the identity workload over {n} bins")
    return Workload("identity", n, np.arange(n, dtype=np.int64), np.arange(1, n + 1, dtype=np.int64))


def total(n: int) -> Workload:
    """The single query N = x_0 + ... + x_{n-1}."""
    n = check_n(n)
    return Workload("total", n, np.zeros(1, dtype=np.int64), np.full(1, n, dtype=np.int64))


def all_range(n: int | Sequence[int]) -> Workload:
    """All n(n+1)/2 interval queries [a, b], 0 <= a <= b < n, in lexicographic (a, b) order;
    for a grid shape every axis-aligned box (Kronecker product of 1-D all_range)."""
    grid = _per_axis(all_range, n)
    if grid is not None:
        return grid
    return Workload("all_range", check_n(n))


def ranges(n: int, intervals: ArrayLike) -> Workload:
    """Arbitrary interval queries: ``intervals`` is a sequence of inclusive 0-based (a, b) pairs."""
    n = check_n(n)
    iv = np.asarray(intervals)
    if iv.size == 0:
        raise ValueError("intervals must contain at least one (a, b) pair")
    if iv.ndim != 2 or iv.shape[1] != 2:
        raise ValueError(f"intervals must be a sequence of (a, b) pairs, got shape {iv.shape}")
    if not np.issubdtype(iv.dtype, np.integer):
        if not np.all(np.isfinite(iv)) or np.any(iv != np.round(iv)):
            raise ValueError("intervals must hold integer bin indices")
        iv = iv.astype(np.int64)
    a, b = iv[:, 0].astype(np.int64), iv[:, 1].astype(np.int64)
    bad = (a < 0) | (b >= n) | (a > b)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"intervals[{j}] = ({a[j]}, {b[j]}) is not an inclusive range 0 <= a <= b < n={n}"
        )
    return Workload("ranges", n, a, b + 1)
