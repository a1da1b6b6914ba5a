"""Buffered linear Toeplitz (BLT) strategies for prefix sums / continual counting.

A BLT with d buffers (Dvijotham, McMahan, Pillutla, Steinke, Thakurta, "Efficient and
near-optimal noise generation for streaming differential privacy", FOCS 2024; also
McMahan et al., arXiv 2408.08868, Alg. 2-3) is the lower-triangular Toeplitz matrix
C = T(c) (notation of :mod:`dptree_opt.strategies.toeplitz`) with

    c_0 = 1,   c_i = sum_j omega_j theta_j^(i-1)  (i >= 1),   0 < theta_j < 1,

i.e. the rational generating function c(z) = 1 + sum_j omega_j z / (1 - theta_j z) = P(z) / Q(z)
with Q(z) = prod_j (1 - theta_j z). Multiplying by C or by C^-1 streams with d buffers:

    C:     y_t = x_t + omega . s_t,   s_(t+1) = theta * s_t + x_t        (s_0 = 0)
    C^-1:  w_t = z_t - omega . s_t,   s_(t+1) = theta * s_t + w_t

(the second recurrence inverts the first line by line: its state matrix is
F = diag(theta) - 1 omega', whose eigenvalues are the poles of 1 / c(z); McMahan et al. 2024
Alg. 3). So C^-1 is again "BLT-like" and u = 1 / c(z) mod z^n costs O(n d).

Error (Gaussian, add/remove or event level: one input changes by 1). Releasing y = C x + z,
z ~ N(0, sigma^2 I), sigma^2 = 1 per unit l2 sensitivity, and answering the prefixes with
B y, B = M C^-1 = T(b), b = cumsum(u) (M the prefix matrix), gives per unit sigma^2

    sens^2 = sum_(k<n) c_k^2                   (column 0 of C is the largest)
    mean:  loss = sens^2 ||T(b)||_F^2 / n = sens^2 sum_(k<n) (n - k) b_k^2 / n
    max:   loss = sens^2 max_t ||row t of T(b)||^2 = sens^2 sum_(k<n) b_k^2

(the row norms of T(b) are the partial sums sum_(k<=t) b_k^2, largest at t = n - 1).

Closed forms, independent of n. Each sequence above is the impulse response
s_0 = D, s_k = h' F^(k-1) g (k >= 1) of a small linear system: c has F = diag(theta), g = 1,
h = omega; b has the (d+1)-state system F = [[diag(theta) - 1 omega', 0], [-omega', 1]],
g = 1, h = (-omega, 1) (the extra state is the running sum of u). Then

    sum_(k<n) s_k^2 = D^2 + h' S h,   sum_(k<n) (n - k) s_k^2 = n D^2 + h' W h,
    S = sum_(m<N) F^m g g' F^m',   W = sum_(m<N) (N - m) F^m g g' F^m',   N = n - 1,

computed by doubling in O(d^3 log n) (S_(a+b) = S_a + F^a S_b F^a',
W_(a+b) = b S_a + W_a + F^a W_b F^a'), with every power kept as F^m = I - E_m
(E_(a+b) = E_a + E_b - E_a E_b) so that 1 - theta ~ 1/n stays accurate at n = 2^40 (jax_privacy
uses partial fractions instead, Dvijotham et al. 2024 Sec. 5). The optimiser differentiates
this by complex steps (exact to rounding, all 2d partial derivatives in one batched pass).

Optimisation (:func:`optimize_blt`): theta = sigmoid(a), omega = exp(beta) (so omega > 0, the
well-behaved class of jax_privacy's penalties), L-BFGS from a few starts built from the
quadrature 1/sqrt(pi k) = (1/pi) int x^(-1/2) e^(-k x) dx (the square root's c_k ~ 1/sqrt(pi k)).
Measured (mean per prefix, per unit sigma^2): 4 buffers 9.3475 / 19.2838 / 28.2991 at
n = 2^10 / 2^16 / 2^20 ("mean"); the "max" optimum with 3 / 4 / 5 buffers has mean 9.6921 /
19.8027 / 28.4736, jax_privacy's published 9.692 / 19.803 / 28.474 (docs/math.md section 7).
Letting one omega go negative reaches 9.3428 at 2^10 (the optimal Toeplitz is 9.3427) but makes
C^-1 unstable (a pole just outside the unit circle), so it is not offered.

Participation (docs/math.md section 11; docs/participation_optimum.md). With omega > 0,
X = C'C >= 0 entrywise, so the sensitivity (vector or scalar contributions) sums X over the
worst pattern: under fixed_epoch(k, b) the offset 0 (X_(o+ib, o+jb) sums non-negative terms
over n - o - jb rows); under min_sep(k, b) with non-increasing coefficients (also
sum(omega) <= 1, i.e. c_1 <= c_0) the pattern {0, b, ..., (k' - 1) b}, k' the most
participations that fit (Choquette-Choo et al. 2023 for non-increasing Toeplitz). With
R(D, L) = sum_(m<L) c_m c_(m+D) and g_lm(L) = (1 - (theta_l theta_m)^(L-1)) /
(1 - theta_l theta_m) (sums of geometric series):

    R(0, L) = 1 + sum_(l,m) omega_l omega_m g_lm(L)
    R(D, L) = c_D + sum_(l,m) omega_l omega_m theta_m^D g_lm(L)          (D >= 1)
    sens^2  = sum_(i<k') R(0, n - ib) + 2 sum_(i<j<k') R((j - i) b, n - jb),

O(d^2 k'^2) (:func:`blt_participation_sensitivity_squared`), differentiated by complex steps
like the rest; ``blt(n, participation=...)`` minimises sens^2 x error under the schema
(under min_sep in the class omega = e^beta / (1 + sum e^beta)). Measured at n = 2052,
k = 6, b = 342, 4 buffers, mean loss per unit noise: 84.113 (fixed_epoch and min_sep).
"""

