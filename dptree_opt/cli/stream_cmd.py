"""`dptree-opt stream`: private running counts over a stream (continual release, event level).

Input: a counts stream (``--counts FILE``, one count per step and line; ``--counts -`` reads
standard input line by line and answers each step as it arrives), or a data column of event times
(``FILE --column NAME --lower A --upper B --steps T``: each record is one event, counted at its
time step, the release's bin rule). A count line (files and standard input alike) holds a
non-negative integer below 2^53 in plain decimal digits: 7, +7, 007, 7.0 or "7", with
surrounding spaces, but not 1e3 (an exponent) or 7.5; at most 1024 characters; blank lines are
skipped and a first line "count" is a header. Output: one CSV line per step on standard output
(``step,estimate,standard_error``) between ``#`` lines (the privacy account first, the status
last); ``--out`` writes the same as JSON (account + steps + status), ``--plot`` a PNG/PDF/SVG of
the running counts with +-2 SE.

What is public. Privacy is event level: one event changes one step's count by one, so every
count and the total number of events are protected and are never printed or written (stdout,
stderr, JSON, plot); only the noisy running counts and their standard errors are. Public, and
shown: the horizon T (``--horizon``, or the number of lines of a counts file, or ``--steps``),
the time bins (``--lower/--upper/--steps``), the file names, the number of steps released and
where the stream stopped. Bad input in a counts file or a data column is refused before the
noise, with a message that quotes the bad line (at most 40 characters; nothing is released
then). On standard input a bad line (not a valid count, or a running count reaching 2^53)
stops the stream at that line; the steps before it are released, so the message (stderr,
stdout, JSON) says only that line N is not a valid count, and the rule: never what the line
holds or what is wrong with it, which would tell about a protected count.

Nothing lost. Everything is checked before any noise is drawn: the flags and their
combinations (``--quiet`` without ``--out`` or ``--plot`` is refused: the running counts would
be drawn and lost), the budget and options (``stream.Counter``, which also builds and checks
every OpenDP measurement), the output paths (a directory, a missing or unwritable directory,
the input file, an existing file without ``--force``), a counts file (read and validated in
full) or a data column (binned in full). Then the counter is made: ``tree_blue`` draws all its
noise then (drawn ahead, added to no count yet: nothing is released), the other mechanisms
draw at each step. Then ``--out`` is written once (status "running", no steps), before the
first step is drawn and released, and rewritten atomically (a temporary file moved into
place: a reader never sees a half-written JSON) as the stream goes: at most once a second and
at least 10 times the last write's duration apart (so the writes cost a bounded share of the
run, O(T) overall), always at the end, and, on standard input, whenever the stream waits for
its next line (so what was released is on disk within about a second). On any stop before
the end of the input (a bad line, a line past the horizon, SIGINT / SIGTERM / SIGHUP, an
error) the account and every released step are written with status "incomplete" and the
reason ("stopped"), and the command exits non-zero: 2 for bad input, 128 + the signal number
for a signal, 1 otherwise. A JSON whose status is
still "running" belongs to a stream that is running or was killed (SIGKILL, power loss). If the
reader of standard output goes away (``| head``), the stream goes on silently when ``--out`` or
``--plot`` is given (the file is then complete) and stops with status 141 otherwise.

Limits. The command holds what it writes: at most ``MAX_STEPS`` = 2^22 = 4194304 steps for
``--out`` / ``--plot`` (16 bytes a step in memory, about 40 in the JSON; secure noise costs
about 0.2 ms a step, so ~15 min at the limit), a counts file of at most 2^22 counts (validated
in full before the noise, so held in memory), and ``--steps`` <= 2^22; all checked before
anything is allocated. A line of a counts stream holds at most 1024 characters. For longer
streams, pipe the counts to ``--counts -`` without ``--out`` / ``--plot`` (nothing is then
held), or use the Python API (``dptree_opt.stream.Counter``: O(log T) state for the trees).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from dataclasses import dataclass

import numpy as np

from ..data_release.binning import BinSpec
from ..data_release.io import histogram_from_file
from ..limits import check_count
from .. import plotting
from ..privacy import check_budget
from ..stream import MECHANISMS, Counter
from ..stream.ahead import MAX_AHEAD_HORIZON
from ..stream.counter import MAX_HORIZON
from ..stream.factorization import MAX_SQRT_HORIZON
from ..stream.tree import MAX_BRANCHING
from ._common import EXIT_BROKEN_PIPE, FIGURE_SUFFIXES, Subparsers, output_file
from .stream_input import read_counts_file, stdin_counts
from .stream_process import Interrupted, StdoutLines, StopSignals, to_stderr
from .stream_release import PUBLIC, StreamRelease, WriteFailed

ORDER = 65  # position in `dptree-opt --help`

MAX_STEPS = 1 << 22     # steps held for --out / --plot, counts of a file, --steps
_TREES = ("binary", "kary")             # the mechanisms with --estimator and --unbounded
_GAUSSIAN_ONLY = ("sqrt", "blt")
# mechanisms whose noise is held in memory: their longest --horizon, and what to use beyond
_HORIZON_LIMITS = {
    "tree_blue": (MAX_AHEAD_HORIZON, ("all its noise is drawn and held when the stream starts; "
                                      "use --mechanism negative_digits, or binary / kary with "
                                      "--estimator causal")),
    "sqrt": (MAX_SQRT_HORIZON, "it keeps every past draw; use --mechanism blt"),
}


def register(sub: Subparsers) -> None:
    """Add the `stream` subcommand to the subparsers ``sub``."""
    doc = __doc__.split("\n\n", 1)[1].strip().replace("``", "")
    p = sub.add_parser(
        "stream", help="private running counts over a stream (continual release)",
        description=doc,
        epilog="examples:\n"
               "  dptree-opt stream --counts daily.txt --epsilon 1 --out run.json\n"
               "  tail -f events.log | my_counter | dptree-opt stream --counts - --horizon "
               "1000 --rho 0.5 --mechanism blt --out live.json\n"
               "  dptree-opt stream logins.csv --column time --lower 0 --upper 86400 "
               "--steps 1440 --epsilon 1 --estimator causal --plot run.png",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", help="data file (CSV/TSV/Parquet) with --column")
    p.add_argument("--counts", metavar="FILE", help="a counts stream: one count per line, a "
                   "non-negative integer in plain decimal digits ('-' = standard input, "
                   "answered line by line)")
    p.add_argument("--column", help="the column of event times in FILE")
    p.add_argument("--lower", type=float, help="start of the time range (with --column)")
    p.add_argument("--upper", type=float, help="end of the time range (with --column)")
    p.add_argument("--steps", type=int, help=f"number of time steps (with --column; at most "
                   f"{MAX_STEPS})")
    p.add_argument("--out-of-range", choices=("error", "clip"), default=None,
                   help="event times outside [lower, upper) (with --column): error (default) "
                        "or clip to the first/last step")
    p.add_argument("--epsilon", type=float, help="total eps (Laplace, pure eps-DP)")
    p.add_argument("--rho", type=float, help="total rho (Gaussian, rho-zCDP)")
    p.add_argument("--mechanism", choices=MECHANISMS, default="binary",
                   help="binary/kary tree, negative_digits (Andersson-Pagh), sqrt or blt "
                        "(Gaussian factorisations); default binary")
    p.add_argument("--branching", type=int, help="k for kary / negative_digits")
    p.add_argument("--estimator", choices=("covering", "causal"), default=None,
                   help="trees: covering sums (default) or the causal BLUE")
    p.add_argument("--horizon", type=int, help="T >= 1, the declared number of steps "
                   "(public; default: the steps of the file; needed for standard input "
                   "unless --unbounded)")
    p.add_argument("--unbounded", action="store_true",
                   help="no horizon (tree mechanisms; Chan-Shi-Song hybrid)")
    p.add_argument("--delimiter", help="CSV delimiter of FILE (default: by extension)")
    p.add_argument("--out", help="write the account, every released step and the status as "
                   "JSON (checked before the noise; kept up to date as the stream goes)")
    p.add_argument("--plot", help="write a PNG / PDF / SVG of the running counts with +-2 SE")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out / --plot")
    p.add_argument("--quiet", action="store_true", help="nothing on stdout (needs --out or "
                   "--plot: the release must be kept somewhere)")
    p.add_argument("--seed", type=int, help="SIMULATION noise from numpy with this seed "
                   "(NOT private; for trying the command). Default: OpenDP's secure noise")
    p.set_defaults(func=run)


# ------------------------------------------------------------------ checks before the noise
def _check_flags(args: argparse.Namespace) -> None:
    """The command's own flag combinations, checked first (before any file is looked at or
    the counter is built), so that a refusal names flags, not the library's parameters."""
    if (args.epsilon is None) == (args.rho is None):
        raise ValueError("give exactly one of --epsilon (pure DP, Laplace noise) or --rho "
                         "(zCDP, Gaussian noise)")
    if args.epsilon is not None:
        check_budget(args.epsilon, "--epsilon")
    else:
        check_budget(args.rho, "--rho")
    mech = args.mechanism
    if mech in _GAUSSIAN_ONLY and args.epsilon is not None:
        raise ValueError(f"--mechanism {mech} is Gaussian only (rho-zCDP, l2 sensitivity): "
                         "give --rho, not --epsilon")
    if args.unbounded and mech not in _TREES:
        raise ValueError(f"--unbounded needs --mechanism binary or kary (the unbounded counter "
                         f"is made of trees); --mechanism {mech} needs a known horizon: give "
                         "--horizon T, or a counts file")
    if args.estimator is not None and mech not in _TREES:
        raise ValueError(f"--estimator is for --mechanism binary or kary; --mechanism {mech} "
                         "has its own estimator: drop --estimator")
    _check_branching(mech, args.branching)
    if args.quiet and args.out is None and args.plot is None:
        raise ValueError("--quiet without --out or --plot would keep nothing of the release "
                         "(the noise would be drawn and the running counts lost): give --out "
                         "FILE.json or --plot FILE.png, or drop --quiet")


