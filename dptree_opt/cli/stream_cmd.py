"""`dptree-opt stream`: private running counts over a stream (continual release, event level).

Input: a counts stream (``--counts FILE``, one count per step and line; ``--counts -`` reads
standard input line by line and answers each step as it arrives), or a data column of event times
(``FILE --column NAME --lower A --upper B --steps T``: each record is one event, counted at its
time step, the release's bin rule). Output: one CSV line per step on standard output
(``step,estimate,standard_error``) between ``#`` lines (the privacy account first, the status
last); ``--out`` writes the same as JSON (account + steps + status), ``--plot`` a PNG/PDF/SVG of
the running counts with +-2 SE.

What is public. Privacy is event level: one event changes one step's count by one, so every
count and the total number of events are protected and are never printed or written (stdout,
stderr, JSON, plot); only the noisy running counts and their standard errors are. Public, and
shown: the horizon T (``--horizon``, or the number of lines of a counts file, or ``--steps``),
the time bins (``--lower/--upper/--steps``), the file names, the number of steps released and
where the stream stopped. Bad input is refused with a message about it, as in ``release``: before
the noise for files and data columns (nothing is released then); on standard input an invalid
line (not a count, or a running count reaching 2^53) stops the stream at that line, which says
that much about the input (the message quotes at most 40 characters of the line).

Nothing lost. Everything is checked before the first noise draw: the arguments, the budget
and options (``stream.Counter``, which also builds and checks every OpenDP measurement), the
output paths (a directory, a missing or unwritable directory, the input file, an existing file
without ``--force``), a counts file (read and validated in full) or a data column (binned in
full). Then ``--out`` is written once (status "running", no steps) before the first draw, and
rewritten atomically (a temporary file moved into place: a reader never sees a half-written
JSON) as the stream goes: at most once a second and at least 10 times the last write's
duration apart (so the writes cost a bounded share of the run, O(T) overall), always at the
end, and, on standard input, whenever the stream waits for its next line (so what was released
is on disk within about a second). On any stop before the end of the input (a bad line, a line
past the horizon, SIGINT / SIGTERM / SIGHUP, an error) the account and every released step are
written with status "incomplete" and the reason ("stopped"), and the command exits non-zero:
2 for bad input, 128 + the signal number for a signal, 1 otherwise. A JSON whose status is
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
import contextlib
import itertools
import json
import math
import os
import re
import signal
import sys
import threading
import time

import numpy as np

from ..stream import MECHANISMS, Counter
from ..stream.counter import MAX_HORIZON
from ._common import EXIT_BROKEN_PIPE, FIGURE_SUFFIXES, output_file, stdout_closed

ORDER = 65  # position in `dptree-opt --help`

MAX_STEPS = 1 << 22     # steps held for --out / --plot, counts of a file, --steps
FLUSH_SECONDS = 1.0     # --out is rewritten at most this often ...
FLUSH_COST = 10.0       # ... and at least this many times the last write's duration apart
_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
_LINE_END = re.compile(rb"\r\n|\r|\n")
_READ_BYTES = 1 << 16
_clock = time.monotonic
PUBLIC = ("public (not protected): the horizon T, the time bins, the number of steps released "
          "and where the stream stopped; protected (event level): every count and the total")


def register(sub) -> None:
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
    p.add_argument("--counts", metavar="FILE", help="a counts stream: one count per line "
                   "('-' = standard input, answered line by line)")
    p.add_argument("--column", help="the column of event times in FILE")
    p.add_argument("--lower", type=float, help="start of the time range (with --column)")
    p.add_argument("--upper", type=float, help="end of the time range (with --column)")
    p.add_argument("--steps", type=int, help=f"number of time steps (with --column; at most "
                   f"2^22 = {MAX_STEPS})")
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
    p.add_argument("--quiet", action="store_true", help="nothing on stdout")
    p.add_argument("--seed", type=int, help="SIMULATION noise from numpy with this seed "
                   "(NOT private; for trying the command). Default: OpenDP's secure noise")
    p.set_defaults(func=run)


# ------------------------------------------------------------------ checks before the noise
def _outputs(args):
    """(out, plot) checked paths (or None), before anything is read."""
    inputs = tuple(p for p in (args.file, args.counts) if p not in (None, "-"))
    out = plot = None
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


def _horizon(args, keeps: bool):
    """The declared horizon (None: none given), checked."""
    if args.horizon is None:
        return None
    if args.unbounded:
        raise ValueError("--unbounded and --horizon: give one")
    if not 1 <= args.horizon <= MAX_HORIZON:
        raise ValueError(f"--horizon must be a positive integer T <= 2^40 (the declared number "
                         f"of steps), got {args.horizon}")
    if keeps and args.horizon > MAX_STEPS:
        raise ValueError(f"--horizon {args.horizon} is above the {MAX_STEPS} steps (2^22) that "
                         "--out / --plot can hold; declare a shorter stream, or run without "
                         "--out / --plot (steps are then only printed)")
    return args.horizon


def _counts_file(path: str, cap: int, why: str) -> np.ndarray:
    """The counts of a counts-stream file (int64, one per line), validated in full; more than
    ``cap`` counts is refused (``why`` says which limit) after reading at most cap + 1."""
    from ..data_release.io import check_input_path, count_lines
    path = check_input_path(path, "--counts")
    source = f"counts file {path}"
    try:
        with open(path, "rb") as f:
            counts = count_lines(_byte_lines(f.read, source), source)
            values = np.fromiter((c for _, c in itertools.islice(counts, cap + 1)),
                                 dtype=np.int64)
    except OSError as exc:
        raise ValueError(f"--counts: cannot read {path!r} ({exc.strerror or exc})") from None
    if values.size > cap:
        raise ValueError(f"{source} holds more than {cap} counts: they exceed {why}")
    if values.size == 0:
        raise ValueError(f"{source}: no counts (empty input)")
    return values


class _Plan:
    """What the stream reads: ``source`` (a public description), ``horizon`` (None:
    unbounded), ``interactive`` (standard input), ``counts(wait)`` -> (line, count) pairs."""

    def __init__(self, source, horizon, counts, interactive=False):
        self.source, self.horizon, self._counts = source, horizon, counts
        self.interactive = interactive

    def counts(self, wait):
        return self._counts(wait)


def _plan(args, keeps: bool) -> _Plan:
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
            return _Plan("standard input", horizon, _stdin_counts, interactive=True)
        cap, why = MAX_STEPS, "the limit of a counts file, 2^22; pipe longer streams to " \
                              "--counts - (answered line by line)"
        if horizon is not None and horizon < cap:
            cap, why = horizon, f"the --horizon {horizon}"
        counts = _counts_file(args.counts, cap, why)
        return _Plan(f"counts file {args.counts}", None if args.unbounded else
                     horizon or counts.size, lambda wait: enumerate(counts.tolist(), 1))
    if args.file is None or args.column is None:
        raise ValueError("give --counts FILE (or -), or a data FILE with --column")
    if None in (args.lower, args.upper, args.steps):
        raise ValueError("--column needs --lower, --upper and --steps (the time bins)")
    if not 1 <= args.steps <= MAX_STEPS:
        raise ValueError(f"--steps must be an integer in 1..{MAX_STEPS} (2^22: the steps are "
                         f"held in memory, and secure noise costs ~0.2 ms a step), got "
                         f"{args.steps}; use wider time steps")
    if horizon is not None and horizon < args.steps:
        raise ValueError(f"--steps {args.steps} exceed the --horizon {horizon}")
    from ..data_release.binning import BinSpec
    from ..data_release.io import histogram_from_file
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


# ------------------------------------------------------------------ reading a counts stream
def _byte_lines(read, source: str, wait=None):
    """The lines (bytes, without line ends: LF, CRLF or CR) of a binary stream ``read(n)``;
    memory O(64 KiB + the longest line accepted): a longer line is cut to
    ``MAX_COUNT_LINE`` + 3 bytes (``count_lines`` refuses it). ``wait()`` (if given) is called
    before each read that may block."""
    from ..data_release.io import MAX_COUNT_LINE
    carry = b""
    while True:
        if wait is not None:
            wait()
        try:
            chunk = read(_READ_BYTES)
        except OSError as exc:
            raise ValueError(f"{source}: cannot read ({exc.strerror or exc})") from None
        if not chunk:
            if carry:
                yield carry
            return
        data = carry + chunk
        hold = data.endswith(b"\r")   # perhaps the first half of a CRLF
        parts = _LINE_END.split(data[:-1] if hold else data)
        carry = parts.pop() + (b"\r" if hold else b"")
        yield from parts
        if len(carry) > MAX_COUNT_LINE + 2:
            yield carry[:MAX_COUNT_LINE + 3]   # refused as too long
            return


def _stdin_counts(wait):
    """(line, count) pairs of standard input, read as the lines arrive: from its file
    descriptor when it has one (``wait`` is then called when no line is ready), else its
    ``readline``."""
    from ..data_release.io import MAX_COUNT_LINE, count_lines
    stdin = sys.stdin
    if stdin is None:
        raise ValueError("--counts -: there is no standard input")
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:
        lines = iter(lambda: stdin.readline(MAX_COUNT_LINE + 3), "")
    else:
        def ready_wait():
            wait(lambda timeout: _readable(fd, timeout))
        lines = _byte_lines(lambda n: os.read(fd, n), "standard input", ready_wait)
    return count_lines(lines, "standard input")


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has input (or end of file) within ``timeout`` seconds."""
    import select
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    except (OSError, ValueError):
        return True


