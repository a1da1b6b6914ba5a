"""The ``dptree-opt`` command line (calls only the public API).

One module per subcommand (``*_cmd.py``), each with ``register(subparsers)`` and an ``ORDER``
(its place in ``--help``); they are found automatically, so adding a command is adding a file.

Two things are handled here once for every subcommand:

* a negative number, or a list starting with one, is read as the value of the option before
  it (``--lower -74.3,40.5``; argparse alone takes ``-74.3,40.5`` for an unknown option);
* standard output closed early (``dptree-opt compare ... | head -1``): the command stops,
  the rest of its output is dropped without a traceback (the Python docs' "Note on SIGPIPE")
  and the exit status is 141, 128 + SIGPIPE, what the shell reports for any program stopped
  by a closed pipe (``yes | head``). A subcommand that must not stop there handles it
  itself: ``stream`` with ``--out`` / ``--plot`` keeps releasing into them and exits as
  usual (without them it stops before the next draw, 141).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from ..threads import limited_blas
from ._common import stdout_closed

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

# a token that can only be a (list of) number(s): "-" then a digit, ".digit", inf or nan;
# no option of any subcommand may start like this (checked when it is added)
_NEGATIVE = re.compile(r"-(?:\.?\d|(?:inf|infinity|nan)(?![a-z]))", re.IGNORECASE)


def _command_modules() -> list[ModuleType]:
    mods = [importlib.import_module(f"{__name__}.{info.name}")
            for info in pkgutil.iter_modules(__path__) if info.name.endswith("_cmd")]
    return sorted(mods, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose one-value options also take a negative number or a list that
    starts with one (``--lower -74.3,40.5`` is read as ``--lower=-74.3,40.5``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.value_options: set[str] = set()  # options that take exactly one value
        self.commands: dict[str, _Parser] = {}  # subcommand name -> its parser

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """``ArgumentParser.add_argument``, noting the one-value options; an option name that
        would read as a negative number (``-1x``) is refused (ValueError)."""
        for opt in args:
            if isinstance(opt, str) and _NEGATIVE.match(opt):
                raise ValueError(f"option {opt!r} would be read as a negative number")
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.nargs is None:
            self.value_options.update(action.option_strings)
        return action

    def _value_option(self, token: str) -> bool:
        """Whether ``token`` names (or abbreviates, unambiguously) a one-value option."""
        if token in self.value_options:
            return True
        if not token.startswith("--") or not self.allow_abbrev:
            return False
        matches = [o for o in self.value_options if o.startswith(token)]
        return len(matches) == 1

    def join_negative_values(self, argv: list[str]) -> list[str]:
        """``argv`` with every ``OPTION VALUE`` pair whose VALUE starts like a negative
        number joined into ``OPTION=VALUE`` (only for options that take one value, and not
        after ``--``); a token that names an option is never taken as a value."""
        out: list[str] = []
        parser, i = self, 0
        while i < len(argv):
            tok = argv[i]
            if tok == "--":
                return out + argv[i:]
            if tok in parser.commands and parser is self:
                parser = parser.commands[tok]
            elif (i + 1 < len(argv) and "=" not in tok and parser._value_option(tok)
                    and _NEGATIVE.match(argv[i + 1])):
                out.append(f"{tok}={argv[i + 1]}")
                i += 2
                continue
            out.append(tok)
            i += 1
        return out

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        """Write the help to ``file`` (stdout); unlike argparse, a write error is not
        dropped, so that a closed pipe reaches ``main`` (exit 141)."""
        (file or sys.stdout).write(self.format_help())

    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's overloads
            self, args: Sequence[str] | None = None,
            namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """``ArgumentParser.parse_known_args`` of ``args`` (default ``sys.argv[1:]``) after
        :meth:`join_negative_values`."""
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(self.join_negative_values(args), namespace)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of `dptree-opt` and its subcommands."""
    parser = _Parser(
        prog="dptree-opt",
        description="Differentially private CDFs with tree mechanisms: exact errors, "
                    "comparisons and optimal trees.",
        epilog="exit status: 0 done; 1 done with a problem (a failed check, an incomplete "
               "release, an output that could not be written: see the message); 2 bad input "
               "(refused with a message); 141 standard output was closed early (e.g. piped "
               "to head): the command stopped there, as any program would (stream with "
               "--out or --plot finishes the release into them and exits as usual). Option "
               "values may be negative numbers or lists (--lower -74.3,40.5).")
    sub = parser.add_subparsers(dest="command", required=True)
    for mod in _command_modules():
        mod.register(sub)
    # add_subparsers makes each subcommand's parser of the parent's class (_Parser)
    parser.commands = cast("dict[str, _Parser]", dict(sub.choices))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dptree-opt``; returns the exit status (see ``dptree-opt --help``:
    2 for bad input, 141 when standard output was closed early)."""
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:  # --help or an argparse error: make sure its text got out
            sys.stdout.flush()
            raise
        try:
            with limited_blas():     # one BLAS thread unless the user chose (threads.py)
                code = args.func(args)
        except ValueError as exc:
            print(f"dptree-opt: error: {exc}", file=sys.stderr)
            code = 2
        sys.stdout.flush()  # a closed pipe shows here when the output was small
        return code
    except BrokenPipeError:
        return stdout_closed()
    except KeyboardInterrupt:   # Ctrl-C: no traceback (stream and release keep what was
        # released themselves; anything interrupted here had released nothing)
        print("dptree-opt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
