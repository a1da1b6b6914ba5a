"""`dptree-opt query RELEASE.json`: ask a saved release (1-D or grid) for ranges, boxes,
cumulative counts and quantiles, with exact standard errors -- post-processing only: the
file is loaded with ``load_release`` (checked, no data, no noise) and answers are printed as
text or, with ``--json``, as one JSON object."""

from __future__ import annotations

import argparse
import json
import math
import re
from typing import Any

import numpy as np

from ..data_release import BoxCount, GridRelease, Release, load_release
from ._common import Subparsers

ORDER = 25  # position in `dptree-opt --help`: after release
# values that are numbers or comma lists of numbers, negatives included ("-1.5,-2")
_NUMBERS = re.compile(r"^-(?:\d|\.\d|inf)[\d.eE+\-,inf]*$", re.IGNORECASE)


def _floats(text: str, flag: str, d: int | None = None) -> list[float]:
    try:
        vals = [float(v) for v in str(text).split(",")]
    except ValueError:
        raise ValueError(f"{flag}: cannot read numbers in {text!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{flag}: values must be finite, got {text!r}")
    if d is not None and len(vals) != d:
        raise ValueError(f"{flag}: the release has {d} axes; give {d} comma-separated values, "
                         f"got {text!r}")
    return vals


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _answer(kind: str, query: dict[str, Any], box: BoxCount) -> dict[str, Any]:
    return {"query": kind, **query, "estimate": _num(box.estimate),
            "standard_error": _num(box.standard_error), "consistent": _num(box.consistent)}


def _answers_1d(rel: Release, args: argparse.Namespace) -> list[dict]:
    out = []
    if args.box:
        raise ValueError("--box is for grid releases; this release is 1-D: use --range A B")
    for a, b in args.range or []:
        a, b = _floats(a, "--range", 1)[0], _floats(b, "--range", 1)[0]
        if a > b:
            raise ValueError(f"--range: A must be <= B, got {a} and {b}")
        out.append(_answer("range", {"a": a, "b": b}, rel.range_answer(a, b)))
    for x in args.cdf or []:
        x = _floats(x, "--cdf", 1)[0]
        out.append(_answer("cdf", {"x": x}, rel.cumulative_answer(x)))
    if args.quantiles:
        qs = [_floats(q, "--quantiles", 1)[0] for q in args.quantiles]
        if any(not 0 <= q <= 1 for q in qs):
            raise ValueError("--quantiles: levels must be in [0, 1]")
        table = rel.quantile_answers(qs)
        for j, q in enumerate(qs):
            out.append({"query": "quantile", "q": q,
                        **{c: _num(table[c][j]) for c in ("value", "lower", "upper",
                                                          "noise_lower", "noise_upper")},
                        "interval_level": rel.interval_level})
    return out


def _answers_grid(rel: GridRelease, args: argparse.Namespace) -> list[dict]:
    d = len(rel.specs)
    if args.quantiles:
        raise ValueError("--quantiles needs a 1-D release; a grid release answers --box, "
                         "--range (one axis) and --cdf")
    out = []
    for a, b in args.range or []:
        if d != 1:
            raise ValueError(f"--range is for one axis; this grid has {d}: use --box "
                             "x0,y0 x1,y1")
        lo, hi = _floats(a, "--range", 1), _floats(b, "--range", 1)
        out.append(_answer("range", {"a": lo[0], "b": hi[0]}, rel.range_count(lo, hi)))
    for a, b in args.box or []:
        lo, hi = _floats(a, "--box", d), _floats(b, "--box", d)
        if any(x > y for x, y in zip(lo, hi)):
            raise ValueError("--box: the low corner must be <= the high corner on every axis")
        out.append(_answer("box", {"lo": lo, "hi": hi}, rel.range_count(lo, hi)))
    for x in args.cdf or []:
        hi = _floats(x, "--cdf", d)
        lo = [s.lower for s in rel.specs]
        out.append(_answer("cdf", {"x": hi}, rel.range_count(lo, np.maximum(lo, hi))))
    return out


def _text(ans: dict) -> str:
    def f(x: float | None) -> str:
        return "nan" if x is None else f"{x:.6g}"
    if ans["query"] == "quantile":
        pct = f"{100 * ans['interval_level']:g}%"
        return (f"quantile {ans['q']:g}: {f(ans['value'])}  {pct} interval (true quantile) "
                f"[{f(ans['lower'])}, {f(ans['upper'])}]  noise-only "
                f"[{f(ans['noise_lower'])}, {f(ans['noise_upper'])}]")
    if ans["query"] == "range":
        what = f"range [{ans['a']:g}, {ans['b']:g})"
    elif ans["query"] == "box":
        what = "box " + " x ".join(f"[{a:g}, {b:g})" for a, b in zip(ans["lo"], ans["hi"]))
    else:
        x = ans["x"]
        what = f"count < {x:g}" if not isinstance(x, list) else \
            "count below (" + ", ".join(f"{v:g}" for v in x) + ")"
    return (f"{what}: {f(ans['estimate'])} (SE {f(ans['standard_error'])}), consistent "
            f"{f(ans['consistent'])}")


def run(args: argparse.Namespace) -> int:
    """Load the release, answer every query, print."""
    if not (args.range or args.box or args.quantiles or args.cdf):
        raise ValueError("give at least one query: --range A B, --box LO HI, --quantiles Q.. "
                         "or --cdf X")
    rel = load_release(args.release)
    grid = isinstance(rel, GridRelease)
    answers = (_answers_grid(rel, args) if isinstance(rel, GridRelease)
               else _answers_1d(rel, args))
    if args.json:
        print(json.dumps({"release": str(args.release), "kind": "grid" if grid else "1-D",
                          "complete": rel.complete, "answers": answers}, indent=2))
    else:
        for ans in answers:
            print(_text(ans))
        print("(estimate: the unbiased BLUE with its exact standard error; consistent: the "
              "same query on the consistent release)")
    return 0


def register(sub: Subparsers) -> None:
    """Add the `query` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "query", help="answer ranges, boxes, CDF values and quantiles from a saved release",
        description="Load a release saved with `dptree-opt release --out FILE.json` (or "
                    "Release.to_json) and answer queries with exact standard errors: "
                    "post-processing only (no data, no new noise, no privacy cost). The file "
                    "is checked (format, checksum, every field) before anything is answered.",
        epilog="examples: dptree-opt query release.json --range 10 20 --quantiles 0.5 0.9; "
               "dptree-opt query grid.json --box -74,40.6 -73.9,40.8 --json")
    # comma lists of negative numbers are values, not options (argparse's own test accepts
    # plain negative numbers only)
    p._negative_number_matcher = _NUMBERS
    p.add_argument("release", help="the release's JSON file")
    p.add_argument("--range", nargs=2, action="append", metavar=("A", "B"),
                   help="count of values in [A, B) (1-D, or a grid of one axis); repeatable")
    p.add_argument("--box", nargs=2, action="append", metavar=("LO", "HI"),
                   help="count in the box from corner LO to HI (comma lists, one value per "
                        "axis, e.g. --box 0,0 1.5,2); repeatable")
    p.add_argument("--cdf", nargs="+", metavar="X",
                   help="count of values below X (grids: below the corner X, a comma list)")
    p.add_argument("--quantiles", nargs="+", metavar="Q",
                   help="quantiles at levels Q in [0, 1] with their intervals (1-D): the "
                        "released ones as released, others computed from the release")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
