"""Confidence intervals for the true quantiles of the data from a private CDF release.

Setting. A mechanism measures a tree (or any strategy) over K' >= K bins with independent,
symmetric noise z (discrete or continuous Laplace / Gaussian); the estimator is linear, so the
raw cumulative counts are raw[b] = C_b + e_b, e = R z, with exact variances V_b (``queries``).
Bins are 0-based, C_b = count in bins 0..b, C_{-1} = 0, C_{K-1} = N; ``bin_edges`` e_0 < ... < e_K.

Target. The true q-quantile of the data x_1..x_N is ``np.quantile(x, q, method="inverted_cdf")``
= the m-th order statistic, m = max(ceil(q N), 1) (the minimum for q = 0). It lies in the bin

    b* = the first b with C_b >= m,   i.e.  C_{b*-1} < m <= C_{b*}.

Construction (exact test inversion per bin). For q > 0, C_b >= m  <=>  D_b := C_b - q N >= 0
(counts are integers). Its estimate Dhat_b = raw[b] - q Nhat, with Nhat = N when N is public
(swap neighbours: N is read from the exact total row) and Nhat = raw[K-1] otherwise (an
unbiased estimate of C_{K-1} = N; padding bins are empty). Bin b is REJECTED when

    (1) Dhat_b + c sd_b < t_1       evidence that C_b < m      (b is left of b*), or
    (2) Dhat_{b-1} - c sd_{b-1} > t_2   evidence that C_{b-1} >= m  (b is right of b*),

with targets t_1 = t_2 = 0 (private N, q > 0). With N public the integer targets are exact:
Dhat_b = raw[b], t_1 = m, t_2 = m - 1; for q = 0 (m = 1): Dhat_b = raw[b], t_1 = 1, t_2 = 0.
b = -1 is the empty prefix: Dhat_{-1} = -q Nhat (exactly 0 with N public or q = 0).
The interval is the hull [e_lo, e_{hi+1}] of the kept bins lo..hi (value units, bin edges). If
no bin is kept the estimate's bin is returned; if ``estimates`` fall outside they are added
(both are supersets on the event that b* is kept, so coverage is unchanged).

Guarantee. b* is rejected only if (1) fails at b* although D_{b*} >= 0, or (2) fails at b*
although D_{b*-1} < 0; each has probability <= P(Z_b < -c_b) resp. P(Z_{b-1} > c_{b-1}) where
Z_b = (Dhat_b - D_b) / sd_b is the standardised estimation error. The noise is symmetric and
the estimator linear, so both are <= alpha / 2 when the critical value c satisfies
P(``|Z_b|`` > c) <= alpha for every b, and then, for EVERY data set and every q,

    P(true quantile in [lower, upper]) >= 1 - alpha = level.

The union bound is nearly tight (the errors at b and b-1 are strongly positively correlated,
so the two rejection events are almost disjoint): coverage is close to ``level`` when bin b*
holds few records relative to sd, and higher otherwise.

Variance (exact). e_{K-1} - e_b is the error of the range [b+1, K-1], VR_b = its variance
(``queries.range_standard_errors``, O(h) per range on trees), V_K := V_{K-1}. Then
Cov(e_b, e_{K-1}) = (V_b + V_K - VR_b) / 2 and

    Var(e_b - q e_{K-1}) = (1 - q) V_b + q VR_b - q (1 - q) V_K           (private N),

= V_b with N public; b = -1 has V = 0, VR = V_K, giving q^2 V_K (tests check it against
the dense covariance).

Critical value: the exact distribution of Z_b, not the normal approximation. Z_b = sum_r a_r z_r
is a linear combination of the independent row noises with weights a = R' (p_b - q p_{K-1}),
computed exactly (no simulation): R' p = V^-1 A Cov p (BLUE: R = P Cov A' V^-1; Cov p from the
engines' "covariance" task: the tree's covariance coefficients, docs/math.md section 3; for
an interval strategy whose every bin is a noisy row, e.g. a tree with a budget per node, the
BLUE of synthetic answers; otherwise the generic GLS solver). Its
characteristic function is the product of the rows' characteristic functions:

* discrete Laplace, P(z) ~ exp(-``|z|`` / s):  phi(u) = 1 / (1 + 4 p sin^2(u/2) / (1 - p)^2),
  p = exp(-1/s)  (the two-sided geometric law; [GRS12], [CKS20] Sec. 2);
* discrete Gaussian, P(z) ~ exp(-z^2 / (2 s^2)): phi(u) = theta(u) / theta(0) with
  theta(u) = sum_z exp(-z^2 / 2 s^2) cos(u z) (direct sum for s < 1, else its Poisson-summed
  form sum_k exp(-s^2 (u - 2 pi k)^2 / 2); [CKS20] Sec. 2);
* continuous Laplace 1 / (1 + s^2 u^2); continuous Gaussian exp(-s^2 u^2 / 2).

The rows whose share of Var(Z_b), times max(1, excess kurtosis / 3), is at least
``_KEEP_SHARE`` = 1 % enter exactly (at most ``_MAX_TERMS``); the many small ones are replaced
by one normal of their exact total variance (a CLT approximation: their neglected 4th
cumulant is below 3 % of Var^2, which moves a tail probability at 2 sd by about 1e-4). The tail
P(Z > x) = 1/2 - (1/pi) int_0^inf sin(t x) phi(t) / t dt (Gil-Pelaez 1951) is integrated by the
trapezoid rule (step 0.05 in standardised units; the integrand is analytic in a strip, so the
error is far below 1e-10) up to the point where the normal factor is below e^-40. When the
normal part is below ``_MIN_SMOOTH`` = 0.01 sd (a few rows carry everything: tiny trees), an
independent U ~ N(0, eta^2) brings it to 0.01 sd and the bound
P(Z > x) <= P(Z + U > x - 4 eta) + P(U < -4 eta) is used (the atoms of a lattice law are
handled conservatively; c grows by at most 0.04). c is found by bisection to 0.002 (the
upper end of the last bracket, P(Z_b > c) <= alpha / 2), maximised over the checked
prefixes b:

* every prefix whose count b + 1, or whose complement K' - b - 1 or K - b - 1, is a
  sum/difference of at most two tree nodes (minimal signed mixed-radix digit weight <= 2;
  the heavy-tailed prefixes: few rows dominate; at most ``_MAX_HEAVY`` of them, evenly
  spread, when there are more), the first and last ``_ENDS`` = 16 prefixes (b = -1
  included), and ``_N_RANDOM`` = 32 prefixes drawn with a fixed seed (a public,
  data-independent choice). Every prefix when K <= 64, or K <= 256 for a non-tree mechanism
  (larger non-tree mechanisms: 160 evenly spaced prefixes, the ends and the random ones).
  For the trees the release picks at K = 1000 and 1024 (Laplace eps 1 and 10, discrete
  Gaussian rho 5 and 50, both neighbour models, padded or not) the maximum over the checked
  prefixes equals the maximum over all prefixes, except where both lie below the normal
  value, which is the floor of c (rho = 50 on [4, 16, 16]: sigma = 0.2, the noise is 0 with
  probability ~0.99; ``benchmarks/bench_coverage.py --check-subsample``;
  ``tests/test_quantile_intervals.py`` at K = 256). c is never below z_{1 - alpha/2}.

Gaussian noise with every sigma >= 3 is normal to double precision (the discrete Gaussian's
characteristic function differs from exp(-s^2 u^2 / 2) by at most ~2 exp(-pi^2 s^2 / 2) =
1e-19) and linear combinations of normals are normal: c = z_{1 - alpha/2} exactly. Smaller
sigma (large rho) is a lattice law: e.g. rho = 50 at K = 1024 needs c up to 2.9. Laplace
noise is never normal: a single Laplace exceeds 1.96 sd with probability 0.031 per side
(c = 2.12 for a single term); the BLUE prefixes of the release's trees need c = 1.97 (median
prefix) to 2.10 (prefixes that one node dominates) at eps = 1, up to 2.24 at eps = 10.

Width. The hull of the kept bins is wide where the CDF is flat within c sd of q N (sparse
tails, small N): every bin there is a plausible location of the quantile, or is kept by
chance among many bins with independent-ish errors. Coverage of the hull is >= that of the
kept set; in the benchmark's worst case (three adjacent atoms) it is 0.955-0.99 at 0.95.

The critical values and variances depend only on public parameters (mechanism, K, qs, level):
:func:`calibrate_quantile_tests` computes them before the noise is drawn (cached by the
mechanism's parameters); :func:`quantile_intervals` itself only does array arithmetic on the
release and never raises. It costs O(K) per quantile; the calibration ~0.1-3 s (see
``benchmarks/bench_coverage.py --timing``), ~10 s for a tree with a budget per node at
K = 2^16 (225 prefixes; docs/releasing_designs.md section 4).

Noise-only interval. The reported estimate is the quantile of a CDF linear inside bins
(``queries.quantiles``). With Dhat(x), sd(x) interpolated linearly between the edges (sd
linearly interpolated is >= the true sd of the interpolated error, by Minkowski's inequality),
the interpolated true quantile x* has D(x*) = 0 and ``|Dhat(x*)|`` <= c sd(x*) with probability
>= level (c is calibrated for the prefixes; an interpolated point mixes two adjacent ones),
so x* lies in [noise_lower, noise_upper] = [inf{x : Dhat + c sd >= 0},
sup{x : Dhat - c sd <= 0}] (q = 0: the rule gives e_0 for every CDF, so [e_0, e_0]). It
measures how far the noise can move the estimate; it ignores where the data sit inside bins.
It is widened to contain the estimate.

References: [CKS20] Canonne, Kamath, Steinke, "The discrete Gaussian for differential
privacy" (NeurIPS 2020); [GRS12] Ghosh, Roughgarden, Sundararajan, "Universally
utility-maximizing privacy mechanisms" (SIAM J. Comput. 2012); Gil-Pelaez, "Note on the
inversion theorem", Biometrika 38 (1951); docs/math.md sections 2-3 (BLUE, covariance on trees).
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, field
from numbers import Real

from collections.abc import Hashable, Sequence

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
from scipy.special import ndtri

from . import queries as _queries
from . import engines
from .mechanism import Mechanism
from .strategies import LevelUniformTree

__all__ = ["QuantileIntervals", "QuantileCalibration", "check_quantile_intervals",
           "calibrate_quantile_tests", "quantile_intervals", "NORMAL_SIGMA"]

_KEEP_SHARE = 1e-2      # rows with share * max(1, kurtosis / 3) >= this enter exactly
_MAX_TERMS = 200        # at most this many exact rows per prefix (the rest: normal)
_MIN_SMOOTH = 0.01      # smallest normal part (sd units) before smoothing is added
_SMOOTH_K = 4.0         # smoothing shift in units of its sd: P(U < -4 eta) = 3.2e-5
_STEP = 0.05            # trapezoid step in t (standardised units)
_ENVELOPE = 40.0        # integrate until the normal factor is exp(-40)
_GRID = 0.002           # resolution of the critical value (bisection, rounded up)
_MAX_HEAVY = 160        # heavy (few-node) prefixes checked at most
_N_RANDOM = 32          # random prefixes checked in addition
_ALL_PREFIXES = 64      # check every prefix up to this K
_ENDS = 16              # the first and last prefixes are always checked
NORMAL_SIGMA = 3.0      # discrete Gaussian with sigma >= this: CF normal to ~1e-19
_CACHE_SIZE = 64
_CHUNK = 32             # prefixes per weight block


# ============================================================================ results
@dataclass(frozen=True, eq=False)
class QuantileCalibration:
    """The data-independent part: critical values and variances (public; compute it before
    the noise is drawn with :func:`calibrate_quantile_tests`).

    Attributes
    ----------
    qs, level : float (len(qs),), float
        The quantile levels and the confidence level.
    critical : float (len(qs),)
        c per quantile (P(``|Z_b|`` > c) <= 1 - level for every b).
    variances : float (K + 1,)
        V_b of raw[b], b = -1..K-1 (V_{-1} = 0).
    range_variances : float (K + 1,)
        VR_b = Var(raw[K-1] - raw[b]), b = -1..K-1.
    total_public : bool
        N public (exact) or estimated by raw[K-1].
    n_bins : int
        K, the real bins (the mechanism may have K' >= K).
    method : str
        How c was obtained ("normal" or "characteristic function").
    prefixes_checked : int
        How many prefixes entered the maximum.
    seconds : float
        The time the calibration took.
    notes : tuple of str
        Everything unusual.
    """

    qs: np.ndarray
    level: float
    critical: np.ndarray
    variances: np.ndarray
    range_variances: np.ndarray
    total_public: bool
    n_bins: int
    method: str
    prefixes_checked: int
    seconds: float
    notes: tuple = ()


@dataclass(frozen=True, eq=False)
class QuantileIntervals:
    """Per-quantile intervals (all arrays float (len(qs),), read-only).

    Attributes
    ----------
    lower, upper : float (len(qs),)
        ``level`` confidence interval for the TRUE quantile of the data
        (``np.quantile(data, q, method="inverted_cdf")``), bin-edge aligned (module docstring).
    noise_lower, noise_upper : float (len(qs),)
        Noise-only interval of the reported (interpolated) estimate.
    critical : float (len(qs),)
        The critical value c used per quantile.
    extended : bool (len(qs),)
        The estimate fell outside [lower, upper] and was added.
    empty : bool (len(qs),)
        No bin survived the tests (the estimate's bin was returned).
    notes : tuple of str
        Everything unusual (never an exception after the noise).
    """

    qs: np.ndarray
    level: float
    lower: np.ndarray
    upper: np.ndarray
    noise_lower: np.ndarray
    noise_upper: np.ndarray
    critical: np.ndarray
    extended: np.ndarray
    empty: np.ndarray
    notes: tuple = field(default=())


def _ro(a: ArrayLike) -> np.ndarray:
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


# ============================================================================ validation
def check_quantile_intervals(mechanism: Mechanism, bin_edges: ArrayLike, qs: ArrayLike,
                             level: float = 0.95, *, total_public: bool | None = None,
                             ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]:
    """Validate the arguments of :func:`quantile_intervals` BEFORE the noise is drawn.

    mechanism : a Mechanism over K' >= K bins; bin_edges : K + 1 strictly increasing finite
    values (K >= 1); qs : probabilities in [0, 1]; level in (0, 1); total_public : None or a
    bool equal to ``mechanism.public_total``. Returns (edges, qs, level); ValueError otherwise.
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    try:
        e = np.asarray(bin_edges, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("bin_edges must be a 1-D array of numbers") from None
    if e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
        raise ValueError("bin_edges must hold K + 1 >= 2 finite, strictly increasing values")
    k = e.size - 1
    if mechanism.n_bins < k:
        raise ValueError(f"the mechanism has {mechanism.n_bins} bins, fewer than the K = {k} "
                         "bins of bin_edges")
    if total_public is not None:
        if not isinstance(total_public, (bool, np.bool_)):
            raise ValueError(f"total_public must be a bool, got {total_public!r}")
        if bool(total_public) != mechanism.public_total:
            raise ValueError(f"total_public={bool(total_public)} but the mechanism has "
                             f"public_total={mechanism.public_total}")
    return e, _queries.check_probabilities(qs), _queries.check_level(level)


# ============================================================================ noise model
def _prefix_weights(mechanism: Mechanism, bs: np.ndarray) -> np.ndarray:
    """Rows r_b of the raw-CDF estimator's noise map: e_b = r_b . z (shape (len(bs), rows)).

    r_b = V^-1 A Cov p_b on noisy rows, 0 on exact and unmeasured ones (BLUE: R = P Cov A' V^-1,
    Cov symmetric, constrained when N is public); Cov p_b from the registry's "covariance"
    task (level-uniform trees: the Haar form, O(K' h) per prefix; interval strategies whose
    every bin is a noisy row, e.g. budgets per node: one O(K') BLUE pass per prefix;
    otherwise the generic GLS solver's Cov @ p). b = -1 gives zeros."""
    kp = mechanism.n_bins
    var = mechanism.variances
    inv = np.zeros(var.size)
    noisy = (var > 0) & np.isfinite(var)
    inv[noisy] = 1.0 / var[noisy]
    bins = np.arange(kp)
    out = np.zeros((bs.size, var.size))
    for start in range(0, bs.size, _CHUNK):
        b = bs[start:start + _CHUNK]
        u = (bins[:, None] <= b[None, :]).astype(np.float64)  # (K', m): the prefixes p_b
        x = engines.run("covariance", mechanism, None, "blue", y=u)   # Cov p_b
        out[start:start + _CHUNK] = np.asarray(mechanism.released.apply(x)).T * inv
    return out


def _level_kurtosis(scale: float, noise: str, discrete: bool) -> float:
    """Excess kurtosis of one row's noise (to rank how non-normal a small term is)."""
    if noise == "gaussian":
        if not discrete or scale >= NORMAL_SIGMA:
            return 0.0
        z = np.arange(-math.ceil(12 * scale) - 2, math.ceil(12 * scale) + 3, dtype=float)
        w = np.exp(-z * z / (2 * scale * scale))
    else:
        if not discrete:
            return 3.0
        # discrete Laplace = G1 - G2, G geometric with q = exp(-1/s): cumulants add, and a
        # geometric's excess kurtosis is 6 + (1 - q)^2 / q, so the difference's is
        # 3 + (1 - q)^2 / (2 q) -- closed form, O(1) at any scale (a direct sum over
        # |z| <= 60 s allocated petabytes at eps = 1e-12)
        q = math.exp(-1.0 / scale)
        return 3.0 + (-math.expm1(-1.0 / scale)) ** 2 / (2.0 * q) if q > 0 else math.inf
    w = w / w.sum()
    m2 = float(np.sum(w * z ** 2))
    m4 = float(np.sum(w * z ** 4))
    return m4 / (m2 * m2) - 3.0 if m2 > 0 else 0.0


_TABLE = 8192  # points of a tabulated periodic characteristic function on [0, pi]


def _dgauss_table(sigma: float) -> np.ndarray:
    """log of the discrete Gaussian's characteristic function on [0, pi] (it is even and
    2 pi periodic): theta(u) / theta(0), theta(u) = sum_z exp(-z^2 / 2 s^2) cos(u z), by the
    direct sum over |z| <= 12 s + 2 (s < 1) or its Poisson-summed form
    sum_{|k| <= 3} exp(-s^2 (u - 2 pi k)^2 / 2) (s >= 1); the neglected terms are < e^-70."""
    u = np.linspace(0.0, np.pi, _TABLE + 1)
    if sigma < 1.0:
        z = np.arange(0, math.ceil(12 * sigma) + 3, dtype=float)
        w = np.exp(-z * z / (2 * sigma * sigma)) * np.where(z == 0, 1.0, 2.0)
        val = np.cos(np.outer(u, z)) @ w / w.sum()
    else:
        kk = np.arange(-3, 4, dtype=float) * 2 * np.pi
        val = (np.exp(-0.5 * sigma * sigma * (u[:, None] - kk) ** 2).sum(axis=1)
               / np.exp(-0.5 * sigma * sigma * kk ** 2).sum())
    return np.log(np.maximum(val, 1e-300))


def _log_cf(u: np.ndarray, scale: float, noise: str, discrete: bool,
            table: npt.NDArray[np.float64] | None = None) -> np.ndarray:
    """log of the characteristic function of one row's noise (scale > 0) at u."""
    if noise == "laplace":
        if discrete:
            p = math.exp(-1.0 / scale)
            return -np.log1p((4.0 * p / (1.0 - p) ** 2) * np.sin(u / 2) ** 2)
        return -np.log1p((scale * u) ** 2)
    if not discrete or scale >= NORMAL_SIGMA:
        return -0.5 * (scale * u) ** 2
    pos = np.abs(np.remainder(u + np.pi, 2 * np.pi) - np.pi) * (_TABLE / np.pi)  # even, 2 pi
    i = np.minimum(pos.astype(np.intp), _TABLE - 1)                            # periodic
    frac = pos - i
    if table is None:
        raise ValueError("table: the discrete Gaussian needs its table below NORMAL_SIGMA")
    return table[i] + frac * (table[i + 1] - table[i])  # linear interpolation, uniform grid


def _tail_critical(a: np.ndarray, scale: np.ndarray, row_var: np.ndarray, kurt: np.ndarray,
                   noise: str, discrete: bool, alpha: float,
                   tables: dict[float, npt.NDArray[np.float64]] | None = None) -> float:
    """c <= (smallest such c) + _GRID with P(S > c) <= alpha / 2, S = sum_r a_r z_r / sd(S),
    z_r independent with scales ``scale`` and variances ``row_var``, by Gil-Pelaez inversion
    (module docstring)."""
    share = a * a * row_var
    total = float(share.sum())
    if not total > 0:
        return 0.0
    a = a / math.sqrt(total)
    share = share / total
    rank = share * np.maximum(1.0, kurt / 3.0)
    keep = np.flatnonzero(rank >= _KEEP_SHARE)  # O(rows); few survive
    if keep.size > _MAX_TERMS:
        keep = keep[np.argsort(rank[keep])[::-1][:_MAX_TERMS]]
    rest = max(1.0 - float(share[keep].sum()), 0.0)
    eta2 = max(_MIN_SMOOTH ** 2 - rest, 0.0)
    shift = _SMOOTH_K * math.sqrt(eta2)
    target = alpha / 2 - (0.5 * math.erfc(_SMOOTH_K / math.sqrt(2)) if eta2 > 0 else 0.0)
    sig2 = rest + eta2
    t_max = math.sqrt(2 * _ENVELOPE / sig2)
    t = np.arange(1, int(t_max / _STEP) + 2) * _STEP
    logphi = -0.5 * sig2 * t * t
    for sv in np.unique(scale[keep]):  # rows of one level share a law
        rows = keep[scale[keep] == sv]
        table = tables.get(float(sv)) if tables else None
        for j in range(0, rows.size, 64):  # blocks of (64, n_t)
            idx = rows[j:j + 64]
            logphi = logphi + _log_cf(a[idx, None] * t[None, :], float(sv), noise, discrete,
                                      table).sum(axis=0)
    g = np.exp(logphi) / t

    def tail(x: ArrayLike) -> npt.NDArray[np.float64]:
        x = np.atleast_1d(np.asarray(x, dtype=float))
        integral = _STEP * (0.5 * x + np.sin(np.outer(x, t)) @ g)  # trapezoid, f(0) = x
        return 0.5 - integral / np.pi

    # bracket by doubling, then bisect to the grid step; the tail is non-increasing in x
    lo, hi = 0.0, 1.0
    while tail(hi)[0] > target and hi < 1e4:
        lo, hi = hi, 2.0 * hi
    while hi - lo > _GRID:
        mid = 0.5 * (lo + hi)
        if tail(mid)[0] > target:
            lo = mid
        else:
            hi = mid
    c = hi
    return float(c + shift)


def _signed_digit_weight(widths: ArrayLike, n: npt.NDArray[np.int64],
                         root_free: bool) -> npt.NDArray[np.float64]:
    """Fewest tree nodes (with signs) summing to n: min sum |d_l| over n = sum_l d_l w_l,
    w_0 = K' the root (free when N is public). DP over the carry, leaves up; O(len(n) h)."""
    width_list = [int(w) for w in np.asarray(widths).ravel()]
    f0 = np.zeros(n.size)
    f1 = np.full(n.size, np.inf)
    for lvl in range(len(width_list) - 1, 0, -1):
        w, k = width_list[lvl], width_list[lvl - 1] // width_list[lvl]
        digit = (n // w) % k
        x0, x1 = digit, digit + 1  # value at this level with carry in 0 / 1
        n0 = np.minimum(f0 + x0, f1 + x1)                 # digit x, no carry out
        n1 = np.minimum(f0 + (k - x0), f1 + (k - x1))     # digit x - k, carry out
        f0, f1 = n0, n1
    top = n // width_list[0]
    root = (lambda v: 0.0 * v) if root_free else (lambda v: v.astype(float))
    return np.minimum(f0 + root(top), f1 + root(top + 1))


def _tree_served(mechanism: Mechanism) -> bool:
    """Whether the level-uniform tree engine serves the mechanism (its digit structure then
    picks the prefixes to check, and its parameters key the calibration cache)."""
    return engines.select("estimate", mechanism).name == "tree"


def _checked_prefixes(mechanism: Mechanism, k: int) -> np.ndarray:
    """The prefixes b whose critical values enter the maximum (module docstring)."""
    if k <= _ALL_PREFIXES or (not _tree_served(mechanism) and k <= 4 * _ALL_PREFIXES):
        return np.arange(-1, k)
    rng = np.random.default_rng(20240917)  # fixed: a public, data-independent choice
    rand = rng.choice(k, size=min(_N_RANDOM, k), replace=False)
    ends = np.concatenate([np.arange(-1, _ENDS), np.arange(k - _ENDS, k)])
    if not _tree_served(mechanism):
        b = np.concatenate([np.linspace(0, k - 1, _MAX_HEAVY).round().astype(int), rand, ends])
        return np.unique(b[(b >= -1) & (b < k)])
    tree = mechanism.released
    assert isinstance(tree, LevelUniformTree)  # what the tree engine serves (_tree_served)
    kp = mechanism.n_bins
    n = np.arange(1, k + 1)  # the prefix [0, b] holds n = b + 1 bins
    weight = np.minimum(
        _signed_digit_weight(tree.level_widths, n, mechanism.public_total),
        np.minimum(  # the complements [b+1, K'-1] (mirror image) and [b+1, K-1]
            _signed_digit_weight(tree.level_widths, kp - n, True),
            _signed_digit_weight(tree.level_widths, k - n, True)))
    heavy = np.flatnonzero(weight <= 1)
    two = np.flatnonzero(weight == 2)
    room = max(_MAX_HEAVY - heavy.size, 0)
    if two.size > room:
        two = two[np.unique(np.linspace(0, two.size - 1, room).round().astype(int))] \
            if room else two[:0]
    b = np.concatenate([heavy, two, rand, ends])
    return np.unique(b[(b >= -1) & (b < k)])


# ============================================================================ calibration
_CAL_CACHE: dict[Hashable, dict[Hashable, QuantileCalibration]] = {}
_CAL_WEAK: "weakref.WeakKeyDictionary[Mechanism, dict[Hashable, QuantileCalibration]]" = \
    weakref.WeakKeyDictionary()


def _cache_key(mechanism: Mechanism) -> Hashable | None:
    """Parameters that determine the noise law and the estimator (trees), else None."""
    tree = mechanism.released
    if not _tree_served(mechanism) or not isinstance(tree, LevelUniformTree):
        return None
    return (tree.branching, mechanism.noise, mechanism.discrete,
            mechanism.public_total,
            tuple(sorted((int(k), float(v)) for k, v in mechanism.level_scales.items())))


def calibrate_quantile_tests(mechanism: Mechanism, n_bins: int, qs: ArrayLike,
                             level: float = 0.95,
                             ) -> QuantileCalibration:
    """Critical values and variances for :func:`quantile_intervals` (data-independent).

    Parameters: the mechanism (K' >= ``n_bins`` bins; the BLUE is the estimator), K =
    ``n_bins``, the quantile levels ``qs`` and ``level``. Raises ValueError on bad input; run
    it before the noise. Cached by the mechanism's parameters. Cost: module docstring."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if isinstance(n_bins, (bool, np.bool_)) or not isinstance(n_bins, (int, np.integer)) \
            or not 1 <= n_bins <= mechanism.n_bins:
        raise ValueError(f"n_bins must be an integer in [1, {mechanism.n_bins}], got {n_bins!r}")
    q = _queries.check_probabilities(qs)
    level = _queries.check_level(level)
    key = (int(n_bins), tuple(q.tolist()), level)
    mkey = _cache_key(mechanism)
    store = _CAL_CACHE.setdefault(mkey, {}) if mkey is not None else \
        _CAL_WEAK.setdefault(mechanism, {})
    if key in store:
        return store[key]
    cal = _calibrate(mechanism, int(n_bins), q, level)
    if mkey is not None and len(_CAL_CACHE) > _CACHE_SIZE:
        _CAL_CACHE.pop(next(iter(_CAL_CACHE)))
    store[key] = cal
    return cal


def _calibrate(mechanism: Mechanism, k: int, q: np.ndarray, level: float) -> QuantileCalibration:
    t0 = time.perf_counter()
    alpha = 1.0 - level
    public = mechanism.public_total
    notes = []
    se = _queries.cdf_standard_errors(mechanism)[:k]
    var = np.concatenate([[0.0], se ** 2])  # b = -1..K-1
    vk = float(var[-1])
    if k > 1:
        rse = _queries.range_standard_errors(mechanism, np.arange(1, k), np.full(k - 1, k - 1))
        rvar = np.concatenate([[vk], rse ** 2, [0.0]])
    else:
        rvar = np.array([vk, 0.0])
    noise, discrete = mechanism.noise, mechanism.discrete
    scales = mechanism.scales
    noisy = (mechanism.variances > 0) & np.isfinite(mechanism.variances)
    normal = noise == "gaussian" and (not discrete or float(np.min(scales[noisy],
                                                                    initial=np.inf))
                                      >= NORMAL_SIGMA)
    z = float(-ndtri(alpha / 2))
    if normal:
        crit = np.full(q.size, z)
        method, checked = "normal", 0
    else:
        bs = _checked_prefixes(mechanism, k)
        weights = _prefix_weights(mechanism, bs)[:, noisy]
        w_total = _prefix_weights(mechanism, np.array([k - 1]))[0, noisy]
        s, rv = scales[noisy], mechanism.variances[noisy]
        uniq, which = np.unique(s, return_inverse=True)  # one law per level: O(h) kurtoses
        kurt = np.array([_level_kurtosis(float(v), noise, discrete) for v in uniq])[which]
        tables = ({float(v): _dgauss_table(float(v)) for v in uniq if v < NORMAL_SIGMA}
                  if noise == "gaussian" and discrete else None)
        crit = np.empty(q.size)
        done: dict = {}
        for i, qi in enumerate(q):
            # the standardised error of Dhat_b: weights r_b - q r_{K-1} (private N, q > 0)
            qq = 0.0 if (public or qi == 0) else float(qi)
            if qq in done:
                crit[i] = done[qq]
                continue
            best = 0.0
            for j, b in enumerate(bs):
                a = weights[j] - qq * w_total
                if not np.any(a):
                    continue
                best = max(best, _tail_critical(a, s, rv, kurt, noise, discrete, alpha, tables))
            # never below the normal value: a lattice law can need less, but the gain is
            # small and this guards the near-normal case against quadrature noise
            crit[i] = done[qq] = max(best, z)
        method, checked = "characteristic function", int(bs.size)
        if checked < k + 1:
            notes.append(f"critical values: maximum over {checked} of the {k + 1} prefixes "
                         "(all few-node prefixes, the ends and a fixed random sample)")
    if alpha < 1e-4:
        notes.append(f"level {level}: the critical value relies on far tails of the noise law "
                     "(approximation: small terms as one normal)")
    return QuantileCalibration(qs=_ro(q), level=level, critical=_ro(crit), variances=_ro(var),
                               range_variances=_ro(rvar), total_public=public, n_bins=k,
                               method=method, prefixes_checked=checked,
                               seconds=time.perf_counter() - t0, notes=tuple(notes))


# ============================================================================ the intervals
def _first_crossing(edges: np.ndarray, g: np.ndarray, tol: float) -> float:
    """inf {x : g(x) >= 0} for g linear between the edges (g[j] at edges[j]); NaN if none."""
    hit = np.flatnonzero(g >= -tol)
    if hit.size == 0:
        return math.nan
    j = int(hit[0])
    if j == 0:
        return float(edges[0])
    g0, g1 = g[j - 1], g[j]
    frac = min(max(-g0 / (g1 - g0), 0.0), 1.0) if g1 > g0 else 1.0
    return float(edges[j - 1] + frac * (edges[j] - edges[j - 1]))


def _last_crossing(edges: np.ndarray, g: np.ndarray, tol: float) -> float:
    """sup {x : g(x) <= 0} for g linear between the edges; NaN if none."""
    hit = np.flatnonzero(g <= tol)
    if hit.size == 0:
        return math.nan
    j = int(hit[-1])
    if j == g.size - 1:
        return float(edges[-1])
    g0, g1 = g[j], g[j + 1]
    frac = min(max(-g0 / (g1 - g0), 0.0), 1.0) if g1 > g0 else 0.0
    return float(edges[j] + frac * (edges[j + 1] - edges[j]))


def _safe_array(x: object, name: str, notes: list[str]) -> npt.NDArray[np.float64] | None:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        notes.append(f"{name} is not numeric")
        return None
    return a


def quantile_intervals(mechanism: Mechanism, raw: ArrayLike, bin_edges: ArrayLike,
                       qs: ArrayLike, *, total_public: bool, total: float | None = None,
                       level: float = 0.95, estimates: ArrayLike | None = None,
                       calibration: QuantileCalibration | None = None) -> QuantileIntervals:
    """Confidence intervals for the true quantiles of the data (module docstring).

    Parameters
    ----------
    mechanism : Mechanism
        The mechanism that produced the release (K' >= K bins, BLUE estimator).
    raw : float (K,)
        The raw (unprojected) cumulative-count estimate, first K bins.
    bin_edges : float (K + 1,)
        The bins' edges (value units).
    qs : float (len(qs),)
        Probabilities in [0, 1].
    total_public : bool
        Whether N is public (swap neighbours); then ``total`` is N.
    total : float, optional
        The public N (read from the exact total row); ignored when N is private. If
        missing with N public, round(raw[K-1]) is used (noted).
    level : float
        The coverage (in (0, 1)).
    estimates : float (len(qs),), optional
        Reported point quantiles (NaN allowed): both intervals are widened to contain them.
    calibration : QuantileCalibration, optional
        The result of :func:`calibrate_quantile_tests` for (mechanism, K, qs, level) --
        compute it before the noise; computed here if missing.

    Returns
    -------
    QuantileIntervals
        The intervals, with a line in ``notes`` for anything unusual.

    Notes
    -----
    Never raises: validate the arguments first with :func:`check_quantile_intervals`;
    anything unusual after the noise gives NaN or a wider (still valid) interval and a line
    in ``notes``. O(K) per quantile.
    """
    notes: list[str] = []
    with np.errstate(all="ignore"):
        return _intervals(mechanism, raw, bin_edges, qs, total_public, total, level,
                          estimates, calibration, notes)


def _intervals(mechanism: Mechanism, raw: ArrayLike, bin_edges: ArrayLike, qs: ArrayLike,
               total_public: bool, total: float | None, level: float,
               estimates: ArrayLike | None, calibration: QuantileCalibration | None,
               notes: list[str]) -> QuantileIntervals:
    q = _safe_array(qs, "qs", notes)
    q = np.atleast_1d(q).ravel() if q is not None else np.zeros(0)
    nq = q.size
    nan = np.full(nq, np.nan)
    false = np.zeros(nq, dtype=bool)
    lvl = float(level) if isinstance(level, Real) else math.nan

    def give_up(msg: str, lo: ArrayLike = nan, up: ArrayLike = nan,
                crit: ArrayLike = nan) -> QuantileIntervals:
        notes.append(msg)
        return QuantileIntervals(qs=_ro(q), level=lvl, lower=_ro(lo), upper=_ro(up),
                                 noise_lower=_ro(lo), noise_upper=_ro(up), critical=_ro(crit),
                                 extended=_ro(false), empty=_ro(false), notes=tuple(notes))

    edges = _safe_array(bin_edges, "bin_edges", notes)
    if edges is None or edges.ndim != 1 or edges.size < 2 or not np.all(np.isfinite(edges)) \
            or np.any(np.diff(edges) <= 0):
        return give_up("bin_edges invalid (run check_quantile_intervals before the noise)")
    k = edges.size - 1
    if not np.all(np.isfinite(q)) or np.any((q < 0) | (q > 1)) or not 0 < lvl < 1:
        return give_up("qs or level invalid (run check_quantile_intervals before the noise)")
    r = _safe_array(raw, "raw", notes)
    if r is None or r.shape != (k,):
        return give_up(f"raw must have shape ({k},) (the first K raw cumulative counts)")
    if not np.all(np.isfinite(r)):
        return give_up("raw has NaN or infinite entries: no interval")
    est = None
    if estimates is not None:
        est = _safe_array(estimates, "estimates", notes)
        if est is not None:
            est = np.atleast_1d(est).ravel()
            if est.shape != (nq,):
                notes.append(f"estimates has {est.size} entries for {nq} quantiles: ignored")
                est = None
    full_lo, full_up = np.full(nq, edges[0]), np.full(nq, edges[-1])

    # ---------------------------------------------------------------- calibration
    cal = calibration
    if cal is not None and not (isinstance(cal, QuantileCalibration) and cal.n_bins == k
                                and cal.level == lvl and np.array_equal(cal.qs, q)):
        notes.append("calibration does not match (K, qs, level): recomputed")
        cal = None
    if cal is None:
        try:
            cal = calibrate_quantile_tests(mechanism, k, q, lvl)
        except (ValueError, np.linalg.LinAlgError, MemoryError, RuntimeError) as exc:
            # the trivial interval [e_0, e_K] always holds the true quantile
            return give_up(f"calibration failed ({exc}): the trivial interval [e_0, e_K]",
                           full_lo, full_up)
    notes.extend(cal.notes)
    public = cal.total_public
    if bool(total_public) != public:
        notes.append(f"total_public={bool(total_public)} disagrees with the mechanism "
                     f"(public_total={public}); the mechanism's is used")
    crit = np.asarray(cal.critical, dtype=float)
    var, rvar = np.asarray(cal.variances), np.asarray(cal.range_variances)
    vk = float(var[-1])
    scale = 1.0 + float(np.max(np.abs(r)))
    tol = 1e-9 * scale  # rounding of the estimator; the tests are made conservative by it
    raw_ext = np.concatenate([[0.0], r])  # index j <-> prefix b = j - 1

    n_pub = math.nan
    if public:
        t = total
        if isinstance(t, Real) and not isinstance(t, (bool, np.bool_)) and math.isfinite(t) \
                and float(t) >= 0:
            n_pub = float(t)
        else:
            n_pub = float(max(0.0, round(float(r[-1]))))
            notes.append(f"N is public but total was not given: N = round(raw[K-1]) = "
                         f"{n_pub:g} used")
        if n_pub < 1:
            return give_up("N = 0: the data are empty and have no quantiles")
    else:
        if r[-1] < 1:
            notes.append(f"the estimated N is {r[-1]:.3g} < 1: the data may be empty; the "
                         "intervals assume N >= 1")

    lower, upper = np.empty(nq), np.empty(nq)
    nlo, nup = np.empty(nq), np.empty(nq)
    extended, empty = np.zeros(nq, dtype=bool), np.zeros(nq, dtype=bool)
    for i in range(nq):  # O(K) each, vectorised over the bins
        qi, c = float(q[i]), float(crit[i])
        if public:
            m = max(math.ceil(qi * n_pub), 1)  # numpy's inverted_cdf order statistic
            dhat, sd = raw_ext, np.sqrt(var)
            thr1, thr2 = float(m), float(m - 1)
            cont = raw_ext - qi * n_pub  # continuous target q N (interpolated rule)
        elif qi == 0.0:
            dhat, sd = raw_ext, np.sqrt(var)
            thr1, thr2 = 1.0, 0.0
            cont = raw_ext
        else:
            dhat = raw_ext - qi * r[-1]
            sd = np.sqrt(np.maximum((1 - qi) * var + qi * rvar - qi * (1 - qi) * vk, 0.0))
            thr1 = thr2 = 0.0
            cont = dhat
        up_band, lo_band = dhat + c * sd, dhat - c * sd
        reject1 = up_band[1:] < thr1 - tol      # (1) at b = 0..K-1: C_b < m
        reject2 = lo_band[:-1] > thr2 + tol     # (2) at b: C_{b-1} >= m
        kept = np.flatnonzero(~reject1 & ~reject2)
        e_i = float(est[i]) if est is not None and np.isfinite(est[i]) else math.nan
        if kept.size:
            lower[i], upper[i] = edges[kept[0]], edges[kept[-1] + 1]
        else:
            empty[i] = True
            if math.isfinite(e_i):
                b = int(np.clip(np.searchsorted(edges, e_i, side="right") - 1, 0, k - 1))
            else:  # the first bin whose estimate reaches the target
                hit = np.flatnonzero(dhat[1:] >= thr1)
                b = int(hit[0]) if hit.size else k - 1
            lower[i], upper[i] = edges[b], edges[b + 1]
        # noise-only interval: the interpolated rule's quantile, continuous target
        if qi == 0.0:
            nlo[i] = nup[i] = edges[0]
        else:
            nlo[i] = _first_crossing(edges, cont + c * sd, tol)
            nup[i] = _last_crossing(edges, cont - c * sd, tol)
            if not (math.isfinite(nlo[i]) and math.isfinite(nup[i])) or nlo[i] > nup[i]:
                notes.append(f"q = {qi:g}: the noise-only test rejects every point (extreme "
                             "noise); the estimate alone is reported")
                nlo[i] = nup[i] = e_i if math.isfinite(e_i) else math.nan
        if math.isfinite(e_i):
            if e_i < lower[i] or e_i > upper[i]:
                extended[i] = True
                lower[i], upper[i] = min(lower[i], e_i), max(upper[i], e_i)
            nlo[i] = e_i if not math.isfinite(nlo[i]) else min(nlo[i], e_i)
            nup[i] = e_i if not math.isfinite(nup[i]) else max(nup[i], e_i)
    if empty.any():
        notes.append(f"{int(empty.sum())} quantile(s): every bin rejected (probability <= "
                     f"{1 - lvl:.3g}); the estimate's bin is reported")
    if extended.any():
        notes.append(f"{int(extended.sum())} quantile(s): the estimate lay outside the "
                     "interval, which was widened to contain it")
    return QuantileIntervals(qs=_ro(q), level=lvl, lower=_ro(lower), upper=_ro(upper),
                             noise_lower=_ro(nlo), noise_upper=_ro(nup), critical=_ro(crit),
                             extended=_ro(extended), empty=_ro(empty), notes=tuple(notes))
