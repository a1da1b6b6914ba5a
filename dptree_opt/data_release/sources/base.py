"""The one contract every data-engine adapter implements: exact, mergeable bin counts.

A data engine (DuckDB, pandas, Dask, Spark, Polars) counts its data where it lives, partition by
partition. Each partition yields a ``Tally``: the int64 counts of its valid rows binned by the
published edge rule (``BinSpec``, docs/math.md section 10) and, per column, how many values were
missing (NULL / None / NaN), infinite, below ``lower``, at or above ``upper``, or integers beyond
2^53 in magnitude (not exactly representable as doubles: refused, never rounded). Tallies merge
by addition, so the order and the split into partitions never change the result. ``finish``
then applies the release's rules (the same as ``HistogramAccumulator``): missing, infinite and
too-large values are always an error; values outside [lower, upper) are an error under
``out_of_range="error"`` and are counted in bin 0 / K - 1 under "clip"; no rows is an error.

An adapter is a ``Source`` registered with ``register``; ``source_for(obj)`` asks each one in
turn whether it ``accepts`` the object (without importing its engine), and ``count`` is the
front door: ``source_for(obj).tally(...)`` then ``finish(...)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from numbers import Integral, Real
from typing import Any, Protocol, Sequence, Union, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...limits import check_memory
from ..binning import BinSpec, check_out_of_range

__all__ = ["Tally", "Source", "tally_columns", "finish", "register", "source_for",
           "source_named", "source_names", "count", "engine_counts", "is_engine_input", "pick",
           "picked_names", "is_engine_object", "as_specs", "column_names", "TWO_53", "SpecsLike", "Names"]

TWO_53 = 1 << 53  # integers with |v| <= 2^53 are exact doubles; beyond, they are refused

SpecsLike = Union[BinSpec, Sequence[BinSpec]]  # one BinSpec, or one per axis
Names = Union[str, Sequence[str], None]  # one name, one per column, or None


def as_specs(specs: SpecsLike) -> tuple[BinSpec, ...]:
    """``specs`` as a non-empty tuple of ``BinSpec`` (one BinSpec or a sequence of them)."""
    if isinstance(specs, BinSpec):
        return (specs,)
    try:
        out = tuple(specs)
    except TypeError:
        raise ValueError(f"specs must be a BinSpec or a sequence of BinSpec, got {specs!r}")
    if not out or not all(isinstance(s, BinSpec) for s in out):
        raise ValueError(f"specs must be a BinSpec or a non-empty sequence of BinSpec, "
                         f"got {specs!r}")
    return out


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.int64)


@dataclass
class Tally:
    """The mergeable summary of one partition (or of a whole input).

    ``hist``: int64 (cells,), flat row-major counts of the valid rows (rows with no missing,
    infinite or too-large value in any column), each binned by its axis' ``BinSpec`` (values
    below ``lower`` in bin 0 and at or above ``upper`` in bin K - 1, as under "clip");
    ``rows``: records seen, valid or not; ``missing``, ``infinite``, ``below``, ``above``,
    ``too_large``: int64 (d,) per-column counts of each invalid class (module docstring)."""

    hist: np.ndarray
    rows: int
    missing: np.ndarray
    infinite: np.ndarray
    below: np.ndarray
    above: np.ndarray
    too_large: np.ndarray

    _PER_COLUMN = ("missing", "infinite", "below", "above", "too_large")

    def __add__(self, other: "Tally") -> "Tally":
        """The Tally of both partitions together (elementwise sums; shapes must agree)."""
        if not isinstance(other, Tally):
            return NotImplemented
        if self.hist.shape != other.hist.shape or self.missing.shape != other.missing.shape:
            raise ValueError(f"cannot merge tallies of different shapes: {self.hist.shape} "
                             f"cells x {self.missing.shape} columns and {other.hist.shape} "
                             f"cells x {other.missing.shape} columns")
        return Tally(self.hist + other.hist, int(self.rows) + int(other.rows),
                     *(getattr(self, f) + getattr(other, f) for f in self._PER_COLUMN))

    @classmethod
    def empty(cls, specs: SpecsLike) -> "Tally":
        """The Tally of no rows for ``specs`` (one BinSpec or one per axis)."""
        specs = as_specs(specs)
        d = len(specs)
        cells = math.prod(s.bins for s in specs)
        check_memory(8 * cells, f"the counts of {cells} cells",
                     "use fewer bins per axis")  # by arithmetic, before allocating
        return cls(_zeros(cells), 0,
                   _zeros(d), _zeros(d), _zeros(d), _zeros(d), _zeros(d))


# ------------------------------------------------------------------ one partition, in numpy
class _Column:
    """One column of a partition as float64 values plus its invalid-class masks."""

    __slots__ = ("x", "missing", "too_large")

    def __init__(self, x: np.ndarray, missing: np.ndarray | None, too_large: np.ndarray | None):
        self.x, self.missing, self.too_large = x, missing, too_large


def _big_int_mask(v: np.ndarray) -> np.ndarray | None:
    """|v| > 2^53 for an integer array, in integer arithmetic (None when impossible)."""
    if v.dtype.itemsize < 8:
        return None
    if v.dtype.kind == "u":
        return v > np.uint64(TWO_53)
    return (v > TWO_53) | (v < -TWO_53)


def _from_numpy(v: np.ndarray, name: str) -> _Column:
    kind = v.dtype.kind
    if kind in "iu":
        big = _big_int_mask(v)
        x = v.astype(np.float64)
        if big is not None and big.any():
            x[big] = 0.0  # refused: counted as too large, never binned
        else:
            big = None
        return _Column(x, None, big)
    if kind == "f":
        return _Column(v.astype(np.float64, copy=False), None, None)
    if kind == "O":
        return _from_objects(v, name)
    raise ValueError(f"{name}: values of dtype {v.dtype} cannot be binned (need integer or "
                     "floating-point numbers)")


def _classify(v: Any) -> int:
    """0: None, 1: an integer, 2: another real number, 3: anything else."""
    if v is None:
        return 0
    if isinstance(v, (bool, np.bool_)):
        return 3
    if isinstance(v, Integral):
        return 1
    if isinstance(v, (Real, Decimal)):
        return 2
    return 3


_CLASSIFY = np.frompyfunc(_classify, 1, 1)


def _from_objects(v: np.ndarray, name: str) -> _Column:
    """Python numbers / None: None is missing; integers beyond 2^53 are refused exactly (Python
    int comparison); other numbers are converted by ``float``. O(n) element calls (the cost of
    an object array)."""
    kind = _CLASSIFY(v).astype(np.int8) if v.size else np.zeros(0, np.int8)
    if (kind == 3).any():
        bad = v[int(np.argmax(kind == 3))]
        raise ValueError(f"{name}: a value of type {type(bad).__name__} ({bad!r}) cannot be "
                         "binned (need numbers, or None for missing)")
    missing = kind == 0
    ints = kind == 1
    big = np.zeros(v.size, dtype=bool)
    if ints.any():
        iv = v[ints]
        big[ints] = (iv > TWO_53) | (iv < -TWO_53)  # exact: Python integers
    ok = ~(missing | big)
    x = np.zeros(v.size, dtype=np.float64)
    x[ok] = v[ok].astype(np.float64)
    return _Column(x, missing if missing.any() else None, big if big.any() else None)


def _from_arrow(a: Any, name: str) -> _Column:
    """A pyarrow Array / ChunkedArray: nulls are missing; integer and DECIMAL values beyond
    2^53 in magnitude are refused (compared exactly, in their own type)."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    t = a.type
    missing = a.is_null().to_numpy(zero_copy_only=False) if a.null_count else None
    if pa.types.is_integer(t):
        v = a.fill_null(0).to_numpy(zero_copy_only=False) if a.null_count else \
            a.to_numpy(zero_copy_only=False)
        col = _from_numpy(v, name)
        return _Column(col.x, missing, col.too_large)
    if pa.types.is_floating(t):
        x = a.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        return _Column(x, missing, None)
    if pa.types.is_decimal(t):
        filled = a.fill_null(0) if a.null_count else a
        big = pc.greater(pc.abs(filled), pa.scalar(Decimal(TWO_53), t)).to_numpy(
            zero_copy_only=False) if t.precision - t.scale > 15 else None
        # nearest double (pyarrow's cast); values beyond 2^53 are refused, not rounded
        x = pc.cast(filled, pa.float64(), safe=False).to_numpy(zero_copy_only=False).copy()
        if big is not None and big.any():
            x[big] = 0.0
        else:
            big = None
        return _Column(x, missing, big)
    if pa.types.is_null(t):
        return _Column(np.zeros(len(a)), np.ones(len(a), dtype=bool), None)
    raise ValueError(f"{name}: values of type {t} cannot be binned (need integer, "
                     "floating-point or decimal numbers)")


