"""Lower-triangular Toeplitz strategies, exact without a matrix (FFT products, O(n) / O(n log n)
sensitivities).

A = T(a) is the n x n lower-triangular Toeplitz matrix with first column a (a_0 != 0):
A_ij = a_(i-j) for i >= j, 0 otherwise. It is the matrix of "multiply by the power series
a(z) = sum_k a_k z^k, truncated at z^n": A x = first n coefficients of a(z) x(z). Products
and inverses of such matrices are products and inverses of power series (mod z^n):

    T(a) T(b) = T(a b mod z^n),       T(a)^-1 = T(1 / a(z) mod z^n).

So A x is a convolution (FFT, O(n log n)), and A^-1 is the Toeplitz matrix of the power-series
inverse, computed by Newton's iteration b <- b (2 - a b) (mod z^(2m)), which doubles the
number of correct coefficients per step: O(n log n) with FFT products (Brent 1976; e.g. von zur
Gathen & Gerhard, "Modern Computer Algebra", Sec. 9.1). Examples: the prefix matrix is
T(1 / (1 - z)); the square-root factorisation is T((1 - z)^(-1/2))
(:mod:`dptree_opt.strategies.factorization`).

Sensitivity (docs/math.md section 0) with equal weight u on the n Toeplitz rows (and weights t_r on
optional exact all-ones total rows). Column j of A is (a_0..a_(n-1-j)) shifted down by j, a
prefix of a, so with S_p(m) = sum_(k<m) |a_k|^p:

    add/remove:  l1 = u S_1(n) + sum_r t_r,   l2 = sqrt(u^2 S_2(n) + sum_r t_r^2)   (column 0)

Swap (the totals cancel): columns j < l = j + D differ by a_0..a_(D-1) on rows j..l-1 and by
a_(k+D) - a_k (k = 0..n-1-l) on rows l..n-1. The second sum only grows as j decreases, so for
every gap D the pair (0, D) is worst, for ANY coefficients:

    swap^p = u^p max_(1<=D<n) g_p(D),   g_p(D) = S_p(D) + sum_(k<n-D) |a_(k+D) - a_k|^p.

* p = 2: g_2(D) = S_2(n) + S_2(n - D) - 2 r(D) with the autocorrelation
  r(D) = sum_(k<n-D) a_k a_(k+D): O(n log n) by FFT (direct O(n^2) for n <= 4096).
* p = 1, a monotone (non-increasing or non-decreasing, any signs): every difference
  a_(k+D) - a_k has one sign, so the sum telescopes:
  g_1(D) = S_1(D) + |(A(n) - A(D)) - A(n - D)| with A(m) = sum_(k<m) a_k: O(n).
  (For positive decreasing a this is factorization.py's 2 S_1(D) + S_1(n - D) - S_1(n).)
* p = 1, general a: g_1(D) directly, O(n^2) (vectorised per gap); refused above
  MAX_GENERAL_L1_SWAP_BINS bins rather than approximated.

Non-uniform weights on the Toeplitz rows use the generic exact search of
:class:`~dptree_opt.strategies.base.Strategy` on ``.matrix`` (n <= MAX_MATRIX_BINS only).

Multiple participations (docs/math.md section 11; :func:`toeplitz_participation_sensitivity`),
equal weight u on the Toeplitz rows, weights t_r on the total rows. The Gram matrix is
X_(s,t) = u^2 Q_(|t-s|)(n - max(s, t)) + sum_r t_r^2 with the truncated autocorrelation
Q_D(L) = sum_(m<L) a_m a_(m+D). For a pattern P, sum X_PP = u^2 ||T(a) 1_P||^2 + |P|^2 sum t_r^2.

* a_m = 0 for m >= b (banded, bands <= b, any signs): a pattern's columns are orthogonal
  (the totals add k'^2 sum t_r^2) and column j has squared norm S_2(min(bands, n - j)),
  non-increasing in j: the pattern 0, b, 2b, ... is the worst, exact.
* a >= 0 and non-increasing (the square root, BLT, BISR): X >= 0, and X_(s,t) only grows
  when max(s, t) or |t - s| shrinks, so the pattern t_1 < ... < t_j is dominated entrywise by
  0, b, ..., (j - 1) b, and every min-sep pattern by P_0 = {0, b, ..., (k' - 1) b} with k' the
  most participations that fit: sens^2 = u^2 ||T(a) 1_(P_0)||^2 + k'^2 sum t_r^2, one FFT
  product, O(n log n) (Kalinin & Lampert, "Banded square root matrix factorization for
  differentially private model training", 2024, arXiv 2405.13763, Thm. 2).
* fixed epoch, a >= 0 (any order): T(a) 1_(P_o) is T(a) 1_(P_0) shifted down by o and
  truncated, so the offset o = 0 is the worst: the same formula, exact.
* fixed epoch, mixed signs: the k x k blocks of every offset from k cumulative sums
  (O(k n)), then the sign enumeration / ``|X|`` bound of docs/math.md section 11.
* min sep otherwise: the majorant a^ = (suffix maximum of ``|a|``) is non-negative and
  non-increasing with ``|X_ij|`` <= X^_ij, so the formula on a^ is a certified upper bound
  (jax_privacy's ``minsep_sensitivity_squared``); for n <= MAX_DENSE_PARTICIPATION_BINS the
  dense Gram (every pattern enumerated when few, else the row bound) when tighter.
* l1: column j has l1 norm u S_1(n - j) + sum_r t_r, non-increasing in j: the dynamic
  programme of :func:`~dptree_opt.participation.column_norms_sensitivity`.
"""

