"""`dptree-opt optimize`: the best level-uniform tree (optimize.level_uniform); with
``--bins AxB`` the best grid hierarchy (optimize.best_grid_hierarchy); with ``--family auto``
the best mechanism of every family (optimize.best_mechanism)."""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace

from .. import optimize, participation, workloads
from ..limits import MAX_SEARCH_BINS, check_count
from ._common import Budget, Subparsers, add_budget_arguments, bins_arg, budget_kwargs

ORDER = 20  # position in `dptree-opt --help`


def _n_queries(workload: str, n_bins: int) -> int:
    return n_bins * (n_bins + 1) // 2 if workload == "all_range" else n_bins


def _design_dict(design: optimize.TreeDesign, workload: str = "prefix") -> dict[str, object]:
    return {"branching": list(design.branching), "padded_bins": design.padded_bins,
            "height": design.height, "budgets": list(design.budgets), "error": design.error,
            "mean_error_per_query": design.error / _n_queries(workload, design.n_bins),
            "mean_error_per_prefix": (design.error / design.n_bins
                                      if workload == "prefix" else None),
            "normalised_error": design.normalised_error, "method": design.method}


def _run_grid(args: argparse.Namespace, budget: Budget) -> int:
    """--bins AxB: the ranked Kronecker trees / quadtrees of optimize.best_grid_hierarchy."""
    if args.budgets == "node" or args.estimator != "blue":
        raise ValueError("a grid (--bins AxB) is optimised for the BLUE with --budgets equal "
                         "or optimal")
    if args.top < 1:
        raise ValueError(f"--top must be >= 1 for a grid (--bins AxB), got {args.top}")
    family = args.family or "both"
    args.budgets = args.budgets or "optimal"
    t0 = time.perf_counter()
    res = optimize.best_grid_hierarchy(
        args.bins, args.workload, **budget, noise=args.noise, neighbours=args.neighbours,
        public_total=True if args.public_total else None, budgets=args.budgets,
        family=family, allow_padding=not args.no_padding, top=args.top)
    seconds = time.perf_counter() - t0

    def as_dict(d: optimize.GridDesign) -> dict[str, object]:
        return {"family": d.family, "branching": [list(c) for c in d.branching],
                "padded_shape": list(d.padded_shape), "budgets": list(d.budgets),
                "error": d.error, "mean_error_per_query": d.mean,
                "equal_budgets_mean": d.equal_mean}

    if args.json:
        print(json.dumps({"shape": list(args.bins), "workload": args.workload,
                          "noise": args.noise, "neighbours": args.neighbours, **budget,
                          "budgets_rule": args.budgets, "family": family,
                          "seconds": seconds, "flat_mean": res.flat_mean,
                          "candidates": res.candidates, "method": res.method,
                          "ranked": [as_dict(d) for d in res.ranked]}, indent=2))
        return 0
    shape = "x".join(map(str, args.bins))
    print(f"{shape} grid, {args.workload}, {args.noise} noise "
          f"({next(iter(budget))} = {next(iter(budget.values())):g}), {args.neighbours} "
          f"neighbours, BLUE, {args.budgets} budgets ({seconds:.2f} s)")
    print(f"candidates: {res.candidates}; {res.method}")
    print(f"flat grid: mean per query {res.flat_mean:.6g}")
    print("\nrank  family    branching per axis                        padded      mean/query"
          "  vs flat")
    for rank, d in enumerate(res.ranked, start=1):
        chains = " x ".join("(" + ",".join(map(str, c)) + ")" for c in d.branching)
        pad = "x".join(map(str, d.padded_shape))
        print(f"{rank:>4}  {d.family:<8}  {chains:<40}  {pad:>10}  {d.mean:>12.6g}  "
              f"{d.mean / res.flat_mean:>6.3f}")
    return 0


