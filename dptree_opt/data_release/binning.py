"""Equal-width binning of raw values into K bins over [lower, upper).

The bin rule (the same in numpy here and in the SQL / Spark / Dask one-liners of the README):

    bin(x) = min(floor(((x - lower) / (upper - lower)) * K), K - 1)   for lower <= x < upper

evaluated in IEEE double precision in exactly this order. The interval is half-open: ``upper``
itself is out of range (with ``out_of_range="clip"`` it goes to the last bin, as does
everything above; everything below ``lower`` goes to bin 0). The ``min`` only catches
x just below ``upper`` whose quotient rounds up to K. The nominal edges
``lower + i (upper - lower) / K`` (``bin_edges``) are what quantiles and range queries are
reported in; a value within a rounding error of a nominal edge may sit on either side of it,
identically in every engine that evaluates the formula above in double precision.

Every step is vectorised (one pass of numpy ufuncs and one ``np.bincount`` per chunk).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

__all__ = ["BinSpec", "HistogramAccumulator", "OUT_OF_RANGE", "check_out_of_range"]

OUT_OF_RANGE = ("error", "clip")


def check_out_of_range(policy: str) -> str:
    """Validate the out-of-range policy: "error" (default everywhere) or "clip"."""
    if policy not in OUT_OF_RANGE:
        raise ValueError(f"out_of_range must be one of {OUT_OF_RANGE}, got {policy!r}")
    return policy


def _finite_number(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


@dataclass(frozen=True)
class BinSpec:
    """K equal-width bins over [lower, upper) (public: chosen without looking at the data).

    Attributes: ``lower``, ``upper`` (finite, lower < upper), ``bins`` (K >= 1)."""

    lower: float
    upper: float
    bins: int

    def __post_init__(self):
        lower = _finite_number(self.lower, "lower")
        upper = _finite_number(self.upper, "upper")
        if not lower < upper:
            raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
        if not math.isfinite(upper - lower):
            raise ValueError(f"upper - lower overflows: lower={lower!r}, upper={upper!r}")
        bins = self.bins
        if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, Integral):
            raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        if bins > 2**31:
            raise ValueError(f"bins must be <= 2^31, got {bins}")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)
        object.__setattr__(self, "bins", int(bins))

    @property
    def width(self) -> float:
        """Nominal bin width (upper - lower) / K."""
        return (self.upper - self.lower) / self.bins

    @property
    def bin_edges(self) -> np.ndarray:
        """Nominal edges, shape (K + 1,): lower + i (upper - lower) / K, last = upper."""
        edges = self.lower + np.arange(self.bins + 1) * ((self.upper - self.lower) / self.bins)
        edges[-1] = self.upper
        return edges

    def bin_index(self, values: np.ndarray) -> np.ndarray:
        """Bin of each finite value (int64, same shape), after clipping to [lower, upper].

        In-range values get the rule of the module docstring; values below ``lower`` get 0 and
        values >= ``upper`` get K - 1 (callers that forbid them check first). O(n)."""
        v = np.clip(values, self.lower, self.upper)
        q = np.floor(((v - self.lower) / (self.upper - self.lower)) * self.bins)
        idx = q.astype(np.int64)
        np.minimum(idx, self.bins - 1, out=idx)  # x = upper (clipped), or rounding up to K
        return idx

    def count(self, values, *, out_of_range: str = "error", name: str = "data") -> np.ndarray:
        """Histogram (int64, shape (K,)) of one 1-D float array, validated (see
        ``HistogramAccumulator``, which this wraps). O(len(values))."""
        acc = HistogramAccumulator(self, out_of_range=out_of_range, name=name)
        acc.add(values)
        return acc.histogram()


class HistogramAccumulator:
    """Bin counts accumulated block by block, with the validation of a whole input.

    ``add(values, row_offset)`` bins one block (1-D float array; ``row_offset`` = data rows
    before it) and tallies the invalid values of every block; ``histogram()`` then returns the
    int64 (K,) counts or raises ValueError (naming ``name``) with the totals over the whole
    input and the first offending data row (1-based):

    * NaN / missing and infinite values: always an error (also with "clip");
    * values outside [lower, upper): an error with ``out_of_range="error"``; with "clip"
      values below ``lower`` count in bin 0 and values >= ``upper`` in bin K - 1;
    * no rows at all: an error (empty input).

    Each block costs one vectorised pass and one ``np.bincount``; memory O(K + block)."""

    def __init__(self, spec: BinSpec, *, out_of_range: str = "error", name: str = "data"):
        self.spec = spec
        self.out_of_range = check_out_of_range(out_of_range)
        self.name = name
        self.rows = 0
        self._hist = np.zeros(spec.bins, dtype=np.int64)
        self._nan = self._inf = self._below = self._above = 0
        self._first_nonfinite = self._first_outside = None

    def add(self, values, row_offset: int | None = None) -> None:
        """Bin one block of values (float64-convertible 1-D array)."""
        v = np.asarray(values, dtype=np.float64).ravel()
        offset = self.rows if row_offset is None else int(row_offset)
        finite = np.isfinite(v)
        if not finite.all():
            n_nan = int(np.count_nonzero(np.isnan(v)))
            self._nan += n_nan
            self._inf += int(v.size - np.count_nonzero(finite)) - n_nan
            if self._first_nonfinite is None:
                self._first_nonfinite = offset + int(np.argmin(finite)) + 1
            v = v[finite]
        if self.out_of_range == "error":
            below, above = v < self.spec.lower, v >= self.spec.upper
            n_below, n_above = int(np.count_nonzero(below)), int(np.count_nonzero(above))
            if n_below or n_above:
                self._below += n_below
                self._above += n_above
                if self._first_outside is None:
                    outside = below | above
                    # position in the block before the non-finite values were removed
                    pos = np.flatnonzero(finite)[int(np.argmax(outside))]
                    self._first_outside = offset + int(pos) + 1
        self._hist += np.bincount(self.spec.bin_index(v), minlength=self.spec.bins)
        self.rows = max(self.rows, offset + int(finite.size))

    def histogram(self) -> np.ndarray:
        """The counts (int64, (K,)), or ValueError for an invalid or empty input."""
        if self._nan or self._inf:
            parts = ([f"{self._nan} NaN/missing"] if self._nan else []) + (
                [f"{self._inf} infinite"] if self._inf else [])
            raise ValueError(f"{self.name}: {' and '.join(parts)} value(s); first at data row "
                             f"{self._first_nonfinite}. Remove or impute them before releasing")
        if self._below or self._above:
            spec = self.spec
            raise ValueError(
                f"{self.name}: {self._below + self._above} value(s) outside [lower, upper) = "
                f"[{spec.lower!r}, {spec.upper!r}) ({self._below} below lower, {self._above} "
                f"at or above upper; first at data row {self._first_outside}). Widen the range "
                "or pass out_of_range='clip' (--out-of-range clip) to count them in the "
                "first/last bin")
        if self.rows == 0:
            raise ValueError(f"{self.name}: no values (empty input)")
        return self._hist.copy()
