"""Side-by-side exact errors of grid mechanisms (``dptree-opt compare --bins 256x256``;
docs/math.md section 8).

:func:`compare_grid` builds one *row* per mechanism for a grid of shape (n_1, .., n_d) (cells
in row-major order), one total budget, a noise and a neighbour model, and computes the exact
mean and max per-query expected squared error (counts^2) of the BLUE on

* ``cdf``: the d-D CDF, every dominance box [0, a_1] x .. x [0, a_d] (``workloads.prefix``);
* ``all_range``: every axis-aligned box (``workloads.all_range``);
* ``identity``: every cell.

Rows (:data:`GRID_ROWS`):

* ``flat``: every cell once (``strategies.histogram(shape)``; one noise scale);
* ``kron_trees_equal`` / ``kron_trees_optimal``: the Kronecker product of the finest per-axis
  trees (binary for powers of 2, else the prime factors ascending), equal budgets per level
  tuple / budgets from ``optimize.optimal_grid_budgets`` for that workload (the best of every
  Kronecker tree and quadtree: see optimize/grid.py);
* ``quadtree_equal`` / ``quadtree_optimal``: every node splits every axis
  (``strategies.quadtree``; per-axis prime factors, padded with 1 at the top on a non-square
  grid);
* ``kron_p_identity``: HDMM's Kronecker p-Identity (``strategies.kron_p_identity``, optimised
  for Laplace noise; shown under Gaussian noise too);
* ``kron_gaussian_optimum`` (Gaussian only): the Kronecker product of the 1-D Gaussian optima
  (``strategies.kron_gaussian_optimal``): with one noise scale the error is
  v prod_i Delta_i^2 tr(G_i X_i^-1), so this is the best Kronecker strategy, and for add/remove
  the optimum of all strategies (tests/test_grids.py checks it against the dense solver);
* ektelo's data-independent 2-D plans, emulated: ``ektelo_hb2d`` (``HB`` on a 2-D domain:
  branching b = ``find_best_branching(n_1 n_2)``, the Qardaji-Yang-Li 1-D variance rule of
  VLDB 2013 applied to the number of cells, every rectangle split into b x b (``Hb2D``), the
  root not measured, one noise scale = equal budgets per level); ``ektelo_quadtree`` (the
  ``QuadTree`` plan as coded: it reshapes the flattened domain to (N/2, 2) before building the
  quadtree, so its nodes are not the squares of Cormode et al. but row bands x column-parity
  classes, then half-rows of one parity: emulated exactly as a quadtree over a permuted column
  order, all levels measured, one noise scale; the intended Cormode-style quadtree with
  uniform noise is the ``quadtree_equal`` row); ``ektelo_uniform_grid`` (``UGrid``,
  Qardaji-Yang-Li ICDE 2013: cells of side ceil(sqrt(n_1 n_2 c / (N eps))), c = 10, measured once,
  answers spread uniformly inside cells: the data-dependent bias of that spreading is NOT
  included, only the exact noise variance; needs N (``records``); Laplace only: its rule is
  stated for eps).

Every row gets its ratio to the SVD lower bound (:func:`grid_error_lower_bound`): for a
Kronecker workload with N private the bound factorises, ||W||_*^2 / n = prod_i
||W_i||_*^2 / n_i (Li & Miklau 2012; docs/math.md section 8: 37.308 per unit sigma^2 per query for
the 2-D CDF at 256^2); with N public it is ||W P||_*^2 / n (add/remove) or 2 ||W P||_*^2 /
(n - 1) (swap), P = I - 11'/n, computed by the resolvent quadrature of ``bounds`` on the
Kronecker eigen-data (O(cells) per node). The Laplace bound is the Gaussian one times
2 / eps^2: valid but loose (``bounds``).

How each error is computed (exact, no grid-sized matrix): Kronecker trees and quadtrees by
``expected_error`` (``error.kronecker``) and their maxima by ``error.kron_product.
grid_tree_summary``; single-scale Kronecker products (flat, p-Identity, Gaussian optima) by
``expected_error`` (``error.kron_product``) and ``kron_product_max``; the uniform grid by its
closed form (a product over axes, :func:`uniform_grid_noise`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import bounds, strategies, workloads
from .compare import BudgetSetting, CompareRow, NotAvailable, WorkloadError, format_number
from .error import expected_error
from .engines.kron_product import (TooManyQueries, grid_tree_summary,
                                 is_kron_product_mechanism, kron_product_max, product_form_max)
from .engines.kronecker import is_grid_tree_mechanism
from .limits import (COMPARE_BYTES_PER_CELL, MAX_COMPARE_CELLS, at_budget, check_count,
                     check_memory, rescaled)
from .mechanism import Mechanism
from .privacy import infer_noise, resolve_budget, resolve_public
from .strategies.base import check_neighbours

__all__ = ["GRID_WORKLOADS", "GRID_ROWS", "GridSetting", "GridComparison", "compare_grid",
           "parse_shape", "grid_svd_bound", "grid_error_lower_bound", "ektelo_hb_branching",
           "ektelo_hb2d_branchings", "ektelo_quadtree_plan", "uniform_grid_side",
           "uniform_grid_noise", "format_table", "as_dict"]

GRID_WORKLOADS = ("cdf", "all_range", "identity")
MAX_GRID_AXIS = 4096           # per-axis dense Grams / inverses (n_i^2 floats)
MAX_BOUND_CELLS = 1 << 24      # public-total SVD bound: one pass over the cells per node
MAX_TREE_MAX_QUERIES = 40000   # per-axis queries for the grid-tree per-query maxima
MAX_P_IDENTITY_AXIS = 512      # 1-D p-Identity optimisation: ~1 s at 256, ~45 s at 1024
MAX_GAUSSIAN_AXIS = 1024       # 1-D Gaussian optimum: ~3 s at 1024
UNIFORM_GRID_C = 10.0          # Qardaji-Yang-Li ICDE 2013's constant (ektelo's default c)


# ------------------------------------------------------------------ setting
def parse_shape(text) -> tuple[int, ...]:
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
    Gaussian), ``noise``, ``neighbours``, ``public_total``, ``workloads`` and ``records`` (N,
    for the uniform grid's grid-size rule; None if unknown)."""

    shape: tuple
    budget: float
    noise: str = "laplace"
    neighbours: str = "swap"
    public_total: bool | None = None
    workloads: tuple = ("cdf", "all_range")
    records: int | None = None

    def workload(self, name: str):
        """The Kronecker workload of a name in GRID_WORKLOADS over ``shape``."""
        make = {"cdf": workloads.prefix, "all_range": workloads.all_range,
                "identity": workloads.identity}[name]
        return make(self.shape)


