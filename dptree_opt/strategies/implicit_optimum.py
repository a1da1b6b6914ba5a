"""The Gaussian optimum at scale: the dual fixed point of ``strategies.optimized`` without any
n x n matrix, for workloads whose Gram has a tridiagonal inverse (prefix, all-range,
identity). docs/math.md section 7, "route to scale".

Problem (P): minimise tr(G X^-1) s.t. diag(X) <= 1 (X = A'A, unit-sensitivity strategies,
add/remove, rho-zCDP; error per unit sigma^2). For a dual point d > 0 let
M = D^(1/2) G D^(1/2) and S = M^(1/2); then

* dual value  g(d) = 2 tr(S) - sum(d)  (a lower bound on OPT for every d > 0);
* primal point X(d) = D^(-1/2) S D^(-1/2) with tr(G X(d)^-1) = tr(M S^-1) = tr(S); scaled
  to feasibility by c = max_i X_ii = max_i S_ii / d_i, its value c tr(S) is an upper bound;
* the fixed point d <- diag(S) (Denisov et al. 2022) drives max_i S_ii / d_i -> 1.

Everything needs only diag(S). With G^-1 = tridiag(a, b), T = M^-1 = D^(-1/2) G^-1 D^(-1/2)
is tridiagonal and S = T^(-1/2) = (2/pi) int_0^inf (T + t^2 I)^-1 dt. On t = e^u the
integrand of each eigenvalue lam is (1 / (2 sqrt(lam))) sech(u - ln sqrt(lam)) / (pi/2)...,
analytic in the strip |Im u| < pi/2, so the trapezoid rule with step h converges like
exp(-pi^2 / h); it is truncated a = 30 units of u beyond [ln sqrt(lam_min), ln sqrt(lam_max)]
(relative truncation error ~ e^-30), with rigorous spectral bounds lam_max <= max_i
(|b_(i-1)| + a_i + |b_i|) (Gershgorin) and lam_min >= 1 / tr(T^-1) = 1 / sum_i d_i G_ii.
Each node needs diag((T + t^2 I)^-1) of a symmetric positive definite tridiagonal matrix:
(T^-1)_ii = 1 / (delta_i + omega_i - a_i) with delta / omega the pivots of the forward and
backward LDL' factorisations (two LAPACK ``dpttrf`` calls, O(n)).

Cost: ~ 2 x (number of nodes, ~200) tridiagonal factorisations per iteration: about 0.3 s
at 2^16 and 6 s at 2^20 on this machine.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.linalg import lapack

import scipy.sparse as sp

from .._progress import Progress
from ..limits import check_memory
from ..validation import check_int, check_positive
from ..workloads import Workload
from .base import Strategy, frozen_csr, readonly
from .optimized import dual_start

_F: TypeAlias = "npt.NDArray[np.float64]"

__all__ = ["ImplicitFactorization", "ImplicitOptimum", "factorization_moments",
           "gaussian_optimal_implicit", "inverse_sqrt_diagonal", "spectral_bounds",
           "tridiagonal_inverse_diagonal"]

_TRUNCATION = 30.0   # u-units beyond the spectrum on each side (relative tail ~ e^-30)
_STEP = 0.3          # trapezoid step in u (discretisation error ~ exp(-pi^2 / step))
FAST = (0.45, 22.0)  # (step, truncation) of the primal evaluations: ~120 nodes, ~1e-9 relative
IMPLICIT_BYTES_PER_BIN = 256  # memory estimate: O(n) vectors, a few tens of them


def rule_for(accuracy: float) -> tuple[float, float]:
    """(step, truncation) of the T^(-1/2) rule with relative error about ``accuracy``:
    discretisation exp(-pi^2 / step) and tails exp(-truncation) both ~ accuracy / e."""
    log = math.log(1.0 / accuracy) + 1.0
    return math.pi ** 2 / log, log


class _Resolvent:
    """R = (T + s I)^-1 for an SPD tridiagonal T = tridiag(b, a, b) and s >= 0, kept as its
    forward and backward LDL' pivots (two LAPACK ``dpttrf`` calls, O(n)).

    * delta / l: T + s = L diag(delta) L', L unit lower bidiagonal with l_i = b_i / delta_i;
    * omega: the pivots of the same elimination run from the last row up;
    * diag(R)_i = 1 / (delta_i + omega_i - a_i - s);
    * off the diagonal R_(i, j) = -(b_i / delta_i) R_(i+1, j) (i < j) and
      R_(i+1, j) = -(b_i / omega_(i+1)) R_(i, j) (i >= j)."""

    def __init__(self, a: np.ndarray, b: np.ndarray, s: float):
        self.a, self.b, self.s = a, b, s
        ash = a + s
        if a.size == 1:
            self.delta, self.l, self.omega = ash, np.zeros(0), ash
        else:  # fresh copies, factorised in place (no copies inside the LAPACK wrapper)
            self.delta, self.l, info = lapack.dpttrf(ash.copy(), b.copy(), overwrite_d=1,
                                                     overwrite_e=1)
            bwd, _, info2 = lapack.dpttrf(ash[::-1].copy(), b[::-1].copy(), overwrite_d=1,
                                          overwrite_e=1)
            if info or info2:
                raise np.linalg.LinAlgError("tridiagonal matrix is not positive definite")
            self.omega = bwd[::-1]
        self.diag = 1.0 / (self.delta + self.omega - ash)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """R @ rhs (rhs of shape (n,) or (n, r))."""
        if self.a.size == 1:
            return rhs / self.delta[0]
        x, info = lapack.dpttrs(self.delta, self.l, rhs)
        if info:
            raise np.linalg.LinAlgError("dpttrs failed")
        return x

    def forward(self, x: np.ndarray) -> np.ndarray:
        """z = L^-1 u from x = R u: z = diag(delta) L' x, i.e. z_i = delta_i (x_i + l_i x_(i+1))."""
        z = x.copy()
        z[:-1] += self.l * x[1:]
        return self.delta * z


