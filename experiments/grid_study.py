"""Grids: exact error of every hierarchy family vs grid size, and the
dimension at which the flat grid wins (Qardaji-Yang-Li, VLDB 2013).

Setting: Laplace, eps = 1, add/remove neighbours (N private: the root / the grand total is a
noisy level like the others; the flat grid is Lap(1 / eps) on every cell, variance 2, as
QYL's "Flat"). BLUE (= OLS, QYL's constrained inference, when the budgets are equal). Errors
are exact mean per-query squared errors (counts^2) from the Kronecker eigen-sum
(``error.kronecker``); sides are powers of 2 and trees are exact (no padding).

(a) 2-D, n x n cells, the 2-D CDF (dominance boxes) and all boxes: the flat grid
    (``optimize.flat_grid_error``); binary x binary and the binary quadtree (4-ary) with
    equal budgets; the best Kronecker tree and the best quadtree with equal budgets
    (``optimize.best_grid_hierarchy``, exhaustive); the binary quadtree with optimal budgets
    (``optimal_grid_budgets``); the best hierarchy with optimal budgets (the search's pool and
    the finest products, binary x binary, warm-started from the pool: Laplace budgets are a
    local search, so an upper bound).
(b) The dimension question, all boxes (QYL's workload): d = 1..4 with per-axis 2^a cells,
    total cells N = 2^(a d), the ratio best hierarchy / flat with equal budgets (Kronecker and
    quadtree) and with optimised budgets. QYL's abstract: "when there are 3 or more
    dimensions, it is almost always better to use the Flat method instead of a hierarchy".
    Their d-D hierarchy splits every dimension at every node (a quadtree with branching b per
    axis, as we read it; the paper is not in shared/papers), hence the "(QYL)" label.
    Exact reduction (tested): with equal budgets and N private, the Kronecker error factors
    over the axes, so ratio_d(n) = ratio_1(n)^d: a Kronecker hierarchy beats the flat grid in
    d dimensions exactly when the best 1-D tree beats the flat histogram at the per-axis size.
    Optimised budgets can always put the whole budget on the cells (the flat grid is the leaf
    level tuple), so an optimised hierarchy never loses to flat.
"""

from __future__ import annotations

import math
import time
from pathlib import Path


from dptree_opt import Mechanism, expected_error, optimize, strategies, workloads

import _experiments as C  # experiments/_experiments.py (on sys.path: script dir / load_script)

NAME = "grid_study"
EPSILON = 1.0
NEIGHBOURS = "add_remove"
WORKLOADS = ("prefix", "all_range")
SIDES = tuple(2**a for a in range(4, 13))          # 16 .. 4096 per side (full)
QUICK_SIDES = (16, 64, 256, 1024)
LOG_CELLS = tuple(range(6, 25))                    # (b): total cells 2^6 .. 2^24 (full)
QUICK_LOG_CELLS = tuple(range(6, 17))              # 2^6 .. 2^16
DIMS = (1, 2, 3, 4)
# --set NAME=VALUE on the command line (dptree-opt experiment grid_study --help)
PARAMETERS = {
    "epsilon": {"type": "float", "sets": ("EPSILON",), "min": 1e-6, "help": "Laplace budget"},
    "neighbours": {"type": "str", "sets": ("NEIGHBOURS",), "choices": ("add_remove", "swap"),
                   "help": "neighbour model"},
    "sides": {"type": "ints", "sets": ("SIDES", "QUICK_SIDES"), "min": 2,
              "help": "cells per side of the square grids"},
}
POOL, QUICK_POOL = 12, 3                           # optimal budgets: pool of the search
STARTS, QUICK_STARTS = 4, 1                        # Laplace budget restarts per design
ONE_D_SEARCH_MAX = 2**16                           # d = 1 above this: optimize.level_uniform
QYL_RANGE = 18                                     # QYL check: N <= 2^18 cells
FAMILIES = {
    "flat": ("flat grid", "black", "-", "o"),
    "kron_binary_equal": ("binary x binary, equal", "#1f77b4", "--", "s"),
    "kron_best_equal": ("Kronecker, best branching, equal", "#1f77b4", "-", "s"),
    "quad_binary_equal": ("quadtree (binary), equal", "#ff7f0e", "--", "^"),
    "quad_best_equal": ("quadtree, best branching, equal (QYL)", "#ff7f0e", "-", "^"),
    "quad_binary_optimal": ("quadtree (binary), optimal budgets", "#ff7f0e", ":", "v"),
    "best_optimal": ("best hierarchy, optimal budgets", "#2ca02c", "-", "D"),
}
DIM_COLORS = {1: "#7f7f7f", 2: "#1f77b4", 3: "#d62728", 4: "#9467bd"}