@dataclass(frozen=True)
class GridRowSpec:
    """A registered row: ``build(setting, workload_name, cache) -> (strategy description,
    note, WorkloadError)``; raises ``NotAvailable`` when the row does not apply."""

    key: str
    label: str
    emulates: str
    build: Callable
    estimator: str = "blue"


GRID_ROWS: dict[str, GridRowSpec] = {}


def _row(key: str, label: str, emulates: str, estimator: str = "blue"):
    def deco(build):
        GRID_ROWS[key] = GridRowSpec(key, label, emulates, build, estimator)
        return build
    return deco


@dataclass(frozen=True)
class GridComparison:
    """The result of :func:`compare_grid`: the setting, the rows (``compare.CompareRow``,
    sorted by the mean error on the first workload, unavailable rows last), the lower bounds
    (mean per query per workload), ``seconds`` per phase and notes."""

    setting: GridSetting
    workloads: tuple
    rows: tuple
    bounds: dict
    seconds: dict = field(default_factory=dict)
    notes: tuple = ()


# ------------------------------------------------------------------ exact errors of a mechanism
def _mechanism_error(mech: Mechanism, w, orders=None) -> tuple[float, float | None, str]:
    """(total, max or None, note) of the BLUE of ``mech`` on the Kronecker workload ``w``,
    computed on the normalised mechanism and rescaled exactly (``Mechanism.normalised``)."""
    twin, c = mech.normalised()
    total, mx, note = _normalised_error(twin, w, orders)
    if c == 1.0:
        return total, mx, note
    total = rescaled(total, c, mech.noise, mech.requested_budget)
    return total, None if mx is None else rescaled(mx, c, mech.noise,
                                                   mech.requested_budget), note


def _normalised_error(mech: Mechanism, w, orders) -> tuple[float, float | None, str]:
    """_mechanism_error on a normalised mechanism."""
    if orders is not None or is_grid_tree_mechanism(mech):
        want = max(f.n_queries for f in w.factors) <= MAX_TREE_MAX_QUERIES
        try:
            total, mx = grid_tree_summary(mech, w, orders=orders, want_max=want)
        except TooManyQueries as exc:
            total, _ = grid_tree_summary(mech, w, orders=orders, want_max=False)
            return total, None, f"max n/a ({exc})"
        if orders is None:  # the official dispatch (equal to the summary's, tested)
            total = float(expected_error(w, mech))
        return total, mx, "" if mx is not None else "max n/a (too many queries)"
    total = float(expected_error(w, mech))
    if is_kron_product_mechanism(mech):
        try:
            return total, kron_product_max(mech, w), ""
        except TooManyQueries as exc:
            return total, None, f"max n/a ({exc})"
    return total, None, "max n/a"


def _error(total: float, mx, w, note: str = "") -> WorkloadError:
    return WorkloadError(total / w.n_queries, mx, note)


# ------------------------------------------------------------------ tree shapes
def _prime_factors(n: int) -> tuple[int, ...]:
    """The prime factors of n, ascending (``optimize.finest_refinement`` of the one-level
    tree)."""
    from .optimize.search import finest_refinement
    return finest_refinement((int(n),))


def _finest_trees(shape):
    return [strategies.tree(n, list(_prime_factors(n))) for n in shape]


