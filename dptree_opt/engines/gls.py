"""The generic BLUE: generalised least squares with exact rows as equality constraints.

For y = A x + z, Var z = V = diag(v) (v_r = 0 for exact rows, inf for unmeasured rows,
which are dropped), the BLUE minimises (y - A x)' V^-1 (y - A x) subject to the exact rows
E x = e holding (docs/math.md section 2). Two exact backends:

* sparse: the augmented ("KKT") system

      [ V   A ] [lam]   [y]
      [ A'  0 ] [ x ] = [0],

  nonsingular when V is singular (exact rows) as long as the histogram is identifiable;
  one SuperLU factorisation, fill near O(nnz(A)) for trees. RHS [0; b] gives x = -Cov b.
* dense (n <= MAX_DENSE_BINS): with M~ = A_n'V_n^-1 A_n + E'E (A_n the noisy rows), which is
  positive definite exactly when the histogram is identifiable, and b~ = A_n'V_n^-1 y_n + E'e,
  x = M~^-1 b~ - M~^-1 E' (E M~^-1 E')^-1 (E M~^-1 b~ - e) and
  Cov = M~^-1 - M~^-1 E' (E M~^-1 E')^-1 E M~^-1
  (adding E'E changes nothing on the constraint set): one Cholesky, O(n^3).

``method="auto"`` takes the sparse backend when forming A'V^-1A sparsely is cheap
(sum_r nnz_r^2 < n^3 / 16, e.g. trees) and the dense one otherwise (e.g. prefix sums). V is
scaled by its median variance c for conditioning (estimates unchanged; Cov = c Cov').
"""

from __future__ import annotations

import weakref

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg import lapack
from scipy.sparse.csgraph import structural_rank
from numpy.typing import ArrayLike
from scipy.sparse.linalg import SuperLU, splu

from ..mechanism import Mechanism
from ..workloads import Workload
from .base import ANY_WORKLOAD, Capability, Engine
from .causal import INTERVAL_WORKLOADS, MAX_CAUSAL_DENSE_BINS, dense_causal_answers
from .causal_error import dense_causal_error
from .laminar import is_laminar_mechanism, laminar_model, point_moments, star_moments

__all__ = ["DenseEngine", "GLS", "gls", "METHODS"]

METHODS = ("auto", "sparse", "dense")
# Dense covariance / dense backend only up to this many bins (n^2 float64 = 512 MiB).
MAX_DENSE_BINS = 8192
# estimable_variances: a pseudo-inverse of the (n + exact rows) bordered matrix
MAX_ESTIMABLE_BINS = 2048
# Pivot ratios below which the sparse KKT matrix / the dense Gram is treated as singular.
_PIVOT_TOL = 1e-13
_CHOL_TOL = 1e-11


def _weighted_gram(a: sp.csr_matrix, w: np.ndarray) -> np.ndarray:
    """Dense A' diag(w) A: sparse product when cheap (cost sum_r nnz_r^2), BLAS otherwise
    (cost m n^2 at a much higher flop rate; e.g. the prefix matrix's rows are dense)."""
    if a.shape[0] == 0:
        return np.zeros((a.shape[1], a.shape[1]))
    sparse_cost = float(np.sum(np.diff(a.indptr).astype(float) ** 2))
    if sparse_cost * 20 < float(a.shape[0]) * a.shape[1] ** 2:
        return (a.T @ sp.diags(w) @ a).toarray()
    dense = a.toarray()
    return dense.T @ (dense * w[:, None])


def _mirror_lower(a: np.ndarray, block: int = 512) -> None:
    """Copy the strict lower triangle of square ``a`` onto its upper one, in place, by
    blocks (cache-friendly transposes; np.tril and index arrays are several times slower)."""
    n = a.shape[0]
    for i in range(0, n, block):
        j = min(i + block, n)
        a[i:j, j:] = a[j:, i:j].T
        tri = np.triu_indices(j - i, 1)
        a[i:j, i:j][tri] = a[i:j, i:j].T[tri]


def _independent_rows(e: sp.csr_matrix) -> np.ndarray:
    """Mask of a maximal independent subset of the exact rows (pivoted QR of E'); dependent
    exact rows (e.g. a duplicated total) carry no extra information and would make the
    constraint system singular."""
    keep = np.zeros(e.shape[0], dtype=bool)
    if e.shape[0] == 0:
        return keep
    _, r, piv = sla.qr(e.toarray().T, mode="economic", pivoting=True)
    diag = np.abs(np.diag(r))
    keep[piv[: int(np.sum(diag > 1e-10 * diag.max()))]] = True
    return keep


