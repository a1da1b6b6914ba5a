"""Reading the data of a release in bounded memory: CSV / Parquet columns, counts files.

* CSV / TSV (``read_csv_column``): the text is cut into blocks of ``chunk_bytes`` (default
  16 MiB) at the last line end, and each block is parsed by pyarrow's CSV reader
  (``pyarrow.csv.read_csv``, one Arrow block, no threads), one column converted to float64
  by Arrow's own number parser. Memory stays O(chunk_bytes) whatever the file size; only the
  K bin counts are accumulated. Rules:

  - the first non-blank row is the header; names are compared after trimming whitespace; a
    UTF-8 byte-order mark is skipped; duplicate names are an error; ``column`` must be one of
    them;
  - every row has exactly one field per header column (else an error naming the data row and
    quoting it); blank lines are skipped; LF, CRLF or CR line ends; fields may be quoted
    (``"1.5"``, ``"a,b"``), one record per line (no line end inside a quoted field);
  - a line longer than ``chunk_bytes`` is an error, not gigabytes of memory;
  - every cell of the column is a number (Arrow's parser: ``1.5``, ``-2e3``, ``.5``; spaces
    around it are trimmed). Empty cells and any other text (``NA``, ``n/a``, ``3 kg``) are
    errors naming the file, the column and the first offending data row; ``nan`` / ``inf``
    parse, and then fail validation (``HistogramAccumulator``) with the same naming;
  - the header and the released column must be UTF-8 (a UTF-16/32 file is refused); the other
    columns are split into fields but never decoded;
  - ``.gz`` / ``.bz2`` / ``.zst`` / ``.lz4`` files are decompressed as a stream; ``.tsv`` /
    ``.tab`` (before the compression suffix) mean tab-separated, or pass ``delimiter``.

  "Data row" n is the n-th non-blank row after the header (1-based), in every message.

  The reader (``python benchmarks/bench_reader.py``: a CSV ``id,value,note`` of 10^7 rows,
  216 MB, in the page cache; ``value`` read and binned into 2^16 bins; median of 3 runs,
  each in a fresh process; 2 shared cores, so +-30% noise):

  ==========================================  ========  =========  ==================
  reader                                      time      rows/s     peak RSS increase
  ==========================================  ========  =========  ==================
  this module, 16 MiB blocks (default)        1.23 s    8.2 M      135 MB
  this module, 64 MiB blocks                  1.44 s    6.9 M      390 MB
  pyarrow streaming ``open_csv``, 16 MiB      0.78 s    12.8 M     256 MB
  DuckDB ``read_csv`` -> Arrow, numpy bins    0.81 s    12.3 M     174 MB
  DuckDB, binned and counted in SQL           1.16 s    8.6 M      160 MB
  ==========================================  ========  =========  ==================

  At 3 x 10^7 rows (671 MB, one run): this module 4.3 s / 135 MB (the same memory), open_csv
  4.6 s / 625 MB, DuckDB 5.5 s / 233 MB. The old ``readlines`` + ``numpy.loadtxt`` tokenizer
  was several times slower and accepted ragged rows. Chosen: pyarrow, parsing blocks we cut.
  Its throughput is that of DuckDB within the noise, its memory is bounded by the block size
  we choose (``open_csv`` reads ahead of a slower consumer without bound: it held most of the
  671 MB file; DuckDB sizes its own buffers and threads, and grew with the file), its errors
  carry the row number, it already reads the Parquet files, and it is one library rather
  than an embedded database engine. The price of the bound is the overlap of reading and
  parsing that ``open_csv`` gets from its read-ahead thread.
* Parquet (``read_parquet_column``): ``pyarrow.parquet.ParquetFile.iter_batches`` over the one
  column; integer, floating or decimal columns only, no nulls.
* Counts files (``read_counts``, in ``counts_io`` with ``count_lines`` and the path check,
  re-exported here): the K bin counts produced elsewhere (a distributed engine),
  parsed exactly as integers (no float round trip).

Files are named by a path, ``str`` or ``os.PathLike`` (``check_input_path``): a bytes path or
an open file object is refused with a ValueError (the suffix of the name says the format and
the compression, and every message names the file). Every failure is a ValueError naming the
file, the column and the first offending row; no traceback from inside pyarrow or numpy
escapes.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from numbers import Integral
import os
from typing import Any, Generator, Iterable

import numpy as np
import numpy.typing as npt

from .binning import BinSpec, GridHistogramAccumulator, HistogramAccumulator
from .counts_io import (COUNT_RULE, MAX_COUNT_LINE, check_input_path, count_lines, read_counts,
                        utf8_start)

__all__ = ["read_csv_column", "read_parquet_column", "read_column", "histogram_from_file",
           "histogram_from_values", "read_csv_columns", "read_parquet_columns", "read_columns",
           "grid_histogram_from_file", "grid_histogram_from_values", "read_counts",
           "check_input_path", "check_columns", "check_column_names", "count_lines",
           "MAX_COUNT_LINE", "COUNT_RULE", "utf8_start", "DEFAULT_CHUNK_BYTES"]

DEFAULT_CHUNK_BYTES = 1 << 24  # 16 MiB of text per block: also the longest line accepted
_MAX_CHUNK_BYTES = (1 << 30) - 1  # a block plus a carried-over line fits Arrow's int32 sizes
_VALUES_PER_CHUNK = 1 << 22  # in-memory arrays are binned in blocks of 4M values
_EXACT = 1 << 53  # integers up to 2^53 are exact in double (and sums below it)
_COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")
_LINE_END = re.compile(rb"[\r\n]")
_TEXT_BYTE = re.compile(rb"[^\r\n]")
# blocks of a file: (values float64 (n,) or (n, columns), data rows before the block)
Blocks = Generator[tuple[npt.NDArray[np.float64], int], None, None]
# a path accepted by the readers (checked by check_input_path)
FilePath = str | os.PathLike[str]


def check_chunk_bytes(chunk_bytes: object) -> int:
    """``chunk_bytes``: an integer in 1..2^30 - 1 (bytes per CSV block, also the longest line)."""
    if isinstance(chunk_bytes, (bool, np.bool_)) or not isinstance(chunk_bytes, Integral):
        raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
    if not 0 < int(chunk_bytes) <= _MAX_CHUNK_BYTES:
        raise ValueError(f"chunk_bytes must be in 1..{_MAX_CHUNK_BYTES} (bytes per block), got "
                         f"{chunk_bytes}")
    return int(chunk_bytes)


def _strip_compression(path: str) -> str:
    low = path.lower()
    for ext in _COMPRESSED:
        if low.endswith(ext):
            return low[: -len(ext)]
    return low


def _delimiter(path: str, delimiter: object) -> str:
    if delimiter is None:
        return "\t" if _strip_compression(path).endswith((".tsv", ".tab")) else ","
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\"\r\n":
        raise ValueError(f"delimiter must be one character (not a quote or a line end), got "
                         f"{delimiter!r}")
    return delimiter


def _pyarrow() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.csv), imported on first use (a main dependency)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    return pa, pacsv


def _open_stream(pa: Any, path: str) -> Any:
    """A binary input stream, decompressed by extension (.gz, .bz2, .zst, .lz4)."""
    try:
        return pa.input_stream(path, compression="detect")
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot open ({exc})") from None


# ------------------------------------------------------------------ CSV
def _read(pa: Any, stream: Any, n: int, path: str) -> bytes:
    try:
        out: bytes = stream.read(n)
        return out
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None


def _split_header(pa: Any, stream: Any, path: str, limit: int) -> tuple[bytes, bytes]:
    """(header line, bytes read after its line end) from the start of ``stream``: the first
    non-blank line (no BOM, no line end), read in pieces of min(64 KiB, limit) bytes (so the
    bytes after it are at most ``limit``); a header longer than ``limit`` bytes is an error.
    O(header) time and memory."""
    buf = bytearray()
    start: int | None = None  # start of the header line
    scanned = 0  # bytes already searched for a line end (once start is found)
    while True:
        piece = _read(pa, stream, min(1 << 16, limit), path)
        buf += piece
        if start is None:
            if len(buf) < 4 and piece:
                continue
            skip = utf8_start(buf, str(path))
            m = _TEXT_BYTE.search(buf, skip)
            if m is not None:
                start = scanned = m.start()
        if start is not None:
            end = _LINE_END.search(buf, scanned)
            scanned = len(buf) if end is None else end.start()
            if scanned - start > limit:
                raise ValueError(f"{path}: the header row is longer than chunk_bytes = {limit} "
                                 "bytes (the longest line this reader accepts; pass a larger "
                                 "chunk_bytes)")
            if end is not None:
                return bytes(buf[start:end.start()]), bytes(buf[end.start():])
        if not piece:  # end of file: a header without a line end, or nothing
            if start is None:
                raise ValueError(f"{path}: empty file (expected a header row naming the "
                                 "columns)")
            return bytes(buf[start:]), b""


def _header_names(pa: Any, pacsv: Any, path: str, line: bytes, parse: Any) -> list[str]:
    if b"\x00" in line:
        raise ValueError(f"{path}: not a UTF-8 text (CSV) file (NUL bytes in the header row)")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text (CSV) file (header row)") from None
    try:
        table = pacsv.read_csv(pa.py_buffer(line + b"\n"), parse_options=parse,
                               read_options=pacsv.ReadOptions(use_threads=False))
    except (pa.ArrowException, ValueError) as exc:
        raise ValueError(f"{path}: cannot parse the header row ({exc})") from None
    return list(table.column_names)


def _pick_column(names: list[str], column: str, path: str) -> str:
    """The header's raw name of ``column`` (names compared after trimming whitespace)."""
    trimmed = [n.strip() for n in names]
    seen, dup = set(), []
    for n in trimmed:  # over the header's columns, not the rows
        if n in seen and n not in dup:
            dup.append(n)
        seen.add(n)
    if dup:
        raise ValueError(f"{path}: duplicate column name(s) in the header: "
                         f"{', '.join(repr(d) for d in dup[:10])}; every column needs its own "
                         "name")
    if column not in trimmed:
        shown = ", ".join(n if len(n) <= 40 else n[:37] + "..." for n in trimmed[:20])
        shown += ", ..." if len(trimmed) > 20 else ""
        raise ValueError(f"column {column!r} not found in the header of {path} "
                         f"(columns: {shown})")
    return names[trimmed.index(column)]


