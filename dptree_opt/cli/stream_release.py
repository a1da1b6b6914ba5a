"""What `dptree-opt stream` has released, held in memory and kept on disk as it goes.

:class:`StreamRelease` records each released step (estimate, standard error) and renders the
``--out`` JSON document (status, privacy account, what is public, the steps; strict JSON: a
non-finite number is written as a string in the account and as null in the steps). It
rewrites ``--out`` atomically (``files.write_text_atomic``): once before the first noise draw,
then at most once every ``FLUSH_SECONDS`` and at least ``FLUSH_COST`` times the last write's
duration apart (the writes cost a bounded share of the run, O(T) in all), when the stream is
about to wait for its next line of standard input (``wait``), and at the end. The stream's
user-facing description (``dptree-opt stream --help``) is the docstring of ``stream_cmd``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import files

FLUSH_SECONDS = 1.0     # --out is rewritten at most this often ...
FLUSH_COST = 10.0       # ... and at least this many times the last write's duration apart
clock = time.monotonic  # the clock of the write policy (seconds)
PUBLIC = ("public (not protected): the horizon T, the time bins, the number of steps released "
          "and where the stream stopped; protected (event level): every count and the total")


class WriteFailed(Exception):
    """--out could not be rewritten while the stream ran (the stream stops)."""


class StreamRelease:
    """The released steps of a stream, the ``--out`` JSON document and its write policy.

    ``out``: the checked path of ``--out`` (None: nothing written); ``force``: it may replace
    an existing file; ``capacity``: the most steps held in memory for ``--out`` / ``--plot``
    (0: none are held, only the last); ``account``: the counter's privacy account;
    ``source``: a public description of the input; ``simulation``: numpy noise (``--seed``).
    """

    def __init__(self, out: Path | None, *, force: bool, capacity: int,
                 account: dict[str, Any], source: str, simulation: bool) -> None:
        self.out, self.force, self.capacity = out, force, capacity
        self.account, self.source, self.simulation = account, source, simulation
        self.n, self.written = 0, -1
        size = min(capacity, 1024)   # doubled as needed, up to the capacity
        self.estimate, self.standard_error = np.empty(size), np.empty(size)
        self.last = (0.0, 0.0)
        self.status: str = "running"
        self.stopped: str | None = None
        self._end, self._cost = clock(), 0.0

    @property
    def keeps(self) -> bool:
        """Whether the steps are held (for --out / --plot)."""
        return self.capacity > 0

    def full(self) -> bool:
        """Whether the steps held reached the capacity (no further step can be recorded)."""
        return self.keeps and self.n >= self.capacity

    def add(self, estimate: float, se: float) -> None:
        """Record the next released step (amortised O(1): the arrays are doubled)."""
        if self.keeps:
            if self.n == self.estimate.size:
                grow = min(2 * self.n, self.capacity)
                self.estimate = np.resize(self.estimate, grow)
                self.standard_error = np.resize(self.standard_error, grow)
            self.estimate[self.n], self.standard_error[self.n] = estimate, se
        self.last = (estimate, se)
        self.n += 1

    def text(self) -> str:
        """The JSON document: status, account, ..., then the released steps."""
        head = json.dumps({
            "status": self.status, "stopped": self.stopped,
            "privacy": ("SIMULATION (--seed): numpy noise, NOT PRIVATE" if self.simulation
                        else "event-level differential privacy (OpenDP's secure noise)"),
            "simulation": self.simulation, "public": PUBLIC, "source": self.source,
            "account": _strict(self.account), "steps": self.n}, allow_nan=False, indent=1)
        return (f"{head[:-2]},\n \"estimate\": {_json_array(self.estimate[:self.n])},\n "
                f"\"standard_error\": {_json_array(self.standard_error[:self.n])}\n}}")

    def write(self) -> None:
        """Rewrite --out atomically (OSError, or ValueError when its directory went away, on
        failure: the file on disk is then the last one written)."""
        if self.out is None:
            return
        start = clock()
        files.write_text_atomic(self.out, self.text(), force=self.force or self.written >= 0)
        self._end = clock()
        self._cost = self._end - start
        self.written = self.n

    def due(self) -> float | None:
        """When the next write is due (None: nothing unwritten)."""
        if self.out is None or self.written == self.n:
            return None
        return self._end + max(FLUSH_SECONDS, FLUSH_COST * self._cost)

    def maybe_write(self) -> None:
        """Write now if a write is due (:class:`WriteFailed` if it fails)."""
        due = self.due()
        if due is not None and clock() >= due:
            self._write_or_stop()

    def wait(self, readable: Callable[[float], bool]) -> None:
        """Before waiting for input: wait until the next write is due, then write, unless
        input is ready sooner (``readable(timeout)``); :class:`WriteFailed` if it fails."""
        due = self.due()
        if due is not None and not readable(max(0.0, due - clock())):
            self._write_or_stop()

    def _write_or_stop(self) -> None:
        try:
            self.write()
        except (OSError, ValueError) as exc:
            raise WriteFailed(exc) from None


def _strict(value: object) -> object:
    """``value`` (nested dicts / lists) with every non-finite float as a string ("inf"):
    strict JSON for an account that names an unmeasured level's infinite scale."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _json_array(xs: npt.NDArray[np.float64]) -> str:
    """A float array as a strict JSON array, non-finite values (an unidentified step) as
    null; encoded in blocks of 2^16 by the C encoder (bounded temporaries)."""
    blocks = (json.dumps(xs[i:i + (1 << 16)].tolist())[1:-1]
              for i in range(0, xs.size, 1 << 16))     # over blocks, not steps
    text = ",".join(blocks)
    if not np.isfinite(xs).all():   # only numbers in here: the tokens are unambiguous
        text = text.replace("NaN", "null").replace("-Infinity", "null").replace(
            "Infinity", "null")
    return f"[{text}]"
