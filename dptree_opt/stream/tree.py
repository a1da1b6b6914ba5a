"""The k-ary tree mechanism for continual counting (Dwork, Naor, Pitassi, Rothblum 2010; Chan,
Shi, Song 2011; [HON] section 1), with covering sums or the causal BLUE.

Tree. Level l (l = 0 leaves) has nodes of width k^l: node i covers steps [i k^l, (i + 1) k^l).
Levels 0..L are measured, L = max{l : k^l <= T} (a wider node never completes within the
horizon). A node's noisy count is drawn when its last step arrives. Changing one step's count
by one (one record added or removed) changes one node per level by one, so level l has
sensitivity 1 (l1 and l2) and budget eps_l (Laplace, scale 1 / eps_l; sum eps_l = eps, pure
DP) or rho_l (Gaussian, sigma = 1 / sqrt(2 rho_l); sum rho_l = rho, zCDP): the equal split by
default, ``level_budgets`` otherwise, given ROOT FIRST (level L, .., level 0 = the leaves) like
every budget list of the package; ``level_scales``, ``level_variances`` and
``node_variances`` are indexed by l (leaves first).

Complete nodes at step t. [0, t) is the disjoint union of its maximal complete nodes, d_l(t) of
them at level l (d_l the base-k digits of t; t < k^(L + 1) so d_L < k), and every node complete
by step t lies in the subtree of one of them.

* ``estimator="covering"``: the sum of the maximal complete nodes' noisy counts; variance
  sum_l d_l(t) v_l (v_l the per-node noise variance; binary tree, equal budgets:
  popcount(t) v, Chan et al.).
* ``estimator="causal"``: the causal BLUE, the best linear unbiased estimate from every node
  complete by step t. The subtrees of the maximal complete nodes involve disjoint steps and
  independent noise, so the GLS splits into one problem per subtree, and the BLUE of a
  subtree's total from the whole subtree is Honaker's from-below estimate at its root
  ([HON] upward pass; at a root nothing lies above): with F_0 = v_0 and
  F_l = 1 / (1 / v_l + 1 / (k F_(l-1))), a level-l node's estimate is
  (z / v_l + S / (k F_(l-1))) F_l, S the sum of its children's estimates. The running count
  is the sum of the maximal complete nodes' estimates, variance sum_l d_l(t) F_l <= the
  covering variance (F_l <= v_l). An unmeasured level (budget 0, v_l = inf) drops out of the
  recursion; with unmeasured leaves odd steps are not identified (variance inf, estimate NaN).

Either way the estimate at step t uses only nodes complete by step t: it is causal. Memory
O(k L): per level the open node's exact count and the estimates of complete nodes not yet
merged into their parent. Budget sanity: a level whose noise is identically 0 or saturates
is refused when the counter is made (:class:`~dptree_opt.stream.noise.GroupNoise`), and with
the causal BLUE also a level whose variance is below the smallest normal double (its weights
are ratios of the variances; computed in ratio form, :func:`combine`, they stay finite for
every normal variance and every count below 2^53).
"""

from __future__ import annotations

import math
import sys
from numbers import Integral

import numpy as np
import scipy.sparse as sp
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..engines.causal import from_below_variances as _from_below_root_first
from ..privacy import split_budget
from ..validation import check_choice
from .base import VARIANCE_CHUNK, CounterEngine, StrategyRows
from .noise import GroupNoise

__all__ = ["TreeEngine", "tree_levels", "from_below_variances", "digit_variances",
           "check_branching", "combine", "ESTIMATORS", "MIN_VARIANCE", "MAX_BRANCHING"]

ESTIMATORS = ("covering", "causal")
# the smallest level variance each estimator accepts: the causal BLUE weighs by the
# variances (they must be normal doubles); covering sums only need noise that is not 0
MIN_VARIANCE = {"covering": 0.0, "causal": sys.float_info.min}


def tree_levels(horizon: int, k: int) -> int:
    """Number of measured levels L + 1, L = max{l : k^l <= T} (exact integer arithmetic)."""
    L, width = 0, k
    while width <= horizon:
        L, width = L + 1, width * k
    return L + 1


