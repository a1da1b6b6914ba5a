"""Ranking the streaming counters for a horizon (``dptree-opt compare --stream --horizon T``).

:func:`compare_stream` builds ``stream.Counter(T, epsilon | rho, mechanism=..., **options)``
for every mechanism of ``stream.MECHANISMS`` with the options worth trying, and ranks them by
the exact mean (then max) variance of the T released running counts
(``Counter.step_variances``: exact, never simulated; the counters are built with a simulation
generator only so that no secure sampler runs, and no noise is read).

Configurations tried (each mechanism's options, as its engine declares them):

* ``binary``: the covering sums (the default counter) and the causal BLUE (``estimator``);
* ``kary``: every branching k in 3..``max_branching``, covering and causal;
* ``negative_digits``: every odd k in 3..2 ``max_branching`` - 1 (its default is 19);
* ``tree_blue`` (a tree's offline BLUE, noise drawn ahead): every k-ary tree, k in
  2..``max_branching``, with equal budgets, and the trees ``optimize`` finds for the T
  prefixes under add/remove neighbours (event level: one step's count changes by one): the
  exact search with equal per-level budgets (``optimize.level_uniform``) and with optimal
  per-level budgets (the search up to MAX_OPTIMAL_SEARCH_HORIZON steps, above it the optimal
  budgets of the equal-budget tree's finest refinement, ``optimize.optimal_blue_budgets``);
* ``sqrt`` and ``blt`` (Gaussian noise only): the square-root factorisation, and BLT with
  ``buffers`` in BLT_BUFFERS optimised for the mean and for the max.

At T = 365, eps = 1, the best is ``tree_blue`` on the optimal tree (3, 3, 3, 3, 3, 2) with
optimal budgets: mean 79.89 against 661.76 for the default binary counter, 8.28x better.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Iterator

import numpy as np

from .. import optimize, stream
from ..limits import check_count
from ..privacy import resolve_budget
from ..stream import Counter
from .protocol import BudgetKwargs, format_number

__all__ = ["StreamRow", "StreamComparison", "compare_stream", "MAX_STREAM_HORIZON",
           "BLT_BUFFERS"]

MAX_STREAM_HORIZON = 1 << 22      # tree_blue's own limit; 8-40 bytes per step per counter
MAX_OPTIMAL_SEARCH_HORIZON = 4096  # level_uniform(budgets="optimal"): ~3 s at 4096
BLT_BUFFERS = (1, 2, 3, 4)      # 6 buffers: ~20 s to optimise at T = 365, 8: ~50 s
# the options of a counter's engine, in the order the CLI shows them
_OPTION_ORDER = ("branching", "estimator", "level_budgets", "levels", "buffers", "objective")


@dataclass(frozen=True)
class StreamRow:
    """One counter: ``mechanism`` and ``options`` (the keyword arguments of
    ``stream.Counter``), the exact mean and max variance of its T running counts (None when
    it cannot be built: ``note`` says why), the seconds it took, and how it was chosen."""

    mechanism: str
    options: dict[str, Any]
    mean: float | None
    max: float | None
    note: str = ""
    seconds: float = 0.0
    how: str = ""

    @property
    def available(self) -> bool:
        return self.mean is not None

    def call(self, horizon: int, budget_kwargs: BudgetKwargs) -> str:
        """The ``stream.Counter(...)`` call that builds this counter (secure noise)."""
        (name, value), = budget_kwargs.items()
        args = [str(horizon), f"{name}={value:g}", f"mechanism={self.mechanism!r}"]
        for key in sorted(self.options, key=_OPTION_ORDER.index):
            val = self.options[key]
            args.append(f"{key}=" + (json.dumps([round(float(b), 6) for b in val])
                                     if key == "level_budgets" else repr(val)))
        return "Counter(" + ", ".join(args) + ")"


@dataclass(frozen=True)
class StreamComparison:
    """The result of :func:`compare_stream`: the horizon, noise and budget, the rows sorted
    by mean then max variance (rows that could not be built last), the default counter's
    row, notes and the total seconds."""

    horizon: int
    noise: str
    budget: float
    rows: tuple[StreamRow, ...]
    default: StreamRow
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    skipped: tuple[dict[str, Any], ...] = field(default=())

    @property
    def budget_kwargs(self) -> BudgetKwargs:
        """{"epsilon": budget} (Laplace) or {"rho": budget} (Gaussian)."""
        return {"epsilon": self.budget} if self.noise == "laplace" else {"rho": self.budget}

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        def row(r: StreamRow) -> dict[str, Any]:
            return {"mechanism": r.mechanism, "options": r.options, "mean": r.mean,
                    "max": r.max, "available": r.available, "note": r.note,
                    "how": r.how, "seconds": r.seconds,
                    "vs_default": (self.default.mean / r.mean if r.mean is not None
                                   and self.default.mean is not None and r.mean > 0
                                   else None),
                    "call": r.call(self.horizon, self.budget_kwargs)}
        return {"horizon": self.horizon, "noise": self.noise, **self.budget_kwargs,
                "units": "variance of the running count after each step, counts^2",
                "default": row(self.default), "rows": [row(r) for r in self.rows],
                "notes": list(self.notes), "skipped": list(self.skipped),
                "seconds": self.seconds}

    def format_table(self, top: int | None = 20) -> str:
        """The ranking as text: the ``top`` best counters (all: None), the best of each
        mechanism, the call that builds the best, the notes."""
        unit = "eps" if self.noise == "laplace" else "rho"
        d = self.default
        ok = [r for r in self.rows if r.available]
        lines = [f"streaming counters, horizon T = {self.horizon}, {self.noise} noise, {unit} = "
                 f"{self.budget:g} (event level)",
                 "exact variance of the released running count (counts^2): mean and max over "
                 f"steps 1..T; {len(ok)} configurations ranked by mean, then max",
                 f"{'#':>3} {'mechanism':<16} {'options':<60} {'mean':>10} {'max':>10} "
                 f"{'vs default':>10}"]
        lines.append("-" * len(lines[-1]))

        def line(i: int, r: StreamRow) -> str:
            opts = ", ".join(f"{k}={_short(v)}" for k, v in r.options.items()) or "(defaults)"
            ratio = (d.mean / r.mean if d.mean is not None and r.mean is not None and r.mean > 0
                     else math.nan)
            return (f"{i:>3} {r.mechanism:<16} {opts[:60]:<60} {format_number(r.mean):>10} "
                    f"{format_number(r.max):>10} {ratio:>9.3g}x")
        shown = ok if top is None else ok[:top]
        lines += [line(i, r) for i, r in enumerate(shown, start=1)]
        if len(ok) > len(shown):
            lines.append(f"    ... {len(ok) - len(shown)} more (--top 0 lists all)")
        lines.append("\nbest of each mechanism:")
        seen: set[str] = set()
        for i, r in enumerate(ok, start=1):
            if r.mechanism not in seen:
                seen.add(r.mechanism)
                lines.append(line(i, r) + (f"  [{r.how}]" if r.how else ""))
        (name, value), = self.budget_kwargs.items()
        lines.append(f"\ndefault counter, Counter({self.horizon}, {name}={value:g}): "
                     f"{d.mechanism}, mean {format_number(d.mean)}, max {format_number(d.max)}")
        if ok:
            lines.append("best: " + ok[0].call(self.horizon, self.budget_kwargs)
                         + (f"\n      ({ok[0].how})" if ok[0].how else ""))
        bad = [r for r in self.rows if not r.available]
        if bad:
            lines.append("\nnot available:")
            for r in {(r.mechanism, r.note): r for r in bad}.values():
                lines.append(f"  {r.mechanism}: {r.note}")
        lines += ["note: " + n for n in self.notes]
        return "\n".join(lines)


def _short(value: object) -> str:
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], float):
            return "[" + ",".join(f"{v:.2g}" for v in value) + "]"
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def _configurations(T: int, noise: str,
                    max_branching: int) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(mechanism, options, how) to try, the default counter first."""
    yield "binary", {}, "the default counter"
    yield "binary", {"estimator": "causal"}, ""
    for k in range(3, min(max_branching, max(T, 2)) + 1):
        for est in ("covering", "causal"):
            yield "kary", {"branching": k, "estimator": est}, ""
    for k in range(3, 2 * max_branching, 2):
        yield "negative_digits", {"branching": k}, ""
    for k in range(2, min(max_branching, max(T, 2)) + 1):
        yield "tree_blue", {"branching": k}, ""
    if noise == "gaussian":
        yield "sqrt", {}, ""
        for buffers in BLT_BUFFERS:
            for objective in ("mean", "max"):
                yield "blt", {"buffers": buffers, "objective": objective}, ""
    else:
        yield "sqrt", {}, ""
        yield "blt", {}, ""


