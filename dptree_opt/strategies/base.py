"""The generic strategy: any measurement matrix A with a budget level per row.

Sensitivity (docs/math.md section 0, "general rule"): for per-row weights w_r >= 0 (w = 1/scale
for the released mechanism, w = 1[level == l] for one level at unit scale) the privacy loss is

    add/remove:  max over columns c        of || w * A[:, c] ||_p
    swap:        max over column pairs a!=b of || w * (A[:, a] - A[:, b]) ||_p

with p = 1 (Laplace, eps-DP) or p = 2 (Gaussian, zCDP). The generic implementation below is
exact for every matrix; structured subclasses override it with faster exact formulas and the
tests check both against a brute-force enumeration of neighbouring datasets.
"""

from __future__ import annotations

from typing import Any, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike
from scipy.sparse.linalg import LinearOperator

from ..participation import (
    Participation,
    Sensitivity,
    as_participation,
    column_norms_sensitivity,
    gram_sensitivity,
)
from ..privacy import check_neighbours


# Generic swap search: columns per chunk of the Gram route, floats per chunk of the direct one.
_DIRECT_SWAP_BINS = 2048  # the direct recomputation of a degenerate l2 swap, O(m n^2)
# Generic participation sensitivity: a dense Gram X = A'A up to this many steps (128 MB)
DENSE_GRAM_BINS = 4096
_PAIR_CHUNK = 256
_PAIR_FLOATS = 1 << 24

_F: TypeAlias = "npt.NDArray[np.float64]"
_A = TypeVar("_A", bound="np.ndarray[Any, Any]")
# what a strategy matrix may be given as: dense array-like or any scipy.sparse matrix/array
MatrixLike: TypeAlias = "ArrayLike | sp.spmatrix | sp.sparray"


def check_norm(norm: object) -> int:
    """Validate a sensitivity norm: 1 (Laplace) or 2 (Gaussian)."""
    if norm not in (1, 2):
        raise ValueError(f"norm must be 1 (Laplace) or 2 (Gaussian), got {norm!r}")
    return int(norm)


def readonly(a: _A) -> _A:
    """``a`` itself, marked read-only (``a.flags.writeable = False``): the arrays a strategy
    exposes (levels, intervals, coefficients, ...) cannot be changed behind its cached
    sensitivities."""
    a.flags.writeable = False
    return a


def frozen_copy(a: ArrayLike) -> npt.NDArray[Any]:
    """A read-only copy of ``a`` (``np.array(a)``), for arrays handed to users in results."""
    return readonly(np.array(a, copy=True))


def frozen_csr(matrix: MatrixLike, *, copy: bool = True) -> sp.csr_matrix:
    """``matrix`` (array-like or scipy.sparse, shape (m, n)) as the CSR float64 matrix a
    strategy exposes: canonical (indices sorted within rows, no duplicate entries, no stored
    zeros) and read-only (``data``, ``indices`` and ``indptr`` not writeable), so it cannot
    be edited behind the sensitivities and engine caches computed from it. Canonical form
    also makes scipy's in-place ``sort_indices`` / ``sum_duplicates`` no-ops on it.
    ``copy=False`` freezes the arrays of a CSR float64 matrix the caller has just built and
    owns (no copy); the default copies a sparse input, so a caller's own matrix is neither
    frozen nor shared. O(nnz)."""
    if sp.issparse(matrix):
        a = sp.csr_matrix(matrix, dtype=np.float64, copy=copy)
    else:
        a = sp.csr_matrix(np.asarray(matrix, dtype=np.float64))
    arrays = (a.data, a.indices, a.indptr)
    if not (a.has_canonical_format and np.all(a.data != 0)):
        if not all(x.flags.writeable for x in arrays):
            a = a.copy()
        a.sum_duplicates()
        a.eliminate_zeros()
    for x in (a.data, a.indices, a.indptr):
        x.flags.writeable = False
    return a


