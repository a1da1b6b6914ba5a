"""Local optimisation of the full l1 (pure eps-DP) strategy problem.

For a strategy A (m x n) with Laplace noise, add/remove neighbours and the BLUE, the total
error at eps = 1 is 2 Delta_1^2 tr(G (A'A)^-1), G = W'W, Delta_1 = max_j ||A_j||_1 (the
largest column l1 norm; docs/math.md sections 0 and 6). Every column scaled to l1 norm 1, the
best strategy solves

    minimise f(A) = tr(G (A'A)^-1)  over A of full column rank with ||A_j||_1 = 1,   (L1)

a non-convex problem (the Gaussian problem's column l2 constraint becomes an l1 one, and
X = A'A is no longer a free variable). HDMM's p-Identity (McKenna, Miklau, Hay,
Machanavajjhala, VLDB 2018, Sec. 5.1; ``strategies.optimized``) solves it over the sub-family
A = [I; Theta] D. This module searches every A with m rows (the start's) by a smooth
parametrisation with bounds only: two non-negative (m, n) matrices P, N,

    B = P - N,    u_j = sum_i (P_ij + N_ij),    A = B diag(1/u),

so every column of A has l1 norm <= 1, with equality wherever P and N do not overlap (the
start has N = 0), and f(P, N) = tr(G (A'A)^-1) is differentiable for u > 0. With
M = A'A, H = M^-1 and R = df/dA = -2 A H G H (the matrix-mechanism gradient; Li, Miklau,
Hay, McGregor, Rastogi, "The matrix mechanism", VLDBJ 2015), the chain rule through the
column normalisation gives

    df/dP_ij =  R_ij / u_j - c_j,    df/dN_ij = -R_ij / u_j - c_j,    c_j = sum_i R_ij A_ij / u_j.

L-BFGS-B (bounds P, N >= 0) runs from the start. Cost per evaluation: A'A (m n^2), one
Cholesky and the inverse (n^3), H G H (n^3, G applied in O(n^2) for the prefix, all-range
and identity workloads) and A (H G H) (m n^2); memory a few dense (m, n) arrays, so the
problem is refused above :data:`MAX_L1_LOCAL_BINS` bins. The strategy returned is B with
every column rescaled to l1 norm exactly 1, its error recomputed; it is never worse than the
start (the start is returned otherwise).

Measured from p-Identity (the CDF, mean per prefix at eps = 1, one core): 256 bins 54.556
-> 54.28 / 53.94 / 53.69 / 53.65 after 100 / 300 / 1000 / 2443 iterations (converged; 4 /
9 / 25 / 90 s); 1024 bins 91.24 -> 91.14 after 300 (``benchmarks/bench_frontier.py`` part
4). At 8 bins the full problem reaches 9.0 where p-Identity stops at 9.00003 (an identity
row of tiny weight Theta cannot remove); at 16 to 64 bins p-Identity is already a local
optimum of (L1). The 256-bin optimum is itself a p-Identity (the identity, hats 22-48 bins
wide and two rows over half the domain): ``laplace_p_identity(w, hats=True)`` reaches 53.66
directly (about 2 s), a better basin of HDMM's family rather than new freedom. The Kronecker
products of these strategies are the grid family
``kron_l1_local`` of ``optimize.best_mechanism``.

>>> from dptree_opt import workloads
>>> from dptree_opt.optimize.l1_local import l1_local
>>> res = l1_local(workloads.prefix(8))
>>> round(res.start_error / 8, 6), round(res.error / 8, 6), res.strategy.n_rows
(9.000029, 9.0, 9)
"""

from __future__ import annotations

import math
import time
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.optimize as sopt

from ..limits import check_memory
from ..strategies import OptimizedStrategy, Strategy
from ..strategies.optimized import check_workload, laplace_p_identity
from ..validation import check_int, check_real
from ..workloads import Workload

__all__ = ["l1_local", "l1_objective", "MAX_L1_LOCAL_BINS"]

_F: TypeAlias = "npt.NDArray[np.float64]"

MAX_L1_LOCAL_BINS = 1024   # dense (m, n) iterates and an n x n inverse per evaluation
_VECTORS = 8               # vectors of 2 m n floats besides L-BFGS-B's corrections ...
_SQUARES = 6               # ... and (n, n) work arrays per evaluation
_STRUCTURED_GRAMS = ("prefix", "all_range", "identity")  # G @ v in O(n) per column


