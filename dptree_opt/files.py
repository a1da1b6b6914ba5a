"""Output files: the path is checked before any work, the file is written atomically, never
over an existing file unless asked. Used by every writer (releases, streams, figures,
experiments, the CLI): a bad ``--out`` must never cost a long run or the privacy budget, and
a reader must never see a half-written file.

* :func:`check_writable_path` refuses (ValueError naming ``flag``) what is not a path (bytes,
  a file object, empty), a path the system cannot look up (a name too long, a symlink loop),
  a directory, an existing path that is not a regular file (a FIFO, a device: ``--out
  /dev/null --force`` would otherwise replace the device), a path whose parent directory does
  not exist or is not writable.
* :func:`check_output_path` does the same, and also refuses a path that is one of the input
  files (same file by ``os.path.samefile``, so a symlink or another spelling counts), a name
  without one of the expected suffixes (``.json``; ``.png``, ...), or a path that exists
  already without ``force``.
* :func:`write_atomic` / :func:`write_text_atomic`: the content goes to a new hidden file in
  the target's directory, is flushed to disk, then moved into place: ``os.replace`` with
  ``force``, a hard link (which fails if the target appeared meanwhile) without it; the
  directory entry is then flushed too. The file gets the permissions a plain
  ``open(path, "w")`` would give it: 0666 minus the umask for a new file (the kernel applies
  the umask, as for ``open``), the old file's mode when one is replaced. On failure the
  target is untouched and no temporary file is left behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, TypeAlias

#: what a path argument may be (anything else is refused with a ValueError)
StrPath: TypeAlias = "str | os.PathLike[str]"

__all__ = ["check_writable_path", "check_output_path", "write_atomic", "write_text_atomic",
           "path_lookup_errors"]


@contextlib.contextmanager
def path_lookup_errors(flag: str, path: object) -> Iterator[None]:
    """An OSError while looking a path up (ENAMETOOLONG, ELOOP, EACCES) is bad input."""
    try:
        yield
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r}: {exc.strerror or exc}") from None


def check_writable_path(path: StrPath, *, flag: str = "path") -> Path:
    """``path`` as a Path, if a regular file could be created or replaced there (module
    docstring); ValueError naming ``flag`` otherwise. Nothing is written."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if text == "":
        raise ValueError(f"{flag}: the path is empty; name a file")
    if not isinstance(text, str):
        raise ValueError(f"{flag}: expected a file path (str or os.PathLike), got {path!r}")
    out = Path(text)
    with path_lookup_errors(flag, text):
        if out.is_dir():
            example = out / ("plot.png" if "plot" in flag else "release.json")
            raise ValueError(f"{flag} {text!r} is a directory; name a file (e.g. "
                             f"{str(example)!r})")
        if os.path.lexists(out) and not out.is_file():
            what = ("a broken symbolic link" if out.is_symlink() and not out.exists()
                    else "not a regular file (a device, a FIFO, ...)")
            raise ValueError(f"{flag} {text!r} is {what}; name a regular file")
        parent = out.parent   # "." for a bare file name
        if not parent.is_dir():
            raise ValueError(f"{flag}: directory {str(parent)!r} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(f"{flag}: directory {str(parent)!r} is not writable")
    return out


def check_output_path(path: StrPath, *, inputs: Sequence[StrPath | None] = (),
                      force: bool = False, flag: str = "--out",
                      suffixes: tuple[str, ...] = ()) -> Path:
    """The validated output path (module docstring): :func:`check_writable_path`, not one of
    ``inputs``, a name ending in one of ``suffixes`` (any case; when given), and not existing
    unless ``force``; ValueError naming ``flag``, checked in that order."""
    out = check_writable_path(path, flag=flag)
    with path_lookup_errors(flag, path):
        exists = out.exists()
        for inp in inputs if exists else ():
            if inp is not None and os.path.exists(os.fspath(inp)) \
                    and os.path.samefile(out, os.fspath(inp)):
                raise ValueError(f"{flag} {str(out)!r} is the input file "
                                 f"{os.fspath(inp)!r}: refusing to overwrite the data")
    if suffixes and out.suffix.lower() not in suffixes:
        raise ValueError(f"{flag} {str(out)!r}: name a {' / '.join(suffixes)} file")
    if exists and not force:
        raise ValueError(f"{flag} {str(out)!r} exists; pass --force to overwrite it")
    return out


def _create_temporary(parent: Path, name: str) -> tuple[int, Path]:
    """(fd, path) of a new hidden file next to the target, created with mode 0666 so that the
    kernel applies the umask exactly as for ``open`` (``mkstemp`` would give 0600); the name
    keeps at most 64 characters of the target's so that it stays within NAME_MAX."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = parent / f".{name[:64]}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file in {str(parent)!r}")


def write_atomic(path: StrPath, write: Callable[[BinaryIO], object], *,
                 force: bool = False) -> Path:
    """Write a file atomically (module docstring): ``write(f)`` fills the binary file object
    ``f``. ValueError for a path that cannot be written (:func:`check_writable_path`),
    FileExistsError if ``path`` exists and not ``force``, OSError on I/O failure (the target
    is then untouched). Returns the Path."""
    out = check_writable_path(path)
    parent = out.parent
    if os.path.lexists(out) and not force:
        raise FileExistsError(f"{str(out)!r} exists (pass force=True to overwrite it)")
    fd, tmp = _create_temporary(parent, out.name)
    try:
        with os.fdopen(fd, "wb") as f:
            if force and out.is_file():  # what open(path, "w") keeps: the file's mode
                os.fchmod(f.fileno(), stat.S_IMODE(os.stat(out).st_mode))
            write(f)
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
                if os.path.lexists(out):
                    raise FileExistsError(f"{str(out)!r} exists") from None
                os.replace(tmp, out)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    _sync_directory(parent)
    return out


def write_text_atomic(path: StrPath, text: str, *, force: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: :func:`write_atomic`."""
    data = text.encode("utf-8")
    return write_atomic(path, lambda f: f.write(data), force=force)


def _sync_directory(parent: Path) -> None:
    """Flush the directory entry of the new file to disk (best effort: not every platform
    or file system can open a directory)."""
    try:
        fd = os.open(parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
