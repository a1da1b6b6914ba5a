"""Continual counting with no known horizon: Chan, Shi, Song 2011's hybrid mechanism, with
k-ary tree blocks.

Blocks. Block 0 is step 0; block i >= 1 is steps [k^(i-1), k^i), of length (k - 1) k^(i-1),
so the blocks tile the whole time line and each is a known horizon.

* Block counters: block i runs the k-ary tree counter of :mod:`~dptree_opt.stream.tree` over
  its own steps (horizon = its length, estimator covering or causal BLUE), with budget
  ``split`` x total, split over its levels. An event lies in one block, so the block counters
  compose in parallel: together they cost ``split`` x total.
* Block totals (the "logarithmic mechanism"): when block i ends, its total is released with
  noise of budget (1 - split) x total (sensitivity 1; again one block per event).

The running count at step t in block i is the sum of the completed blocks' estimates plus the
block counter's running count. A completed block's estimate is its noisy total
(``estimator="covering"``: Chan et al.'s hybrid), or for ``estimator="causal"`` the
inverse-variance combination of the noisy total with the block counter's estimate of the whole
block, the causal BLUE of the block total from its rows (the two are independent, and the
tree's BLUE of its total is the sum of its top nodes' from-below estimates). Variance: the sum
of the completed blocks' variances plus the block counter's; O(log^3 t) like the bounded tree,
with O(k log t) memory. Pure eps-DP (Laplace) or rho-zCDP (Gaussian) overall, event level, for
every prefix of an infinite stream.

Budget sanity. "Unbounded" means up to ``MAX_UNBOUNDED_STEPS`` = 2^62 steps (int64 step
arithmetic; about 146,000 years at a step per microsecond). When the counter is made, the
block totals' noise and the block trees' levels are checked for every block up to that step
(the level scale grows with the block's height: the first block's single level and the last
block's levels are the extremes), so no block is refused after the stream has started. With
the causal BLUE every variance must also be a normal double (the combinations weigh by them,
in ratio form: :func:`~dptree_opt.stream.tree.combine`).
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp

from ..privacy import calibrate
from ..validation import check_choice, check_real
from .base import MAX_UNBOUNDED_STEPS, CounterEngine, StrategyRows
from .noise import GroupNoise, check_group_scales, group_variances
from .tree import (ESTIMATORS, MIN_VARIANCE, TreeEngine, check_branching, combine,
                   digit_variances, from_below_variances, tree_levels)

__all__ = ["HybridEngine", "block_bounds", "MAX_UNBOUNDED_STEPS"]


def block_bounds(i: int, k: int) -> tuple[int, int]:
    """[start, end) of block i: [0, 1) for i = 0, else [k^(i-1), k^i)."""
    return (0, 1) if i == 0 else (k ** (i - 1), k ** i)


def _block_of_step(t: int, k: int) -> int:
    """The block holding the t-th step (t >= 1, 0-based index t - 1): 0 for t = 1, else the
    i with k^(i-1) <= t - 1 < k^i (exact integer arithmetic)."""
    i, width = 0, 1
    while width <= t - 1:
        i, width = i + 1, width * k
    return i


class HybridEngine(CounterEngine):
    """The unbounded counter (module docstring): ``Counter(None, ...)``."""

    options = ("branching", "estimator", "split")
    option_hints = {"level_budgets": "the unbounded counter's blocks have different heights; "
                                     "give split= (the share of the budget for the block "
                                     "trees) instead"}
    variance_bytes_per_step = 40          # measured 24.0 (k = 2), 32.0 (k = 16) at 2^22 steps

    def __init__(self, *, noise: str, budget: float, rng: np.random.Generator | None = None,
                 mechanism: str = "binary", branching: int | None = None,
                 estimator: str = "covering", split: float = 0.5) -> None:
        split = check_real(split, "split", above=0, below=1)
        check_choice(estimator, "estimator", ESTIMATORS)
        self.name = f"unbounded {mechanism}"
        self.noise, self.budget, self.horizon = noise, budget, None
        self.branching = check_branching(branching, mechanism)
        self.mechanism, self.estimator, self.split = mechanism, estimator, float(split)
        self.secure = rng is None
        self._check_blocks()
        self._totals = GroupNoise(noise, [(1.0 - self.split) * budget], rng, total=budget,
                                  groups=["the block totals"],
                                  min_variance=MIN_VARIANCE[estimator])
        self.total_variance = float(self._totals.variances[0])
        self._new_tree = functools.partial(TreeEngine, noise=noise, budget=self.split * budget,
                                           rng=rng, mechanism=mechanism, branching=branching,
                                           estimator=estimator)
        self.t = 0
        self.total = 0
        self.block = -1
        self._start_block()
        self._done_estimate = 0.0     # sum of completed blocks' estimates
        self._done_variance = 0.0

    def _check_blocks(self) -> None:
        """Budget sanity for every block up to ``MAX_UNBOUNDED_STEPS`` (module docstring),
        before any measurement is built."""
        k, trees = self.branching, self.split * self.budget
        last = _block_of_step(MAX_UNBOUNDED_STEPS, k)
        start, end = block_bounds(last, k)
        heights = (1, tree_levels(end - start, k))     # block 0 and the last block
        budgets = [trees / h for h in heights] + [(1.0 - self.split) * self.budget]
        scales = [calibrate(1.0, b, self.noise)[0] for b in budgets]
        check_group_scales(self.noise, scales, budget=self.budget, group_budgets=budgets,
                           groups=["the single level of block 0's tree",
                                   (f"each of the {heights[1]} levels of block {last}'s tree "
                                    f"(from step {start + 1})"), "the block totals"],
                           min_variance=MIN_VARIANCE[self.estimator])

    def _start_block(self) -> None:
        """Make the next block's tree counter (its measurements built and checked); on a
        refusal the counter is left as it was."""
        start, end = block_bounds(self.block + 1, self.branching)
        self._tree = self._new_tree(end - start)
        self.block += 1

    def _block_estimate(self, tree_estimate: float, tree_variance: float) -> tuple[float, float]:
        """A completed block's estimate: its noisy total (covering), or that combined with the
        block tree's estimate of the whole block (causal BLUE)."""
        noisy = self._totals.draw(0, self._tree.total)
        if self.estimator == "covering":
            return noisy, self.total_variance
        return combine(noisy, self.total_variance, tree_estimate, tree_variance)

    def push(self, count: int) -> tuple[float, float]:
        count = self.check_step(count)
        if self._tree.t == self._tree.horizon:
            # the next block starts here, before this step draws anything: a refusal while
            # its measurements are built leaves the counter as it was
            self._start_block()
        est, var = self._tree.push(count)
        self.t += 1
        self.total += count
        if self._tree.t == self._tree.horizon:          # the block ends: release its total
            b_est, b_var = self._block_estimate(est, var)
            self._done_estimate += b_est
            self._done_variance += b_var
            return self._done_estimate, self._done_variance
        return self._done_estimate + est, self._done_variance + var

    def _tree_node_variances(self, length: int) -> np.ndarray:
        """Per-level kept-estimate variances of a block tree of ``length`` steps, without
        building its sampler."""
        levels = tree_levels(length, self.branching)
        v = group_variances(self.noise, np.full(levels, self.split * self.budget / levels),
                            self.secure)
        return v if self.estimator == "covering" else from_below_variances(v, self.branching)

    def _step_variances(self, steps: int) -> np.ndarray:
        """Exact variances after steps 1..steps: completed blocks plus the block counter's
        digit variances within the current block. O(steps log steps), vectorised per block."""
        out = np.zeros(steps)
        done, i, k = 0.0, 0, self.branching
        while True:
            start, end = block_bounds(i, k)
            if start >= steps:
                break
            node_v = self._tree_node_variances(end - start)
            inside = np.arange(start + 1, min(end, steps) + 1)     # steps ending in block i
            local = digit_variances(inside - start, k, node_v)
            out[inside - 1] = done + local
            if end <= steps:                                     # block i completes
                block_v = (self.total_variance if self.estimator == "covering" else
                           combine(0.0, self.total_variance, 0.0, float(local[-1]))[1])
                done += block_v
                out[end - 1] = done
            i += 1
        return out

    def account(self) -> dict:
        name = "epsilon" if self.noise == "laplace" else "rho"
        return {
            "mechanism": f"unbounded hybrid (Chan-Shi-Song 2011): {self.branching}-ary tree "
                         f"blocks [k^(i-1), k^i), {self.estimator} estimator",
            "noise": self.noise,
            "budget": {name: self.budget},
            "unit": "event (one step's count changes by 1)",
            "block_trees": {name: self.split * self.budget,
                            "composition": "parallel over blocks, sequential over a "
                                           "block's levels (equal split)"},
            "block_totals": {name: (1.0 - self.split) * self.budget, "sensitivity": 1.0,
                             "scale": float(self._totals.scales[0])},
            "composition": "sequential: block trees + block totals",
        }

    def strategy(self, steps: int) -> StrategyRows:
        """The rows released within ``steps`` steps: each block's tree nodes and, for each
        completed block, its total (the block tree's nodes are shifted to the block)."""
        steps = self.check_strategy_steps(steps, minimum=1)
        mats, variances, release = [], [], []
        i, k = 0, self.branching
        while block_bounds(i, k)[0] < steps:
            start, end = block_bounds(i, k)
            probe = self._new_tree(end - start)
            rows = probe.strategy(min(end, steps) - start)
            m = sp.hstack([sp.csr_matrix((rows.matrix.shape[0], start)), rows.matrix,
                           sp.csr_matrix((rows.matrix.shape[0], steps - min(end, steps)))])
            mats.append(m)
            variances.append(rows.variances)
            release.append(rows.release_step + start)
            if end <= steps:
                tot = np.zeros((1, steps))
                tot[0, start:end] = 1.0
                mats.append(sp.csr_matrix(tot))
                variances.append(np.array([self.total_variance]))
                release.append(np.array([end]))
            i += 1
        return StrategyRows(sp.vstack(mats).tocsr(), np.concatenate(variances),
                            np.concatenate(release))
