"""Scaled integer strategies: a real-valued strategy made releasable with exact integer noise.

A secure release (``dptree_opt.release``, ``stream.Counter``) adds OpenDP's discrete Laplace
or discrete Gaussian noise to EXACT integer answers: integer answers shifted by an integer
vector between neighbouring histograms is what makes the discrete mechanisms' privacy
statements exact (Canonne, Kamath, Steinke 2020). A real-valued strategy A (the square-root
factorisation, BLT, the Gaussian optimum, p-Identity) has no integer answers, and floating-
point noise on real answers leaks (Mironov 2012). So A is replaced by

    M = round(s A'),   A' = A / 2^e  (2^e >= max |A_ij|),   s = 2^bits,

an integer matrix, and the mechanism releases y = M x + z with z discrete noise calibrated to
the EXACT sensitivity of M (:meth:`IntegerStrategy.exact_sensitivity`: an integer for l1, the
integer square of the l2 sensitivity, computed in integer arithmetic). The estimator uses M
itself: measuring M x with noise z is measuring A_s x = (M / s) x with noise z / s, and the
BLUE is invariant to scaling rows together with their noise, so the released design is the
strategy A_s = A / 2^e + E with |E_ij| <= 1 / (2 s). Its error is within O(1/s) of A's and is
measured (``docs/releasing_designs.md``: the derivation, the choice of s, the numbers).

Calibration. ``sensitivity`` (what ``Mechanism`` calibrates with) returns the exact value
times (1 + 2^-40), rounded up, so the scale computed in floating point is never below the
exact calibration; the secure path then checks the EXACT integer sensitivity against the
scale and the budget in rational arithmetic and with OpenDP's own privacy map (strictly,
no tolerance) before anything is drawn (``data_release.secure_noise``).

Routes (:func:`secure_route`): strategies whose entries are integers by construction (trees,
interval strategies, Haar, quadtrees, Kronecker products of them, integer matrices) are
released as they are; lower-triangular Toeplitz strategies become :class:`IntegerToeplitz`
(integer coefficients, structured, up to ``MAX_SCALED_TOEPLITZ_BINS``); the implicit
Gaussian optimum becomes the rounded upper Cholesky factor of its Gram matrix (same Gram,
same error and sensitivity; ``strategies.optimized.gaussian_optimal`` at its dual point);
nested strategies (``strategies.nested``) become :class:`IntegerNested`; any other
single-level strategy with a matrix becomes :class:`IntegerStrategy` (up to
``MAX_SCALED_DENSE_BINS`` bins).

Nested strategies (docs/math.md section 12). The rows of depth d of a nested strategy are
S_d applied to the children totals of every node of that depth, and they form the noise
level d + 1, calibrated to that depth's own sensitivity. The scaled form is nested too:
integer local matrices M_d = round(s S_d / 2^(e_d)), one 2^(e_d) >= max |S_d| per depth
(scaling the rows of one level scales its sensitivity and its noise together: the BLUE and
the guarantee do not change, so every depth keeps its full s). The children totals are
integers, so the answers are exact int64 products per depth (no matrix at any size); the
exact sensitivities are integers computed from the small M_d alone (per depth: the largest
column norm, D1 = max_c ||M_d[:, c]||_1 or D2^2 = max_c ||M_d[:, c]||_2^2). The released
strategy IS a nested strategy (locals M_d): the nested engine gives its BLUE and its exact
errors, and the rounding's effect on them is measured (``docs/releasing_designs.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from .. import workloads
from ..limits import check_memory
from .base import MatrixLike, Strategy, check_neighbours, check_norm, frozen_csr, readonly
from .haar import HaarStrategy
from .implicit_optimum import ImplicitFactorization
from .interval import IntervalStrategy
from .kronecker import KroneckerStrategy
from .nested import NestedStrategy
from .optimized import gaussian_optimal
from .quadtree import QuadtreeStrategy
from .toeplitz import (
    ScaledToeplitzStrategy,
    ToeplitzStrategy,
    toeplitz_swap_sensitivity,
)

__all__ = ["IntegerStrategy", "IntegerToeplitz", "IntegerNested", "scaled_integer",
           "secure_route", "max_scale_bits",
           "SCALE_BITS", "MAX_SCALE_BITS", "MAX_SCALED_DENSE_BINS", "MAX_SCALED_TOEPLITZ_BINS",
           "INFLATION"]

SCALE_BITS = 16               # s = 2^16 first (measured: +3e-5 relative error at K = 3000)
MAX_SCALE_BITS = 24           # s grows (x16 per step) up to 2^24 when rounding costs more,
#                               within max_scale_bits (exact integer sensitivities)
MAX_ENTRY = 2.0**40           # |M_ij| bound: sums of K entries x counts stay exact integers
# Dense scaled strategies (the Gaussian optimum's Cholesky factor, p-Identity, any matrix):
# n^2 entries, the dense GLS behind their errors is O(n^3) (~3 s at 3000 bins, one core).
MAX_SCALED_DENSE_BINS = 4096
DENSE_BYTES_PER_ENTRY = 48    # building M: eigenvectors, B, B'B, R, M and its CSR (8 bytes x 6)
# Integer Toeplitz: exact answers and the exact l2 swap sensitivity are int64 convolutions,
# O(n^2): 2.5 s at 2^16 (one core).
MAX_SCALED_TOEPLITZ_BINS = 1 << 16
INFLATION = 2.0**-40          # calibration margin: sensitivity x (1 + 2^-40), rounded up
_EXACT = 2.0**53              # integers up to here are exact doubles



def _check_integral(values: npt.NDArray[np.floating], what: str) -> None:
    if not np.all(values == np.round(values)):
        raise ValueError(f"{what} must be integers")
    if values.size and float(np.max(np.abs(values))) > MAX_ENTRY:
        raise ValueError(f"{what} must be at most 2^40 in magnitude (exact integer answers)")


class _ExactSensitivity(Strategy):
    """Mixin: sensitivities from the exact integer ones (:meth:`exact_sensitivity`) when the
    core rows (level 1) share one weight and the appended total rows (level 0) another;
    the generic computation otherwise."""

    # set by the concrete classes' __init__
    _n_core: int
    _max_entry: float
    _exact_cache: dict[tuple[str, int], int]

    def _exact(self, neighbours: str, p: int) -> int:
        """The exact integer sensitivity (the concrete classes')."""
        raise NotImplementedError

    def exact_sensitivity(self, neighbours: str, norm: int) -> int:
        """The exact sensitivity of the integer core rows (all-ones totals excluded) at unit
        weight: D1 = max ||M (x - x')||_1 (norm 1) or D2^2 = max ||M (x - x')||_2^2 (norm 2)
        over neighbouring histograms, a Python int (integer arithmetic)."""
        neighbours = check_neighbours(neighbours)
        p = check_norm(norm)
        if neighbours == "swap" and self.n_bins == 1:
            return 0
        key = (neighbours, p)
        if key not in self._exact_cache:
            self._exact_cache[key] = int(self._exact(neighbours, p))
        return self._exact_cache[key]

    @property
    def max_entry(self) -> int:
        """max |M_ij| over the core rows (1 for the total rows): bounds |answer| <= it x N."""
        return max(int(self._max_entry), 1)

    def sensitivity(self, weights: ArrayLike, neighbours: str, norm: int) -> float:
        """The loss of diag(weights) A (``Strategy.sensitivity``): from the exact integer
        sensitivity when the core rows share one weight and the total rows another, times
        (1 + 2^-40) rounded up (the calibration is never below the exact one); else the
        generic computation."""
        w = self._check_weights(weights)
        neighbours = check_neighbours(neighbours)
        p = check_norm(norm)
        core, tot = w[: self._n_core], w[self._n_core:]
        if not (np.all(core == core[0]) and np.all(tot == (tot[0] if tot.size else 0.0))):
            return super().sensitivity(w, neighbours, p)
        u = float(core[0])
        d = float(self.exact_sensitivity(neighbours, p)) if u else 0.0   # D1 or D2^2
        t = float(tot[0]) if tot.size and neighbours == "add_remove" else 0.0
        # total rows do not change under swap; under add/remove every column meets each once
        value = u * d + t * tot.size if p == 1 else math.sqrt(u * u * d + t * t * tot.size)
        return math.nextafter(value * (1.0 + INFLATION), math.inf) if value > 0 else 0.0


class IntegerStrategy(_ExactSensitivity, Strategy):
    """An integer matrix M = round(s A') at one noise level, with its scale s (module
    docstring); ``n_totals`` all-ones rows (level 0) may follow. Exact sensitivities:
    add/remove from integer column sums (O(nnz)); swap l1 from the generic pairwise search
    on the integers (exact: every partial sum is an integer below 2^53, checked) and swap
    l2^2 = max ||m_a||^2 + ||m_b||^2 - 2 m_a'm_b from the integer Gram matrix (BLAS on
    exact integers below 2^53, checked), O(n^2 rows).

    Parameters: ``matrix`` (integer entries, |M_ij| <= 2^40; copied), ``scale_bits`` (s =
    2^bits; the strategy measured is A_s = M / s up to the normalisation 2^e), ``source``
    (the name of A), ``n_totals``. Its arrays are read-only (the exact sensitivities are
    computed once and cached: a changed matrix would not be calibrated)."""

    def __init__(self, matrix: MatrixLike, *, scale_bits: int, source: str, n_totals: int = 0,
                 name: str | None = None) -> None:
        core = frozen_csr(matrix)  # a canonical, read-only copy
        _check_integral(core.data, "the scaled strategy's entries")
        m, n = core.shape
        rows = [core] + [sp.csr_matrix(np.ones((1, n)))] * int(n_totals)
        levels = np.concatenate([np.ones(m, np.int32), np.zeros(int(n_totals), np.int32)])
        super().__init__(sp.vstack(rows, format="csr"), levels,
                         name=name or f"{source} (integer, s = 2^{scale_bits})")
        self._core = core  # read-only, as the matrix: the exact sensitivities are cached
        self._n_core = m
        self._max_entry = float(np.max(np.abs(core.data), initial=0.0))
        self.scale_bits = int(scale_bits)
        self.source = source
        self._exact_cache = {}

    @property
    def core(self) -> sp.csr_matrix:
        """The integer rows M (without the total rows), CSR of exact integers."""
        return self._core

    def with_total_row(self) -> IntegerStrategy:
        """A copy with one more all-ones row at level 0 (the last row)."""
        return IntegerStrategy(self._core, scale_bits=self.scale_bits, source=self.source,
                               n_totals=self.n_rows - self._n_core + 1, name=self.name)

    def _exact(self, neighbours: str, p: int) -> int:
        a = self._core
        m, n = a.shape
        top = self._max_entry
        if m * top * top >= _EXACT:
            raise ValueError("the scaled strategy's entries are too large for exact integer "
                             "sensitivities (rows x max|entry|^2 >= 2^53)")
        ints = sp.csr_matrix((a.data.astype(np.int64), a.indices, a.indptr), shape=a.shape)
        if neighbours == "add_remove":
            cols = (abs(ints) if p == 1 else ints.multiply(ints)).sum(axis=0)
            return int(np.asarray(cols).max())
        if p == 1:              # integer weights: every step of the generic search is exact
            return int(round(Strategy(a.copy())._swap_loss(np.ones(m), 1)))
        check_memory(16 * m * n, f"the exact swap sensitivity of a {m} x {n} integer strategy",
                     "use add_remove neighbours or fewer bins")
        dense = a.toarray()
        x = np.einsum("ij,ij->j", dense, dense)                  # integers below 2^53
        best = 0
        step = max(1, (1 << 22) // max(n, 1))
        for start in range(0, n, step):                          # O(n^2 m) BLAS, chunked
            g = dense[:, start:start + step].T @ dense          # exact integer Gram rows
            d = x[start:start + step, None] + x[None, :] - 2.0 * g
            d[np.arange(d.shape[0]), np.arange(start, start + d.shape[0])] = -1.0
            best = max(best, int(d.max()))
        return best


class IntegerToeplitz(_ExactSensitivity, ToeplitzStrategy):
    """The lower-triangular Toeplitz strategy of integer coefficients m_k = round(s a_k / 2^e)
    (module docstring): structured like any Toeplitz strategy (FFT products for the
    estimator), exact sensitivities in integers -- add/remove from column 0 (sum |m_k|,
    sum m_k^2), swap from the worst gap D (pair of columns (0, D), as for every Toeplitz
    strategy): l1 by ``toeplitz_swap_sensitivity`` on the integers (exact sums), l2^2 =
    S2(n) + S2(n - D) - 2 R(D) with the exact int64 autocorrelation R (O(n^2))."""

    def __init__(self, coefficients: ArrayLike, *, scale_bits: int, source: str,
                 n_totals: int = 0, name: str | None = None) -> None:
        c = np.asarray(coefficients, dtype=float)
        _check_integral(c, "the scaled Toeplitz coefficients")
        super().__init__(c, n_totals=n_totals,
                         name=name or f"{source} (integer, s = 2^{scale_bits})")
        self._max_entry = float(np.max(np.abs(c)))
        self.scale_bits = int(scale_bits)
        self.source = source
        self._exact_cache = {}

    def integer_coefficients(self) -> npt.NDArray[np.int64]:
        """m_0..m_(n-1) as int64."""
        return self._a.astype(np.int64)

    def _exact(self, neighbours: str, p: int) -> int:
        m = self.integer_coefficients()
        n = m.size
        if n * self._max_entry * self._max_entry >= _EXACT:
            raise ValueError("the scaled Toeplitz coefficients are too large for exact "
                             "integer sensitivities (n x max|m|^2 >= 2^53)")
        if neighbours == "add_remove":
            return int(np.abs(m).sum()) if p == 1 else int(np.dot(m, m))
        if p == 1:              # integer sums below 2^53: the float formula is exact
            return int(round(toeplitz_swap_sensitivity(m.astype(float), 1)))
        s2 = np.concatenate([[0], np.cumsum(m * m)])
        r = np.correlate(m, m, mode="full")[n:]                 # R(D), D = 1..n-1, int64
        d = np.arange(1, n)
        return int(np.max(s2[n] + s2[n - d] - 2 * r))


class IntegerNested(NestedStrategy):
    """The nested strategy of integer local matrices M_d (module docstring, "Nested
    strategies"): fan-outs and row order as
    :class:`~dptree_opt.strategies.nested.NestedStrategy`, the rows of depth d at level
    d + 1. Exact sensitivities per depth in integer arithmetic
    (:meth:`exact_level_sensitivity`), from the M_d alone (O(m_d k_d^2) at most); its
    arrays are read-only (the exact sensitivities are cached).

    Parameters: ``fanouts`` (k_0..k_(L-1), root first), ``locals`` (integer (m_d, k_d)
    matrices, |entries| <= 2^40, the deepest of full column rank), ``scale_bits`` (s =
    2^bits), ``source`` (the name of the real-valued strategy). An appended total row (a
    public N) is refused: release nested designs under add/remove neighbours, N private."""

    def __init__(self, fanouts: Sequence[int], locals: Sequence[ArrayLike], *,
                 scale_bits: int, source: str, name: str | None = None) -> None:
        super().__init__(fanouts, locals,
                         name=name or f"{source} (integer nested, s = 2^{scale_bits})")
        mats = self.locals
        for d, m in enumerate(mats):
            _check_integral(m, f"the scaled nested strategy's locals[{d}]")
        self._ints = [readonly(m.astype(np.int64)) for m in mats]
        self._max_entry = max(int(np.max(np.abs(m), initial=0)) for m in self._ints)
        self.scale_bits = int(scale_bits)
        self.source = source
        self._exact_cache: dict[tuple[str, int], list[tuple[int, int]]] = {}

    def integer_locals(self) -> list[npt.NDArray[np.int64]]:
        """[M_0, .., M_(L-1)] as read-only int64 arrays."""
        return list(self._ints)

    @property
    def max_entry(self) -> int:
        """max_d max |M_d| (at least 1): bounds every answer by it x N."""
        return max(self._max_entry, 1)

    def with_total_row(self) -> Strategy:
        """Refused (ValueError): a scaled nested strategy has no integer form with an
        appended total row (a public N)."""
        raise ValueError("a scaled nested strategy cannot release N exactly (public_total="
                         "True or swap neighbours): release nested designs under add_remove "
                         "neighbours with N private")

    def _depth_terms(self, neighbours: str, p: int) -> list[tuple[int, int]]:
        """Per depth (G_d, P_d): G_d = max_c ||M_d[:, c]||_p^p and, under swap, P_d =
        max_(c != c') ||M_d[:, c] - M_d[:, c']||_p^p (0 under add/remove); Python ints.
        int64 when m_d (2 max|M_d|)^p < 2^62 (checked), else exact Python integers."""
        key = (neighbours, p)
        if key not in self._exact_cache:
            out = []
            for m in self._ints:
                top = int(np.max(np.abs(m), initial=0))
                exact = m.shape[0] * (2 * top) ** p < 2**62
                a = m if exact else m.astype(object)
                g = int((np.abs(a) ** p).sum(axis=0).max())
                pair = 0
                if neighbours == "swap":
                    for c in range(m.shape[1]):                 # k_d columns, O(m_d k_d) each
                        diff = (np.abs(a - a[:, c:c + 1]) ** p).sum(axis=0)
                        diff[c] = 0
                        pair = max(pair, int(diff.max()))
                out.append((g, pair))
            self._exact_cache[key] = out
        return self._exact_cache[key]

    def exact_level_sensitivity(self, level: int, neighbours: str, norm: int) -> int:
        """The exact sensitivity of the rows of depth d = ``level`` - 1 at unit weight, a
        Python int: D1 (norm 1) or D2^2 (norm 2). add/remove: max_c ||M_d[:, c]||_p^p;
        swap: the larger of max_(c != c') ||M_d[:, c] - M_d[:, c']||_p^p (two bins in
        different children of one node) and, below the root, 2 max_c ||M_d[:, c]||_p^p (two
        bins in different nodes of depth d)."""
        neighbours = check_neighbours(neighbours)
        p = check_norm(norm)
        if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, np.integer)) \
                or not 1 <= level <= self.height:
            raise ValueError(f"level must be an integer in [1, {self.height}], got {level!r}")
        g, pair = self._depth_terms(neighbours, p)[int(level) - 1]
        if neighbours == "add_remove":
            return g
        return max(pair, 2 * g if level > 1 else 0)

    def exact_sensitivity(self, neighbours: str, norm: int) -> int:
        """The exact sensitivity of all rows at unit weight, a Python int (D1 or D2^2):
        add/remove sum_d max_c ||M_d[:, c]||_p^p; swap max_D [P_D + 2 sum_(d > D) G_d]
        (``strategies.nested`` module docstring)."""
        neighbours = check_neighbours(neighbours)
        p = check_norm(norm)
        terms = self._depth_terms(neighbours, p)
        if neighbours == "add_remove":
            return sum(g for g, _ in terms)
        return max(pair + 2 * sum(g for g, _ in terms[d + 1:])
                   for d, (_, pair) in enumerate(terms))

    def sensitivity(self, weights: ArrayLike, neighbours: str, norm: int) -> float:
        """The loss of diag(weights) A: when the weights are one value u_d per depth (budgets
        per depth), from the exact integer terms -- add/remove (sum_d u_d^p G_d)^(1/p), swap
        (max_D [u_D^p P_D + 2 sum_(d > D) u_d^p G_d])^(1/p) -- times (1 + 2^-40) rounded up
        (never below the exact value); the generic nested computation otherwise."""
        w = self._check_weights(weights)
        neighbours = check_neighbours(neighbours)
        p = check_norm(norm)
        pattern = self.row_pattern(w)
        if pattern is None or not all(np.all(v == v[0]) for v in pattern):
            return super().sensitivity(w, neighbours, p)
        u = [float(v[0]) ** p for v in pattern]
        terms = self._depth_terms(neighbours, p)
        if neighbours == "add_remove":
            total = sum(ud * g for ud, (g, _) in zip(u, terms))
        else:
            total = max(u[d] * pair + 2.0 * sum(ud * g for ud, (g, _) in
                                                 zip(u[d + 1:], terms[d + 1:]))
                        for d, (_, pair) in enumerate(terms))
        value = total if p == 1 else math.sqrt(total)
        return math.nextafter(value * (1.0 + INFLATION), math.inf) if value > 0 else 0.0


