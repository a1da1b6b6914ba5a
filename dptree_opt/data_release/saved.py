"""Releases saved as JSON, loaded back: ``load_release(path)`` (post-processing only).

A release's JSON (``Release.to_json`` / ``GridRelease.to_json``, formats ``FORMAT`` and
``GRID_FORMAT``) holds everything it published, the record of its mechanism (format
``MECHANISM_FORMAT``: the strategy, noise, neighbour model, budget and the budgets per level
or per row) and a sha256 checksum of the rest. ``load_release`` checks the file (size, UTF-8
without a byte-order mark, strict JSON: no NaN / Infinity, the format, the checksum, every
field's type and length, sizes before anything is built), rebuilds the Mechanism from its
record, checks it against the published account (noise scale of every level, the loss
achieved, the standard errors), and returns a ``Release`` / ``GridRelease`` that answers every
query as the one in the process that released it did. No data is read, no noise is drawn:
loading is post-processing of the published output (docs/saved_releases.md).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..mechanism import Mechanism
from ..pipeline import CONSISTENCY, PrivateCDF
from ..privacy import NEIGHBOURS
from ..queries import cdf_standard_errors
from ..strategies.base import frozen_copy
from ..strategies.records import strategy_from_record
from .binning import BinSpec
from .grid_result import GRID_FORMAT, GridRelease
from .result import FORMAT, MECHANISM_FORMAT, Release, document_checksum

__all__ = ["load_release", "release_from_dict", "mechanism_from_record", "MAX_RELEASE_BYTES",
           "MAX_SAVED_BINS", "READABLE_FORMATS"]

MAX_RELEASE_BYTES = 1 << 31   # a saved release larger than this is refused before reading
MAX_SAVED_BINS = 1 << 22      # bins (cells) of a saved release: above any release's limit
READABLE_FORMATS = (FORMAT, GRID_FORMAT)
_RTOL = 1e-9                  # rebuilt vs published floats (scales, losses, standard errors)


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"release: the JSON holds {name}, which to_json never writes (it writes "
                     "null for a missing number): the file was edited or is not a release")


def _read(path: str | os.PathLike) -> dict:
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path: {str(p)!r} is not a file")
    size = p.stat().st_size
    if size > MAX_RELEASE_BYTES:
        raise ValueError(f"path: {size} bytes, more than the {MAX_RELEASE_BYTES} a saved "
                         "release may have")
    raw = p.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raise ValueError("release: the file starts with a byte-order mark (BOM), which "
                         "to_json never writes: it was re-saved by another program; restore "
                         "the original file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"release: the file is not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None
    return parse_release(text)


def parse_release(text: str) -> dict:
    """The release document in ``text`` (strict JSON: NaN / Infinity refused), its format
    and checksum checked (ValueError)."""
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"release: not valid JSON ({exc.msg} at line {exc.lineno}, column "
                         f"{exc.colno}): the file is truncated or was edited") from None
    if not isinstance(doc, dict):
        raise ValueError("release: the JSON is not an object (not a saved release)")
    fmt = doc.get("format")
    if fmt not in READABLE_FORMATS:
        raise ValueError(f"release: format {fmt!r} is not one this version reads "
                         f"({', '.join(READABLE_FORMATS)})")
    check = doc.get("checksum")
    if not isinstance(check, dict) or "mechanism" not in doc:
        raise ValueError("release: the file has no checksum or no mechanism record: it was "
                         "written by an older version of dptree_opt (before saved releases "
                         "could be loaded) or edited")
    if check.get("sha256") != document_checksum(doc):
        raise ValueError("release: the checksum does not match the content: the file was "
                         "edited or damaged after to_json wrote it")
    return doc


# ------------------------------------------------------------------ field checks
def _get(d: Any, key: str, what: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise ValueError(f"release: the field {what}{key!r} is missing")
    return d[key]


def _number(value: Any, name: str, *, none: bool = False) -> float:
    if value is None and none:
        return math.nan
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError(f"release: {name} must be a finite number, got {value!r}")
    return float(value)


def _floats(values: Any, name: str, n: int, *, none: bool = True) -> np.ndarray:
    if not isinstance(values, list) or len(values) != n:
        got = len(values) if isinstance(values, list) else type(values).__name__
        raise ValueError(f"release: {name} must be a list of {n} numbers, got {got}")
    ok = all((type(v) in (int, float)) or (none and v is None) for v in values)
    if not ok:
        raise ValueError(f"release: {name} must hold numbers" + (" or null" if none else ""))
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def _flat(values: Any, name: str, shape: tuple) -> list:
    """The nested lists of a grid array, flattened (row-major), shape checked."""
    if len(shape) == 1:
        return values if isinstance(values, list) and len(values) == shape[0] else _bad(name)
    if not isinstance(values, list) or len(values) != shape[0]:
        _bad(name)
    return [v for sub in values for v in _flat(sub, name, shape[1:])]


def _bad(name: str) -> NoReturn:
    raise ValueError(f"release: {name} does not have the grid's shape")


def _check_float(value: float, expected: float, name: str) -> None:
    if not (math.isclose(value, expected, rel_tol=_RTOL, abs_tol=1e-300)
            or (math.isinf(value) and value == expected)):
        raise ValueError(f"release: {name} = {expected!r} in the file, but the mechanism "
                         f"recorded there gives {value!r}: the file is inconsistent")


# ------------------------------------------------------------------ mechanism
def mechanism_from_record(d: Any) -> Mechanism:
    """The Mechanism a ``mechanism_record`` describes (ValueError naming the field)."""
    if not isinstance(d, dict) or d.get("format") != MECHANISM_FORMAT:
        raise ValueError(f"release: the mechanism record is not of format {MECHANISM_FORMAT!r}")
    noise, neighbours = _get(d, "noise", "mechanism."), _get(d, "neighbours", "mechanism.")
    if noise not in ("laplace", "gaussian"):
        raise ValueError(f"release: mechanism.noise must be 'laplace' or 'gaussian', got "
                         f"{noise!r}")
    if neighbours not in NEIGHBOURS:
        raise ValueError(f"release: mechanism.neighbours must be one of {NEIGHBOURS}")
    budget = _number(_get(d, "budget", "mechanism."), "mechanism.budget")
    if budget <= 0:
        raise ValueError("release: mechanism.budget must be > 0")
    public, discrete = _get(d, "public_total", "mechanism."), _get(d, "discrete", "mechanism.")
    if type(public) is not bool or type(discrete) is not bool:
        raise ValueError("release: mechanism.public_total and mechanism.discrete must be "
                         "true or false")
    strategy = strategy_from_record(_get(d, "strategy", "mechanism."), "mechanism.strategy")
    levels, rows = _get(d, "level_budgets", "mechanism."), _get(d, "row_budgets", "mechanism.")
    kw: dict[str, Any] = {"epsilon" if noise == "laplace" else "rho": budget}
    if levels is not None:
        if not isinstance(levels, list) or len(levels) > 4096:
            raise ValueError("release: mechanism.level_budgets must be a list of numbers")
        kw["level_budgets"] = _floats(levels, "mechanism.level_budgets", len(levels),
                                      none=False).tolist()
    if rows is not None:
        kw["row_budgets"] = _floats(rows, "mechanism.row_budgets", strategy.n_rows, none=False)
    try:
        return Mechanism(strategy, noise=noise, neighbours=neighbours,
                         public_total=True if public and neighbours == "add_remove" else None,
                         discrete=discrete, **kw)
    except ValueError as exc:
        raise ValueError(f"release: the mechanism record does not calibrate ({exc})") from None


def _check_account(mech: Mechanism, privacy: Any) -> None:
    """The rebuilt mechanism against the published privacy account: the loss achieved and,
    with budgets per level, each level's noise scale."""
    if not isinstance(privacy, dict):
        raise ValueError("release: privacy must be an object")
    achieved = mech.epsilon if mech.noise == "laplace" else mech.rho
    published = _number(_get(privacy, "achieved", "privacy."), "privacy.achieved")
    _check_float(math.nan if achieved is None else float(achieved), published,
                 "privacy.achieved")
    if _get(privacy, "noise", "privacy.") != mech.noise or \
            _get(privacy, "neighbours", "privacy.") != mech.neighbours:
        raise ValueError("release: privacy.noise / privacy.neighbours differ from the "
                         "mechanism record")
    levels = privacy.get("levels")
    if isinstance(levels, list) and mech.row_budgets is None:
        for entry in levels:
            lvl = _get(entry, "level", "privacy.levels[].")
            scale = mech.level_scales.get(lvl) if isinstance(lvl, int) else None
            if scale is None:
                raise ValueError(f"release: privacy.levels names level {lvl!r}, which the "
                                 "mechanism does not have")
            given = _get(entry, "scale", "privacy.levels[].")
            _check_float(scale, math.inf if given is None else
                         _number(given, "privacy.levels[].scale"), f"the scale of level {lvl}")


