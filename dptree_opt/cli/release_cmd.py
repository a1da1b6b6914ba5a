"""`dptree-opt release`: a differentially private CDF and quantiles of a real data column, or
a d-D histogram of several columns with box counts (``--columns x,y``); read by the built-in
pyarrow block reader, or counted inside a data engine (``--engine duckdb|dask|spark|...``,
``data_release.sources``: docs/data_engines.md)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .. import optimize, workloads
from ..data_release import (DEFAULT_QUANTILES, GridRelease, Release, default_cdf_error,
                            release_file)
from ..data_release.binning import BinSpec
from ..data_release.checks import budget_choice
from ..data_release.core import release
from ..data_release.grid import default_grid_error
from ..data_release.sources import source_named, source_names
from ..files import StrPath
from ..optimize import Design
from ..plotting import save_figure
from ._common import FIGURE_SUFFIXES, Subparsers, output_file, stdout_closed

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ORDER = 60  # position in `dptree-opt --help`
_DEFAULT_QUANTILES = ",".join(f"{q:g}" for q in DEFAULT_QUANTILES)


def _items(text: str, flag: str, sep: str = ",") -> list[str]:
    """The ``sep``-separated items of ``text``, stripped; an empty item (``1,,2``, a
    trailing comma) is refused: it is a typo, never silently dropped."""
    items = [v.strip() for v in text.split(sep)]
    if not all(items):
        raise ValueError(f"{flag}: an empty value in {text!r} (two separators in a row, or "
                         "one at an end)")
    return items


def _floats(text: str, flag: str) -> tuple[float, ...]:
    items = _items(text, flag)
    try:
        return tuple(float(v) for v in items)
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


def _tree(text: str, grid: bool = False) -> str | list[int] | list[list[int]]:
    if text.strip().lower() == "optimal":
        return "optimal"
    axes = [_items(axis, "--tree") for axis in (_items(text, "--tree", ";") if grid else [text])]
    try:
        lists = [[int(v) for v in axis] for axis in axes]
    except ValueError:
        raise ValueError(f"--tree: expected 'optimal' or branching factors like 4,8,32 (a grid: "
                         f"one list per axis separated by ';', e.g. '2,2,4;4,4'), got "
                         f"{text!r}") from None
    return lists if grid else lists[0]


def _ints(text: str, flag: str) -> tuple[int, ...]:
    items = _items(text.lower().replace("x", ","), flag)
    try:
        return tuple(int(v) for v in items)
    except ValueError:
        raise ValueError(f"{flag}: expected an integer, or one per axis like 64,64 or 64x64, "
                         f"got {text!r}") from None


def _check_design_flags(args: argparse.Namespace) -> None:
    """--design auto chooses the strategy: --tree and --budgets must be left out, and
    --design-time-limit is a positive number of seconds (checked before any work)."""
    if args.design is None:
        if args.design_time_limit is not None:
            raise ValueError("--design-time-limit needs --design auto")
        return
    if args.tree.strip().lower() != "optimal" or args.budgets != "optimal":
        raise ValueError("--design auto chooses the strategy: leave out --tree and --budgets")
    limit = args.design_time_limit
    if limit is not None and not (math.isfinite(limit) and limit > 0):
        raise ValueError(f"--design-time-limit must be a number of seconds > 0, got {limit!r}")
    if (args.epsilon is None) == (args.rho is None):
        raise ValueError("give exactly one of --epsilon or --rho")


def _auto_design(args: argparse.Namespace, bins: int | Sequence[int],
                 workload: str | None = None) -> tuple[Design, list[str]]:
    """--design auto: ``optimize.best_mechanism(..., releasable=True)`` for the CDF of the
    bins (a grid: ``--workload``, all boxes by default), and the lines saying which family
    won and its exact mean error next to the default release's (the same workload and
    noise model: continuous noise of the designs' scales, ``Design.mean``)."""
    budget = {"epsilon": args.epsilon} if args.epsilon is not None else {"rho": args.rho}
    limit = 60.0 if args.design_time_limit is None else float(args.design_time_limit)
    t0 = time.perf_counter()
    # 1-D: K bins (the CDF; workload None); a grid: its shape and workload (all boxes by default)
    workload = workload or "all_range"
    if isinstance(bins, int):
        w, what = workloads.prefix(bins), "CDF error per prefix"
    else:
        shape = tuple(bins)
        w = workloads.prefix(shape) if workload == "prefix" else workloads.all_range(shape)
        what = "d-D CDF error per prefix" if workload == "prefix" else "error per box"
    d = optimize.best_mechanism(w, neighbours=args.neighbours, releasable=True,
                                time_limit=limit, **budget)
    if isinstance(bins, int):
        default = default_cdf_error(bins, neighbours=args.neighbours, discrete=False, **budget)
        default_what = "the default release (the optimal level-uniform tree)"
    else:
        default = default_grid_error(list(bins), neighbours=args.neighbours,
                                     workload=workload, **budget)
        default_what = "the default release (the optimal Kronecker product of trees)"
    lines = [f"design auto: {d.family} won among {1 + len(d.alternatives)} releasable "
             f"families in {time.perf_counter() - t0:.3g} s ({d.mechanism().strategy.name})",
             f"  exact mean {what}: {d.mean:.6g} (counts^2); {default_what}: {default:.6g} "
             "(both under continuous noise of their scales; the release's own, under the "
             "discrete noise, follows)"]
    return d, lines