def _check_branching(mech: str, k: int | None) -> None:
    """--branching for --mechanism ``mech`` (None: not given)."""
    if mech == "binary":
        if k not in (None, 2):
            raise ValueError(f"--mechanism binary is the 2-ary tree: for --branching {k} use "
                             "--mechanism kary")
    elif mech in ("kary", "tree_blue"):
        if k is None and mech == "kary":
            raise ValueError("--mechanism kary needs --branching K (an integer >= 2)")
        if k is not None and not 2 <= k <= MAX_BRANCHING:
            raise ValueError(f"--branching must be an integer in 2..2^62 for --mechanism "
                             f"{mech}, got {k}")
    elif mech == "negative_digits":
        if k is not None and not (3 <= k <= MAX_HORIZON and k % 2 == 1):
            raise ValueError(f"--branching must be an odd integer in 3..2^40 for --mechanism "
                             f"negative_digits (balanced digits -(k-1)/2..(k-1)/2), got {k}")
    elif k is not None:
        raise ValueError(f"--branching is for the tree mechanisms (binary, kary, "
                         f"negative_digits, tree_blue); --mechanism {mech} takes none")


def _outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """(out, plot) checked paths (or None), before anything is read."""
    inputs = tuple(p for p in (args.file, args.counts) if p not in (None, "-"))
    out: Path | None = None
    plot: Path | None = None
    if args.out is not None:
        out = output_file(args.out, flag="--out", force=args.force, suffixes=(".json",),
                          inputs=inputs)
    if args.plot is not None:
        plot = output_file(args.plot, flag="--plot", force=args.force,
                           suffixes=FIGURE_SUFFIXES, inputs=inputs)
        if out is not None and plot.resolve() == out.resolve():
            raise ValueError("--plot and --out name the same file")
        try:
            import matplotlib  # noqa: F401  (checked now, not after the noise)
        except ImportError:
            raise ValueError("--plot needs matplotlib (pip install matplotlib)") from None
    return out, plot