def _column(values: Any, name: str) -> _Column:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return _from_arrow(values, name)
    v = np.asarray(values)
    if v.ndim != 1:
        raise ValueError(f"{name}: need a 1-D column, got shape {v.shape}")
    return _from_numpy(v, name)


def _count(mask: np.ndarray | None) -> int:
    return 0 if mask is None else int(np.count_nonzero(mask))


def tally_columns(columns: Any, specs: SpecsLike, *, out_of_range: str = "error",
                  names: Names = None) -> Tally:
    """The ``Tally`` of ONE partition: ``columns`` a sequence (one per axis, equal lengths) of
    numpy arrays (integer / float dtypes, or object arrays of Python numbers and None) or
    pyarrow Arrays / ChunkedArrays (nulls are missing). Integer columns are checked for
    |v| > 2^53 in integer arithmetic before any conversion; a row invalid (missing, infinite,
    too large) in any column is not binned; valid rows are binned by ``BinSpec.bin_index`` (the
    published edges, docs/math.md section 10), cells row-major. O(n d) vectorised; memory O(n d
    + cells). ``names`` (optional) name the columns in error messages."""
    check_out_of_range(out_of_range)
    specs = as_specs(specs)
    d = len(specs)
    if isinstance(columns, (np.ndarray, pa.Array, pa.ChunkedArray)) and d == 1:
        columns = [columns]
    columns = list(columns)
    names = column_names(names, d)
    if len(columns) != d:
        raise ValueError(f"columns: need one column per axis ({d}), got {len(columns)}")
    cols = [_column(c, n) for c, n in zip(columns, names)]
    n = cols[0].x.size
    if any(c.x.size != n for c in cols):
        raise ValueError(f"columns: all columns must have the same length, got "
                         f"{[c.x.size for c in cols]}")
    out = Tally.empty(specs)
    out.rows = n
    valid = np.ones(n, dtype=bool)
    for i, (c, s) in enumerate(zip(cols, specs)):
        x = c.x
        finite = np.isfinite(x)
        nan = np.isnan(x)
        missing = nan if c.missing is None else (c.missing | nan)
        out.missing[i] = _count(missing)
        out.infinite[i] = n - int(np.count_nonzero(finite)) - int(np.count_nonzero(nan))
        if c.missing is not None:  # a NULL slot holds a finite placeholder
            finite &= ~c.missing
        if c.too_large is not None:
            out.too_large[i] = _count(c.too_large)
            finite &= ~c.too_large
        out.below[i] = int(np.count_nonzero(finite & (x < s.lower)))
        out.above[i] = int(np.count_nonzero(finite & (x >= s.upper)))
        valid &= finite
    if not valid.all():
        xs = [c.x[valid] for c in cols]
    else:
        xs = [c.x for c in cols]
    idx = [s.bin_index(x) for s, x in zip(specs, xs)]
    if d == 1:
        cell = idx[0]
    else:
        cell = np.ravel_multi_index(idx, tuple(s.bins for s in specs)) if idx[0].size \
            else np.zeros(0, np.int64)
    out.hist += np.bincount(cell, minlength=out.hist.size)
    return out