from __future__ import annotations

import copy
import math
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.fft as sfft
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..participation import (
    Participation,
    Sensitivity,
    column_norms_sensitivity,
    gram_sensitivity,
    offset_blocks_sensitivity,
)
from ..validation import check_int
from .base import Strategy, frozen_csr, readonly

__all__ = [
    "MAX_DENSE_PARTICIPATION_BINS",
    "MAX_GENERAL_L1_SWAP_BINS",
    "MAX_MATRIX_BINS",
    "ScaledToeplitzStrategy",
    "ToeplitzStrategy",
    "series_inverse",
    "series_multiply",
    "toeplitz",
    "toeplitz_gram",
    "toeplitz_participation_sensitivity",
    "toeplitz_swap_sensitivity",
]

# ``.matrix`` (a CSR with n(n+1)/2 nonzeros) is built only up to this many bins.
MAX_MATRIX_BINS = 8192
# The general (non-monotone) l1 swap sensitivity is O(n^2): refused above this size.
MAX_GENERAL_L1_SWAP_BINS = 1 << 15
# Below this length products use direct convolution (exact summation order, faster).
_DIRECT_CONV = 64
_DIRECT_AUTOCORR = 4096
# Participation sensitivities: the dense Gram (n^2 floats, a few copies) up to this many
# steps; the fixed-epoch blocks (k n floats) up to _BLOCK_ENTRIES.
MAX_DENSE_PARTICIPATION_BINS = 2048
_BLOCK_ENTRIES = 1 << 24

_F: TypeAlias = "npt.NDArray[np.float64]"


