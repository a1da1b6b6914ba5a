"""Side-by-side exact errors of every mechanism the framework has (``dptree-opt compare``).

:func:`compare` builds one *row* per mechanism + estimator for a setting (K bins, total
budget, noise, neighbour model, public total) and computes the exact mean and max per-query
expected squared error (counts^2) on three workloads over the K real bins:

* ``cdf``: the K prefix counts C_1..C_K (the CDF, unnormalised);
* ``identity``: the K bin counts;
* ``all_range``: the K (K + 1) / 2 ranges [a, b], 0 <= a <= b < K.

Rows come from a registry (:data:`ROWS`, :func:`register_row`): each :class:`RowSpec` has a
key, a label, what it emulates or its definition, and ``build(setting) -> Candidate`` (a
Mechanism, an estimator, the number of real bins). A builder raises :class:`NotAvailable`
when the row does not apply (the row is then listed with the reason). Beyond trees: the
Haar wavelet (``strategies.haar``), the square-root factorisation
(``strategies.sqrt_factorization``), the optimised strategy (``optimize.optimized_strategy``);
every error is also given as a ratio to the SVD lower bound (``bounds.error_lower_bound``).

How each error is computed (all exact)
--------------------------------------
* Level-uniform trees: :func:`dptree_opt.expected_error` (structured O(K) paths for the
  BLUE, covering and refined estimators). A padded tree (K' > K bins) is scored on the
  first K prefixes / bins.
* Other interval strategies (hierarchies such as OpenDP's truncated tree, the histogram, the
  prefix sums) with the BLUE: :func:`~dptree_opt.engines.interval.interval_blue_errors`, the
  bridge decomposition in cumulative coordinates (:mod:`dptree_opt.engines.laminar`, O(K)),
  checked against the dense GLS in the tests.
* Toeplitz strategies (square-root factorisation) and Haar on 2^L bins: their structured
  paths through ``expected_error`` at any K.
* Any other strategy: the dense generic GLS through ``expected_error`` for K <= 8192.
* The covering estimator answers bins and ranges by differences of its prefixes
  (:func:`~dptree_opt.engines.covering.covering_moments`, O(K)).
* ``all_range`` totals use sum_{0 <= a < b <= K} Var(c_b - c_a) = (K + 1) tr Z - 1'Z1 with Z the
  covariance of the estimated cumulative counts c_1..c_K (one solve). The all-range *max*
  needs every one of the K (K + 1) / 2 variances and is given for K' <= 4096 only.
"""

from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from . import anchors, bounds, optimize, strategies, workloads
from .error import expected_error
from . import engines
from .engines.interval import interval_blue_errors
from .engines.refined import padded_refined_all_range_total
from .engines.tree_error import _padded_tree_all_range_total
from .optimize.search import _smooth_finest_trees
from .engines.honaker import tree_parameters
from .engines.covering import covering_moments
from .limits import COMPARE_BYTES_PER_BIN, MAX_COMPARE_BINS, check_count, check_memory, rescaled
from .mechanism import Mechanism
from .privacy import infer_noise, resolve_budget, resolve_public
from .strategies import IntervalStrategy, LevelUniformTree, implicit_optimum
from .strategies.base import check_neighbours

__all__ = ["WORKLOADS", "Setting", "Candidate", "RowSpec", "NotAvailable", "WorkloadError",
           "CompareRow", "Comparison", "ROWS", "register_row", "compare", "row_errors",
           "interval_blue_errors", "OpenDPRun", "run_opendp", "MAX_DENSE_BINS",
           "MAX_ALL_RANGE_MAX_BINS", "as_dict", "check_bins"]

WORKLOADS = ("cdf", "identity", "all_range")
MAX_DENSE_BINS = 8192          # generic dense GLS (non-interval strategies)
MAX_ALL_RANGE_MAX_BINS = 4096  # per-query all-range variances (K (K + 1) / 2 of them)
# level_uniform searches that take more than a few seconds above these sizes
MAX_OPTIMAL_BLUE_SEARCH_BINS = 4096
MAX_REFINED_SEARCH_BINS = 1 << 20  # ~13 s at 2^20 (benchmarks/bench_search.py)
# optimize.optimized_strategy, largest K per noise: the Gaussian fixed point takes ~3 s at
# K = 1024 (minutes at 4096), the Laplace p-Identity ~3 s at 256 (~45 s at 1024); 2 cores
MAX_OPTIMIZED_BINS = {"gaussian": 1024, "laplace": 256}
# above, Gaussian: the implicit optimum (strategies.implicit_optimum) to this certified gap or
# dual iterations for about this long, then one primal evaluation (2^16: ~3 s, gap 6e-4;
# 2^20: 4 iterations + the primal, ~20 s, gap ~1e-3)
IMPLICIT_OPTIMUM_TOL = 1e-3
IMPLICIT_OPTIMUM_SECONDS = 10.0
# the "best_node_budgets" row: L-BFGS-B on budgets per node, stopped after this many seconds
# (2^20 bins: ~1 s per iteration; most of the gain comes in the first tens of iterations)
NODE_BUDGETS_SECONDS = 30.0
# above this K, compare feeds OpenDP's tree + postprocessor with numpy discrete-Laplace noise
OPENDP_SAMPLER_MAX_BINS = 4096


