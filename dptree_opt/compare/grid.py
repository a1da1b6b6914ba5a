"""Side-by-side exact errors of grid mechanisms (``dptree-opt compare --bins 256x256``;
docs/math.md section 8).

:func:`compare_grid` builds one row per mechanism for a grid of shape (n_1, .., n_d) (cells
in row-major order), one total budget, a noise and a neighbour model, and computes the exact
mean and max per-query expected squared error (counts^2) of the BLUE on

* ``cdf``: the d-D CDF, every dominance box [0, a_1] x .. x [0, a_d] (``workloads.prefix``);
* ``all_range``: every axis-aligned box (``workloads.all_range``);
* ``identity``: every cell.

Rows (:data:`GRID_ROWS`, the protocol of :mod:`dptree_opt.compare.protocol`):

* ``flat``: every cell once (``strategies.histogram(shape)``; one noise scale);
* ``kron_trees_equal`` / ``kron_trees_optimal``: the Kronecker product of the finest per-axis
  trees (binary for powers of 2, else the prime factors ascending), equal budgets per level
  tuple / budgets from ``optimize.optimal_grid_budgets`` for each workload;
* ``quadtree_equal`` / ``quadtree_optimal``: every node splits every axis
  (``strategies.quadtree``; per-axis prime factors, padded with 1 at the top on a non-square
  grid);
* the front door's grid families per workload column (``optimize.best_mechanism``):
  ``best_hierarchy`` (the best Kronecker tree or quadtree with optimal budgets, unpadded),
  ``kron_p_identity`` (HDMM's Kronecker p-Identity, optimised for Laplace noise; shown under
  Gaussian noise too), ``kron_gaussian_optimum`` (Gaussian only: the product of the 1-D
  Gaussian optima, the best Kronecker strategy with one noise scale and for add/remove the
  optimum of all strategies), and "best for the CDF / all boxes / the cells", each column's
  winner with its family in the label;
* ektelo's data-independent 2-D plans, emulated (``dptree_opt.anchors``): ``ektelo_hb2d``
  (``HB`` on a 2-D domain: b x b splits with b from Qardaji-Yang-Li's 1-D rule on the number
  of cells, root not measured, one noise scale), ``ektelo_quadtree`` (the ``QuadTree`` plan as
  coded: a quadtree over a permuted column order; the Cormode-style quadtree it is meant to be
  is ``quadtree_equal``), ``ektelo_uniform_grid`` (``UGrid``, Qardaji-Yang-Li ICDE 2013: its
  exact noise variance only, the data-dependent bias of spreading counts inside its cells is
  NOT included; needs N (``records``); Laplace only).

Every row gets its ratio to the SVD lower bound (:mod:`dptree_opt.compare.bounds`). Errors are
exact and never build a grid-sized matrix: totals and maxima from the engine registry (the
structured maxima of Kronecker trees / quadtrees and single-scale Kronecker products), the
permuted ektelo quadtree by ``engines.kronecker.grid_tree_summary`` with its column order,
the uniform grid by its closed form.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence, TypeVar

import numpy as np
import numpy.typing as npt

from .. import anchors, optimize, strategies
from ..engines.base import TooManyQueries
from ..engines.kronecker import MAX_TREE_MAX_QUERIES, grid_tree_summary
from ..limits import COMPARE_BYTES_PER_CELL, MAX_COMPARE_CELLS, check_count, check_memory, rescaled
from ..mechanism import Mechanism
from ..privacy import check_neighbours, infer_noise, resolve_budget, resolve_public
from ..strategies import KroneckerStrategy, LevelUniformTree, QuadtreeStrategy
from ..workloads import KroneckerWorkload
from .bounds import MAX_GRID_AXIS, bound_note, lower_bounds
from .protocol import (BudgetSetting, Candidate, CompareRow, NotAvailable, RowCache,
                       RowRegistry, WorkloadError, format_number, register_front_door_rows,
                       row_dict,
                       run_rows, sort_key)

__all__ = ["GRID_WORKLOADS", "GRID_ROWS", "GridSetting", "GridComparison", "compare_grid",
           "parse_shape", "check_cells", "format_table", "GRID_FRONT_DOOR_FAMILIES",
           "MAX_GRID_AXIS", "MAX_P_IDENTITY_AXIS"]

GRID_WORKLOADS = ("cdf", "all_range", "identity")
MAX_P_IDENTITY_AXIS = 512      # 1-D p-Identity optimisation: ~1 s at 256, ~45 s at 1024
# the families of optimize.best_mechanism that apply to grid workloads
GRID_FRONT_DOOR_FAMILIES = ("histogram", "workload", "grid_kron_trees", "grid_quadtree",
                            "kron_p_identity", "kron_gaussian_optimum")
_COLUMN = {"cdf": "the CDF", "all_range": "all boxes", "identity": "the cells"}


# ------------------------------------------------------------------ setting
def parse_shape(text: str | Iterable[int]) -> tuple[int, ...]:
    """(n_1, .., n_d) from "256x256", "64X32", "8x8x8" or a sequence; every n_i >= 2."""
    if isinstance(text, str):
        parts = text.lower().replace("*", "x").split("x")
        try:
            dims = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"grid shape must look like 256x256 or 8x8x8, got {text!r}") \
                from None
    else:
        dims = tuple(int(p) for p in text)
    if len(dims) < 2 or any(n < 2 for n in dims):
        raise ValueError(f"a grid needs >= 2 axes of >= 2 cells each, got {text!r}")
    return dims


@dataclass(frozen=True)
class GridSetting(BudgetSetting):
    """The comparison's setting: grid ``shape``, total ``budget`` (eps for Laplace, rho for
    Gaussian), ``noise``, ``neighbours``, ``public_total``, ``workloads``, ``records`` (N,
    for the uniform grid's grid-size rule; None if unknown) and the front door's
    ``time_limit`` per workload column (seconds)."""

    shape: tuple[int, ...]
    budget: float
    noise: str = "laplace"
    neighbours: str = "add_remove"
    public_total: bool | None = None
    workloads: tuple[str, ...] = ("cdf", "all_range")
    records: int | None = None
    time_limit: float = 60.0

    @property
    def domain(self) -> tuple[int, ...]:
        """The grid shape."""
        return self.shape

    def workload(self, name: str,
                 domain: int | tuple[int, ...] | None = None) -> KroneckerWorkload:
        """The Kronecker workload ``name`` ("cdf", "identity", "all_range") over the grid
        (or ``domain``)."""
        w = super().workload(name, domain)
        if not isinstance(w, KroneckerWorkload):
            raise ValueError(f"a grid workload needs >= 2 axes, got {domain!r}")
        return w

    @property
    def cells(self) -> int:
        """n_1 n_2 .. n_d."""
        return math.prod(self.shape)


_NAMES = {"cdf": "CDF", "all_range": "boxes", "identity": "cells"}


@dataclass(frozen=True)
class GridComparison:
    """The result of :func:`compare_grid`: the setting, the rows (``CompareRow``, sorted by
    the mean error on the first workload, unavailable rows last), the lower bounds (mean
    per query per workload), ``seconds`` per phase and notes."""

    setting: GridSetting
    workloads: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    bounds: dict[str, float | None]
    seconds: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        s = self.setting
        return {"shape": list(s.shape), "cells": s.cells, "noise": s.noise,
                "neighbours": s.neighbours, "public_total": s.public, **s.budget_kwargs,
                "records": s.records, "workloads": list(self.workloads),
                "units": "expected squared error per query, counts^2",
                "bounds_mean_per_query": self.bounds, "notes": list(self.notes),
                "seconds": dict(self.seconds), "rows": [row_dict(r) for r in self.rows]}


GRID_ROWS = RowRegistry()


# ------------------------------------------------------------------ tree shapes
def _finest_trees(shape: tuple[int, ...]) -> list[LevelUniformTree]:
    return [strategies.tree(n, list(optimize.finest_refinement((n,)))) for n in shape]


def _quadtree_branching(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Per-axis prime factors (ascending), padded with 1 at the top to one height."""
    fs = [optimize.finest_refinement((n,)) for n in shape]
    h = max(len(f) for f in fs)
    return [(1,) * (h - len(f)) + tuple(f) for f in fs]


def _tree_label(shape: tuple[int, ...]) -> str:
    fs = [optimize.finest_refinement((n,)) for n in shape]
    if all(set(f) == {2} for f in fs):
        return "binary x " * (len(shape) - 1) + "binary"
    return " x ".join("tree " + ",".join(map(str, f)) for f in fs)


_T = TypeVar("_T")


def _cached(cache: RowCache, key: str, make: Callable[[], _T]) -> _T:
    if key not in cache:
        cache[key] = make()
    got: _T = cache[key]
    return got


def _candidate(s: GridSetting, mech: Mechanism, strategy: str, note: str = "") -> Candidate:
    return Candidate(mech, "blue", strategy, s.cells, note, shape=s.shape)


# ------------------------------------------------------------------ rows
@GRID_ROWS.register("flat", "flat grid", "every cell measured once (strategies.histogram("
                    "shape)), BLUE (with N public: the constrained GLS)")
def _flat(s: GridSetting, cache: RowCache) -> Candidate:
    return _candidate(s, s.mechanism(strategies.histogram(s.shape)),
                      "histogram " + "x".join(map(str, s.shape)))


def _kron_trees(s: GridSetting, cache: RowCache) -> KroneckerStrategy:
    return _cached(cache, "kron_trees", lambda: strategies.kron(*_finest_trees(s.shape)))


def _quadtree(s: GridSetting, cache: RowCache) -> QuadtreeStrategy:
    return _cached(cache, "quadtree",
                   lambda: strategies.quadtree(s.shape, _quadtree_branching(s.shape)))


def _optimal_budgets(s: GridSetting, strat: KroneckerStrategy | QuadtreeStrategy,
                     label: str) -> Candidate:
    """``strat`` with budgets per level (tuple) from optimize.optimal_grid_budgets, per
    workload column."""
    if s.neighbours == "add_remove" and s.public:
        raise NotAvailable("optimal_grid_budgets has no public-total option under add/remove")
    per: dict[str, Candidate | str] = {}
    cands: list[Candidate] = []
    for wl in s.workloads:
        res = optimize.optimal_grid_budgets(strat, s.workload(wl), noise=s.noise,
                                            neighbours=s.neighbours, **s.budget_kwargs)
        cand = _candidate(s, res.mechanism, label, f"{wl}: {res.evaluations} evaluations")
        per[wl] = cand
        cands.append(cand)
    first = cands[0]
    return replace(first, note="budgets optimised per workload (" + "; ".join(
        c.note for c in cands) + ")", per_workload=per)


@GRID_ROWS.register("kron_trees_equal", "Kronecker trees, equal budgets",
                    "product of the finest per-axis trees (binary for 2^k), the total split "
                    "equally over the noisy level tuples (one noise scale), BLUE")
def _kron_equal(s: GridSetting, cache: RowCache) -> Candidate:
    return _candidate(s, s.mechanism(_kron_trees(s, cache)), _tree_label(s.shape))


@GRID_ROWS.register("kron_trees_optimal", "Kronecker trees, optimal budgets",
                    "the same product of the finest trees with budgets per level tuple from "
                    "optimize.optimal_grid_budgets for each workload, started from the equal "
                    "split (Laplace: a local optimum)")
def _kron_optimal(s: GridSetting, cache: RowCache) -> Candidate:
    return _optimal_budgets(s, _kron_trees(s, cache), _tree_label(s.shape))


@GRID_ROWS.register("quadtree_equal", "quadtree, equal budgets",
                    "every node splits every axis (strategies.quadtree), all levels with one "
                    "noise scale (Cormode et al. ICDE 2012's quadtree with uniform budgets, as "
                    "ektelo intends), BLUE")
def _quad_equal(s: GridSetting, cache: RowCache) -> Candidate:
    strat = _quadtree(s, cache)
    return _candidate(s, s.mechanism(strat), f"quadtree h={strat.tree.height}")


@GRID_ROWS.register("quadtree_optimal", "quadtree, optimal budgets",
                    "the quadtree with budgets per level from optimize.optimal_grid_budgets "
                    "per workload")
def _quad_optimal(s: GridSetting, cache: RowCache) -> Candidate:
    strat = _quadtree(s, cache)
    return _optimal_budgets(s, strat, f"quadtree h={strat.tree.height}")


def _front_door_families(s: GridSetting) -> tuple[tuple[str, ...], dict[str, str]]:
    """(the grid families asked of the front door, {family: why not asked}): HDMM's
    p-Identity only up to MAX_P_IDENTITY_AXIS cells per axis (dense, cubic per axis)."""
    if max(s.shape) > MAX_P_IDENTITY_AXIS:
        return (tuple(f for f in GRID_FRONT_DOOR_FAMILIES if f != "kron_p_identity"),
                {"kron_p_identity": f"the p-Identity optimisation is dense (p = n / 16 rows): "
                                    f"axes above {MAX_P_IDENTITY_AXIS} cells not run"})
    return GRID_FRONT_DOOR_FAMILIES, {}


_FAMILY_ROWS = (
    ("best_hierarchy", "best grid hierarchy, optimal budgets",
     "front door families grid_kron_trees / grid_quadtree per workload: optimize."
     "best_grid_hierarchy(budgets='optimal', unpadded), the best Kronecker tree or quadtree "
     "(Gaussian: certified; Laplace: a local search from several starts)",
     ("grid_kron_trees", "grid_quadtree")),
    ("kron_p_identity", "HDMM Kronecker p-Identity",
     "front door family kron_p_identity per workload: McKenna et al. VLDB 2018 OPT_kron, "
     "per-axis p-Identity (p = n_i // 16) optimised for Laplace noise (strategies."
     "kron_p_identity), one noise scale, BLUE", ("kron_p_identity",)),
    ("kron_gaussian_optimum", "Kronecker Gaussian optimum",
     "front door family kron_gaussian_optimum per workload: the product of the 1-D Gaussian "
     "optima (strategies.kron_gaussian_optimal), the best Kronecker strategy with one noise "
     "scale; Gaussian noise only", ("kron_gaussian_optimum",)),
)
register_front_door_rows(GRID_ROWS, _FAMILY_ROWS, _front_door_families, GRID_WORKLOADS,
                         _COLUMN, "grid ")


# ------------------------------------------------------------------ ektelo's plans
@GRID_ROWS.register("ektelo_hb2d", "ektelo HB2D",
                    "ektelo HB plan on a 2-D domain (Hb2D): b from Qardaji-Yang-Li's 1-D rule "
                    "on n1*n2 cells, b x b splits to single cells, root not measured, one "
                    "Laplace scale; BLUE (= ektelo's least squares with equal noise)")
def _hb2d(s: GridSetting, cache: RowCache) -> Candidate:
    if len(s.shape) != 2:
        raise NotAvailable("ektelo's HB is 1-D or 2-D")
    ks = anchors.ektelo_hb2d_branchings(s.shape)
    b = anchors.ektelo_hb_branching(s.cells)
    if ks is None:
        raise NotAvailable(f"ektelo splits {s.shape} unevenly (b = {b}): not emulated")
    strat = strategies.quadtree(s.shape, [list(k) for k in ks])
    levels = strat.tree.height
    # the root is not measured: budget 0 when it is a noisy level (N private)
    budgets = None if s.public else [0.0] + [s.budget / levels] * levels
    return _candidate(s, s.mechanism(strat, budgets), f"b={b}: " + " / ".join(
        "x".join(str(k[lv]) for k in ks) for lv in range(len(ks[0]))))


def _permuted_tree_error(s: GridSetting, mech: Mechanism,
                         orders: Sequence[npt.NDArray[np.intp] | None],
                         wl: str) -> WorkloadError:
    """Mean and max of the BLUE of a Kronecker tree / quadtree whose axes hold the cells in
    ``orders`` (``engines.kronecker.grid_tree_summary``), on the normalised mechanism,
    rescaled exactly."""
    w = s.workload(wl)
    twin, c = mech.normalised()
    want = max(f.n_queries for f in w.factors) <= MAX_TREE_MAX_QUERIES
    note = ""
    try:
        total, mx = grid_tree_summary(twin, w, orders=orders, want_max=want)
    except TooManyQueries as exc:
        total, mx = grid_tree_summary(twin, w, orders=orders, want_max=False)[0], None
        note = f"max n/a ({exc})"
    if mx is None and not note:
        note = "max n/a (too many queries)"

    def scale(x: float | None) -> float | None:
        if x is None or c == 1.0:
            return x
        return rescaled(x, c, mech.noise, mech.requested_budget)
    return WorkloadError(scale(total / w.n_queries), scale(mx), note)


@GRID_ROWS.register("ektelo_quadtree", "ektelo QuadTree plan (as coded)",
                    "ektelo QuadTree plan: selection.QuadTree on the flattened domain reshaped "
                    "to (N/2, 2) (nodes = row bands x column-parity classes, not squares), all "
                    "levels incl. the root, one Laplace scale; BLUE")
def _ektelo_qt(s: GridSetting, cache: RowCache) -> Candidate:
    if len(s.shape) != 2 or any(n & (n - 1) for n in s.shape):
        raise NotAvailable("emulated on 2-D grids with power-of-2 sides")
    strat, order = anchors.ektelo_quadtree_plan(s.shape)
    mech = s.mechanism(strat)
    return Candidate(mech, "blue", f"(N/2)x2 quadtree, {strat.tree.height + 1} levels",
                     s.cells, "the quadtree of Cormode et al. it is meant to be is the "
                     "'quadtree, equal budgets' row", shape=s.shape,
                     exact=lambda wl: _permuted_tree_error(s, mech, [None, order], wl))


@GRID_ROWS.register("ektelo_uniform_grid", "ektelo UniformGrid (noise only)",
                    "ektelo UGrid (Qardaji-Yang-Li ICDE 2013): cells of side ~ sqrt(n1 n2 c / "
                    "(N eps)), c = 10, measured once, spread uniformly; NOISE VARIANCE ONLY: "
                    "the data-dependent uniformity bias is omitted")
def _ugrid(s: GridSetting, cache: RowCache) -> Candidate:
    if len(s.shape) != 2:
        raise NotAvailable("ektelo's UniformGrid is 2-D")
    if s.noise != "laplace":
        raise NotAvailable("UniformGrid's grid-size rule is stated for eps-DP (Laplace)")
    if s.records is None:
        raise NotAvailable("needs the number of records N (--n) for its grid-size rule")
    g = anchors.uniform_grid_side(s.shape, s.records, s.budget)

    def exact(wl: str) -> WorkloadError:
        w = s.workload(wl)
        total, mx = anchors.uniform_grid_noise(s.shape, g, w, epsilon=s.budget,
                                               neighbours=s.neighbours,
                                               public_total=s.public_total)
        return WorkloadError(total / w.n_queries, mx, "noise variance only; bias omitted")
    ms = "x".join(str(-(-n // g)) for n in s.shape)
    return Candidate(None, "spread", f"{ms} cells of side {g}", s.cells,
                     f"N = {s.records}; bias omitted (needs data)", shape=s.shape,
                     exact=exact)


# ------------------------------------------------------------------ the comparison
def check_cells(dims: Sequence[int], what: str | None = None) -> None:
    """ValueError when a grid comparison over ``dims`` would exceed MAX_COMPARE_CELLS cells
    or the memory available (about COMPARE_BYTES_PER_CELL per cell); ``what`` names the
    grid in the message (default "the grid AxB")."""
    cells = math.prod(dims)
    what = (what or "the grid " + "x".join(map(str, dims))) + f" ({cells} cells)"
    hint = "compare a coarser grid, or run dptree-opt optimize --bins AxB"
    check_count(cells, MAX_COMPARE_CELLS, what, hint)
    check_memory(cells * COMPARE_BYTES_PER_CELL, f"comparing {what}", hint)


def compare_grid(shape: str | Iterable[int], epsilon: float | None = None, *,
                 rho: float | None = None, noise: str | None = None,
                 neighbours: str = "add_remove", public_total: bool | None = None,
                 workloads: Iterable[str] = ("cdf", "all_range"),
                 records: int | None = None, rows: Iterable[str] | None = None,
                 time_limit: float = 60.0) -> GridComparison:
    """Exact mean and max per-query error of every grid row (or the keys in ``rows``) for a
    grid ``shape`` ("256x256" or (n_1, .., n_d)), one budget, noise and neighbour model, on
    ``workloads`` (a subset of GRID_WORKLOADS), with ratios to the SVD bound (module
    docstring). ``records``: the number of records N (only the uniform grid's grid-size
    rule uses it). ``time_limit``: seconds given to the front door per workload column.
    Rows sorted by the mean error on the first workload; ``seconds`` holds the time of the
    bounds and of each row."""
    dims = parse_shape(shape)
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    neighbours = check_neighbours(neighbours)
    resolve_public(neighbours, public_total)
    which = tuple(workloads)
    if not which:
        raise ValueError("workloads: give at least one workload")
    for wl in which:
        if wl not in GRID_WORKLOADS:
            raise ValueError(f"unknown grid workload {wl!r}; choose from "
                             f"{', '.join(GRID_WORKLOADS)}")
    if max(dims) > MAX_GRID_AXIS:
        raise ValueError(f"grid axes above {MAX_GRID_AXIS} cells are refused")
    check_cells(dims)
    if records is not None and (isinstance(records, bool) or int(records) != records
                                or records < 1):
        raise ValueError(f"records (N) must be a positive integer, got {records!r}")
    if (isinstance(time_limit, bool) or not isinstance(time_limit, (int, float))
            or not math.isfinite(time_limit) or time_limit <= 0):
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got "
                         f"{time_limit!r}")
    setting = GridSetting(dims, budget, noise, neighbours, public_total, which,
                          None if records is None else int(records), float(time_limit))
    keys = GRID_ROWS.check_keys(rows)
    if rows is None:
        keys = [k for k in keys if not k.startswith("best_") or k == "best_hierarchy"
                or k[5:] in which]
    t0 = time.perf_counter()
    bnds, missing = lower_bounds(setting)
    seconds = {"bounds": time.perf_counter() - t0}
    notes = [bound_note(setting, missing)]
    cache: RowCache = {"families": GRID_ROWS.families(keys, _front_door_families(setting)[0])}
    out = run_rows(GRID_ROWS, keys, setting, bnds, cache, seconds)
    out.sort(key=lambda r: sort_key(r, which))
    if setting.records is None and noise == "laplace" and "ektelo_uniform_grid" in keys \
            and len(dims) == 2:
        notes.append("UniformGrid needs N: pass --n N (records) to include it")
    seconds["total"] = time.perf_counter() - t0
    return GridComparison(setting, which, tuple(out), bnds, seconds, tuple(notes))


# ------------------------------------------------------------------ output
def format_table(res: GridComparison) -> str:
    """The comparison as a text table (mean and max per query, ratio to the SVD bound, time
    per row), then each row's definition and the notes."""
    s = res.setting
    unit = "eps" if s.noise == "laplace" else "rho"
    total = ("N public (invariant under swap)" if s.neighbours == "swap" else
             "N public (declared; N not protected)" if s.public else "N private (noised)")
    shape = "x".join(map(str, s.shape))
    lines = [f"{shape} grid ({s.cells} cells), {s.noise} noise, {unit} = "
             f"{s.budget:g}, {s.neighbours} neighbours, {total}",
             "exact expected squared error per query (counts^2) of the BLUE: mean and max over "
             "the workload's queries (CDF: dominance boxes; boxes: all axis-aligned boxes); "
             "rows sorted by the first workload, rows with the noise variance only last"]
    head = f"{'#':>2} {'mechanism':<38} {'strategy':<30}"
    for wl in res.workloads:
        head += f" {_NAMES[wl] + ' mean':>12} {'max':>10} {'/bound':>7}"
    head += f" {'s':>5}"
    lines += [head, "-" * len(head)]
    for i, r in enumerate(res.rows, start=1):
        if not r.available:
            continue
        line = f"{i:>2} {r.label[:38]:<38} {r.strategy[:30]:<30}"
        for wl in res.workloads:
            e = r.errors[wl]
            ratio = r.ratio_to_bound.get(wl)
            line += (f" {format_number(e.mean):>12} {format_number(e.max):>10}"
                     + (f" {ratio:>7.3f}" if ratio else f" {'n/a':>7}"))
        line += f" {r.seconds:>5.1f}"
        lines.append(line)
    lines.append("SVD lower bound (mean per query): " + ", ".join(
        f"{_NAMES[wl]} {format_number(v)}" for wl, v in res.bounds.items()))
    lines.append("\nrows (definition; notes):")
    for i, r in enumerate(res.rows, start=1):
        mark = "" if r.available else "  [not available]"
        lines.append(f"{i:>2} {r.label}: {r.emulates}.{mark}")
        if r.note:
            lines.append(f"     {r.note}")
        for n in sorted({e.note for e in r.errors.values() if e.note}):
            lines.append(f"     {n}")
    for n in res.notes:
        lines.append("note: " + n)
    t = res.seconds
    lines.append("timings (s): bounds {:.2f}; ".format(t.get("bounds", 0.0)) + ", ".join(
        f"{r.key} {t.get(r.key, 0.0):.2f}" for r in res.rows) + f"; total {t['total']:.2f}")
    return "\n".join(lines)
