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
* Counts files (``read_counts``): the K bin counts produced elsewhere (a distributed engine),
  parsed exactly as integers (no float round trip).

Files are named by a path, ``str`` or ``os.PathLike`` (``check_input_path``): a bytes path or
an open file object is refused with a ValueError (the suffix of the name says the format and
the compression, and every message names the file). Every failure is a ValueError naming the
file, the column and the first offending row; no traceback from inside pyarrow or numpy
escapes.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from fractions import Fraction
from numbers import Integral
from typing import Iterator

import numpy as np

from .binning import BinSpec, GridHistogramAccumulator, HistogramAccumulator

__all__ = ["read_csv_column", "read_parquet_column", "read_column", "histogram_from_file",
           "histogram_from_values", "read_csv_columns", "read_parquet_columns", "read_columns",
           "grid_histogram_from_file", "grid_histogram_from_values", "read_counts",
           "check_input_path", "check_columns", "DEFAULT_CHUNK_BYTES"]

DEFAULT_CHUNK_BYTES = 1 << 24  # 16 MiB of text per block: also the longest line accepted
_MAX_CHUNK_BYTES = (1 << 30) - 1  # a block plus a carried-over line fits Arrow's int32 sizes
_VALUES_PER_CHUNK = 1 << 22  # in-memory arrays are binned in blocks of 4M values
_EXACT = 1 << 53  # integers up to 2^53 are exact in double (and sums below it)
_COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
_UTF8_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"[\r\n]")
_TEXT_BYTE = re.compile(rb"[^\r\n]")


def _utf8_start(raw: bytes, where: str) -> int:
    """Where the text of ``raw`` (the first bytes of a file or stream) starts: after a UTF-8
    byte-order mark, if any; ValueError (naming ``where``) for a UTF-16 / UTF-32 text."""
    for bom, name in _WIDE_BOMS:
        if raw.startswith(bom):
            raise ValueError(f"{where}: {name} text; convert it to UTF-8")
    return len(_UTF8_BOM) if raw.startswith(_UTF8_BOM) else 0


def check_input_path(path, name: str = "file") -> str:
    """The path of an existing regular file as a str. Accepted: ``str`` and ``os.PathLike``
    (``pathlib.Path``); refused with a ValueError naming ``name``: bytes paths and open file
    objects (a reader needs the file's name: its suffix says CSV, TSV, Parquet or which
    compression, and every message names it), empty paths, directories, missing files."""
    if hasattr(path, "read"):
        raise ValueError(f"{name}: give the path of the file (str or os.PathLike), not an open "
                         f"file object ({type(path).__name__}): it is opened by name")
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    if isinstance(text, (bytes, bytearray)):
        raise ValueError(f"{name}: give the path as str or os.PathLike, not bytes ({text!r}; "
                         "os.fsdecode converts it)")
    if not isinstance(text, str):
        raise ValueError(f"{name}: expected the path of a file (str or os.PathLike), got "
                         f"{type(path).__name__} {path!r}")
    if not text:
        raise ValueError(f"{name}: the path is empty")
    if os.path.isdir(text):
        raise ValueError(f"{name} {text!r} is a directory, not a file")
    if not os.path.exists(text):
        raise ValueError(f"{name} not found: {text!r}")
    if not os.path.isfile(text):
        raise ValueError(f"{name} {text!r} is not a regular file")
    return text


def check_chunk_bytes(chunk_bytes) -> int:
    """``chunk_bytes``: an integer in 1..2^30 - 1 (bytes per CSV block, also the longest line)."""
    if isinstance(chunk_bytes, (bool, np.bool_)) or not isinstance(chunk_bytes, Integral):
        raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
    if not 0 < chunk_bytes <= _MAX_CHUNK_BYTES:
        raise ValueError(f"chunk_bytes must be in 1..{_MAX_CHUNK_BYTES} (bytes per block), got "
                         f"{chunk_bytes}")
    return int(chunk_bytes)


