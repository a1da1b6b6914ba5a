"""The optimal factorisation of the prefix workload under multiple participations, with a
certified lower bound (docs/participation_optimum.md; docs/math.md section 11).

Setting: W the n x n prefix matrix, G = W'W, a factorisation W = B C with Gram X = C'C,
Gaussian noise, vector contributions (the default of :mod:`dptree_opt.participation`). The
loss per unit noise of the BLUE (every other linear unbiased estimator is worse) is

    mean:  sens^2(X) tr(W X^-1 W') / n,        max:  sens^2(X) max_t (W X^-1 W')_tt,

with sens^2(X) = max over patterns P of max over correlation matrices Gam (psd, unit
diagonal) of <X_PP, Gam> (vector contributions). Both are invariant to scaling X.

Lower bound for EVERY factorisation (weak duality). Take weights lam_o >= 0 on a family of
patterns P_o and a matrix Lam = sum_o lam_o Gam_o~ (Gam_o a k x k correlation matrix placed on
P_o x P_o) that is positive definite. Then <Lam, X> = sum_o lam_o <Gam_o, X_PoPo>
<= sens^2(X) sum_o lam_o, and min_X tr(G_nu X^-1) + <Lam, X> = 2 tr((Lam^1/2 G_nu Lam^1/2)^1/2)
(G_nu = W' diag(nu) W, nu a probability vector over steps: nu = 1/n for the mean, any nu
for the max), so, optimising the scale of Lam,

    loss >= h^2 / sum_o lam_o,    h = tr (Lam^1/2 G_nu Lam^1/2)^1/2 = tr (D_nu^1/2 W Lam W' D_nu^1/2)^1/2.

* Relaxation (Gam_o = I, valid for scalar contributions too: I is the average of s s' over
  random signs): Lam = D_mu diagonal, mu_i = sum_(o: i in P_o) lam_o, and
  h = tr((D_mu^1/2 G D_mu^1/2)^1/2). For the prefix workload G^-1 is tridiagonal, so h is a
  quadrature over tridiagonal resolvents, O(n) each (the machinery of
  :mod:`dptree_opt.strategies.implicit_optimum`); the weights are optimised by the tied fixed point
  lam_o <- lam_o sum_(i in P_o) X_ii (X = D_mu^-1/2 S D_mu^-1/2, S = (D_mu^1/2 G D_mu^1/2)^1/2;
  Denisov et al. 2022's d <- diag(S) with the multipliers tied over each pattern).
  :func:`participation_lower_bound`; fixed-epoch: the b epochs' offsets; min-sep: the
  translates {o, o + b, ..., o + (k' - 1) b} of the equally spaced pattern,
  k' = min(k, floor(n / b)) (so that every step is covered).
* Full dual (fixed-epoch, vector contributions): Lam block diagonal over the b classes
  {o + j b}, each block lam_o Gam_o with Gam_o any correlation matrix. Its value is the dual
  of the orthogonality-constrained problem of Choquette-Choo et al. 2022 (X_ij = 0 for
  i != j in one class, sum_(i in P_o) X_ii <= 1, so sens^2 = max_o tr X_PoPo exactly): that
  problem's multipliers (lam_o on the diagonal, free entries on the class off-diagonals,
  Lam positive definite) are exactly the blocks lam_o Gam_o with Gam_o positive definite.
  So, by strong duality (Slater), the orthogonality-constrained optimum IS the optimum over
  all factorisations (vector contributions), and every dual point certifies a bound for all.

Solver (:func:`participation_optimum`, fixed-epoch): L-BFGS on the full dual in
(log lam, the correlations, and for "max" the logits of nu), from the relaxation's weights;
one n x n eigendecomposition of M = D_nu^1/2 W Lam W' D_nu^1/2 per evaluation (W Lam W' by
cumulative sums), gradient X(Lam) = W' D_nu^1/2 M^-1/2 D_nu^1/2 W (envelope theorem;
only its class blocks are formed), dh/dnu_t = (M^1/2)_tt / (2 nu_t). For "max" the mean optimum is
solved first (40 % of the time) and the max dual starts from it with uniform nu. The primal
is X(Lam) at the point with the best primal value, its same-class off-diagonals set to 0 when that keeps it
positive definite; C is its lower-triangular (streamable) factor C = J chol(J X J)' J
(J the reversal). The returned loss is CERTIFIED by the framework: the sensitivity of
``Strategy(C)`` (``participation_sensitivity``, the dense Gram path) and the exact BLUE error
of the calibrated ``Mechanism``. Measured at n = 2052, k = 6, b = 342, 2 cores: mean loss
66.46041 against the full dual 66.46034 (gap 1.0e-6; 209 s to solve, 10 s to certify),
relaxation bound 58.963; max loss 77.03 against 72.98 within a 540 s limit (gap 5.6 %).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.linalg as sl

from ..error import expected_error
from ..limits import check_memory
from ..mechanism import Mechanism
from ..participation import Participation, Sensitivity, as_participation
from ..strategies.base import Strategy
from ..strategies.implicit_optimum import (
    inverse_sqrt_diagonal,
    quadrature_error,
    rule_for,
    spectral_bounds,
)
from ..validation import check_choice, check_int, check_positive
from ..workloads import prefix

__all__ = ["MAX_OPTIMUM_BINS", "OPTIMUM_OBJECTIVES", "ParticipationBound",
           "ParticipationOptimum", "participation_lower_bound", "participation_optimum"]

_F: TypeAlias = "npt.NDArray[np.float64]"

OPTIMUM_OBJECTIVES = ("mean", "max")
# the dense solver keeps about a dozen n x n float arrays
MAX_OPTIMUM_BINS = 4096
_DENSE_ARRAYS = 14


@dataclass(frozen=True)
class ParticipationBound:
    """Result of :func:`participation_lower_bound`: ``value`` (a certified lower bound on
    the mean loss per unit noise of every factorisation of the prefix workload under the
    schema), ``weights`` (lam over the pattern family), ``family`` (which patterns),
    ``iterations``, ``seconds``."""

    value: float
    weights: _F
    family: str
    iterations: int
    seconds: float


@dataclass(frozen=True, eq=False)
class ParticipationOptimum:
    """Result of :func:`participation_optimum`: ``strategy``, the factorisation C (lower
    triangular, streamable) as a dense ``Strategy``; ``loss``, its loss per unit noise under
    the schema (objective), certified by the framework (sensitivity of ``strategy`` times its
    exact BLUE error); ``lower_bound``, a certified lower bound on the loss of every
    factorisation (vector contributions: the full dual; scalar: the relaxation);
    ``dual_bound`` and ``relaxation_bound``, the two bounds (module docstring; ``dual_bound``
    is None for scalar contributions); ``sensitivity``, the
    :class:`~dptree_opt.participation.Sensitivity` the framework calibrated the certifying
    mechanism to (``strategy`` is scaled to sensitivity 1); ``method``, ``objective``,
    ``participation``, ``iterations``, ``seconds`` (solver) and ``certify_seconds``."""

    strategy: Strategy
    loss: float
    lower_bound: float
    dual_bound: float | None
    relaxation_bound: float
    sensitivity: Sensitivity
    method: str
    objective: str
    participation: Participation
    iterations: int
    seconds: float
    certify_seconds: float

    @property
    def gap(self) -> float:
        """Relative optimality gap loss / lower_bound - 1 (>= 0)."""
        return self.loss / self.lower_bound - 1.0


# ----------------------------------------------------------------- relaxation (any n)
def _family(n: int, part: Participation) -> tuple[npt.NDArray[np.int64], int, str]:
    """(starts, k', description) of the relaxation's patterns {s_o + j b : j < k'}."""
    if part.is_single:
        return np.arange(n), 1, "single steps"
    b = part.b
    if part.kind == "fixed_epoch":
        return np.arange(b), int(part.k or 1), f"the {b} fixed-epoch offsets"
    kk = max(1, min(part.max_participations(n), n // b))
    if kk == 1:
        return np.arange(n), 1, "single steps (two participations cannot cover every step)"
    return (np.arange(n - (kk - 1) * b), kk,
            f"the translates of {{o, o + {b}, ..., o + {(kk - 1) * b}}} ({kk} participations)")


def participation_lower_bound(n: int, participation: Participation, *, tol: float = 1e-7,
                              max_iter: int = 3000,
                              time_limit: float | None = None) -> ParticipationBound:
    """A certified lower bound on the mean loss per unit noise, sens^2 tr(W X^-1 W') / n, of
    every factorisation of the n x n prefix workload under ``participation`` (Gaussian;
    scalar or vector contributions): the diagonal relaxation of the module docstring,
    max over weights lam on a family of patterns of (tr S(mu))^2 / (n sum lam), by the tied
    fixed point, each iteration a quadrature over tridiagonal resolvents (O(n) memory,
    O(n x ~250) time); the value carries the quadrature's certified relative error. Stops
    when an iteration gains less than ``tol`` (relative), after ``max_iter`` iterations or
    ``time_limit`` seconds."""
    n = check_int(n, "n", minimum=1)
    part = as_participation(participation)
    part.check_steps(n)
    tol = check_positive(tol, "tol")
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    check_memory(256 * n, f"the participation lower bound over {n} steps", "use fewer steps")
    t0 = time.perf_counter()
    starts, kk, family = _family(n, part)
    offsets = part.b * np.arange(kk) if kk > 1 else np.zeros(1, dtype=np.int64)
    ga = np.full(n, 2.0)
    ga[0] = 1.0
    gb = -np.ones(n - 1)
    gdiag = n - np.arange(n, dtype=float)
    lam = np.full(starts.size, 1.0 / starts.size)
    rule = rule_for(1e-10)
    best, best_lam, it = -math.inf, lam, 0
    for it in range(1, max_iter + 1):
        mu = np.zeros(n)
        np.add.at(mu, (starts[:, None] + offsets[None, :]).ravel(), np.repeat(lam, kk))
        sd = np.sqrt(mu)
        a, b = ga / mu, gb / (sd[:-1] * sd[1:])
        bounds = spectral_bounds(a, b, inverse_trace=float(np.sum(mu * gdiag)))
        eps = 2.0 * quadrature_error(*bounds, *rule)
        s = inverse_sqrt_diagonal(a, b, *bounds, step=rule[0], truncation=rule[1])
        value = (float(s.sum()) * (1.0 - eps)) ** 2 / float(lam.sum()) / n
        gain = value - best
        if value > best:
            best, best_lam = value, lam
        if (it > 1 and gain <= tol * abs(best)) or (
                time_limit is not None and time.perf_counter() - t0 > time_limit):
            break
        x = s / mu                                     # X_ii of the relaxed optimum
        per = x[(starts[:, None] + offsets[None, :])].sum(axis=1)
        lam = lam * per
        lam = lam / lam.sum()
    return ParticipationBound(best, best_lam, family, it, time.perf_counter() - t0)


# ----------------------------------------------------------------- the full dual (dense)
class _Dual:
    """The fixed-epoch full dual (module docstring) in x = (log lam (b), correlations
    (b x k(k-1)/2, relative to lam), [nu logits (n), "max" only]); f = -log(bound)."""

    def __init__(self, n: int, k: int, b: int, objective: str):
        self.n, self.k, self.b, self.objective = n, k, b, objective
        self.iu = np.triu_indices(k, 1)
        self.npairs = self.iu[0].size
        idx = np.arange(n).reshape(k, b)                     # idx[j, o] = o + j b
        self.rows = np.broadcast_to(idx.T[:, :, None], (b, k, k)).ravel()
        self.cols = np.broadcast_to(idx.T[:, None, :], (b, k, k)).ravel()

    def unpack(self, x: _F) -> tuple[_F, _F, _F]:
        k, b, n = self.k, self.b, self.n
        lam = np.exp(x[:b])
        z = x[b:b + b * self.npairs].reshape(b, self.npairs)
        blocks = np.zeros((b, k, k))
        blocks[:, np.arange(k), np.arange(k)] = lam[:, None]
        blocks[:, self.iu[0], self.iu[1]] = z * lam[:, None]
        blocks[:, self.iu[1], self.iu[0]] = z * lam[:, None]
        if self.objective == "mean":
            nu = np.full(n, 1.0 / n)
        else:
            c = x[b + b * self.npairs:]
            e = np.exp(c - c.max())
            nu = e / e.sum()
        return lam, blocks, nu

    def evaluate(self, x: _F) -> dict[str, Any] | None:
        """f, its gradient and the pieces of the primal; None outside the domain."""
        n, k, b = self.n, self.k, self.b
        lam, blocks, nu = self.unpack(x)
        big = np.zeros((n, n))
        big[self.rows, self.cols] = blocks.ravel()
        kmat = np.cumsum(np.cumsum(big, axis=0), axis=1)       # W Lam W'
        del big
        snu = np.sqrt(nu)
        m = snu[:, None] * kmat * snu[None, :]
        del kmat
        m = 0.5 * (m + m.T)
        try:
            w, u = sl.eigh(m, driver="evd", overwrite_a=True)
        except (np.linalg.LinAlgError, ValueError):
            return None
        if not np.all(np.isfinite(w)) or w[0] <= 1e-14 * w[-1]:
            return None
        rw = np.sqrt(w)
        h = float(rw.sum())
        s = float(lam.sum())
        y = snu[:, None] * u / np.sqrt(rw)[None, :]
        y = np.cumsum(y[::-1], axis=0)[::-1]                 # W' D^1/2 U w^-1/4
        yr = y.reshape(k, b, n)
        xb = np.einsum("jon,Jon->ojJ", yr, yr)                 # class blocks of X(Lam)
        zoff = blocks / lam[:, None, None]
        zoff[:, np.arange(k), np.arange(k)] = 0.0
        ga = -(lam / h) * (np.trace(xb, axis1=1, axis2=2)
                           + np.einsum("ojJ,ojJ->o", xb, zoff)) + lam / s
        gz = -2.0 * lam[:, None] * xb[:, self.iu[0], self.iu[1]] / h
        diag_half = np.einsum("tm,tm,m->t", u, u, rw)           # diag(M^1/2)
        parts = [ga, gz.ravel()]
        if self.objective == "max":
            parts.append(-diag_half / h + nu)
        f = -2.0 * math.log(h) + math.log(s)
        steps = diag_half / nu                                 # (W X^-1 W')_tt
        sens2 = float(np.abs(xb).sum(axis=(1, 2)).max())
        primal = sens2 * (float(steps.mean()) if self.objective == "mean" else
                          float(steps.max()))
        return {"f": f, "g": np.concatenate(parts), "dual": h * h / s, "primal": primal,
                "y": y, "x": x}


def _lbfgs(dual: _Dual, x: _F, deadline: float, tol: float, memory: int = 20
           ) -> tuple[float, dict[str, Any], int]:
    """Minimise dual.evaluate's f from x (L-BFGS two-loop recursion, Armijo backtracking,
    points outside the domain rejected); stops at the deadline, when primal / dual - 1 <=
    tol, or when the line search fails. Returns (best dual value, the evaluation with the
    best primal value, iterations)."""
    cur = dual.evaluate(x)
    if cur is None:
        raise ValueError("the dual start point is not positive definite")
    best_dual, best = float(cur["dual"]), cur
    s_hist: list[_F] = []
    y_hist: list[_F] = []
    it = 0
    while time.perf_counter() < deadline and best["primal"] > best_dual * (1.0 + tol):
        g = cur["g"]
        q = g.copy()
        alphas = []
        for s_, y_ in zip(reversed(s_hist), reversed(y_hist)):
            rho = 1.0 / float(y_ @ s_)
            a = rho * float(s_ @ q)
            q -= a * y_
            alphas.append((rho, a))
        if s_hist:
            q *= float(s_hist[-1] @ y_hist[-1]) / float(y_hist[-1] @ y_hist[-1])
        else:
            q *= 1e-2 / max(float(np.abs(g).max()), 1e-300)
        for (s_, y_), (rho, a) in zip(zip(s_hist, y_hist), reversed(alphas)):
            q += s_ * (a - rho * float(y_ @ q))
        d = -q
        slope = float(g @ d)
        if slope >= 0:
            d = -g * (1e-2 / max(float(np.abs(g).max()), 1e-300))
            slope = float(g @ d)
            s_hist, y_hist = [], []
        step, new = 1.0, None
        while step > 1e-10 and time.perf_counter() < deadline:
            new = dual.evaluate(x + step * d)
            if new is not None and new["f"] <= cur["f"] + 1e-4 * step * slope:
                break
            new = None
            step *= 0.3
        if new is None:
            break
        sv, yv = step * d, new["g"] - g
        if float(sv @ yv) > 1e-300:
            s_hist.append(sv)
            y_hist.append(yv)
            if len(s_hist) > memory:
                s_hist.pop(0)
                y_hist.pop(0)
        x, cur = x + sv, new
        it += 1
        best_dual = max(best_dual, float(cur["dual"]))
        if cur["primal"] < best["primal"]:
            best = cur
    return best_dual, best, it


def _lower_factor(x: _F) -> _F:
    """Lower-triangular C with C'C = X: C = J chol(J X J)' J (J the reversal)."""
    return np.ascontiguousarray(np.linalg.cholesky(x[::-1, ::-1]).T[::-1, ::-1])


def _primal_strategy(y: _F, n: int, k: int, b: int) -> Strategy:
    """The streamable strategy of X = Y Y' (its same-class off-diagonals zeroed when X stays
    positive definite: they vanish at the optimum), scaled to max class trace 1."""
    x = y @ y.T
    x = 0.5 * (x + x.T)
    cleaned = x.copy()
    idx = np.arange(n)
    same = (idx[:, None] % b == idx[None, :] % b) & (idx[:, None] != idx[None, :])
    cleaned[same] = 0.0
    for cand in (cleaned, x):
        scale = float(np.diagonal(cand).reshape(k, b).sum(axis=0).max())
        try:
            c = _lower_factor(cand / scale)
        except np.linalg.LinAlgError:
            continue
        return Strategy(c, name="participation_optimum")
    raise ValueError("the primal point is not positive definite (try a longer time_limit)")


def participation_optimum(n: int, participation: Participation, objective: str = "mean", *,
                          time_limit: float = 600.0, tol: float = 1e-5
                          ) -> ParticipationOptimum:
    """The best factorisation of the n x n prefix workload under a fixed-epoch schema
    (Gaussian, vector or scalar contributions), with a certified lower bound on every
    factorisation and its gap (module docstring; docs/participation_optimum.md).

    Class: the optimum over ALL factorisations W = B C (any C with n columns, the BLUE or
    any linear unbiased B) for vector contributions, reached in the orthogonality-
    constrained class (X_ij = 0 for i != j in one epoch class); ``objective`` "mean"
    (sens^2 tr(W X^-1 W') / n) or "max" (sens^2 max_t (W X^-1 W')_tt). The dual is solved by
    L-BFGS until primal / dual - 1 <= ``tol`` or ``time_limit`` seconds (the certification,
    a dense sensitivity and an exact error, follows: 10-20 s at n = 2052). O(n^3) per evaluation (an eigendecomposition),
    n <= MAX_OPTIMUM_BINS. ``participation``: ``fixed_epoch(k, b)`` with n = k b, or
    ``single()``; min-sep: use :func:`participation_lower_bound` for its bound."""
    n = check_int(n, "n", minimum=2)
    part = as_participation(participation)
    objective = check_choice(objective, "objective", OPTIMUM_OBJECTIVES)
    time_limit = check_positive(time_limit, "time_limit")
    tol = check_positive(tol, "tol")
    if part.kind == "min_sep" and not part.is_single:
        raise ValueError("participation_optimum solves fixed_epoch(k, b) schemas; for "
                         "min_sep use participation_lower_bound (a certified bound)")
    if n > MAX_OPTIMUM_BINS:
        raise ValueError(f"n must be at most {MAX_OPTIMUM_BINS} for the dense optimum, got {n}")
    check_memory(_DENSE_ARRAYS * 8.0 * n * n, f"the participation optimum over {n} steps",
                 "use fewer steps")
    part.check_steps(n)
    k, b = (1, n) if part.is_single else (int(part.k or 1), part.b)
    t0 = time.perf_counter()
    relax = participation_lower_bound(n, part, time_limit=0.1 * time_limit)
    dual = _Dual(n, k, b, "mean")
    x0 = np.concatenate([np.log(relax.weights), np.zeros(b * dual.npairs)])
    share = 1.0 if objective == "mean" else 0.4
    best_dual, best, iterations = _lbfgs(dual, x0, t0 + share * time_limit, tol)
    if objective == "max":
        # from the mean optimum (whose bound holds for the max too: max_t >= mean), with
        # uniform step weights nu: the first point's primal is the mean optimum's max loss
        dual = _Dual(n, k, b, "max")
        x0 = np.concatenate([best["x"], np.zeros(n)])
        best_max, best, more = _lbfgs(dual, x0, t0 + time_limit, tol)
        best_dual, iterations = max(best_dual, best_max), iterations + more
    seconds = time.perf_counter() - t0
    strategy = _primal_strategy(best["y"], n, k, b)
    dual_bound = best_dual if part.vector else None
    # the relaxation bounds the mean, hence also the max (max_t >= mean)
    lower = max(relax.value, dual_bound or 0.0)
    t1 = time.perf_counter()
    mech = Mechanism(strategy, rho=0.5, participation=part)    # sigma = the sensitivity
    err = expected_error(prefix(n), mech, per_query=True)
    loss = float(err.mean() if objective == "mean" else err.max())
    method = ("dual L-BFGS on the orthogonality-constrained class (Choquette-Choo et al. "
              "2022), whose optimum is the optimum over all factorisations for vector "
              "contributions; " + ("lower bound: the full dual" if part.vector else
                                   "lower bound: the diagonal relaxation (scalar "
                                   "contributions)"))
    return ParticipationOptimum(strategy, loss, lower, dual_bound, relax.value,
                                mech.sensitivity, method,
                                objective, part, iterations, seconds,
                                time.perf_counter() - t1)
