"""Limits, in one place: sizes that fail fast and budgets beyond double precision.

Sizes. Everything whose size comes from a user (bins, grid cells, strategy rows, queries,
Monte Carlo trials) is checked by arithmetic BEFORE anything of that size is allocated: a
bytes estimate against a share of the memory available (:func:`check_memory`), or a fixed
limit where time, not memory, is what runs out (:func:`check_count`). Each message states
the size, the limit and what to do instead. What an argument is (an integer >= 1, a finite
number > 0, one of some names) is checked before that, by :mod:`dptree_opt.validation`; this
module checks whether the job the arguments ask for fits.

Budgets. Every error this package computes is homogeneous in the budget: the noise
variances are 2 D^2 / eps_l^2 (Laplace) or D^2 / (2 rho_l) (Gaussian) with eps_l (rho_l) a
fixed fraction of the total, and every estimator is linear with weights that depend on the
variances' ratios only, so an error at total budget B is the error at budget 1 divided by
B^2 (Laplace) or B (Gaussian). The analysis computes at a well-scaled budget and rescales
(:func:`at_budget`, ``Mechanism.normalised``); a budget is refused only when the result
itself is not a normal double (:func:`out_of_range`), never with inf, NaN, 0 or a negative
number standing in for it.
"""

from __future__ import annotations

import math
import os
from typing import overload

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

__all__ = ["available_memory", "memory_limit", "format_bytes", "check_memory", "check_count",
           "at_budget", "rescaled", "out_of_range", "TINY",
           "MAX_SEARCH_BINS", "MAX_SEARCH_CELLS", "MAX_KRON_PRODUCTS",
           "MAX_QUADTREE_CANDIDATES", "MAX_COMPARE_BINS", "MAX_COMPARE_CELLS",
           "MAX_MONTE_CARLO_TRIALS"]

# A job may use at most this share of the memory available when it starts.
MEMORY_SHARE = 0.5
# Assumed available memory when the platform does not report it.
FALLBACK_MEMORY = 8 << 30

# Bytes kept per row / bin / query (estimates used before allocating).
TREE_BYTES_PER_ROW = 4            # a level-uniform tree: its int32 level per row
INTERVAL_BYTES_PER_ROW = 44       # lo, hi, parent, depth (int64) and the int32 level
INTERVAL_BYTES_PER_BIN = 8        # bin_row (int64)
WORKLOAD_BYTES_PER_QUERY = 16     # lo, hi (int64)
MECHANISM_BYTES_PER_ROW = 48      # scales, variances, weights, lookups (float64), exact

# optimize.level_uniform: ~70 s and ~1.5 GB at 2^26 bins on 2 cores (~23 bytes per bin).
MAX_SEARCH_BINS = 1 << 26
SEARCH_BYTES_PER_BIN = 32
# compare: every mechanism at once, ~80 s and ~1.5 GB at 2^20 bins (~1.4 KB per bin).
MAX_COMPARE_BINS = 1 << 22
COMPARE_BYTES_PER_BIN = 2048
# compare_grid: ~130 s and ~8.4 GB at 1024 x 1024 = 2^20 cells (~8 KB per cell).
MAX_COMPARE_CELLS = 1 << 20
COMPARE_BYTES_PER_CELL = 8192
# dptree-opt error: the three estimators' exact CDF errors, ~220 bytes per (padded) bin
# (3.7 GB at 2^24 bins, binary tree).
ERROR_BYTES_PER_BIN = 256
# optimize.best_grid_hierarchy: at most 2^32 cells (measured on 2 cores: 65536 x 65536
# --no-padding 28 s, 256^4 28 s, 1024^3 9 s; 512^4 and 1024^4 ran for over 10 minutes).
MAX_SEARCH_CELLS = 1 << 32
# ... and within it, the Kronecker trees left after per-axis dominance pruning (compared at
# ~6e7 a second: 256^4 has 1.5e9, 26 s; 16^8 would have 2e11) and the quadtrees (each
# evaluated exactly into an array of errors: 8 bytes and a few temporaries each).
MAX_KRON_PRODUCTS = 1 << 31
MAX_QUADTREE_CANDIDATES = 1 << 27
# optimize.best_grid_hierarchy: a Kronecker tree's budget levels (one per tuple of axis
# levels) are a vector of this many entries at most.
MAX_GRID_LEVEL_TUPLES = 1 << 20
# monte_carlo_error: the standard error falls as 1 / sqrt(trials); 10^8 trials of even a
# 2-row mechanism take minutes.
MAX_MONTE_CARLO_TRIALS = 10**8