# ------------------------------------------------------------------ the release, on disk
class _Release:
    """The released steps (kept when ``keeps``: --out / --plot), the JSON document and its
    write policy (module docstring)."""

    def __init__(self, out, force, keeps, account, source, simulation, horizon):
        self.out, self.force, self.keeps = out, force, keeps
        self.account, self.source, self.simulation = account, source, simulation
        self.horizon = horizon
        self.n, self.written = 0, -1
        size = min(horizon or 1024, 1024) if keeps else 0   # doubled as needed
        self.estimate, self.standard_error = np.empty(size), np.empty(size)
        self.last = (0.0, 0.0)
        self.status, self.stopped = "running", None
        self._end, self._cost = _clock(), 0.0

    def full(self) -> bool:
        return self.keeps and self.n >= MAX_STEPS

    def add(self, estimate: float, se: float) -> None:
        if self.keeps:
            if self.n == self.estimate.size:   # unbounded: double (amortised O(1))
                grow = min(2 * self.n, self.horizon or MAX_STEPS, MAX_STEPS)
                self.estimate = np.resize(self.estimate, grow)
                self.standard_error = np.resize(self.standard_error, grow)
            self.estimate[self.n], self.standard_error[self.n] = estimate, se
        self.last = (estimate, se)
        self.n += 1

    def text(self) -> str:
        """The JSON document: status, account, ..., then the released steps."""
        head = json.dumps({
            "status": self.status, "stopped": self.stopped,
            "privacy": ("SIMULATION (--seed): numpy noise, NOT PRIVATE" if self.simulation
                        else "event-level differential privacy (OpenDP's secure noise)"),
            "simulation": self.simulation, "public": PUBLIC, "source": self.source,
            "account": _strict(self.account), "steps": self.n}, allow_nan=False, indent=1)
        return (f"{head[:-2]},\n \"estimate\": {_json_array(self.estimate[:self.n])},\n "
                f"\"standard_error\": {_json_array(self.standard_error[:self.n])}\n}}")

    def write(self) -> None:
        """Rewrite --out atomically (OSError, or ValueError when its directory went away, on
        failure: the file on disk is then the last one written)."""
        from ..files import write_text_atomic
        if self.out is None:
            return
        start = _clock()
        write_text_atomic(self.out, self.text(), force=self.force or self.written >= 0)
        self._end = _clock()
        self._cost = self._end - start
        self.written = self.n

    def due(self) -> float | None:
        """When the next write is due (None: nothing unwritten)."""
        if self.out is None or self.written == self.n:
            return None
        return self._end + max(FLUSH_SECONDS, FLUSH_COST * self._cost)

    def maybe_write(self) -> None:
        due = self.due()
        if due is not None and _clock() >= due:
            self._write_or_stop()

    def wait(self, readable) -> None:
        """Before waiting for input: wait until the next write is due, then write, unless
        input is ready sooner (``readable(timeout)``)."""
        due = self.due()
        if due is not None and not readable(max(0.0, due - _clock())):
            self._write_or_stop()

    def _write_or_stop(self) -> None:
        try:
            self.write()
        except (OSError, ValueError) as exc:
            raise _WriteFailed(exc) from None