def check_coefficients(coefficients: ArrayLike) -> _F:
    """Validate a first column a: 1-D, non-empty, finite, a_0 != 0 (float64 copy, read-only)."""
    try:
        a = np.array(coefficients, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("coefficients must be a 1-D array of numbers") from None
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"coefficients must be a non-empty 1-D array, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("coefficients must be finite (no NaN or inf)")
    if a[0] == 0.0:
        raise ValueError("coefficients[0] (the diagonal a_0) must be non-zero: "
                         "otherwise the Toeplitz strategy is singular")
    return readonly(a)


def series_multiply(a: ArrayLike, x: ArrayLike, n: int | None = None) -> _F:
    """First ``n`` coefficients of a(z) x(z) along the LAST axis of ``x`` (batched).

    = T(a) x for x of length n. FFT convolution, O(n log n) (direct for short a or x); the
    rounding error is of order 1e-16 ||a||_2 ||x||_2 per coefficient."""
    a = np.asarray(a, dtype=float)
    x = np.asarray(x, dtype=float)
    if n is None:
        n = x.shape[-1]
    la, lx = min(a.size, n), min(x.shape[-1], n)
    a, x = a[:la], x[..., :lx]
    out_shape = x.shape[:-1] + (n,)
    if la == 0 or lx == 0:
        return np.zeros(out_shape)
    if min(la, lx) <= _DIRECT_CONV and x.ndim == 1:
        out = np.convolve(a, x)[:n]
    else:
        size = sfft.next_fast_len(la + lx - 1, real=True)
        fa = sfft.rfft(a, size)
        fx = sfft.rfft(x, size, axis=-1)
        out = sfft.irfft(fa * fx, size, axis=-1)[..., :n]
    if out.shape[-1] < n:
        out = np.concatenate([out, np.zeros(out.shape[:-1] + (n - out.shape[-1],))], axis=-1)
    return out


def series_inverse(a: ArrayLike, n: int | None = None) -> _F:
    """The first ``n`` coefficients of 1 / a(z) (a_0 != 0): the first column of T(a)^-1.

    Newton's iteration b_(2m) = b_m - b_m (a b_m - 1) mod z^(2m) (module docstring): each
    step costs two FFT products of length <= 2m, O(n log n) in all. Accurate to rounding (the
    residual a b - 1 is recomputed at every doubling); checked against dense inverses."""
    a = check_coefficients(a)
    n = a.size if n is None else int(n)
    b = np.array([1.0 / a[0]])
    m = 1
    while m < n:
        m2 = min(2 * m, n)
        e = series_multiply(a[:m2], b, m2)  # a b mod z^m2 = 1 + O(z^m)
        corr = series_multiply(b, e[m:m2], m2 - m)  # (b (a b - 1)) / z^m mod z^(m2 - m)
        b = np.concatenate([b, -corr])
        m = m2
    return b[:n]


def _cross_correlation(x: _F, y: _F) -> _F:
    """c[j] = sum_k x_k y_(k+j), j = 0..n-1 (x, y of length n): FFT, O(n log n)."""
    n = x.size
    if n <= _DIRECT_AUTOCORR:
        return np.correlate(y, x, mode="full")[n - 1:]
    size = sfft.next_fast_len(2 * n - 1, real=True)
    return sfft.irfft(sfft.rfft(y, size) * np.conj(sfft.rfft(x, size)), size)[:n]


def toeplitz_swap_sensitivity(a: ArrayLike, p: int) -> float:
    """Unit-weight swap sensitivity max_(a != b) ||A_:a - A_:b||_p of T(a) (module docstring).

    p = 2: O(n log n) (FFT autocorrelation; direct for n <= 4096). p = 1: O(n) when a is
    monotone, O(n^2) otherwise (ValueError above MAX_GENERAL_L1_SWAP_BINS bins)."""
    a = np.asarray(a, dtype=float)
    n = a.size
    if n <= 1:
        return 0.0
    d = np.arange(1, n)
    if p == 2:
        s2 = np.concatenate([[0.0], np.cumsum(a * a)])
        r = _cross_correlation(a, a)[1:]  # r(D) for D = 1..n-1
        g = s2[n] + s2[n - d] - 2.0 * r
        return math.sqrt(max(float(g.max()), 0.0))
    if p != 1:
        raise ValueError(f"norm must be 1 or 2, got {p!r}")
    s1 = np.concatenate([[0.0], np.cumsum(np.abs(a))])
    diff = np.diff(a)
    if np.all(diff >= 0) or np.all(diff <= 0):  # telescoping sums, O(n)
        sa = np.concatenate([[0.0], np.cumsum(a)])
        return float(np.max(s1[d] + np.abs((sa[n] - sa[d]) - sa[n - d])))
    if n > MAX_GENERAL_L1_SWAP_BINS:
        raise ValueError(
            f"the exact l1 swap sensitivity of a non-monotone Toeplitz strategy costs O(n^2): "
            f"refused for n = {n} > {MAX_GENERAL_L1_SWAP_BINS} bins")
    best = 0.0
    for gap in range(1, n):  # O(n - gap) per gap, O(n^2) in all
        best = max(best, s1[gap] + float(np.abs(a[gap:] - a[: n - gap]).sum()))
    return best


def toeplitz_gram(a: ArrayLike) -> _F:
    """The dense Gram X = T(a)'T(a), shape (n, n): ``X_(s,t) = Q_(|t-s|)(n - max(s, t))`` with
    Q_D(L) = sum_(m<L) a_m a_(m+D) (module docstring), O(n^2) time and memory (no
    O(n^3) product); for small n only (n <= MAX_DENSE_PARTICIPATION_BINS)."""
    a = np.asarray(a, dtype=float)
    n = a.size
    if n > MAX_DENSE_PARTICIPATION_BINS:
        raise ValueError(f"the dense Gram of a Toeplitz strategy over {n} steps is refused "
                         f"(limit {MAX_DENSE_PARTICIPATION_BINS})")
    padded = np.concatenate([a, np.zeros(n)])
    shifted = np.lib.stride_tricks.sliding_window_view(padded, n)[:n]  # [D, m] = a_(m+D)
    q = np.cumsum(shifted * a[None, :], axis=1)                       # q[D, L-1] = Q_D(L)
    s, t = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return q[np.abs(t - s), n - 1 - np.maximum(s, t)]


def _pattern_gram_sum(a: _F, n: int, b: int, count: int) -> float:
    """||T(a) 1_P||^2 for P = {0, b, ..., (count - 1) b}: one FFT product."""
    ind = np.zeros(n)
    ind[b * np.arange(count)] = 1.0
    y = series_multiply(a, ind)
    return float(y @ y)


def _fixed_epoch_blocks(a: _F, part: Participation, u: float, t2: float) -> _F:
    """blocks[o, i, j] = X_(o + i b, o + j b) = u^2 Q_((j-i) b)(n - o - j b) + t2 for i <= j
    (symmetric), from k cumulative sums: O(k n)."""
    k, b = int(part.k or 1), part.b
    n = k * b
    blocks = np.empty((b, k, k))
    o = np.arange(b)
    for m in range(k):                       # lag D = m b
        d = m * b
        q = np.cumsum(a[:n - d] * a[d:])     # q[L - 1] = Q_D(L)
        for i in range(k - m):
            j = i + m
            val = u * u * q[n - 1 - o - j * b] + t2
            blocks[:, i, j] = val
            blocks[:, j, i] = val
    return blocks


def toeplitz_participation_sensitivity(a: ArrayLike, part: Participation, p: int, *,
                                       weight: float = 1.0,
                                       totals: ArrayLike = ()) -> Sensitivity:
    """Sensitivity of u T(a) (plus all-ones total rows with weights ``totals``) under a
    participation schema (module docstring, docs/math.md section 11): exact for l1 vector
    contributions, for l2 when a >= 0 is non-increasing (min sep, O(n log n)) or a >= 0
    (fixed epoch), for fixed-epoch mixed signs by the sign enumeration when small; otherwise
    a certified upper bound (``exact=False``). ``part`` must not be single and must fit the
    n = len(a) steps."""
    a = np.asarray(a, dtype=float)
    n = part.check_steps(a.size)
    u = float(weight)
    tot = np.asarray(totals, dtype=float)
    t1, t2 = float(tot.sum()), float(np.sum(tot * tot))
    nonneg = bool(np.all(a >= 0))
    if p == 1:
        s1 = np.concatenate([[0.0], np.cumsum(np.abs(a))])
        norms = u * s1[n - np.arange(n)] + t1
        return column_norms_sensitivity(norms, part, 1, nonnegative=nonneg)
    kmax = part.max_participations(n)
    if kmax == 1:  # one column: the largest, column 0 (u^2 S_2(n) + sum_r t_r^2)
        return Sensitivity(math.sqrt(u * u * float(a @ a) + t2), True, "largest column norm")
    width = int(np.flatnonzero(a)[-1]) + 1          # a_0 != 0
    if width <= part.b:  # banded within b: a pattern's columns are orthogonal
        s2 = np.concatenate([[0.0], np.cumsum(a * a)])
        ends = np.minimum(width, n - part.b * np.arange(kmax))
        value = u * u * float(s2[ends].sum()) + kmax * kmax * t2
        return Sensitivity(math.sqrt(value), True, "banded Toeplitz with bands <= b: squared "
                           "column norms over the pattern 0, b, 2b, ...")
    if nonneg and (part.kind == "fixed_epoch" or np.all(np.diff(a) <= 0)):
        value = u * u * _pattern_gram_sum(a, n, part.b, kmax) + kmax * kmax * t2
        how = ("fixed epoch, non-negative Toeplitz: the offset 0 pattern"
               if part.kind == "fixed_epoch" else
               "non-negative non-increasing Toeplitz: the pattern 0, b, 2b, ... "
               "(Kalinin & Lampert 2024, Thm. 2)")
        return Sensitivity(math.sqrt(value), True, how)
    if part.kind == "fixed_epoch" and kmax * n <= _BLOCK_ENTRIES:
        return offset_blocks_sensitivity(_fixed_epoch_blocks(a, part, u, t2), part)
    hat = np.maximum.accumulate(np.abs(a)[::-1])[::-1]
    bound = math.sqrt(u * u * _pattern_gram_sum(hat, n, part.b, kmax) + kmax * kmax * t2)
    majorant = Sensitivity(bound, False, "upper bound: the non-increasing majorant of |a| "
                           "over the pattern 0, b, 2b, ...")
    if n > MAX_DENSE_PARTICIPATION_BINS:
        return majorant
    dense = gram_sensitivity(u * u * toeplitz_gram(a) + t2, part)
    return dense if dense.exact or dense.value <= bound else majorant


class ToeplitzStrategy(Strategy):
    """Lower-triangular Toeplitz strategy T(a), no matrix stored (module docstring).

    Rows 0..n-1 are T(a) at budget level 1; ``n_totals`` extra rows (from ``with_total_row``)
    are all-ones total rows at level 0 (released exactly when N is public). ``apply`` is an
    FFT product, ``solve`` the power-series inverse; sensitivities are exact closed forms for
    equal weights on the Toeplitz rows. ``.matrix`` is built on request for n <= 8192 only.

    Parameters
    ----------
    coefficients : array-like, shape (n,)
        The first column a_0..a_(n-1) (finite, a_0 != 0).
    n_totals : int
        Number of all-ones total rows appended at level 0.
    name : str
        Label for printed tables.
    """

    def __init__(self, coefficients: ArrayLike, *, n_totals: int = 0,
                 name: str = "toeplitz") -> None:
        a = check_coefficients(coefficients)
        n_totals = check_int(n_totals, "n_totals", 0)
        n = int(a.size)
        self._a = a
        self._n_bins = n
        self._n_core = n
        self._n_totals = int(n_totals)
        self._levels = readonly(np.concatenate([np.ones(n, dtype=np.int32),
                                                 np.zeros(self._n_totals, dtype=np.int32)]))
        self._lazy_matrix: sp.csr_matrix | None = None
        self._inverse: _F | None = None
        self.name = name

    # ------------------------------------------------------------- basics
    @property
    def coefficients(self) -> _F:
        """a_0..a_(n-1), the first column (read-only)."""
        return self._a

    @property
    def n_totals(self) -> int:
        """Number of appended all-ones total rows (level 0)."""
        return self._n_totals

    @property
    def matrix(self) -> sp.csr_matrix:
        """A as CSR (n(n+1)/2 nonzeros at most; canonical, read-only), built on first
        request; n <= 8192 only."""
        if self._lazy_matrix is None:
            n = self._n_bins
            if n > MAX_MATRIX_BINS:
                raise ValueError(
                    f"the Toeplitz strategy's explicit matrix has n(n+1)/2 nonzeros: refused for "
                    f"{n} > {MAX_MATRIX_BINS} bins (use apply / solve / the structured paths)")
            i, j = np.tril_indices(n)
            vals = self._a[i - j]
            keep = vals != 0
            core = sp.csr_matrix((vals[keep], (i[keep], j[keep])), shape=(n, n))
            rows = [core] + [sp.csr_matrix(np.ones((1, n)))] * self._n_totals
            self._lazy_matrix = frozen_csr(sp.vstack(rows, format="csr"), copy=False)
        return self._lazy_matrix

    def __repr__(self) -> str:
        return f"<ToeplitzStrategy {self.name}: {self.n_rows} rows x {self.n_bins} bins>"

    def total_row_mask(self) -> npt.NDArray[np.bool_]:
        """All-ones rows: the appended totals, and row n-1 of T(a) when every a_k == 1. O(n)."""
        mask = np.zeros(self.n_rows, dtype=bool)
        mask[self._n_core:] = True
        mask[self._n_core - 1] = bool(np.all(self._last_row_scale() * self._a == 1.0))
        return mask

    def _last_row_scale(self) -> float:
        """The scaling of row n-1 (1 for T(a); d_(n-1) for a row scaling D T(a))."""
        return 1.0

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r): the FFT product, then the totals. O(n log n)."""
        x = np.asarray(x, dtype=float)
        if x.shape[:1] != (self._n_bins,):
            raise ValueError(f"x must have {self._n_bins} rows, got shape {x.shape}")
        core = np.moveaxis(series_multiply(self._a, np.moveaxis(x, 0, -1)), -1, 0)
        if not self._n_totals:
            return core
        tot = np.broadcast_to(x.sum(axis=0), (self._n_totals,) + x.shape[1:])
        return np.concatenate([core, tot], axis=0)

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u for u of shape (rows,) or (rows, r). The transpose of T(a) reverses both
        index orders: A'u = reverse(T(a) reverse(u)); total rows add their answers. O(n log n)."""
        u = np.asarray(u, dtype=float)
        if u.shape[:1] != (self.n_rows,):
            raise ValueError(f"u must have {self.n_rows} rows, got shape {u.shape}")
        n = self._n_bins
        rev = np.moveaxis(u[n - 1::-1] if n > 0 else u[:0], 0, -1)
        out = np.moveaxis(series_multiply(self._a, rev), -1, 0)[::-1]
        if self._n_totals:
            out = out + u[n:].sum(axis=0)
        return np.ascontiguousarray(out)

    def inverse_coefficients(self) -> _F:
        """First column of A^-1 (the power series 1 / a(z) mod z^n), cached. O(n log n)."""
        if self._inverse is None:
            self._inverse = readonly(series_inverse(self._a))
        return self._inverse

    def solve(self, y: ArrayLike) -> _F:
        """A^-1 y for y of shape (n,) or (n, r) (the Toeplitz rows only). O(n log n)."""
        y = np.asarray(y, dtype=float)
        if y.shape[:1] != (self._n_bins,):
            raise ValueError(f"y must have {self._n_bins} rows, got shape {y.shape}")
        return np.moveaxis(series_multiply(self.inverse_coefficients(),
                                           np.moveaxis(y, 0, -1)), -1, 0)

    def with_total_row(self) -> ToeplitzStrategy:
        """A copy (same class) with one more all-ones row at level 0 (the last row)."""
        new = copy.copy(self)
        new._n_totals = self._n_totals + 1
        new._levels = readonly(np.append(self._levels, np.int32(0)).astype(np.int32))
        new._lazy_matrix = None
        return new

    # -------------------------------------------------------- sensitivity
    def _uniform_core_weight(self, w: _F) -> float | None:
        """The common weight of the Toeplitz rows, or None if they differ."""
        core = w[: self._n_core]
        return float(core[0]) if np.all(core == core[0]) else None

    def _add_remove_loss(self, w: _F, p: int) -> float:
        u = self._uniform_core_weight(w)
        if u is None:  # generic exact search on the explicit matrix (n <= 8192)
            return super()._add_remove_loss(w, p)
        tot = w[self._n_core:]
        if p == 1:  # column 0 of A plus every total row
            return u * float(np.abs(self._a).sum()) + float(tot.sum())
        return math.sqrt(u * u * float(np.sum(self._a**2)) + float(np.sum(tot**2)))

    def _swap_loss(self, w: _F, p: int) -> float:
        u = self._uniform_core_weight(w)
        if u is None:
            return super()._swap_loss(w, p)
        if u == 0.0:
            return 0.0
        return u * toeplitz_swap_sensitivity(self._a, p)

    def _participation_loss(self, w: _F, part: Participation, p: int) -> Sensitivity:
        u = self._uniform_core_weight(w)
        if u is None:  # generic paths on the explicit matrix (n <= MAX_MATRIX_BINS)
            return super()._participation_loss(w, part, p)
        return toeplitz_participation_sensitivity(self._a, part, p, weight=u,
                                                  totals=w[self._n_core:])