def _horizon(args: argparse.Namespace, keeps: bool) -> int | None:
    """The declared horizon (None: none given), checked."""
    if args.horizon is None:
        return None
    if args.unbounded:
        raise ValueError("--unbounded and --horizon: give one")
    if not 1 <= args.horizon <= MAX_HORIZON:
        raise ValueError(f"--horizon must be a positive integer T <= 2^40 (the declared number "
                         f"of steps), got {args.horizon}")
    if args.mechanism in _HORIZON_LIMITS:
        top, why = _HORIZON_LIMITS[args.mechanism]
        check_count(args.horizon, top, f"--horizon {args.horizon} (--mechanism "
                    f"{args.mechanism})", why)
    if keeps:
        check_count(args.horizon, MAX_STEPS, f"--horizon {args.horizon} (with --out / --plot, "
                    "which hold every step)", "declare a shorter stream, or run without "
                    "--out / --plot (steps are then only printed)")
    return args.horizon


@dataclass(frozen=True)
class _Plan:
    """What the stream reads: ``source`` (a public description), ``horizon`` (None:
    unbounded), ``counts(wait)`` -> (line, count) pairs (``wait``: ``StreamRelease.wait``),
    ``interactive`` (standard input: each step is printed as it is released)."""
    source: str
    horizon: int | None
    counts: Callable[[Callable[[Callable[[float], bool]], object]],
                     Iterable[tuple[int, int]]]
    interactive: bool = False


