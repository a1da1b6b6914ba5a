"""A mechanism: a strategy with calibrated noise on every row (y = A x + z)."""

from __future__ import annotations

import math
import weakref

from typing import TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .participation import Participation, Sensitivity, as_participation, max_linear
from .privacy import (
    calibrate,
    check_noise,
    infer_noise,
    loss_from_sensitivity,
    norm_of,
    resolve_budget,
    resolve_public,
    split_budget,
)
from .limits import MECHANISM_BYTES_PER_ROW, TINY, check_memory, out_of_range
from .strategies import IntervalStrategy, Strategy
from .strategies.base import check_neighbours
from .validation import check_bool

#: what an ``rng`` argument may be: a numpy Generator, an int seed, or None (fresh entropy)
RNG: TypeAlias = "np.random.Generator | int | None"

__all__ = ["Mechanism", "check_histogram", "as_generator", "discrete_variance",
           "discrete_variances", "row_sensitivities"]

# Discrete Gaussian: beyond this sigma its variance equals sigma^2 to double precision (the
# Poisson-summation correction is of order sigma^2 * 8 pi^2 sigma^2 exp(-2 pi^2 sigma^2)).
_DGAUSS_EXACT_SIGMA = 4.0
# simulation samplers: geometric by inversion below this success probability; discrete
# Gaussian by rounding a normal above this sigma (its rejection step overflows near 1e154)
_GEOMETRIC_INVERSION_P = 2.0**-30
_DGAUSS_ROUNDED_SIGMA = 2.0**30
# Mechanism.normalised rescales when the largest noise variance is beyond 4^(+-32)
_NORMAL_HALF_EXPONENT = 32
# Mechanism.normalised, per mechanism (weak: dropped with the mechanism)
_NORMALISED: "weakref.WeakKeyDictionary[Mechanism, tuple[Mechanism, float] | None]" = \
    weakref.WeakKeyDictionary()


def discrete_variance(scale: float, noise: str) -> float:
    """Variance of the integer-valued noise of scale ``scale`` used by real releases.

    * discrete Laplace, P(z) proportional to exp(-``|z|`` / s) on the integers ([GRS12]; OpenDP's
      ``make_laplace`` on integers): with q = exp(-1/s), Var = 2 q / (1 - q)^2 (slightly
      below the continuous 2 s^2; -> 2 s^2 as s grows).
    * discrete Gaussian, P(z) proportional to exp(-z^2 / (2 sigma^2)) ([CKS20]; OpenDP's
      ``make_gaussian`` on integers): Var = sum z^2 p(z) / sum p(z), summed exactly over
      ``|z|`` <= 40 sigma + 2 (the tail beyond is below 1e-300); below sigma^2 ([CKS20]), by
      a gap of order sigma^4 exp(-2 pi^2 sigma^2) (Poisson summation): visible for
      sigma < ~1, below double precision for sigma >= 4 (then sigma^2 is returned).

    ``scale`` 0 gives 0 (exact row), ``inf`` gives ``inf`` (unmeasured row)."""
    noise = check_noise(noise)
    s = float(scale)
    if s == 0.0 or math.isinf(s):
        return s
    if not s > 0:
        raise ValueError(f"scale must be >= 0, got {scale!r}")
    if noise == "laplace":
        if s > 1e6:  # 2q/(1-q)^2 = 1/(2 sinh^2(1/(2s))) = 2 s^2 - 1/6 + O(1/s^2)
            return 2.0 * s * s - 1.0 / 6.0
        q = math.exp(-1.0 / s)
        return 2.0 * q / (-math.expm1(-1.0 / s)) ** 2
    if s >= _DGAUSS_EXACT_SIGMA:
        return s * s
    z = np.arange(-math.ceil(40 * s) - 2, math.ceil(40 * s) + 3, dtype=float)
    w = np.exp(-z * z / (2.0 * s * s))
    return float(np.sum(z * z * w) / np.sum(w))


def discrete_variances(scales: ArrayLike, noise: str) -> npt.NDArray[np.float64]:
    """:func:`discrete_variance` for an array of scales (any shape), vectorised: Laplace in
    closed form, Gaussian by one exact sum per distinct scale below 4 (sigma^2 above)."""
    noise = check_noise(noise)
    s = np.asarray(scales, dtype=float)
    out = np.where(np.isinf(s), np.inf, 0.0)
    pos = (s > 0) & np.isfinite(s)
    sp_ = s[pos]
    if noise == "laplace":
        with np.errstate(over="ignore"):
            q = np.exp(-1.0 / sp_)
            v = np.where(sp_ > 1e6, 2.0 * sp_ * sp_ - 1.0 / 6.0,
                         2.0 * q / np.expm1(-1.0 / sp_) ** 2)
    else:
        v = sp_ * sp_
        small = sp_ < _DGAUSS_EXACT_SIGMA
        if np.any(small):
            u, inv = np.unique(sp_[small], return_inverse=True)
            v[small] = np.array([discrete_variance(x, noise) for x in u])[inv]
    out[pos] = v
    return out


