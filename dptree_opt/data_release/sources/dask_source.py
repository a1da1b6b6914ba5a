"""Dask adapter: a Dask DataFrame, Series or array counted partition by partition.

Each partition (a pandas frame, or a numpy block of a Dask array) becomes one ``Tally``
(``pandas_source.tally_frame``: the one bin rule, docs/math.md section 10, with integers
never passed through float64); the Tallies are merged by addition in a tree of fan-in
``FAN_IN`` built from ``dask.delayed``, and the whole graph runs in ONE ``dask.compute``, on
whatever scheduler is active (the default threads, or a ``distributed.Client`` of any
cluster: only the Tallies, O(cells) each, travel). The workers must be able to import
``dptree_opt``. Dask is imported only inside the functions that need it.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..binning import BinSpec
from .base import Tally, is_engine_object, picked_names, tally_columns
from .pandas_source import tally_frame

__all__ = ["DaskSource", "SOURCE", "FAN_IN", "merge_tallies", "tally_block", "tree_sum"]

FAN_IN = 8  # Tallies merged per task of the reduction tree


def merge_tallies(*tallies: Tally) -> Tally:
    """The sum of Tallies (one node of the reduction tree). O(len(tallies) * cells)."""
    total = tallies[0]
    for t in tallies[1:]:  # over the few children of a node
        total = total + t
    return total


def tally_block(block: np.ndarray, specs: Sequence[BinSpec], out_of_range: str) -> Tally:
    """Tally of one numpy block of a Dask array: 1-D (one axis) or (rows, d) (column i on axis
    i)."""
    cols = [block] if block.ndim == 1 else [block[:, i] for i in range(block.shape[1])]
    return tally_columns(cols, specs, out_of_range=out_of_range)


def _array_parts(arr: Any, specs: Sequence[BinSpec], out_of_range: str) -> list:
    d = len(specs)
    if arr.ndim == 1 and d == 1:
        blocks = arr.to_delayed().ravel()
    elif arr.ndim == 2 and arr.shape[1] == d:
        blocks = arr.rechunk({1: -1}).to_delayed().ravel()  # one block column: whole rows
    else:
        raise ValueError(f"data: a Dask array must be 1-D (one axis) or of shape (rows, {d}) "
                         f"for {d} bin specs, got shape {arr.shape}")
    import dask
    part = dask.delayed(tally_block, pure=True)
    shared = dask.delayed(specs, traverse=False)  # one graph key: the edges travel once
    return [part(b, shared, out_of_range) for b in blocks]


def _frame_parts(obj: Any, specs: Sequence[BinSpec], columns: tuple[str, ...] | None,
                 out_of_range: str) -> list:
    if hasattr(obj, "columns"):  # checked before any work (the projection reads only these)
        picked = picked_names(list(obj.columns), columns, len(specs))
        if columns is not None:
            obj = obj[picked]
    import dask
    part = dask.delayed(tally_frame, pure=True)
    shared = dask.delayed(specs, traverse=False)  # one graph key: the edges travel once
    return [part(p, shared, columns, out_of_range) for p in obj.to_delayed()]


def tree_sum(parts: list) -> Any:
    """One delayed Tally: ``parts`` merged FAN_IN at a time (depth log_FAN_IN(len(parts)))."""
    import dask
    merge = dask.delayed(merge_tallies, pure=True)
    while len(parts) > 1:  # over the levels of the tree
        parts = [merge(*parts[i:i + FAN_IN]) for i in range(0, len(parts), FAN_IN)]
    return parts[0]


class DaskSource:
    """``Source`` for Dask DataFrames, Series and arrays, on any scheduler."""

    name = "dask"

    def accepts(self, obj: Any) -> bool:
        """A Dask DataFrame, Series or Array (by class name; dask is not imported)."""
        return is_engine_object(obj, "dask", ("DataFrame", "Series", "Array"))

    def tally(self, obj: Any, specs: Sequence[BinSpec], *, columns: tuple[str, ...] | None,
              out_of_range: str = "error") -> Tally:
        """Tally of every partition, merged by a tree of additions, in one ``dask.compute``."""
        import dask
        specs = tuple(specs)
        if is_engine_object(obj, "dask", ("Array",)):
            if columns is not None:
                raise ValueError("columns: a Dask array has no column names; pass the array "
                                 "(1-D, or (rows, d) for a grid) without column=/columns=")
            parts = _array_parts(obj, specs, out_of_range)
        else:
            parts = _frame_parts(obj, specs, columns, out_of_range)
        if not parts:
            return Tally.empty(specs)
        (total,) = dask.compute(tree_sum(parts))
        return total

    def open_files(self, path_or_glob: str, columns: Sequence[str] | None = None) -> Any:
        """A Dask DataFrame over the CSV or Parquet file(s) of ``path_or_glob`` (lazy), with
        Arrow-backed dtypes so integer columns with NULLs stay integers."""
        import dask.dataframe as dd
        cols = list(columns) if columns is not None else None
        low = path_or_glob.lower()
        if low.endswith((".parquet", ".pq")) or low.endswith("/"):
            return dd.read_parquet(path_or_glob, columns=cols, dtype_backend="pyarrow")
        return dd.read_csv(path_or_glob, usecols=cols, dtype_backend="pyarrow")


SOURCE = DaskSource()