def _plan(args: argparse.Namespace, keeps: bool) -> _Plan:
    """Check the arguments and read a counts file / data column in full (before the noise)."""
    horizon = _horizon(args, keeps)
    if args.counts is not None:
        if args.file or args.column:
            raise ValueError("--counts reads a counts stream: not with FILE / --column")
        if any(v is not None for v in (args.lower, args.upper, args.steps,
                                       args.out_of_range)):
            raise ValueError("--lower/--upper/--steps/--out-of-range bin a data --column; a "
                             "counts stream has one step per line")
        if args.delimiter is not None:
            raise ValueError("--delimiter is for a data FILE; a counts stream has one count "
                             "per line")
        if args.counts == "-":
            if horizon is None and not args.unbounded:
                raise ValueError("standard input: give --horizon T (the declared number of "
                                 "steps) or --unbounded")
            return _Plan("standard input", horizon, stdin_counts, interactive=True)
        if horizon is not None and horizon < MAX_STEPS:
            cap, why = horizon, f"the --horizon {horizon}"
        else:
            cap, why = MAX_STEPS, (f"the limit of a counts file, {MAX_STEPS}; pipe longer "
                                   "streams to --counts - (answered line by line)")
        counts = read_counts_file(args.counts, cap, why)
        return _Plan(f"counts file {args.counts}", None if args.unbounded else
                     horizon or counts.size, lambda wait: enumerate(counts.tolist(), 1))
    if args.file is None or args.column is None:
        raise ValueError("give --counts FILE (or -), or a data FILE with --column")
    if None in (args.lower, args.upper, args.steps):
        raise ValueError("--column needs --lower, --upper and --steps (the time bins)")
    if args.steps < 1:
        raise ValueError(f"--steps must be a positive integer (the number of time steps), got "
                         f"{args.steps}")
    check_count(args.steps, MAX_STEPS, f"--steps {args.steps}", "the steps are held in memory "
                "and secure noise costs ~0.2 ms a step: use wider time steps")
    if horizon is not None and horizon < args.steps:
        raise ValueError(f"--steps {args.steps} exceed the --horizon {horizon}")
    try:
        spec = BinSpec(args.lower, args.upper, args.steps)
    except ValueError as exc:
        raise ValueError(f"the time bins (--lower, --upper, --steps): {exc}") from None
    kw = {} if args.delimiter is None else {"delimiter": args.delimiter}
    hist, _ = histogram_from_file(args.file, args.column, spec,      # rows: protected
                                  out_of_range=args.out_of_range or "error", **kw)
    source = (f"{args.file}: column {args.column!r}, {args.steps} time steps over "
              f"[{args.lower:g}, {args.upper:g})")
    return _Plan(source, None if args.unbounded else horizon or args.steps,
                 lambda wait: enumerate(hist.tolist(), 1))


