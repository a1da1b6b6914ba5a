"""Equal-width binning of raw values into K bins over [lower, upper), by published edges.

The bin rule (source: docs/math.md section 10). The edges are

    e_i = lower + ((upper - lower) * i) / K     for i = 0..K-1,     e_K = upper exactly,

evaluated in IEEE double precision in exactly this order (Python: ``lower + (upper - lower)
* i / K``); they are what ``BinSpec.bin_edges`` returns and what a release writes to its JSON.
A value x in [lower, upper) is in bin i iff ``e_i <= x < e_(i+1)``, for EVERY double x: a
value equal to an edge is in the bin that starts there. The interval is half-open: ``upper``
itself is out of range (with ``out_of_range="clip"`` it goes to the last bin, as does
everything above; everything below ``lower`` goes to bin 0).

The shortcut ``floor(((x - lower) / (upper - lower)) * K)`` is NOT this rule in double
precision (lower 0, upper 101, K 101 puts 29, 57, 58 and 59 one bin low: (29 / 101) * 101 =
28.999999999999996). It is used only as a guess, corrected by comparing x with the edges:

    g = clamp(floor(((x - lower) / (upper - lower)) * K), 0, K - 1)
    bin = g - [x < e_g] + [x >= e_(g+1)]

The guess is within one bin of the right one (so one correction suffices) for every spec
``BinSpec`` accepts. Proof sketch, with u = 2^-53, d = fl(upper - lower), w = d / K, M =
max(|lower|, |upper|), h = spacing(M) / 2 (half a unit in the last place at M), errors in
units of one bin: the guess q = fl(fl(fl(x - lower) / d) K) has relative error <= 3u, so
|q - (x - lower) / w| <= 3.1 u K (x - lower <= (1 + u) d); each edge e_j (0 < j < K) is
lower + j w (1 + theta), |theta| <= 2.1 u (two roundings of (d j) / K, all normal because w >=
the smallest normal double), plus the rounding of the sum, at most h (|e_j| <= M), and e_0 =
lower, e_K = upper are exact. So e_i <= x < e_(i+1) gives i - 1 < q < i + 2 as soon as
h / w + 5.2 u K < 1; ``BinSpec`` refuses specs with h > (1 - 10^-6) w (K <= 2^26 keeps 5.2 u K
< 10^-7), and specs whose edges are not strictly increasing. The implementation still
re-checks the values the correction moved (a vectorised loop over those few; by the proof it
ends after one pass). ``sources.duckdb_source.bin_sql`` generates the same guess and one
correction in SQL, on the same doubles; ``tests/test_binning.py`` runs it against this module.

Every step is vectorised: per block, one pass of numpy ufuncs, two gathers from the edges and
one ``np.bincount``: O(n) time, O(K + block) memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["BinSpec", "HistogramAccumulator", "GridHistogramAccumulator", "OUT_OF_RANGE",
           "check_out_of_range", "MAX_BINS"]

OUT_OF_RANGE = ("error", "clip")


def check_out_of_range(policy: str) -> str:
    """Validate the out-of-range policy: "error" (default everywhere) or "clip"."""
    if policy not in OUT_OF_RANGE:
        raise ValueError(f"out_of_range must be one of {OUT_OF_RANGE}, got {policy!r}")
    return policy


def _finite_number(value: object, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return x


MAX_BINS = 1 << 26  # the edges are computed (and kept) once: 8 (K + 1) bytes
_MIN_NORMAL = float(np.finfo(np.float64).tiny)  # 2^-1022


def _edges(lower: float, upper: float, bins: int) -> npt.NDArray[np.float64]:
    """e_i = lower + ((upper - lower) * i) / K for i < K, e_K = upper; float64 (K + 1,).

    numpy evaluates the same IEEE operations in the same order as the Python expression
    ``lower + (upper - lower) * i / K`` (i and K are exact in double for K <= 2^53). O(K)."""
    edges = np.empty(bins + 1, dtype=np.float64)
    np.multiply(np.arange(bins, dtype=np.float64), upper - lower, out=edges[:-1])
    edges[:-1] /= bins
    edges[:-1] += lower
    edges[-1] = upper
    return edges


@dataclass(frozen=True)
class BinSpec:
    """K equal-width bins over [lower, upper) (public: chosen without looking at the data).

    Attributes: ``lower``, ``upper`` (finite, lower < upper), ``bins`` (1 <= K <= 2^26).
    The bin rule and the edges are in the module docstring (docs/math.md section 10). Refused at
    construction (ValueError naming lower, upper and bins): specs whose edges are not
    strictly increasing in double precision, or whose bins are narrower than the float
    resolution (half the spacing of doubles at max(abs(lower), abs(upper)), or the smallest
    normal double), e.g. lower = 1e15, upper = 1e15 + 1, bins = 1024. The edges are computed once
    (O(K)) and kept, read-only."""

    lower: float
    upper: float
    bins: int
    if TYPE_CHECKING:  # set by __post_init__ (not a dataclass field at run time)
        _edges: npt.NDArray[np.float64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lower = _finite_number(self.lower, "lower")
        upper = _finite_number(self.upper, "upper")
        if not lower < upper:
            raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
        if not math.isfinite(upper - lower):
            raise ValueError(f"upper - lower overflows: lower={lower!r}, upper={upper!r}")
        bins = self.bins
        if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, Integral):
            raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
        bins = int(bins)
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        if bins > MAX_BINS:
            raise ValueError(f"bins must be <= 2^26 = {MAX_BINS}, got {bins}")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)
        object.__setattr__(self, "bins", bins)
        spec = f"lower={lower!r}, upper={upper!r}, bins={bins}"
        width = (upper - lower) / bins
        half_ulp = float(np.spacing(max(abs(lower), abs(upper)))) / 2
        if width < _MIN_NORMAL or half_ulp > (1 - 1e-6) * width:
            raise ValueError(
                f"lower, upper, bins: bins of width {width!r} are narrower than the float "
                f"resolution near {max(abs(lower), abs(upper))!r} (spacing of doubles "
                f"{2 * half_ulp!r}): {spec}. Use fewer bins, or shift the data so that the "
                "range is closer to 0")
        with np.errstate(over="ignore", invalid="ignore"):
            edges = _edges(lower, upper, bins)
        if not np.isfinite(edges).all():
            raise ValueError(f"lower, upper, bins: (upper - lower) * i overflows for the bin "
                             f"edges: {spec}. Use a narrower range or fewer bins")
        flat = edges[1:] <= edges[:-1]
        if flat.any():
            i = int(np.argmax(flat))
            raise ValueError(
                f"lower, upper, bins: the bin edges are not strictly increasing in double "
                f"precision (edge {i} = edge {i + 1} = {float(edges[i])!r}; bins narrower than "
                f"the float resolution): {spec}. Use fewer bins, or shift the data so that the "
                "range is closer to 0")
        edges.flags.writeable = False
        object.__setattr__(self, "_edges", edges)

    @property
    def width(self) -> float:
        """Nominal bin width (upper - lower) / K (the edges are the published values)."""
        return (self.upper - self.lower) / self.bins

    @property
    def bin_edges(self) -> npt.NDArray[np.float64]:
        """The published edges, float64 (K + 1,), read-only: e_i = lower + ((upper - lower) *
        i) / K in double for i < K, and e_K = upper exactly (module docstring)."""
        return self._edges

    def bin_index(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Bin of each value (int64, same shape): i with e_i <= x < e_(i+1) (module docstring).

        Values below ``lower`` (or -inf) get 0 and values >= ``upper`` (or +inf) get K - 1
        (callers that forbid them check first); NaN raises ValueError. O(n): one guess, one
        +-1 correction against the edges, then a re-check of the (few) values it moved."""
        x = np.asarray(values, dtype=np.float64)
        if np.isnan(x).any():
            raise ValueError("bin_index: NaN has no bin (remove or impute missing values)")
        e, K = self._edges, self.bins
        # every value into [lower, prev(upper)]: the bin of prev(upper) is K - 1 (e_(K-1) <
        # upper), so clipped values land in bins 0 / K - 1 and the loop below stays in 0..K-1
        v = np.clip(x.ravel(), self.lower, np.nextafter(self.upper, -np.inf))
        q = np.subtract(v, self.lower)
        q /= self.upper - self.lower
        q *= K
        np.floor(q, out=q)
        g = q.astype(np.int64)
        np.clip(g, 0, K - 1, out=g)
        right = e[1:]  # right[g] = e_(g+1)
        step = (v >= right[g]).astype(np.int64)
        step -= v < e[g]
        g += step
        moved = np.flatnonzero(step)
        while moved.size:  # one pass by the proof in the module docstring; O(#moved)
            gm, vm = g[moved], v[moved]
            step = (vm >= right[gm]).astype(np.int64)
            step -= vm < e[gm]
            g[moved] = gm + step
            moved = moved[step != 0]
        return g.reshape(x.shape)

    def count(self, values: npt.ArrayLike, *, out_of_range: str = "error",
              name: str = "data") -> npt.NDArray[np.int64]:
        """Histogram (int64, shape (K,)) of one 1-D float array, validated (see
        ``HistogramAccumulator``, which this wraps). O(len(values))."""
        acc = HistogramAccumulator(self, out_of_range=out_of_range, name=name)
        acc.add(values)
        return acc.histogram()