# ------------------------------------------------------------------ setting, rows
def format_number(x) -> str:
    """A table cell: "n/a" for None, 4 significant digits, exponent form from 10^6."""
    if x is None:
        return "n/a"
    return f"{x:.4g}" if abs(x) < 1e6 else f"{x:.3e}"


class BudgetSetting:
    """Shared by the 1-D and grid settings (fields ``budget``, ``noise``, ``neighbours``,
    ``public_total``): the budget keyword, whether N is public, and a Mechanism."""

    @property
    def budget_kwargs(self) -> dict:
        """{"epsilon": budget} (Laplace) or {"rho": budget} (Gaussian)."""
        return {"epsilon": self.budget} if self.noise == "laplace" else {"rho": self.budget}

    @property
    def public(self) -> bool:
        """Whether N is public (released exactly)."""
        return resolve_public(self.neighbours, self.public_total)

    def mechanism(self, strategy, level_budgets=None) -> Mechanism:
        """A Mechanism for ``strategy`` in this setting."""
        return Mechanism(strategy, noise=self.noise, neighbours=self.neighbours,
                         public_total=self.public_total, level_budgets=level_budgets,
                         **self.budget_kwargs)


@dataclass(frozen=True)
class Setting(BudgetSetting):
    """The comparison's setting: K, total budget (eps for Laplace, rho for Gaussian), noise,
    neighbour model and whether N is public."""

    n_bins: int
    budget: float
    noise: str = "laplace"
    neighbours: str = "swap"
    public_total: bool | None = None
    workloads: tuple = WORKLOADS


@dataclass(frozen=True)
class Candidate:
    """What a row builder returns: a mechanism, its estimator and how to describe it.

    ``n_bins`` is the number of real bins K (``mechanism.n_bins`` may be a padded K' >= K).
    ``variance_factor`` multiplies every error (e.g. discrete vs continuous Laplace).
    ``per_workload`` maps a workload to another candidate answering it (e.g. the tree
    searched for all ranges in a "best tree" row)."""

    mechanism: Mechanism
    estimator: str
    strategy: str
    n_bins: int
    note: str = ""
    variance_factor: float = 1.0
    per_workload: dict = field(default_factory=dict)


class NotAvailable(Exception):
    """Raised by a row builder when the row does not apply; the message says why."""


@dataclass(frozen=True)
class RowSpec:
    """A registered row: ``build(setting)`` returns a :class:`Candidate` or raises
    :class:`NotAvailable`."""

    key: str
    label: str
    emulates: str
    build: Callable[[Setting], Candidate]


ROWS: dict[str, RowSpec] = {}


def register_row(key: str, label: str, emulates: str):
    """Decorator: register ``build(setting) -> Candidate`` as a comparison row."""
    def deco(build):
        ROWS[key] = RowSpec(key, label, emulates, build)
        return build
    return deco


@dataclass(frozen=True)
class WorkloadError:
    """Exact mean and max per-query expected squared error (counts^2); None = not available
    (``note`` says why)."""

    mean: float | None
    max: float | None
    note: str = ""


@dataclass(frozen=True)
class CompareRow:
    """One mechanism + estimator and its errors per workload."""

    key: str
    label: str
    emulates: str
    strategy: str
    estimator: str
    errors: dict
    note: str = ""
    available: bool = True
    seconds: float = 0.0
    ratio_to_bound: dict = field(default_factory=dict)