def _strict(value):
    """``value`` (nested dicts / lists) with every non-finite float as a string ("inf"):
    strict JSON for an account that names an unmeasured level's infinite scale."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _json_array(xs: np.ndarray) -> str:
    """A float array as a strict JSON array, non-finite values (an unidentified step) as
    null; encoded in blocks of 2^16 by the C encoder (bounded temporaries)."""
    blocks = (json.dumps(xs[i:i + (1 << 16)].tolist())[1:-1]
              for i in range(0, xs.size, 1 << 16))     # over blocks, not steps
    text = ",".join(blocks)
    if not np.isfinite(xs).all():   # only numbers in here: the tokens are unambiguous
        text = text.replace("NaN", "null").replace("-Infinity", "null").replace(
            "Infinity", "null")
    return f"[{text}]"


class _WriteFailed(Exception):
    """--out could not be rewritten while the stream ran (the stream stops)."""


class _Interrupted(BaseException):
    """A signal (SIGINT / SIGTERM / SIGHUP) stopped the stream."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


class _ReaderGone(Exception):
    """Standard output was closed and nothing else keeps the release."""


class _Signals:
    """SIGINT / SIGTERM / SIGHUP while the stream runs raise :class:`_Interrupted`, but only
    outside ``held()`` blocks (a step is released, recorded and printed whole; the final write
    is never cut short); a signal the caller ignores (``nohup``) stays ignored. Main thread
    only; the previous handlers are restored on exit."""

    def __init__(self):
        self.depth, self.pending, self._saved = 0, None, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for name in _SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                    self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, old in self._saved.items():
            signal.signal(sig, old)
        return False

    def _handle(self, signum, frame):
        if self.depth:
            self.pending = self.pending or signum
            return
        raise _Interrupted(signum)

    @contextlib.contextmanager
    def held(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if self.depth == 0 and self.pending is not None:
            raise _Interrupted(self.pending)


class _Lines:
    """Lines on stdout (flushed each when ``flush``); if the reader goes away (``| head``)
    they stop silently (``broken``) and fd 1 is pointed at /dev/null, so that nothing fails
    again when the interpreter exits."""

    def __init__(self, quiet: bool, flush: bool):
        self.quiet, self.flush, self.broken = quiet, flush, False

    def write(self, line: str) -> None:
        if self.quiet or self.broken:
            return
        try:
            print(line, flush=self.flush)
        except BrokenPipeError:
            self._gone()

    def close(self) -> None:
        if not (self.quiet or self.broken):
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.broken = True
        stdout_closed()


def _say(text: str) -> None:
    """A line on stderr (ignored if stderr is gone too)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError, ValueError):
        pass


# ------------------------------------------------------------------ the command
def run(args) -> int:
    """Check everything, build the counter (every OpenDP measurement checked), write the
    JSON's first version, then release step by step (module docstring)."""
    out, plot = _outputs(args)
    keeps = out is not None or plot is not None
    plan = _plan(args, keeps)
    options = {k: getattr(args, k) for k in ("branching", "estimator")
               if getattr(args, k) is not None}       # only what the user gave
    rng = None if args.seed is None else np.random.default_rng(args.seed)
    counter = Counter(plan.horizon, epsilon=args.epsilon, rho=args.rho,
                      mechanism=args.mechanism, rng=rng, **options)
    release = _Release(out, args.force, keeps, counter.account(), plan.source,
                       rng is not None, plan.horizon)
    try:
        release.write()   # before the first draw: the account is on disk, the path works
    except (OSError, ValueError) as exc:
        raise ValueError(f"--out: cannot write {str(out)!r} "
                         f"({getattr(exc, 'strerror', None) or exc})") from None
    lines = _Lines(quiet=args.quiet, flush=plan.interactive)
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


def _stream(plan, counter, release, lines, plot, force) -> int:
    """Release every step, then write and report; any stop keeps what was released."""
    stop, code, unexpected = None, 0, None
    with _Signals() as signals:
        try:
            try:
                _release_steps(plan, counter, release, lines, signals)
            finally:
                signals.depth += 1   # from here on, signals wait until the release is written
        except ValueError as exc:
            stop, code = str(exc), 2
        except _Interrupted as exc:
            stop, code = f"interrupted by {exc.name}", 128 + exc.signum
        except KeyboardInterrupt:
            stop, code = "interrupted (KeyboardInterrupt)", 130
        except _ReaderGone:
            stop, code = "standard output was closed", EXIT_BROKEN_PIPE
        except _WriteFailed as exc:
            stop, code = f"could not rewrite --out ({exc.args[0]})", 1
        except BaseException as exc:   # a bug: keep the release, then let it surface
            stop, code, unexpected = f"unexpected error: {type(exc).__name__}: {exc}", 1, exc
        code = _finish(release, lines, plot, force, stop, code)
        if signals.pending is not None and code == 0:
            code = 128 + signals.pending
    if unexpected is not None:
        raise unexpected
    return code


def _release_steps(plan, counter, release, lines, signals) -> None:
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
            if release.full():
                raise ValueError(f"{plan.source}: {MAX_STEPS} steps (2^22) released: the "
                                 "most --out / --plot can hold; run without them for a "
                                 "longer stream")
            estimate = counter.update(count)
            se = math.sqrt(counter.variance)
            release.add(estimate, se)
            lines.write(f"{counter.t},{estimate:.10g},{se:.6g}")
            if lines.broken and not release.keeps:
                raise _ReaderGone
            release.maybe_write()
    if release.n == 0:
        raise ValueError(f"{plan.source}: no counts (empty input)")


def _finish(release, lines, plot, force, stop, code) -> int:
    """Write the final JSON and the plot, print the status; the exit status."""
    release.status = "complete" if stop is None else "incomplete"
    release.stopped = stop
    where, lost = "", False
    if release.out is not None:
        try:
            release.write()
            where = f", written to {str(release.out)!r}"
        except (OSError, ValueError) as exc:   # never lose the release: to stdout / stderr
            _say(f"dptree-opt: error: could not write {str(release.out)!r} "
                 f"({getattr(exc, 'strerror', None) or exc}); the release follows on "
                 f"{'stderr' if lines.broken else 'stdout'}")
            lost, code = True, code or 1
    tag = ("complete" if stop is None else f"INCOMPLETE, stopped: {stop}")
    lines.write(f"# status: {tag} ({release.n} steps)")
    if lost:
        (_say if lines.broken else print)(release.text())
    lines.close()
    if plot is not None and release.n:
        try:
            _plot(plot, release, force)
            where += f"; plot {str(plot)!r}"
        except Exception as exc:   # the release is out and on disk: report, never raise
            _say(f"dptree-opt: error: could not write the plot {str(plot)!r} ({exc})")
            code = code or 1
    if code == EXIT_BROKEN_PIPE:
        return code   # the reader went away: nothing more to say
    sim = "SIMULATION, NOT PRIVATE: " if release.simulation else ""
    if stop is None:
        est, se = release.last
        _say(f"{sim}{release.n} steps released ({release.account['mechanism']}){where}; "
             f"final estimate {est:.6g} +- {se:.3g}")
    else:
        _say(f"dptree-opt: error: {stop}")
        _say(f"dptree-opt: {sim}the release is INCOMPLETE: {release.n} steps released before "
             f"the stop{where}" + (' (status "incomplete")' if release.out is not None
                                   and where else ""))
    return code


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


def _plot(path, release, force) -> None:
    """The released running counts with +-2 SE, written atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import save_figure
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
        save_figure(fig, path, force=force, dpi=120)
    finally:
        plt.close(fig)
