"""Toeplitz strategies: the BLUE without a matrix (O(n log n)).

Setting: the released strategy is a :class:`~dptree_opt.strategies.toeplitz.ToeplitzStrategy`
A = T(a) whose n rows all carry noise of one finite variance v > 0, plus (optionally) exact
all-ones rows (the public total N, variance 0). Write b = 1 / a(z) mod z^n (so A^-1 = T(b),
the power-series inverse) and t = b / (1 - z) mod z^n, i.e. t_k = b_0 + ... + b_k (so
P A^-1 = T(t), P the prefix matrix: P = T(1 / (1 - z))).

N private (no exact row). A is square and invertible, so the BLUE is x_hat = A^-1 y with
Cov = v A^-1 A^-T.

Noisy total rows (variance v_N, combined by inverse variance): the GLS adds the rank-one
term 1 1' / v_N to A'A / v, so by Sherman-Morrison x_c = x_hat - Cov 1 (1'x_hat - y_N) /
(1' Cov 1 + v_N) and Cov_c = Cov - Cov 1 1' Cov / (1' Cov 1 + v_N); the exact total below is
the case v_N = 0.

N public (exact rows 1'x = N; swap, or add/remove with public_total). The BLUE is the
equality-constrained GLS: x_c = x_hat - Cov 1 (1'x_hat - N) / (1' Cov 1), with covariance

    Cov_c = Cov - Cov 1 1' Cov / (1' Cov 1)            (rank-one update)

(Lagrange: minimising (y - A x)' V^-1 (y - A x) subject to 1'x = N moves x_hat along
C 1, C = (A' V^-1 A)^-1 = Cov; then Cov_c = (I - C 1 1' / q) C (I - 1 1' C / q), q = 1'C1,
which is the line above: the p = 1 case of the dense formula
M^-1 - M^-1 E' (E M^-1 E')^-1 E M^-1 of :mod:`dptree_opt.engines.gls`, E = 1'.)

Here A^-T 1 = reverse(t) (column c of T(b) sums to b_0 + .. + b_(n-1-c) = t_(n-1-c)), so Cov 1 = v A^-1 reverse(t)
(one FFT product) and 1' Cov 1 = v ||t||^2: the constraint step is x - h (1'x - N) / (q + r)
with h = A^-1 A^-T 1, q = ||t||^2 (unit variance), r = v_N / v (0 for an exact total).

The exact error of this BLUE on the workloads (O(n log n), no matrix) is in
:mod:`dptree_opt.engines.toeplitz`.

Cost: the power-series inverse O(n log n) (Newton + FFT), then O(n log n) per trial.
Accuracy: FFT products carry absolute rounding ~1e-16 ||a||_1 ||b||_1 log n per
coefficient (~2e-12 for the square root at 2^16); totals agree with dense GLS / closed forms
to ~1e-9 relative or better (tests/test_toeplitz.py).

Exact errors
------------
Toeplitz strategies (one noise variance, N private or public): exact BLUE error, O(n log n).

Setting, notation and the BLUE itself: :mod:`dptree_opt.engines.toeplitz` (A = T(a), n rows
of noise variance v, b = 1 / a(z) mod z^n the power-series inverse, t_k = b_0 + ... + b_k).

N private (no exact row). A is square and invertible, so the BLUE is x_hat = A^-1 y with
Cov = v A^-1 A^-T. For a workload W, W A^-1 has rows U_i and Var(query i) = v ||U_i||^2:

* identity: U = T(b), ||U_i||^2 = sum_(k<=i) b_k^2; total v sum_k (n - k) b_k^2.
* prefix (C_(i+1), i = 0..n-1): U = T(t), ||U_i||^2 = sum_(k<=i) t_k^2; total
  v sum_k (n - k) t_k^2.
* all_range [a, b] = prefix row b minus prefix row a - 1 (row -1 = 0): with T_i = row i of
  T(t), ||T_b - T_(a-1)||^2 = ||T_b||^2 + ||T_(a-1)||^2 - 2 R(b - a + 1, a - 1), where
  R(D, j) = <T_(j+D), T_j> = sum_(m<=j) t_m t_(m+D) (a running sum over j: O(n^2) for all
  n(n+1)/2 ranges, one vectorised pass per a). The total over all ranges is, for the n + 1
  vectors U_0 = 0, U_(i+1) = T_i, sum_(i<j) ||U_j - U_i||^2 = (n + 1) sum ||U_i||^2
  - ||sum U_i||^2 with sum_i T_i = (column sums of T(t)) = (cumsum t)_(n-1-c): O(n).
* total (1'x): the prefix row n - 1, v sum_k t_k^2.
* ranges [lo, hi) (custom): v ||T_(hi-1) - T_(lo-1)||^2 as for all ranges, with
  R(D, j) = sum_(m<=j) t_m t_(m+D) summed directly over the shorter side: either the j + 1
  head terms or r(D) - (the n - D - j - 1 tail terms), r(D) = R(D, n - 1 - D) the full
  autocorrelation (FFT): O(n log n + sum_q min(lo_q, n - hi_q)).

N public (exact rows 1'x = N; swap, or add/remove with public_total): the BLUE is the
equality-constrained GLS with the rank-one covariance Cov_c = Cov - Cov 1 1' Cov / (1' Cov 1);
noisy total rows (combined variance v_N) give Cov - Cov 1 1' Cov / (1' Cov 1 + v_N)
(derivations in :mod:`dptree_opt.engines.toeplitz`); below, "public" covers both.

Here A^-T 1 = reverse(t) (column c of T(b) sums to b_0 + .. + b_(n-1-c) = t_(n-1-c)), so Cov 1 = v A^-1 reverse(t)
(one FFT product) and 1' Cov 1 = v ||t||^2. With g = Cov 1 / sqrt(1' Cov 1), every per-query
variance loses (W g)_q^2 and every total loses ||W g||^2 (for all ranges with G = cumsum g:
(n + 1) sum G_i^2 - (sum G_i)^2, G_(-1) = 0 included as above).

Cost: the power-series inverse O(n log n) (Newton + FFT), everything else O(n), except
per-query all-range (O(n^2), its output size; refused above 10^8 queries) and custom ranges.
Accuracy: FFT products carry absolute rounding ~1e-16 ||a||_1 ||b||_1 log n per
coefficient (~2e-12 for the square root at 2^16); totals agree with dense GLS / closed forms
to ~1e-9 relative or better (tests/test_toeplitz.py).
"""