def _strip_compression(path: str) -> str:
    low = path.lower()
    for ext in _COMPRESSED:
        if low.endswith(ext):
            return low[: -len(ext)]
    return low


def _delimiter(path: str, delimiter) -> str:
    if delimiter is None:
        return "\t" if _strip_compression(path).endswith((".tsv", ".tab")) else ","
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\"\r\n":
        raise ValueError(f"delimiter must be one character (not a quote or a line end), got "
                         f"{delimiter!r}")
    return delimiter


def _pyarrow():
    """(pyarrow, pyarrow.csv), imported on first use (a main dependency)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    return pa, pacsv


def _open_stream(pa, path: str):
    """A binary input stream, decompressed by extension (.gz, .bz2, .zst, .lz4)."""
    try:
        return pa.input_stream(path, compression="detect")
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot open ({exc})") from None


# ------------------------------------------------------------------ CSV
def _read(pa, stream, n: int, path: str) -> bytes:
    try:
        return stream.read(n)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None


def _split_header(pa, stream, path: str, limit: int) -> tuple[bytes, bytes]:
    """(header line, bytes read after its line end) from the start of ``stream``: the first
    non-blank line (no BOM, no line end), read in pieces of min(64 KiB, limit) bytes (so the
    bytes after it are at most ``limit``); a header longer than ``limit`` bytes is an error.
    O(header) time and memory."""
    buf = bytearray()
    start = scanned = None  # start of the header line; bytes already searched for a line end
    while True:
        piece = _read(pa, stream, min(1 << 16, limit), path)
        buf += piece
        if start is None:
            if len(buf) < 4 and piece:
                continue
            skip = _utf8_start(buf, str(path))
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


def _header_names(pa, pacsv, path: str, line: bytes, parse) -> list[str]:
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


def read_csv_column(path, column: str, *, delimiter=None,
                    chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[tuple[np.ndarray, int]]:
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


def read_csv_columns(path, columns, *, delimiter=None, chunk_bytes: int = DEFAULT_CHUNK_BYTES
                     ) -> Iterator[tuple[np.ndarray, int]]:
    """Yield (values float64 (n, len(columns)), data rows before this block) for several
    CSV/TSV columns read together (same rules as :func:`read_csv_column`; a bad cell names
    its own column). ``columns``: distinct names of the header."""
    path = check_input_path(path)
    chunk = check_chunk_bytes(chunk_bytes)
    delim = _delimiter(path, delimiter)
    columns = _check_column_names(columns)
    pa, pacsv = _pyarrow()
    parse = pacsv.ParseOptions(delimiter=delim, quote_char='"', double_quote=True,
                               escape_char=False, newlines_in_values=False,
                               ignore_empty_lines=True)
    stream = _open_stream(pa, path)
    try:
        line, _ = _split_header(pa, stream, path, chunk)
    finally:
        stream.close()
    names = _header_names(pa, pacsv, path, line, parse)
    raws = [_pick_column(names, c, path) for c in columns]
    convert = pacsv.ConvertOptions(include_columns=raws,
                                   column_types={r: pa.float64() for r in raws},
                                   null_values=[], strings_can_be_null=False,
                                   quoted_strings_can_be_null=False)
    return _csv_blocks(pa, pacsv, path, columns, chunk, names, parse, convert)


def _check_column_names(columns) -> tuple[str, ...]:
    """A non-empty tuple of distinct column names."""
    if isinstance(columns, str) or not hasattr(columns, "__iter__"):
        raise ValueError(f"columns must be a list of column names, got {columns!r}")
    columns = tuple(columns)
    if not columns or not all(isinstance(c, str) and c for c in columns):
        raise ValueError(f"columns must be non-empty column names (str), got {columns!r}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"columns must be distinct, got {list(columns)!r}")
    return columns


def _csv_blocks(pa, pacsv, path, columns, chunk, names, parse, convert):
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
def read_parquet_column(path, column: str, *, batch_rows: int = 1 << 20
                        ) -> Iterator[tuple[np.ndarray, int]]:
    """Yield (values float64 (n,), data rows before this batch) for one Parquet column.

    ``pyarrow.parquet.ParquetFile.iter_batches`` over the one column. The column must be
    integer, floating or decimal (else ValueError naming its type); nulls are an error naming
    the rows of the batch; integers beyond 2^53 in magnitude (not exact in double) are an
    error. Memory O(batch_rows)."""
    if not isinstance(column, str):
        raise ValueError(f"column must be a column name (str), got {column!r}")
    blocks = read_parquet_columns(path, (column,), batch_rows=batch_rows)
    return ((values[:, 0], rows) for values, rows in blocks)


def read_parquet_columns(path, columns, *, batch_rows: int = 1 << 20
                         ) -> Iterator[tuple[np.ndarray, int]]:
    """Yield (values float64 (n, len(columns)), data rows before this batch) for several
    Parquet columns read together (rules of :func:`read_parquet_column` per column)."""
    path = check_input_path(path)
    columns = _check_column_names(columns)
    if (isinstance(batch_rows, (bool, np.bool_)) or not isinstance(batch_rows, Integral)
            or batch_rows < 1):
        raise ValueError(f"batch_rows must be a positive integer, got {batch_rows!r}")
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from None
    names = pf.schema_arrow.names
    is_int = []
    for column in columns:
        if column not in names:
            raise ValueError(f"column {column!r} not found in {path} (columns: "
                             f"{', '.join(names)})")
        if names.count(column) > 1:
            raise ValueError(f"{path}: duplicate column name {column!r}")
        kind = pf.schema_arrow.field(column).type
        is_int.append(pa.types.is_integer(kind))
        if not (is_int[-1] or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
            raise ValueError(f"{path}: column {column!r} has type {kind}, not numeric")
    return _parquet_batches(pa, pc, pf, path, columns, int(batch_rows), is_int)


def _parquet_batches(pa, pc, pf, path, columns, batch_rows, is_int):
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
        out = []
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


def read_column(path, column: str, **kwargs) -> Iterator[tuple[np.ndarray, int]]:
    """Blocks (values float64 (n,), data rows before) of one column of a CSV/TSV file
    (optionally compressed; options ``delimiter``, ``chunk_bytes``), or of a Parquet file
    (``.parquet``/``.pq``; option ``batch_rows``; ``chunk_bytes`` is checked but unused)."""
    if not isinstance(column, str):
        raise ValueError(f"column must be a column name (str), got {column!r}")
    return ((values[:, 0], rows) for values, rows in read_columns(path, (column,), **kwargs))


def read_columns(path, columns, **kwargs) -> Iterator[tuple[np.ndarray, int]]:
    """Blocks (values float64 (n, len(columns)), data rows before) of several columns of a
    CSV/TSV or Parquet file, read together (options as for :func:`read_column`)."""
    path = check_input_path(path)
    parquet = path.lower().endswith((".parquet", ".pq"))
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
        return read_parquet_columns(path, columns, **{k: v for k, v in kwargs.items()
                                                      if k == "batch_rows"})
    return read_csv_columns(path, columns, **kwargs)


def check_columns(path, columns, **kwargs) -> None:
    """Check that the file can be read and its header (CSV) or schema (Parquet) has
    ``columns``, reading nothing but the header: the cheap checks of :func:`read_columns`
    (same options), run before anything slow. ValueError as :func:`read_columns`."""
    read_columns(path, columns, **kwargs).close()


def histogram_from_file(path, column: str, spec: BinSpec, *, out_of_range: str = "error",
                        **kwargs) -> tuple[np.ndarray, int]:
    """(histogram int64 (K,), rows read) of one file column, block by block (bounded memory).

    Validation over the whole file (``HistogramAccumulator``): NaN / infinite / out-of-range
    values raise ValueError naming the column, counting the offending rows and naming the
    first; a cell that does not parse raises at once (``read_csv_column``); no rows ->
    ValueError. ``kwargs``: ``delimiter``, ``chunk_bytes`` (CSV), ``batch_rows`` (Parquet)."""
    path = check_input_path(path)
    acc = HistogramAccumulator(spec, out_of_range=out_of_range,
                               name=f"{path}: column {column!r}")
    for values, offset in read_column(path, column, **kwargs):
        acc.add(values, offset)
    if acc.rows == 0:
        raise ValueError(f"{acc.name}: no data rows (empty input)")
    return acc.histogram(), acc.rows


def grid_histogram_from_file(path, columns, specs, *, out_of_range: str = "error",
                             **kwargs) -> tuple[np.ndarray, int]:
    """(cell counts int64 (n_1, .., n_d), rows read) of d file columns binned on a grid (one
    ``BinSpec`` per column), block by block with the validation of
    :func:`histogram_from_file` for every column (``GridHistogramAccumulator``)."""
    columns = _check_column_names(columns)
    specs = tuple(specs)
    if len(specs) != len(columns):
        raise ValueError(f"{len(columns)} columns need {len(columns)} bin specifications, got "
                         f"{len(specs)}")
    where = path = check_input_path(path)
    acc = GridHistogramAccumulator(specs, out_of_range=out_of_range,
                                   names=[f"{where}: column {c!r}" for c in columns])
    for values, offset in read_columns(path, columns, **kwargs):
        acc.add(values, offset)
    if acc.rows == 0:
        raise ValueError(f"{where}: columns {', '.join(map(repr, columns))}: no data rows "
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


def _describe_bad(v) -> str:
    if v is None:
        return "missing value None"
    if isinstance(v, (str, bytes, np.str_, np.bytes_)):
        return f"text {v!r} (numeric strings are not converted: parse them first)"
    if isinstance(v, (bool, np.bool_)):
        return f"boolean {bool(v)}"
    if isinstance(v, (list, tuple, np.ndarray)):
        return f"nested sequence {v!r} (data must be 1-D: one value per record)"
    return f"non-numeric value {v!r} of type {type(v).__name__}"


def _as_float_values(data, name: str) -> np.ndarray:
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


def _object_array(data, name: str) -> np.ndarray:
    """float64 values of a sequence that needs element type checks (or the array itself when
    it is not 1-D, for the shape error)."""
    try:
        arr = np.asarray(data, dtype=object)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1-D array of numbers") from None
    return _object_values(arr, name) if arr.ndim == 1 else arr


def _object_values(arr: np.ndarray, name: str) -> np.ndarray:
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


def histogram_from_values(data, spec: BinSpec, *, out_of_range: str = "error",
                          name: str = "data") -> tuple[np.ndarray, int]:
    """(histogram int64 (K,), rows) of an in-memory 1-D array of numbers, in blocks of 4M
    values (bounded temporaries). Accepted inputs: ``_as_float_values``; same validation as
    ``histogram_from_file``."""
    values = _as_float_values(data, name)
    acc = HistogramAccumulator(spec, out_of_range=out_of_range, name=name)
    for start in range(0, values.size, _VALUES_PER_CHUNK):  # loop over blocks, not rows
        acc.add(values[start:start + _VALUES_PER_CHUNK], start)
    return acc.histogram(), acc.rows


def grid_histogram_from_values(data, specs, *, out_of_range: str = "error",
                               name: str = "data") -> tuple[np.ndarray, int]:
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
_HEADER = re.compile(r'^(?:(?:bin|"bin")\s*(?:,|\s)\s*)?(?:count|"count")$', re.IGNORECASE)
_INTEGER = r"^\+?[0-9]+(?:\.0*)?$"  # a non-negative integer, "3" or "3.0" (ASCII digits)
_NUMBER = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$|^[+-]?(?:nan|inf|infinity)$"


def read_counts(path, bins: int | None) -> np.ndarray:
    """The K bin counts (int64, shape (K,)) from a counts file (``bins`` None: a stream's
    steps, one count per line, as many as the file gives).

    Formats (fields separated by a comma or by whitespace; blank lines ignored; LF / CRLF /
    CR; UTF-8, a byte-order mark skipped): one count per line in bin order (exactly K lines),
    or ``bin,count`` lines with bins 0..K-1 each at most once (missing bins count 0). The
    first non-blank line is a header iff it is exactly ``count`` or ``bin,count``
    (case-insensitive, fields optionally quoted, whitespace trimmed); otherwise it is data.
    Counts and bins are non-negative integers (``3``, ``"3"``, ``3.0``), parsed exactly as
    integers (no float round trip) and < 2^53; the total must be < 2^53 too (computed
    exactly). Anything else raises ValueError naming the file and line. Vectorised
    (pyarrow.compute regular expressions); O(file size)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = check_input_path(path, "counts file")
    if bins is not None and (isinstance(bins, (bool, np.bool_)) or not isinstance(bins, Integral)
                             or bins < 1):
        raise ValueError(f"bins must be an integer >= 1 (or None: as many as given), got "
                         f"{bins!r}")
    with open(path, "rb") as f:
        raw = f.read()
    raw = raw[_utf8_start(raw, f"counts file {path}"):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"counts file {path}: not UTF-8 text (line {line})") from None
    del raw
    lines = pa.array(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), pa.string())
    del text
    trimmed = pc.utf8_trim_whitespace(lines)
    nonblank = np.flatnonzero(pc.greater(pc.utf8_length(trimmed), 0).to_numpy(
        zero_copy_only=False))
    if nonblank.size == 0:
        raise ValueError(f"counts file {path}: no counts (empty input)")
    if _HEADER.match(trimmed[int(nonblank[0])].as_py()):
        nonblank = nonblank[1:]
    if nonblank.size == 0:
        raise ValueError(f"counts file {path}: no counts (empty input)")
    line_no = nonblank + 1  # 1-based file line of each data row
    data = trimmed.take(pa.array(nonblank))
    first = data[0].as_py()
    if "," in first:
        pattern = r"^(?P<bin>[^,]*?)\s*,\s*(?P<count>[^,]*)$"
    elif re.search(r"\s", first):
        pattern = r"^(?P<bin>\S+)\s+(?P<count>\S+)$"
    else:
        pattern = None
    if pattern is None:  # one count per line: no separator anywhere
        bad = pc.match_substring_regex(data, r"[,\s]").to_numpy(zero_copy_only=False)
        if bad.any():
            raise ValueError(f"counts file {path}: lines must all hold one count, or all "
                             f"'bin,count' (line {line_no[int(np.argmax(bad))]})")
        values = _exact_integers(pa, pc, data, line_no, path, "count")
        if bins is not None and values.size != bins:
            raise ValueError(f"counts file {path}: {values.size} counts for {bins} bins "
                             "(need exactly one count per bin, in bin order)")
        _check_total(values, path)
        return values
    fields = pc.extract_regex(data, pattern)
    unmatched = pc.invert(pc.is_valid(fields)).to_numpy(zero_copy_only=False)
    if unmatched.any():
        raise ValueError(f"counts file {path}: lines must all hold one count, or all "
                         f"'bin,count' (line {line_no[int(np.argmax(unmatched))]})")
    if bins is None:   # a stream: its length is the number of lines, never a bin index
        raise ValueError(f"counts file {path}: a counts stream has one count per line (line "
                         f"{line_no[0]} looks like 'bin,count')")
    idx = _exact_integers(pa, pc, fields.field("bin"), line_no, path, "bin")
    values = _exact_integers(pa, pc, fields.field("count"), line_no, path, "count")
    if idx.max() >= bins:
        n = int(np.argmax(idx >= bins))
        raise ValueError(f"counts file {path}: bin {int(idx[n])} at line {line_no[n]} is not "
                         f"in 0..{bins - 1}")
    uniq, seen = np.unique(idx, return_counts=True)
    if np.any(seen > 1):
        b = int(uniq[np.argmax(seen > 1)])
        lines_b = line_no[idx == b][:2]
        raise ValueError(f"counts file {path}: bin {b} appears more than once (lines "
                         f"{lines_b[0]} and {lines_b[1]})")
    out = np.zeros(bins, dtype=np.int64)
    out[idx] = values
    _check_total(out, path)
    return out


