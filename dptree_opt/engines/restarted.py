"""Restarted strategies (:class:`~dptree_opt.strategies.restarted.RestartedStrategy`): the
BLUE, the causal BLUE and their exact errors from the block's own engines, no n x n matrix.

Setting: A = diag(B, .., B, B_tail) (copies of a block B over P steps, the last one possibly
truncated), every full copy with the same row noise variances (budgets per level; per-row
budgets that differ between copies are left to the generic engine). The copies involve
disjoint steps and independent noise, so the GLS splits into one problem per copy
(docs/math.md section 2): the BLUE of the histogram is the block's BLUE on each copy (one
call of the block's engine with the copies as trials), Cov = diag(Cov_B, .., Cov_tail).

A range [a, c) with a in copy j1 and c - 1 in copy j2 (a' = a - j1 P, c' = c - j2 P) is the
sum of independent pieces:

* j1 = j2: the block's range [a', c'), its variance from the block's engine;
* j1 < j2: the suffix [a', P) of copy j1, the totals T of the j2 - j1 - 1 copies between
  and the prefix [0, c') of copy j2:
  Var = Var(suffix) + (j2 - j1 - 1) Var(T) + Var(prefix) (the prefix t = j P + r:
  j Var(T) + Var(P_r), the DP-FTRL restart).

The causal BLUE (the estimate from the rows complete at the query's last step, e.g.
Honaker's estimates from below on trees) splits the same way: the copies before the last
one are complete, so their pieces take the block's offline BLUE, and the last piece the
block's causal estimate. Each distinct within-block piece is asked of the block's engine
once (per block kind: full or tail), every copy at once; a piece the block does not
identify gives inf (or the block's refusal).
"""

from __future__ import annotations

import weakref

import numpy as np
import numpy.typing as npt

from ..mechanism import Mechanism
from ..strategies.base import Strategy
from ..strategies.restarted import RestartedStrategy
from ..workloads import Workload, prefix, ranges
from .base import ANY_WORKLOAD, Capability, Engine
from .honaker import check_answers
from .registry import NotServed, run, select

__all__ = ["RestartedEngine", "block_mechanisms", "is_restarted_mechanism"]

_F = npt.NDArray[np.float64]
_I = npt.NDArray[np.int64]
_KINDS = ("prefix", "identity", "all_range", "ranges", "total")
# all_range on a restarted strategy lists its ranges: at most this many
_MAX_RANGES = 10**8

_BLOCKS: "weakref.WeakKeyDictionary[Mechanism, tuple[Mechanism | None, Mechanism | None]]" = (
    weakref.WeakKeyDictionary())


def is_restarted_mechanism(mechanism: object) -> bool:
    """Whether ``mechanism`` releases a RestartedStrategy (nothing appended) with the same
    noise variances on every full copy."""
    if not isinstance(mechanism, Mechanism):
        return False
    strat = mechanism.released
    if not isinstance(strat, RestartedStrategy):
        return False
    mb = strat.block.n_rows
    v = np.asarray(mechanism.variances)[:strat.full_copies * mb].reshape(-1, mb)
    return bool(np.all(v == v[:1]))


def _sub(mechanism: Mechanism, strat: Strategy, rows: slice | _I, shift: int) -> Mechanism:
    """The mechanism restricted to one copy: ``strat`` released with the rows ``rows`` of the
    parent's noise (an analysis device sharing the parent's budgets and guarantee)."""
    new = object.__new__(Mechanism)
    for name, value in vars(mechanism).items():
        if name != "_frozen":
            object.__setattr__(new, name, value)
    object.__setattr__(new, "_strategy", strat)
    object.__setattr__(new, "_released", strat)
    for name in ("_variances", "_scales", "_exact", "_row_budgets", "_row_sensitivities"):
        arr = vars(mechanism).get(name)
        if arr is not None:
            part = np.array(arr[rows])
            part.flags.writeable = False
            object.__setattr__(new, name, part)
    for name in ("_level_budgets", "_level_scale", "_level_variance", "_level_sensitivity"):
        levels = vars(mechanism).get(name)
        if isinstance(levels, dict):
            object.__setattr__(new, name, {k - shift: v for k, v in levels.items()
                                           if k - shift >= 0})
    object.__setattr__(new, "_frozen", True)
    return new