def tridiagonal_inverse_diagonal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """diag(T^-1) of the symmetric positive definite tridiagonal T = tridiag(b, a, b), O(n):
    1 / (delta_i + omega_i - a_i), delta / omega the forward / backward LDL' pivots."""
    return _Resolvent(a, b, 0.0).diag


def spectral_bounds(a: np.ndarray, b: np.ndarray,
                    inverse_trace: float | None = None) -> tuple[float, float]:
    """(lam_min, lam_max) enclosing the spectrum of the SPD tridiagonal T: Gershgorin above;
    below 1 / tr(T^-1) (``inverse_trace`` if known, else computed, O(n))."""
    radius = np.abs(a).copy()
    radius[:-1] += np.abs(b)
    radius[1:] += np.abs(b)
    if inverse_trace is None:
        inverse_trace = float(tridiagonal_inverse_diagonal(a, b).sum())
    return 1.0 / inverse_trace, float(radius.max())


def _sqrt_nodes(lam_min: float, lam_max: float, step: float = _STEP,
                truncation: float = _TRUNCATION) -> tuple[_F, _F]:
    """Nodes s_k = t_k^2 and weights of T^(-1/2) ~ sum_k w_k (T + s_k)^-1: the trapezoid rule on
    (2/pi) int e^u (T + e^(2u))^-1 du (module docstring)."""
    lo = 0.5 * math.log(lam_min) - truncation
    hi = 0.5 * math.log(lam_max) + truncation
    u = lo + step * np.arange(int(math.ceil((hi - lo) / step)) + 1)
    return np.exp(2.0 * u), np.exp(u) * (2.0 / math.pi) * step


def _power_nodes(alpha: float, lam_min: float, lam_max: float, step: float = 0.6,
                 truncation: float = _TRUNCATION) -> tuple[_F, _F]:
    """Nodes and weights of T^-alpha ~ sum_k w_k (T + s_k)^-1 (0 < alpha < 1): the trapezoid
    rule on (sin(alpha pi) / pi) int e^((1 - alpha) v) (T + e^v)^-1 dv (analytic in
    |Im v| < pi: error ~ exp(-2 pi^2 / step); tails e^-truncation)."""
    lo = math.log(lam_min) - truncation / (1.0 - alpha)
    hi = math.log(lam_max) + truncation / alpha
    v = lo + step * np.arange(int(math.ceil((hi - lo) / step)) + 1)
    return np.exp(v), np.exp((1.0 - alpha) * v) * math.sin(alpha * math.pi) / math.pi * step


