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

n not a power of two: the strategy is the Haar matrix of n' = 2^ceil(log2 n) bins restricted
to the first n columns (the n' - n padding bins are known to be empty), all-zero rows
dropped; it keeps full column rank and its sensitivities are computed exactly by
``Strategy`` (at most the values above for n').
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .base import Strategy, check_neighbours, check_norm

__all__ = ["haar", "haar_matrix", "haar_sensitivity"]


def _check_bins(n) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (number of bins) must be an integer >= 1, got {n!r}")
    return int(n)


def haar_matrix(n: int) -> sp.csr_matrix:
    """The weighted (+-1) Haar matrix of ``n`` bins, shape (rows, n), CSR.

    For n = 2^L it is square (n rows: the total, then the n - 1 tree nodes in level order);
    otherwise it is the matrix of 2^ceil(log2 n) bins restricted to the first n columns with
    all-zero rows removed. O(n log n) nonzeros."""
    n = _check_bins(n)
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


def haar(n: int) -> Strategy:
    """Privelet's Haar wavelet strategy over ``n`` bins ([XWG]; see the module docstring).

    Returns a generic ``Strategy`` whose rows are the total and the +-1 Haar rows, all at
    budget level 1 (one noise scale, as in Privelet). Exact sensitivities come from
    ``Strategy`` (for n = 2^L they equal ``haar_sensitivity``). Under swap neighbours the
    noisy total row costs no budget and the public total is appended by ``Mechanism``."""
    a = haar_matrix(n)
    return Strategy(a, np.ones(a.shape[0], dtype=np.int32), name="haar")


def haar_sensitivity(n: int, neighbours: str, norm: int) -> float:
    """Closed-form sensitivity of ``haar(n)`` with unit weights, n = 2^L (module docstring).

    add/remove: l1 = L + 1, l2 = sqrt(L + 1); swap: l1 = 2 L, l2 = sqrt(2 L + 2) (n >= 2)."""
    n = _check_bins(n)
    if n & (n - 1):
        raise ValueError(f"haar_sensitivity: n must be a power of two, got {n}")
    check_neighbours(neighbours)
    p = check_norm(norm)
    L = n.bit_length() - 1
    if neighbours == "add_remove":
        return float(L + 1) if p == 1 else math.sqrt(L + 1)
    if n == 1:
        return 0.0
    return float(2 * L) if p == 1 else math.sqrt(2 * L + 2)