def _optimal_trees(T: int, noise: str,
                   budget: float) -> Iterator[tuple[list[int], list[float], str]]:
    """(branching, budgets root first, how): the trees optimize finds for the T prefixes."""
    kw: BudgetKwargs = {"epsilon": budget} if noise == "laplace" else {"rho": budget}
    eq = optimize.level_uniform(T, budgets="equal", estimator="blue", neighbours="add_remove",
                                workload="prefix", top=0, **kw)
    yield (list(eq.branching), list(eq.budgets),
           "optimize.level_uniform(T, estimator='blue', budgets='equal')")
    if T <= MAX_OPTIMAL_SEARCH_HORIZON:
        opt = optimize.level_uniform(T, budgets="optimal", estimator="blue",
                                     neighbours="add_remove", workload="prefix", top=0, **kw)
        how = "optimize.level_uniform(T, estimator='blue', budgets='optimal')"
    else:
        ks = optimize.finest_refinement(eq.branching)
        opt = optimize.optimal_blue_budgets(ks, budget, noise=noise, neighbours="add_remove",
                                            n_queries=T)
        how = "optimize.optimal_blue_budgets on the finest refinement of the equal-budget tree"
    yield list(opt.branching), list(opt.budgets), how


def _tree_blue(T: int, kw: BudgetKwargs, branching: list[int],
               budgets: list[float]) -> tuple[Counter, list[float]]:
    """A tree_blue counter with ``budgets`` (root first) on ``branching``, given in the order
    the engine reads them: its account lists the budget of each level from the root."""
    error: ValueError | None = None
    for given in (budgets, budgets[::-1]):
        try:
            c = stream.Counter(T, **kw, mechanism="tree_blue", rng=np.random.default_rng(0),
                               branching=branching, level_budgets=given)
        except ValueError as exc:     # e.g. read the other way, a leaf level unfunded
            error = error or exc
            continue
        got = [lv["budget"] for lv in sorted(c.account()["levels"],
                                             key=lambda lv: lv["level_from_root"])]
        if np.allclose(got, budgets, rtol=1e-9, atol=0.0):
            return c, given
    raise error or ValueError("tree_blue read the budgets in neither order")