class _ColumnTally:
    """The invalid values of one column over all blocks of an input: NaN / missing and
    infinite values (always an error), values outside [lower, upper) (an error under
    ``out_of_range="error"``), each with the first offending data row (1-based)."""

    def __init__(self, spec: BinSpec, out_of_range: str, name: str):
        self.spec, self.out_of_range, self.name = spec, out_of_range, name
        self._nan = self._inf = self._below = self._above = 0
        self._first_nonfinite: int | None = None
        self._first_outside: int | None = None

    def tally(self, v: npt.NDArray[np.float64], offset: int) -> npt.NDArray[np.bool_]:
        """Tally one block (float64 (n,), ``offset`` rows before it); return its finite mask."""
        finite = np.isfinite(v)
        if not finite.all():
            n_nan = int(np.count_nonzero(np.isnan(v)))
            self._nan += n_nan
            self._inf += int(v.size - np.count_nonzero(finite)) - n_nan
            if self._first_nonfinite is None:
                self._first_nonfinite = offset + int(np.argmin(finite)) + 1
        if self.out_of_range == "error":
            with np.errstate(invalid="ignore"):
                outside = finite & ((v < self.spec.lower) | (v >= self.spec.upper))
            if outside.any():
                below = int(np.count_nonzero(outside & (v < self.spec.lower)))
                self._below += below
                self._above += int(np.count_nonzero(outside)) - below
                if self._first_outside is None:
                    self._first_outside = offset + int(np.argmax(outside)) + 1
        return finite

    def error(self) -> str | None:
        """The message for this column's invalid values, or None."""
        if self._nan or self._inf:
            parts = ([f"{self._nan} NaN/missing"] if self._nan else []) + (
                [f"{self._inf} infinite"] if self._inf else [])
            return (f"{self.name}: {' and '.join(parts)} value(s); first at data row "
                    f"{self._first_nonfinite}. Remove or impute them before releasing")
        if self._below or self._above:
            spec = self.spec
            return (f"{self.name}: {self._below + self._above} value(s) outside [lower, upper) "
                    f"= [{spec.lower!r}, {spec.upper!r}) ({self._below} below lower, "
                    f"{self._above} at or above upper; first at data row "
                    f"{self._first_outside}). Widen the range or pass out_of_range='clip' "
                    "(--out-of-range clip) to count them in the first/last bin")
        return None


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
        self._tally = _ColumnTally(spec, self.out_of_range, name)

    def add(self, values: npt.ArrayLike, row_offset: int | None = None) -> None:
        """Bin one block of values (float64-convertible 1-D array)."""
        v = np.asarray(values, dtype=np.float64).ravel()
        offset = self.rows if row_offset is None else int(row_offset)
        finite = self._tally.tally(v, offset)
        if not finite.all():
            v = v[finite]
        self._hist += np.bincount(self.spec.bin_index(v), minlength=self.spec.bins)
        self.rows = max(self.rows, offset + int(finite.size))

    def histogram(self) -> npt.NDArray[np.int64]:
        """The counts (int64, (K,)), or ValueError for an invalid or empty input."""
        msg = self._tally.error()
        if msg is not None:
            raise ValueError(msg)
        if self.rows == 0:
            raise ValueError(f"{self.name}: no values (empty input)")
        return self._hist.copy()


