"""One front door to the best mechanism: ``best_mechanism(workload, epsilon | rho)``.

Every family of mechanisms the framework can optimise or build is one entry of
:data:`FAMILIES` (name -> :class:`Family`): a cheap check ``applies`` (None, or why not:
another workload, noise or size) and a function ``build`` returning candidate mechanisms
(or "time limit: ..." when it would not finish in time). ``best_mechanism`` runs the
families in table order (cheap first), scores every candidate with the exact
``dptree_opt.expected_error`` (the BLUE; a stacked workload part by part) and ranks them.
Adding a family is its function(s) and one table entry.

Families (1-D workloads: prefix, identity, total, all_range, custom ranges; grids:
Kronecker workloads of those kinds; stacked workloads such as marginals):

* ``histogram``: every bin (cell) measured once.
* ``workload``: the workload's own rows measured directly, one noise scale (nested-or-
  disjoint ranges as an interval strategy at any size; other rows as a dense matrix on small
  domains). E.g. 20 disjoint brackets on 100 bins, eps = 0.5, add/remove: each record is in
  one bracket (l1 sensitivity 1), Laplace variance 2 (1 / 0.5)^2 = 8 per bracket, and the
  noisy brackets are their own BLUE.
* ``tree_equal`` / ``tree_optimal``: the best level-uniform tree for the BLUE, equal or
  optimal per-level budgets (``optimize.level_uniform``, ``optimal_blue_budgets``). On the
  identity workload (docs/math.md section 4, "the identity workload: two bounds on tree
  errors"): no level-uniform tree, with any per-level budgets, beats the histogram, so
  ``tree_optimal`` is the finest tree with every budget on its leaves; and a tree of height
  h has error >= (K / 2) v_h (v_h its leaf variance), so ``tree_equal`` scores only the
  heights where that bound, at equal budgets, does not exceed the flat tree's error.
  Custom ranges with more than ``MAX_WORKLOAD_SEARCH_TREES`` trees: the shortest trees up
  to that count (not exhaustive; ``method`` says so).
* ``node_budgets``: a budget per node on the finest tree of K (``optimal_node_budgets``;
  the CDF).
* ``haar``, ``sqrt``, ``blt``: Privelet's Haar wavelet, the square-root factorisation and
  the buffered linear Toeplitz strategy (``strategies.*``).
* ``gaussian_optimum``: the optimum of the Gaussian matrix mechanism without a matrix
  (``strategies.gaussian_optimal_implicit``; prefix, all-range, identity), with its
  certified dual bound.
* ``dense_optimum``: ``optimize.optimized_strategy`` (HDMM's p-Identity against the best
  tree for Laplace noise; the dense Gaussian optimum for workloads the implicit one does not
  cover), up to 1024 bins, when its predicted time (``optimize.beyond_trees.
  dense_optimum_seconds``, measured fits) fits in the time left.
* ``grid_kron_trees``, ``grid_quadtree``: Kronecker products of trees and quadtrees with
  optimal budgets per level tuple (``optimize.best_grid_hierarchy``). Kronecker trees also
  padded (each axis tree over n_i' in [n_i, 2 n_i)), truncated to the real cells
  (``strategies.truncated_tree`` per axis: the padding known empty, so the BLUE error is at
  most the padded search's), on grids of up to MAX_DENSE_BINS cells (scored by the dense
  GLS). E.g. the 37 x 37 CDF, eps = 1, add/remove: 474.8 per query unpadded (37 is
  prime: one level per axis), 284.7 padded and truncated. Larger grids keep the unpadded
  designs (no structured error for truncated Kronecker trees); the padded search itself
  gains 2115 -> 868.6 at 97 x 97 but nothing at 100 x 100 or 250 x 250 (899.1, 2020.5).
* ``kron_p_identity``, ``kron_gaussian_optimum``: HDMM's Kronecker p-Identity and the
  product of the 1-D Gaussian optima (``strategies.kron_p_identity``,
  ``kron_gaussian_optimal``).

Time: ``time_limit`` is checked before every family (a family is skipped with reason
"time limit" once it is spent); the families that take a time limit (``node_budgets``,
``gaussian_optimum``) get a share of what is left, and those that cannot be stopped are
skipped when their measured cost (one core) exceeds what is left. A family already running
is never interrupted, so a search can overrun by at most one family's cost. ``histogram``
(O(K)) always runs, so there is always a design.

Lower bound: the SVD bound (Li & Miklau, "Measuring the achievable error of query sets
under differential privacy", 2012; ``bounds.error_lower_bound``; under Laplace the l1
analogue, valid but loose), for Kronecker workloads under add/remove the product of the
per-axis bounds (the singular values of W_1 x W_2 are the products of theirs, so
(sum sigma)^2 / n factorises), and under Gaussian noise with add/remove the dual value of the
Gaussian optimum when a family computed it: every dual value of the convex program of the
optimal Gaussian strategy bounds the error of every Gaussian matrix mechanism from below
(Li, Miklau, Hay, McGregor, Rastogi, "The matrix mechanism", VLDBJ 2015; the dual and its
fixed point: ``strategies.optimized``). The largest valid bound is reported.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from numbers import Real


import numpy as np

from ..bounds import error_lower_bound, svd_bound
from ..engines import GRID_TREE_ENGINES, claimed_by
from ..error import expected_error
from ..limits import at_budget
from ..mechanism import Mechanism
from ..privacy import resolve_budget, resolve_public
from ..strategies import (Strategy, blt,
                          gaussian_optimal_implicit, haar, histogram, kron,
                          kron_gaussian_optimal, kron_p_identity, sqrt_factorization,
                          truncated_tree)
from ..strategies.scaled import secure_route
from ..workloads import KroneckerWorkload, StackedWorkload, Workload, prefix
from .beyond_trees import (GAUSSIAN_DENSE_ITERATIONS, dense_optimum_seconds,
                           optimized_strategy)
from .blue_budgets import optimal_blue_budgets
from .design import Design
from .direct import MAX_DIRECT_ENTRIES, direct_rows
from .factorisations import factorisations_by_height
from .grid import GRID_WORKLOADS, GridDesign, best_grid_hierarchy
from .levels import level_variances, noisy_levels
from .node_budgets import optimal_node_budgets
from .result import TreeDesign
from .search import MAX_WORKLOAD_SEARCH_TREES, finest_refinement, level_uniform

__all__ = ["Family", "FAMILIES", "best_mechanism"]

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
MAX_BOUND_DENSE_BINS = 2048   # SVD bound from a dense eigendecomposition (O(n^3))
TREE_SCORE_SECONDS = 1.5e-4    # custom ranges: scoring one tree (measured at K = 2^16) ...
RANGE_SCORE_SECONDS = 1.2e-7   # ... plus this per range (one core)
# shares of the remaining time given to the families that take a time limit
NODE_BUDGETS_SHARE = 0.6
IMPLICIT_SHARE = 0.5
IMPLICIT_TOL = 1e-4           # certified relative gap asked of the implicit optimum
MIN_SECONDS = 0.5             # a time-limited family gets at least this long

_SECURE = ("dptree_opt.release(..., design=d) and stream.Counter(..., design=d) run it with "
           "OpenDP's discrete samplers")
_GRID_TREES = ("releases of grids run Kronecker products of trees and quadtrees only (the "
               "grid release's box standard errors)")
_BOUND_KINDS = ("prefix", "identity", "total", "all_range")  # closed-form singular values


# --------------------------------------------------------------------------- the setting
@dataclass(frozen=True)
class _Problem:
    """The workload, the setting and the deadline every family sees."""

    workload: Workload
    noise: str
    budget: float
    neighbours: str
    deadline: float

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

    def mechanism(self, strategy: Strategy) -> Mechanism:
        return Mechanism(strategy, noise=self.noise, neighbours=self.neighbours,
                         epsilon=self.epsilon, rho=self.rho)


@dataclass(frozen=True)
class _Candidate:
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
    candidate is then checked by :func:`_release_route`); ``always``: run even when the time
    is spent (O(K))."""

    applies: Callable[[_Problem], str | None]
    build: Callable[[_Problem], list[_Candidate] | str]
    about: str
    releasable: bool
    release_note: str = _SECURE
    always: bool = False


