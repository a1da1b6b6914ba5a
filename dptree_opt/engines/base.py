"""The protocol every engine implements: one structure, its BLUE, its exact errors.

An engine serves one strategy structure (level-uniform trees, interval strategies, Toeplitz,
...). It says which mechanisms it serves (:meth:`Engine.claims`: the structure test, the only
place it is written), declares what it can do (``capabilities``: a tuple of
:class:`Capability`, one per (task, estimator) with the workload kinds and the cost) and
refuses, with a reason, a request it declares but cannot serve for this instance
(:meth:`Engine.refusal`: a size limit, a rank-deficient strategy, a grid shape that does not
match). The registry (:mod:`dptree_opt.engines.registry`) asks the engines in order of
specificity and the generic dense GLS last; the capability table is printed from the
declarations (``dptree-opt engines``).

Tasks (``TASKS``):

* ``"estimate"``: the estimator applied to noisy answers y (shape (rows,) or (trials, rows)).
  For "blue", "covering" and "refined" the histogram estimate (shape (n,) / (trials, n)); for
  "causal" the workload's answers (shape (q,) / (trials, q)).
* ``"error"``: the exact expected squared error summed over the workload's queries (float).
* ``"per_query"``: the exact per-query variances (shape (q,)).
* ``"covariance"``: Cov @ U, the BLUE's covariance applied to U of shape (n,) or (n, m),
  without forming Cov where the structure allows.
* ``"max"``: the largest per-query variance of the workload and a query attaining it
  (:class:`QueryMax`). An engine with a structured maximum (one that does not list the
  queries: Kronecker trees, quadtrees, single-scale Kronecker products) declares it and
  overrides :meth:`Engine.maximum`; every other engine that lists per-query variances gets
  a *listed* maximum for the same estimator and workloads, derived from its "per_query"
  declaration when its class is defined (:meth:`Engine.__init_subclass__`): the maximum of
  those variances, for workloads of at most MAX_LISTED_QUERIES queries.

Every estimator is linear and unbiased, so the errors are variances (counts^2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ..mechanism import Mechanism
    from ..workloads import Workload

__all__ = ["TASKS", "ESTIMATORS", "ANY_WORKLOAD", "MAX_LISTED_QUERIES", "Capability", "Engine",
           "QueryMax", "TooManyQueries"]

TASKS = ("estimate", "error", "per_query", "covariance", "max")
ESTIMATORS = ("blue", "covering", "refined", "causal")
# a capability that serves every workload (of the right dimension) lists this kind
ANY_WORKLOAD = "any"
# a listed maximum (the largest of the "per_query" variances) lists at most this many queries
MAX_LISTED_QUERIES = 1 << 21


class TooManyQueries(ValueError):
    """An exact per-query maximum (or per-query output) would enumerate too many queries."""


@dataclass(frozen=True)
class QueryMax:
    """The "max" task's answer: the largest per-query ``variance`` (counts^2; inf when a query
    is not identified and the engine reports it so) and ``query``, the index of a query
    attaining it in the workload's query order (None when not computed)."""

    variance: float
    query: int | None = None


@dataclass(frozen=True)
class Capability:
    """One declared capability: ``task`` with ``estimator`` on the workload ``kinds`` (for
    the "estimate" task of a histogram estimator the workload is not used: kinds
    ``(ANY_WORKLOAD,)``), at ``cost`` (a short complexity, e.g. "O(n)"). ``listed``: a "max"
    derived from the engine's "per_query" capability (the largest of the listed variances),
    not declared by the engine."""

    task: str
    estimator: str
    kinds: tuple[str, ...]
    cost: str
    listed: bool = False

    def __post_init__(self) -> None:
        if self.task not in TASKS or self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown task {self.task!r} or estimator {self.estimator!r}")

    def covers(self, task: str, estimator: str, kind: str | None) -> bool:
        """Whether this capability is the one for (task, estimator, workload kind)."""
        return (task == self.task and estimator == self.estimator
                and (ANY_WORKLOAD in self.kinds or kind in self.kinds))