_NOT_IDENTIFIED = "the strategy cannot identify the histogram"


def _check_identified(mechanism: Mechanism, a: sp.csr_matrix) -> None:
    """Refuse a rank-deficient strategy before any factorisation (SuperLU can crash the
    process on some singular KKT systems): interval strategies by the exact O(K) test of
    the bridge decomposition (every bin's variance finite), any strategy by its structural
    rank (a necessary condition; numerical rank is checked by the pivots after)."""


    if is_laminar_mechanism(mechanism):
        star = star_moments(mechanism)
        if star is not None:
            v = star[0]
            bins = v[1:] + v[:-1]
        else:
            bins = point_moments(laminar_model(mechanism)).bin_var
        if not np.all(np.isfinite(bins)):
            raise ValueError(f"{_NOT_IDENTIFIED}: bin {int(np.flatnonzero(~np.isfinite(bins))[0])}"
                             " is not determined by the measured rows")
    elif structural_rank(sp.csr_matrix(a)) < a.shape[1]:
        raise ValueError(f"{_NOT_IDENTIFIED}: A is structurally rank deficient")


class GLS:
    """A factorised generalised-least-squares solver for one mechanism (see module doc)."""

    def __init__(self, mechanism: Mechanism, method: str = "auto"):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        var = mechanism.variances
        used = np.isfinite(var)
        used[np.flatnonzero(var == 0)[~_independent_rows(mechanism.released.matrix[var == 0])]] = False
        a = mechanism.released.matrix[used]
        v = var[used]
        n = mechanism.n_bins
        covered = np.zeros(n, dtype=bool)
        covered[a.indices] = True
        if not covered.all():
            raise ValueError(f"{_NOT_IDENTIFIED}: bin {int(np.flatnonzero(~covered)[0])} is in "
                             "no measured row")
        _check_identified(mechanism, a)
        noisy = v > 0
        self._scale = float(np.median(v[noisy])) if noisy.any() else 1.0
        self._used, self._a, self._v, self._noisy = used, a, v, noisy
        self.n_rows, self.n_used, self.n_bins = var.size, a.shape[0], n
        if method == "auto":
            cost = float(np.sum(np.diff(a.indptr).astype(float) ** 2))
            method = "sparse" if (n > MAX_DENSE_BINS or cost < n**3 / 16) else "dense"
        if method == "dense" and n > MAX_DENSE_BINS:
            raise ValueError(f"method='dense' refused for {n} > {MAX_DENSE_BINS} bins")
        self.method = method
        self._lu: SuperLU | None = None
        self._chol: npt.NDArray[np.float64] | None = None
        self._cov: npt.NDArray[np.float64] | None = None
        if method == "sparse":
            self._factor_kkt()
        else:
            self._factor_dense()

    # ------------------------------------------------------------ backends
    def _factor_kkt(self) -> None:
        c, a, v = self._scale, self._a, self._v
        kkt = sp.bmat([[sp.diags(v / c), a], [a.T, None]], format="csc")
        try:
            lu = splu(kkt, permc_spec="MMD_AT_PLUS_A")
        except RuntimeError as exc:  # exactly singular
            raise ValueError(f"{_NOT_IDENTIFIED} ({exc})") from None
        u_diag = np.abs(lu.U.diagonal())
        if u_diag.min() <= _PIVOT_TOL * u_diag.max():
            raise ValueError(f"{_NOT_IDENTIFIED} (the GLS system is singular: A is rank "
                             "deficient or the exact rows are dependent)")
        self._lu = lu

    def _m_tilde_factor(self) -> tuple[npt.NDArray[np.float64], sp.csr_matrix]:
        a, v, c, noisy = self._a, self._v, self._scale, self._noisy
        e = a[~noisy]
        m_tilde = _weighted_gram(a[noisy], c / v[noisy]) + _weighted_gram(e, np.ones(e.shape[0]))
        diag = np.diag(m_tilde).copy()
        chol, info = lapack.dpotrf(m_tilde, lower=1, overwrite_a=1)
        # a pivot that is tiny relative to its diagonal entry means numerical singularity
        if info != 0 or np.min(np.diag(chol) ** 2 / diag) < _CHOL_TOL:
            raise ValueError(f"{_NOT_IDENTIFIED} (A'V^-1A + E'E is singular: A is rank "
                             "deficient)")
        return chol, e

    def _factor_dense(self) -> None:
        chol, e = self._m_tilde_factor()
        self._chol, self._e = chol, e
        if e.shape[0]:
            self._mie = sla.cho_solve((chol, True), e.toarray().T)  # M~^-1 E', (n, p)
            self._schur = np.linalg.cholesky(e @ self._mie)  # E M~^-1 E' (p, p), PD

    def _dense_solve(self, b: np.ndarray, e_rhs: np.ndarray | None) -> np.ndarray:
        """x = M~^-1 b - M~^-1 E' S^-1 (E M~^-1 b - e_rhs), S = E M~^-1 E' (e_rhs None: 0)."""
        assert self._chol is not None  # the dense backend (_factor_dense) ran
        x = sla.cho_solve((self._chol, True), b)
        if self._e.shape[0]:
            r = self._e @ x
            if e_rhs is not None:
                r = r - e_rhs
            x = x - self._mie @ sla.cho_solve((self._schur, True), r)
        return x

    # --------------------------------------------------------------- API
    def estimate(self, y: ArrayLike) -> npt.NDArray[np.float64]:
        """BLUE of the histogram from answers y, shape (rows,) or (trials, rows)."""
        y = np.asarray(y, dtype=float)
        if y.shape[-1] != self.n_rows:
            raise ValueError(f"y must have {self.n_rows} entries per trial, got {y.shape[-1]}")
        yu = y[..., self._used]
        if not np.all(np.isfinite(yu)):
            raise ValueError("y has NaN or infinite values on measured rows")
        yu = yu.T  # (m, ...) columns = trials
        if self._lu is not None:
            rhs = np.zeros((self.n_used + self.n_bins,) + yu.shape[1:])
            rhs[: self.n_used] = yu
            return self._lu.solve(rhs)[self.n_used:].T
        noisy, c = self._noisy, self._scale
        w = (c / self._v[noisy]).reshape((-1,) + (1,) * (yu.ndim - 1))
        e_vals = yu[~noisy]
        b = self._a[noisy].T @ (w * yu[noisy]) + self._e.T @ e_vals
        return self._dense_solve(b, e_vals).T

    def cov_times(self, b: ArrayLike) -> npt.NDArray[np.float64]:
        """Cov @ b for b of shape (n,) or (n, r)."""
        b = np.asarray(b, dtype=float)
        if self._lu is not None:
            rhs = np.zeros((self.n_used + self.n_bins,) + b.shape[1:])
            rhs[self.n_used:] = b
            return -self._scale * self._lu.solve(rhs)[self.n_used:]
        return self._scale * self._dense_solve(b, None)

    def covariance(self) -> np.ndarray:
        """The dense (n, n) covariance of the BLUE (read-only, computed once per solver)."""
        if self._cov is None:
            cov = self._dense_covariance()
            cov.flags.writeable = False
            self._cov = cov
        return self._cov

    def _dense_covariance(self) -> np.ndarray:
        """Cholesky inverse of M~ and the constraint correction, O(n^3)."""
        if self.n_bins > MAX_DENSE_BINS:
            raise ValueError(f"dense covariance refused for {self.n_bins} > {MAX_DENSE_BINS} bins")
        chol, e = (self._chol, self._e) if self._chol is not None else self._m_tilde_factor()
        inv, info = lapack.dpotri(chol, lower=1, overwrite_c=0)  # lower triangle of M~^-1
        if info != 0:
            raise ValueError(f"{_NOT_IDENTIFIED} (singular M~)")
        _mirror_lower(inv)
        if e.shape[0]:
            ie = (e @ inv).T  # M~^-1 E', (n, p)
            inv -= ie @ np.linalg.solve(e @ ie, ie.T)
        inv *= self._scale
        return inv


