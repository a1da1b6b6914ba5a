"""The row protocol shared by the 1-D and the grid comparisons.

A comparison has a *setting* (the domain: K bins or a grid shape; one total budget, a noise,
a neighbour model, whether N is public, the workloads compared) and *rows*. A row is a
:class:`RowSpec` registered in a :class:`RowRegistry`: a key, a label, what it emulates or
its definition, and ``build(setting, cache) -> Candidate``. A :class:`Candidate` is a
mechanism with its estimator (or, for the few rows whose error is not a mechanism's, an
``exact`` function giving their errors), plus ``per_workload`` answers: another candidate
(e.g. the design the front door found for that workload) or the reason the row has no
answer there. A builder raises :class:`NotAvailable` when the row does not apply at all.

Errors are computed in one place, :func:`row_errors`, through the engine registry
(``dptree_opt.engines``): a row's error on a workload can be computed exactly when an engine
serves it (``engines.select`` succeeds), and nothing here tests a strategy's structure.

* 1-D: the mean and max from the registry's per-query variances ("per_query" task: both
  from one list, which the mean over the first K queries of a padded mechanism needs
  anyway), else the mean alone from its total ("error" task). Grids: the mean from the
  total over the number of queries ("error"), the maximum from the registry's "max" task
  (a structured maximum: Kronecker trees and quadtrees, single-scale Kronecker products;
  else the largest of an engine's listed per-query variances), else n/a with the reasons.
* 1-D mechanisms may be padded (K' > K bins; the extra bins are empty): the errors are over
  the first K prefixes, bins and ranges. The ranges within the first K bins are the
  registry's "ranges" workload (per query, K <= MAX_ALL_RANGE_MAX_BINS), or, above, their
  total sum_{0 <= a < b <= K} Var(c_b - c_a) = sum_{a < b} (Z_aa + Z_bb - 2 Z_ab) =
  (K + 1) tr Z - 1'Z1 (c_0 = 0; each point is in K pairs), with Z the covariance of the
  estimated cumulative counts c_1..c_K: tr Z from the
  registry's per-prefix variances and 1'Z1 = q' Cov q (q_i = K - i on the real bins) from
  its "covariance" task (the BLUE); the covering and refined estimators have their own
  closed forms (``engines.covering.covering_moments``, ``engines.refined.
  padded_refined_all_range_total``).
* Every error is computed on ``Mechanism.normalised()`` (variances near 1) and rescaled
  exactly, so any budget whose errors are doubles works.

The *front door* (``optimize.best_mechanism``) is asked once per workload column
(:func:`front_door`): the rows of the optimised families take that family's design for the
column, and the "best" rows take the column's winner.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypedDict, Union

import numpy as np
import numpy.typing as npt

from .. import engines, optimize, workloads
from ..engines.covering import covering_moments
from ..engines.honaker import tree_parameters
from ..engines.refined import padded_refined_all_range_total
from ..limits import rescaled
from ..mechanism import Mechanism
from ..privacy import resolve_public
from ..strategies import Strategy
from ..workloads import Workload

if TYPE_CHECKING:
    from ..optimize.design import Design

__all__ = ["best_row", "WORKLOADS", "format_number", "BudgetSetting", "WorkloadError", "Candidate",
           "NotAvailable", "RowSpec", "RowRegistry", "CompareRow", "row_errors",
           "run_rows", "sort_key", "row_dict", "front_door", "family_candidate",
           "design_candidate", "register_front_door_rows", "short_name", "ALL_FAMILIES", "MAX_ALL_RANGE_MAX_BINS"]

WORKLOADS = ("cdf", "identity", "all_range")
# per-query all-range variances in 1-D (K (K + 1) / 2 of them)
MAX_ALL_RANGE_MAX_BINS = 4096
# the name of each workload in dptree_opt.workloads
WORKLOAD_KINDS = {"cdf": "prefix", "identity": "identity", "all_range": "all_range"}


def format_number(x: float | None) -> str:
    """A table cell: "n/a" for None, 4 significant digits, exponent form from 10^6."""
    if x is None:
        return "n/a"
    return f"{x:.4g}" if abs(x) < 1e6 else f"{x:.3e}"


class BudgetKwargs(TypedDict, total=False):
    """The budget keyword of a Mechanism: ``epsilon`` (Laplace) or ``rho`` (Gaussian)."""

    epsilon: float
    rho: float


class BudgetSetting:
    """Shared by the 1-D and grid settings (fields ``budget``, ``noise``, ``neighbours``,
    ``public_total``; property ``domain``: K or the grid shape): the budget keyword, whether
    N is public, a Mechanism and the workloads over the domain."""

    # declared here, defined by the subclasses (frozen dataclasses)
    budget: float
    noise: str
    neighbours: str
    public_total: bool | None
    workloads: tuple[str, ...]
    time_limit: float

    @property
    def domain(self) -> int | tuple[int, ...]:
        """K bins, or the grid shape."""
        raise NotImplementedError

    @property
    def budget_kwargs(self) -> BudgetKwargs:
        """{"epsilon": budget} (Laplace) or {"rho": budget} (Gaussian)."""
        return {"epsilon": self.budget} if self.noise == "laplace" else {"rho": self.budget}

    @property
    def public(self) -> bool:
        """Whether N is public (released exactly)."""
        return resolve_public(self.neighbours, self.public_total)

    def mechanism(self, strategy: Strategy,
                  level_budgets: npt.ArrayLike | None = None) -> Mechanism:
        """A Mechanism for ``strategy`` in this setting."""
        return Mechanism(strategy, noise=self.noise, neighbours=self.neighbours,
                         public_total=self.public_total, level_budgets=level_budgets,
                         **self.budget_kwargs)

    def workload(self, name: str, domain: int | tuple[int, ...] | None = None) -> Workload:
        """The workload ``name`` ("cdf", "identity", "all_range") over ``domain`` (default
        the setting's: K bins, or the grid shape: a Kronecker workload)."""
        make: Callable[[int | tuple[int, ...]], Workload] = getattr(workloads,
                                                                   WORKLOAD_KINDS[name])
        return make(self.domain if domain is None else domain)


@dataclass(frozen=True)
class WorkloadError:
    """Exact mean and max per-query expected squared error (counts^2); None = not available
    (``note`` says why)."""

    mean: float | None
    max: float | None
    note: str = ""


class NotAvailable(Exception):
    """Raised by a row builder when the row does not apply; the message says why."""


@dataclass(frozen=True)
class Candidate:
    """What a row builder returns: a mechanism, its estimator and how to describe it.

    ``n_bins`` is the number of real bins K in 1-D (``mechanism.n_bins`` may be a padded
    K' >= K), the number of cells for a grid (``shape`` set). ``variance_factor``
    multiplies every error (e.g. discrete vs continuous Laplace). ``per_workload`` maps a
    workload to another candidate answering it (e.g. the design the front door found for
    it) or to the reason the row has no answer there. ``exact``: for a row whose errors
    are not a mechanism's (a closed form), ``exact(workload name) -> WorkloadError``.
    ``label``: the row's label when it depends on the result (e.g. the family found)."""

    mechanism: Mechanism | None
    estimator: str
    strategy: str
    n_bins: int
    note: str = ""
    variance_factor: float = 1.0
    per_workload: dict[str, Candidate | str] = field(default_factory=dict)
    shape: tuple[int, ...] | None = None
    exact: Callable[[str], WorkloadError] | None = None
    label: str | None = None


# the cache shared by the rows of one comparison: heterogeneous values by key ("families": the
# front-door families; ("front door", workload): a Design or NotAvailable; built strategies)
RowCache = dict[Union[str, tuple[str, str]], Any]
# a row builder: (the comparison's own setting subclass, cache) -> Candidate
RowBuilder = Callable[[Any, RowCache], Candidate]


@dataclass(frozen=True)
class RowSpec:
    """A registered row: ``build(setting, cache) -> Candidate`` (or :class:`NotAvailable`);
    ``cache`` is a dict shared by the rows of one comparison (front-door designs, ...)."""

    key: str
    label: str
    emulates: str
    build: RowBuilder
    families: tuple[str, ...] = ()


ALL_FAMILIES = ("*",)


class RowRegistry(dict[str, RowSpec]):
    """Rows by key, in registration order (the order they are computed)."""

    def register(self, key: str, label: str, emulates: str,
                 families: tuple[str, ...] = ()) -> Callable[[RowBuilder], RowBuilder]:
        """Decorator: register ``build(setting, cache) -> Candidate`` as the row ``key``;
        ``families``: the front-door families it reads (ALL_FAMILIES: every one)."""
        def deco(build: RowBuilder) -> RowBuilder:
            self[key] = RowSpec(key, label, emulates, build, tuple(families))
            return build
        return deco

    def families(self, keys: Iterable[str], allowed: tuple[str, ...]) -> tuple[str, ...]:
        """The front-door families the rows ``keys`` read, among ``allowed`` (in its order),
        with "histogram" (O(K), so that the front door always has a design)."""
        wanted = {f for key in keys for f in self[key].families}
        if not wanted:
            return ()
        return tuple(f for f in allowed if "*" in wanted or f in wanted or f == "histogram")

    def check_keys(self, rows: Iterable[str] | None) -> list[str]:
        """The keys to compute (all when ``rows`` is None); ValueError naming an unknown one."""
        keys = list(self) if rows is None else list(rows)
        for key in keys:
            if key not in self:
                raise ValueError(f"unknown row {key!r}; choose from {', '.join(self)}")
        return keys


@dataclass(frozen=True)
class CompareRow:
    """One mechanism + estimator and its errors per workload."""

    key: str
    label: str
    emulates: str
    strategy: str
    estimator: str
    errors: dict[str, WorkloadError]
    note: str = ""
    available: bool = True
    seconds: float = 0.0
    ratio_to_bound: dict[str, float | None] = field(default_factory=dict)


# ------------------------------------------------------------------ exact errors
def _served(task: str, mech: Mechanism, workload: Workload | None, est: str) -> str | None:
    """None when an engine serves the request, else the registry's reason."""
    try:
        engines.select(task, mech, workload, est)
    except ValueError as exc:
        return str(exc)
    return None


def row_errors(cand: Candidate,
               which: Iterable[str] = WORKLOADS) -> dict[str, WorkloadError]:
    """{workload: WorkloadError} for a candidate, exact (module docstring); a workload in
    ``cand.per_workload`` is answered by that candidate (or is n/a with its reason)."""
    out: dict[str, WorkloadError] = {}
    for wl in which:
        alt = cand.per_workload.get(wl, cand)
        if isinstance(alt, str):
            out[wl] = WorkloadError(None, None, alt)
        elif alt.exact is not None:
            out[wl] = alt.exact(wl)
        else:
            out[wl] = _candidate_error(alt, wl)
    return out


def _candidate_error(cand: Candidate, wl: str) -> WorkloadError:
    """The error of one candidate's mechanism on ``wl``, computed on the normalised
    mechanism and rescaled exactly (ValueError when an error is not a double)."""
    orig = cand.mechanism
    if orig is None:
        raise ValueError("the candidate has no mechanism and no exact errors")
    mech, c = orig.normalised()
    try:
        if cand.shape is None:
            mean, mx, note = _one_d_error(mech, cand.estimator, cand.n_bins, wl)
        else:
            mean, mx, note = _grid_error(mech, cand.estimator, cand.shape, wl)
    except NotAvailable as exc:
        return WorkloadError(None, None, str(exc))

    def scale(x: float | None) -> float | None:
        if x is None:
            return None
        x = cand.variance_factor * x
        return x if c == 1.0 else rescaled(x, c, orig.noise, orig.requested_budget)
    return WorkloadError(scale(mean), scale(mx), note)


def _not_served(reason: str) -> NotAvailable:
    return NotAvailable("n/a (" + reason.split(" (")[0].removeprefix("no engine computes ")
                        + ")")


def _one_d_error(mech: Mechanism, est: str, K: int,
                 wl: str) -> tuple[float, float | None, str]:
    """(mean, max or None, note) over the first K bins' queries of a 1-D mechanism."""
    kp = mech.n_bins
    if wl in ("cdf", "identity"):
        w = workloads.prefix(kp) if wl == "cdf" else workloads.identity(kp)
        why = _served("per_query", mech, w, est)
        if why is None:
            per = engines.run("per_query", mech, w, est)[:K]
            return float(per.mean()), float(per.max()), ""
        if kp == K and _served("error", mech, w, est) is None:
            return (float(engines.run("error", mech, w, est)) / K, None,
                    "max n/a (no per-query variances)")
        raise _not_served(why)
    n_ranges = K * (K + 1) / 2
    if K <= MAX_ALL_RANGE_MAX_BINS:
        lo, hi = workloads.all_range(K).intervals()
        for w in ((workloads.all_range(K),) if kp == K else ()) + (
                workloads.ranges(kp, np.stack([lo, hi - 1], axis=1)),):
            if _served("per_query", mech, w, est) is None:
                per = engines.run("per_query", mech, w, est)
                return float(per.sum()) / n_ranges, float(per.max()), ""
    note = ("max n/a (needs all K (K + 1) / 2 variances)" if K > MAX_ALL_RANGE_MAX_BINS else
            "max n/a (no per-query variances)")
    w = workloads.all_range(K)
    if kp == K:
        why = _served("error", mech, w, est)
        if why is not None:
            raise _not_served(why)
        return float(engines.run("error", mech, w, est)) / n_ranges, None, note
    return _first_bins_all_range_total(mech, est, K) / n_ranges, None, note


def _first_bins_all_range_total(mech: Mechanism, est: str, K: int) -> float:
    """Sum of the variances of the ranges within the first K bins of a padded mechanism:
    (K + 1) tr Z - 1'Z1 (module docstring)."""
    kp = mech.n_bins
    if est == "covering":
        return float(covering_moments(mech, K)["all_range_total"])
    if est == "refined":
        return float(padded_refined_all_range_total(*tree_parameters(mech), K))
    w = workloads.prefix(kp)
    for task, wk in (("per_query", w), ("covariance", None)):
        why = _served(task, mech, wk, est)
        if why is not None:
            raise _not_served(why)
    tr = float(engines.run("per_query", mech, w, est)[:K].sum())
    q = np.zeros(kp)
    q[:K] = K - np.arange(K, dtype=float)
    return (K + 1) * tr - float(q @ engines.run("covariance", mech, None, est, y=q))


def _grid_error(mech: Mechanism, est: str, shape: tuple[int, ...],
                wl: str) -> tuple[float, float | None, str]:
    """(mean, max or None, note) of a grid mechanism on the Kronecker workload ``wl``."""
    w: Workload = getattr(workloads, WORKLOAD_KINDS[wl])(shape)
    why = _served("error", mech, w, est)
    if why is not None:
        raise _not_served(why)
    total = float(engines.run("error", mech, w, est))
    mx: float | None
    try:
        mx, note = float(engines.run("max", mech, w, est).variance), ""
    except engines.NotServed as exc:
        mx, note = None, "max n/a (" + ("; ".join(f"{name}: {why}" for name, why in exc.reasons)
                                        or "no engine lists these per-query errors") + ")"
    return total / w.n_queries, mx, note


# ------------------------------------------------------------------ the front door
def front_door(setting: BudgetSetting, wl: str, cache: RowCache, families: tuple[str, ...],
               time_limit: float) -> Design:
    """``optimize.best_mechanism`` for the workload ``wl`` of ``setting``, once per
    comparison (``cache``), over ``families`` (the same for every row of a comparison:
    those its rows read); NotAvailable when the setting is not one the front door takes (a
    public N under add/remove neighbours)."""
    key = ("front door", wl)
    if key not in cache:
        if setting.public and setting.neighbours == "add_remove":
            cache[key] = NotAvailable(
                "n/a (public N under add/remove: optimize.best_mechanism takes add_remove "
                "with N private, or swap)")
        else:
            try:
                cache[key] = optimize.best_mechanism(
                    setting.workload(wl), **setting.budget_kwargs,
                    neighbours=setting.neighbours, time_limit=time_limit, families=families)
            except ValueError as exc:
                cache[key] = NotAvailable(f"n/a ({exc})")
    got = cache[key]
    if isinstance(got, NotAvailable):
        raise got
    return got


def short_name(name: str) -> str:
    """A strategy's name with runs of one factor written as powers: "tree(2,2,2,2)" ->
    "tree(2^4)"."""
    def runs(match: re.Match[str]) -> str:
        parts = match.group(0).split(",")
        out, i = [], 0
        while i < len(parts):
            j = i
            while j + 1 < len(parts) and parts[j + 1] == parts[i]:
                j += 1
            out.append(parts[i] if j == i else f"{parts[i]}^{j - i + 1}")
            i = j + 1
        return ",".join(out)
    return re.sub(r"\d+(?:,\d+)+", runs, name)


def design_candidate(design: Design, setting: BudgetSetting, extra: str = "") -> Candidate:
    """A Candidate for a front-door ``Design`` over the setting's domain."""
    shape = getattr(setting, "shape", None)
    mech = design.mechanism()
    return Candidate(mech, design.estimator, short_name(mech.released.name), mech.n_bins,
                     note=design.method + extra, shape=shape)


def best_row(wl: str, column: str) -> RowBuilder:
    """A row builder: the front door's best mechanism for the workload ``wl`` (its column
    named ``column`` in the label), evaluated on every column (1-D and grid rows alike)."""
    def build(s: BudgetSetting, cache: RowCache) -> Candidate:
        if wl not in s.workloads:
            raise NotAvailable(f"{wl} is not among the workloads compared")
        d = front_door(s, wl, cache, cache["families"], s.time_limit)
        cand = design_candidate(d, s, f"; searched {d.seconds:.3g} s")
        return replace(cand, label=f"best for {column}: {d.family}")
    return build


def register_front_door_rows(
        registry: RowRegistry,
        family_rows: Iterable[tuple[str, str, str, tuple[str, ...]]],
        front_door_families: Callable[[Any], tuple[tuple[str, ...], dict[str, str]]],
        workloads: Iterable[str], columns: Mapping[str, str], domain: str) -> None:
    """Register in ``registry`` one row per optimised family (``family_rows``: (key, label,
    what, families) entries; each row is :func:`family_candidate` of those families, without
    the ones ``front_door_families(setting)[1]`` excludes for the setting) and one "best for
    <column>" row per workload (:func:`best_row`); ``domain`` ("" or "grid ") names the
    setting in the rows' descriptions. 1-D and grid comparisons register their front-door
    rows this way."""
    def families_row(wanted: tuple[str, ...]) -> RowBuilder:
        def build(s: BudgetSetting, cache: RowCache) -> Candidate:
            excluded = front_door_families(s)[1]
            return family_candidate(s, cache, cache["families"], s.time_limit, wanted, excluded)
        return build

    for key, label, what, fams in family_rows:
        registry.register(key, label, what, families=fams)(families_row(fams))
    for wl in workloads:
        registry.register(f"best_{wl}", f"best for {columns[wl]} (front door)",
                          f"optimize.best_mechanism on the {domain}{wl} workload: the best of "
                          "every family that applies (ranked by the exact BLUE error), on every "
                          "column", families=ALL_FAMILIES)(best_row(wl, columns[wl]))


def family_candidate(setting: BudgetSetting, cache: RowCache, families: tuple[str, ...],
                     time_limit: float, wanted: tuple[str, ...],
                     excluded: dict[str, str] | None = None) -> Candidate:
    """The row of one or more front-door families (``wanted``): per workload column, the
    best design among ``wanted`` that ``optimize.best_mechanism`` found for that column
    (asked for ``families``), or the reason there is none (``excluded``: family -> why the
    comparison did not ask for it). NotAvailable when no column has one."""
    excluded = excluded or {}
    per: dict[str, Candidate | str] = {}
    firsts: list[Candidate] = []
    for wl in setting.workloads:
        try:
            best = front_door(setting, wl, cache, families, time_limit)
        except NotAvailable as exc:
            per[wl] = str(exc)
            continue
        found = [d for d in (best,) + tuple(best.alternatives) if d.family in wanted]
        if found:
            d = min(found, key=lambda d: d.error)
            cand = design_candidate(d, setting)
            per[wl] = cand
            firsts.append(cand)
        else:
            why = [f"{name}: {reason}" for name, reason in best.skipped if name in wanted]
            why += [f"{name}: {reason}" for name, reason in excluded.items() if name in wanted]
            per[wl] = "n/a (" + ("; ".join(why) or "not tried") + ")"
    if not firsts:
        raise NotAvailable(next(iter(per.values())))
    first = firsts[0]
    same = len({c.strategy for c in firsts}) == 1
    note = (first.note if len({c.note for c in firsts}) == 1 else "; ".join(
        f"{wl}: {c.strategy} ({c.note})" for wl, c in per.items() if isinstance(c, Candidate)))
    return replace(first, strategy=first.strategy if same else "per workload", note=note,
                   per_workload=per)


# ------------------------------------------------------------------ running the rows
def _ratio(errs: dict[str, WorkloadError],
           bounds: Mapping[str, float | None]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for wl, e in errs.items():
        b = bounds.get(wl)
        out[wl] = e.mean / b if b and e.mean is not None else None
    return out


def run_rows(registry: RowRegistry, keys: Iterable[str], setting: BudgetSetting,
             bounds: Mapping[str, float | None], cache: RowCache,
             seconds: dict[str, float] | None = None) -> list[CompareRow]:
    """Build every row of ``keys`` and compute its errors on ``setting.workloads``, with
    its ratio to the lower bounds; a row that does not apply is listed unavailable with
    the reason. ``seconds`` (optional) receives each row's time."""
    which = setting.workloads
    out = []
    for key in keys:
        spec = registry[key]
        t0 = time.perf_counter()
        try:
            cand = spec.build(setting, cache)
            errs = row_errors(cand, which)
            if all(e.mean is None for e in errs.values()):
                raise NotAvailable(next((e.note for e in errs.values() if e.note), "n/a"))
            out.append(CompareRow(key, cand.label or spec.label, spec.emulates, cand.strategy,
                                  cand.estimator, errs, cand.note, True,
                                  time.perf_counter() - t0, _ratio(errs, bounds)))
        except NotAvailable as exc:
            out.append(CompareRow(key, spec.label, spec.emulates, "-", "-",
                                  {wl: WorkloadError(None, None) for wl in which}, str(exc),
                                  False, time.perf_counter() - t0))
        if seconds is not None:
            seconds[key] = time.perf_counter() - t0
    return out


def sort_key(row: CompareRow, which: Iterable[str]) -> tuple[bool | float, ...]:
    """Available rows first; rows with an exact error before rows with the noise variance
    only (estimator "spread"); then by the mean error of the first requested workload, then
    the next ones (a workload a row does not answer counts as inf)."""
    means = [row.errors.get(wl) for wl in which]
    return ((not row.available, row.estimator == "spread")
            + tuple(e.mean if e is not None and e.mean is not None else math.inf
                    for e in means))


def row_dict(r: CompareRow) -> dict[str, Any]:
    """A JSON-ready dict of a row."""
    return {"key": r.key, "label": r.label, "emulates": r.emulates, "strategy": r.strategy,
            "estimator": r.estimator, "available": r.available, "note": r.note,
            "seconds": r.seconds,
            "errors": {wl: {"mean": e.mean, "max": e.max, "note": e.note}
                       for wl, e in r.errors.items()},
            "ratio_to_bound": r.ratio_to_bound}