def block_mechanisms(mechanism: Mechanism) -> tuple[Mechanism | None, Mechanism | None]:
    """(the mechanism of one full copy, of the truncated last copy), None where there is no
    such copy. Cached per mechanism."""
    if mechanism in _BLOCKS:
        return _BLOCKS[mechanism]
    if not is_restarted_mechanism(mechanism):
        raise ValueError("the restarted paths need a mechanism releasing a restarted strategy "
                         "with the same noise on every copy")
    strat = mechanism.released
    assert isinstance(strat, RestartedStrategy)
    mb, sh = strat.block.n_rows, strat.level_shift
    full = _sub(mechanism, strat.block, slice(0, mb), sh) if strat.full_copies else None
    tail = None
    if strat.tail is not None:
        tail = _sub(mechanism, strat.tail, slice(strat.full_copies * mb, None), sh)
    out = _BLOCKS[mechanism] = (full, tail)
    return out


def _pieces(strat: RestartedStrategy, lo: _I, hi: _I) -> dict[str, _I]:
    """The decomposition of the ranges [lo, hi) (module docstring): copy indices j1, j2,
    local ends and whether the range lies in one copy."""
    p = strat.period
    j1, j2 = lo // p, (hi - 1) // p
    return {"j1": j1, "j2": j2, "a": lo - j1 * p, "c": hi - j2 * p, "one": j1 == j2,
            "between": np.maximum(j2 - j1 - 1, 0)}


def _block_variances(sub: Mechanism, lo: _I, hi: _I, estimator: str,
                     dense: bool) -> _F:
    """Per-query variances of the within-block ranges [lo, hi) on a copy's mechanism (each
    distinct range asked once)."""
    if not lo.size:
        return np.zeros(0)
    if not np.any(lo):   # prefixes only: the block's prefix workload (its fastest path)
        var = np.asarray(run("per_query", sub, prefix(sub.n_bins), estimator, dense=dense),
                         dtype=float)
        return var[hi - 1]
    pairs, inv = np.unique(np.stack([lo, hi - 1], axis=1), axis=0, return_inverse=True)
    var = np.asarray(run("per_query", sub, ranges(sub.n_bins, pairs), estimator, dense=dense),
                     dtype=float)
    return var[inv.ravel()]


def _times(count: _I, var: float) -> _F:
    """count x var with 0 x inf = 0 (no copy in between)."""
    return np.where(count > 0, count * var, 0.0)


def restarted_variances(mechanism: Mechanism, workload: Workload, estimator: str,
                        dense: bool = False) -> _F:
    """Per-query variances of the BLUE ("blue") or the causal BLUE ("causal") of the
    workload's ranges on a restarted mechanism (module docstring), workload order."""
    strat = mechanism.released
    assert isinstance(strat, RestartedStrategy)
    full, tail = block_mechanisms(mechanism)
    lo, hi = workload.intervals()
    pc = _pieces(strat, lo, hi)
    last_is_tail = (strat.tail is not None) & (pc["j2"] == strat.copies - 1)
    var = np.zeros(lo.size)
    # the last piece (the whole range when it lies in one copy): causal or offline
    a_last = np.where(pc["one"], pc["a"], 0)
    for sub, sel in ((full, ~last_is_tail), (tail, last_is_tail)):
        if sub is not None and sel.any():
            var[sel] = _block_variances(sub, a_last[sel], pc["c"][sel], estimator, dense)
    span = ~pc["one"]
    if span.any():   # the suffix of copy j1 (a full copy) and the totals in between
        assert full is not None
        p = strat.period
        suffix = _block_variances(full, pc["a"][span], np.full(int(span.sum()), p),
                                  "blue", dense)
        total = float(_block_variances(full, np.zeros(1, dtype=np.int64),
                                       np.full(1, p, dtype=np.int64), "blue", dense)[0])
        var[span] += suffix + _times(pc["between"][span], total)
    return var