class ScaledToeplitzStrategy(ToeplitzStrategy):
    """A diagonal (row) scaling D T(a) of a lower-triangular Toeplitz strategy, no matrix.

    Row i measures d_i (T(a) x)_i (d_i > 0). Measuring D T(a) x with noise of variance v per
    row is measuring T(a) x with variance v / d_i^2 on row i, so the BLUE and its errors keep
    the Toeplitz structure (:mod:`dptree_opt.engines.toeplitz`). Sensitivity with equal
    weight u on the scaled rows: column j is (d_i a_(i-j))_(i >= j), so::

        add/remove:  l_p^p = u^p max_j sum_(k < n-j) d_(k+j)^p |a_k|^p  (+ the totals)

    (a cross-correlation, FFT, O(n log n)). The columns are no longer shifts of each other,
    so the swap sensitivity is the generic exact search on ``.matrix`` (n <= MAX_MATRIX_BINS;
    refused above)."""

    def __init__(self, coefficients: ArrayLike, row_scale: ArrayLike, *, n_totals: int = 0,
                 name: str = "scaled toeplitz") -> None:
        super().__init__(coefficients, n_totals=n_totals, name=name)
        try:
            d = np.array(row_scale, dtype=float)
        except (TypeError, ValueError):
            raise ValueError("row_scale must be a 1-D array of numbers") from None
        if d.shape != (self._n_bins,):
            raise ValueError(f"row_scale must have shape ({self._n_bins},), got {d.shape}")
        if not np.all(np.isfinite(d)) or np.any(d <= 0):
            raise ValueError("row_scale must be finite and > 0")
        self._d = readonly(d)

    @property
    def row_scale(self) -> _F:
        """d_0..d_(n-1), the row scaling (read-only)."""
        return self._d

    @property
    def matrix(self) -> sp.csr_matrix:
        """D T(a) as CSR (with the totals; canonical, read-only), built on request;
        n <= MAX_MATRIX_BINS."""
        if self._lazy_matrix is None:
            plain = super().matrix  # T(a) and the totals
            self._lazy_matrix = frozen_csr(
                sp.csr_matrix(sp.diags(self._scale_column(1)) @ plain), copy=False)
        return self._lazy_matrix

    def __repr__(self) -> str:
        return f"<ScaledToeplitzStrategy {self.name}: {self.n_rows} rows x {self.n_bins} bins>"

    def _last_row_scale(self) -> float:
        return float(self._d[-1])

    def _scale_column(self, ndim: int) -> _F:
        """(d, 1 per total row) shaped to broadcast over the rows of an ndim array."""
        scale = np.concatenate([self._d, np.ones(self._n_totals)])
        return scale.reshape((-1,) + (1,) * (ndim - 1))

    def apply(self, x: ArrayLike) -> _F:
        """D T(a) x, then the totals. O(n log n)."""
        out = super().apply(x)
        return out * self._scale_column(out.ndim)

    def rmatvec(self, u: ArrayLike) -> _F:
        """(D T(a))' u = T(a)' (D u). O(n log n)."""
        u = np.asarray(u, dtype=float)
        if u.shape[:1] != (self.n_rows,):
            raise ValueError(f"u must have {self.n_rows} rows, got shape {u.shape}")
        return super().rmatvec(u * self._scale_column(u.ndim))

    def solve(self, y: ArrayLike) -> _F:
        """(D T(a))^-1 y = T(a)^-1 (y / d). O(n log n)."""
        y = np.asarray(y, dtype=float)
        if y.shape[:1] != (self._n_bins,):
            raise ValueError(f"y must have {self._n_bins} rows, got shape {y.shape}")
        return super().solve(y / self._d.reshape((-1,) + (1,) * (y.ndim - 1)))

    def _add_remove_loss(self, w: _F, p: int) -> float:
        u = self._uniform_core_weight(w)
        if u is None:
            return Strategy._add_remove_loss(self, w, p)
        tot = w[self._n_core:]
        col = _cross_correlation(np.abs(self._a) ** p, self._d ** p)  # sum_k |a_k|^p d_(k+j)^p
        best = u**p * float(col.max())
        if p == 1:
            return best + float(tot.sum())
        return math.sqrt(best + float(np.sum(tot**2)))

    def _participation_loss(self, w: _F, part: Participation, p: int) -> Sensitivity:
        u = self._uniform_core_weight(w)
        if p == 1 and u is not None:  # column l1 norms: a cross-correlation, O(n log n)
            norms = u * _cross_correlation(np.abs(self._a), self._d) + float(
                w[self._n_core:].sum())
            return column_norms_sensitivity(norms, part, 1,
                                            nonnegative=bool(np.all(self._a >= 0)))
        return Strategy._participation_loss(self, w, part, p)  # generic, on .matrix

    def _swap_loss(self, w: _F, p: int) -> float:
        if self._n_bins > MAX_MATRIX_BINS:
            raise ValueError(
                "the swap sensitivity of a row-scaled Toeplitz strategy is an exact search over "
                f"column pairs on its matrix: refused for n = {self._n_bins} > "
                f"{MAX_MATRIX_BINS} bins (use add/remove neighbours)")
        return Strategy._swap_loss(self, w, p)


def toeplitz(coefficients: ArrayLike, *, row_scale: ArrayLike | None = None,
             name: str | None = None) -> ToeplitzStrategy:
    """The lower-triangular Toeplitz strategy T(a) with first column ``coefficients``, or its
    row scaling D T(a) with ``row_scale`` = (d_0..d_(n-1)) > 0 (:class:`ScaledToeplitzStrategy`).

    All n rows at budget level 1; no matrix is built (see :class:`ToeplitzStrategy`).
    ``toeplitz(np.ones(n))`` is the prefix-sum strategy; ``toeplitz(sqrt_coefficients(n))``
    the square-root factorisation."""
    if row_scale is None:
        return ToeplitzStrategy(coefficients, name=name or "toeplitz")
    return ScaledToeplitzStrategy(coefficients, row_scale, name=name or "scaled toeplitz")
