"""Kronecker products of strategies: A = A_1 x A_2 x .. x A_d over a row-major grid.

The bins are the cells of a grid of shape (n_1, .., n_d) flattened in row-major (C) order
and the rows are the products of one row of each factor, in ``np.kron`` order (docs/math.md
section 8). Nothing of size (prod n_i) x (prod n_i) is built:

* products: ``apply`` / ``rmatvec`` / ``gram_matvec`` apply each factor along its own axis
  (cost sum_i (prod_j n_j) m_i / n_i);
* budget levels: a row's level is the mixed-radix code of its factors' levels,
  code = sum_i l_i prod_(j > i) R_j with R_j = 1 + (top level of factor j), so code 0 (the
  root / total level) is exactly the product of total rows, and a product of trees has one
  level per tuple of tree levels (``level_tuple``);
* sensitivities (docs/math.md section 0 rule, exact) for any row weights that depend only on the
  level (the calibration weights and every level's own unit weights):

  - add/remove: max over cells c of sum_l W_l prod_i S_i[l_i, c_i], with
    S_i[l, c] = sum over factor-i rows r of level l of |A_i[r, c]|^p and W_l = w_l^p: a
    multilinear form, evaluated on each factor's distinct column profiles (for a weight
    that is a product over axes it is the product of the factors' own sensitivities);
  - swap: ||w (A_c - A_c')||_p^p = g(c) + g(c') - 2 sum_l W_l prod_i O_i[l_i](c_i, c'_i)
    with O_i[l] = A_il' A_il for p = 2, and for p = 1 when every factor row is
    non-negative with one magnitude m_r (0/1 trees, hierarchies, histograms):
    |a - b| = a + b - 2 ab / m on products of such entries, so O_i[l] = A_il' diag(1/m)
    A_il. The value depends on each axis's pair (c_i, c'_i) only through its profile
    (S_i[:, c_i], S_i[:, c'_i], O_i[:, c_i, c'_i], c_i == c'_i); the maximum runs over the
    distinct profiles of each axis (all n_i^2 pairs enumerated per axis, in blocks) and
    their combinations, excluding c = c'. Other p = 1 factors (signed or unequal entries:
    Haar, Toeplitz) use the explicit matrix (<= 8192 cells) or are refused.

``.matrix`` (``scipy.sparse.kron``) is built on request up to 8192 cells, like the other
structured strategies.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..workloads import along_axis as _along
from ..limits import check_memory
from ..validation import check_int, check_n
from .base import Strategy, check_neighbours, check_norm, frozen_csr, readonly
from .interval import LevelUniformTree, histogram as _histogram_1d

__all__ = ["KroneckerStrategy", "kron", "MAX_MATRIX_CELLS"]

MAX_MATRIX_CELLS = 8192       # .matrix on request up to this many cells
MAX_PAIR_BINS = 4096          # swap: all n_i^2 pairs of an axis are enumerated (in blocks)
_PAIR_BLOCK_FLOATS = 1 << 23  # floats per block of pair profiles
_COMBO_FLOATS = 1 << 26       # floats per block of profile combinations

_F: TypeAlias = "npt.NDArray[np.float64]"
# per axis: (profiles of c == c', profiles of c != c'), each of shape (U, 3 radix)
_PairProfiles: TypeAlias = "tuple[_F, _F]"


def _factor_rmatvec(factor: Strategy, u: _F) -> _F:
    rm = getattr(factor, "rmatvec", None)
    return rm(u) if rm is not None else factor.matrix.T @ u


class KroneckerStrategy(Strategy):
    """A_1 x .. x A_d (module docstring); ``n_totals`` all-ones rows may follow at level 0.

    Parameters
    ----------
    factors : sequence of Strategy
        The 1-D (or any) factor strategies, axis 0 first.
    n_totals : int
        Number of appended all-ones total rows (level 0), as ``with_total_row`` adds.
    name : str
        Label for printed tables.
    """

    def __init__(self, factors: Iterable[Strategy], *, n_totals: int = 0,
                 name: str | None = None) -> None:
        factors = tuple(factors)
        if not factors:
            raise ValueError("kron needs at least one factor strategy")
        for f in factors:
            if not isinstance(f, Strategy):
                raise ValueError(f"kron factors must be Strategy objects, got {type(f).__name__}")
        n_totals = check_int(n_totals, "n_totals", 0)
        self._factors = factors
        self._shape = tuple(f.n_bins for f in factors)
        self._row_shape = tuple(f.n_rows for f in factors)
        self._radix = tuple(int(f.levels.max()) + 1 for f in factors)
        self._n_bins = math.prod(self._shape)
        self._n_core = math.prod(self._row_shape)
        self._n_totals = int(n_totals)
        if math.prod(self._radix) - 1 > np.iinfo(np.int32).max:  # the largest level code
            raise ValueError(f"a Kronecker product of {len(factors)} strategies has "
                             f"{math.prod(self._radix)} level combinations, more than the "
                             "int32 level codes hold; use fewer levels per factor")
        self.name = name or " x ".join(f.name for f in factors)
        self._profile_cache: dict[tuple[str, int], Any] = {}

    @property
    def n_rows(self) -> int:
        """prod of the factors' rows, plus the appended totals (no per-row array)."""
        return self._n_core + self._n_totals

    @cached_property
    def _levels(self) -> npt.NDArray[np.int32]:  # type: ignore[override]  # built on first use
        """The level code of every row (module docstring), built on first use: one int32
        per row of the product, so its size is checked first (``limits.check_memory``)."""
        check_memory(4 * self.n_rows + 8 * self._n_core, f"the level of each of the "
                     f"{self.n_rows} rows of {self.name!r}",
                     "use the structured paths (errors of Kronecker trees, sensitivities), "
                     "which need no per-row array, or a coarser grid")
        code = np.zeros(1, dtype=np.int64)
        for f, r in zip(self._factors, self._radix):
            code = (code[:, None] * r + f.levels[None, :].astype(np.int64)).ravel()
        return readonly(np.concatenate(
            [code.astype(np.int32), np.zeros(self._n_totals, dtype=np.int32)]))

    # ------------------------------------------------------------- basics
    @property
    def factors(self) -> tuple[Strategy, ...]:
        """The factor strategies, axis 0 first."""
        return self._factors

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """(n_1, .., n_d): the grid whose cells (row-major) are the bins."""
        return self._shape

    @property
    def n_totals(self) -> int:
        """Number of appended all-ones total rows (level 0)."""
        return self._n_totals

    def level_tuple(self, level: int) -> tuple[int, ...]:
        """The factors' levels (l_1, .., l_d) of a level code."""
        out: list[int] = []
        for r in reversed(self._radix):
            level, li = divmod(int(level), r)
            out.append(li)
        return tuple(reversed(out))

    @cached_property
    def matrix(self) -> sp.csr_matrix:
        """A as CSR (``scipy.sparse.kron`` of the factors; canonical, read-only), up to
        8192 cells only."""
        if self._n_bins > MAX_MATRIX_CELLS:
            raise ValueError(f"the Kronecker strategy's explicit matrix is refused for "
                             f"{self._n_bins} > {MAX_MATRIX_CELLS} cells (use apply / rmatvec "
                             "and the structured paths)")
        m = self._factors[0].matrix
        for f in self._factors[1:]:
            m = sp.kron(m, f.matrix, format="csr")
        rows = [m] + [sp.csr_matrix(np.ones((1, self._n_bins)))] * self._n_totals
        return frozen_csr(sp.vstack(rows, format="csr"), copy=False)

    def __repr__(self) -> str:
        shape = " x ".join(map(str, self._shape))
        return f"<KroneckerStrategy {self.name}: {self.n_rows} rows x {self.n_bins} cells ({shape})>"

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """All-ones rows: products of all-ones factor rows, and the appended totals."""
        mask = np.ones(1, dtype=bool)
        for f in self._factors:
            mask = (mask[:, None] & f.total_row_mask()[None, :]).ravel()
        return np.concatenate([mask, np.ones(self._n_totals, dtype=bool)])

    def _check_cells(self, x: ArrayLike) -> _F:
        x = np.asarray(x, dtype=float)
        if x.shape[:1] != (self._n_bins,):
            raise ValueError(f"x must have {self._n_bins} rows (cells), got shape {x.shape}")
        return x

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r), one factor per axis (no big matrix)."""
        x = self._check_cells(x)
        t = x.reshape(self._shape + x.shape[1:])
        for axis, f in enumerate(self._factors):
            t = _along(t, axis, f.apply)
        core = t.reshape((self._n_core,) + x.shape[1:])
        if not self._n_totals:
            return core
        tot = np.broadcast_to(x.sum(axis=0), (self._n_totals,) + x.shape[1:])
        return np.concatenate([core, tot], axis=0)

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u for u of shape (m,) or (m, r)."""
        u = np.asarray(u, dtype=float)
        if u.shape[:1] != (self.n_rows,):
            raise ValueError(f"u must have {self.n_rows} rows, got shape {u.shape}")
        t = u[:self._n_core].reshape(self._row_shape + u.shape[1:])
        for axis, f in enumerate(self._factors):
            def rmat(v: _F, f: Strategy = f) -> _F:  # f bound per axis
                return _factor_rmatvec(f, v)

            t = _along(t, axis, rmat)
        out = t.reshape((self._n_bins,) + u.shape[1:])
        if self._n_totals:
            out = out + u[self._n_core:].sum(axis=0)
        return out

    def gram_matvec(self, v: ArrayLike) -> _F:
        """(A' A) @ v = A' (A v) for v of shape (n,) or (n, r)."""
        return self.rmatvec(self.apply(v))

    def with_total_row(self) -> "KroneckerStrategy":
        """A copy with one more all-ones row at level 0 (the last row)."""
        return KroneckerStrategy(self._factors, n_totals=self._n_totals + 1, name=self.name)

    # -------------------------------------------------------- sensitivity
    def _code_weights(self, w: _F) -> tuple[_F, _F] | None:
        """(W tensor of shape radix, appended-total weights) if w depends on the level only."""
        n_codes = math.prod(self._radix)
        codes = self._levels[:self._n_core]
        per = np.zeros(n_codes)
        per[codes] = w[:self._n_core]
        if not np.array_equal(per[codes], w[:self._n_core]):
            return None
        return per.reshape(self._radix), w[self._n_core:]

    def level_sensitivity(self, level: int, neighbours: str, norm: int) -> float:
        """Sensitivity of one level's rows at unit scale, from its level code (no per-row
        weight vector)."""
        check_neighbours(neighbours)
        p = check_norm(norm)
        W = np.zeros(self._radix)
        if 0 <= level < W.size and self._present_codes[level]:
            W.flat[level] = 1.0
        wt = np.full(self._n_totals, 1.0 if level == 0 else 0.0)
        if neighbours == "add_remove":
            return self._structured_add_remove(W, wt, p)
        if self._n_bins == 1:
            return 0.0
        return self._structured_swap(W, p, lambda: super(KroneckerStrategy, self).level_sensitivity(
            level, neighbours, norm))

    def _add_remove_loss(self, w: _F, p: int) -> float:
        cw = self._code_weights(w)
        if cw is None:
            return super()._add_remove_loss(w, p)
        return self._structured_add_remove(cw[0], cw[1], p)

    @cached_property
    def _present_codes(self) -> npt.NDArray[np.bool_]:
        """Which level codes have core rows: the outer product of the factors' present
        levels (no per-row array), flattened in code order."""
        present = np.ones(1, dtype=bool)
        for f, r in zip(self._factors, self._radix):
            own = np.bincount(f.levels, minlength=r) > 0
            present = (present[:, None] & own[None, :]).ravel()
        return present

    @cached_property
    def _tree_split_depths(self) -> tuple[int, ...] | None:
        """For a product of complete level-uniform trees (levels = depths): per axis the
        smallest depth at which two different cells can still share a node (their deepest
        common node), i.e. (first level with k >= 2) - 1, or h_i for a one-cell axis;
        else None."""
        out: list[int] = []
        for f, r in zip(self._factors, self._radix):
            if not (isinstance(f, LevelUniformTree) and f.n_bins == math.prod(f.branching)
                    and r == f.height + 1 and np.array_equal(f.levels, f.depth)):
                return None
            split = [lv for lv, k in enumerate(f.branching) if k >= 2]
            out.append(split[0] if split else f.height)
        return tuple(out)

    def _structured_add_remove(self, W: _F, wt: _F, p: int) -> float:
        Wp = W ** p
        if self._tree_split_depths is not None:
            # every level tuple partitions the cells: each cell meets one row per tuple
            best = float(np.sum(Wp)) + float(np.sum(wt ** p))
            return best if p == 1 else math.sqrt(max(best, 0.0))
        profiles = self._profiles("columns", p)  # (U_i, R_i) per axis
        best = _max_multilinear(Wp, profiles) + float(np.sum(wt ** p))
        return best if p == 1 else math.sqrt(max(best, 0.0))

    def _profiles(self, kind: str, p: int) -> list[Any]:
        """Each axis's distinct column ("columns") or pair ("pairs") profiles, cached."""
        key = (kind, p)
        if key not in self._profile_cache:
            self._profile_cache[key] = [
                _unique_rows(_column_profiles(f, p, r).T) if kind == "columns"
                else _pair_profiles(f, p, r) for f, r in zip(self._factors, self._radix)]
        return self._profile_cache[key]

    def _swap_loss(self, w: _F, p: int) -> float:
        cw = self._code_weights(w)

        def generic() -> float:
            return super(KroneckerStrategy, self)._swap_loss(w, p)

        if cw is None:
            return self._matrix_fallback(generic)
        return self._structured_swap(cw[0], p, generic)  # appended totals never change

    def _matrix_fallback(self, generic: Callable[[], float]) -> float:
        if self._n_bins > MAX_MATRIX_CELLS:
            raise ValueError(
                "Kronecker swap sensitivity: weights that are not constant per level, or "
                "L1 with factors whose rows are signed or of unequal entries, need the "
                f"explicit matrix: refused for {self._n_bins} > {MAX_MATRIX_CELLS} cells")
        return generic()

    def _structured_swap(self, W: _F, p: int, generic: Callable[[], float]) -> float:
        Wp = W ** p
        s = self._tree_split_depths
        if s is not None:
            # cells c != c' change exactly the tuples l not <= s (s_i: the depth of their
            # deepest common node on axis i), each by two rows of weight W_l: the maximum
            # takes every splittable axis apart at its first split (a total of W over the
            # box l <= s is the least removed: W >= 0)
            kept = float(np.sum(Wp[tuple(slice(0, si + 1) for si in s)]))
            best = 2.0 * (float(np.sum(Wp)) - kept)
            return best if p == 1 else math.sqrt(max(best, 0.0))
        if p == 1 and not all(_constant_magnitude(f) for f in self._factors):
            return self._matrix_fallback(generic)
        per_axis = self._profiles("pairs", p)
        best = _max_swap(Wp, per_axis)
        return best if p == 1 else math.sqrt(max(best, 0.0))


