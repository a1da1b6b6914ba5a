"""`dptree-opt stream`: private running counts over a stream (continual release, event level).

Input: a counts stream (``--counts FILE``, one count per step and line; ``-`` reads standard
input line by line and answers each step as it arrives), or a data column of event times
(``FILE --column NAME --lower A --upper B --steps T``: each record is one event, counted at its
time step, the release's bin rule). Output: one CSV line per step on standard output
(``step,estimate,standard_error``) after ``#`` lines with the privacy account; ``--out`` writes
the same as JSON (account + steps), ``--plot`` a PNG of the running counts with +-2 SE.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

from ..stream import MECHANISMS, Counter

ORDER = 65  # position in `dptree-opt --help`


def register(sub) -> None:
    p = sub.add_parser(
        "stream", help="private running counts over a stream (continual release)",
        description=__doc__.split("\n\n", 1)[1].strip(),
        epilog="examples:\n"
               "  dptree-opt stream --counts daily.txt --epsilon 1 --out run.json\n"
               "  tail -f events.log | my_counter | dptree-opt stream --counts - --horizon "
               "1000 --rho 0.5 --mechanism blt\n"
               "  dptree-opt stream logins.csv --column time --lower 0 --upper 86400 "
               "--steps 1440 --epsilon 1 --estimator causal --plot run.png",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", help="data file (CSV/TSV/Parquet) with --column")
    p.add_argument("--counts", metavar="FILE", help="a counts stream: one count per line "
                   "('-' = standard input, answered line by line)")
    p.add_argument("--column", help="the column of event times in FILE")
    p.add_argument("--lower", type=float, help="start of the time range (with --column)")
    p.add_argument("--upper", type=float, help="end of the time range (with --column)")
    p.add_argument("--steps", type=int, help="number of time steps (with --column)")
    p.add_argument("--epsilon", type=float, help="total eps (Laplace, pure eps-DP)")
    p.add_argument("--rho", type=float, help="total rho (Gaussian, rho-zCDP)")
    p.add_argument("--mechanism", choices=MECHANISMS, default="binary",
                   help="binary/kary tree, negative_digits (Andersson-Pagh), sqrt or blt "
                        "(Gaussian factorisations); default binary")
    p.add_argument("--branching", type=int, help="k for kary / negative_digits")
    p.add_argument("--estimator", choices=("covering", "causal"), default=None,
                   help="trees: covering sums (default) or the causal BLUE")
    p.add_argument("--horizon", type=int, help="T, the declared number of steps (default: "
                   "the steps in the file; needed for standard input unless --unbounded)")
    p.add_argument("--unbounded", action="store_true",
                   help="no horizon (tree mechanisms; Chan-Shi-Song hybrid)")
    p.add_argument("--delimiter", help="CSV delimiter (default: by extension)")
    p.add_argument("--out", help="write the account and every step as JSON")
    p.add_argument("--plot", help="write a PNG of the running counts with +-2 SE")
    p.add_argument("--quiet", action="store_true", help="no per-step lines on stdout")
    p.add_argument("--seed", type=int, help="SIMULATION noise from numpy with this seed "
                   "(no privacy; for trying the command). Default: OpenDP's secure noise")
    p.set_defaults(func=run)


def _check_output(path, flag, suffixes, sources) -> None:
    if path is None:
        return
    if not str(path).lower().endswith(suffixes):
        raise ValueError(f"{flag}: expected a {'/'.join(suffixes)} file name, got {path!r}")
    for src in sources:
        if src not in (None, "-") and os.path.exists(src) and os.path.exists(path) \
                and os.path.samefile(src, path):
            raise ValueError(f"{flag} {path!r} is the input file: refusing to overwrite it")


def _counts_source(args):
    """(iterator of counts, horizon, description); files are read and validated in full
    before any noise is drawn; standard input is read line by line."""
    from ..data_release.io import count_lines, read_counts
    if args.counts is not None:
        if args.file or args.column:
            raise ValueError("--counts reads a counts stream: not with FILE / --column")
        if any(v is not None for v in (args.lower, args.upper, args.steps)):
            raise ValueError("--lower/--upper/--steps bin a data --column; a counts stream "
                             "has one step per line")
        if args.counts == "-":
            return ((c for _, c in count_lines(sys.stdin, "<stdin>")), None,
                    "standard input")
        counts = read_counts(args.counts, None)
        return iter(counts.tolist()), len(counts), args.counts
    if args.file is None or args.column is None:
        raise ValueError("give --counts FILE (or -), or a data FILE with --column")
    if None in (args.lower, args.upper, args.steps):
        raise ValueError("--column needs --lower, --upper and --steps (the time bins)")
    from ..data_release.binning import BinSpec
    from ..data_release.io import histogram_from_file
    kw = {} if args.delimiter is None else {"delimiter": args.delimiter}
    hist, rows = histogram_from_file(args.file, args.column,
                                     BinSpec(args.lower, args.upper, args.steps), **kw)
    return iter(hist.tolist()), len(hist), f"{args.file}: column {args.column!r} ({rows} events)"


def run(args) -> int:
    _check_output(args.out, "--out", (".json",), (args.file, args.counts))
    _check_output(args.plot, "--plot", (".png",), (args.file, args.counts))
    counts, n_steps, source = _counts_source(args)
    if args.unbounded and args.horizon is not None:
        raise ValueError("--unbounded and --horizon: give one")
    horizon = None if args.unbounded else (args.horizon or n_steps)
    if horizon is None and not args.unbounded:
        raise ValueError("standard input: give --horizon T (the declared number of steps) or "
                         "--unbounded")
    if n_steps is not None and horizon is not None and n_steps > horizon:
        raise ValueError(f"{source}: {n_steps} steps exceed the horizon {horizon}")
    options = {}
    if args.branching is not None:
        options["branching"] = args.branching
    if args.estimator is not None:
        options["estimator"] = args.estimator
    rng = None if args.seed is None else np.random.default_rng(args.seed)
    counter = Counter(horizon, epsilon=args.epsilon, rho=args.rho,
                      mechanism=args.mechanism, rng=rng, **options)
    account = counter.account()
    out = _Lines(quiet=args.quiet, flush=args.counts == "-")
    out.write(f"# private running counts of {source}")
    for line in _account_lines(account):
        out.write(f"# {line}")
    if rng is not None:
        out.write("# WARNING: --seed gives numpy SIMULATION noise: NOT private")
    out.write("step,estimate,standard_error")
    estimates, ses = [], []
    for count in counts:
        est = counter.update(count)
        se = math.sqrt(counter.variance)
        estimates.append(est)
        ses.append(se)
        out.write(f"{counter.t},{est:.10g},{se:.6g}")
    if args.out:
        def finite(xs):   # strict JSON: an unidentified step (no estimate) is null
            return [x if math.isfinite(x) else None for x in xs]
        doc = {"account": account, "source": source, "steps": counter.t,
               "estimate": finite(estimates), "standard_error": finite(ses)}
        with open(args.out, "w") as f:
            json.dump(doc, f, allow_nan=False, indent=1)
    if args.plot:
        _plot(args.plot, estimates, ses, account)
    print(f"{counter.t} steps released ({account['mechanism']}); final estimate "
          f"{estimates[-1] if estimates else 0:.6g} +- {ses[-1] if ses else 0:.3g}",
          file=sys.stderr)
    return 0


class _Lines:
    """Per-step lines on stdout; if the reader goes away (``| head``) the stream goes on
    silently so that --out / --plot are still written."""

    def __init__(self, quiet: bool, flush: bool):
        self.quiet, self.flush = quiet, flush

    def write(self, line: str) -> None:
        if self.quiet:
            return
        try:
            print(line, flush=self.flush)
        except BrokenPipeError:
            self.quiet = True
            sys.stdout = open(os.devnull, "w")   # no second error at interpreter exit


def _account_lines(account: dict) -> list[str]:
    """The privacy account as short ``key: value`` lines (lists one entry per line)."""
    lines = []
    for key, value in account.items():
        if isinstance(value, list):
            lines.append(f"{key}:")
            lines.extend(f"  {json.dumps(v)}" for v in value)
        else:
            lines.append(f"{key}: {json.dumps(value) if isinstance(value, dict) else value}")
    return lines


def _plot(path, estimates, ses, account) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = np.arange(1, len(estimates) + 1)
    est, se = np.asarray(estimates), np.asarray(ses)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(t, est - 2 * se, est + 2 * se, alpha=0.3, label="+-2 SE")
    ax.plot(t, est, lw=1, label="private running count")
    ax.set_xlabel("step t")
    ax.set_ylabel("count")
    ax.set_title(account["mechanism"], fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
