"""Continual counting with a k-ary tree and negative digits: the mechanism of Andersson, Pagh,
Steiner, Torkamani, "Count on Your Elders: Laplace vs Gaussian Noise" (FORC 2025,
LIPIcs.FORC.2025.10; arXiv 2408.07021, v1 "Improved Counting under Continual Observation with
Pure Differential Privacy") [APST]. ``Counter(T, epsilon=..., mechanism="negative_digits",
branching=19)``.

Sources. From [APST]'s abstracts (v1, v3, LIPIcs; the body was not available to us): a
generalisation of the binary tree mechanism to a k-ary number system with negative digits,
Laplace noise, pure eps-DP, k = 19, a mean squared error about 4 times below Honaker's
(TPDP 2015, the best earlier pure-DP result), better than Henzinger-Upadhyay-Upadhyay's
Gaussian bound when delta = O(T^-0.92); even k in an appendix. The construction, the
causality argument and every formula below are derived here (and checked in
tests/test_stream_negative_digits.py); the abstract's numbers are reproduced by
:func:`asymptotic_constants`.

Number system (standard balanced base-k arithmetic). k odd, m = (k - 1)/2.
Every integer t with |t| <= C_H = (k^H - 1)/2 has exactly one expansion
t = sum_(l < H) b_l k^l with digits b_l in {-m, ..., m}. Its partial sums from the top,
Q_l = sum_(j >= l) b_j k^j, are Q_l = round(t / k^l) k^l, the multiple of k^l nearest to t
(no ties: k^l is odd), so b_l = (Q_l - Q_(l+1)) / k^l, Q_0 = t and Q_H = 0 (derivation: the
tail sum_(j < l) b_j k^j has absolute value <= C_l < k^l / 2).

Tree. Level l (l = 0 leaves) has nodes of width k^l, node i = steps [i k^l, (i + 1) k^l) (0-based
steps). Levels 0..H-1 with H = min{H : C_H >= T} by default, so every t <= T has an H-digit
balanced expansion. ``levels=`` a smaller H makes the top digit round(t / k^(H-1)) >= 0 free
(it may exceed m): fewer levels, each with more budget, at the price of more top nodes (this
variant is ours, not [APST]'s; :func:`best_levels` picks the H of least mean variance).

Prefix at step t (t steps seen). Telescoping, 1_[0,t) = sum_l (1_[0,Q_l) - 1_[0,Q_(l+1))), and
since Q_l and Q_(l+1) are multiples of k^l, each term is sign(b_l) times |b_l| consecutive
level-l nodes: nodes Q_(l+1)/k^l .. Q_l/k^l - 1 added when b_l > 0, nodes Q_l/k^l ..
Q_(l+1)/k^l - 1 subtracted when b_l < 0. So the count after t steps is
c_t = sum_v L[t, v] (R_v x) with L[t, v] in {-1, 0, +1}: the prefix matrix factorises as
A = L R, R the 0/1 node rows. A node entirely at or after the horizon T has a zero row (no
step of the stream): it is dropped (only subtracted nodes can be such; this only changes steps
near T when T is not a power of k).

Causality: how negative digits stay causal. A subtracted block [Q_l, Q_(l+1)) has
Q_(l+1) > t (b_l < 0 makes the lower tail sum_(j <= l) b_j k^j negative), so it is NOT complete
at step t. This cannot be avoided by releasing only complete nodes: the nodes complete by
step t lie inside [0, t), they are a laminar family whose maximal members partition [0, t)
(the standard base-k digits d_l(t) of them per level), and a +-1 combination of nodes inside
[0, t) equal to 1_[0,t) needs a node inside each maximal member, so it uses at least
sum_l d_l(t) nodes: with complete nodes only, subtraction never beats the covering sum (the
best one can do there is Honaker's causal BLUE, :mod:`~dptree_opt.stream.tree`). Instead, as
in every tree mechanism written as "true prefix plus the noise of the decomposition's nodes",
the engine releases

    y_t = c_t + sum_v L[t, v] z_v,

c_t the exact count of the first t steps and z_v the noise of node v (level l: Laplace of scale
1 / eps_l, or Gaussian sigma_l = 1 / sqrt(2 rho_l)), drawn independently of the data the first
time a step needs it and kept until no later step can (memory O(k H)). Then y = A x + L z =
L (R x + z): the output stream is a post-processing of the virtual release R x + z of every
node (never computed). Each step's count lies in one node per level (l1 = l2 sensitivity 1 per
level), so R x + z is sum_l eps_l = eps pure DP (Laplace) or sum_l rho_l = rho zCDP (Gaussian),
event level, and y_t depends on the first t counts only (c_t) plus data-independent noise:
causal. A node's noise is used from its first use, which may precede its completion
(``strategy().first_use`` <= ``release_step``); its count is never needed.
Adaptively chosen inputs: if step j's count differs by delta (|delta| <= 1, possibly chosen
from y_1..y_j), the world with the changed count maps onto the other by z -> z + R e_j delta,
and L R e_j = A e_j vanishes on y_1..y_j, so the shift leaves the outputs that chose delta
unchanged (a measure-preserving bijection); the density ratio is bounded by
exp(sum_l eps_l |delta|) <= e^eps (Laplace). Under zCDP the shift lies in the null space of
the map from z to those outputs, so the conditional Renyi divergence is that of the plain
shift. (This argument is ours; [APST] analyse a fixed stream.)

Variance (the quantity [APST] analyse; the closed forms below are derived here). With v_l the
per-node noise variance, Var y_t = sum_l n_l(t) v_l, n_l(t) = |b_l(t)| (minus dropped nodes
past T): vectorised over steps in :func:`level_node_counts`. The h-digit strings of
[-C_h, C_h] are all balanced strings, so the digits of a uniform t are uniform on {-m..m},
E|b_l| = (k^2 - 1) / (4 k) (vs (k - 1) / 2 for standard digits); exactly, for T = k^h
(H = h + 1 levels, top digit 1 for t > C_h) the mean of sum_l n_l(t) over t = 1..T is
h (k^2 - 1) / (4 k) + 1/2 + 1 / (2 T). With an equal split over h ~ log_k T levels, Laplace,
the mean squared error is ~ (k^2 - 1) / (2 k) h^3 / eps^2 = c_k log_2^3 T / eps^2,
c_k = (k^2 - 1) / (2 k log_2^3 k), least over odd k at k = 19 (c_19 = 0.12359; c_21 =
0.12363). Baselines (same units): the binary mechanism with covering sums, 1 (popcount
~ log2 T / 2 nodes of variance 2 log2^2 T / eps^2); Honaker's causal BLUE on the binary tree,
1/2 (a complete level-l node's from-below variance 2^l v / (2^(l+1) - 1) -> v / 2;
:func:`~dptree_opt.stream.tree.from_below_variances`). Hence the "factor of about 4" over
Honaker: 0.5 / 0.12359 = 4.05 (8.09 over the binary mechanism). At finite T the level count
is an integer and the exact ratio over Honaker oscillates: 2.60 to 4.15 for T = 2^10..2^20
with [APST]'s levels, 3.56 to 4.23 with :func:`best_levels`. Study numbers:
:func:`mean_variance`, :func:`asymptotic_constants`, :func:`study_constants`.

Odd k only: even k has no symmetric digit set ([APST] appendix C treats even k separately;
not implemented). Noise: ``rng=None`` uses OpenDP's exact discrete Laplace / Gaussian on
integers (one measurement per level, privacy map checked when the engine is made; a node's
noise is the measurement applied to 0), so outputs are integers and the variances are those
of the discrete noise; a numpy ``Generator`` gives continuous SIMULATION noise (no privacy
guarantee).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral
from typing import overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ..data_release.secure_noise import sampler_description
from ..privacy import check_budget, check_noise, split_budget
from ..validation import check_int
from .base import VARIANCE_CHUNK, CounterEngine, StrategyRows
from .noise import GroupNoise, check_rng, group_variances
from .tree import digit_variances, from_below_variances, tree_levels

__all__ = ["NegativeDigitsEngine", "check_odd_branching", "balanced_levels", "balanced_digits",
           "level_node_counts", "best_levels", "mean_variance", "leading_constant",
           "asymptotic_constants", "study_constants"]

_MAX_HORIZON = 1 << 40
_Ints = npt.NDArray[np.int64]


def check_odd_branching(branching: int) -> int:
    """k: an odd integer >= 3 (the balanced digit set {-(k-1)/2..(k-1)/2} needs odd k)."""
    if isinstance(branching, (bool, np.bool_)) or not isinstance(branching, Integral) \
            or int(branching) < 3 or int(branching) % 2 == 0:
        raise ValueError(f"branching must be an odd integer >= 3 (balanced digits "
                         f"-(k-1)/2..(k-1)/2; even k is not supported), got {branching!r}")
    if branching > _MAX_HORIZON:
        raise ValueError(f"branching must be <= 2^40, got {branching!r}")
    return int(branching)


def balanced_levels(horizon: int, k: int) -> int:
    """H = min{H >= 1 : (k^H - 1) / 2 >= T}: every t <= T has an H-digit balanced expansion
    (exact integer arithmetic)."""
    H, width = 1, k
    while (width - 1) // 2 < horizon:
        H, width = H + 1, width * k
    return H


def _check_levels(levels: int | None, horizon: int, k: int) -> int:
    H = balanced_levels(horizon, k)
    if levels is None:
        return H
    return check_int(levels, "levels", 1, H, why=f"more than {H} would add a level no step uses")


@overload
def _tops(t: int, k: int, levels: int) -> list[int]: ...
@overload
def _tops(t: _Ints, k: int, levels: int) -> list[_Ints]: ...


def _tops(t: int | _Ints, k: int, levels: int) -> list[int] | list[_Ints]:
    """Q_l = round(t / k^l) k^l for l = 0..levels-1, and Q_levels = 0 (module docstring): int64
    arrays for an array t, Python integers for an integer t."""
    out = []
    for level in range(levels):                       # over levels, not steps
        w = k**level
        out.append(((t + (w - 1) // 2) // w) * w)
    out.append(0 * t)
    return out


def _node_variance_sum(counts: np.ndarray, variances: ArrayLike) -> np.ndarray:
    """sum_l counts[l] v_l over axis 0 (levels); a level no step uses (count 0) never
    multiplies an infinite variance."""
    v = np.asarray(variances, dtype=float).reshape((-1,) + (1,) * (counts.ndim - 1))
    with np.errstate(invalid="ignore"):
        return np.where(counts > 0, counts * v, 0.0).sum(axis=0)


def balanced_digits(t: ArrayLike, k: int, levels: int) -> np.ndarray:
    """Digits b_l(t) = (Q_l - Q_(l+1)) / k^l, shape (levels, len(t)): the balanced base-k
    expansion of t when levels >= :func:`balanced_levels` (t); otherwise the top digit
    round(t / k^(levels-1)) is the free one (module docstring). Vectorised over t."""
    steps = np.atleast_1d(np.asarray(t, dtype=np.int64))
    Q = _tops(steps, k, levels)
    return np.array([(Q[level] - Q[level + 1]) // k**level for level in range(levels)])


def level_node_counts(t: ArrayLike, k: int, levels: int, horizon: int) -> np.ndarray:
    """n_l(t): the number of level-l nodes the estimate after t steps uses, shape
    (levels, len(t)): |b_l(t)|, less the subtracted nodes that start at or after the horizon
    (zero rows, dropped). Vectorised over t (a loop over the levels only)."""
    steps = np.atleast_1d(np.asarray(t, dtype=np.int64))
    Q = _tops(steps, k, levels)
    out = np.empty((levels, len(steps)), dtype=np.int64)
    for level in range(levels):
        w = k**level
        lo, hi = Q[level], Q[level + 1]
        n = np.abs(lo - hi) // w
        first_out = -(-horizon // w) * w               # the first node start >= T
        past = np.where(hi > lo, np.maximum(0, (hi - np.maximum(lo, first_out)) // w), 0)
        out[level] = n - past
    return out


def _terms(t: int, k: int, levels: int, horizon: int) -> list[tuple[int, int, int, int]]:
    """The estimate after t steps as (level, first node, number of nodes, sign) blocks, leaves
    first (Python integers; the scalar twin of :func:`level_node_counts`)."""
    Q = _tops(t, k, levels)
    out = []
    for level in range(levels):
        w = k**level
        lo, hi = Q[level], Q[level + 1]
        if lo > hi:
            out.append((level, hi // w, (lo - hi) // w, 1))
        elif lo < hi:
            last = min(hi, -(-horizon // w) * w)      # drop nodes starting at or after T
            if last > lo:
                out.append((level, lo // w, (last - lo) // w, -1))
    return out


class NegativeDigitsRows(StrategyRows):
    """:meth:`NegativeDigitsEngine.strategy`'s rows, with per-row ``level``, ``index``,
    ``scale``, ``first_use`` and the (steps x rows) ``coefficients`` matrix L."""

    level: npt.NDArray[np.int64]
    index: npt.NDArray[np.int64]
    scale: npt.NDArray[np.float64]
    first_use: npt.NDArray[np.int64]
    coefficients: sp.csr_matrix


class NegativeDigitsEngine(CounterEngine):

    """The k-ary tree counter with negative digits (module docstring).

    Parameters: ``horizon`` T; ``noise`` "laplace" (budget = eps, pure DP, as in [APST]) or
    "gaussian" (budget = rho, zCDP; the same virtual tree, l2 sensitivity 1 per level);
    ``rng`` None (OpenDP) or a numpy Generator (simulation); ``branching`` odd k >= 3
    (default 19, [APST]'s choice); ``level_budgets`` per level, ROOT FIRST (the top digit's
    level first, the leaves last, like every budget list of the package), summing to the
    budget (default the equal split; ``level_scales`` and ``level_variances`` run from the
    leaves); ``levels`` None ([APST]: all digits balanced) or a
    smaller H (free top digit)."""

    name = "negative_digits"
    options = ("branching", "level_budgets", "levels")
    variance_bytes_per_step = 24          # measured 18.9 (k = 19), 22.3 (k = 3) at 2^22 steps
    horizon: int                          # always bounded

    def __init__(self, horizon: int, *, noise: str = "laplace", budget: float,
                 rng: np.random.Generator | None = None, branching: int = 19,
                 level_budgets: ArrayLike | None = None, levels: int | None = None) -> None:
        self.horizon = check_int(horizon, "horizon", 1, _MAX_HORIZON)
        self.noise = check_noise(noise)
        name = "epsilon" if self.noise == "laplace" else "rho"
        self.budget = check_budget(budget, name)
        check_rng(rng)
        self.branching = k = check_odd_branching(branching)
        self.levels = H = _check_levels(levels, self.horizon, k)
        # given and kept root first (class docstring); the levels below run from the leaves
        self.level_budgets = split_budget(self.budget, H, level_budgets, name=name)
        self._leaf_budgets = self.level_budgets[::-1]
        self._noise = GroupNoise(self.noise, self._leaf_budgets, rng, total=self.budget,
                                 groups=[f"level_budgets[{H - 1 - level}] (nodes of width "
                                         f"{k**level})" for level in range(H)])
        self.secure = self._noise.secure
        self.level_scales = self._noise.scales
        self.level_variances = self._noise.variances
        self.t = 0
        self.total = 0
        # the noise of nodes some later step may still use: per level below the top a
        # window {index: z} (at most k + 2 nodes) and the lowest index not yet discarded;
        # top nodes are only ever added, 0..q-1 with q non-decreasing: their running sum
        self._kept: list[dict[int, float]] = [{} for _ in range(H - 1)]
        self._floor = [0] * (H - 1)
        self._top_count = 0          # top nodes 0.._top_count-1 drawn
        self._top_sum = 0.0          # and the sum of their noise

    # ---------------------------------------------------------------- noise of the nodes
    def _node(self, level: int, index: int) -> float:
        kept = self._kept[level]
        if index not in kept:
            if index < self._floor[level]:
                raise RuntimeError(f"node ({level}, {index}) was discarded and is needed "
                                   f"again (internal error)")
            kept[index] = self._noise.draw(level, 0)
        return kept[index]

    def _discard(self, t: int) -> None:
        """Forget the nodes no step after t uses: every node a step t' uses lies within
        (t' - C_(l+1), t' + C_(l+1)), C_(l+1) = (k^(l+1) - 1) / 2."""
        k = self.branching
        for level in range(self.levels - 1):
            w = k**level
            reach = (k * w - 1) // 2
            floor = max(self._floor[level], (t + 1 - reach) // w)  # (i + 1) w <= t + 1 - reach
            if floor > self._floor[level]:
                kept = self._kept[level]
                for index in [i for i in kept if i < floor]:
                    del kept[index]
                self._floor[level] = floor

    # ---------------------------------------------------------------- interface
    def push(self, count: int) -> tuple[float, float]:
        """Add the next step's count; return (y_t, Var y_t) (module docstring)."""
        self.total += self.check_step(count)
        self.t += 1
        top = self.levels - 1
        noise: list[float] = []
        variance = 0.0
        for level, first, n, sign in _terms(self.t, self.branching, self.levels, self.horizon):
            if level == top:
                # the top block is always nodes 0..n-1 (added), n non-decreasing in t
                while self._top_count < n:
                    self._top_sum += self._noise.draw(top, 0)
                    self._top_count += 1
                noise.append(self._top_sum)
            else:
                noise.extend(sign * self._node(level, i) for i in range(first, first + n))
            variance += n * self.level_variances[level]
        self._discard(self.t)
        return float(self.total) + math.fsum(noise), float(variance)

    def _step_variances(self, steps: int) -> np.ndarray:
        """Var y_t = sum_l n_l(t) v_l for t = 1..steps (:func:`level_node_counts`), vectorised
        over steps in chunks (temporaries O(levels x chunk)); a level no step uses never
        multiplies an infinite variance."""
        t = np.arange(1, steps + 1, dtype=np.int64)
        out = np.empty(steps)
        for lo in range(0, steps, VARIANCE_CHUNK):            # over chunks, not steps
            counts = level_node_counts(t[lo:lo + VARIANCE_CHUNK], self.branching, self.levels,
                                       self.horizon)
            out[lo:lo + VARIANCE_CHUNK] = _node_variance_sum(counts, self.level_variances)
        return out

    def account(self) -> dict:
        return {
            "mechanism": f"negative_digits: {self.branching}-ary tree with balanced digits "
                         f"(Andersson, Pagh, Steiner, Torkamani, FORC 2025)",
            "branching": self.branching,
            "noise": self.noise,
            "budget": {("epsilon" if self.noise == "laplace" else "rho"): self.budget},
            "unit": "event (one step's count changes by 1)",
            "levels": [{"level": level, "node_width": self.branching**level,
                        "budget": float(b), "sensitivity": 1.0, "scale": float(s),
                        "variance": float(v)}
                       for level, (b, s, v) in enumerate(zip(self._leaf_budgets,
                                                             self.level_scales,
                                                             self.level_variances))],
            "composition": "sequential over levels (one node per level per event)",
            "release": "y_t = exact count after t steps + the +-1 sum of its nodes' noise "
                       "= post-processing of the noisy counts of every node (never computed); "
                       "node noise is data-independent, drawn when first needed",
            "sampler": (sampler_description(self.noise) if self.secure
                        else "numpy simulation noise (NO privacy guarantee)"),
        }

    def strategy(self, steps: int) -> NegativeDigitsRows:
        """The virtual node rows over the first ``steps`` steps (small ``steps``; a Python
        loop over steps): first every node some step <= steps uses, in draw order (by first
        use, then level, then index: the order the engine draws their noise), then the other
        nodes meeting [0, steps) (unused so far; they complete the per-level partition for
        privacy checks). Attributes besides the base ones: ``level``, ``index``, ``scale``
        per row; ``first_use`` (the first step whose estimate uses the row, steps + 1 if
        none; may precede ``release_step``, the step at which the node completes, capped at
        T); ``coefficients`` the (steps x rows) matrix L with y_t = L[t] (R x + z)."""
        steps = self.check_strategy_steps(steps)
        k, H, T = self.branching, self.levels, self.horizon
        order: dict[tuple[int, int], int] = {}
        first_use: list[int] = []
        coef: list[tuple[int, int, int]] = []
        for t in range(1, steps + 1):
            for level, first, n, sign in _terms(t, k, H, T):
                for i in range(first, first + n):
                    if (level, i) not in order:
                        order[(level, i)] = len(order)
                        first_use.append(t)
                    coef.append((t - 1, order[(level, i)], sign))
        for level in range(H):                     # the rest of each level's partition
            w = k**level
            for i in range(-(-steps // w)):
                if (level, i) not in order:
                    order[(level, i)] = len(order)
                    first_use.append(steps + 1)
        nodes = np.array(list(order), dtype=np.int64).reshape(-1, 2)
        levels, index = nodes[:, 0], nodes[:, 1]
        width = np.power(k, levels, dtype=np.int64)
        start = np.minimum(index * width, steps)
        end = np.minimum((index + 1) * width, steps)
        lengths = end - start
        rows = np.repeat(np.arange(len(nodes)), lengths)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        cols = np.arange(len(rows)) - np.repeat(offsets - start, lengths)
        R = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), steps))
        out = NegativeDigitsRows(R, self.level_variances[levels],
                                 np.minimum((index + 1) * width, T))
        out.level, out.index = levels, index
        out.scale = self.level_scales[levels]
        out.first_use = np.asarray(first_use, dtype=np.int64)
        c = np.array(coef, dtype=np.int64).reshape(-1, 3)
        out.coefficients = sp.csr_matrix((c[:, 2].astype(float), (c[:, 0], c[:, 1])),
                                         shape=(steps, len(nodes)))
        return out