def read_csv_column(path: FilePath, column: str, *, delimiter: str | None = None,
                    chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Blocks:
    """Yield (values float64 (n,), data rows before this block) for one CSV/TSV column.

    The text is read in blocks of ``chunk_bytes`` bytes cut at the last line end, each
    parsed by ``pyarrow.csv.read_csv`` (one column converted to float64); rules and error
    messages in the module docstring. The file, the header and ``column`` are checked when
    this is called; the rows as they are read (ValueError naming the file, the column and the
    data row). Memory O(chunk_bytes); a line longer than ``chunk_bytes`` is an error."""
    if not isinstance(column, str):
        raise ValueError(f"column must be a column name (str), got {column!r}")
    blocks = read_csv_columns(path, (column,), delimiter=delimiter, chunk_bytes=chunk_bytes)
    return ((values[:, 0], rows) for values, rows in blocks)


def read_csv_columns(path: FilePath, columns: Iterable[str], *, delimiter: str | None = None,
                     chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Blocks:
    """Yield (values float64 (n, len(columns)), data rows before this block) for several
    CSV/TSV columns read together (same rules as :func:`read_csv_column`; a bad cell names
    its own column). ``columns``: distinct names of the header."""
    where = check_input_path(path)
    chunk = check_chunk_bytes(chunk_bytes)
    delim = _delimiter(where, delimiter)
    names_ = check_column_names(columns)
    pa, pacsv = _pyarrow()
    parse = pacsv.ParseOptions(delimiter=delim, quote_char='"', double_quote=True,
                               escape_char=False, newlines_in_values=False,
                               ignore_empty_lines=True)
    stream = _open_stream(pa, where)
    try:
        line, _ = _split_header(pa, stream, where, chunk)
    finally:
        stream.close()
    names = _header_names(pa, pacsv, where, line, parse)
    raws = [_pick_column(names, c, where) for c in names_]
    convert = pacsv.ConvertOptions(include_columns=raws,
                                   column_types={r: pa.float64() for r in raws},
                                   null_values=[], strings_can_be_null=False,
                                   quoted_strings_can_be_null=False)
    return _csv_blocks(pa, pacsv, where, names_, chunk, names, parse, convert)


def check_column_names(columns: object) -> tuple[str, ...]:
    """A non-empty tuple of distinct column names."""
    if isinstance(columns, str) or not hasattr(columns, "__iter__"):
        raise ValueError(f"columns must be a list of column names, got {columns!r}")
    got = tuple(columns)
    if not got or not all(isinstance(c, str) and c for c in got):
        raise ValueError(f"columns must be non-empty column names (str), got {got!r}")
    if len(set(got)) != len(got):
        raise ValueError(f"columns must be distinct, got {list(got)!r}")
    return tuple(str(c) for c in got)


def _csv_blocks(pa: Any, pacsv: Any, path: str, columns: tuple[str, ...], chunk: int,
                names: list[str], parse: Any, convert: Any) -> Blocks:
    """The blocks of ``read_csv_columns``. Blocks are cut here, not by pyarrow's streaming
    reader: ``pyarrow.csv.open_csv`` reads ahead of a slower consumer without bound (the whole
    of a 670 MB file was buffered), so each block is parsed alone with ``read_csv`` (one
    Arrow block, no threads; Arrow then reports the row of a bad cell within the block).
    Memory: the block and the partial line carried over, < 2 chunk_bytes, plus the parse."""
    errors = (pa.ArrowException, OSError, ValueError, UnicodeDecodeError)
    stream = _open_stream(pa, path)
    rows = 0  # data rows (non-blank rows after the header) yielded so far
    try:
        _, piece = _split_header(pa, stream, path, chunk)  # the first piece: read with it
        carry, eof, first = b"", False, True
        while not eof:
            if not first:
                piece = _read(pa, stream, chunk, path)
                eof = not piece
            # a line longer than chunk can only be the one continuing the carried partial
            # line: every other line lies inside one piece, and pieces are <= chunk bytes
            end = _LINE_END.search(piece)
            head = end.start() if end else len(piece)
            if len(carry) + head > chunk:
                raise ValueError(f"{path}: a line at or after data row {rows + 1} is longer than "
                                 f"chunk_bytes = {chunk} bytes (the longest line this reader "
                                 "accepts; pass a larger chunk_bytes if the file really has "
                                 "such lines)")
            first = False
            buf = carry + piece if carry else piece
            del piece
            cut = len(buf) if eof else max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
            carry = buf[cut:]
            if _TEXT_BYTE.search(buf, 0, cut) is None:  # nothing but line ends (or nothing)
                continue
            try:
                table = pacsv.read_csv(
                    pa.py_buffer(memoryview(buf)[:cut]), parse_options=parse,
                    convert_options=convert,
                    read_options=pacsv.ReadOptions(column_names=names, use_threads=False,
                                                   block_size=cut + 1))
            except errors as exc:
                raise _csv_error(exc, path, _failed_column(exc, names, columns),
                                 rows) from None
            del buf
            cols = [table.column(i) for i in range(len(columns))]
            for c, col in zip(columns, cols):
                if col.null_count:  # not expected: null_values=[] makes no nulls
                    raise ValueError(f"{path}: column {c!r} has missing values in data rows "
                                     f"{rows + 1}..{rows + len(col)}")
            values = np.stack([col.to_numpy() for col in cols], axis=1)
            del table, cols
            if values.size:
                yield values, rows
                rows += values.shape[0]
    finally:
        stream.close()


def _failed_column(exc: Exception, names: list[str], columns: tuple[str, ...]) -> str:
    """The released column a pyarrow error is about ("In CSV column #i": the header's i-th)."""
    m = re.search(r"CSV column #(\d+)", str(exc))
    if m and int(m.group(1)) < len(names):
        return names[int(m.group(1))].strip()
    return columns[0] if len(columns) == 1 else ", ".join(columns)


def _csv_error(exc: Exception, path: str, column: str, rows: int) -> ValueError:
    """A readable ValueError for a pyarrow CSV failure in the block after ``rows`` data rows
    (Arrow numbers the rows of the block from 1, blank lines not counted)."""
    msg = str(exc)
    m = re.search(r"Row #(\d+)", msg)
    where = f"data row {rows + int(m.group(1))}" if m else f"a data row after row {rows}"
    m = re.search(r"Expected (\d+) columns, got (\d+):? ?(.*)", msg, re.S)
    if m:
        text = m.group(3).rstrip("\r\n")
        return ValueError(f"{path}: {where} has {m.group(2)} field(s) but the header has "
                          f"{m.group(1)} ({text[:80]!r}); every row needs one field per "
                          "header column")
    m = re.search(r"conversion error to \w+: invalid value '(.*)'", msg, re.S)
    if m:
        cell = m.group(1)
        if cell.strip() == "":
            what = "an empty (missing) value"
        elif "\ufffd" in cell:
            what = "a value that is not UTF-8 text"
        else:
            what = f"the non-numeric value {cell[:80]!r}"
        return ValueError(f"{path}: column {column!r} has {what} at {where}; every value must "
                          "be a number")
    if "invalid UTF8" in msg or isinstance(exc, UnicodeDecodeError):
        return ValueError(f"{path}: not a UTF-8 text (CSV) file (column {column!r}, {where})")
    return ValueError(f"{path}: cannot read column {column!r} as CSV ({where}): {msg[:300]}")


# ------------------------------------------------------------------ Parquet
def read_parquet_column(path: FilePath, column: str, *, batch_rows: int = 1 << 20) -> Blocks:
    """Yield (values float64 (n,), data rows before this batch) for one Parquet column.

    ``pyarrow.parquet.ParquetFile.iter_batches`` over the one column. The column must be
    integer, floating or decimal (else ValueError naming its type); nulls are an error naming
    the rows of the batch; integers beyond 2^53 in magnitude (not exact in double) are an
    error. Memory O(batch_rows)."""
    if not isinstance(column, str):
        raise ValueError(f"column must be a column name (str), got {column!r}")
    blocks = read_parquet_columns(path, (column,), batch_rows=batch_rows)
    return ((values[:, 0], rows) for values, rows in blocks)


def read_parquet_columns(path: FilePath, columns: Iterable[str], *,
                         batch_rows: int = 1 << 20) -> Blocks:
    """Yield (values float64 (n, len(columns)), data rows before this batch) for several
    Parquet columns read together (rules of :func:`read_parquet_column` per column)."""
    where = check_input_path(path)
    names_ = check_column_names(columns)
    if (isinstance(batch_rows, (bool, np.bool_)) or not isinstance(batch_rows, Integral)
            or batch_rows < 1):
        raise ValueError(f"batch_rows must be a positive integer, got {batch_rows!r}")
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(where)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"{where}: not a readable Parquet file ({exc})") from None
    names = pf.schema_arrow.names
    is_int = []
    for column in names_:
        if column not in names:
            raise ValueError(f"column {column!r} not found in {where} (columns: "
                             f"{', '.join(names)})")
        if names.count(column) > 1:
            raise ValueError(f"{where}: duplicate column name {column!r}")
        kind = pf.schema_arrow.field(column).type
        is_int.append(pa.types.is_integer(kind))
        if not (is_int[-1] or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
            raise ValueError(f"{where}: column {column!r} has type {kind}, not numeric")
    return _parquet_batches(pa, pc, pf, where, names_, int(batch_rows), is_int)


def _parquet_batches(pa: Any, pc: Any, pf: Any, path: str, columns: tuple[str, ...],
                     batch_rows: int, is_int: list[bool]) -> Blocks:
    rows = 0
    it = pf.iter_batches(batch_size=batch_rows, columns=list(columns))
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read column(s) {', '.join(map(repr, columns))} "
                             f"after data row {rows} ({exc})") from None
        out: list[npt.NDArray[np.float64]] = []
        for i, column in enumerate(columns):
            col = batch.column(batch.schema.get_field_index(column))
            if col.null_count:
                first = rows + 1 + int(np.argmax(~col.is_valid().to_numpy(
                    zero_copy_only=False)))
                raise ValueError(f"{path}: column {column!r} has {col.null_count} missing "
                                 f"(null) value(s) in data rows {rows + 1}..{rows + len(col)}; "
                                 f"first at data row {first}")
            if is_int[i] and len(col):
                lo, hi = pc.min_max(col).values()
                if hi.as_py() > _EXACT or lo.as_py() < -_EXACT:
                    raise ValueError(f"{path}: column {column!r} has integers beyond 2^53 in "
                                     f"data rows {rows + 1}..{rows + len(col)}: not exact in "
                                     "double precision")
            out.append(np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64))
        values = np.stack(out, axis=1)
        yield values, rows
        rows += values.shape[0]


