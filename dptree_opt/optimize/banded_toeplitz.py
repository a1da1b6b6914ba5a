"""Optimised banded Toeplitz strategies for private learning, under multiple participations.

The strategy is C = T(c), lower-triangular Toeplitz with ``bands`` coefficients c_0..c_(B-1)
(zero beyond: C is banded), the workload the prefix sums W = T(1 / (1 - z)) over n steps,
and the estimate W C^-1 y (C is square and invertible: the BLUE). The loss per unit noise
(docs/math.md section 11) is

    loss(c) = sens(c)^2 x err(c),

the error of the prefix estimates when every row of C carries noise of variance sens^2
(= ``expected_error(Mechanism(C, rho=0.5, participation=...), prefix) / n`` for the mean
objective, Gaussian; a Laplace mechanism at epsilon has 2 loss / epsilon^2 with the l1
sensitivity). Both factors are O(n log n) with analytic gradients, so L-BFGS (scipy) runs at
n = 10^5 in seconds (McKenna, "Scaling up the banded matrix factorization mechanism", 2024,
arXiv 2405.15913, optimises the same objective by autodiff).

Error. With E(z) = 1 / c(z) (the first column of C^-1; Newton's series inverse) and
D(z) = E(z) / (1 - z) (d = cumsum(e)), W C^-1 = T(d), whose row t is (d_t, ..., d_0):

    per step  ||row t||^2 = sum_(m <= t) d_m^2,
    mean      err = (1/n) sum_(t<n) sum_(m<=t) d_m^2 = sum_m ((n - m) / n) d_m^2,
    max       err = sum_(m<n) d_m^2 (the last row: the per-step errors only grow).

Gradient: dD / dc_j = -z^j D(z) E(z), so with omega_m the weights above, g = omega d and
h = the coefficients of D E (one FFT product), d err / d c_j = -2 sum_(m >= j) g_m h_(m-j)
= -2 (T(h)' g)_j, one more FFT product (reversed).

Sensitivity (:mod:`dptree_opt.strategies.banded`): with bands <= b the columns of a pattern
are orthogonal; column j has squared norm S_2(min(B, n - j)) (S_p(L) = sum_(m<L) ``|c_m|^p``),
non-increasing in j, so the worst pattern is 0, b, 2b, ... (min sep; offset 0 for fixed
epoch) with k' = the most participations that fit:

    l2:  sens^2 = sum_m cnt_m c_m^2,       l1:  sens = sum_m cnt_m |c_m|,
    cnt_m = #{i < k' : m < n - i b}   (columns near the end are truncated),

smooth in c (l1: away from c_m = 0). Single participation: cnt = 1. The optimum is scale
free (loss(s c) = loss(c)); c_0 = 1 is fixed and c_1..c_(B-1) optimised from the banded
square root (BSR). l1 is not smooth at c_m = 0, where its optima sit: there the search is
over positive coefficients c_m = exp(y_m) (L-BFGS on y), and coefficients driven below 1e-6
are set to 0 when that is no worse. (At n = 2052, k = 6, b = 342 the l1 optimum is the
identity, c = (1, 0, ..., 0): with l1 sensitivities correlated noise does not pay.) The
returned strategy's sensitivity is recomputed by the framework.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.optimize import minimize

from ..limits import check_memory
from ..participation import Participation, Sensitivity, as_participation
from ..strategies.banded import BandedStrategy, banded
from ..strategies.factorization import sqrt_coefficients
from ..strategies.toeplitz import ToeplitzStrategy, series_inverse, series_multiply
from ..validation import check_choice, check_int, check_n

__all__ = ["OBJECTIVES", "BandedToeplitzResult", "banded_toeplitz", "banded_toeplitz_loss"]

OBJECTIVES = ("mean", "max")
_F = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BandedToeplitzResult:
    """An optimised banded Toeplitz strategy: ``strategy`` (over n steps, kept implicit as a
    :class:`~dptree_opt.strategies.toeplitz.ToeplitzStrategy` whose coefficients vanish past
    ``bands``: O(n) memory, FFT errors; :meth:`banded_strategy` for the explicit band),
    ``coefficients`` (c_0 = 1, ..., c_(B-1)), ``loss`` = sens^2 x err (module docstring),
    ``sensitivity`` (the framework's, for the unit-weight strategy), ``error`` (err),
    ``objective`` ("mean" or "max"), ``norm`` (2 Gaussian, 1 Laplace), ``iterations`` and
    ``converged`` (L-BFGS's own report), ``initial_loss`` (the BSR start)."""

    strategy: ToeplitzStrategy
    coefficients: _F
    loss: float
    sensitivity: Sensitivity
    error: float
    objective: str
    norm: int
    iterations: int
    converged: bool
    initial_loss: float

    def banded_strategy(self) -> BandedStrategy:
        """The same strategy as a :class:`~dptree_opt.strategies.banded.BandedStrategy`
        (n x bands band stored; its engine's BLUE and noise need b rows of state)."""
        return banded(self.coefficients, self.coefficients.size, self.strategy.n_bins,
                      name=self.strategy.name)


def _counts(n: int, bands: int, part: Participation) -> _F:
    """cnt_m = #{i < k' : m < n - i b}, m < bands: how many worst-pattern columns hold
    coefficient m (module docstring)."""
    kmax = part.max_participations(n)
    starts = part.b * np.arange(kmax) if not part.is_single else np.zeros(1, dtype=np.int64)
    return (np.arange(bands)[:, None] < (n - starts)[None, :]).sum(axis=1).astype(float)


def _check_setting(n: int, bands: int, participation: object, objective: str,
                   norm: int) -> tuple[int, int, Participation, str, int]:
    n = check_n(n)
    bands = check_int(bands, "bands", 1, n)
    part = as_participation(participation)
    part.check_steps(n)
    if not part.is_single and bands > part.b:
        raise ValueError(f"bands = {bands} is more than the participation's separation b = "
                         f"{part.b}: the optimiser's sensitivity is exact for bands <= b only")
    objective = check_choice(objective, "objective", OBJECTIVES)
    if norm not in (1, 2):
        raise ValueError(f"norm must be 1 (Laplace) or 2 (Gaussian), got {norm!r}")
    check_memory(64.0 * n, f"the banded Toeplitz optimiser over {n} steps", "use fewer steps")
    return n, bands, part, objective, int(norm)


def _loss_and_gradient(c: _F, n: int, cnt: _F, objective: str,
                       norm: int) -> tuple[float, float, float, _F]:
    """(loss, sens^2, err, d loss / d c) for the coefficients c (module docstring)."""
    e = series_inverse(c, n)
    d = np.cumsum(e)
    omega = (n - np.arange(n)) / n if objective == "mean" else np.ones(n)
    g = omega * d
    err = float(g @ d)
    h = series_multiply(e, d)                                   # coefficients of D E
    derr = -2.0 * series_multiply(h, g[::-1])[::-1][:c.size]   # -2 (T(h)' g)_j
    if norm == 2:
        sens2 = float(cnt @ (c * c))
        dsens2 = 2.0 * cnt * c
    else:
        s1 = float(cnt @ np.abs(c))
        sens2 = s1 * s1
        dsens2 = 2.0 * s1 * cnt * np.sign(c)
    return sens2 * err, sens2, err, dsens2 * err + sens2 * derr


def banded_toeplitz_loss(coefficients: ArrayLike, n: int, participation: object = None, *,
                         objective: str = "mean", norm: int = 2) -> tuple[float, _F]:
    """The loss sens^2 x err of the banded Toeplitz strategy with ``coefficients`` (its
    B = len(coefficients) bands, c_0 != 0) over ``n`` steps, and its gradient (shape (B,)),
    under ``participation`` (bands <= b) for the prefix workload (module docstring).
    O(n log n)."""
    c = np.asarray(coefficients, dtype=float)
    if c.ndim != 1 or c.size < 1 or not np.all(np.isfinite(c)) or c[0] == 0:
        raise ValueError("coefficients must be a non-empty 1-D array of finite numbers with "
                         "coefficients[0] != 0")
    n, bands, part, objective, norm = _check_setting(n, c.size, participation, objective, norm)
    loss, _, _, grad = _loss_and_gradient(c, n, _counts(n, bands, part), objective, norm)
    return loss, grad


def banded_toeplitz(n: int, bands: int, participation: object = None, *,
                    objective: str = "mean", norm: int = 2, max_iter: int = 500,
                    tol: float = 1e-10) -> BandedToeplitzResult:
    """Minimise sens^2 x err over the ``bands`` Toeplitz coefficients of a banded strategy
    over ``n`` steps for the prefix workload (module docstring; docs/math.md section 11):
    ``participation`` a schema of :mod:`dptree_opt.participation` (None: single) with
    bands <= b; ``objective`` "mean" (mean per step) or "max" (the worst step);
    ``norm`` 2 (Gaussian) or 1 (Laplace). L-BFGS-B (scipy) from the banded square root,
    ``max_iter`` iterations at most, relative tolerance ``tol``; O(n log n) per step."""
    n, bands, part, objective, norm = _check_setting(n, bands, participation, objective, norm)
    max_iter = check_int(max_iter, "max_iter", 1)
    cnt = _counts(n, bands, part)
    start = sqrt_coefficients(bands)
    initial = _loss_and_gradient(start, n, cnt, objective, norm)[0]

    positive = norm == 1    # l1: c_m = exp(y_m) > 0 (|c| is not smooth at 0)

    def coefficients(y: _F) -> _F:
        return np.concatenate([[1.0], np.exp(y) if positive else y])

    def fun(y: _F) -> tuple[float, _F]:
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            c = coefficients(y)
            loss, _, _, grad = _loss_and_gradient(c, n, cnt, objective, norm)
        if not (math.isfinite(loss) and np.all(np.isfinite(grad))):
            return 1e300, np.zeros_like(y)     # an unstable C^-1: the line search backs off
        return loss / initial, grad[1:] * (c[1:] if positive else 1.0) / initial

    coef, iterations, converged = start, 0, True
    if bands > 1:
        res = minimize(fun, np.log(start[1:]) if positive else start[1:], jac=True,
                       method="L-BFGS-B", options={"maxiter": max_iter, "ftol": tol,
                                                   "gtol": 1e-12, "maxcor": 20})
        coef = coefficients(res.x)
        iterations, converged = int(res.nit), bool(res.success)
        if positive:        # coefficients driven towards 0: exactly 0 if no worse
            cut = np.where(coef < 1e-6, 0.0, coef)
            if _loss_and_gradient(cut, n, cnt, objective, norm)[0] <= _loss_and_gradient(
                    coef, n, cnt, objective, norm)[0]:
                coef = cut
    loss, _, err, _ = _loss_and_gradient(coef, n, cnt, objective, norm)
    if not loss <= initial:      # never worse than the start
        coef, loss, err = start, initial, _loss_and_gradient(start, n, cnt, objective, norm)[2]
    strategy = ToeplitzStrategy(np.concatenate([coef, np.zeros(n - bands)]),
                                name=f"banded Toeplitz ({bands} bands, {objective})")
    sens = strategy.participation_sensitivity(np.ones(n), part, norm)
    return BandedToeplitzResult(strategy, coef, float(loss), sens, float(err), objective, norm,
                                iterations, converged, float(initial))
