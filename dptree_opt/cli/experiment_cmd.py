"""`dptree-opt experiment NAME`: run one script of ``experiments/`` (its table and plot)."""

from __future__ import annotations

import json
import time

from ._common import output_dir
from ._scripts import list_scripts, load_script, script_outputs

ORDER = 50  # position in `dptree-opt --help`


def _summary(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("rows", "tables")}


def run(args) -> int:
    """List the experiments, or run one into --out."""
    if args.list:
        for stem in list_scripts("experiments"):
            doc = (load_script("experiments", stem).__doc__ or "").strip().splitlines()
            print(f"{stem:<22} {doc[0] if doc else ''}")
        return 0
    if not args.name:
        raise ValueError("give an experiment NAME (or --list); choose from "
                         + ", ".join(list_scripts("experiments")))
    module = load_script("experiments", args.name)
    out = output_dir(args.out, flag="--out", files=script_outputs(args.name), force=args.force)
    t0 = time.perf_counter()
    result = module.run(out, quick=args.quick)
    print(json.dumps(_summary(result), indent=2, default=str))
    print(f"({time.perf_counter() - t0:.1f} s, {'quick' if args.quick else 'full'} mode; "
          f"outputs in {out})")
    return 0


def register(sub) -> None:
    """Add the `experiment` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "experiment", help="run one scripted study of experiments/ (table + plot)",
        description="Run experiments/NAME.py (parameters at its top; it calls only the public "
                    "API) and write NAME.csv or NAME.json and NAME.png into --out.",
        epilog="example: dptree-opt experiment k_sweep --quick --out out/")
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("--quick", action="store_true", help="quick mode (smaller sweeps)")
    p.add_argument("--out", default="experiments_out", metavar="DIR",
                   help="output directory (default: ./experiments_out), created if missing "
                        "(its parent must exist); checked before the run: one already holding "
                        "NAME.png, NAME.json or NAME.csv is refused unless --force. Other files "
                        "in it are never touched")
    p.add_argument("--force", action="store_true",
                   help="overwrite the files of a previous run of NAME in --out")
    p.set_defaults(func=run)
