"""Restarted strategies and the online (streaming) tree: the trees of DP-FTRL (Kairouz et al.
2021, "Practical and private (deep) learning without sampling or shuffling", Sec. 4 and
App. D; docs/math.md section 11).

* :func:`restarted` (:class:`RestartedStrategy`): a block strategy B over ``period`` steps
  restarted every ``period`` steps for n steps: A = diag(B, .., B, B_tail), block
  diagonal, kept implicit (products per copy, no n x n matrix). When ``period`` does not
  divide n the last copy is B truncated to the remaining r columns, rows that become
  empty dropped (a tree restarted each epoch with a shorter last epoch; for a
  level-uniform tree this is the truncated tree over r steps). Its levels are the block's
  (shifted up by one when the block has a root / total row at level 0 and there are two
  or more copies: level 0 is reserved for totals over every step), so per-level budgets
  keep their meaning.
* :func:`online_tree`: the k-ary tree that keeps only the nodes COMPLETED within n steps,
  [i k^l, (i + 1) k^l) with (i + 1) k^l <= n (the streaming binary mechanism, Kairouz et
  al.'s "TreeNoRestart"); an interval strategy (a forest when n is not a power of k).

Participation sensitivities (docs/math.md section 11): a restarted interval block (trees)
is itself a family of 0/1 interval rows, exact by
:func:`~dptree_opt.strategies.interval_participation.interval_sensitivity`; any other block
is exact when no block holds two participations (b >= period: the column norms over the
worst pattern), for fixed_epoch(k, b) with b < period by folding each block's Gram by
residues mod b (exact for non-negative Grams, else the certified sum-of-|X| bound), and
otherwise the generic rule.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..limits import check_memory
from ..participation import Participation, Sensitivity, max_linear
from ..validation import check_int, check_n
from .base import DENSE_GRAM_BINS, Strategy, frozen_csr, readonly
from .interval import IntervalStrategy
from .interval_participation import interval_sensitivity

__all__ = ["RestartedStrategy", "restarted", "online_tree", "truncate_block"]

_F = npt.NDArray[np.float64]
_I = npt.NDArray[np.int64]


def truncate_block(block: Strategy, r: int) -> tuple[Strategy, _I]:
    """(the block restricted to its first r columns with the rows that become empty
    dropped, the kept rows' indices in the block). An interval block stays an
    :class:`IntervalStrategy` (ranges clipped at r); any other block a sparse Strategy.
    O(rows) for interval blocks, O(nnz) otherwise."""
    r = check_int(r, "r", minimum=1, maximum=block.n_bins)
    if isinstance(block, IntervalStrategy):
        kept = np.flatnonzero(block.lo < r).astype(np.int64)
        if r == block.n_bins:
            kept = np.arange(block.n_rows, dtype=np.int64)
        new = np.full(block.n_rows, -1, dtype=np.int64)
        new[kept] = np.arange(kept.size)
        par = block.parent[kept]
        parent = np.where(par >= 0, new[np.maximum(par, 0)], -1)
        bin_row = block.bin_row[:r]
        tail = IntervalStrategy(block.lo[kept], np.minimum(block.hi[kept], r), parent,
                                block.levels[kept], n_bins=r, depth=block.depth[kept],
                                bin_row=np.where(bin_row >= 0, new[np.maximum(bin_row, 0)],
                                                 -1),
                                name=f"{block.name}[:{r}]")
        return tail, kept
    a = block.matrix[:, :r]
    kept = np.flatnonzero(np.diff(a.indptr) > 0).astype(np.int64)
    return Strategy(a[kept], block.levels[kept], name=f"{block.name}[:{r}]"), kept


class RestartedStrategy(Strategy):
    """The block strategy restarted every ``period = block.n_bins`` steps over n steps
    (module docstring). Rows: the block's rows for copy 0, copy 1, ..., then the kept rows
    of the truncated last copy (``tail``, with ``tail_rows`` their indices in the block)."""

    def __init__(self, block: Strategy, n: int, *, name: str | None = None) -> None:
        if not isinstance(block, Strategy):
            raise ValueError(f"block must be a dptree_opt Strategy, got {type(block).__name__}")
        if isinstance(block, RestartedStrategy):
            raise ValueError("block: restart the inner block itself (a restarted strategy "
                             "of a restarted strategy is one restart)")
        n = check_n(n)
        self.block = block
        self.period = int(block.n_bins)
        self.full_copies = n // self.period
        self.remainder = n - self.full_copies * self.period
        self.copies = self.full_copies + (1 if self.remainder else 0)
        self.tail: Strategy | None = None
        self.tail_rows: _I = np.zeros(0, dtype=np.int64)
        if self.remainder:
            self.tail, self.tail_rows = truncate_block(block, self.remainder)
        self.tail_rows = readonly(self.tail_rows)
        rows = self.full_copies * block.n_rows + self.tail_rows.size
        check_memory(16 * rows, f"a restarted strategy with {rows} rows", "use fewer steps")
        self._n_bins = n
        self.level_shift = int(self.copies > 1 and bool(np.any(block.levels == 0)))
        self._levels = readonly(np.concatenate(
            [np.tile(block.levels, self.full_copies), block.levels[self.tail_rows]]
        ).astype(np.int32) + self.level_shift)
        self.name = name or f"restarted({block.name}, every {self.period} of {n})"
        self._check_level_zero()

    def __repr__(self) -> str:
        return (f"<RestartedStrategy {self.block.name!r} every {self.period} steps: "
                f"{self.n_rows} rows x {self.n_bins} bins>")

    @cached_property
    def matrix(self) -> sp.csr_matrix:
        """A = diag(B, .., B, B_tail) as CSR (canonical, read-only), built on first use
        (size checked first)."""
        parts = [self.block.matrix] * self.full_copies
        if self.tail is not None:
            parts.append(self.tail.matrix)
        nnz = sum(int(p.nnz) for p in parts)
        check_memory(12 * nnz + 8 * self.n_rows, f"the explicit matrix of {self.name!r} "
                     f"({nnz} nonzeros)", "use the structured paths (apply, the engines)")
        return frozen_csr(sp.block_diag(parts, format="csr"), copy=False)

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """Rows equal to the all-ones vector over every step: only with one copy."""
        if self.copies > 1:
            return np.zeros(self.n_rows, dtype=bool)
        return (self.tail if self.tail is not None else self.block).total_row_mask()

    # ------------------------------------------------------------- products
    def _blocks_in(self, x: _F) -> _F:
        """x (n, r) as (period, copies * r): column j * r + c = copy j of column c,
        zero-padded past n."""
        r = x.shape[1]
        pad = np.zeros((self.copies * self.period, r))
        pad[:self.n_bins] = x
        return pad.reshape(self.copies, self.period, r).transpose(1, 0, 2).reshape(
            self.period, self.copies * r)

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r): the block's product on every copy at once
        (the truncated copy on zero-padded steps), no matrix."""
        x = np.asarray(x, dtype=float)
        flat = x.reshape(x.shape[0], -1)
        if flat.shape[0] != self.n_bins:
            raise ValueError(f"x must have {self.n_bins} rows, got shape {x.shape}")
        r = flat.shape[1]
        y = np.asarray(self.block.apply(self._blocks_in(flat)))           # (m_b, copies r)
        y = y.reshape(self.block.n_rows, self.copies, r).transpose(1, 0, 2)
        out = y[:self.full_copies].reshape(-1, r)
        if self.tail is not None:
            out = np.concatenate([out, y[-1][self.tail_rows]])
        return out.reshape((self.n_rows,) + x.shape[1:])

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u for u of shape (m,) or (m, r): the block's transpose on every copy."""
        u = np.asarray(u, dtype=float)
        if u.shape[:1] != (self.n_rows,):
            raise ValueError(f"u must have {self.n_rows} rows, got shape {u.shape}")
        flat = u.reshape(self.n_rows, -1)
        r, mb = flat.shape[1], self.block.n_rows
        blocks = np.zeros((self.copies, mb, r))
        blocks[:self.full_copies] = flat[:self.full_copies * mb].reshape(-1, mb, r)
        if self.tail is not None:
            blocks[-1, self.tail_rows] = flat[self.full_copies * mb:]
        x = np.asarray(self.block.rmatvec(blocks.transpose(1, 0, 2).reshape(mb, -1)))
        x = x.reshape(self.period, self.copies, r).transpose(1, 0, 2).reshape(-1, r)
        return x[:self.n_bins].reshape((self.n_bins,) + u.shape[1:])

    # ---------------------------------------------------------- sensitivity
    def copy_weights(self, w: _F) -> tuple[_F, _F] | None:
        """(the full copies' row weights, the tail's) when every full copy has the same
        weights (per-level budgets), else None."""
        mb = self.block.n_rows
        full = w[:self.full_copies * mb].reshape(self.full_copies, mb)
        if self.full_copies and not np.all(full == full[0]):
            return None
        return (full[0] if self.full_copies else np.zeros(mb)), w[self.full_copies * mb:]

    def sensitivity(self, weights: ArrayLike, neighbours: str, norm: int) -> float:
        """Exact loss (docs/math.md section 0): with the same weights on every full copy
        from the block's own (and the tail's) losses: add/remove the largest; swap the
        larger of a swap inside one copy and the two largest add/remove losses of two
        copies combined in the p-norm (their rows are disjoint); else the generic rule."""
        w = self._check_weights(weights)
        split = self.copy_weights(w)
        if split is None:
            return super().sensitivity(w, neighbours, norm)
        wb, wt = split
        parts: list[tuple[Strategy, _F]] = []
        if self.full_copies:
            parts.append((self.block, wb))
        if self.tail is not None:
            parts.append((self.tail, wt))
        add = [s.sensitivity(ws, "add_remove", norm) for s, ws in parts]
        if neighbours == "add_remove":
            return float(max(add))
        inside = max(s.sensitivity(ws, "swap", norm) for s, ws in parts)
        tops = sorted([add[0]] * min(self.full_copies, 2)
                      + ([add[-1]] if self.tail is not None else []))[-2:]
        across = float(np.linalg.norm(tops, ord=norm)) if len(tops) == 2 else 0.0
        return float(max(inside, across))

    def _participation_loss(self, w: _F, part: Participation, p: int) -> Sensitivity:
        if isinstance(self.block, IntervalStrategy):
            lo, hi, depth = self._interval_rows()
            return interval_sensitivity(lo, hi, w, self.n_bins, part, p, depth)
        if p == 1 or self.n_bins <= DENSE_GRAM_BINS:
            return super()._participation_loss(w, part, p)
        wa = sp.diags(w) @ self.matrix
        col2 = np.asarray(wa.multiply(wa).sum(axis=0)).ravel()
        if part.b >= self.period:  # no block holds two participations
            return Sensitivity(math.sqrt(float(max_linear(col2, part))), True,
                               "one participation per restarted block: squared column "
                               "norms over the worst pattern")
        split = self.copy_weights(w)
        if (part.kind == "fixed_epoch" and split is not None
                and self.period <= DENSE_GRAM_BINS):
            return self._fixed_epoch_fold(split, part)
        return super()._participation_loss(w, part, p)

    def _interval_rows(self) -> tuple[_I, _I, _I]:
        """(lo, hi, depth) of every row of a restarted interval block."""
        blk = self.block
        assert isinstance(blk, IntervalStrategy)
        off = (np.arange(self.full_copies, dtype=np.int64) * self.period)[:, None]
        lo = [(blk.lo[None, :] + off).ravel()]
        hi = [(blk.hi[None, :] + off).ravel()]
        depth = [np.tile(blk.depth, self.full_copies)]
        if self.tail is not None:
            assert isinstance(self.tail, IntervalStrategy)
            start = self.full_copies * self.period
            lo.append(self.tail.lo + start)
            hi.append(self.tail.hi + start)
            depth.append(self.tail.depth)
        return np.concatenate(lo), np.concatenate(hi), np.concatenate(depth)

    def _fixed_epoch_fold(self, split: tuple[_F, _F], part: Participation) -> Sensitivity:
        """fixed_epoch(k, b), b < period, same weights on every full copy: each block's
        Gram folded by residues mod b (G[r] = sum of X_ii' over i = i' = r mod b, local
        indices), shifted by each copy's first step: O(period^2 + copies b)."""
        b = part.b
        total = np.zeros(b)
        signed = False
        pieces: list[tuple[Strategy, _F, _I]] = []
        if self.full_copies:
            pieces.append((self.block, split[0],
                           np.arange(self.full_copies, dtype=np.int64) * self.period))
        if self.tail is not None:
            pieces.append((self.tail, split[1],
                           np.array([self.full_copies * self.period], dtype=np.int64)))
        for strat, wt, starts in pieces:
            wa = sp.diags(wt) @ strat.matrix
            x = (wa.T @ wa).toarray()
            signed |= bool(np.any(x < 0))
            res = np.arange(strat.n_bins) % b
            same = res[:, None] == res[None, :]
            fold = np.bincount(np.broadcast_to(res[:, None], x.shape)[same],
                               np.abs(x)[same], minlength=b)
            o = np.arange(b)
            total += fold[(o[None, :] - starts[:, None]) % b].sum(axis=0)
        value = math.sqrt(max(float(total.max()), 0.0))
        if signed:
            return Sensitivity(value, False, "upper bound: sum of |X| over the worst offset "
                               "(restarted blocks folded by residues; mixed signs)")
        return Sensitivity(value, True, "restarted blocks: Gram folded by residues mod b, "
                           "the worst offset (non-negative Gram)")


def restarted(block: Strategy, n: int) -> RestartedStrategy:
    """The ``block`` strategy (over period = block.n_bins steps) restarted every period
    steps for n steps: block diagonal copies, the last one truncated when period does not
    divide n (module docstring; Kairouz et al. 2021's tree with restarts).

    >>> from dptree_opt import strategies as S
    >>> A = restarted(S.binary_tree(4), 10)
    >>> A.n_rows, A.n_bins, A.copies
    (18, 10, 3)
    """
    return RestartedStrategy(block, n)


def online_tree(n: int, k: int = 2) -> IntervalStrategy:
    """The k-ary tree over n steps that keeps only the nodes completed within n steps:
    [i k^l, (i + 1) k^l) with (i + 1) k^l <= n, l = 0..L, L = max{l : k^l <= n} (Kairouz et
    al. 2021's TreeNoRestart; the rows a streaming tree counter releases). Rows widest
    first, left to right; a node's parent is the completed node one level up containing it
    (-1 if none: a forest when n is not a power of k). Budget levels: L - l when k^L = n
    (the root is the total, level 0), else L - l + 1. O(rows).

    >>> t = online_tree(6)
    >>> [(int(a), int(b)) for a, b in zip(t.lo, t.hi)][:3]
    [(0, 4), (0, 2), (2, 4)]
    """
    n = check_n(n)
    k = check_int(k, "k", minimum=2)
    widths = [1]
    while widths[-1] * k <= n:
        widths.append(widths[-1] * k)
    top = len(widths) - 1
    shift = 0 if widths[-1] == n else 1
    counts = [n // w for w in widths[::-1]]                # widest level first
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    lo_parts, hi_parts, par_parts, lvl_parts = [], [], [], []
    for d, (w, c) in enumerate(zip(widths[::-1], counts)):
        i = np.arange(c, dtype=np.int64)
        lo_parts.append(i * w)
        hi_parts.append((i + 1) * w)
        if d:
            pi = i // k
            par_parts.append(np.where(pi < counts[d - 1], offsets[d - 1] + pi, -1))
        else:
            par_parts.append(np.full(c, -1, dtype=np.int64))
        lvl_parts.append(np.full(c, d + shift, dtype=np.int32))
    parent = np.concatenate(par_parts)
    depth = np.zeros(parent.size, dtype=np.int64)
    for d in range(1, top + 1):   # one vectorised step per level: depth = parent's + 1
        sl = slice(int(offsets[d]), int(offsets[d + 1]))
        par = parent[sl]
        depth[sl] = np.where(par >= 0, depth[np.maximum(par, 0)] + 1, 0)
    return IntervalStrategy(np.concatenate(lo_parts), np.concatenate(hi_parts), parent,
                            np.concatenate(lvl_parts), n_bins=n, depth=depth,
                            bin_row=offsets[top] + np.arange(n),
                            name=f"online_tree({n}, k={k})")
