"""The registry: which engine serves a (task, mechanism, workload, estimator).

Engines are registered once, in order of specificity (``dptree_opt.engines`` registers every
engine of the package, the generic dense GLS last). :func:`select` returns the first engine
that claims the mechanism's structure, declares the request and does not refuse it
(:meth:`Engine.why_not`: for "max", a structured maximum or the largest of the engine's
listed per-query variances, whichever the engine declares);
:func:`run` also moves on when an engine declines while computing (:class:`Declined`: e.g. a
subtree that does not identify its own histogram, which only the computation reveals).
:func:`capability_table` lists every declared (engine, task, estimator, workload kinds, cost):
the table ``dptree-opt engines`` prints, generated from the declarations, never hand-kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal, overload

import numpy as np
import numpy.typing as npt

from ..workloads import StackedWorkload, Workload
from .base import ESTIMATORS, TASKS, Engine, QueryMax

if TYPE_CHECKING:
    from ..mechanism import Mechanism

__all__ = ["Declined", "NotServed", "register", "registered", "engine_named", "claimed_by", "select", "run",
           "capability_table"]

_ENGINES: list[Engine] = []


class Declined(Exception):
    """Raised by an engine's task method when this instance turns out not to be its to
    serve; the registry asks the next engine (the message says why)."""


class NotServed(ValueError):
    """Raised by :func:`select` and :func:`run` when no engine serves a request; ``reasons``:
    (engine name, why) for each engine that claims the structure but refused or declined."""

    def __init__(self, message: str, reasons: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.reasons = tuple(reasons)


def register(engine: Engine) -> Engine:
    """Add ``engine`` after those registered so far (so: most specific first)."""
    if not isinstance(engine, Engine):
        raise ValueError(f"engine must be an Engine, got {type(engine).__name__}")
    if any(e.name == engine.name for e in _ENGINES):
        raise ValueError(f"an engine named {engine.name!r} is already registered")
    _ENGINES.append(engine)
    return engine


def registered() -> tuple[Engine, ...]:
    """Every registered engine, in the order the registry asks them."""
    return tuple(_ENGINES)


def engine_named(name: str) -> Engine:
    """The registered engine called ``name`` (ValueError listing the names otherwise)."""
    for e in _ENGINES:
        if e.name == name:
            return e
    raise ValueError(f"no engine named {name!r}; engines: {[e.name for e in _ENGINES]}")


def claimed_by(mechanism: Mechanism, names: Iterable[str]) -> Engine | None:
    """The first of the engines called ``names`` (in that order) that claims ``mechanism``
    (its structure), else None: how callers ask "is this a structure engine X serves"."""
    return next((e for e in map(engine_named, names) if e.claims(mechanism)), None)


def _kind(workload: Workload | None) -> str | None:
    return None if workload is None else workload.kind


def _candidates(task: str, mechanism: Mechanism, workload: Workload | None, estimator: str,
                generic_only: bool) -> Iterator[tuple[Engine, str | None]]:
    """(engine, None) for each engine that would serve, (engine, reason) for each that
    claims the structure and declares the request but refuses it."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    kind = _kind(workload)
    for e in _ENGINES:
        if generic_only and not getattr(e, "generic", False):
            continue
        if e.capability(task, estimator, kind) is None or not e.claims(mechanism):
            continue
        yield e, e.why_not(task, mechanism, workload, estimator)


_WHAT = {"estimate": "estimate", "error": "exact error", "per_query": "exact per-query errors",
         "covariance": "covariance", "max": "largest per-query error"}


def _nothing_serves(task: str, mechanism: Mechanism, workload: Workload | None, estimator: str,
                    reasons: Sequence[tuple[str, str]]) -> NotServed:
    what = _WHAT[task] + f" of the {estimator} estimator"
    if workload is not None:
        what += f" on the {workload.kind!r} workload"
    if reasons:
        why = "; ".join(f"{name}: {reason}" for name, reason in reasons)
    else:  # no engine claims the structure: say which structures have the capability
        served = [e.structure for e in _ENGINES
                  if e.capability(task, estimator, _kind(workload)) is not None]
        why = ("computed for: " + "; ".join(served)) if served else "computed for none"
    return NotServed(f"no engine computes the {what} for the strategy "
                     f"{mechanism.released.name!r} ({why})", reasons)


def select(task: str, mechanism: Mechanism, workload: Workload | None = None,
           estimator: str = "blue", *,
           generic_only: bool = False) -> Engine:
    """The engine that serves the request (most specific first; ``generic_only``: only the
    generic engines, the oracles of the structured ones). :class:`NotServed` (a ValueError)
    naming every engine that refused, and why, when none serves."""
    reasons: list[tuple[str, str]] = []
    for e, reason in _candidates(task, mechanism, workload, estimator, generic_only):
        if reason is None:
            return e
        reasons.append((e.name, reason))
    raise _nothing_serves(task, mechanism, workload, estimator, reasons)


