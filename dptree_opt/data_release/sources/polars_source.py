"""Polars adapter: a ``polars.Series``, ``DataFrame`` or ``LazyFrame`` counted block by block.

Columns reach ``tally_columns`` (the one bin rule, docs/math.md section 10) as Arrow arrays
(``Series.to_arrow``, zero copy): null is missing, NaN is missing, integers are checked
exactly (never through float64). A DataFrame is cut into slices of ``BLOCK_ROWS`` rows; a
LazyFrame is projected on the picked columns and streamed in chunks of ``BLOCK_ROWS`` rows
(``collect_batches``, Polars' streaming engine; memory O(block + cells)), each chunk one
Tally, merged by addition. Polars is imported only inside the functions that need it.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from ..binning import BinSpec
from .base import Tally, is_engine_object, picked_names, tally_columns

__all__ = ["PolarsSource", "SOURCE", "BLOCK_ROWS"]

BLOCK_ROWS = 1 << 22  # rows per tally_columns call


def _chunks(obj: Any, columns: tuple[str, ...] | None, d: int) -> Iterator[Any]:
    """Polars DataFrames of the picked columns, at most BLOCK_ROWS rows each."""
    if is_engine_object(obj, "polars", ("Series",)):
        if d != 1 or (columns is not None and len(columns) != 1):
            raise ValueError(f"columns: a Series has one column, but {d} bin specs were given")
        obj = obj.to_frame()
        columns = None
    if is_engine_object(obj, "polars", ("LazyFrame",)):
        names = picked_names(list(obj.collect_schema().names()), columns, d)
        lazy = obj.select(names)
        if hasattr(lazy, "collect_batches"):  # Polars >= 1.33: streamed
            yield from lazy.collect_batches(chunk_size=BLOCK_ROWS, maintain_order=False)
            return
        obj = lazy.collect()
    names = picked_names(list(obj.columns), columns, d)
    yield from obj.select(names).iter_slices(BLOCK_ROWS)


class PolarsSource:
    """``Source`` for Polars Series, DataFrames and LazyFrames."""

    name = "polars"

    def accepts(self, obj: Any) -> bool:
        """A Polars Series, DataFrame or LazyFrame (by class name; polars is not imported)."""
        return is_engine_object(obj, "polars", ("Series", "DataFrame", "LazyFrame"))

    def tally(self, obj: Any, specs: Sequence[BinSpec], *, columns: tuple[str, ...] | None,
              out_of_range: str = "error") -> Tally:
        """Tally of the picked columns, chunk by chunk, merged by addition."""
        specs = tuple(specs)
        total = Tally.empty(specs)
        for chunk in _chunks(obj, columns, len(specs)):  # over chunks, not rows
            cols = [chunk.to_series(i).to_arrow() for i in range(chunk.width)]
            total = total + tally_columns(cols, specs, out_of_range=out_of_range,
                                          names=tuple(chunk.columns))
        return total

    def open_files(self, path_or_glob: str, columns: Sequence[str] | None = None) -> Any:
        """A Polars LazyFrame scanning the CSV or Parquet file(s) of ``path_or_glob``."""
        import polars as pl
        low = path_or_glob.lower()
        lf = pl.scan_parquet(path_or_glob) if low.endswith((".parquet", ".pq")) \
            else pl.scan_csv(path_or_glob)
        return lf.select(list(columns)) if columns is not None else lf


SOURCE = PolarsSource()