def _engine_table(args: argparse.Namespace, columns: Sequence[str], lower: Sequence[float],
                  upper: Sequence[float], bins: Sequence[int]) -> Any:
    """--engine: the engine's object reading FILE (a path or glob) through its adapter's
    ``open_files``; the flags and the bins are checked first (opening may start an engine)."""
    if args.counts is not None or args.file is None:
        raise ValueError("--engine reads a data FILE (a path or a glob such as "
                         "'data/*.parquet'), not --counts")
    if args.delimiter is not None:
        raise ValueError("--delimiter is for the built-in reader; with --engine the engine "
                         "detects the CSV format")
    if len(lower) == len(upper) == len(bins):
        for lo, up, k in zip(lower, upper, bins):  # over axes: ValueError before the engine
            BinSpec(lo, up, k)
    if args.design is None:  # (a design brings its own budget: checked by the release)
        budget_choice(args.epsilon, args.rho)
    try:
        return source_named(args.engine).open_files(args.file, list(columns))
    except ImportError as exc:  # the engine is an optional dependency
        raise ValueError(f"--engine {args.engine}: {exc.name or exc} is not installed "
                         "(pip install 'dptree-opt[engines]')") from None


def _grid_run(args: argparse.Namespace, out: Path | None) -> int:
    """The grid release of ``--columns``: summary, JSON (``--out``), heat map (``--plot``)."""
    columns = _items(args.columns, "--columns")
    if args.counts is not None or args.column:
        raise ValueError("--columns reads a data FILE: not with --column or --counts")
    if args.file is None:
        raise ValueError("--columns: give the data FILE to read them from")
    bins = _ints(args.bins, "--bins")
    if len(bins) == 1:
        bins = bins * len(columns)  # --bins 64 with --columns x,y: 64 per axis
    lower, upper = _floats(args.lower, "--lower"), _floats(args.upper, "--upper")
    if args.quantiles != _DEFAULT_QUANTILES or args.interval_level != 0.95:
        raise ValueError("--quantiles and --interval-level are for a one-column release; a grid "
                         "release gives cells and box counts")
    if args.consistency == "l1":
        raise ValueError("--consistency l1 is for a one-column release; a grid takes l2 or none")
    _check_design_flags(args)
    table = _engine_table(args, columns, lower, upper, bins) if args.engine else None
    design, lines = (None, []) if args.design is None else _auto_design(
        args, bins, args.workload)
    kw = dict(lower=lower, upper=upper, bins=bins, epsilon=args.epsilon, rho=args.rho,
              tree=_tree(args.tree, grid=True), neighbours=args.neighbours,
              out_of_range=args.out_of_range,
              consistency=None if args.consistency == "none" else args.consistency,
              budgets=args.budgets, workload=None if design is not None else args.workload,
              design=design)
    if table is not None:
        result = release(table, columns=columns, **kw)
    else:
        result = release_file(args.file, columns=columns, delimiter=args.delimiter, **kw)
    header = (f"private {len(columns)}-D release of columns "
              f"{', '.join(map(repr, columns))} of {args.file}{_by(args)}")
    return _finish(args, out, result, "\n".join([header] + lines))


def _by(args: argparse.Namespace) -> str:
    """The header's note on the engine that counted the data (--engine)."""
    return f" (counted by {args.engine})" if args.engine else ""