# ------------------------------------------------------------------ documents
def _common(doc: dict, mech: Mechanism) -> dict:
    notes, complete = _get(doc, "notes", ""), _get(doc, "complete", "")
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise ValueError("release: notes must be a list of strings")
    if type(complete) is not bool or type(_get(doc, "total_public", "")) is not bool:
        raise ValueError("release: complete and total_public must be true or false")
    if doc["total_public"] != mech.public_total:
        raise ValueError("release: total_public differs from the mechanism record")
    description, expected = _get(doc, "description", ""), _get(doc, "expected_error", "")
    if not isinstance(description, str) or not isinstance(expected, dict):
        raise ValueError("release: description must be a string, expected_error an object")
    timings = doc.get("timings_seconds", {})
    y = doc.get("measurements")
    meas = (np.zeros(0) if y is None else
            _floats(y, "measurements", mech.released.n_rows))
    total = _get(doc, "total", "")
    if total is not None and (type(total) is not int or total < 0):
        raise ValueError(f"release: total must be a non-negative integer or null, got {total!r}")
    return {"notes": tuple(notes), "complete": complete, "description": description,
            "expected_error": expected, "timings": dict(timings) if isinstance(timings, dict)
            else {}, "measurements": frozen_copy(meas), "total": total,
            "privacy": doc["privacy"], "total_public": doc["total_public"]}