def _run_auto(args: argparse.Namespace, budget: Budget) -> int:
    """--family auto: optimize.best_mechanism over every family, the Design printed (ranked
    alternatives and skipped families) or --json."""
    if args.public_total:
        raise ValueError("--family auto: --public-total is not supported (best_mechanism "
                         "protects N under add_remove and takes it as public under swap)")
    if args.estimator != "blue":
        raise ValueError("--family auto ranks mechanisms by the BLUE's exact error: use it "
                         "with --estimator blue")
    if args.budgets is not None or args.no_padding or args.max_padding != 2.0:
        raise ValueError("--family auto chooses budgets and trees itself: --budgets, "
                         "--no-padding and --max-padding do not apply")
    if args.top < 0:
        raise ValueError(f"--top must be >= 0, got {args.top}")
    limit = 60.0 if args.time_limit is None else args.time_limit
    if not (math.isfinite(limit) and limit > 0):
        raise ValueError(f"--time-limit must be a finite number of seconds > 0, got {limit}")
    workload = getattr(workloads, args.workload)(args.bins)
    design = optimize.best_mechanism(workload, neighbours=args.neighbours, time_limit=limit,
                                     releasable=args.releasable, **budget,
                                     participation=args.participation)
    design = replace(design, alternatives=design.alternatives[:args.top])
    if args.json:
        print(json.dumps(design.as_dict(), indent=2))
    else:
        print(design.summary())
    return 0


def run(args: argparse.Namespace) -> int:
    """Print (or --json) the best level-uniform tree and its ranked runners-up."""
    budget = budget_kwargs(args)
    if args.family == "auto":
        return _run_auto(args, budget)
    if args.time_limit is not None or args.releasable or args.participation is not None:
        raise ValueError("--time-limit, --releasable and --participation are for --family "
                         "auto")
    if isinstance(args.bins, tuple):
        return _run_grid(args, budget)
    if args.family is not None:
        raise ValueError("--family kron / quadtree / both is for a grid (--bins AxB); "
                         "--family auto works for K bins too")
    if args.bins < 2:
        raise ValueError(f"--bins must be >= 2 (one bin needs no tree), got {args.bins}")
    check_count(args.bins, MAX_SEARCH_BINS, f"--bins {args.bins}",
                "the search takes minutes beyond it; use fewer bins")
    if not (math.isfinite(args.max_padding) and args.max_padding >= 1):
        raise ValueError(f"--max-padding must be a finite number >= 1, got {args.max_padding}")
    if args.top < 0:
        raise ValueError(f"--top must be >= 0, got {args.top}")
    if args.budgets == "node":
        return _run_node(args, budget)
    # default: optimal budgets wherever they are searched (identity: equal only)
    args.budgets = args.budgets or ("equal" if args.workload == "identity" else "optimal")
    t0 = time.perf_counter()
    design = optimize.level_uniform(
        args.bins, **budget, estimator=args.estimator, noise=args.noise,
        neighbours=args.neighbours, public_total=True if args.public_total else None,
        allow_padding=not args.no_padding, max_padding=args.max_padding, budgets=args.budgets,
        top=args.top, workload=args.workload)
    seconds = time.perf_counter() - t0
    wl = args.workload
    q = _n_queries(wl, args.bins)
    if args.json:
        out = {"n_bins": design.n_bins, "workload": wl, "estimator": design.estimator,
               "noise": design.noise,
               "neighbours": design.neighbours, "public_total": design.public_total,
               **budget, "budgets_rule": args.budgets, "seconds": seconds,
               "best": _design_dict(design, wl),
               "alternatives": [_design_dict(alt, wl) for alt in design.alternatives]}
        print(json.dumps(out, indent=2))
        return 0
    unit = "eps" if args.noise == "laplace" else "rho"
    what = {"prefix": "CDF (prefix counts)", "all_range": "all ranges",
            "identity": "the bins (identity)"}[wl]
    print(f"{args.bins} bins, {what}, {args.noise} noise ({unit} = "
          f"{next(iter(budget.values())):g}), {args.neighbours} neighbours, {args.estimator} "
          f"estimator, {args.budgets} budgets ({seconds:.2f} s)")
    pad = (f" (padded to {design.padded_bins} bins; the extra bins are empty)"
           if design.padded_bins != args.bins else "")
    print(f"recommended tree: branching {list(design.branching)}, height {design.height}{pad}")
    print("budgets per noisy level: " + ", ".join(f"{b:.4g}" for b in design.budgets))
    if wl == "prefix":
        print(f"exact CDF error: total {design.error:.6g} counts^2, mean per prefix "
              f"{design.error / args.bins:.6g}, normalised {design.normalised_error:.6g}")
    else:
        unit = "range" if wl == "all_range" else "bin"
        label = "all-range" if wl == "all_range" else "identity"
        print(f"exact {label} error: total {design.error:.6g} counts^2, mean per {unit} "
              f"{design.error / q:.6g}")
    if design.alternatives:
        col = {"prefix": "mean/prefix", "all_range": " mean/range", "identity": "  mean/bin"}[wl]
        print(f"\nrank  branching                      bins      {col}  vs best")
        for rank, alt in enumerate((design,) + tuple(design.alternatives), start=1):
            shape = ",".join(str(k) for k in alt.branching)
            print(f"{rank:>4}  {shape:<28} {alt.padded_bins:>8}  {alt.error / q:>12.6g}"
                  f"  {alt.error / design.error:>6.3f}")
    return 0