from __future__ import annotations

import functools
import math
from numbers import Integral
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.optimize import OptimizeResult, minimize
from scipy.special import expit

from ..limits import check_memory
from ..participation import Participation, as_participation
from .base import readonly
from .toeplitz import ToeplitzStrategy

__all__ = ["BLT_OBJECTIVES", "MAX_BLT_BINS", "MAX_BUFFERS", "BLTStrategy", "blt",
           "blt_coefficients", "blt_inverse_coefficients", "blt_loss",
           "blt_noise_coefficients", "blt_participation_loss",
           "blt_participation_sensitivity_squared", "blt_sensitivity_squared",
           "check_blt_options",
           "check_blt_parameters", "inverse_spectral_radius", "optimize_blt"]

BLT_OBJECTIVES = ("mean", "max")
# More buffers than this are refused (the optimum gains < 1e-3 per buffer beyond ~6).
MAX_BUFFERS = 12
# n beyond this is refused (the closed forms work in log n; 2^40 = stream.Counter's bound).
MAX_BLT_BINS = 1 << 40
DEFAULT_BUFFERS = 4
# The smallest theta the optimiser returns (its optimum may sit at theta -> 0, where the
# sigmoid underflows): theta^(i-1) <= 1e-300 for i >= 2, i.e. a one-step tap to rounding.
THETA_MIN = 1e-300
_COMPLEX_STEP = 1e-30

_F: TypeAlias = "npt.NDArray[np.float64]"
# real, or complex in the complex-step gradient (the state-space helpers take both)
_C: TypeAlias = "npt.NDArray[np.inexact[Any]]"


# ----------------------------------------------------------------- validation
def _check_n(n: object) -> int:
    if (isinstance(n, (bool, np.bool_)) or not isinstance(n, Integral)
            or not 1 <= int(n) <= MAX_BLT_BINS):
        raise ValueError(f"n must be an integer in [1, 2^40], got {n!r}")
    return int(n)


def _check_buffers(buffers: object) -> int:
    if isinstance(buffers, (bool, np.bool_)) or not isinstance(buffers, Integral) \
            or not 1 <= int(buffers) <= MAX_BUFFERS:
        raise ValueError(f"buffers must be an integer in [1, {MAX_BUFFERS}], got {buffers!r}")
    return int(buffers)


def _check_objective(objective: str) -> str:
    if objective not in BLT_OBJECTIVES:
        raise ValueError(f"objective must be one of {BLT_OBJECTIVES}, got {objective!r}")
    return objective


