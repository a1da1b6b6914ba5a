"""Nested strategies: one local matrix per depth of a complete tree (docs/math.md section 12).

Fan-outs k_0..k_(L-1), n = k_0 ... k_(L-1) bins. Depth 0 is the root (one node over the n
bins); a node at depth d covers N_d = k_d ... k_(L-1) bins (N_L = 1: a bin) and has k_d
children of N_(d+1) bins each; there are P_d = k_0 ... k_(d-1) nodes at depth d. Every node
v at depth d measures y_v = S_d t_v, t_v the vector of its k_d children's totals, with the
local matrix S_d (m_d x k_d) shared by every node of that depth. Rows are depth-major (depth
0 first), then nodes left to right, then the m_d rows of S_d: row (d, v, r) is the bin
vector sum_c S_d[r, c] 1[bin in child c of v]. There are sum_d P_d m_d rows and
sum_d m_d n nonzeros; the explicit matrix is built only on request, up to
MAX_MATRIX_NONZEROS nonzeros (the products, the sensitivities and the engine
:mod:`dptree_opt.engines.nested` never need it).

Budget levels: every row of depth d is at level d + 1 (level 0 is reserved for the all-ones
total rows a mechanism appends when N is public), so ``Mechanism`` splits the budget per
depth by default.

Sensitivity (docs/math.md section 0) with row weights w. Column (bin) j lies in child
c_d(j) of its depth-d ancestor, so ||diag(w) A e_j||_p^p = sum_d (the weighted norm^p of
column c_d(j) of S_d at that ancestor): add/remove is the largest of these sums over the
bins, one vectorised pass per depth (O(n) work, no matrix, any weights). When the weights
are the same at every node of a depth (w_(d, v, r) = w_(d, r): budgets per depth), write
g_d(c) = ||diag(w_d) S_d[:, c]||_p^p; then add/remove is (sum_d max_c g_d(c))^(1/p) (the
path may pick its child at every depth independently), and under swap two bins a != b
whose paths split at depth D (same node, children c != c') differ by S_D[:, c] - S_D[:, c']
at depth D and by whole columns on disjoint nodes below, so

    swap^p = max_D [ max_(c != c') ||diag(w_D) (S_D[:, c] - S_D[:, c'])||_p^p
                     + 2 sum_(d > D) max_c g_d(c) ].

Swap with weights that differ between the nodes of a depth uses the explicit matrix (the
generic search of :class:`~dptree_opt.strategies.base.Strategy`), refused above the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..limits import check_memory
from ..validation import check_int
from .base import Strategy, frozen_csr, readonly

__all__ = ["MAX_MATRIX_NONZEROS", "NestedStrategy", "nested"]

_F: TypeAlias = "npt.NDArray[np.float64]"

# .matrix is built on request up to this many nonzeros (sum_d m_d x n)
MAX_MATRIX_NONZEROS = 1 << 24
# memory per row (its int32 level, the mechanism's per-row arrays are checked there) and
# per bin (the O(n) vectors of the products and sensitivities)
_BYTES_PER_ROW = 4
_BYTES_PER_BIN = 64


def _check_fanouts(fanouts: object) -> tuple[int, ...]:
    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, (Sequence, np.ndarray)):
        raise ValueError(f"fanouts must be a sequence of integers >= 2, got {fanouts!r}")
    ks = tuple(check_int(k, f"fanouts[{d}]", 2) for d, k in enumerate(fanouts))
    if not ks:
        raise ValueError("fanouts must hold at least one fan-out (one depth), got none")
    return ks


def _check_locals(mats: object, ks: tuple[int, ...]) -> list[_F]:
    if isinstance(mats, np.ndarray) or not isinstance(mats, Sequence) or isinstance(
            mats, (str, bytes)):
        raise ValueError("locals must be a sequence of 2-D arrays, one (m_d, k_d) matrix per "
                         f"depth, got {type(mats).__name__}")
    if len(mats) != len(ks):
        raise ValueError(f"locals must hold one matrix per depth ({len(ks)} fan-outs), got "
                         f"{len(mats)}")
    out = []
    for d, (s, k) in enumerate(zip(mats, ks)):
        try:
            if np.iscomplexobj(s):
                raise TypeError
            a = np.array(s, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"locals[{d}] must be a 2-D array of real numbers") from None
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] != k:
            raise ValueError(f"locals[{d}] must be a real (m_{d}, {k}) matrix with m_{d} >= 1 "
                             f"(k_{d} = fanouts[{d}] = {k} columns), got shape "
                             f"{np.shape(s)}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"locals[{d}] has non-finite entries")
        out.append(readonly(a))
    last = out[-1]
    if np.linalg.matrix_rank(last) < last.shape[1]:
        raise ValueError(f"locals[{len(ks) - 1}] (the deepest local matrix) must have full "
                         f"column rank {last.shape[1]}: only its rows tell the bins of a node "
                         "apart, so otherwise the histogram is not identified (no BLUE)")
    return out


class NestedStrategy(Strategy):
    """The nested strategy of fan-outs (k_0..k_(L-1)) and local matrices S_d (module
    docstring; docs/math.md section 12). Build it with :func:`nested`.

    ``apply`` / ``rmatvec`` are O(sum_d m_d P_(d+1)) + O(n) per column by per-depth
    reshapes (no matrix); ``matrix`` is built on request up to MAX_MATRIX_NONZEROS
    nonzeros. Rows of depth d are at budget level d + 1.
    """

    def __init__(self, fanouts: Sequence[int], locals: Sequence[ArrayLike], *,
                 name: str = "nested") -> None:
        ks = _check_fanouts(fanouts)
        mats = _check_locals(locals, ks)
        self._ks = ks
        self._s = mats
        self._n_bins = math.prod(ks)
        # P_d nodes at depth d (d = 0..L), N_d bins per node (d = 0..L)
        self._nodes = tuple(math.prod(ks[:d]) for d in range(len(ks) + 1))
        self._widths = tuple(math.prod(ks[d:]) for d in range(len(ks) + 1))
        counts = [p * s.shape[0] for p, s in zip(self._nodes, mats)]
        self._offsets = tuple(int(v) for v in np.concatenate([[0], np.cumsum(counts)]))
        rows = self._offsets[-1]
        check_memory(rows * _BYTES_PER_ROW + self._n_bins * _BYTES_PER_BIN,
                     f"a nested strategy over {self._n_bins} bins with {rows} rows",
                     "use fewer bins or fewer rows per local matrix")
        self._nnz = sum(s.shape[0] for s in mats) * self._n_bins
        self.max_matrix_bins = MAX_MATRIX_NONZEROS // sum(s.shape[0] for s in mats)
        self._lazy_levels: npt.NDArray[np.int32] | None = None
        self._lazy_matrix: sp.csr_matrix | None = None
        self.name = name

    # ------------------------------------------------------------- structure
    @property
    def fanouts(self) -> tuple[int, ...]:
        """(k_0, .., k_(L-1)), root first."""
        return self._ks

    @property
    def locals(self) -> list[_F]:
        """The local matrices [S_0, .., S_(L-1)], S_d of shape (m_d, k_d): read-only
        copies (a new list each call)."""
        return [readonly(s.copy()) for s in self._s]

    @property
    def height(self) -> int:
        """L, the number of depths (fan-outs)."""
        return len(self._ks)

    @property
    def nodes(self) -> tuple[int, ...]:
        """(P_0, .., P_L): P_d = k_0 ... k_(d-1) nodes at depth d (P_L = n, the bins)."""
        return self._nodes

    @property
    def widths(self) -> tuple[int, ...]:
        """(N_0, .., N_L): N_d = k_d ... k_(L-1) bins under a node of depth d (N_L = 1)."""
        return self._widths

    @property
    def row_offsets(self) -> tuple[int, ...]:
        """The first row of each depth and the number of rows: depth d holds rows
        row_offsets[d] .. row_offsets[d + 1] - 1 (P_d m_d of them)."""
        return self._offsets

    def grams(self) -> list[_F]:
        """[S_d' S_d], each (k_d, k_d): the local precisions of unit row noise (the only
        part of S_d the BLUE depends on; docs/math.md section 12)."""
        return [s.T @ s for s in self._s]

    @property
    def n_rows(self) -> int:
        """sum_d P_d m_d."""
        return self._offsets[-1]

    @property
    def levels(self) -> npt.NDArray[np.int32]:
        """Budget level of each row: d + 1 for the rows of depth d (int32, read-only; built
        on first use)."""
        if self._lazy_levels is None:
            counts = [b - a for a, b in zip(self._offsets[:-1], self._offsets[1:])]
            self._lazy_levels = readonly(np.repeat(
                np.arange(1, self.height + 1, dtype=np.int32), counts))
        return self._lazy_levels

    def __repr__(self) -> str:
        return (f"<NestedStrategy {self.name}: fan-outs {self._ks}, {self.n_rows} rows x "
                f"{self.n_bins} bins>")

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """The rows equal to the all-ones vector: the depth-0 rows of S_0 that are all ones
        (a node below the root covers fewer than n bins)."""
        out = np.zeros(self.n_rows, dtype=bool)
        out[:self._s[0].shape[0]] = np.all(self._s[0] == 1.0, axis=1)
        return out

    def with_total_row(self) -> Strategy:
        """The strategy with an all-ones row appended at level 0 (the last row; a public N):
        a generic :class:`~dptree_opt.strategies.base.Strategy` from the explicit matrix,
        served by the generic engines; refused above MAX_MATRIX_NONZEROS nonzeros."""
        if self._nnz + self.n_bins > MAX_MATRIX_NONZEROS:
            raise ValueError(
                f"a nested strategy with an appended total row (a public N: swap neighbours "
                f"or public_total=True) is a generic strategy, built from its explicit matrix "
                f"of {self._nnz + self.n_bins} nonzeros, above the limit of "
                f"{MAX_MATRIX_NONZEROS}; use add/remove neighbours with N private")
        return super().with_total_row()

    def split_rows(self, u: npt.NDArray[np.float64]) -> list[npt.NDArray[np.float64]]:
        """u of shape (rows,) + tail as one array per depth, shape (P_d, m_d) + tail (views
        when u is contiguous)."""
        tail = u.shape[1:]
        return [u[a:b].reshape((p, s.shape[0]) + tail)
                for a, b, p, s in zip(self._offsets[:-1], self._offsets[1:], self._nodes,
                                      self._s)]

    def row_pattern(self, values: ArrayLike) -> list[npt.NDArray[np.float64]] | None:
        """Per-row ``values`` (shape (rows,)) as [v_0, .., v_(L-1)], v_d of shape (m_d,),
        when every node of each depth carries the same values (row (d, v, r) = v_d[r]), else
        None. O(rows)."""
        v = np.asarray(values, dtype=float)
        parts = self.split_rows(v)
        if not all(np.array_equal(p, np.broadcast_to(p[:1], p.shape), equal_nan=True)
                   for p in parts):
            return None
        return [p[0].copy() for p in parts]

    # ------------------------------------------------------------- products
    def _check_rows(self, x: ArrayLike, rows: int, name: str) -> _F:
        x = np.asarray(x, dtype=float)
        if x.ndim not in (1, 2) or x.shape[0] != rows:
            raise ValueError(f"{name} must have shape ({rows},) or ({rows}, r), got {x.shape}")
        return x

    def node_totals(self, x: ArrayLike) -> list[_F]:
        """[T_1, .., T_L] for x of shape (n,) or (n, r): T_d (P_d,) + tail holds the totals
        of the depth-d nodes (T_L = x). O(n) per column."""
        x = self._check_rows(x, self.n_bins, "x")
        tail = x.shape[1:]
        out = [x]
        for d in range(self.height - 1, 0, -1):
            out.append(out[-1].reshape((self._nodes[d], self._ks[d]) + tail).sum(axis=1))
        return out[::-1]

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r): per depth, S_d applied to the children
        totals of every node (``node_totals``)."""
        totals = self.node_totals(x)
        tail = totals[-1].shape[1:]
        parts = []
        for d, s in enumerate(self._s):
            t = totals[d].reshape((self._nodes[d], self._ks[d]) + tail)
            parts.append(np.tensordot(s, t, axes=([1], [1])).swapaxes(0, 1)
                         .reshape((-1,) + tail))
        return np.concatenate(parts, axis=0)

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u for u of shape (rows,) or (rows, r): per depth S_d' applied per node,
        pushed down to the bins (each node's value repeated over its children)."""
        u = self._check_rows(u, self.n_rows, "u")
        tail = u.shape[1:]
        acc = np.zeros((1,) + tail)
        for d, (s, ud) in enumerate(zip(self._s, self.split_rows(u))):
            z = np.tensordot(s, ud, axes=([0], [1])).swapaxes(0, 1)  # (P_d, k_d) + tail
            acc = (np.repeat(acc, self._ks[d], axis=0)
                   + z.reshape((self._nodes[d + 1],) + tail))
        return acc

    @property
    def matrix(self) -> sp.csr_matrix:
        """A as CSR (canonical, read-only), built on first use; refused above
        MAX_MATRIX_NONZEROS nonzeros (sum_d m_d n)."""
        if self._lazy_matrix is None:
            if self._nnz > MAX_MATRIX_NONZEROS:
                raise ValueError(
                    f"the nested strategy's explicit matrix would hold {self._nnz} nonzeros "
                    f"(sum_d m_d x n bins), above the limit of {MAX_MATRIX_NONZEROS}: use its "
                    "products (apply, rmatvec, aslinearoperator) and the nested engine")
            blocks = [sp.kron(sp.identity(p, format="csr"),
                              sp.kron(sp.csr_matrix(s), np.ones((1, w)), format="csr"),
                              format="csr")
                      for p, s, w in zip(self._nodes, self._s, self._widths[1:])]
            self._lazy_matrix = frozen_csr(sp.vstack(blocks, format="csr"), copy=False)
        return self._lazy_matrix

    # ------------------------------------------------------------- sensitivity
    def _add_remove_loss(self, w: _F, p: int) -> float:
        # the weighted norm^p of every column, summed over depths top-down: O(n)
        acc = np.zeros(1)
        for d, (s, wd) in enumerate(zip(self._s, self.split_rows(w))):
            node = (wd ** p) @ (np.abs(s) ** p)  # (P_d, k_d): child c of each node
            acc = np.repeat(acc, self._ks[d]) + node.ravel()
        top = float(acc.max())
        return top if p == 1 else math.sqrt(max(top, 0.0))

    def _swap_loss(self, w: _F, p: int) -> float:
        pattern = self.row_pattern(w)
        if pattern is None:  # weights that differ between nodes: the explicit matrix
            return super()._swap_loss(w, p)
        col = [float(((wd ** p) @ (np.abs(s) ** p)).max()) for s, wd in zip(self._s, pattern)]
        below = np.concatenate([np.cumsum(col[::-1])[::-1][1:], [0.0]])  # sum_(d > D)
        best = 0.0
        for d, (s, wd) in enumerate(zip(self._s, pattern)):
            diff = np.abs(s[:, :, None] - s[:, None, :]) ** p  # (m_d, k_d, k_d)
            pair = np.tensordot(wd ** p, diff, axes=1)
            pair[np.diag_indices(s.shape[1])] = -np.inf
            best = max(best, float(pair.max()) + 2.0 * float(below[d]))
        return best if p == 1 else math.sqrt(best)


def nested(fanouts: Sequence[int], locals: Sequence[ArrayLike], *,
           name: str = "nested") -> NestedStrategy:
    """The nested strategy with fan-outs (k_0..k_(L-1)), root first, and one local matrix
    S_d of shape (m_d, k_d) per depth, shared by every node of that depth (row order and
    sensitivities: :mod:`dptree_opt.strategies.nested`; docs/math.md section 12).

    ``fanouts``: integers >= 2 (n = their product bins). ``locals``: real finite
    matrices, any signs, any number of rows m_d >= 1; the deepest one of full column rank
    (so that the histogram is identified). ValueError naming the parameter otherwise.

    The binary tree over 4 bins (root, two children, four leaves) as a nested strategy:

    >>> import numpy as np
    >>> from dptree_opt.strategies.nested import nested
    >>> a = nested([2, 2], [[[1, 1], [1, 0], [0, 1]], np.eye(2)])
    >>> a.n_rows, a.n_bins, a.levels.tolist()
    (7, 4, [1, 1, 1, 2, 2, 2, 2])
    >>> a.apply(np.array([1.0, 2.0, 3.0, 4.0])).tolist()
    [10.0, 3.0, 7.0, 1.0, 2.0, 3.0, 4.0]
    >>> a.sensitivity(np.ones(7), "add_remove", 1), a.sensitivity(np.ones(7), "swap", 1)
    (3.0, 4.0)
    """
    return NestedStrategy(fanouts, locals, name=name)