def _spec(axis: Any, name: str) -> BinSpec:
    k = _get(axis, "K", name)
    if type(k) is not int or not 1 <= k <= MAX_SAVED_BINS:
        raise ValueError(f"release: {name}K must be an integer in [1, {MAX_SAVED_BINS}], got "
                         f"{k!r}")
    spec = BinSpec(_number(_get(axis, "lower", name), f"{name}lower"),
                   _number(_get(axis, "upper", name), f"{name}upper"), k)
    edges = _floats(_get(axis, "edges", name), f"{name}edges", k + 1, none=False)
    if not np.array_equal(edges, spec.bin_edges):
        raise ValueError(f"release: {name}edges are not the bin rule's edges of lower, upper "
                         "and K")
    return spec


def _one_d(doc: dict) -> Release:
    mech = mechanism_from_record(doc["mechanism"])
    spec = _spec(_get(doc, "bins", ""), "bins.")
    k = spec.bins
    tree = _get(doc, "tree", "")
    branching = _get(tree, "branching", "tree.")
    if not isinstance(branching, list) or not all(type(b) is int and b >= 1 for b in branching) \
            or math.prod(branching) != mech.n_bins or mech.n_bins < k:
        raise ValueError(f"release: tree.branching must multiply to the mechanism's "
                         f"{mech.n_bins} leaves (>= K = {k})")
    common = _common(doc, mech)
    _check_account(mech, common["privacy"])
    cdf = _get(doc, "cdf", "")
    consistency, estimator = _get(cdf, "consistency", "cdf."), _get(cdf, "estimator", "cdf.")
    if consistency not in CONSISTENCY or estimator != "blue":
        raise ValueError(f"release: cdf.consistency must be one of {CONSISTENCY} and "
                         "cdf.estimator 'blue'")
    raw = _floats(_get(cdf, "raw", "cdf."), "cdf.raw", k)
    se = _floats(_get(cdf, "standard_errors", "cdf."), "cdf.standard_errors", k, none=False)
    cons = _floats(_get(cdf, "consistent", "cdf."), "cdf.consistent", k)
    complete = common["complete"]
    if complete and consistency is not None:
        if not all(type(v) is int for v in cdf["consistent"]):
            raise ValueError("release: cdf.consistent must be integer counts")
        cons = np.asarray(cdf["consistent"], dtype=np.int64)
    rebuilt = np.asarray(cdf_standard_errors(mech, "blue"), dtype=np.float64)[:k]
    if not np.allclose(rebuilt, se, rtol=_RTOL, atol=1e-12 * float(np.max(se, initial=1.0))):
        raise ValueError("release: cdf.standard_errors are not those of the mechanism "
                         "recorded in the file: the file is inconsistent")
    total = common["total"]
    pcdf = PrivateCDF(raw=frozen_copy(raw), consistent=frozen_copy(cons),
                      standard_errors=frozen_copy(se), total=total,
                      total_public=common["total_public"], description=common["description"],
                      consistency=consistency, estimator="blue", integer=complete,
                      weighted=False, mechanism=mech)
    qs = _get(doc, "quantiles", "")
    if not isinstance(qs, list) or len(qs) > 10_000:
        raise ValueError("release: quantiles must be a list")
    cols = ("q", "value", "lower", "upper", "noise_lower", "noise_upper")
    table = {c: _floats([_get(q, c, "quantiles[].") for q in qs], f"quantiles[].{c}", len(qs),
                        none=c != "q") for c in cols}
    if np.any((table["q"] < 0) | (table["q"] > 1)):
        raise ValueError("release: quantiles[].q must be in [0, 1]")
    level = _number(_get(doc, "interval_level", ""), "interval_level")
    if not 0 < level < 1:
        raise ValueError("release: interval_level must be in (0, 1)")
    return Release(spec=spec, cdf=pcdf, quantile_levels=tuple(table["q"].tolist()),
                   quantiles=frozen_copy(table["value"]),
                   quantile_lower=frozen_copy(table["lower"]),
                   quantile_upper=frozen_copy(table["upper"]),
                   quantile_noise_lower=frozen_copy(table["noise_lower"]),
                   quantile_noise_upper=frozen_copy(table["noise_upper"]),
                   interval_level=level, mechanism=mech, branching=tuple(branching),
                   measurements=common["measurements"], privacy=common["privacy"],
                   description=common["description"], timings=common["timings"],
                   expected_error=common["expected_error"], notes=common["notes"],
                   complete=complete)


