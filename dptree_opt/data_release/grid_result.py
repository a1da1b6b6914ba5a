"""The result of a private grid release: cells, box counts with exact standard errors, the
heat map and the full account of the mechanism (frozen; everything in it is safe to publish)."""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Sequence

import numpy as np
import numpy.typing as npt

from ..engines.kronecker import kron_box_variances
from ..mechanism import Mechanism
from .. import plotting
from ..files import check_writable_path, write_text_atomic
from .result import (BIN_RULE, BoxCount, PGMMeasurement, json_floats, mechanism_record,
                     pgm_measurements, with_checksum)
from .binning import BinSpec

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["GridRelease", "BoxCount", "GRID_FORMAT"]

GRID_FORMAT = "dptree_opt.grid_release/1"


def _cumulative(cells: np.ndarray) -> np.ndarray:
    """C[a_1, .., a_d] = sum of the cells below a (shape n_i + 1 per axis, zeros at 0)."""
    c = np.asarray(cells, dtype=np.float64)
    for axis in range(c.ndim):
        c = np.cumsum(c, axis=axis)
        pad = [(0, 0)] * c.ndim
        pad[axis] = (1, 0)
        c = np.pad(c, pad)
    return c


def _interpolate(C: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Multilinear interpolation of the cumulative grid C at points x (m, d), bin
    coordinates in [0, n_i]: the count below x with cells spread uniformly inside."""
    shape = np.asarray(C.shape) - 1
    base = np.minimum(np.floor(x), shape - 1).astype(np.int64)
    frac = x - base
    out = np.zeros(x.shape[0])
    for corner in itertools.product((0, 1), repeat=x.shape[1]):
        c = np.asarray(corner)
        w = np.prod(np.where(c == 1, frac, 1.0 - frac), axis=1)
        out += w * C[tuple((base + c).T)]
    return out


def _box(C: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sum over the box [lo, hi) (bin coordinates, (m, d)) by inclusion-exclusion."""
    d = lo.shape[1]
    out = np.zeros(lo.shape[0])
    for corner in itertools.product((0, 1), repeat=d):
        c = np.asarray(corner, dtype=bool)
        sign = -1.0 if (d - c.sum()) % 2 else 1.0
        out += sign * _interpolate(C, np.where(c, hi, lo))
    return out


@dataclass(frozen=True, eq=False)
class GridRelease:
    """A differentially private d-D histogram (immutable; arrays are read-only).

    Attributes
    ----------
    specs : tuple of BinSpec -- the public bins of each axis (equal width, [lower, upper)).
    names : axis names (the file's columns, or x0, x1, ..).
    raw : float (n_1, .., n_d) -- the BLUE of every real cell (unbiased).
    consistent : int64 (n_1, .., n_d) or None -- the L2-nearest non-negative integer cells
        summing to ``total`` (``consistency="l2"``).
    total : N (exact under swap, else the rounded BLUE of N); total_public : bool.
    mechanism : the discrete Mechanism used (a Kronecker product of trees over the padded
        grid); branchings : per-axis branching factors (root first).
    measurements : the noisy answers y (the DP output); privacy, description : the account;
    timings : seconds per phase (not in the JSON unless asked); expected_error : exact,
    data-independent errors of the raw answers; notes; complete (False only if
    post-processing failed: the estimates are NaN and the JSON keeps ``measurements``).
    """

    specs: tuple[BinSpec, ...]
    names: tuple[str, ...]
    raw: np.ndarray = field(repr=False)
    consistent: np.ndarray | None = field(repr=False)
    consistency: str | None
    total: int | None
    total_public: bool
    mechanism: Mechanism = field(repr=False)
    branchings: tuple
    measurements: np.ndarray = field(repr=False)
    privacy: dict = field(repr=False)
    description: str = field(repr=False)
    timings: dict = field(default_factory=dict, repr=False)
    expected_error: dict = field(default_factory=dict, repr=False)
    notes: tuple = ()
    complete: bool = True

    # ------------------------------------------------------------------ views
    @property
    def shape(self) -> tuple[int, ...]:
        """Cells per axis (n_1, .., n_d)."""
        return tuple(s.bins for s in self.specs)

    @property
    def padded_shape(self) -> tuple[int, ...]:
        """Leaves per axis of the hierarchy (>= shape; the extra cells are empty)."""
        return tuple(math.prod(ks) for ks in self.branchings)

    @property
    def bin_edges(self) -> tuple[np.ndarray, ...]:
        """The published edges of each axis, (n_i + 1,)."""
        return tuple(s.bin_edges for s in self.specs)

    @cached_property
    def cell_standard_error(self) -> float:
        """Exact SE of every raw cell (the same for all cells: a unit interval has the same
        Haar energy wherever it lies in a complete tree)."""
        d = len(self.specs)
        return float(np.sqrt(kron_box_variances(self.mechanism, np.zeros(d), np.ones(d))))

    @cached_property
    def _raw_cumulative(self) -> np.ndarray:
        return _cumulative(self.raw)

    @cached_property
    def _consistent_cumulative(self) -> np.ndarray | None:
        return None if self.consistent is None else _cumulative(self.consistent)

    def _to_bins(self, corner: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
        x = np.asarray(corner, dtype=float)
        d = len(self.specs)
        if x.ndim not in (1, 2) or x.shape[-1] != d:
            raise ValueError(f"{name} must have shape ({d},) or (m, {d}), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} must be finite")
        x = np.atleast_2d(x)
        return np.stack([np.interp(x[:, i], s.bin_edges, np.arange(s.bins + 1.0))
                         for i, s in enumerate(self.specs)], axis=1)

    def range_count(self, lo_corner: npt.ArrayLike, hi_corner: npt.ArrayLike) -> BoxCount:
        """Counts in the boxes [lo_1, hi_1) x .. x [lo_d, hi_d) (value units, half-open per
        axis as in 1-D; lo <= hi), with exact standard errors.

        Shapes: corners (d,) -> floats, or (m, d) -> arrays (m,). Corners on bin edges give
        sums of whole cells; inside a cell the count is spread uniformly (the 1-D release's
        linear interpolation, per axis), still a linear function of the raw cells, so its SE
        is exact (``error.kronecker.kron_box_variances``). Below ``lower`` counts as lower,
        above ``upper`` as upper (nothing lies outside)."""
        try:
            lo, hi = np.asarray(lo_corner, dtype=float), np.asarray(hi_corner, dtype=float)
        except (TypeError, ValueError):
            d = len(self.specs)
            raise ValueError(f"lo_corner and hi_corner must be numbers, shape ({d},) or "
                             f"(m, {d})") from None
        if lo.shape != hi.shape:
            raise ValueError(f"lo_corner and hi_corner must have the same shape, got {lo.shape} "
                             f"and {hi.shape}")
        single = lo.ndim == 1
        a, b = self._to_bins(lo, "lo_corner"), self._to_bins(hi, "hi_corner")
        if np.any(np.atleast_2d(lo) > np.atleast_2d(hi)):
            raise ValueError("range_count needs lo_corner <= hi_corner on every axis")
        est = _box(self._raw_cumulative, a, b)
        se = np.sqrt(kron_box_variances(self.mechanism, a, b))
        cc = self._consistent_cumulative  # None without consistency
        cons = _box(cc, a, b) if cc is not None else np.full(est.shape, np.nan)
        if single:
            return BoxCount(float(est[0]), float(se[0]), float(cons[0]))
        return BoxCount(est, se, cons)

    # ----------------------------------------------------------------- output
    def to_dict(self, *, include_measurements: bool = False,
                include_timings: bool = False) -> dict:
        """A JSON-ready dict (format ``GRID_FORMAT``); everything in it is DP output or
        public. Cells are nested lists in row-major order (axis 0 outermost). It holds the
        mechanism's record and a checksum for ``load_release`` (docs/saved_releases.md)."""
        out = {
            "format": GRID_FORMAT,
            "axes": [{"name": n, "lower": s.lower, "upper": s.upper, "K": s.bins,
                      "rule": BIN_RULE, "edges": json_floats(s.bin_edges)}
                     for n, s in zip(self.names, self.specs)],
            "total": self.total, "total_public": self.total_public,
            "cells": {"raw": json_floats(self.raw),
                      "consistent": None if self.consistent is None
                      else json_floats(self.consistent),
                      "standard_error": self.cell_standard_error,
                      "consistency": self.consistency, "estimator": "blue"},
            "expected_error": dict(self.expected_error),
            "notes": list(self.notes),
            "complete": self.complete,
            "hierarchy": {"branchings": [list(k) for k in self.branchings],
                          "padded_shape": list(self.padded_shape)},
            "privacy": self.privacy,
            "description": self.description,
        }
        if include_measurements or not self.complete:
            out["measurements"] = json_floats(self.measurements)
        if include_timings:
            out["timings_seconds"] = dict(self.timings)
        out["mechanism"] = mechanism_record(self.mechanism)
        return with_checksum(out)

    def measurements_for_pgm(self) -> list[PGMMeasurement]:
        """The noisy measurements in the form private-pgm consumes (one
        :class:`PGMMeasurement` per noise level: y, sparse Q over the padded grid's cells,
        row-major, stddev; clique = the axis names); docs/interop.md."""
        return pgm_measurements(self.mechanism, self.measurements, tuple(self.names))

    def to_json(self, path: str | os.PathLike[str] | None = None, *, indent: int | None = 2,
                force: bool = False, **kwargs: bool) -> str:
        """The release as JSON text; written atomically to ``path`` when given, as
        :meth:`Release.to_json` writes (never over an existing file unless ``force``; a bad
        path is a ValueError before anything is done). Returns the text."""
        if path is not None:  # a bad path is refused before any work (ValueError)
            check_writable_path(path)
        text = json.dumps(self.to_dict(**kwargs), indent=indent)
        if path is not None:
            write_text_atomic(path, text + "\n", force=force)
        return text

    def plot(self, ax: Axes | Sequence[Axes] | None = None,
             truth: npt.ArrayLike | None = None) -> Axes | list[Axes]:
        """Heat map of the consistent cells (raw without consistency) over the first two
        axes (others summed), with the cell SE in the title; with ``truth`` (the true cell
        counts, for a simulation) a second panel shows it on the same colour scale. Returns
        the matplotlib Axes (a list of two with ``truth``)."""

        return plotting.plot_grid_release(self, ax=ax, truth=truth)

    def summary(self) -> str:
        """A short human summary: axes, guarantee, N, cell SE and expected errors."""
        p = self.privacy
        budget = (f"eps = {p['epsilon']:g} (pure eps-DP)" if p["noise"] == "laplace"
                  else f"rho = {p['rho']:g} (rho-zCDP)")
        axes = " x ".join(f"{n}: {s.bins} bins over [{s.lower:g}, {s.upper:g})"
                          for n, s in zip(self.names, self.specs))
        lines = [axes, f"{p['sampler_short']}; {budget}; {p['neighbours']} neighbours",
                 f"hierarchy: {self.mechanism.released.name}, per-axis branchings "
                 f"{[list(k) for k in self.branchings]}"
                 + (f" (padded grid {list(self.padded_shape)}; extra cells empty)"
                    if self.padded_shape != self.shape else "")]
        if self.total_public:
            lines.append(f"N = {self.total} (PUBLIC: released exactly under swap neighbours)")
        else:
            se = math.sqrt(self.expected_error.get("total_mse", float("nan")))
            lines.append(f"N (private, estimated) = {self.total}  (SE {se:.3g})")
        e = self.expected_error
        if e:
            lines.append(f"standard errors (exact): one cell {self.cell_standard_error:.3g}; "
                         f"CDF boxes mean {math.sqrt(e['mean_cdf_mse']):.3g} (RMS), max "
                         f"{math.sqrt(e['max_cdf_mse']):.3g}; all boxes RMS "
                         f"{math.sqrt(e['mean_box_mse']):.3g}")
        return "\n".join(lines)