def _check_scale(scale: float, sensitivity: float, budget: float, noise: str,
                 total: float) -> None:
    """ValueError when a level of the equal split (budget > 0, sensitivity > 0) gets no
    finite noise scale: the total is so small that D / b (Laplace) or D / sqrt(2 b)
    (Gaussian) overflows, and the level would pass for an unmeasured one."""
    if budget > 0 and sensitivity > 0 and not 0 < scale < math.inf:
        raise out_of_range(noise, total, "the noise scale",
                           _log10_scale(sensitivity, math.log10(budget), noise))


def _sensitivity(released: Strategy, weights: np.ndarray, neighbours: str, p: int,
                 part: Participation) -> Sensitivity:
    """The sensitivity of diag(weights) A: under the neighbour model for one participation,
    else under the schema (``Strategy.participation_sensitivity``; add/remove only)."""
    if part.is_single:
        return Sensitivity(released.sensitivity(weights, neighbours, p), True,
                           "largest column norm")
    return released.participation_sensitivity(weights, part, p)


def _recomputed_loss(released: Strategy, weights: np.ndarray, neighbours: str,
                     noise: str, part: Participation) -> tuple[float, Sensitivity]:
    """The privacy loss of the scaled strategy diag(weights) A (eps, or rho = D2^2 / 2;
    ``privacy.loss_from_sensitivity``) and the sensitivity it came from (exact or a
    certified upper bound). The loss is homogeneous (degree 1 for eps, 2 for rho) in the
    weights, so weights whose squares would leave double range (beyond 1e+-150, extreme
    budgets) are divided by their largest and the loss multiplied back."""
    top = float(np.max(weights, initial=0.0))
    p = norm_of(noise)
    if not (top > 1e150 or 0 < top < 1e-150):
        sens = _sensitivity(released, weights, neighbours, p, part)
        return loss_from_sensitivity(sens.value, noise), sens
    sens = _sensitivity(released, weights / top, neighbours, p, part)
    loss = loss_from_sensitivity(sens.value, noise)
    return (loss * top if noise == "laplace" else loss * top * top), sens


def _log10_variance(scale: float, noise: str, discrete: bool) -> float:
    """log10 of the noise variance at ``scale`` without overflow or underflow: 2 s^2 or
    s^2, and for tiny discrete scales 2 exp(-1/s) (Laplace) or 2 exp(-1/(2 s^2)) (Gaussian),
    the leading terms of the discrete variances."""
    lg2, ln10 = math.log10(2.0), math.log(10.0)
    if discrete and scale < 1.0:
        return lg2 - (1.0 / scale if noise == "laplace" else 0.5 / scale / scale) / ln10
    return 2.0 * math.log10(scale) + (lg2 if noise == "laplace" else 0.0)


def _log10_scale(sensitivity: float, log10_budget: float, noise: str) -> float:
    """log10 of D / b (Laplace) or D / sqrt(2 b) (Gaussian), from log10 b (no overflow)."""
    if noise == "laplace":
        return math.log10(sensitivity) - log10_budget
    return math.log10(sensitivity) - 0.5 * (math.log10(2.0) + log10_budget)


def row_sensitivities(strategy: Strategy, neighbours: str,
                      participation: Participation | None = None) -> np.ndarray:
    """Each row's own sensitivity (shape (rows,)): the largest change of its answer when one
    record is added / removed (max_j ``|a_rj|``) or moved (max_(i, j) ``|a_ri - a_rj|``). The same
    under l1 and l2 (one row). Interval strategies in closed form (1, or 0 for a total row
    under swap); others from the sparse matrix. Under a participation schema (add/remove):
    max over patterns P of sum_(j in P) ``|a_rj|`` (:func:`participation_row_sensitivities`)."""
    neighbours = check_neighbours(neighbours)
    part = as_participation(participation)
    if not part.is_single:
        return participation_row_sensitivities(strategy, part)
    if isinstance(strategy, IntervalStrategy):
        if neighbours == "add_remove":
            return np.ones(strategy.n_rows)
        if strategy.n_bins == 1:
            return np.zeros(strategy.n_rows)
        return np.where(strategy.total_row_mask(), 0.0, 1.0)
    a = strategy.matrix.tocsr()
    hi = np.asarray(a.max(axis=1).todense()).ravel()
    lo = np.asarray(a.min(axis=1).todense()).ravel()  # implicit zeros count (scipy)
    if neighbours == "add_remove":
        return np.maximum(np.abs(hi), np.abs(lo))
    full = np.diff(a.indptr) == strategy.n_bins
    hi = np.where(full, hi, np.maximum(hi, 0.0))
    lo = np.where(full, lo, np.minimum(lo, 0.0))
    return hi - lo if strategy.n_bins > 1 else np.zeros(strategy.n_rows)


# participation_row_sensitivities: dense rows up to this many entries
_DENSE_ROW_ENTRIES = 1 << 24