def _split_answers(strat: RestartedStrategy, y: _F) -> tuple[_F, _F]:
    """y (trials, rows) as (trials * full copies, block rows) and (trials, tail rows)."""
    mb = strat.block.n_rows
    body = y[:, :strat.full_copies * mb].reshape(-1, mb)
    return body, y[:, strat.full_copies * mb:]


def restarted_blue(mechanism: Mechanism, y: _F) -> _F:
    """The BLUE of the histogram (shape (n,) / (trials, n)): the block's BLUE on every
    copy, the copies as trials of one call."""
    strat = mechanism.released
    assert isinstance(strat, RestartedStrategy)
    full, tail = block_mechanisms(mechanism)
    y = check_answers(mechanism, y)
    flat = y.reshape(-1, y.shape[-1])
    body, rest = _split_answers(strat, flat)
    parts = []
    if full is not None:
        est = np.asarray(run("estimate", full, None, "blue", y=body), dtype=float)
        parts.append(est.reshape(flat.shape[0], -1))
    if tail is not None:
        parts.append(np.asarray(run("estimate", tail, None, "blue", y=rest), dtype=float))
    return np.concatenate(parts, axis=1).reshape(y.shape[:-1] + (strat.n_bins,))


def _piece_answers(sub: Mechanism, y: _F, lo: _I, hi: _I, estimator: str) -> _F:
    """(trials, len(lo)) estimates of the within-block ranges [lo, hi) from a copy's answers
    y (trials, block rows): the block's BLUE histogram summed, or its causal estimates."""
    if not lo.size:
        return np.zeros((y.shape[0], 0))
    pairs, inv = np.unique(np.stack([lo, hi - 1], axis=1), axis=0, return_inverse=True)
    if estimator == "causal":
        got = np.asarray(run("estimate", sub, ranges(sub.n_bins, pairs), "causal", y=y),
                         dtype=float).reshape(y.shape[0], -1)
    else:
        x = np.asarray(run("estimate", sub, None, "blue", y=y), dtype=float)
        x = x.reshape(y.shape[0], -1)
        s = np.concatenate([np.zeros((y.shape[0], 1)), np.cumsum(x, axis=1)], axis=1)
        got = s[:, pairs[:, 1] + 1] - s[:, pairs[:, 0]]
    return got[:, inv.ravel()]


def restarted_causal_answers(mechanism: Mechanism, y: _F, workload: Workload) -> _F:
    """The causal BLUE of the workload's ranges (shape (q,) / (trials, q)): per range the
    complete copies' offline BLUE pieces plus the last copy's causal piece."""
    strat = mechanism.released
    assert isinstance(strat, RestartedStrategy)
    full, tail = block_mechanisms(mechanism)
    y = check_answers(mechanism, y)
    flat = y.reshape(-1, y.shape[-1])
    trials = flat.shape[0]
    body, rest = _split_answers(strat, flat)
    lo, hi = workload.intervals()
    pc = _pieces(strat, lo, hi)
    out = np.zeros((trials, lo.size))
    last_is_tail = (strat.tail is not None) & (pc["j2"] == strat.copies - 1)
    a_last = np.where(pc["one"], pc["a"], 0)
    if tail is not None and last_is_tail.any():
        out[:, last_is_tail] = _piece_answers(tail, rest, a_last[last_is_tail],
                                              pc["c"][last_is_tail], "causal")
    if full is None:
        return out.reshape(y.shape[:-1] + (lo.size,))
    p = strat.period
    # every copy's pieces at once (the copies as trials), then each query picks its copy
    sel = ~last_is_tail
    causal = _piece_answers(full, body, a_last[sel], pc["c"][sel], "causal")
    causal = causal.reshape(trials, strat.full_copies, -1)
    out[:, sel] = causal[:, pc["j2"][sel], np.arange(int(sel.sum()))]
    span = np.flatnonzero(~pc["one"])
    if span.size:
        suffix = _piece_answers(full, body, pc["a"][span], np.full(span.size, p), "blue")
        suffix = suffix.reshape(trials, strat.full_copies, -1)
        out[:, span] += suffix[:, pc["j1"][span], np.arange(span.size)]
        tot = _piece_answers(full, body, np.zeros(1, dtype=np.int64),
                             np.full(1, p, dtype=np.int64), "blue").reshape(trials, -1)
        cum = np.concatenate([np.zeros((trials, 1)), np.cumsum(tot, axis=1)], axis=1)
        out[:, span] += cum[:, pc["j2"][span]] - cum[:, pc["j1"][span] + 1]
    return out.reshape(y.shape[:-1] + (lo.size,))


