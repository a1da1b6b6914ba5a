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
* ``p_identity_hats`` (Laplace, the CDF and all ranges, 256..4096 bins): HDMM's p-Identity
  on the sparse
  support of the multi-scale hats (``strategies.p_identity_sparse.laplace_p_identity_hats``),
  as many L-BFGS-B iterations as half the time left allows (skipped below 50). With the
  default minute, eps = 1: 115.5 per prefix at 2048 bins (1074 iterations), 145.5 at 4096
  (229), against 128.4 / 159.7 for ``nested`` and 145.6 / 179.1 for ``node_budgets``; all
  ranges: 156.9 at 2048 bins and 202.8 at 4096 (25 s), against 201.8 / 259.5 for the best tree
  with optimal budgets.
* ``nested`` (Laplace, add/remove, the CDF): a nested strategy (``strategies.nested``,
  docs/math.md section 12) with local matrices and budgets per depth optimised by
  ``optimize.optimal_nested`` from the full l1 optima of its fan-outs (largest divisors <= 256:
  2^16 as 256 x 256, 2^20 as 256 x 256 x 16), within a share of the time left.
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
* ``banded_sqrt``, ``banded_inverse_sqrt``, ``banded_toeplitz`` (private learning: the
  prefix workload under a participation schema with separation / epoch length b; module
  ``optimize.families_learning``): BSR (plain and column-normalised), BISR and the banded
  Toeplitz strategy optimised for the schema, each with b bands; ``participation_optimum``
  (Gaussian, fixed epoch): the optimal factorisation with its certified dual bound. Under a
  schema with Gaussian noise the relaxation bound of ``participation_lower_bound`` is a lower
  bound too.
* ``kron_p_identity``, ``kron_gaussian_optimum``: HDMM's Kronecker p-Identity and the
  product of the 1-D Gaussian optima (``strategies.kron_p_identity``,
  ``kron_gaussian_optimal``).
* ``kron_l1_local`` (Laplace; prefix / all-range axes of at most 1024 cells): the Kronecker
  product of ``optimize.l1_local`` per axis (from p-Identity, at most 1000 L-BFGS-B
  iterations within half the time left), never worse than ``kron_p_identity``. E.g. the
  256 x 256 CDF, eps = 1, add/remove: 1441.2 per query against 1488.2 (about 27 s, one core).

Time: ``time_limit`` is checked before every family (a family is skipped with reason
"time limit" once it is spent); the families that take a time limit (``node_budgets``,
``p_identity_hats``, ``nested``, ``gaussian_optimum``, ``kron_l1_local``) get a share of what is left, and those that cannot be stopped are
skipped when their measured cost (one core) exceeds what is left. A family already running
is never interrupted, so a search can overrun by at most one family's cost. ``histogram``
(O(K)) always runs, so there is always a design.