def listed_maxima(capabilities: tuple[Capability, ...]) -> tuple[Capability, ...]:
    """``capabilities`` with, after every "per_query" capability, a listed "max" on its
    workload kinds that no declared "max" of the same estimator covers."""
    out = []
    for cap in capabilities:
        out.append(cap)
        if cap.task != "per_query":
            continue
        declared = {k for c in capabilities if c.task == "max" and c.estimator == cap.estimator
                    for k in c.kinds}
        kinds = tuple(k for k in cap.kinds if k not in declared and ANY_WORKLOAD not in declared)
        if kinds:
            out.append(Capability("max", cap.estimator, kinds,
                                  f"max of the per-query errors ({cap.cost}), q <= "
                                  f"{MAX_LISTED_QUERIES}", listed=True))
    return tuple(out)


class Engine:
    """An engine: subclasses set ``name``, ``structure`` (one line for the table) and
    ``capabilities``, and implement :meth:`claims` plus the methods of the tasks they
    declare. ``refusal`` returns None to accept a declared request, or the reason it cannot
    be served for this instance (the registry then asks the next engine). A subclass's
    ``capabilities`` gain, when the class is defined, a listed "max" for each "per_query"
    one (:func:`listed_maxima`; module docstring)."""

    name = "abstract"
    structure = ""
    capabilities: tuple[Capability, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "capabilities" in cls.__dict__:
            cls.capabilities = listed_maxima(tuple(c for c in cls.capabilities if not c.listed))

    def claims(self, mechanism: Mechanism) -> bool:
        """Whether the mechanism's released strategy has this engine's structure."""
        raise NotImplementedError

    def capability(self, task: str, estimator: str, kind: str | None) -> Capability | None:
        """The declared capability for the request, or None."""
        for cap in self.capabilities:
            if cap.covers(task, estimator, kind):
                return cap
        return None

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        """None when this instance of a declared request can be served, else why not."""
        return None

    def why_not(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        """For a mechanism this engine claims: None when it serves the request for this
        instance, else why not (not declared for the workload, or :meth:`refusal`; for a
        listed "max", the refusal of its "per_query" task or more than MAX_LISTED_QUERIES
        queries). What the registry asks; engines implement :meth:`refusal`."""
        cap = self.capability(task, estimator, None if workload is None else workload.kind)
        if cap is None:
            return f"{task!r} of the {estimator} estimator is not declared for this workload"
        if cap.listed and workload is not None:
            if workload.n_queries > MAX_LISTED_QUERIES:
                return (f"the largest per-query error is taken over at most "
                        f"{MAX_LISTED_QUERIES} listed queries, got {workload.n_queries}")
            task = "per_query"
        return self.refusal(task, mechanism, workload, estimator)

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        """The "estimate" task (module docstring); y is checked by the front door."""
        raise NotImplementedError

    def covariance(self, mechanism: Mechanism,
                   u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The "covariance" task: Cov @ u for u of shape (n,) or (n, m)."""
        raise NotImplementedError

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        """The "error" / "per_query" tasks on a normalised mechanism (variances near 1);
        ``dense``: use the dense twin of a structured formula where there is one."""
        raise NotImplementedError

    def maximum(self, mechanism: Mechanism, workload: Workload, estimator: str,
                dense: bool = False) -> QueryMax:
        """The "max" task on a normalised mechanism: here the listed maximum, the largest of
        :meth:`error`'s per-query variances and its first index (O(q) beyond the per-query
        cost); an engine with a structured maximum overrides it for the kinds it declares."""
        per = np.asarray(self.error(mechanism, workload, estimator, per_query=True,
                                    dense=dense), dtype=float)
        if per.size == 0:
            raise ValueError("the workload has no queries: no largest per-query error")
        i = int(np.argmax(per))
        return QueryMax(float(per[i]), i)

    def __repr__(self) -> str:
        return f"<engine {self.name!r}: {self.structure}>"
