"""Banded lower-triangular strategies: A_ij = 0 unless 0 <= i - j < b (b "bands").

The strategy of the banded matrix factorisations of private learning (e.g. the banded square
root: the square-root factorisation's coefficients truncated to b bands, Kalinin & Lampert,
"Banded square root matrix factorization for differentially private model training", 2024;
banded Toeplitz strategies, Choquette-Choo et al., "Amplified matrix factorization", 2023).
Its columns are disjoint once b apart, which bounds the sensitivity under multiple
participations (docs/math.md section 11), and its BLUE is forward substitution, O(n b)
(:mod:`dptree_opt.engines.banded`).

Storage: the band as an (n, b) array of diagonals, ``diagonals[i, d] = A[i, i - d]`` (row
aligned; 0 where i - d < 0), and the CSR matrix of :class:`~dptree_opt.strategies.base.Strategy`
(n b nonzeros at most). Every row is at budget level 1 (one noise scale).

Sensitivity (docs/math.md section 0) with row weights w. Add/remove: the largest weighted
column norm, exact from the CSR matrix (the base class). Swap: max over column pairs
a < c of ||w (A_a - A_c)||_p^p = g_a + g_c - overlap(a, c), with g_c = ||w A_c||_p^p and
overlap(a, c) = sum_r (|w_r A_ra|^p + |w_r A_rc|^p - |w_r (A_ra - A_rc)|^p) over the rows
both columns touch. Columns c - a >= b apart do not overlap: their best is max_a g_a + (the
largest g_c with c >= a + b), a suffix maximum, O(n). The pairs at gap D < b overlap on the
b - D rows a + D .. a + b - 1: O(n (b - D)) per gap, vectorised over a; O(n b^2) in all
(the generic search of the base class is O(n^2) or worse: 750 s at n = 4096, b = 64 for
l1, against 0.04 s here). Appended all-ones total rows (a public N) are the same on every
column and cancel from A_a - A_c, so :class:`BandedWithTotals` keeps this swap search.

Multiple participations (docs/math.md section 11): X = A' diag(w^2) A vanishes for
``|i - j|`` >= bands, so with bands <= b a pattern's columns are orthogonal and the
sensitivity is exact from the column norms; beyond, see
:func:`banded_participation_sensitivity`. :func:`normalise_columns` rescales every column to
unit norm (the column-normalised banded strategies of private learning).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..limits import check_count, check_memory
from ..participation import (
    ENUMERATION_LIMIT,
    Participation,
    Sensitivity,
    column_norms_sensitivity,
    gram_sensitivity,
    max_linear,
    offset_blocks_sensitivity,
)
from ..validation import check_int
from .base import DENSE_GRAM_BINS, Strategy

__all__ = ["MAX_SWAP_WORK", "BandedStrategy", "BandedWithTotals", "banded",
           "banded_participation_sensitivity", "banded_swap_loss", "normalise_columns"]

# Bytes per stored band entry: the diagonals (8), the CSR data and indices (12) and the
# construction's temporaries (row / column indices, mask: ~20).
_BYTES_PER_ENTRY = 40
# The exact swap sensitivity costs about n b^2 / 2 products: refused above this many.
MAX_SWAP_WORK = 1 << 33


def _check_band_memory(n: int, bands: int) -> None:
    check_memory(n * bands * _BYTES_PER_ENTRY,
                 f"a banded strategy over {n} bins with {bands} bands",
                 "use fewer bins or fewer bands")


def _check_diagonal(diagonals: np.ndarray) -> None:
    """ValueError naming the first zero entry of the main diagonal (the strategy would be
    singular)."""
    zero = np.flatnonzero(diagonals[:, 0] == 0.0)
    if zero.size:
        i = int(zero[0])
        raise ValueError(f"the diagonal entry ({i}, {i}) is zero: a lower-triangular strategy "
                         "with a zero on its diagonal is singular (every diagonal entry must "
                         "be non-zero)")


class BandedStrategy(Strategy):
    """A banded lower-triangular n x n strategy with ``bands`` diagonals (module docstring).

    Parameters
    ----------
    diagonals : array-like, shape (n, bands)
        ``diagonals[i, d] = A[i, i - d]``; entries with i - d < 0 are ignored (must be 0 or
        finite). Finite; the main diagonal ``diagonals[:, 0]`` non-zero.
    name : str
        Label for printed tables.
    """

    def __init__(self, diagonals: ArrayLike, *, name: str = "banded") -> None:
        try:
            d = np.array(diagonals, dtype=float)
        except (TypeError, ValueError):
            raise ValueError("diagonals must be an (n, bands) array of numbers") from None
        if d.ndim != 2 or d.shape[0] < 1 or not 1 <= d.shape[1] <= d.shape[0]:
            raise ValueError(f"diagonals must have shape (n, bands) with 1 <= bands <= n, got "
                             f"shape {d.shape}")
        n, b = d.shape
        _check_band_memory(n, b)
        head = min(b - 1, n)  # rows 0 .. b - 2 have i + 1 < b entries
        for k in range(1, b):  # clear the entries left of column 0 (i - k < 0), O(b^2)
            d[:min(k, n), k] = 0.0
        if not np.all(np.isfinite(d)):
            i, k = (int(v) for v in np.argwhere(~np.isfinite(d))[0])
            raise ValueError(f"diagonals has a non-finite entry at ({i}, {k}) (the matrix "
                             f"entry ({i}, {i - k}))")
        _check_diagonal(d)
        # CSR row by row, columns ascending (d descending): the first rows are partial
        flipped = d[:, ::-1]
        count = np.minimum(np.arange(n) + 1, b)
        indptr = np.concatenate([[0], np.cumsum(count)])
        part_rows, part_cols = np.nonzero(np.arange(b)[None, :] >= b - 1 - np.arange(head)[:, None])
        data = np.concatenate([flipped[:head][part_rows, part_cols], flipped[head:].ravel()])
        first_col = np.arange(head, n) - (b - 1)
        indices = np.concatenate([part_cols - (b - 1) + part_rows,
                                  (first_col[:, None] + np.arange(b)[None, :]).ravel()])
        matrix = sp.csr_matrix((data, indices, indptr), shape=(n, n))
        super().__init__(matrix, name=name)
        d.flags.writeable = False
        self._diagonals = d

    @property
    def bands(self) -> int:
        """The number of diagonals b (the main one and b - 1 below it)."""
        return int(self._diagonals.shape[1])

    @property
    def diagonals(self) -> np.ndarray:
        """The band, shape (n, bands): ``diagonals[i, d] = A[i, i - d]`` (0 where i < d);
        read-only."""
        return self._diagonals

    def __repr__(self) -> str:
        return (f"<BandedStrategy {self.name}: {self.n_bins} x {self.n_bins}, "
                f"{self.bands} bands>")

    def with_total_row(self) -> BandedWithTotals:
        """A copy with an all-ones row appended at level 0 (the last row), keeping the
        banded swap sensitivity (:class:`BandedWithTotals`)."""
        return BandedWithTotals(self, 1)

    # -------------------------------------------------------- sensitivity
    def _swap_loss(self, w: np.ndarray, p: int) -> float:
        return banded_swap_loss(self._diagonals, w, p)

    # ------------------------------------------- multiple participations
    def _participation_loss(self, w: np.ndarray, part: Participation, p: int) -> Sensitivity:
        return banded_participation_sensitivity(self._diagonals, w, part, p)



class BandedWithTotals(Strategy):
    """A banded strategy followed by ``n_totals`` all-ones rows at level 0 (what a mechanism
    releases when N is public). Not banded itself (the engines treat it as a generic
    strategy); its swap sensitivity is the band's, since an all-ones row is the same on
    every column and cancels in A_a - A_c."""

    def __init__(self, core: BandedStrategy, n_totals: int):
        ones = sp.csr_matrix(np.ones((n_totals, core.n_bins)))
        super().__init__(sp.vstack([core.matrix, ones], format="csr"),
                         np.concatenate([core.levels, np.zeros(n_totals, dtype=np.int32)]),
                         name=core.name)
        self._core = core

    def with_total_row(self) -> BandedWithTotals:
        """A copy with one more all-ones row at level 0."""
        return BandedWithTotals(self._core, self.n_rows - self._core.n_rows + 1)

    def _swap_loss(self, w: np.ndarray, p: int) -> float:
        return banded_swap_loss(self._core.diagonals, w[:self._core.n_rows], p)


def banded_swap_loss(diagonals: np.ndarray, w: np.ndarray, p: int) -> float:
    """max_(a < c) ||w (A_a - A_c)||_p for the banded A with row-aligned ``diagonals``
    (n, b) and row weights w (n,) (module docstring), O(n b^2); ValueError above
    MAX_SWAP_WORK."""
    n, b = diagonals.shape
    check_count(n * b * b // 2, MAX_SWAP_WORK,
                f"the exact swap sensitivity of a banded strategy over {n} bins with {b} "
                f"bands (about n b^2 / 2 = {n * b * b // 2} products)",
                "use add/remove neighbours, or fewer bands")
    col = _weighted_columns(diagonals, w)
    mag = np.abs(col) ** p
    g = mag.sum(axis=1)
    best = 0.0
    if n > b:  # pairs at least b apart: disjoint supports
        suffix = np.maximum.accumulate(g[::-1])[::-1]  # suffix[c] = max_(c' >= c) g_c'
        best = float(np.max(g[:n - b] + suffix[b:]))
    for gap in range(1, b):  # O(n (b - gap)) each
        x, y = col[:n - gap, gap:], col[gap:, :b - gap]  # the rows both columns touch
        overlap = (mag[:n - gap, gap:] + mag[gap:, :b - gap]
                   - np.abs(x - y) ** p).sum(axis=1)
        best = max(best, float(np.max(g[:n - gap] + g[gap:] - overlap)))
    best = max(best, 0.0)
    return math.sqrt(best) if p == 2 else best


def _weighted_columns(diagonals: np.ndarray, w: np.ndarray) -> np.ndarray:
    """col[c, d] = w_(c+d) A[c + d, c] (0 past the last row), shape (n, b): column storage."""
    n, b = diagonals.shape
    r = np.arange(n)[:, None] + np.arange(b)[None, :]
    valid = r < n
    rr = np.where(valid, r, 0)
    return np.where(valid, w[rr] * diagonals[rr, np.arange(b)[None, :]], 0.0)


def _gram_diagonal(col: np.ndarray, lag: int) -> np.ndarray:
    """X_(s, s + lag) for s = 0..n-1-lag (0 <= lag < b): sum over the rows both columns
    touch, sum_(d >= lag) col[s, d] col[s + lag, d - lag]; O(n (b - lag))."""
    n, b = col.shape
    return np.einsum("sd,sd->s", col[:n - lag, lag:], col[lag:, :b - lag])


def banded_participation_sensitivity(diagonals: ArrayLike, w: ArrayLike, part: Participation,
                                     p: int) -> Sensitivity:
    """Sensitivity of diag(w) A for the banded A with row-aligned ``diagonals`` (n, bands)
    under a (non-single) participation schema, without an n x n matrix (docs/math.md
    section 11). X = A' diag(w^2) A has X_ij = 0 for ``|i - j|`` >= bands.

    * l1: the column l1 norms over the worst pattern (exact for vector contributions).
    * l2, bands <= b (or one participation): a pattern's columns are orthogonal: exact,
      sqrt of the squared column norms over the worst pattern (dynamic programme, O(n k));
      fixed epoch the same.
    * l2, bands > b, fixed epoch: the few in-band entries X_(o + i b, o + j b)
      (``|i - j| b`` < bands) of every offset, O(n bands), then the blocks' exact value
      (or, with mixed signs, the ``|X|`` bound and the sign enumeration while
      2^(k-1) b k^2 <= ENUMERATION_LIMIT; beyond it the per-offset sums of ``|X|`` without
      the k x k blocks, exact when X_PP >= 0).
    * l2, bands > b, min sep: every pattern enumerated (dense Gram) when n <= DENSE_GRAM_BINS
      and the patterns (times signs) number at most ENUMERATION_LIMIT; otherwise the
      certified bound of Choquette-Choo et al. 2023 on ``|X|`` restricted to its band (each
      column's worst pattern of its 2 bands - 1 in-band entries, then the worst pattern of
      those), O(n bands k), ``exact=False``."""
    d = np.asarray(diagonals, dtype=float)
    n, bands = d.shape
    n = part.check_steps(n)
    col = _weighted_columns(d, np.asarray(w, dtype=float))
    if p == 1:
        return column_norms_sensitivity(np.abs(col).sum(axis=1), part, 1,
                                        nonnegative=bool(np.all(d >= 0)))
    if bands <= part.b or part.max_participations(n) == 1:
        return column_norms_sensitivity(np.sqrt(np.einsum("cd,cd->c", col, col)), part, 2,
                                        orthogonal=True)
    b = part.b
    if part.kind == "fixed_epoch":
        k = int(part.k or 1)
        lags = [_gram_diagonal(col, m * b)[:(k - m) * b].reshape(k - m, b)  # [i, o]
                for m in range(min(k, -(-bands // b)))]                     # lags m b < bands
        if (1 << (k - 1)) * b * k * k <= ENUMERATION_LIMIT:
            blocks = np.zeros((b, k, k))
            for m, xd in enumerate(lags):
                i = np.arange(k - m)
                blocks[:, i, i + m] = xd.T
                blocks[:, i + m, i] = xd.T
            return offset_blocks_sensitivity(blocks, part)
        # too many signs to enumerate: sum of |X_PP| per offset, exact when X_PP >= 0
        upper = sum((2.0 if m else 1.0) * np.abs(xd).sum(axis=0) for m, xd in enumerate(lags))
        nonneg = all(bool(np.all(xd >= 0)) for xd in lags)
        return Sensitivity(math.sqrt(float(np.max(upper))), nonneg,
                           "non-negative Gram: the worst offset's block sum" if nonneg else
                           "upper bound: sum of |X| over the worst offset (mixed signs; too "
                           "many signs to enumerate)")
    kmax = part.max_participations(n)
    diags = [_gram_diagonal(col, lag) for lag in range(bands)]
    nonneg = all(bool(np.all(x >= 0)) for x in diags)
    signs = 1 if nonneg else 1 << (kmax - 1)
    if n <= DENSE_GRAM_BINS and part.count_patterns(n) * signs * kmax <= ENUMERATION_LIMIT:
        x = np.diag(diags[0])
        for lag in range(1, bands):
            x += np.diag(diags[lag], lag) + np.diag(diags[lag], -lag)
        return gram_sensitivity(x, part)
    check_memory(8.0 * n * (2 * bands - 1 + b) * 3,
                 f"the banded participation bound over {n} steps with {bands} bands",
                 "use fewer steps or fewer bands")
    window = np.zeros((n, 2 * bands - 1))  # window[i, bands - 1 + lag] = |X_(i, i + lag)|
    for lag in range(bands):
        v = np.abs(diags[lag])
        window[:n - lag, bands - 1 + lag] = v
        window[lag:, bands - 1 - lag] = v
    rows = np.asarray(max_linear(window, part), dtype=float).reshape(n)
    bound = math.sqrt(float(max_linear(rows, part)))
    return Sensitivity(bound, False, "upper bound: each column's worst pattern of |X| within "
                       "the band, then the worst pattern of those (Choquette-Choo et al. 2023)")


def normalise_columns(strategy: BandedStrategy, *, name: str | None = None) -> BandedStrategy:
    """The banded strategy A D with ``D = diag(1 / ||A_:j||_2)``: every column of unit l2 norm
    (single-participation sensitivity 1; e.g. the column-normalised banded Toeplitz
    strategies of Choquette-Choo et al., "Amplified banded matrix factorization", 2023,
    arXiv 2306.08153, Alg. 9). Same bands; no longer Toeplitz. O(n bands)."""
    if not isinstance(strategy, BandedStrategy):
        raise ValueError("strategy must be a BandedStrategy (e.g. strategies.banded(...)), "
                         f"got {type(strategy).__name__}")
    d = strategy.diagonals
    n, bands = d.shape
    col = _weighted_columns(d, np.ones(n))
    scale = 1.0 / np.sqrt(np.einsum("cd,cd->c", col, col))     # > 0: non-zero diagonal
    cols = np.arange(n)[:, None] - np.arange(bands)[None, :]   # the column of d[i, k]
    out = np.where(cols >= 0, d * scale[np.maximum(cols, 0)], 0.0)
    return BandedStrategy(out, name=name or f"{strategy.name} (normalised columns)")


def banded(coefs_or_matrix: ArrayLike | sp.spmatrix | sp.sparray, bands: int,
           n: int | None = None, *, name: str | None = None) -> BandedStrategy:
    """A banded lower-triangular strategy with ``bands`` diagonals (:class:`BandedStrategy`).

    ``coefs_or_matrix``: either a 1-D coefficient vector a (the Toeplitz first column; its
    first ``bands`` entries are used, so A_ij = a_(i-j) for 0 <= i - j < bands) over ``n``
    steps (default len(a)); or an (n, n) lower-triangular matrix (dense array or
    scipy.sparse) whose entries more than ``bands - 1`` below the diagonal are dropped
    (``n``, if given, must match). ``bands``: an integer in [1, n] (and <= len(a)).

    ValueError (naming the parameter, and the index of the entry) for a zero or non-finite
    diagonal entry, non-finite entries, an entry above the diagonal, or a band that would not
    fit in memory (checked before it is built). E.g. ``banded(sqrt_coefficients(n), b)`` is
    the banded square root."""
    if sp.issparse(coefs_or_matrix):
        return _from_sparse(coefs_or_matrix, bands, n, name)
    try:
        arr = np.asarray(coefs_or_matrix, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("coefs_or_matrix must be a 1-D coefficient vector or an (n, n) "
                         "lower-triangular matrix of numbers") from None
    if arr.ndim == 1:
        return _from_coefficients(arr, bands, n, name)
    if arr.ndim == 2:
        return _from_dense(arr, bands, n, name)
    raise ValueError(f"coefs_or_matrix must be 1-D (coefficients) or 2-D (a matrix), got "
                     f"shape {arr.shape}")


def _from_coefficients(a: npt.NDArray[np.float64], bands: int, n: int | None,
                       name: str | None) -> BandedStrategy:
    if a.size == 0:
        raise ValueError("coefs_or_matrix: the coefficient vector is empty")
    size = a.size if n is None else check_int(n, "n", 1)
    bands = check_int(bands, "bands", 1, size)
    if bands > a.size:
        raise ValueError(f"bands = {bands} is more than the {a.size} coefficients given")
    a = a[:bands]
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ValueError(f"coefs_or_matrix[{int(bad[0])}] is not finite ({a[bad[0]]})")
    if a[0] == 0.0:
        raise ValueError("coefs_or_matrix[0] (the diagonal) is zero: the strategy would be "
                         "singular")
    _check_band_memory(size, bands)
    return BandedStrategy(np.broadcast_to(a, (size, bands)), name=name or "banded toeplitz")


def _check_square(shape: tuple[int, ...], n: int | None) -> int:
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 1:
        raise ValueError(f"coefs_or_matrix must be a square (n, n) matrix, got shape {shape}")
    if n is not None and check_int(n, "n", 1) != shape[0]:
        raise ValueError(f"n = {n} does not match the matrix's {shape[0]} rows")
    return int(shape[0])


def _from_dense(m: npt.NDArray[np.float64], bands: int, n: int | None,
                name: str | None) -> BandedStrategy:
    size = _check_square(m.shape, n)
    bands = check_int(bands, "bands", 1, size)
    bad = np.argwhere(~np.isfinite(m))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(f"coefs_or_matrix[{i}, {j}] is not finite ({m[i, j]})")
    upper = np.argwhere(np.triu(m, 1))
    if upper.size:
        i, j = (int(v) for v in upper[0])
        raise ValueError(f"coefs_or_matrix must be lower-triangular: entry ({i}, {j}) above "
                         f"the diagonal is {m[i, j]}")
    _check_band_memory(size, bands)
    row = np.arange(size)[:, None]
    col = row - np.arange(bands)[None, :]
    diagonals = np.where(col >= 0, m[row, np.maximum(col, 0)], 0.0)
    return BandedStrategy(diagonals, name=name or "banded")


def _from_sparse(m: Any, bands: int, n: int | None, name: str | None) -> BandedStrategy:
    # m: any scipy.sparse matrix or array (the stubs' spmatrix / sparray mixins lack .shape)
    size = _check_square(m.shape, n)
    bands = check_int(bands, "bands", 1, size)
    coo = sp.coo_matrix(m, dtype=float)
    coo.sum_duplicates()  # canonical: one entry per (row, col)
    bad = np.flatnonzero(~np.isfinite(coo.data))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"coefs_or_matrix[{int(coo.row[k])}, {int(coo.col[k])}] is not "
                         f"finite ({coo.data[k]})")
    upper = np.flatnonzero((coo.col > coo.row) & (coo.data != 0.0))
    if upper.size:
        k = int(upper[0])
        raise ValueError(f"coefs_or_matrix must be lower-triangular: entry ({int(coo.row[k])}, "
                         f"{int(coo.col[k])}) above the diagonal is {coo.data[k]}")
    _check_band_memory(size, bands)
    offset = coo.row.astype(np.int64) - coo.col
    keep = offset < bands  # entries further below the band are dropped
    diagonals = np.zeros((size, bands))
    diagonals[coo.row[keep], offset[keep]] = coo.data[keep]
    return BandedStrategy(diagonals, name=name or "banded")
