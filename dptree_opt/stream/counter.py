"""A running counter over a stream of T non-negative integer counts, released at every step
with the k-ary tree mechanism and covering sums (Dwork, Naor, Pitassi, Rothblum 2010; Chan,
Shi, Song 2011; [HON] section 1).

Tree. Level l (l = 0 leaves) has nodes of width k^l: node i covers steps [i k^l, (i + 1) k^l).
Levels 0..L are measured, L = max{l : k^l <= T} (a wider node never completes within the
horizon). A node's noisy count is drawn when its last step arrives. Changing one step's count
by one (one record added or removed) changes one node per level by one, so level l has
sensitivity 1 (l1 and l2) and budget eps_l (Laplace, scale 1 / eps_l; sum eps_l = eps, pure
DP) or rho_l (Gaussian, sigma = 1 / sqrt(2 rho_l); sum rho_l = rho, zCDP): the equal split by
default, ``level_budgets`` otherwise.

Covering sums. The count after t steps is the sum of the complete nodes of the base-k
decomposition of [0, t): d_l(t) nodes at level l, d_l the base-k digits of t. Its variance
is exactly sum_l d_l(t) v_l (v_l the per-node noise variance; for the binary tree with equal
budgets popcount(t) v). The estimate at step t uses only nodes complete by step t, so it is
causal: later inputs never change it. Memory O(k L): per level the open node's exact count
and the noisy complete nodes not yet merged into their parent.

Noise. ``rng=None`` (real use): OpenDP's exact discrete Laplace / discrete Gaussian samplers
(``data_release.secure_noise``), every level's measurement built and its privacy map checked
when the counter is made; variances are those of the discrete noise. A numpy ``Generator``:
continuous Laplace / Gaussian SIMULATION noise for studies (no privacy guarantee).
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from ..mechanism import discrete_variance
from ..privacy import calibrate, check_budget, split_budget

__all__ = ["Counter", "MECHANISMS", "MAX_HORIZON"]

MECHANISMS = ("binary", "kary")
MAX_HORIZON = 1 << 40
_EXACT = 1 << 53


def _levels(horizon: int, k: int) -> int:
    """L = max{l : k^l <= T} (exact integer arithmetic)."""
    L, width = 0, k
    while width <= horizon:
        L, width = L + 1, width * k
    return L


class Counter:
    """Continual counting with a k-ary tree and covering sums (module docstring).

    Parameters
    ----------
    horizon : T, the number of steps (an integer >= 1).
    epsilon | rho : exactly one: pure eps-DP (Laplace) or rho-zCDP (Gaussian), event level
        (one record, i.e. one step's count changing by one).
    mechanism : "binary" (k = 2) or "kary" (``branching`` = k >= 2).
    level_budgets : per-level budgets, leaves first (L + 1 of them, summing to the total);
        None = the equal split.
    rng : None for secure noise (OpenDP), or a ``numpy.random.Generator`` for simulation.

    ``update(count) -> estimate`` adds one step and returns the running count after it;
    ``variance`` is its exact variance; ``step_variances()`` all T of them.
    """

    def __init__(self, horizon, *, epsilon=None, rho=None, mechanism: str = "binary",
                 branching: int | None = None, level_budgets=None, rng=None):
        if isinstance(horizon, (bool, np.bool_)) or not isinstance(horizon, Integral) \
                or not 1 <= horizon <= MAX_HORIZON:
            raise ValueError(f"horizon must be an integer in [1, 2^40], got {horizon!r}")
        if (epsilon is None) == (rho is None):
            raise ValueError("give exactly one of epsilon (pure DP, Laplace) or rho (zCDP, "
                             "Gaussian)")
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
        if mechanism == "binary":
            if branching not in (None, 2):
                raise ValueError("mechanism='binary' has branching 2; use mechanism='kary'")
            k = 2
        else:
            if isinstance(branching, (bool, np.bool_)) or not isinstance(branching, Integral) \
                    or branching < 2:
                raise ValueError(f"mechanism='kary' needs branching = an integer >= 2, got "
                                 f"{branching!r}")
            k = int(branching)
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise ValueError("rng must be None (secure noise) or a numpy.random.Generator "
                             "(simulation)")
        self.noise = "laplace" if epsilon is not None else "gaussian"
        name = "epsilon" if epsilon is not None else "rho"
        self.budget = check_budget(epsilon if epsilon is not None else rho, name)
        self.horizon, self.branching = int(horizon), k
        self.levels = _levels(self.horizon, k) + 1
        self.level_budgets = split_budget(self.budget, self.levels, level_budgets, name=name)
        self.level_scales = np.array([calibrate(1.0, b, self.noise)[0]
                                      for b in self.level_budgets])
        self._rng = rng
        if rng is None:
            from ..data_release.secure_noise import _opendp_measurement
            self._measurements = [
                None if not math.isfinite(s) else
                _opendp_measurement(noise=self.noise, scale=s, sensitivity=1.0, budget=b)
                for s, b in zip(self.level_scales, self.level_budgets)]
            self.level_variances = np.array([discrete_variance(s, self.noise)
                                             if math.isfinite(s) else math.inf
                                             for s in self.level_scales])
        else:
            self._measurements = None
            self.level_variances = np.array([calibrate(1.0, b, self.noise)[1]
                                             for b in self.level_budgets])
        self.secure = rng is None
        self.t = 0
        self._open = [0] * self.levels          # exact count of each level's open node
        self._kept: list[list[float]] = [[] for _ in range(self.levels)]
        self.estimate = 0.0
        self.variance = 0.0

    # ------------------------------------------------------------------ noise
    def _noisy(self, level: int, count: int) -> float:
        if self._measurements is not None:
            meas = self._measurements[level]
            if meas is None:
                return math.nan
            return float(meas([int(count)])[0])
        s = self.level_scales[level]
        if not math.isfinite(s):
            return math.nan
        z = (self._rng.laplace(0.0, s) if self.noise == "laplace"
             else self._rng.normal(0.0, s))
        return count + float(z)

    # ------------------------------------------------------------------ steps
    def update(self, count) -> float:
        """Add the next step's count (a non-negative integer) and return the private running
        count after it (covering sums of the complete nodes); ``variance`` is its exact
        variance. ValueError for a bad count or a step beyond the horizon (nothing drawn)."""
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, Integral) or count < 0:
            raise ValueError(f"count must be a non-negative integer, got {count!r}")
        if self.t >= self.horizon:
            raise ValueError(f"the horizon T = {self.horizon} is reached: no more steps")
        count = int(count)
        if self._open[-1] + count >= _EXACT:
            raise ValueError("the running count would reach 2^53 (not exact in double)")
        for level in range(self.levels):
            self._open[level] += count
        self.t += 1
        t, width = self.t, 1
        for level in range(self.levels):
            if t % width:
                break
            noisy = self._noisy(level, self._open[level])
            self._open[level] = 0
            if level:
                self._kept[level - 1].clear()   # the parent replaces its k children
            self._kept[level].append(noisy)
            width *= self.branching
        self.estimate = float(sum(sum(v) for v in self._kept))
        self.variance = float(sum(len(v) * var
                                  for v, var in zip(self._kept, self.level_variances)))
        return self.estimate

    def step_variances(self) -> np.ndarray:
        """Exact variances of the running counts after steps 1..T: sum_l d_l(t) v_l with d_l
        the base-k digits of t. O(T L), vectorised over steps."""
        t = np.arange(1, self.horizon + 1, dtype=np.int64)
        out = np.zeros(self.horizon)
        for level in range(self.levels):
            digits = (t // self.branching**level) % self.branching
            out += np.where(digits > 0, digits * self.level_variances[level], 0.0)
        return out
