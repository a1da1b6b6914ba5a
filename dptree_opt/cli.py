"""The ``dptree-opt`` command line (calls only the public API)."""

from __future__ import annotations

import argparse
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


def build_parser() -> argparse.ArgumentParser:
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