def _grid(doc: dict) -> GridRelease:
    mech = mechanism_from_record(doc["mechanism"])
    axes = _get(doc, "axes", "")
    if not isinstance(axes, list) or not 1 <= len(axes) <= 8:
        raise ValueError("release: axes must be a list of 1 to 8 axes")
    specs = tuple(_spec(a, f"axes[{i}].") for i, a in enumerate(axes))
    names = tuple(_get(a, "name", f"axes[{i}].") for i, a in enumerate(axes))
    if not all(isinstance(n, str) for n in names):
        raise ValueError("release: axes[].name must be strings")
    shape = tuple(s.bins for s in specs)
    if math.prod(shape) > MAX_SAVED_BINS:
        raise ValueError(f"release: the grid has more than {MAX_SAVED_BINS} cells")
    hier = _get(doc, "hierarchy", "")
    branchings = _get(hier, "branchings", "hierarchy.")
    if not isinstance(branchings, list) or len(branchings) != len(shape) or not all(
            isinstance(b, list) and all(type(k) is int and k >= 1 for k in b)
            for b in branchings):
        raise ValueError("release: hierarchy.branchings must be one list of integers per axis")
    padded = tuple(math.prod(b) for b in branchings)
    if any(p < n for p, n in zip(padded, shape)) or math.prod(padded) != mech.n_bins:
        raise ValueError("release: hierarchy.branchings do not match the mechanism's grid")
    common = _common(doc, mech)
    _check_account(mech, common["privacy"])
    cells = _get(doc, "cells", "")
    consistency = _get(cells, "consistency", "cells.")
    if consistency not in ("l2", None) or _get(cells, "estimator", "cells.") != "blue":
        raise ValueError("release: cells.consistency must be 'l2' or null, estimator 'blue'")
    n = math.prod(shape)
    raw = _floats(_flat(_get(cells, "raw", "cells."), "cells.raw", shape), "cells.raw",
                  n).reshape(shape)
    cons_doc = _get(cells, "consistent", "cells.")
    cons = None
    if consistency is not None and cons_doc is not None:
        flat = _flat(cons_doc, "cells.consistent", shape)
        if common["complete"] and not all(type(v) is int for v in flat):
            raise ValueError("release: cells.consistent must be integer counts")
        cons = (np.asarray(flat, dtype=np.int64) if common["complete"] else
                _floats(flat, "cells.consistent", n)).reshape(shape)
    out = GridRelease(specs=specs, names=names, raw=frozen_copy(raw),
                      consistent=None if cons is None else frozen_copy(cons),
                      consistency=consistency, total=common["total"],
                      total_public=common["total_public"], mechanism=mech,
                      branchings=tuple(tuple(b) for b in branchings),
                      measurements=common["measurements"], privacy=common["privacy"],
                      description=common["description"], timings=common["timings"],
                      expected_error=common["expected_error"], notes=common["notes"],
                      complete=common["complete"])
    se = _number(_get(cells, "standard_error", "cells."), "cells.standard_error")
    _check_float(out.cell_standard_error, se, "cells.standard_error")
    return out