def _run_node(args: argparse.Namespace, budget: Budget) -> int:
    """--budgets node: a budget per node (optimize.optimal_node_budgets) on the best unpadded
    tree with optimal per-level budgets and on its finest refinement; the better one."""
    if args.workload != "prefix" or args.estimator != "blue":
        raise ValueError("--budgets node optimises the BLUE's CDF error: use it with "
                         "--workload prefix --estimator blue")
    if args.bins < 2:
        raise ValueError("--budgets node needs at least 2 bins")
    if args.public_total and args.neighbours == "add_remove":
        raise ValueError("--budgets node: a public total under add/remove is not supported "
                         "(use swap, where N is public)")
    t0 = time.perf_counter()
    level = optimize.level_uniform(
        args.bins, **budget, estimator="blue", noise=args.noise, neighbours=args.neighbours,
        public_total=True if args.public_total else None, allow_padding=False,
        budgets="optimal", top=0)
    unique = {tuple(level.branching), optimize.finest_refinement(level.branching)}
    shapes = [ks for ks in unique if all(k >= 2 for k in ks)]
    if not shapes:
        raise ValueError("--budgets node needs a tree of height >= 1 (K >= 2)")
    results = [optimize.optimal_node_budgets(ks, **budget, noise=args.noise,
                                             neighbours=args.neighbours) for ks in shapes]
    best = min(results, key=lambda r: r.error)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"n_bins": args.bins, "workload": "prefix", "estimator": "blue",
                          "noise": args.noise, "neighbours": args.neighbours, **budget,
                          "budgets_rule": "node", "seconds": seconds,
                          "branching": list(best.branching),
                          "per_level_mean_error_per_prefix": best.start_mean,
                          "mean_error_per_prefix": best.mean, "error": best.error,
                          "node_budgets": best.budgets.tolist()}, indent=2))
        return 0
    print(f"{args.bins} bins, CDF, {args.noise} noise, {args.neighbours} neighbours, BLUE, "
          f"a budget per node ({seconds:.2f} s)")
    paths = ("the root is the public total and the rest of every root-to-leaf path sums to "
             "half the budget: a swap moves a record between two paths"
             if args.neighbours == "swap" else "every root-to-leaf path sums to the budget")
    print(f"tree: branching {list(best.branching)} ({paths})")
    print(f"mean error per prefix: {best.mean:.6g} with budgets per node, "
          f"{best.start_mean:.6g} with the optimal per-level budgets of the same tree "
          f"({100 * (1 - best.mean / best.start_mean):.2f} % less; {best.iterations} "
          "L-BFGS-B iterations)")
    b = best.budgets[best.budgets > 0]
    print(f"node budgets: {b.size} measured nodes, from {b.min():.4g} to {b.max():.4g} "
          "(--json lists them, strategies.tree row order)")
    return 0


