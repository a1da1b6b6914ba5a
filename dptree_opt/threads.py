"""How many BLAS threads the command line and the tests use.

Measured on 2 cores with two other numpy processes running (each with its own BLAS threads):
HDMM's p-Identity at 256 bins took 45.1 s with 2 OpenBLAS threads and 7.8 s with 1; without
the other processes 1 and 2 threads take the same time (2.8 s at 512 bins). The framework's
linear algebra is many small factorisations, where threads mostly wait for each other, so
the command line runs BLAS on one thread unless the user chose otherwise: the environment
variable ``DPTREE_OPT_BLAS_THREADS`` (an integer >= 1), or any of OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS, MKL_NUM_THREADS (then the BLAS library's own setting stands). Library calls
are not changed: a program that imports dptree_opt keeps its own thread settings.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from threadpoolctl import threadpool_limits

__all__ = ["blas_threads", "limited_blas"]

_USER_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_threads(environ: Mapping[str, str] = os.environ) -> int | None:
    """The BLAS thread count to impose: ``DPTREE_OPT_BLAS_THREADS`` when set (ValueError
    unless an integer >= 1), None when the user set the BLAS library's own variable, else 1."""
    value = environ.get("DPTREE_OPT_BLAS_THREADS")
    if value is not None:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"DPTREE_OPT_BLAS_THREADS must be an integer >= 1, got {value!r}")
        return n
    if any(environ.get(name) for name in _USER_SETTINGS):
        return None
    return 1


def limited_blas(environ: Mapping[str, str] = os.environ) -> contextlib.AbstractContextManager[object]:
    """A context in which BLAS uses :func:`blas_threads` threads (no change when None)."""
    n = blas_threads(environ)
    if n is None:
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")