def column_names(names: Names, d: int) -> tuple[str, ...]:
    """The column names used in messages: ``names`` (d of them), or "data" (d = 1) /
    "data column i"."""
    if names is None:
        return ("data",) if d == 1 else tuple(f"data column {i}" for i in range(d))
    names = (names,) if isinstance(names, str) else tuple(str(n) for n in names)
    if len(names) != d:
        raise ValueError(f"names: need {d}, got {len(names)}")
    return names


def finish(tally: Tally, specs: SpecsLike, *, out_of_range: str = "error",
           names: Names = None) -> np.ndarray:
    """The counts of a whole input from its merged ``Tally``: int64 (K,) for one spec, (K_1,
    .., K_d) for several; or ValueError naming the first column with invalid values and its
    counts per class (totals over all partitions: there is no first row across partitions).
    Missing (NULL / NaN), infinite and too-large integers are always errors; values outside
    [lower, upper) are an error under "error" and already counted in bin 0 / K - 1 under "clip";
    no rows is an error. Same rules as ``HistogramAccumulator``."""
    check_out_of_range(out_of_range)
    specs = as_specs(specs)
    d = len(specs)
    names = column_names(names, d)
    shape = tuple(s.bins for s in specs)
    if tally.hist.shape != (math.prod(shape),) or tally.missing.shape != (d,):
        raise ValueError(f"tally: shape {tally.hist.shape} x {tally.missing.shape} columns "
                         f"does not match the specs ({math.prod(shape)} cells x {d} columns)")
    where = "counted over all partitions; there is no first row across partitions"
    for i, name in enumerate(names):
        nan, inf, big = (int(tally.missing[i]), int(tally.infinite[i]),
                         int(tally.too_large[i]))
        if nan or inf or big:
            parts = ([f"{nan} NaN/missing"] if nan else []) + (
                [f"{inf} infinite"] if inf else []) + (
                [f"{big} integer(s) beyond 2^53 in magnitude (not exact as doubles: refused, "
                 "never rounded)"] if big else [])
            raise ValueError(f"{name}: {' and '.join(parts)} value(s) ({where}). Remove or "
                             "impute them before releasing")
    if out_of_range == "error":
        for i, (name, spec) in enumerate(zip(names, specs)):
            below, above = int(tally.below[i]), int(tally.above[i])
            if below or above:
                raise ValueError(
                    f"{name}: {below + above} value(s) outside [lower, upper) = "
                    f"[{spec.lower!r}, {spec.upper!r}) ({below} below lower, {above} at or "
                    f"above upper; {where}). Widen the range or pass out_of_range='clip' "
                    "(--out-of-range clip) to count them in the first/last bin")
    if tally.rows == 0:
        raise ValueError(f"{', '.join(names)}: no values (empty input)")
    hist = np.asarray(tally.hist, dtype=np.int64).copy()
    return hist if d == 1 else hist.reshape(shape)


