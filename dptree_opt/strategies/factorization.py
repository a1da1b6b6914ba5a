"""The square-root factorisation of the prefix workload.

The prefix matrix P (lower-triangular ones, n x n) is the lower-triangular Toeplitz matrix of
the power series 1 / (1 - z); its square root is the Toeplitz matrix L of
(1 - z)^(-1/2) = sum_k c_k z^k with

    c_k = C(2k, k) / 4^k = prod_{j=1..k} (2j - 1) / (2j)        (1, 1/2, 3/8, 5/16, ...)

so L @ L = P (Henzinger, Upadhyay, Upadhyay, "Almost tight error bounds on differentially
private continual counting", SODA 2023; Fichtenberger, Henzinger, Upadhyay, ICML 2023). The
mechanism releases y = L x + z and answers the prefixes with L y = P x + L z; since L is
square and invertible this is the BLUE (A^-1 y, then W A^-1 y = L y).

Let S1(t) = sum_{k<t} c_k and S2(t) = sum_{k<t} c_k^2. Column j of L is (c_0..c_{n-1-j})
shifted down by j, so with equal weights

    add/remove:  l1 = S1(n),  l2 = sqrt(S2(n))                         (column 0)
    swap:        l1 = max_D 2 S1(D) + S1(n - D) - S1(n)                (columns 0 and D)
                 l2 = sqrt(max_D S2(D) + sum_{k < n-D} (c_{k+D} - c_k)^2)

(c is decreasing, so for a fixed gap D = b - a the pair a = 0, b = D is the worst.) With
Gaussian noise of variance sigma^2 per unit l2 sensitivity under add/remove (noise variance
sigma^2 S2(n) per row), prefix t has variance

    Var(C_t) = sigma^2 S2(n) * sum_{k<t} c_k^2 = sigma^2 S2(t) S2(n)      (MATH.md Sec. 6)

the "sigma^2 S(t) S(n)" of MATH.md / issue 8 (S = S2); the mean over t at n = 2^10 with
sigma^2 = 1 is 9.671 (MATH.md section 6).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .base import Strategy, check_neighbours

__all__ = ["SqrtFactorization", "sqrt_coefficients", "sqrt_factorization",
           "sqrt_factorization_variances"]


def _check_bins(n) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (number of bins) must be an integer >= 1, got {n!r}")
    return int(n)


def sqrt_coefficients(n: int) -> np.ndarray:
    """c_0..c_{n-1} with c_k = C(2k, k) / 4^k (recurrence c_k = c_{k-1} (2k - 1) / (2k)), O(n)."""
    n = _check_bins(n)
    k = np.arange(1, n, dtype=float)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])


def _toeplitz_lower(c: np.ndarray) -> sp.csr_matrix:
    """Lower-triangular Toeplitz matrix with first column c, as CSR (n(n+1)/2 nonzeros)."""
    n = c.size
    i, j = np.tril_indices(n)
    return sp.csr_matrix((c[i - j], (i, j)), shape=(n, n))


class SqrtFactorization(Strategy):
    """The strategy L = P^(1/2) (module docstring), optionally with appended all-ones rows.

    Rows 0..n-1 are L (budget level 1); extra rows (from ``with_total_row``) are exact totals
    at level 0. Sensitivities use the closed forms of the module docstring when the weights are
    equal on the rows of L (the totals never change under swap and add their weight under
    add/remove), and the generic exact search otherwise. O(n^2) for the l2 swap form, O(n)
    for the others."""

    def __init__(self, n: int, *, n_totals: int = 0):
        n = _check_bins(n)
        self._c = sqrt_coefficients(n)
        core = _toeplitz_lower(self._c)
        rows = [core] + [sp.csr_matrix(np.ones((1, n)))] * n_totals
        levels = np.concatenate([np.ones(n, dtype=np.int32), np.zeros(n_totals, dtype=np.int32)])
        super().__init__(sp.vstack(rows, format="csr"), levels, name="sqrt_factorization")
        self._n_core = n
        self._n_totals = n_totals

    @property
    def coefficients(self) -> np.ndarray:
        """c_0..c_{n-1} (read-only copy)."""
        return self._c.copy()

    def with_total_row(self) -> "SqrtFactorization":
        """A copy with an all-ones row appended at level 0 (keeps the closed forms)."""
        return SqrtFactorization(self._n_core, n_totals=self._n_totals + 1)

    def _uniform_core_weight(self, w: np.ndarray):
        core = w[: self._n_core]
        return float(core[0]) if np.all(core == core[0]) else None

    def _add_remove_loss(self, w: np.ndarray, p: int) -> float:
        u = self._uniform_core_weight(w)
        if u is None:
            return super()._add_remove_loss(w, p)
        tot = w[self._n_core:]
        if p == 1:  # column 0 of L plus every total row
            return u * float(self._c.sum()) + float(tot.sum())
        return math.sqrt(u * u * float(np.sum(self._c**2)) + float(np.sum(tot**2)))

    def _swap_loss(self, w: np.ndarray, p: int) -> float:
        u = self._uniform_core_weight(w)
        if u is None:
            return super()._swap_loss(w, p)
        return u * sqrt_swap_sensitivity(self._c, p)


def sqrt_swap_sensitivity(c: np.ndarray, p: int) -> float:
    """Unit-weight swap sensitivity of the Toeplitz L with decreasing first column c (module
    docstring): l1 in O(n), l2 in O(n^2) (one pass per gap D)."""
    n = c.size
    if n == 1:
        return 0.0
    if p == 1:
        s1 = np.concatenate([[0.0], np.cumsum(c)])
        d = np.arange(1, n)
        return float(np.max(2.0 * s1[d] + s1[n - d] - s1[n]))
    s2 = np.concatenate([[0.0], np.cumsum(c * c)])
    best = 0.0
    for d in range(1, n):
        diff = c[d:] - c[: n - d]
        best = max(best, s2[d] + float(diff @ diff))
    return math.sqrt(best)


def sqrt_factorization(n: int) -> SqrtFactorization:
    """The square-root factorisation strategy L (L @ L = prefix matrix) over ``n`` bins.

    Dense lower-triangular Toeplitz, c_k = C(2k, k)/4^k (module docstring; Henzinger et al.
    SODA 2023). All rows at budget level 1."""
    return SqrtFactorization(n)


def sqrt_factorization_variances(n: int, sigma2: float = 1.0, neighbours: str = "add_remove"
                                 ) -> np.ndarray:
    """Closed-form per-prefix variances of the estimate L y, shape (n,), prefix t = 1..n.

    Var(C_t) = sigma2 * Delta^2 * S2(t), with Delta the l2 sensitivity of L under
    ``neighbours`` (add/remove: Delta^2 = S2(n), giving sigma2 S2(t) S2(n), MATH.md Sec. 6;
    swap: the swap form of the module docstring). This is the BLUE's error without a public
    total; with N public (swap) the BLUE also uses the exact total and is better."""
    check_neighbours(neighbours)
    c = sqrt_coefficients(n)
    s2 = np.cumsum(c * c)
    delta2 = s2[-1] if neighbours == "add_remove" else sqrt_swap_sensitivity(c, 2) ** 2
    return float(sigma2) * delta2 * s2