def _exact_integers(pa, pc, field, line_no: np.ndarray, path: str, what: str) -> np.ndarray:
    """int64 values of a string column of non-negative integers < 2^53, parsed exactly."""
    field = pc.replace_substring_regex(pc.utf8_trim_whitespace(field), r'^"(.*)"$', r"\1")
    ok = pc.match_substring_regex(field, _INTEGER).to_numpy(zero_copy_only=False)
    if not ok.all():
        n = int(np.argmax(~ok))
        cell = field[n].as_py()
        if re.match(_NUMBER, cell.strip(), re.IGNORECASE):
            n_bad = int(np.count_nonzero(~ok))
            raise ValueError(f"counts file {path}: {what} {cell!r} at line {line_no[n]} must be "
                             f"a non-negative integer ({n_bad} such line(s))")
        raise ValueError(f"counts file {path}: {cell!r} is not a number at line {line_no[n]}")
    digits = pc.replace_substring_regex(field, r"^\+?0*([0-9]*?)(?:\.0*)?$", r"\1")
    long = pc.greater(pc.utf8_length(digits), 16).to_numpy(zero_copy_only=False)  # >= 10^16
    if long.any():
        n = int(np.argmax(long))
        raise ValueError(f"counts file {path}: {what} {field[n].as_py()!r} at line "
                         f"{line_no[n]} is >= 2^53 = {_EXACT} (too large to handle exactly)")
    digits = pc.if_else(pc.equal(digits, ""), "0", digits)
    values = pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False)
    big = values >= _EXACT
    if big.any():
        n = int(np.argmax(big))
        raise ValueError(f"counts file {path}: {what} {int(values[n])} at line {line_no[n]} is "
                         f">= 2^53 = {_EXACT} (too large to handle exactly)")
    return values.astype(np.int64, copy=False)


