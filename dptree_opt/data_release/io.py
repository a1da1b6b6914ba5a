"""Reading the data of a release in bounded memory: CSV / Parquet columns, counts files.

* CSV (``read_csv_column``): the header is parsed with the ``csv`` module; the body is read
  in blocks of about ``chunk_bytes`` (``readlines(hint)``, whole lines) and each block is
  parsed by ``numpy.loadtxt`` (C parser, quotes allowed, one column kept). Memory stays
  O(chunk) whatever the file size; only the K bin counts are accumulated. Limits: one record
  per line (no quoted field spanning lines), UTF-8, a header row naming the columns.
* Parquet (``read_parquet_column``): ``pyarrow.parquet.ParquetFile.iter_batches`` over the one
  column, when pyarrow is installed (a clear error otherwise).
* Counts files (``read_counts``): the K bin counts produced elsewhere (a distributed engine),
  either one count per line in bin order, or ``bin,count`` lines (missing bins are 0).

Every parse failure is a ValueError naming the file, the column and the first offending
line; no traceback from inside numpy escapes.
"""

from __future__ import annotations

import csv
import os
import re
from typing import Iterator

import numpy as np

from .binning import BinSpec, HistogramAccumulator

__all__ = ["read_csv_column", "read_parquet_column", "read_column", "histogram_from_file",
           "histogram_from_values", "read_counts", "DEFAULT_CHUNK_BYTES"]

DEFAULT_CHUNK_BYTES = 1 << 24  # ~16 MB of text per parsed block
_VALUES_PER_CHUNK = 1 << 22  # in-memory arrays are binned in blocks of 4M values

_ROW = re.compile(r"at row (\d+)")


def _check_file(path) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"file not found: {path!r}")
    return path


def _delimiter(path: str, delimiter) -> str:
    if delimiter is not None:
        return delimiter
    return "\t" if path.lower().endswith((".tsv", ".tab")) else ","


def read_csv_column(path, column: str, *, delimiter=None,
                    chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[tuple[np.ndarray, int]]:
    """Yield (values float64 (n,), data rows before this block) for one CSV column, by blocks.

    The first line is the header; ``column`` must be one of its names. A cell that does not
    parse as a number (including an empty cell) raises ValueError naming the column, the
    cell and its file line. Memory O(chunk_bytes)."""
    path = _check_file(path)
    delim = _delimiter(path, delimiter)
    with open(path, newline="", encoding="utf-8") as f:
        try:
            first = f.readline()
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a UTF-8 text (CSV) file") from None
        if not first.strip():
            raise ValueError(f"{path}: empty file (expected a header row naming the columns)")
        header = [h.strip() for h in next(csv.reader([first], delimiter=delim))]
        if column not in header:
            shown = ", ".join(header[:20]) + (", ..." if len(header) > 20 else "")
            raise ValueError(f"column {column!r} not found in the header of {path} "
                             f"(columns: {shown})")
        idx = header.index(column)
        line_no, rows = 1, 0  # lines consumed so far (header = line 1), data rows yielded
        while True:
            try:
                lines = f.readlines(chunk_bytes)
            except UnicodeDecodeError:
                raise ValueError(f"{path}: not a UTF-8 text (CSV) file after line {line_no}") \
                    from None
            if not lines:
                return
            try:
                values = np.loadtxt(lines, delimiter=delim, usecols=idx, dtype=np.float64,
                                    quotechar='"', comments=None, ndmin=1, encoding=None)
            except ValueError as exc:
                raise _parse_error(exc, path, column, lines, line_no) from None
            line_no += len(lines)
            if values.size:
                yield values, rows
                rows += values.size


def _parse_error(exc: ValueError, path: str, column: str, lines, line_no: int) -> ValueError:
    """A readable error for a numpy.loadtxt failure on a block starting after ``line_no``."""
    msg = str(exc)
    m = _ROW.search(msg)
    where = ""
    if m:
        # numpy counts non-blank rows: 0-based for conversion errors, 1-based for missing
        # columns (numpy 2.x); map the record back to its line in the block
        record = int(m.group(1)) - (0 if "could not convert" in msg else 1)
        text = np.array(lines, dtype=str)
        nonblank = np.flatnonzero(np.char.str_len(np.char.strip(text)) > 0)
        if 0 <= record < nonblank.size:
            row = int(nonblank[record])
            where = f" at line {line_no + row + 1} ({lines[row].rstrip(chr(13) + chr(10))[:80]!r})"
    if "could not convert" in msg:
        cell = re.search(r"string '(.*)' to", msg)
        cell = cell.group(1) if cell else "?"
        what = "an empty (missing) value" if cell == "" else f"the non-numeric value {cell!r}"
        return ValueError(f"{path}: column {column!r} has {what}{where}; every value must be "
                          "a number")
    if "column index" in msg or "columns" in msg:
        return ValueError(f"{path}: a row has too few fields for column {column!r}{where}")
    return ValueError(f"{path}: cannot parse column {column!r}{where}: {msg}")


def read_parquet_column(path, column: str, *, batch_rows: int = 1 << 20
                        ) -> Iterator[tuple[np.ndarray, int]]:
    """Yield (values float64 (n,), data rows before this batch) for one Parquet column.

    Needs pyarrow (``pip install pyarrow``); nulls and non-numeric columns raise ValueError
    naming the column. Memory O(batch_rows)."""
    path = _check_file(path)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow); or "
                         "export the column to CSV, or pass a counts file") from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - any pyarrow failure is an unreadable file
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from None
    names = pf.schema_arrow.names
    if column not in names:
        raise ValueError(f"column {column!r} not found in {path} (columns: {', '.join(names)})")
    kind = pf.schema_arrow.field(column).type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_decimal(kind)):
        raise ValueError(f"{path}: column {column!r} has type {kind}, not numeric")
    rows = 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=[column]):
        col = batch.column(0)
        if col.null_count:
            raise ValueError(f"{path}: column {column!r} has {col.null_count} missing (null) "
                             f"value(s) in data rows {rows + 1}..{rows + len(col)}")
        values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        yield values, rows
        rows += values.size