# ------------------------------------------------------------------------ study numbers
def _level_variances(T: int, k: int, eps: float, levels: int | None,
                     level_budgets: ArrayLike | None) -> tuple[int, np.ndarray]:
    H = _check_levels(levels, T, k)
    budgets = split_budget(eps, H, level_budgets)[::-1]      # given root first
    return H, group_variances("laplace", budgets, secure=False)


def mean_variance(T: int, k: int = 19, eps: float = 1.0, *, levels: int | None = None,
                  level_budgets: ArrayLike | None = None) -> float:
    """The mean over t = 1..T of the exact variance of the running count (continuous Laplace,
    budget eps, equal split unless ``level_budgets``, root first): the mechanism's mean
    squared error."""
    T, k = check_int(T, "horizon", 1, _MAX_HORIZON), check_odd_branching(k)
    eps = check_budget(eps, "epsilon")
    H, v = _level_variances(T, k, eps, levels, level_budgets)
    counts = level_node_counts(np.arange(1, T + 1, dtype=np.int64), k, H, T)
    return float(_node_variance_sum(counts.mean(axis=1), v))


def best_levels(T: int, k: int = 19) -> int:
    """The number of levels H (equal split) of least :func:`mean_variance`; H below the
    default makes the top digit free (module docstring)."""
    H = balanced_levels(check_int(T, "horizon", 1, _MAX_HORIZON), check_odd_branching(k))
    return min(range(1, H + 1), key=lambda h: mean_variance(T, k, 1.0, levels=h))


