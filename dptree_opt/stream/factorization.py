"""Continual counting with Gaussian factorisation mechanisms: the square root and BLT
(docs/math.md sections 7 and 9).

Both release y = C x + z over the T steps of the stream, C = T(c) lower-triangular Toeplitz
(notation of :mod:`dptree_opt.strategies.toeplitz`, c_0 = 1), z ~ N(0, sigma^2 I), and answer
the running count after step t with row t of B y, B = M C^-1 = T(b) (M the prefix matrix).
Since B y = M x + B z, the estimate is computed as

    estimate_t = (exact prefix count)_t + (B z)_t,

the same number as the post-processing B y in exact arithmetic; it only involves steps <= t,
so the counter is causal.

Privacy (event level: one step's count changes by 1, i.e. one record added or removed). That
changes one input x_j by 1 and y by column j of C, a prefix of (c_0, .., c_(T-1)), so the l2
sensitivity is sens = sqrt(sum_(k<T) c_k^2) (column 0) and sigma = sens / sqrt(2 rho) gives
rho-zCDP (Bun & Steinke 2016; docs/math.md section 0).

Error. The running count after t steps has variance sigma^2 sum_(k<t) b_k^2 (row t - 1 of
T(b)), exactly; docs/math.md section 9.

* :class:`SqrtEngine` (Henzinger, Upadhyay, Upadhyay, SODA 2023; Fichtenberger et al.
  ICML 2023): c_k = binom(2k, k) / 4^k, C^2 = M, so B = C and b = c. (B z)_t needs every past
  draw: O(t) memory and an O(t) numpy dot per step.
* :class:`BLTEngine` (Dvijotham, McMahan, Pillutla, Steinke, Thakurta, FOCS 2024): C a
  buffered linear Toeplitz matrix with d buffers (:mod:`dptree_opt.strategies.blt`); C^-1 z
  streams with d buffers (w_t = z_t - omega . s_t, s <- theta * s + w_t) and B z is the running
  sum of w: O(d) memory and time per step. Parameters optimised for the horizon by default.

Noise. ``rng=None`` (real use): z from OpenDP's float Gaussian (``make_gaussian`` on float
vectors; built once, its privacy map at the sensitivity checked against rho when the engine is
made), drawn ahead in blocks of at most 4096 (independent of the data; a
:class:`~dptree_opt.stream.secret.NoiseBuffer`: a secure engine refuses copying and pickling).

Budget sanity for the float Gaussian, checked when the engine is made (secure or simulation),
in the terms of the integer counters' rule (:func:`dptree_opt.privacy.check_noise_scales`):
the running count after t steps carries noise of standard deviation sigma_t = sigma
sqrt(sum_(k<t) b_k^2), increasing in t from sigma_1 = sigma (b_0 = 1) to sigma_T. "Identically
zero": 64 sigma_1 < 2^-53 (half an ulp of 1), so every draw vanishes when added to any count
>= 1 and the exact counts would be published (float noise is never exactly 0, so "variance 0
in double" would only catch sigma < 1e-162). "Saturating": 64 sigma_T >= 2^53, where the noisy
counts leave the range in which doubles hold every integer. A numpy ``Generator``:
simulation noise, no privacy guarantee. Caveat (also in ``account()``): the correlated noise
B z is computed in double precision from the sampled z; the guarantee is that of the
real-valued mechanism (floating-point effects of the post-processing are not analysed).
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ..privacy import EXACT_LIMIT, HALF_ULP_OF_ONE, calibrate, check_budget, check_noise_scales
from ..strategies.blt import (
    DEFAULT_BUFFERS,
    MAX_BLT_BINS,
    blt_coefficients,
    blt_inverse_coefficients,
    blt_loss,
    blt_noise_coefficients,
    blt_sensitivity_squared,
    check_blt_options,
    inverse_spectral_radius,
    optimize_blt,
)
from ..strategies.factorization import sqrt_coefficients
from ..strategies.toeplitz import series_multiply, toeplitz
from ..validation import check_int
from .base import MAX_STRATEGY_STEPS, CounterEngine, StrategyRows
from .noise import check_rng, checked_float_gaussian, gaussian_vector
from .secret import NoiseBuffer

if TYPE_CHECKING:
    from opendp.mod import Measurement

__all__ = [
    "MAX_SQRT_HORIZON",
    "MAX_STRATEGY_STEPS",
    "BLTEngine",
    "BLTRecurrence",
    "SqrtEngine",
    "ToeplitzEngine",
]

# The square root keeps every past draw (O(T) memory, O(t) per step): horizons up to 2^24.
MAX_SQRT_HORIZON = 1 << 24
# BLT: O(d) per step, closed-form sensitivity: the strategy's bound (= stream.Counter's).
MAX_BLT_HORIZON = MAX_BLT_BINS
_MAX_BLOCK = 4096
_CHUNK = 1 << 20
UNIT = "event (one step's count changes by 1)"
CAVEAT = ("the correlated noise B z (B = M C^-1) is computed in double precision from the "
          "sampled z (OpenDP's exact sampler when secure); the privacy guarantee is that of "
          "the real-valued mechanism y = C x + z and its post-processing B y (floating-point "
          "effects of the post-processing are not analysed)")


def _sampler(secure: bool) -> str:
    if not secure:
        return "numpy simulation (Generator.normal; no privacy guarantee)"
    from importlib.metadata import version
    return (f"OpenDP {version('opendp')} make_gaussian on vector_domain(atom_domain(T=float, "
            "nan=False)), l2_distance(T=float): float Gaussian (an exact discrete Gaussian on "
            "a fine dyadic grid, rounded to double; OS randomness), applied to zeros")


class ToeplitzEngine(CounterEngine):
    """Shared engine for a lower-triangular Toeplitz factorisation counter (module docstring).

    Subclasses give the strategy coefficients c, the noise coefficients b (first column of
    M C^-1), the squared sensitivity over the horizon, and one step of (B z)_t and of b_t."""

    name = "toeplitz"
    description = "lower-triangular Toeplitz factorisation"
    noise = "gaussian"
    max_horizon = MAX_BLT_HORIZON
    horizon_note = ""       # why the horizon is limited, and what to use beyond
    horizon: int            # always bounded
    sensitivity: float
    sigma: float
    sigma2: float
    estimate: float
    variance: float
    _rng: np.random.Generator | None
    _measurement: Measurement | None
    _block: NoiseBuffer
    _pos: int
    _block_size: int
    _var_sum: float

    def __init__(self, horizon: int, *, noise: str = "gaussian", budget: float,
                 rng: np.random.Generator | None = None) -> None:
        if noise != "gaussian":
            raise ValueError(f"mechanism {self.name!r} is Gaussian only (rho-zCDP, l2 "
                             f"sensitivity): give rho, not epsilon (got noise={noise!r})")
        if isinstance(horizon, (bool, np.bool_)) or not isinstance(horizon, Integral) \
                or not 1 <= int(horizon) <= self.max_horizon:
            raise ValueError(f"horizon must be an integer in [1, {self.max_horizon}] for "
                             f"mechanism {self.name!r}, got {horizon!r}{self.horizon_note}")
        self.horizon = int(horizon)
        self.budget = check_budget(budget, "rho")
        self._rng = check_rng(rng)
        self.secure = rng is None
        self._setup()
        self.sensitivity = math.sqrt(self._sensitivity_squared())
        self.sigma, self.sigma2 = calibrate(self.sensitivity, self.budget, "gaussian")
        self._check_budget_sanity()
        # secure: OpenDP's measurement, its map at the sensitivity checked against rho, built
        # once before anything is drawn
        self._measurement = (checked_float_gaussian(self.sigma, self.sensitivity, self.budget)
                             if self.secure else None)
        self.t = 0
        self.total = 0
        self._var_sum = 0.0
        self._block = NoiseBuffer(np.zeros(0), secure=self.secure)
        self._pos = 0
        self._block_size = 16
        self.estimate = 0.0
        self.variance = 0.0

    # ------------------------------------------------------------- subclass hooks
    def _setup(self) -> None:
        """Mechanism state (before the sensitivity is computed)."""

    def _sensitivity_squared(self) -> float:
        raise NotImplementedError

    def _noise_sum_squares(self) -> float:
        """sum_(k<T) b_k^2: the last running count's noise variance over sigma^2."""
        raise NotImplementedError

    def _check_budget_sanity(self) -> None:
        """Refuse a rho whose float Gaussian noise vanishes on every count >= 1 or saturates
        (module docstring), before any measurement is built."""
        with np.errstate(over="ignore"):
            last = self.sigma * math.sqrt(self._noise_sum_squares())
        check_noise_scales([self.sigma, last], [self.sigma2, last * last], budget_name="rho",
                           budget=self.budget, resolution=HALF_ULP_OF_ONE,
                           groups=["the first running count",
                                   f"the running count after T = {self.horizon} steps"])

    def coefficients(self, steps: int) -> np.ndarray:
        """c_0..c_(steps-1), the first column of C."""
        raise NotImplementedError

    def noise_coefficients(self, steps: int) -> np.ndarray:
        """b_0..b_(steps-1), the first column of B = M C^-1."""
        raise NotImplementedError

    def _step(self, z: float) -> tuple[float, float]:
        """Advance by one draw z_t: return ((B z)_t, b_t) for t = self.t."""
        raise NotImplementedError

    def _run(self, z: np.ndarray) -> np.ndarray:
        """B z for a whole stream on a fresh engine, leaving the state as after pushing."""
        raise NotImplementedError

    # ------------------------------------------------------------- noise
    def _draw(self) -> float:
        if not self.secure:
            return float(gaussian_vector(self.sigma, 1, self._rng)[0])
        if self._pos == len(self._block):  # secure: blocks of 16, 32, .., 4096 draws
            size = min(self._block_size, self.horizon - self.t)
            self._block.values = gaussian_vector(self.sigma, size, None, self._measurement)
            self._pos = 0
            self._block_size = min(2 * self._block_size, _MAX_BLOCK)
        z = float(self._block.values[self._pos])
        self._pos += 1
        return z

    # ------------------------------------------------------------- interface
    def _check_steps(self, steps: int, minimum: int = 1) -> int:
        """``steps`` for the coefficient functions: an integer in [minimum, horizon]."""
        return check_int(steps, "steps", minimum, self.horizon, why="the horizon")

    def push(self, count: int) -> tuple[float, float]:
        """Add the next step's exact count; return (private running count, its exact variance
        sigma^2 sum_(k<t) b_k^2). ValueError for a bad count or beyond the horizon (nothing
        drawn)."""
        count = self.check_step(count)
        noise, b_t = self._step(self._draw())
        self.t += 1
        self.total += count
        self._var_sum += b_t * b_t
        self.estimate = float(self.total) + noise
        self.variance = self.sigma2 * self._var_sum
        return self.estimate, self.variance

    def run(self, counts: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """A whole stream at once on a fresh engine (vectorised, FFT products): returns the
        running counts and their variances after steps 1..len(counts); afterwards ``push``
        continues from step len(counts). With a numpy Generator it equals pushing the counts
        one by one from the same seed (same draws; rounding aside)."""
        if self.t:
            raise ValueError("run() needs a fresh engine (no step pushed yet)")
        try:
            x = np.asarray(counts)
        except (TypeError, ValueError):
            raise ValueError("counts must be a 1-D array of non-negative integers") from None
        if x.ndim != 1 or x.size == 0 or x.size > self.horizon:
            raise ValueError(f"counts must be a 1-D array of 1..{self.horizon} counts, got "
                             f"shape {x.shape}")
        if x.dtype == bool or not np.issubdtype(x.dtype, np.integer) or np.any(x < 0):
            raise ValueError("counts must be non-negative integers")
        prefix = np.cumsum(x.astype(np.int64))
        if int(prefix[-1]) >= EXACT_LIMIT:
            raise ValueError("the running count would reach 2^53 (not exact in double)")
        var = self.step_variances(x.size)      # refused by size here, before any draw
        z = gaussian_vector(self.sigma, x.size, self._rng, self._measurement)
        noise = self._run(z)
        self.t = int(x.size)
        self.total = int(prefix[-1])
        self._var_sum = var[-1] / self.sigma2       # sigma2 > 0: c_0 = 1 and rho < inf
        est = prefix.astype(float) + noise
        self.estimate, self.variance = float(est[-1]), float(var[-1])
        return est, var

    def _step_variances(self, steps: int) -> np.ndarray:
        """Exact variances sigma^2 sum_(k<t) b_k^2 of the running counts after steps
        1..steps (default: the horizon; 0 gives an empty array), vectorised."""
        if steps == 0:
            return np.zeros(0)
        b = self.noise_coefficients(steps)
        return self.sigma2 * np.cumsum(b * b)

    def correlate(self, z: ArrayLike) -> np.ndarray:
        """B z = M C^-1 z (the noise of the running counts for draws z), by FFT. Stateless."""
        draws = np.asarray(z, dtype=float)
        if draws.ndim != 1 or not 1 <= draws.size <= self.horizon:
            raise ValueError(f"z must be a 1-D array of 1..{self.horizon} draws")
        return series_multiply(self.noise_coefficients(draws.size), draws)

    def strategy(self, steps: int) -> StrategyRows:
        """The first ``steps`` released rows: T(c) restricted to the first ``steps`` inputs
        (sparse), noise variance sigma^2 each, row i released at step i + 1. steps <= 8192."""
        steps = self.check_strategy_steps(steps, minimum=1)
        mat = toeplitz(self.coefficients(steps)).matrix
        return StrategyRows(mat, np.full(steps, self.sigma2), np.arange(1, steps + 1))

    def account(self) -> dict:
        """JSON-able privacy account (module docstring)."""
        return {
            "mechanism": f"{self.name}: {self.description}",
            "noise": "gaussian",
            "rho": self.budget,
            "budget": {"rho": self.budget},
            "unit": UNIT,
            "horizon": self.horizon,
            "sigma": self.sigma,
            "l2_sensitivity": self.sensitivity,
            "sensitivity_formula": "sqrt(sum_(k<T) c_k^2), column 0 of C",
            "sampler": _sampler(self.secure),
            "secure": self.secure,
            "caveat": CAVEAT,
        }


# ======================================================================== square root
def _sqrt_sum_squares(n: int) -> float:
    """sum_(k<n) c_k^2 for c_k = binom(2k, k) / 4^k, in chunks (O(n) time, O(2^20) memory)."""
    if n <= _CHUNK:
        c = sqrt_coefficients(n)
        return float(c @ c)
    total, last = 0.0, 1.0
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        k = np.arange(max(lo, 1), hi, dtype=float)
        c = last * np.cumprod((2.0 * k - 1.0) / (2.0 * k))
        if lo == 0:
            c = np.concatenate([[1.0], c])
        total += float(c @ c)
        last = float(c[-1])
    return total


class SqrtEngine(ToeplitzEngine):
    """The square-root factorisation counter (module docstring): C = M^(1/2), B = C.

    ``SqrtEngine(horizon, noise="gaussian", budget=rho, rng=None)``. Per step O(t) (a numpy
    dot over all past draws; the square root has no finite-state recurrence); memory O(t);
    horizon <= 2^24."""

    name = "sqrt"
    description = "square-root factorisation (Henzinger, Upadhyay, Upadhyay 2023)"
    max_horizon = MAX_SQRT_HORIZON
    horizon_note = ("; the square root keeps every past draw (O(T) memory, O(t) work per "
                    "step): use mechanism 'blt' (O(buffers) per step) for longer streams")
    variance_bytes_per_step = 32          # measured 24.0 at 2^22 steps

    def _setup(self) -> None:
        self._z = NoiseBuffer(np.zeros(0), secure=self.secure)   # every past draw
        self._c = np.zeros(0)

    def _sensitivity_squared(self) -> float:
        return _sqrt_sum_squares(self.horizon)

    def _noise_sum_squares(self) -> float:
        return self.sensitivity**2                     # b = c

    def coefficients(self, steps: int) -> np.ndarray:
        return sqrt_coefficients(self._check_steps(steps))

    def noise_coefficients(self, steps: int) -> np.ndarray:
        return sqrt_coefficients(self._check_steps(steps))

    def _grow(self, size: int) -> None:
        if size > len(self._z):
            cap = min(self.horizon, max(size, 2 * len(self._z), 64))
            z = np.zeros(cap)
            z[: self.t] = self._z.values[: self.t]
            self._z.values = z
            self._c = sqrt_coefficients(cap)

    def _step(self, z: float) -> tuple[float, float]:
        t = self.t
        self._grow(t + 1)
        past = self._z.values
        past[t] = z
        # (C z)_t = sum_(k<=t) c_k z_(t-k): one dot over the whole past, O(t)
        noise = float(self._c[: t + 1] @ past[t::-1]) if t else z
        return noise, float(self._c[t])

    def _run(self, z: np.ndarray) -> np.ndarray:
        self._grow(z.size)
        self._z.values[: z.size] = z
        return series_multiply(self._c[: z.size], z)

    def account(self) -> dict:
        out = super().account()
        out["strategy"] = "square root of the prefix matrix, c_k = binom(2k, k) / 4^k"
        out["memory"] = "O(t): every past draw"
        return out


# ======================================================================== BLT
class BLTRecurrence:
    """C^-1 of a BLT C streamed over vectors (Dvijotham et al. 2024; McMahan et al. 2024,
    Alg. 3; :mod:`dptree_opt.strategies.blt`): per step w_t = z_t - omega . s_t,
    s <- theta * s + w_t, with ``state`` s of shape (buffers, dim), and ``running`` the sum of
    w so far, i.e. (M C^-1 z)_t. O(buffers x dim) memory and work per step; shared by the
    scalar counter (dim 1) and :class:`dptree_opt.stream.CorrelatedNoise` (training noise)."""

    def __init__(self, theta: np.ndarray, omega: np.ndarray, dim: int) -> None:
        self.theta = np.asarray(theta, dtype=float)[:, None]
        self.omega = np.asarray(omega, dtype=float)
        self.state = np.zeros((self.omega.size, int(dim)))
        self.running = np.zeros(int(dim))

    def step(self, z: np.ndarray) -> np.ndarray:
        """Feed z_t (shape (dim,)); return the running sum (M C^-1 z)_t (the state's own
        array: copy it to keep it)."""
        w = z - self.omega @ self.state                # (C^-1 z)_t
        self.state *= self.theta
        self.state += w
        self.running += w
        return self.running


class BLTEngine(ToeplitzEngine):
    """The buffered-linear-Toeplitz counter (module docstring): O(buffers) memory and time
    per step.

    ``BLTEngine(horizon, noise="gaussian", budget=rho, rng=None, buffers=None,
    objective="mean", theta=None, omega=None)``: without ``theta``/``omega`` the parameters
    minimise the prefix ``objective`` ("mean" or "max" per unit sigma^2) for this horizon
    with ``buffers`` buffers (default 4; :func:`dptree_opt.strategies.blt.optimize_blt`,
    cached); with them (both, same length, 0 < theta < 1), they are used as given and C^-1
    must be stable (its poles, the eigenvalues of diag(theta) - 1 omega', inside the unit
    circle)."""

    name = "blt"
    description = ("buffered linear Toeplitz (Dvijotham, McMahan, Pillutla, Steinke, "
                   "Thakurta 2024)")
    options = ("buffers", "objective", "theta", "omega")
    variance_bytes_per_step = 32          # measured 24.1 (12 buffers) at 2^22 steps

    objective: str | None   # None when theta / omega are given

    def __init__(self, horizon: int, *, noise: str = "gaussian", budget: float,
                 rng: np.random.Generator | None = None, buffers: int | None = None,
                 objective: str = "mean", theta: ArrayLike | None = None,
                 omega: ArrayLike | None = None) -> None:
        given = check_blt_options(buffers, objective, theta, omega)
        if given is not None:
            radius = inverse_spectral_radius(*given)
            if not radius < 1.0:
                raise ValueError(f"C^-1 is not stable (spectral radius {radius!r} >= 1 of "
                                 "diag(theta) - 1 omega'): the noise would grow geometrically")
            self.objective = None
        else:
            self.objective = objective
        self._search_objective = objective      # what _setup optimises when not given
        self._given = given
        self._buffers = DEFAULT_BUFFERS if buffers is None else int(buffers)
        super().__init__(horizon, noise=noise, budget=budget, rng=rng)

    def _setup(self) -> None:
        if self._given is None:
            th, om, _ = optimize_blt(self.horizon, self._buffers, self._search_objective)
        else:
            th, om = self._given
        self.theta, self.omega = th, om
        self.buffers = int(th.size)
        self._noise_state = BLTRecurrence(th, om, 1)     # C^-1 z, and its running sum (B z)_t
        self._impulse = BLTRecurrence(th, om, 1)         # the same on the impulse e_0: b_t

    def _sensitivity_squared(self) -> float:
        return blt_sensitivity_squared(self.theta, self.omega, self.horizon)

    def _noise_sum_squares(self) -> float:
        # blt_loss "max" = sens^2 sum_(k<T) b_k^2 (closed form, any horizon)
        return blt_loss(self.theta, self.omega, self.horizon, "max") / self.sensitivity**2

    def coefficients(self, steps: int) -> np.ndarray:
        return blt_coefficients(self.theta, self.omega, self._check_steps(steps))

    def noise_coefficients(self, steps: int) -> np.ndarray:
        return blt_noise_coefficients(self.theta, self.omega, self._check_steps(steps))

    def _step(self, z: float) -> tuple[float, float]:
        noise = self._noise_state.step(np.array([z]))
        b_t = self._impulse.step(np.array([1.0 if self.t == 0 else 0.0]))
        return float(noise[0]), float(b_t[0])

    def _final_state(self, w: np.ndarray) -> np.ndarray:
        """s_T = sum_k theta^(T-1-k) w_k per buffer (the state after feeding w), chunked."""
        n = w.size
        out = np.zeros(self.buffers)
        log_th = np.log(self.theta)
        for lo in range(0, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            p = np.exp(np.outer(n - 1 - np.arange(lo, hi), log_th))
            out += w[lo:hi] @ p
        return out

    def _run(self, z: np.ndarray) -> np.ndarray:
        n = z.size
        u = blt_inverse_coefficients(self.theta, self.omega, n)
        w = series_multiply(u, z)                          # C^-1 z
        self._noise_state.state[:, 0] = self._final_state(w)
        self._noise_state.running[0] = float(w.sum())
        self._impulse.state[:, 0] = self._final_state(u)
        self._impulse.running[0] = float(u.sum())
        return np.cumsum(w)

    def account(self) -> dict:
        out = super().account()
        out.update({
            "strategy": "buffered linear Toeplitz: c_0 = 1, c_i = sum_j omega_j "
                        "theta_j^(i-1)",
            "buffers": self.buffers,
            "theta": [float(v) for v in self.theta],
            "omega": [float(v) for v in self.omega],
            "objective": self.objective,
            # sigma^2 ||T(b)||_F^2 / T and sigma^2 ||b||^2 = blt_loss / (2 rho)
            "mean_step_variance": blt_loss(self.theta, self.omega, self.horizon, "mean")
            / (2.0 * self.budget),
            "final_step_variance": blt_loss(self.theta, self.omega, self.horizon, "max")
            / (2.0 * self.budget),
            "memory": "O(buffers)",
        })
        return out