# ------------------------------------------------------------------------ routes
def _integer_valued(strategy: Strategy) -> bool:
    """Whether every entry of the strategy is an integer: by its structure (trees, interval
    strategies, Haar, quadtrees, Kronecker products of such, the classes of this module), or
    from its explicit matrix (at most ``MAX_SCALED_DENSE_BINS`` bins; larger ones without
    integer structure count as real-valued)."""
    if isinstance(strategy, (IntervalStrategy, HaarStrategy, QuadtreeStrategy, IntegerStrategy,
                             IntegerToeplitz, IntegerNested)):
        return True
    if isinstance(strategy, NestedStrategy):     # from its small local matrices
        return all(bool(np.all(s == np.round(s))) and float(np.max(np.abs(s))) <= MAX_ENTRY
                   for s in strategy.locals)
    if isinstance(strategy, KroneckerStrategy):
        return all(_integer_valued(f) for f in strategy.factors)
    if isinstance(strategy, (ToeplitzStrategy, ImplicitFactorization)):
        return False
    if strategy.max_matrix_bins is not None and strategy.n_bins > MAX_SCALED_DENSE_BINS:
        return False
    data = strategy.matrix.data
    return bool(np.all(data == np.round(data))) and float(
        np.max(np.abs(data), initial=0.0)) <= MAX_ENTRY


