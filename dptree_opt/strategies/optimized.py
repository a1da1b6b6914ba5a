"""Optimised strategies: the Gaussian optimum of the matrix mechanism and HDMM's p-Identity.

**Gaussian (rho-zCDP), add/remove neighbours.** For a strategy A with l2 sensitivity
Delta = max_c ||A_c|| and the BLUE, the error per unit sigma^2 is Delta^2 tr(G X^-1),
G = W'W, X = A'A. Scaling A to Delta = 1, the best strategy solves the convex program

    minimise tr(G X^-1)  subject to  diag(X) <= 1,  X > 0                         (P)

(Li, Miklau, Hay, McGregor, Rastogi, "The matrix mechanism", VLDBJ 2015; Yuan et al., VLDB
2016). Its Lagrange dual (multipliers d >= 0 on diag(X) <= 1) is

    maximise g(d) = 2 tr((D^(1/2) G D^(1/2))^(1/2)) - sum(d),   D = diag(d)            (D)

the inner minimiser being X(d) = D^(-1/2) (D^(1/2) G D^(1/2))^(1/2) D^(-1/2). g is concave,
grad g = diag(X(d)) - 1, and g(c 1) maximised over c is the SVD bound (dptree_opt.bounds), so
(D) starts at the SVD bound and climbs. We iterate the fixed point d <- d * diag(X(d)) =
diag((D^(1/2) G D^(1/2))^(1/2)) (Denisov, McMahan, Rush, Smith, Thakurta, "Improved
differential privacy for SGD via optimal private linear operators on adaptive streams",
NeurIPS 2022, Sec. 4), and at every iterate evaluate the primal value of the feasible
X~ = S X(d) S, S = diag(X(d))^(-1/2) (columns rescaled to unit norm). Every iterate gives
g(d) <= OPT <= tr(G X~^-1): the returned strategy is the best primal iterate and its
certified optimality gap is primal / max dual - 1.

Cost per iteration: one symmetric eigendecomposition of M = D^(1/2) G D^(1/2). When G^-1 is
tridiagonal (prefix: G^-1 = tridiag(-1, [1, 2, .., 2], -1); all_range; identity) so is
M^-1 = D^(-1/2) G^-1 D^(-1/2), and ``scipy.linalg.eigh_tridiagonal`` (MRRR) gives all of
it in O(n^2) time: about 3 s per iteration at n = 4096 on one core. Otherwise a dense eigh,
O(n^3). The strategy returned is the upper Cholesky factor R of X~ (R'R = X~, unit column
norms, n x n dense).

**Laplace (eps-DP): HDMM's p-Identity** (McKenna, Miklau, Hay, Machanavajjhala, "Optimizing
error of high-dimensional statistical queries under differential privacy", VLDB 2018,
Sec. 5.1). A(Theta) = [I; Theta] D with Theta >= 0 of shape (p, n) and
D = diag(1 / (1 + 1'Theta)), so every column has l1 norm 1 (add/remove l1 sensitivity 1).
The objective is f(Theta) = tr(G (A'A)^-1) = tr(U G U (I + Theta'Theta)^-1), U = D^-1, and
by Woodbury (I + Theta'Theta)^-1 = I - Theta' C^-1 Theta, C = I_p + Theta Theta':

    f = tr(U G U) - <Y, (U G U Theta')'>,               Y = C^-1 Theta
    df/dTheta|_U = 2 (Z Y') Theta - 2 Z,                Z = Y U G U      (p x n)
    df/du_k = 2 (G_kk u_k - sum_r (G U Theta')_kr Y_rk),   u = 1 + 1'Theta

O(n p^2 + p^3) plus two products of G with n x p matrices (O(n p) for the prefix and
all-range workloads through their O(n) Gram products, O(n^2 p) otherwise). L-BFGS-B with
bounds Theta >= 0, several starts (HDMM's uniform random start and a dyadic one; optionally
multi-scale hats, below). The error
with Laplace noise at eps = 1 is 2 f(Theta). ``dptree_opt.optimize.optimized_strategy`` always
compares it with the best level-uniform tree (exact BLUE error) and returns the better one.

**Multi-scale hat start** (``laplace_p_identity(..., hats=True)``; measured here):
Theta0 = triangles of half-width h centred at the multiples of h, one row each, for
h = 16, 64, 256, ... with 2 h < n (each scale a partition of unity; about n / 12 rows). The
p-Identity landscape has many local optima and the dyadic start ends in a poorer one from
256 bins on: CDF, mean per prefix at eps = 1, 3000 iterations, dyadic -> hats: 256 bins
54.96 -> 53.66, 512: 71.04 -> 70.92 (70.37 with the scale 256 added), 1024: 90.61 (converged) -> 90.60, 2048: 114.67 (budgets
per node on the binary tree: 145.63). The optima are sparse (at 2048 bins 9,650 non-zeros
in Theta's 171 x 2048): the identity, hats of width 20 to 50 and a few rows spanning half
the domain. ``strategies.p_identity_sparse`` optimises on that sparse support (the hats
widened twice) in O(p^3 + p nnz + n p) per evaluation instead of O(p^2 n), up to 2^15 bins.

Both are optimised for **add/remove** neighbours (the anchors of docs/math.md section 6). Used
with swap neighbours they remain correctly calibrated (``Mechanism`` computes their exact
swap sensitivity) but are not optimal for swap.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
import scipy.linalg as sla
import scipy.optimize as sopt
import scipy.sparse as sp

from ..bounds import singular_values
from ..limits import check_memory
from ..validation import check_int, check_real
from ..workloads import KroneckerWorkload, Workload
from .base import Strategy
from .kronecker import KroneckerStrategy

_F: TypeAlias = "npt.NDArray[np.float64]"
# the eigen-system kept by _GaussianProblem.evaluate for .factor: (V, sqrt(mu), diag(X(d)))
_Fl: TypeAlias = "npt.NDArray[np.floating[Any]]"
_EigenState: TypeAlias = "tuple[_Fl, _Fl, _Fl]"

__all__ = ["OptimizedStrategy", "dual_start", "gaussian_optimal", "gaussian_optimal_cvxpy",
           "p_identity", "p_identity_objective", "laplace_p_identity", "hat_start",
           "gram_diagonal", "trace_gram_inverse", "kron_p_identity",
           "kron_gaussian_optimal"]

# Dense Gram / eigendecomposition only up to this many bins.
MAX_BINS = 8192


@dataclass(frozen=True, eq=False)
class OptimizedStrategy:
    """Result of an optimiser.

    Attributes
    ----------
    strategy : the Strategy to pass to ``Mechanism`` (any strategy; may be a tree after a
        fallback).
    error : its total squared error at unit budget with add/remove neighbours and N private:
        Gaussian per unit sigma^2 (rho = 1/2) = tr(G X^-1) at unit sensitivity; Laplace at
        eps = 1 = 2 tr(G (A'A)^-1) at unit l1 sensitivity. Same units as
        ``expected_error(W, Mechanism(strategy, rho=0.5 | epsilon=1, neighbours="add_remove"))``.
    start_error : the same for the starting point (error <= start_error always).
    lower_bound : a certified lower bound on the optimum of the optimised family (Gaussian:
        the best dual value), or None.
    iterations : optimiser iterations (summed over starts).
    seconds : wall time.
    method : what was done (and whether a fallback was taken).
    history : per-iteration (primal, dual) pairs for the Gaussian fixed point, else ().
    """

    strategy: Strategy
    error: float
    start_error: float
    lower_bound: float | None
    iterations: int
    seconds: float
    method: str
    history: tuple[tuple[float, float], ...] = ()

    @property
    def gap(self) -> float | None:
        """Relative optimality gap error / lower_bound - 1 (None without a bound)."""
        if self.lower_bound is None or self.lower_bound <= 0:
            return None
        return self.error / self.lower_bound - 1.0


def check_workload(workload: object) -> Workload:
    """The workload, checked: a dptree_opt Workload of at most MAX_BINS bins (the optimised
    strategies are dense; ValueError otherwise)."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a dptree_opt Workload, got {type(workload).__name__}")
    if workload.n_bins > MAX_BINS:
        raise ValueError(f"optimised strategies are dense: refused for {workload.n_bins} > "
                         f"{MAX_BINS} bins")
    return workload


def gram_diagonal(w: Workload) -> np.ndarray:
    """diag(W'W)_i = number of queries containing bin i. O(n + q)."""
    n = w.n_bins
    i = np.arange(n, dtype=float)
    if w.kind == "prefix":
        return n - i
    if w.kind == "all_range":
        return (i + 1) * (n - i)
    lo, hi = w.intervals()
    d = np.zeros(n + 1)
    np.add.at(d, lo, 1.0)
    np.subtract.at(d, hi, 1.0)
    return np.cumsum(d[:-1])


# ------------------------------------------------------------------------------ Gaussian
def _tridiagonal_inverse_gram(w: Workload) -> tuple[_F, _F] | None:
    """(diag, offdiag) of G^-1 when it is tridiagonal, else None.

    Prefix: G^-1 = (P'P)^-1 = P^-1 P^-T with P^-1 the bidiagonal difference operator, so
    G^-1 = tridiag(-1, [1, 2, ..., 2], -1) (index 0 is the first bin). Identity: I. Other
    workloads: G^-1 from a dense Cholesky inverse, accepted if its entries outside the three
    diagonals are below 1e-9 of its largest entry (all_range: G_ij = (min+1)(n-max) is a
    one-pair semiseparable matrix, whose inverse is tridiagonal)."""
    n = w.n_bins
    if w.kind == "prefix":
        diag = np.full(n, 2.0)
        diag[0] = 1.0
        return diag, -np.ones(n - 1)
    if w.kind == "identity":
        return np.ones(n), np.zeros(n - 1)
    g = w.gram_dense()
    try:
        c = sla.cho_factor(g, lower=True)
    except np.linalg.LinAlgError:
        return None
    inv = sla.cho_solve(c, np.eye(n))
    band = np.abs(np.triu(inv, 2))
    if band.max(initial=0.0) > 1e-9 * np.abs(inv).max():
        return None
    return np.diag(inv).copy(), np.diag(inv, 1).copy()


class _GaussianProblem:
    """One evaluation of the dual point d: eigen-system of M = D^1/2 G D^1/2, dual value,
    diag(X(d)), primal value of the normalised X~ and (on request) the strategy factor."""

    def __init__(self, w: Workload):
        self.w = w
        self.n = w.n_bins
        self.tri = _tridiagonal_inverse_gram(w)
        self.g = None if self.tri is not None else w.gram_dense()
        if self.g is not None and np.linalg.eigvalsh(self.g)[0] <= 1e-12 * np.trace(self.g):
            raise ValueError("the Gaussian optimiser needs a workload of full column rank "
                             "(W'W positive definite)")

    def gram_times(self, z: np.ndarray) -> np.ndarray:
        """G @ z (O(n) per column for prefix/all_range/identity via the workload)."""
        return self.g @ z if self.g is not None else self.w.gram_matvec(z)

    def evaluate(self, d: npt.NDArray[np.floating[Any]]
                 ) -> tuple[float, float, npt.NDArray[np.floating[Any]], _EigenState]:
        """Return (dual, primal, diag of M^(1/2), factor) for d > 0.

        The eigen-system of M: mu_k = eigenvalues of M (ascending), V its eigenvectors.
        M^(1/2) = V diag(sqrt(mu)) V'; X(d) = D^-1/2 M^1/2 D^-1/2; x = diag(X(d)).
        X~ = S X S with S = diag(x)^-1/2; primal tr(G X~^-1) =
        tr(E G E M^-1/2), E = diag(sqrt(d x)), = sum_k mu_k^-1/2 v_k' E G E v_k."""
        sd = np.sqrt(d)
        if self.tri is not None:  # eigenvalues nu of M^-1 (tridiagonal): mu = 1 / nu
            diag, off = self.tri
            nu, v = sla.eigh_tridiagonal(diag / d, off / (sd[:-1] * sd[1:]))
            nu = np.clip(nu, 1e-300, None)
            root = 1.0 / np.sqrt(nu)  # sqrt(mu)
        else:
            m = sd[:, None] * self.g * sd[None, :]
            mu, v = np.linalg.eigh(m)
            root = np.sqrt(np.clip(mu, 1e-300, None))
        sqrt_diag = np.einsum("ik,k,ik->i", v, root, v)  # diag(M^1/2), O(n^2)
        dual = 2.0 * float(root.sum()) - float(d.sum())
        x = sqrt_diag / d
        e = np.sqrt(d * x)
        egev = e[:, None] * self.gram_times(e[:, None] * v)  # E G E V, O(n^2) or O(n^3)
        primal = float(np.sum(np.einsum("ik,ik->k", v, egev) / root))
        return dual, primal, sqrt_diag, (v, root, x)

    def factor(self, d: npt.NDArray[np.floating[Any]],
               state: _EigenState) -> npt.NDArray[np.floating[Any]]:
        """Upper Cholesky factor R of X~ (R'R = X~, unit column norms), dense (n, n)."""
        v, root, x = state
        # X = D^-1/2 V diag(sqrt(mu)) V' D^-1/2; X~ = S X S, S = diag(x)^-1/2
        b = (np.sqrt(root)[:, None] * v.T) / np.sqrt(d * x)[None, :]  # B'B = X~, O(n^2)
        xt = b.T @ b  # O(n^3)
        xt = 0.5 * (xt + xt.T)
        r = sla.cholesky(xt, lower=False)
        r /= np.linalg.norm(r, axis=0)[None, :]  # exact unit column norms (rounding only)
        return r


def _dense_strategy(r: np.ndarray, name: str) -> Strategy:
    r = np.where(np.abs(r) > 1e-15 * np.abs(r).max(), r, 0.0)
    return Strategy(r, name=name)  # from the dense array: no second copy of its CSR


def dual_start(workload: Workload, d0: ArrayLike | None = None) -> _F:
    """The dual fixed point's starting point: ``d0`` checked (positive, shape (n,)), or the
    SVD-bound point d = (||W||_* / n)^2 1, whose dual value is the SVD bound."""
    n = workload.n_bins
    if d0 is None:
        return np.full(n, (float(np.sum(singular_values(workload))) / n) ** 2)
    d = np.asarray(d0, dtype=float)
    if d.shape != (n,) or not np.all(np.isfinite(d)) or np.any(d <= 0):
        raise ValueError(f"d0 must be a positive vector of shape ({n},)")
    return d


def gaussian_optimal(workload: Workload, *, tol: float = 1e-6, max_iter: int = 500,
                     d0: ArrayLike | None = None) -> OptimizedStrategy:
    """The optimal Gaussian strategy for ``workload`` under add/remove (module docstring).

    Solves (P) by the fixed point on the dual variable d (Denisov et al. 2022), from
    ``d0`` (default: the SVD-bound point d = (||W||_* / n)^2 1, whose normalised primal is
    the "Gram square root" strategy, A proportional to (W'W)^(1/4)-like). Stops when the
    certified gap primal / dual - 1 <= ``tol`` or after ``max_iter`` iterations. Returns the
    best primal iterate as an n x n upper-triangular Strategy with unit column norms;
    ``error`` = its tr(G X^-1), ``lower_bound`` = best dual value. Time O(n^2) per iteration
    for prefix / all_range / identity, O(n^3) otherwise; memory O(n^2)."""
    w = check_workload(workload)
    t0 = time.perf_counter()
    prob = _GaussianProblem(w)
    d: npt.NDArray[np.floating[Any]] = dual_start(w, d0)
    best_primal, best_dual = math.inf, -math.inf
    best: tuple[npt.NDArray[np.floating[Any]], _EigenState] | None = None
    start_error: float | None = None
    history: list[tuple[float, float]] = []
    it = 0
    for it in range(1, max_iter + 1):
        dual, primal, sqrt_diag, state = prob.evaluate(d)
        history.append((primal, dual))
        if start_error is None:
            start_error = primal
        if primal < best_primal:
            best_primal, best = primal, (d, state)
        best_dual = max(best_dual, dual)
        if best_primal <= best_dual * (1.0 + tol):
            break
        d = sqrt_diag  # fixed point d <- diag((D^1/2 G D^1/2)^1/2)
    if best is None or start_error is None:
        raise ValueError("the Gaussian optimiser found no finite primal value")
    r = prob.factor(*best)
    secs = time.perf_counter() - t0
    return OptimizedStrategy(
        strategy=_dense_strategy(r, "optimal_gaussian"), error=best_primal,
        start_error=start_error, lower_bound=best_dual, iterations=it, seconds=secs,
        method=(f"dual fixed point ({'tridiagonal' if prob.tri is not None else 'dense'} "
                f"eigensolver), {it} iterations, gap {best_primal / best_dual - 1:.2e}"),
        history=tuple(history))


def gaussian_optimal_cvxpy(workload: Workload, solver: str | None = None) -> tuple[_F, float]:
    """Reference solution of (P) with cvxpy (matrix_frac, an SDP): (X, optimal value).
    For small n only (n <= 32 in the tests)."""
    import cvxpy as cp

    w = check_workload(workload)
    n = w.n_bins
    lg = np.linalg.cholesky(w.gram_dense())  # G = Lg Lg', so tr(G X^-1) = tr(Lg' X^-1 Lg)
    x = cp.Variable((n, n), PSD=True)
    prob = cp.Problem(cp.Minimize(cp.matrix_frac(lg, x)), [cp.diag(x) <= 1])
    prob.solve(solver=solver or "CLARABEL")
    if prob.status not in ("optimal", "optimal_inaccurate"):
        raise ValueError(f"cvxpy failed: {prob.status}")
    return np.asarray(x.value), float(prob.value)


# ------------------------------------------------------------------------------ Laplace
def p_identity(theta: ArrayLike | sp.spmatrix | sp.sparray) -> Strategy:
    """HDMM's p-Identity strategy A = [I; Theta] D, D = diag(1 / (1 + 1'Theta)).

    ``theta``: non-negative (p, n), dense or scipy.sparse (kept sparse: no dense p x n copy).
    Every column has l1 norm 1. Rows 0..n-1 are the scaled identity, rows n.. the scaled Theta
    rows; all at budget level 1."""
    src: Any = theta
    sparse = sp.issparse(src)
    th: Any = sp.csr_matrix(src).astype(float) if sparse else np.asarray(src, dtype=float)
    values = np.asarray(th.data if sparse else th)
    if th.ndim != 2 or np.any(~np.isfinite(values)) or np.any(values < 0):
        raise ValueError("theta must be a finite non-negative (p, n) array")
    u = 1.0 + np.asarray(th.sum(axis=0), dtype=float).ravel()
    scaled = th @ sp.diags(1.0 / u) if sparse else th / u[None, :]
    a = sp.vstack([sp.diags(1.0 / u), sp.csr_matrix(scaled)], format="csr")
    return Strategy(a, name="p_identity")


class _PIdentityObjective:
    """f(Theta) = tr(G (A'A)^-1) and its gradient (module docstring), Theta flattened."""

    def __init__(self, w: Workload, p: int):
        self.w, self.p, self.n = w, p, w.n_bins
        self.gdiag = gram_diagonal(w)
        self.g = None if w.kind in ("prefix", "all_range", "identity") else w.gram_dense()
        self.evals = 0

    def gram_times(self, z: _F) -> _F:
        return self.g @ z if self.g is not None else self.w.gram_matvec(z)

    def __call__(self, flat: _F) -> tuple[float, _F]:
        self.evals += 1
        p, n = self.p, self.n
        th = flat.reshape(p, n)
        u = 1.0 + th.sum(axis=0)
        c = np.eye(p) + th @ th.T  # O(p^2 n)
        cf = sla.cho_factor(c, lower=True)
        y = sla.cho_solve(cf, th)  # C^-1 Theta, (p, n)
        gut = self.gram_times(u[:, None] * th.T)  # G U Theta', (n, p)
        h = u[:, None] * gut  # U G U Theta'
        f = float(np.sum(self.gdiag * u * u) - np.sum(y * h.T))
        z = (u[:, None] * self.gram_times(u[:, None] * y.T)).T  # Y U G U, (p, n)
        grad = 2.0 * (z @ y.T) @ th - 2.0 * z
        du = 2.0 * (self.gdiag * u - np.einsum("kr,rk->k", gut, y))
        grad += du[None, :]
        return f, grad.ravel()


def p_identity_objective(workload: Workload, theta: ArrayLike) -> tuple[float, _F]:
    """(f, grad) of HDMM's p-Identity objective tr(G (A'A)^-1) at ``theta`` (p, n)."""
    th = np.asarray(theta, dtype=float)
    obj = _PIdentityObjective(check_workload(workload), th.shape[0])
    f, g = obj(th.ravel())
    return f, g.reshape(th.shape)


def trace_gram_inverse(strategy: Strategy, w: Workload) -> float:
    """tr(G (A'A)^-1) by a Cholesky solve of the n x n A'A, O(n^3): the Woodbury form of the
    p-Identity objective loses digits when an identity weight 1 / u_k is tiny (u_k ~ 1e5
    gives ~1e-6 relative error; prefix(4), p = 2: 10.0 against 10.0000390331). Memory
    (the dense A, A'A, its inverse and G) checked before allocating."""
    m, n = strategy.matrix.shape
    check_memory(8.0 * (m * n + 3 * n * n), f"the dense error check of a {m} x {n} strategy",
                 "score it with dptree_opt.expected_error (structured) instead")
    a = strategy.matrix.toarray()
    c = sla.cho_solve(sla.cho_factor(a.T @ a, lower=True), np.eye(a.shape[1]))
    return float(np.einsum("ij,ij->", c, w.gram_dense()))


def _dyadic_start(n: int, p: int) -> np.ndarray:
    """Theta = the top levels of the binary tree (root first), at most p rows, padded with
    zero rows: a tree-like start (leaves + upper levels)."""
    th = np.zeros((p, n))
    r, level = 0, 0
    while r < p:
        m = 1 << level
        if m > n:
            break
        edges = np.linspace(0, n, m + 1).round().astype(int)
        for i in range(m):
            if r >= p:
                break
            th[r, edges[i]:edges[i + 1]] = 1.0
            r += 1
        level += 1
    return th


def hat_start(n: int) -> _F:
    """The multi-scale hat start of p-Identity (module docstring): rows max(0, 1 - |x - c| / h)
    at the bin centres x = i + 1/2, for every centre c in h Z meeting the domain and every
    scale h = 16 * 4^j with 2 h < n; shape (p, n), p about n / 12. Below 33 bins (no such
    scale) the single scale h = max(1, n // 4)."""
    n = check_int(n, "n", 2)
    x = np.arange(n) + 0.5
    scales = [h for h in (16 * 4 ** j for j in range(32)) if 2 * h < n] or [max(1, n // 4)]
    rows = []
    for h in scales:
        c = np.arange(0, n + h, h, dtype=float)           # centres 0, h, .., >= n
        tri = np.clip(1.0 - np.abs(x[None, :] - c[:, None]) / h, 0.0, None)
        rows.append(tri[tri.sum(axis=1) > 0])
    return np.vstack(rows)


def laplace_p_identity(workload: Workload, p: int | None = None, *, starts: int = 2,
                       seed: int | np.random.SeedSequence | None = 0,
                       max_iter: int = 500, hats: bool = False,
                       time_limit: float | None = None) -> OptimizedStrategy:
    """HDMM's p-Identity strategy optimised by L-BFGS-B (module docstring), best of
    ``starts`` starts: a dyadic tree-like start and ``starts - 1`` uniform [0, 1) random
    ones (HDMM's). ``p`` defaults to max(1, n // 16) (HDMM's choice for 1-D range
    workloads). ``hats=True`` adds the multi-scale hat start (:func:`hat_start`, its own
    number of rows, about n / 12; the best start from 256 bins on, module docstring), run
    first; ``starts=0, hats=True`` runs it alone.
    ``time_limit``: seconds for all the starts together (None: no limit; checked after
    every iteration; the first start always runs, a later one not yet begun when the limit
    is reached is skipped, and ``method`` counts the starts run). ``error`` = 2 f(Theta)
    (Laplace, eps = 1, add/remove); ``start_error`` is the error of the best start (the
    result is never worse)."""
    w = check_workload(workload)
    n = w.n_bins
    p = max(1, n // 16) if p is None else check_int(p, "p", 1)
    if not isinstance(hats, (bool, np.bool_)):
        raise ValueError(f"hats must be True or False, got {hats!r}")
    limit = check_real(time_limit, "time_limit", above=0.0, none=True)
    limit = math.inf if limit is None else limit
    t0 = time.perf_counter()
    starts = check_int(starts, "starts", 0)
    if starts == 0 and not hats:
        raise ValueError("starts = 0 leaves no start: give starts >= 1 or hats=True")
    rng = np.random.default_rng(seed)
    inits = ([hat_start(n)] if hats and n >= 2 else []) + [_dyadic_start(n, p)] * min(starts, 1) \
        + [rng.random((p, n)) for _ in range(max(0, starts - 1))]
    if not inits:   # one bin: no hat start
        inits = [_dyadic_start(n, p)]
    best_f, start_f, iters, evals, ran = math.inf, math.inf, 0, 0, 0
    best_th: _F | None = None

    def stop(intermediate_result: Any) -> None:
        if time.perf_counter() - t0 > limit:
            raise StopIteration

    for th0 in inits:
        if best_th is not None and time.perf_counter() - t0 > limit:
            break
        obj = _PIdentityObjective(w, th0.shape[0])
        f0 = obj(th0.ravel())[0]
        start_f = min(start_f, f0)
        res = sopt.minimize(obj, th0.ravel(), jac=True, method="L-BFGS-B",
                            bounds=[(0.0, None)] * th0.size, callback=stop,
                            options={"maxiter": max_iter, "maxfun": 2 * max_iter})
        iters += int(res.nit)
        evals += obj.evals
        ran += 1
        f, th = (float(res.fun), res.x) if res.fun <= f0 else (f0, th0.ravel())
        if f < best_f:
            best_f, best_th = f, th.reshape(th0.shape)
    secs = time.perf_counter() - t0
    if best_th is None:
        raise ValueError("the p-Identity optimiser found no finite objective value")
    strat = p_identity(best_th)
    return OptimizedStrategy(
        strategy=strat, error=2.0 * trace_gram_inverse(strat, w),
        start_error=2.0 * start_f, lower_bound=None, iterations=iters, seconds=secs,
        method=(f"p-Identity (p = {best_th.shape[0]}) by L-BFGS-B, "
                f"{ran} of {len(inits)} starts{' (multi-scale hats first)' if hats else ''}, "
                f"{evals} evaluations"))


# ------------------------------------------------------------------ Kronecker p-Identity
MAX_SWAP_PAIR_BINS = 1024   # single-level Kronecker l2 swap: n_i^2 pair profiles per axis
_SWAP_COMBOS = 1 << 22      # profile combinations of the axes after the first


def _hull_vertex_points(pts: np.ndarray) -> np.ndarray:
    """The vertices of the convex hull of points (m, k), k <= 3, robust to degenerate sets:
    the points are expressed in the basis of their affine span (SVD) and the hull is taken
    there (a linear function attains its maximum over the set at one of these vertices)."""
    from scipy.spatial import ConvexHull

    pts = np.unique(pts, axis=0)
    if pts.shape[0] <= pts.shape[1] + 1:
        return pts
    centre = pts.mean(axis=0)
    _, sv, vt = np.linalg.svd(pts - centre, full_matrices=False)
    rank = int(np.sum(sv > 1e-12 * max(float(sv[0]), 1e-300)))
    if rank == 0:
        return pts[:1]
    coords = (pts - centre) @ vt[:rank].T
    if rank == 1:
        return pts[[int(np.argmin(coords[:, 0])), int(np.argmax(coords[:, 0]))]]
    return pts[ConvexHull(coords).vertices]


class _SingleLevelKronecker(KroneckerStrategy):
    """A Kronecker product of single-level factors (every row of a factor at one budget
    level, so the product has one level), with exact swap sensitivities that need neither the
    explicit matrix (the generic path's L1 fallback, refused above 8192 cells) nor the
    enumeration of every combination of per-axis pair profiles (the generic L2 path: ~n^4
    for dense n x n factors, minutes at 256 x 256).

    L1 (non-negative factors, one l1 norm kappa_i per factor's columns: HDMM's p-Identity has
    kappa_i = 1): for columns u = x (x) y, u' = x' (x) y', ||u - u'||_1 = 2 K - 2 sum min(u,
    u') <= 2 K, K = prod kappa_i (triangle inequality), and 2 K is attained when some axis
    has two columns with disjoint supports (take them there and equal columns elsewhere). So
    the unit swap sensitivity is exactly 2 K then; otherwise the generic path decides.

    L2 (any single-level factors, X_i = A_i'A_i, axes of <= MAX_SWAP_PAIR_BINS cells):
    ||a_c - a_c'||^2 = prod_i X_i[c_i, c_i] + prod_i X_i[c'_i, c'_i] - 2 prod_i X_i[c_i, c'_i]
    (docs/math.md section 8: Kronecker Grams). Each axis contributes a pair profile (a, b, x) =
    (X[c, c], X[c', c'], X[c, c']), from the 'same' set (c = c') or the 'distinct' set; for a
    choice of sets (not all 'same') the axes after the first combine into profiles
    (prod a, prod b, prod x), and for every first-axis profile the linear function
    (a_1, b_1, -2 x_1) . (a, b, x) is maximised over the vertices of their convex hull."""

    @cached_property
    def _single_level(self) -> bool:
        return all(np.unique(f.levels).size == 1 for f in self.factors)

    @cached_property
    def _unit_l1_swap(self) -> float | None:
        if not self._single_level:
            return None
        kappas: list[float] = []
        disjoint = False
        for f in self.factors:
            a = f.matrix.tocsc()
            if a.nnz and a.data.min() < 0:
                return None
            norms = np.asarray(abs(a).sum(axis=0)).ravel()
            if norms.size == 0 or np.ptp(norms) > 1e-12 * norms.max():
                return None
            kappas.append(float(norms.mean()))
            if f.n_bins >= 2:
                s = sp.csc_matrix((np.ones(a.nnz, np.int64), a.indices, a.indptr), shape=a.shape)
                # shared rows of every column pair, n x n
                overlap = sp.csr_matrix(s.T @ s).toarray()
                np.fill_diagonal(overlap, 1)
                disjoint = disjoint or bool(np.any(overlap == 0))
        return 2.0 * math.prod(kappas) if disjoint else None

    @cached_property
    def _l2_swap_squared(self) -> float | None:
        """max over c != c' of ||a_c - a_c'||_2^2 at unit weight (class docstring), or None
        when the structure does not apply or is too large."""
        if not self._single_level or max(self.grid_shape) > MAX_SWAP_PAIR_BINS:
            return None
        if self.n_bins == 1:
            return 0.0
        sets: list[tuple[_F, _F]] = []
        for f in self.factors:
            a = f.matrix
            x = np.asarray((a.T @ a).todense(), dtype=float)  # X_i, n x n
            dg = np.diag(x)
            same = np.unique(np.stack([dg, dg, dg], axis=1), axis=0)
            n = dg.size
            off = ~np.eye(n, dtype=bool)
            distinct = np.stack([np.broadcast_to(dg[:, None], (n, n))[off],
                                 np.broadcast_to(dg[None, :], (n, n))[off], x[off]], axis=1)
            sets.append((same, np.unique(distinct, axis=0) if n > 1 else distinct))
        best = -np.inf
        d = len(sets)
        for choice in itertools.product((0, 1), repeat=d):
            if not any(choice):
                continue
            parts = [sets[i][choice[i]] for i in range(d)]
            if any(p.shape[0] == 0 for p in parts):
                continue
            if math.prod(p.shape[0] for p in parts[1:]) > _SWAP_COMBOS:
                return None
            rest = np.ones((1, 3))
            for p in parts[1:]:
                rest = (rest[:, None, :] * p[None, :, :]).reshape(-1, 3)
            verts = _hull_vertex_points(rest)
            first = parts[0] * np.array([1.0, 1.0, -2.0])
            step = max(1, (1 << 22) // max(verts.shape[0], 1))
            for i in range(0, first.shape[0], step):
                best = max(best, float((first[i:i + step] @ verts.T).max()))
        return max(best, 0.0)

    def _structured_swap(self, W: _F, p: int, generic: Callable[[], float]) -> float:
        if self._single_level:
            w = float(np.sum(W))  # the weight of the one level code
            if p == 1 and self._unit_l1_swap is not None:
                return w * self._unit_l1_swap
            if p == 2 and self._l2_swap_squared is not None:
                return w * math.sqrt(self._l2_swap_squared)
        return super()._structured_swap(W, p, generic)

    def with_total_row(self) -> _SingleLevelKronecker:
        """A copy with one more all-ones row at level 0 (the last row)."""
        return _SingleLevelKronecker(self.factors, n_totals=self.n_totals + 1, name=self.name)


def kron_p_identity(workload: Workload, p: int | Sequence[int] | None = None, *,
                    starts: int = 2, seed: int | np.random.SeedSequence | None = 0,
                    max_iter: int = 500) -> OptimizedStrategy:
    """HDMM's Kronecker p-Identity strategy ("OPT_kron" with p-Identity factors; McKenna,
    Miklau, Hay, Machanavajjhala, VLDB 2018, Sec. 6; their ``KronPIdentity``) for a
    Kronecker workload W = W_1 x .. x W_d (``workloads.prefix(shape)``, ``all_range(shape)``,
    ``workloads.kron(...)``).

    With one Laplace noise scale the error of A = A_1 x .. x A_d on W factorises (docs/math.md
    section 8): E = (2 / eps^2) prod_i ||A_i||_1^2 tr(G_i (A_i'A_i)^-1) (add/remove: the l1
    sensitivity of a product is the product of the column-norm maxima), so each factor is
    optimised alone for its axis's 1-D workload by :func:`laplace_p_identity` (``p``: one int
    for every axis, one per axis, or None for HDMM's max(1, n_i // 16); ``starts``, ``seed``,
    ``max_iter`` as there; identical axes are optimised once). Every factor has unit l1
    columns, so the add/remove sensitivity is 1 and the swap sensitivity exactly 2 whenever
    some axis has two columns with disjoint supports (checked; else the generic exact path).

    Returns an :class:`OptimizedStrategy` whose ``strategy`` is the Kronecker product (a
    ``KroneckerStrategy``, implicit: no grid-sized matrix) and ``error`` = 2 prod_i f_i, the
    Laplace error at eps = 1 under add/remove with N private (f_i = tr(G_i (A_i'A_i)^-1),
    recomputed by a Cholesky solve); ``start_error`` = 2 prod_i (per-axis start error / 2).
    It lives here, next to the 1-D
    p-Identity it is built from (``strategies.optimized``), because it is a strategy
    constructor like ``laplace_p_identity``; ``optimize.optimized_strategy`` is the 1-D
    "best of p-Identity and trees" used by ``compare``."""
    if not isinstance(workload, KroneckerWorkload):
        raise ValueError("kron_p_identity needs a Kronecker workload over a grid "
                         "(workloads.prefix((n1, n2)), workloads.all_range(shape), "
                         "workloads.kron(...)); for 1-D use laplace_p_identity")
    d = len(workload.factors)
    if p is None or (isinstance(p, (int, np.integer)) and not isinstance(p, bool)):
        ps: list[Any] = [p] * d
    else:
        try:
            ps = list(p)  # type: ignore[arg-type]  # a bool: TypeError, refused below
        except TypeError:
            raise ValueError(f"p must be None, an int or one int per axis, got {p!r}") from None
        if len(ps) != d:
            raise ValueError(f"p: one value per axis ({d}), got {len(ps)}")
    t0 = time.perf_counter()
    done: dict[tuple[object, ...], OptimizedStrategy] = {}
    results: list[OptimizedStrategy] = []
    for w, pi in zip(workload.factors, ps):
        key = (w.kind, w.n_bins, None if w.lo is None else w.lo.tobytes(),
               None if w.hi is None else w.hi.tobytes(), pi)
        if key not in done:
            done[key] = laplace_p_identity(w, pi, starts=starts, seed=seed, max_iter=max_iter)
        results.append(done[key])
    shape = "x".join(str(w.n_bins) for w in workload.factors)
    strat = _SingleLevelKronecker([r.strategy for r in results],
                                 name=f"kron p-identity {shape}")
    # f_i = tr(G_i (A_i'A_i)^-1), exact per axis (laplace_p_identity's error / 2)
    error = 2.0 * math.prod(r.error / 2.0 for r in results)
    start = 2.0 * math.prod(r.start_error / 2.0 for r in results)
    return OptimizedStrategy(
        strategy=strat, error=error, start_error=start, lower_bound=None,
        iterations=sum(r.iterations for r in done.values()),
        seconds=time.perf_counter() - t0,
        method="Kronecker p-Identity (HDMM OPT_kron): per axis " + "; ".join(
            r.method for r in results))


def kron_gaussian_optimal(workload: Workload, *, tol: float = 1e-6,
                          max_iter: int = 500) -> OptimizedStrategy:
    """The Kronecker product of the 1-D Gaussian optima (:func:`gaussian_optimal` on each
    axis's workload factor; identical axes solved once) for a Kronecker workload: the
    Gaussian counterpart of :func:`kron_p_identity` (HDMM's Kronecker template with its
    Gaussian per-factor optimiser). With one noise scale the error factorises,
    E = sigma^2 prod_i Delta_i^2 tr(G_i X_i^-1) (add/remove: Delta = prod Delta_i), so the
    product of the per-axis optima is the best Kronecker strategy (and, tests/test_grids.py,
    the optimum of all strategies for these workloads). ``error`` = prod of the per-axis
    errors (per unit sigma^2, add/remove, N private), ``lower_bound`` = the product of the
    per-axis certified dual bounds (a lower bound for every Kronecker strategy)."""
    if not isinstance(workload, KroneckerWorkload):
        raise ValueError("kron_gaussian_optimal needs a Kronecker workload over a grid; for "
                         "1-D use gaussian_optimal")
    t0 = time.perf_counter()
    done: dict[tuple[object, ...], OptimizedStrategy] = {}
    results: list[OptimizedStrategy] = []
    for w in workload.factors:
        key = (w.kind, w.n_bins, None if w.lo is None else w.lo.tobytes(),
               None if w.hi is None else w.hi.tobytes())
        if key not in done:
            done[key] = gaussian_optimal(w, tol=tol, max_iter=max_iter)
        results.append(done[key])
    shape = "x".join(str(w.n_bins) for w in workload.factors)
    strat = _SingleLevelKronecker([r.strategy for r in results],
                                  name=f"kron gaussian optimum {shape}")
    bounds = [r.lower_bound for r in results]  # all set by gaussian_optimal
    return OptimizedStrategy(
        strategy=strat, error=math.prod(r.error for r in results),
        start_error=math.prod(r.start_error for r in results),
        lower_bound=(math.prod(b for b in bounds if b is not None)
                     if all(b is not None for b in bounds) else None),
        iterations=sum(r.iterations for r in done.values()),
        seconds=time.perf_counter() - t0,
        method="Kronecker product of the 1-D Gaussian optima: " + "; ".join(
            r.method for r in results))