def read_column(path, column: str, **kwargs) -> Iterator[tuple[np.ndarray, int]]:
    """Blocks of one column of a CSV/TSV file, or of a Parquet file (``.parquet``/``.pq``)."""
    if os.fspath(path).lower().endswith((".parquet", ".pq")):
        return read_parquet_column(path, column)
    return read_csv_column(path, column, **kwargs)


def histogram_from_file(path, column: str, spec: BinSpec, *, out_of_range: str = "error",
                        **kwargs) -> tuple[np.ndarray, int]:
    """(histogram int64 (K,), rows read) of one file column, block by block (bounded memory).

    Validation over the whole file (``HistogramAccumulator``): NaN / infinite / out-of-range
    values raise ValueError naming the column, counting the offending rows and naming the
    first; a cell that does not parse raises at once (``read_csv_column``); no rows ->
    ValueError."""
    acc = HistogramAccumulator(spec, out_of_range=out_of_range,
                               name=f"{os.fspath(path)}: column {column!r}")
    for values, offset in read_column(path, column, **kwargs):
        acc.add(values, offset)
    if acc.rows == 0:
        raise ValueError(f"{acc.name}: no data rows (empty input)")
    return acc.histogram(), acc.rows


def _as_float_values(data, name: str) -> np.ndarray:
    """A 1-D float64 view/copy of numeric array-like data, or a ValueError naming the first
    non-numeric entry (the error path inspects entries one by one; the normal path does not)."""
    try:
        arr = np.asarray(data)
    except Exception:  # noqa: BLE001 - ragged or unconvertible input
        raise ValueError(f"{name} must be a 1-D array of numbers") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per record), got shape {arr.shape}")
    if arr.dtype == bool or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating):
        return arr.astype(np.float64, copy=False)
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError):
        for i, v in enumerate(arr.tolist()):  # error path only: locate the first bad entry
            try:
                if isinstance(v, bool):
                    raise TypeError
                float(v)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: non-numeric value {v!r} at data row {i + 1}") \
                    from None
        raise ValueError(f"{name} must hold numbers") from None