def release_from_dict(doc: Any) -> Release | GridRelease:
    """The ``Release`` / ``GridRelease`` of a parsed release document (as ``to_dict`` made
    it, checksum included): see :func:`load_release`."""
    if not isinstance(doc, dict) or doc.get("format") not in READABLE_FORMATS:
        raise ValueError("release: not a release document of a format this version reads "
                         f"({', '.join(READABLE_FORMATS)})")
    check = doc.get("checksum")
    if not isinstance(check, dict) or check.get("sha256") != document_checksum(doc):
        raise ValueError("release: the checksum is missing or does not match the content")
    return _one_d(doc) if doc["format"] == FORMAT else _grid(doc)


def load_release(path: str | os.PathLike) -> Release | GridRelease:
    """The ``Release`` (1-D) or ``GridRelease`` saved at ``path`` by ``to_json``.

    Post-processing only: no data is read and no noise is drawn. The file is checked before
    anything is built: at most ``MAX_RELEASE_BYTES``, UTF-8 without a byte-order mark, strict
    JSON (no NaN / Infinity), a format this version reads (``READABLE_FORMATS``), its sha256
    checksum, every field's type and length (at most ``MAX_SAVED_BINS`` bins or cells); the
    mechanism is rebuilt from its record and must reproduce the published noise scales, loss
    and standard errors. Any failure is a ValueError saying what is wrong. The result answers
    ``range_answer`` / ``cumulative_answer`` / ``quantile_answers`` (1-D) and
    ``range_count`` (grids) exactly as the released object did (docs/saved_releases.md)."""
    return release_from_dict(_read(path))
