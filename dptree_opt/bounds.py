"""Lower bounds on the error of every matrix mechanism for a workload (the SVD bound).

**Gaussian, add/remove** (Li & Miklau 2012, "Measuring the achievable error of query sets
under differential privacy", arXiv:1202.3399; docs/math.md section 6). A matrix mechanism measures
A x with Gaussian noise of variance sigma^2 Delta^2 per row, Delta = max_c ||A_c||_2 (its l2
sensitivity), and answers W with the BLUE. With X = A'A its total squared error is::

    sigma^2 Delta^2 tr(W X^-1 W')  >=  sigma^2 (tr(X) / n) tr(G X^-1)   (Delta^2 = max_c X_cc)
                                   >=  sigma^2 (tr G^(1/2))^2 / n        (Cauchy-Schwarz)
                                   =   sigma^2 (sum_j lambda_j)^2 / n,

G = W'W, lambda_j the singular values of W. Per-row noise scales are covered (absorb them
in A). For the prefix workload lambda_j = 1 / (2 sin((2j - 1) pi / (2 (2n + 1)))),
j = 1..n (the prefix matrix P has (P P')^-1 = tridiag(-1, [2, .., 2, 1], -1); docs/math.md Sec. 6).

**Public total.** With N known (swap neighbours, or add/remove with ``public_total``) write
x = (N/n) 1 + Q theta, Q an orthonormal basis of 1-perp: the BLUE's error is
Delta^2 tr(G_Q X_Q^-1) with G_Q = Q'GQ, X_Q = Q'XQ, and the same argument gives
(tr G_Q^(1/2))^2 = ||W P||_*^2 (P = I - 11'/n) in place of ||W||_*^2, with::

    add/remove: Delta^2 >= tr(X) / n >= tr(X_Q) / n           -> ||W P||_*^2 / n
    swap:       Delta^2 = max_{a!=b} (e_a - e_b)' X (e_a - e_b)
                        >= mean over ordered pairs = 2 tr(X_Q) / (n - 1)  -> 2 ||W P||_*^2 / (n - 1)

(our derivation, same steps as Li & Miklau's; tests check it against the exact optimum of
small instances).

**Laplace (pure eps-DP), the l1 analogue -- loose.** With Laplace noise of scale Delta_1 / eps
(variance 2 Delta_1^2 / eps^2), Delta_1 = the l1 sensitivity, and ||v||_1 >= ||v||_2 for every
column (or column difference) of A, so Delta_1 >= Delta_2 and::

    error >= (2 / eps^2) * (the Gaussian bound with sigma^2 = 1).

It is valid but loose: ||v||_1 = ||v||_2 only for 1-sparse columns, while good strategies for
prefix queries have columns with about log n nonzeros, so the true optimum of the Laplace
matrix mechanism is well above it (e.g. n = 1024 prefix, eps = 1: bound 16.9 per query,
best strategy known about 91, HDMM's p-Identity).

**Laplace, tighter: the Gaussian optimum and the convex-hull bound** (docs/laplace_bounds.md).
The same column-norm argument applies to the optimum itself: every strategy with column
l1 norms <= 1 has column l2 norms <= 1, so its Laplace error (eps = 1) is at least 2 x the
Gaussian optimum per unit sigma^2, and every dual value of the Gaussian program certifies it
(``laplace_lower_bound``; the SVD bound is that dual at its uniform point, so this is never
lower). The best any convex argument on X = A'A can give is the minimum of 2 tr(G X^-1) over
the convex hull of {A'A : column l1 norms <= 1}, which has the support function
max_s s' Lambda s over sign vectors s on PSD Lambda (docs/laplace_bounds.md):
``laplace_hull_bound`` computes it exactly for n <= 20 by enumerating the sign vectors.

Units: ``svd_bound`` is the total squared error (summed over the queries) for sigma^2 = 1 per
unit l2 sensitivity (rho = 1/2 zCDP); ``error_lower_bound`` converts it to counts^2 for a
given noise and budget, the units of ``expected_error(..., per_query=False)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from .limits import at_budget, check_memory
from .privacy import check_neighbours, check_noise, resolve_budget, resolve_public
from .validation import check_int, check_real
from .workloads import Workload
from . import workloads as _workloads

__all__ = ["prefix_singular_values", "all_range_singular_values", "singular_values", "svd_bound",
           "error_lower_bound", "LaplaceBound", "laplace_lower_bound", "HullBound",
           "laplace_hull_bound", "MAX_HULL_BINS"]

# Dense eigenvalue computations refused above this many bins (n^2 floats, O(n^3) time).
MAX_DENSE_BINS = 8192
# laplace_hull_bound enumerates the 2^(n-1) sign vectors: refused above this many bins
# (2^19 weights and quadratic forms at 20 bins, about 20 s).
MAX_HULL_BINS = 20


def prefix_singular_values(n: int) -> np.ndarray:
    """Singular values of the n x n prefix matrix, closed form (docs/math.md section 6), descending:
    lambda_j = 1 / (2 sin((2j - 1) pi / (2 (2n + 1)))), j = 1..n. O(n)."""
    n = _workloads.check_n(n)
    j = np.arange(1, n + 1, dtype=float)
    return 1.0 / (2.0 * np.sin((2.0 * j - 1.0) * np.pi / (2.0 * (2 * n + 1))))


def all_range_singular_values(n: int) -> np.ndarray:
    """Singular values of the all-range workload (n (n + 1) / 2 ranges), closed form,
    descending: W'W = (n + 1) L^-1 with L = tridiag(-1, 2, -1) of size n (the Dirichlet
    Green's function: (W'W)_ij = (min(i, j) + 1)(n - max(i, j)), 0-based), so
    lambda_j = sqrt(n + 1) / (2 sin(j pi / (2 (n + 1)))), j = 1..n. O(n)."""
    n = _workloads.check_n(n)
    j = np.arange(1, n + 1, dtype=float)
    return math.sqrt(n + 1.0) / (2.0 * np.sin(j * np.pi / (2.0 * (n + 1))))


def _as_workload(workload: Workload | str, n: int | None = None) -> Workload:
    if isinstance(workload, Workload):
        if n is not None and n != workload.n_bins:
            raise ValueError(f"n={n} does not match the workload's {workload.n_bins} bins")
        return workload
    if isinstance(workload, str):
        makers = {"prefix": _workloads.prefix, "identity": _workloads.identity,
                  "total": _workloads.total, "all_range": _workloads.all_range}
        if workload not in makers:
            raise ValueError(f"workload must be a Workload or one of {sorted(makers)}, "
                             f"got {workload!r}")
        if n is None:
            raise ValueError(f"workload={workload!r} needs n (the number of bins)")
        return makers[workload](n)
    raise ValueError(f"workload must be a dptree_opt Workload or a workload name, got "
                     f"{type(workload).__name__}")


def _check_dense(n: int) -> None:
    if n > MAX_DENSE_BINS:
        raise ValueError(f"this bound needs a dense eigenvalue computation: refused for "
                         f"{n} > {MAX_DENSE_BINS} bins")


@lru_cache(maxsize=32)
def _projected_nuclear(kind: str, n: int) -> float:
    """||W P||_* for a named workload: closed forms for identity (n - 1) and total (0), the
    resolvent quadrature for prefix / all-range above MAX_DENSE_BINS, else dense."""
    if kind == "identity":
        return float(n - 1)  # P has n - 1 unit eigenvalues
    if kind == "total":
        return 0.0  # 1'P = 0
    if kind in ("prefix", "all_range") and n > MAX_DENSE_BINS:
        return _projected_nuclear_quadrature(kind, n)
    w = _as_workload(kind, n)
    return _projected_nuclear_of(w)


def _projected_nuclear_quadrature(kind: str, n: int, nodes_per_efold: float = 3.0,
                                  margin: float = 8.0) -> float:
    """||W P||_* = tr(S^(1/2)), S = Q'GQ (G = W'W compressed to 1-perp), for the prefix and
    all-range workloads at any n, without an eigendecomposition of S (O(n) per node).

    With u = 1 / sqrt(n) and sqrt(x) = (2 / pi) int_0^inf x / (x + t^2) dt, the compression
    identity tr_(1-perp)((S + t^2)^-1) = tr((G + t^2)^-1) - u'(G + t^2)^-2 u / u'(G + t^2)^-1 u
    gives tr(S^(1/2)) = sum_j lambda_j^(1/2) + (2 / pi) int_0^inf (t^2 B / A - 1) dt, with
    A = u'(G + t^2)^-1 u = u'M^-1 z, B = ||M^-1 z||^2, M = I + t^2 G^-1, z = G^-1 u: G^-1 is
    tridiagonal for both workloads (prefix: tridiag(-1, [1, 2, .., 2], -1); all-range:
    tridiag(-1, 2, -1) / (n + 1)), so each node is one banded solve, and the lambda_j are
    closed forms. The integrand tends to -1 at t = 0 and to -g / t^2 at infinity
    (g = u'Gu); subtracting -1 / (1 + t^2 / g) (integral -(pi / 2) sqrt(g)) leaves an
    integrand that decays like t^3 and t^-3, so the trapezoid rule in log t converges
    geometrically: relative error ~1e-10 at 3 nodes per e-fold (tests/test_bounds.py
    compares with the dense eigenvalues up to n = 3000)."""
    from scipy.linalg import solve_banded

    if kind == "prefix":
        lam = prefix_singular_values(n) ** 2
        d = np.full(n, 2.0)
        d[0] = 1.0
        off = -np.ones(n - 1)
    elif kind == "all_range":
        lam = all_range_singular_values(n) ** 2
        d = np.full(n, 2.0 / (n + 1))
        off = np.full(n - 1, -1.0 / (n + 1))
    else:
        raise ValueError(f"kind must be 'prefix' or 'all_range', got {kind!r}")
    u = np.full(n, 1.0 / math.sqrt(n))
    z = d * u
    z[1:] += off * u[:-1]
    z[:-1] += off * u[1:]
    ab = np.zeros((3, n))
    ab[0, 1:], ab[1], ab[2, :-1] = off, d, off
    g = float(u @ solve_banded((1, 1), ab, u))  # u'Gu: G^-1 x = u

    def ratio(t2: float) -> float:               # t^2 B / A by one banded solve
        ab[0, 1:], ab[1], ab[2, :-1] = t2 * off, 1.0 + t2 * d, t2 * off
        w = solve_banded((1, 1), ab, z)
        return t2 * float(w @ w) / float(u @ w)

    return float(np.sum(np.sqrt(lam))) + projection_quadrature(
        ratio, g, float(lam.min()), float(lam.max()), nodes_per_efold, margin)


def projection_quadrature(ratio: Callable[[float], float], g: float, lam_min: float,
                          lam_max: float,
                          nodes_per_efold: float = 3.0, margin: float = 8.0) -> float:
    """(2 / pi) int_0^inf (t^2 B(t) / A(t) - 1) dt, the change of tr(G^1/2) when G is
    compressed to 1-perp (``_projected_nuclear_quadrature``'s identity), from ``ratio(t^2)``
    = t^2 B / A and g = u'Gu: the tail -1 / (1 + t^2 / g) is subtracted (its integral is
    -(pi / 2) sqrt(g)) and the rest integrated by the trapezoid rule in log t over the
    spectrum [lam_min, lam_max] widened by ``margin`` e-folds (geometric convergence)."""
    lo = 0.5 * math.log(lam_min) - margin
    hi = 0.5 * math.log(lam_max) + margin
    m = int(math.ceil((hi - lo) * nodes_per_efold)) + 1
    s = np.linspace(lo, hi, m)
    total = 0.0
    for i, sk in enumerate(s):                   # ~100 quadrature nodes, not bins
        t2 = math.exp(2.0 * sk)
        val = (ratio(t2) - 1.0 + 1.0 / (1.0 + t2 / g)) * math.exp(sk)
        total += 0.5 * val if i in (0, m - 1) else val
    integral = (s[1] - s[0]) * total - 0.5 * math.pi * math.sqrt(g)
    return 2.0 / math.pi * integral


def _projected_nuclear_of(w: Workload) -> float:
    """||W P||_* with P = I - 11'/n: sum of sqrt(eig(P G P)), dense, O(n^3)."""
    n = w.n_bins
    _check_dense(n)
    g = w.gram_dense()
    r = g.mean(axis=0)
    pgp = g - r[:, None] - r[None, :] + r.mean()  # P G P
    return float(np.sum(_sqrt_eigs(np.linalg.eigvalsh(pgp))))


def _sqrt_eigs(ev: np.ndarray) -> np.ndarray:
    """sqrt of Gram eigenvalues; rounding-level ones (< 1e-12 of the largest) are zeros
    (a rank-deficient W would otherwise gain sqrt(1e-16)-sized singular values)."""
    top = float(np.max(ev, initial=0.0))
    return np.sqrt(np.where(ev > 1e-12 * top, ev, 0.0))


def singular_values(workload: Workload | str, n: int | None = None) -> npt.NDArray[np.float64]:
    """Singular values of W (descending): closed forms for prefix / identity / total /
    all-range, else
    sqrt(eig(W'W)) from the dense Gram (n <= MAX_DENSE_BINS, O(n^3))."""
    w = _as_workload(workload, n)
    k = w.n_bins
    if w.kind == "prefix":
        return prefix_singular_values(k)
    if w.kind == "identity":
        return np.ones(k)
    if w.kind == "total":
        return np.array([math.sqrt(k)])
    if w.kind == "all_range":
        return all_range_singular_values(k)
    _check_dense(k)
    return _sqrt_eigs(np.linalg.eigvalsh(w.gram_dense())[::-1])


def svd_bound(workload: Workload | str, n: int | None = None, *,
              neighbours: str = "add_remove", public_total: bool | None = None) -> float:
    """Lower bound on the total squared error of every Gaussian matrix mechanism with noise
    variance 1 per unit l2 sensitivity (sigma^2 = 1, i.e. rho = 1/2 zCDP).

    ``workload``: a ``Workload`` or a name ("prefix", "identity", "all_range", "total") with
    ``n`` bins. Default (add/remove, N private): (sum_j lambda_j)^2 / n ([Li & Miklau 2012];
    closed form for the prefix and all-range workloads at any n). With N public
    (``neighbours="swap"``, or add/remove with ``public_total=True``): ||W P||_*^2 / n
    (add/remove) or 2 ||W P||_*^2 / (n - 1) (swap), P = I - 11'/n: closed form for identity
    and total, a resolvent quadrature for prefix and all-range above 8192 bins
    (:func:`_projected_nuclear_quadrature`), else a dense eigenvalue computation (n <= 8192;
    cached for named workloads). Derivations: module docstring. Divide by n for
    the mean per query."""
    w = _as_workload(workload, n)
    check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    k = w.n_bins
    if not public:
        return float(np.sum(singular_values(w)) ** 2 / k)
    if k == 1:
        return 0.0  # the only bin's count is N
    nuc = (_projected_nuclear(w.kind, k) if w.kind != "ranges" else _projected_nuclear_of(w))
    return nuc**2 / k if neighbours == "add_remove" else 2.0 * nuc**2 / (k - 1)


def error_lower_bound(workload: Workload | str, *, noise: str, epsilon: float | None = None,
                      rho: float | None = None, neighbours: str = "add_remove",
                      public_total: bool | None = None, n: int | None = None) -> float:
    """``svd_bound`` in counts^2 for a noise and budget: the units of
    ``expected_error(workload, mechanism, per_query=False)`` (so error / bound >= 1).

    Gaussian (rho-zCDP): sigma^2 = Delta^2 / (2 rho), bound = svd_bound / (2 rho) (tight up to
    the gap between the SVD bound and the optimum). Laplace (eps-DP): variance 2 Delta_1^2 /
    eps^2 with Delta_1 >= Delta_2, bound = 2 svd_bound / eps^2 -- valid but LOOSE (module
    docstring)."""
    noise = check_noise(noise)
    budget = resolve_budget(noise, epsilon, rho)
    unit = 0.5 if noise == "gaussian" else 2.0  # at unit budget, restated (limits.at_budget)
    return at_budget(unit * svd_bound(workload, n, neighbours=neighbours,
                                      public_total=public_total), noise, budget,
                     "the error lower bound")


# --------------------------------------------------------------------------- Laplace (eps-DP)
@dataclass(frozen=True)
class LaplaceBound:
    """A certified lower bound on the total error (counts^2, summed over the queries) of
    every pure-DP linear mechanism for a workload (``laplace_lower_bound``).

    total : the bound; n_queries : rows of W (``.mean`` = total / n_queries);
    method : which bound it is (the larger of the candidates computed)."""

    total: float
    n_queries: int
    method: str

    @property
    def mean(self) -> float:
        """The bound per query."""
        return self.total / self.n_queries


_GAUSSIAN_WHAT = ("2/eps^2 x a certified dual value of the Gaussian optimum (column l2 <= "
                  "column l1 norm; docs/laplace_bounds.md)")
_SVD_WHAT = ("l1 SVD bound (Li & Miklau 2012): 2/eps^2 x the SVD bound, the Gaussian dual "
             "at its uniform point")


def laplace_lower_bound(workload: Workload | str, *, epsilon: float = 1.0,
                        gaussian_dual: float | None = None,
                        n: int | None = None) -> LaplaceBound:
    """Lower bound on the total squared error of every linear mechanism with Laplace noise
    (pure eps-DP, add/remove neighbours, N private): any strategy A, noise scale its l1
    sensitivity / eps per row, any linear unbiased estimator.

    Every column of A has ||a||_2 <= ||a||_1, so A / Delta_1 is feasible for the Gaussian
    program (P) of ``strategies.optimized`` and the error is >= (2 / eps^2) OPT_gauss >=
    (2 / eps^2) g(d) for every dual point d (docs/laplace_bounds.md; docs/math.md section 6
    for the SVD bound, the dual at d = c 1). ``gaussian_dual`` is such a certified dual
    value per unit sigma^2 (add/remove, total over the queries), e.g.
    ``strategies.gaussian_optimal_implicit(w).lower_bound`` (prefix, all-range, identity at
    any n) or ``strategies.optimized.gaussian_optimal(w).lower_bound`` (dense) -- never a
    primal error. Returns the larger of 2 g / eps^2 and the l1 SVD analogue
    (``error_lower_bound``; skipped when it would need a dense eigendecomposition above
    MAX_DENSE_BINS bins and ``gaussian_dual`` is given), labelled."""
    w = _as_workload(workload, n)
    eps = resolve_budget("laplace", epsilon, None)
    dual = check_real(gaussian_dual, "gaussian_dual", none=True)
    found: list[tuple[float, str]] = []
    if dual is not None:
        found.append((dual, _GAUSSIAN_WHAT))
    try:
        found.append((svd_bound(w), _SVD_WHAT))
    except ValueError:
        if dual is None:       # the dense eigendecomposition refused, and nothing else
            raise
    value, what = max(found, key=lambda c: c[0])
    total = at_budget(2.0 * max(value, 0.0), "laplace", eps, "the Laplace lower bound")
    return LaplaceBound(float(total), int(w.n_queries), what)


@dataclass(frozen=True)
class HullBound:
    """Result of ``laplace_hull_bound`` (counts^2, totals over the queries, at ``epsilon``).

    total : certified lower bound on the error of every pure-DP linear mechanism:
        (2 / eps^2) T(Lambda)^2 / N(Lambda) at the best Lambda found.
    ceiling : (2 / eps^2) tr(G X^-1) at the best point X of the cut polytope found: no
        bound that is valid on the convex hull of {A'A} (every convex-duality bound on
        X = A'A) exceeds it. total <= ceiling; ``.gap`` = ceiling / total - 1.

    n_queries, iterations, method : rows of W, multiplicative updates run, a description.
    """

    total: float
    ceiling: float
    n_queries: int
    iterations: int
    method: str

    @property
    def mean(self) -> float:
        """The certified bound per query."""
        return self.total / self.n_queries

    @property
    def gap(self) -> float:
        """ceiling / total - 1: how far the bound can be from the convex-hull optimum."""
        return self.ceiling / self.total - 1.0


def _sign_vectors(n: int, first_plus: bool) -> npt.NDArray[np.float64]:
    """The sign vectors in {-1, +1}^n (with s_0 = +1 if ``first_plus``: one of each pair
    +-s) as the rows of a float array, in binary order; one empty row for n = 0."""
    free = n - 1 if first_plus and n > 0 else n
    k = np.arange(1 << free, dtype=np.int64)
    bits = ((k[:, None] >> np.arange(free, dtype=np.int64)[None, :]) & 1).astype(np.float64)
    signs = 1.0 - 2.0 * bits
    return np.hstack([np.ones((k.size, 1)), signs]) if free < n else signs


class _SignSplit:
    """All 2^(n-1) sign vectors s = (a, b) (a over the first h = ceil(n/2) bins with a_0 = +1,
    b over the rest), never listed: quadratic forms and moment matrices by blocks.

    s'Lambda s = a'L_aa a + b'L_bb b + 2 a'L_ab b for all pairs at once is one
    (2^(h-1) x h) (h x 2^(n-h)) product, and X = sum_s p_s ss' with p held as a
    2^(h-1) x 2^(n-h) array is [[A'diag(p 1)A, A'PB], [., B'diag(p'1)B]]: O(2^(n-1) n / 2)
    per call instead of O(2^(n-1) n^2)."""

    def __init__(self, n: int):
        self.h = (n + 1) // 2
        self.a = _sign_vectors(self.h, True)
        self.b = _sign_vectors(n - self.h, False)

    def forms(self, lam: np.ndarray) -> np.ndarray:
        """s'Lambda s for every s, as a 2^(h-1) x 2^(n-h) array."""
        h, a, b = self.h, self.a, self.b
        qa = ((a @ lam[:h, :h]) * a).sum(axis=1)
        qb = ((b @ lam[h:, h:]) * b).sum(axis=1)
        return qa[:, None] + qb[None, :] + 2.0 * (a @ lam[:h, h:]) @ b.T

    def moments(self, p: np.ndarray) -> np.ndarray:
        """X = sum_s p_s ss' for weights p shaped like ``forms``' output."""
        a, b = self.a, self.b
        xab = a.T @ p @ b
        return np.block([[a.T @ (p.sum(axis=1)[:, None] * a), xab],
                         [xab.T, b.T @ (p.sum(axis=0)[:, None] * b)]])


def _hull_certificate(gram: np.ndarray, lam: np.ndarray, split: _SignSplit) -> float:
    """T(Lambda)^2 / N(Lambda) for PSD Lambda: T = tr((Lambda^1/2 G Lambda^1/2)^1/2) from
    the eigenvalues of B'GB (Lambda = BB'), N = max_s s'Lambda s over all sign vectors."""
    mu, v = np.linalg.eigh(0.5 * (lam + lam.T))
    b = v * np.sqrt(np.clip(mu, 0.0, None))[None, :]
    t = float(np.sum(np.sqrt(np.clip(np.linalg.eigvalsh(b.T @ gram @ b), 0.0, None))))
    return t * t / float(split.forms(lam).max())


def laplace_hull_bound(workload: Workload | str, *, epsilon: float = 1.0, tol: float = 1e-7,
                       max_iter: int = 5000, n: int | None = None) -> HullBound:
    """The convex-hull lower bound for pure-DP linear mechanisms (Laplace, add/remove, N
    private), exactly, for workloads over n <= MAX_HULL_BINS (20) bins.

    For X = A'A (column l1 norms <= 1) and any PSD Lambda, tr(G X^+) tr(Lambda X) >=
    T(Lambda)^2 with T = tr((Lambda^1/2 G Lambda^1/2)^1/2), and tr(Lambda X) <= N(Lambda) =
    max over sign vectors s of s'Lambda s, so the error is >= (2 / eps^2) T^2 / N; the best
    Lambda gives the minimum of 2 tr(G X^-1) / eps^2 over the convex hull, equal to the
    minimum over the cut polytope conv{ss'} (docs/laplace_bounds.md: the derivation, and
    why no convex argument on A'A gives more). Solved over the weights p of X = sum_s p_s ss' by the multiplicative
    update p_s <- p_s (s'Lambda s / tr(G X^-1))^(1/2), Lambda = X^-1 G X^-1 (the classical
    algorithm for optimal designs, with the power 1/2 that makes it monotone; the power 1
    can cycle, e.g. at n = 2). Every iterate certifies T(Lambda)^2 / N(Lambda) and its X
    bounds the hull optimum from above; stops when ceiling / bound - 1 <= ``tol`` or after
    ``max_iter`` updates. The sign vectors are never listed: two halves of 2^(n/2) each,
    O(2^(n-1) n) per update (n = 16: 0.2 s; n = 20: about 20 s)."""
    w = _as_workload(workload, n)
    eps = resolve_budget("laplace", epsilon, None)
    tol = check_real(tol, "tol", above=0.0)
    max_iter = check_int(max_iter, "max_iter", 1)
    k = w.n_bins
    if k > MAX_HULL_BINS:
        raise ValueError(f"the convex-hull bound enumerates the 2^(n-1) sign vectors: refused "
                         f"for {k} > {MAX_HULL_BINS} bins (use laplace_lower_bound)")
    check_memory(4 * 8 * (1 << (k - 1)), f"the convex-hull bound over {k} bins",
                 "use laplace_lower_bound")
    gram = w.gram_dense()
    split = _SignSplit(k)
    p = np.full((split.a.shape[0], split.b.shape[0]), 1.0 / (1 << (k - 1)))   # X = I
    best_low, best_up, best_lam = -math.inf, math.inf, np.eye(k)
    it = 0
    for it in range(1, max_iter + 1):
        try:
            xi = np.linalg.inv(np.linalg.cholesky(split.moments(p)))
        except np.linalg.LinAlgError:
            break                                          # weights collapsed: keep the best
        xinv = xi.T @ xi
        lam = xinv @ gram @ xinv
        q = split.forms(lam)                               # s'Lambda s for every s
        f = float(np.trace(gram @ xinv))                   # = sum_s p_s q_s = T(Lambda)
        low = f * f / float(q.max())
        if low > best_low:
            best_low, best_lam = low, lam
        best_up = min(best_up, f)
        if best_up <= best_low * (1.0 + tol):
            break
        p = p * np.sqrt(np.clip(q, 0.0, None) / f)         # power 1/2: monotone in f
        p /= p.sum()
    # the certificate recomputed from the eigenvalues at the best Lambda, less a relative
    # margin of 1e-9 for rounding in T and N
    certified = min(_hull_certificate(gram, best_lam, split), best_low) * (1.0 - 1e-9)
    total = float(at_budget(2.0 * certified, "laplace", eps, "the convex-hull bound"))
    ceiling = float(at_budget(2.0 * best_up, "laplace", eps, "the convex-hull bound"))
    return HullBound(total, max(ceiling, total), int(w.n_queries), it,
                     f"convex-hull bound: max over sign vectors of s'Lambda s by enumeration "
                     f"({1 << (k - 1)} vectors), {it} multiplicative updates, gap "
                     f"{ceiling / total - 1.0:.1e}")