def leading_constant(k: int, base: float = 2.0) -> float:
    """c_k = (k^2 - 1) / (2 k log_base^3 k): the mean squared error is
    ~ c_k log_base^3 T / eps^2 for large T (equal split, Laplace; module docstring)."""
    k = check_odd_branching(k)
    return (k * k - 1) / (2 * k * math.log(k, base) ** 3)


def _binary_mean_variances(T: int, eps: float) -> tuple[float, float]:
    """(binary mechanism with covering sums, Honaker's causal BLUE): mean exact variance over
    t = 1..T, continuous Laplace, equal split over the tree's L + 1 levels."""
    L = tree_levels(T, 2)
    v = np.full(L, 2.0 * (L / eps) ** 2)
    t = np.arange(1, T + 1, dtype=np.int64)
    return (float(digit_variances(t, 2, v).mean()),
            float(digit_variances(t, 2, from_below_variances(v, 2)).mean()))


def asymptotic_constants(k: int = 19) -> dict[str, float]:
    """Leading constants of the mean squared error, in units log2^3 T / eps^2 (module
    docstring): this mechanism c_k, the binary mechanism 1, Honaker's causal BLUE 1/2; their
    ratios; the odd k minimising c_k; and the delta below which this mechanism beats the
    Gaussian square-root factorisation (Henzinger, Upadhyay, Upadhyay SODA 2023; Gaussian
    constant C_(eps,delta)^2 ~ 4 ln(1/delta) / eps^2 and mean sum of squared coefficients
    ~ (ln T / pi)^2): c_k,ln ln^3 T < 4 ln(1/delta) ln^2 T / pi^2 iff
    delta < T^(-pi^2 c_k,ln / 4), c_k,ln = (k^2 - 1) / (2 k ln^3 k)."""
    c2, cln = leading_constant(k, 2.0), leading_constant(k, math.e)
    best = min(range(3, 201, 2), key=leading_constant)
    return {"k": int(k), "c_log2": c2, "c_ln": cln, "binary": 1.0, "honaker": 0.5,
            "factor_vs_binary": 1.0 / c2, "factor_vs_honaker": 0.5 / c2,
            "best_odd_k": best, "c_best": leading_constant(best),
            "gaussian_sqrt_delta_exponent": math.pi**2 * cln / 4}


def study_constants(exponents: Iterable[int] = range(10, 21), k: int = 19,
                    eps: float = 1.0) -> list[dict[str, float]]:
    """Per T = 2^e: exact mean variances (continuous Laplace, equal split) of this mechanism
    ([APST] levels and the best H), the binary mechanism and Honaker's causal BLUE, each in
    units log2^3 T / eps^2, and the ratios (binary / ours, Honaker / ours)."""
    rows = []
    for e in exponents:
        T = 2 ** int(e)
        unit = math.log2(T) ** 3 / eps**2
        ours = mean_variance(T, k, eps)
        hb = best_levels(T, k)
        ours_best = mean_variance(T, k, eps, levels=hb)
        binary, honaker = _binary_mean_variances(T, eps)
        rows.append({"T": T, "levels": balanced_levels(T, k), "ours": ours / unit,
                     "best_levels": hb, "ours_best": ours_best / unit,
                     "binary": binary / unit, "honaker": honaker / unit,
                     "binary_over_ours": binary / ours, "honaker_over_ours": honaker / ours,
                     "honaker_over_ours_best": honaker / ours_best})
    return rows
