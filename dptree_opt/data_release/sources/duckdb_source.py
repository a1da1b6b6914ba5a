"""DuckDB adapter: a relation (``con.sql(...)``, ``duckdb.sql(...)``, ``duckdb.read_parquet``,
...) counted INSIDE DuckDB by SQL generated from the ``BinSpec``.

``bin_sql(spec, column)`` is the bin rule of ``BinSpec.bin_index`` (docs/math.md section 10;
binning module docstring) as one SQL expression on the same doubles: every constant is written
as ``CAST('<repr>' AS DOUBLE)`` (DuckDB parses the shortest round-trip decimal back to the same
double); values below ``lower`` go to bin 0 and values at or above ``upper`` to bin K - 1;
for the others the guess ``g = min(floor(((x - lower) / (upper - lower)) * K), K - 1)`` is
corrected once against the edges ``lower + ((upper - lower) * g) / K`` and ``lower + ((upper
- lower) * (g + 1)) / K``, evaluated in DuckDB's IEEE doubles in exactly that order, and
capped at K - 1 (x < upper = e_K). ``tally_sql`` is the whole counting query: one pass, grouped by
the row-major cell, with the invalid classes of every column (NULL, NaN, +-inf, below, above,
and integers beyond 2^53 for BIGINT / UBIGINT / HUGEINT / UHUGEINT / wide DECIMAL columns)
counted in the same query. Only the (at most cells + 1) groups leave DuckDB.
"""

from __future__ import annotations

import glob
import re
from typing import Any, Sequence

import numpy as np

from ..binning import BinSpec
from .base import TWO_53, SpecsLike, Tally, as_specs, picked_names

__all__ = ["DuckDBSource", "SOURCE", "bin_sql", "cell_sql", "tally_sql", "tally_relation",
           "quote_identifier"]

