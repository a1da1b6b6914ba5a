"""Shared helpers of the experiment scripts: plot style, caption line, CSV/JSON output, CLI.

Every script in ``experiments/`` has its parameters at the top and exposes
``run(out_dir: pathlib.Path, quick: bool = True) -> dict`` writing ``NAME.csv`` or
``NAME.json`` and ``NAME.png`` into ``out_dir``; it calls only the public API of
``dptree_opt``. Scripts ``import _experiments``: their folder is on ``sys.path`` both when run
as ``python experiments/NAME.py [--full]`` and when loaded by ``dptree-opt experiment NAME``
(``dptree_opt.cli._scripts.load_script`` puts it there).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # scripts only write PNG files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dptree_opt.cli._common import output_dir, stdout_closed  # noqa: E402
from dptree_opt.cli._scripts import script_outputs  # noqa: E402
from dptree_opt.files import write_text_atomic  # noqa: E402
from dptree_opt.plotting import save_figure  # noqa: E402

__all__ = ["plt", "style", "caption", "save_png", "write_csv", "write_json", "cli"]


def style() -> None:
    """A readable default style."""
    plt.rcParams.update({
        "font.size": 10.5, "axes.titlesize": 11, "axes.labelsize": 10.5, "legend.fontsize": 8.5,
        "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 110, "savefig.dpi": 110,
        "axes.spines.top": False, "axes.spines.right": False})


def caption(fig, text: str) -> None:
    """The caption line at the bottom of a figure."""
    fig.text(0.5, 0.01, text, ha="center", va="bottom", fontsize=8.5, style="italic", wrap=True)


def save_png(fig, out_dir: Path, name: str, bottom: float = 0.14) -> Path:
    """tight_layout leaving room for the caption; writes out_dir/name.png atomically
    (replacing a previous one: the command line checks ``--out`` before the run)."""
    fig.tight_layout(rect=(0, bottom, 1, 1))
    try:
        return save_figure(fig, Path(out_dir) / f"{name}.png", force=True)
    finally:
        plt.close(fig)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(data, out_dir: Path, name: str) -> Path:
    """Write out_dir/name.json atomically (NaN and infinities as null)."""
    path = Path(out_dir) / f"{name}.json"
    write_text_atomic(path, json.dumps(_jsonable(data), indent=2), force=True)
    return path


def write_csv(rows: list[dict], out_dir: Path, name: str) -> Path:
    """Write the dicts ``rows`` (one column per key of the first) to out_dir/name.csv
    atomically."""
    path = Path(out_dir) / f"{name}.csv"
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(_jsonable(rows))
    write_text_atomic(path, text.getvalue(), force=True)
    return path


def check(what: str, reproduced: float, expected: float, source: str,
          rel: float = 1e-9) -> dict:
    """One comparison of a computed number with an independent value, in the format
    ``dptree-opt figures`` summarises (what, reproduced, expected, source, ok, deviation)."""
    dev = abs(reproduced - expected) / abs(expected) if expected else abs(reproduced)
    return {"what": what, "reproduced": float(reproduced), "expected": float(expected),
            "source": source, "ok": bool(dev <= rel), "deviation": dev}


def cli(run, name: str) -> None:
    """``python experiments/NAME.py [--full] [--out DIR] [--force]``; ``--out`` is checked
    first, as ``dptree-opt experiment`` does."""
    ap = argparse.ArgumentParser(description=f"experiment {name}")
    ap.add_argument("--full", action="store_true", help="full mode (default: quick)")
    ap.add_argument("--out", default="experiments_out",
                    help=f"output directory, created if missing (its parent must exist); "
                         f"refused if it holds {name}.png / .json / .csv, unless --force")
    ap.add_argument("--force", action="store_true",
                    help="overwrite the files of a previous run in --out")
    args = ap.parse_args()
    try:
        out = output_dir(args.out, flag="--out", files=script_outputs(name), force=args.force)
    except ValueError as exc:
        ap.error(str(exc))
    result = run(out, quick=not args.full)
    summary = {k: v for k, v in result.items() if k not in ("rows", "tables")}
    try:
        print(json.dumps(_jsonable(summary), indent=2))
        sys.stdout.flush()
    except BrokenPipeError:  # piped to head: as `dptree-opt experiment`
        raise SystemExit(stdout_closed()) from None