def read_column(path: FilePath, column: str, **kwargs: Any) -> Blocks:
    """Blocks (values float64 (n,), data rows before) of one column of a CSV/TSV file
    (optionally compressed; options ``delimiter``, ``chunk_bytes``), or of a Parquet file
    (``.parquet``/``.pq``; option ``batch_rows``; ``chunk_bytes`` is checked but unused)."""
    if not isinstance(column, str):
        raise ValueError(f"column must be a column name (str), got {column!r}")
    return ((values[:, 0], rows) for values, rows in read_columns(path, (column,), **kwargs))


def read_columns(path: FilePath, columns: Iterable[str], **kwargs: Any) -> Blocks:
    """Blocks (values float64 (n, len(columns)), data rows before) of several columns of a
    CSV/TSV or Parquet file, read together (options as for :func:`read_column`)."""
    where = check_input_path(path)
    parquet = where.lower().endswith((".parquet", ".pq"))
    allowed = {"chunk_bytes", "batch_rows"} if parquet else {"chunk_bytes", "delimiter"}
    extra = sorted(set(kwargs) - allowed - {"delimiter"})
    if extra:
        raise ValueError(f"unknown option(s) for a {'Parquet' if parquet else 'CSV'} file: "
                         f"{extra}")
    if parquet:
        if kwargs.get("delimiter") is not None:
            raise ValueError("delimiter: a Parquet file has no delimiter")
        if "chunk_bytes" in kwargs:
            check_chunk_bytes(kwargs["chunk_bytes"])
        return read_parquet_columns(where, columns, **{k: v for k, v in kwargs.items()
                                                       if k == "batch_rows"})
    return read_csv_columns(where, columns, **kwargs)