def _release_route(p: _Problem, fam: Family, mech: Mechanism) -> tuple[bool, str]:
    """(releasable, how or why not) for one candidate: its family's flag, then the mechanism
    itself -- 1-D: ``strategies.scaled.secure_route`` (integer strategies as they are,
    real-valued ones as scaled integer strategies, within their sizes), the rule
    ``data_release.secure_noise.secure_form`` applies; grids: a Kronecker product of trees or
    a quadtree (what the grid release estimates). A 1-D release and a counter publish every
    prefix (the CDF, the running counts): a design that does not estimate them is not
    releasable (e.g. disjoint brackets measured directly; checked unless the workload is
    the CDF itself)."""
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
        return True, f"{_SECURE} ({how})"
    if p.kron and claimed_by(mech, GRID_TREE_ENGINES) is not None:
        return True, f"{_SECURE} (a grid release; integer answers)"
    return False, _GRID_TREES


def _too_slow(seconds: float, p: _Problem) -> str | None:
    """The skip reason when a family that cannot be stopped needs more than what is left."""
    left = p.remaining()
    if seconds > left:
        return (f"time limit: needs about {seconds:.3g} s (measured on one core), "
                f"{max(left, 0.0):.3g} s left")
    return None


# --------------------------------------------------------------------------- 1-D helpers
def _shape(w: Workload) -> int | tuple[int, ...]:
    """K for a 1-D workload, (n_1, .., n_d) for a grid (a stacked one: its parts')."""
    if isinstance(w, StackedWorkload):
        return _shape(w.parts[0])
    return w.grid_shape if isinstance(w, KroneckerWorkload) else w.n_bins


