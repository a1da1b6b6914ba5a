"""Shared helpers of the paper-figure scripts: plotting style, captions, checks, JSON, CLI.

Every script in ``paper_figures/`` exposes ``run(out_dir: pathlib.Path, quick: bool = True)
-> dict`` writing ``<name>.png`` and ``<name>.json`` into ``out_dir`` and returning
:func:`summary` (name, title, png, json, checks). A *check* compares a reproduced number with
the value printed in the paper or restored in ``docs/math.md`` (:func:`check`).

Scripts ``import _figures``: their own folder is on ``sys.path`` both when run as
``python paper_figures/NAME.py --quick --out DIR`` and when loaded by ``dptree-opt figures``
(``dptree_opt.cli._scripts.load_script`` puts it there).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from numbers import Integral, Real
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: scripts only write PNG files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dptree_opt.cli._common import output_dir, stdout_closed  # noqa: E402
from dptree_opt.cli._scripts import script_outputs  # noqa: E402
from dptree_opt.files import write_text_atomic  # noqa: E402
from dptree_opt.plotting import save_figure  # noqa: E402

__all__ = ["plt", "style", "caption", "plain_log_ticks", "check", "bound_check", "flag_check",
           "save_png", "write_json", "summary", "table_axes", "cli", "rel_dev", "to_jsonable"]

DPI = 110

PALETTE = {"range": "#7f7f7f", "histogram": "#ff7f0e", "binary": "#1f77b4", "17-ary": "#2ca02c",
           "raw": "#d62728", "above": "#ff9f1c", "below": "#bcbd22", "efficient": "#1f77b4",
           "exact": "black", "mc": "#1f77b4", "bound": "#d62728"}


def style() -> None:
    """A readable default style (sizes chosen for 100 % zoom of ~1300 px wide figures)."""
    plt.rcParams.update({
        "font.size": 10.5, "axes.titlesize": 11.5, "axes.labelsize": 10.5,
        "legend.fontsize": 9, "xtick.labelsize": 9.5, "ytick.labelsize": 9.5,
        "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": DPI, "savefig.dpi": DPI,
        "axes.spines.top": False, "axes.spines.right": False,
    })


def caption(fig, text: str, y: float = 0.012) -> None:
    """The caption line at the bottom of a figure (names the paper and the item)."""
    fig.text(0.5, y, text, ha="center", va="bottom", fontsize=9, style="italic", wrap=True)


def plain_log_ticks(ax, axis: str = "y") -> None:
    """Label a log axis with plain numbers (0.2, 1, 4) instead of 2x10^-1 style ticks."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fmt = FuncFormatter(lambda v, _pos: f"{v:g}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(fmt)
    target.set_minor_formatter(NullFormatter())


# ----------------------------------------------------------------------------- checks
def _is_number(x) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(float(x))


def rel_dev(reproduced, expected) -> float | None:
    """|reproduced - expected| / |expected| for two finite numbers (None otherwise)."""
    if not (_is_number(reproduced) and _is_number(expected)):
        return None
    e, r = float(expected), float(reproduced)
    if e == 0:
        return abs(r)
    return abs(r - e) / abs(e)


def check(what: str, reproduced, expected, source: str, *, rel: float = 1e-9,
          abs_tol: float = 0.0, ok: bool | None = None, note: str = "") -> dict:
    """A numeric comparison: ok when |r - e| <= max(rel |e|, abs_tol) (or the given ``ok``).

    ``deviation`` is the relative deviation |r - e| / |e| reported by the CLI summary."""
    dev = rel_dev(reproduced, expected)
    if ok is None:
        if dev is None:
            ok = reproduced == expected
        else:
            ok = abs(float(reproduced) - float(expected)) <= max(rel * abs(float(expected)),
                                                                  abs_tol)
    out = {"what": what, "reproduced": to_jsonable(reproduced),
           "expected": to_jsonable(expected), "source": source, "ok": bool(ok),
           "deviation": dev}
    if note:
        out["note"] = note
    return out


def bound_check(what: str, value: float, bound: float, source: str, *, kind: str = "<=",
                note: str = "") -> dict:
    """An inequality check value <= bound (or >= with kind='>='); no relative deviation."""
    ok = value <= bound if kind == "<=" else value >= bound
    out = {"what": what, "reproduced": to_jsonable(value),
           "expected": f"{kind} {to_jsonable(bound)}", "source": source, "ok": bool(ok),
           "deviation": None}
    if note:
        out["note"] = note
    return out