def check_columns(path: FilePath, columns: Iterable[str], **kwargs: Any) -> None:
    """Check that the file can be read and its header (CSV) or schema (Parquet) has
    ``columns``, reading nothing but the header: the cheap checks of :func:`read_columns`
    (same options), run before anything slow. ValueError as :func:`read_columns`."""
    read_columns(path, columns, **kwargs).close()


def histogram_from_file(path: FilePath, column: str, spec: BinSpec, *, out_of_range: str = "error",
                        **kwargs: Any) -> tuple[npt.NDArray[np.int64], int]:
    """(histogram int64 (K,), rows read) of one file column, block by block (bounded memory).

    Validation over the whole file (``HistogramAccumulator``): NaN / infinite / out-of-range
    values raise ValueError naming the column, counting the offending rows and naming the
    first; a cell that does not parse raises at once (``read_csv_column``); no rows ->
    ValueError. ``kwargs``: ``delimiter``, ``chunk_bytes`` (CSV), ``batch_rows`` (Parquet)."""
    where = check_input_path(path)
    acc = HistogramAccumulator(spec, out_of_range=out_of_range,
                               name=f"{where}: column {column!r}")
    for values, offset in read_column(where, column, **kwargs):
        acc.add(values, offset)
    if acc.rows == 0:
        raise ValueError(f"{acc.name}: no data rows (empty input)")
    return acc.histogram(), acc.rows


