"""Side-by-side exact errors of every 1-D mechanism the framework has (``dptree-opt compare
--bins K``).

:func:`compare` builds one row per mechanism + estimator for a setting (K bins, total budget,
noise, neighbour model, public total) and computes the exact mean and max per-query expected
squared error (counts^2) on three workloads over the K real bins:

* ``cdf``: the K prefix counts C_1..C_K (the CDF, unnormalised);
* ``identity``: the K bin counts;
* ``all_range``: the K (K + 1) / 2 ranges [a, b], 0 <= a <= b < K.

Rows (:data:`ROWS`, the protocol of :mod:`dptree_opt.compare.protocol`):

* fixed baselines and deployed defaults: the histogram (cumulative sums, or the BLUE with a
  public N), the prefix sums with one noise scale, the binary tree with covering sums, the
  refined estimator or OLS, Google's and OpenDP's defaults (emulated, ``dptree_opt.anchors``),
  [RTS]'s 17-ary tree, Privelet's Haar wavelet, the square-root factorisation;
* [RTS]'s exact tree searches for the covering and refined estimators
  (``optimize.level_uniform``);
* the optimised families of the front door, per workload column: for each column,
  ``optimize.best_mechanism`` on that workload; the row of a family takes the design that
  family produced for the column (the best tree for all ranges answers the all-range
  column, ...), or says why it has none;
* "best for the CDF / the bins / all ranges (front door)": each column's winner, with its
  family in the label, evaluated on every column.

Errors are exact (``protocol.row_errors``, through the engine registry), each also given as a
ratio to the SVD lower bound (:mod:`dptree_opt.compare.bounds`).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from ..optimize.result import TreeDesign
from ..strategies import Strategy

from .. import anchors, optimize, strategies
from ..limits import COMPARE_BYTES_PER_BIN, MAX_COMPARE_BINS, check_count, check_memory
from ..privacy import check_neighbours, infer_noise, resolve_budget, resolve_public
from .bounds import bound_note, lower_bounds
from .protocol import (WORKLOADS, BudgetSetting, Candidate, CompareRow, NotAvailable,
                       RowCache, RowRegistry, register_front_door_rows, row_dict, run_rows,
                       sort_key)

__all__ = ["Setting", "Comparison", "ROWS", "register_row", "compare", "check_bins",
           "FRONT_DOOR_FAMILIES", "MAX_DENSE_BINS", "MAX_OPTIMIZED_BINS",
           "MAX_REFINED_SEARCH_BINS", "OPENDP_SAMPLER_MAX_BINS"]

MAX_DENSE_BINS = 8192          # generic dense GLS (non-interval strategies)
MAX_REFINED_SEARCH_BINS = 1 << 20  # ~13 s at 2^20 (benchmarks/bench_search.py)
# the dense optimum (HDMM's p-Identity for Laplace) is asked of the front door up to this K:
# ~3 s at 256 bins, minutes at 1024 on a loaded machine (measured on 2 shared cores)
MAX_OPTIMIZED_BINS = {"gaussian": 1024, "laplace": 256}
# above this K, compare feeds OpenDP's tree + postprocessor with numpy discrete-Laplace noise
OPENDP_SAMPLER_MAX_BINS = 4096
# the families of optimize.best_mechanism that apply to 1-D workloads
FRONT_DOOR_FAMILIES = ("histogram", "workload", "tree_equal", "tree_optimal", "haar", "sqrt",
                       "blt", "gaussian_optimum", "node_budgets", "p_identity_hats", "nested",
                       "dense_optimum")
_COLUMN = {"cdf": "the CDF", "identity": "the bins", "all_range": "all ranges"}


@dataclass(frozen=True)
class Setting(BudgetSetting):
    """The comparison's setting: K, total budget (eps for Laplace, rho for Gaussian), noise,
    neighbour model, whether N is public, the workloads compared and the front door's time
    limit per workload column (seconds)."""

    n_bins: int
    budget: float
    noise: str = "laplace"
    neighbours: str = "add_remove"
    public_total: bool | None = None
    workloads: tuple[str, ...] = WORKLOADS
    time_limit: float = 60.0

    @property
    def domain(self) -> int:
        """K."""
        return self.n_bins


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: the setting, the rows (sorted by the mean error of the
    first requested workload, unavailable rows last), the lower bounds per workload (mean per
    query, or None) and the OpenDP Monte Carlo run (``anchors.OpenDPRun`` or None)."""

    setting: Setting
    workloads: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    bounds: dict[str, float | None]
    opendp: anchors.OpenDPRun | None = None
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        s = self.setting
        d: dict[str, Any] = {"n_bins": s.n_bins, "noise": s.noise, "neighbours": s.neighbours,
             "public_total": s.public, **s.budget_kwargs, "workloads": list(self.workloads),
             "units": "expected squared error per query, counts^2",
             "bounds_mean_per_query": self.bounds, "notes": list(self.notes),
             "rows": [row_dict(r) for r in self.rows]}
        if self.opendp is not None:
            o = self.opendp
            d["opendp_run"] = {"branching": o.branching, "trials": o.trials, "means": o.means,
                               "std_errors": o.std_errors, "seconds": o.seconds,
                               "note": o.note}
        return d