@dataclass(frozen=True)
class OpenDPRun:
    """Monte Carlo of OpenDP's own b-ary tree + consistency postprocessor: mean per-query
    squared error and its standard error per workload (``means``, ``std_errors``)."""

    branching: int
    trials: int
    means: dict
    std_errors: dict
    seconds: float
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: the setting, the rows (sorted by the mean error of the
    first requested workload, unavailable rows last), the lower bounds per workload (mean per query, or None) and the
    OpenDP Monte Carlo run (or None)."""

    setting: Setting
    workloads: tuple
    rows: tuple
    bounds: dict
    opendp: OpenDPRun | None = None
    notes: tuple = ()


# ------------------------------------------------------------------ exact errors
def _all_range_mask(kp: int, K: int) -> np.ndarray:
    """Mask of the all_range(K') queries [a, b] with b < K (lexicographic order)."""
    lo, hi = workloads.all_range(kp).intervals()
    return hi <= K


def _servable(mech: Mechanism, workload, est: str, per_query: bool = True) -> bool:
    """Whether an engine computes this error (``dptree-opt engines``): a structured engine at
    any size, or the dense GLS at small K."""
    try:
        engines.select("per_query" if per_query else "error", mech, workload, est)
    except ValueError:
        return False
    return True


def row_errors(cand: Candidate, which=WORKLOADS) -> dict:
    """{workload: WorkloadError} for a candidate, exact (see the module docstring); a
    workload in ``cand.per_workload`` is answered by that candidate instead."""
    out = {}
    own = tuple(wl for wl in which if wl not in cand.per_workload)
    if own:
        out.update(_candidate_errors(cand, own))
    for wl in which:
        if wl in cand.per_workload:
            out.update(_candidate_errors(cand.per_workload[wl], (wl,)))
    return {wl: out[wl] for wl in which}


def _candidate_errors(cand: Candidate, which) -> dict:
    """row_errors for one candidate and the workloads it answers itself, computed on the
    normalised mechanism (variances near 1) and rescaled exactly (``Mechanism.normalised``;
    ValueError when an error is not a double)."""
    orig = cand.mechanism
    mech, c = orig.normalised()
    out = _normalised_errors(replace(cand, mechanism=mech), which)
    if c == 1.0:
        return out

    def scale(x):
        return None if x is None else rescaled(x, c, orig.noise, orig.requested_budget)
    return {wl: replace(e, mean=scale(e.mean), max=scale(e.max)) for wl, e in out.items()}


def _normalised_errors(cand: Candidate, which) -> dict:
    """_candidate_errors on a normalised candidate."""
    mech, est, K = cand.mechanism, cand.estimator, cand.n_bins
    kp = mech.n_bins
    strat = mech.released
    tree = isinstance(strat, LevelUniformTree) and mech.row_budgets is None
    interval = isinstance(strat, IntervalStrategy)
    out = {}
    n_ranges = K * (K + 1) / 2
    lam = None
    if est == "blue" and interval and not tree:
        lam = interval_blue_errors(mech, K, all_range="all_range" in which)
    f = cand.variance_factor
    for wl in which:
        note = ""
        try:
            if wl == "cdf":
                if lam is not None:
                    per = lam["cdf"]
                else:
                    if not _servable(mech, workloads.prefix(kp), est):
                        raise NotAvailable(f"n/a (dense K > {MAX_DENSE_BINS})")
                    per = expected_error(workloads.prefix(kp), mech, est, per_query=True)[:K]
                out[wl] = WorkloadError(f * float(per.mean()), f * float(per.max()))
            elif wl == "identity":
                if lam is not None:
                    per = lam["identity"]
                    if per is None:
                        raise NotAvailable("n/a (bins are not rows of the strategy)")
                else:
                    if not _servable(mech, workloads.identity(kp), est):
                        raise NotAvailable(f"n/a (dense K > {MAX_DENSE_BINS})")
                    per = expected_error(workloads.identity(kp), mech, est, per_query=True)[:K]
                out[wl] = WorkloadError(f * float(per.mean()), f * float(per.max()))
            elif wl == "all_range":
                mx = None
                total = None
                if lam is not None:
                    total, mx = lam["all_range_total"], lam["all_range_max"]
                elif tree and kp <= MAX_ALL_RANGE_MAX_BINS or not tree and _servable(
                        mech, workloads.all_range(kp), est, per_query=False):
                    if kp <= MAX_ALL_RANGE_MAX_BINS and _servable(mech, workloads.all_range(kp),
                                                                  est):
                        per = expected_error(workloads.all_range(kp), mech, est,
                                             per_query=True)
                        if kp != K:
                            per = per[_all_range_mask(kp, K)]
                        total, mx = float(per.sum()), float(per.max())
                    elif kp == K:
                        total = float(expected_error(workloads.all_range(kp), mech, est))
                    else:
                        raise NotAvailable("n/a (padded strategy)")
                elif tree and kp == K:
                    total = float(expected_error(workloads.all_range(kp), mech, est))
                elif tree and est == "blue":
                    total = _padded_tree_all_range_total(mech, K)
                elif tree and est == "covering":
                    total = covering_moments(mech, K)["all_range_total"]
                elif tree:  # refined, padded: the first K bins' ranges, O(K')
                    total = padded_refined_all_range_total(*tree_parameters(mech), K)
                else:
                    raise NotAvailable(f"n/a (dense K > {MAX_DENSE_BINS})")
                if mx is None:
                    note = "max n/a (needs all K (K + 1) / 2 variances)"
                out[wl] = WorkloadError(f * float(total) / n_ranges, None if mx is None else f * mx,
                                        note)
            else:
                raise ValueError(f"unknown workload {wl!r}; choose from {WORKLOADS}")
        except NotAvailable as exc:
            out[wl] = WorkloadError(None, None, str(exc))
    return out


# ------------------------------------------------------------------ the rows
def _tree_shape(ks) -> str:
    ks = tuple(int(k) for k in ks)
    if len(set(ks)) == 1 and len(ks) > 2:
        return f"tree {ks[0]}^{len(ks)}"
    return "tree " + ",".join(str(k) for k in ks)


def _root_private(s: Setting) -> bool:
    return not s.public


@register_row("histogram", "histogram, cumulative sums",
              "[RTS] Lemma III.2 histogram mechanism (A = I; C_K = N when N is public)")
def _histogram(s: Setting) -> Candidate:
    K = s.n_bins
    levels = [0.0, s.budget] if _root_private(s) else None  # the root row is not measured
    mech = s.mechanism(strategies.tree(K, [K]), levels)
    return Candidate(mech, "covering", "histogram", K,
                     note="built as tree [K]: leaves = bins, root = N (exact or unmeasured)")


@register_row("histogram_blue", "histogram + BLUE",
              "A = I with the public total as a constraint (GLS)")
def _histogram_blue(s: Setting) -> Candidate:
    if _root_private(s):
        raise NotAvailable("same as cumulative sums when N is private")
    K = s.n_bins
    return Candidate(s.mechanism(strategies.tree(K, [K])), "blue", "histogram + total", K)


@register_row("prefix_sums", "prefix sums (range mechanism)",
              "[RTS] Lemma III.1 range/threshold mechanism: each C_j measured directly")
def _prefix(s: Setting) -> Candidate:
    K = s.n_bins
    return Candidate(s.mechanism(strategies.prefix_sums(K)), "blue", "prefix sums", K,
                     note="BLUE = direct reading (A invertible)")


def _anchor_candidate(s: Setting, build, estimator: str | None = None) -> Candidate:
    """Candidate from an ``anchors`` constructor (its own estimator unless one is given)."""
    a = build(s.n_bins, noise=s.noise, neighbours=s.neighbours, public_total=s.public_total,
              **s.budget_kwargs)
    return Candidate(a.mechanism, estimator or a.estimator, _tree_shape(a.branching), a.n_bins,
                     a.note)


@register_row("binary_covering", "binary tree, covering sums",
              "Dwork et al. 2010 / Chan et al. 2011 binary tree mechanism (docs/math.md section 6)")
def _binary_covering(s: Setting) -> Candidate:
    return _anchor_candidate(s, anchors.binary_covering)


@register_row("binary_refined", "binary tree, refined",
              "[RTS] App. B refined estimator on the binary tree")
def _binary_refined(s: Setting) -> Candidate:
    return _anchor_candidate(s, anchors.binary_covering, "refined")


@register_row("binary_ols", "binary tree + OLS",
              "Hay et al. 2010 consistency = Honaker 2015 efficient estimator (docs/math.md section 6)")
def _binary_ols(s: Setting) -> Candidate:
    return _anchor_candidate(s, anchors.binary_ols)


@register_row("google_default", "Google default",
              "Google DP library: b = 16, root not noised, covering sums (docs/math.md section 6)")
def _google(s: Setting) -> Candidate:
    return _anchor_candidate(s, anchors.google_default)


def _opendp_candidate(s: Setting, padding: str) -> Candidate:
    a = anchors.opendp_default(s.n_bins, noise=s.noise, neighbours=s.neighbours,
                               public_total=s.public_total, padding=padding,
                               **s.budget_kwargs)
    b = a.branching[0]
    pad = ("truncated to K leaves" if padding == "known_zeros" else
           f"padded to {b}^{len(a.branching)}, padding noised")
    note = f"b = {b}, {len(a.branching) + 1} layers, {pad}"
    if s.noise == "laplace":
        note += (f"; continuous Laplace (x {a.variance_factor:.5f} for OpenDP's discrete "
                 "Laplace)")
    strategy = (f"truncated tree b={b}" if padding == "known_zeros"
                else _tree_shape(a.branching))
    return Candidate(a.mechanism, a.estimator, strategy, a.n_bins, note)


@register_row("opendp_default", "OpenDP default (emulated)",
              "OpenDP b-ary tree + consistency: choose_branching_factor, root noised, OLS, "
              "padding nodes known zeros (as OpenDP's postprocessor)")
def _opendp(s: Setting) -> Candidate:
    return _opendp_candidate(s, "known_zeros")


@register_row("opendp_default_noised_padding", "OpenDP default, padding noised",
              "docs/math.md section 6 row 4b numbers: OpenDP's b and noise on the complete b^h tree, "
              "padding nodes noised and estimated, OLS")
def _opendp_noised(s: Setting) -> Candidate:
    return _opendp_candidate(s, "noised")


@register_row("rts_17", "17-ary tree, covering sums",
              "[RTS] Lemma IV.3 optimal integer branching k = 17 (covering, equal budgets)")
def _rts17(s: Setting) -> Candidate:
    K = s.n_bins
    h = strategies.padded_height(K, 17)
    mech = s.mechanism(strategies.tree(17**h, 17))
    note = "" if 17**h == K else f"padded {K} -> {17**h} bins"
    return Candidate(mech, "covering", _tree_shape((17,) * h), K, note)


def _design_candidate(s: Setting, design, estimator: str, note: str) -> Candidate:
    ks = tuple(int(k) for k in design.branching)
    kp = math.prod(ks)
    b = list(design.budgets)
    mech = s.mechanism(strategies.tree(kp, list(ks)), b)
    pad = "" if kp == s.n_bins else f"padded {s.n_bins} -> {kp} bins; "
    budgets = "budgets " + ",".join(f"{x:.3g}" for x in b)
    return Candidate(mech, estimator, _tree_shape(ks), s.n_bins, pad + budgets + note)


def _search(s: Setting, estimator: str, budgets: str, **kw):
    return optimize.level_uniform(s.n_bins, estimator=estimator, noise=s.noise,
                                  neighbours=s.neighbours, public_total=s.public_total,
                                  budgets=budgets, top=0, **s.budget_kwargs, **kw)


def _with_all_range_tree(s: Setting, cand: Candidate, design) -> Candidate:
    """``cand`` with its all-range column answered by ``design`` (a tree searched for all
    ranges), when that workload is asked for."""
    alt = _design_candidate(s, design, "blue", "")
    note = f"; all-range column: {alt.strategy} searched for all ranges ({alt.note})"
    return replace(cand, per_workload={"all_range": alt}, note=cand.note + note)


@register_row("best_covering_equal", "best tree, covering, equal budgets",
              "[RTS] Sec. V exact integer search (optimize.level_uniform)")
def _best_cov_eq(s: Setting) -> Candidate:
    return _design_candidate(s, _search(s, "covering", "equal"), "covering", "")


@register_row("best_covering_optimal", "best tree, covering, optimal budgets",
              "[RTS] Thm IV.2(a) budgets + Sec. V search (optimize.level_uniform)")
def _best_cov_opt(s: Setting) -> Candidate:
    return _design_candidate(s, _search(s, "covering", "optimal"), "covering", "")


@register_row("best_refined_equal", "best tree, refined, equal budgets",
              "[RTS] App. B estimator, exact search (optimize.level_uniform)")
def _best_ref_eq(s: Setting) -> Candidate:
    if s.n_bins > MAX_REFINED_SEARCH_BINS:
        raise NotAvailable(f"skipped for K > {MAX_REFINED_SEARCH_BINS} (search takes > 15 s; "
                           "run dptree-opt optimize --estimator refined)")
    return _design_candidate(s, _search(s, "refined", "equal"), "refined", "")


@register_row("best_blue_equal", "best tree, BLUE, equal budgets",
              "exact search for the BLUE (optimize.level_uniform)")
def _best_blue_eq(s: Setting) -> Candidate:
    cand = _design_candidate(s, _search(s, "blue", "equal"), "blue", "")
    if "all_range" in s.workloads:
        cand = _with_all_range_tree(s, cand, _search(s, "blue", "equal", workload="all_range"))
    return cand


@register_row("best_blue_optimal", "best tree, BLUE, optimal budgets",
              "BLUE-optimal per-level budgets (optimize.level_uniform / optimal_blue_budgets)")
def _best_blue_opt(s: Setting) -> Candidate:
    if s.n_bins <= MAX_OPTIMAL_BLUE_SEARCH_BINS:
        cand = _design_candidate(s, _search(s, "blue", "optimal", pool=2), "blue", "")
        if "all_range" in s.workloads:
            cand = _with_all_range_tree(s, cand, _search(s, "blue", "optimal", pool=2,
                                                         workload="all_range"))
        return cand
    # finest unpadded tree (prime factors of K, ascending): with optimal budgets a refinement
    # is never worse than the tree it refines (tests/test_optimize_search.py)
    # and the finest trees over the 3-smooth K' in [K, 2K] (what the search adds to its pool)
    design = None
    for ks in [optimize.finest_refinement((s.n_bins,))] + _smooth_finest_trees(s.n_bins, 2.0):
        d = optimize.optimal_blue_budgets(ks, s.budget, noise=s.noise, neighbours=s.neighbours,
                                          public_total=s.public_total, n_queries=s.n_bins)
        if design is None or d.error < design.error:
            design = d
    cand = _design_candidate(s, design, "blue", f"; finest trees of K and of the 3-smooth "
                             f"K' <= 2K (search skipped for K > {MAX_OPTIMAL_BLUE_SEARCH_BINS})")
    if "all_range" in s.workloads:
        # the better of the finest refinements of K and of the best equal-budget all-range
        # tree, with budgets optimised for all ranges
        best = None
        eq = _search(s, "blue", "equal", workload="all_range")
        for ks in {optimize.finest_refinement((s.n_bins,)),
                   optimize.finest_refinement(eq.branching)}:
            d = optimize.optimal_blue_budgets(
                ks, s.budget, noise=s.noise, neighbours=s.neighbours,
                public_total=s.public_total, workload="all_range", n_queries=s.n_bins)
            if best is None or d.error < best.error:
                best = d
        cand = _with_all_range_tree(s, cand, best)
    return cand


@register_row("best_node_budgets", "tree, BLUE, budgets per node",
              "a budget per node on the finest tree of K, every root-to-leaf path summing "
              "to the total (optimize.optimal_node_budgets), BLUE")
def _best_node_budgets(s: Setting) -> Candidate:
    if s.public and s.neighbours == "add_remove":
        raise NotAvailable("n/a (public N under add/remove: not supported by budgets per node)")
    if s.n_bins < 2:
        raise NotAvailable("n/a (one bin)")
    ks = optimize.finest_refinement((s.n_bins,))
    res = optimize.optimal_node_budgets(ks, noise=s.noise, neighbours=s.neighbours,
                                        time_limit=NODE_BUDGETS_SECONDS, **s.budget_kwargs)
    mech = Mechanism(strategies.tree(s.n_bins, ks), noise=s.noise, neighbours=s.neighbours,
                     public_total=s.public_total, row_budgets=res.budgets, **s.budget_kwargs)
    return Candidate(mech, "blue", _tree_shape(ks) + ", per node", s.n_bins,
                     note=f"{res.iterations} L-BFGS-B iterations (<= {NODE_BUDGETS_SECONDS:g} s);"
                          f" per-level optimum of this tree {res.start_mean:.6g} per prefix")


def _generic_candidate(s: Setting, fn, label: str, structured: bool = False) -> Candidate:
    """A BLUE row on strategy ``fn(K)``; above MAX_DENSE_BINS only for ``structured``
    strategies (their errors have exact fast paths)."""
    if s.n_bins > MAX_DENSE_BINS and not structured:
        raise NotAvailable(f"n/a (dense K > {MAX_DENSE_BINS})")
    try:
        strat = fn(s.n_bins)
    except ValueError as exc:
        raise NotAvailable(f"n/a ({exc})") from None
    return Candidate(s.mechanism(strat), "blue", label, s.n_bins)


@register_row("haar", "Haar wavelet + BLUE", "Privelet (Xiao et al. 2010) Haar strategy")
def _haar(s: Setting) -> Candidate:
    K = s.n_bins
    return _generic_candidate(s, strategies.haar, "Haar wavelet",
                              structured=K & (K - 1) == 0)


@register_row("sqrt_factorization", "square-root factorisation",
              "A = W^(1/2) for the prefix workload (Henzinger et al.), BLUE")
def _sqrt(s: Setting) -> Candidate:
    return _generic_candidate(s, strategies.sqrt_factorization, "sqrt factorisation",
                              structured=True)


@register_row("optimized", "optimised strategy",
              "strategy optimised for the prefix workload (optimize."
              "optimized_strategy; Gaussian above 1024 bins: the implicit optimum, "
              "strategies.gaussian_optimal_implicit), BLUE")
def _optimized(s: Setting) -> Candidate:
    if s.noise == "gaussian" and s.n_bins > MAX_OPTIMIZED_BINS["gaussian"]:
        # the implicit optimum: no n x n matrix; a certified gap, time-limited here
        res = implicit_optimum.gaussian_optimal_implicit(
            workloads.prefix(s.n_bins), tol=IMPLICIT_OPTIMUM_TOL,
            time_limit=IMPLICIT_OPTIMUM_SECONDS)
        return Candidate(s.mechanism(res.strategy), "blue", "optimal factorisation",
                         s.n_bins, note=res.method + " (optimal for add/remove neighbours)")
    if s.n_bins > MAX_OPTIMIZED_BINS[s.noise]:
        raise NotAvailable(f"skipped for K > {MAX_OPTIMIZED_BINS[s.noise]} with {s.noise} noise "
                           "(HDMM's p-Identity is dense: tens of seconds at 256 bins; call "
                "optimize.optimized_strategy, or optimize.best_mechanism, which also tries "
                "budgets per node for pure DP at scale)")
    res = optimize.optimized_strategy(workloads.prefix(s.n_bins), s.noise,
                                      neighbours=s.neighbours, public_total=s.public_total)
    return Candidate(s.mechanism(res.strategy), "blue", f"optimised ({res.strategy.name})"[:22],
                     s.n_bins, note=f"{res.method}")


# ------------------------------------------------------------------ bounds
def _bounds(s: Setting, which) -> tuple[dict, str]:
    """Mean-per-query lower bounds (counts^2) per workload from ``bounds.error_lower_bound``
    (the SVD bound, Li & Miklau 2012)."""
    names = {"cdf": "prefix", "identity": "identity", "all_range": "all_range"}
    out, notes = {}, []
    for wl in which:
        try:
            wk = getattr(workloads, names[wl])(s.n_bins)
            total = bounds.error_lower_bound(wk, noise=s.noise, neighbours=s.neighbours,
                       public_total=s.public_total, **s.budget_kwargs)
            out[wl] = float(total) / wk.n_queries
        except ValueError as exc:
            out[wl] = None
            notes.append(f"{wl}: {str(exc).split(';')[0]}")
    note = "ratio = mean / SVD lower bound (Li & Miklau 2012)"
    if s.noise == "laplace":
        note += "; under Laplace the bound is the l1 analogue and loose (bounds.py)"
    return out, note + ("; n/a: " + "; ".join(notes) if notes else "")


# ------------------------------------------------------------------ OpenDP itself
def run_opendp(n_bins: int, epsilon: float = 1.0, *, branching: int | None = None,
               trials: int = 200, rng=None, time_limit: float | None = None,
               sampler: str = "opendp") -> OpenDPRun:
    """Run OpenDP's own b-ary tree and consistency postprocessor and measure the errors.

    make_b_ary_tree(leaf_count=K, b) >> then_laplace(scale = layers / eps) (discrete Laplace
    on integer counts, eps-DP under add/remove: the tree's l1 stability is its number of
    layers, checked with OpenDP's own privacy map) >> make_consistent_b_ary_tree; the
    consistent leaves give the CDF by cumulative sums. ``sampler="opendp"`` draws the noise
    with OpenDP's exact sampler (~1 s per 10^5 nodes); ``"numpy"`` feeds OpenDP's tree and
    postprocessor with discrete Laplace noise of the same scale drawn by numpy (difference
    of two geometrics; fast, for large K). Returns the mean per-query squared error on the
    CDF, the bins and all ranges (sum_{a<b} (e_b - e_a)^2 = (K + 1) sum e^2 - (sum e)^2 over
    the prefix errors, e_0 = 0) with standard errors over trials. ``rng`` seeds the
    Poisson(10) data and the numpy sampler. ``time_limit`` (s) stops early (>= 10 trials)."""
    import opendp.prelude as odp

    if sampler not in ("opendp", "numpy"):
        raise ValueError(f"sampler must be 'opendp' or 'numpy', got {sampler!r}")
    odp.enable_features("contrib")
    K = int(n_bins)
    b = int(odp.t.choose_branching_factor(K)) if branching is None else int(branching)
    layers = anchors.opendp_layers(K, b)
    scale = layers / float(epsilon)
    space = (odp.vector_domain(odp.atom_domain(T=int)), odp.l1_distance(T=int))
    tree = odp.t.make_b_ary_tree(*space, leaf_count=K, branching_factor=b)
    meas = tree >> odp.m.then_laplace(scale)
    loss = meas.map(1)
    if loss > epsilon * (1 + 1e-9):
        raise ValueError(f"OpenDP reports eps = {loss} > {epsilon}")
    post = odp.t.make_consistent_b_ary_tree(branching_factor=b, TIA=int, TOA=float)
    gen = np.random.default_rng(rng)
    data = gen.poisson(10, K).astype(np.int64)
    truth = np.cumsum(data)
    exact_tree = np.asarray(tree(data.tolist()), dtype=np.int64)
    p = -math.expm1(-1.0 / scale)
    t0 = time.perf_counter()
    cdf, ident, rng_all = [], [], []
    for i in range(int(trials)):
        if sampler == "opendp":
            noisy = meas(data.tolist())
        else:
            z = gen.geometric(p, exact_tree.size) - gen.geometric(p, exact_tree.size)
            noisy = (exact_tree + z).tolist()
        leaves = np.asarray(post(noisy), dtype=float)
        e = np.cumsum(leaves) - truth
        cdf.append(np.mean(e**2))
        ident.append(np.mean((leaves - data) ** 2))
        rng_all.append(((K + 1) * np.sum(e**2) - np.sum(e) ** 2) / (K * (K + 1) / 2))
        if time_limit is not None and i >= 9 and time.perf_counter() - t0 > time_limit:
            break
    n = len(cdf)
    series = (("cdf", cdf), ("identity", ident), ("all_range", rng_all))
    means = {k: float(np.mean(v)) for k, v in series}
    ses = {k: float(np.std(v, ddof=1) / math.sqrt(n)) for k, v in series}
    src = "OpenDP's sampler" if sampler == "opendp" else "numpy discrete-Laplace sampler"
    return OpenDPRun(b, n, means, ses, time.perf_counter() - t0,
                     note=f"OpenDP b = {b}, {layers} layers, discrete Laplace scale {scale:g} "
                          f"({src}), eps = {loss:g} by OpenDP's privacy map")


# ------------------------------------------------------------------ compare
def _opendp_noise_problem(n_bins: int, epsilon: float) -> str:
    """Why OpenDP's own run would be meaningless at this budget ("" when it is not): its
    discrete Laplace (scale layers / eps) identically 0 or saturating, by the releases'
    rule (``privacy.check_noise_scales``)."""
    from .mechanism import discrete_variance
    from .privacy import check_noise_scales

    layers = anchors.opendp_layers(n_bins, anchors.choose_branching_factor(n_bins))
    scale = layers / epsilon
    try:
        check_noise_scales([scale], [discrete_variance(scale, "laplace")],
                           budget_name="epsilon", budget=epsilon, groups=["OpenDP's tree"])
    except ValueError as exc:
        return str(exc)
    return ""


def _sort_key(row: CompareRow, which=WORKLOADS):
    """Available rows first, ranked by the mean error of the first requested workload (then
    the next ones); a workload a row does not answer counts as inf."""
    means = [row.errors.get(wl) for wl in which]
    return (not row.available,
            [e.mean if e is not None and e.mean is not None else math.inf for e in means])


def check_bins(n_bins: int, what: str) -> None:
    """ValueError when a comparison over ``n_bins`` bins would exceed MAX_COMPARE_BINS or
    the memory available (about COMPARE_BYTES_PER_BIN per bin; ``what`` names the size)."""
    hint = "compare fewer bins, or run dptree-opt error / optimize for one mechanism"
    check_count(n_bins, MAX_COMPARE_BINS, what, hint)
    check_memory(n_bins * COMPARE_BYTES_PER_BIN, f"comparing {n_bins} bins", hint)


def compare(n_bins: int, epsilon: float | None = None, *, rho: float | None = None,
            noise: str | None = None, neighbours: str = "swap", public_total=None,
            workloads=WORKLOADS, rows=None, opendp: bool | int = False,
            opendp_time_limit: float = 5.0, rng=0) -> Comparison:
    """Exact mean and max per-query error of every registered row (or the keys in ``rows``).

    At most MAX_COMPARE_BINS bins (~80 s and ~1.5 GB at 2^20). Errors are computed on the
    normalised mechanisms and rescaled, so any budget whose errors are doubles works.
    ``opendp``: False, True (up to 2000 trials) or a number of trials: also run OpenDP itself
    (Laplace, add/remove, N private only; needs the ``opendp`` package), stopping after
    ``opendp_time_limit`` seconds. Rows are sorted by the mean error of the first requested
    workload, then the next ones (unavailable rows last)."""
    K = n_bins
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    check_bins(int(K), f"n_bins = {int(K)}")
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    neighbours = check_neighbours(neighbours)
    resolve_public(neighbours, public_total)
    which = tuple(workloads)
    for wl in which:
        if wl not in WORKLOADS:
            raise ValueError(f"unknown workload {wl!r}; choose from {', '.join(WORKLOADS)}")
    setting = Setting(int(K), budget, noise, neighbours, public_total, which)
    keys = list(ROWS) if rows is None else list(rows)
    for key in keys:
        if key not in ROWS:
            raise ValueError(f"unknown row {key!r}; choose from {', '.join(ROWS)}")
    bounds, bound_note = _bounds(setting, which)
    out = []
    for key in keys:
        spec = ROWS[key]
        t0 = time.perf_counter()
        try:
            cand = spec.build(setting)
            errs = row_errors(cand, which)
            ratio = {wl: (errs[wl].mean / bounds[wl]) if bounds.get(wl) and
                     errs[wl].mean is not None else None for wl in which}
            out.append(CompareRow(key, spec.label, spec.emulates, cand.strategy,
                                  cand.estimator, errs, cand.note, True,
                                  time.perf_counter() - t0, ratio))
        except NotAvailable as exc:
            out.append(CompareRow(key, spec.label, spec.emulates, "-", "-",
                                  {wl: WorkloadError(None, None) for wl in which}, str(exc),
                                  False, time.perf_counter() - t0))
    out.sort(key=lambda r: _sort_key(r, which))
    run = None
    notes = [bound_note]
    if opendp:
        if importlib.util.find_spec("opendp") is None:
            notes.append("OpenDP not installed: its own run is skipped")
        elif noise != "laplace" or neighbours != "add_remove" or setting.public:
            notes.append("OpenDP's own run needs Laplace noise, add/remove neighbours and a "
                         "private N (its b-ary tree's setting)")
        else:
            why = _opendp_noise_problem(K, budget)
            if why:
                notes.append(f"OpenDP's own run is skipped: {why}")
            else:
                trials = 2000 if opendp is True else int(opendp)
                run = run_opendp(K, budget, trials=trials, rng=rng,
                                 time_limit=opendp_time_limit,
                                 sampler="opendp" if K <= OPENDP_SAMPLER_MAX_BINS else "numpy")
    return Comparison(setting, which, tuple(out), bounds, run, tuple(notes))


def as_dict(result: Comparison) -> dict:
    """A JSON-ready dict of a :class:`Comparison`."""
    def err(e):
        return {"mean": e.mean, "max": e.max, "note": e.note}

    s = result.setting
    d = {"n_bins": s.n_bins, "noise": s.noise, "neighbours": s.neighbours,
         "public_total": s.public, **s.budget_kwargs, "workloads": list(result.workloads),
         "units": "expected squared error per query, counts^2",
         "bounds_mean_per_query": result.bounds, "notes": list(result.notes),
         "rows": [{"key": r.key, "label": r.label, "emulates": r.emulates,
                   "strategy": r.strategy, "estimator": r.estimator, "available": r.available,
                   "note": r.note, "seconds": r.seconds,
                   "errors": {wl: err(e) for wl, e in r.errors.items()},
                   "ratio_to_bound": r.ratio_to_bound} for r in result.rows]}
    if result.opendp is not None:
        o = result.opendp
        d["opendp_run"] = {"branching": o.branching, "trials": o.trials, "means": o.means,
                           "std_errors": o.std_errors, "seconds": o.seconds, "note": o.note}
    return d