def _tree_design_candidate(d: TreeDesign, how: str) -> _Candidate:
    return _Candidate(d.mechanism(), f"{how}: branching {list(d.branching)}; {d.method}")


# --------------------------------------------------------------------------- families
# Each family is ``applies(problem) -> None | reason`` (cheap checks: workload, noise, size)
# and ``build(problem) -> [candidates] | reason`` (the work; a reason only for time).
def _anywhere(p: _Problem) -> None:
    return None


def _one_d(p: _Problem) -> str | None:
    return None if p.one_d else "1-D workloads only"


def _one_d_tree(p: _Problem) -> str | None:
    if not p.one_d:
        return "1-D workloads only (grids: grid_kron_trees, grid_quadtree)"
    if p.n < 2:
        return "a tree needs at least 2 bins"
    return None


def _grid(p: _Problem) -> str | None:
    w = p.workload
    if not isinstance(w, KroneckerWorkload):
        return "Kronecker (grid) workloads only"
    kinds = tuple(f.kind for f in w.factors)
    if any(k not in GRID_WORKLOADS for k in kinds):
        return f"per-axis workloads in {GRID_WORKLOADS} only (got {kinds})"
    if any(f.n_bins < 2 for f in w.factors):
        return "every axis needs at least 2 cells"
    return None


def _kron_axes(p: _Problem) -> str | None:
    w = p.workload
    if not isinstance(w, KroneckerWorkload):
        return "Kronecker (grid) workloads only"
    if max(f.n_bins for f in w.factors) > MAX_KRON_AXIS:
        return f"dense per-axis optimisation: axes up to {MAX_KRON_AXIS} cells"
    return None


def _axes_seconds(p: _Problem, seconds_at_max: float) -> float:
    """Measured cost at MAX_KRON_AXIS cells, cubic per distinct axis length."""
    return sum(seconds_at_max * (n / MAX_KRON_AXIS) ** 3
               for n in {f.n_bins for f in p.grid.factors})


def _histogram(p: _Problem) -> list[_Candidate]:
    return [_Candidate(p.mechanism(histogram(_shape(p.workload))), "every bin measured once "
                       "(strategies.histogram)")]


def _direct_applies(p: _Problem) -> str | None:
    w = p.workload
    if w.n_queries > p.n:
        return (f"more queries ({w.n_queries}) than bins ({p.n}): measuring every query "
                "costs more than a strategy over the bins")
    if p.one_d and w.kind == "identity":
        return "the workload's rows are the bins: the same mechanism as 'histogram'"
    if isinstance(w, StackedWorkload) and (w.n_queries * p.n > MAX_DIRECT_ENTRIES
                                           or p.n > MAX_DENSE_BINS):
        return (f"a stacked workload is measured as a dense matrix, up to {MAX_DENSE_BINS} "
                f"cells (got {p.n})")
    return None


def _direct(p: _Problem) -> list[_Candidate] | str:
    w = p.workload
    strat: Strategy | str
    if p.one_d:
        strat = direct_rows(w, "workload rows", MAX_DENSE_BINS)
    elif isinstance(w, KroneckerWorkload):
        parts = [direct_rows(f, f"{f.kind} rows", MAX_DENSE_BINS) for f in w.factors]
        why = [x for x in parts if isinstance(x, str)]
        strat = why[0] if why else kron(*[x for x in parts if isinstance(x, Strategy)],
                                        name="workload rows")
    else:
        strat = Strategy(w.dense(), name="workload rows")
    if isinstance(strat, str):
        return strat
    return [_Candidate(p.mechanism(strat), "the workload's own rows measured directly "
                       "(distinct rows, one noise scale)")]


def _equal_leaf_variance(p: _Problem, h: int) -> float:
    """The leaves' noise variance of a height-h tree (every factor >= 2: their level
    sensitivities are those of (2, .., 2)) with the budget split equally over its noisy
    levels (``optimize.levels``, Mechanism's calibration)."""
    m = len(noisy_levels(h, p.neighbours))
    return float(level_variances((2,) * h, (p.budget / m,) * m, noise=p.noise,
                                 neighbours=p.neighbours)[-1])


