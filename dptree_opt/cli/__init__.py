"""The ``dptree-opt`` command line (calls only the public API).

One module per subcommand (``*_cmd.py``), each with ``register(subparsers)`` and an ``ORDER``
(its place in ``--help``); they are found automatically, so adding a command is adding a file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


def _command_modules() -> list:
    mods = [importlib.import_module(f"{__name__}.{info.name}")
            for info in pkgutil.iter_modules(__path__) if info.name.endswith("_cmd")]
    return sorted(mods, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of `dptree-opt` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="dptree-opt",
        description="Differentially private CDFs with tree mechanisms: exact errors, "
                    "comparisons and optimal trees.")
    sub = parser.add_subparsers(dest="command", required=True)
    for mod in _command_modules():
        mod.register(sub)
    return parser


def main(argv=None) -> int:
    """Entry point of ``dptree-opt``; returns the exit status (2 for bad input)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"dptree-opt: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