def _quadtree_branching(shape) -> list[tuple[int, ...]]:
    """Per-axis prime factors (ascending), padded with 1 at the top to one height."""
    fs = [_prime_factors(n) for n in shape]
    h = max(len(f) for f in fs)
    return [(1,) * (h - len(f)) + f for f in fs]


def _tree_label(shape) -> str:
    fs = [_prime_factors(n) for n in shape]
    if all(set(f) == {2} for f in fs):
        return "binary x " * (len(shape) - 1) + "binary"
    return " x ".join("tree " + ",".join(map(str, f)) for f in fs)


# ------------------------------------------------------------------ rows
@_row("flat", "flat grid", "every cell measured once (strategies.histogram(shape)), BLUE "
      "(with N public: the constrained GLS)")
def _flat(s: GridSetting, wl: str, cache: dict):
    if "flat" not in cache:
        cache["flat"] = s.mechanism(strategies.histogram(s.shape))
    w = s.workload(wl)
    total, mx, note = _mechanism_error(cache["flat"], w)
    return "histogram " + "x".join(map(str, s.shape)), "", _error(total, mx, w, note)


def _kron_trees(s: GridSetting, cache: dict):
    if "kron_trees" not in cache:
        cache["kron_trees"] = strategies.kron(*_finest_trees(s.shape))
    return cache["kron_trees"]


def _quadtree(s: GridSetting, cache: dict):
    if "quadtree" not in cache:
        cache["quadtree"] = strategies.quadtree(s.shape, _quadtree_branching(s.shape))
    return cache["quadtree"]


@_row("kron_trees_equal", "Kronecker trees, equal budgets",
      "product of the finest per-axis trees (binary for 2^k), the total split equally over "
      "the noisy level tuples (one noise scale), BLUE")
def _kron_equal(s: GridSetting, wl: str, cache: dict):
    strat = _kron_trees(s, cache)
    if "kron_equal" not in cache:
        cache["kron_equal"] = s.mechanism(strat)
    w = s.workload(wl)
    total, mx, note = _mechanism_error(cache["kron_equal"], w)
    return _tree_label(s.shape), "", _error(total, mx, w, note)


def _optimal(s: GridSetting, strat, wl: str):
    from .optimize.grid import optimal_grid_budgets

    if s.neighbours == "add_remove" and s.public:
        raise NotAvailable("optimal_grid_budgets has no public-total option under add/remove")
    res = optimal_grid_budgets(strat, s.workload(wl), noise=s.noise, neighbours=s.neighbours,
                               **s.budget_kwargs)
    return res


@_row("kron_trees_optimal", "Kronecker trees, optimal budgets",
      "the same product of the finest trees with budgets per level tuple from "
      "optimize.optimal_grid_budgets for each workload, started from the equal split "
      "(Laplace: a local optimum; the 'best grid hierarchy' row searches further)")
def _kron_optimal(s: GridSetting, wl: str, cache: dict):
    res = _optimal(s, _kron_trees(s, cache), wl)
    w = s.workload(wl)
    total, mx, note = _mechanism_error(res.mechanism, w)
    return (_tree_label(s.shape), f"budgets optimised per workload ({res.evaluations} "
            "evaluations)", _error(total, mx, w, note))


@_row("best_hierarchy", "best grid hierarchy, optimal budgets",
      "optimize.best_grid_hierarchy(budgets='optimal', family='both') per workload: the best "
      "Kronecker tree or quadtree found (padded axes allowed; Gaussian without padding: "
      "certified, Laplace: a local search from several starts), budgets per level tuple")
def _best_hierarchy(s: GridSetting, wl: str, cache: dict):
    from .optimize.grid import best_grid_hierarchy

    if s.neighbours == "add_remove" and s.public:
        raise NotAvailable("the search's budgets have no public-total option under add/remove")
    kind = {"cdf": "prefix", "all_range": "all_range", "identity": "identity"}[wl]
    res = best_grid_hierarchy(s.shape, kind, noise=s.noise, neighbours=s.neighbours,
                              budgets="optimal", family="both", **s.budget_kwargs)
    d = res.best
    w = d.workload()
    try:
        _, mx, note = _mechanism_error(d.mechanism(), w)
    except ValueError:
        mx, note = None, "max not computed"
    design = (" x ".join("(" + ",".join(map(str, c)) + ")" for c in d.branching)
              if d.family == "kron" else
              "quadtree " + " x ".join("(" + ",".join(map(str, c)) + ")" for c in d.branching))
    pad = "" if d.padded_shape == d.shape else f", padded to {'x'.join(map(str, d.padded_shape))}"
    note = f"{wl}: {design}{pad}" + (f"; {note}" if note else "")
    return ("searched, per workload", "", _error(d.error, mx, s.workload(wl), note))


@_row("quadtree_equal", "quadtree, equal budgets",
      "every node splits every axis (strategies.quadtree), all levels with one noise scale "
      "(Cormode et al. ICDE 2012's quadtree with uniform budgets, as ektelo intends), BLUE")