ROWS = RowRegistry()


def register_row(key: str, label: str,
                 emulates: str) -> Callable[[Callable[[Setting], Candidate]],
                                            Callable[[Setting], Candidate]]:
    """Decorator: register ``build(setting) -> Candidate`` (raising :class:`NotAvailable`
    when the row does not apply) as a comparison row."""
    def deco(build: Callable[[Setting], Candidate]) -> Callable[[Setting], Candidate]:
        ROWS.register(key, label, emulates)(lambda setting, cache: build(setting))
        return build
    return deco


# ------------------------------------------------------------------ fixed rows
def _tree_shape(ks: Iterable[int]) -> str:
    ks = tuple(int(k) for k in ks)
    if len(set(ks)) == 1 and len(ks) > 2:
        return f"tree {ks[0]}^{len(ks)}"
    return "tree " + ",".join(str(k) for k in ks)


@ROWS.register("histogram", "histogram, cumulative sums",
               "[RTS] Lemma III.2 histogram mechanism (A = I; C_K = N when N is public)")
def _histogram(s: Setting, cache: RowCache) -> Candidate:
    K = s.n_bins
    levels = None if s.public else [0.0, s.budget]  # the root row is not measured
    mech = s.mechanism(strategies.tree(K, [K]), levels)
    return Candidate(mech, "covering", "histogram", K,
                     note="built as tree [K]: leaves = bins, root = N (exact or unmeasured)")


@ROWS.register("histogram_blue", "histogram + BLUE",
               "A = I with the public total as a constraint (GLS)")
def _histogram_blue(s: Setting, cache: RowCache) -> Candidate:
    if not s.public:
        raise NotAvailable("same as cumulative sums when N is private")
    K = s.n_bins
    return Candidate(s.mechanism(strategies.tree(K, [K])), "blue", "histogram + total", K)


@ROWS.register("prefix_sums", "prefix sums (range mechanism)",
               "[RTS] Lemma III.1 range/threshold mechanism: each C_j measured directly, one "
               "noise scale")
def _prefix(s: Setting, cache: RowCache) -> Candidate:
    K = s.n_bins
    # the strategy's levels are the total row C_K (level 0) and C_1..C_(K-1) (level 1), of
    # sensitivities 1 and K - 1 (add/remove); budgets b / K and b (K - 1) / K give both the
    # same noise scale K / b, that of the whole matrix (sensitivity K). Under swap (or a
    # public N) the total is exact and level 1 is the only noisy level.
    levels = None if s.public else [s.budget / K, s.budget * (K - 1) / K]
    return Candidate(s.mechanism(strategies.prefix_sums(K), levels), "blue", "prefix sums", K,
                     note="BLUE = direct reading (A invertible)")


def _anchor_candidate(s: Setting, build: Callable[..., anchors.Anchor],
                      estimator: str | None = None) -> Candidate:
    """Candidate from an ``anchors`` constructor (its own estimator unless one is given)."""
    a = build(s.n_bins, noise=s.noise, neighbours=s.neighbours, public_total=s.public_total,
              **s.budget_kwargs)
    return Candidate(a.mechanism, estimator or a.estimator, _tree_shape(a.branching), a.n_bins,
                     a.note)


@ROWS.register("binary_covering", "binary tree, covering sums",
               "Dwork et al. 2010 / Chan et al. 2011 binary tree mechanism (docs/math.md "
               "section 6)")
