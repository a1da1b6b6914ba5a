"""HDMM's p-Identity (McKenna, Miklau, Hay, Machanavajjhala, VLDB 2018, Sec. 5.1) on a fixed
sparse support: the multi-scale hats at sizes the dense optimiser cannot reach.

The p-Identity strategy A = [I; Theta] D, D = diag(1 / u), u = 1 + 1'Theta (every column of
l1 norm 1; ``strategies.optimized``) has the objective f(Theta) = tr(G (A'A)^-1), G = W'W,
and by Woodbury, with C = I_p + Theta Theta', Y = C^-1 Theta, H = U G U Theta' (n x p):

    f = tr(U G U) - <Y, H'>,
    df/dTheta = 2 (C^-1 M C^-1) Theta - 2 C^-1 H' + 1 du',      M = Theta H  (p x p)
    du_k = 2 (G_kk u_k - sum_r (G U Theta')_kr Y_rk)

(the dense module's formulas, Z Y' = C^-1 Theta U G U Theta' C^-1 = C^-1 M C^-1 written so
that no p x n by n x p product is formed). The dense optimiser costs O(p^2 n) per
evaluation. Here Theta lives on a fixed support of nnz entries (a CSR pattern) and every
product above is a sparse-dense one: C, M and C^-1 Theta in O(p nnz), G applied to the
n x p matrix U Theta' in O(n p) (prefix workload: cumulative sums), C^-1 in O(p^3), and the
gradient gathered only on the support (C^-1 H' at nnz entries, in blocks). So one evaluation
is O(p^3 + p nnz + n p).

The support: :func:`hat_support`, the multi-scale hat start of ``strategies.optimized.
hat_start`` with every triangle's support widened ``widen`` times about its centre. Measured
(the CDF, eps = 1, mean per prefix; the dense optimiser with entries outside the support held
at 0, 5000 iterations, 1024 bins): widen 1: 91.08, 1.5: 90.70, 2: 90.61, against 90.60 with
no restriction: widen = 2 (the default) loses nothing measurable there. At 512 bins it does:
71.41 against 70.92 unrestricted (3000 iterations), so ``optimize.best_mechanism`` runs the
dense optimiser up to 1024 bins and this one above.
"""

from __future__ import annotations

import math
import time
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.optimize as sopt
import scipy.sparse as sp

from ..limits import check_memory
from ..validation import check_int, check_real
from ..workloads import Workload
from .optimized import (OptimizedStrategy, check_workload, gram_diagonal, hat_start,
                        p_identity, trace_gram_inverse)

__all__ = ["hat_support", "laplace_p_identity_hats", "sparse_p_identity_objective",
           "MAX_SPARSE_P_IDENTITY_BINS"]

_F: TypeAlias = "npt.NDArray[np.float64]"

MAX_SPARSE_P_IDENTITY_BINS = 1 << 15  # p ~ n / 12: the p x p inverse is O(p^3) per evaluation
_DENSE_CHECK_BINS = 2048              # the returned error: a dense solve up to here, ...
_U_WOODBURY = 1e4                     # ... and when some u_k exceeds this (the Woodbury value
_MAX_RECHECK_BINS = 8192              # loses ~u 1e-11 relative digits), up to here (16 s)
_WORK_ARRAYS = 6                      # dense (n, p) arrays of one evaluation (U Theta', G U
#                                       Theta', H, Y', (Z Y') Theta and a temporary)
_LBFGS_VECTORS = 25                   # vectors of nnz floats: L-BFGS-B's 10 pairs + iterates
_GATHER = 1 << 21                     # entries of one gather block (nnz x p products)


def hat_support(n: int, widen: float = 2.0) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp],
                                                     _F]:
    """(rows, cols, start): the support of the multi-scale hats (``hat_start(n)``, p rows)
    widened ``widen`` >= 1 times about each row's centre, in CSR order (row-major, columns
    increasing), and the start values of ``hat_start`` on it (0 on the widened margin)."""
    th = hat_start(n)
    widen = check_real(widen, "widen", at_least=1.0, at_most=1e6)
    x = np.arange(th.shape[1]) + 0.5
    nz = th > 0
    first = np.argmax(nz, axis=1)
    last = th.shape[1] - 1 - np.argmax(nz[:, ::-1], axis=1)
    centre = 0.5 * (x[first] + x[last])
    half = 0.5 * (x[last] - x[first]) + 0.5
    mask = np.abs(x[None, :] - centre[:, None]) <= half[:, None] * widen + 1e-9
    rows, cols = np.nonzero(mask | nz)
    return rows, cols, th[rows, cols]