def _n_queries(kind: str, shape) -> int:
    return math.prod(n if kind == "prefix" else n * (n + 1) // 2 for n in shape)


def _workload(kind: str, shape):
    return getattr(workloads, kind)(tuple(shape))


def _mean(kind: str, shape, mech) -> float:
    return expected_error(_workload(kind, shape), mech) / _n_queries(kind, shape)


def two_d_row(kind: str, n: int, pool: int, starts: int) -> dict:
    """Every family's mean per-query error over n x n cells (setting: module docstring)."""
    shape = (n, n)
    h = n.bit_length() - 1
    kw = {"epsilon": EPSILON, "neighbours": NEIGHBOURS}
    row = {"workload": kind, "n": n, "cells": n * n}
    row["flat"] = optimize.flat_grid_error(shape, kind, **kw) / _n_queries(kind, shape)
    binary = strategies.kron(strategies.tree(n, [2] * h), strategies.tree(n, [2] * h))
    row["kron_binary_equal"] = _mean(kind, shape, Mechanism(binary, **kw))
    quad = strategies.quadtree(shape, 2)
    row["quad_binary_equal"] = _mean(kind, shape, Mechanism(quad, **kw))
    row["quad_binary_optimal"] = optimize.optimal_grid_budgets(
        quad, _workload(kind, shape), EPSILON, neighbours=NEIGHBOURS).mean
    eq = optimize.best_grid_hierarchy(shape, kind, allow_padding=False, top=1,
                                      budgets="equal", **kw)
    for fam in ("kron", "quadtree"):
        r = optimize.best_grid_hierarchy(shape, kind, allow_padding=False, top=1, family=fam,
                                         budgets="equal", **kw)
        key = "kron_best_equal" if fam == "kron" else "quad_best_equal"
        row[key] = r.best.mean
        row[key + "_branching"] = _fmt(r.best.branching)
        row[key + "_candidates"] = r.candidates[fam]
    opt = optimize.best_grid_hierarchy(shape, kind, allow_padding=False, top=1,
                                       budgets="optimal", pool=pool, exhaustive=0,
                                       starts=starts, **kw)
    row["best_optimal"] = opt.best.mean
    row["best_optimal_design"] = f"{opt.best.family} {_fmt(opt.best.branching)}"
    row["best_equal_design"] = f"{eq.best.family} {_fmt(eq.best.branching)}"
    return row


def _fmt(branching) -> str:
    return " x ".join("(" + ",".join(map(str, c)) + ")" for c in branching)


def dimension_row(d: int, a: int, pool: int, starts: int) -> dict:
    """Ratios best hierarchy / flat over (2^a)^d cells, all boxes (module docstring)."""
    n = 2**a
    shape = (n,) * d
    kind = "all_range"
    kw = {"epsilon": EPSILON, "neighbours": NEIGHBOURS}
    flat = optimize.flat_grid_error(shape, kind, **kw) / _n_queries(kind, shape)
    row = {"d": d, "side": n, "log2_cells": a * d, "flat": flat}
    if d == 1 and n > ONE_D_SEARCH_MAX:   # the 1-D branch and bound: same candidates, fast
        q = _n_queries(kind, shape)
        eq = optimize.level_uniform(n, EPSILON, estimator="blue", workload=kind,
                                    neighbours=NEIGHBOURS, allow_padding=False,
                                    budgets="equal")
        op = optimize.level_uniform(n, EPSILON, estimator="blue", workload=kind,
                                    neighbours=NEIGHBOURS, allow_padding=False,
                                    budgets="optimal")
        row.update(kron_equal=eq.error / q, kron_equal_branching=str(eq.branching),
                   quad_equal=None, optimal=op.error / q,
                   optimal_design=str(op.branching), method="optimize.level_uniform")
    else:
        k = optimize.best_grid_hierarchy(shape, kind, allow_padding=False, top=1,
                                         family="kron", budgets="equal", **kw)
        row.update(kron_equal=k.best.mean, kron_equal_branching=_fmt(k.best.branching))
        row["quad_equal"] = (optimize.best_grid_hierarchy(
            shape, kind, allow_padding=False, top=1, family="quadtree", budgets="equal",
            **kw).best.mean
            if d > 1 else None)
        op = optimize.best_grid_hierarchy(shape, kind, allow_padding=False, top=1,
                                          budgets="optimal", pool=pool, exhaustive=0,
                                       starts=starts, **kw)
        row.update(optimal=op.best.mean,
                   optimal_design=f"{op.best.family} {_fmt(op.best.branching)}",
                   method="optimize.best_grid_hierarchy")
    for key in ("kron_equal", "quad_equal", "optimal"):
        row[key + "_ratio"] = None if row[key] is None else row[key] / flat
    eq = [row[k] for k in ("kron_equal", "quad_equal") if row[k] is not None]
    row["best_equal_ratio"] = min(eq) / flat
    return row


def _one_d_ratio(n: int) -> float:
    """Best 1-D tree / flat histogram for all ranges over n bins, by ``level_uniform``."""
    q = n * (n + 1) // 2
    tree = optimize.level_uniform(n, EPSILON, estimator="blue", workload="all_range",
                                  neighbours=NEIGHBOURS, allow_padding=False, budgets="equal")
    flat = optimize.flat_grid_error((n,), "all_range", EPSILON, neighbours=NEIGHBOURS)
    return (tree.error / q) / (flat / q)


def _dense_checks(rows_2d, pool: int, starts: int) -> list[dict]:
    """Each family's 16 x 16 value against the dense GLS of its own Mechanism."""
    checks = []
    n = 16
    kw = {"epsilon": EPSILON, "neighbours": NEIGHBOURS}
    for kind in WORKLOADS:
        shape = (n, n)
        W = _workload(kind, shape)
        q = _n_queries(kind, shape)
        row = next(r for r in rows_2d if r["workload"] == kind and r["n"] == n)
        A = strategies.kron(strategies.histogram(n), strategies.histogram(n))
        dense = expected_error(W, Mechanism(A, **kw), method="dense") / q
        checks.append(C.check(f"{kind} 16x16: flat grid closed form = dense GLS",
                              row["flat"], dense, "dense GLS"))
        for fam in ("kron", "quadtree"):
            r = optimize.best_grid_hierarchy(shape, kind, allow_padding=False, top=1,
                                             family=fam, budgets="equal", **kw)
            key = "kron_best_equal" if fam == "kron" else "quad_best_equal"
            dense = expected_error(W, r.best.mechanism(), method="dense") / q
            checks.append(C.check(f"{kind} 16x16: {key} = dense GLS", row[key], dense,
                                  "dense GLS"))
        opt = optimize.best_grid_hierarchy(shape, kind, allow_padding=False, top=1,
                                           budgets="optimal", pool=pool, exhaustive=0,
                                       starts=starts, **kw)
        dense = expected_error(W, opt.best.mechanism(), method="dense") / q
        checks.append(C.check(f"{kind} 16x16: best optimal-budget design = dense GLS",
                              opt.best.mean, dense, "dense GLS"))
    return checks


def run(out_dir: Path, quick: bool = True) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pool = QUICK_POOL if quick else POOL
    starts = QUICK_STARTS if quick else STARTS
    sides = QUICK_SIDES if quick else SIDES
    rows_2d = [two_d_row(kind, n, pool, starts) for kind in WORKLOADS for n in sides]
    logs = QUICK_LOG_CELLS if quick else LOG_CELLS
    rows_d = [dimension_row(d, m // d, pool, starts) for d in DIMS for m in logs
              if m % d == 0]

    checks = _dense_checks(rows_2d, pool, starts)
    # docs/math.md section 8 anchors, 2-D CDF at 256^2 (eps 1, add/remove)
    r256 = next((r for r in rows_2d if r["workload"] == "prefix" and r["n"] == 256), None)
    if r256 is not None:
        checks.append(C.check("2-D CDF 256^2: flat grid = 2 (257 / 2)^2", r256["flat"],
                              2 * (257 / 2) ** 2, "closed form"))
        checks.append(C.check("2-D CDF 256^2: binary x binary, equal budgets",
                              r256["kron_binary_equal"], 15004, "docs/math.md section 8",
                              rel=0.5 / 15004))
        checks.append(C.check("2-D CDF 256^2: binary quadtree, equal budgets",
                              r256["quad_binary_equal"], 16095, "docs/math.md section 8",
                              rel=0.5 / 16095))
    # the exact reduction: Kronecker / flat in d-D = (1-D best tree / flat)^d
    worst, cache = 0.0, {}
    for r in rows_d:
        if r["d"] > 1:
            if r["side"] not in cache:
                cache[r["side"]] = _one_d_ratio(r["side"])
            want = cache[r["side"]] ** r["d"]
            worst = max(worst, abs(r["kron_equal_ratio"] - want) / want)
    checks.append({"what": "(b) Kronecker equal-budget ratio to flat = (1-D ratio of "
                           "optimize.level_uniform)^d, every d >= 2 point: max rel. dev.",
                   "reproduced": worst, "expected": "<= 1e-9",
                   "source": "separability (module docstring)", "ok": worst <= 1e-9,
                   "deviation": None})
    # d = 1: the grid search agrees with the 1-D branch and bound (independent code)
    g1 = optimize.best_grid_hierarchy((4096,), "all_range", EPSILON, neighbours=NEIGHBOURS,
                                      allow_padding=False, top=1, budgets="equal")
    q1 = 4096 * 4097 // 2
    lu = optimize.level_uniform(4096, EPSILON, estimator="blue", workload="all_range",
                                neighbours=NEIGHBOURS, allow_padding=False, budgets="equal")
    checks.append(C.check("d = 1, 4096 bins: best_grid_hierarchy = level_uniform",
                          g1.best.mean, lu.error / q1, "optimize.level_uniform"))
    # QYL: from 3 dimensions the flat grid beats the hierarchies (equal budgets)
    wins = {}
    for d in DIMS:
        sub = [r for r in rows_d if r["d"] == d]
        beat = [r["log2_cells"] for r in sub if r["best_equal_ratio"] < 1]
        wins[d] = min(beat) if beat else None
    in_range = [r for r in rows_d if r["d"] >= 3 and r["log2_cells"] <= QYL_RANGE]
    hier = [(r["d"], r["log2_cells"]) for r in in_range if r["best_equal_ratio"] < 1]
    checks.append({"what": f"QYL: for d >= 3 the flat grid beats every equal-budget hierarchy "
                           f"(all boxes; here N <= 2^{QYL_RANGE} cells)",
                   "reproduced": f"hierarchy wins at (d, log2 N) = {hier}" if hier
                   else f"flat wins at all {len(in_range)} points",
                   "expected": "flat wins at every point", "source": "QYL VLDB 2013, abstract",
                   "ok": not hier, "deviation": None})
    opt_max = max(r["optimal_ratio"] for r in rows_d)
    checks.append({"what": "(b) optimised budgets never lose to flat: max ratio",
                   "reproduced": opt_max, "expected": "<= 1", "ok": opt_max <= 1 + 1e-9,
                   "source": "the flat grid is the leaf level tuple", "deviation": None})
    verdict = _verdict(rows_d, wins)

    C.write_json({"rows_2d": rows_2d, "rows_dimension": rows_d, "checks": checks,
                  "first_log2_cells_where_equal_hierarchy_beats_flat": wins,
                  "verdict": verdict, "setting": "Laplace eps 1, add/remove (N private), "
                  "BLUE, exact trees (no padding)"}, out_dir, NAME)
    png = _plot(rows_2d, rows_d, out_dir, quick)
    return {"name": NAME, "png": str(png), "json": str(out_dir / f"{NAME}.json"),
            "verdict": verdict, "first_log2_cells_where_equal_hierarchy_beats_flat": wins,
            "rows": rows_2d + rows_d, "checks": checks,
            "seconds": time.perf_counter() - t0}


def _verdict(rows_d, wins) -> str:
    """Per d: from which total size an equal-budget / an optimised hierarchy beats flat."""
    parts = []
    for d in DIMS:
        sub = sorted((r for r in rows_d if r["d"] == d), key=lambda r: r["log2_cells"])
        if not sub:
            continue
        lo, hi = sub[0]["log2_cells"], sub[-1]["log2_cells"]
        w = wins[d]
        eq = (f"flat beats every equal-budget hierarchy up to 2^{hi}" if w is None else
              f"an equal-budget hierarchy beats flat from 2^{w} cells (side {2 ** (w // d)})")
        opt = [r["log2_cells"] for r in sub if r["optimal_ratio"] < 1 - 1e-6]
        op = ("optimised: never better than flat" if not opt else
              f"optimised: better than flat from 2^{min(opt)} "
              f"(ratio {sub[-1]['optimal_ratio']:.3g} at 2^{hi})")
        parts.append(f"d={d} (2^{lo}..2^{hi}): {eq}; {op}")
    return "; ".join(parts)


def _plot(rows_2d, rows_d, out_dir: Path, quick: bool) -> Path:
    C.style()
    fig, axes = C.plt.subplots(2, 2, figsize=(13.5, 10.5))
    for ax, kind in zip(axes[0], WORKLOADS):
        sub = [r for r in rows_2d if r["workload"] == kind]
        ns = [r["n"] for r in sub]
        for key, (label, color, ls, mk) in FAMILIES.items():
            ax.plot(ns, [r[key] for r in sub], ls=ls, color=color, marker=mk, ms=4.5, lw=1.4,
                    label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cells per side n (grid n x n)")
        ax.set_ylabel("mean squared error per query (counts$^2$)")
        what = "2-D CDF (dominance boxes)" if kind == "prefix" else "all boxes"
        ax.set_title(f"(a) {what}: error vs grid size")
        ax.legend(loc="lower right", fontsize=8)
    ax = axes[1][0]
    for d in DIMS:
        sub = sorted((r for r in rows_d if r["d"] == d), key=lambda r: r["log2_cells"])
        x = [r["log2_cells"] for r in sub]
        ax.plot(x, [r["kron_equal_ratio"] for r in sub], "-", color=DIM_COLORS[d], marker="s",
                ms=4, lw=1.4, label=f"d = {d}, Kronecker" if d > 1 else "d = 1 (tree)")
        if d > 1:
            ax.plot(x, [r["quad_equal_ratio"] for r in sub], "--", color=DIM_COLORS[d],
                    marker="^", ms=4, lw=1.2, label=f"d = {d}, quadtree (QYL)")
    ax.axhline(1.0, color="black", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("log2 of total cells N = n^d")
    ax.set_ylabel("best hierarchy / flat grid (mean error)")
    ax.set_title("(b) equal budgets: best hierarchy / flat, all boxes (flat wins above 1)")
    ax.legend(loc="lower left", fontsize=8, ncol=2)
    ax = axes[1][1]
    for d in DIMS:
        sub = sorted((r for r in rows_d if r["d"] == d), key=lambda r: r["log2_cells"])
        x = [r["log2_cells"] for r in sub]
        ax.plot(x, [r["optimal_ratio"] for r in sub], "-", color=DIM_COLORS[d], marker="D",
                ms=4, lw=1.4, label=f"d = {d}, optimised budgets")
        ax.plot(x, [r["best_equal_ratio"] for r in sub], ":", color=DIM_COLORS[d], lw=1.1,
                label=f"d = {d}, best equal (for reference)")
    ax.axhline(1.0, color="black", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("log2 of total cells N = n^d")
    ax.set_ylabel("best hierarchy / flat grid (mean error)")
    ax.set_title("(b) optimised budgets (Laplace: local search, an upper bound)")
    ax.legend(loc="lower left", fontsize=8, ncol=2)
    for ax in axes[1]:
        lo, hi = min(r["log2_cells"] for r in rows_d), max(r["log2_cells"] for r in rows_d)
        ax.set_xticks(range(lo, hi + 1, 2))
    mode = "quick" if quick else "full"
    C.caption(fig, "Exact BLUE errors, Laplace eps = 1, add/remove (N private; flat = Lap(1) "
                   "per cell), sides powers of 2, no padding. Equal budgets: Kronecker "
                   "hierarchy / flat = (1-D tree / flat)^d exactly. Optimised budgets include "
                   f"the flat grid, so they never lose to it ({mode} mode).")
    return C.save_png(fig, out_dir, NAME, bottom=0.04)


if __name__ == "__main__":
    C.cli(run, NAME)