TINY = float(np.finfo(float).tiny)    # smallest normal double, ~2.2e-308
# Relative size, against the largest entry, below which a computed error is a rounding
# remainder (double precision carries ~1e-16; sums of K terms lose a few more digits).
ROUNDING = 2.0**-40


# ------------------------------------------------------------------ sizes
def available_memory() -> int | None:
    """Bytes of memory this process may still use: the least of the system's available
    memory (Linux MemAvailable; else the free physical pages), the room left under the
    cgroup's limit (v2 memory.max - memory.current, v1 memory.limit_in_bytes - usage) and
    the address-space rlimit (RLIMIT_AS); None when none of them is known."""
    known = [v for v in (_system_available(), _cgroup_room(), _rlimit_as()) if v is not None]
    return min(known) if known else None


def _system_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup memory limit (None: no limit known)."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = _read_int(limit_file)
        if limit is not None and limit < 1 << 60:      # "no limit" is a huge number in v1
            return max(limit - (_read_int(usage_file) or 0), 0)
    return None


def _rlimit_as() -> int | None:
    """Address space left under RLIMIT_AS (None: unlimited or unknown)."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = _read_int_field("/proc/self/status", "VmSize:")
    return max(soft - (used or 0), 0)


def _read_int_field(path: str, field: str) -> int | None:
    """A 'Field: N kB' line of a /proc file, in bytes."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_limit() -> int:
    """The most bytes one job may ask for: MEMORY_SHARE of the available memory."""
    avail = available_memory()
    return int((avail if avail else FALLBACK_MEMORY) * MEMORY_SHARE)


