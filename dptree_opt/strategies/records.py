"""Strategies as JSON-able records, and back (for releases saved to JSON and loaded later).

``strategy_record(s)`` describes a strategy by its structure where it has one -- a
level-uniform tree by its branching, a Kronecker product by its factors, a quadtree by its
per-axis branchings, a scaled integer strategy by its integer matrix or Toeplitz coefficients
and its scale -- and any other strategy by its sparse matrix (CSR arrays) and row levels.
``strategy_from_record(d)`` rebuilds it, validating every field (ValueError naming it) and
checking sizes by arithmetic before anything is allocated. Record format:
``STRATEGY_RECORD`` (docs/saved_releases.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from .base import Strategy
from .haar import HaarStrategy
from .interval import IntervalStrategy, LevelUniformTree
from .kronecker import KroneckerStrategy
from .quadtree import QuadtreeStrategy
from .scaled import IntegerStrategy, IntegerToeplitz
from .toeplitz import ToeplitzStrategy

__all__ = ["STRATEGY_RECORD", "MAX_RECORD_BINS", "MAX_RECORD_ENTRIES", "strategy_record",
           "strategy_from_record"]

STRATEGY_RECORD = "dptree_opt.strategy/1"
MAX_RECORD_BINS = 1 << 26      # bins (cells) of a rebuilt strategy
MAX_RECORD_ENTRIES = 1 << 27   # stored entries of a matrix record


def _ints(values: Any) -> list:
    return [int(v) for v in np.asarray(values).tolist()]


def strategy_record(strategy: Strategy) -> dict:
    """A JSON-able dict that :func:`strategy_from_record` turns back into an equal strategy
    (same rows, levels and name). Structured for trees, Kronecker products of them,
    quadtrees and the scaled integer strategies; otherwise the CSR arrays of the matrix."""
    kind = type(strategy)
    base = {"format": STRATEGY_RECORD, "name": strategy.name, "n_bins": int(strategy.n_bins)}
    s: Any = strategy          # the attributes of the exact class tested below
    if kind is LevelUniformTree:
        return {**base, "kind": "tree", "branching": list(s.branching)}
    if kind is ToeplitzStrategy:
        return {**base, "kind": "toeplitz", "n_totals": s.n_totals,
                "coefficients": [float(v) for v in s.coefficients]}
    if kind is HaarStrategy:
        return {**base, "kind": "haar", "n_totals": s.n_totals}
    if kind is IntervalStrategy:
        return {**base, "kind": "intervals", "lo": _ints(s.lo), "hi": _ints(s.hi),
                "parent": _ints(s.parent), "levels": _ints(s.levels),
                "depth": _ints(s.depth), "bin_row": _ints(s.bin_row)}
    if kind is KroneckerStrategy:
        return {**base, "kind": "kron", "n_totals": s.n_totals,
                "factors": [strategy_record(f) for f in s.factors]}
    if kind is QuadtreeStrategy:
        return {**base, "kind": "quadtree", "shape": list(s.grid_shape),
                "axis_branchings": [list(t.branching) for t in s.axis_trees]}
    if kind is IntegerToeplitz:
        return {**base, "kind": "integer_toeplitz", "scale_bits": s.scale_bits,
                "source": s.source, "n_totals": s.n_totals,
                "coefficients": _ints(s.integer_coefficients())}
    if kind is IntegerStrategy:
        core = s.core
        return {**base, "kind": "integer_matrix", "scale_bits": s.scale_bits,
                "source": s.source, "n_totals": s.n_rows - core.shape[0],
                "shape": list(core.shape), "indptr": _ints(core.indptr),
                "indices": _ints(core.indices), "data": _ints(core.data)}
    a = s.matrix
    return {**base, "kind": "matrix", "shape": list(a.shape), "indptr": _ints(a.indptr),
            "indices": _ints(a.indices), "data": [float(v) for v in a.data],
            "levels": _ints(s.levels)}


def _field(d: dict, key: str, what: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise ValueError(f"{what}: the field {key!r} is missing")
    return d[key]


def _int_list(value: Any, what: str, minimum: int = 0, length: int | None = None) -> np.ndarray:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ValueError(f"{what} must be a list of integers")
    if length is not None and len(value) != length:
        raise ValueError(f"{what} must have {length} entries, got {len(value)}")
    if value and (min(value) < minimum or max(value) > 2**62):
        raise ValueError(f"{what} has entries out of range")
    return np.asarray(value, dtype=np.int64)


def _branching(value: Any, what: str) -> tuple[int, ...]:
    ks = _int_list(value, what, minimum=1)
    if ks.size > 64:
        raise ValueError(f"{what}: too many levels ({ks.size})")
    if math.prod(int(k) for k in ks) > MAX_RECORD_BINS:
        raise ValueError(f"{what}: more than {MAX_RECORD_BINS} leaves")
    return tuple(int(k) for k in ks)


def _csr(d: dict, what: str, integer: bool) -> sp.csr_matrix:
    shape = _int_list(_field(d, "shape", what), f"{what}.shape", 1, 2)
    m, n = int(shape[0]), int(shape[1])
    if n > MAX_RECORD_BINS or m > MAX_RECORD_ENTRIES:
        raise ValueError(f"{what}.shape {[m, n]} is too large")
    indptr = _int_list(_field(d, "indptr", what), f"{what}.indptr", 0, m + 1)
    nnz = int(indptr[-1])
    if nnz > MAX_RECORD_ENTRIES or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise ValueError(f"{what}.indptr must rise from 0 (at most {MAX_RECORD_ENTRIES} "
                         "entries)")
    indices = _int_list(_field(d, "indices", what), f"{what}.indices", 0, nnz)
    if indices.size and indices.max() >= n:
        raise ValueError(f"{what}.indices must be < {n}")
    raw = _field(d, "data", what)
    if not isinstance(raw, list) or len(raw) != nnz:
        raise ValueError(f"{what}.data must be a list of {nnz} numbers")
    if integer:
        data = _int_list(raw, f"{what}.data", -(2**40), nnz).astype(np.float64)
    else:
        if not all(type(v) in (int, float) for v in raw):
            raise ValueError(f"{what}.data must be numbers")
        data = np.asarray(raw, dtype=np.float64)
        if not np.all(np.isfinite(data)):
            raise ValueError(f"{what}.data must be finite")
    return sp.csr_matrix((data, indices, indptr), shape=(m, n))


def strategy_from_record(d: Any, what: str = "strategy") -> Strategy:
    """The strategy a :func:`strategy_record` describes (ValueError naming ``what`` and the
    field when the record is malformed, of another format, or too large)."""
    if not isinstance(d, dict):
        raise ValueError(f"{what} must be a JSON object")
    if "unavailable" in d:
        raise ValueError(f"{what}: {d['unavailable']}: the release was saved without it")
    if d.get("format") != STRATEGY_RECORD:
        raise ValueError(f"{what}: format {d.get('format')!r} is not {STRATEGY_RECORD!r}")
    kind, name = _field(d, "kind", what), _field(d, "name", what)
    n = _field(d, "n_bins", what)
    if type(n) is not int or not 1 <= n <= MAX_RECORD_BINS:
        raise ValueError(f"{what}.n_bins must be an integer in [1, {MAX_RECORD_BINS}]")
    if not isinstance(name, str):
        raise ValueError(f"{what}.name must be a string")
    out: Strategy
    if kind == "tree":
        ks = _branching(_field(d, "branching", what), f"{what}.branching")
        if math.prod(ks) != n:
            raise ValueError(f"{what}: the branching's product is not n_bins = {n}")
        out = LevelUniformTree(n, ks, name=name)
    elif kind == "toeplitz":
        totals = _field(d, "n_totals", what)
        if type(totals) is not int or not 0 <= totals <= 1:
            raise ValueError(f"{what}.n_totals must be 0 or 1")
        coef = _field(d, "coefficients", what)
        if not isinstance(coef, list) or len(coef) != n or not all(
                type(v) in (int, float) for v in coef):
            raise ValueError(f"{what}.coefficients must be a list of {n} numbers")
        out = ToeplitzStrategy(np.asarray(coef, dtype=np.float64), n_totals=totals, name=name)
    elif kind == "haar":
        totals = _field(d, "n_totals", what)
        if type(totals) is not int or not 0 <= totals <= 1 or n & (n - 1):
            raise ValueError(f"{what}: n_totals must be 0 or 1 and n_bins a power of two")
        out = HaarStrategy(n, n_totals=totals, name=name)
    elif kind == "intervals":
        lo = _field(d, "lo", what)
        m = len(lo) if isinstance(lo, list) else -1
        if not 1 <= m <= MAX_RECORD_ENTRIES:
            raise ValueError(f"{what}.lo must be a non-empty list of integers")
        lo = _int_list(lo, f"{what}.lo", 0, m)
        hi = _int_list(_field(d, "hi", what), f"{what}.hi", 1, m)
        parent = _int_list(_field(d, "parent", what), f"{what}.parent", -1, m)
        levels = _int_list(_field(d, "levels", what), f"{what}.levels", 0, m)
        depth = _int_list(_field(d, "depth", what), f"{what}.depth", 0, m)
        bin_row = _int_list(_field(d, "bin_row", what), f"{what}.bin_row", -1, n)
        if np.any(lo >= hi) or np.any(hi > n) or np.any(parent >= m) or np.any(bin_row >= m):
            raise ValueError(f"{what}: the ranges must satisfy 0 <= lo < hi <= n_bins and the "
                             "row references must be rows")
        out = IntervalStrategy(lo, hi, parent, levels, n_bins=n, depth=depth, bin_row=bin_row,
                               name=name)
    elif kind == "kron":
        factors = _field(d, "factors", what)
        if not isinstance(factors, list) or not 1 <= len(factors) <= 8:
            raise ValueError(f"{what}.factors must be a list of 1 to 8 strategies")
        sizes = [_field(f, "n_bins", f"{what}.factors") for f in factors]
        if not all(type(k) is int and k >= 1 for k in sizes) or math.prod(sizes) != n:
            raise ValueError(f"{what}: the factors' bins do not multiply to n_bins = {n}")
        totals = _field(d, "n_totals", what)
        if type(totals) is not int or not 0 <= totals <= 1:
            raise ValueError(f"{what}.n_totals must be 0 or 1")
        out = KroneckerStrategy([strategy_from_record(f, f"{what}.factors[{i}]")
                                 for i, f in enumerate(factors)], n_totals=totals, name=name)
    elif kind == "quadtree":
        grid = [int(k) for k in _int_list(_field(d, "shape", what), f"{what}.shape", 1)]
        if not 2 <= len(grid) <= 8 or math.prod(grid) != n:
            raise ValueError(f"{what}.shape must have 2 to 8 axes multiplying to n_bins")
        axes = _field(d, "axis_branchings", what)
        if not isinstance(axes, list) or len(axes) != len(grid):
            raise ValueError(f"{what}.axis_branchings must have one list per axis")
        per_axis = [_branching(a, f"{what}.axis_branchings") for a in axes]
        if any(math.prod(k) != g for k, g in zip(per_axis, grid)) or \
                len({len(k) for k in per_axis}) != 1:
            raise ValueError(f"{what}.axis_branchings do not match the shape")
        out = QuadtreeStrategy(tuple(grid), per_axis, name=name)
    elif kind in ("integer_toeplitz", "integer_matrix"):
        bits, source = _field(d, "scale_bits", what), _field(d, "source", what)
        totals = _field(d, "n_totals", what)
        if type(bits) is not int or not 0 <= bits <= 40 or not isinstance(source, str):
            raise ValueError(f"{what}: scale_bits must be an integer in [0, 40] and source a "
                             "string")
        if type(totals) is not int or not 0 <= totals <= 1:
            raise ValueError(f"{what}.n_totals must be 0 or 1")
        if kind == "integer_toeplitz":
            c = _int_list(_field(d, "coefficients", what), f"{what}.coefficients", -(2**40), n)
            out = IntegerToeplitz(c.astype(np.float64), scale_bits=bits, source=source,
                                  n_totals=totals, name=name)
        else:
            core = _csr(d, what, integer=True)
            if core.shape[1] != n:
                raise ValueError(f"{what}.shape does not have n_bins = {n} columns")
            out = IntegerStrategy(core, scale_bits=bits, source=source, n_totals=totals,
                                  name=name)
    elif kind == "matrix":
        a = _csr(d, what, integer=False)
        if a.shape[1] != n:
            raise ValueError(f"{what}.shape does not have n_bins = {n} columns")
        levels = _int_list(_field(d, "levels", what), f"{what}.levels", 0, a.shape[0])
        out = Strategy(a, levels, name=name)
    else:
        raise ValueError(f"{what}.kind {kind!r} is not one of 'tree', 'toeplitz', 'haar', "
                         "'intervals', 'kron', 'quadtree', "
                         "'integer_toeplitz', 'integer_matrix', 'matrix'")
    return out