def grid_histogram_from_file(path: FilePath, columns: Iterable[str], specs: Iterable[BinSpec], *,
                             out_of_range: str = "error",
                             **kwargs: Any) -> tuple[npt.NDArray[np.int64], int]:
    """(cell counts int64 (n_1, .., n_d), rows read) of d file columns binned on a grid (one
    ``BinSpec`` per column), block by block with the validation of
    :func:`histogram_from_file` for every column (``GridHistogramAccumulator``)."""
    cols = check_column_names(columns)
    specs = tuple(specs)
    if len(specs) != len(cols):
        raise ValueError(f"{len(cols)} columns need {len(cols)} bin specifications, got "
                         f"{len(specs)}")
    where = check_input_path(path)
    acc = GridHistogramAccumulator(specs, out_of_range=out_of_range,
                                   names=[f"{where}: column {c!r}" for c in cols])
    for values, offset in read_columns(where, cols, **kwargs):
        acc.add(values, offset)
    if acc.rows == 0:
        raise ValueError(f"{where}: columns {', '.join(map(repr, cols))}: no data rows "
                         "(empty input)")
    return acc.histogram(), acc.rows


# ------------------------------------------------------------------ in-memory values
def _number_type(t: type) -> bool:
    """Element types accepted in a list / object array: real numbers, not bool."""
    if issubclass(t, (bool, np.bool_)):
        return False
    if issubclass(t, np.floating):
        return np.dtype(t).itemsize <= 8
    return issubclass(t, (int, float, np.integer, Decimal, Fraction))