def check_blt_parameters(theta: ArrayLike, omega: ArrayLike) -> tuple[_F, _F]:
    """Validate BLT parameters: 1-D float arrays of the same length d in [1, MAX_BUFFERS],
    0 < theta_j < 1, omega_j finite (ValueError otherwise). Returns float64 copies."""
    try:
        th = np.array(theta, dtype=float)
        om = np.array(omega, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("theta and omega must be 1-D arrays of numbers") from None
    if th.ndim != 1 or om.ndim != 1 or th.size == 0:
        raise ValueError(f"theta and omega must be non-empty 1-D arrays, got shapes "
                         f"{th.shape} and {om.shape}")
    if th.size != om.size:
        raise ValueError(f"theta and omega must have the same length (one per buffer), got "
                         f"{th.size} and {om.size}")
    if th.size > MAX_BUFFERS:
        raise ValueError(f"at most {MAX_BUFFERS} buffers, got {th.size}")
    if not np.all(np.isfinite(th)) or not np.all((th > 0) & (th < 1)):
        raise ValueError(f"every theta_j must lie in the open interval (0, 1), got {th.tolist()}")
    if not np.all(np.isfinite(om)):
        raise ValueError("omega must be finite")
    return th, om


def inverse_spectral_radius(theta: ArrayLike, omega: ArrayLike) -> float:
    """Largest |eigenvalue| of F = diag(theta) - 1 omega', the state matrix of C^-1's buffer
    recurrence (McMahan et al. 2024, Alg. 3; module docstring): C^-1's coefficients decay
    geometrically iff it is < 1."""
    th, om = check_blt_parameters(theta, omega)
    return float(np.max(np.abs(np.linalg.eigvals(np.eye(th.size) - _inverse_system(th, om)))))


# ----------------------------------------------------------------- state-space helpers
def _systems(delta: _C, omega: _C) -> tuple[_C, _C, _C]:
    """E = I - F, g, h for the c-system and the b-system (module docstring), batched over the
    leading axes of ``delta`` = 1 - theta and ``omega``, both padded to d + 1 states and
    stacked on a new axis -2 of the batch (c first). Works for complex (complex-step) input."""
    d = delta.shape[-1]
    batch = delta.shape[:-1]
    dt = np.result_type(delta, omega)
    E = np.zeros(batch + (2, d + 1, d + 1), dtype=dt)
    idx = np.arange(d)
    E[..., 0, idx, idx] = delta                          # c: F = diag(theta)
    E[..., 1, :d, :d] = omega[..., None, :]              # b: diag(delta) + 1 omega'
    E[..., 1, idx, idx] += delta
    E[..., 1, d, :d] = omega                             #    last row: omega', 0
    g = np.ones(batch + (2, d + 1), dtype=dt)
    g[..., 0, d] = 0.0                                   # the c-system's padding state is inert
    h = np.zeros(batch + (2, d + 1), dtype=dt)
    h[..., 0, :d] = omega
    h[..., 1, :d] = -omega
    h[..., 1, d] = 1.0
    return E, g, h


def _transform(E: _C, X: _C) -> _C:
    """F X F' with F = I - E (batched; plain transposes: complex-step safe)."""
    Z = X - E @ X
    return Z - Z @ np.swapaxes(E, -1, -2)


def _power_moments(E: _C, g: _C, N: int) -> tuple[_C, _C]:
    """S = sum_(m<N) F^m g g' F^m' and W = sum_(m<N) (N - m) F^m g g' F^m', F = I - E
    (batched), by doubling over the bits of N (module docstring). O(m^3 log N)."""
    Q = g[..., :, None] * g[..., None, :]
    zero = np.zeros_like(Q)
    if N <= 0:
        return zero, zero
    Eb, Sb, Wb, length = E, Q, Q, 1            # the block of ``length`` = 2^i terms
    acc: tuple[_C, _C, _C] | None = None        # (Ea, Sa, Wa): the first ``total`` terms
    total = 0
    while True:
        if N & 1:
            if acc is None:
                acc, total = (Eb, Sb, Wb), length
            else:                               # terms total..total+length-1: F^total block
                Ea, Sa, Wa = acc
                acc = (Ea + Eb - Ea @ Eb, Sa + _transform(Ea, Sb),
                       length * Sa + Wa + _transform(Ea, Wb))
                total += length
        N >>= 1
        if not N:
            return (zero, zero) if acc is None else (acc[1], acc[2])
        Sb, Wb = Sb + _transform(Eb, Sb), length * Sb + Wb + _transform(Eb, Wb)
        Eb = 2.0 * Eb - Eb @ Eb
        length *= 2


def _losses_from_delta(delta: _C, omega: _C, n: int) -> tuple[_C, _C, _C]:
    """(sens^2, sum_k b_k^2, sum_k (n - k) b_k^2) per unit sigma^2, batched (module docstring)."""
    E, g, h = _systems(delta, omega)
    S, W = _power_moments(E, g, n - 1)
    quad_s = np.einsum("...i,...ij,...j->...", h, S, h)
    quad_w = np.einsum("...i,...ij,...j->...", h, W, h)
    sens2 = 1.0 + quad_s[..., 0]
    sum_b2 = 1.0 + quad_s[..., 1]
    wsum_b2 = n + quad_w[..., 1]
    return sens2, sum_b2, wsum_b2


def _objective_value(sens2: _C, sum_b2: _C, wsum_b2: _C, n: int, objective: str) -> _C:
    return sens2 * (wsum_b2 / n if objective == "mean" else sum_b2)


def blt_loss(theta: ArrayLike, omega: ArrayLike, n: int, objective: str = "mean") -> float:
    """Error per unit sigma^2 of the BLT(theta, omega) factorisation of the n x n prefix
    workload (add/remove / event level): "mean" = sens^2 ||M C^-1||_F^2 / n (the mean prefix
    variance), "max" = sens^2 max_t ||row t of M C^-1||^2 (the last prefix). Closed form,
    O(d^3 log n), any n <= 2^40 (module docstring); equals
    ``expected_error(workloads.prefix(n), Mechanism(strategy, rho=0.5)) / n`` for "mean"."""
    th, om = check_blt_parameters(theta, omega)
    n = _check_n(n)
    _check_objective(objective)
    sens2, s, w = _losses_from_delta(1.0 - th, om, n)
    return float(_objective_value(sens2, s, w, n, objective))


def blt_sensitivity_squared(theta: ArrayLike, omega: ArrayLike, n: int) -> float:
    """sum_(k<n) c_k^2, the squared l2 sensitivity of the n x n BLT (column 0), by the
    closed form D^2 + h' S h of the c-system (module docstring), O(d^3 log n)."""
    th, om = check_blt_parameters(theta, omega)
    return float(_losses_from_delta(1.0 - th, om, _check_n(n))[0])


# ----------------------------------------------------------------- participation
def _participation_terms(n: int, part: Participation) -> tuple[int, int]:
    """(b, k'): the worst pattern of a BLT with omega > 0 under the schema is
    {0, b, ..., (k' - 1) b} (module docstring, "Participation")."""
    if part.is_single:
        return 1, 1
    part.check_steps(n)
    return part.b, part.max_participations(n)


def _participation_sens2(delta: _C, omega: _C, n: int, b: int, kk: int) -> _C:
    """sum_(i, j < k') X_(ib, jb), X = C'C, in closed form (module docstring,
    "Participation"), batched over the leading axes; complex-step safe. O(d^2 k'^2)."""
    logt = np.log1p(-delta)                                   # log theta, accurate near 1
    dl, dm = delta[..., :, None], delta[..., None, :]
    one_minus = dl + dm - dl * dm                             # 1 - theta_l theta_m
    logp = logt[..., :, None] + logt[..., None, :]
    ww = omega[..., :, None] * omega[..., None, :]
    total: _C = np.zeros(delta.shape[:-1], dtype=np.result_type(delta, omega))
    for j in range(kk):
        length = n - j * b                                    # rows below step j b
        # sum_(m=1)^(length-1) (theta_l theta_m)^(m-1) = (1 - (theta theta')^(L-1)) / (1 - ..)
        geo = -np.expm1((length - 1) * logp) / one_minus
        for i in range(j + 1):
            gap = (j - i) * b
            if gap == 0:
                term = 1.0 + np.einsum("...lm,...lm->...", ww, geo)
            else:
                c_gap = np.einsum("...l,...l->...", omega, np.exp((gap - 1) * logt))
                term = c_gap + np.einsum("...lm,...lm,...m->...", ww, geo,
                                         np.exp(gap * logt))
            total = total + (term if gap == 0 else 2.0 * term)
    return total


def blt_participation_sensitivity_squared(theta: ArrayLike, omega: ArrayLike, n: int,
                                          participation: Participation) -> float:
    """Squared l2 sensitivity of the n x n BLT (omega > 0) under a participation schema
    (vector or scalar contributions: X = C'C >= 0): sum_(i, j < k') X_(ib, jb), the worst
    pattern {0, b, ..., (k' - 1) b}, in closed form, O(d^2 k'^2) (module docstring,
    "Participation"). Fixed-epoch needs omega > 0; min-sep also sum(omega) <= 1 (non-
    increasing coefficients), else ValueError."""
    th, om = check_blt_parameters(theta, omega)
    n = _check_n(n)
    part = _check_blt_participation(participation, om)
    b, kk = _participation_terms(n, part)
    if kk == 1:
        return blt_sensitivity_squared(th, om, n)
    return float(_participation_sens2(1.0 - th, om, n, b, kk).real)


def blt_participation_loss(theta: ArrayLike, omega: ArrayLike, n: int,
                           participation: Participation, objective: str = "mean") -> float:
    """:func:`blt_loss` with the sensitivity under ``participation``
    (:func:`blt_participation_sensitivity_squared`): loss per unit noise of the BLT
    factorisation of the prefix workload, mean or max over steps."""
    th, om = check_blt_parameters(theta, omega)
    n = _check_n(n)
    _check_objective(objective)
    sens2 = np.asarray(blt_participation_sensitivity_squared(th, om, n, participation))
    _, s, w = _losses_from_delta(1.0 - th, om, n)
    return float(_objective_value(sens2, s, w, n, objective))


def _check_blt_participation(participation: object, omega: _F | None = None) -> Participation:
    part = as_participation(participation)
    if not part.is_single and part.kind == "min_sep" and part.k is None:
        raise ValueError("participation: the BLT under min_sep needs k (at most k "
                         "participations)")
    if omega is not None and not part.is_single:
        if np.any(omega <= 0):
            raise ValueError("omega must be > 0 for the BLT's participation sensitivity")
        if part.kind == "min_sep" and float(omega.sum()) > 1.0:
            raise ValueError("omega must sum to at most 1 under min_sep (non-increasing "
                             "coefficients, whose worst pattern is {0, b, 2b, ...})")
    return part


# ----------------------------------------------------------------- sequences, O(n d)
def _impulse_response(E: _C, g: _C, h: _C, D: float, n: int) -> _F:
    """s_0 = D, s_k = h' F^(k-1) g (k = 1..n-1), F = I - E (real, one system), O(n m) work:
    n = L x K blocks, rows h' F^j (j < L) times block starts F^(iL) g (i < K), both built by
    doubling with the powers in I - E form."""
    check_memory(24 * n, f"the coefficient array of a BLT strategy over {n} bins",
                 "use fewer bins; the BLT's errors and sensitivities need no coefficients "
                 "(closed forms in log n)")
    out = np.empty(n)
    out[0] = D
    m = n - 1
    if m == 0:
        return out
    L = 1 << max(0, (math.isqrt(m) - 1).bit_length())   # a power of 2 near sqrt(m)
    H = h[None, :].copy()                       # rows h' F^j, j < len(H)
    Ep = E.copy()                               # F^len(H) = I - Ep
    while H.shape[0] < L:
        H = np.concatenate([H, H - H @ Ep])     # h' F^(j + len) = h' F^j (I - Ep)
        Ep = Ep + Ep - Ep @ Ep
    K = -(-m // L)
    X = g[:, None].copy()                       # columns F^(iL) g
    EL = Ep                                     # F^L = I - EL, then F^(L len(X))
    while X.shape[1] < K:
        X = np.concatenate([X, X - EL @ X], axis=1)
        EL = EL + EL - EL @ EL
    out[1:] = (H @ X[:, :K]).T.ravel()[:m]
    return out


def _sequence(theta: ArrayLike, omega: ArrayLike, n: int, system: int) -> _F:
    """The impulse response of :func:`_systems`' c-system (0) or b-system (1), D = 1."""
    th, om = check_blt_parameters(theta, omega)
    E, g, h = _systems(1.0 - th, om)
    return _impulse_response(E[system], g[system], h[system], 1.0, _check_n(n))


def blt_coefficients(theta: ArrayLike, omega: ArrayLike, n: int) -> _F:
    """c_0..c_(n-1): c_0 = 1, c_i = sum_j omega_j theta_j^(i-1) (Dvijotham et al. 2024; module
    docstring), by the c-system's recurrence. O(n d)."""
    return _sequence(theta, omega, n, 0)


def _inverse_system(th: _F, om: _F) -> _F:
    """E = I - F for C^-1's state matrix F = diag(theta) - 1 omega' (module docstring)."""
    return np.diag(1.0 - th) + np.outer(np.ones(th.size), om)


def blt_inverse_coefficients(theta: ArrayLike, omega: ArrayLike, n: int) -> _F:
    """u = 1 / c(z) mod z^n, the first column of C^-1, by the buffer recurrence
    (u_0 = 1, u_k = -omega' F^(k-1) 1, F = diag(theta) - 1 omega'; McMahan et al. 2024,
    Alg. 3). O(n d)."""
    th, om = check_blt_parameters(theta, omega)
    return _impulse_response(_inverse_system(th, om), np.ones(th.size), -om, 1.0, _check_n(n))


def blt_noise_coefficients(theta: ArrayLike, omega: ArrayLike, n: int) -> _F:
    """b = cumsum(u), the first column of B = M C^-1 (the noise weights of the running counts),
    from the b-system's (d+1)-state recurrence (module docstring). O(n d)."""
    return _sequence(theta, omega, n, 1)


# ----------------------------------------------------------------- optimisation
def _unpack(x: _C) -> tuple[_C, _C]:
    """theta = sigmoid(a) (so delta = 1 - theta = 1 / (1 + e^a)), omega = e^beta; analytic
    (complex-step safe)."""
    d = x.shape[-1] // 2
    a, beta = x[..., :d], x[..., d:]
    return 1.0 / (1.0 + np.exp(a)), np.exp(beta)


def _loss_and_grad(x: _F, n: int, objective: str) -> tuple[float, _F]:
    """The objective and its gradient in the unconstrained x, by complex steps: one batched
    doubling pass over the 2d perturbations x + i h e_k (exact to rounding)."""
    p = x.size
    xs = np.tile(x.astype(complex), (p, 1))
    xs[np.arange(p), np.arange(p)] += 1j * _COMPLEX_STEP
    delta, omega = _unpack(xs)
    with np.errstate(all="ignore"):
        vals = _objective_value(*_losses_from_delta(delta, omega, n), n, objective)
    f = float(vals[0].real)
    grad = vals.imag / _COMPLEX_STEP
    if not (math.isfinite(f) and np.all(np.isfinite(grad))) or f <= 0:
        return 1e300, np.zeros(p)
    return f, grad


def _unpack_capped(x: _C) -> tuple[_C, _C]:
    """As :func:`_unpack` but omega = e^beta / (1 + sum e^beta) (sum(omega) < 1: c_1 < c_0,
    so the coefficients are non-increasing); analytic."""
    delta, e = _unpack(x)
    return delta, e / (1.0 + e.sum(axis=-1, keepdims=True))


def _part_loss_and_grad(x: _F, n: int, objective: str, b: int, kk: int,
                        capped: bool) -> tuple[float, _F]:
    """:func:`_loss_and_grad` with the participation sensitivity (closed form)."""
    p = x.size
    xs = np.tile(x.astype(complex), (p, 1))
    xs[np.arange(p), np.arange(p)] += 1j * _COMPLEX_STEP
    with np.errstate(all="ignore"):
        delta, omega = (_unpack_capped if capped else _unpack)(xs)
        _, s, w = _losses_from_delta(delta, omega, n)
        vals = _objective_value(_participation_sens2(delta, omega, n, b, kk), s, w, n,
                                objective)
    f = float(vals[0].real)
    grad = vals.imag / _COMPLEX_STEP
    if not (math.isfinite(f) and np.all(np.isfinite(grad))) or f <= 0:
        return 1e300, np.zeros(p)
    return f, grad


@functools.lru_cache(maxsize=64)
def _optimize_participation_cached(n: int, d: int, objective: str, b: int, kk: int,
                                   capped: bool, starts: int
                                   ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    th, om = _optimize_cached(n, d, objective, starts)     # the single-participation optimum
    x0s = [np.concatenate([np.log(th) - np.log1p(-np.array(th)), np.log(om)])]
    x0s += _starts(n, d, starts)
    best: OptimizeResult | None = None
    for x0 in x0s:
        if capped:                                          # beta with sum(omega) < 1
            om0 = np.exp(x0[d:])
            om0 = om0 * min(1.0, 0.9 / float(om0.sum()))
            x0 = np.concatenate([x0[:d], np.log(om0) - math.log1p(-float(om0.sum()))])
        res = minimize(_part_loss_and_grad, x0, args=(n, objective, b, kk, capped), jac=True,
                       method="L-BFGS-B", options={"maxiter": 3000, "ftol": 1e-15,
                                                   "gtol": 1e-11})
        if best is None or res.fun < best.fun:
            best = res
    if best is None:
        raise ValueError("starts must be >= 1")
    x = best.x.copy()
    if capped:                                              # back to log omega
        e = np.exp(x[d:])
        x[d:] = np.log(e / (1.0 + e.sum()))
    return _valid_parameters(x)


def _starts(n: int, d: int, count: int) -> list[_F]:
    """Initial x: quadrature nodes x_j = -log theta_j, log-spaced over [x_min, x_max], weights
    omega_j = sqrt(x_j) dv e^(-x_j) / pi (module docstring), for a few ranges."""
    out: list[_F] = []
    lo_scales = (1.0, 10.0, 0.2, 3.0, 0.05, 30.0)
    hi_values = (1.0, 0.3, 2.0, 0.1, 3.0, 0.5)
    for i in range(count):
        x_min = min(lo_scales[i % 6] / n, 0.5) if n > 1 else 0.5
        x_max = max(hi_values[(i // 2) % 6], 2.0 * x_min)
        if d == 1:
            xs = np.array([math.sqrt(x_min * x_max)])
            dv = math.log(x_max / x_min) if x_max > x_min else 1.0
        else:
            v = np.linspace(math.log(x_min), math.log(x_max), d)
            xs = np.exp(v)
            dv = v[1] - v[0]
        theta = np.exp(-xs)
        omega = np.sqrt(xs) * dv * np.exp(-xs) / math.pi
        a = np.log(theta) - np.log1p(-theta)         # logit
        out.append(np.concatenate([a, np.log(omega)]))
    return out


@functools.lru_cache(maxsize=64)
def _optimize_cached(n: int, d: int, objective: str,
                     starts: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    best: OptimizeResult | None = None
    for x0 in _starts(n, d, starts):
        res = minimize(_loss_and_grad, x0, args=(n, objective), jac=True, method="L-BFGS-B",
                       options={"maxiter": 3000, "ftol": 1e-15, "gtol": 1e-11})
        if best is None or res.fun < best.fun:
            best = res
    if best is None:  # starts >= 1 (checked by optimize_blt)
        raise ValueError("starts must be >= 1")
    return _valid_parameters(best.x)


def _valid_parameters(x: _F) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(theta, omega) from the optimiser's x, theta decreasing, every theta_j in
    [THETA_MIN, 1 - 2^-53]. theta = sigmoid(a) is computed directly (``1 - delta`` keeps no
    relative precision when theta is small) and clipped: at small n the optimum can drive a
    buffer to theta -> 0 (a one-step tap, c_1 += omega_j) and sigmoid underflows to 0,
    outside the open interval the recurrences need (the streaming state uses log theta).
    Clipping to THETA_MIN leaves c_0 and c_1 unchanged and moves c_i (i >= 2) by at most
    omega_j 1e-300 in absolute terms; the reported loss is recomputed from the returned
    parameters. A buffer whose omega underflows to 0 is inert
    (no term in c, a state that feeds nothing in C^-1) and is kept, so ``buffers`` stays
    what was asked."""
    d = x.shape[-1] // 2
    theta = np.clip(expit(x[:d]), THETA_MIN, np.nextafter(1.0, 0.0))
    omega = np.exp(x[d:])
    order = np.argsort(-theta, kind="stable")      # theta decreasing
    return tuple(theta[order].tolist()), tuple(omega[order].tolist())


def optimize_blt(n: int, buffers: int = DEFAULT_BUFFERS, objective: str = "mean", *,
                 starts: int = 4) -> tuple[_F, _F, float]:
    """BLT parameters (theta, omega, loss) minimising :func:`blt_loss` for the n x n prefix
    workload with ``buffers`` buffers (module docstring: L-BFGS on theta = sigmoid(a),
    omega = e^beta from ``starts`` quadrature starts, exact complex-step gradients of the
    O(d^3 log n) closed form). Cached per (n, buffers, objective, starts). theta decreasing."""
    n = _check_n(n)
    d = _check_buffers(buffers)
    _check_objective(objective)
    if isinstance(starts, (bool, np.bool_)) or not isinstance(starts, Integral) or starts < 1:
        raise ValueError(f"starts must be an integer >= 1, got {starts!r}")
    th, om = _optimize_cached(n, d, objective, int(starts))
    theta, omega = np.array(th), np.array(om)
    return theta, omega, blt_loss(theta, omega, n, objective)


# ----------------------------------------------------------------- the strategy
class BLTStrategy(ToeplitzStrategy):
    """The n x n BLT strategy C = T(c) (module docstring): a
    :class:`~dptree_opt.strategies.toeplitz.ToeplitzStrategy` whose first column is
    c_i = sum_j omega_j theta_j^(i-1) and whose inverse coefficients come from the O(n d)
    buffer recurrence instead of Newton's series inverse.

    Attributes: ``theta``, ``omega`` (read-only), ``buffers``, ``objective`` (what the parameters
    were optimised for, None when given), ``loss(objective)`` (per unit sigma^2)."""

    def __init__(self, theta: ArrayLike, omega: ArrayLike, n: int, *,
                 objective: str | None = None, n_totals: int = 0, name: str = "blt") -> None:
        th, om = check_blt_parameters(theta, omega)
        n = _check_n(n)
        super().__init__(blt_coefficients(th, om, n), n_totals=n_totals, name=name)
        self._theta = readonly(th)
        self._omega = readonly(om)
        self.objective = objective
        # the schema the parameters were optimised for (set by :func:`blt`)
        self.participation: Participation = as_participation(None)

    @property
    def theta(self) -> _F:
        """The buffer decays theta_j (read-only)."""
        return self._theta

    @property
    def omega(self) -> _F:
        """The output scales omega_j (read-only)."""
        return self._omega

    @property
    def buffers(self) -> int:
        """d, the number of buffers."""
        return int(self._theta.size)

    def __repr__(self) -> str:
        return (f"<BLTStrategy {self.name}: {self.n_rows} rows x {self.n_bins} bins, "
                f"{self.buffers} buffers>")

    def inverse_coefficients(self) -> _F:
        """First column of C^-1 by the buffer recurrence, cached. O(n d)."""
        if self._inverse is None:
            self._inverse = readonly(blt_inverse_coefficients(self._theta, self._omega,
                                                               self._n_bins))
        return self._inverse

    def noise_coefficients(self) -> _F:
        """b = first column of M C^-1 (cumsum of the inverse's column). O(n d)."""
        return blt_noise_coefficients(self._theta, self._omega, self._n_bins)

    def loss(self, objective: str = "mean") -> float:
        """:func:`blt_loss` of these parameters at this n (per unit sigma^2)."""
        return blt_loss(self._theta, self._omega, self._n_bins, objective)


def check_blt_options(buffers: int | None, objective: str, theta: ArrayLike | None,
                      omega: ArrayLike | None) -> tuple[_F, _F] | None:
    """Validate the BLT options shared by :func:`blt` and the streaming BLT counter: the
    ``objective``, ``buffers`` (None or an int >= 1) and ``theta`` / ``omega`` (both or
    neither; ``buffers``, if given, equal to their length). Returns the checked (theta, omega)
    arrays when given, else None (the parameters are to be optimised)."""
    _check_objective(objective)
    if buffers is not None:
        _check_buffers(buffers)
    if (theta is None) != (omega is None):
        raise ValueError("give both theta and omega (or neither, to optimise them)")
    if theta is None or omega is None:
        return None
    th, om = check_blt_parameters(theta, omega)
    if buffers is not None and buffers != th.size:
        raise ValueError(f"buffers = {buffers} but theta and omega have {th.size} entries")
    return th, om


def blt(n: int, *, buffers: int | None = None, objective: str = "mean",
        theta: ArrayLike | None = None, omega: ArrayLike | None = None,
        participation: Participation | None = None) -> BLTStrategy:
    """The n x n BLT strategy with ``buffers`` buffers (default 4).

    With ``theta`` and ``omega`` given (both; 0 < theta_j < 1; ``buffers``, if given, must
    equal their length) the BLT is built as is; otherwise the parameters minimise the prefix
    workload's ``objective`` ("mean" or "max" error per unit sigma^2, :func:`blt_loss`) by
    :func:`optimize_blt` (Dvijotham et al. 2024 optimise "max"; seconds at n = 2^20).
    ``participation`` (``fixed_epoch(k, b)`` or ``min_sep(k, b)``; default single): the
    parameters minimise the loss under that schema instead,
    :func:`blt_participation_loss` (omega > 0; under min_sep also sum(omega) < 1, the class
    whose worst pattern is {0, b, ...}: module docstring, "Participation"); the schema is
    kept as ``.participation``. Never builds an n x n matrix (coefficients O(n d), errors by
    the Toeplitz paths)."""
    n = _check_n(n)
    given = check_blt_options(buffers, objective, theta, omega)
    part = _check_blt_participation(participation, None if given is None else given[1])
    if given is not None:
        strategy = BLTStrategy(*given, n, objective=None)
    elif part.is_single:
        th, om, _ = optimize_blt(n, DEFAULT_BUFFERS if buffers is None else buffers, objective)
        strategy = BLTStrategy(th, om, n, objective=objective)
    else:
        b, kk = _participation_terms(n, part)
        d = DEFAULT_BUFFERS if buffers is None else buffers
        th_t, om_t = _optimize_participation_cached(n, d, objective, b, kk,
                                                    part.kind == "min_sep", 4)
        strategy = BLTStrategy(np.array(th_t), np.array(om_t), n, objective=objective)
    strategy.participation = part
    return strategy
