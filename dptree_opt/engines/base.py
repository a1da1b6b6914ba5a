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

Every estimator is linear and unbiased, so the errors are variances (counts^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TASKS", "ESTIMATORS", "ANY_WORKLOAD", "Capability", "Engine"]

TASKS = ("estimate", "error", "per_query", "covariance")
ESTIMATORS = ("blue", "covering", "refined", "causal")
# a capability that serves every workload (of the right dimension) lists this kind
ANY_WORKLOAD = "any"


@dataclass(frozen=True)
class Capability:
    """One declared capability: ``task`` with ``estimator`` on the workload ``kinds`` (for
    the "estimate" task of a histogram estimator the workload is not used: kinds
    ``(ANY_WORKLOAD,)``), at ``cost`` (a short complexity, e.g. "O(n)")."""

    task: str
    estimator: str
    kinds: tuple[str, ...]
    cost: str

    def __post_init__(self):
        if self.task not in TASKS or self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown task {self.task!r} or estimator {self.estimator!r}")

    def covers(self, task: str, estimator: str, kind: str | None) -> bool:
        """Whether this capability is the one for (task, estimator, workload kind)."""
        return (task == self.task and estimator == self.estimator
                and (ANY_WORKLOAD in self.kinds or kind in self.kinds))


class Engine:
    """An engine: subclasses set ``name``, ``structure`` (one line for the table) and
    ``capabilities``, and implement :meth:`claims` plus the methods of the tasks they
    declare. ``refusal`` returns None to accept a declared request, or the reason it cannot
    be served for this instance (the registry then asks the next engine)."""

    name = "abstract"
    structure = ""
    capabilities: tuple[Capability, ...] = ()

    def claims(self, mechanism) -> bool:
        """Whether the mechanism's released strategy has this engine's structure."""
        raise NotImplementedError

    def capability(self, task: str, estimator: str, kind: str | None) -> Capability | None:
        """The declared capability for the request, or None."""
        for cap in self.capabilities:
            if cap.covers(task, estimator, kind):
                return cap
        return None

    def refusal(self, task: str, mechanism, workload, estimator: str) -> str | None:
        """None when this instance of a declared request can be served, else why not."""
        return None

    def estimate(self, mechanism, y: np.ndarray, workload, estimator: str) -> np.ndarray:
        """The "estimate" task (module docstring); y is checked by the front door."""
        raise NotImplementedError

    def covariance(self, mechanism, u: np.ndarray) -> np.ndarray:
        """The "covariance" task: Cov @ u for u of shape (n,) or (n, m)."""
        raise NotImplementedError

    def error(self, mechanism, workload, estimator: str, per_query: bool, dense: bool = False):
        """The "error" / "per_query" tasks on a normalised mechanism (variances near 1);
        ``dense``: use the dense twin of a structured formula where there is one."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<engine {self.name!r}: {self.structure}>"