Lower bound: the SVD bound (Li & Miklau, "Measuring the achievable error of query sets
under differential privacy", 2012; ``bounds.error_lower_bound``; under Laplace the l1
analogue, valid but loose), under Laplace noise with add/remove neighbours on a 1-D
workload 2/eps^2 x a certified dual value of the Gaussian optimum where it is larger
(``bounds.laplace_lower_bound``: column l2 <= column l1 norm; the dual from
``strategies.gaussian_optimal_implicit`` for prefix / all-range / identity with a share of
the time left, after the families, else the dense ``gaussian_optimal`` up to
MAX_LAPLACE_BOUND_DENSE_BINS bins; docs/laplace_bounds.md, which also shows that no convex
argument on A'A gives more for prefix sums), for Kronecker workloads under add/remove the
product of the per-axis bounds (the singular values of W_1 x W_2 are the products of theirs, so
(sum sigma)^2 / n factorises), and under Gaussian noise with add/remove the dual value of the
Gaussian optimum when a family computed it: every dual value of the convex program of the
optimal Gaussian strategy bounds the error of every Gaussian matrix mechanism from below
(Li, Miklau, Hay, McGregor, Rastogi, "The matrix mechanism", VLDBJ 2015; the dual and its
fixed point: ``strategies.optimized``). The largest valid bound is reported.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from numbers import Real


import numpy as np

from ..bounds import error_lower_bound, laplace_lower_bound, svd_bound
from ..error import expected_error
from ..mechanism import Mechanism
from ..participation import Participation, as_participation
from ..privacy import resolve_budget, resolve_public
from ..strategies import gaussian_optimal_implicit
from ..strategies.optimized import gaussian_optimal
from ..workloads import KroneckerWorkload, StackedWorkload, Workload
from .design import Design
from .family import (IMPLICIT_TOL, PARTICIPATION_NOTE, Candidate, Family, GRID_TREES, Problem,
                     release_route)
from .families_1d import (anywhere, blt_family, dense_optimum_applies, dense_optimum_family,
                          direct_applies, direct_family, gaussian_optimum_applies,
                          gaussian_optimum_family, haar_applies, haar_family, hats_applies,
                          hats_family, histogram_family, nested_applies, nested_family, node_budgets_applies,
                          node_budgets_family, one_d, one_d_tree, sqrt_family, tree_equal_family, tree_optimal_applies,
                          tree_optimal_family)
from .families_learning import (banded_inverse_sqrt_family, banded_sqrt_family,
                                 banded_toeplitz_family, learning_applies, optimum_applies,
                                 participation_bound, participation_optimum_family)
from .families_grid import (grid_kron_trees_family, grid_only, grid_quadtree_family, kron_axes,
                            kron_gaussian_applies, kron_gaussian_optimum_family,
                            kron_l1_local_applies, kron_l1_local_family, kron_p_identity_family)

__all__ = ["Family", "FAMILIES", "best_mechanism"]

MAX_BOUND_DENSE_BINS = 2048   # SVD bound from a dense eigendecomposition (O(n^3))
# Laplace: the Gaussian dual behind bounds.laplace_lower_bound
LAPLACE_BOUND_SHARE = 0.25         # of the time left after the families (implicit optimum)
MAX_LAPLACE_BOUND_DENSE_BINS = 512  # dense Gaussian optimum (a dense eigh per iteration)
LAPLACE_BOUND_DENSE_ITER = 50       # its iterations (every dual value is a certificate)
_BOUND_KINDS = ("prefix", "identity", "total", "all_range")  # closed-form singular values


#: The families, in the order they run (cheap first). One entry per family:
#: Family(applies, build, about, releasable[, why not releasable][, always]).
FAMILIES: dict[str, Family] = {
    "histogram": Family(anywhere, histogram_family, "every bin (cell) measured once", True,
                        always=True),
    "workload": Family(direct_applies, direct_family, "the workload's own rows measured directly",
                       True),
    "tree_equal": Family(one_d_tree, tree_equal_family, "best level-uniform tree, BLUE, equal "
                         "budgets", True),
    "tree_optimal": Family(tree_optimal_applies, tree_optimal_family, "best level-uniform tree, "
                           "BLUE, optimal per-level budgets", True),
    "haar": Family(haar_applies, haar_family, "Privelet's Haar wavelet, BLUE", True),
    "sqrt": Family(one_d, sqrt_family, "square-root factorisation (Toeplitz), BLUE", True),
    "blt": Family(one_d, blt_family, "buffered linear Toeplitz, BLUE", True),
    "gaussian_optimum": Family(gaussian_optimum_applies, gaussian_optimum_family, "the Gaussian "
                               "optimum, implicit (any size), certified", True),
    "node_budgets": Family(node_budgets_applies, node_budgets_family, "a budget per node on the "
                           "finest tree, BLUE", True),
    "p_identity_hats": Family(hats_applies, hats_family, "HDMM's p-Identity from multi-scale "
                              "hats (Laplace, the CDF and all ranges, 256..4096 bins), BLUE", True),
    "nested": Family(nested_applies, nested_family, "nested strategy: optimised local "
                     "matrices on children totals per depth (Laplace, the CDF), BLUE", True),
    "dense_optimum": Family(dense_optimum_applies, dense_optimum_family, "HDMM's p-Identity / "
                            "the dense Gaussian optimum (small domains)", True),
    "banded_sqrt": Family(learning_applies, banded_sqrt_family, "banded square root (BSR) "
                          "with b bands, plain and column-normalised, BLUE", False,
                          PARTICIPATION_NOTE),
    "banded_inverse_sqrt": Family(learning_applies, banded_inverse_sqrt_family, "banded "
                                  "inverse square root (BISR), b bands, BLUE", False,
                                  PARTICIPATION_NOTE),
    "banded_toeplitz": Family(learning_applies, banded_toeplitz_family, "banded Toeplitz "
                              "with b bands optimised for the schema, BLUE", False,
                              PARTICIPATION_NOTE),
    "participation_optimum": Family(optimum_applies, participation_optimum_family, "the "
                                    "optimal factorisation under a fixed-epoch schema, "
                                    "certified", False, PARTICIPATION_NOTE),
    "grid_kron_trees": Family(grid_only, grid_kron_trees_family, "Kronecker products of trees, "
                              "optimal budgets", True),
    "grid_quadtree": Family(grid_only, grid_quadtree_family, "quadtrees, optimal budgets", True),
    "kron_p_identity": Family(kron_axes, kron_p_identity_family, "HDMM's Kronecker p-Identity",
                              False, GRID_TREES),
    "kron_l1_local": Family(kron_l1_local_applies, kron_l1_local_family, "Kronecker product of "
                            "the 1-D l1 local optima (from p-Identity)", False, GRID_TREES),
    "kron_gaussian_optimum": Family(kron_gaussian_applies, kron_gaussian_optimum_family,
                                    "product of the 1-D Gaussian optima", False,
                                    GRID_TREES),
}


# --------------------------------------------------------------------------- lower bound
def _svd_lower_bound(p: Problem) -> tuple[float | None, str]:
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


# certified Gaussian duals by (workload kind, n), for the Laplace bound (a dual is valid forever)
_GAUSSIAN_DUALS: dict[tuple[str, int], float | None] = {}


def _laplace_lower_bound(p: Problem) -> tuple[float | None, str]:
    """(bound, what) under Laplace noise, add/remove, one participation, 1-D workload:
    ``bounds.laplace_lower_bound`` with a certified Gaussian dual (the larger of 2/eps^2 x
    the dual and the l1 SVD analogue, labelled), else (None, "") (``_svd_lower_bound``
    covers the rest). The implicit optimum gets a share of the time left; it completes the
    iteration running when the time is up (one iteration ~6 s at 2^20 on one core)."""
    w = p.workload
    if (p.noise != "laplace" or p.neighbours != "add_remove" or not p.one_d
            or not p.participation.is_single or p.epsilon is None):
        return None, ""
    dual: float | None
    try:
        if w.kind in ("prefix", "all_range", "identity"):
            key = (w.kind, p.n)   # the dual depends on (kind, n) only: computed once
            if key not in _GAUSSIAN_DUALS:
                _GAUSSIAN_DUALS[key] = gaussian_optimal_implicit(
                    w, tol=IMPLICIT_TOL, time_limit=p.share(LAPLACE_BOUND_SHARE)).lower_bound
            dual = _GAUSSIAN_DUALS[key]
        elif p.n <= MAX_LAPLACE_BOUND_DENSE_BINS:
            dual = gaussian_optimal(w, max_iter=LAPLACE_BOUND_DENSE_ITER).lower_bound
        else:
            return None, ""
        lb = laplace_lower_bound(w, epsilon=p.epsilon, gaussian_dual=dual)
    except (ValueError, np.linalg.LinAlgError):   # e.g. W'W singular: the SVD route only
        return None, ""
    return lb.total, lb.method


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
                   releasable: bool = False,
                   participation: Participation | None = None) -> Design:
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
    participation : a schema of ``dptree_opt.participation`` (default ``single()``): one
        user's data enters several steps of a stream (private learning; docs/math.md
        section 11). Every candidate is calibrated to it (add/remove neighbours, 1-D
        workloads over the n steps); the families built for one participation (trees with
        searched budgets) are recalibrated, budgets per node are skipped, and the learning
        families (restarted trees, banded factorisations, the participation optimum) run.

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
    part = as_participation(participation)
    if not part.is_single:
        if neighbours != "add_remove":
            raise ValueError("participation schemas are defined for add/remove (zero-out) "
                             "neighbours")
        if isinstance(workload, (KroneckerWorkload, StackedWorkload)):
            raise ValueError("participation schemas apply to a stream: a 1-D workload over "
                             "its steps")
        part.check_steps(workload.n_bins)
        if releasable:
            raise ValueError(f"releasable=True: nothing is, under a participation schema "
                             f"({PARTICIPATION_NOTE})")
    if (isinstance(time_limit, (bool, np.bool_)) or not isinstance(time_limit, Real)
            or not math.isfinite(time_limit) or time_limit <= 0):
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got "
                         f"{time_limit!r}")
    names = _check_families(families, releasable)
    p = Problem(workload, noise, budget, neighbours, t0 + float(time_limit), part)
    name_of = _describe(workload)
    designs: list[tuple[float, bool, int, Design]] = []
    skipped: list[tuple[str, str]] = []
    bounds: list[tuple[float, str]] = []
    for lb, lb_what in (_svd_lower_bound(p), participation_bound(p)):
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
        scored: list[tuple[float, Candidate]] = []
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
            routes = [(e, c, release_route(p, fam, c.mech)) for e, c in scored]
            if not any(r[0] for *_, r in routes):
                skipped.append((name, f"not releasable: {routes[0][2][1]}"))
                continue
            scored = [(e, c) for e, c, r in routes if r[0]]
        err, cand = min(scored, key=lambda x: x[0])
        for c in out:
            if c.lower_bound is not None:
                bounds.append((c.lower_bound, c.bound_method))
        ok, note = release_route(p, fam, cand.mech)
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
    lb, lb_what = _laplace_lower_bound(p)      # after the families: their time comes first
    if lb is not None:
        bounds.append((lb, lb_what))
    lower: float | None
    lower, what = max(bounds, key=lambda b: b[0]) if bounds else (None, "")

    ranked = [replace(d, lower_bound=lower, bound_method=what) for *_, d in designs]
    return replace(ranked[0], alternatives=tuple(ranked[1:]), skipped=tuple(skipped),
                   seconds=time.perf_counter() - t0)
