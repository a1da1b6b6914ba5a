"""PySpark adapter: a Spark DataFrame counted per partition with the project's bin rule.

The picked columns go through ``DataFrame.mapInArrow``: on the executors, each partition's
Arrow record batches (gathered into blocks of up to ``BLOCK_ROWS`` rows, so Spark's small
Arrow batches do not cost one K-cell histogram each) are counted by ``tally_columns`` (the
``BinSpec`` edges, docs/math.md section 10; NULL and NaN are missing, integers checked
exactly: no Spark SQL re-implementation of the edges). A partition returns its ``Tally`` as
sparse rows ``(kind, index, value)`` (the nonzero entries only); the driver collects them as
Arrow and adds them up exactly in int64. Column types are checked on the driver from the
schema (integer, floating or decimal columns only) before any job runs, so a bad column is a
ValueError, not an executor traceback. The executors' Python must be able to import
``dptree_opt`` (``spark.pyspark.python`` / ``PYSPARK_PYTHON``). PySpark is imported only
inside the functions that need it.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, Sequence

import numpy as np

from ..binning import BinSpec
from .base import Tally, is_engine_object, picked_names, tally_columns

__all__ = ["SparkSource", "SOURCE", "BLOCK_ROWS", "FIELDS", "RESULT_SCHEMA",
           "tally_arrow_batches", "tally_rows", "tally_from_rows"]

BLOCK_ROWS = 1 << 20  # rows gathered from Spark's Arrow batches per tally_columns call
FIELDS = ("hist", "rows", "missing", "infinite", "below", "above", "too_large")  # kind = index
RESULT_SCHEMA = "kind byte, index long, value long"
_NUMERIC = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType",
            "DecimalType")  # decimals: nearest double, beyond 2^53 refused (base module)


def tally_rows(tally: Tally) -> Any:
    """A Tally as one Arrow record batch of its nonzero entries: ``kind`` (int8, the index
    of the field in ``FIELDS``), ``index`` and ``value`` (int64). O(cells)."""
    import pyarrow as pa
    kinds, index, value = [], [], []
    for k, name in enumerate(FIELDS):  # over the seven fields
        arr = np.atleast_1d(np.asarray(getattr(tally, name), dtype=np.int64))
        nz = np.flatnonzero(arr)
        kinds.append(np.full(nz.size, k, dtype=np.int8))
        index.append(nz.astype(np.int64))
        value.append(arr[nz])
    return pa.RecordBatch.from_arrays(
        [pa.array(np.concatenate(kinds)), pa.array(np.concatenate(index)),
         pa.array(np.concatenate(value))], names=["kind", "index", "value"])


def tally_from_rows(table: Any, specs: Sequence[BinSpec]) -> Tally:
    """The sum of the Tallies in an Arrow table of ``tally_rows`` batches (exact int64
    additions, ``np.add.at``). O(rows of the table + cells)."""
    total = Tally.empty(specs)
    kind = table.column("kind").to_numpy()
    index = table.column("index").to_numpy()
    value = table.column("value").to_numpy()
    sums = []
    for k, name in enumerate(FIELDS):  # over the seven fields
        pick = kind == k
        flat = np.array(np.atleast_1d(getattr(total, name)), dtype=np.int64).reshape(-1)
        np.add.at(flat, index[pick], value[pick])
        sums.append(flat)
    hist, rows, missing, infinite, below, above, too_large = sums
    return Tally(hist, int(rows[0]), missing, infinite, below, above, too_large)


def tally_arrow_batches(batches: Iterator[Any], specs: Sequence[BinSpec], out_of_range: str,
                        names: tuple[str, ...] | None = None) -> Iterator[Any]:
    """The ``mapInArrow`` function: one partition's record batches -> one ``tally_rows``
    batch. Batches are gathered into blocks of up to ``BLOCK_ROWS`` rows; memory O(block +
    cells)."""
    import pyarrow as pa
    total = Tally.empty(specs)
    pending: list[Any] = []
    rows = 0

    def flush() -> Tally:
        table = pa.Table.from_batches(pending)
        return tally_columns([table.column(i) for i in range(table.num_columns)], specs,
                             out_of_range=out_of_range, names=names)

    for batch in batches:  # over Spark's Arrow batches
        pending.append(batch)
        rows += batch.num_rows
        if rows >= BLOCK_ROWS:
            total = total + flush()
            pending, rows = [], 0
    if pending:
        total = total + flush()
    yield tally_rows(total)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class SparkSource:
    """``Source`` for PySpark DataFrames (classic or Spark Connect)."""

    name = "spark"

    def accepts(self, obj: Any) -> bool:
        """A PySpark DataFrame (by class name; pyspark is not imported)."""
        return is_engine_object(obj, "pyspark", ("DataFrame",))

    def tally(self, obj: Any, specs: Sequence[BinSpec], *, columns: tuple[str, ...] | None,
              out_of_range: str = "error") -> Tally:
        """Tally of the picked columns: one ``mapInArrow`` job, summed on the driver."""
        specs = tuple(specs)
        d = len(specs)
        fields = {f.name: f for f in obj.schema.fields}
        names = [f.name for f in obj.schema.fields]
        columns = tuple(picked_names(names, columns, d, "DataFrame"))
        for c in columns:  # over the picked columns: types checked before any job
            kind = type(fields[c].dataType).__name__
            if kind not in _NUMERIC:
                raise ValueError(f"{c}: column type {fields[c].dataType.simpleString()} is not "
                                 "an integer, floating or decimal type; cast it to double "
                                 "explicitly")
        # plain aliases: mapInArrow cannot resolve names holding dots or backticks
        picked = obj.selectExpr(*[f"{_quote(c)} AS c{i}" for i, c in enumerate(columns)])
        fn = functools.partial(tally_arrow_batches, specs=specs, out_of_range=out_of_range,
                               names=tuple(columns))
        table = picked.mapInArrow(fn, RESULT_SCHEMA).toArrow()
        return tally_from_rows(table, specs)

    def open_files(self, path_or_glob: str, columns: Sequence[str] | None = None) -> Any:
        """A Spark DataFrame over the CSV (header row, inferred types) or Parquet file(s) of
        ``path_or_glob``, in the active SparkSession (or a new local one)."""
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        low = path_or_glob.lower()
        if low.endswith((".parquet", ".pq")) or low.endswith("/"):
            df = spark.read.parquet(path_or_glob)
        else:
            df = spark.read.csv(path_or_glob, header=True, inferSchema=True)
        return df.select(*[_quote(c) for c in columns]) if columns is not None else df


SOURCE = SparkSource()