class _L1Objective:
    """f(P, N) = tr(G (A'A)^-1) and its gradient (module docstring), x = [P; N] flattened."""

    def __init__(self, w: Workload, m: int):
        self.w, self.m, self.n = w, m, w.n_bins
        self.g = None if w.kind in _STRUCTURED_GRAMS else w.gram_dense()
        self.evals = 0

    def gram_times(self, z: _F) -> _F:
        return self.g @ z if self.g is not None else self.w.gram_matvec(z)

    def split(self, flat: _F) -> tuple[_F, _F]:
        """(B, u): B = P - N (m, n) and the column sums u of P + N."""
        size = self.m * self.n
        p, q = flat[:size].reshape(self.m, self.n), flat[size:].reshape(self.m, self.n)
        return p - q, (p + q).sum(axis=0)

    def __call__(self, flat: _F) -> tuple[float, _F]:
        self.evals += 1
        b, u = self.split(flat)
        if np.any(u <= 0):
            return math.inf, np.zeros_like(flat)
        a = b / u
        h = _inverse(a)
        if h is None:
            return math.inf, np.zeros_like(flat)
        gh = self.gram_times(h)                       # G H
        f = float(np.trace(gh))                       # tr(G H)
        r = -2.0 * (a @ (h @ gh))                     # df/dA = -2 A H G H
        c = np.einsum("ij,ij->j", r, a) / u
        ru = r / u
        return f, np.concatenate([(ru - c).ravel(), (-ru - c).ravel()])


def _inverse(a: _F) -> _F | None:
    """(A'A)^-1 by a Cholesky factorisation (LAPACK potrf / potri), None if A'A is not
    numerically positive definite."""
    c, info = sla.lapack.dpotrf(a.T @ a, lower=True)
    if info != 0:
        return None
    h, info = sla.lapack.dpotri(c, lower=True)
    if info != 0 or not np.all(np.isfinite(h)):
        return None
    return np.tril(h) + np.tril(h, -1).T


def _unit_columns(a: _F) -> _F:
    """``a`` with every column scaled to l1 norm 1 (zero columns refused)."""
    norms = np.abs(a).sum(axis=0)
    if np.any(norms <= 0):
        raise ValueError("start: every column (bin) must be measured (a non-zero column)")
    return a / norms


def _trace(obj: _L1Objective, a: _F) -> float:
    """tr(G (A'A)^-1) of a dense strategy (ValueError if rank-deficient)."""
    f, _ = obj(np.concatenate([np.maximum(a, 0.0).ravel(), np.maximum(-a, 0.0).ravel()]))
    if not math.isfinite(f):
        raise ValueError("start: the strategy must have full column rank (A'A invertible)")
    return f


def l1_objective(workload: Workload, pos: npt.ArrayLike, neg: npt.ArrayLike
                 ) -> tuple[float, _F, _F]:
    """(f, df/dP, df/dN): the objective :func:`l1_local` minimises and its gradient (module
    docstring), f = tr(G (A'A)^-1) with G = W'W, A = (P - N) diag(1/u), u the column sums of
    P + N. ``pos`` = P and ``neg`` = N: non-negative arrays of one shape (m, n); A must have
    full column rank. The Laplace error of A at eps = 1 is 2 f (add/remove)."""
    w = _check(workload)
    pp, nn = (np.asarray(x, dtype=float) for x in (pos, neg))
    if pp.ndim != 2 or pp.shape != nn.shape or pp.shape[1] != w.n_bins:
        raise ValueError(f"pos and neg must be arrays of one shape (m, {w.n_bins}), got "
                         f"{pp.shape} and {nn.shape}")
    if not (np.all(np.isfinite(pp)) and np.all(np.isfinite(nn))
            and pp.min(initial=0.0) >= 0 and nn.min(initial=0.0) >= 0):
        raise ValueError("pos and neg must be finite and non-negative")
    obj = _L1Objective(w, pp.shape[0])
    f, grad = obj(np.concatenate([pp.ravel(), nn.ravel()]))
    if not math.isfinite(f):
        raise ValueError("pos, neg: A = (pos - neg) / column sums must have full column rank")
    return f, grad[:pp.size].reshape(pp.shape), grad[pp.size:].reshape(pp.shape)


def _check(workload: object) -> Workload:
    w = check_workload(workload)
    if w.n_bins > MAX_L1_LOCAL_BINS:
        raise ValueError(f"workload: the l1 local optimiser is dense, refused for {w.n_bins} > "
                         f"{MAX_L1_LOCAL_BINS} bins")
    return w


def _check_size(m: int, n: int, maxcor: int) -> None:
    """Refuse, before allocating, an optimisation that does not fit in memory: the iterate,
    its gradient and L-BFGS-B's 2 ``maxcor`` correction pairs have 2 m n entries each, plus
    a few (m, n) and (n, n) work arrays."""
    check_memory(8.0 * (2 * m * n * (2 * maxcor + _VECTORS) + _SQUARES * n * n),
                 f"the l1 local optimiser on a {m} x {n} strategy (L-BFGS-B memory {maxcor})",
                 "start from a strategy with fewer rows or lower maxcor")