def _identity_heights(p: _Problem, flat_error: float) -> int:
    """The tallest height an unpadded equal-budget tree can have and still beat the flat
    tree (K) on the identity workload: a height-h tree has error >= (K / 2) v_h, v_h its
    leaf variance (docs/math.md section 4), so heights where that exceeds ``flat_error``
    are not searched."""
    tallest = len(finest_refinement((p.n,)))
    return max([1] + [h for h in range(2, tallest + 1)
                      if p.n / 2 * _equal_leaf_variance(p, h) <= flat_error * (1 + 1e-9)])


def _tree_equal(p: _Problem) -> list[_Candidate] | str:
    w = p.workload
    search = partial(level_uniform, p.n, p.epsilon, rho=p.rho, estimator="blue",
                     neighbours=p.neighbours, budgets="equal", top=0)
    if w.kind in ("prefix", "all_range"):
        d = search(workload=w.kind)
        return [_tree_design_candidate(d, "optimize.level_uniform, BLUE, equal budgets")]
    # identity, total, custom ranges: unpadded trees scored exactly, one by one
    if w.kind == "identity":
        flat = search(workload=w, allow_padding=False, height=1)
        h = _identity_heights(p, flat.error)
        d = flat if h == 1 else search(workload=w, allow_padding=False, max_height=h)
        return [_tree_design_candidate(d, f"optimize.level_uniform, BLUE, equal budgets, "
                                       f"every tree of height <= {h} (a taller one has "
                                       f"error >= (K / 2) x its leaf variance, above the "
                                       f"flat tree's)")]
    by_height = factorisations_by_height(p.n)
    total = sum(by_height.values())
    if total <= MAX_WORKLOAD_SEARCH_TREES:
        d = search(workload=w, allow_padding=False)
        return [_tree_design_candidate(d, "optimize.level_uniform, BLUE, equal budgets, "
                                       f"all {total} trees")]
    h, count = 0, 0
    while h + 1 in by_height and count + by_height[h + 1] <= MAX_WORKLOAD_SEARCH_TREES:
        h += 1
        count += by_height[h]
    slow = _too_slow(count * (TREE_SCORE_SECONDS + w.n_queries * RANGE_SCORE_SECONDS), p)
    if slow:
        return slow
    d = search(workload=w, allow_padding=False, max_height=h)
    return [_tree_design_candidate(d, f"optimize.level_uniform, BLUE, equal budgets, not "
                                   f"exhaustive: the {count} trees of height <= {h} of "
                                   f"{total} (scored one by one, up to "
                                   f"{MAX_WORKLOAD_SEARCH_TREES})")]


def _tree_optimal_applies(p: _Problem) -> str | None:
    if p.one_d and p.workload.kind not in ("prefix", "all_range", "identity"):
        return ("optimal per-level budgets are computed for the prefix, all-range and "
                "identity workloads only")
    return _one_d_tree(p)


def _tree_optimal(p: _Problem) -> list[_Candidate]:
    w = p.workload
    if w.kind == "identity":
        # no tree with any per-level budgets beats the histogram (docs/math.md section 4),
        # which is the finest tree with every budget on its leaves
        d = optimal_blue_budgets(finest_refinement((p.n,)), p.budget, noise=p.noise,
                                 neighbours=p.neighbours, workload="identity")
        return [_tree_design_candidate(d, "optimize.optimal_blue_budgets on the finest tree "
                                       "(identity: no level-uniform tree with any budgets "
                                       "beats the histogram)")]
    if p.n <= MAX_OPTIMAL_SEARCH_BINS:
        d = level_uniform(p.n, p.epsilon, rho=p.rho, estimator="blue",
                          neighbours=p.neighbours, budgets="optimal", workload=w.kind, top=0)
        return [_tree_design_candidate(d, "optimize.level_uniform, BLUE, optimal budgets")]
    # larger K: optimal budgets on the best equal-budget tree's finest
    # refinement and on the finest tree of K (with optimal budgets a refinement never loses)
    eq = level_uniform(p.n, p.epsilon, rho=p.rho, estimator="blue", neighbours=p.neighbours,
                       budgets="equal", top=0, workload=w.kind)
    out = []
    for ks in sorted({finest_refinement((p.n,)), finest_refinement(eq.branching)}):
        d = optimal_blue_budgets(ks, p.budget, noise=p.noise, neighbours=p.neighbours,
                                 workload=w.kind, n_queries=p.n)
        out.append(_tree_design_candidate(d, "optimize.optimal_blue_budgets on a finest tree"))
    return out