def secure_route(strategy: Strategy, *, row_budgets: bool = False) -> tuple[str | None, str]:
    """How a mechanism on ``strategy`` runs through the secure samplers: ("integer", how)
    when its entries are integers, ("scaled", how) when it becomes a scaled integer strategy
    (:func:`scaled_integer`), or (None, why not). ``row_budgets``: the mechanism has a budget
    per row (fine on integer strategies only). Cheap: no dense matrix is built."""
    if not isinstance(strategy, Strategy):
        raise ValueError(f"strategy must be a dptree_opt Strategy, got "
                         f"{type(strategy).__name__}")
    n = strategy.n_bins
    if _integer_valued(strategy):
        return "integer", "integer answers: exact discrete noise (OpenDP)"
    if isinstance(strategy, (KroneckerStrategy, QuadtreeStrategy)):
        return None, ("a Kronecker product of real-valued factors: no scaled integer form "
                      "(releases of grids run Kronecker products of trees and quadtrees)")
    if isinstance(strategy, NestedStrategy):
        if row_budgets:
            return None, ("a real-valued nested strategy with budgets per row: no scaled "
                          "integer form")
        return "scaled", ("the scaled integer nested strategy round(s S_d / 2^e_d) per depth, "
                          "s >= 2^16 (structured, no matrix): exact noise per depth")
    if isinstance(strategy, ToeplitzStrategy) and not isinstance(strategy,
                                                                 ScaledToeplitzStrategy):
        if n > MAX_SCALED_TOEPLITZ_BINS:
            return None, (f"a real-valued Toeplitz strategy on {n} bins: its scaled integer "
                          f"form is released up to {MAX_SCALED_TOEPLITZ_BINS} bins (exact "
                          "integer answers are an O(n^2) convolution)")
        how = "the scaled integer Toeplitz strategy round(s A), s >= 2^16: exact noise"
    elif n > MAX_SCALED_DENSE_BINS:
        return None, (f"a real-valued strategy on {n} bins without Toeplitz structure: its "
                      f"scaled integer form is dense, released up to {MAX_SCALED_DENSE_BINS} "
                      "bins")
    else:
        how = "the scaled integer strategy round(s A), s >= 2^16 (dense): exact noise"
    if row_budgets:
        return None, "a real-valued strategy with budgets per row: no scaled integer form"
    if np.unique(strategy.levels[strategy.levels > 0]).size > 1:
        return None, "a real-valued strategy with several noise levels: no scaled integer form"
    return "scaled", how