def participation_row_sensitivities(strategy: Strategy, part: Participation) -> np.ndarray:
    """Each row's own sensitivity under a participation schema (shape (rows,)): max over
    patterns P of sum_(j in P) ``|a_rj|`` (one row's answer changes by at most that; the same
    under l1 and l2). Rows that are one interval of equal magnitudes (trees, prefix sums) in
    closed form: magnitude x min(k, ceil(length / b)) (the most participations an interval
    holds, for fixed-epoch and min-sep alike); other rows by the dynamic programme over the
    dense rows while m n <= 2^24, else ValueError."""
    part.check_steps(strategy.n_bins)
    a = strategy.matrix.tocsr()
    nnz = np.diff(a.indptr)
    rows = np.flatnonzero(nnz > 0)
    out = np.zeros(a.shape[0])
    if not rows.size:
        return out
    absd = np.abs(a.data)
    hi = np.maximum.reduceat(absd, a.indptr[rows])
    lo = np.minimum.reduceat(absd, a.indptr[rows])
    first = np.minimum.reduceat(a.indices, a.indptr[rows])
    last = np.maximum.reduceat(a.indices, a.indptr[rows])
    length = last - first + 1
    simple = (hi == lo) & (length == nnz[rows])
    kmax = part.max_participations(strategy.n_bins)
    out[rows[simple]] = hi[simple] * np.minimum(kmax, -(-length[simple] // part.b))
    other = rows[~simple]
    if other.size:
        if other.size * strategy.n_bins > _DENSE_ROW_ENTRIES:
            raise ValueError(f"{other.size} rows are not intervals of equal entries: their "
                             "participation sensitivities need a dense pass over "
                             f"{other.size} x {strategy.n_bins} entries (limit 2^24)")
        out[other] = max_linear(np.abs(a[other].toarray()), part)
    return out


def _discrete_laplace(rng: np.random.Generator, scale: npt.NDArray[np.float64],
                      shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """Discrete Laplace draws (scale s per entry, s finite >= 0): G1 - G2 with G_i i.i.d.
    geometric(1 - exp(-1/s)) (failures before the first success); s = 0 gives 0. Simulation
    only (numpy Generator).

    numpy's geometric sampler works in int64 and saturates when 1/p approaches 2^63 (every draw
    equal, so G1 - G2 = 0: no noise at tiny eps). For p < 2^-30 the geometric is drawn by
    inversion in floating point instead, floor(log U / log(1 - p)) with U uniform on (0, 1]
    (exactly geometric up to rounding; relative error ~1e-16, irrelevant for a simulation)."""
    scale = np.broadcast_to(np.asarray(scale, dtype=float), shape)
    with np.errstate(divide="ignore"):
        p = np.where(scale > 0, -np.expm1(-1.0 / np.where(scale > 0, scale, 1.0)), 1.0)
    tiny = p < _GEOMETRIC_INVERSION_P
    if not tiny.any():
        return (rng.geometric(p, size=shape) - rng.geometric(p, size=shape)).astype(float)
    safe_p = np.where(tiny, 0.5, p)
    g = (rng.geometric(safe_p, size=shape) - rng.geometric(safe_p, size=shape)).astype(float)
    log_q = np.log1p(-p[tiny])  # < 0, tiny in magnitude: -p
    u1, u2 = 1.0 - rng.random((2, int(tiny.sum())))  # uniform on (0, 1]
    g[tiny] = np.floor(np.log(u1) / log_q) - np.floor(np.log(u2) / log_q)
    return g


def _discrete_gaussian(rng: np.random.Generator, sigma: npt.NDArray[np.float64],
                       shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """Discrete Gaussian draws by [CKS20] Algorithm 3 (rejection from a discrete Laplace of
    scale t = floor(sigma) + 1), vectorised over rejection rounds (acceptance >= ~0.5 per
    round). sigma = 0 gives 0. Simulation only (numpy Generator)."""
    sigma = np.broadcast_to(sigma, shape)
    out = np.zeros(shape)
    todo = np.flatnonzero(sigma.ravel() > 0)
    flat_sigma = sigma.ravel()
    flat = out.ravel()
    huge = todo[flat_sigma[todo] > _DGAUSS_ROUNDED_SIGMA]
    if huge.size:  # rounding a normal: total variation distance below 1e-300 at this sigma
        flat[huge] = np.rint(flat_sigma[huge] * rng.standard_normal(huge.size))
        todo = todo[flat_sigma[todo] <= _DGAUSS_ROUNDED_SIGMA]
    while todo.size:
        s = flat_sigma[todo]
        t = np.floor(s) + 1.0
        y = _discrete_laplace(rng, t, todo.shape)
        accept = rng.random(todo.size) < np.exp(-(np.abs(y) - s * s / t) ** 2 / (2 * s * s))
        flat[todo[accept]] = y[accept]
        todo = todo[~accept]
    return flat.reshape(shape)


def as_generator(rng: RNG) -> np.random.Generator:
    """A numpy Generator from a Generator, an int seed or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    raise ValueError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


def check_histogram(histogram: ArrayLike, n_bins: int) -> np.ndarray:
    """Validate a histogram: shape (n_bins,), finite, non-negative integer counts."""
    try:
        h = np.asarray(histogram)
    except Exception:  # noqa: BLE001 - any conversion failure is bad input
        raise ValueError("histogram must be an array of counts") from None
    if h.ndim != 1 or h.size != n_bins:
        raise ValueError(f"histogram must have shape ({n_bins},), got {h.shape}")
    if h.dtype == bool or not (np.issubdtype(h.dtype, np.integer)
                               or np.issubdtype(h.dtype, np.floating)):
        raise ValueError(f"histogram must hold numeric counts, got dtype {h.dtype}")
    if np.issubdtype(h.dtype, np.floating):
        if not np.all(np.isfinite(h)):
            raise ValueError("histogram has NaN or infinite counts")
        if np.any(h != np.round(h)):
            raise ValueError("histogram counts must be integers")
    if np.any(h < 0):
        raise ValueError("histogram counts must be non-negative")
    if h.size and h.max() >= 2**63:
        raise ValueError("histogram counts must be below 2^63 (int64 counts)")
    return h.astype(np.int64)


class Mechanism:
    """A strategy released with calibrated Laplace (eps-DP) or Gaussian (rho-zCDP) noise.

    Parameters
    ----------
    strategy : Strategy
        The measured queries A.
    epsilon / rho : float
        Total budget: ``epsilon`` for ``noise="laplace"`` (pure eps-DP), ``rho`` for
        ``noise="gaussian"`` (rho-zCDP).
    noise : "laplace" | "gaussian", optional
        Default: Gaussian when only ``rho`` is given, Laplace otherwise.
    neighbours : "add_remove" (default) | "swap"
        add_remove: one record appears or disappears; N is private and the level-0 rows are
        a noisy level with their own budget, unless ``public_total=True``.
        swap: one record changes value, so the total N is invariant and public; rows at
        level 0 (total rows) are released exactly and take no budget (the setting of the
        level-uniform paper [RTS]: pass ``neighbours="swap"`` to reproduce it).
    public_total : bool, optional
        Default None: N is private under add_remove (protected like every other count) and
        public under swap. Under add_remove, ``True`` declares N public knowledge: level-0
        rows are released exactly and **N itself is not protected** (the guarantee holds for
        everything else, conditionally on N). Under swap N is always public (``False`` is an
        error). Whenever N is public an exact total row is appended (last row) if the
        strategy has no level-0 row, so every estimator can use it.
    level_budgets : sequence of float, optional
        One absolute budget per noisy level, in increasing level order, summing to the total
        (a level may get 0: it is then not measured). Noisy levels are all levels but the
        root when N is public. Default: equal split over the levels that depend on the data;
        a level whose rows cannot change under the neighbour model (sensitivity 0, e.g. a tree
        level with k_1 = 1 under swap) is released exactly, needs no budget and gets none by
        default (budget given to it is unused: ``.epsilon`` / ``.rho`` report the loss).

    row_budgets : array of float, shape (strategy rows,), optional
        One absolute budget per row instead of per level (budgets per node, e.g. from ``optimize.optimal_node_budgets``); exclusive with ``level_budgets``. Row r gets
        scale s_r / b_r (Laplace) or s_r / sqrt(2 b_r) (Gaussian), s_r its own sensitivity
        (the largest change of its answer under the neighbour model); b_r = 0: not
        measured. The budgets need not sum to the total: the loss of the scaled strategy is
        recomputed exactly and must not exceed it (on a tree under add/remove: every
        root-to-leaf path sums to at most the budget), else ValueError. With a public N the
        level-0 rows are exact and must get 0. The per-level dicts (``level_budgets`` ...)
        are then empty except for an exact level 0; ``row_budgets`` holds the budgets.

    discrete : bool, optional
        ``True``: the noise is integer-valued (discrete Laplace / discrete Gaussian of the same
        scale, as added by a real release's secure sampler, [CKS20]). Scales, budgets and the
        guarantee are unchanged (integer queries shifted by integers: the same privacy-loss
        bound as the continuous noise); ``.variances`` are the discrete distributions'
        (``discrete_variance``), so BLUE weights and standard errors match the noise.

    Notes
    -----
    Noise per level l: scale = Delta_l / budget_l with Delta_l the level's own sensitivity
    (l1 for Laplace, l2 for Gaussian) under the neighbour model. The loss of the whole
    mechanism is then recomputed from diag(1/scale) A (docs/math.md section 0) and reported as
    ``.epsilon`` / ``.rho``; it never exceeds the request (a ValueError is raised if it
    would). Instances are immutable.

    Limits: the per-row arrays are checked against the memory available before they are
    built (``limits.check_memory``); a total budget that is subnormal, or so small that the
    equal split's noise scale overflows, is refused (``limits.out_of_range``). Errors at
    extreme budgets are computed on :meth:`normalised`.
    """

    def __init__(self, strategy: Strategy, *, epsilon: float | None = None,
                 rho: float | None = None, noise: str | None = None,
                 neighbours: str = "add_remove",
                 public_total: bool | None = None, level_budgets: ArrayLike | None = None,
                 row_budgets: ArrayLike | None = None, discrete: bool = False,
                 participation: Participation | None = None) -> None:
        if not isinstance(strategy, Strategy):
            raise ValueError(f"strategy must be a dptree_opt Strategy, got {type(strategy).__name__}")
        noise = infer_noise(noise, epsilon, rho)
        neighbours = check_neighbours(neighbours)
        discrete = check_bool(discrete, "discrete")
        budget = resolve_budget(noise, epsilon, rho)
        budget_name = "epsilon" if noise == "laplace" else "rho"
        if budget < TINY:  # subnormal: its noise scale is beyond double precision
            raise out_of_range(noise, budget, "the noise variance", 2.0 * _log10_scale(
                1.0, math.log10(budget), noise) + (math.log10(2.0) if noise == "laplace" else 0))
        public = resolve_public(neighbours, public_total)
        part = as_participation(participation)
        if not part.is_single:
            if neighbours != "add_remove":
                raise ValueError("participation schemas are defined for add/remove "
                                 "(zero-out) neighbours; a replaced user doubles the "
                                 "sensitivity: use neighbours='add_remove'")
            if public:
                raise ValueError("public_total=True cannot be combined with a participation "
                                 "schema (a user's steps are not one total)")
            part.check_steps(strategy.n_bins)

        rows = strategy.n_rows + 1
        check_memory(rows * MECHANISM_BYTES_PER_ROW, f"a mechanism on {rows - 1} strategy rows",
                     "use a strategy with fewer rows (fewer bins)")
        released = strategy
        if public and not np.any(strategy.levels == 0):
            released = strategy.with_total_row()
        levels = released.levels
        p = norm_of(noise)
        if row_budgets is not None:
            if level_budgets is not None:
                raise ValueError("give level_budgets or row_budgets, not both")
            self._init_rows(strategy, released, noise, neighbours, public, budget,
                            budget_name, row_budgets, discrete, part)
            return
        present = np.flatnonzero(np.bincount(levels))  # levels present, O(rows)
        noisy_levels = present[present != 0] if public else present
        sens = np.array([_sensitivity(released, (levels == lvl).astype(float), neighbours, p,
                                      part).value for lvl in noisy_levels])
        if level_budgets is None and noisy_levels.size:
            # equal split over the levels that depend on the data; a level whose rows cannot
            # change (sensitivity 0, e.g. k_1 = 1 under swap) is released exactly for free
            budgets = np.where(sens > 0, budget / max(int(np.sum(sens > 0)), 1), 0.0)
        else:
            budgets = split_budget(budget, noisy_levels.size, level_budgets, name=budget_name)
        exact_levels = ([0] if public else []) + [int(lvl) for lvl, d in zip(noisy_levels, sens)
                                                   if d == 0]
        exact = np.isin(levels, exact_levels) if exact_levels else np.zeros(levels.size, bool)
        if neighbours == "swap" and exact.any():
            if released.sensitivity(exact.astype(float), "swap", p) != 0:
                raise ValueError("level-0 rows must not change under swap neighbours")
        level_scale, level_variance, level_sens = {}, {}, {}
        for lvl, b, d in zip(noisy_levels, budgets, sens):
            s, v = calibrate(float(d), float(b), noise)  # d = 0 -> exact (scale 0)
            if level_budgets is None:  # a given budget this small leaves its level unmeasured
                _check_scale(s, float(d), float(b), noise, budget)
            if discrete:  # integer noise of the same scale: same guarantee, its own variance
                v = discrete_variance(s, noise)
            level_scale[int(lvl)], level_variance[int(lvl)], level_sens[int(lvl)] = s, v, float(d)
        if public:
            level_scale[0], level_variance[0], level_sens[0] = 0.0, 0.0, 0.0
        lookup = np.zeros((3, int(levels.max()) + 1))  # scale, variance, privacy weight
        for lvl, s in level_scale.items():
            lookup[:, lvl] = s, level_variance[lvl], (1.0 / s if 0 < s < np.inf else 0.0)
        scale, variance, weights = (np.take(row, levels) for row in lookup)  # per row, O(rows)

        actual, account = _recomputed_loss(released, weights, neighbours, noise, part)
        if actual > budget * (1 + 1e-9):
            raise ValueError(f"calibration error: the mechanism's {budget_name} would be "
                             f"{actual!r} > requested {budget!r}")

        self._set(strategy, released, noise, neighbours, public, budget_name, budget, actual,
                  {int(lv): float(b) for lv, b in zip(noisy_levels, budgets)}, level_scale,
                  level_variance, level_sens, scale, variance, exact, discrete, None, None,
                  part, account)

    def _set(self, strategy: Strategy, released: Strategy, noise: str, neighbours: str,
             public: bool, budget_name: str, budget: float, actual: float,
             level_budgets: dict[int, float], level_scale: dict[int, float],
             level_variance: dict[int, float], level_sens: dict[int, float],
             scale: npt.NDArray[np.float64], variance: npt.NDArray[np.float64],
             exact: npt.NDArray[np.bool_], discrete: bool,
             row_budgets: npt.NDArray[np.float64] | None,
             row_sens: npt.NDArray[np.float64] | None, part: Participation,
             account: Sensitivity) -> None:
        self._participation = part
        self._account = account
        self._strategy = strategy
        self._released = released
        self._noise = noise
        self._neighbours = neighbours
        self._public_total = public
        self._budget_name = budget_name
        self._requested = budget
        self._actual = actual
        self._level_budgets = level_budgets
        self._level_scale = level_scale
        self._level_variance = level_variance
        self._level_sensitivity = level_sens
        for arr in (scale, variance, exact, row_budgets, row_sens):
            if arr is not None:
                arr.flags.writeable = False
        self._scales, self._variances, self._exact = scale, variance, exact
        self._row_budgets, self._row_sensitivities = row_budgets, row_sens
        self._discrete = bool(discrete)
        self._frozen = True

    def _init_rows(self, strategy: Strategy, released: Strategy, noise: str, neighbours: str,
                   public: bool, budget: float, budget_name: str, row_budgets: ArrayLike,
                   discrete: bool, part: Participation) -> None:
        """Per-row budgets: scales from each row's own sensitivity, loss recomputed."""
        m = strategy.n_rows
        try:
            b = np.array(row_budgets, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError("row_budgets must be an array of numbers") from None
        if np.ndim(row_budgets) != 1 or b.size != m:
            raise ValueError(f"row_budgets must have shape ({m},) (one per strategy row), got "
                             f"shape {np.shape(row_budgets)}")
        if not np.all(np.isfinite(b)) or np.any(b < 0):
            raise ValueError("row_budgets must be finite and >= 0")
        if released.n_rows > m:  # the appended exact total row
            b = np.append(b, 0.0)
        exact_level0 = (released.levels == 0) if public else np.zeros(b.size, bool)
        if np.any(b[exact_level0] > 0):
            raise ValueError("row_budgets: with a public N the level-0 (total) rows are "
                             "released exactly; give them 0")
        own = row_sensitivities(released, neighbours, part)
        exact = exact_level0 | (own == 0)
        with np.errstate(divide="ignore", invalid="ignore"):  # exact rows: 0 / 0 discarded
            if noise == "laplace":
                scale = np.where(exact, 0.0, own / b)
                variance = 2.0 * scale * scale
            else:
                scale = np.where(exact, 0.0, own / np.sqrt(2.0 * b))
                variance = scale * scale
        if discrete:
            variance = discrete_variances(scale, noise)
        weights = np.where((scale > 0) & np.isfinite(scale),
                           1.0 / np.where(scale > 0, scale, 1.0), 0.0)
        actual, account = _recomputed_loss(released, weights, neighbours, noise, part)
        if actual > budget * (1 + 1e-9):
            raise ValueError(f"row_budgets: the scaled strategy's {budget_name} is {actual!r} "
                             f"> the requested {budget!r} (on a tree under add/remove every "
                             "root-to-leaf path must sum to at most the budget)")
        levels0 = {0: 0.0} if public else {}
        self._set(strategy, released, noise, neighbours, public, budget_name, budget, actual,
                  {}, dict(levels0), dict(levels0), dict(levels0), scale, variance, exact,
                  discrete, b, own, part, account)

    def __setattr__(self, name: str, value: object) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError("Mechanism is immutable")
        object.__setattr__(self, name, value)

    # ---------------------------------------------------------- properties
    @property
    def strategy(self) -> Strategy:
        """The strategy as given."""
        return self._strategy

    @property
    def released(self) -> Strategy:
        """The rows actually released: the strategy, plus an exact total row if appended."""
        return self._released

    @property
    def n_bins(self) -> int:
        """Number of bins of the histogram."""
        return self._released.n_bins

    @property
    def noise(self) -> str:
        """"laplace" (eps-DP) or "gaussian" (rho-zCDP)."""
        return self._noise

    @property
    def neighbours(self) -> str:
        """"swap" or "add_remove" (docs/math.md section 0)."""
        return self._neighbours

    @property
    def public_total(self) -> bool:
        """Whether N is public (released exactly)."""
        return self._public_total

    @property
    def participation(self) -> Participation:
        """The participation schema the noise is calibrated to (``participation.single()``
        unless one was given; docs/math.md section 11)."""
        return self._participation

    @property
    def sensitivity(self) -> Sensitivity:
        """The sensitivity of the scaled strategy diag(1/scale) A behind ``.epsilon`` /
        ``.rho``: its value, whether it is exact or a certified upper bound (then the
        reported loss is an upper bound too) and how it was computed."""
        return self._account

    @property
    def epsilon(self) -> float | None:
        """The actual pure-DP guarantee (Laplace), recomputed from the scaled matrix."""
        return self._actual if self._noise == "laplace" else None

    @property
    def rho(self) -> float | None:
        """The actual zCDP guarantee (Gaussian), recomputed from the scaled matrix."""
        return self._actual if self._noise == "gaussian" else None

    @property
    def requested_budget(self) -> float:
        """The epsilon or rho asked for."""
        return self._requested

    @property
    def level_budgets(self) -> dict[int, float]:
        """{level: budget} for the noisy levels (absolute eps_l or rho_l)."""
        return dict(self._level_budgets)

    @property
    def level_variances(self) -> dict[int, float]:
        """{level: noise variance of each row of that level} (0 exact, inf not measured)."""
        return dict(self._level_variance)

    @property
    def level_scales(self) -> dict[int, float]:
        """{level: Laplace scale b or Gaussian sigma}."""
        return dict(self._level_scale)

    @property
    def level_sensitivities(self) -> dict[int, float]:
        """{level: that level's own l1 (Laplace) or l2 (Gaussian) sensitivity}."""
        return dict(self._level_sensitivity)

    @property
    def scales(self) -> np.ndarray:
        """Per released row: Laplace scale or Gaussian sigma (0 exact, inf unmeasured)."""
        return self._scales

    @property
    def variances(self) -> np.ndarray:
        """Per released row: noise variance (0 for exact rows, inf for unmeasured ones)."""
        return self._variances

    @property
    def exact_rows(self) -> np.ndarray:
        """Boolean mask of rows released without noise (the public total)."""
        return self._exact

    @property
    def row_budgets(self) -> np.ndarray | None:
        """Per released row: its absolute budget when the mechanism was built with
        ``row_budgets`` (0 for exact and unmeasured rows), else None (budgets per level)."""
        return self._row_budgets

    @property
    def row_sensitivities(self) -> np.ndarray | None:
        """Per released row: its own sensitivity (``row_sensitivities``) when built with
        ``row_budgets``, else None."""
        return self._row_sensitivities

    @property
    def discrete(self) -> bool:
        """Whether the noise is integer-valued (discrete Laplace / discrete Gaussian)."""
        return self._discrete

    def discretised(self) -> "Mechanism":
        """The same mechanism with integer-valued noise (``discrete=True``): same strategy,
        budgets, scales and guarantee; variances of the discrete distributions. O(rows)."""
        if self._discrete:
            return self
        new = object.__new__(Mechanism)
        for name, value in self.__dict__.items():
            if name != "_frozen":
                object.__setattr__(new, name, value)
        level_variance = {lvl: discrete_variance(s, self._noise)
                          for lvl, s in self._level_scale.items()}
        if self._row_budgets is not None:
            variances = discrete_variances(self._scales, self._noise)
        else:
            levels = self._released.levels
            lookup = np.zeros(int(levels.max()) + 1)
            for lvl, v in level_variance.items():
                lookup[lvl] = v
            variances = np.take(lookup, levels)  # per row, O(rows)
        variances.flags.writeable = False
        object.__setattr__(new, "_level_variance", level_variance)
        object.__setattr__(new, "_variances", variances)
        object.__setattr__(new, "_discrete", True)
        object.__setattr__(new, "_frozen", True)
        return new

    def normalised(self) -> tuple["Mechanism", float]:
        """(twin, c): this mechanism with every noise variance divided by c, a power of 4
        near the largest finite one (the twin's variances are at most 2), and c. When the
        variances are within 4^+-32 of 1 (every budget in common use), or no row is noisy:
        the mechanism itself and c = 1 (its caches are shared). The estimators here are
        linear with weights that depend on the variances' ratios only, so every error is
        homogeneous of degree 1 in them: error(self) = c error(twin), exactly (c is a power
        of two). The twin is an analysis device: scales divided by sqrt(c), budgets and
        guarantee unchanged. ValueError when a noisy row's variance is not a normal double
        (the budget is too large or too small for double precision). O(rows), cached."""
        if self in _NORMALISED:
            hit = _NORMALISED[self]
            return (self, 1.0) if hit is None else hit
        s, v = self._scales, self._variances
        noisy = np.isfinite(s) & (s > 0)
        vn = v[noisy]
        bad = ~(np.isfinite(vn) & (vn >= TINY))
        if np.any(bad):
            raise out_of_range(self._noise, self._requested, "the noise variance",
                               _log10_variance(float(s[noisy][bad][0]), self._noise,
                                               self._discrete))
        half = math.frexp(float(vn.max()))[1] // 2 if vn.size else 0
        if abs(half) <= _NORMAL_HALF_EXPONENT:
            _NORMALISED[self] = None  # (the value must not hold the key: weak cache)
            return self, 1.0
        c = math.ldexp(1.0, 2 * half)
        if float(vn.min()) / c < TINY:
            raise ValueError("the noise variances span more than double precision "
                             f"(from {float(vn.min()):.3g} to {float(vn.max()):.3g})")
        out = _NORMALISED[self] = (self._rescaled(c, math.ldexp(1.0, half)), c)
        return out

    def _rescaled(self, c: float, root: float) -> "Mechanism":
        """A copy with variances / c and scales / root (root^2 = c, both powers of two)."""
        new = object.__new__(Mechanism)
        for name, value in self.__dict__.items():
            if name != "_frozen":
                object.__setattr__(new, name, value)
        scales, variances = self._scales / root, self._variances / c
        for arr in (scales, variances):
            arr.flags.writeable = False
        object.__setattr__(new, "_scales", scales)
        object.__setattr__(new, "_variances", variances)
        object.__setattr__(new, "_level_scale",
                           {k: x / root for k, x in self._level_scale.items()})
        object.__setattr__(new, "_level_variance",
                           {k: x / c for k, x in self._level_variance.items()})
        object.__setattr__(new, "_frozen", True)
        return new

    # --------------------------------------------------------------- noise
    def sample_noise(self, rng: RNG, size: int | tuple[int, ...] = ()) -> npt.NDArray[np.float64]:
        """Simulation noise of shape size + (rows,) (numpy Generator; NOT for releases).

        Exact rows get 0, unmeasured rows NaN. A ``discrete`` mechanism draws integer noise
        (discrete Laplace / discrete Gaussian, numpy samplers: simulation only)."""
        rng = as_generator(rng)
        shape = tuple(np.atleast_1d(size)) if size != () else ()
        s = self._scales
        finite = np.isfinite(s)
        safe = np.where(finite, s, 0.0)
        if self._discrete:
            full = shape + (s.size,)
            z = (_discrete_laplace(rng, np.broadcast_to(safe, full), full)
                 if self._noise == "laplace" else _discrete_gaussian(rng, safe, full))
        elif self._noise == "laplace":
            z = rng.laplace(0.0, 1.0, size=shape + (s.size,)) * safe
        else:
            z = rng.standard_normal(size=shape + (s.size,)) * safe
        return np.where(finite, z, np.nan)

    def measure(self, histogram: ArrayLike, rng: RNG) -> npt.NDArray[np.float64]:
        """Noisy answers y = A h + z for the released rows: a SIMULATION (numpy noise from
        ``rng``, floating-point samplers) with no privacy guarantee; a real release draws z
        with ``dptree_opt.data_release.secure_noise.secure_measure``."""
        h = check_histogram(histogram, self.n_bins)
        return self._released.apply(h) + self.sample_noise(rng)

    # ----------------------------------------------------------- describe
    def describe(self) -> str:
        """A human-readable account of the mechanism and its guarantee."""
        unit = "eps" if self._noise == "laplace" else "rho"
        guarantee = (f"{self._actual:.6g}-DP (pure)" if self._noise == "laplace"
                     else f"{self._actual:.6g}-zCDP")
        kind = f"discrete {self._noise}" if self._discrete else self._noise
        lines = [
            f"{self._released.name}: {self._released.n_rows} rows over {self.n_bins} bins, "
            f"{kind} noise, {self._neighbours} neighbours",
            f"guarantee: {guarantee} (requested {unit} = {self._requested:.6g}) only when the "
            "noise is drawn by a secure sampler (dptree_opt.release); measure() and "
            "sample_noise() draw numpy SIMULATION noise, which carries no privacy guarantee",
        ]
        if not self._participation.is_single:
            bound = "exact" if self._account.exact else "a certified upper bound"
            lines.append(f"participation: {self._participation.describe()}; the loss is "
                         f"{bound} ({self._account.method})")
        if self._public_total:
            why = ("invariant under swap" if self._neighbours == "swap"
                   else "declared public by the caller: N itself is NOT protected")
            lines.append(f"total N: released exactly ({why})")
        if self._row_budgets is not None:
            noisy = np.isfinite(self._scales) & (self._scales > 0)
            b = self._row_budgets[noisy]
            lines.append(f"  budgets per row: {int(noisy.sum())} noisy rows, {unit}_r from "
                         f"{b.min() if b.size else 0:.6g} to {b.max() if b.size else 0:.6g}; "
                         f"{int(np.isinf(self._scales).sum())} unmeasured, "
                         f"{int(self._exact.sum())} exact")
        for lvl, level_budget in self._level_budgets.items():
            lines.append(f"  level {lvl}: {unit}_l = {level_budget:.6g}, sensitivity "
                         f"{self._level_sensitivity[lvl]:.6g}, scale {self._level_scale[lvl]:.6g},"
                         f" variance {self._level_variance[lvl]:.6g}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        budget = f"{self._budget_name}={self._actual:.6g}"
        kind = f"discrete {self._noise}" if self._discrete else self._noise
        return (f"Mechanism({self._released.name}, {kind}, {self._neighbours}, {budget}, "
                f"public_total={self._public_total})")
