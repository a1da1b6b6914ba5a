"""`dptree-opt experiment NAME`: run one script of ``experiments/`` (its table and plot).

Parameters come from the command line: ``--set NAME=VALUE`` (repeatable), parsed by the type
the experiment declares in its ``PARAMETERS`` dict (name -> {"type", "sets", "help"}; the
default is the value of the first module constant in "sets", and every constant there -- e.g.
``BINS`` and ``QUICK_BINS`` -- takes the value). Types: "int", "float", "str" (one value),
"ints", "floats", "strs" (a comma list, stored as a tuple), optional "min" (a lower bound)
and "choices". An unknown name is refused with the list of valid ones;
``dptree-opt experiment NAME --help`` lists them with their defaults.
"""

from __future__ import annotations

import argparse
import json
import time
from types import ModuleType

from ..validation import check_int, check_real
from ._common import Subparsers, output_dir
from ._scripts import list_scripts, load_script, script_outputs

ORDER = 50  # position in `dptree-opt --help`
TYPES = ("int", "float", "str", "ints", "floats", "strs")
MAX_LIST = 1000     # values in one list parameter


def _summary(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("rows", "tables")}


def parameters(module: ModuleType) -> dict:
    """The parameters an experiment declares (``PARAMETERS``; {} if none), checked."""
    params = getattr(module, "PARAMETERS", {})
    for name, spec in params.items():
        if spec.get("type") not in TYPES or not spec.get("sets"):
            raise ValueError(f"experiment parameter {name!r}: type must be one of {TYPES} and "
                             "'sets' name the constants it sets")
    return params


def _one(text: str, kind: str, name: str, spec: dict) -> int | float | str:
    if kind == "int":
        try:
            number = int(text.strip())
        except ValueError:
            raise ValueError(f"--set {name}: {text!r} is not an integer") from None
        value: int | float | str = check_int(number, f"--set {name}", spec.get("min"))
    elif kind == "float":
        try:
            real = float(text.strip())
        except ValueError:
            raise ValueError(f"--set {name}: {text!r} is not a number") from None
        value = check_real(real, f"--set {name}", at_least=spec.get("min"))
    else:
        value = text.strip()
    choices = spec.get("choices")
    if choices is not None and value not in choices:
        raise ValueError(f"--set {name}: {value!r} is not one of {', '.join(map(str, choices))}")
    return value


def parse_setting(text: str, params: dict) -> tuple[str, object]:
    """(name, value) of one ``NAME=VALUE``, VALUE parsed by the parameter's declared type
    (ValueError naming --set, the parameter and, for an unknown name, the valid ones)."""
    name, eq, raw = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"--set takes NAME=VALUE, got {text!r}")
    if name not in params:
        valid = ", ".join(sorted(params)) or "none (this experiment has no parameters)"
        raise ValueError(f"--set: unknown parameter {name!r}; valid: {valid}")
    spec = params[name]
    kind = spec["type"]
    if kind in ("int", "float", "str"):
        return name, _one(raw, kind, name, spec)
    parts = [p for p in raw.split(",")]
    if not raw.strip() or len(parts) > MAX_LIST or any(not p.strip() for p in parts):
        raise ValueError(f"--set {name}: give 1 to {MAX_LIST} comma-separated values, got "
                         f"{raw!r}")
    return name, tuple(_one(p, kind[:-1], name, spec) for p in parts)


def apply_settings(module: ModuleType, settings: list[str]) -> dict:
    """Parse every ``NAME=VALUE`` of ``settings`` and set the module constants each names;
    returns {name: value} (all are parsed before any is set)."""
    params = parameters(module)
    parsed = dict(parse_setting(s, params) for s in settings or [])
    for name, value in parsed.items():
        for const in params[name]["sets"]:
            setattr(module, const, value)
    return parsed


def describe_parameters(module: ModuleType) -> str:
    """The parameter table of ``dptree-opt experiment NAME --help``."""
    params = parameters(module)
    if not params:
        return "this experiment has no parameters to --set"
    lines = ["parameters (--set NAME=VALUE; lists are comma-separated):"]
    for name, spec in params.items():
        default = getattr(module, spec["sets"][0], None)
        if isinstance(default, tuple):
            shown = default if len(default) <= 8 else default[:3] + ("...",) + default[-1:]
            default = ",".join(map(str, shown)) + (f" ({len(default)} values)"
                                                   if len(default) > 8 else "")
        lines.append(f"  {name:<12} {spec['type']:<7} {spec.get('help', '')} "
                     f"(default: {default})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """List the experiments, show one's parameters (--help), or run one into --out."""
    if args.help:
        print(args.parser.format_help())
        if args.name:
            print(describe_parameters(load_script("experiments", args.name)))
        return 0
    if args.list:
        for stem in list_scripts("experiments"):
            doc = (load_script("experiments", stem).__doc__ or "").strip().splitlines()
            print(f"{stem:<22} {doc[0] if doc else ''}")
        return 0
    if not args.name:
        raise ValueError("give an experiment NAME (or --list); choose from "
                         + ", ".join(list_scripts("experiments")))
    module = load_script("experiments", args.name)
    settings = apply_settings(module, args.set)     # before --out is touched
    out = output_dir(args.out, flag="--out", files=script_outputs(args.name), force=args.force)
    t0 = time.perf_counter()
    result = module.run(out, quick=args.quick)
    if settings:
        result = {**result, "settings": settings}
    print(json.dumps(_summary(result), indent=2, default=str))
    print(f"({time.perf_counter() - t0:.1f} s, {'quick' if args.quick else 'full'} mode; "
          f"outputs in {out})")
    return 0


def register(sub: Subparsers) -> None:
    """Add the `experiment` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "experiment", help="run one scripted study of experiments/ (table + plot)",
        add_help=False,
        description="Run experiments/NAME.py (it calls only the public API) and write "
                    "NAME.csv or NAME.json and NAME.png into --out. Its parameters are set "
                    "with --set NAME=VALUE (see `dptree-opt experiment NAME --help`).",
        epilog="example: dptree-opt experiment k_sweep --set K=65536 --set epsilon=1 "
               "--out out/")
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("-h", "--help", action="store_true",
                   help="show this help (with NAME: also its parameters) and exit")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("--quick", action="store_true", help="quick mode (smaller sweeps)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="set one of the experiment's parameters (repeatable); the value is "
                        "parsed by the parameter's type, an unknown name is refused")
    p.add_argument("--out", default="experiments_out", metavar="DIR",
                   help="output directory (default: ./experiments_out), created if missing "
                        "(its parent must exist); checked before the run: one already holding "
                        "NAME.png, NAME.json or NAME.csv is refused unless --force. Other files "
                        "in it are never touched")
    p.add_argument("--force", action="store_true",
                   help="overwrite the files of a previous run of NAME in --out")
    p.set_defaults(func=run, parser=p)