def _binary_covering(s: Setting, cache: RowCache) -> Candidate:
    return _anchor_candidate(s, anchors.binary_covering)


@ROWS.register("binary_refined", "binary tree, refined",
               "[RTS] App. B refined estimator on the binary tree")
def _binary_refined(s: Setting, cache: RowCache) -> Candidate:
    return _anchor_candidate(s, anchors.binary_covering, "refined")


@ROWS.register("binary_ols", "binary tree + OLS",
               "Hay et al. 2010 consistency = Honaker 2015 efficient estimator (docs/math.md "
               "section 6)")
def _binary_ols(s: Setting, cache: RowCache) -> Candidate:
    return _anchor_candidate(s, anchors.binary_ols)


@ROWS.register("google_default", "Google default",
               "Google DP library: b = 16, root not noised, covering sums (docs/math.md "
               "section 6)")
def _google(s: Setting, cache: RowCache) -> Candidate:
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


@ROWS.register("opendp_default", "OpenDP default (emulated)",
               "OpenDP b-ary tree + consistency: choose_branching_factor, root noised, OLS, "
               "padding nodes known zeros (as OpenDP's postprocessor)")
def _opendp(s: Setting, cache: RowCache) -> Candidate:
    return _opendp_candidate(s, "known_zeros")


@ROWS.register("opendp_default_noised_padding", "OpenDP default, padding noised",
               "docs/math.md section 6 row 4b numbers: OpenDP's b and noise on the complete "
               "b^h tree, padding nodes noised and estimated, OLS")
def _opendp_noised(s: Setting, cache: RowCache) -> Candidate:
    return _opendp_candidate(s, "noised")


@ROWS.register("rts_17", "17-ary tree, covering sums",
               "[RTS] Lemma IV.3 optimal integer branching k = 17 (covering, equal budgets)")
def _rts17(s: Setting, cache: RowCache) -> Candidate:
    K = s.n_bins
    h = strategies.padded_height(K, 17)
    mech = s.mechanism(strategies.tree(17**h, 17))
    note = "" if 17**h == K else f"padded {K} -> {17**h} bins"
    return Candidate(mech, "covering", _tree_shape((17,) * h), K, note)


def _fixed(s: Setting, fn: Callable[[int], Strategy], label: str,
           structured: bool = False) -> Candidate:
    """A BLUE row on strategy ``fn(K)``; above MAX_DENSE_BINS only for ``structured``
    strategies (an engine serves them at any size)."""
    if s.n_bins > MAX_DENSE_BINS and not structured:
        raise NotAvailable(f"n/a (dense K > {MAX_DENSE_BINS})")
    try:
        strat = fn(s.n_bins)
    except ValueError as exc:
        raise NotAvailable(f"n/a ({exc})") from None
    return Candidate(s.mechanism(strat), "blue", label, s.n_bins)


@ROWS.register("haar", "Haar wavelet + BLUE", "Privelet (Xiao et al. 2010) Haar strategy")
def _haar(s: Setting, cache: RowCache) -> Candidate:
    K = s.n_bins
    return _fixed(s, strategies.haar, "Haar wavelet", structured=K & (K - 1) == 0)


@ROWS.register("sqrt_factorization", "square-root factorisation",
               "A = W^(1/2) for the prefix workload (Henzinger et al.), BLUE")
def _sqrt(s: Setting, cache: RowCache) -> Candidate:
    return _fixed(s, strategies.sqrt_factorization, "sqrt factorisation", structured=True)


# ------------------------------------------------------------------ [RTS] searches
def _design_candidate(s: Setting, design: TreeDesign, estimator: str) -> Candidate:
    ks = tuple(int(k) for k in design.branching)
    kp = math.prod(ks)
    b = list(design.budgets)
    mech = s.mechanism(strategies.tree(kp, list(ks)), b)
    pad = "" if kp == s.n_bins else f"padded {s.n_bins} -> {kp} bins; "
    budgets = "budgets " + ",".join(f"{x:.3g}" for x in b)
    return Candidate(mech, estimator, _tree_shape(ks), s.n_bins, pad + budgets)


def _search(s: Setting, estimator: str, budgets: str) -> TreeDesign:
    return optimize.level_uniform(s.n_bins, estimator=estimator, noise=s.noise,
                                  neighbours=s.neighbours, public_total=s.public_total,
                                  budgets=budgets, top=0, **s.budget_kwargs)