# ------------------------------------------------------------- factor profiles
def _unique_rows(a: _F) -> _F:
    """The distinct rows of a 2-D float array (any order; used for maxima, so a duplicate
    kept by a rounding difference in the keys is harmless): rows keyed by a random
    projection (one 1-D sort instead of a lexicographic one), every row then verified
    exactly against its key's representative; on a collision ``np.unique`` decides."""
    if a.shape[0] <= 1:
        return a.copy()
    proj = np.random.default_rng(0x5EED).standard_normal(a.shape[1])
    key = a @ proj
    order = np.argsort(key, kind="stable")
    ks = key[order]
    start = np.concatenate([[True], ks[1:] != ks[:-1]])
    rep = order[start][np.cumsum(start) - 1]  # representative of each sorted row
    if np.array_equal(a[order], a[rep]):
        return a[order[start]]
    return np.unique(a, axis=0)


def _level_indicator(factor: Strategy, radix: int) -> sp.csr_matrix:
    m = factor.n_rows
    return sp.csr_matrix((np.ones(m), (factor.levels, np.arange(m))), shape=(radix, m))


def _column_profiles(factor: Strategy, p: int, radix: int) -> _F:
    """S[l, c] = sum over rows r of level l of |A[r, c]|^p, shape (radix, n)."""
    a = factor.matrix
    ap = abs(a) if p == 1 else a.multiply(a)
    return np.asarray((_level_indicator(factor, radix) @ ap).todense())