def _participation_arg(text: str) -> participation.Participation:
    """--participation: a schema (``participation.parse``), bad text an argparse error."""
    try:
        return participation.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Subparsers) -> None:
    """Add the `optimize` subcommand to the subparsers ``sub``."""
    opt = sub.add_parser(
        "optimize", help="the best level-uniform tree (branching, budgets) for K bins",
        description="Exact integer search over ordered factorisations of K (and of padded "
                    "K' >= K) scored by the exact error of the chosen estimator on the CDF "
                    "(or, --workload all_range, on all ranges); prints the recommended tree, "
                    "its budgets and error, and the ranked runners-up.",
        epilog="examples: dptree-opt optimize --bins 1000 --epsilon 1 (add/remove "
               "neighbours, BLUE, optimal budgets: the defaults); dptree-opt optimize --bins "
               "1000 --epsilon 1 --neighbours swap --estimator covering --budgets equal "
               "([RTS]'s setting); dptree-opt optimize --bins 256x256 --epsilon 1 "
               "--workload all_range")
    opt.add_argument("--bins", type=bins_arg, required=True,
                     help="number of bins K, or a grid AxB[xC..] (e.g. 256x256): then the best "
                          "Kronecker tree / quadtree (optimize.best_grid_hierarchy)")
    add_budget_arguments(opt)
    opt.add_argument("--workload", choices=("prefix", "all_range", "identity"),
                     default="prefix",
                     help="what the tree is optimised for: the CDF's prefix counts (default), "
                          "all K (K + 1) / 2 ranges or the bins themselves (BLUE only; "
                          "identity: equal budgets, exhaustive, small K)")
    opt.add_argument("--estimator", choices=("covering", "refined", "blue"), default="blue")
    opt.add_argument("--budgets", choices=("equal", "optimal", "node"), default=None,
                     help="per-level budget split: optimal (default; optimised for the "
                          "estimator; identity workload: equal), or equal ([RTS]'s setting); "
                          "node: a budget per node (not per level) on the best unpadded tree "
                          "or its finest refinement (CDF, BLUE)")
    opt.add_argument("--no-padding", action="store_true",
                     help="only trees with exactly K leaves (default: also padded K' <= "
                          "max-padding * K)")
    opt.add_argument("--max-padding", type=float, default=2.0,
                     help="largest padded K' / K (default 2; larger values find nothing more: "
                          "every tree over K' >= 2K has a better one over K' < 2K)")
    opt.add_argument("--family", choices=("kron", "quadtree", "both", "auto"), default=None,
                     help="a grid: Kronecker trees, quadtrees or both (default); auto (1-D or "
                          "grid): the best mechanism of every family the framework has "
                          "(optimize.best_mechanism: trees, budgets per node, p-Identity, "
                          "Gaussian optimum, Toeplitz, the workload itself, ...), ranked")
    opt.add_argument("--time-limit", type=float, default=None,
                     help="--family auto: seconds for the whole search (default 60)")
    opt.add_argument("--releasable", action="store_true",
                     help="--family auto: only families with a secure sampler path today")
    opt.add_argument("--participation", type=_participation_arg, default=None,
                     metavar="SCHEMA",
                     help="--family auto: one user's data enters several steps (private "
                          "learning): fixed_epoch:K:B (K epochs of B steps, bins = K B), "
                          "min_sep:K:B (at most K steps, B apart; K may be none) or "
                          "min_sep_tf:K:S (TF Privacy's min_separation S = B - 1); append "
                          ":scalar for scalar contributions (default: vectors)")
    opt.add_argument("--top", type=int, default=10,
                     help="runners-up to list (--family auto: alternatives shown)")
    opt.add_argument("--json", action="store_true", help="machine-readable output")
    opt.set_defaults(func=run)
