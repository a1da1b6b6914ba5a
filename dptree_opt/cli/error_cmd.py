"""`dptree-opt error`: exact CDF error of one mechanism under every estimator."""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from .. import Mechanism, expected_error, workloads
from ..limits import ERROR_BYTES_PER_BIN, TINY, check_memory, out_of_range
from ..workloads import Workload
from ._common import (STRATEGY_HELP, Subparsers, add_budget_arguments, budget_kwargs,
                      parse_strategy)

ORDER = 10  # position in `dptree-opt --help`


def run(args: argparse.Namespace) -> int:
    """Print the mechanism, then the covering / refined / BLUE error table."""
    if args.bins < 1:
        raise ValueError(f"--bins must be >= 1, got {args.bins}")
    if args.records is not None and not (np.isfinite(args.records) and args.records > 0):
        raise ValueError(f"--records must be a finite number > 0, got {args.records}")
    check_memory(args.bins * ERROR_BYTES_PER_BIN, f"--bins {args.bins}", "use fewer bins")
    strat, padded, note = parse_strategy(args.strategy, args.bins)
    check_memory(padded * ERROR_BYTES_PER_BIN, f"--strategy {args.strategy} over "
                 f"{padded} padded bins", "use fewer bins or a tree that pads less")
    mech = Mechanism(strat, noise=args.noise, neighbours=args.neighbours,
                     public_total=True if args.public_total else None, **budget_kwargs(args))
    mech.normalised()  # ValueError now when the budget is beyond double precision
    cdf = workloads.prefix(padded)
    rows = [_estimate(cdf, mech, est, args) for est in ("covering", "refined", "blue")]
    print(mech.describe())
    if note:
        print("note: " + note)
    print(f"\nCDF workload: the {args.bins} cumulative counts C_1..C_{args.bins}; exact expected "
          "squared error in counts^2" + (f" (and / N^2 with N = {args.records:g})"
                                         if args.records else ""))
    header = f"{'estimator':<10} {'total':>14} {'mean/query':>12} {'max/query':>12} {'time s':>8}"
    if args.records:
        header += f" {'total / N^2':>12}"
    print(header)
    for est, values, why, dt in rows:
        if values is None:
            print(f"{est:<10} not available: {why}")
            continue
        total, mean, mx, per_n2 = values
        row = f"{est:<10} {total:>14.6g} {mean:>12.6g} {mx:>12.6g} {dt:>8.2f}"
        if args.records:
            row += f" {per_n2:>12.6g}"
        print(row)
    return 0


def _estimate(cdf: Workload, mech: Mechanism, est: str, args: argparse.Namespace
              ) -> tuple[str, tuple[float, float, float, float | None] | None, str | None,
                         float]:
    """(estimator, (total, mean, max, total / N^2) or None, why not, seconds) for the first
    --bins prefixes; ValueError when a printed number would leave the normal doubles."""
    t0 = time.perf_counter()
    try:
        var = expected_error(cdf, mech, est, per_query=True)[: args.bins]
    except ValueError as exc:
        return est, None, str(exc).split(";")[0], 0.0
    dt = time.perf_counter() - t0
    total, mx = float(np.sum(var)), float(np.max(var))
    if mx > 0 and not math.isfinite(total):  # every query's error is a double, the sum not
        raise out_of_range(mech.noise, mech.requested_budget, f"the {est} total error",
                           math.log10(mx) + math.log10(var.size))
    per_n2 = None
    if args.records:
        per_n2 = total / args.records / args.records
        if total > 0 and not (math.isfinite(per_n2) and per_n2 >= TINY):
            raise ValueError(f"--records {args.records:g}: the error / N^2 (about 1e"
                             f"{round(math.log10(total) - 2 * math.log10(args.records)):+d}) "
                             "is beyond double precision; leave out --records for counts^2")
    return est, (total, total / var.size, mx, per_n2), None, dt


def register(sub: Subparsers) -> None:
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