def max_scale_bits(strategy: Strategy) -> int:
    """The largest b (at most MAX_SCALE_BITS) for which the exact sensitivities of
    round(2^b A / 2^e) (entries <= 2^b) stay exact: rows x 2^(2b) < 2^53, so every squared
    column norm and Gram entry is an integer below 2^53 (float and int64 alike). For a
    nested strategy "rows" is sum_d m_d, the rows that meet one column (its exact
    sensitivities are sums over them)."""
    if isinstance(strategy, NestedStrategy):
        rows = sum(s.shape[0] for s in strategy.locals)
    else:
        rows = max(int(np.sum(strategy.levels > 0)), 1)
    return min(MAX_SCALE_BITS, (52 - math.ceil(math.log2(rows))) // 2)


def _normalised(values: np.ndarray) -> tuple[np.ndarray, int]:
    """values / 2^e with 2^e >= max |values| (exact: a power of two), and e."""
    top = float(np.max(np.abs(values), initial=0.0))
    if not top > 0:
        raise ValueError("the strategy has no non-zero entry")
    mant, e = math.frexp(top)                 # top = mant 2^e, mant in [0.5, 1)
    e = e - 1 if mant == 0.5 else e           # the least e with 2^e >= top
    return np.ldexp(values, -e), e


def scaled_integer(strategy: Strategy, bits: int = SCALE_BITS, *,
                   noise: str = "gaussian") -> Strategy:
    """The scaled integer form of a real-valued single-level (or nested) strategy (module
    docstring): :class:`IntegerToeplitz` for a lower-triangular Toeplitz strategy,
    :class:`IntegerNested` of M_d = round(s S_d / 2^(e_d)) for a nested strategy, for the
    implicit Gaussian optimum under Gaussian noise the rounded upper Cholesky factor of its
    Gram matrix (l2 sensitivities and errors depend on the Gram matrix only), else
    :class:`IntegerStrategy` of round(s A / 2^e). ``bits``: s = 2^bits, an integer in
    [0, MAX_SCALE_BITS]; ``noise``: "laplace" | "gaussian". All-ones total rows (level 0)
    are kept as they are. ValueError when :func:`secure_route` finds no scaled form; memory
    checked before anything dense is built."""
    if isinstance(bits, (bool, np.bool_)) or not isinstance(bits, (int, np.integer)) \
            or not 0 <= bits <= MAX_SCALE_BITS:
        raise ValueError(f"bits must be an integer in [0, {MAX_SCALE_BITS}], got {bits!r}")
    if noise not in ("laplace", "gaussian"):
        raise ValueError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
    route, why = secure_route(strategy)
    if route != "scaled":
        raise ValueError(f"no scaled integer form: {why}" if route is None else
                         "the strategy's entries are integers already: release it as it is")
    bits = int(bits)
    s = 2.0**bits
    source = strategy.name
    n = strategy.n_bins
    totals = int(np.sum(strategy.levels == 0))
    if isinstance(strategy, NestedStrategy):     # per depth: no matrix at any size
        mats = [np.rint(s * _normalised(m)[0]) if np.any(m) else m
                for m in strategy.locals]
        return IntegerNested(strategy.fanouts, mats, scale_bits=bits, source=source)
    if isinstance(strategy, ToeplitzStrategy):
        coef, _ = _normalised(strategy.coefficients)
        return IntegerToeplitz(np.rint(s * coef), scale_bits=bits, source=source,
                               n_totals=totals)
    check_memory(DENSE_BYTES_PER_ENTRY * n * n, f"the scaled integer form of {source} "
                 f"({n} x {n} dense)", "use fewer bins")
    if isinstance(strategy, ImplicitFactorization) and noise == "gaussian":
        # same Gram matrix (unit diagonal), hence the same error and sensitivities: the
        # upper Cholesky factor of X at the optimum's dual point (dense, O(n^3))
        kind = {"prefix": workloads.prefix, "all_range": workloads.all_range,
                "identity": workloads.identity}[strategy.workload_kind]
        dense = gaussian_optimal(kind(n), max_iter=1, d0=strategy.dual_point).strategy.matrix
        core = dense.toarray()
    else:
        core = strategy.matrix[np.flatnonzero(strategy.levels > 0)].toarray()
    core, _ = _normalised(core)
    return IntegerStrategy(sp.csr_matrix(np.rint(s * core)), scale_bits=bits, source=source,
                           n_totals=totals)
