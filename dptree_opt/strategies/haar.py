"""The Haar wavelet strategy of Privelet ([XWG] Xiao, Wang, Gehrke, "Differential Privacy via
Wavelet Transforms", ICDE 2010 / TKDE 2011), as a matrix mechanism.

Privelet releases the Haar coefficients of the histogram, each with Laplace noise of scale
lambda / W(c), where W is the weight function of [XWG] Sec. IV: W(c_0) = n for the base
coefficient c_0 = mean(x) and W(c) = |subtree of c| for a detail coefficient
c = (mean(left half) - mean(right half)) / 2. Multiplying each coefficient by its weight turns
the transform into the +-1 matrix used here (Li et al., "Optimizing linear counting queries
under differential privacy", PODS 2010, Sec. 3 "wavelet"):

* row 0: the total, all ones (n * c_0);
* one row per node of the complete binary tree over n = 2^L bins (level order, root first):
  +1 on the node's left half, -1 on its right half (|subtree| * c = sum(left) - sum(right)).

Privelet's equal noise lambda on every weighted coefficient is then one noise scale for all
rows: every row is at budget level 1 (so ``Mechanism`` calibrates a single scale).

Sensitivities with equal weights (n = 2^L; every column has one +-1 per tree level plus the
total; a swap of bins a, b whose lowest common node is the root changes that node by 2 and
the L - 1 nodes below on each side by 1):

    add/remove:  l1 = L + 1,  l2 = sqrt(L + 1)   ([XWG]: generalised sensitivity 1 + log2 n)
    swap:        l1 = 2 L,    l2 = sqrt(2 L + 2)     (the total row does not change)

For n = 2^L, :func:`haar` returns a :class:`HaarStrategy`: no matrix until asked for, the
fast transform for A x (O(n)), these closed-form sensitivities for equal node weights, and
the structure the exact error and BLUE paths use (:mod:`dptree_opt.engines.haar`).

n not a power of two: the strategy is the Haar matrix of n' = 2^ceil(log2 n) bins restricted
to the first n columns (the n' - n padding bins are known to be empty), all-zero rows
dropped; it keeps full column rank and its sensitivities are computed exactly by
``Strategy`` (at most the values above for n').
"""

from __future__ import annotations

import math
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..limits import check_memory
from ..validation import check_n
from .base import Strategy, check_neighbours, check_norm, frozen_csr, readonly

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"

__all__ = ["haar", "haar_matrix", "haar_sensitivity", "HaarStrategy", "MAX_MATRIX_BINS"]

MAX_MATRIX_BINS = 1 << 16  # HaarStrategy.matrix: n log n nonzeros


