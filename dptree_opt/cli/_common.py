"""Shared pieces of the ``dptree-opt`` subcommands: strategy specs, budget flags and the
checks of the files and directories a subcommand writes (:func:`output_file`,
:func:`output_dir`: run them before any work, so that a bad path never costs a long run)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TypeAlias, TypedDict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .. import strategies
from ..compare import parse_shape
from ..files import StrPath, path_lookup_errors, check_output_path
from ..privacy import infer_noise

# the object ``add_subparsers`` returns: each subcommand's ``register(sub)`` adds its parser
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"



class Budget(TypedDict, total=False):
    """The budget keyword of the public API: ``epsilon`` (Laplace) or ``rho`` (Gaussian)."""

    epsilon: float
    rho: float


FIGURE_SUFFIXES = (".png", ".pdf", ".svg")
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what the shell reports for a command stopped by it

STRATEGY_HELP = ("histogram | prefix | binary | tree:K (one branching factor, e.g. tree:17) | "
                 "tree:K1,K2,... (per-level branching factors, root first, e.g. tree:4,8,32)")


def parse_strategy(spec: str, n_bins: int) -> tuple[strategies.Strategy, int, str | None]:
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
        ks = [k] * strategies.padded_height(n_bins, k)
    padded = int(np.prod(ks, dtype=object)) if ks else 1
    if padded < n_bins:
        raise ValueError(f"--strategy: branching {ks} covers only {padded} < {n_bins} bins")
    note = None
    if padded != n_bins:
        note = (f"{n_bins} bins do not fit branching {ks}: padded to {padded} bins (the "
                f"{padded - n_bins} extra bins are empty); errors are over the {n_bins} real "
                "prefixes")
    return strategies.tree(padded, ks), padded, note


def budget_kwargs(args: argparse.Namespace) -> Budget:
    """{"epsilon": ...} or {"rho": ...} from --epsilon/--rho, checked against --noise (which
    defaults to gaussian when only --rho is given; ``args.noise`` is set to the noise used)."""
    args.noise = infer_noise(args.noise, args.epsilon, args.rho)
    if args.noise == "laplace":
        if args.epsilon is None or args.rho is not None:
            raise ValueError("--noise laplace needs --epsilon (and no --rho)")
        return {"epsilon": args.epsilon}
    if args.rho is None or args.epsilon is not None:
        raise ValueError("--noise gaussian needs --rho (zCDP; and no --epsilon)")
    return {"rho": args.rho}


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    """--epsilon/--rho/--noise/--neighbours/--public-total, shared by every subcommand."""
    parser.add_argument("--epsilon", type=float, help="total eps (Laplace, pure eps-DP)")
    parser.add_argument("--rho", type=float, help="total rho (Gaussian, rho-zCDP)")
    parser.add_argument("--noise", choices=("laplace", "gaussian"), default=None,
                        help="default: gaussian with --rho alone, else laplace")
    parser.add_argument("--neighbours", choices=("swap", "add_remove"), default="add_remove",
                        help="add_remove: N private (default); swap: N public and invariant, "
                             "[RTS]'s setting")
    parser.add_argument("--public-total", action="store_true",
                        help="under add_remove, declare N public (N is then not protected)")


def output_file(path: StrPath, *, flag: str, force: bool = False,
                suffixes: tuple[str, ...] = (),
                inputs: Sequence[StrPath | None] = ()) -> Path:
    """The checked path of one file a subcommand will write, checked before any work:
    ``files.check_output_path`` (a directory, a missing or unwritable parent, one of the
    ``inputs``, a path the system cannot look up, something that is not a regular file, an
    existing file unless ``force``: ValueError naming ``flag``), and a name ending in one of
    ``suffixes`` (when given). Write it afterwards atomically (``plotting.save_figure``,
    ``files.write_text_atomic``)."""
    return check_output_path(path, inputs=inputs, force=force, flag=flag, suffixes=suffixes)


def output_dir(path: StrPath, *, flag: str, files: Iterable[str], force: bool = False) -> Path:
    """Check, then create, the directory a subcommand writes the files named ``files`` into;
    run it before any work. Returns the directory's Path.

    A missing directory is created (one level: its parent must exist, so a mistyped path
    does not grow a tree of directories). Refused (ValueError naming ``flag``): an empty
    path, a path that exists and is not a directory, a missing parent, a directory (or
    parent) that is not writable, a name in ``files`` that is a directory or not a regular
    file, and, unless ``force``, a directory already holding any of ``files`` (they would be
    overwritten; other files in it are never touched)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{flag}: expected a directory path, got {path!r}")
    with path_lookup_errors(flag, path):
        return _output_dir(Path(os.fspath(path)), flag, files, force)


def _output_dir(out: Path, flag: str, files: Iterable[str], force: bool) -> Path:
    if not os.path.lexists(out):
        parent = out.parent   # "." for a bare directory name
        if not parent.is_dir():
            raise ValueError(f"{flag}: directory {str(parent)!r} does not exist; create it "
                             f"first (only the last directory of {flag} is created)")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(f"{flag}: cannot create {str(out)!r}: directory {str(parent)!r} "
                             "is not writable")
        try:
            out.mkdir()
            return out
        except FileExistsError:  # made meanwhile: checked below like any existing path
            pass
        except OSError as exc:
            raise ValueError(f"{flag}: cannot create {str(out)!r} ({exc.strerror})") from None
    if not out.is_dir():
        what = ("is a broken symbolic link" if out.is_symlink() and not out.exists() else
                "exists and is not a directory")
        raise ValueError(f"{flag} {str(out)!r} {what}; name a directory (created if "
                         "missing)")
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: directory {str(out)!r} is not writable")
    present = [name for name in files if os.path.lexists(out / name)]
    for name in present:
        if not (out / name).is_file():
            what = "a directory" if (out / name).is_dir() else "not a regular file"
            raise ValueError(f"{flag}: {str(out / name)!r} is {what}; this run writes a file "
                             "there (move it away or choose another directory)")
    if present and not force:
        shown = ", ".join(present[:6]) + (f" and {len(present) - 6} more" if len(present) > 6
                                         else "")
        raise ValueError(f"{flag} {str(out)!r} already holds {len(present)} file"
                         f"{'s' if len(present) > 1 else ''} this run writes ({shown}); pass "
                         "--force to overwrite them, or choose another directory")
    return out


def stdout_closed() -> int:
    """Call on BrokenPipeError (standard output closed early, e.g. ``| head``): what is
    still buffered, and anything printed later, goes to /dev/null instead of a second error
    at exit (the Python docs' "Note on SIGPIPE"). Returns the exit status, 141."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return EXIT_BROKEN_PIPE
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def bins_arg(text: str) -> int | tuple[int, ...]:
    """argparse type of --bins: an integer K (1-D) or a grid shape AxB[xC..] (d-D)."""
    if "x" in text.lower():
        try:
            return parse_shape(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected K or AxB (e.g. 256x256): {exc}") \
                from None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer number of bins K or a grid "
                                         f"AxB (e.g. 1024 or 256x256), got {text!r}") from None