def _describe_bad(v: object) -> str:
    if v is None:
        return "missing value None"
    if isinstance(v, (str, bytes, np.str_, np.bytes_)):
        return f"text {v!r} (numeric strings are not converted: parse them first)"
    if isinstance(v, (bool, np.bool_)):
        return f"boolean {bool(v)}"
    if isinstance(v, (list, tuple, np.ndarray)):
        return f"nested sequence {v!r} (data must be 1-D: one value per record)"
    return f"non-numeric value {v!r} of type {type(v).__name__}"


def _as_float_values(data: object, name: str) -> npt.NDArray[np.float64]:
    """A 1-D float64 view/copy of in-memory numbers, or a ValueError naming the first bad
    entry (data row, 1-based).

    Accepted: a 1-D numpy array of integer or floating dtype (at most float64), or a 1-D
    sequence / object array whose entries are int, float, numpy integer / floating scalars,
    ``decimal.Decimal`` or ``fractions.Fraction`` (converted like ``float()``: the nearest
    double). NaN and infinities pass here and are refused by the histogram's validation.
    Refused: masked arrays (``np.ma``: the mask would be ignored; pass ``x.compressed()``),
    booleans (a bool array, or True / False among the entries), datetime64 / timedelta64
    arrays and datetime / date / timedelta objects, complex numbers, strings (also numeric
    ones: no silent coercion), None, nested sequences, and integers beyond 2^53 in magnitude
    (they would be rounded). Type checks cost one C-level pass over the entries' types
    (``map(type, ...)``); the error path locates the first bad entry with numpy comparisons."""
    if isinstance(data, np.ma.MaskedArray):
        raise ValueError(f"{name}: numpy masked arrays are refused (the mask would be ignored);"
                         " pass data.compressed() or data.filled(value) explicitly")
    if isinstance(data, (list, tuple)):
        kinds = set(map(type, data))  # one C-level pass
        if kinds and kinds <= {float}:
            arr = np.asarray(data, dtype=np.float64)  # the common case: Python floats
        else:
            arr = _object_array(data, name)
    else:
        try:
            arr = np.asarray(data)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a 1-D array of numbers") from None
        if arr.dtype == object:
            arr = _object_array(arr, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per record), got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "b":
        raise ValueError(f"{name} must hold real numbers, got booleans (dtype {arr.dtype})")
    if kind in "mM":
        raise ValueError(f"{name} must hold real numbers, got dates / durations (dtype "
                         f"{arr.dtype}); convert them to numbers explicitly")
    if kind == "f" and arr.dtype.itemsize > 8:
        raise ValueError(f"{name}: dtype {arr.dtype} is wider than float64; convert it "
                         "explicitly")
    if kind in "iu":
        big = (arr > _EXACT) | (arr < -_EXACT) if arr.dtype.itemsize >= 8 else None
        if big is not None and big.any():
            i = int(np.argmax(big))
            raise ValueError(f"{name}: integer {int(arr[i])} at data row {i + 1} is beyond "
                             "2^53 in magnitude (not exact in double precision)")
        return arr.astype(np.float64)
    if kind == "f":
        return arr.astype(np.float64, copy=False)
    if kind in "US":
        raise ValueError(f"{name} must hold real numbers, got text (dtype {arr.dtype}); numeric "
                         "strings are not converted: parse them first")
    raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")


