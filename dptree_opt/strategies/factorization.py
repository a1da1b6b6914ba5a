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

(for a fixed gap D = b - a the pair a = 0, b = D is the worst: true for every Toeplitz
strategy, see :mod:`dptree_opt.strategies.toeplitz`; the l1 form telescopes because c is
decreasing.) With
Gaussian noise of variance sigma^2 per unit l2 sensitivity under add/remove (noise variance
sigma^2 S2(n) per row), prefix t has variance

    Var(C_t) = sigma^2 S2(n) * sum_{k<t} c_k^2 = sigma^2 S2(t) S2(n)   (docs/math.md section 6);

the mean over t at n = 2^10 with sigma^2 = 1 is 9.671 (docs/math.md sections 6-7).

Banded variants for private learning (docs/math.md section 11):

* BSR, :func:`banded_sqrt`: L's coefficients truncated to ``bands`` (a banded Toeplitz
  strategy; Kalinin & Lampert, "Banded square root matrix factorization for differentially
  private model training", 2024, arXiv 2405.13763).
* BISR, :func:`banded_inverse_sqrt`: the INVERSE square root's coefficients
  (1 - z)^(1/2) = 1 - z/2 - z^2/8 - z^3/16 - ... truncated to ``bands`` are the noise
  correlation C^-1 (banded); the strategy C = T(1 / that) is Toeplitz but not banded (Kalinin,
  Upadhyay & Lampert, "Back to square roots", 2025, arXiv 2505.12128; jax_privacy's
  ``banded_inverse_square_root_noising_coefs``). 1 / (1 - sum_(j>=1) e_j z^j) with e_j >= 0
  has non-negative coefficients (a renewal sequence), so its participation sensitivity takes
  the exact Toeplitz paths whenever they are also non-increasing (checked, not assumed).
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

from ..limits import check_memory
from ..validation import check_int, check_n
from .banded import BandedStrategy, banded
from .base import check_neighbours
from .toeplitz import ToeplitzStrategy, toeplitz_swap_sensitivity

__all__ = ["SqrtFactorization", "banded_inverse_sqrt", "banded_sqrt",
           "inverse_sqrt_coefficients", "sqrt_coefficients", "sqrt_factorization",
           "sqrt_factorization_variances"]


def sqrt_coefficients(n: int) -> np.ndarray:
    """c_0..c_{n-1} with c_k = C(2k, k) / 4^k (recurrence c_k = c_{k-1} (2k - 1) / (2k)), O(n)."""
    n = check_n(n)
    check_memory(24 * n, f"the square-root factorisation over {n} bins (its coefficients)",
                 "use fewer bins")
    k = np.arange(1, n, dtype=float)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])


def inverse_sqrt_coefficients(n: int) -> np.ndarray:
    """e_0..e_(n-1), the coefficients of (1 - z)^(1/2) (the first column of L^-1):
    e_0 = 1, e_k = e_(k-1) (2k - 3) / (2k) (1, -1/2, -1/8, -1/16, ...), O(n)."""
    n = check_n(n)
    check_memory(24 * n, f"the inverse square root over {n} bins (its coefficients)",
                 "use fewer bins")
    k = np.arange(1, n, dtype=float)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 3.0) / (2.0 * k))])


def banded_sqrt(n: int, bands: int) -> BandedStrategy:
    """BSR: the square root's coefficients c_0..c_(bands-1) as a banded Toeplitz strategy
    over ``n`` steps (module docstring), ``bands`` in [1, n]. Exact participation
    sensitivities and errors by the banded paths (O(n bands))."""
    n = check_n(n)
    bands = check_int(bands, "bands", 1, n)
    return banded(sqrt_coefficients(bands), bands, n, name=f"BSR ({bands} bands)")


def banded_inverse_sqrt(n: int, bands: int) -> ToeplitzStrategy:
    """BISR: the Toeplitz strategy C over ``n`` steps whose inverse C^-1 has the first
    ``bands`` coefficients of (1 - z)^(1/2) and zeros beyond (module docstring); C's own
    coefficients are the power-series inverse, by the exact recursion (O(n bands))."""
    n = check_n(n)
    bands = check_int(bands, "bands", 1, n)
    check_memory(24 * n, f"BISR over {n} steps (its coefficients)", "use fewer steps")
    impulse = np.zeros(n)
    impulse[0] = 1.0
    # the recursion c_t = sum_(1<=j<bands) |e_j| c_(t-j) (e_0 = 1, e_j < 0): non-negative
    # terms only, so c stays exactly >= 0 and non-increasing in floating point, which an FFT
    # inverse does not guarantee once c_t falls to rounding level (~1e-17)
    coef = lfilter([1.0], inverse_sqrt_coefficients(bands), impulse)
    return ToeplitzStrategy(coef, name=f"BISR ({bands} bands)")


class SqrtFactorization(ToeplitzStrategy):
    """The strategy L = P^(1/2) (module docstring), optionally with appended all-ones rows.

    A :class:`~dptree_opt.strategies.toeplitz.ToeplitzStrategy` with first column c: no matrix
    is stored (``.matrix`` on request for n <= 8192), products by FFT, sensitivities by the
    Toeplitz closed forms (O(n) for l1 - c is decreasing - and O(n log n) for l2; the generic
    search for non-uniform weights, small n only). Rows 0..n-1 are L (budget level 1); extra
    rows (from ``with_total_row``) are exact totals at level 0."""

    def __init__(self, n: int, *, n_totals: int = 0):
        super().__init__(sqrt_coefficients(n), n_totals=n_totals, name="sqrt_factorization")


def sqrt_swap_sensitivity(c: np.ndarray, p: int) -> float:
    """Unit-weight swap sensitivity of the Toeplitz L with first column c (module docstring;
    :func:`~dptree_opt.strategies.toeplitz.toeplitz_swap_sensitivity`): l1 O(n), l2
    O(n log n)."""
    return toeplitz_swap_sensitivity(c, p)


def sqrt_factorization(n: int) -> SqrtFactorization:
    """The square-root factorisation strategy L (L @ L = prefix matrix) over ``n`` bins.

    Lower-triangular Toeplitz, c_k = C(2k, k)/4^k (module docstring; Henzinger et al.
    SODA 2023), kept implicit (FFT products). All rows at budget level 1."""
    return SqrtFactorization(n)


def sqrt_factorization_variances(n: int, sigma2: float = 1.0, neighbours: str = "add_remove"
                                 ) -> np.ndarray:
    """Closed-form per-prefix variances of the estimate L y, shape (n,), prefix t = 1..n.

    Var(C_t) = sigma2 * Delta^2 * S2(t), with Delta the l2 sensitivity of L under
    ``neighbours`` (add/remove: Delta^2 = S2(n), giving sigma2 S2(t) S2(n), docs/math.md Sec. 6;
    swap: the swap form of the module docstring). This is the BLUE's error without a public
    total; with N public (swap) the BLUE also uses the exact total and is better."""
    check_neighbours(neighbours)
    c = sqrt_coefficients(n)
    s2 = np.cumsum(c * c)
    delta2 = s2[-1] if neighbours == "add_remove" else sqrt_swap_sensitivity(c, 2) ** 2
    return float(sigma2) * delta2 * s2