@ROWS.register("best_covering_equal", "best tree, covering, equal budgets",
               "[RTS] Sec. V exact integer search (optimize.level_uniform)")
def _best_cov_eq(s: Setting, cache: RowCache) -> Candidate:
    return _design_candidate(s, _search(s, "covering", "equal"), "covering")


@ROWS.register("best_covering_optimal", "best tree, covering, optimal budgets",
               "[RTS] Thm IV.2(a) budgets + Sec. V search (optimize.level_uniform)")
def _best_cov_opt(s: Setting, cache: RowCache) -> Candidate:
    return _design_candidate(s, _search(s, "covering", "optimal"), "covering")


@ROWS.register("best_refined_equal", "best tree, refined, equal budgets",
               "[RTS] App. B estimator, exact search (optimize.level_uniform)")
def _best_ref_eq(s: Setting, cache: RowCache) -> Candidate:
    if s.n_bins > MAX_REFINED_SEARCH_BINS:
        raise NotAvailable(f"skipped for K > {MAX_REFINED_SEARCH_BINS} (search takes > 15 s; "
                           "run dptree-opt optimize --estimator refined)")
    return _design_candidate(s, _search(s, "refined", "equal"), "refined")


# ------------------------------------------------------------------ the front door
def _front_door_families(s: Setting) -> tuple[tuple[str, ...], dict[str, str]]:
    """(the families asked of the front door, {family: why not asked}): all 1-D families
    but the dense optimum above MAX_OPTIMIZED_BINS (its cost is cubic in K)."""
    limit = MAX_OPTIMIZED_BINS[s.noise]
    if s.n_bins > limit:
        return (tuple(f for f in FRONT_DOOR_FAMILIES if f != "dense_optimum"),
                {"dense_optimum": f"not run by compare above {limit} bins with {s.noise} "
                                  "noise (cubic in K: call optimize.best_mechanism)"})
    return FRONT_DOOR_FAMILIES, {}


_FAMILY_ROWS = (
    ("best_blue_equal", "best tree, BLUE, equal budgets",
     "front door family tree_equal per workload: the exact search for the BLUE "
     "(optimize.level_uniform), equal budgets", ("tree_equal",)),
    ("best_blue_optimal", "best tree, BLUE, optimal budgets",
     "front door family tree_optimal per workload: BLUE-optimal per-level budgets "
     "(optimize.level_uniform / optimal_blue_budgets)", ("tree_optimal",)),
    ("best_node_budgets", "tree, BLUE, budgets per node",
     "front door family node_budgets: a budget per node on the finest tree of K, every "
     "root-to-leaf path summing to the total (optimize.optimal_node_budgets), BLUE; the CDF "
     "only", ("node_budgets",)),
    ("best_nested", "nested strategy, BLUE",
     "front door family nested: local matrices on children totals per depth optimised for "
     "the CDF under Laplace (optimize.optimal_nested from optimize.l1_local), BLUE; the CDF "
     "only", ("nested",)),
    ("optimized", "optimised strategy",
     "front door families dense_optimum / gaussian_optimum per workload: HDMM's p-Identity "
     "(Laplace) or the Gaussian optimum (strategies.gaussian_optimal_implicit, certified), "
     "BLUE", ("dense_optimum", "gaussian_optimum")),
    ("best_p_identity_hats", "p-Identity from hats, BLUE",
     "front door family p_identity_hats: HDMM's p-Identity on the support of multi-scale "
     "hats (strategies.p_identity_sparse), as many iterations as half the time left allows; "
     "Laplace, the CDF and all ranges on 256..4096 bins", ("p_identity_hats",)),
    ("blt", "buffered linear Toeplitz",
     "front door family blt: strategies.blt optimised for the mean prefix error (Dvijotham "
     "et al. 2024), BLUE", ("blt",)),
    ("direct", "workload measured directly",
     "front door family workload: the workload's own rows measured with one noise scale "
     "(distinct rows; more queries than bins: n/a)", ("workload",)),
)
register_front_door_rows(ROWS, _FAMILY_ROWS, _front_door_families, WORKLOADS, _COLUMN,
                         "")