# ------------------------------------------------------------------ the command
class _ReaderGone(Exception):
    """Standard output was closed and nothing else keeps the release."""


def run(args: argparse.Namespace) -> int:
    """Check everything, build the counter (every OpenDP measurement checked), write the
    JSON's first version, then release step by step (module docstring)."""
    _check_flags(args)
    out, plot = _outputs(args)
    keeps = out is not None or plot is not None
    plan = _plan(args, keeps)
    options = {k: getattr(args, k) for k in ("branching", "estimator")
               if getattr(args, k) is not None}       # only what the user gave
    rng = None if args.seed is None else np.random.default_rng(args.seed)
    counter = Counter(plan.horizon, epsilon=args.epsilon, rho=args.rho,
                      mechanism=args.mechanism, rng=rng, **options)
    release = StreamRelease(out, force=args.force,
                            capacity=min(plan.horizon or MAX_STEPS, MAX_STEPS) if keeps else 0,
                            account=counter.account(), source=plan.source,
                            simulation=rng is not None)
    try:
        release.write()   # before the first draw: the account is on disk, the path works
    except (OSError, ValueError) as exc:
        raise ValueError(f"--out: cannot write {str(out)!r} "
                         f"({getattr(exc, 'strerror', None) or exc})") from None
    lines = StdoutLines(quiet=args.quiet, flush=plan.interactive)
    if release.simulation:
        lines.write(f"# SIMULATION, NOT PRIVATE (--seed {args.seed}: numpy noise): running "
                    f"counts of {plan.source}")
    else:
        lines.write(f"# private running counts (event-level DP) of {plan.source}")
    for line in _account_lines(release.account):
        lines.write(f"# {line}")
    lines.write(f"# {PUBLIC}")
    lines.write("step,estimate,standard_error")
    return _stream(plan, counter, release, lines, plot, args.force)


def _stream(plan: _Plan, counter: Counter, release: StreamRelease, lines: StdoutLines,
            plot: Path | None, force: bool) -> int:
    """Release every step, then write and report; any stop keeps what was released."""
    stop, code, unexpected = None, 0, None
    with StopSignals() as signals:
        try:
            try:
                _release_steps(plan, counter, release, lines, signals)
            finally:
                signals.hold_all()   # from here on, signals wait until the release is written
        except ValueError as exc:
            stop, code = str(exc), 2
        except Interrupted as exc:
            stop, code = f"interrupted by {exc.name}", 128 + exc.signum
        except KeyboardInterrupt:
            stop, code = "interrupted (KeyboardInterrupt)", 130
        except _ReaderGone:
            stop, code = "standard output was closed", EXIT_BROKEN_PIPE
        except WriteFailed as exc:
            stop, code = f"could not rewrite --out ({exc.args[0]})", 1
        except BaseException as exc:  # noqa: BLE001 - a bug: keep the release, then raise it
            stop, code, unexpected = f"unexpected error: {type(exc).__name__}: {exc}", 1, exc
        code = _finish(release, lines, plot, force, stop, code)
        if signals.pending is not None and code == 0:
            code = 128 + signals.pending
    if unexpected is not None:
        raise unexpected
    return code