@overload
def run(task: Literal["estimate", "covariance"], mechanism: Mechanism,
        workload: Workload | None = None, estimator: str = "blue", *,
        generic_only: bool = False, dense: bool = False,
        y: npt.ArrayLike | None = None) -> npt.NDArray[np.float64]: ...
@overload
def run(task: Literal["per_query"], mechanism: Mechanism, workload: Workload | None = None,
        estimator: str = "blue", *, generic_only: bool = False, dense: bool = False,
        y: npt.ArrayLike | None = None) -> npt.NDArray[np.float64]: ...
@overload
def run(task: Literal["error"], mechanism: Mechanism, workload: Workload | None = None,
        estimator: str = "blue", *, generic_only: bool = False, dense: bool = False,
        y: npt.ArrayLike | None = None) -> float: ...
@overload
def run(task: Literal["max"], mechanism: Mechanism, workload: Workload | None = None,
        estimator: str = "blue", *, generic_only: bool = False, dense: bool = False,
        y: npt.ArrayLike | None = None) -> QueryMax: ...
@overload
def run(task: str, mechanism: Mechanism, workload: Workload | None = None,
        estimator: str = "blue", *, generic_only: bool = False, dense: bool = False,
        y: npt.ArrayLike | None = None) -> npt.NDArray[np.float64] | float | QueryMax: ...
def run(task: str, mechanism: Mechanism, workload: Workload | None = None,
        estimator: str = "blue", *, generic_only: bool = False, dense: bool = False,
        y: npt.ArrayLike | None = None) -> npt.NDArray[np.float64] | float | QueryMax:
    """Run the request on the first engine that serves it and does not decline
    (:class:`Declined`). ``task`` "estimate" needs ``y=`` (and "covariance" the matrix U as
    ``y=``); "error" / "per_query" return
    the total / per-query variances (``dense``: the engines' dense twin of a structured
    formula where they have one, e.g. the covering estimator's covariance); "max" a
    :class:`~dptree_opt.engines.base.QueryMax`. A stacked workload's error is the sum (per
    query: the concatenation; max: the largest, its query counted from the first part's)
    over its parts."""
    if task in ("error", "per_query", "max") and isinstance(workload, StackedWorkload):
        # W stacked vertically: the error is the sum over the parts, each served by its engine
        parts: tuple[Workload, ...] = workload.parts
        if task == "max":
            return _stacked_max([run("max", mechanism, part, estimator,
                                     generic_only=generic_only, dense=dense) for part in parts],
                                [part.n_queries for part in parts])
        if task == "per_query":
            return np.concatenate([run("per_query", mechanism, part, estimator,
                                       generic_only=generic_only, dense=dense)
                                   for part in parts])
        return float(sum(run("error", mechanism, part, estimator, generic_only=generic_only,
                             dense=dense) for part in parts))
    reasons: list[tuple[str, str]] = []
    for e, reason in _candidates(task, mechanism, workload, estimator, generic_only):
        if reason is not None:
            reasons.append((e.name, reason))
            continue
        try:
            if task in ("estimate", "covariance"):
                if y is None:
                    raise ValueError(f"y: the {task!r} task needs an array")
                answers = np.asarray(y, dtype=float)
                return (e.estimate(mechanism, answers, workload, estimator) if task == "estimate"
                        else e.covariance(mechanism, answers))
            if workload is None:
                raise ValueError(f"workload: the {task!r} task needs a workload")
            if task == "max":
                return e.maximum(mechanism, workload, estimator, dense=dense)
            return e.error(mechanism, workload, estimator, per_query=task == "per_query",
                           dense=dense)
        except Declined as exc:
            reasons.append((e.name, str(exc)))
    raise _nothing_serves(task, mechanism, workload, estimator, reasons)


def _stacked_max(parts: list[QueryMax], sizes: list[int]) -> QueryMax:
    """The largest of the parts' maxima; its query index offset by the parts before it."""
    best = max(range(len(parts)), key=lambda i: parts[i].variance)
    q = parts[best].query
    return QueryMax(parts[best].variance, None if q is None else q + sum(sizes[:best]))


def capability_table() -> list[dict[str, str]]:
    """One row per declared capability, in registry order: engine, structure, task,
    estimator, workloads (the kinds, comma-separated) and cost."""
    rows: list[dict[str, str]] = []
    for e in _ENGINES:
        for cap in e.capabilities:
            rows.append({"engine": e.name, "structure": e.structure, "task": cap.task,
                         "estimator": cap.estimator, "workloads": ", ".join(cap.kinds),
                         "cost": cap.cost})
    return rows