def _quad_equal(s: GridSetting, wl: str, cache: dict):
    strat = _quadtree(s, cache)
    if "quad_equal" not in cache:
        cache["quad_equal"] = s.mechanism(strat)
    w = s.workload(wl)
    total, mx, note = _mechanism_error(cache["quad_equal"], w)
    return f"quadtree h={strat.tree.height}", "", _error(total, mx, w, note)


@_row("quadtree_optimal", "quadtree, optimal budgets",
      "the quadtree with budgets per level from optimize.optimal_grid_budgets per workload")
def _quad_optimal(s: GridSetting, wl: str, cache: dict):
    strat = _quadtree(s, cache)
    res = _optimal(s, strat, wl)
    w = s.workload(wl)
    total, mx, note = _mechanism_error(res.mechanism, w)
    return (f"quadtree h={strat.tree.height}", "budgets optimised per workload",
            _error(total, mx, w, note))


@_row("kron_p_identity", "HDMM Kronecker p-Identity",
      "McKenna et al. VLDB 2018 OPT_kron: per-axis p-Identity (p = n_i // 16) optimised for "
      "Laplace noise on the axis workload (strategies.kron_p_identity), one noise scale, BLUE")
def _kron_pid(s: GridSetting, wl: str, cache: dict):
    if max(s.shape) > MAX_P_IDENTITY_AXIS:
        raise NotAvailable(f"the p-Identity optimisation is dense (p = n / 16 rows): axes "
                           f"above {MAX_P_IDENTITY_AXIS} cells refused")
    key = ("pid", wl)
    if key not in cache:
        opt = strategies.kron_p_identity(s.workload(wl))
        cache[key] = (opt, s.mechanism(opt.strategy))
    opt, mech = cache[key]
    w = s.workload(wl)
    total, mx, note = _mechanism_error(mech, w)
    extra = "" if s.noise == "laplace" else "optimised for Laplace, measured with Gaussian noise"
    return "p-Identity per axis", extra, _error(total, mx, w, note)


@_row("kron_gaussian_optimum", "Kronecker Gaussian optimum",
      "product of the 1-D Gaussian optima (strategies.kron_gaussian_optimal): the best "
      "Kronecker strategy with one noise scale; Gaussian noise only")
def _kron_gauss(s: GridSetting, wl: str, cache: dict):
    if s.noise != "gaussian":
        raise NotAvailable("the Gaussian optimum is for Gaussian noise (--rho)")
    if max(s.shape) > MAX_GAUSSIAN_AXIS:
        raise NotAvailable(f"Gaussian-optimal factors are dense: axes above "
                           f"{MAX_GAUSSIAN_AXIS} cells refused")
    key = ("gopt", wl)
    if key not in cache:
        cache[key] = s.mechanism(strategies.kron_gaussian_optimal(s.workload(wl)).strategy)
    w = s.workload(wl)
    total, mx, note = _mechanism_error(cache[key], w)
    return "Gaussian optimum per axis", "", _error(total, mx, w, note)


# ------------------------------------------------------------------ ektelo emulations
def ektelo_hb_branching(n_cells: int) -> int:
    """ektelo's ``find_best_branching(N)`` (selection.py; Qardaji-Yang-Li VLDB 2013, Eq. 3):
    the b in 2..N minimising (b - 1) h^3 - 2 (b + 1) h^2 / 3, h = ceil(log_b N) (float
    logarithm, as ektelo computes it)."""
    best_v, best_b = math.inf, None
    for b in range(2, int(n_cells) + 1):
        h = math.ceil(math.log(n_cells, b))
        v = (b - 1) * h ** 3 - 2 * (b + 1) * h ** 2 / 3
        if v < best_v:
            best_v, best_b = v, b
    return best_b


def ektelo_hb2d_branchings(shape) -> list[tuple[int, ...]] | None:
    """Per-axis branchings of ektelo's ``Hb2D`` for a 2-D ``shape`` with b =
    ektelo_hb_branching(n_1 n_2): every rectangle of more than one cell is split into b x b
    (``split_rectangle``: an axis of s cells splits into s single cells when b > s, into b
    equal parts when b divides s, else unevenly), until single cells. None when some split is
    uneven (not a level-uniform hierarchy)."""
    b = ektelo_hb_branching(math.prod(shape))
    sizes = list(shape)
    out = [[] for _ in shape]
    while math.prod(sizes) > 1:
        for i, sz in enumerate(sizes):
            if sz == 1:
                k = 1
            elif b > sz:
                k = sz
            elif sz % b:
                return None
            else:
                k = b
            out[i].append(k)
            sizes[i] = sz // k
    return [tuple(k) for k in out]


@_row("ektelo_hb2d", "ektelo HB2D",
      "ektelo HB plan on a 2-D domain (Hb2D): b from Qardaji-Yang-Li's 1-D rule on n1*n2 "
      "cells, b x b splits to single cells, root not measured, one Laplace scale; BLUE "
      "(= ektelo's least squares with equal noise)")
