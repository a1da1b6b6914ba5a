"""Reading a counts stream for `dptree-opt stream`: a counts file (read and checked in full
before the noise) or standard input (read as the lines arrive, in bounded memory).

A counts stream is one count per line, parsed and checked line by line by
``data_release.io.count_lines`` (the rules and the messages are there: a counts file's bad
line is quoted, since nothing is released before the file is valid; a bad line of standard
input is not, since the steps before it are released). This module only
cuts bytes into lines (LF, CRLF or CR; a line longer than ``MAX_COUNT_LINE`` is cut short so
that ``count_lines`` refuses it after one block, not after reading it) and, on standard input,
tells the caller when the next line is not there yet (so that it can write what was released
while it waits).
"""

from __future__ import annotations

import itertools
import os
import re
import select
import sys
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

from ..data_release.io import MAX_COUNT_LINE, check_input_path, count_lines

READ_BYTES = 1 << 16   # bytes asked for by each read of a counts stream
_LINE_END = re.compile(rb"\r\n|\r|\n")


def byte_lines(read: Callable[[int], bytes], source: str,
               wait: Callable[[], object] | None = None) -> Iterator[bytes]:
    """The lines (bytes, without line ends: LF, CRLF or CR) of a binary stream ``read(n)``;
    memory O(64 KiB + the longest line accepted): a longer line is cut to
    ``MAX_COUNT_LINE`` + 3 bytes (``count_lines`` refuses it). ``wait()`` (if given) is called
    before each read that may block."""
    carry = b""
    while True:
        if wait is not None:
            wait()
        try:
            chunk = read(READ_BYTES)
        except OSError as exc:
            raise ValueError(f"{source}: cannot read ({exc.strerror or exc})") from None
        if not chunk:
            if carry:
                yield carry
            return
        data = carry + chunk
        hold = data.endswith(b"\r")   # perhaps the first half of a CRLF
        parts = _LINE_END.split(data[:-1] if hold else data)
        carry = parts.pop() + (b"\r" if hold else b"")
        yield from parts
        if len(carry) > MAX_COUNT_LINE + 2:
            yield carry[:MAX_COUNT_LINE + 3]   # refused as too long
            return


def read_counts_file(path: str, cap: int, why: str) -> npt.NDArray[np.int64]:
    """The counts of a counts-stream file (int64, one per line), validated in full; more than
    ``cap`` counts is refused (``why`` says which limit) after reading at most cap + 1."""
    try:
        path = check_input_path(path, "--counts")
    except ValueError as exc:
        if os.path.exists(path) and not os.path.isdir(path):   # a pipe, a FIFO, a device
            raise ValueError(f"{exc}; to read a stream line by line as it comes, pipe it to "
                             "--counts - (standard input)") from None
        raise
    source = f"counts file {path}"
    try:
        with open(path, "rb") as f:
            counts = count_lines(byte_lines(f.read, source), source)
            values = np.fromiter((c for _, c in itertools.islice(counts, cap + 1)),
                                 dtype=np.int64)
    except OSError as exc:
        raise ValueError(f"--counts: cannot read {path!r} ({exc.strerror or exc})") from None
    if values.size > cap:
        raise ValueError(f"{source} holds more than {cap} counts: they exceed {why}")
    if values.size == 0:
        raise ValueError(f"{source}: no counts (empty input)")
    return values


def stdin_counts(wait: Callable[[Callable[[float], bool]], object]
                 ) -> Iterator[tuple[int, int]]:
    """(line, count) pairs of standard input, read as the lines arrive: from its file
    descriptor when it has one (``wait(readable)`` is then called before each read that may
    block, ``readable(timeout)`` saying whether input came within ``timeout`` seconds), else
    its ``readline``. A bad line is refused without being quoted or described (its steps
    before it are released: what is wrong with it would tell about a protected count)."""
    stdin = sys.stdin
    if stdin is None:
        raise ValueError("--counts -: there is no standard input")
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:
        lines = iter(lambda: stdin.readline(MAX_COUNT_LINE + 3), "")
    else:
        lines = byte_lines(lambda n: os.read(fd, n), "standard input",
                           lambda: wait(lambda timeout: _readable(fd, timeout)))
    return count_lines(lines, "standard input", quote=False)


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has input (or end of file) within ``timeout`` seconds."""
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    except (OSError, ValueError):
        return True
