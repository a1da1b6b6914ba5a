"""`dptree-opt figures`: regenerate every paper figure (and the beyond-the-papers studies).

Runs each script of ``paper_figures/`` (and the ``EXPERIMENT_ITEMS`` of ``experiments/`` when
present), each ``run(out_dir, quick) -> dict`` writing ``<name>.png`` and ``<name>.json``
(or ``.csv``), with a progress bar on stderr, then prints a
summary table: item, file, checks passed / total, worst relative deviation, seconds. The
summaries are also written to ``<out>/figures_summary.json``.

``--out`` is checked before anything runs (``_common.output_dir``): it is created when
missing (its parent must exist), and a directory already holding a file this run writes is
refused unless ``--force``; every file is written atomically.

Exit status: 0 when every item ran and every check passed, 1 otherwise (the table says which),
2 for bad input (an unknown ``--only`` name).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .._progress import Progress
from ..files import write_text_atomic
from ._common import Subparsers, output_dir
from ._scripts import list_scripts, load_script, script_dir, script_outputs

ORDER = 30  # position in `dptree-opt --help`

FIGURES = "paper_figures"
EXPERIMENTS = "experiments"
# the beyond-the-papers studies of experiments/, with the same run() contract as the figures
EXPERIMENT_ITEMS = ("k_sweep", "laplace_vs_gaussian", "frontier", "grid_study",
                    "stream_study", "learning_study")
SUMMARY = "figures_summary.json"


def _experiment_available(stem: str) -> bool:
    try:
        folder = script_dir(EXPERIMENTS)
    except ValueError:
        return False
    return (folder / f"{stem}.py").is_file()


def _items() -> tuple[list[tuple[str, str]], list[str]]:
    """([(folder, stem), ...] to run, [stems of the experiments that are absent])."""
    items = [(FIGURES, stem) for stem in list_scripts(FIGURES)]
    missing = []
    for stem in EXPERIMENT_ITEMS:
        if _experiment_available(stem):
            items.append((EXPERIMENTS, stem))
        else:
            missing.append(stem)
    return items, missing


def _note(stem: str) -> str:
    return f"note: {EXPERIMENTS}/{stem}.py not found; skipped"


def _select(items: list[tuple[str, str]], only: list[str] | None,
            missing_exp: list[str]) -> list[tuple[str, str]]:
    if not only:
        return items
    known = {stem: (folder, stem) for folder, stem in items}
    chosen = []
    for name in only:
        stem = name[:-3] if name.endswith(".py") else name
        if stem in known:
            if known[stem] not in chosen:
                chosen.append(known[stem])
        elif stem in missing_exp:
            raise ValueError(f"--only {name!r}: {EXPERIMENTS}/{stem}.py is not present in this "
                             "checkout")
        else:
            raise ValueError(f"--only: unknown figure {name!r}; choose from "
                             f"{', '.join(sorted(known))}")
    return chosen


def _deviation(check: dict[str, object]) -> float | None:
    dev = check.get("deviation")
    if isinstance(dev, (int, float)) and not isinstance(dev, bool) and math.isfinite(dev):
        return float(dev)
    r, e = check.get("reproduced"), check.get("expected")
    if (isinstance(r, (int, float)) and not isinstance(r, bool) and isinstance(e, (int, float))
            and not isinstance(e, bool) and math.isfinite(r) and math.isfinite(e)):
        return abs(r - e) / abs(e) if e != 0 else abs(r)
    return None


def _row(stem: str, result: dict[str, Any] | None, seconds: float,
         error: str | None) -> dict[str, Any]:
    if result is None:
        return {"item": stem, "file": "-", "passed": 0, "total": 0, "worst": None,
                "seconds": seconds, "error": error, "failed_checks": []}
    checks = list(result.get("checks", []))
    devs = [d for d in (_deviation(c) for c in checks) if d is not None]
    return {"item": result.get("name", stem), "file": str(result.get("png", "-")),
            "passed": sum(bool(c.get("ok")) for c in checks), "total": len(checks),
            "worst": max(devs) if devs else None, "seconds": seconds, "error": None,
            "failed_checks": [c.get("what", "?") for c in checks if not c.get("ok")]}


def _print_table(rows: list[dict[str, Any]], total_seconds: float, out_dir: Path) -> None:
    def fmt_dev(d: float | None) -> str:
        return "-" if d is None else f"{d:.2e}"

    file_w = max([len("file")] + [len(r["file"]) for r in rows])
    item_w = max([len("item")] + [len(r["item"]) for r in rows])
    print(f"\n{'item':<{item_w}}  {'file':<{file_w}}  {'checks':>8}  {'worst rel.dev':>13}  "
          f"{'seconds':>8}")
    print("-" * (item_w + file_w + 39))
    for r in rows:
        checks = "FAILED" if r["error"] else f"{r['passed']}/{r['total']}"
        print(f"{r['item']:<{item_w}}  {r['file']:<{file_w}}  {checks:>8}  "
              f"{fmt_dev(r['worst']):>13}  {r['seconds']:>8.1f}")
    passed = sum(r["passed"] for r in rows)
    total = sum(r["total"] for r in rows)
    print("-" * (item_w + file_w + 39))
    print(f"{len(rows)} items, {passed}/{total} checks passed, {total_seconds:.1f} s; "
          f"output in {out_dir}")
    worst = "worst rel.dev: largest |reproduced - expected| / |expected| over an item's numeric "
    print(worst + "checks (checks against bounds or statements have none)")
    for r in rows:
        if r["error"]:
            print(f"  {r['item']}: FAILED: {r['error']}")
        for what in r["failed_checks"]:
            print(f"  {r['item']}: check failed: {what}")


def run(args: argparse.Namespace) -> int:
    """Run the selected scripts, print the summary table; see the module docstring."""
    items, missing = _items()
    if args.list:
        for folder, stem in items:
            print(f"{stem:<22} {folder}/{stem}.py")
        for stem in missing:
            print(_note(stem))
        return 0
    chosen = _select(items, args.only, missing)
    files = [name for _, stem in chosen for name in script_outputs(stem)] + [SUMMARY]
    out_dir = output_dir(args.out, flag="--out", files=files, force=args.force)
    if not args.only:
        for stem in missing:
            print(_note(stem))
    mode = "quick" if args.quick else "full"
    bar = Progress(len(chosen), f"figures ({mode})", enabled=not args.no_progress)
    rows, summaries = [], []
    t_all = time.perf_counter()
    for folder, stem in chosen:
        bar.label = f"figures ({mode}) {stem:<20}"
        bar.update(0)
        t0 = time.perf_counter()
        result, error = None, None
        try:
            module = load_script(folder, stem)
            result = module.run(out_dir, quick=bool(args.quick))
        except Exception as exc:  # noqa: BLE001 - one failing script must not stop the rest
            error = f"{type(exc).__name__}: {exc}"
            if args.verbose:
                traceback.print_exc(file=sys.stderr)
        seconds = time.perf_counter() - t0
        rows.append(_row(stem, result, seconds, error))
        summaries.append({"script": f"{folder}/{stem}.py", "seconds": seconds, "error": error,
                          **({k: v for k, v in result.items()} if isinstance(result, dict)
                             else {})})
        bar.update(1)
    bar.close()
    total_seconds = time.perf_counter() - t_all
    bad = any(r["error"] or r["passed"] < r["total"] for r in rows)
    try:
        write_text_atomic(out_dir / SUMMARY, json.dumps(
            {"mode": mode, "seconds": total_seconds, "items": summaries}, indent=1,
            default=str) + "\n", force=args.force)
    except (OSError, ValueError) as exc:  # the figures are made (a full disk, a directory
        # removed meanwhile): report it, and still print the table
        print(f"dptree-opt: error: could not write {str(out_dir / SUMMARY)!r} ({exc})",
              file=sys.stderr)
        bad = True
    _print_table(rows, total_seconds, out_dir)
    return 1 if bad else 0


def register(sub: Subparsers) -> None:
    """Add the `figures` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "figures", help="regenerate the paper figures ([HON], [RTS], [SU]) with their checks",
        description="Run every script of paper_figures/ (one per reproduced figure or table of "
                    "[HON] Honaker 2015, [RTS] Rameshwar-Tandon-Sharma 2024, [SU] Smith-Ullman "
                    "lecture 7) and the beyond-the-papers studies of experiments/ ("
                    f"{', '.join(EXPERIMENT_ITEMS)}) when present. Each writes NAME.png and "
                    "NAME.json (or .csv) into --out; a summary table of the checks against the "
                    "papers' numbers and those of docs/math.md follows. Exit 1 if a script fails or a "
                    "check fails.",
        epilog="example: dptree-opt figures --quick --out figures --only hon_figure4 rts_psi")
    p.add_argument("--quick", action="store_true",
                   help="fewer Monte Carlo trials and smaller sweeps (about a minute in total); "
                        "default: the published trial counts (e.g. 10,000 trees for [HON] Fig. 4)")
    p.add_argument("--out", default="figures", metavar="DIR",
                   help="output directory (default: ./figures), created if missing (its parent "
                        "must exist); checked before anything runs: a directory already "
                        "holding a file this run writes (NAME.png / .json / .csv of a selected "
                        "item, figures_summary.json) is refused unless --force. Other files in "
                        "it are never touched")
    p.add_argument("--force", action="store_true",
                   help="overwrite the files of a previous run in --out")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="run only these items (script names, e.g. hon_figure4 rts_psi k_sweep)")
    p.add_argument("--list", action="store_true", help="list the items and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--verbose", action="store_true",
                   help="print the traceback of a failing script")
    p.set_defaults(func=run)