_CACHE: "weakref.WeakKeyDictionary[Mechanism, dict]" = weakref.WeakKeyDictionary()


def gls(mechanism: Mechanism, method: str = "auto") -> GLS:
    """The (cached) factorised GLS solver of a mechanism."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    solvers = _CACHE.setdefault(mechanism, {})
    if method not in solvers:
        solvers[method] = GLS(mechanism, method)
    return solvers[method]


class DenseEngine(Engine):
    """The generic GLS (sparse KKT LU or dense Cholesky) and its dense covariance: any
    strategy, any workload, up to MAX_DENSE_BINS bins; the dense causal filter up to
    MAX_CAUSAL_DENSE_BINS. The fallback of every structured engine and their oracle."""

    name = "dense"
    structure = "any strategy (the fallback)"
    generic = True
    capabilities = (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "sparse LU / dense Cholesky"),
        Capability("error", "blue", (ANY_WORKLOAD,), f"O(n^3), n <= {MAX_DENSE_BINS}"),
        Capability("per_query", "blue", (ANY_WORKLOAD,), f"O(n^3), n <= {MAX_DENSE_BINS}"),
        Capability("covariance", "blue", (ANY_WORKLOAD,), "one GLS solve per column"),
        Capability("estimate", "causal", INTERVAL_WORKLOADS,
                   f"dense filter, n <= {MAX_CAUSAL_DENSE_BINS}"),
        Capability("error", "causal", INTERVAL_WORKLOADS,
                   f"dense filter, n <= {MAX_CAUSAL_DENSE_BINS}"),
        Capability("per_query", "causal", INTERVAL_WORKLOADS,
                   f"dense filter, n <= {MAX_CAUSAL_DENSE_BINS}"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return True

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        n = mechanism.n_bins
        limit = mechanism.released.max_matrix_bins
        if limit is not None and n > limit:
            return f"the strategy's explicit matrix is refused for {n} > {limit} bins"
        if estimator == "causal" and n > MAX_CAUSAL_DENSE_BINS:
            return f"the dense causal filter is refused for {n} > {MAX_CAUSAL_DENSE_BINS} bins"
        if estimator == "blue" and task in ("error", "per_query") and n > MAX_DENSE_BINS:
            return f"the dense covariance is refused for {n} > {MAX_DENSE_BINS} bins"
        return None

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str,
                 mode: str = "auto") -> npt.NDArray[np.float64]:
        if estimator == "causal":
            if workload is None:
                raise ValueError("workload: the causal estimate answers a workload")
            return dense_causal_answers(mechanism, y, workload)
        return gls(mechanism, mode).estimate(y)

    def covariance(self, mechanism: Mechanism,
                   u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return gls(mechanism).cov_times(u)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        if estimator == "causal":
            return dense_causal_error(workload, mechanism, per_query, dense)
        try:
            cov = gls(mechanism).covariance()
        except ValueError as exc:
            if not str(exc).startswith(_NOT_IDENTIFIED):
                raise
            var = estimable_variances(mechanism, workload, str(exc))
            return var if per_query else float(var.sum())
        return workload.query_variances(cov) if per_query else workload.total_variance(cov)


def estimable_variances(mechanism: Mechanism, workload: Workload,
                        why: str = _NOT_IDENTIFIED) -> npt.NDArray[np.float64]:
    """Per-query BLUE variances of a workload W that a rank-deficient strategy still
    estimates (every row of W in the row space of the measured rows: W x has an unbiased
    linear estimate though x has none), shape (q,).

    With M = A_n' V^-1 A_n (noisy rows) and E the exact rows, Var(BLUE of W x) = W G W' for
    G the top-left block of any generalised inverse of the bordered matrix [[M, E'], [E, 0]]
    (the same for every g-inverse when W is estimable; the Moore-Penrose one here, O((n + e)^3),
    n <= MAX_ESTIMABLE_BINS). ValueError (with ``why``) when a query is not estimable."""
    n = mechanism.n_bins
    if n > MAX_ESTIMABLE_BINS:
        raise ValueError(f"{why}; the error of the workload alone (if it is estimable) is "
                         f"computed up to {MAX_ESTIMABLE_BINS} bins, got {n}")
    a = sp.csr_matrix(mechanism.released.matrix).toarray()
    var = np.asarray(mechanism.variances, dtype=float)
    noisy, exact = np.isfinite(var) & (var > 0), var == 0
    an = a[noisy] / np.sqrt(var[noisy])[:, None]
    e = a[exact]
    rows = np.vstack([an, e])
    w = np.asarray(workload.dense(), dtype=float)
    # estimability: W lies in the row space of the measured rows (orthogonal complement test)
    _, sv, vt = np.linalg.svd(rows, full_matrices=False)
    basis = vt[sv > sv[0] * n * np.finfo(float).eps] if sv.size and sv[0] > 0 else vt[:0]
    resid = w - (w @ basis.T) @ basis
    scale = np.linalg.norm(w, axis=1)
    bad = np.linalg.norm(resid, axis=1) > 1e-9 * np.maximum(scale, 1.0)
    if bad.any():
        raise ValueError(f"{why}, and query {int(np.flatnonzero(bad)[0])} of the "
                         f"{workload.kind!r} workload is not estimable either (not in the row "
                         "space of the measured rows)")
    kkt = np.block([[an.T @ an, e.T], [e, np.zeros((e.shape[0], e.shape[0]))]])
    g = np.linalg.pinv(kkt, hermitian=True)[:n, :n]
    return np.maximum(np.einsum("qi,ij,qj->q", w, g, w), 0.0)
