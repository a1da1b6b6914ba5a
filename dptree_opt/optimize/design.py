"""``Design``: a mechanism chosen for a workload, with its exact error and how it was found.

``optimize.best_mechanism`` returns one (the best, its ranked runners-up in
``alternatives`` and the families it did not try in ``skipped``); any optimiser may return
one (subclasses allowed). Frozen: a Design is a record of a result, never updated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..mechanism import Mechanism

__all__ = ["Design"]


def _number(x: float) -> str:
    """4 significant digits, exponent form from 10^6 (the tables of ``compare``)."""
    return f"{x:.4g}" if abs(x) < 1e6 else f"{x:.3e}"


@dataclass(frozen=True, eq=False)
class Design:
    """A mechanism for a workload and its exact expected error.

    Attributes
    ----------
    family : the family of mechanisms it comes from (e.g. "node_budgets").
    method : how it was found (the optimiser and its own report).
    error : exact expected squared error of the estimator's answers, TOTAL over the
        workload's ``n_queries`` queries, in counts^2 (``dptree_opt.expected_error`` of
        ``mechanism()``).
    n_queries : the workload's number of queries (``mean = error / n_queries``).
    noise, budget, neighbours : "laplace" (budget = eps, eps-DP) or "gaussian" (budget = rho,
        rho-zCDP); the neighbour model ("add_remove": N private; "swap": N public).
    estimator : the estimator ``error`` is for ("blue": the GLS BLUE).
    lower_bound : a certified lower bound (counts^2, total) on the error of every mechanism
        of the matrix mechanism's kind for this workload and setting, or None;
        ``bound_method`` says which bound it is.
    alternatives : ranked runners-up, best first, each a Design with its error.
    skipped : ``(family, reason)`` for each family not tried or that could not be scored.
    seconds : wall time of the search that produced it (for ``best_mechanism``'s result, the
        whole search; for an alternative, its family's); ``family_seconds``: its family's.
    releasable : whether ``dptree_opt.release(..., design=d)`` and
        ``stream.Counter(..., design=d)`` run it with OpenDP's discrete samplers (integer
        strategies as they are, real-valued ones as scaled integer strategies:
        ``data_release.secure_noise.secure_form``, ``docs/releasing_designs.md``);
        ``release_note`` says how, or why not.
    workload_name : a short description of the workload, for printing.
    mech : the ``Mechanism`` itself (``mechanism()`` returns it).
    """

    family: str
    method: str
    error: float
    n_queries: int
    noise: str
    budget: float
    neighbours: str
    mech: Mechanism = field(repr=False)
    estimator: str = "blue"
    lower_bound: float | None = None
    bound_method: str = ""
    alternatives: tuple = field(default=(), repr=False)
    skipped: tuple = field(default=(), repr=False)
    seconds: float = 0.0
    family_seconds: float = 0.0
    releasable: bool = False
    release_note: str = ""
    workload_name: str = ""

    def mechanism(self) -> Mechanism:
        """The ``Mechanism`` (strategy, budgets, noise, neighbour model) of this design."""
        return self.mech

    @property
    def mean(self) -> float:
        """Mean expected squared error per query, ``error / n_queries`` (counts^2)."""
        return self.error / self.n_queries

    @property
    def gap(self) -> float | None:
        """``error / lower_bound - 1`` where a lower bound is certified, else None (0 when
        the two agree to rounding)."""
        if self.lower_bound is None or not self.lower_bound > 0:
            return None
        return max(self.error / self.lower_bound - 1.0, 0.0)

    @property
    def budget_name(self) -> str:
        """"epsilon" (Laplace) or "rho" (Gaussian)."""
        return "epsilon" if self.noise == "laplace" else "rho"

    def setting(self) -> str:
        """One line: workload, noise and budget, neighbour model, estimator."""
        what = f"{self.workload_name}, " if self.workload_name else ""
        part = self.mech.participation
        who = "" if part.is_single else f", {part.describe()}"
        return (f"{what}{self.noise} noise ({self.budget_name} = {self.budget:g}), "
                f"{self.neighbours} neighbours{who}, {self.estimator.upper()} estimator")

    def summary(self) -> str:
        """A readable report: the design, its error and certificate, how it can be released,
        the ranked alternatives and the skipped families with their reasons."""
        lines = [f"best mechanism: {self.family} ({self.setting()})",
                 (f"  mean error per query {_number(self.mean)} counts^2 (total "
                  f"{_number(self.error)} over {self.n_queries} queries)")]
        if self.lower_bound is not None:
            gap = "" if self.gap is None else f"; gap {self.gap:.3g}"
            lines.append(f"  lower bound {_number(self.lower_bound / self.n_queries)} per query "
                         f"({self.bound_method}){gap}")
        lines.append(f"  releasable: {'yes' if self.releasable else 'no'}"
                     + (f" ({self.release_note})" if self.release_note else ""))
        lines.append(f"  method: {self.method}")
        lines.append(f"  searched in {self.seconds:.3g} s")
        ranked = (self,) + tuple(self.alternatives)
        if len(ranked) > 1:
            lines.append("")
            lines.append("rank  family                  mean/query   vs best  releasable  seconds")
            for i, d in enumerate(ranked, start=1):
                ratio = d.error / self.error if self.error > 0 else math.nan
                lines.append(f"{i:>4}  {d.family:<22}  {_number(d.mean):>10}  {ratio:>8.4g}  "
                             f"{'yes' if d.releasable else 'no':>10}  {d.family_seconds:>7.2f}")
        if self.skipped:
            lines.append("")
            lines.append("skipped:")
            lines.extend(f"  {name}: {reason}" for name, reason in self.skipped)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def as_dict(self) -> dict:
        """A JSON-ready dict (no mechanism): the numbers, the method, the alternatives (as
        dicts, without their own alternatives) and the skipped families."""
        out = {"family": self.family, "method": self.method, "error": self.error,
               "mean_error_per_query": self.mean, "n_queries": self.n_queries,
               "noise": self.noise, self.budget_name: self.budget,
               "neighbours": self.neighbours, "estimator": self.estimator,
               "lower_bound": self.lower_bound, "bound_method": self.bound_method or None,
               "gap": self.gap, "releasable": self.releasable,
               "release_note": self.release_note, "seconds": self.seconds,
               "family_seconds": self.family_seconds,
               "workload": self.workload_name,
               "participation": self.mech.participation.describe()}
        if self.alternatives:
            out["alternatives"] = [a.as_dict() for a in self.alternatives]
        if self.skipped:
            out["skipped"] = [{"family": f, "reason": r} for f, r in self.skipped]
        return out