_FLOAT_TYPES = {"FLOAT", "DOUBLE", "REAL"}
_SMALL_INT_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT", "UINTEGER"}
_SIGNED_BIG_INT_TYPES = {"BIGINT", "HUGEINT"}
_UNSIGNED_BIG_INT_TYPES = {"UBIGINT", "UHUGEINT"}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def _double(x: float) -> str:
    """A SQL DOUBLE literal equal to the Python float ``x`` (shortest round-trip text)."""
    return f"CAST('{float(x)!r}' AS DOUBLE)"


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (inner double quotes doubled)."""
    return '"' + str(name).replace('"', '""') + '"'


def bin_sql(spec: BinSpec, column: str) -> str:
    """The SQL expression (BIGINT) of the bin of ``column`` (a SQL expression of type DOUBLE,
    e.g. a column name or ``CAST(income AS DOUBLE)``) by ``spec``'s published edges: the same
    doubles and operations as ``BinSpec.bin_index`` (binning module docstring; docs/math.md
    section 10): the value clipped into [lower, prev(upper)] (values below ``lower`` go to
    bin 0, values at or above ``upper`` to bin K - 1), the guess, one correction against the
    edges. NULL stays NULL and NaN goes to bin K - 1: filter NULL / NaN / inf first, as
    ``tally_sql`` does.

    >>> print(bin_sql(BinSpec(0, 4, 2), "x"))  # doctest: +NORMALIZE_WHITESPACE
    CAST(LEAST(LEAST(FLOOR(((LEAST(GREATEST(x, CAST('0.0' AS DOUBLE)), CAST('3.9999999999999996'
    AS DOUBLE)) - CAST('0.0' AS DOUBLE)) / CAST('4.0' AS DOUBLE)) * CAST('2.0' AS DOUBLE)), 1)
    - CAST(LEAST(GREATEST(x, CAST('0.0' AS DOUBLE)), CAST('3.9999999999999996' AS DOUBLE)) <
    CAST('0.0' AS DOUBLE) + (CAST('4.0' AS DOUBLE) * LEAST(FLOOR(((LEAST(GREATEST(x, CAST('0.0'
    AS DOUBLE)), CAST('3.9999999999999996' AS DOUBLE)) - CAST('0.0' AS DOUBLE)) / CAST('4.0' AS
    DOUBLE)) * CAST('2.0' AS DOUBLE)), 1)) / CAST('2.0' AS DOUBLE) AS INTEGER) +
    CAST(LEAST(GREATEST(x, CAST('0.0' AS DOUBLE)), CAST('3.9999999999999996' AS DOUBLE)) >=
    CAST('0.0' AS DOUBLE) + (CAST('4.0' AS DOUBLE) * (LEAST(FLOOR(((LEAST(GREATEST(x,
    CAST('0.0' AS DOUBLE)), CAST('3.9999999999999996' AS DOUBLE)) - CAST('0.0' AS DOUBLE)) /
    CAST('4.0' AS DOUBLE)) * CAST('2.0' AS DOUBLE)), 1) + 1)) / CAST('2.0' AS DOUBLE) AS
    INTEGER), 1) AS BIGINT)
    """
    if not isinstance(spec, BinSpec):
        raise ValueError(f"spec must be a BinSpec, got {spec!r}")
    v = _clip_sql(spec, column)
    return _bin_from_guess(spec, v, _guess_sql(spec, v))


def _clip_sql(spec: BinSpec, x: str) -> str:
    """x clipped into [lower, prev(upper)] (the last double below upper, in bin K - 1)."""
    return f"LEAST(GREATEST({x}, {_double(spec.lower)}), " \
           f"{_double(np.nextafter(spec.upper, -np.inf))})"


def _guess_sql(spec: BinSpec, v: str) -> str:
    """The guess min(floor(((v - lower) / (upper - lower)) * K), K - 1) of a clipped value
    (DOUBLE, >= 0), as in ``BinSpec.bin_index``."""
    lo, k = _double(spec.lower), _double(spec.bins)
    return f"LEAST(FLOOR((({v} - {lo}) / {_double(spec.upper - spec.lower)}) * {k}), " \
           f"{spec.bins - 1})"


def _bin_from_guess(spec: BinSpec, v: str, g: str) -> str:
    """The bin of a clipped value ``v`` from its guess ``g``: g - [v < e_g] + [v >= e_(g+1)]
    (the published formula, same operation order), capped at K - 1 (v < upper = e_K)."""
    lo, k = _double(spec.lower), _double(spec.bins)
    width, last = _double(spec.upper - spec.lower), spec.bins - 1
    return (f"CAST(LEAST({g} - CAST({v} < {lo} + ({width} * {g}) / {k} AS INTEGER) + "
            f"CAST({v} >= {lo} + ({width} * ({g} + 1)) / {k} AS INTEGER), {last}) AS BIGINT)")


def cell_sql(specs: SpecsLike, columns: Sequence[str]) -> str:
    """The row-major cell (BIGINT) of a grid: sum over axes of ``bin_sql(spec_a, column_a)``
    times the number of cells after axis a (``bin_sql`` for one axis)."""
    specs = as_specs(specs)
    if len(columns) != len(specs):
        raise ValueError(f"columns: need {len(specs)} (one per axis), got {len(columns)}")
    terms, stride = [], 1
    for spec, col in reversed(list(zip(specs, columns))):
        terms.append(bin_sql(spec, col) if stride == 1 else f"{bin_sql(spec, col)} * {stride}")
        stride *= spec.bins
    return " + ".join(reversed(terms))


# the class of a value in ``tally_sql``'s pattern (base-6 digit per column)
OK, MISSING, INFINITE, TOO_LARGE, BELOW, ABOVE = range(6)
_CLASS_FIELDS = {MISSING: "missing", INFINITE: "infinite", TOO_LARGE: "too_large",
                 BELOW: "below", ABOVE: "above"}


def _too_large(column: str, sql_type: str, name: str) -> tuple[bool, str]:
    """(is a float type, SQL predicate: an integer beyond 2^53, on the column's own type)."""
    t = sql_type.upper()
    if t in _FLOAT_TYPES:
        return True, "FALSE"
    if t in _SMALL_INT_TYPES:
        return False, "FALSE"
    if t in _SIGNED_BIG_INT_TYPES:
        return False, f"({column} > {TWO_53} OR {column} < -{TWO_53})"
    if t in _UNSIGNED_BIG_INT_TYPES:
        return False, f"{column} > {TWO_53}"
    m = _DECIMAL.fullmatch(t)
    if m:
        if int(m.group(1)) - int(m.group(2)) <= 15:  # integer digits: |v| < 10^15 < 2^53
            return False, "FALSE"
        lim = f"CAST({TWO_53} AS DECIMAL({m.group(1)},{m.group(2)}))"
        return False, f"({column} > {lim} OR {column} < -{lim})"
    raise ValueError(f"{name}: a column of type {sql_type} cannot be binned (need integer, "
                     "floating-point or decimal numbers)")


def tally_sql(specs: SpecsLike, columns: Sequence[str], types: Sequence[str],
              table: str) -> str:
    """The counting query of ``table`` (a SQL table expression), one pass: one row per group
    with ``p`` (the pattern: sum over columns i of class_i * 6^i, class 0 valid and in range,
    1 NULL / NaN, 2 +-inf, 3 an integer beyond 2^53 (BIGINT, UBIGINT, HUGEINT, UHUGEINT, wide
    DECIMAL; compared in the column's own type), 4 below lower, 5 at or above upper),
    ``cell`` (the row-major cell of ``bin_sql``'s bins, out-of-range values in the first /
    last bin; NULL when a value is missing, infinite or too large) and ``n`` (rows).
    ``columns``: column names (one per axis); ``types``: their DuckDB types."""
    specs = as_specs(specs)
    d = len(specs)
    if len(columns) != d or len(types) != d:
        raise ValueError(f"columns: need {d} (one per axis), got {len(columns)}")
    read, classify, guess, cells, valid, stride = [], [], [], [], [], 1
    pattern = " + ".join(f"CAST(c{i} AS BIGINT) * {6 ** i}" for i in range(d))
    for i, (spec, name, sql_type) in enumerate(zip(specs, columns, types)):
        col = quote_identifier(name)
        is_float, big = _too_large(col, sql_type, str(name))
        read.append(f"CAST({col} AS DOUBLE) AS x{i}, {big} AS t{i}")
        bad = (f"WHEN x{i} IS NULL OR isnan(x{i}) THEN {MISSING} WHEN isinf(x{i}) THEN "
               f"{INFINITE} " if is_float else f"WHEN x{i} IS NULL THEN {MISSING} ")
        classify.append(f"CASE {bad}WHEN t{i} THEN {TOO_LARGE} WHEN x{i} < "
                        f"{_double(spec.lower)} THEN {BELOW} WHEN x{i} >= "
                        f"{_double(spec.upper)} THEN {ABOVE} ELSE {OK} END AS c{i}, "
                        f"{_clip_sql(spec, f'x{i}')} AS v{i}")
        guess.append(f"c{i}, v{i}, {_guess_sql(spec, f'v{i}')} AS g{i}")
        valid.append(f"c{i} NOT IN ({MISSING}, {INFINITE}, {TOO_LARGE})")
    for i in reversed(range(d)):  # row-major: the last axis varies fastest
        b = _bin_from_guess(specs[i], f"v{i}", f"g{i}")
        cells.append(b if stride == 1 else f"{b} * {stride}")
        stride *= specs[i].bins
    return (f"SELECT p, cell, COUNT(*) AS n FROM (SELECT {pattern} AS p, CASE WHEN "
            f"{' AND '.join(valid)} THEN {' + '.join(reversed(cells))} END AS cell FROM "
            f"(SELECT {', '.join(guess)} FROM (SELECT {', '.join(classify)} FROM (SELECT "
            f"{', '.join(read)} FROM {table})))) GROUP BY p, cell")


def _pick(rel: Any, columns: tuple[str, ...] | None, d: int) -> tuple[list[str], list[str]]:
    names = list(rel.columns)
    types = [str(t) for t in rel.types]
    picked = picked_names(names, columns, d, "relation")
    return picked, [types[names.index(c)] for c in picked]


def tally_relation(rel: Any, specs: SpecsLike, columns: tuple[str, ...] | None) -> Tally:
    """The ``Tally`` of a DuckDB relation, counted inside DuckDB by ``tally_sql`` (one query;
    DuckDB's own threads and memory management). O(rows) in DuckDB, O(cells) out."""
    specs = as_specs(specs)
    d = len(specs)
    cols, types = _pick(rel, columns, d)
    table = "dptree_opt_input"
    import duckdb  # the relation's own package: installed
    try:
        query = rel.query(table, tally_sql(specs, cols, types, table))
        fetch = getattr(query, "to_arrow_table", None) or query.fetch_arrow_table  # < 1.4
        result = fetch()
    except duckdb.Error as exc:  # e.g. a CSV value DuckDB cannot parse
        raise ValueError(f"duckdb could not count the data: {exc}") from None
    out = Tally.empty(specs)
    n = result.column("n").to_numpy(zero_copy_only=False).astype(np.int64)
    p = result.column("p").to_numpy(zero_copy_only=False).astype(np.int64)
    out.rows = int(n.sum())
    cell = result.column("cell")
    valid = cell.is_valid().to_numpy(zero_copy_only=False)
    if valid.any():
        np.add.at(out.hist, cell.drop_null().to_numpy(zero_copy_only=False), n[valid])
    for i in range(d):  # over columns: the base-6 digit of the pattern
        digit = (p // 6 ** i) % 6
        for code, field in _CLASS_FIELDS.items():
            getattr(out, field)[i] = int(n[digit == code].sum())
    return out


class DuckDBSource:
    """``Source`` for DuckDB relations (``duckdb.DuckDBPyRelation``): counted in DuckDB."""

    name = "duckdb"

    def accepts(self, obj: Any) -> bool:
        """A DuckDB relation (checked by class and module name; duckdb is not imported)."""
        return any(cls.__name__ == "DuckDBPyRelation" and
                   (getattr(cls, "__module__", "") or "").split(".")[0] == "duckdb"
                   for cls in type(obj).__mro__)

    def tally(self, obj: Any, specs: SpecsLike, *, columns: tuple[str, ...] | None,
              out_of_range: str = "error") -> Tally:
        """``tally_relation``: one query in DuckDB (``out_of_range`` is applied by
        ``finish``: below / above are counted and binned into bins 0 / K - 1 either way)."""
        return tally_relation(obj, specs, columns)

    def open_files(self, path_or_glob: str, columns: Sequence[str] | None = None) -> Any:
        """A relation reading the Parquet (``.parquet`` / ``.pq``) or CSV file(s) matching
        ``path_or_glob`` (DuckDB globs), on a fresh in-memory connection."""
        import duckdb  # optional: the test / duckdb extra
        lower = str(path_or_glob).lower()
        parquet = lower.endswith((".parquet", ".pq"))
        if not parquet and not lower.endswith((".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz")):
            raise ValueError(f"path: {path_or_glob!r} must end in .parquet, .pq, .csv, .tsv "
                             "or .txt (optionally .gz) for the duckdb engine")
        if "://" not in lower and not glob.glob(str(path_or_glob)):
            raise ValueError(f"path: no file matches {path_or_glob!r}")
        con = duckdb.connect()
        try:
            rel = (con.read_parquet if parquet else con.read_csv)(str(path_or_glob))
            if columns is not None:
                rel = rel.select(*[quote_identifier(c) for c in columns])
        except duckdb.Error as exc:  # unreadable file, a missing column, ...
            raise ValueError(f"duckdb could not read {path_or_glob!r}: {exc}") from None
        return rel


SOURCE = DuckDBSource()
