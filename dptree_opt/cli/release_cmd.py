"""`dptree-opt release`: a differentially private CDF and quantiles of a real data column."""

from __future__ import annotations

import sys

from ..data_release import DEFAULT_QUANTILES, release_file
from ..data_release.output import check_output_path

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
    """Check --out, read, bin, release; print the summary and write the JSON (``--out``).

    The output path is validated before any data is read (and so before the noise); if
    writing fails after the release, the JSON goes to stdout instead of being lost."""
    if (args.file is None) == (args.counts is None):
        raise ValueError("give a data FILE (with --column) or --counts FILE, not both")
    if args.file is not None and not args.column:
        raise ValueError("--column: name the column of FILE to release")
    out = (check_output_path(args.out, inputs=(args.file, args.counts), force=args.force)
           if args.out else None)
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
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    code = 0 if result.complete else 1
    if out is not None:
        kw = {"include_measurements": args.include_measurements}
        try:
            result.to_json(out, force=args.force, **kw)
            print(f"written: {out}")
        except OSError as exc:  # the release is made: never lose it
            print(f"dptree-opt: error: could not write {str(out)!r} ({exc}); the release "
                  "follows on stdout", file=sys.stderr)
            print(result.to_json(include_measurements=True))
            code = 1
    if args.describe:
        print()
        print(result.description)
    return code


def register(sub) -> None:
    """Add the `release` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "release", help="release a private CDF and quantiles of a data column (secure noise)",
        description="Read a CSV/TSV (chunked, bounded memory) or Parquet column (or a counts "
                    "file), count it into K equal-width bins over [lower, upper), measure the "
                    "optimal (or given) tree with OpenDP's exact discrete Laplace/Gaussian "
                    "samplers, estimate (BLUE), make the CDF consistent, print quantiles with "
                    "intervals and write the full result as JSON. Bins: edges e_i = lower + "
                    "(upper - lower) * i / K (double precision), bin(x) = i iff e_i <= x < "
                    "e_(i+1). Everything is validated before the noise is drawn.",
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
    p.add_argument("--budgets", choices=("equal", "optimal"), default="optimal",
                   help="per-level budget split (default: optimal for the BLUE)")
    p.add_argument("--out-of-range", choices=("error", "clip"), default="error",
                   help="values outside [lower, upper): error (default) or clip to the "
                        "first/last bin")
    p.add_argument("--quantiles", default=",".join(f"{q:g}" for q in DEFAULT_QUANTILES),
                   help="comma-separated probabilities (default %(default)s)")
    p.add_argument("--interval-level", type=float, default=0.95,
                   help="coverage of the quantile intervals (default 0.95)")
    p.add_argument("--consistency", choices=("l2", "l1", "none"), default="l2")
    p.add_argument("--delimiter", help="CSV delimiter (default ',' or tab for .tsv)")
    p.add_argument("--out", help="write the release as JSON to this file (checked before the "
                                 "data are read; never the input file)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.add_argument("--include-measurements", action="store_true",
                   help="also write the noisy node answers to the JSON")
    p.add_argument("--describe", action="store_true",
                   help="print the full mechanism and privacy description")
    p.set_defaults(func=run)
