"""The interface every streaming counter implements (one engine per mechanism).

``stream.Counter`` validates what is common (horizon, budget, rng, each step's count) and
delegates to an engine: ``push(count) -> (estimate, variance)`` for the next step,
``step_variances(steps)`` (the exact variance of the running count after each of steps
1..steps, vectorised), ``account()`` (a JSON-able privacy account) and, for checks on small
horizons, ``strategy(steps)`` (the released rows as a matrix over the first ``steps`` inputs,
in release order, with each row's noise variance and the step at which it is released).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["CounterEngine", "StrategyRows"]


class StrategyRows:
    """The rows a counter releases over ``steps`` inputs: ``matrix`` (rows x steps, sparse),
    ``variances`` (per row), ``release_step`` (per row: the number of inputs seen when the row
    is released; a row only involves inputs before it), ``sensitivity_scale`` (per row: the
    row's noise scale divided by its calibration, used to recompute privacy)."""

    def __init__(self, matrix, variances, release_step):
        self.matrix = sp.csr_matrix(matrix)
        self.variances = np.asarray(variances, dtype=float)
        self.release_step = np.asarray(release_step, dtype=np.int64)


class CounterEngine:
    """Abstract engine (module docstring). Subclasses set ``name``, ``noise`` ("laplace" |
    "gaussian"), ``budget``, ``horizon`` (an int, or None when unbounded) and ``secure``."""

    name = "abstract"

    def push(self, count: int) -> tuple[float, float]:
        """Add the next step's exact count; return (private running count, its exact
        variance)."""
        raise NotImplementedError

    def step_variances(self, steps: int) -> np.ndarray:
        """Exact variances of the running counts after steps 1..steps, shape (steps,)."""
        raise NotImplementedError

    def account(self) -> dict:
        """The privacy account: mechanism, noise, total budget, unit (event level), the budget
        and scale per noise group, the sampler."""
        raise NotImplementedError

    def strategy(self, steps: int) -> StrategyRows:
        """The released rows over the first ``steps`` inputs (small ``steps`` only)."""
        raise NotImplementedError