def quadrature_error(lam_min: float, lam_max: float, step: float = _STEP,
                     truncation: float = _TRUNCATION, samples: int = 4000) -> float:
    """Largest relative error of the T^(-1/2) rule (``_sqrt_nodes``) on a scalar lam, over a
    log grid of [lam_min, lam_max] (the rule is a positive combination of resolvents, so
    every eigen-component of diag(T^(-1/2)) and of the quadratic forms (T u)' T^(-1/2) u
    carries at most this relative error)."""
    s, w = _sqrt_nodes(lam_min, lam_max, step, truncation)
    lam = np.exp(np.linspace(math.log(lam_min), math.log(lam_max), samples))
    err = 0.0
    for chunk in np.array_split(lam, max(1, samples // 500)):
        approx = (w[None, :] / (chunk[:, None] + s[None, :])).sum(axis=1)
        err = max(err, float(np.abs(approx * np.sqrt(chunk) - 1.0).max()))
    return err


def inverse_sqrt_diagonal(a: np.ndarray, b: np.ndarray, lam_min: float, lam_max: float,
                          *, step: float = _STEP, truncation: float = _TRUNCATION
                          ) -> np.ndarray:
    """diag(T^(-1/2)) for the SPD tridiagonal T = tridiag(b, a, b) with spectrum inside
    [lam_min, lam_max], by the trapezoid rule on (2/pi) int e^u (T + e^(2u))^-1 du
    (module docstring)."""
    out = np.zeros(a.size)
    for s, w in zip(*_sqrt_nodes(lam_min, lam_max, step, truncation)):
        out += w * _Resolvent(a, b, float(s)).diag
    return out


def _gram_inverse(w: Workload) -> tuple[_F, _F, _F]:
    """(a, b) of the tridiagonal G^-1 and diag(G), for prefix / all_range / identity."""
    n = w.n_bins
    i = np.arange(n, dtype=float)
    if w.kind == "prefix":  # G_ij = n - max(i, j): G^-1 = tridiag(-1, [1, 2, .., 2], -1)
        a = np.full(n, 2.0)
        a[0] = 1.0
        return a, -np.ones(n - 1), n - i
    if w.kind == "all_range":
        # G_ij = (min + 1)(n - max) = (n + 1) (L^-1)_ij with L the Dirichlet second
        # difference tridiag(-1, 2, -1) of size n: G^-1 = L / (n + 1)
        return (np.full(n, 2.0) / (n + 1), -np.ones(n - 1) / (n + 1), (i + 1) * (n - i))
    if w.kind == "identity":
        return np.ones(n), np.zeros(n - 1), np.ones(n)
    raise ValueError(f"the implicit Gaussian optimum needs a workload whose Gram has a "
                     f"tridiagonal inverse (prefix, all_range, identity), got {w.kind!r}")


@dataclass(frozen=True, eq=False)
class ImplicitOptimum:
    """Result of :func:`gaussian_optimal_implicit` (per unit sigma^2, add/remove).

    error : total error tr(G X^-1) of the best primal point (scaled to max diag 1);
        divide by the number of queries for the mean.
    lower_bound : the best dual value (certified: OPT >= lower_bound, up to the quadrature's
        relative error ~1e-12).
    strategy : the best primal point, an :class:`ImplicitFactorization` (its dual point is
        ``strategy.dual_point``).
    """

    workload_kind: str
    n_bins: int
    error: float
    lower_bound: float
    strategy: "ImplicitFactorization"
    iterations: int
    seconds: float
    method: str
    history: tuple[tuple[float, float], ...] = ()

    @property
    def gap(self) -> float:
        """Relative optimality gap error / lower_bound - 1."""
        return self.error / self.lower_bound - 1.0


def gaussian_optimal_implicit(workload: Workload, *, tol: float = 1e-3, max_iter: int = 1000,
                              d0: ArrayLike | None = None, time_limit: float | None = None,
                              primal_every: int | None = None,
                              progress: bool = False) -> ImplicitOptimum:
    """The Gaussian optimum (P) for the prefix / all-range / identity workload at any n, with
    a certified gap (module docstring): iterate d <- diag(S) from ``d0`` (default: the
    SVD-bound point, d = (||W||_* / n)^2 1, as the dense solver) until
    primal / dual - 1 <= ``tol``, ``max_iter`` iterations or ``time_limit`` seconds (the
    iteration running then is completed). The primal value (an exact BLUE error: about
    2.5 x the cost of an iteration) is evaluated every ``primal_every`` iterations and at
    the last one; by default (None) once the dual has flattened (its last step below tol / 2
    relative), every 5 iterations and at the last. ``history`` holds (primal or nan, dual)
    per iteration.
    ``.strategy`` is the best primal point as an :class:`ImplicitFactorization` (measure with
    ``Mechanism(..., neighbours="add_remove")``; BLUE and exact errors without a matrix).
    O(n) memory, O(n x ~250) time per iteration."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a dptree_opt Workload, got {type(workload).__name__}")
    tol = check_positive(tol, "tol")
    max_iter = check_int(max_iter, "max_iter", 1)
    primal_every = check_int(primal_every, "primal_every", 1, none=True)
    check_memory(IMPLICIT_BYTES_PER_BIN * workload.n_bins,
                 f"the implicit Gaussian optimum over {workload.n_bins} bins", "use fewer bins")
    t0 = time.perf_counter()
    ga, gb, gdiag = _gram_inverse(workload)
    n = workload.n_bins
    d = dual_start(workload, d0)
    best_primal, best_dual = math.inf, -math.inf
    best: tuple[_F, _F, dict[str, Any]] | None = None
    history: list[tuple[float, float]] = []
    bar = Progress(max_iter, "gaussian optimum", enabled=progress)
    it = 0
    q_err = 0.0
    d_err = 0.0
    # the dual iterations need diag(S) only to well below tol; the primal evaluations (the
    # strategy's errors and column norms) use the ~1e-9 rule
    rule = rule_for(min(max(tol / 50.0, 1e-12), 1e-6))
    for it in range(1, max_iter + 1):
        sd = np.sqrt(d)
        a = ga / d
        b = gb / (sd[:-1] * sd[1:])
        bounds = spectral_bounds(a, b, inverse_trace=float(np.sum(d * gdiag)))
        eps = 2.0 * quadrature_error(*bounds, *rule)  # certified relative quadrature error
        d_err = max(d_err, eps)
        s = inverse_sqrt_diagonal(a, b, *bounds, step=rule[0], truncation=rule[1])
        trace = float(s.sum())
        dual = 2.0 * trace * (1.0 - eps) - float(d.sum())
        flat = it > 1 and dual - best_dual <= 0.5 * tol * abs(dual)
        best_dual = max(best_dual, dual)
        bar.update(1)
        last = it == max_iter or (time_limit is not None
                                  and time.perf_counter() - t0 > time_limit)
        primal = math.nan
        due = (flat or it % 5 == 0) if primal_every is None else it % primal_every == 0
        if due or last:
            # primal: the column-normalised point, weights e = sqrt(s) (unit diagonal up to
            # the error of s), its exact BLUE moments and column norms s_acc / e^2 from the
            # ~1e-9 rule, scaled to max column norm 1
            eps_p = 2.0 * quadrature_error(*bounds, *FAST)
            q_err = max(q_err, eps_p)
            mom = factorization_moments(ga, gb, gdiag, d, weights=np.sqrt(s), all_range=True,
                                        quadrature=FAST)
            c = float((mom["diag_s"] / s).max())
            primal = _workload_total(workload.kind, mom) * c * (1.0 + eps_p)
            if primal < best_primal:
                best_primal, best = primal, (d, s, mom)
        history.append((primal, dual))
        if best_primal <= best_dual * (1.0 + tol) or last:
            break
        d = s  # fixed point d <- diag((D^1/2 G D^1/2)^1/2)
    bar.close()
    if best is None:
        raise ValueError("the implicit Gaussian optimum found no finite primal value "
                         f"for the {workload.kind!r} workload over {n} bins")
    gap = best_primal / best_dual - 1.0
    d, s, mom = best
    strategy = ImplicitFactorization(ga, gb, gdiag, d, workload_kind=workload.kind,
                                     name=f"optimal_gaussian_{workload.kind}",
                                     _diag_s=mom["diag_s"], _weights=np.sqrt(s),
                                     _diag_error=q_err, _moments=mom)
    return ImplicitOptimum(
        workload_kind=workload.kind, n_bins=n, error=best_primal, lower_bound=best_dual,
        strategy=strategy, iterations=it, seconds=time.perf_counter() - t0,
        method=(f"implicit dual fixed point (tridiagonal quadratures; relative errors <= "
                f"{d_err:.0e} dual, {q_err:.0e} primal, folded into both bounds), {it} "
                f"iterations, certified gap {gap:.2e}"), history=tuple(history))


def _workload_total(kind: str, moments: dict[str, Any]) -> float:
    if kind == "all_range":
        return float(moments["all_range_total"])
    return float(moments["identity" if kind == "identity" else "prefix"].sum())


# ------------------------------------------------------------------ the strategy and its errors
def _tri_matvec(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    y = a * x
    y[:-1] += b * x[1:]
    y[1:] += b * x[:-1]
    return y


def factorization_moments(ga: np.ndarray, gb: np.ndarray, gdiag: np.ndarray, d: np.ndarray,
                          *, weights: ArrayLike | None = None, all_range: bool = False,
                          quadrature: tuple[float, float] = (_STEP, _TRUNCATION)
                          ) -> dict[str, Any]:
    """Unit-noise moments of the BLUE x^ = A^-1 y for the factorisation A'A = X(d) =
    D^(-1/2) S D^(-1/2) (before the scaling c): Cov = X(d)^-1 = D^(1/2) T^(1/2) D^(1/2),
    T = D^(-1/2) G^-1 D^(-1/2), G^-1 = tridiag(gb, ga, gb), ``gdiag`` = diag(G).

    Returns ``prefix`` (Var(C_t) = e_(<t)' T^(1/2) e_(<t), e = sqrt(d), t = 1..n),
    ``identity`` (d_i (T^(1/2))_ii), ``total_cov`` (Cov(x^_i, N^) = e_i (T^(1/2) e)_i, from
    T (T^(-1/2) e)), ``diag_s`` (diag(T^(-1/2)), the same resolvents) and, if
    ``all_range``, ``all_range_total``
    = (n + 1) sum_t Var(C_t) - Var(sum_t C_t). ``weights`` e (default sqrt(d)) replaces
    sqrt(d) in D^(1/2) T^(1/2) D^(1/2): the moments of the column-rescaled strategy
    A diag(sqrt(d) / e), whose Gram is diag(sqrt(d) / e) X(d) diag(sqrt(d) / e) (T is
    unchanged). Each is a quadrature over the resolvents
    R = (T + s)^-1 of O(n) vector formulas (no n x n matrix):

    * T^(1/2) u . u = (T u)' T^(-1/2) u; for u = e_(<t), T u = (T e) on the first t - 1 entries,
      (T e)_(t-1) - b_(t-1) e_t at t - 1 and b_(t-1) e_(t-1) at t, so Var(C_t) =
      F_t - b_(t-1) e_t (S u)_(t-1) + b_(t-1) e_(t-1) (S u)_t with F_t = (T e)_(<t)' S_(<t,<t) e_(<t);
    * the leading block of R is the inverse of the leading block of T + s with its last
      pivot delta_(t-1) replaced by 1 / R_(t-1,t-1) (Schur complement of the rest), so with
      z = L^-1 u (the same L for every t) F_t is a cumulative sum of z_f z_e / delta plus
      one corrected last term, (R u)_(t-1) = z_(t-1) R_(t-1,t-1) and
      (R u)_t = -(b_(t-1) / omega_t) (R u)_(t-1);
    * (T R)_ii = R_ii (a_i - b_(i-1)^2 / delta_(i-1) - b_i^2 / omega_(i+1)) = 1 - s R_ii (the
      form without cancellation is taken per entry)."""
    n = d.size
    sd = np.sqrt(d)
    a = ga / d
    b = gb / (sd[:-1] * sd[1:])
    e = sd if weights is None else np.asarray(weights, dtype=float)
    lam_min, lam_max = spectral_bounds(a, b, inverse_trace=float(np.sum(d * gdiag)))
    f = _tri_matvec(a, b, e)
    h = n - np.arange(n, dtype=float)
    g = e * h
    tg = _tri_matvec(a, b, g)
    prefix = np.zeros(n)
    ident = np.zeros(n)
    half = np.zeros(n)  # T^(-1/2) e
    diag_s = np.zeros(n)  # diag(T^(-1/2)), free from the same resolvents
    bilinear = 0.0
    for s, w in zip(*_sqrt_nodes(lam_min, lam_max, *quadrature)):
        r = _Resolvent(a, b, float(s))
        xe = r.solve(e)
        half += w * xe
        diag_s += w * r.diag
        ze = r.forward(xe)
        zf = r.forward(r.solve(f))
        c = zf * ze / r.delta
        excl = np.concatenate([[0.0], np.cumsum(c)[:-1]])   # sum_(i < t-1), t = 1..n
        p1 = ze * r.diag                                      # (R u)_(t-1)
        F = excl + zf * p1
        q = F.copy()
        if n > 1:
            p2 = -(b / r.omega[1:]) * p1[:-1]                 # (R u)_t, t = 1..n-1
            q[:-1] += -b * e[1:] * p1[:-1] + b * e[:-1] * p2
        prefix += w * q
        sr = s * r.diag
        inner = a.copy()
        inner[1:] -= b * b / r.delta[:-1]
        inner[:-1] -= b * b / r.omega[1:]
        ident += w * np.where(sr < 0.5, 1.0 - sr, r.diag * inner)
        if all_range:
            bilinear += w * float(tg @ r.solve(g))
    out = {"prefix": prefix, "identity": e * e * ident,
           "total_cov": e * _tri_matvec(a, b, half), "diag_s": diag_s}
    if all_range:
        out["all_range_total"] = (n + 1) * float(prefix.sum()) - bilinear
    return out


MAX_MATRIX_BINS = 2048       # .matrix (n applications of A) on request up to this size
_SENSITIVITY_SLACK = 1e-9     # relative: covers the quadrature's error in the applied A
EXACT_SWAP_BINS = 512         # swap sensitivity from the explicit matrix up to this size
SWAP_BRACKET = 1e-3           # above: the certified upper end if the bracket is this tight


class ImplicitFactorization(Strategy):
    """The square strategy A = T^(-1/4) diag(1 / e) / sqrt(c) of a dual point d (module
    docstring), never formed. ``normalise=True`` (the default): e_i = sqrt(S_ii), so
    A'A = diag(sqrt(d) / e) X(d) diag(sqrt(d) / e) has unit diagonal (X~ of the dense
    solver, c = 1 to rounding); ``False``: e = sqrt(d), A'A = X(d) / c with
    c = max_i X(d)_ii (the max-scaled point).

    ``apply`` is A x = T^(-1/4) (x / e) / sqrt(c) and ``solve`` (the BLUE when every
    row has the same noise) A^-1 y = sqrt(c) e T (T^(-3/4) y), both by quadratures
    over the resolvents (T + s)^-1 (O(n) LAPACK solves per node, ~300 nodes, relative
    error ~1e-12). Sensitivity: add/remove L2 is exact from diag(A'A) (max 1, times
    1 + 1e-9 + 2 x (the relative error bound of the diag(S) it was normalised with) to cover
    the quadratures' errors in the applied operator); L1 and swap need the
    explicit matrix (n <= 2048, built from n applications) and are refused above, except
    swap L2 above 512 bins: a certified upper bound from the entrywise positivity of A'A,
    within (A'A)_(0, n-1) (relative; ``swap_bracket``) of the exact value (``_swap_loss``).
    ``n_totals`` all-ones rows (level 0) may follow the n rows of A.
    """


    max_matrix_bins = MAX_MATRIX_BINS
    def __init__(self, ga: ArrayLike, gb: ArrayLike, gdiag: ArrayLike, d: ArrayLike, *,
                 normalise: bool = True, n_totals: int = 0, workload_kind: str = "prefix",
                 name: str = "implicit optimum", _diag_s: _F | None = None,
                 _diag_error: float = 0.0, _moments: dict[str, Any] | None = None,
                 _weights: ArrayLike | None = None) -> None:
        d = readonly(np.array(d, dtype=float))  # a copy: the caller's array stays its own
        n = d.size
        if d.ndim != 1 or n < 1 or not np.all(np.isfinite(d)) or np.any(d <= 0):
            raise ValueError("d must be a positive finite vector")
        ga, gb, gdiag = (np.asarray(v, dtype=float) for v in (ga, gb, gdiag))
        if ga.shape != (n,) or gb.shape != (n - 1,) or gdiag.shape != (n,):
            raise ValueError(f"G^-1 = tridiag(gb, ga, gb) and diag(G) must have shapes "
                             f"({n},), ({n - 1},), ({n},) for d of length {n}")
        if np.any(gb > 0) or not np.all(np.isfinite(np.concatenate([ga, gb, gdiag]))):
            raise ValueError("G^-1 must be finite with off-diagonals <= 0 (a Stieltjes "
                             "tridiagonal: prefix, all-range or identity Grams)")
        self._ga, self._gb, self._gdiag, self._d = ga, gb, gdiag, d
        sd = np.sqrt(d)
        self._a = ga / d
        self._b = gb / (sd[:-1] * sd[1:])
        self._bounds = spectral_bounds(self._a, self._b, inverse_trace=float(np.sum(d * gdiag)))
        s_diag = (_diag_s if _diag_s is not None
                  else inverse_sqrt_diagonal(self._a, self._b, *self._bounds))
        self._s_diag = s_diag
        # relative error of diag(S) as computed (a given _diag_s carries its quadrature's
        # bound): the column norms of the applied A are within it of the computed ones
        self._diag_error = float(_diag_error) if _diag_s is not None else 1e-12
        self._normalise = bool(normalise)
        # A = T^(-1/4) diag(1 / e) / sqrt(c); the solver passes the weights it normalised with
        e = (np.asarray(_weights, dtype=float) if _weights is not None
             else np.sqrt(s_diag) if normalise else sd)
        self._e = e
        ratio = s_diag / (e * e)
        self._c = float(ratio.max())
        self._x = readonly(ratio / self._c)  # diag(A'A), max 1
        self._n_bins = n
        self._n_totals = int(n_totals)
        self._levels = readonly(np.concatenate([np.ones(n, dtype=np.int32),
                                                 np.zeros(self._n_totals, dtype=np.int32)]))
        self._lazy_matrix: sp.csr_matrix | None = None
        self._corner: float | None = None
        self._raw_moments = _moments  # factorization_moments at weights e (before c)
        self._moments: dict[str, Any] | None = None
        self.workload_kind = workload_kind
        self.name = name

    # ------------------------------------------------------------- basics
    @property
    def dual_point(self) -> np.ndarray:
        """The dual point d (read-only)."""
        return self._d

    @property
    def scale(self) -> float:
        """c: the largest column norm^2 of T^(-1/4) diag(1 / e) (A divides it out)."""
        return self._c

    @property
    def column_norms_squared(self) -> np.ndarray:
        """diag(A'A) (<= 1, max 1; read-only)."""
        return self._x

    @property
    def n_totals(self) -> int:
        """Number of appended all-ones total rows (level 0)."""
        return self._n_totals

    def __repr__(self) -> str:
        return f"<ImplicitFactorization {self.name}: {self.n_rows} rows x {self.n_bins} bins>"

    def total_row_mask(self) -> np.ndarray:
        """Only the appended totals are all-ones rows."""
        return np.concatenate([np.zeros(self._n_bins, bool), np.ones(self._n_totals, bool)])

    def with_total_row(self) -> "ImplicitFactorization":
        """A copy with one more all-ones row at level 0 (the last row)."""
        return ImplicitFactorization(self._ga, self._gb, self._gdiag, self._d,
                                     normalise=self._normalise, n_totals=self._n_totals + 1,
                                     _weights=self._e,
                                     workload_kind=self.workload_kind, name=self.name,
                                     _diag_s=self._s_diag, _diag_error=self._diag_error,
                                     _moments=self._raw_moments)

    def _power(self, alpha: float, y: np.ndarray) -> np.ndarray:
        out = np.zeros_like(y)
        for s, w in zip(*_power_nodes(alpha, *self._bounds)):
            out += w * _Resolvent(self._a, self._b, float(s)).solve(y)
        return out

    def _check_rows(self, x: ArrayLike, rows: int) -> _F:
        x = np.asarray(x, dtype=float)
        if x.shape[:1] != (rows,):
            raise ValueError(f"expected {rows} rows, got shape {x.shape}")
        return x

    def _col(self, v: np.ndarray, ndim: int) -> np.ndarray:
        return v.reshape((-1,) + (1,) * (ndim - 1))

    def apply(self, x: ArrayLike) -> _F:
        """A @ x for x of shape (n,) or (n, r); then the totals."""
        x = self._check_rows(x, self._n_bins)
        core = self._power(0.25, x / self._col(self._e, x.ndim)) / math.sqrt(self._c)
        tot = np.broadcast_to(x.sum(axis=0), (self._n_totals,) + x.shape[1:])
        return np.concatenate([core, tot], axis=0) if self._n_totals else core

    def rmatvec(self, u: ArrayLike) -> _F:
        """A' @ u (A' = D^(-1/2) T^(-1/4) / sqrt(c), T^(-1/4) symmetric)."""
        u = self._check_rows(u, self.n_rows)
        core = u[:self._n_bins]
        out = self._power(0.25, core) / math.sqrt(self._c) / self._col(self._e, u.ndim)
        if self._n_totals:
            out = out + u[self._n_bins:].sum(axis=0)
        return out

    def solve(self, y: ArrayLike) -> _F:
        """A^-1 y for the n rows of A (y of shape (n,) or (n, r))."""
        y = self._check_rows(y, self._n_bins)
        z = self._power(0.75, y)
        tz = self._a.reshape(self._col(self._a, y.ndim).shape) * z
        tz[:-1] += self._col(self._b, y.ndim) * z[1:]
        tz[1:] += self._col(self._b, y.ndim) * z[:-1]
        return math.sqrt(self._c) * self._col(self._e, y.ndim) * tz

    @property
    def matrix(self) -> sp.csr_matrix:
        """A as CSR (dense n x n; canonical, read-only), from n applications; n <= 2048
        only."""
        if self._lazy_matrix is None:
            if self._n_bins > MAX_MATRIX_BINS:
                raise ValueError(f"the implicit optimum's explicit matrix is dense: refused for "
                                 f"{self._n_bins} > {MAX_MATRIX_BINS} bins")
            self._lazy_matrix = frozen_csr(self.apply(np.eye(self._n_bins)))
        return self._lazy_matrix

    def moments(self) -> dict[str, Any]:
        """Unit-noise BLUE moments (``factorization_moments``, all-range total included) of
        this strategy (A'A = X / c: every variance times c); computed once, cached."""
        if self._moments is None:
            if self._raw_moments is None:
                self._raw_moments = factorization_moments(
                    self._ga, self._gb, self._gdiag, self._d, weights=self._e, all_range=True)
            self._moments = {k: (v if k == "diag_s" else v * self._c)
                             for k, v in self._raw_moments.items()}
        return self._moments

    # -------------------------------------------------------- sensitivity
    def _add_remove_loss(self, w: np.ndarray, p: int) -> float:
        core = w[:self._n_bins]
        if p == 2 and np.all(core == core[0]):
            loss2 = core[0] ** 2 * float(self._x.max()) + float(np.sum(w[self._n_bins:] ** 2))
            return math.sqrt(loss2) * (1.0 + _SENSITIVITY_SLACK + 2.0 * self._diag_error)
        return super()._add_remove_loss(w, p)  # through .matrix (n <= 2048)

    def corner(self) -> float:
        """(A'A)_(0, n-1), the correlation of the first and last columns (cached)."""
        if self._corner is None:
            self._corner = self._corner_value()
        return self._corner

    def _corner_value(self) -> float:
        """(A'A)_(0, n-1), from R_(0, n-1) = R_(n-1, n-1) prod_k (-l_k) per node (log domain;
        every factor is positive: T is a Stieltjes matrix); the fast quadrature (relative
        error ~1e-9: it only places the lower end of ``swap_bracket``)."""
        n = self._n_bins
        if n == 1:
            return float(self._x[0])
        logs = []
        for s, w in zip(*_sqrt_nodes(*self._bounds, *FAST)):
            r = _Resolvent(self._a, self._b, float(s))
            logs.append(math.log(w) + math.log(r.diag[-1]) + float(np.sum(np.log(-r.l))))
        top = max(logs)
        s_corner = math.exp(top) * sum(math.exp(v - top) for v in logs)
        return s_corner / (self._e[0] * self._e[-1] * self._c)

    def swap_bracket(self) -> tuple[float, float]:
        """(lower, upper) on max_(a != b) ||A_a - A_b||^2 (module docstring of ``_swap_loss``)."""
        top2 = float(np.sort(self._x)[-2:].sum())
        return float(self._x[0] + self._x[-1] - 2.0 * self.corner()), top2

    def _swap_loss(self, w: np.ndarray, p: int) -> float:
        # G^-1 with off-diagonals <= 0 makes T a Stieltjes matrix: every resolvent, hence
        # T^(-1/2) and A'A, is entrywise >= 0, so ||A_a - A_b||^2 = x_a + x_b - 2 (A'A)_ab
        # <= the two largest x combined (upper), and the pair (0, n - 1) gives
        # x_0 + x_(n-1) - 2 (A'A)_(0, n-1) (lower). Up to EXACT_SWAP_BINS bins: exact, from the
        # explicit matrix; above, the upper end is used (never under-calibrates) when the
        # bracket is within SWAP_BRACKET relative (the corner correlation is ~7e-5 at 4096
        # bins and falls with n), else the matrix (<= 2048 bins) or a refusal.
        core = w[:self._n_bins]
        n = self._n_bins
        if p == 2 and n > EXACT_SWAP_BINS and np.all(core == core[0]):
            low, top2 = self.swap_bracket()
            if top2 - low <= SWAP_BRACKET * top2:
                return (abs(core[0]) * math.sqrt(top2)
                        * (1.0 + _SENSITIVITY_SLACK + 2.0 * self._diag_error))
        return super()._swap_loss(w, p)  # through .matrix (n <= 2048)
