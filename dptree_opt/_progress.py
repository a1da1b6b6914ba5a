"""A minimal progress bar on stderr (long Monte Carlo runs, figure generation).

Written here rather than depending on tqdm: a dozen lines cover what the CLI needs."""

from __future__ import annotations

import sys
import time


class Progress:
    """``Progress(total, label, enabled)``; ``update(n)`` then ``close()``."""

    def __init__(self, total: int, label: str, enabled: bool = True, width: int = 30):
        self.total, self.label, self.enabled, self.width = max(total, 1), label, enabled, width
        self.done = 0
        self.start = time.perf_counter()
        self._last = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if self.enabled and (now - self._last > 0.1 or self.done >= self.total):
            self._last = now
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * self.width)
            sys.stderr.write(f"\r{self.label} [{bar:<{self.width}}] {self.done}/{self.total} "
                             f"{now - self.start:.1f}s")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
