"""The offline BLUE of a tree, released online by drawing the noise ahead
(``Counter(mechanism="tree_blue")``).

Why this is a streaming mechanism. A linear unbiased estimator of the running counts from a
tree's noisy nodes y = R x + z is W-hat = L y with L R = W (W the prefix matrix, lower
triangular: the count after t steps involves steps < t only). So L y = W x + L z, and the noise
z does not depend on the data: it can be drawn before the stream starts, and the counter can
release y_t = (exact count of the first t steps) + (L z)_t at step t. The released vector has
exactly the distribution of L (R x + z), a post-processing of releasing every node once, so it
has the tree's privacy (eps = sum eps_l, Laplace; rho = sum rho_l, Gaussian), event level, for
a stream fixed in advance. Against adaptively chosen inputs the standard coupling works too:
changing step j by delta is absorbed by z' = z - R e_j delta, which leaves every output
unchanged because L R e_j = W e_j (and rows t < j of W e_j are 0, so the history the adversary
saw is the same); its cost is the density ratio of z and z', at most exp(eps) for Laplace.
(That argument is ours: a pointwise density bound, so pure DP; review before relying on it
adaptively with Gaussian noise.)

So a streaming counter can reach the OFFLINE BLUE's error (Honaker's estimator over all nodes,
:func:`dptree_opt.expected_error` with ``estimator="blue"``), not only the causal BLUE over
completed nodes (:mod:`~dptree_opt.stream.tree`); Andersson-Pagh-Steiner-Torkamani's negative
digits (:mod:`~dptree_opt.stream.negative_digits`) use the same principle with +-1 weights.
The cost: all noise is drawn at construction (O(number of nodes) memory and time: the BLUE of
the noise, :func:`dptree_opt.blue`, structured, O(T)). Horizon limit ``MAX_AHEAD_HORIZON`` =
2^22: measured (binary tree) peak ~0.9 GB and ~90 s to build at 2^22 with OpenDP (about
220 bytes and 20 us per step, nearly all OpenDP sampling); 2^24 would take ~3.7 GB and ~6 min.
Longer streams: ``negative_digits`` or a tree with ``estimator="causal"`` (memory O(log T)).

The drawn-ahead noise is a :class:`~dptree_opt.stream.secret.NoiseBuffer`: a secure counter
refuses copying and pickling (replaying the noise with other data would publish the data).

Noise. Secure (``rng=None``): OpenDP's discrete Laplace / Gaussian on zero node counts, one
measurement per level (privacy maps checked; ``data_release.secure_noise.noise_ahead``). L z is
computed in double precision (the weights are not integers), as for the Gaussian
factorisations: the privacy statement is for the real-valued post-processing.

Designs (:class:`DesignEngine`, ``Counter(T, design=d)``). The argument above uses nothing of
the tree but L R = I: any offline design over T bins (a ``Design`` of
``optimize.best_mechanism`` for ``workloads.prefix(T)``, any optimiser's result with
``.mechanism()``, or a ``Mechanism``) runs the same way, in the secure form of the releases
(``data_release.secure_noise.secure_form``: integer strategies as they are, budgets per level
or per node; real-valued ones -- square root, BLT, the Gaussian optimum, p-Identity -- as
scaled integer strategies with noise calibrated to their exact sensitivity,
``docs/releasing_designs.md``). The design must protect one event: add/remove neighbours
with the total private. A design without a secure form is refused before anything is drawn;
a simulation counter (``rng``) runs the same discrete mechanism with numpy's integer samplers.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from numbers import Integral

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .. import blue as blue_estimate
from .. import expected_error, strategies, workloads
from ..data_release.secure_noise import design_mechanism, noise_ahead, secure_form
from ..mechanism import Mechanism
from ..privacy import calibrate, split_budget
from .base import CounterEngine, StrategyRows
from .noise import check_group_scales
from .secret import NoiseBuffer
from .tree import MAX_BRANCHING, check_branching

__all__ = ["AheadEngine", "DesignEngine", "MAX_AHEAD_HORIZON"]

MAX_AHEAD_HORIZON = 1 << 22   # the noise of every node is drawn and held (module docstring)


def _branching(horizon: int, branching: float | Sequence[int] | None) -> list[int]:
    """The tree's branching (leaves last, as ``strategies.tree``): an int k gives
    ceil(log_k T) levels of k; a list is used as given (product >= T)."""
    if branching is None or isinstance(branching, (Integral, float, np.floating)):
        k = check_branching(branching, "binary" if branching in (None, 2) else "tree_blue")
        h, width = 0, 1
        while width < horizon:
            h, width = h + 1, width * k
        return [k] * max(h, 1)
    try:
        ks = [check_branching(b, "tree_blue") for b in branching]
    except TypeError:
        raise ValueError(f"mechanism 'tree_blue' needs branching = an integer >= 2 or a list "
                         f"of them (root first), got {branching!r}") from None
    if math.prod(ks) < horizon:
        raise ValueError(f"mechanism 'tree_blue': branching {ks} covers {math.prod(ks)} < "
                         f"horizon {horizon} steps; give factors whose product is at least "
                         "the horizon")
    if math.prod(ks) > MAX_BRANCHING:
        raise ValueError(f"mechanism 'tree_blue': branching {ks} covers {math.prod(ks)} "
                         "steps, more than 2^62 (the node bounds are int64); give factors "
                         f"whose product is at least the horizon {horizon} and at most 2^62")
    return ks


class AheadEngine(CounterEngine):
    """The tree's offline BLUE with the noise drawn ahead (module docstring).

    Options: ``branching`` (an int k, or a list, root first, with product >= T; padding steps
    beyond T are known zeros: OpenDP-style truncated tree), ``level_budgets`` (root first,
    like every budget list of the package; default the equal split)."""

    options: tuple[str, ...] = ("branching", "level_budgets")
    horizon: int  # bounded: always set by __init__ (CounterEngine allows None)
    variance_bytes_per_step = 8           # a copy of the stored variances (measured 8.0)

    def __init__(self, horizon: int, *, noise: str, budget: float,
                 rng: np.random.Generator | None = None,
                 branching: float | Sequence[int] | None = None,
                 level_budgets: ArrayLike | None = None) -> None:
        if horizon > MAX_AHEAD_HORIZON:
            raise ValueError(f"horizon {horizon} > 2^22 = {MAX_AHEAD_HORIZON} for mechanism "
                             "'tree_blue': all its noise is drawn when the counter is made "
                             "(about 220 bytes and 20 us per step); use mechanism "
                             "'negative_digits', or 'binary' / 'kary' with estimator='causal', "
                             "for longer streams")
        self.name = "tree_blue"
        self.noise, self.budget, self.horizon = noise, budget, int(horizon)
        self.branching = _branching(self.horizon, branching)
        self.secure = rng is None
        K = math.prod(self.branching)
        strategy = (strategies.tree(K, self.branching) if K == self.horizon
                    else strategies.truncated_tree(self.horizon, self.branching))
        # budget sanity before the mechanism is built (every level has sensitivity 1); the
        # BLUE divides by the variances: they must be normal doubles
        name = "epsilon" if noise == "laplace" else "rho"
        leaves_first = split_budget(budget, int(strategy.levels.max()) + 1, level_budgets,
                                    name=name)[::-1]          # given root first
        check_group_scales(noise, [calibrate(1.0, b, noise)[0] for b in leaves_first],
                           budget=budget, group_budgets=leaves_first,
                           groups=["the leaves (level 0)"] + [
                               f"level {lvl} above the leaves"
                               for lvl in range(1, len(leaves_first))],
                           min_variance=sys.float_info.min)
        laplace = noise == "laplace"
        self.mechanism = Mechanism(strategy, neighbours="add_remove", discrete=rng is None,
                                   level_budgets=level_budgets,
                                   epsilon=budget if laplace else None,
                                   rho=None if laplace else budget)
        self._start(rng, name)

    def _start(self, rng: np.random.Generator | None, name: str) -> None:
        """The exact variances first (everything that can refuse runs before the first
        draw), then the noise of every row and its BLUE path (L z)_t, t = 1..T."""
        self._variances = self._step_variances_checked(name)
        z = self._draw_noise(rng)
        self._noise_path = NoiseBuffer(np.cumsum(blue_estimate(self.mechanism, z)),
                                       secure=self.secure, readonly=True)
        self.t = 0
        self.total = 0

    def _step_variances_checked(self, name: str) -> np.ndarray:
        """The offline BLUE's variances of the T running counts, computed on the mechanism
        with variances near 1 and rescaled exactly (they are homogeneous of degree 1 in the
        noise variances); ValueError, worded for the counter, when one is not a normal
        double (the budget is too large)."""
        twin, c = self.mechanism.normalised()
        try:
            unit = expected_error(workloads.prefix(self.horizon), twin, "blue", per_query=True)
        except ValueError as exc:   # a design that does not identify the running counts
            raise ValueError(f"a counter releases every running count, which this "
                             f"strategy does not estimate ({exc})") from None
        with np.errstate(under="ignore", over="ignore"):
            variances = np.asarray(unit, dtype=float) * c
        bad = ~(np.isfinite(variances) & (variances >= sys.float_info.min))
        if np.any(bad):
            t = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name} = {self.budget!r} is too large: the variance of the "
                             f"running count after step {t + 1} would be "
                             f"{float(unit[t]) * c:.3g}, below the smallest normal double "
                             f"{sys.float_info.min:.3g} (the offline BLUE weighs by the "
                             f"variances). Use a smaller {name}")
        return variances

    def _draw_noise(self, rng: np.random.Generator | None) -> npt.NDArray[np.float64]:
        """One noise draw per released row: OpenDP on zero counts, one measurement per noise
        group, every one built and checked before the first draw (``noise_ahead``), or the
        mechanism's simulation noise; unmeasured rows get 0 (the BLUE ignores them)."""
        m = self.mechanism
        z = m.sample_noise(rng) if rng is not None else noise_ahead(m)
        return np.where(np.isnan(z), 0.0, z)

    def push(self, count: int) -> tuple[float, float]:
        self.total += self.check_step(count)
        self.t += 1
        return self.total + float(self._noise_path.values[self.t - 1]), \
            float(self._variances[self.t - 1])

    def _step_variances(self, steps: int) -> np.ndarray:
        """The offline BLUE's exact variances of the first ``steps`` running counts."""
        return np.array(self._variances[:steps], dtype=float)

    def account(self) -> dict:
        m = self.mechanism
        name = "epsilon" if self.noise == "laplace" else "rho"
        return {
            "mechanism": f"tree {self.branching} (root first), offline BLUE with the noise "
                         "drawn ahead",
            "noise": self.noise,
            "budget": {name: self.budget},
            "unit": "event (one step's count changes by 1)",
            "levels": [{"level_from_root": int(lvl), "budget": float(m.level_budgets[lvl]),
                        "sensitivity": float(m.level_sensitivities[lvl]),
                        "scale": float(m.level_scales[lvl])} for lvl in m.level_scales],
            "composition": "sequential over levels; outputs = post-processing of every node's "
                           "noisy count (noise drawn at construction)",
            "caveat": "the BLUE weights are not integers: L z is computed in double precision; "
                      "privacy holds for the real-valued post-processing",
        }

    def strategy(self, steps: int) -> StrategyRows:
        """Every node of the tree (restricted to the first ``steps`` steps), with its noise
        variance and the step at which it completes (its noise is used before that)."""
        steps = self.check_strategy_steps(steps, minimum=1)
        a = self.mechanism.released.matrix.tocsr()
        a.sort_indices()
        full = np.diff(a.indptr) > 0                # (a design's rounded row may be empty)
        last = np.where(full, a.indices[np.maximum(a.indptr[1:] - 1, 0)], -1)
        return StrategyRows(a[:, :steps], self.mechanism.variances, last + 1)