# ------------------------------------------------------------------ the registry
@runtime_checkable
class Source(Protocol):
    """A data-engine adapter. ``name`` ("duckdb", "pandas", "dask", "spark", "polars");
    ``accepts(obj)`` tells whether ``obj`` is this engine's object WITHOUT importing the engine
    (it looks at ``type(obj).__module__`` and the class name); ``tally(obj, specs, *, columns,
    out_of_range)`` counts it (``columns`` a tuple of names, one per axis, or None when ``obj``
    has exactly one column / is a Series); ``open_files(path_or_glob, columns)`` returns the
    engine's object reading CSV / Parquet files."""

    name: str

    def accepts(self, obj: Any) -> bool: ...

    def tally(self, obj: Any, specs: Sequence[BinSpec], *, columns: tuple[str, ...] | None,
              out_of_range: str) -> Tally: ...

    def open_files(self, path_or_glob: str, columns: Sequence[str] | None) -> Any: ...


_REGISTRY: dict[str, Source] = {}


def register(source: Source) -> None:
    """Add an adapter (asked by ``source_for`` in registration order); registering again
    under the same name replaces the earlier one."""
    name = getattr(source, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"source: needs a non-empty str name, got {name!r}")
    for attr in ("accepts", "tally", "open_files"):
        if not callable(getattr(source, attr, None)):
            raise ValueError(f"source {name!r}: needs a callable {attr}")
    _REGISTRY[name] = source


def source_names() -> tuple[str, ...]:
    """The names of the registered adapters, in registration order."""
    return tuple(_REGISTRY)


def source_for(obj: Any) -> Source | None:
    """The adapter that accepts ``obj`` (the first in registration order), or None (plain
    numpy arrays, lists, ... are nobody's: they take the in-memory path)."""
    if isinstance(obj, (np.ndarray, list, tuple, str, bytes)) or obj is None:
        return None
    for source in _REGISTRY.values():
        if source.accepts(obj):
            return source
    return None