from __future__ import annotations

from typing import Literal, TypeAlias, overload

import numpy as np
import numpy.typing as npt
import scipy.fft as sfft
from numpy.typing import ArrayLike

from ..mechanism import Mechanism
from ..workloads import Workload
from .base import ANY_WORKLOAD, Capability, Engine
from ..strategies import ScaledToeplitzStrategy, Strategy, ToeplitzStrategy
from ..strategies.toeplitz import series_multiply

__all__ = ["ToeplitzEngine", "is_toeplitz_mechanism", "toeplitz_blue", "TOEPLITZ_WORKLOADS", "toeplitz_error",
           "toeplitz_supports"]

# Working set (floats) per chunk of trials (BLUE) or of range queries.
_CHUNK_FLOATS = 1 << 22

_F: TypeAlias = "npt.NDArray[np.float64]"


def is_toeplitz_mechanism(mechanism: Mechanism) -> bool:
    """Whether the Toeplitz fast paths apply: the released strategy is a ToeplitzStrategy
    whose n Toeplitz rows share one finite variance v > 0; the other rows (totals) may be
    exact, noisy or unmeasured."""
    return square_core_mechanism(mechanism, ToeplitzStrategy)


def square_core_mechanism(mechanism: Mechanism, cls: type[Strategy]) -> bool:
    """Whether ``mechanism`` releases a ``cls`` strategy (n square core rows, then total
    rows) whose n core rows share one finite variance v > 0 (totals: any variance >= 0)."""
    if not isinstance(mechanism, Mechanism) or not isinstance(mechanism.released, cls):
        return False
    var = mechanism.variances
    n = mechanism.released.n_bins
    core = var[:n]
    return bool(np.isfinite(core[0]) and core[0] > 0 and np.all(core == core[0])
                and np.all(var[n:] >= 0))


