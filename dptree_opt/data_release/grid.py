"""``release`` over a d-D grid: records -> cells -> Kronecker tree -> secure noise -> BLUE.

The d-D counterpart of ``core`` , on the same rules (validation first,
nothing after the noise):

1. **Cells** (public): per axis i, ``bins[i]`` equal-width bins over [lower_i, upper_i)
   with the 1-D bin rule (``binning``); a record is counted in the cell of its d bins, cells
   in row-major (C) order. Every column is validated as a 1-D release validates its column
   (NaN, infinities, out of range, non-numbers, ragged rows, empty input), before the noise.
2. **Hierarchy** (public): the Kronecker product of one level-uniform tree per axis
   (``strategies.kron``), with a budget per level tuple. ``tree="optimal"``: the least
   exact error of the design workload over the real cells (all boxes, or the d-D CDF) found
   by ``optimize.best_grid_hierarchy(family="kron")`` (every product of per-axis trees,
   padded like the 1-D search: an axis of n_i bins may get K_i' >= n_i leaves, the extra
   cells public zeros) and, for optimal budgets, a few extra products (``_grid_design``);
   it searches axes of up to ``MAX_DESIGN_AXIS_BINS`` = 4096 bins. A given tree is one list
   of branching factors >= 2 per axis (a factor 1 would repeat a level: whole level tuples
   measured twice, which the Helmert-Haar BLUE does not take; refused).
   ``budgets="optimal"``: a budget per level tuple (``optimize.optimal_grid_budgets``;
   Laplace: a local search) or "equal".
3. **Secure noise**: ``secure_noise.secure_measure`` (OpenDP's discrete Laplace / Gaussian per
   level tuple; no rng on this path).
4. **Estimation**: ``estimation.kronecker.kron_tree_blue`` (the BLUE: per-axis Helmert-Haar
   transforms, exact) on the discrete mechanism; exact standard errors of any box from
   ``error.kronecker.kron_box_variances``.
5. **Consistency** (``consistency="l2"``): the L2-nearest non-negative integer cell counts
   summing to N (``consistency.project_histogram``): N exact under swap, else the rounded
   BLUE of the total (over the real cells or over the whole padded grid: the smaller SE).
   It is consistency in the cell metric (the 1-D release projects the CDF); range counts of
   the consistent cells carry no exact SE, the raw ones do.

Designs. ``design=`` (a grid ``Design`` from ``optimize.best_mechanism``, a ``GridDesign``, or a
``Mechanism``) releases a given Kronecker product of complete trees or a quadtree over the
real cells (budgets per level tuple) instead of searching: its secure form
(``secure_noise.secure_form``; these strategies have integer answers), the same steps 3-5
(the BLUE by the registry: per-axis Helmert-Haar transforms, or the quadtree's Morton tree).
Other grid designs (Kronecker p-Identity, products of Gaussian optima) are refused before any
noise: the box standard errors here are those of trees and quadtrees.

Padding works as in 1-D: the padded cells are public zeros (no record can fall there), the
BLUE treats them as unknown (unbiased, SEs exact), only the real cells are published.

Before the noise, besides the arguments and the data: the sizes by arithmetic (at most
2^24 cells, and at least prod(n_i + 1) rows for any hierarchy, so at most 2^24 rows), the
columns and the file's header before the design, and the post-processing itself, run once
on all-zero answers (public): what depends on the hierarchy alone cannot fail after the
noise.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Callable, Sequence, cast

import numpy as np
import numpy.typing as npt

from .. import optimize, strategies, workloads
from ..consistency import project_histogram
from ..engines import GRID_TREE_ENGINES, claimed_by
from ..engines.kronecker import (axis_interval_weights, grid_trees, kron_box_variances,
                                 level_tuple_lambdas, level_tuple_of)
from ..engines.tree_error import haar_workload_weights
from ..estimation import blue
from ..limits import check_memory
from ..mechanism import Mechanism, check_histogram
from ..privacy import check_budget
from ..strategies.base import check_neighbours, frozen_copy
from .binning import BinSpec, check_out_of_range
from .grid_result import GridRelease
from .result import incomplete_note
from .checks import (DEFAULT_QUANTILES, budget_choice, budget_pair, check_budgets,
                     check_histogram_total,
                     check_mechanism_noise, check_tiny_budget)
from .io import (check_chunk_bytes, check_column_names, check_columns, grid_histogram_from_file,
                 grid_histogram_from_values)
from .sources import engine_counts, is_engine_input
from .sources.base import pick
from .secure_noise import (check_private_total, design_budget, design_mechanism,
                           sampler_description, secure_form, secure_measure)

__all__ = ["release_grid", "release_grid_file", "is_grid_bins", "default_grid_error",
           "MAX_GRID_CELLS", "MAX_GRID_ROWS", "MAX_DESIGN_AXIS_BINS", "GRID_WORKLOADS"]

MAX_GRID_CELLS = 1 << 24
# OpenDP draws ~9 us (discrete Laplace) to ~17 us (discrete Gaussian) per row on this
# machine (1 core): 2^24 rows take 2.5-5 minutes. A binary x binary product has ~4 rows/cell;
# the fewest rows any hierarchy has is prod(n_i + 1) (a root over the cells on every axis).
MAX_GRID_ROWS = 1 << 24
# tree="optimal" searches every (padded) tree of every axis: 560 737 trees at 4096 bins,
# within optimize.grid.MAX_AXIS_CHAINS; longer axes need their trees given.
MAX_DESIGN_AXIS_BINS = 1 << 12
BYTES_PER_ROW = 256  # peak memory per strategy row, with a margin (measured ~120 at 2^20)
GRID_WORKLOADS = ("all_range", "prefix")


# ------------------------------------------------------------------ argument checks
# per-axis branching factors of a Kronecker product of trees
Branchings = tuple[tuple[int, ...], ...]


def is_grid_bins(bins: object) -> bool:
    """Whether ``bins`` asks for a grid release (a sequence of per-axis bin counts)."""
    return (not isinstance(bins, (Integral, str, bytes))
            and isinstance(bins, (list, tuple, np.ndarray)))


def _axis_values(value: object, name: str, d: int) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray)):
        raise ValueError(f"{name} must be a sequence of {d} numbers (one per axis) for a grid "
                         f"release, got {value!r}")
    vals = tuple(value.tolist() if isinstance(value, np.ndarray) else value)
    if len(vals) != d:
        raise ValueError(f"{name} must have one entry per axis ({d}), got {len(vals)}: "
                         f"{list(vals)!r}")
    return vals


def _check_grid(lower: object, upper: object, bins: object) -> tuple[BinSpec, ...]:
    """One BinSpec per axis (>= 2 axes, >= 2 bins each, cells <= MAX_GRID_CELLS)."""
    if not is_grid_bins(bins):
        raise ValueError(f"bins must give one number of bins per axis for a grid release "
                         f"(e.g. (64, 64)), got {bins!r}")
    if isinstance(bins, np.ndarray):
        bins = bins.tolist()
    bins = tuple(cast(Sequence[Any], bins))  # a list or tuple (is_grid_bins)
    if len(bins) < 2:
        raise ValueError(f"bins={list(bins)!r}: a grid release needs >= 2 axes; for one "
                         "axis pass an integer (bins=K)")
    for k in bins:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, Integral) or k < 2:
            raise ValueError(f"bins: every axis needs an integer >= 2 bins, got {list(bins)!r} "
                             "(an axis with one bin carries no information: drop it)")
    cells = math.prod(int(k) for k in bins)
    if cells > MAX_GRID_CELLS:
        raise ValueError(f"bins={list(bins)!r}: {cells} cells, above the limit "
                         f"{MAX_GRID_CELLS} (2^24); use fewer bins")
    rows = math.prod(int(k) + 1 for k in bins)
    if rows > MAX_GRID_ROWS:
        raise ValueError(f"bins={list(bins)!r}: every hierarchy over this grid has at least "
                         f"{rows} rows (a root over the bins of every axis: the product of "
                         f"bins + 1), above the limit {MAX_GRID_ROWS} (2^24 rows: minutes of "
                         "secure noise); use fewer bins")
    d = len(bins)
    lo, up = _axis_values(lower, "lower", d), _axis_values(upper, "upper", d)
    specs = []
    for i, (a, b, k) in enumerate(zip(lo, up, bins)):
        try:
            specs.append(BinSpec(a, b, int(k)))
        except ValueError as exc:
            raise ValueError(f"axis {i}: {exc}") from None
    return tuple(specs)


def _check_grid_tree(tree: object, specs: tuple[BinSpec, ...]) -> Branchings | None:
    """None for "optimal", else per-axis branching tuples (product >= the axis's bins)."""
    if isinstance(tree, str):
        if tree != "optimal":
            raise ValueError(f"tree must be 'optimal' or one list of branching factors per "
                             f"axis, got {tree!r}")
        return None
    try:
        # any input: its TypeError is the ValueError below
        per_axis = [list(t) for t in tree]  # type: ignore[attr-defined]  # caught
    except TypeError:
        raise ValueError(f"tree: for a grid give one list of branching factors per axis, e.g. "
                         f"[[2, 2, 4], [4, 4]], got {tree!r}") from None
    if len(per_axis) != len(specs):
        raise ValueError(f"tree: {len(specs)} axes need {len(specs)} lists of branching "
                         f"factors, got {len(per_axis)}")
    out = []
    for i, (ks, spec) in enumerate(zip(per_axis, specs)):
        if not ks or any(isinstance(k, (bool, np.bool_)) or not isinstance(k, Integral)
                         or k < 1 for k in ks):
            raise ValueError(f"tree, axis {i}: branching factors must be integers >= 2, got "
                             f"{ks!r}")
        if any(k == 1 for k in ks):
            # a factor 1 repeats its parent's level: in a Kronecker product those rows
            # duplicate whole level tuples, which the Helmert-Haar BLUE does not take
            raise ValueError(f"tree, axis {i}: branching {ks} has a factor 1 (a level that "
                             "repeats the level above it, measuring the same boxes twice); a "
                             "grid hierarchy needs factors >= 2: drop the 1s")
        if math.prod(int(k) for k in ks) < spec.bins:
            raise ValueError(f"tree, axis {i}: branching {ks} has {math.prod(ks)} leaves, "
                             f"fewer than bins = {spec.bins}")
        if math.prod(int(k) for k in ks) > 2 * spec.bins + 2:
            raise ValueError(f"tree, axis {i}: branching {ks} has {math.prod(ks)} leaves for "
                             f"{spec.bins} bins; use factors whose product is close to bins")
        out.append(tuple(int(k) for k in ks))
    return tuple(out)


def _tree_rows(branchings: Branchings) -> int:
    """Rows of the Kronecker product of complete trees (nodes per axis multiplied)."""
    rows = 1
    for ks in branchings:
        nodes, width = 1, 1
        for k in ks:
            width *= k
            nodes += width
        rows *= nodes
    return rows


def _check_rows(branchings: Branchings) -> None:
    rows = _tree_rows(branchings)
    if rows > MAX_GRID_ROWS:
        raise ValueError(f"the hierarchy {[list(k) for k in branchings]} has {rows} rows "
                         f"(> {MAX_GRID_ROWS}): the secure sampler would take many minutes; "
                         "use fewer bins")
    check_memory(rows * BYTES_PER_ROW, f"a release over the hierarchy's {rows} rows",
                 "use fewer bins")


# ------------------------------------------------------------------ design
def _refine(ks: Sequence[int]) -> tuple[int, ...]:
    """Every branching factor split into its primes (ascending): a refinement of the tree."""
    return optimize.finest_refinement(ks)


def _real_error(mech: Mechanism, branchings: Branchings, shape: tuple[int, ...],
                workload: str) -> float:
    """Exact error of ``workload`` over the REAL cells (the first n_i bins of each padded
    axis): sum_j prod_i q_i(j_i) / lambda_j with q_i the axis's Haar weights restricted to its
    first n_i bins (``error.tree.haar_workload_weights(n_queries=n_i)``)."""
    lam, public = level_tuple_lambdas(mech)
    q = np.ones(lam.shape)
    for i, (ks, n) in enumerate(zip(branchings, shape)):
        dims = [1] * len(shape)
        dims[i] = lam.shape[i]
        q = q * haar_workload_weights(ks, workload, n_queries=n).reshape(dims)
    if public:
        q.flat[0] = 0.0
    if np.any((q > 0) & ~(lam > 0)):
        return math.inf
    return float(np.sum(np.where(q > 0, q / np.where(lam > 0, lam, 1.0), 0.0)))


def _score(branchings: Branchings, shape: tuple[int, ...], noise: str, budget_name: str,
           budget: float, neighbours: str, budgets: str,
           workload: str) -> tuple[float, tuple[float, ...] | None]:
    """(exact error on the real cells' workload, level budgets or None) of one product; the
    optimal budgets are those of the padded grid's workload (``optimal_grid_budgets``)."""
    eps, rho = budget_pair(budget_name, budget)
    strat = strategies.kron(*[strategies.tree(math.prod(ks), list(ks)) for ks in branchings])
    padded = tuple(math.prod(ks) for ks in branchings)
    if budgets == "optimal":
        w = (workloads.all_range(padded) if workload == "all_range"
             else workloads.prefix(padded))
        assert isinstance(w, workloads.KroneckerWorkload)  # a grid: >= 2 axes
        g = optimize.optimal_grid_budgets(strat, w, noise=noise, neighbours=neighbours,
                                          epsilon=eps, rho=rho)
        mech, lb = g.mechanism, tuple(float(b) for b in g.budgets)
    else:
        mech, lb = Mechanism(strat, noise=noise, neighbours=neighbours, epsilon=eps,
                             rho=rho), None
    return _real_error(mech, branchings, shape, workload), lb


def _axis_options(n: int, design: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Per-axis trees to try: the 1-D design, its prime refinement, the finest tree of n
    itself when n is 7-smooth, and the binary tree of the next power of two."""
    opts = [design, _refine(design)]
    primes = _refine((n,))
    if max(primes) <= 7:
        opts.append(tuple(sorted(primes)))
    p2 = 1 << (n - 1).bit_length()
    if p2 <= 2 * n:
        opts.append((2,) * (p2.bit_length() - 1))
    return list(dict.fromkeys(opts))


@functools.lru_cache(maxsize=16)
def _grid_design(bins: tuple[int, ...], given: Branchings | None, noise: str,
                 budget_name: str, budget: float, neighbours: str, budgets: str,
                 workload: str) -> tuple[Branchings, tuple[float, ...] | None, str]:
    """(per-axis branchings, level budgets or None, note); public parameters only (cached).

    ``optimize.best_grid_hierarchy(family="kron")`` over every Kronecker product of per-axis
    trees (padded like the 1-D search) on the real cells' workload: exact for equal budgets;
    for optimal budgets (a pool, local search under Laplace) it competes with the products of
    the per-axis 1-D designs, their prime refinements, the finest trees and the binary trees
    of the next power of two (``_axis_options``), all scored by the same exact real-cell error
    (``_real_error``)."""
    eps, rho = budget_pair(budget_name, budget)
    if given is not None:
        err, lb = _score(given, bins, noise, budget_name, budget, neighbours, budgets,
                         workload)
        return given, lb, f"given per-axis trees, {budgets} budgets (exact {workload} error " \
                          f"over the real cells {err:.6g}, counts^2)"
    search = optimize.best_grid_hierarchy(bins, workload, noise=noise, neighbours=neighbours,
                                          budgets=budgets, family="kron", epsilon=eps,
                                          rho=rho)
    found = [d for d in search.ranked if _tree_rows(d.branching) <= MAX_GRID_ROWS]
    best: tuple[float, Branchings, tuple[float, ...] | None] | None = None
    if found:
        d = found[0]
        mech = d.mechanism()
        best = (_real_error(mech, d.branching, bins, workload), tuple(d.branching),
                tuple(float(b) for b in d.budgets) if budgets == "optimal" else None)
    if budgets == "optimal":
        per_axis = []
        for n in bins:
            one = optimize.level_uniform(n, estimator="blue", noise=noise,
                                         neighbours="add_remove", budgets="optimal",
                                         workload=workload, epsilon=eps, rho=rho)
            per_axis.append(_axis_options(n, tuple(int(k) for k in one.branching)))
        candidates = [tuple(opts[min(i, len(opts) - 1)] for opts in per_axis)
                      for i in range(max(len(o) for o in per_axis))]
        for cand in dict.fromkeys(candidates):
            if _tree_rows(cand) > MAX_GRID_ROWS:
                continue
            err, lb = _score(cand, bins, noise, budget_name, budget, neighbours, budgets,
                             workload)
            if best is None or err < best[0]:
                best = (err, cand, lb)
    if best is None:
        raise ValueError(f"bins={list(bins)!r}: every candidate hierarchy has more than "
                         f"{MAX_GRID_ROWS} rows; use fewer bins")
    note = (f"optimize.best_grid_hierarchy(family='kron', budgets='{budgets}') on the "
            f"{workload} workload of the real cells"
            + (" and the products of per-axis 1-D designs, their prime refinements, the "
               "finest trees and binary trees" if budgets == "optimal" else "")
            + f": the least exact error ({best[0]:.6g}, counts^2)")
    return best[1], best[2], note


def default_grid_error(bins: Sequence[int], *, epsilon: float | None = None,
                       rho: float | None = None, neighbours: str = "add_remove",
                       workload: str = "all_range") -> float:
    """The exact mean squared error per query (counts^2) of ``workload`` ("all_range": every
    box of the real cells, or "prefix": the d-D CDF) of the hierarchy the grid release runs
    without a design (``tree="optimal"``, ``budgets="optimal"``), under continuous noise of
    its scales (as ``Design.mean``): the default to compare a grid design with."""
    shape = tuple(s.bins for s in _check_grid([0] * len(bins), [1] * len(bins), bins))
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon or rho")
    if workload not in GRID_WORKLOADS:
        raise ValueError(f"workload must be one of {GRID_WORKLOADS}, got {workload!r}")
    noise, name = ("laplace", "epsilon") if epsilon is not None else ("gaussian", "rho")
    budget = check_budget(epsilon if epsilon is not None else rho, name)
    neighbours = check_neighbours(neighbours)
    branchings, level_budgets, _ = _grid_design(shape, None, noise, name, budget, neighbours,
                                                "optimal", workload)
    strat = strategies.kron(*[strategies.tree(math.prod(ks), list(ks)) for ks in branchings])
    eps, rho_ = budget_pair(name, budget)
    mech = Mechanism(strat, noise=noise, neighbours=neighbours, epsilon=eps, rho=rho_,
                     level_budgets=None if level_budgets is None else list(level_budgets))
    queries = math.prod(n * (n + 1) // 2 if workload == "all_range" else n for n in shape)
    return _real_error(mech, branchings, shape, workload) / queries


# ------------------------------------------------------------------ plan
@dataclass(frozen=True)
class _GridPlan:
    """Everything about a grid release that does not depend on the data, validated."""

    specs: tuple[BinSpec, ...]
    noise: str
    budget_name: str
    budget: float
    branchings: Branchings
    note: str
    mechanism: Mechanism
    consistency: str | None
    out_of_range: str
    workload: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s.bins for s in self.specs)

    @property
    def padded_shape(self) -> tuple[int, ...]:
        return tuple(math.prod(ks) for ks in self.branchings)


def _check_grid_design(design: object, specs: tuple[BinSpec, ...], tree: object,
                       budgets: str, neighbours: str, workload: str) -> Mechanism:
    """The Mechanism of a grid design for these cells: a Kronecker product of complete trees
    or a quadtree over exactly the real cells, the tree options left at their defaults, the
    same neighbour model (ValueError otherwise)."""
    mech = design_mechanism(design)
    if not (isinstance(tree, str) and tree == "optimal" and budgets == "optimal"
            and workload == "all_range"):
        raise ValueError("tree, budgets and workload choose the hierarchy when no design is "
                         "given; with design= the design decides: leave them out")
    if not isinstance(mech.released, (strategies.KroneckerStrategy,
                                      strategies.QuadtreeStrategy)):
        raise ValueError(f"design: a 1-D design over {mech.n_bins} bins; a grid release "
                         "(bins, lower and upper per axis) needs a grid design (e.g. "
                         "optimize.best_mechanism(workloads.prefix((n1, n2)), ...))")
    if claimed_by(mech, GRID_TREE_ENGINES) is None:
        raise ValueError(f"design: a grid release runs a Kronecker product of complete trees "
                         f"or a quadtree with budgets per level tuple (its box standard "
                         f"errors are theirs); this design measures {mech.released.name}")
    shape = tuple(t.n_bins for t in grid_trees(mech.released))
    if shape != tuple(s.bins for s in specs):
        raise ValueError(f"design: it was made for the grid {list(shape)}, the release has "
                         f"bins = {[s.bins for s in specs]}")
    if neighbours != mech.neighbours:
        raise ValueError(f"neighbours: the design was made for {mech.neighbours!r} "
                         f"neighbours; pass neighbours={mech.neighbours!r}")
    check_private_total(mech)
    return mech


def _grid_plan(lower: object, upper: object, bins: object, epsilon: float | None,
               rho: float | None, tree: object, neighbours: str, out_of_range: str,
               quantiles: object, consistency: str | None, budgets: str,
               interval_level: float, workload: str,
               before_design: Callable[[], None] | None = None,
               design: object = None) -> _GridPlan:
    specs = _check_grid(lower, upper, bins)
    check_neighbours(neighbours)
    source: Mechanism | None = None
    if design is not None:
        source = _check_grid_design(design, specs, tree, budgets, neighbours, workload)
        noise, budget_name, budget = design_budget(source, epsilon, rho)
    else:
        noise, budget_name, budget = budget_choice(epsilon, rho)
    check_out_of_range(out_of_range)
    if consistency not in ("l2", None):
        raise ValueError(f"consistency for a grid must be 'l2' (the nearest non-negative "
                         f"integer cells summing to N) or None, got {consistency!r}")
    qs: tuple[object, ...] | None
    try:
        qs = tuple(quantiles)  # type: ignore[arg-type]  # any input: TypeError handled
    except TypeError:
        qs = None
    if qs not in (tuple(DEFAULT_QUANTILES), ()):
        raise ValueError("quantiles are released for one axis only; a grid release gives "
                         "cells and box counts (drop the quantiles argument)")
    if interval_level != 0.95:
        raise ValueError("interval_level is for the 1-D quantile intervals; a grid release "
                         "gives exact standard errors of box counts")
    if workload not in GRID_WORKLOADS:
        raise ValueError(f"workload must be one of {GRID_WORKLOADS} (what the design "
                         f"minimises: all boxes, or the d-D CDF), got {workload!r}")
    given = _check_grid_tree(tree, specs)
    if given is None and source is None:
        for i, s in enumerate(specs):
            if s.bins > MAX_DESIGN_AXIS_BINS:
                raise ValueError(f"bins: axis {i} has {s.bins} bins; tree='optimal' searches "
                                 f"the trees of axes of up to {MAX_DESIGN_AXIS_BINS} bins. "
                                 "Give one list of branching factors per axis (tree=[[..], "
                                 "[..]], --tree 'k1,k2;k3,k4') or use fewer bins")
    check_budgets(budgets)
    check_tiny_budget(noise, budget_name, budget)
    if given is not None:
        _check_rows(given)
    if source is not None:
        _check_rows(tuple(tuple(t.branching) for t in grid_trees(source.released)))
    if before_design is not None:
        before_design()
    if source is None:
        branchings, level_budgets, note = _grid_design(
            tuple(s.bins for s in specs), given, noise, budget_name, budget, neighbours,
            budgets, workload)
        _check_rows(branchings)
        strat = strategies.kron(*[strategies.tree(math.prod(ks), list(ks))
                                  for ks in branchings])
        eps, rho_ = budget_pair(budget_name, budget)
        mech = Mechanism(strat, noise=noise, neighbours=neighbours,
                         level_budgets=None if level_budgets is None else list(level_budgets),
                         discrete=True, epsilon=eps, rho=rho_)
    else:
        mech = secure_form(source).mechanism
        branchings = tuple(tuple(int(k) for k in t.branching)
                           for t in grid_trees(mech.released))
        family = getattr(design, "family", None)
        note = f"design{f' {family!r}' if family else ''} ({mech.released.name})"
    check_mechanism_noise(mech, budget_name, budget)
    level_tuple_lambdas(mech)          # identifiable (every cell estimable) or ValueError
    plan = _GridPlan(specs=specs, noise=noise, budget_name=budget_name, budget=budget,
                     branchings=tuple(branchings), note=note, mechanism=mech,
                     consistency=consistency, out_of_range=out_of_range, workload=workload)
    _dry_run(plan)
    return plan


def _dry_run(plan: _GridPlan) -> None:
    """Run the post-processing once on all-zero answers (public, data-independent) before
    any noise: whatever in it depends on the hierarchy alone fails here, with nothing
    drawn, rather than after the noise."""
    try:
        _estimate(plan, np.zeros(plan.mechanism.released.n_rows), {})
    except Exception as exc:  # noqa: BLE001 - any failure here is a refusal, not a crash
        raise ValueError(f"the hierarchy {[list(k) for k in plan.branchings]} cannot be "
                         f"estimated ({type(exc).__name__}: {exc}); no noise was drawn. This "
                         "is a bug: please report it") from exc


# ------------------------------------------------------------------ account
def _privacy(plan: _GridPlan) -> dict[str, Any]:
    mech, strat = plan.mechanism, plan.mechanism.released
    counts = np.bincount(strat.levels)
    levels = []
    for lvl in sorted(mech.level_scales):
        scale, var = mech.level_scales[lvl], mech.level_variances[lvl]
        levels.append({"level": lvl, "level_tuple": list(level_tuple_of(strat, lvl)),
                       "nodes": int(counts[lvl]),
                       "budget": mech.level_budgets.get(lvl, 0.0),
                       "sensitivity": mech.level_sensitivities[lvl],
                       "scale": scale if math.isfinite(scale) else None,
                       "variance": var if math.isfinite(var) else None,
                       "released": ("exactly" if scale == 0 else "not measured"
                                    if math.isinf(scale) else "with noise")})
    public = [f"axis {i}: lower = {s.lower!r}, upper = {s.upper!r}, {s.bins} bins and the bin "
              "rule" for i, s in enumerate(plan.specs)]
    public += [f"the hierarchy (per-axis branchings {[list(k) for k in plan.branchings]}), its "
               "budgets, sensitivities and noise scales per level tuple",
               "the sampler and the neighbour model"]
    if plan.padded_shape != plan.shape:
        public.append(f"the padded grid {list(plan.padded_shape)} around the real "
                      f"{list(plan.shape)} cells: the padding cells are empty (public zeros)")
    if mech.public_total:
        public.append("N, the number of records: RELEASED EXACTLY (swap neighbours)")
    meaning = ("add_remove: adding or removing one record (N is protected)"
               if mech.neighbours == "add_remove" else
               "swap: changing one record's values; N is NOT protected and is released exactly")
    return {
        "definition": "pure eps-DP" if plan.noise == "laplace" else "rho-zCDP",
        "noise": plan.noise, "discrete": True,
        "epsilon": plan.budget if plan.budget_name == "epsilon" else None,
        "rho": plan.budget if plan.budget_name == "rho" else None,
        "achieved": mech.epsilon if plan.noise == "laplace" else mech.rho,
        "neighbours": mech.neighbours, "neighbours_meaning": meaning,
        "total_public": mech.public_total, "levels": levels, "public": public,
        "out_of_range": plan.out_of_range,
        "sampler": sampler_description(plan.noise),
        "sampler_short": ("OpenDP discrete Laplace" if plan.noise == "laplace"
                          else "OpenDP discrete Gaussian"),
        "design": plan.note,
        "post_processing": "BLUE (Kronecker Helmert-Haar, exact, with the discrete noise "
                           "variances), consistency projection of the cells, box counts: no "
                           "further privacy cost",
    }


def _description(plan: _GridPlan, privacy: dict[str, Any]) -> str:
    mech = plan.mechanism
    lines = []
    if mech.public_total:
        lines.append("WARNING: swap neighbours -- the number of records N is released EXACTLY "
                     "and is not protected.")
    axes = " x ".join(f"{s.bins} bins over [{s.lower!r}, {s.upper!r})" for s in plan.specs)
    lines += [f"Private {len(plan.specs)}-D histogram of {axes} ({privacy['definition']}, "
              f"{privacy['neighbours_meaning']}).",
              f"{mech.released.name}: {mech.released.n_rows} rows over {mech.n_bins} cells, "
              f"discrete {plan.noise} noise; {len(privacy['levels'])} level tuples, each with "
              "its own budget (privacy['levels'])",
              f"sampler: {privacy['sampler']}",
              f"hierarchy: {privacy['design']}"]
    lines.append("public: " + "; ".join(privacy["public"]))
    lines.append(f"out-of-range values: {privacy['out_of_range']} (how many were clipped is "
                 "not released)")
    return "\n".join(lines)


def _expected_error(plan: _GridPlan) -> dict[str, Any]:
    """Exact, data-independent errors of the raw BLUE over the real cells: the d-D CDF
    (boxes [0, a), mean and max), all boxes (mean), one cell, the total N."""
    mech, shape = plan.mechanism, plan.shape
    trees = grid_trees(mech.released)
    lam, public = level_tuple_lambdas(mech)
    inv = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), 0.0)
    if public:
        inv.flat[0] = 0.0
    grid = inv
    for i, (t, n) in enumerate(zip(trees, shape)):      # CDF variances on the real grid
        p = axis_interval_weights(t, np.zeros(n), np.arange(1, n + 1))
        grid = np.moveaxis(np.tensordot(p, grid, axes=([1], [i])), 0, i)
    q = inv
    for ks, n in zip(plan.branchings, shape):
        w = haar_workload_weights(ks, "all_range", n_queries=n)
        q = np.tensordot(w, q, axes=([0], [0]))       # contract axis i (now the first)
    n_boxes = math.prod(n * (n + 1) // 2 for n in shape)
    d = len(shape)
    cell = float(kron_box_variances(mech, np.zeros(d), np.ones(d)))
    total = float(kron_box_variances(mech, np.zeros(d), np.asarray(shape, dtype=float)))
    return {"mean_cdf_mse": float(grid.mean()), "max_cdf_mse": float(grid.max()),
            "mean_box_mse": float(q) / n_boxes, "cell_mse": cell, "total_mse": total,
            "unit": "counts^2: E (estimate - truth)^2 of the raw BLUE answers over the real "
                    "cells, under the discrete noise actually drawn (exact): the d-D CDF "
                    "(boxes [lower, a) for every cell corner a), all boxes, one cell, N"}


# ------------------------------------------------------------------ the release
def _total_estimate(plan: _GridPlan, y: npt.NDArray[np.float64],
                    raw_padded: npt.NDArray[np.float64]) -> tuple[int, bool]:
    """(N, public): exact under swap (the grand total's exact row); else the rounded BLUE of
    N over the real cells or over the whole padded grid, whichever has the smaller SE."""
    mech = plan.mechanism
    if mech.public_total:
        return int(np.rint(y[np.flatnonzero(mech.exact_rows)[0]])), True
    d = len(plan.shape)
    real = np.asarray(plan.shape, dtype=float)
    full = np.asarray(plan.padded_shape, dtype=float)
    v_real, v_full = np.asarray(kron_box_variances(mech, np.zeros((2, d)),
                                                   np.stack([real, full])), dtype=float)
    grid = raw_padded.reshape(plan.padded_shape)
    block = grid[tuple(slice(0, n) for n in plan.shape)]
    value = float(block.sum()) if v_real <= v_full else float(grid.sum())
    return max(0, int(np.rint(value))), False


# (raw cells, consistent cells or None, N, whether N is public, notes)
_Estimate = tuple[npt.NDArray[np.float64], npt.NDArray[np.int64] | npt.NDArray[np.float64] | None,
                  int, bool, list[str]]


def _estimate(plan: _GridPlan, y: npt.NDArray[np.float64], timings: dict[str, float]) -> _Estimate:
    """Post-processing of the noisy answers y (rows,): (raw BLUE cells, consistent cells or
    None, N, whether N is public, notes); the real cells only, shape ``plan.shape``."""
    t2 = time.perf_counter()
    raw_padded = blue(plan.mechanism, y)      # the registry: Kronecker trees or quadtree
    raw = raw_padded.reshape(plan.padded_shape)[tuple(slice(0, n) for n in plan.shape)]
    total, public = _total_estimate(plan, y, raw_padded)
    notes: list[str] = []
    t3 = time.perf_counter()
    consistent: npt.NDArray[np.int64] | npt.NDArray[np.float64] | None
    if plan.consistency is None:
        consistent = None
    elif total == 0:
        consistent = np.zeros(plan.shape, dtype=np.int64)
        notes.append("N = 0 (released exactly): the consistent cells are all zero" if public
                     else "the estimated total N_hat rounds to <= 0: the consistent cells are "
                          "all zero")
    else:
        consistent = project_histogram(raw.ravel(), total=total, metric="l2",
                                       integer=True).reshape(plan.shape)
    timings.update(estimation=t3 - t2, consistency=time.perf_counter() - t3)
    return raw, consistent, total, public, notes


def _release_cells(hist: npt.NDArray[np.int64], plan: _GridPlan, timings: dict[str, float],
                   names: Sequence[str]) -> GridRelease:
    """Measure the validated cell counts with secure noise, then post-process (never raises
    after the noise is drawn)."""
    t0 = time.perf_counter()
    check_histogram_total(hist.ravel(), plan.mechanism)
    full = np.zeros(plan.padded_shape, dtype=np.int64)
    full[tuple(slice(0, n) for n in plan.shape)] = hist     # padding cells: public zeros
    privacy = _privacy(plan)
    description = _description(plan, privacy)
    expected = _expected_error(plan)
    t1 = time.perf_counter()
    y = secure_measure(plan.mechanism, full.ravel())  # OpenDP's exact samplers; no rng
    y.flags.writeable = False
    timings.update(prepare=t1 - t0, noise=time.perf_counter() - t1)
    # ---- the privacy budget is spent: from here on nothing may raise
    try:
        raw, consistent, total, public, notes = _estimate(plan, y, timings)
        return GridRelease(specs=plan.specs, names=tuple(names), raw=frozen_copy(raw),
                           consistent=None if consistent is None else frozen_copy(consistent),
                           consistency=plan.consistency, total=total, total_public=public,
                           mechanism=plan.mechanism, branchings=plan.branchings,
                           measurements=y, privacy=privacy, description=description,
                           timings=timings, expected_error=expected, notes=tuple(notes))
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - never lose the DP output
        nan = np.full(plan.shape, np.nan)
        return GridRelease(specs=plan.specs, names=tuple(names), raw=frozen_copy(nan),
                           consistent=None, consistency=plan.consistency, total=None,
                           total_public=plan.mechanism.public_total, mechanism=plan.mechanism,
                           branchings=plan.branchings, measurements=y, privacy=privacy,
                           description=description, timings=timings, expected_error=expected,
                           notes=(incomplete_note(exc),), complete=False)


def _check_grid_counts(counts: npt.ArrayLike,
                       shape: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """Validated precomputed cell counts: non-negative integers of shape ``shape``."""
    try:
        arr = np.asarray(counts)
    except (TypeError, ValueError):
        raise ValueError(f"counts must be an integer array of shape {shape}") from None
    if arr.shape != tuple(shape):
        raise ValueError(f"counts must have shape {tuple(shape)} (one count per cell), got "
                         f"{arr.shape}")
    try:
        return check_histogram(arr.ravel(), math.prod(shape)).reshape(shape)
    except ValueError as exc:
        raise ValueError(f"counts: {exc} (need non-negative integer counts, one per cell)"
                         ) from None


def release_grid(data: object = None, *, lower: Sequence[float], upper: Sequence[float],
                 bins: Sequence[int], epsilon: float | None = None,
                 rho: float | None = None, counts: npt.ArrayLike | None = None,
                 tree: str | Sequence[Sequence[int]] = "optimal",
                 neighbours: str = "add_remove", out_of_range: str = "error",
                 quantiles: npt.ArrayLike = (), consistency: str | None = "l2",
                 budgets: str = "optimal", interval_level: float = 0.95,
                 workload: str = "all_range", names: str | Sequence[str] | None = None,
                 design: object = None, column: str | None = None,
                 columns: Sequence[str] | None = None) -> GridRelease:
    """A differentially private d-D histogram of records (N, d), or of ``counts`` (shape
    ``bins``), with box counts and exact standard errors (module docstring). ``lower``,
    ``upper``, ``bins``: one entry per axis; ``tree``: "optimal" or one branching list per
    axis; ``workload``: what the design minimises ("all_range": every box, or "prefix": the
    d-D CDF); ``names``: axis names for the output; ``design``: a grid design to release
    instead of the search (module docstring; ``tree``, ``budgets`` and ``workload`` left out,
    the budget optional). ``quantiles`` and ``interval_level`` are 1-D options (refused
    unless left at their defaults). ``data`` may be an engine's table (``sources``;
    ``columns``: one column per axis, also the default axis names), counted where it lives
    before the design. Every argument and the data are validated BEFORE the noise
    (ValueError); after it nothing raises."""
    timings: dict[str, float] = {}
    checked: npt.NDArray[np.int64] | None = None
    axis_names: tuple[str, ...] = ()
    if (data is None) == (counts is None):
        raise ValueError("give exactly one of data (records of shape (N, d)) or counts (the "
                         "cell counts)")
    engine = is_engine_input(data, column, columns)

    def inputs_ready() -> None:  # bins is a validated sequence here; before the design
        nonlocal axis_names, checked
        picked = pick(column, columns, len(bins)) if engine else None
        axis_names = _check_names(picked if names is None and picked is not None else names,
                             len(bins))
        if counts is not None:
            checked = _check_grid_counts(counts, tuple(int(k) for k in bins))
        elif engine:  # counted where it lives
            t0 = time.perf_counter()
            checked = engine_counts(data, _check_grid(lower, upper, bins), column=column,
                                    columns=columns, out_of_range=out_of_range)
            timings["read_and_bin"] = time.perf_counter() - t0

    plan = _grid_plan(lower, upper, bins, epsilon, rho, tree, neighbours, out_of_range,
                      quantiles, consistency, budgets, interval_level, workload,
                      before_design=inputs_ready, design=design)
    t0 = time.perf_counter()
    hist = checked if checked is not None else grid_histogram_from_values(
        data, plan.specs, out_of_range=out_of_range)[0]  # counts: checked by inputs_ready
    timings.setdefault("read_and_bin", time.perf_counter() - t0)
    return _release_cells(hist, plan, timings, axis_names)


def _check_names(names: object, d: int) -> tuple[str, ...]:
    if names is None:
        return tuple(f"x{i}" for i in range(d))
    try:
        got = ((names,) if isinstance(names, str)
               else tuple(names))  # type: ignore[arg-type]  # any input: refused below
    except TypeError:
        raise ValueError(f"names: need {d} axis names (str), got {names!r}") from None
    if len(got) != d or not all(isinstance(n, str) for n in got):
        raise ValueError(f"names: need {d} axis names (str), got {got!r}")
    return tuple(str(n) for n in got)


def release_grid_file(path: str | os.PathLike[str], *, columns: Sequence[str],
                      lower: Sequence[float], upper: Sequence[float], bins: Sequence[int],
                      epsilon: float | None = None, rho: float | None = None,
                      tree: str | Sequence[Sequence[int]] = "optimal",
                      neighbours: str = "add_remove", out_of_range: str = "error",
                      quantiles: npt.ArrayLike = (), consistency: str | None = "l2",
                      budgets: str = "optimal", interval_level: float = 0.95,
                      workload: str = "all_range", delimiter: str | None = None,
                      chunk_bytes: int | None = None, design: object = None) -> GridRelease:
    """:func:`release_grid` of d columns of a CSV/TSV/Parquet file, read together in bounded
    memory (``io.read_columns``); the columns name the axes. ``path``: str or os.PathLike (a
    bytes path or an open file object is a ValueError); the number of columns, the file and
    its header are checked before the hierarchy design."""
    timings: dict[str, float] = {}
    columns = check_column_names(columns)
    if chunk_bytes is not None:
        chunk_bytes = check_chunk_bytes(chunk_bytes)
    kw: dict[str, Any] = {} if chunk_bytes is None else {"chunk_bytes": int(chunk_bytes)}
    if delimiter is not None:
        kw["delimiter"] = delimiter

    def inputs_ready() -> None:  # bins is a validated sequence here; before the (slow) design
        d = len(bins)
        if len(columns) != d:
            raise ValueError(f"columns: {d} axes need {d} columns, got {list(columns)!r}")
        check_columns(path, columns, **kw)

    plan = _grid_plan(lower, upper, bins, epsilon, rho, tree, neighbours, out_of_range,
                      quantiles, consistency, budgets, interval_level, workload,
                      before_design=inputs_ready, design=design)
    t0 = time.perf_counter()
    hist, _ = grid_histogram_from_file(path, columns, plan.specs, out_of_range=out_of_range,
                                       **kw)
    timings["read_and_bin"] = time.perf_counter() - t0
    return _release_cells(hist, plan, timings, columns)
