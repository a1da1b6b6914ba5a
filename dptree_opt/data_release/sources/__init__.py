"""Data-engine adapters behind one contract (``base``): each engine counts its data where it
lives and yields exact, mergeable ``Tally`` objects; ``count`` is the front door and the
registry (``source_for`` / ``source_named``) picks the adapter. Each adapter module exposes one
``SOURCE`` object, registered here once, in this order."""

from __future__ import annotations

from . import dask_source, duckdb_source, pandas_source, polars_source, spark_source
from .base import (Source, Tally, count, engine_counts, finish, is_engine_input, register,
                   source_for, source_named, source_names, tally_columns)

__all__ = ["Source", "Tally", "count", "engine_counts", "finish", "is_engine_input", "register",
           "source_for", "source_named", "source_names", "tally_columns"]

for _module in (duckdb_source, pandas_source, dask_source, spark_source, polars_source):
    register(_module.SOURCE)
del _module
