"""`dptree-opt error`: exact CDF error of one mechanism under every estimator."""

from __future__ import annotations

import time

import numpy as np

from .. import Mechanism, expected_error, workloads
from ._common import STRATEGY_HELP, add_budget_arguments, budget_kwargs, parse_strategy

ORDER = 10  # position in `dptree-opt --help`


def run(args) -> int:
    """Print the mechanism, then the covering / refined / BLUE error table."""
    if args.bins < 1:
        raise ValueError(f"--bins must be >= 1, got {args.bins}")
    if args.records is not None and not (np.isfinite(args.records) and args.records > 0):
        raise ValueError(f"--records must be a finite number > 0, got {args.records}")
    strat, padded, note = parse_strategy(args.strategy, args.bins)
    mech = Mechanism(strat, noise=args.noise, neighbours=args.neighbours,
                     public_total=True if args.public_total else None, **budget_kwargs(args))
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


def register(sub) -> None:
    """Add the `error` subcommand to the subparsers ``sub``."""
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
    add_budget_arguments(err)
    err.add_argument("--records", type=float, default=None,
                     help="number of records N, to also print [RTS]'s normalised error / N^2")
    err.set_defaults(func=run)
