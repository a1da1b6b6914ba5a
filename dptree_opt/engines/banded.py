"""Banded lower-triangular strategies: the BLUE by forward substitution, exact errors in
O(n s^2) without an n x n matrix.

Setting: the released strategy is a :class:`~dptree_opt.strategies.banded.BandedStrategy` A
(n x n, A_ij = 0 unless 0 <= i - j < b, non-zero diagonal) and nothing else (no total row:
with a public N, or a measured total, the mechanism appends one and the generic engine
serves it); row i carries noise of finite variance v_i >= 0 (one scale for the strategy's
single level, or per-row budgets), V = diag(v).

BLUE. A is square and invertible, so the only unbiased linear estimate from y = A x + z is
x = A^-1 y (docs/math.md section 2), whatever V: forward substitution with the band, O(n b)
per trial (LAPACK's triangular band solver ``dtbtrs``, in compiled code, every trial at
once). Cov = A^-1 V A^-T, and a query w has Var = w' Cov w = ||V^(1/2) A^-T w||^2 (one back
substitution, O(n b)).

Exact errors: the block recursion. Cut the rows into blocks of s >= b - 1 consecutive
indices; then A is block lower-bidiagonal: diagonal blocks L_k (lower triangular) and
sub-diagonal blocks M_k (non-zero in their last b - 1 columns only). Forward substitution
reads x^_k = L_k^-1 (y_k - M_k x^_(k-1)), so the estimation error e_k = x^_k - x_k obeys

    e_k = L_k^-1 z_k - F_k e_(k-1),     F_k = L_k^-1 M_k,

with z_k independent of e_(k-1) (it enters no earlier block). Hence, exactly,

    C_kk = Cov(e_k) = G_k G_k' + F_k C_(k-1)(k-1) F_k',     G_k = L_k^-1 V_k^(1/2)
    C_kj = -F_k C_(k-1)j                                       (j < k)

(the selected-inversion recursion of Takahashi, Fagan & Chin 1973 for the band of an
inverse, here in covariance form). F_k only sees the last b - 1 rows of the previous block,
so each step costs O(s^3) and the diagonal of Cov costs O(n s^2) with s about
max(b - 1, 16) (fewer, larger steps for narrow bands), i.e. O(n b^2). The per-block solves
are independent (batched); only the (b - 1) x (b - 1) corners recurse, one step per block.
The diagonal of an inverse of a general banded matrix needs the band of Cov, hence
O(n b^2), not O(n b) (a Toeplitz strategy has O(n log n):
:mod:`dptree_opt.engines.toeplitz`).

* identity: Var(x_i) = C_ii.
* prefix: P A^-1 = (A D)^-1 with D = P^-1 the difference matrix (1 on the diagonal, -1
  below), and B = A D is again banded lower-triangular, with b + 1 bands:
  B[i, i - d] = A[i, i - d] - A[i, i - d + 1]. So the prefix covariance Q = P Cov P' =
  B^-1 V B^-T, and Var(prefix t) = Q_tt: the recursion on B.
* total: Var(1'x) = ||V^(1/2) A^-T 1||^2, one back substitution, O(n b).
* all_range [a, t] = prefix t minus prefix a - 1 (prefix -1 = 0): with U_0 = 0 and U_(t+1)
  the prefix rows, the total over all n(n+1)/2 ranges is sum_(i<j) ||U_j - U_i||^2 =
  (n + 1) sum_t Q_tt - 1'Q1, and 1'Q1 = ||V^(1/2) A^-T P'1||^2 with (P'1)_j = n - j: one
  back substitution. Per query: Var = Q_tt + Q_(a-1)(a-1) - 2 Q_t(a-1), which needs every
  Q_tj: the recursion's second line, block row by block row (Q_k. = -F_k Q_(k-1). on the
  last b rows before the block), O(n^2 s) time, O(n s) memory besides the n(n+1)/2 outputs
  (refused above 10^8 queries, as the output would be).

Cost: refused (so that the registry moves on) above MAX_BANDED_WORK ~ n s^2 (all-range per
query: n^2 s / 2), about a minute. Measured on 2 shared cores (load 2-4), banded square
root, one error: n = 2^20, b = 8 about 1 s; n = 2^20, b = 64 6-9 s; n = 2^16, b = 256
9-26 s; the total workload 0.1-1.6 s; per-query all-range at n = 14141 (10^8 ranges),
b = 8, 3.5 s; the BLUE at n = 2^20, b = 64, 100 trials 8 s.

Accuracy: the recursion adds positive semi-definite terms (no cancellation) for the
diagonals; the triangular solves are backward stable. Checked against the dense GLS
covariance to 1e-9 relative (tests/test_banded.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.linalg import lapack, solve_triangular

from ..limits import check_memory
from ..mechanism import Mechanism
from ..workloads import Workload
from ..strategies.banded import BandedStrategy
from .base import ANY_WORKLOAD, Capability, Engine
from .honaker import check_answers

__all__ = [
    "BANDED_WORKLOADS",
    "MAX_BANDED_WORK",
    "BandedEngine",
    "banded_blue",
    "banded_error",
]

BANDED_WORKLOADS = ("prefix", "identity", "total", "all_range")
# Error work (about n s^2 products; all-range per query n^2 s / 2): refused above this.
MAX_BANDED_WORK = 1 << 33
# Per-query all-range output: at most this many queries (as workloads.all_range.intervals).
_MAX_ALL_RANGE_QUERIES = 10**8
# Smallest block of the recursion (narrow bands: fewer, larger steps).
_MIN_BLOCK = 16
# Blocks of at least this size are solved one by one (triangular solver), smaller ones
# in batches (LU).
_TRSM_BLOCK = 128
# Floats of the blocks solved at once.
_GROUP_FLOATS = 1 << 22


def _block(n: int, bands: int) -> int:
    """Block size s >= bands - 1 of the recursion on a matrix with ``bands`` diagonals:
    about max(bands - 1, _MIN_BLOCK), evened out so that the last block is nearly full, or
    n (one block) when that costs less (n^3 against blocks x s^3)."""
    t = bands - 1
    s = max(t, _MIN_BLOCK)
    if s >= n:
        return n
    s = max(-(-n // -(-n // s)), t)  # n / blocks, rounded up, for as many blocks
    blocks = -(-n // s)
    return n if n**3 <= blocks * s**3 else s


def _work(n: int, bands: int, kind: str, per_query: bool) -> int:
    """Products the error costs, about (module docstring)."""
    if kind == "total":
        return n * bands
    s = _block(n, bands + 1)  # prefix and all-range recurse on B (b + 1 bands)
    if kind == "all_range" and per_query:
        return n * n * s // 2
    return n * s * s


def _lapack_band(diagonals: np.ndarray) -> np.ndarray:
    """LAPACK's lower band storage ab[d, j] = A[j + d, j] (shape (bands, n), Fortran order)
    from the row-aligned diagonals[i, d] = A[i, i - d]. O(n b)."""
    n, b = diagonals.shape
    ab = np.zeros((b, n), order="F")
    for d in range(b):  # one diagonal at a time, O(n) each
        ab[d, :n - d] = diagonals[d:, d]
    return ab


def _band_solve(diagonals: np.ndarray, rhs: np.ndarray, transpose: bool) -> np.ndarray:
    """A^-1 rhs (or A^-T rhs) for rhs of shape (n, r): ``dtbtrs``, O(n b r)."""
    x, info = lapack.dtbtrs(_lapack_band(diagonals), rhs, uplo="L",
                            trans="T" if transpose else "N")
    if info != 0:  # the diagonal is validated non-zero, so only a bad call gets here
        raise ValueError(f"the banded triangular solve failed (LAPACK info {info})")
    return x


def _difference_band(diagonals: np.ndarray) -> np.ndarray:
    """The diagonals of B = A D (D = P^-1: 1 on the diagonal, -1 below), min(b + 1, n) bands:
    B[i, i - d] = A[i, i - d] - A[i, i - d + 1] (0 where i - d < 0). O(n b)."""
    n, b = diagonals.shape
    out = np.zeros((n, b + 1))
    out[:, :b] = diagonals
    out[:, 1:] -= diagonals
    out[np.arange(n)[:, None] < np.arange(b + 1)[None, :]] = 0.0
    return out[:, :n]  # (b = n: the extra band lies left of column 0)


def _groups(diagonals: np.ndarray, v: np.ndarray,
            ) -> Iterator[tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    """The recursion's blocks (module docstring), a group of consecutive blocks at a time:
    yields (k0, F, G) with F = L_k^-1 M_k (g, s, t) (M_k: the last t = b - 1 columns of the
    sub-diagonal block; zero for the first block) and G = L_k^-1 V_k^(1/2) (g, s, s) for the
    blocks k0 .. k0 + g - 1. The rows are padded to a whole number of blocks with identity
    rows of variance 0 (later rows never change earlier ones). Batched LAPACK solves,
    O(s^2 (s + t)) per block; O(_GROUP_FLOATS) memory."""
    n, b = diagonals.shape
    s = _block(n, b)
    t = b - 1
    n_blocks = -(-n // s)
    i = np.arange(s)[:, None]
    off = np.concatenate([i + t - np.arange(t)[None, :],  # M_k's last t columns
                          i - np.arange(s)[None, :]], axis=1)  # L_k: offset i - j
    inside = (off >= 0) & (off < b)
    safe_off = np.where(inside, off, 0)
    eye = np.zeros(off.shape)
    eye[np.arange(s), t + np.arange(s)] = 1.0
    step = max(1, _GROUP_FLOATS // (s * (2 * s + t)))
    for k0 in range(0, n_blocks, step):
        k1 = min(n_blocks, k0 + step)
        rows = (np.arange(k0, k1) * s)[:, None, None] + i[None]  # (g, s, 1)
        real = rows < n
        a = np.where(inside & real, diagonals[np.minimum(rows, n - 1), safe_off], 0.0)
        a += np.where(real, 0.0, eye)  # padded rows: identity
        sd = np.sqrt(np.where(real[..., 0], v[np.minimum(rows[..., 0], n - 1)], 0.0))
        rhs = np.concatenate([a[:, :, :t], sd[:, :, None] * np.eye(s)[None]], axis=2)
        if s >= _TRSM_BLOCK:  # large blocks: the triangular solver, one block at a time
            sol = np.stack([solve_triangular(a[j, :, t:], rhs[j], lower=True,
                                             check_finite=False) for j in range(k1 - k0)])
        else:  # small blocks: one batched call (LU), far fewer Python steps
            sol = np.linalg.solve(a[:, :, t:], rhs)  # L_k^-1 [M_k, V_k^(1/2)]
        yield k0, sol[:, :, :t], sol[:, :, t:]


def _covariance_diagonal(diagonals: np.ndarray, v: np.ndarray) -> np.ndarray:
    """diag(A^-1 V A^-T) for a banded lower-triangular A (row-aligned diagonals) by the
    block recursion (module docstring): batched per-block solves, then the sequential
    recursion on the t x t corners only (t = b - 1). O(n s^2) time, O(n) memory."""
    n, b = diagonals.shape
    s, t = _block(n, b), b - 1
    n_blocks = -(-n // s)
    out = np.empty(n_blocks * s)
    corner = np.zeros((t, t))  # the last t x t corner of C_(k-1)(k-1)
    for k0, f, g in _groups(diagonals, v):
        diag = np.einsum("kij,kij->ki", g, g)  # diag(G G')
        if t:
            used = min(f.shape[0], n_blocks - 1 - k0)  # blocks whose corner a later one uses
            gc, fc = g[:used, s - t:, :], f[:used, s - t:, :]
            hc = gc @ gc.transpose(0, 2, 1)  # the corners of G G'
            before = np.empty((f.shape[0], t, t))
            for j in range(used):  # sequential: corner_k = Hc_k + Fc_k corner Fc_k'
                before[j] = corner
                corner = hc[j] + (fc[j] @ corner @ fc[j].T if k0 + j else 0.0)
            before[used:] = corner
            first = 1 if k0 == 0 else 0  # F = 0 on the first block
            diag[first:] += np.einsum("kij,kij->ki", f[first:] @ before[first:], f[first:])
        out[k0 * s:k0 * s + diag.size] = diag.ravel()
    return out[:n]


def _all_range_variances(diagonals_b: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Var of every range [a, t] (lexicographic a <= t) from the prefix covariance
    Q = B^-1 V B^-T (module docstring): block rows of Q by the recursion, each range ending
    in the block at once. O(n^2 s) time, O(n s) memory besides the output."""
    n, b = diagonals_b.shape
    s, t = _block(n, b), b - 1  # t >= 1: B has b >= 2 bands
    out = np.empty(n * (n + 1) // 2)
    qdiag = np.empty(n)
    prev = np.zeros((t, 0))  # the last t rows of the previous block row of Q
    corner = np.zeros((t, t))
    for k0, fs, gs in _groups(diagonals_b, v):
        for j in range(fs.shape[0]):
            f, g = fs[j], gs[j]
            r0 = (k0 + j) * s
            m = min(s, n - r0)
            r1 = r0 + m
            c = g @ g.T + f @ corner @ f.T  # C_kk
            full = np.concatenate([-(f @ prev), c], axis=1)  # Q[block rows, :r0 + s]
            row = full[:m, :r1]
            qdiag[r0:r1] = np.diag(c)[:m]
            # ranges [a, tt], tt in the block, a = 0 .. tt: Q_tt + Q_(a-1)(a-1) - 2 Q_t(a-1)
            tt = np.arange(r0, r1)[:, None]
            a = np.arange(r1)[None, :]
            valid = a <= tt
            prev_a = np.maximum(a - 1, 0)
            var = np.where(a > 0, qdiag[prev_a] - 2.0 * row[:, prev_a[0]], 0.0) + qdiag[tt]
            index = a * n - a * (a - 1) // 2 + (tt - a)  # the position of [a, tt]
            out[index[valid]] = var[valid]
            prev, corner = full[s - t:, :], c[s - t:, s - t:]
    return out


def _parameters(mechanism: Mechanism) -> tuple[np.ndarray, np.ndarray]:
    if not is_banded_mechanism(mechanism):
        raise ValueError("the banded paths need a mechanism releasing a BandedStrategy alone "
                         "(no total row), every row with a finite noise variance")
    strat = mechanism.released
    assert isinstance(strat, BandedStrategy)  # is_banded_mechanism checked it
    return strat.diagonals, np.asarray(mechanism.variances, dtype=float)


def is_banded_mechanism(mechanism: object) -> bool:
    """Whether ``mechanism`` releases a BandedStrategy and nothing else (no appended total
    row) with every row measured (finite variance)."""
    if not isinstance(mechanism, Mechanism) or not isinstance(mechanism.released,
                                                              BandedStrategy):
        return False
    strat = mechanism.released
    return strat.n_rows == strat.n_bins and bool(np.all(np.isfinite(mechanism.variances)))


def banded_blue(mechanism: Mechanism, y: ArrayLike) -> npt.NDArray[np.float64]:
    """The BLUE x = A^-1 y of the histogram, shape y.shape (y: (n,) or (trials, n)):
    forward substitution with the band, O(n b) per trial (module docstring)."""
    diagonals, _ = _parameters(mechanism)
    y = check_answers(mechanism, y)
    if not np.all(np.isfinite(y)):
        raise ValueError("y has NaN or infinite values")
    n = diagonals.shape[0]
    flat = y.reshape(-1, n)
    return _band_solve(diagonals, flat.T, transpose=False).T.reshape(y.shape)


def banded_error(mechanism: Mechanism, kind: str,
                 per_query: bool = False) -> float | npt.NDArray[np.float64]:
    """Exact BLUE error on the workload ``kind`` (BANDED_WORKLOADS): the total sum_q Var_q
    (float) or the per-query variances (workload order), counts^2 (module docstring).
    O(n s^2); total O(n b); per-query all-range O(n^2 s)."""
    if kind not in BANDED_WORKLOADS:
        raise ValueError(f"kind must be one of {BANDED_WORKLOADS}, got {kind!r}")
    diagonals, v = _parameters(mechanism)
    n = diagonals.shape[0]
    if kind == "total":  # ||V^(1/2) A^-T 1||^2
        z = _band_solve(diagonals, np.ones((n, 1)), transpose=True)[:, 0]
        total = float(v @ (z * z))
        return np.array([total]) if per_query else total
    if kind == "identity":
        var = _covariance_diagonal(diagonals, v)
        return var if per_query else float(var.sum())
    b_diag = _difference_band(diagonals)
    if kind == "prefix":
        var = _covariance_diagonal(b_diag, v)
        return var if per_query else float(var.sum())
    if per_query:  # all_range
        check_memory(8 * n * (n + 1) // 2, f"the variances of the {n * (n + 1) // 2} ranges",
                     "ask for the total (per_query=False)")
        return _all_range_variances(b_diag, v)
    q = _covariance_diagonal(b_diag, v)
    u = _band_solve(diagonals, (n - np.arange(n, dtype=float))[:, None], transpose=True)[:, 0]
    return (n + 1) * float(q.sum()) - float(v @ (u * u))


class BandedEngine(Engine):
    """Banded lower-triangular strategies (the banded square root, banded Toeplitz, any
    banded matrix), released alone: the BLUE by forward substitution, exact errors by the
    block recursion (module docstring)."""

    name = "banded"
    structure = "banded lower-triangular A (b bands), no total row"
    capabilities = (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n b) per trial"),
        Capability("error", "blue", BANDED_WORKLOADS,
                   f"O(n s^2), s = max(b, {_MIN_BLOCK}); total O(n b)"),
        Capability("per_query", "blue", BANDED_WORKLOADS,
                   f"O(n s^2), s = max(b, {_MIN_BLOCK}); all_range O(n^2 s)"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return is_banded_mechanism(mechanism)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        if task == "estimate" or workload is None:
            return None
        strat = mechanism.released
        assert isinstance(strat, BandedStrategy)  # claims(): is_banded_mechanism
        n, kind, per_query = strat.n_bins, workload.kind, task == "per_query"
        if kind == "all_range" and per_query and n * (n + 1) // 2 > _MAX_ALL_RANGE_QUERIES:
            return (f"all_range({n}) has {n * (n + 1) // 2} queries; per-query variances "
                    f"refused above {_MAX_ALL_RANGE_QUERIES}")
        work = _work(n, strat.bands, kind, per_query)
        if work > MAX_BANDED_WORK:
            return (f"the exact error costs about {work:.2g} products for {n} bins and "
                    f"{strat.bands} bands, above {MAX_BANDED_WORK:.2g}")
        return None

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        return banded_blue(mechanism, y)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        return banded_error(mechanism, workload.kind, per_query=per_query)