def _release_steps(plan: _Plan, counter: Counter, release: StreamRelease, lines: StdoutLines,
                   signals: StopSignals) -> None:
    """The stream loop: each step is released, recorded and printed whole (signals held)."""
    horizon = plan.horizon
    if lines.broken and not release.keeps:
        raise _ReaderGone   # nobody would see a step: stop before the first draw
    for line_no, count in plan.counts(release.wait):
        with signals.held():
            if horizon is not None and counter.t >= horizon:
                raise ValueError(f"{plan.source}: line {line_no} is a step past the horizon "
                                 f"T = {horizon}: the stream is longer than declared "
                                 "(--horizon)")
            if release.full():   # only unbounded: a bounded stream stops at its horizon
                raise ValueError(f"{plan.source}: {MAX_STEPS} steps released: the most "
                                 "--out / --plot can hold; run without them for a longer "
                                 "stream")
            estimate = counter.update(count)
            se = math.sqrt(counter.variance)
            release.add(estimate, se)
            lines.write(f"{counter.t},{estimate:.10g},{se:.6g}")
            if lines.broken and not release.keeps:
                raise _ReaderGone
            release.maybe_write()
    if release.n == 0:
        raise ValueError(f"{plan.source}: no counts (empty input)")


def _finish(release: StreamRelease, lines: StdoutLines, plot: Path | None, force: bool,
            stop: str | None, code: int) -> int:
    """Write the final JSON and the plot, print the status; the exit status."""
    release.status = "complete" if stop is None else "incomplete"
    release.stopped = stop
    where, lost = "", False
    if release.out is not None:
        try:
            release.write()
            where = f", written to {str(release.out)!r}" + (
                "" if stop is None else ' (status "incomplete")')
        except (OSError, ValueError) as exc:   # never lose the release: to stdout / stderr
            to_stderr(f"dptree-opt: error: could not write {str(release.out)!r} "
                      f"({getattr(exc, 'strerror', None) or exc}); the release follows on "
                      f"{'stderr' if lines.broken else 'stdout'}")
            lost, code = True, code or 1
    tag = ("complete" if stop is None else f"INCOMPLETE, stopped: {stop}")
    lines.write(f"# status: {tag} ({release.n} steps)")
    if lost:
        (to_stderr if lines.broken else print)(release.text())
    lines.close()
    if plot is not None and release.n:
        try:
            _plot(plot, release, force)
            where += f"; plot {str(plot)!r}"
        except Exception as exc:  # noqa: BLE001 - the release is out and on disk: report it
            to_stderr(f"dptree-opt: error: could not write the plot {str(plot)!r} ({exc})")
            code = code or 1
    if code == EXIT_BROKEN_PIPE:
        return code   # the reader went away: nothing more to say
    sim = "SIMULATION, NOT PRIVATE: " if release.simulation else ""
    if stop is None:
        est, se = release.last
        to_stderr(f"{sim}{release.n} steps released ({release.account['mechanism']}){where}; "
                  f"final estimate {est:.6g} +- {se:.3g}")
    else:
        to_stderr(f"dptree-opt: error: {stop}")
        to_stderr(f"dptree-opt: {sim}the release is INCOMPLETE: {release.n} steps released "
                  f"before the stop{where}")
    return code


def _account_lines(account: dict[str, Any]) -> list[str]:
    """The privacy account as short ``key: value`` lines (lists one entry per line)."""
    lines = []
    for key, value in account.items():
        if isinstance(value, list):
            lines.append(f"{key}:")
            lines.extend(f"  {json.dumps(v)}" for v in value)
        else:
            lines.append(f"{key}: {json.dumps(value) if isinstance(value, dict) else value}")
    return lines


def _plot(path: Path, release: StreamRelease, force: bool) -> None:
    """The released running counts with +-2 SE, written atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = release.n
    t = np.arange(1, n + 1)
    est, se = release.estimate[:n], release.standard_error[:n]
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        ax.fill_between(t, est - 2 * se, est + 2 * se, alpha=0.3, label="+-2 SE")
        ax.plot(t, est, lw=1, label="private running count")
        ax.set_xlabel("step t")
        ax.set_ylabel("count")
        title = release.account["mechanism"]
        if release.simulation:
            title = f"SIMULATION, NOT PRIVATE: {title}"
        if release.status != "complete":
            title += f" (INCOMPLETE: {n} steps)"
        ax.set_title(title, fontsize=9)
        ax.legend()
        fig.tight_layout()
        plotting.save_figure(fig, path, force=force, dpi=120)
    finally:
        plt.close(fig)