def _parameters(mechanism: Mechanism) -> tuple[ToeplitzStrategy, float, float | None]:
    """(strategy, v, r): v the Toeplitz rows' variance; r = v_N / v for the total rows
    combined (v_N = 1 / sum 1 / v_i over them; 0 if one is exact), None if no total row is
    measured (N private: no constraint step)."""
    if not is_toeplitz_mechanism(mechanism):
        raise ValueError("the Toeplitz paths need a ToeplitzStrategy whose Toeplitz rows share "
                         "one finite noise variance")
    released = mechanism.released
    if not isinstance(released, ToeplitzStrategy):  # is_toeplitz_mechanism checked it
        raise ValueError("the Toeplitz paths need a ToeplitzStrategy")
    v = float(mechanism.variances[0])
    return released, v, total_rows_ratio(mechanism, v)


def total_rows_ratio(mechanism: Mechanism, v: float) -> float | None:
    """r = v_N / v for the total rows after the n core rows combined (v_N = 1 / sum 1 / v_i;
    0 if one is exact), None if none is measured (N private: no constraint step)."""
    tv = np.asarray(mechanism.variances[mechanism.released.n_bins:], dtype=float)
    if np.any(tv == 0):
        return 0.0
    prec = float(np.sum(1.0 / tv[np.isfinite(tv)]))
    return None if prec == 0 else 1.0 / prec / v


def total_observation(mechanism: Mechanism, flat: _F) -> _F:
    """The combined observation of N per trial (flat: (trials, rows)): the first exact total
    row, else the inverse-variance mean of the noisy ones."""
    n = mechanism.released.n_bins
    tv = np.asarray(mechanism.variances[n:], dtype=float)
    exact = np.flatnonzero(tv == 0)
    if exact.size:
        return flat[:, n + exact[0]]
    w = np.where(np.isfinite(tv), 1.0 / tv, 0.0)
    return flat[:, n:] @ (w / w.sum())


def _row_weights(strat: Strategy) -> _F | None:
    """s_i = 1 / d_i^2 for a row-scaled strategy D T(a) (its rows carry variance v s_i in
    the T(a) system), None for plain T(a) (s = 1)."""
    if not isinstance(strat, ScaledToeplitzStrategy):
        return None
    d = strat.row_scale
    return 1.0 / (d * d)


def _constraint_direction(strat: ToeplitzStrategy) -> tuple[_F, float]:
    """(h, q) with h = T^-1 S T^-T 1 and q = 1' T^-1 S T^-T 1 (unit variance, S = diag(s),
    s = 1 unless row-scaled): T^-T 1 = reverse(t). O(n log n)."""
    t = np.cumsum(strat.inverse_coefficients())
    rt = t[::-1]
    s = _row_weights(strat)
    if s is not None:
        return series_multiply(strat.inverse_coefficients(), s * rt), float(s @ (rt * rt))
    return series_multiply(strat.inverse_coefficients(), rt), float(t @ t)