def flag_check(what: str, reproduced, expected: str, ok: bool, source: str,
               note: str = "") -> dict:
    """A qualitative check (a statement of the paper reproduced or not)."""
    out = {"what": what, "reproduced": to_jsonable(reproduced), "expected": expected,
           "source": source, "ok": bool(ok), "deviation": None}
    if note:
        out["note"] = note
    return out


# ----------------------------------------------------------------------------- output
def to_jsonable(x):
    """numpy scalars/arrays and tuples -> plain JSON types (NaN/inf -> strings)."""
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return [to_jsonable(v) for v in x.tolist()]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, Integral):
        return int(x)
    if isinstance(x, (Real, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else str(x)
    return x


def save_png(fig, out_dir: Path, name: str) -> Path:
    """Write ``out_dir/name.png`` atomically (replacing a previous one: the command line
    checks ``--out`` before the run) and close the figure."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return save_figure(fig, out_dir / f"{name}.png", force=True)
    finally:
        plt.close(fig)


def write_json(out_dir: Path, name: str, data: dict) -> Path:
    """Write ``out_dir/name.json`` (the numbers the figure plots, and its checks)
    atomically, replacing a previous one."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    write_text_atomic(path, json.dumps(to_jsonable(data), indent=1) + "\n", force=True)
    return path


def summary(name: str, title: str, png: Path, json_path: Path, checks: list[dict],
            **extra) -> dict:
    """The dict every ``run`` returns."""
    return {"name": name, "title": title, "png": str(png), "json": str(json_path),
            "checks": checks, **extra}


def table_axes(ax, rows: list[list[str]], col_labels: list[str], *, col_widths=None,
               font_size: float = 9.5, row_colors=None, scale_y: float = 1.6) -> None:
    """Draw a table filling ``ax`` (axis switched off)."""
    ax.axis("off")
    tab = ax.table(cellText=rows, colLabels=col_labels, loc="upper center",
                   cellLoc="left", colLoc="left", colWidths=col_widths)
    tab.auto_set_font_size(False)
    tab.set_fontsize(font_size)
    tab.scale(1.0, scale_y)
    for (r, _c), cell in tab.get_celld().items():
        cell.set_edgecolor("#bbbbbb")
        if r == 0:
            cell.set_facecolor("#e8eef7")
            cell.set_text_props(weight="bold")
        elif row_colors is not None and row_colors[r - 1] is not None:
            cell.set_facecolor(row_colors[r - 1])


# ----------------------------------------------------------------------------- CLI
def cli(run, doc: str | None = None) -> None:
    """``python paper_figures/NAME.py [--quick] [--out DIR] [--force]``: run and print the
    checks. ``--out`` is checked first, as ``dptree-opt figures`` does."""
    name = Path(run.__code__.co_filename).stem
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--quick", action="store_true",
                        help="fewer Monte Carlo trials / smaller sweeps (seconds)")
    parser.add_argument("--out", default="figures",
                        help=f"output directory (default ./figures), created if missing (its "
                             f"parent must exist); refused if it holds {name}.png / .json / "
                             ".csv, unless --force")
    parser.add_argument("--force", action="store_true",
                        help="overwrite the files of a previous run in --out")
    args = parser.parse_args()
    try:
        out = output_dir(args.out, flag="--out", files=script_outputs(name),
                         force=args.force)
    except ValueError as exc:
        parser.error(str(exc))
    t0 = time.perf_counter()
    res = run(out, quick=args.quick)
    secs = time.perf_counter() - t0
    bad = sum(not c["ok"] for c in res["checks"])
    try:
        print(f"{res['name']}: {res['title']}")
        print(f"  wrote {res['png']} and {res['json']} ({secs:.1f} s)")
        for c in res["checks"]:
            mark = "ok  " if c["ok"] else "FAIL"
            print(f"  [{mark}] {c['what']}: reproduced {c['reproduced']}, expected "
                  f"{c['expected']} ({c['source']})")
        sys.stdout.flush()
    except BrokenPipeError:  # piped to head: as `dptree-opt figures`
        raise SystemExit(stdout_closed()) from None
    raise SystemExit(1 if bad else 0)
