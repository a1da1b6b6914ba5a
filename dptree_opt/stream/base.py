"""The interface every streaming counter implements (one engine per mechanism).

``stream.Counter`` validates what is common (horizon, budget, rng, the option names: each
engine declares its ``options``) and delegates to an engine: ``push(count) -> (estimate,
variance)`` for the next step (every engine checks the step first with
:meth:`~CounterEngine.check_step`, and keeps ``t`` and ``total``, the steps and the exact count
so far: one state, which the front end reads), ``step_variances(steps)`` (the exact
variance of the running count after each of steps 1..steps, vectorised; refused above
``MAX_VARIANCE_BYTES`` of estimated memory, from the engine's ``variance_bytes_per_step``),
``account()`` (a JSON-able privacy account) and, for checks on small horizons,
``strategy(steps)`` (the released rows as a matrix over the first ``steps`` inputs, in release
order, with each row's noise variance and the step at which it is released).

Engines hold secure noise: they refuse copying and pickling (:mod:`~dptree_opt.stream.secret`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from ..privacy import EXACT_LIMIT
from ..validation import check_int
from .secret import SecretState

__all__ = ["CounterEngine", "StrategyRows", "MAX_VARIANCE_BYTES", "VARIANCE_CHUNK",
           "MAX_STRATEGY_STEPS", "MAX_UNBOUNDED_STEPS"]

# an unbounded counter's reach: steps and node bounds are int64 (module unbounded)
MAX_UNBOUNDED_STEPS = 1 << 62

# step_variances(steps) allocates its result and temporaries: refused when the estimate
# steps x variance_bytes_per_step exceeds 2 GiB (8 to 40 bytes per step: 2^25.7 to 2^28 steps)
MAX_VARIANCE_BYTES = 1 << 31
# engines that evaluate per-step formulas do it in chunks of this many steps (bounded
# temporaries: their peak is the result plus O(chunk))
VARIANCE_CHUNK = 1 << 16
# ``strategy(steps)`` is for checks on small horizons (matrices, Python loops): at most this
MAX_STRATEGY_STEPS = 8192


class StrategyRows:
    """The rows a counter releases over ``steps`` inputs: ``matrix`` (rows x steps, sparse),
    ``variances`` (per row), ``release_step`` (per row: the number of inputs seen when the row
    is released; a row only involves inputs before it), ``sensitivity_scale`` (per row: the
    row's noise scale divided by its calibration, used to recompute privacy)."""

    def __init__(self, matrix: sp.csr_matrix | sp.csr_array | npt.NDArray[np.float64],
                 variances: npt.ArrayLike,
                 release_step: npt.ArrayLike) -> None:
        # one call per type: scipy-stubs' overloads do not accept the union
        if isinstance(matrix, np.ndarray):
            self.matrix = sp.csr_matrix(matrix)
        elif isinstance(matrix, sp.csr_matrix):
            self.matrix = sp.csr_matrix(matrix)
        else:  # any other sparse matrix or array
            self.matrix = sp.csr_matrix(matrix)
        self.variances = np.asarray(variances, dtype=float)
        self.release_step = np.asarray(release_step, dtype=np.int64)


class CounterEngine(SecretState):
    """Abstract engine (module docstring). Subclasses set ``name``, ``noise`` ("laplace" |
    "gaussian"), ``budget``, ``horizon`` (an int, or None when unbounded) and ``secure``
    (True for OpenDP noise: copies and pickles are refused), and declare ``options`` (the
    keyword options ``stream.Counter`` passes on; anything else is refused by name there),
    ``option_hints`` (what to say about a refused option, by name) and
    ``variance_bytes_per_step`` (the peak memory of ``step_variances`` per step, measured).
    ``t`` and ``total``: the steps pushed and their exact count (set by every engine)."""

    name = "abstract"
    noise: str
    budget: float
    horizon: int | None
    secure: bool
    t: int
    total: int
    options: tuple[str, ...] = ()
    option_hints: dict[str, str] = {}
    variance_bytes_per_step = 64

    def check_step(self, count: int) -> int:
        """The next step's count, checked before anything changes or is drawn: a
        non-negative integer (not a bool), a step within the horizon (``MAX_UNBOUNDED_STEPS``
        when unbounded), and a running count below 2^53 (exact in double); ValueError
        otherwise. Every ``push`` calls it first."""
        count = check_int(count, "count", 0)
        if self.horizon is not None and self.t >= self.horizon:
            raise ValueError(f"the horizon T = {self.horizon} is reached: no more steps")
        if self.horizon is None and self.t >= MAX_UNBOUNDED_STEPS:
            raise ValueError("the unbounded counter's limit of 2^62 steps is reached: no "
                             "more steps")
        if self.total + count >= EXACT_LIMIT:
            raise ValueError(f"count = {count}: the running count would reach 2^53 (not "
                             "exact in double)")
        return count

    def push(self, count: int) -> tuple[float, float]:
        """Add the next step's exact count (checked first: :meth:`check_step`); return
        (private running count, its exact variance)."""
        raise NotImplementedError

    def step_variances(self, steps: int | None = None) -> np.ndarray:
        """Exact variances of the running counts after steps 1..steps (default: the horizon),
        shape (steps,): ``steps`` checked (an integer in [0, horizon], and the estimated memory
        at most ``MAX_VARIANCE_BYTES``) before anything is allocated."""
        return self._step_variances(self.check_variance_steps(steps))

    def check_variance_steps(self, steps: int | None) -> int:
        """``steps`` for :meth:`step_variances`: None means the horizon (an unbounded counter
        needs it given); an integer in [0, horizon]; ValueError when ``steps`` x
        ``variance_bytes_per_step`` exceeds ``MAX_VARIANCE_BYTES`` (nothing allocated)."""
        if steps is None:
            if self.horizon is None:
                raise ValueError("steps: an unbounded counter needs steps= (how many steps)")
            steps = self.horizon
        steps = check_int(steps, "steps", 0, self.horizon,
                          why=None if self.horizon is None else "the horizon")
        need = steps * self.variance_bytes_per_step
        if need > MAX_VARIANCE_BYTES:
            most = MAX_VARIANCE_BYTES // self.variance_bytes_per_step
            raise ValueError(f"steps = {steps}: the variances of {steps} steps need about "
                             f"{need / 2**30:.3g} GiB ({self.variance_bytes_per_step} bytes per "
                             f"step), above the limit of {MAX_VARIANCE_BYTES / 2**30:g} GiB; "
                             f"ask for at most {most} steps")
        return steps

    def _step_variances(self, steps: int) -> np.ndarray:
        """:meth:`step_variances` for a checked ``steps``."""
        raise NotImplementedError

    def check_strategy_steps(self, steps: int, minimum: int = 0) -> int:
        """``steps`` for :meth:`strategy`: an integer in [minimum, horizon] and at most
        ``MAX_STRATEGY_STEPS`` (it builds matrices over the steps); ValueError otherwise."""
        top = MAX_STRATEGY_STEPS if self.horizon is None else min(self.horizon,
                                                                  MAX_STRATEGY_STEPS)
        return check_int(steps, "steps", minimum, top,
                         why=f"the horizon, and at most {MAX_STRATEGY_STEPS}: strategy() "
                             f"builds matrices over the steps")

    def account(self) -> dict[str, object]:
        """The privacy account: mechanism, noise, total budget, unit (event level), the budget
        and scale per noise group, the sampler."""
        raise NotImplementedError

    def strategy(self, steps: int) -> StrategyRows:
        """The released rows over the first ``steps`` inputs (small ``steps`` only)."""
        raise NotImplementedError