class Strategy:
    """A strategy matrix A (rows = measured queries, columns = bins) with budget levels.

    Parameters
    ----------
    matrix : array-like or scipy.sparse matrix, shape (m, n)
        The measured linear queries. Stored as a canonical, read-only CSR float64 copy
        (:func:`frozen_csr`).
    levels : array-like of int, shape (m,), optional
        The budget group of each row. Level 0 is reserved for total rows (all ones): under
        swap neighbours they are released exactly. Default: every row at level 1.
    name : str
        A short label used in printed tables.
    """

    # an explicit sparse matrix is available up to this many bins (None: always; implicit
    # operators set a limit, and the dense engines refuse beyond it)
    max_matrix_bins: int | None = None

    def __init__(self, matrix: MatrixLike, levels: ArrayLike | None = None, *,
                 name: str = "custom") -> None:
        a = frozen_csr(matrix)
        if a.shape[0] < 1 or a.shape[1] < 1:
            raise ValueError(f"matrix must have at least one row and one column, got {a.shape}")
        if not np.all(np.isfinite(a.data)):
            raise ValueError("matrix has non-finite entries")
        self._matrix = a
        self._n_bins = int(a.shape[1])
        self._levels = self._check_levels(levels, a.shape[0])
        self.name = name
        self._check_level_zero()

    # ------------------------------------------------------------- basics
    @staticmethod
    def _check_levels(levels: ArrayLike | None, m: int) -> npt.NDArray[np.int32]:
        if levels is None:
            return readonly(np.ones(m, dtype=np.int32))
        lv = np.asarray(levels)
        if lv.shape != (m,):
            raise ValueError(f"levels must have one entry per row ({m}), got shape {lv.shape}")
        if not np.issubdtype(lv.dtype, np.integer):
            raise ValueError("levels must be integers")
        if lv.min() < 0:
            raise ValueError("levels must be >= 0")
        return readonly(lv.astype(np.int32))

    def _check_level_zero(self) -> None:
        """Level 0 is the root/total level: its rows must be all-ones rows."""
        zero = np.flatnonzero(self.levels == 0)
        if zero.size and not np.all(self.total_row_mask()[zero]):
            raise ValueError(
                "levels: level 0 is reserved for total rows (all ones over all bins); "
                f"row {int(zero[~self.total_row_mask()[zero]][0])} is not one"
            )

    @property
    def matrix(self) -> sp.csr_matrix:
        """A as scipy.sparse CSR, shape (n_rows, n_bins): canonical and read-only
        (:func:`frozen_csr`); copy it (``.copy()``) to edit, then build a new strategy."""
        return self._matrix

    @property
    def levels(self) -> npt.NDArray[np.int32]:
        """Budget level of each row (int32, read-only); 0 = the root / total."""
        return self._levels

    @property
    def n_bins(self) -> int:
        """Number of bins (columns of A)."""
        return self._n_bins

    @property
    def n_rows(self) -> int:
        """Number of measured queries (rows of A)."""
        return int(self._levels.size)

    def __repr__(self) -> str:
        return f"<Strategy {self.name}: {self.n_rows} rows x {self.n_bins} bins>"

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """Boolean mask of rows equal to the all-ones vector (rows measuring the total N)."""
        a = self.matrix
        ones = sp.csr_matrix(((a.data == 1.0).astype(float), a.indices, a.indptr), shape=a.shape)
        return np.asarray(ones.sum(axis=1)).ravel() == self.n_bins

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r)."""
        return self.matrix @ np.asarray(x, dtype=float)

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u for u of shape (m,) or (m, r); the generic default reads the stored sparse
        matrix (O(nnz)); structured strategies override it without a matrix."""
        u = np.asarray(u, dtype=float)
        if u.shape[:1] != (self.n_rows,):
            raise ValueError(f"u must have {self.n_rows} rows, got shape {u.shape}")
        return self.matrix.T @ u

    def aslinearoperator(self) -> LinearOperator:
        """A as a ``scipy.sparse.linalg.LinearOperator`` of shape (n_rows, n_bins): matvec /
        matmat are :meth:`apply`, rmatvec / rmatmat :meth:`rmatvec`, so each strategy's own
        structure is used (cumulative sums for interval strategies and trees, per-axis
        factors for Kronecker products, FFTs for Toeplitz / BLT / the implicit optima) and
        no dense (m, n) matrix is formed."""
        return LinearOperator((self.n_rows, self.n_bins), matvec=self.apply,
                              rmatvec=self.rmatvec, matmat=self.apply, rmatmat=self.rmatvec,
                              dtype=np.float64)

    def with_total_row(self) -> "Strategy":
        """A copy with an all-ones row appended at level 0 (the last row)."""
        ones = sp.csr_matrix(np.ones((1, self.n_bins)))
        return Strategy(sp.vstack([self.matrix, ones], format="csr"),
                        np.append(self.levels, 0), name=self.name)

    # -------------------------------------------------------- sensitivity
    def sensitivity(self, weights: ArrayLike, neighbours: str, norm: int) -> float:
        """Privacy loss of releasing A x with row weights ``weights`` (>= 0, shape (m,)).

        Returns max over neighbouring histograms x, x' of ||diag(w) A (x - x')||_norm
        (docs/math.md section 0). Exact; subclasses override it with structured formulas.
        """
        w = self._check_weights(weights)
        check_neighbours(neighbours)
        p = check_norm(norm)
        if neighbours == "add_remove":
            return self._add_remove_loss(w, p)
        if self.n_bins == 1:
            return 0.0
        return self._swap_loss(w, p)

    def level_sensitivity(self, level: int, neighbours: str, norm: int) -> float:
        """Sensitivity of the rows of one level at unit scale (the calibration input)."""
        return self.sensitivity((self.levels == level).astype(float), neighbours, norm)

    def participation_sensitivity(self, weights: ArrayLike, participation: Participation | None,
                                  norm: int) -> Sensitivity:
        """Sensitivity of diag(w) A when one user enters several steps (columns) under a
        participation schema (``dptree_opt.participation``, docs/math.md section 11), under
        add / remove ("zero-out") neighbours. ``single()`` (or None) is :meth:`sensitivity`
        under add/remove. Returns a :class:`~dptree_opt.participation.Sensitivity` (value,
        exact or a certified upper bound, method). Structured subclasses override
        ``_participation_loss``; the generic one: l1 from column norms (exact for vector
        contributions); l2 from the dense Gram up to ``DENSE_GRAM_BINS`` steps
        (:func:`~dptree_opt.participation.gram_sensitivity`), beyond it exact when no row
        spans b steps (pattern columns orthogonal), else the triangle bound."""
        w = self._check_weights(weights)
        p = check_norm(norm)
        part = as_participation(participation)
        if part.is_single:
            return Sensitivity(self.sensitivity(w, "add_remove", p), True, "largest column norm")
        part.check_steps(self.n_bins)
        return self._participation_loss(w, part, p)

    def _participation_loss(self, w: _F, part: Participation, p: int) -> Sensitivity:
        a = self.matrix
        if p == 1:
            norms = np.asarray(abs(a).T @ w).ravel()
            return column_norms_sensitivity(norms, part, 1,
                                            nonnegative=bool(np.all(a.data >= 0)))
        wa = sp.diags(w) @ a
        if self.n_bins <= DENSE_GRAM_BINS:
            return gram_sensitivity((wa.T @ wa).toarray(), part)
        norms = np.sqrt(np.asarray(wa.multiply(wa).sum(axis=0)).ravel())
        return column_norms_sensitivity(norms, part, 2, orthogonal=row_span(a) < part.b)

    def _check_weights(self, weights: ArrayLike) -> _F:
        w = np.asarray(weights, dtype=float)
        if w.shape != (self.n_rows,):
            raise ValueError(f"weights must have shape ({self.n_rows},), got {w.shape}")
        if np.any(~np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and >= 0")
        return w

    def _add_remove_loss(self, w: _F, p: int) -> float:
        # max_c ||w * A[:, c]||_p, O(nnz)
        a = abs(self.matrix) if p == 1 else self.matrix.multiply(self.matrix)
        col = a.T @ (w if p == 1 else w * w)
        return float(col.max() if p == 1 else np.sqrt(max(col.max(), 0.0)))

    def _swap_loss(self, w: _F, p: int) -> float:
        # max_{a != b} ||w * (A_a - A_b)||_p = max_{a != b} g_a + g_b - C_ab, over column
        # chunks (O(chunk n) memory), with g_c = ||w * A_c||_p^p and C_ab the overlap term:
        # * p = 2 (any entries): C = 2 A' diag(w^2) A (Gram route; the result is squared).
        # * p = 1: a row with <= 1 nonzero never overlaps; a row whose nonzeros share one
        #   magnitude c_r (0/1, +-1, Haar rows) overlaps by (|A|' D |A| + A' D A)_ab with
        #   D = diag(w / c) (for a, b in {+-c}: |a - b| = |a| + |b| - (|a||b| + ab) / c);
        #   any other row by sum_r w_r (|A_ra| + |A_rb| - |A_ra - A_rb|), computed directly
        #   (O(rows n^2) work: the only slow case, e.g. a dense lower-triangular strategy).
        # Dense-ish matrices (> 10% nonzeros) use dense BLAS products: O(m n^2) flops.
        a = self.matrix
        n = self.n_bins
        grams: list[tuple[sp.csr_matrix, _F]] = []
        general: _F | None = None
        w_gen = w
        if p == 2:
            g = np.asarray(a.multiply(a).T @ (w * w)).ravel()
            grams = [(a, 2.0 * w * w)]
        else:
            g = np.asarray(abs(a).T @ w).ravel()
            nnz = np.diff(a.indptr)
            mag_max = np.zeros(a.shape[0])
            mag_min = np.zeros(a.shape[0])
            rows = np.flatnonzero(nnz > 0)
            if rows.size:
                absd = np.abs(a.data)
                mag_max[rows] = np.maximum.reduceat(absd, a.indptr[rows])
                mag_min[rows] = np.minimum.reduceat(absd, a.indptr[rows])
            multi = nnz >= 2
            const = multi & (mag_max == mag_min)
            gen = multi & ~const
            if const.any():
                ac = a[const]
                wc = w[const] / mag_max[const]
                grams = [(abs(ac), wc), (ac, wc)]
            if gen.any():
                general = a[gen].toarray()
            w_gen = w[gen]
        dense = a.nnz > 0.1 * a.shape[0] * n
        # (B, diag(v) B) pairs of the overlap terms: dense arrays or CSC matrices
        dense_pairs: list[tuple[_F, _F]] = []
        sparse_pairs: list[tuple[sp.csc_matrix, sp.csc_matrix]] = []
        for b, v in grams:
            if dense:
                bd = b.toarray()
                dense_pairs.append((bd, v[:, None] * bd))
            else:
                sparse_pairs.append((b.tocsc(), (sp.diags(v) @ b).tocsc()))
        step = _PAIR_CHUNK
        if general is not None:
            step = max(1, min(step, _PAIR_FLOATS // (general.shape[0] * n)))
        best = 0.0
        for start in range(0, n, step):
            stop = min(start + step, n)
            d = g[start:stop, None] + g[None, :]
            for db, dbw in dense_pairs:
                d -= db[:, start:stop].T @ dbw
            for sb, sbw in sparse_pairs:
                d -= (sb[:, start:stop].T @ sbw).toarray()
            if general is not None:
                blk, row = general[:, start:stop, None], general[:, None, :]
                overlap = np.abs(blk) + np.abs(row) - np.abs(blk - row)  # (m_gen, c, n)
                d -= np.einsum("r,rcn->cn", w_gen, overlap)
            d[np.arange(stop - start), np.arange(start, stop)] = -np.inf
            best = max(best, float(d.max()))
        if p == 2 and n <= _DIRECT_SWAP_BINS and best <= 1e-12 * 2 * float(g.max(initial=0)):
            # every pair differs by rounding only (the Gram route's g_a + g_b - 2 C_ab
            # cancels to ~1e-16 g, whose square root is ~1e-8): recompute directly
            best = self._direct_swap_l2(w)
        return float(np.sqrt(max(best, 0.0))) if p == 2 else max(best, 0.0)

    def _direct_swap_l2(self, w: _F) -> float:
        """max_{a != b} ||w * (A_a - A_b)||_2^2 from the column differences themselves
        (no cancellation), over column chunks; for small n only."""
        a = (sp.diags(w) @ self.matrix).toarray()
        n, best = a.shape[1], 0.0
        for j in range(1, n):                    # pairs (i, i + j), one offset at a time
            diff = a[:, j:] - a[:, :-j]
            best = max(best, float(np.einsum("rc,rc->c", diff, diff).max()))
        return best


def row_span(a: sp.csr_matrix) -> int:
    """The widest row of a CSR matrix: max over rows of (last - first nonzero column) + 1
    (0 for an all-zero matrix). Columns at least this far apart share no row, so their
    inner products vanish. O(nnz)."""
    a = sp.csr_matrix(a)
    nnz = np.diff(a.indptr)
    rows = np.flatnonzero(nnz > 0)
    if not rows.size:
        return 0
    first = np.minimum.reduceat(a.indices, a.indptr[rows])
    last = np.maximum.reduceat(a.indices, a.indptr[rows])
    return int((last - first).max()) + 1