class DesignEngine(AheadEngine):
    """An offline design's BLUE with the noise drawn ahead (module docstring, "Designs"):
    ``Counter(T, design=d)``. The design's secure form (``secure_form``) over T steps,
    add/remove neighbours with the total private; its budget is the counter's."""

    options: tuple[str, ...] = ()

    def __init__(self, horizon: int, *, noise: str, budget: float,
                 rng: np.random.Generator | None = None, design: object = None) -> None:
        source = design_mechanism(design)
        if isinstance(source.released, (strategies.KroneckerStrategy,
                                        strategies.QuadtreeStrategy)):
            raise ValueError("design: a counter runs a 1-D design over its steps; this one is "
                             "a grid design")
        if source.n_bins != horizon:
            raise ValueError(f"design: it was made for {source.n_bins} steps (bins), the "
                             f"horizon is {horizon}")
        if source.neighbours != "add_remove" or source.public_total:
            raise ValueError("design: a counter protects one event (add/remove neighbours, "
                             "the running total private); this design is for "
                             f"{source.neighbours!r} neighbours"
                             + (" with a public total" if source.public_total else ""))
        if horizon > MAX_AHEAD_HORIZON:
            raise ValueError(f"horizon {horizon} > 2^22 = {MAX_AHEAD_HORIZON} for a design: "
                             "all its noise is drawn when the counter is made")
        self.name = "design"
        self.noise, self.budget, self.horizon = noise, budget, int(horizon)
        self.secure = rng is None
        self.form = secure_form(source)     # ValueError (why) when it has none
        self.design_family = getattr(design, "family", None)
        m = self.mechanism = self.form.mechanism
        name = "epsilon" if noise == "laplace" else "rho"
        noisy = np.flatnonzero(np.isfinite(m.scales) & (m.scales > 0))
        if noisy.size:          # budget sanity: the smallest and the largest scale
            pick = noisy[[int(np.argmin(m.scales[noisy])), int(np.argmax(m.scales[noisy]))]]
            check_group_scales(noise, m.scales[pick], budget=budget,
                               groups=[f"row {int(r)}" for r in pick],
                               min_variance=sys.float_info.min)
        self._start(rng, name)

    def account(self) -> dict:
        m = self.mechanism
        name = "epsilon" if self.noise == "laplace" else "rho"
        design = {"family": self.design_family, **self.form.account()}
        if m.row_budgets is None:
            groups: list[dict[str, float | str]] = [{"level": int(lvl), "budget": float(m.level_budgets[lvl]),
                       "sensitivity": float(m.level_sensitivities[lvl]),
                       "scale": float(m.level_scales[lvl])} for lvl in m.level_scales
                      if lvl in m.level_budgets]
        else:
            noisy = np.isfinite(m.scales) & (m.scales > 0)
            groups = [{"rows": int(noisy.sum()), "budget_per_row": "each row its own "
                       "(budgets per node)", "scale_min": float(m.scales[noisy].min()),
                       "scale_max": float(m.scales[noisy].max())}]
        return {
            "mechanism": f"design {m.released.name}, offline BLUE with the noise drawn ahead",
            "noise": self.noise,
            "budget": {name: self.budget},
            "unit": "event (one step's count changes by 1)",
            "design": design,
            "levels": groups,
            "composition": "the loss of the whole scaled strategy, recomputed exactly; outputs "
                           "= post-processing of every row's noisy answer (noise drawn at "
                           "construction)",
            "caveat": "the BLUE weights are not integers: L z is computed in double precision; "
                      "privacy holds for the real-valued post-processing",
        }