def _row(T: int, kw: BudgetKwargs, mechanism: str, options: dict[str, Any],
         how: str) -> StreamRow:
    t0 = time.perf_counter()
    try:
        if mechanism == "tree_blue" and "level_budgets" in options:
            c, given = _tree_blue(T, kw, options["branching"], options["level_budgets"])
            options = {**options, "level_budgets": given}
        else:
            c = stream.Counter(T, **kw, mechanism=mechanism, rng=np.random.default_rng(0),
                               **options)
        v = c.step_variances()
        return StreamRow(mechanism, options, float(np.mean(v)), float(np.max(v)), "",
                         time.perf_counter() - t0, how)
    except ValueError as exc:
        return StreamRow(mechanism, options, None, None, str(exc).split("; ")[0],
                         time.perf_counter() - t0, how)


def compare_stream(horizon: int, epsilon: float | None = None, *, rho: float | None = None,
                   max_branching: int = 16, time_limit: float = 60.0) -> StreamComparison:
    """Rank the streaming counters for ``horizon`` steps (module docstring) by the exact mean,
    then max, variance of the running counts.

    ``epsilon`` (Laplace, pure DP) or ``rho`` (Gaussian, zCDP): exactly one, event level.
    ``max_branching``: the largest k tried for the k-ary trees (odd k up to
    2 max_branching - 1 for negative digits). ``time_limit``: seconds; configurations are
    tried in order (the default counter and the optimised trees first) and the rest skipped
    once it is spent (listed in ``skipped``)."""
    if (isinstance(horizon, (bool, np.bool_)) or not isinstance(horizon, Integral)
            or horizon < 1):
        raise ValueError(f"horizon must be an integer >= 1, got {horizon!r}")
    check_count(int(horizon), MAX_STREAM_HORIZON, f"horizon = {horizon}",
                "rank the counters on a shorter horizon: their variances per step are "
                "computed for every step")
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (Laplace, pure DP) or rho (Gaussian, "
                         "zCDP)")
    noise = "laplace" if epsilon is not None else "gaussian"
    budget = resolve_budget(noise, epsilon, rho)
    if (isinstance(max_branching, (bool, np.bool_)) or not isinstance(max_branching, Integral)
            or not 2 <= max_branching <= 64):
        raise ValueError(f"max_branching must be an integer in [2, 64], got {max_branching!r}")
    if (isinstance(time_limit, (bool, np.bool_)) or not isinstance(time_limit, (int, float))
            or not math.isfinite(time_limit) or time_limit <= 0):
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got "
                         f"{time_limit!r}")
    T = int(horizon)
    kw: BudgetKwargs = {"epsilon": budget} if noise == "laplace" else {"rho": budget}
    t0 = time.perf_counter()
    configs = list(_configurations(T, noise, max_branching))
    trees = [("tree_blue", {"branching": ks, "level_budgets": b}, how)
             for ks, b, how in _optimal_trees(T, noise, budget)]
    configs = configs[:1] + trees + configs[1:]
    rows: list[StreamRow] = []
    skipped: list[dict[str, Any]] = []
    for mechanism, options, how in configs:
        if rows and time.perf_counter() - t0 > time_limit:
            skipped.append({"mechanism": mechanism, "options": options})
            continue
        rows.append(_row(T, kw, mechanism, options, how))
    default = rows[0]
    rows.sort(key=lambda r: (not r.available, r.mean if r.available else math.inf,
                             r.max if r.available else math.inf))
    notes = ["every variance is exact (Counter.step_variances); vs default = the default "
             "counter's mean / this mean",
             "tree_blue: a tree's offline BLUE with the noise drawn ahead (memory O(T), "
             "T <= 2^22); budgets listed in the order Counter reads them"]
    if skipped:
        notes.append(f"{len(skipped)} configurations skipped: the {time_limit:g} s time limit "
                     "was spent")
    return StreamComparison(T, noise, budget, tuple(rows), default, tuple(notes),
                            time.perf_counter() - t0, tuple(skipped))
