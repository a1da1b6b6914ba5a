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
M^-1 - M^-1 E' (E M^-1 E')^-1 E M^-1 of :mod:`dptree_opt.estimation.gls`, E = 1'.)

Here A^-T 1 = reverse(t) (column c of T(b) sums to b_0 + .. + b_(n-1-c) = t_(n-1-c)), so Cov 1 = v A^-1 reverse(t)
(one FFT product) and 1' Cov 1 = v ||t||^2: the constraint step is x - h (1'x - N) / (q + r)
with h = A^-1 A^-T 1, q = ||t||^2 (unit variance), r = v_N / v (0 for an exact total).

The exact error of this BLUE on the workloads (O(n log n), no matrix) is in
:mod:`dptree_opt.error.toeplitz`.

Cost: the power-series inverse O(n log n) (Newton + FFT), then O(n log n) per trial.
Accuracy: FFT products carry absolute rounding ~1e-16 ||a||_1 ||b||_1 log n per
coefficient (~2e-12 for the square root at 2^16); totals agree with dense GLS / closed forms
to ~1e-9 relative or better (tests/test_toeplitz.py).
"""

from __future__ import annotations

import numpy as np
import scipy.fft as sfft

from ..mechanism import Mechanism
from ..strategies.toeplitz import ToeplitzStrategy, series_multiply

__all__ = ["is_toeplitz_mechanism", "toeplitz_blue"]

# Working set (floats) per chunk of trials (BLUE) or of range queries.
_CHUNK_FLOATS = 1 << 22


def is_toeplitz_mechanism(mechanism: Mechanism) -> bool:
    """Whether the Toeplitz fast paths apply: the released strategy is a ToeplitzStrategy
    whose n Toeplitz rows share one finite variance v > 0; the other rows (totals) may be
    exact, noisy or unmeasured."""
    return square_core_mechanism(mechanism, ToeplitzStrategy)


def square_core_mechanism(mechanism, cls) -> bool:
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


def total_observation(mechanism: Mechanism, flat: np.ndarray) -> np.ndarray:
    """The combined observation of N per trial (flat: (trials, rows)): the first exact total
    row, else the inverse-variance mean of the noisy ones."""
    n = mechanism.released.n_bins
    tv = np.asarray(mechanism.variances[n:], dtype=float)
    exact = np.flatnonzero(tv == 0)
    if exact.size:
        return flat[:, n + exact[0]]
    w = np.where(np.isfinite(tv), 1.0 / tv, 0.0)
    return flat[:, n:] @ (w / w.sum())


def _row_weights(strat: ToeplitzStrategy) -> np.ndarray | None:
    """s_i = 1 / d_i^2 for a row-scaled strategy D T(a) (its rows carry variance v s_i in
    the T(a) system), None for plain T(a) (s = 1)."""
    d = getattr(strat, "_d", None)
    return None if d is None else 1.0 / (d * d)


def _constraint_direction(strat: ToeplitzStrategy) -> tuple[np.ndarray, float]:
    """(h, q) with h = T^-1 S T^-T 1 and q = 1' T^-1 S T^-T 1 (unit variance, S = diag(s),
    s = 1 unless row-scaled): T^-T 1 = reverse(t). O(n log n)."""
    t = np.cumsum(strat.inverse_coefficients())
    rt = t[::-1]
    s = _row_weights(strat)
    if s is not None:
        return series_multiply(strat.inverse_coefficients(), s * rt), float(s @ (rt * rt))
    return series_multiply(strat.inverse_coefficients(), rt), float(t @ t)


def toeplitz_blue(mechanism: Mechanism, y) -> np.ndarray:
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
    d = getattr(strat, "_d", None)
    if d is not None:  # (D T)^-1 y = T^-1 (y / d)
        core = core / d
    for start in range(0, flat.shape[0], step):  # A^-1 y along the last axis, O(n log n) each
        fy = sfft.rfft(core[start:start + step], size, axis=-1)
        x[start:start + step] = sfft.irfft(fy * fb, size, axis=-1)[:, :n]
    if r is not None:
        h, q = _constraint_direction(strat)
        resid = x.sum(axis=-1) - total_observation(mechanism, flat)  # 1'x - y_N
        x -= np.multiply.outer(resid, h / (q + r))
    return x.reshape(y.shape[:-1] + (n,))


def __getattr__(name):
    """The error part moved to :mod:`dptree_opt.error.toeplitz`; old imports keep working."""
    if name in ("TOEPLITZ_WORKLOADS", "toeplitz_error"):
        from ..error import toeplitz as _error_toeplitz
        return getattr(_error_toeplitz, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
