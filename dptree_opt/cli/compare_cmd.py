"""`dptree-opt compare`: exact errors of every mechanism side by side (dptree_opt.compare): 1-D
(--bins K), grids (--bins AxB) and streaming counters (--stream --horizon T)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .. import compare as cmp
from ..compare import format_number
from ..compare.stream import MAX_STREAM_HORIZON
from ..plotting import save_figure
from ._common import (FIGURE_SUFFIXES, Subparsers, add_budget_arguments, bins_arg,
                      budget_kwargs, output_file)

ORDER = 40  # position in `dptree-opt --help`

_NAMES = {"cdf": "CDF", "identity": "identity", "all_range": "all-range"}


def _parse_workloads(text: str) -> tuple[str, ...]:
    names = tuple(w.strip().replace("-", "_") for w in text.split(",") if w.strip())
    if not names:
        raise ValueError("--workloads: give at least one of cdf, identity, all_range")
    for w in names:
        if w not in cmp.WORKLOADS:
            raise ValueError(f"--workloads: unknown workload {w!r}; choose from "
                             f"{', '.join(cmp.WORKLOADS)}")
    return names


def _print_table(res: cmp.Comparison) -> None:
    s = res.setting
    unit = "eps" if s.noise == "laplace" else "rho"
    total = ("N public (invariant under swap)" if s.neighbours == "swap" else
             "N public (declared; N not protected)" if s.public else "N private (noised)")
    print(f"{s.n_bins} bins, {s.noise} noise, {unit} = {s.budget:g}, {s.neighbours} "
          f"neighbours, {total}")
    print("exact expected squared error per query (counts^2): mean and max over the "
          "workload's queries; rows sorted by mean error on the first workload")
    has_bound = any(v is not None for v in res.bounds.values())
    head = f"{'#':>2} {'mechanism':<38} {'strategy':<22} {'estimator':<9}"
    for wl in res.workloads:
        head += f" {_NAMES[wl] + ' mean':>14} {'max':>10}"
        if has_bound:
            head += f" {'/bound':>7}"
    print(head)
    print("-" * len(head))
    for i, r in enumerate(res.rows, start=1):
        if not r.available:
            continue
        line = f"{i:>2} {r.label[:38]:<38} {r.strategy[:22]:<22} {r.estimator:<9}"
        for wl in res.workloads:
            e = r.errors[wl]
            line += f" {format_number(e.mean):>14} {format_number(e.max):>10}"
            if has_bound:
                ratio = r.ratio_to_bound.get(wl)
                line += f" {ratio:>7.3f}" if ratio else f" {'n/a':>7}"
        print(line)
    if has_bound:
        print("SVD lower bound (mean per query): " + ", ".join(
            f"{_NAMES[wl]} {format_number(v)}" for wl, v in res.bounds.items()))
    if res.opendp is not None:
        o = res.opendp
        print(f"\nOpenDP itself (Monte Carlo, {o.trials} trials, {o.seconds:.1f} s): " + ", ".join(
            f"{_NAMES[wl]} mean {o.means[wl]:.4g} +- {o.std_errors[wl]:.2g} (1 SE)"
            for wl in res.workloads))
        print(f"  {o.note}; compare with the 'OpenDP default (emulated)' row x its "
              "discrete-Laplace factor")
    print("\nrows (what each emulates / its definition; notes):")
    for i, r in enumerate(res.rows, start=1):
        mark = "" if r.available else "  [not shown]"
        print(f"{i:>2} {r.label}: {r.emulates}.{mark}")
        if r.note:
            print(f"     {r.note}")
        notes = {e.note for e in r.errors.values() if e.note}
        for n in sorted(notes):
            print(f"     {n}")
    for n in res.notes:
        print("note: " + n)


def plot_path(arg: str, n_bins: int, force: bool = False) -> Path:
    """Where ``--plot ARG`` writes: ARG itself when it names a file (".png" appended when it
    has no suffix, as matplotlib would), ``ARG/compare_K<bins>.png`` when ARG is an existing
    directory. Checked before the comparison runs (``_common.output_file``): ValueError for
    a missing or unwritable directory, a suffix other than .png / .pdf / .svg, or an
    existing file without ``force`` (--force)."""
    if not arg:
        raise ValueError("--plot: expected a file name, e.g. compare.png")
    path = Path(arg)
    try:
        is_dir = path.is_dir()
    except OSError:  # a name too long, a symlink loop: output_file says which
        is_dir = False
    if arg.endswith(("/", os.sep)) and not is_dir:
        raise ValueError(f"--plot: directory {arg!r} does not exist")
    if is_dir:
        path = path / f"compare_K{n_bins}.png"
    elif not path.suffix:
        path = path.with_suffix(".png")
    return output_file(path, flag="--plot", force=force, suffixes=FIGURE_SUFFIXES)


def _plot(res: cmp.Comparison, path: Path, force: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter

    rows = [r for r in res.rows if r.available]
    fig, axes = plt.subplots(1, len(res.workloads), figsize=(5.6 * len(res.workloads), 6.5),
                             squeeze=False)
    s = res.setting
    unit = "eps" if s.noise == "laplace" else "rho"
    for ax, wl in zip(axes[0], res.workloads):
        pts = [(r.label, r.estimator, mean) for r in rows
               if (mean := r.errors[wl].mean) is not None]
        pts.sort(key=lambda p: p[2])
        labels = [f"{lab} [{est}]" for lab, est, _ in pts]
        vals = [v for _, _, v in pts]
        colors = ["tab:red" if "OpenDP" in lab or "Google" in lab or "binary" in lab
                  else "tab:blue" for lab, _, _ in pts]
        ax.barh(range(len(vals)), vals, color=colors, log=True)
        ax.set_yticks(range(len(vals)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        if vals:
            ax.set_xlim(min(vals) / 3, max(vals) * 3)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_locator(LogLocator(numticks=6))
        ax.set_xlabel("mean error per query (counts$^2$, log scale)")
        ax.set_title(f"{_NAMES[wl]} workload")
        if res.opendp is not None and wl in res.opendp.means:
            ax.axvline(res.opendp.means[wl], color="k", ls="--", lw=1,
                       label=f"OpenDP run ({res.opendp.trials} trials)")
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"dptree-opt compare: K = {s.n_bins} bins, {s.noise} {unit} = {s.budget:g}, "
                 f"{s.neighbours} neighbours; exact errors (red: deployed / classic mechanisms, "
                 "blue: others)",
                 fontsize=10)
    fig.tight_layout()
    try:
        save_figure(fig, path, force=force, dpi=120)
    finally:
        plt.close(fig)


def _run_grid(args: argparse.Namespace) -> int:
    """The 2-D / d-D mode (--bins AxB): dptree_opt.compare.compare_grid."""
    if args.plot is not None:
        raise ValueError("--plot draws the 1-D comparison only")
    cmp.check_cells(args.bins, "--bins " + "x".join(map(str, args.bins)))
    which = tuple(w.strip().replace("-", "_").replace("boxes", "all_range")
                  for w in (args.workloads or "cdf,all_range").split(",") if w.strip())
    t0 = time.perf_counter()
    res = cmp.compare_grid(args.bins, **budget_kwargs(args), noise=args.noise,
                           neighbours=args.neighbours,
                           public_total=True if args.public_total else None, workloads=which,
                           records=args.records, time_limit=args.time_limit)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({**res.as_dict(), "wall_seconds": seconds}, indent=2))
    else:
        print(cmp.format_table(res))
        print(f"({seconds:.1f} s)")
    return 0


def _run_stream(args: argparse.Namespace) -> int:
    """The streaming mode (--stream --horizon T): dptree_opt.compare.compare_stream."""
    for flag, value in (("--bins", args.bins), ("--plot", args.plot), ("--n", args.records),
                        ("--workloads", args.workloads)):
        if value is not None:
            raise ValueError(f"{flag} does not apply to --stream (the counters answer the "
                             "running count after each step)")
    if args.public_total or args.noise is not None or args.neighbours != "add_remove":
        raise ValueError("--stream counters are event level (one step's count changes by "
                         "one): --neighbours, --public-total and --noise do not apply (give "
                         "--epsilon for Laplace or --rho for Gaussian)")
    if args.horizon is None:
        raise ValueError("--stream needs --horizon T (the number of steps)")
    if not 1 <= args.horizon <= MAX_STREAM_HORIZON:
        raise ValueError(f"--horizon must be in [1, 2^22 = {MAX_STREAM_HORIZON}], got "
                         f"{args.horizon}")
    if args.top < 0:
        raise ValueError(f"--top must be >= 0 (0: every configuration), got {args.top}")
    budget = budget_kwargs(args)
    t0 = time.perf_counter()
    res = cmp.compare_stream(args.horizon, **budget, time_limit=args.time_limit)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({**res.as_dict(), "wall_seconds": seconds}, indent=2))
    else:
        print(res.format_table(top=args.top or None))
        print(f"({seconds:.1f} s)")
    return 0


def run(args: argparse.Namespace) -> int:
    """Print (or --json) the comparison table; --plot draws it."""
    if args.time_limit <= 0 or args.time_limit != args.time_limit:
        raise ValueError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    if args.stream:
        return _run_stream(args)
    if args.horizon is not None:
        raise ValueError("--horizon is for --stream (rank the streaming counters)")
    if args.bins is None:
        raise ValueError("--bins is required (K, or a grid AxB), or --stream --horizon T")
    if isinstance(args.bins, tuple):
        return _run_grid(args)
    args.workloads = args.workloads or "cdf,identity,all_range"
    if args.records is not None:
        raise ValueError("--n is for grids (UniformGrid's grid-size rule): use --bins AxB")
    if args.bins < 2:
        raise ValueError(f"--bins must be an integer >= 2, got {args.bins}")
    cmp.check_bins(args.bins, f"--bins {args.bins}")
    which = _parse_workloads(args.workloads)
    budget = budget_kwargs(args)
    plot = plot_path(args.plot, args.bins, args.force) if args.plot is not None else None
    t0 = time.perf_counter()
    res = cmp.compare(args.bins, **budget, noise=args.noise, neighbours=args.neighbours,
                      public_total=True if args.public_total else None, workloads=which,
                      opendp=(args.opendp_trials if args.opendp_trials > 0 else False),
                      opendp_time_limit=args.opendp_seconds, time_limit=args.time_limit)
    seconds = time.perf_counter() - t0
    code = 0
    if plot is not None:
        try:
            _plot(res, plot, force=args.force)
        except (OSError, ValueError) as exc:  # done: report (a full disk, a directory
            # removed meanwhile), and still print the comparison
            print(f"dptree-opt: error: could not write the plot {str(plot)!r} ({exc})",
                  file=sys.stderr)
            code, plot = 1, None
    if args.json:
        out = res.as_dict()
        out["seconds"] = seconds
        if plot is not None:
            out["plot"] = str(plot)
        print(json.dumps(out, indent=2))
        return code
    _print_table(res)
    print(f"({seconds:.1f} s)" + (f"; plot written to {plot}" if plot is not None else ""))
    return code


def register(sub: Subparsers) -> None:
    """Add the `compare` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "compare", help="exact mean/max per-query error of every mechanism on the CDF, "
                        "identity and all-range workloads (1-D, or a grid: --bins 256x256)",
        description="Build every mechanism the framework has (histogram, prefix sums, binary "
                    "tree with covering / refined / OLS, emulations of the Google and OpenDP "
                    "defaults, the [RTS] 17-ary tree, the best trees from optimize."
                    "level_uniform) for K bins and one budget, and print the exact mean and "
                    "max per-query expected squared error (counts^2) of each on the CDF "
                    "(prefix counts), identity (bins) and all-range workloads; the optimised "
                    "families and a 'best' row per workload come from optimize."
                    "best_mechanism, asked once per workload. When opendp is "
                    "installed (Laplace, add/remove, N private) OpenDP's own tree + "
                    "consistency postprocessor is also run (Monte Carlo). With --bins AxB "
                    "(a grid, e.g. 256x256) it compares grid mechanisms on the 2-D CDF and "
                    "all boxes instead (see --bins). With --stream --horizon T it ranks the "
                    "streaming counters (stream.Counter: every mechanism with its useful "
                    "options, incl. tree_blue on the trees optimize finds for T) by the exact "
                    "mean and max variance of the running counts.",
        epilog="examples: dptree-opt compare --bins 1024 --epsilon 1 --neighbours add_remove; "
               "dptree-opt compare --bins 256x256 --rho 0.5 (2-D); "
               "dptree-opt compare --stream --horizon 365 --epsilon 1 (streaming counters)")
    p.add_argument("--bins", type=bins_arg, default=None,
                   help="number of bins K (>= 2), or a grid AxB (e.g. 256x256, 64x32, 8x8x8): "
                        "2-D mode. It ranks on the grid's CDF (all dominance boxes) and all "
                        "boxes the flat grid, Kronecker trees and quadtrees (equal and "
                        "optimised budgets), HDMM's Kronecker p-Identity, the product of the "
                        "1-D Gaussian optima (Gaussian), and ektelo's HB2D, QuadTree and "
                        "UniformGrid plans (emulated; UniformGrid needs --n and reports its "
                        "noise variance only), with exact mean and max per-query errors, "
                        "ratios to the SVD bound and timings")
    add_budget_arguments(p)
    p.add_argument("--workloads", default=None,
                   help="comma-separated subset of cdf,identity,all_range (default: all three; "
                        "2-D: cdf,all_range)")
    p.add_argument("--n", dest="records", type=int, default=None, metavar="N",
                   help="2-D mode: the number of records N, for UniformGrid's grid-size rule "
                        "(cells of side ~ sqrt(cells * 10 / (N eps)))")
    p.add_argument("--plot", metavar="FILE.png",
                   help="bar chart (log scale) of mean errors, written to FILE.png (or .pdf, "
                        ".svg; no suffix: .png added; an existing directory: "
                        "DIR/compare_K<bins>.png). Checked before the comparison runs: its "
                        "directory must exist, and an existing file needs --force")
    p.add_argument("--force", action="store_true", help="overwrite an existing --plot file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--opendp-trials", type=int, default=2000,
                   help="max Monte Carlo trials of OpenDP itself (0: skip)")
    p.add_argument("--opendp-seconds", type=float, default=5.0,
                   help="time limit of the OpenDP run (at least 10 trials)")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="seconds given to optimize.best_mechanism per workload (the "
                        "optimised families and the 'best' rows); --stream: for the whole "
                        "ranking (default 60)")
    p.add_argument("--stream", action="store_true",
                   help="rank the streaming counters (stream.Counter) for --horizon T steps "
                        "instead: exact mean and max variance of the running counts")
    p.add_argument("--horizon", type=int, default=None, metavar="T",
                   help="--stream: the number of steps T (1 .. 2^22)")
    p.add_argument("--top", type=int, default=20,
                   help="--stream: how many configurations to list (0: all; default 20)")
    p.set_defaults(func=run)