def _check_total(counts: np.ndarray, path: str) -> None:
    """Refuse a total >= 2^53, summed exactly: every count < 2^53 = 2^27 * 2^26, so the high
    and low 26-bit halves each sum below 2^63 for up to 2^36 counts (int64 never wraps)."""
    low = int(np.sum(counts & ((1 << 26) - 1), dtype=np.int64))
    high = int(np.sum(counts >> 26, dtype=np.int64))
    total = (high << 26) + low
    if total >= _EXACT:
        raise ValueError(f"counts file {path}: the counts sum to {total} >= 2^53 = {_EXACT} "
                         "(too large to handle exactly)")


MAX_COUNT_LINE = 1024  # characters (bytes) of one line of a counts stream: longer is refused
COUNT_RULE = ("a non-negative integer below 2^53 in plain decimal digits, like 7, +7 or 7.0, "
              "no exponent")


def count_lines(lines, source: str = "standard input", *,
                quote: bool = True) -> Iterator[tuple[int, int]]:
    """A counts stream read line by line (a file or standard input): yields (line number,
    count) for each non-blank line; a first line ``count`` is a header; blank lines are
    skipped.

    What a count line is (``COUNT_RULE``; the rule of ``read_counts`` too): a non-negative
    integer below 2^53 written in plain decimal ASCII digits, optionally with a leading ``+``
    and a fractional part of zeros only (``7``, ``+7``, ``007``, ``7.0``, ``7.``), inside
    optional surrounding whitespace and one pair of double quotes (``"7"``). Refused: an
    exponent (``1e3``, although its value is an integer), any other fraction (``7.5``), a
    sign ``-``, ``nan`` / ``inf``, anything else; a count >= 2^53; a running total reaching
    2^53 (exact in double below it); a line longer than ``MAX_COUNT_LINE`` characters
    (refused before it is parsed, so a 20-million-digit line costs nothing; a count below
    2^53 has 16 digits); a line that is not UTF-8.

    ``lines``: an iterable of lines, ``str`` or UTF-8 ``bytes`` (a text or binary file
    object); a UTF-8 byte-order mark is skipped, a UTF-16/32 one refused. Each line is checked
    as it is read, so a bad line raises ValueError naming ``source`` and the line number (the
    steps before it stand). ``quote``: whether the message may say what is wrong with the
    line and quote it (at most 40 characters, never the running total): for input validated
    in full before any noise. With ``quote=False`` (a stream answered line by line, whose
    earlier steps are released) every refusal of a line's content says only that line N is
    not a valid count, and the rule: the kind of fault (too long, negative, too large, ...)
    would tell something about a protected count. O(1) memory and time per line."""
    pattern = re.compile(_INTEGER)
    first, total, line_no = True, 0, 0

    def refuse(detail: str) -> ValueError:
        if quote:
            return ValueError(f"{source}: line {line_no}{detail}")
        return ValueError(f"{source}: line {line_no} is not a valid count (one count per "
                          f"line: {COUNT_RULE}, at most {MAX_COUNT_LINE} characters, the "
                          "running count below 2^53; the line is not quoted, as the stream "
                          "is running)")

    it = iter(lines)
    while True:
        try:
            line = next(it)
        except StopIteration:
            return
        except UnicodeDecodeError:  # a text stream that is not UTF-8
            line_no += 1
            raise refuse(" is not UTF-8 text") from None
        line_no += 1
        if len(line) > MAX_COUNT_LINE and len(line) - _line_end_length(line) > MAX_COUNT_LINE:
            raise refuse(f" is longer than {MAX_COUNT_LINE} characters; a counts stream holds "
                         "one count per line (a count below 2^53 has at most 16 digits)")
        if isinstance(line, (bytes, bytearray)):
            try:
                if line_no == 1:
                    line = line[_utf8_start(line, source):]
                line = line.decode("utf-8")
            except UnicodeDecodeError:
                raise refuse(" is not UTF-8 text") from None
            except ValueError as exc:   # a UTF-16 / UTF-32 byte-order mark
                raise refuse(f": {str(exc).removeprefix(source + ': ')}") from None
        text = line.lstrip("\ufeff").strip() if line_no == 1 else line.strip()
        if not text:
            continue
        if first and _HEADER.match(text) and "bin" not in text.lower():
            first = False
            continue
        first = False
        cell = text[1:-1] if len(text) > 1 and text[0] == text[-1] == '"' else text
        if not pattern.match(cell):
            if re.match(_NUMBER, cell, re.IGNORECASE):
                raise refuse(f": {_quote(text)} must be {COUNT_RULE}")
            raise refuse(f": {_quote(text)} is not a number (one count per line: "
                         f"{COUNT_RULE})")
        digits = cell.lstrip("+").split(".")[0].lstrip("0") or "0"
        value = int(digits) if len(digits) <= 16 else _EXACT  # 2^53 has 16 digits
        if value >= _EXACT:
            raise refuse(f": the count is >= 2^53 = {_EXACT} (too large to handle exactly)")
        total += value
        if total >= _EXACT:
            raise refuse(f": the running count reaches 2^53 = {_EXACT} (too large to handle "
                         "exactly)")
        yield line_no, value


def _line_end_length(line) -> int:
    """Length of the line end (CRLF, LF, CR or none) at the end of a str / bytes line."""
    if line[-2:] in ("\r\n", b"\r\n"):
        return 2
    return 1 if line[-1:] in ("\n", "\r", b"\n", b"\r") else 0


def _quote(text: str) -> str:
    """``repr`` of at most the first 40 characters of ``text`` (an error message's quote)."""
    return repr(text if len(text) <= 40 else text[:37] + "...")
