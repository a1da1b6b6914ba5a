"""The process around a running `dptree-opt stream`: stop signals that never cut a step in
half, standard output that may be closed by its reader (``| head``), and messages on standard
error that never fail.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Literal

from ._common import stdout_closed

if TYPE_CHECKING:
    from signal import _HANDLER

_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class Interrupted(BaseException):
    """A stop signal (SIGINT / SIGTERM / SIGHUP) stopped the stream."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


class StopSignals:
    """A context manager: the stop signals raise :class:`Interrupted`, but only outside
    ``held()`` blocks and before ``hold_all()`` (a step is released, recorded and printed
    whole; the final write is never cut short); a signal held back is kept in ``pending``. A
    signal the caller ignores (``nohup``) stays ignored. Main thread only (elsewhere it does
    nothing); the previous handlers are restored on exit."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self._depth = 0
        self._saved: dict[int, _HANDLER] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for name in _STOP_SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                    self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        for sig, old in self._saved.items():
            signal.signal(sig, old)
        return False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._depth:
            self.pending = self.pending or signum
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A block no stop signal interrupts; one that came meanwhile is raised after it."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and self.pending is not None:
            raise Interrupted(self.pending)

    def hold_all(self) -> None:
        """From now on every stop signal is only recorded in ``pending``."""
        self._depth += 1


class StdoutLines:
    """Lines on stdout (each flushed when ``flush``), none when ``quiet``; if the reader goes
    away (``| head``) they stop silently (``broken``) and fd 1 is pointed at /dev/null, so
    that nothing fails again when the interpreter exits."""

    def __init__(self, quiet: bool, flush: bool) -> None:
        self.quiet, self.flush, self.broken = quiet, flush, False

    def write(self, line: str) -> None:
        """Print ``line`` (unless quiet or the reader is gone)."""
        if self.quiet or self.broken:
            return
        try:
            print(line, flush=self.flush)
        except BrokenPipeError:
            self._gone()

    def close(self) -> None:
        """Flush what is buffered (noting a reader that went away)."""
        if not (self.quiet or self.broken):
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.broken = True
        stdout_closed()


def to_stderr(text: str) -> None:
    """A line on stderr (ignored if stderr is gone too)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError, ValueError):
        pass