def _finish(args: argparse.Namespace, out: Path | None, result: Release | GridRelease,
            header: str) -> int:
    """Write the JSON (``--out``) and the plot FIRST, then print the header and summary, then
    the notes; the exit status. The release is made (the budget is spent): nothing here may
    lose it, so the files are written before anything goes to standard output (which may be
    a pipe closed early), and a failure to write (or Ctrl-C while writing) is reported, not
    raised: the release then goes to standard output."""
    code = 0 if result.complete else 1
    json_error = plot_error = None
    if out is not None:
        try:
            result.to_json(out, force=args.force,
                           include_measurements=args.include_measurements)
        except (OSError, ValueError, KeyboardInterrupt) as exc:  # never lose the release
            json_error, code = _failure(exc, with_type=False), 1
    if args.plot:
        try:
            _plot(result, args.plot, args.force)
        except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - report, keep going
            plot_error, code = _failure(exc, with_type=True), 1
    if result.total_public:
        print("WARNING: swap neighbours: N is released exactly and is not protected",
              file=sys.stderr)
    if json_error is not None:
        print(f"dptree-opt: error: could not write {str(out)!r} ({json_error}); the release "
              "follows on stdout", file=sys.stderr)
    if plot_error is not None:
        print(f"dptree-opt: error: could not write the plot {args.plot!r} ({plot_error})",
              file=sys.stderr)
    try:
        print(header)
        print(result.summary())
        if out is not None:
            if json_error is None:
                print(f"written: {out}")
            else:
                print(result.to_json(include_measurements=True))
        if args.plot and plot_error is None:
            print(f"plot: {args.plot}")
        if args.describe:
            print()
            print(result.description)
        sys.stdout.flush()
    except BrokenPipeError:   # the reader went away: the release must not go with it
        code = stdout_closed()
        if out is None or json_error is not None:
            try:
                print("dptree-opt: standard output was closed and no --out holds the "
                      "release: it follows on stderr", file=sys.stderr)
                print(result.to_json(include_measurements=True), file=sys.stderr)
            except OSError:
                pass
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return code


