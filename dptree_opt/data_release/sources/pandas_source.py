"""pandas adapter: a ``pandas.Series`` or ``DataFrame`` counted block by block.

Each block of ``BLOCK_ROWS`` rows is handed to ``tally_columns`` (the one bin rule, BinSpec's
edges: docs/math.md section 10) as the column's own values, never through float64 for
integers: numpy integer / float columns as numpy arrays (zero copy); nullable extension
columns (``Int64``, ``UInt64``, ``Float64``, ``int64[pyarrow]``, ...) as Arrow arrays, so a NA
counts as missing and an integer beyond 2^53 is refused exactly instead of being rounded;
object columns of Python numbers as object arrays with every NA (None, NaN, ``pd.NA``)
mapped to None (missing). The block Tallies merge by addition. pandas is imported only by the
caller: ``accepts`` looks at the class names.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..binning import BinSpec
from .base import Tally, is_engine_object, picked_names, tally_columns

__all__ = ["PandasSource", "SOURCE", "BLOCK_ROWS", "column_values", "pick_columns",
           "tally_frame", "is_engine_object"]

BLOCK_ROWS = 1 << 22  # rows per tally_columns call: bounded temporaries (4M values per column)


def column_values(series: Any) -> Any:
    """The values of one pandas Series in a form ``tally_columns`` takes without losing
    integers: a numpy array for numpy dtypes (object columns with every NA as None), an Arrow
    array for extension dtypes that export one (nullable and pyarrow-backed), else an object
    array with NAs as None. O(n) at most (zero copy for numpy and Arrow-backed columns)."""
    dtype = series.dtype
    if isinstance(dtype, np.dtype):
        if dtype.kind == "O":
            return series.to_numpy(dtype=object, na_value=None)
        return series.to_numpy()
    values = series.array
    if hasattr(values, "__arrow_array__"):
        import pyarrow as pa  # a main dependency of the package
        return pa.array(values)
    return series.to_numpy(dtype=object, na_value=None)


def pick_columns(frame: Any, columns: tuple[str, ...] | None, d: int) -> list[Any]:
    """The Series to count from a DataFrame or Series: ``columns`` by name (one per axis), or,
    with ``columns=None``, a Series itself or the only column(s) of a frame with exactly
    ``d`` columns. ValueError naming ``columns`` for a missing, duplicated or ambiguous name."""
    if not hasattr(frame, "columns"):  # a Series
        if columns is not None and len(columns) != 1:
            raise ValueError(f"columns: a Series has one column, got {list(columns)}")
        if d != 1:
            raise ValueError(f"columns: a Series has one column, but {d} bin specs were given")
        return [frame]
    return [frame[c] for c in picked_names(list(frame.columns), columns, d)]


def tally_frame(frame: Any, specs: Sequence[BinSpec], columns: tuple[str, ...] | None,
                out_of_range: str = "error") -> Tally:
    """Tally of one in-memory pandas DataFrame / Series (a whole object or one Dask
    partition), in blocks of ``BLOCK_ROWS`` rows merged by addition. O(rows) time, O(cells +
    block) memory beyond the frame."""
    series = pick_columns(frame, columns, len(specs))
    names = columns if columns is not None else tuple(
        str(s.name) if s.name is not None else "data" for s in series)
    n = len(frame)
    total = Tally.empty(specs)
    for start in range(0, max(n, 1), BLOCK_ROWS):  # over blocks, not rows
        block = [column_values(s.iloc[start:start + BLOCK_ROWS]) for s in series]
        total = total + tally_columns(block, specs, out_of_range=out_of_range, names=names)
    return total


class PandasSource:
    """``Source`` for ``pandas.Series`` / ``pandas.DataFrame`` (in memory)."""

    name = "pandas"

    def accepts(self, obj: Any) -> bool:
        """A pandas Series or DataFrame (checked by class name; pandas is not imported)."""
        return is_engine_object(obj, "pandas", ("Series", "DataFrame"))

    def tally(self, obj: Any, specs: Sequence[BinSpec], *, columns: tuple[str, ...] | None,
              out_of_range: str = "error") -> Tally:
        """Tally of the picked columns (``pick_columns``), block by block."""
        return tally_frame(obj, specs, columns, out_of_range)

    def open_files(self, path_or_glob: str, columns: Sequence[str] | None = None) -> Any:
        """A pandas DataFrame of the CSV or Parquet file(s) matching ``path_or_glob`` (read
        whole, in memory), with Arrow-backed dtypes so integer columns with NULLs stay
        integers."""
        import glob
        import importlib

        pd = importlib.import_module("pandas")  # (untyped: no stubs needed)
        paths = sorted(glob.glob(path_or_glob))
        if not paths:
            raise ValueError(f"path: no file matches {path_or_glob!r}")
        cols = list(columns) if columns is not None else None
        frames = []
        for p in paths:  # over files
            if p.lower().endswith((".parquet", ".pq")):
                frames.append(pd.read_parquet(p, columns=cols, dtype_backend="pyarrow"))
            else:
                frames.append(pd.read_csv(p, usecols=cols, dtype_backend="pyarrow",
                                          engine="pyarrow"))
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


SOURCE = PandasSource()