class GridHistogramAccumulator:
    """Cell counts of a d-D grid (one ``BinSpec`` per axis; cells in row-major order),
    accumulated block by block with the validation of ``HistogramAccumulator`` applied to
    every column (``names[i]`` names column i in the messages): ``add(values (n, d),
    row_offset)``, then ``histogram()`` -> int64 (n_1, .., n_d) or ValueError (the first
    column with invalid values, its totals and first offending data row; empty input).
    Memory O(cells + block)."""

    def __init__(self, specs: Iterable[BinSpec], *, out_of_range: str = "error",
                 names: Sequence[str] | None = None):
        self.specs = tuple(specs)
        self.out_of_range = check_out_of_range(out_of_range)
        d = len(self.specs)
        self.names = tuple(names) if names is not None else tuple(
            f"data column {i}" for i in range(d))
        if len(self.names) != d:
            raise ValueError(f"names: need {d}, got {len(self.names)}")
        self.shape = tuple(s.bins for s in self.specs)
        self.rows = 0
        self._hist = np.zeros(math.prod(self.shape), dtype=np.int64)
        self._tallies = [_ColumnTally(s, self.out_of_range, n)
                         for s, n in zip(self.specs, self.names)]

    def add(self, values: npt.ArrayLike, row_offset: int | None = None) -> None:
        """Bin one block of records (float64-convertible array of shape (n, d))."""
        v = np.asarray(values, dtype=np.float64)
        if v.ndim != 2 or v.shape[1] != len(self.specs):
            raise ValueError(f"a block must have shape (n, {len(self.specs)}), got {v.shape}")
        offset = self.rows if row_offset is None else int(row_offset)
        ok = np.ones(v.shape[0], dtype=bool)
        for i, t in enumerate(self._tallies):
            ok &= t.tally(v[:, i], offset)
        rows = v[ok] if not ok.all() else v
        idx = [s.bin_index(rows[:, i]) for i, s in enumerate(self.specs)]
        cell = np.ravel_multi_index(idx, self.shape) if idx[0].size else np.zeros(0, np.int64)
        self._hist += np.bincount(cell, minlength=self._hist.size)
        self.rows = max(self.rows, offset + int(v.shape[0]))

    def histogram(self) -> npt.NDArray[np.int64]:
        """The cell counts (int64, shape (n_1, .., n_d)), or ValueError."""
        for t in self._tallies:
            msg = t.error()
            if msg is not None:
                raise ValueError(msg)
        if self.rows == 0:
            raise ValueError(f"{', '.join(self.names)}: no values (empty input)")
        return self._hist.reshape(self.shape).copy()