def _node_budgets_applies(p: _Problem) -> str | None:
    if p.one_d and p.workload.kind != "prefix":
        return "budgets per node are optimised for the CDF (prefix workload) only"
    return _one_d_tree(p)


def _node_budgets(p: _Problem) -> list[_Candidate]:
    ks = finest_refinement((p.n,))
    res = optimal_node_budgets(ks, p.epsilon, rho=p.rho, neighbours=p.neighbours,
                               time_limit=p.share(NODE_BUDGETS_SHARE))
    return [_Candidate(res.mechanism(), f"optimize.optimal_node_budgets on the finest tree "
                       f"{list(ks)}: {res.iterations} L-BFGS-B iterations from the optimal "
                       f"per-level budgets ({res.start_mean:.6g} per prefix)")]


def _haar_applies(p: _Problem) -> str | None:
    if p.one_d and p.n & (p.n - 1) and p.n > MAX_DENSE_BINS:
        return (f"K = {p.n} is not a power of two: the Haar strategy is then a plain matrix, "
                f"scored densely up to {MAX_DENSE_BINS} bins")
    return _one_d(p)


def _haar(p: _Problem) -> list[_Candidate]:
    return [_Candidate(p.mechanism(haar(p.n)), "Privelet's Haar wavelet (strategies.haar)")]


def _sqrt(p: _Problem) -> list[_Candidate]:
    return [_Candidate(p.mechanism(sqrt_factorization(p.n)),
                       "square-root factorisation of the prefix matrix "
                       "(strategies.sqrt_factorization)")]


def _blt(p: _Problem) -> list[_Candidate]:
    s = blt(p.n)
    return [_Candidate(p.mechanism(s), f"buffered linear Toeplitz, {s.buffers} buffers "
                       "optimised for the mean prefix error (strategies.blt)")]


def _gaussian_optimum_applies(p: _Problem) -> str | None:
    if p.noise != "gaussian":
        return "Gaussian noise only (rho)"
    if not p.one_d or p.workload.kind not in ("prefix", "all_range", "identity"):
        return "1-D prefix, all-range and identity workloads only (a tridiagonal G^-1)"
    return None


def _gaussian_optimum(p: _Problem) -> list[_Candidate]:
    res = gaussian_optimal_implicit(p.workload, tol=IMPLICIT_TOL,
                                    time_limit=p.share(IMPLICIT_SHARE))
    method = f"strategies.gaussian_optimal_implicit: {res.method}"
    if p.neighbours != "add_remove":
        return [_Candidate(p.mechanism(res.strategy), method + " (optimal for add/remove "
                           "neighbours; no certificate under swap)")]
    # the dual value at unit sensitivity and sigma^2 = 1 (rho = 1/2), restated at rho
    return [_Candidate(p.mechanism(res.strategy), method, float(at_budget(
        res.lower_bound / 2.0, "gaussian", p.budget)), "dual of the Gaussian optimum, certified")]


def _dense_optimum_applies(p: _Problem) -> str | None:
    if not p.one_d:
        return "1-D workloads only (grids: kron_p_identity, kron_gaussian_optimum)"
    if p.noise == "gaussian":
        if p.workload.kind in ("prefix", "all_range", "identity"):
            return "the implicit optimum (gaussian_optimum) solves the same problem at any size"
        if p.n > MAX_GAUSSIAN_DENSE_BINS:
            return (f"dense: a dense eigendecomposition per iteration, up to "
                    f"{MAX_GAUSSIAN_DENSE_BINS} bins (got {p.n})")
    elif p.n > MAX_P_IDENTITY_BINS:
        return (f"dense: HDMM's p-Identity is optimised up to {MAX_P_IDENTITY_BINS} bins "
                f"(got {p.n}; its cost is cubic in K)")
    return None