class RestartedEngine(Engine):
    """A block strategy restarted every period steps, the same noise on every copy: the
    block's engines per copy (module docstring)."""

    name = "restarted"
    structure = "a block restarted every period steps (the same noise on every copy)"
    capabilities = (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "the block's BLUE, copies as trials"),
        Capability("error", "blue", _KINDS, "the block's range variances, each piece once"),
        Capability("per_query", "blue", _KINDS, "the block's range variances, each piece once"),
        Capability("covariance", "blue", (ANY_WORKLOAD,), "the block's, per copy"),
        Capability("estimate", "causal", _KINDS, "the block's BLUE and causal pieces"),
        Capability("error", "causal", _KINDS, "the block's range variances, each piece once"),
        Capability("per_query", "causal", _KINDS,
                   "the block's range variances, each piece once"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return is_restarted_mechanism(mechanism)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        if workload is not None and workload.n_queries > _MAX_RANGES:
            return f"{workload.n_queries} ranges: at most {_MAX_RANGES} are listed"
        if task == "estimate" and estimator == "blue":
            needs = [("estimate", "blue", False)]
        elif task == "covariance":
            needs = [("covariance", "blue", False)]
        elif task == "estimate":
            needs = [("estimate", "causal", True), ("estimate", "blue", False)]
        else:
            needs = [("per_query", estimator, True), ("per_query", "blue", True)]
        for sub in block_mechanisms(mechanism):
            if sub is None:
                continue
            for need_task, need_est, with_workload in needs:
                probes = ([ranges(sub.n_bins, [(0, sub.n_bins - 1)]), prefix(sub.n_bins)]
                          if with_workload else [None])
                for wl in probes:
                    try:
                        select(need_task, sub, wl, need_est)
                    except NotServed as exc:
                        return f"the block: {exc}"
        return None

    def estimate(self, mechanism: Mechanism, y: _F, workload: Workload | None,
                 estimator: str) -> _F:
        if estimator == "blue":
            return restarted_blue(mechanism, y)
        if workload is None:
            raise ValueError("workload: the causal estimate answers a workload")
        return restarted_causal_answers(mechanism, y, workload)

    def covariance(self, mechanism: Mechanism, u: _F) -> _F:
        strat = mechanism.released
        assert isinstance(strat, RestartedStrategy)
        full, tail = block_mechanisms(mechanism)
        u = np.asarray(u, dtype=float)
        cols = u.reshape(u.shape[0], -1)
        m, p, body_n = cols.shape[1], strat.period, strat.full_copies * strat.period
        parts = []
        if full is not None:
            blocks = cols[:body_n].reshape(strat.full_copies, p, m).transpose(1, 0, 2)
            got = np.asarray(run("covariance", full, None, "blue",
                                 y=blocks.reshape(p, -1)), dtype=float)
            parts.append(got.reshape(p, strat.full_copies, m).transpose(1, 0, 2)
                         .reshape(body_n, m))
        if tail is not None:
            got = np.asarray(run("covariance", tail, None, "blue", y=cols[body_n:]),
                             dtype=float)
            parts.append(got.reshape(-1, m))
        return np.concatenate(parts).reshape(u.shape)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | _F:
        var = restarted_variances(mechanism, workload, estimator, dense)
        return var if per_query else float(var.sum())