def from_below_variances(v: ArrayLike, k: int) -> npt.NDArray[np.float64]:
    """Honaker's from-below variances F_l of a complete level-l node's subtree estimate,
    LEAVES FIRST: F_0 = v_0, F_l = 1 / (1 / v_l + 1 / (k F_(l-1))) (inf = unmeasured /
    unidentified): :func:`dptree_opt.engines.causal.from_below_variances` reversed."""
    v = np.asarray(v, dtype=float)
    return _from_below_root_first([k] * (len(v) - 1), v[::-1])[::-1]


def digit_variances(t: npt.NDArray[np.integer], k: int,
                    node_variances: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """sum_l d_l(t) V_l for an array of steps t (d_l the base-k digits of t, V_l the variance
    of a complete level-l node's kept estimate): the variance of the running count after t
    steps. O(len(t) L), vectorised over steps in chunks (temporaries O(chunk)); a zero digit
    never multiplies an inf."""
    t = np.asarray(t, dtype=np.int64)
    out = np.zeros(t.shape)
    flat_t, flat_out = t.reshape(-1), out.reshape(-1)
    for lo in range(0, flat_t.size, VARIANCE_CHUNK):          # over chunks, not steps
        chunk = flat_t[lo:lo + VARIANCE_CHUNK]
        acc = flat_out[lo:lo + VARIANCE_CHUNK]
        for level, var in enumerate(node_variances):         # over levels, not steps
            digits = (chunk // k**level) % k
            acc += np.where(digits > 0, digits * np.where(digits > 0, var, 0.0), 0.0)
    return out


def combine(a: float, va: float, b: float, vb: float) -> tuple[float, float]:
    """The BLUE of one quantity from two independent unbiased estimates a (variance va) and
    b (vb), and its variance: inverse-variance weights in ratio form, w_a = vb / (va + vb),
    w_b = va / (va + vb), variance va w_a (no 1 / va or a / va, which overflow for tiny
    variances or large estimates); an exact estimate (variance 0) wins, an absent one
    (variance inf) drops out (both absent: (a, inf))."""
    if va == 0 or math.isinf(vb):
        return a, va
    if vb == 0 or math.isinf(va):
        return b, vb
    half = 0.5 if math.isinf(va + vb) else 1.0     # both finite, their sum overflows
    total = half * va + half * vb
    w_a, w_b = half * vb / total, half * va / total
    return w_a * a + w_b * b, va * w_a


MAX_BRANCHING = 1 << 62   # steps and node bounds are int64; a wider node never completes


def check_branching(branching: object, mechanism: str) -> int:
    """k for mechanism "binary" (2; ``branching`` None or 2) or another tree mechanism (an
    integer in [2, 2^62]: the step arithmetic is int64, and k above the horizon already
    gives a single level)."""
    if mechanism == "binary":
        if branching not in (None, 2):
            raise ValueError(f"mechanism 'binary' is the 2-ary tree, got branching="
                             f"{branching!r}; use mechanism 'kary' for another branching")
        return 2
    if isinstance(branching, (bool, np.bool_)) or not isinstance(branching, Integral) \
            or not 2 <= int(branching) <= MAX_BRANCHING:
        raise ValueError(f"mechanism {mechanism!r} needs branching = an integer in [2, 2^62], "
                         f"got {branching!r}")
    return int(branching)


class TreeEngine(CounterEngine):
    """The k-ary tree counter (module docstring): ``Counter(mechanism="binary" | "kary")``."""

    options: tuple[str, ...] = ("branching", "level_budgets", "estimator")
    variance_bytes_per_step = 24          # measured 16.4 at 2^22 steps (chunked digits)

    def __init__(self, horizon: int, *, noise: str, budget: float,
                 rng: np.random.Generator | None = None, mechanism: str = "binary",
                 branching: int | None = None, level_budgets: ArrayLike | None = None,
                 estimator: str = "covering") -> None:
        check_choice(estimator, "estimator", ESTIMATORS)
        k = check_branching(branching, mechanism)
        self.name = mechanism
        self.noise, self.budget, self.horizon = noise, budget, int(horizon)
        self.branching, self.estimator = k, estimator
        self.levels = tree_levels(self.horizon, k)
        name = "epsilon" if noise == "laplace" else "rho"
        # given and kept root first (module docstring); the levels below run from the leaves
        self.level_budgets = split_budget(budget, self.levels, level_budgets, name=name)
        self._leaf_budgets = self.level_budgets[::-1]
        # the causal BLUE weighs by the level variances: they must be normal doubles
        self._noise = GroupNoise(noise, self._leaf_budgets, rng, total=budget,
                                 groups=[f"level_budgets[{self.levels - 1 - level}] (nodes of "
                                         f"width {k**level})" for level in range(self.levels)],
                                 min_variance=MIN_VARIANCE[estimator])
        self.secure = self._noise.secure
        self.level_scales = self._noise.scales
        self.level_variances = self._noise.variances
        # per complete node at level l: the variance of its kept estimate
        self.node_variances = (self.level_variances if estimator == "covering"
                               else from_below_variances(self.level_variances, k))
        self.t = 0
        self.total = 0
        self._open = [0] * self.levels          # exact count of each level's open node
        self._kept: list[list[float]] = [[] for _ in range(self.levels)]

    def _combine(self, level: int, noisy: float) -> float:
        """A complete node's kept estimate: its noisy count (covering) or its from-below
        estimate from its noisy count and its k children's estimates (causal BLUE)."""
        if self.estimator == "covering" or level == 0:
            return noisy
        below = self.branching * self.node_variances[level - 1]
        return combine(noisy, self.level_variances[level], math.fsum(self._kept[level - 1]),
                       below)[0]

    def push(self, count: int) -> tuple[float, float]:
        count = self.check_step(count)
        for level in range(self.levels):
            self._open[level] += count
        self.t += 1
        self.total += count
        t, width = self.t, 1
        for level in range(self.levels):
            if t % width:
                break
            noisy = self._noise.draw(level, self._open[level])
            self._open[level] = 0
            kept = self._combine(level, noisy)
            if level:
                self._kept[level - 1].clear()   # the parent replaces its k children
            self._kept[level].append(kept)
            width *= self.branching
        estimate = math.fsum(math.fsum(v) for v in self._kept)
        variance = float(sum(len(v) * var for v, var in zip(self._kept, self.node_variances)
                             if v))
        return estimate, variance

    def _step_variances(self, steps: int) -> np.ndarray:
        """sum_l d_l(t) V_l for t = 1..steps, V_l = v_l (covering) or F_l (causal BLUE)."""
        return digit_variances(np.arange(1, steps + 1, dtype=np.int64), self.branching,
                               self.node_variances)

    def account(self) -> dict:
        return {
            "mechanism": f"{self.name} tree ({self.branching}-ary), {self.estimator} estimator",
            "noise": self.noise,
            "budget": {("epsilon" if self.noise == "laplace" else "rho"): self.budget},
            "unit": "event (one step's count changes by 1)",
            "levels": [{"level": level, "node_width": self.branching**level,
                        "budget": float(b), "sensitivity": 1.0, "scale": float(s)}
                       for level, (b, s) in enumerate(zip(self._leaf_budgets,
                                                          self.level_scales))],
            "composition": "sequential over levels (one node per level per event)",
        }

    def strategy(self, steps: int) -> StrategyRows:
        """Every node complete within ``steps`` steps (rows in release order: by end step,
        then level), its noise variance and release step."""
        steps = self.check_strategy_steps(steps)
        end_parts, start_parts, level_parts = [], [], []
        for level in range(self.levels):
            w = self.branching**level
            e = np.arange(w, steps + 1, w)
            end_parts.append(e)
            start_parts.append(e - w)
            level_parts.append(np.full(len(e), level))
        ends, starts, levels = (np.concatenate(p) for p in (end_parts, start_parts, level_parts))
        order = np.lexsort((levels, ends))
        ends, starts, levels = ends[order], starts[order], levels[order]
        lengths = ends - starts
        rows = np.repeat(np.arange(len(ends)), lengths)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        cols = np.arange(len(rows)) - np.repeat(offsets - starts, lengths)
        m = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(ends), steps))
        return StrategyRows(m, self.level_variances[levels], ends)
