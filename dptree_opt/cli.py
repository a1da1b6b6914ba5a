"""The ``dptree-opt`` command line (calls only the public API)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from . import expected_error, strategies, workloads
from .mechanism import Mechanism

STRATEGY_HELP = ("histogram | prefix | binary | tree:K (one branching factor, e.g. tree:17) | "
                 "tree:K1,K2,... (per-level branching factors, root first, e.g. tree:4,8,32)")


def parse_strategy(spec: str, n_bins: int):
    """(strategy, padded bin count, note) for a --strategy spec.

    A tree:k whose k is not an integer root of n is padded to the next power of k (the
    extra bins are empty); a branching list must multiply to at least n."""
    spec = spec.strip().lower()
    if spec == "histogram":
        return strategies.histogram(n_bins), n_bins, None
    if spec in ("prefix", "prefix_sums", "range"):
        return strategies.prefix_sums(n_bins), n_bins, None
    if spec in ("binary", "binary_tree"):
        spec = "tree:2"
    if not spec.startswith("tree:"):
        raise ValueError(f"--strategy: unknown strategy {spec!r}; expected {STRATEGY_HELP}")
    try:
        ks = [int(k) for k in spec[5:].split(",")]
    except ValueError:
        raise ValueError(f"--strategy: cannot read branching factors in {spec!r}") from None
    if len(ks) == 1:
        k = ks[0]
        if k < 2:
            raise ValueError(f"--strategy: branching factor must be >= 2, got {k}")
        h = 0
        while k**h < n_bins:
            h += 1
        ks = [k] * h
    padded = int(np.prod(ks, dtype=object)) if ks else 1
    if padded < n_bins:
        raise ValueError(f"--strategy: branching {ks} covers only {padded} < {n_bins} bins")
    note = None
    if padded != n_bins:
        note = (f"{n_bins} bins do not fit branching {ks}: padded to {padded} bins (the "
                f"{padded - n_bins} extra bins are empty); errors are over the {n_bins} real "
                "prefixes")
    return strategies.tree(padded, ks), padded, note


def _budget_kwargs(args) -> dict:
    if args.noise == "laplace":
        if args.epsilon is None or args.rho is not None:
            raise ValueError("--noise laplace needs --epsilon (and no --rho)")
        return {"epsilon": args.epsilon}
    if args.rho is None or args.epsilon is not None:
        raise ValueError("--noise gaussian needs --rho (zCDP; and no --epsilon)")
    return {"rho": args.rho}


def cmd_error(args) -> int:
    """`dptree-opt error`: exact CDF error of one mechanism under every estimator."""
    if args.bins < 1:
        raise ValueError(f"--bins must be >= 1, got {args.bins}")
    if args.records is not None and not (np.isfinite(args.records) and args.records > 0):
        raise ValueError(f"--records must be a finite number > 0, got {args.records}")
    strat, padded, note = parse_strategy(args.strategy, args.bins)
    mech = Mechanism(strat, noise=args.noise, neighbours=args.neighbours,
                     public_total=True if args.public_total else None, **_budget_kwargs(args))
    print(mech.describe())
    if note:
        print("note: " + note)
    cdf = workloads.prefix(padded)
    print(f"\nCDF workload: the {args.bins} cumulative counts C_1..C_{args.bins}; exact expected "
          "squared error in counts^2" + (f" (and / N^2 with N = {args.records:g})"
                                         if args.records else ""))
    header = f"{'estimator':<10} {'total':>14} {'mean/query':>12} {'max/query':>12} {'time s':>8}"
    if args.records:
        header += f" {'total / N^2':>12}"
    print(header)
    for est in ("covering", "refined", "blue"):
        t0 = time.perf_counter()
        try:
            var = expected_error(cdf, mech, est, per_query=True)[: args.bins]
        except ValueError as exc:
            print(f"{est:<10} not available: {str(exc).split(';')[0]}")
            continue
        dt = time.perf_counter() - t0
        row = f"{est:<10} {var.sum():>14.6g} {var.mean():>12.6g} {var.max():>12.6g} {dt:>8.2f}"
        if args.records:
            row += f" {var.sum() / args.records**2:>12.6g}"
        print(row)
    return 0


def _design_dict(design) -> dict:
    return {"branching": list(design.branching), "padded_bins": design.padded_bins,
            "height": design.height, "budgets": list(design.budgets), "error": design.error,
            "mean_error_per_prefix": design.error / design.n_bins,
            "normalised_error": design.normalised_error, "method": design.method}


def cmd_optimize(args) -> int:
    """`dptree-opt optimize`: the best level-uniform tree (optimize.level_uniform)."""
    from . import optimize

    if args.bins < 1:
        raise ValueError(f"--bins must be >= 1, got {args.bins}")
    budget = _budget_kwargs(args)
    t0 = time.perf_counter()
    design = optimize.level_uniform(
        args.bins, **budget, estimator=args.estimator, noise=args.noise,
        neighbours=args.neighbours, public_total=True if args.public_total else None,
        allow_padding=not args.no_padding, max_padding=args.max_padding, budgets=args.budgets,
        top=args.top)
    seconds = time.perf_counter() - t0
    if args.json:
        out = {"n_bins": design.n_bins, "estimator": design.estimator, "noise": design.noise,
               "neighbours": design.neighbours, "public_total": design.public_total,
               **budget, "budgets_rule": args.budgets, "seconds": seconds,
               "best": _design_dict(design),
               "alternatives": [_design_dict(alt) for alt in design.alternatives]}
        print(json.dumps(out, indent=2))
        return 0
    unit = "eps" if args.noise == "laplace" else "rho"
    print(f"{args.bins} bins, {args.noise} noise ({unit} = {next(iter(budget.values())):g}), "
          f"{args.neighbours} neighbours, {args.estimator} estimator, {args.budgets} budgets "
          f"({seconds:.2f} s)")
    pad = (f" (padded to {design.padded_bins} bins; the extra bins are empty)"
           if design.padded_bins != args.bins else "")
    print(f"recommended tree: branching {list(design.branching)}, height {design.height}{pad}")
    print("budgets per noisy level: " + ", ".join(f"{b:.4g}" for b in design.budgets))
    print(f"exact CDF error: total {design.error:.6g} counts^2, mean per prefix "
          f"{design.error / args.bins:.6g}, normalised {design.normalised_error:.6g}")
    if design.alternatives:
        print("\nrank  branching                      bins      mean/prefix  vs best")
        for rank, alt in enumerate((design,) + tuple(design.alternatives), start=1):
            shape = ",".join(str(k) for k in alt.branching)
            print(f"{rank:>4}  {shape:<28} {alt.padded_bins:>8}  {alt.error / args.bins:>12.6g}"
                  f"  {alt.error / design.error:>6.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of `dptree-opt` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="dptree-opt",
        description="Differentially private CDFs with tree mechanisms: exact errors, "
                    "comparisons and optimal trees.")
    sub = parser.add_subparsers(dest="command", required=True)
    err = sub.add_parser(
        "error", help="exact CDF error of one mechanism under the covering, refined and BLUE "
                      "estimators",
        description="Print the exact expected squared error (counts^2) of the CDF workload for "
                    "one strategy with calibrated noise, under the [RTS] covering estimator, the "
                    "[RTS] App. B refined estimator (trees) and the BLUE (Honaker's efficient "
                    "estimator on trees).",
        epilog="example: dptree-opt error --bins 1024 --strategy tree:4,8,32 --epsilon 1")
    err.add_argument("--bins", type=int, required=True, help="number of bins K")
    err.add_argument("--strategy", required=True, help=STRATEGY_HELP)
    err.add_argument("--epsilon", type=float, help="total eps (Laplace, pure eps-DP)")
    err.add_argument("--rho", type=float, help="total rho (Gaussian, rho-zCDP)")
    err.add_argument("--noise", choices=("laplace", "gaussian"), default="laplace")
    err.add_argument("--neighbours", choices=("swap", "add_remove"), default="swap",
                     help="swap: N public and invariant (default); add_remove: N private")
    err.add_argument("--public-total", action="store_true",
                     help="under add_remove, declare N public (N is then not protected)")
    err.add_argument("--records", type=float, default=None,
                     help="number of records N, to also print [RTS]'s normalised error / N^2")
    err.set_defaults(func=cmd_error)

    opt = sub.add_parser(
        "optimize", help="the best level-uniform tree (branching, budgets) for K bins",
        description="Exact integer search over ordered factorisations of K (and of padded "
                    "K' >= K) scored by the exact CDF error of the chosen estimator; prints the "
                    "recommended tree, its budgets and error, and the ranked runners-up.",
        epilog="example: dptree-opt optimize --bins 1000 --epsilon 1 --estimator blue")
    opt.add_argument("--bins", type=int, required=True, help="number of bins K")
    opt.add_argument("--epsilon", type=float, help="total eps (Laplace, pure eps-DP)")
    opt.add_argument("--rho", type=float, help="total rho (Gaussian, rho-zCDP)")
    opt.add_argument("--noise", choices=("laplace", "gaussian"), default="laplace")
    opt.add_argument("--neighbours", choices=("swap", "add_remove"), default="swap")
    opt.add_argument("--public-total", action="store_true",
                     help="under add_remove, declare N public (N is then not protected)")
    opt.add_argument("--estimator", choices=("covering", "refined", "blue"), default="blue")
    opt.add_argument("--budgets", choices=("equal", "optimal"), default="equal",
                     help="per-level budget split: equal, or optimised for the estimator")
    opt.add_argument("--no-padding", action="store_true",
                     help="only trees with exactly K leaves (default: also padded K' <= "
                          "max-padding * K)")
    opt.add_argument("--max-padding", type=float, default=2.0)
    opt.add_argument("--top", type=int, default=10, help="runners-up to list")
    opt.add_argument("--json", action="store_true", help="machine-readable output")
    opt.set_defaults(func=cmd_optimize)
    return parser


def main(argv=None) -> int:
    """Entry point of ``dptree-opt``; returns the exit status (2 for bad input)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"dptree-opt: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