def _dense_optimum(p: _Problem) -> list[_Candidate] | str:
    slow = _too_slow(dense_optimum_seconds(p.noise, p.n), p)
    if slow:
        return slow
    if p.noise == "gaussian":   # as many iterations as its share of the time left allows
        per = dense_optimum_seconds("gaussian", p.n, iterations=1)
        max_iter = int(min(GAUSSIAN_DENSE_MAX_ITER, max(
            GAUSSIAN_DENSE_ITERATIONS, p.share(GAUSSIAN_DENSE_SHARE) // per)))
        res = optimized_strategy(p.workload, p.noise, neighbours=p.neighbours,
                                 max_iter=max_iter)
    else:
        res = optimized_strategy(p.workload, p.noise, neighbours=p.neighbours)
    method = f"optimize.optimized_strategy: {res.method}"
    if p.noise == "gaussian" and p.neighbours == "add_remove" and res.lower_bound:
        return [_Candidate(p.mechanism(res.strategy), method, float(at_budget(
            res.lower_bound / 2.0, "gaussian", p.budget)),
            "dual of the Gaussian optimum, certified")]
    return [_Candidate(p.mechanism(res.strategy), method)]



def _chains(branching: Iterable[Iterable[int]]) -> str:
    return " x ".join("(" + ",".join(map(str, c)) + ")" for c in branching)


def _grid_hierarchy(p: _Problem, family: str, padding: bool = False) -> tuple[GridDesign, str]:
    w = p.grid
    res = best_grid_hierarchy(w.grid_shape, w, p.epsilon, rho=p.rho, neighbours=p.neighbours,
                              budgets="optimal", family=family, allow_padding=padding, top=1)
    return res.best, (f"optimize.best_grid_hierarchy(family='{family}', budgets='optimal', "
                      f"{'padded' if padding else 'unpadded'}): "
                      f"{_chains(res.best.branching)}; {res.method}")


def _grid_kron_trees(p: _Problem) -> list[_Candidate]:
    d, how = _grid_hierarchy(p, "kron")
    if p.n > MAX_DENSE_BINS:
        return [_Candidate(d.mechanism(), f"{how}; padded designs are tried up to "
                           f"{MAX_DENSE_BINS} cells (truncated Kronecker trees: dense GLS)")]
    out = [_Candidate(d.mechanism(), how)]
    # the best padded design, truncated to the real cells: the padding is known to be
    # empty, which the padded search (padding as unknown empty cells) does not use, so its
    # BLUE error is at most the padded design's; scored by the dense GLS (no structured
    # engine for truncated Kronecker trees)
    pd, how = _grid_hierarchy(p, "kron", padding=True)
    if pd.padded_shape != pd.shape:
        strat = kron(*[truncated_tree(n, c) for n, c in zip(pd.shape, pd.branching)],
                     name=f"truncated Kronecker trees {_chains(pd.branching)}")
        mech = Mechanism(strat, noise=p.noise, neighbours=p.neighbours,
                         level_budgets=list(pd.budgets), epsilon=p.epsilon, rho=p.rho)
        out.append(_Candidate(mech, f"{how}; truncated to the real cells (the padding "
                              "known empty)"))
    return out


def _grid_quadtree(p: _Problem) -> list[_Candidate]:
    d, how = _grid_hierarchy(p, "quadtree")
    return [_Candidate(d.mechanism(), how)]


def _kron_p_identity(p: _Problem) -> list[_Candidate] | str:
    w = p.grid
    slow = _too_slow(sum(dense_optimum_seconds("laplace", n)
                         for n in {f.n_bins for f in w.factors}), p)
    if slow:
        return slow
    res = kron_p_identity(w)
    note = "" if p.noise == "laplace" else " (optimised for Laplace noise)"
    return [_Candidate(p.mechanism(res.strategy), f"strategies.kron_p_identity{note}: "
                       f"{res.method}")]


def _kron_gaussian_applies(p: _Problem) -> str | None:
    return "Gaussian noise only (rho)" if p.noise != "gaussian" else _kron_axes(p)


def _kron_gaussian_optimum(p: _Problem) -> list[_Candidate] | str:
    slow = _too_slow(_axes_seconds(p, GAUSSIAN_AXIS_SECONDS), p)
    if slow:
        return slow
    res = kron_gaussian_optimal(p.workload)
    return [_Candidate(p.mechanism(res.strategy), f"strategies.kron_gaussian_optimal: "
                       f"{res.method}")]


#: The families, in the order they run (cheap first). One entry per family:
#: Family(applies, build, about, releasable[, why not releasable][, always]).
FAMILIES: dict[str, Family] = {
    "histogram": Family(_anywhere, _histogram, "every bin (cell) measured once", True,
                        always=True),
    "workload": Family(_direct_applies, _direct, "the workload's own rows measured directly",
                       True),
    "tree_equal": Family(_one_d_tree, _tree_equal, "best level-uniform tree, BLUE, equal "
                         "budgets", True),
    "tree_optimal": Family(_tree_optimal_applies, _tree_optimal, "best level-uniform tree, "
                           "BLUE, optimal per-level budgets", True),
    "haar": Family(_haar_applies, _haar, "Privelet's Haar wavelet, BLUE", True),
    "sqrt": Family(_one_d, _sqrt, "square-root factorisation (Toeplitz), BLUE", True),
    "blt": Family(_one_d, _blt, "buffered linear Toeplitz, BLUE", True),
    "gaussian_optimum": Family(_gaussian_optimum_applies, _gaussian_optimum, "the Gaussian "
                               "optimum, implicit (any size), certified", True),
    "node_budgets": Family(_node_budgets_applies, _node_budgets, "a budget per node on the "
                           "finest tree, BLUE", True),
    "dense_optimum": Family(_dense_optimum_applies, _dense_optimum, "HDMM's p-Identity / the "
                            "dense Gaussian optimum (small domains)", True),
    "grid_kron_trees": Family(_grid, _grid_kron_trees, "Kronecker products of trees, optimal "
                              "budgets", True),
    "grid_quadtree": Family(_grid, _grid_quadtree, "quadtrees, optimal budgets", True),
    "kron_p_identity": Family(_kron_axes, _kron_p_identity, "HDMM's Kronecker p-Identity",
                              False, _GRID_TREES),
    "kron_gaussian_optimum": Family(_kron_gaussian_applies, _kron_gaussian_optimum,
                                    "product of the 1-D Gaussian optima", False,
                                    _GRID_TREES),
}


# --------------------------------------------------------------------------- lower bound
def _svd_lower_bound(p: _Problem) -> tuple[float | None, str]:
    """(bound, what) from the SVD bound where it is cheap (closed forms, or a dense
    eigendecomposition up to MAX_BOUND_DENSE_BINS), else (None, "")."""
    w = p.workload
    what = ("SVD bound (Li & Miklau 2012)" if p.noise == "gaussian" else
            "l1 SVD bound (Li & Miklau 2012), valid but loose under Laplace noise")
    public = resolve_public(p.neighbours)
    bound = partial(error_lower_bound, noise=p.noise, neighbours=p.neighbours,
                    epsilon=p.epsilon, rho=p.rho)
    if isinstance(w, KroneckerWorkload) and not public:
        # singular values of W_1 x W_2 are the products of theirs: the bound factorises
        if any(f.kind not in _BOUND_KINDS and f.n_bins > MAX_BOUND_DENSE_BINS
               for f in w.factors):
            return None, ""
        first, *rest = w.factors
        return float(bound(first)) * math.prod(svd_bound(f) for f in rest), what
    if public and not p.one_d:
        return None, ""    # the public-total bound is computed for 1-D workloads only
    cheap = (p.one_d and w.kind in _BOUND_KINDS
             and (not public or w.kind in ("identity", "total") or p.n > 8192))
    if not cheap and p.n > MAX_BOUND_DENSE_BINS:
        return None, ""
    return float(bound(w)), what


# --------------------------------------------------------------------------- front door
def _score(workload: Workload, mech: Mechanism) -> float:
    """The exact total error (``expected_error``, the BLUE); a stacked workload part by
    part (trace(W Cov W') adds over blocks of rows, and the BLUE does not depend on W), so
    each Kronecker part keeps its structured path."""
    if isinstance(workload, StackedWorkload):
        return float(sum(expected_error(part, mech) for part in workload.parts))
    return float(expected_error(workload, mech))


def _check_families(families: str | Iterable[str] | None,
                    releasable: bool) -> tuple[str, ...]:
    if not isinstance(releasable, (bool, np.bool_)):
        raise ValueError(f"releasable must be True or False, got {releasable!r}")
    if families is None:
        return tuple(FAMILIES)
    given = (families,) if isinstance(families, str) else families
    try:
        names = tuple(given)
    except TypeError:
        raise ValueError(f"families must be None or a sequence of family names from "
                         f"{list(FAMILIES)}, got {families!r}") from None
    if not names:
        raise ValueError(f"families must name at least one family from {list(FAMILIES)}")
    unknown = [f for f in names if not isinstance(f, str) or f not in FAMILIES]
    if unknown:
        raise ValueError(f"families: unknown family {unknown[0]!r}; choose from "
                         f"{list(FAMILIES)}")
    return tuple(f for f in FAMILIES if f in names)


def _describe(w: Workload) -> str:
    if isinstance(w, KroneckerWorkload):
        return " x ".join(_describe(f) for f in w.factors)
    if isinstance(w, StackedWorkload):
        return f"{len(w.parts)} stacked workloads over {w.n_bins} cells"
    if w.kind == "ranges":
        return f"ranges({w.n_bins}, {w.n_queries} queries)"
    return f"{w.kind}({w.n_bins})"


def best_mechanism(workload: Workload, epsilon: float | None = None, *,
                   rho: float | None = None, neighbours: str = "add_remove",
                   time_limit: float = 60.0, families: str | Iterable[str] | None = None,
                   releasable: bool = False) -> Design:
    """The best mechanism for ``workload`` found among every family of :data:`FAMILIES`
    that applies (module docstring), ranked by the exact BLUE error.

    Parameters
    ----------
    workload : a ``dptree_opt.workloads`` workload (1-D, a Kronecker grid workload, or
        stacked marginals).
    epsilon | rho : exactly one: eps for Laplace noise (pure eps-DP) or rho for Gaussian
        noise (rho-zCDP; sigma = 1 per unit l2 sensitivity is rho = 1/2).
    neighbours : "add_remove" (N private, default) or "swap" (N public).
    time_limit : seconds for the whole search (> 0; module docstring: checked between
        families, a share given to the time-limited ones).
    families : None (all) or names from :data:`FAMILIES` to try (unknown names refused).
    releasable : True keeps only the designs that ``dptree_opt.release(..., design=d)`` and
        ``stream.Counter(..., design=d)`` run with OpenDP's discrete samplers (real-valued
        strategies as scaled integer strategies, ``docs/releasing_designs.md``).

    Returns
    -------
    Design: ``.mechanism()``, ``.error`` (exact, counts^2, total over the queries), ``.mean``,
    ``.lower_bound`` / ``.gap`` (where a bound is computed), ``.family``, ``.method``,
    ``.alternatives`` (one Design per other family scored, best first), ``.skipped``
    ((family, reason) pairs), ``.seconds``, ``.releasable``. ValueError when no family can
    be scored."""
    t0 = time.perf_counter()
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a dptree_opt Workload (dptree_opt.workloads), got "
                         f"{type(workload).__name__}")
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (Laplace noise, eps-DP) or rho "
                         "(Gaussian noise, rho-zCDP)")
    noise = "laplace" if epsilon is not None else "gaussian"
    budget = resolve_budget(noise, epsilon, rho)
    resolve_public(neighbours)      # validates the neighbour model
    if (isinstance(time_limit, (bool, np.bool_)) or not isinstance(time_limit, Real)
            or not math.isfinite(time_limit) or time_limit <= 0):
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got "
                         f"{time_limit!r}")
    names = _check_families(families, releasable)
    p = _Problem(workload, noise, budget, neighbours, t0 + float(time_limit))
    name_of = _describe(workload)
    designs: list[tuple[float, bool, int, Design]] = []
    skipped: list[tuple[str, str]] = []
    bounds: list[tuple[float, str]] = []
    lb, lb_what = _svd_lower_bound(p)
    if lb is not None:
        bounds.append((lb, lb_what))
    for rank, name in enumerate(names):
        fam = FAMILIES[name]
        why = fam.applies(p)
        if why is not None:
            skipped.append((name, why))
            continue
        if releasable and not fam.releasable:
            skipped.append((name, f"not releasable: {fam.release_note}"))
            continue
        if not fam.always and p.remaining() <= 0:
            skipped.append((name, f"time limit: the {float(time_limit):g} s are spent"))
            continue
        t1 = time.perf_counter()
        try:
            out = fam.build(p)
        except (ValueError, np.linalg.LinAlgError) as exc:
            skipped.append((name, f"refused: {exc}"))
            continue
        if isinstance(out, str):
            skipped.append((name, out))
            continue
        scored: list[tuple[float, _Candidate]] = []
        reason = "no candidate"
        for cand in out:
            try:
                scored.append((_score(workload, cand.mech), cand))
            except (ValueError, np.linalg.LinAlgError) as exc:
                reason = f"not scored: {exc}"
        if not scored:
            skipped.append((name, reason))
            continue
        if releasable:
            routes = [(e, c, _release_route(p, fam, c.mech)) for e, c in scored]
            if not any(r[0] for *_, r in routes):
                skipped.append((name, f"not releasable: {routes[0][2][1]}"))
                continue
            scored = [(e, c) for e, c, r in routes if r[0]]
        err, cand = min(scored, key=lambda x: x[0])
        for c in out:
            if c.lower_bound is not None:
                bounds.append((c.lower_bound, c.bound_method))
        ok, note = _release_route(p, fam, cand.mech)
        spent = time.perf_counter() - t1
        designs.append((err, not ok, rank, Design(
            family=name, method=cand.method, error=err, n_queries=workload.n_queries,
            noise=noise, budget=budget, neighbours=neighbours, mech=cand.mech,
            seconds=spent, family_seconds=spent, releasable=ok,
            release_note=note, workload_name=name_of)))
    if not designs:
        raise ValueError("no family could be scored for this workload: " + "; ".join(
            f"{n}: {r}" for n, r in skipped))
    designs.sort(key=lambda x: x[:3])
    lower: float | None
    lower, what = max(bounds, key=lambda b: b[0]) if bounds else (None, "")

    ranked = [replace(d, lower_bound=lower, bound_method=what) for *_, d in designs]
    return replace(ranked[0], alternatives=tuple(ranked[1:]), skipped=tuple(skipped),
                   seconds=time.perf_counter() - t0)