def haar_matrix(n: int) -> sp.csr_matrix:
    """The weighted (+-1) Haar matrix of ``n`` bins, shape (rows, n), CSR.

    For n = 2^L it is square (n rows: the total, then the n - 1 tree nodes in level order);
    otherwise it is the matrix of 2^ceil(log2 n) bins restricted to the first n columns with
    all-zero rows removed. O(n log n) nonzeros."""
    n = check_n(n)
    levels = max(0, math.ceil(math.log2(n))) if n > 1 else 0
    m = 1 << levels  # padded size n'
    rows, cols, vals = [np.zeros(m, dtype=np.int64)], [np.arange(m)], [np.ones(m)]
    r = 1
    for j in range(levels):  # level j: 2^j nodes of width m / 2^j
        width = m >> j
        nodes = np.arange(1 << j)
        c = np.arange(m)
        node = c // width
        rows.append(r + node)
        cols.append(c)
        vals.append(np.where(c % width < width // 2, 1.0, -1.0))
        r += nodes.size
    a = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(r, m))
    if m != n:
        a = a[:, :n].tocsr()
        a.eliminate_zeros()
        a = a[np.diff(a.indptr) > 0]
    return a


class HaarStrategy(Strategy):
    """Privelet's Haar strategy over n = 2^L bins without a matrix (module docstring).

    Rows: 0 = the total (level 1), then the n - 1 nodes of the complete binary tree in level
    order (level 1), then ``n_totals`` appended exact totals (level 0). Node r = 2^j + i - 1
    of level j covers [a, b) = [i n / 2^j, (i + 1) n / 2^j) with middle m and measures
    sum(x[a:m]) - sum(x[m:b])."""

    def __init__(self, n: int, *, n_totals: int = 0, name: str = "haar") -> None:
        n = check_n(n)
        if n & (n - 1):
            raise ValueError(f"the structured Haar strategy needs n a power of two, got {n} "
                             "(strategies.haar(n) builds the matrix for other n)")
        self._n_bins = n
        self._n_totals = int(n_totals)
        self._levels = readonly(np.concatenate([np.ones(n, dtype=np.int32),
                                                 np.zeros(self._n_totals, dtype=np.int32)]))
        self._lazy_matrix: sp.csr_matrix | None = None
        self.name = name

    @property
    def n_totals(self) -> int:
        """Number of appended all-ones total rows (level 0)."""
        return self._n_totals

    def node_bounds(self) -> tuple[_I, _I, _I]:
        """(a, m, b) of the n - 1 tree nodes in row order (rows 1..n-1). O(n)."""
        n = self._n_bins
        L = n.bit_length() - 1
        j = np.repeat(np.arange(L), 1 << np.arange(L))
        i = np.arange(n - 1) - ((1 << j) - 1)
        width = n >> j
        a = i * width
        return a, a + width // 2, a + width

    @property
    def matrix(self) -> sp.csr_matrix:
        """A as CSR (n log n + n nonzeros; canonical, read-only), built on first request;
        n <= MAX_MATRIX_BINS."""
        if self._lazy_matrix is None:
            if self._n_bins > MAX_MATRIX_BINS:
                raise ValueError(f"the Haar matrix has n log n nonzeros: refused for "
                                 f"{self._n_bins} > {MAX_MATRIX_BINS} bins (use apply and "
                                 "the structured paths)")
            rows = [haar_matrix(self._n_bins)]
            rows += [sp.csr_matrix(np.ones((1, self._n_bins)))] * self._n_totals
            self._lazy_matrix = frozen_csr(sp.vstack(rows, format="csr"), copy=False)
        return self._lazy_matrix

    def __repr__(self) -> str:
        return f"<HaarStrategy {self.name}: {self.n_rows} rows x {self.n_bins} bins>"

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """Row 0 (the noisy total) and the appended totals; row 0 of n = 1 is the only row."""
        mask = np.zeros(self.n_rows, dtype=bool)
        mask[0] = True
        mask[self._n_bins:] = True
        return mask

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r) from cumulative sums S:
        2 S_m - S_a - S_b per node. O(n)."""
        x = np.asarray(x, dtype=float)
        if x.shape[:1] != (self._n_bins,):
            raise ValueError(f"x must have {self._n_bins} rows, got shape {x.shape}")
        S = np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(x, axis=0)])
        a, m, b = self.node_bounds()
        tot = S[-1:]
        out = [tot, 2.0 * S[m] - S[a] - S[b]] + [tot] * self._n_totals
        return np.concatenate(out, axis=0)

    def with_total_row(self) -> "HaarStrategy":
        """A copy with one more all-ones row at level 0 (the last row)."""
        return HaarStrategy(self._n_bins, n_totals=self._n_totals + 1, name=self.name)

    def _uniform(self, w: _F) -> tuple[float, float, _F] | None:
        """(total-row weight, common node weight, appended-total weights) or None."""
        n = self._n_bins
        nodes = w[1:n]
        if nodes.size and not np.all(nodes == nodes[0]):
            return None
        return float(w[0]), float(nodes[0]) if nodes.size else 0.0, w[n:]

    def _add_remove_loss(self, w: _F, p: int) -> float:
        u = self._uniform(w)
        if u is None:
            return super()._add_remove_loss(w, p)
        w0, wn, wt = u
        L = self._n_bins.bit_length() - 1
        # every column: the total rows and one +-1 per tree level ([XWG]: 1 + log2 n)
        if p == 1:
            return w0 + L * wn + float(wt.sum())
        return math.sqrt(w0 * w0 + L * wn * wn + float(np.sum(wt * wt)))

    def _swap_loss(self, w: _F, p: int) -> float:
        u = self._uniform(w)
        if u is None:
            return super()._swap_loss(w, p)
        _, wn, _ = u
        L = self._n_bins.bit_length() - 1
        # bins on opposite sides of the root: the root row changes by 2, the L - 1 rows
        # below on each side by 1 (the maximum over pairs; totals do not change)
        if p == 1:
            return 2.0 * L * wn
        return math.sqrt(4.0 + 2.0 * (L - 1)) * wn


def haar(n: int) -> Strategy:
    """Privelet's Haar wavelet strategy over ``n`` bins ([XWG]; see the module docstring).

    The rows are the total and the +-1 Haar rows, all at budget level 1 (one noise scale,
    as in Privelet). n = 2^L: a :class:`HaarStrategy` (structured: closed-form
    sensitivities, no matrix needed); otherwise a generic ``Strategy`` on the restricted
    matrix, whose exact sensitivities come from ``Strategy``. Under swap neighbours the
    noisy total row costs no budget and the public total is appended by ``Mechanism``."""
    n = check_n(n)
    if n & (n - 1) == 0:
        check_memory(32 * n, f"the Haar strategy over {n} bins", "use fewer bins")
        return HaarStrategy(n)
    nnz = n * ((n - 1).bit_length() + 1)  # at most one nonzero per level in each column
    check_memory(24 * nnz, f"the Haar matrix over {n} bins ({nnz} nonzeros; n is not a "
                 "power of two)", "use fewer bins, or a power of two (no matrix)")
    a = haar_matrix(n)
    return Strategy(a, np.ones(a.shape[0], dtype=np.int32), name="haar")


def haar_sensitivity(n: int, neighbours: str, norm: int) -> float:
    """Closed-form sensitivity of ``haar(n)`` with unit weights, n = 2^L (module docstring).

    add/remove: l1 = L + 1, l2 = sqrt(L + 1); swap: l1 = 2 L, l2 = sqrt(2 L + 2) (n >= 2)."""
    n = check_n(n)
    if n & (n - 1):
        raise ValueError(f"the Haar sensitivity's closed form needs n a power of two, got {n}")
    check_neighbours(neighbours)
    p = check_norm(norm)
    L = n.bit_length() - 1
    if neighbours == "add_remove":
        return float(L + 1) if p == 1 else math.sqrt(L + 1)
    if n == 1:
        return 0.0
    return float(2 * L) if p == 1 else math.sqrt(2 * L + 2)
