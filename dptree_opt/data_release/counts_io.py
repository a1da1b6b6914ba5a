"""Input files and counts: the path check every reader uses, where a text's bytes start
(a UTF-8 byte-order mark skipped, UTF-16 / UTF-32 refused), and counts read exactly as
integers -- a counts file of K bins (``read_counts``) and a stream of one count per line
(``count_lines``). ``dptree_opt.data_release.io`` re-exports every public name."""

from __future__ import annotations

import os
import re
from numbers import Integral
from typing import Any, Iterable, Iterator

import numpy as np
import numpy.typing as npt

__all__ = ["check_input_path", "utf8_start", "read_counts", "count_lines", "MAX_COUNT_LINE",
           "COUNT_RULE"]

_EXACT = 1 << 53  # integers up to 2^53 are exact in double (and sums below it)
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
_UTF8_BOM = b"\xef\xbb\xbf"


def utf8_start(raw: bytes | bytearray, where: str) -> int:
    """Where the text of ``raw`` (the first bytes of a file or stream) starts: after a UTF-8
    byte-order mark, if any; ValueError (naming ``where``) for a UTF-16 / UTF-32 text."""
    for bom, name in _WIDE_BOMS:
        if raw.startswith(bom):
            raise ValueError(f"{where}: {name} text; convert it to UTF-8")
    return len(_UTF8_BOM) if raw.startswith(_UTF8_BOM) else 0


def check_input_path(path: object, name: str = "file") -> str:
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




_HEADER = re.compile(r'^(?:(?:bin|"bin")\s*(?:,|\s)\s*)?(?:count|"count")$', re.IGNORECASE)
_INTEGER = r"^\+?[0-9]+(?:\.0*)?$"  # a non-negative integer, "3" or "3.0" (ASCII digits)
_NUMBER = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$|^[+-]?(?:nan|inf|infinity)$"


def read_counts(path: str | os.PathLike[str], bins: int | None) -> npt.NDArray[np.int64]:
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
    raw = raw[utf8_start(raw, f"counts file {path}"):]
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


def _exact_integers(pa: Any, pc: Any, field: Any, line_no: npt.NDArray[np.int64], path: str,
                    what: str) -> npt.NDArray[np.int64]:
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


def _check_total(counts: npt.NDArray[np.int64], path: str) -> None:
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


def count_lines(lines: Iterable[str | bytes | bytearray], source: str = "standard input", *,
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
                    line = line[utf8_start(line, source):]
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


def _line_end_length(line: str | bytes | bytearray) -> int:
    """Length of the line end (CRLF, LF, CR or none) at the end of a str / bytes line."""
    if line[-2:] in ("\r\n", b"\r\n"):
        return 2
    return 1 if line[-1:] in ("\n", "\r", b"\n", b"\r") else 0


def _quote(text: str) -> str:
    """``repr`` of at most the first 40 characters of ``text`` (an error message's quote)."""
    return repr(text if len(text) <= 40 else text[:37] + "...")