def source_named(name: str) -> Source:
    """The adapter registered as ``name``; ValueError listing the names."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"engine must be one of {sorted(_REGISTRY)}, got {name!r}") from None


def count(obj: Any, specs: SpecsLike, *, column: str | None = None, columns: Names = None,
          out_of_range: str = "error", names: Names = None) -> np.ndarray:
    """Bin counts of an engine's object (int64 (K,) for one spec, (K_1, .., K_d) for several),
    counted by its adapter and checked by ``finish``. ``column=`` names the one column (1-D),
    ``columns=`` one column per axis; both None when ``obj`` has exactly the right columns.
    ValueError when no adapter accepts ``obj``."""
    specs = as_specs(specs)
    check_out_of_range(out_of_range)
    cols = pick(column, columns, len(specs))
    source = source_for(obj)
    if source is None:
        raise ValueError(f"data: no registered engine adapter accepts an object of type "
                         f"{type(obj).__module__}.{type(obj).__qualname__} (engines: "
                         f"{sorted(_REGISTRY)})")
    tally = source.tally(obj, specs, columns=cols, out_of_range=out_of_range)
    return finish(tally, specs, out_of_range=out_of_range,
                  names=names if names is not None else cols)


def is_engine_input(obj: Any, column: str | None = None, columns: Names = None) -> bool:
    """True when an adapter accepts ``obj``; False for in-memory inputs (numpy arrays, lists),
    for which ``column`` / ``columns`` are a ValueError (they pick columns of a table)."""
    if source_for(obj) is not None:
        return True
    if column is not None or columns is not None:
        raise ValueError(
            "column / columns pick the columns of an engine's table (a DuckDB relation, a "
            "pandas, Dask, Spark or Polars DataFrame); for an in-memory array pass the "
            "values themselves (one per record, or records of shape (N, d) for a grid)")
    return False


def engine_counts(obj: Any, specs: SpecsLike, *, column: str | None = None,
                  columns: Names = None,
                  out_of_range: str = "error") -> np.ndarray | None:
    """``count`` for an engine's table, None for an in-memory input (the caller bins it;
    ``column`` / ``columns`` are then a ValueError: ``is_engine_input``)."""
    if not is_engine_input(obj, column, columns):
        return None
    return count(obj, specs, column=column, columns=columns, out_of_range=out_of_range)


def is_engine_object(obj: Any, package: str, names: Sequence[str]) -> bool:
    """True when a class in ``type(obj)``'s MRO is named one of ``names`` and defined in
    ``package`` or a subpackage of it (no import of the engine)."""
    for cls in type(obj).__mro__:
        module = getattr(cls, "__module__", "") or ""
        if cls.__name__ in names and (module == package or module.startswith(package + ".")):
            return True
    return False


def picked_names(names: Sequence[str], columns: tuple[str, ...] | None, d: int,
                 what: str = "frame") -> list[str]:
    """The ``d`` column names to count among a table's ``names``: ``columns`` (each present
    exactly once), or, with ``columns=None``, all of them when there are exactly ``d``.
    ValueError naming ``columns``; ``what`` names the table in the message ("relation",
    "frame", "DataFrame"). Shared by every adapter."""
    names = list(names)
    if columns is None:
        if len(names) != d:
            raise ValueError(f"columns: the {what} has {len(names)} columns {names[:10]}; pass "
                             f"column= (1-D) or columns= (one per axis) to pick {d}")
        return names
    if len(columns) != d:
        raise ValueError(f"columns: {d} bin specs need {d} columns, got {list(columns)}")
    for c in columns:
        hits = names.count(c)
        if hits != 1:
            raise ValueError(f"columns: {c!r} is {'not a column' if not hits else 'duplicated'}"
                             f" of the {what} (columns: {names[:10]})")
    return list(columns)


def pick(column: str | None, columns: Names, d: int) -> tuple[str, ...] | None:
    """``column=`` / ``columns=`` as a tuple of d names, or None (ValueError naming them)."""
    if column is not None and columns is not None:
        raise ValueError("pass column= (one column) or columns= (one per axis), not both")
    cols: tuple[str, ...]
    if column is not None:
        if not isinstance(column, str):
            raise ValueError(f"column must be a column name (str), got {column!r}")
        cols = (column,)
    elif columns is not None:
        cols = (columns,) if isinstance(columns, str) else tuple(columns)
        if not all(isinstance(c, str) for c in cols):
            raise ValueError(f"columns must be column names (str), got {columns!r}")
    else:
        return None
    if len(cols) != d:
        what = "column" if column is not None else "columns"
        raise ValueError(f"{what}: need {d} column name(s) (one per axis), got {len(cols)}")
    return cols