def _failure(exc: BaseException, with_type: bool) -> str:
    """What went wrong while writing an output file, for the error message."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}" if with_type else str(exc)


def _plot(result: Release | GridRelease, path: StrPath, force: bool) -> None:
    """Draw the release (CDF or heat map) into ``path`` (png, pdf or svg), atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ax = result.plot()
    # the plot's axes are made by plt.subplots: their figure is a Figure, not a SubFigure
    fig = cast("Figure", (ax[0] if isinstance(ax, list) else ax).figure)
    try:
        fig.tight_layout()
        save_figure(fig, path, force=force, dpi=110)
    finally:
        plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Check --out, read, bin, release; print the summary and write the JSON (``--out``).

    The output path is validated before any data is read (and so before the noise); if
    writing fails after the release, the JSON goes to stdout instead of being lost."""
    out = (output_file(args.out, inputs=(args.file, args.counts), force=args.force,
                       flag="--out", suffixes=(".json",)) if args.out else None)
    if args.plot:
        plot = output_file(args.plot, inputs=(args.file, args.counts), force=args.force,
                           flag="--plot", suffixes=FIGURE_SUFFIXES)
        if out is not None and plot.resolve() == out.resolve():
            raise ValueError("--plot and --out name the same file")
    if args.columns:
        return _grid_run(args, out)
    if (args.file is None) == (args.counts is None):
        raise ValueError("give a data FILE (with --column or --columns) or --counts FILE, not "
                         "both")
    if args.file is not None and not args.column:
        raise ValueError("--column: name the column of FILE to release (or --columns x,y for "
                         "a grid)")
    if args.workload is not None:
        raise ValueError("--workload is for a grid release (--columns)")
    lower, upper, bins = (_floats(args.lower, "--lower"), _floats(args.upper, "--upper"),
                          _ints(args.bins, "--bins"))
    if len(lower) != 1 or len(upper) != 1 or len(bins) != 1:
        raise ValueError("several values in --lower / --upper / --bins need --columns (one "
                         "column per axis)")
    _check_design_flags(args)
    quantiles = _floats(args.quantiles, "--quantiles") if args.quantiles.strip() else ()
    table = (_engine_table(args, (args.column,), lower, upper, bins) if args.engine
             else None)
    design, lines = (None, []) if args.design is None else _auto_design(args, bins[0])
    kw = dict(lower=lower[0], upper=upper[0], bins=bins[0], epsilon=args.epsilon,
              rho=args.rho, tree=_tree(args.tree), neighbours=args.neighbours,
              out_of_range=args.out_of_range, quantiles=quantiles,
              consistency=None if args.consistency == "none" else args.consistency,
              budgets=args.budgets, interval_level=args.interval_level, design=design)
    if table is not None:
        result = release(table, column=args.column, **kw)
    else:
        result = release_file(args.file, column=args.column, counts_file=args.counts,
                              delimiter=args.delimiter, **kw)
    source = (f"column {args.column!r} of {args.file}{_by(args)}" if args.file is not None
              else f"counts file {args.counts}")
    return _finish(args, out, result, "\n".join([f"private release of {source}"] + lines))


def register(sub: Subparsers) -> None:
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
        epilog="examples: dptree-opt release incomes.csv --column income --lower 0 "
               "--upper 500000 --bins 1000 --epsilon 1 --out release.json; a 2-D histogram: "
               "dptree-opt release trips.csv --columns lon,lat --lower -74.3,40.5 --upper "
               "-73.7,40.95 --bins 64,64 --epsilon 1 --out grid.json --plot grid.png; "
               "counted in DuckDB from many files: dptree-opt release --engine duckdb "
               "'data/*.parquet' --column income --lower 0 --upper 500000 --bins 1000 "
               "--epsilon 1")
    p.add_argument("file", nargs="?", metavar="PATH_OR_GLOB",
                   help="CSV/TSV with a header row, or .parquet; with --engine also a glob "
                        "('data/*.parquet', quoted) of such files")
    p.add_argument("--engine", choices=source_names(), default=None,
                   help="count the data inside a data engine instead of the built-in pyarrow "
                        "block reader: duckdb (SQL generated from the bins, run in DuckDB), "
                        "dask, spark, pandas or polars (if installed). Same bins, same rules "
                        "(NULL/NaN/inf: error; outside [lower, upper): --out-of-range; "
                        "integers beyond 2^53: error); docs/data_engines.md")
    p.add_argument("--column", help="column of FILE to release")
    p.add_argument("--columns", metavar="X,Y",
                   help="a grid release: comma-separated columns of FILE, one per axis; then "
                        "--lower/--upper/--bins take one value per axis (e.g. 0,0 / 10,5 / "
                        "64,64 or 64x64) and the output is a d-D histogram with box counts")
    p.add_argument("--counts", metavar="FILE",
                   help="instead of FILE: the K bin counts (one per line, or bin,count lines)")
    p.add_argument("--lower", required=True,
                   help="lower end of the range (a grid: one per axis, e.g. 0,0)")
    p.add_argument("--upper", required=True,
                   help="upper end of the range, excluded: [lower, upper) (a grid: one per axis)")
    p.add_argument("--bins", required=True,
                   help="number of equal-width bins K (a grid: one per axis, e.g. 64,64 or 64x64)")
    p.add_argument("--epsilon", type=float, help="pure eps-DP (discrete Laplace noise)")
    p.add_argument("--rho", type=float, help="rho-zCDP (discrete Gaussian noise)")
    p.add_argument("--neighbours", choices=("add_remove", "swap"), default="add_remove",
                   help="add_remove (default: N protected) or swap (N released EXACTLY)")
    p.add_argument("--tree", default="optimal",
                   help="'optimal' (default: the optimiser's tree for the BLUE) or branching "
                        "factors k1,k2,... (root first; product >= bins); a grid: one list per "
                        "axis separated by ';', e.g. '2,2,4;4,4'")
    p.add_argument("--workload", choices=("all_range", "prefix"), default=None,
                   help="a grid: what the design minimises, all boxes (default) or the d-D CDF")
    p.add_argument("--budgets", choices=("equal", "optimal"), default="optimal",
                   help="per-level budget split (default: optimal for the BLUE)")
    p.add_argument("--design", choices=("auto",), default=None,
                   help="auto: release the best releasable design of optimize.best_mechanism "
                        "for the CDF (a grid: --workload) instead of the optimal tree, and "
                        "print which family won and its exact mean error next to the "
                        "default's (not with --tree / --budgets)")
    p.add_argument("--design-time-limit", type=float, default=None, metavar="SECONDS",
                   help="time limit of the --design auto search (default 60)")
    p.add_argument("--out-of-range", choices=("error", "clip"), default="error",
                   help="values outside [lower, upper): error (default) or clip to the "
                        "first/last bin")
    p.add_argument("--quantiles", default=_DEFAULT_QUANTILES,
                   help="comma-separated probabilities (default %(default)s; '': none)")
    p.add_argument("--interval-level", type=float, default=0.95,
                   help="coverage of the quantile intervals (default 0.95)")
    p.add_argument("--consistency", choices=("l2", "l1", "none"), default="l2",
                   help="projection of the estimate: l2 (default), l1 (one column only) or none")
    p.add_argument("--delimiter", help="CSV delimiter (default ',' or tab for .tsv)")
    p.add_argument("--out", help="write the release as JSON to this file (checked before the "
                                 "data are read; never the input file)")
    p.add_argument("--plot", metavar="PNG",
                   help="also draw the release: the CDF with quantiles, or a grid's heat map")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing --out / --plot file")
    p.add_argument("--include-measurements", action="store_true",
                   help="also write the noisy node answers to the JSON")
    p.add_argument("--describe", action="store_true",
                   help="print the full mechanism and privacy description")
    p.set_defaults(func=run)