def _object_array(data: object, name: str) -> npt.NDArray[Any]:
    """float64 values of a sequence that needs element type checks (or the array itself when
    it is not 1-D, for the shape error)."""
    try:
        arr = np.asarray(data, dtype=object)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1-D array of numbers") from None
    return _object_values(arr, name) if arr.ndim == 1 else arr


def _object_values(arr: npt.NDArray[np.object_], name: str) -> npt.NDArray[np.float64]:
    """float64 values of a 1-D object array of numbers (see ``_as_float_values``)."""
    types = list(map(type, arr))  # one C-level pass
    kinds = set(types)  # the distinct element types (a handful)
    bad = {t for t in kinds if not _number_type(t)}
    if bad:
        first = int(np.argmax(np.fromiter(map(bad.__contains__, types), dtype=bool,
                                          count=arr.size)))
        raise ValueError(f"{name}: {_describe_bad(arr[first])} at data row {first + 1}; every "
                         "value must be a real number (int or float)")
    try:
        out = arr.astype(np.float64)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        raise ValueError(f"{name}: a value cannot be converted to a double (e.g. a signalling "
                         "NaN or an integer too large for a double)") from None
    ints = {t for t in kinds if issubclass(t, (int, np.integer))}
    if ints:
        large = np.abs(out) >= _EXACT  # every integer beyond 2^53 is among these candidates
        if large.any():
            is_int = np.fromiter(map(ints.__contains__, types), dtype=bool, count=arr.size)
            cand = np.flatnonzero(large & is_int)
            if cand.size:
                vals = arr[cand]
                beyond = (vals > _EXACT) | (vals < -_EXACT)  # exact integer comparisons
                if beyond.any():
                    i = int(cand[int(np.argmax(beyond))])
                    raise ValueError(f"{name}: integer {arr[i]} at data row {i + 1} is beyond "
                                     "2^53 in magnitude (not exact in double precision)")
    return out


