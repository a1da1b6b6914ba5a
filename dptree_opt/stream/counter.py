"""``stream.Counter``: a private running count over a stream of non-negative integer counts,
released at every step (continual observation, event level: one record changes one step's
count by one).

One front end, one engine per mechanism (:class:`~dptree_opt.stream.base.CounterEngine`):

==================  =========================================================  ==============
mechanism           what                                                       noise
==================  =========================================================  ==============
"binary", "kary"    k-ary tree, covering sums or the causal BLUE               Laplace/Gauss
                    (:mod:`~dptree_opt.stream.tree`; ``estimator=``)
"negative_digits"   Andersson-Pagh-Steiner-Torkamani k-ary tree with            Laplace/Gauss
                    negative digits (:mod:`~dptree_opt.stream.negative_digits`)
"tree_blue"         a tree's offline BLUE, noise drawn ahead                   Laplace/Gauss
                    (:mod:`~dptree_opt.stream.ahead`)
"sqrt"              square-root factorisation (Henzinger-Upadhyay-Upadhyay)     Gaussian
"blt"               buffered linear Toeplitz (Dvijotham et al. 2024)           Gaussian
==================  =========================================================  ==============

``horizon=None`` gives the unbounded variant (:mod:`~dptree_opt.stream.unbounded`, Chan, Shi,
Song 2011's hybrid mechanism with tree blocks; tree mechanisms only).

Noise. ``rng=None`` (real use): OpenDP's samplers, every measurement built and its privacy map
checked when the counter is made (for the unbounded counter: when each block starts, before its
first draw). A numpy ``Generator``: simulation noise for studies (no privacy guarantee).
"""

from __future__ import annotations

import importlib
from numbers import Integral

import numpy as np

from ..privacy import check_budget
from .noise import check_rng

__all__ = ["Counter", "MECHANISMS", "MAX_HORIZON"]

# mechanism -> (module of dptree_opt.stream, engine class)
_ENGINES = {
    "binary": ("tree", "TreeEngine"),
    "kary": ("tree", "TreeEngine"),
    "negative_digits": ("negative_digits", "NegativeDigitsEngine"),
    "sqrt": ("factorization", "SqrtEngine"),
    "blt": ("factorization", "BLTEngine"),
    "tree_blue": ("ahead", "AheadEngine"),
}
MECHANISMS = tuple(_ENGINES)
_TREES = ("binary", "kary")
MAX_HORIZON = 1 << 40
_EXACT = 1 << 53


def _engine_class(mechanism: str):
    module, name = _ENGINES[mechanism]
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


class Counter:
    """Continual counting (module docstring).

    Parameters
    ----------
    horizon : T, the number of steps (an integer in [1, 2^40]), or None for an unbounded
        stream (tree mechanisms: Chan et al.'s hybrid with tree blocks).
    epsilon | rho : exactly one: pure eps-DP (Laplace) or rho-zCDP (Gaussian), event level.
    mechanism : one of ``MECHANISMS``.
    rng : None for secure noise (OpenDP), or a ``numpy.random.Generator`` for simulation.
    **options : the mechanism's own: ``branching``, ``level_budgets`` (per level, leaves
        first, summing to the total), ``estimator`` ("covering" | "causal") for trees;
        ``split`` for the unbounded counter; ``buffers``, ``objective``, ``theta``, ``omega``
        for "blt".

    ``update(count) -> estimate`` adds one step and returns the running count after it;
    ``variance`` is its exact variance; ``step_variances(steps)`` the exact variances after
    steps 1..steps (default T); ``account()`` the privacy account (JSON-able).
    """

    def __init__(self, horizon, *, epsilon=None, rho=None, mechanism: str = "binary",
                 rng=None, **options):
        if horizon is not None and (isinstance(horizon, (bool, np.bool_))
                                    or not isinstance(horizon, Integral)
                                    or not 1 <= horizon <= MAX_HORIZON):
            raise ValueError(f"horizon must be an integer in [1, 2^40] or None (unbounded), "
                             f"got {horizon!r}")
        if (epsilon is None) == (rho is None):
            raise ValueError("give exactly one of epsilon (pure DP, Laplace) or rho (zCDP, "
                             "Gaussian)")
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
        check_rng(rng)
        self.noise = "laplace" if epsilon is not None else "gaussian"
        self.budget = check_budget(epsilon if epsilon is not None else rho,
                                   "epsilon" if epsilon is not None else "rho")
        self.mechanism = mechanism
        self.horizon = None if horizon is None else int(horizon)
        if mechanism in _TREES:
            options["mechanism"] = mechanism
        if horizon is None:
            if mechanism not in _TREES:
                raise ValueError(f"an unbounded stream (horizon=None) needs a tree mechanism "
                                 f"{_TREES}; {mechanism!r} is built for a known horizon")
            from .unbounded import HybridEngine
            self.engine = HybridEngine(noise=self.noise, budget=self.budget, rng=rng,
                                       **options)
        else:
            self.engine = _engine_class(mechanism)(self.horizon, noise=self.noise,
                                                   budget=self.budget, rng=rng, **options)
        self.secure = rng is None
        self.t = 0
        self.total = 0
        self.estimate = 0.0
        self.variance = 0.0

    def __getattr__(self, name):
        # mechanism-specific attributes (branching, levels, level_budgets, ...) of the engine
        if name == "engine":
            raise AttributeError(name)
        return getattr(self.engine, name)

    def update(self, count) -> float:
        """Add the next step's count (a non-negative integer) and return the private running
        count after it; ``variance`` is its exact variance. ValueError for a bad count or a
        step beyond the horizon (nothing drawn)."""
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, Integral) or count < 0:
            raise ValueError(f"count must be a non-negative integer, got {count!r}")
        if self.horizon is not None and self.t >= self.horizon:
            raise ValueError(f"the horizon T = {self.horizon} is reached: no more steps")
        count = int(count)
        if self.total + count >= _EXACT:
            raise ValueError("the running count would reach 2^53 (not exact in double)")
        self.estimate, self.variance = self.engine.push(count)
        self.total += count
        self.t += 1
        return self.estimate

    def step_variances(self, steps: int | None = None) -> np.ndarray:
        """Exact variances of the running counts after steps 1..steps (default: T)."""
        if steps is None:
            if self.horizon is None:
                raise ValueError("an unbounded counter needs steps=")
            steps = self.horizon
        if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, Integral) \
                or steps < 0 or (self.horizon is not None and steps > self.horizon):
            raise ValueError(f"steps must be an integer in [0, horizon], got {steps!r}")
        return self.engine.step_variances(int(steps))

    def account(self) -> dict:
        """The privacy account (JSON-able): mechanism, noise, budget, unit, per-group budgets
        and scales, the sampler."""
        acc = dict(self.engine.account())
        acc["horizon"] = self.horizon
        if "sampler" not in acc:
            from ..data_release.secure_noise import sampler_description
            acc["sampler"] = (sampler_description(self.noise) if self.secure
                              else "numpy simulation noise (NO privacy guarantee)")
        return acc

    def __repr__(self) -> str:
        budget = f"epsilon={self.budget}" if self.noise == "laplace" else f"rho={self.budget}"
        return (f"Counter(horizon={self.horizon}, {budget}, mechanism={self.mechanism!r}, "
                f"t={self.t}, {'secure' if self.secure else 'simulation'})")