def histogram_from_values(data, spec: BinSpec, *, out_of_range: str = "error",
                          name: str = "data") -> tuple[np.ndarray, int]:
    """(histogram int64 (K,), rows) of an in-memory 1-D array of numbers, in blocks of 4M
    values (bounded temporaries). Same validation as ``histogram_from_file``."""
    values = _as_float_values(data, name)
    acc = HistogramAccumulator(spec, out_of_range=out_of_range, name=name)
    for start in range(0, values.size, _VALUES_PER_CHUNK):  # loop over blocks, not rows
        acc.add(values[start:start + _VALUES_PER_CHUNK], start)
    return acc.histogram(), acc.rows


def read_counts(path, bins: int) -> np.ndarray:
    """The K bin counts (int64, shape (K,)) from a counts file.

    Formats (comma or whitespace separated, optional header line, blank lines ignored):
    one count per line in bin order (exactly K lines), or ``bin,count`` lines with bins
    0..K-1 each at most once (missing bins count 0). Counts must be non-negative integers
    (``3`` or ``3.0``); anything else raises ValueError naming the file and line. Parsed by
    ``numpy.loadtxt``; O(K)."""
    path = _check_file(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    text = np.array(lines if lines else [""], dtype=str)
    nonblank = np.flatnonzero(np.char.str_len(np.char.strip(text)) > 0)
    if nonblank.size == 0:
        raise ValueError(f"counts file {path}: no counts (empty input)")
    first = lines[nonblank[0]]
    delim = "," if "," in first else None
    start = int(nonblank[0]) + (0 if _is_number(first.replace(",", " ").split()[0]) else 1)
    data_lines = nonblank[nonblank >= start] + 1  # 1-based file line of each data row
    if data_lines.size == 0:
        raise ValueError(f"counts file {path}: no counts (empty input)")
    try:
        table = np.loadtxt(lines[start:], delimiter=delim, dtype=np.float64, ndmin=2,
                           comments="#", encoding=None)
    except ValueError as exc:
        m = _ROW.search(str(exc))  # numpy's record number (see _parse_error)
        record = (int(m.group(1)) - (0 if "could not convert" in str(exc) else 1)) if m else -1
        where = f" at line {data_lines[record]}" if 0 <= record < data_lines.size else ""
        cell = re.search(r"string '(.*)' to", str(exc))
        what = (f"{cell.group(1)!r} is not a number" if cell
                else "lines must all hold one count, or all 'bin,count'")
        raise ValueError(f"counts file {path}: {what}{where}") from None
    if table.shape[1] not in (1, 2):
        raise ValueError(f"counts file {path}: every line must hold one count, or 'bin,count' "
                         f"(found {table.shape[1]} fields)")
    values = _check_counts(table[:, -1], data_lines, path, "count")
    if table.shape[1] == 1:
        if values.size != bins:
            raise ValueError(f"counts file {path}: {values.size} counts for {bins} bins "
                             "(need exactly one count per bin, in bin order)")
        return values
    idx = _check_counts(table[:, 0], data_lines, path, "bin")
    if idx.max() >= bins:
        n = int(np.argmax(idx >= bins))
        raise ValueError(f"counts file {path}: bin {int(idx[n])} at line {data_lines[n]} is not "
                         f"in 0..{bins - 1}")
    uniq, seen = np.unique(idx, return_counts=True)
    if np.any(seen > 1):
        raise ValueError(f"counts file {path}: bin {int(uniq[np.argmax(seen > 1)])} appears "
                         "more than once")
    out = np.zeros(bins, dtype=np.int64)
    out[idx] = values
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_counts(v: np.ndarray, line_nos: np.ndarray, path: str, what: str) -> np.ndarray:
    """A non-negative integer column of a counts file (int64), with line-numbered errors."""
    bad = ~np.isfinite(v) | (v < 0) | (v != np.round(v)) | (v >= 2.0**53)
    if bad.any():
        n = int(np.argmax(bad))
        raise ValueError(f"counts file {path}: {what} {float(v[n])!r} at line {line_nos[n]} "
                         f"must be a non-negative integer ({int(bad.sum())} such line(s))")
    return v.astype(np.int64)