def format_bytes(n: float) -> str:
    """A byte count for messages: '512 B', '3.2 MiB', '8.0 TiB', '1.2e+06 TiB'."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB" if n < 1e5 else f"{n:.2g} TiB"


def check_memory(n_bytes: float, what: str, hint: str) -> None:
    """ValueError when ``n_bytes`` (an estimate of what ``what`` allocates) exceeds
    :func:`memory_limit`; ``hint`` says what to do instead."""
    limit = memory_limit()
    if n_bytes > limit:
        raise ValueError(f"{what} would need about {format_bytes(n_bytes)} of memory, above "
                         f"the limit of {format_bytes(limit)} (half the memory available); "
                         f"{hint}")


def check_count(value: int, limit: int, what: str, hint: str) -> None:
    """ValueError when ``value`` (a size named by ``what``) exceeds the fixed ``limit``."""
    if value > limit:
        raise ValueError(f"{what} is above the limit of {_count(limit)}; {hint}")


def _count(n: int) -> str:
    """An integer for messages, with its power of two when it is one (2^26 = 67108864)."""
    n = int(n)
    return f"2^{n.bit_length() - 1} = {n}" if n > 1 and n & (n - 1) == 0 else f"{n}"


# ------------------------------------------------------------------ budgets
def _names(noise: str) -> tuple[str, int]:
    return ("epsilon", 2) if noise == "laplace" else ("rho", 1)


def out_of_range(noise: str, budget: float, quantity: str, log10_value: float,
                 large: bool | None = None) -> ValueError:
    """The ValueError for a budget at which ``quantity`` (about 10^log10_value) is not a
    normal double. ``large``: whether the budget is too large; default: when the quantity
    underflows (an error or a variance), else too small."""
    name, power = _names(noise)
    under = log10_value < 0
    large = under if large is None else large
    per = f"1/{name}^2" if power == 2 else f"1/{name}"
    exp = math.floor(log10_value)
    mantissa = round(10 ** (log10_value - exp), 1)
    if mantissa >= 10.0:   # 9.96 rounds up: 1.0e(exp + 1), never "10.0e..."
        mantissa, exp = 1.0, exp + 1
    return ValueError(
        f"{name} = {budget:g} is too {'large' if large else 'small'} for double precision: "
        f"{quantity} would be about {mantissa:.1f}e{exp:+d}, "
        f"{'below the smallest normal' if under else 'above the largest'} double "
        f"({'2.2e-308' if under else '1.8e+308'}); errors scale as {per}, so compute them "
        f"at {name} = 1 and divide by {name if power == 1 else name + '^2'}")


def _check_range(before: ArrayLike, after: ArrayLike, noise: str, budget: float,
                 log10_shift: float, quantity: str) -> float | npt.NDArray[np.float64]:
    """``after`` (= ``before`` rescaled) when every significant finite positive entry stays a
    finite normal double, else :func:`out_of_range` (``log10_shift``: log10 of the factor).

    Rounding remainders are not significant: an entry within ``ROUNDING`` of the largest
    finite magnitude (e.g. the 1e-15 left of an exactly-known query's zero error) is set to 0
    when it is negative (no error or variance can be) or leaves the normal doubles."""
    b = np.asarray(before, dtype=float)
    a = np.array(after, dtype=float)
    finite = np.isfinite(b)
    top = float(np.max(np.abs(b[finite]), initial=0.0))
    remainder = finite & (np.abs(b) <= top * ROUNDING)
    bad = finite & (b > 0) & ~remainder & ~(np.isfinite(a) & (a >= TINY))
    if np.any(bad):
        worst = float(b[bad].flat[0])
        raise out_of_range(noise, budget, quantity, math.log10(worst) + log10_shift)
    a[remainder & ((b < 0) | ~(a >= TINY))] = 0.0
    return float(a) if a.ndim == 0 else a


@overload
def at_budget(value: float, noise: str, budget: float,
              quantity: str = ...) -> float: ...
@overload
def at_budget(value: npt.NDArray[np.floating], noise: str, budget: float,
              quantity: str = ...) -> npt.NDArray[np.float64]: ...
@overload
def at_budget(value: float | npt.NDArray[np.floating], noise: str, budget: float,
              quantity: str = ...) -> float | npt.NDArray[np.float64]: ...
def at_budget(value: float | npt.NDArray[np.floating], noise: str, budget: float,
              quantity: str = "the expected error") -> float | npt.NDArray[np.float64]:
    """An error computed at unit total budget (epsilon = 1 or rho = 1), restated at
    ``budget``: divided by budget^2 (Laplace) or budget (Gaussian) (homogeneity: module
    docstring). ``value`` is a float or an array (same shape out); entries 0 and inf stay
    as they are; ValueError when a significant finite positive entry leaves the normal
    doubles (rounding remainders: :func:`_check_range`)."""
    name, power = _names(noise)
    budget = float(budget)
    with np.errstate(over="ignore", under="ignore"):
        out = np.asarray(value, dtype=float) / budget
        if power == 2:
            out = out / budget
    return _check_range(value, out, noise, budget, -power * math.log10(budget), quantity)


@overload
def rescaled(value: float, factor: float, noise: str, budget: float,
             quantity: str = ...) -> float: ...
@overload
def rescaled(value: npt.NDArray[np.floating], factor: float, noise: str, budget: float,
             quantity: str = ...) -> npt.NDArray[np.float64]: ...
@overload
def rescaled(value: float | npt.NDArray[np.floating], factor: float, noise: str, budget: float,
             quantity: str = ...) -> float | npt.NDArray[np.float64]: ...
def rescaled(value: float | npt.NDArray[np.floating], factor: float, noise: str,
             budget: float,
             quantity: str = "the expected error") -> float | npt.NDArray[np.float64]:
    """``value * factor`` (a float or an array), with ``factor`` > 0 representable (e.g. the
    power of two of ``Mechanism.normalised``); ValueError (:func:`out_of_range` at the
    mechanism's ``budget``) when a significant finite positive entry leaves the normal
    doubles (rounding remainders: :func:`_check_range`)."""
    with np.errstate(over="ignore", under="ignore"):
        out = np.asarray(value, dtype=float) * factor
    return _check_range(value, out, noise, budget, math.log10(factor), quantity)