# ------------------------------------------------------------------ compare
def check_bins(n_bins: int, what: str) -> None:
    """ValueError when a comparison over ``n_bins`` bins would exceed MAX_COMPARE_BINS or
    the memory available (about COMPARE_BYTES_PER_BIN per bin; ``what`` names the size)."""
    hint = "compare fewer bins, or run dptree-opt error / optimize for one mechanism"
    check_count(n_bins, MAX_COMPARE_BINS, what, hint)
    check_memory(n_bins * COMPARE_BYTES_PER_BIN, f"comparing {n_bins} bins", hint)


def _opendp_run(setting: Setting, opendp: bool | int, time_limit: float,
                rng: int | np.random.Generator | None) -> tuple[anchors.OpenDPRun | None, str]:
    """(OpenDP's own run or None, a note or "")."""
    K, budget = setting.n_bins, setting.budget
    if importlib.util.find_spec("opendp") is None:
        return None, "OpenDP not installed: its own run is skipped"
    if setting.noise != "laplace" or setting.neighbours != "add_remove" or setting.public:
        return None, ("OpenDP's own run needs Laplace noise, add/remove neighbours and a "
                      "private N (its b-ary tree's setting)")
    why = anchors.opendp_noise_problem(K, budget)
    if why:
        return None, f"OpenDP's own run is skipped: {why}"
    trials = 2000 if opendp is True else int(opendp)
    return anchors.run_opendp(K, budget, trials=trials, rng=rng, time_limit=time_limit,
                              sampler="opendp" if K <= OPENDP_SAMPLER_MAX_BINS
                              else "numpy"), ""


def compare(n_bins: int, epsilon: float | None = None, *, rho: float | None = None,
            noise: str | None = None, neighbours: str = "add_remove",
            public_total: bool | None = None, workloads: Iterable[str] = WORKLOADS,
            rows: Iterable[str] | None = None, opendp: bool | int = False,
            opendp_time_limit: float = 5.0, rng: int | np.random.Generator | None = 0,
            time_limit: float = 60.0) -> Comparison:
    """Exact mean and max per-query error of every registered row (or the keys in ``rows``)
    on ``workloads`` (a subset of ``("cdf", "identity", "all_range")``) over ``n_bins`` bins.

    At most MAX_COMPARE_BINS bins. Errors are computed on the normalised mechanisms and
    rescaled, so any budget whose errors are doubles works. ``time_limit``: seconds given to
    the front door (``optimize.best_mechanism``) per workload column. ``opendp``: False,
    True (up to 2000 trials) or a number of trials: also run OpenDP itself (Laplace,
    add/remove, N private only; needs the ``opendp`` package), stopping after
    ``opendp_time_limit`` seconds. Rows are sorted by the mean error of the first requested
    workload, then the next ones (unavailable rows last)."""
    K = n_bins
    if isinstance(K, (bool, np.bool_)) or not isinstance(K, (int, np.integer)) or K < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    check_bins(int(K), f"n_bins = {int(K)}")
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    neighbours = check_neighbours(neighbours)
    resolve_public(neighbours, public_total)
    which = tuple(workloads)
    if not which:
        raise ValueError("workloads: give at least one of " + ", ".join(WORKLOADS))
    for wl in which:
        if wl not in WORKLOADS:
            raise ValueError(f"unknown workload {wl!r}; choose from {', '.join(WORKLOADS)}")
    if (isinstance(time_limit, (bool, np.bool_)) or not isinstance(time_limit, (int, float))
            or not math.isfinite(time_limit) or time_limit <= 0):
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got "
                         f"{time_limit!r}")
    keys = ROWS.check_keys(rows)
    if rows is None:  # the "best" rows of the columns compared
        keys = [k for k in keys if not k.startswith("best_") or k[5:] not in WORKLOADS
                or k[5:] in which]
    setting = Setting(int(K), budget, noise, neighbours, public_total, which, float(time_limit))
    bounds, missing = lower_bounds(setting)
    cache: RowCache = {"families": ROWS.families(keys, _front_door_families(setting)[0])}
    out = run_rows(ROWS, keys, setting, bounds, cache)
    out.sort(key=lambda r: sort_key(r, which))
    notes = [bound_note(setting, missing)]
    run = None
    if opendp:
        run, note = _opendp_run(setting, opendp, opendp_time_limit, rng)
        if note:
            notes.append(note)
    return Comparison(setting, which, tuple(out), bounds, run, tuple(notes))

