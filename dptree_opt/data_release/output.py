"""Writing a release: the output path is checked before any data is read, and the JSON is
written atomically, never over an existing file unless asked.

* ``check_output_path(path, inputs=..., force=...)``: refuses (ValueError) a path that is a
  directory, whose parent directory does not exist or is not writable, that is one of the
  input files (same file, by ``os.path.samefile``, so a symlink or another spelling counts),
  or that exists already without ``force``. Run it before reading the data and before the
  noise: a bad ``--out`` must not cost the privacy budget.
* ``write_text_atomic(path, text, force=...)``: writes a temporary file in the target's
  directory, flushes it to disk, then moves it into place: ``os.replace`` with ``force``, a
  hard link (which fails if the target appeared meanwhile) without it. A reader never sees a
  half-written file; an existing file is never clobbered without ``force``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["check_output_path", "write_text_atomic"]


def check_output_path(path, *, inputs=(), force: bool = False, flag: str = "--out") -> Path:
    """The validated output path (see the module docstring); ValueError naming the problem
    (and the option ``flag`` it came from)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{flag}: expected a file path, got {path!r}")
    out = Path(os.fspath(path))
    if out.is_dir():
        raise ValueError(f"{flag} {str(out)!r} is a directory; name a file (e.g. "
                         f"{str(out / 'release.json')!r})")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{flag}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: directory {str(parent)!r} is not writable")
    if out.exists():
        for inp in inputs:
            if inp is not None and os.path.exists(os.fspath(inp)) \
                    and os.path.samefile(out, os.fspath(inp)):
                raise ValueError(f"{flag} {str(out)!r} is the input file {os.fspath(inp)!r}: "
                                 "refusing to overwrite the data")
        if not force:
            raise ValueError(f"{flag} {str(out)!r} exists; pass --force to overwrite it")
    return out


def write_text_atomic(path, text: str, *, force: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; FileExistsError if ``path`` exists and
    not ``force``; OSError on I/O failure (the target is then untouched)."""
    out = Path(os.fspath(path))
    parent = out.parent if str(out.parent) else Path(".")
    if out.exists() and not force:
        raise FileExistsError(f"{str(out)!r} exists (pass force=True to overwrite it)")
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, out)
        else:
            try:
                os.link(tmp, out)  # atomic, and fails if the target appeared meanwhile
            except FileExistsError:
                raise
            except OSError:  # no hard links on this file system: check, then rename
                if out.exists():
                    raise FileExistsError(f"{str(out)!r} exists") from None
                os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