class _SparseObjective:
    """f and its gradient on the support (module docstring), the support values flattened."""

    def __init__(self, w: Workload, p: int, rows: npt.NDArray[np.intp],
                 cols: npt.NDArray[np.intp]):
        self.w, self.p, self.n = w, p, w.n_bins
        self.rows, self.cols = rows, cols
        self.gdiag = gram_diagonal(w)
        self.g = None if w.kind in ("prefix", "all_range", "identity") else w.gram_dense()
        pattern = sp.csr_matrix((np.arange(1, rows.size + 1, dtype=float), (rows, cols)),
                                shape=(p, self.n))
        self.order = pattern.data.astype(np.intp) - 1   # CSR slot -> support index
        self.indices, self.indptr = pattern.indices, pattern.indptr
        # a row's support [lo, hi) when it is an interval (the hats'): Z = C^-1 H' is then
        # gathered from contiguous slices of H, else entry by entry
        full = np.diff(self.indptr) > 0
        lo = np.where(full, self.indices[np.minimum(self.indptr[:-1], rows.size - 1)], 0)
        hi = np.where(full, self.indices[np.maximum(self.indptr[1:] - 1, 0)] + 1, 0)
        self.intervals = bool(np.all(hi - lo == np.diff(self.indptr)))
        self.lo, self.hi = lo, hi
        self.evals = 0

    def gram_times(self, z: _F) -> _F:
        return self.g @ z if self.g is not None else self.w.gram_matvec(z)

    def theta(self, v: _F) -> sp.csr_matrix:
        return sp.csr_matrix((v[self.order], self.indices, self.indptr), shape=(self.p, self.n))

    def __call__(self, v: _F) -> tuple[float, _F]:
        self.evals += 1
        p, n = self.p, self.n
        t = self.theta(v)
        u = 1.0 + np.bincount(self.cols, weights=v, minlength=n)
        c = (t @ t.T).toarray() + np.eye(p)                    # C = I + Theta Theta'
        cinv = sla.cho_solve(sla.cho_factor(c, lower=True), np.eye(p))
        cinv = 0.5 * (cinv + cinv.T)
        ut = t.T.multiply(u[:, None]).toarray(order="F")       # U Theta' (n, p), columns
        #                                                        contiguous for G's cumsums
        gut = self.gram_times(ut)                              # G U Theta'
        h = u[:, None] * gut                                   # H = U G U Theta'
        yt = np.asarray(t.T @ cinv)                            # Y' = Theta' C^-1 (n, p)
        f = float(np.sum(self.gdiag * u * u) - np.sum(yt * h))
        m = np.asarray(t @ h)                                  # M = Theta H (p, p)
        zy = cinv @ m @ cinv                                   # Z Y' = C^-1 M C^-1
        first = np.asarray(t.T @ zy.T).T                       # (Z Y') Theta (p, n)
        grad = 2.0 * first[self.rows, self.cols]
        grad -= 2.0 * self.z_on_support(cinv, h)
        du = 2.0 * (self.gdiag * u - np.einsum("kr,kr->k", gut, yt))
        grad += du[self.cols]
        return f, grad

    def z_on_support(self, cinv: _F, h: _F) -> _F:
        """Z = C^-1 H' at the support entries, in the support's order: one matrix-vector
        product per row on its interval (p products, O(nnz p) work in all; the loop over the
        p ~ n / 12 rows is a few percent of an evaluation, measured at 8192 bins), else
        blocks of entries (rows of C^-1 and H gathered)."""
        out = np.empty(self.rows.size)
        if self.intervals:
            slots = np.empty(self.rows.size)
            for r in range(self.p):                            # O(p) products, no gather
                a, b = self.indptr[r], self.indptr[r + 1]
                if b > a:
                    slots[a:b] = h[self.lo[r]:self.hi[r]] @ cinv[r]
            out[self.order] = slots
            return out
        step = max(1, _GATHER // max(self.p, 1))
        for s in range(0, self.rows.size, step):
            ri, ki = self.rows[s:s + step], self.cols[s:s + step]
            out[s:s + step] = np.einsum("ij,ij->i", cinv[ri], h[ki])
        return out


def sparse_p_identity_objective(workload: Workload, rows: npt.ArrayLike, cols: npt.ArrayLike,
                                values: npt.ArrayLike, p: int | None = None
                                ) -> tuple[float, _F]:
    """(f, grad): the p-Identity objective tr(G (A'A)^-1) of Theta with the non-negative
    ``values`` at (``rows``, ``cols``) (distinct pairs; p rows, default max(rows) + 1) and its
    gradient with respect to those values (module docstring)."""
    w = check_workload(workload)
    r, c = (np.asarray(a) for a in (rows, cols))
    v = np.asarray(values, dtype=float)
    if r.ndim != 1 or r.shape != c.shape or r.shape != v.shape or r.size == 0:
        raise ValueError("rows, cols and values must be non-empty 1-D arrays of one length")
    if not (np.issubdtype(r.dtype, np.integer) and np.issubdtype(c.dtype, np.integer)):
        raise ValueError("rows and cols must be integer arrays")
    rows_, cols_ = r.astype(np.intp), c.astype(np.intp)
    p = int(rows_.max()) + 1 if p is None else check_int(p, "p", 1)
    if rows_.min() < 0 or rows_.max() >= p or cols_.min() < 0 or cols_.max() >= w.n_bins:
        raise ValueError(f"rows must lie in [0, {p}) and cols in [0, {w.n_bins})")
    if np.unique(rows_ * w.n_bins + cols_).size != rows_.size:
        raise ValueError("the support has repeated (row, col) pairs")
    if not (np.all(np.isfinite(v)) and v.min() >= 0):
        raise ValueError("values must be finite and non-negative")
    return _SparseObjective(w, p, rows_, cols_)(v)


def laplace_p_identity_hats(workload: Workload, *, widen: float = 2.0, max_iter: int = 3000,
                            time_limit: float | None = None) -> OptimizedStrategy:
    """HDMM's p-Identity optimised by L-BFGS-B on the fixed sparse support of the widened
    multi-scale hats (:func:`hat_support`), from the hat start; O(p^3 + p nnz + n p) per
    evaluation (module docstring), up to MAX_SPARSE_P_IDENTITY_BINS bins.

    ``widen`` >= 1 (default 2: no measurable loss against the unrestricted optimum at 1024
    bins, 0.7 % at 512); ``max_iter`` L-BFGS-B iterations; ``time_limit`` seconds (None: no limit; checked
    after every iteration). Returns an ``OptimizedStrategy``: ``strategy`` the p-Identity
    (every column of l1 norm 1), ``error`` = 2 tr(G (A'A)^-1) (Laplace, eps = 1, add/remove;
    by a dense solve up to 2048 bins, or up to 8192 when an identity weight is below 1e-4,
    else the Woodbury value; ``method`` says when that value may have lost digits),
    memory checked before allocating; ``start_error``, ``iterations``, ``seconds``. E.g. the CDF on 4096 bins
    (344 rows, 61,456 support entries): 228.09 -> 143.63 per prefix at eps = 1 after 2500
    iterations (206 s, one core)."""
    t0 = time.perf_counter()
    w = check_workload(workload)
    n = w.n_bins
    if not 2 <= n <= MAX_SPARSE_P_IDENTITY_BINS:
        raise ValueError(f"workload: the sparse p-Identity runs on 2..{MAX_SPARSE_P_IDENTITY_BINS} "
                         f"bins, got {n}")
    max_iter = check_int(max_iter, "max_iter", 1)
    limit = math.inf if time_limit is None else check_real(time_limit, "time_limit", above=0.0)
    rows, cols, v0 = hat_support(n, widen)
    p = int(rows.max()) + 1
    check_memory(8.0 * (_WORK_ARRAYS * n * p + 4 * p * p + _LBFGS_VECTORS * rows.size),
                 f"the sparse p-Identity over {n} bins ({p} rows, {rows.size} support entries)",
                 "use fewer bins or a smaller widen")
    obj = _SparseObjective(w, p, rows, cols)
    f0 = obj(v0)[0]

    def stop(intermediate_result: Any) -> None:
        if time.perf_counter() - t0 > limit:
            raise StopIteration

    res = sopt.minimize(obj, v0, jac=True, method="L-BFGS-B", bounds=sopt.Bounds(0.0, np.inf),
                        callback=stop, options={"maxiter": max_iter, "maxfun": 2 * max_iter})
    v, f = (np.asarray(res.x, dtype=float), float(res.fun)) if res.fun <= f0 else (v0, f0)
    strat = p_identity(obj.theta(v))                          # sparse throughout
    u_max = 1.0 + float(np.bincount(cols, weights=v, minlength=n).max())
    how = ""
    if n <= _DENSE_CHECK_BINS or (u_max > _U_WOODBURY and n <= _MAX_RECHECK_BINS):
        f = trace_gram_inverse(strat, w)
    elif u_max > _U_WOODBURY:
        how = (f"; error by Woodbury with an identity weight of {1.0 / u_max:.2g} (relative "
               f"accuracy about {u_max * 1e-11:.1g}, no dense check above "
               f"{_MAX_RECHECK_BINS} bins)")
    return OptimizedStrategy(
        strategy=strat, error=2.0 * f, start_error=2.0 * f0, lower_bound=None,
        iterations=int(res.nit), seconds=time.perf_counter() - t0,
        method=(f"p-Identity on the multi-scale hat support (p = {p}, {rows.size} entries, "
                f"widened {float(widen):g} x) by L-BFGS-B, {obj.evals} evaluations{how}"))