def _hb2d(s: GridSetting, wl: str, cache: dict):
    if len(s.shape) != 2:
        raise NotAvailable("ektelo's HB is 1-D or 2-D")
    if "hb2d" not in cache:
        ks = ektelo_hb2d_branchings(s.shape)
        if ks is None:
            raise NotAvailable(f"ektelo splits {s.shape} unevenly (b = "
                               f"{ektelo_hb_branching(math.prod(s.shape))}): not emulated")
        strat = strategies.quadtree(s.shape, [list(k) for k in ks])
        levels = strat.tree.height
        # the root is not measured: budget 0 when it is a noisy level (N private)
        budgets = None if s.public else [0.0] + [s.budget / levels] * levels
        cache["hb2d"] = (ks, s.mechanism(strat, budgets))
    ks, mech = cache["hb2d"]
    w = s.workload(wl)
    total, mx, note = _mechanism_error(mech, w)
    b = ektelo_hb_branching(math.prod(s.shape))
    return (f"b={b}: " + " / ".join("x".join(str(k[lv]) for k in ks) for lv in range(len(ks[0]))),
            "", _error(total, mx, w, note))


def ektelo_quadtree_plan(shape):
    """ektelo's ``QuadTree`` plan (plans/standalone.py) on a 2-D grid of powers of 2, as
    coded: it flattens x and builds ``selection.QuadTree((N // 2, 2))``, a quadtree over an
    (N/2) x 2 array whose cell (r, c) is the flat cell 2 r + c. Its nodes are then products
    of a row band and a set of columns of one parity: level 1 = (row halves) x (even / odd
    columns), then row bands halve down to single grid rows, then each row's even (odd)
    columns halve. That is ``strategies.quadtree`` over the grid with its columns in the
    order (evens, then odds): returns (strategy, order) with order[b] = the original column
    at position b (axis-0 order unchanged). Checked against a transcription of ektelo's
    ``rect_to_quads`` in the tests."""
    n1, n2 = (int(n) for n in shape)
    if len(shape) != 2 or any(n < 2 or n & (n - 1) for n in (n1, n2)):
        raise ValueError("ektelo's quadtree plan is emulated on 2-D grids whose sides are "
                         "powers of 2 (>= 2)")
    a, c = n1.bit_length() - 1, n2.bit_length() - 1
    levels = a + c - 1                         # log2(N / 2): the (N/2) x 2 quadtree's height
    ax0 = (2,) * a + (1,) * (levels - a)
    ax1 = (2,) + (1,) * (a - 1) + (2,) * (levels - a) if a >= 1 else (2,) * levels
    strat = strategies.quadtree((n1, n2), [list(ax0), list(ax1)],
                                name=f"ektelo quadtree plan {n1}x{n2}")
    j = np.arange(n2)
    order = np.argsort((j % 2) * (n2 // 2) + j // 2)
    return strat, order


@_row("ektelo_quadtree", "ektelo QuadTree plan (as coded)",
      "ektelo QuadTree plan: selection.QuadTree on the flattened domain reshaped to (N/2, 2) "
      "(nodes = row bands x column-parity classes, not squares), all levels incl. the root, "
      "one Laplace scale; BLUE")
def _ektelo_qt(s: GridSetting, wl: str, cache: dict):
    if len(s.shape) != 2 or any(n & (n - 1) for n in s.shape):
        raise NotAvailable("emulated on 2-D grids with power-of-2 sides")
    if "ektelo_qt" not in cache:
        strat, order = ektelo_quadtree_plan(s.shape)
        cache["ektelo_qt"] = (strat, order, s.mechanism(strat))
    strat, order, mech = cache["ektelo_qt"]
    w = s.workload(wl)
    total, mx, note = _mechanism_error(mech, w, orders=[None, order])
    return (f"(N/2)x2 quadtree, {strat.tree.height + 1} levels",
            "the quadtree of Cormode et al. it is meant to be is the 'quadtree, equal "
            "budgets' row", _error(total, mx, w, note))


def uniform_grid_side(shape, records: int, epsilon: float, c: float = UNIFORM_GRID_C) -> int:
    """ektelo's ``UniformGrid`` cell side (selection.py; Qardaji-Yang-Li ICDE 2013: about
    sqrt(N eps / c) cells per axis): M = N eps / c target cells, side
    g = int(sqrt(n_1 n_2 / M) - 1) + 1 (at least 1); the grid has ceil(n_i / g) cells per axis
    (the last ones cut at the border)."""
    m = records * epsilon / c
    g = int(math.sqrt(math.prod(shape) / m) - 1) + 1 if m > 0 else max(shape)
    return max(g, 1)


def _block_fractions(lo, hi, n: int, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Per interval query [lo, hi): t = sum_a (|q cap P_a| / |P_a|)^2 and r = sum_a |q cap
    P_a| / |P_a| over the blocks P_a = [a g, min((a + 1) g, n))."""
    starts = np.arange(0, n, g)
    ends = np.minimum(starts + g, n)
    size = (ends - starts).astype(float)
    t = np.zeros(lo.size)
    r = np.zeros(lo.size)
    step = max(1, (1 << 22) // max(starts.size, 1))
    for s in range(0, lo.size, step):
        ov = np.clip(np.minimum(hi[s:s + step, None], ends[None, :])
                     - np.maximum(lo[s:s + step, None], starts[None, :]), 0, None) / size
        t[s:s + step] = np.einsum("qa,qa->q", ov, ov)
        r[s:s + step] = ov.sum(axis=1)
    return t, r


def uniform_grid_noise(shape, side: int, workload, *, epsilon: float,
                       neighbours: str = "add_remove", public_total=None):
    """(total, max) of the noise variance (counts^2) of ektelo's ``UniformGrid`` estimate on
    a Kronecker ``workload``: the cells of side ``side`` (cut at the border) are measured once
    with Laplace noise (variance v = 2 (D / eps)^2, D = 1 add/remove, 2 swap) and x^ spreads
    each cell's count uniformly over it (ektelo's least squares: the minimum-norm solution).
    With R the spreading map, Var(w'x^) = v ||R'w||^2 = v prod_i t_i(q_i) (t_i: module
    ``_block_fractions``); with N public the cell counts are the constrained BLUE,
    Cov = v (I - 11'/M), M cells, subtracting v (prod_i r_i(q_i))^2 / M. The bias
    w'(R R^+ x - x), from data not uniform inside cells, depends on the data and is NOT
    included."""
    neighbours = check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    ms = [-(-n // side) for n in shape]
    cells = math.prod(ms)
    if neighbours == "swap":
        sens = 2.0 if cells > 1 else 0.0
    else:
        sens = 1.0
    v = 2.0 * sens**2  # at unit eps; restated at ``epsilon`` below (limits.at_budget)
    ts, rs = [], []
    for f, n in zip(workload.factors, shape):
        lo, hi = f.intervals()
        t, r = _block_fractions(lo, hi, n, side)
        ts.append(t)
        rs.append(r)
    kappa = 1.0 / cells if public else 0.0
    total = math.prod(float(t.sum()) for t in ts)
    if kappa:
        total -= kappa * math.prod(float((r * r).sum()) for r in rs)
    mx = product_form_max(ts, [r * r for r in rs] if kappa else None, kappa)
    return (at_budget(v * max(total, 0.0), "laplace", epsilon),
            at_budget(v * max(mx, 0.0), "laplace", epsilon))


@_row("ektelo_uniform_grid", "ektelo UniformGrid (noise only)",
      "ektelo UGrid (Qardaji-Yang-Li ICDE 2013): cells of side ~ sqrt(n1 n2 c / (N eps)), "
      "c = 10, measured once, spread uniformly; NOISE VARIANCE ONLY: the data-dependent "
      "uniformity bias is omitted", estimator="spread")
def _ugrid(s: GridSetting, wl: str, cache: dict):
    if len(s.shape) != 2:
        raise NotAvailable("ektelo's UniformGrid is 2-D")
    if s.noise != "laplace":
        raise NotAvailable("UniformGrid's grid-size rule is stated for eps-DP (Laplace)")
    if s.records is None:
        raise NotAvailable("needs the number of records N (--n) for its grid-size rule")
    g = uniform_grid_side(s.shape, s.records, s.budget)
    w = s.workload(wl)
    total, mx = uniform_grid_noise(s.shape, g, w, epsilon=s.budget, neighbours=s.neighbours,
                                   public_total=s.public_total)
    ms = "x".join(str(-(-n // g)) for n in s.shape)
    return (f"{ms} cells of side {g}", f"N = {s.records}; bias omitted (needs data)",
            _error(total, mx, w, "noise variance only; bias omitted"))


# ------------------------------------------------------------------ lower bounds
def _kron_eigen(w):
    """Per-axis (eigenvalues, squared coordinates of 1 / sqrt(n_i)) of G_i = W_i'W_i."""
    out = []
    for f in w.factors:
        if f.n_bins > MAX_GRID_AXIS:
            raise ValueError(f"the public-total bound needs dense per-axis Grams: refused "
                             f"for an axis of more than {MAX_GRID_AXIS} cells")
        mu, u = np.linalg.eigh(f.gram_dense())
        c2 = (u.sum(axis=0) ** 2) / f.n_bins
        out.append((mu, c2))
    return out


def _projected_nuclear_kron(w, nodes_per_efold: float = 3.0, margin: float = 8.0) -> float:
    """||W P||_* (P = I - 11'/n) for a Kronecker workload of full column rank, by the
    resolvent quadrature (``bounds.projection_quadrature``) on the Kronecker
    eigen-data: tr(S^1/2) = sum_k mu_k^1/2 + (2 / pi) int_0^inf (t^2 B / A - 1) dt with
    A = sum_k c_k / (mu_k + t^2), B = sum_k c_k / (mu_k + t^2)^2, mu_k = prod_i mu_(i, k_i),
    c_k = prod_i c_(i, k_i) (the squared coordinates of the normalised 1); O(cells) per node."""
    eig = _kron_eigen(w)
    if math.prod(mu.size for mu, _ in eig) > MAX_BOUND_CELLS:
        raise ValueError(f"the public-total bound is refused above {MAX_BOUND_CELLS} cells")
    for mu, _ in eig:
        if mu[0] <= 1e-12 * mu[-1]:
            raise ValueError("the public-total bound needs a workload of full column rank")
    mu = np.ones(1)
    c = np.ones(1)
    for m_i, c_i in eig:
        mu = np.multiply.outer(mu, m_i).ravel()
        c = np.multiply.outer(c, c_i).ravel()
    nuc = math.prod(float(np.sum(np.sqrt(m_i))) for m_i, _ in eig)
    g = float(c @ mu)                     # u'Gu

    def ratio(t2):                        # t^2 B / A from the Kronecker eigen-data
        inv = 1.0 / (mu + t2)
        return t2 * float(c @ (inv * inv)) / float(c @ inv)

    return nuc + bounds.projection_quadrature(ratio, g, float(mu.min()), float(mu.max()),
                                              nodes_per_efold, margin)


def grid_svd_bound(workload, *, neighbours: str = "add_remove", public_total=None) -> float:
    """The SVD lower bound (``bounds.svd_bound``: total squared error of every Gaussian matrix
    mechanism at sigma^2 = 1 per unit l2 sensitivity) for a Kronecker ``workload`` over a
    grid. N private: ||W||_*^2 / n = prod_i ||W_i||_*^2 / n_i, the product of the 1-D bounds
    (Li & Miklau 2012; the singular values of W are the products of the factors'). N public:
    ||W P||_*^2 / n (add/remove) or 2 ||W P||_*^2 / (n - 1) (swap), with ||W P||_* by
    :func:`_projected_nuclear_kron`."""
    from .workloads import KroneckerWorkload

    if not isinstance(workload, KroneckerWorkload):
        raise ValueError("grid_svd_bound needs a Kronecker workload (use bounds.svd_bound "
                         "in 1-D)")
    check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    if not public:
        return math.prod(bounds.svd_bound(f, neighbours="add_remove") for f in workload.factors)
    n = workload.n_bins
    nuc = _projected_nuclear_kron(workload)
    return nuc * nuc / n if neighbours == "add_remove" else 2.0 * nuc * nuc / (n - 1)


def grid_error_lower_bound(workload, *, noise: str, epsilon=None, rho=None,
                           neighbours: str = "add_remove", public_total=None) -> float:
    """:func:`grid_svd_bound` in counts^2 for a noise and budget (``bounds.error_lower_bound``'s
    conversion): Gaussian bound / (2 rho); Laplace 2 bound / eps^2 (valid but loose)."""
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    unit = 0.5 if noise == "gaussian" else 2.0  # at unit budget, restated (limits.at_budget)
    return at_budget(unit * grid_svd_bound(workload, neighbours=neighbours,
                                           public_total=public_total), noise, budget,
                     "the error lower bound")


# ------------------------------------------------------------------ the comparison
def _sort_key(row: CompareRow, which) -> tuple:
    """Exact rows by their means, then rows whose error is partial (noise only), then the
    unavailable ones."""
    vals = [row.errors[wl].mean for wl in which]
    return ((not row.available, row.estimator != "blue")
            + tuple(math.inf if v is None else v for v in vals))


def check_cells(dims, what: str | None = None) -> None:
    """ValueError when a grid comparison over ``dims`` would exceed MAX_COMPARE_CELLS cells
    or the memory available (about COMPARE_BYTES_PER_CELL per cell); ``what`` names the
    grid in the message (default "the grid AxB")."""
    cells = math.prod(dims)
    what = (what or "the grid " + "x".join(map(str, dims))) + f" ({cells} cells)"
    hint = "compare a coarser grid, or run dptree-opt optimize --bins AxB"
    check_count(cells, MAX_COMPARE_CELLS, what, hint)
    check_memory(cells * COMPARE_BYTES_PER_CELL, f"comparing {what}", hint)


def compare_grid(shape, epsilon: float | None = None, *, rho: float | None = None,
                 noise: str | None = None, neighbours: str = "swap", public_total=None,
                 workloads=("cdf", "all_range"), records: int | None = None,
                 rows=None) -> GridComparison:
    """Exact mean and max per-query error of every grid row (or the keys in ``rows``) for a
    grid ``shape`` ("256x256" or (n_1, .., n_d)), one budget, noise and neighbour model, on
    ``workloads`` (a subset of GRID_WORKLOADS), with ratios to the SVD bound (module
    docstring). ``records``: the number of records N (only the uniform grid's grid-size
    rule uses it). Rows sorted by the mean error on the first workload; ``seconds`` holds
    the time of the bounds and of each row."""
    dims = parse_shape(shape)
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    neighbours = check_neighbours(neighbours)
    resolve_public(neighbours, public_total)
    which = tuple(workloads)
    if not which:
        raise ValueError("give at least one workload")
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
    setting = GridSetting(dims, budget, noise, neighbours, public_total, which,
                          None if records is None else int(records))
    keys = list(GRID_ROWS) if rows is None else list(rows)
    for key in keys:
        if key not in GRID_ROWS:
            raise ValueError(f"unknown row {key!r}; choose from {', '.join(GRID_ROWS)}")
    seconds = {}
    t0 = time.perf_counter()
    bnds = {}
    notes = []
    for wl in which:
        w = setting.workload(wl)
        try:
            bnds[wl] = grid_error_lower_bound(w, noise=noise, neighbours=neighbours,
                                              public_total=public_total,
                                              **setting.budget_kwargs) / w.n_queries
        except ValueError as exc:
            bnds[wl] = None
            notes.append(f"SVD bound for {wl} n/a: {exc}")
    seconds["bounds"] = time.perf_counter() - t0
    kind = ("Gaussian: sigma^2 Delta^2 >= the SVD bound (Li & Miklau 2012), tight up to the "
            "optimum's gap" if noise == "gaussian" else
            "Laplace: 2 / eps^2 x the Gaussian SVD bound, valid but loose (l1 >= l2)")
    notes.insert(0, "ratio = mean / SVD lower bound per query; " + kind + "; N private: "
                 "product of the per-axis 1-D bounds, N public: resolvent quadrature")
    cache: dict = {}
    out = []
    for key in keys:
        spec = GRID_ROWS[key]
        t1 = time.perf_counter()
        try:
            errs, strategy, note = {}, "-", ""
            for wl in which:
                try:
                    strategy, n, errs[wl] = spec.build(setting, wl, cache)
                    note = n or note
                except NotAvailable as exc:
                    if not errs and wl == which[0]:
                        raise
                    errs[wl] = WorkloadError(None, None, str(exc))
            ratio = {wl: (errs[wl].mean / bnds[wl]) if bnds.get(wl) and
                     errs[wl].mean is not None else None for wl in which}
            out.append(CompareRow(key, spec.label, spec.emulates, strategy, spec.estimator,
                                  errs, note,
                                  True, time.perf_counter() - t1, ratio))
        except NotAvailable as exc:
            out.append(CompareRow(key, spec.label, spec.emulates, "-", "-",
                                  {wl: WorkloadError(None, None) for wl in which}, str(exc),
                                  False, time.perf_counter() - t1))
        seconds[key] = time.perf_counter() - t1
    out.sort(key=lambda r: _sort_key(r, which))
    if setting.records is None and noise == "laplace" and "ektelo_uniform_grid" in keys \
            and len(dims) == 2:
        notes.append("UniformGrid needs N: pass --n N (records) to include it")
    seconds["total"] = time.perf_counter() - t0
    return GridComparison(setting, which, tuple(out), bnds, seconds, tuple(notes))


# ------------------------------------------------------------------ output
_NAMES = {"cdf": "CDF", "all_range": "boxes", "identity": "cells"}


def format_table(res: GridComparison) -> str:
    """The comparison as a text table (mean and max per query, ratio to the SVD bound, time
    per row), then each row's definition and the notes."""
    s = res.setting
    unit = "eps" if s.noise == "laplace" else "rho"
    total = ("N public (invariant under swap)" if s.neighbours == "swap" else
             "N public (declared; N not protected)" if s.public else "N private (noised)")
    shape = "x".join(map(str, s.shape))
    lines = [f"{shape} grid ({math.prod(s.shape)} cells), {s.noise} noise, {unit} = "
             f"{s.budget:g}, {s.neighbours} neighbours, {total}",
             "exact expected squared error per query (counts^2) of the BLUE: mean and max over "
             "the workload's queries (CDF: dominance boxes; boxes: all axis-aligned boxes); "
             "rows sorted by the first workload, rows with the noise variance only last"]
    head = f"{'#':>2} {'mechanism':<34} {'strategy':<30}"
    for wl in res.workloads:
        head += f" {_NAMES[wl] + ' mean':>12} {'max':>10} {'/bound':>7}"
    head += f" {'s':>5}"
    lines += [head, "-" * len(head)]
    for i, r in enumerate(res.rows, start=1):
        if not r.available:
            continue
        line = f"{i:>2} {r.label[:34]:<34} {r.strategy[:30]:<30}"
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


def as_dict(res: GridComparison) -> dict:
    """A JSON-ready dict of a :class:`GridComparison`."""
    def err(e):
        return {"mean": e.mean, "max": e.max, "note": e.note}

    s = res.setting
    return {"shape": list(s.shape), "cells": math.prod(s.shape), "noise": s.noise,
            "neighbours": s.neighbours, "public_total": s.public, **s.budget_kwargs,
            "records": s.records, "workloads": list(res.workloads),
            "units": "expected squared error per query, counts^2",
            "bounds_mean_per_query": res.bounds, "notes": list(res.notes),
            "seconds": dict(res.seconds),
            "rows": [{"key": r.key, "label": r.label, "emulates": r.emulates,
                      "strategy": r.strategy, "estimator": r.estimator,
                      "available": r.available, "note": r.note, "seconds": r.seconds,
                      "errors": {wl: err(e) for wl, e in r.errors.items()},
                      "ratio_to_bound": r.ratio_to_bound} for r in res.rows]}