def _constant_magnitude(factor: Strategy) -> bool:
    """Every row non-negative with one magnitude (the L1 swap identity's condition)."""
    a = factor.matrix
    if a.nnz and a.data.min() < 0:
        return False
    nnz = np.diff(a.indptr)
    rows = np.flatnonzero(nnz > 0)
    if not rows.size:
        return True
    mx = np.maximum.reduceat(a.data, a.indptr[rows])
    mn = np.minimum.reduceat(a.data, a.indptr[rows])
    return bool(np.all(mx == mn))


def _pair_profiles(factor: Strategy, p: int, radix: int) -> _PairProfiles:
    """Distinct (S[:, c], S[:, c'], O[:, c, c']) over all ordered pairs (c, c') of one axis,
    split by c == c': returns (same, distinct), arrays of shape (U, 3 radix)."""
    n = factor.n_bins
    if n > MAX_PAIR_BINS:
        raise ValueError(f"Kronecker swap sensitivity enumerates the n^2 column pairs of each "
                         f"axis: refused for an axis of {n} > {MAX_PAIR_BINS} bins")
    a = factor.matrix.tocsr()
    S = _column_profiles(factor, p, radix)  # (R, n)
    if p == 1:  # constant-magnitude non-negative rows: O = A' diag(1 / m) A
        nnz = np.diff(a.indptr)
        mag = np.zeros(a.shape[0])
        rows = np.flatnonzero(nnz > 0)
        mag[rows] = np.maximum.reduceat(a.data, a.indptr[rows])
        scale = np.divide(1.0, mag, out=np.zeros_like(mag), where=mag > 0)
    else:
        scale = np.ones(a.shape[0])
    by_level = [(sp.diags(scale[factor.levels == lvl]) @ a[factor.levels == lvl]).tocsc()
                for lvl in range(radix)]
    raw = [a[factor.levels == lvl].tocsc() for lvl in range(radix)]
    same_rows: list[_F] = []
    distinct_rows: list[_F] = []
    block = max(1, _PAIR_BLOCK_FLOATS // max(1, 3 * radix * n))
    for start in range(0, n, block):
        stop = min(n, start + block)
        o = np.stack([(b[:, start:stop].T @ r).toarray() for b, r in zip(by_level, raw)],
                     axis=-1)  # (blk, n, R)
        prof = np.concatenate([np.broadcast_to(S.T[start:stop, None, :], o.shape),
                               np.broadcast_to(S.T[None, :, :], o.shape), o], axis=-1)
        idx = np.arange(stop - start)
        same_rows.append(prof[idx, np.arange(start, stop)])
        mask = np.ones((stop - start, n), dtype=bool)
        mask[idx, np.arange(start, stop)] = False
        distinct_rows.append(_unique_rows(prof[mask]))
    same = _unique_rows(np.concatenate(same_rows))
    distinct = _unique_rows(np.concatenate(distinct_rows)) if n > 1 else np.zeros((0, 3 * radix))
    return same, distinct


def _einsum_terms(W: _F, mats: Sequence[_F]) -> _F:
    """sum_l W[l] prod_i mats_i[u_i, l_i], a tensor over (U_1, .., U_d)."""
    d = W.ndim
    lv, uv = string.ascii_letters[:d], string.ascii_letters[d:2 * d]
    spec = lv + "," + ",".join(u + l for u, l in zip(uv, lv)) + "->" + uv
    return np.einsum(spec, W, *mats, optimize=True)


def _blocks(first: _F, rest_size: int) -> Iterator[slice]:
    """Row blocks of the first axis so a block x rest tensor stays under _COMBO_FLOATS."""
    step = max(1, _COMBO_FLOATS // max(1, rest_size))
    for s in range(0, first.shape[0], step):
        yield slice(s, s + step)


def _max_multilinear(W: _F, profiles: Sequence[_F]) -> float:
    """max over profile combinations of sum_l W[l] prod_i profiles_i[u_i, l_i]."""
    rest = math.prod(p.shape[0] for p in profiles[1:])
    best = -np.inf
    for blk in _blocks(profiles[0], rest):
        best = max(best, float(_einsum_terms(W, [profiles[0][blk], *profiles[1:]]).max()))
    return best


def _max_swap(W: _F, per_axis: Sequence[_PairProfiles]) -> float:
    """max over pairs c != c' of g(c) + g(c') - 2 sum_l W[l] prod_i O_i (module docstring).

    A combination picks, per axis, a 'same' or a 'distinct' profile; the all-same combination
    (c = c') is excluded."""
    d = W.ndim
    R = W.shape
    best = -np.inf
    for choice in range(1, 1 << d):  # bit i set: axis i differs
        sets = [per_axis[i][1] if choice >> i & 1 else per_axis[i][0] for i in range(d)]
        if any(s.shape[0] == 0 for s in sets):
            continue
        parts = [[s[:, :R[i]], s[:, R[i]:2 * R[i]], s[:, 2 * R[i]:]] for i, s in enumerate(sets)]
        rest = math.prod(s.shape[0] for s in sets[1:])
        for blk in _blocks(sets[0], rest):
            first = [q[blk] for q in parts[0]]
            val = (_einsum_terms(W, [first[0]] + [q[0] for q in parts[1:]])
                   + _einsum_terms(W, [first[1]] + [q[1] for q in parts[1:]])
                   - 2.0 * _einsum_terms(W, [first[2]] + [q[2] for q in parts[1:]]))
            best = max(best, float(val.max()))
    return max(best, 0.0)


def kron(*factors: Strategy | Sequence[Strategy], name: str | None = None) -> KroneckerStrategy:
    """The Kronecker product A_1 x .. x A_d of strategies over the row-major grid of their
    bin counts (docs/math.md section 8): one budget level per tuple of factor levels, exact
    sensitivities without the (prod n_i)-sized matrix (module docstring)."""
    if len(factors) == 1 and isinstance(factors[0], (list, tuple)):
        factors = tuple(factors[0])
    # anything else that is not a Strategy is refused by KroneckerStrategy's check
    return KroneckerStrategy(factors, name=name)  # type: ignore[arg-type]  # checked there


def histogram(n: int | Sequence[int]) -> Strategy:
    """A = I: each bin (cell) measured once (all rows at level 1; no total row).

    ``n`` bins, or a grid shape (n_1, .., n_d) (d >= 2): the flat grid, the Kronecker product
    histogram(n_1) x .. x histogram(n_d) (one budget level; docs/math.md section 8). A
    1-tuple keeps the 1-D meaning."""
    if isinstance(n, (tuple, list, np.ndarray)) and np.ndim(n) == 1:
        dims = [check_n(k) for k in np.asarray(n, dtype=object).tolist()]
        if len(dims) >= 2:
            return kron(*[_histogram_1d(k) for k in dims],
                        name="histogram " + "x".join(map(str, dims)))
        n = dims[0] if dims else n
    return _histogram_1d(n)  # type: ignore[arg-type]  # a non-int left here: check_n refuses it