def histogram_from_values(data: object, spec: BinSpec, *, out_of_range: str = "error",
                          name: str = "data") -> tuple[npt.NDArray[np.int64], int]:
    """(histogram int64 (K,), rows) of an in-memory 1-D array of numbers, in blocks of 4M
    values (bounded temporaries). Accepted inputs: ``_as_float_values``; same validation as
    ``histogram_from_file``."""
    values = _as_float_values(data, name)
    acc = HistogramAccumulator(spec, out_of_range=out_of_range, name=name)
    for start in range(0, values.size, _VALUES_PER_CHUNK):  # loop over blocks, not rows
        acc.add(values[start:start + _VALUES_PER_CHUNK], start)
    return acc.histogram(), acc.rows


def grid_histogram_from_values(data: object, specs: Iterable[BinSpec], *,
                               out_of_range: str = "error",
                               name: str = "data") -> tuple[npt.NDArray[np.int64], int]:
    """(cell counts int64 (n_1, .., n_d), rows) of in-memory records of shape (N, d): row r
    is one record, column i its coordinate on axis i (binned by ``specs[i]``). Each column is
    checked as :func:`histogram_from_values` checks a 1-D input (its messages name "data
    column i" and the data row); ragged rows, other shapes and non-numbers are refused."""
    specs = tuple(specs)
    d = len(specs)
    if isinstance(data, np.ma.MaskedArray):
        raise ValueError(f"{name}: numpy masked arrays are refused (the mask would be ignored);"
                         " remove the masked records explicitly")
    try:   # sequences keep their element types (True must not pass as 1)
        arr = np.asarray(data, dtype=object) if isinstance(data, (list, tuple)) \
            else np.asarray(data)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of shape (records, {d}): one row per record, "
                         "one column per axis (ragged rows?)") from None
    if arr.ndim != 2 or arr.shape[1] != d:
        raise ValueError(f"{name} must have shape (records, {d}) (one row per record, one "
                         f"column per axis), got shape {arr.shape}")
    names = [f"{name} column {i}" for i in range(d)]
    cols = np.stack([_as_float_values(arr[:, i], names[i]) for i in range(d)], axis=1) \
        if arr.shape[0] else np.zeros((0, d))
    acc = GridHistogramAccumulator(specs, out_of_range=out_of_range, names=names)
    step = max(1, _VALUES_PER_CHUNK // d)
    for start in range(0, cols.shape[0], step):  # loop over blocks, not rows
        acc.add(cols[start:start + step], start)
    return acc.histogram(), acc.rows


# ------------------------------------------------------------------ counts files
