"""What every family of ``optimize.best_mechanism`` sees and returns: the setting
(:class:`Problem`: workload, noise, budget, neighbours, participation, deadline), a proposed
mechanism (:class:`Candidate`), a family's entry (:class:`Family`), the release-route check and
the time checks, and the size limits the families share (``optimize.best``'s docstring lists
the families)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..engines import GRID_TREE_ENGINES, claimed_by
from ..error import expected_error
from ..mechanism import Mechanism
from ..participation import Participation, single
from ..strategies import Strategy
from ..strategies.scaled import secure_route
from ..workloads import KroneckerWorkload, StackedWorkload, Workload, prefix
from .result import TreeDesign

__all__ = ["PARTICIPATION_NOTE", "Problem", "Candidate", "Family", "release_route", "too_slow", "shape_of",
           "tree_design_candidate", "SECURE", "GRID_TREES"]

PARTICIPATION_NOTE = ("calibrated to a participation schema: releases and counters protect "
                      "one record; the noise of a training loop is stream.CorrelatedNoise")
# Sizes (checked before anything is built):
MAX_DENSE_BINS = 2048         # a strategy without structure is scored by the dense GLS: n^2
#                               floats, O(n^3) (about a second at 2048)
MAX_OPTIMAL_SEARCH_BINS = 4096  # level_uniform(budgets="optimal"): ~3 s at 4096 (one core)
MAX_P_IDENTITY_BINS = 1024    # HDMM's p-Identity (p = n / 16): dense, cubic in n
MAX_GAUSSIAN_DENSE_BINS = 1024  # the dense Gaussian optimum for workloads without a
#                                 tridiagonal G^-1: a dense eigendecomposition per iteration
# their time: optimize.beyond_trees.dense_optimum_seconds (measured fits)
GAUSSIAN_DENSE_MAX_ITER = 500   # at most (the time left caps it further)
GAUSSIAN_DENSE_SHARE = 0.5      # share of the time left the dense Gaussian optimum may use
MAX_KRON_AXIS = 1024          # per-axis dense optimisers (p-Identity, Gaussian optimum)
GAUSSIAN_AXIS_SECONDS = 5.0   # 1-D Gaussian optimum of a 1024-bin prefix axis (one core)
TREE_SCORE_SECONDS = 1.5e-4    # custom ranges: scoring one tree (measured at K = 2^16) ...
RANGE_SCORE_SECONDS = 1.2e-7   # ... plus this per range (one core)
# shares of the remaining time given to the families that take a time limit
NODE_BUDGETS_SHARE = 0.6
NESTED_SHARE = 0.8             # the nested family runs after node_budgets (see best.py)
HATS_SHARE = 0.5               # p-Identity from multi-scale hats, before the nested family
HATS_MIN_BINS = 256            # measured to beat the dyadic start from here ...
MAX_HATS_BINS = 4096           # ... to here (the candidate is scored by the dense GLS)
# one evaluation of the sparse p-Identity (strategies.p_identity_sparse), one core:
# a + b p^3 + c p nnz + d n p seconds (measured 7 ms / 80 ms / 0.37 s / 2.1 s at 2^10..2^14)
HATS_ITERATION_FIT = (4e-3, 5e-10, 1.5e-9, 1e-8)
HATS_DENSE_FACTOR = 2.0       # the dense optimiser up to 1024 bins: 12 ms against 7 ms
HATS_MIN_ITERATIONS = 50       # fewer in its share of the time: skipped
HATS_MAX_ITERATIONS = 3000
NESTED_MIN_BINS = 1024         # from here up (below: p-Identity and l1_local are dense)
NESTED_MAX_FANOUT = 256        # its local matrices: O(k^3) per evaluation, l1_local starts
IMPLICIT_SHARE = 0.5
IMPLICIT_TOL = 1e-4           # certified relative gap asked of the implicit optimum
MIN_SECONDS = 0.5             # a time-limited family gets at least this long

SECURE = ("dptree_opt.release(..., design=d) and stream.Counter(..., design=d) run it with "
           "OpenDP's discrete samplers")
GRID_TREES = ("releases of grids run Kronecker products of trees and quadtrees only (the "
               "grid release's box standard errors)")


# --------------------------------------------------------------------------- the setting
@dataclass(frozen=True)
class Problem:
    """The workload, the setting and the deadline every family sees."""

    workload: Workload
    noise: str
    budget: float
    neighbours: str
    deadline: float
    participation: Participation = single()

    @property
    def epsilon(self) -> float | None:
        return self.budget if self.noise == "laplace" else None

    @property
    def rho(self) -> float | None:
        return None if self.noise == "laplace" else self.budget

    @property
    def n(self) -> int:
        return self.workload.n_bins

    @property
    def one_d(self) -> bool:
        return not isinstance(self.workload, (KroneckerWorkload, StackedWorkload))

    @property
    def kron(self) -> bool:
        return isinstance(self.workload, KroneckerWorkload)

    @property
    def grid(self) -> KroneckerWorkload:
        """The workload of a grid family (its ``applies`` checked it is one)."""
        if not isinstance(self.workload, KroneckerWorkload):
            raise ValueError("Kronecker (grid) workloads only")
        return self.workload

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def share(self, fraction: float) -> float:
        """Seconds a time-limited family may use: ``fraction`` of what is left."""
        return max(fraction * self.remaining(), MIN_SECONDS)

    def mechanism(self, strategy: Strategy, level_budgets: Sequence[float] | None = None,
                  ) -> Mechanism:
        """``strategy`` calibrated to the setting (equal split, or ``level_budgets``)."""
        return Mechanism(strategy, noise=self.noise, neighbours=self.neighbours,
                         epsilon=self.epsilon, rho=self.rho, level_budgets=level_budgets,
                         participation=self.participation)

    def recalibrated(self, mech: Mechanism) -> Mechanism:
        """``mech`` itself under one participation; under a participation schema the same
        strategy and per-level budgets calibrated to the schema (an optimiser built for one
        participation chose them)."""
        if self.participation.is_single:
            return mech
        budgets = mech.level_budgets
        return self.mechanism(mech.strategy, [budgets[lvl] for lvl in sorted(budgets)]
                              if len(budgets) > 1 else None)


@dataclass(frozen=True)
class Candidate:
    """A mechanism proposed by a family; ``lower_bound`` (total, counts^2): a certificate
    valid for every mechanism, if the family computed one."""

    mech: Mechanism
    method: str
    lower_bound: float | None = None
    bound_method: str = ""


@dataclass(frozen=True)
class Family:
    """One entry of :data:`FAMILIES`: ``applies(problem)`` is None or the reason it does not
    apply (workload, noise, size; no work done); ``build(problem)`` returns a list of
    candidates, or a reason when there is not enough time left; ``releasable``: whether its
    mechanisms can have a secure sampler path (``release_note`` says why not; each
    candidate is then checked by :func:`release_route`); ``always``: run even when the time
    is spent (O(K))."""

    applies: Callable[[Problem], str | None]
    build: Callable[[Problem], list[Candidate] | str]
    about: str
    releasable: bool
    release_note: str = SECURE
    always: bool = False


def release_route(p: Problem, fam: Family, mech: Mechanism) -> tuple[bool, str]:
    """(releasable, how or why not) for one candidate: its family's flag, then the mechanism
    itself -- 1-D: ``strategies.scaled.secure_route`` (integer strategies as they are,
    real-valued ones as scaled integer strategies, within their sizes), the rule
    ``data_release.secure_noise.secure_form`` applies; grids: a Kronecker product of trees or
    a quadtree (what the grid release estimates). A 1-D release and a counter publish every
    prefix (the CDF, the running counts): a design that does not estimate them is not
    releasable (e.g. disjoint brackets measured directly; checked unless the workload is
    the CDF itself). Under a participation schema nothing is: releases and counters protect
    one record; training noise is ``stream.CorrelatedNoise``."""
    if not p.participation.is_single:
        return False, PARTICIPATION_NOTE
    if not fam.releasable:
        return False, fam.release_note
    if p.one_d:
        route, how = secure_route(mech.strategy, row_budgets=mech.row_budgets is not None)
        if route is None:
            return False, how
        if p.workload.kind != "prefix":
            try:
                expected_error(prefix(p.n), mech)
            except (ValueError, np.linalg.LinAlgError):
                return False, ("a release and a counter publish every prefix (the CDF), which "
                               "this design does not estimate (make its queries the bins)")
        return True, f"{SECURE} ({how})"
    if p.kron and claimed_by(mech, GRID_TREE_ENGINES) is not None:
        return True, f"{SECURE} (a grid release; integer answers)"
    return False, GRID_TREES


def too_slow(seconds: float, p: Problem) -> str | None:
    """The skip reason when a family that cannot be stopped needs more than what is left."""
    left = p.remaining()
    if seconds > left:
        return (f"time limit: needs about {seconds:.3g} s (measured on one core), "
                f"{max(left, 0.0):.3g} s left")
    return None


# --------------------------------------------------------------------------- 1-D helpers
def shape_of(w: Workload) -> int | tuple[int, ...]:
    """K for a 1-D workload, (n_1, .., n_d) for a grid (a stacked one: its parts')."""
    if isinstance(w, StackedWorkload):
        return shape_of(w.parts[0])
    return w.grid_shape if isinstance(w, KroneckerWorkload) else w.n_bins


def tree_design_candidate(p: Problem, d: TreeDesign, how: str) -> Candidate:
    """A tree design as a candidate (recalibrated under a participation schema: the tree
    and its budgets were chosen for one participation, and the method says so)."""
    note = "" if p.participation.is_single else (
        f"; chosen for one participation, recalibrated to {p.participation.describe()}")
    return Candidate(p.recalibrated(d.mechanism()),
                     f"{how}: branching {list(d.branching)}; {d.method}{note}")

