"""`dptree-opt release`: a differentially private CDF and quantiles of a real data column."""

from __future__ import annotations

import sys

from ..data_release import DEFAULT_QUANTILES, release_file

ORDER = 60  # position in `dptree-opt --help`


def _floats(text: str, flag: str) -> tuple:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


def _tree(text: str):
    if text.strip().lower() == "optimal":
        return "optimal"
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--tree: expected 'optimal' or branching factors like 4,8,32, got "
                         f"{text!r}") from None


def run(args) -> int:
    """Read, bin, release; print the summary and write the JSON (``--out``)."""
    if (args.file is None) == (args.counts is None):
        raise ValueError("give a data FILE (with --column) or --counts FILE, not both")
    if args.file is not None and not args.column:
        raise ValueError("--column: name the column of FILE to release")
    result = release_file(
        args.file, column=args.column, counts_file=args.counts, lower=args.lower,
        upper=args.upper, bins=args.bins, epsilon=args.epsilon, rho=args.rho,
        tree=_tree(args.tree), neighbours=args.neighbours, out_of_range=args.out_of_range,
        quantiles=_floats(args.quantiles, "--quantiles"),
        consistency=None if args.consistency == "none" else args.consistency,
        budgets=args.budgets, interval_level=args.interval_level, delimiter=args.delimiter)
    source = (f"column {args.column!r} of {args.file}" if args.file is not None
              else f"counts file {args.counts}")
    print(f"private release of {source}")
    if result.cdf.total_public:
        print("WARNING: swap neighbours: N is released exactly and is not protected",
              file=sys.stderr)
    print(result.summary())
    if args.out:
        result.to_json(args.out, include_measurements=args.include_measurements)
        print(f"written: {args.out}")
    if args.describe:
        print()
        print(result.description)
    return 0


def register(sub) -> None:
    """Add the `release` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "release", help="release a private CDF and quantiles of a data column (secure noise)",
        description="Read a CSV/TSV (chunked, bounded memory) or Parquet column (or a counts "
                    "file), count it into K equal-width bins over [lower, upper), measure the "
                    "optimal (or given) tree with OpenDP's exact discrete Laplace/Gaussian "
                    "samplers, estimate (BLUE), make the CDF consistent, print quantiles with "
                    "intervals and write the full result as JSON. Bin rule: bin(x) = "
                    "min(floor(((x - lower) / (upper - lower)) * K), K - 1).",
        epilog="example: dptree-opt release incomes.csv --column income --lower 0 "
               "--upper 500000 --bins 1000 --epsilon 1 --out release.json")
    p.add_argument("file", nargs="?", help="CSV/TSV with a header row, or .parquet")
    p.add_argument("--column", help="column of FILE to release")
    p.add_argument("--counts", metavar="FILE",
                   help="instead of FILE: the K bin counts (one per line, or bin,count lines)")
    p.add_argument("--lower", type=float, required=True, help="lower end of the range")
    p.add_argument("--upper", type=float, required=True,
                   help="upper end of the range (excluded: the range is [lower, upper))")
    p.add_argument("--bins", type=int, required=True, help="number of equal-width bins K")
    p.add_argument("--epsilon", type=float, help="pure eps-DP (discrete Laplace noise)")
    p.add_argument("--rho", type=float, help="rho-zCDP (discrete Gaussian noise)")
    p.add_argument("--neighbours", choices=("add_remove", "swap"), default="add_remove",
                   help="add_remove (default: N protected) or swap (N released EXACTLY)")
    p.add_argument("--tree", default="optimal",
                   help="'optimal' (default: the optimiser's tree for the BLUE) or branching "
                        "factors k1,k2,... (root first; product >= bins)")
    p.add_argument("--budgets", choices=("equal", "optimal"), default="equal",
                   help="per-level budget split")
    p.add_argument("--out-of-range", choices=("error", "clip"), default="error",
                   help="values outside [lower, upper): error (default) or clip to the "
                        "first/last bin")
    p.add_argument("--quantiles", default=",".join(f"{q:g}" for q in DEFAULT_QUANTILES),
                   help="comma-separated probabilities (default %(default)s)")
    p.add_argument("--interval-level", type=float, default=0.95,
                   help="coverage of the quantile intervals (default 0.95)")
    p.add_argument("--consistency", choices=("l2", "l1", "none"), default="l2")
    p.add_argument("--delimiter", help="CSV delimiter (default ',' or tab for .tsv)")
    p.add_argument("--out", help="write the release as JSON to this file")
    p.add_argument("--include-measurements", action="store_true",
                   help="also write the noisy node answers to the JSON")
    p.add_argument("--describe", action="store_true",
                   help="print the full mechanism and privacy description")
    p.set_defaults(func=run)
