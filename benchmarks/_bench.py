"""Shared helper of the benchmark scripts (imported by file: the scripts' folder is on
sys.path when they run as ``python benchmarks/NAME.py``)."""

import time
import tracemalloc


def timed(fn, *args, **kw):
    """(result, wall seconds, peak traced MiB) of one call fn(*args, **kw)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    secs = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, secs, peak / 2**20