def _dense_start(start: object, n: int, maxcor: int) -> _F:
    """The start as a dense (m, n) array (size checked before it is densified)."""
    if isinstance(start, OptimizedStrategy):
        start = start.strategy
    if isinstance(start, Strategy):
        if start.n_bins != n:
            raise ValueError(f"start: the strategy has {start.n_bins} bins, the workload {n}")
        _check_size(start.n_rows, n, maxcor)
        return np.asarray(start.matrix.toarray(), dtype=float)
    if isinstance(start, (str, bytes)) or not hasattr(start, "__len__"):
        raise ValueError(f"start must be None, a Strategy or a 2-D array, got "
                         f"{type(start).__name__}")
    try:
        a = np.asarray(start, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("start must be None, a Strategy or a 2-D array of numbers") from None
    if a.ndim != 2 or a.shape[1] != n or a.shape[0] < 1:
        raise ValueError(f"start must have shape (m, {n}), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("start has non-finite entries")
    _check_size(a.shape[0], n, maxcor)
    return a


def l1_local(workload: Workload, start: Strategy | OptimizedStrategy | npt.ArrayLike | None = None,
             *, maxiter: int = 300, maxcor: int = 20, time_limit: float | None = None
             ) -> OptimizedStrategy:
    """Local optimisation of the pure-DP strategy problem (L1) (module docstring) by
    L-BFGS-B over every strategy with the start's rows, from ``start`` (a Strategy, an
    ``OptimizedStrategy`` or an (m, n) array; its columns are rescaled to l1 norm 1;
    default HDMM's p-Identity, ``strategies.optimized.laplace_p_identity(workload)``).

    ``maxiter``: L-BFGS-B iterations (>= 1); ``maxcor``: its memory (>= 1);
    ``time_limit``: seconds for the whole call, the default start included (None: no
    limit; checked after every iteration, so one iteration can overrun). Workloads of at
    most :data:`MAX_L1_LOCAL_BINS` bins (dense), memory checked first.

    Returns an ``OptimizedStrategy``: ``strategy`` (dense m x n, every column of l1 norm 1:
    add/remove sensitivity 1), ``error`` = 2 tr(G (A'A)^-1) (Laplace, eps = 1, add/remove,
    N private; the units of ``expected_error(workload, Mechanism(strategy, epsilon=1.0))``),
    ``start_error`` (the start's, >= ``error``: the start is returned when nothing better is
    found), ``iterations``, ``seconds`` (the default start's optimisation included),
    ``lower_bound`` None. E.g. the CDF on 256 bins: 54.556 -> 53.69 per prefix after 1000
    iterations (about 25 s on one core)."""
    t0 = time.perf_counter()
    w = _check(workload)
    maxiter = check_int(maxiter, "maxiter", 1)
    maxcor = check_int(maxcor, "maxcor", 1)
    limit = math.inf if time_limit is None else check_real(time_limit, "time_limit", above=0.0)
    if start is None:
        _check_size(w.n_bins + max(1, w.n_bins // 16), w.n_bins, maxcor)  # p-Identity's rows
        start = laplace_p_identity(w)
    a0 = _unit_columns(_dense_start(start, w.n_bins, maxcor))
    obj = _L1Objective(w, a0.shape[0])
    f0 = _trace(obj, a0)
    x0 = np.concatenate([np.maximum(a0, 0.0).ravel(), np.maximum(-a0, 0.0).ravel()])
    deadline = t0 + limit

    def stop(intermediate_result: Any) -> None:
        if time.perf_counter() > deadline:
            raise StopIteration

    res = sopt.minimize(obj, x0, jac=True, method="L-BFGS-B", bounds=sopt.Bounds(0.0, np.inf),
                        callback=stop, options={"maxiter": maxiter, "maxcor": maxcor,
                                                "maxfun": 2 * maxiter})
    b, _ = obj.split(np.asarray(res.x, dtype=float))
    f, a = math.inf, a0
    if np.all(np.abs(b).sum(axis=0) > 0):
        a = _unit_columns(b)  # where P and N overlap, u > ||B_j||_1: exact unit columns
        f, _ = obj(np.concatenate([np.maximum(a, 0.0).ravel(), np.maximum(-a, 0.0).ravel()]))
    method = (f"l1 local optimisation (L-BFGS-B on B = P - N, columns normalised), "
              f"{int(res.nit)} iterations, {obj.evals} evaluations")
    if not f < f0:
        a, f, method = a0, f0, method + "; no improvement: the start returned"
    return OptimizedStrategy(strategy=Strategy(a, name="l1_local"), error=2.0 * f,
                             start_error=2.0 * f0, lower_bound=None, iterations=int(res.nit),
                             seconds=time.perf_counter() - t0, method=method)