def toeplitz_blue(mechanism: Mechanism, y: ArrayLike) -> _F:
    """The BLUE of the histogram, shape (n,) or (trials, n) for y of shape (rows,) or
    (trials, rows): x = A^-1 y (power-series inverse, FFT) and, with exact total rows, the
    rank-one constraint step x - h (1'x - N) / q (module docstring). O(n log n) per trial."""
    strat, _, r = _parameters(mechanism)
    y = np.asarray(y, dtype=float)
    if y.shape[-1] != strat.n_rows:
        raise ValueError(f"y must have {strat.n_rows} entries per trial, got {y.shape[-1]}")
    n = strat.n_bins
    tv = np.asarray(mechanism.variances[n:])
    measured = np.concatenate([np.ones(n, bool), np.isfinite(tv)])
    if not np.all(np.isfinite(y[..., measured])):
        raise ValueError("y has NaN or infinite values on measured rows")
    b = strat.inverse_coefficients()
    flat = y.reshape(-1, y.shape[-1])
    x = np.empty((flat.shape[0], n))
    size = sfft.next_fast_len(2 * n - 1, real=True)
    fb = sfft.rfft(b, size)  # the spectrum of A^-1's column, once for all trials
    step = max(1, _CHUNK_FLOATS // (2 * size))  # FFT buffers of length ~2n per trial
    core = flat[:, :n]
    if isinstance(strat, ScaledToeplitzStrategy):  # (D T)^-1 y = T^-1 (y / d)
        core = core / strat.row_scale
    for start in range(0, flat.shape[0], step):  # A^-1 y along the last axis, O(n log n) each
        fy = sfft.rfft(core[start:start + step], size, axis=-1)
        x[start:start + step] = sfft.irfft(fy * fb, size, axis=-1)[:, :n]
    if r is not None:
        h, q = _constraint_direction(strat)
        resid = x.sum(axis=-1) - total_observation(mechanism, flat)  # 1'x - y_N
        x -= np.multiply.outer(resid, h / (q + r))
    return x.reshape(y.shape[:-1] + (n,))


# Workload kinds with a structured exact error (others: the dense path, n <= 8192).
TOEPLITZ_WORKLOADS = ("prefix", "identity", "all_range", "total", "ranges")
# Per-query all-range output: at most this many queries (as workloads.all_range.intervals).
_MAX_ALL_RANGE_QUERIES = 10**8


def _all_range_per_query(t: _F, g_cum: _F | None, v: float) -> _F:
    """Var of every range [a, b] (lexicographic a <= b): v ||T_b - T_(a-1)||^2 minus
    (G_b - G_(a-1))^2 when N is public. O(n^2) work and output, one vectorised pass per a."""
    n = t.size
    p2 = np.cumsum(t * t)
    out = np.empty(n * (n + 1) // 2)
    r = np.zeros(n)  # r[D] = R(D, j) for the current j = a - 1, D = 1..n-1
    pos = 0
    for a in range(n):  # O(n - a) each
        m = n - a
        if a == 0:
            var = v * p2.copy()
            if g_cum is not None:
                var -= g_cum**2
        else:
            j = a - 1
            r[1:n - j] += t[j] * t[j + 1:n]
            var = v * (p2[a:] + p2[j] - 2.0 * r[1:n - j])
            if g_cum is not None:
                var -= (g_cum[a:] - g_cum[j]) ** 2
        out[pos:pos + m] = var
        pos += m
    return out


def _range_variances(t: _F, g_cum: _F | None, v: float, lo: ArrayLike, hi: ArrayLike) -> _F:
    """Var of the ranges [lo, hi) (module docstring), O(n log n + sum_q min(lo, n - hi))."""
    n = t.size
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    p2: _F = np.concatenate([[0.0], np.cumsum(t * t)])  # p2[i + 1] = ||T_i||^2
    j = lo - 1  # the subtracted prefix row (-1: none)
    d = hi - lo  # the gap D = (hi - 1) - j
    head = j + 1  # terms m = 0..j
    tail = n - d - j - 1  # terms m = j+1..n-1-D
    use_tail = tail < head
    r_cross = np.zeros(lo.size)
    if use_tail.any():  # full autocorrelation r(D) = sum_(m < n-D) t_m t_(m+D), FFT
        size = sfft.next_fast_len(2 * n - 1, real=True)
        f = sfft.rfft(t, size)
        r_full = sfft.irfft(f * np.conj(f), size)[:n]
        r_cross[use_tail] = r_full[d[use_tail]]
    # the shorter side, summed directly in chunks: m from start to start + count - 1
    start = np.where(use_tail, j + 1, 0)
    count = np.where(use_tail, tail, head)
    sign = np.where(use_tail, -1.0, 1.0)
    todo = np.flatnonzero(count > 0)
    todo = todo[np.argsort(count[todo], kind="stable")]  # similar lengths per chunk
    pos = 0
    while pos < todo.size:  # chunks of <= _CHUNK_FLOATS products (or one long query)
        cnt = count[todo[pos:pos + _CHUNK_FLOATS]]  # ascending
        over = np.arange(1, cnt.size + 1) * cnt > _CHUNK_FLOATS
        rows = max(1, int(np.argmax(over)) if over.any() else cnt.size)
        idx = todo[pos:pos + rows]
        width = int(count[idx[-1]])
        m = start[idx, None] + np.arange(width)[None, :]
        valid = np.arange(width)[None, :] < count[idx, None]
        m = np.where(valid, m, 0)
        prod = np.where(valid, t[m] * t[np.minimum(m + d[idx, None], n - 1)], 0.0)
        r_cross[idx] += sign[idx] * prod.sum(axis=1)
        pos += idx.size
    var = v * (p2[hi] + p2[lo] - 2.0 * r_cross)
    if g_cum is not None:
        gc = np.concatenate([[0.0], g_cum])
        var -= (gc[hi] - gc[lo]) ** 2
    return var


def _toeplitz_rows_error(series: _F, corr: _F | None, v: float, weights: _F,
                         per_query: bool) -> float | _F:
    """Variances of the rows of v T(series) T(series)' (row i: v sum_{k<=i} series_k^2),
    minus the rank-one constraint term corr_i^2 when N is public (``corr`` not None);
    per row, or summed (coefficient k lies in n - k rows: ``weights``). O(n)."""
    if per_query:
        var = v * np.cumsum(series * series)
        return var - corr**2 if corr is not None else var
    tot = v * float(weights @ (series * series))
    return tot - float(corr @ corr) if corr is not None else tot


def _scaled_rows_error(series: _F, corr: _F | None, v: float, s: _F,
                       per_query: bool) -> float | _F:
    """Row-scaled strategies: the rows of T(series) S T(series)' times v (row i:
    v sum_(j <= i) s_j series_(i-j)^2, an FFT convolution), minus corr_i^2; per row or
    summed (coefficient k reaches the n - k rows from j: sum_j s_j S2(n - j))."""
    if per_query:
        var = v * series_multiply(series * series, s)
        return var - corr**2 if corr is not None else var
    s2 = np.concatenate([[0.0], np.cumsum(series * series)])
    n = series.size
    tot = v * float(s @ s2[n - np.arange(n)])
    return tot - float(corr @ corr) if corr is not None else tot


def toeplitz_supports(mechanism: Mechanism, kind: str, per_query: bool) -> bool:
    """Whether :func:`toeplitz_error` answers ``kind``: every kind for plain T(a); prefix,
    identity, total and the all-range total for row-scaled D T(a)."""
    if kind not in TOEPLITZ_WORKLOADS or not is_toeplitz_mechanism(mechanism):
        return False
    if _row_weights(mechanism.released) is None:
        return True
    return kind in ("prefix", "identity", "total") or (kind == "all_range" and not per_query)


@overload
def toeplitz_error(mechanism: Mechanism, kind: str, per_query: Literal[False] = ..., *,
                   lo: ArrayLike | None = ..., hi: ArrayLike | None = ...) -> float: ...
@overload
def toeplitz_error(mechanism: Mechanism, kind: str, per_query: Literal[True], *,
                   lo: ArrayLike | None = ..., hi: ArrayLike | None = ...) -> _F: ...
@overload
def toeplitz_error(mechanism: Mechanism, kind: str, per_query: bool, *,
                   lo: ArrayLike | None = ..., hi: ArrayLike | None = ...) -> float | _F: ...
def toeplitz_error(mechanism: Mechanism, kind: str, per_query: bool = False, *,
                   lo: ArrayLike | None = None, hi: ArrayLike | None = None) -> float | _F:
    """Exact BLUE error sum_q Var(answer_q) (float) or per-query variances (workload order)
    for ``kind`` in TOEPLITZ_WORKLOADS (module docstring; ``ranges`` needs the half-open
    ``lo``, ``hi`` arrays of the workload). Counts^2. O(n log n) (per-query all-range
    O(n^2), ranges O(n log n + sum_q min(lo_q, n - hi_q)))."""
    if kind not in TOEPLITZ_WORKLOADS:
        raise ValueError(f"kind must be one of {TOEPLITZ_WORKLOADS}, got {kind!r}")
    strat, v, r = _parameters(mechanism)
    n = strat.n_bins
    b = strat.inverse_coefficients()
    t = np.cumsum(b)
    g = None
    if r is not None:  # N public: a total row enters the estimate (exact, or noisy with r > 0)
        # g = Cov 1 / sqrt(1' Cov 1 + v_N) = sqrt(v / (q + r)) h
        h, q = _constraint_direction(strat)
        g = np.sqrt(v / (q + r)) * h
    weights = n - np.arange(n, dtype=float)  # how many rows of T(.) hold coefficient k
    s = _row_weights(strat)
    if s is not None:
        return _scaled_error(kind, per_query, b, t, g, v, s, r)
    if kind == "identity":  # W A^-1 = T(b)
        return _toeplitz_rows_error(b, g, v, weights, per_query)
    g_cum = None if g is None else np.cumsum(g)
    if kind == "ranges":
        if lo is None or hi is None:
            raise ValueError("kind='ranges' needs the workload's lo and hi arrays")
        rv = _range_variances(t, g_cum, v, lo, hi)
        return rv if per_query else float(rv.sum())
    if kind == "total":
        q_t = float(t @ t)  # 1' Cov 1 = v q; the total's row cuts it to v q r / (q + r)
        var = v * q_t if r is None else (0.0 if r == 0 else v * q_t * r / (q_t + r))
        return np.array([var]) if per_query else var
    if kind == "prefix":  # W A^-1 = T(t)
        return _toeplitz_rows_error(t, g_cum, v, weights, per_query)
    # all_range
    if per_query:
        if n * (n + 1) // 2 > _MAX_ALL_RANGE_QUERIES:
            raise ValueError(f"all_range({n}) has {n * (n + 1) // 2} queries; per-query "
                             f"variances refused above {_MAX_ALL_RANGE_QUERIES}")
        return _all_range_per_query(t, g_cum, v)
    col = np.cumsum(t)  # sum_i T_i, reversed (its norm is all we need)
    tot = v * ((n + 1) * float(weights @ (t * t)) - float(col @ col))
    if g_cum is not None:  # public
        tot -= (n + 1) * float(g_cum @ g_cum) - float(g_cum.sum()) ** 2
    return tot


def _scaled_error(kind: str, per_query: bool, b: _F, t: _F, g: _F | None, v: float, s: _F,
                  r: float | None) -> float | _F:
    """toeplitz_error for a row-scaled strategy D T(a): row variances v s_j in the T(a)
    system (s = 1 / d^2). Prefix / identity per query by FFT convolutions, totals O(n)."""
    n = t.size
    if kind == "identity":
        return _scaled_rows_error(b, g, v, s, per_query)
    g_cum = None if g is None else np.cumsum(g)
    if kind == "prefix":
        return _scaled_rows_error(t, g_cum, v, s, per_query)
    if kind == "total":
        q_t = float(s @ (t[::-1] * t[::-1]))  # 1' Cov 1 / v
        var = v * q_t if r is None else (0.0 if r == 0 else v * q_t * r / (q_t + r))
        return np.array([var]) if per_query else var
    if kind == "all_range" and not per_query:
        # column j of P A^-1 holds t shifted by j: (n + 1) S2(n - j) - S1(n - j)^2 each
        s1 = np.concatenate([[0.0], np.cumsum(t)])
        s2 = np.concatenate([[0.0], np.cumsum(t * t)])
        m = n - np.arange(n)
        tot = v * float(s @ ((n + 1) * s2[m] - s1[m] ** 2))
        if g_cum is not None:  # public
            tot -= (n + 1) * float(g_cum @ g_cum) - float(g_cum.sum()) ** 2
        return tot
    raise ValueError(f"{kind!r} (per_query={per_query}) has no structured path for a "
                     "row-scaled Toeplitz strategy; use method='dense' (n <= 8192)")


class ToeplitzEngine(Engine):
    """Toeplitz strategies T(a) with one noise variance (the square root factorisation, BLT,
    row-scaled D T(a)), N private, public or measured by noisy total rows: the BLUE A^-1 y by
    the FFT power-series inverse, exact errors from it."""

    name = "toeplitz"
    structure = "Toeplitz T(a) or D T(a), one noise scale"
    capabilities = (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n log n) per trial"),
        Capability("error", "blue", TOEPLITZ_WORKLOADS,
                   "O(n log n); ranges O(n log n + sum min(lo, n - hi))"),
        Capability("per_query", "blue", TOEPLITZ_WORKLOADS,
                   "O(n log n); all_range O(n^2)"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return is_toeplitz_mechanism(mechanism)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        if task != "estimate" and workload is not None and not toeplitz_supports(
                mechanism, workload.kind,
                                                        task == "per_query"):
            return "row-scaled D T(a): prefix, identity, total and the all-range total only"
        return None

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        return toeplitz_blue(mechanism, y)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        return toeplitz_error(mechanism, workload.kind, per_query=per_query, lo=workload.lo,
                              hi=workload.hi)
