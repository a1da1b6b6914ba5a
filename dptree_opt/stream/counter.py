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

``design=d`` runs an offline design instead (a ``Design`` of ``optimize.best_mechanism`` for
``workloads.prefix(T)``, any optimiser's result with ``.mechanism()``, or a ``Mechanism`` over T
bins): its BLUE with the noise drawn ahead, in the secure form of the releases (integer
strategies as they are; real-valued ones -- square root, BLT, the Gaussian optimum -- as scaled
integer strategies with exact noise), :class:`~dptree_opt.stream.ahead.DesignEngine`. The
budget may be left out (the design's); a design that cannot run securely is refused first.

``horizon=None`` gives the unbounded variant (:mod:`~dptree_opt.stream.unbounded`, Chan, Shi,
Song 2011's hybrid mechanism with tree blocks; tree mechanisms only; up to 2^62 steps).

Noise. ``rng=None`` (real use): OpenDP's samplers, every measurement built and its privacy map
checked when the counter is made (for the unbounded counter: when each block starts, before its
first draw). A numpy ``Generator``: simulation noise for studies (no privacy guarantee).

Checked when the counter is made, before anything is drawn (ValueError): the horizon, the
budget, the mechanism and its options (each engine declares the options it takes; any other
is refused by name, with the accepted ones), and budget sanity for secure and simulation
counters alike (:func:`dptree_opt.privacy.check_noise_scales`): noise identically 0 in double
precision (exact counts) or wider than 2^53 / 64 (the noisy counts leave the exact integers
of doubles; OpenDP's integer samplers saturate) is refused, for every level, every block of
the unbounded counter and the float Gaussian of "sqrt" / "blt". The estimators that weigh by
the variances (``estimator="causal"``, and "tree_blue"'s offline BLUE) also refuse variances
below the smallest normal double (2.2e-308): every budget accepted gives finite estimates and
finite, positive variances (an unmeasured level aside).

Limits. ``MAX_HORIZON`` = 2^40 steps ("sqrt": 2^24, "tree_blue": 2^22: their noise is held
in memory); ``step_variances(steps)`` is refused when its estimated memory exceeds
``MAX_VARIANCE_BYTES`` = 2 GiB (8 to 40 bytes per step by mechanism).

No replay (:mod:`~dptree_opt.stream.secret`). A secure counter, its engine and its noise refuse
``copy.copy``, ``copy.deepcopy``, ``pickle`` (every protocol) and ``copy.replace`` with a
TypeError: a copy fed other data would replay the noise and publish the data's difference.
Checkpoint the released outputs (public) instead, and continue with a new counter.
Simulation counters can be copied and pickled: the copy replays the same simulated noise.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any
from numbers import Integral

import numpy as np

from ..data_release.secure_noise import design_budget, design_mechanism, sampler_description
from ..privacy import check_budget
from .base import MAX_VARIANCE_BYTES, CounterEngine
from .noise import check_rng
from .secret import SecretState
from .unbounded import HybridEngine

__all__ = ["Counter", "MECHANISMS", "MAX_HORIZON", "MAX_VARIANCE_BYTES"]

# mechanism -> (module of dptree_opt.stream, engine class); "design": Counter(design=d)
_ENGINES = {
    "binary": ("tree", "TreeEngine"),
    "kary": ("tree", "TreeEngine"),
    "negative_digits": ("negative_digits", "NegativeDigitsEngine"),
    "sqrt": ("factorization", "SqrtEngine"),
    "blt": ("factorization", "BLTEngine"),
    "tree_blue": ("ahead", "AheadEngine"),
}
MECHANISMS = tuple(_ENGINES)
_ENGINES["design"] = ("ahead", "DesignEngine")
_TREES = ("binary", "kary")
MAX_HORIZON = 1 << 40


def _engine_class(mechanism: str, unbounded: bool = False) -> type[CounterEngine]:
    if unbounded:
        return HybridEngine
    module, name = _ENGINES[mechanism]
    engine: type[CounterEngine] = getattr(importlib.import_module(f"{__package__}.{module}"),
                                          name)
    return engine


def _check_options(options: dict[str, object], engine: type[CounterEngine], mechanism: str,
                   unbounded: bool) -> None:
    """Refuse options the engine does not declare (ValueError naming the mechanism, the
    option and the accepted ones), before the engine is made."""
    bad = sorted(set(options) - set(engine.options))
    if not bad:
        return
    what = (f"mechanism {mechanism!r} with horizon=None (unbounded)" if unbounded
            else "a design (design=)" if mechanism == "design" else f"mechanism {mechanism!r}")
    takes = (f"its options are {', '.join(engine.options)}" if engine.options
             else "it takes no options")
    hints = "".join(f"; {name}: {engine.option_hints[name]}" for name in bad
                    if name in engine.option_hints)
    raise ValueError(f"{what} does not take the option{'s' if len(bad) > 1 else ''} "
                     f"{', '.join(bad)} ({takes}){hints}")


class Counter(SecretState):
    """Continual counting (module docstring).

    Parameters
    ----------
    horizon : T, the number of steps (an integer in [1, 2^40]), or None for an unbounded
        stream (tree mechanisms: Chan et al.'s hybrid with tree blocks; up to 2^62 steps).
    epsilon | rho : exactly one: pure eps-DP (Laplace) or rho-zCDP (Gaussian), event level;
        with ``design`` at most one, equal to the design's (default: the design's).
    mechanism : one of ``MECHANISMS`` (default "binary"), or None with ``design``.
    design : an offline design over the T steps to run with its noise drawn ahead (module
        docstring); exclusive with ``mechanism`` and its options.
    rng : None for secure noise (OpenDP), or a ``numpy.random.Generator`` for simulation.
    **options : the mechanism's own (others are refused with a ValueError listing these):
        ``branching``, ``level_budgets`` (per level, root first, summing to the total),
        ``estimator`` ("covering" | "causal") for "binary" / "kary"; ``branching``,
        ``estimator``, ``split`` for the unbounded counter; ``branching``,
        ``level_budgets``, ``levels`` for "negative_digits"; ``branching``,
        ``level_budgets`` for "tree_blue"; ``buffers``, ``objective``, ``theta``, ``omega``
        for "blt"; none for "sqrt".

    Notes
    -----
    ``update(count) -> estimate`` adds one step and returns the running count after it;
    ``variance`` is its exact variance; ``step_variances(steps)`` the exact variances after
    steps 1..steps (default T; at most 2 GiB of estimated memory); ``account()`` the privacy
    account (JSON-able). Budgets whose noise would be identically 0 or saturate are refused
    here, before anything is drawn (module docstring).

    Copies and checkpoints. A secure counter (``rng=None``) REFUSES ``copy.copy``,
    ``copy.deepcopy``, ``pickle`` and ``copy.replace`` (TypeError): it holds noise drawn
    ahead or kept for later steps, and a copy fed different data would replay it, publishing
    the difference of the data exactly. It is refused rather than serialised "once", because
    nothing can stop serialised bytes from being restored twice. Instead, save the released
    outputs and the account (public: post-processing of the private release); to continue
    after a restart, make a new counter (fresh budget) over the remaining steps and add its
    running counts to the last released count (event level: the two counters see disjoint
    steps, so the run keeps the larger budget). A simulation counter (``rng`` a Generator)
    can be copied and pickled: the copy is independent and REPLAYS the same simulated noise.
    """

    noise: str
    budget: float

    def __init__(self, horizon: int | None, *, epsilon: float | None = None,
                 rho: float | None = None, mechanism: str | None = None,
                 rng: np.random.Generator | None = None, design: object = None,
                 **options: object) -> None:
        if horizon is not None and (isinstance(horizon, (bool, np.bool_))
                                    or not isinstance(horizon, Integral)
                                    or not 1 <= int(horizon) <= MAX_HORIZON):
            raise ValueError(f"horizon must be an integer in [1, 2^40] or None (unbounded), "
                             f"got {horizon!r}")
        if design is not None:
            if mechanism is not None:
                raise ValueError("give a mechanism or a design, not both (design= runs the "
                                 "design's own strategy)")
            if horizon is None:
                raise ValueError("horizon: a design is made for a known number of steps; "
                                 "give horizon=T (None is the unbounded tree counter)")
            check_rng(rng)
            self.noise, _, self.budget = design_budget(design_mechanism(design), epsilon, rho)
            mechanism = "design"
            options["design"] = design
        else:
            mechanism = "binary" if mechanism is None else mechanism
            if (epsilon is None) == (rho is None):
                raise ValueError("give exactly one of epsilon (pure DP, Laplace) or rho (zCDP, "
                                 "Gaussian)")
            if not isinstance(mechanism, str) or mechanism not in MECHANISMS:
                raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
            check_rng(rng)
            self.noise = "laplace" if epsilon is not None else "gaussian"
            self.budget = check_budget(epsilon if epsilon is not None else rho,
                                       "epsilon" if epsilon is not None else "rho")
        self.mechanism = mechanism
        self.horizon = None if horizon is None else int(horizon)
        if horizon is None and mechanism not in _TREES:
            raise ValueError(f"an unbounded stream (horizon=None) needs a tree mechanism "
                             f"{_TREES}; {mechanism!r} is built for a known horizon")
        engine = _engine_class(mechanism, horizon is None)
        _check_options({k: v for k, v in options.items() if k != "design"}, engine,
                       mechanism, horizon is None)
        if mechanism in _TREES:
            options["mechanism"] = mechanism
        # the engines' constructors differ (bounded ones take the horizon first)
        make: Callable[..., CounterEngine] = engine
        if horizon is None:
            self.engine = make(noise=self.noise, budget=self.budget, rng=rng, **options)
        else:
            self.engine = make(self.horizon, noise=self.noise, budget=self.budget, rng=rng,
                                 **options)
        self.secure = rng is None
        self.estimate = 0.0
        self.variance = 0.0

    # the engine's stepping methods: a step goes through update() (which keeps estimate and
    # variance), never around it
    _NOT_FORWARDED = ("push", "run")

    def __getattr__(self, name: str) -> Any:  # the engine's own attributes: any type
        # mechanism-specific public attributes (branching, levels, level_budgets, ...) of the
        # engine; never private or special names (copy / pickle hooks must not be forwarded)
        if name.startswith("_") or name == "engine":
            raise AttributeError(name)
        if name in self._NOT_FORWARDED:
            raise AttributeError(f"'Counter' has no attribute {name!r}: add a step with "
                                 "update(count)")
        return getattr(self.engine, name)

    @property
    def t(self) -> int:
        """Steps added so far (the engine's count: one state)."""
        return self.engine.t

    @property
    def total(self) -> int:
        """The exact count of the steps added so far (private: never released)."""
        return self.engine.total

    def update(self, count: int) -> float:
        """Add the next step's count (a non-negative integer) and return the private running
        count after it; ``variance`` is its exact variance. ValueError for a bad count, a step
        beyond the horizon (2^62 steps unbounded) or a running count reaching 2^53, checked
        before anything is drawn."""
        self.estimate, self.variance = self.engine.push(count)
        return self.estimate

    def step_variances(self, steps: int | None = None) -> np.ndarray:
        """Exact variances of the running counts after steps 1..steps (default: T), shape
        (steps,); ValueError for steps outside [0, T] or above 2 GiB of estimated memory
        (checked before allocating)."""
        return self.engine.step_variances(steps)

    def account(self) -> dict:
        """The privacy account (JSON-able): mechanism, noise, budget, unit, per-group budgets
        and scales, the sampler."""
        acc = dict(self.engine.account())
        acc["horizon"] = self.horizon
        if "sampler" not in acc:
            acc["sampler"] = (sampler_description(self.noise) if self.secure
                              else "numpy simulation noise (NO privacy guarantee)")
        return acc

    def __repr__(self) -> str:
        budget = f"epsilon={self.budget}" if self.noise == "laplace" else f"rho={self.budget}"
        return (f"Counter(horizon={self.horizon}, {budget}, mechanism={self.mechanism!r}, "
                f"t={self.t}, {'secure' if self.secure else 'simulation'})")
