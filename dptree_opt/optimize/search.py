"""The best level-uniform tree for a workload: the public tree searches ([RTS] Sec. V;
docs/math.md section 4).

:func:`level_uniform` enumerates the ordered factorisations k_1..k_h of K (and, with padding,
of K' in (K, max_padding K], the extra bins being empty), scores every tree by the exact
expected squared error of the first K prefix counts (the CDF) or of all ranges within the K
bins for the chosen estimator, and returns the best tree with a ranked table of runners-up.
The exact branch and bound is :mod:`dptree_opt.optimize.tree_search`; the closed-form level
sums it scores with are :mod:`dptree_opt.engines.tree_sums`; :func:`design_error` scores one
given tree with the same sums. Identity and custom-range workloads are enumerated tree by tree
(:data:`MAX_WORKLOAD_SEARCH_TREES`).

The ranked table lists each subtree (k_2..k_h) once, with its smallest admissible padding (a
larger top factor over the same subtree is never better and is not listed).

Budgets: "optimal" for the covering estimator is exact ([RTS] Thm IV.2(a) generalised, inside
the branch and bound). For the refined estimator (scipy SLSQP over the simplex on the O(h^3)
closed form) and the BLUE (``optimize.optimal_blue_budgets``) the budgets are optimised for a
candidate pool, the best ``pool`` trees of the exhaustive equal-budget search: a heuristic
restriction, not an exhaustive search over trees. For the BLUE the pool also holds each pool
tree's finest refinement and K's own prime factorisation: with optimal budgets a refinement
never hurts (the coarse tree is the refinement with its inserted levels unfunded), so for
K = 2^m the binary tree is found; and the finest trees of the 3-smooth K' = 2^a 3^b within
the padding. With Gaussian noise and few candidate K' (at most MAX_EXHAUSTIVE_FINEST_TREES
finest trees in all, K <= ~400) every finest tree of every K' is optimised: the answer is then
the global optimum over all trees (tested against brute force over every ordered
factorisation). Else, and always for Laplace (non-convex per tree), the search is heuristic
across padded K' and ``method`` states a certified lower bound on every mechanism instead (the
dual of the Gaussian optimum, or the SVD bound).

Large K with the refined estimator: the refined error is about 1.2-1.4x the BLUE's, so many
trees pass the BLUE bound (K = 2^16: ~4 x 10^5); after ``max_refined`` of them the search
scores the ``refined_pool`` best trees by the BLUE error instead and reports in ``method``
whether the table is certified exact or an optimality-gap bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from ..bounds import error_lower_bound
from ..engines.tree_error import blue_error, blue_haar_variances, blue_range_variances
from ..engines.tree_sums import blue_level_sums, covering_level_sums, refined_prefix_error
from ..limits import (MAX_SEARCH_BINS, SEARCH_BYTES_PER_BIN, at_budget, check_count,
                      check_memory)
from ..privacy import check_budget, check_noise, infer_noise, resolve_budget
from ..strategies import gaussian_optimal_implicit
from ..strategies.base import check_neighbours
from ..validation import check_bool, check_choice, check_int, check_real
from ..workloads import Workload, all_range, identity, prefix
from .blue_budgets import optimal_blue_budgets
from .factorisations import (distinct_orders, factorisations_by_height, finest_refinement,
                             iter_factorisations, max_padded, smooth_finest_trees)
from .levels import level_variances, noisy_levels, resolve_public
from .result import TreeDesign, at_total_budget, error_unit
from .tree_search import (BranchAndBound, Branching, Budgets, RankedTable, Ranked,
                          SearchSetting, TooManyTrees, covering_score, refined_equal_error)

__all__ = ["level_uniform", "design_error", "finest_refinement", "ESTIMATORS", "BUDGETS",
           "MAX_WORKLOAD_SEARCH_TREES", "MAX_EXHAUSTIVE_FINEST_TREES"]

ESTIMATORS = ("covering", "refined", "blue")
BUDGETS = ("equal", "optimal")


def design_error(n_bins: int, branching: Iterable[float],
                 budgets: Iterable[float] | None = None, *,
                 estimator: str = "blue", noise: str = "laplace",
                 neighbours: str = "add_remove", public_total: bool | None = None,
                 total_budget: float = 1.0) -> float:
    """Exact error (counts^2) of the first ``n_bins`` prefixes of a (possibly padded) tree,
    as scored by :func:`level_uniform` (the closed forms of ``engines.tree_sums``).

    Defaults as :func:`level_uniform`'s (BLUE, add/remove with N private); pass
    ``estimator="covering", neighbours="swap"`` for [RTS]'s setting. ``budgets``: one per
    noisy level; default the equal split of ``total_budget``. Scored
    at unit total budget and restated (``limits.at_budget``: exact; ValueError when the
    error is not a double)."""
    try:
        ks = tuple(int(k) for k in branching)
    except (TypeError, ValueError):
        raise ValueError(f"branching must be a sequence of integers, got {branching!r}") \
            from None
    noise = check_noise(noise)

    b: Budgets | None = None
    if budgets is None:
        total = check_budget(total_budget, "total_budget")
    else:
        try:
            given = np.asarray(tuple(float(x) for x in budgets), dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"budgets must be a sequence of numbers, one per noisy level, "
                             f"got {budgets!r}") from None
        total = float(given.sum()) if np.all(np.isfinite(given)) and given.sum() > 0 else 1.0

        b = tuple(given / total)
    s = SearchSetting(int(n_bins), 1.0, noise, check_neighbours(neighbours),
                      resolve_public(neighbours, public_total), estimator, "equal")
    h = len(ks)
    b = s.equal_budgets(h) if b is None else b
    v = level_variances(ks, b, noise=noise, neighbours=neighbours, public_total=public_total)
    if estimator == "covering":
        F = covering_level_sums(ks, s.K)
        err = float(sum(v[l] * F[l] for l in range(h + 1) if F[l]))
    elif estimator == "refined":
        err = refined_prefix_error(ks, v, s.K)
    elif estimator == "blue":
        mu = blue_haar_variances(ks, v)
        err = float(np.dot(mu, blue_level_sums(ks, s.K)))
    else:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return at_budget(err, noise, total)


# ------------------------------------------------ identity and custom ranges: exhaustive
MAX_WORKLOAD_SEARCH_TREES = 20000  # trees scored one by one for identity / custom ranges


def _resolve_workload(workload: str | Workload | None, K: int) -> str | Workload:
    """"prefix" / "all_range" (the branch and bound), or a Workload (identity, ranges: the
    exhaustive search); "identity" as a string means workloads.identity(K)."""
    if workload is None:
        return "prefix"
    if isinstance(workload, Workload):
        if workload.n_bins != K:
            raise ValueError(f"workload has {workload.n_bins} bins, n_bins is {K}")
        if workload.kind in ("prefix", "all_range"):
            return workload.kind
        if workload.kind in ("identity", "ranges", "total"):
            return workload
        raise ValueError(f"unsupported workload kind {workload.kind!r}")
    if workload in ("prefix", "all_range"):
        return workload
    if workload == "identity":
        return identity(K)
    raise ValueError(f"workload must be None, 'prefix', 'all_range', 'identity' or a "
                     f"Workload (e.g. workloads.ranges(K, ...)), got {workload!r}")


def _workload_search(K: int, budget: float, noise: str, neighbours: str, public: bool,
                     estimator: str, budgets: str, workload: Workload, allow_padding: bool,
                     max_padding: float, max_height: int | None, height: int | None,
                     top: int) -> TreeDesign:
    """The best level-uniform tree for the BLUE of an identity / custom-ranges workload over
    the first K bins, equal budgets: every ordered factorisation of every K' in
    [K, max_padding K] (or K' = K) scored exactly (``engines.tree_error.blue_error`` per bin,
    ``blue_range_variances`` per range, O(h) each); refused above
    MAX_WORKLOAD_SEARCH_TREES trees."""
    if estimator != "blue":
        raise ValueError(f"identity / custom-range workloads are searched for estimator='blue' "
                         f"only, got {estimator!r}")
    if budgets != "equal":
        raise ValueError("identity / custom-range workloads are searched with budgets='equal' "
                         "only so far")
    t0 = time.perf_counter()
    # each K' adds at least one tree: beyond K + MAX_WORKLOAD_SEARCH_TREES the limit is hit
    top_kp = (int(math.floor(min(max_padding * K, K + MAX_WORKLOAD_SEARCH_TREES + 1)))
              if allow_padding else K)
    shapes: list[Branching] = []
    count = 0
    tallest = height if max_height is None else max_height   # (height <= max_height)
    for kp in range(K, top_kp + 1):
        # counted by height before any tree of K' is listed
        count += sum(c for h, c in factorisations_by_height(kp).items()
                     if (height is None or h == height) and (tallest is None or h <= tallest))
        if count > MAX_WORKLOAD_SEARCH_TREES:
            raise ValueError(
                f"the identity / custom-range search scores trees one by one: more than "
                f"{MAX_WORKLOAD_SEARCH_TREES} trees for n_bins={K} (lower max_padding "
                "or max_height, or allow_padding=False)")
        shapes += [ks for ks in iter_factorisations(kp, tallest)
                   if height is None or len(ks) == height]
    if not shapes:
        raise ValueError(f"no level-uniform tree with factors >= 2 fits n_bins={K} with the "
                         "given height / padding constraints")
    lo, hi = workload.intervals()
    scored: list[tuple[float, int, Branching, Budgets]] = []
    for ks in shapes:
        n_noisy = len(noisy_levels(len(ks), neighbours, public))
        b = (budget / n_noisy,) * n_noisy
        v = level_variances(ks, b, noise=noise, neighbours=neighbours, public_total=public)
        if workload.kind == "identity":
            err = float(blue_error(ks, v, "identity", per_query=True)[:K].sum())
        else:
            err = float(blue_range_variances(ks, v, lo, hi).sum())
        scored.append((err, len(ks), ks, b))
    scored.sort(key=lambda x: (x[0], x[1], x[2]))
    secs = time.perf_counter() - t0
    span = f"K' <= {max_padding:g} K" if allow_padding else "K' = K"
    method = (f"exhaustive enumeration of {len(shapes)} trees ({span}), {workload.kind} "
              f"workload, {secs:.2g} s")
    unit = error_unit(K, budget, noise)

    def design(err: float, ks: Branching, b: Budgets) -> TreeDesign:
        return TreeDesign(K, ks, b, err, err / unit, estimator, noise, neighbours, public, method)

    best = scored[0]
    alts = tuple(design(e, ks, b) for e, _, ks, b in scored[1:top + 1])
    return replace(design(best[0], best[2], best[3]), alternatives=alts)


# --------------------------------------------------------------------------- public API
def _design(s: SearchSetting, ks: tuple, error: float, budgets: tuple, method: str) -> TreeDesign:
    return TreeDesign(n_bins=s.K, branching=tuple(int(k) for k in ks),
                      budgets=tuple(float(b) for b in budgets), error=float(error),
                      normalised_error=float(error) / error_unit(s.K, s.budget, s.noise),
                      estimator=s.estimator, noise=s.noise, neighbours=s.neighbours,
                      public_total=s.public, method=method)


def level_uniform(n_bins: int, epsilon: float | None = None, *, rho: float | None = None,
                  estimator: str = "blue", noise: str | None = None,
                  neighbours: str = "add_remove", public_total: bool | None = None,
                  allow_padding: bool = True, max_padding: float = 2.0,
                  budgets: str | None = None, max_height: int | None = None,
                  height: int | None = None, top: int = 10, pool: int = 24,
                  max_refined: int = 5000, refined_pool: int = 500,
                  workload: str | Workload | None = None) -> TreeDesign:
    """The best level-uniform tree for the CDF of ``n_bins`` bins, by exact integer search
    ([RTS] Sec. V, Thm V.1-V.2, Cor. V.1-V.2, Lemma V.2; the search: ``optimize.tree_search``);
    with ``workload="all_range"`` and the BLUE, for all ranges within the K bins.

    Parameters
    ----------
    n_bins : K >= 2, the number of bins (the CDF workload is the first K prefix counts).
    epsilon / rho : the total budget (``epsilon`` for Laplace noise, ``rho`` for Gaussian).
    estimator : "blue" (default: the best linear unbiased estimator, Honaker's on trees),
        "covering" ([RTS] direct sums) or "refined" ([RTS] App. B).
    noise, neighbours, public_total : as for ``Mechanism`` (default add/remove with N
        private; swap: N public, [RTS]'s setting; noise defaults to Gaussian when only
        ``rho`` is given).
    allow_padding : also consider trees over K' in (K, max_padding K] (the extra bins empty);
        the reported error is that of the first K prefixes. A ``max_padding`` above 2 finds
        nothing more: every tree over K' >= 2K has a better one over K' < 2K (the smallest
        padding of its subtree, ``optimize.tree_search`` item 1).
    budgets : "optimal" (per tree: Thm IV.2(a) generalised for the covering estimator,
        numerical for the others; see the module docstring for what is exhaustive) or
        "equal" (the equal split over the noisy levels, [RTS]'s setting). Default None:
        "optimal", except for identity / custom-range workloads (searched with "equal"
        only).
    max_height : the largest height considered (default: all, up to log2(max_padding K)).
    height : search this height only (e.g. for [RTS] Thm V.1).
    top : how many runners-up to return in ``.alternatives`` (ranked, best first).
    pool : budgets="optimal" with the refined/BLUE estimator: how many of the best
        equal-budget trees get their budgets optimised.
    max_refined, refined_pool : the refined estimator's search scores the refined error
        (O(h^3) each) of every tree whose BLUE error (a lower bound) can enter the table; if
        that exceeds ``max_refined`` trees (large K: the refined error is ~1.3x the BLUE's),
        it scores the ``refined_pool`` best trees by the BLUE error instead, and ``method``
        says whether the table is certified (every other tree has BLUE error, hence refined
        error, above it) or gives the optimality gap bound.
    workload : None or "prefix" (the CDF: the first K prefix counts) or "all_range" (the
        K (K + 1) / 2 ranges within the K bins; estimator="blue" only so far), or
        "identity" / a ``Workload`` over the K bins (``workloads.identity``, ``ranges``,
        ``total``; BLUE, equal budgets: every tree scored exactly, up to
        MAX_WORKLOAD_SEARCH_TREES trees). For all
        ranges the BLUE error is sum_j q_j mu_j with the closed-form level weights
        ``engines.tree_error.all_range_level_weight`` (padding included), and the same branch and
        bound applies: the smallest padding of a subtree is best (q_1 = Q_1 / w_1 - 1'G1 / K'
        grows with K' faster than the root term falls), and non-top levels are bounded
        below by (d - 1) u K^2 / 48 per S (``BranchAndBound`` in ``optimize.tree_search``).

    Returns
    -------
    TreeDesign: the best tree (``branching`` may multiply to a padded K'), its budgets (one
    per noisy level), its exact error (counts^2) and ``normalised_error = error / c``;
    ``alternatives`` = the next ``top`` trees, ranked. ``method`` records the search.

    Limits: n_bins <= ``limits.MAX_SEARCH_BINS`` (2^26: about a minute); the search runs at
    unit budget and is restated at the given one (``result.at_total_budget``: exact), so a
    budget is refused only when the errors are not doubles.
    """
    K = check_int(n_bins, "n_bins", 2)
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    neighbours = check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    check_choice(estimator, "estimator", ESTIMATORS)
    if budgets is not None:
        check_choice(budgets, "budgets", BUDGETS)
    allow_padding = check_bool(allow_padding, "allow_padding")
    max_padding = check_real(max_padding, "max_padding", at_least=1)
    max_height = check_int(max_height, "max_height", 1, none=True)
    height = check_int(height, "height", 1, none=True)
    if height is not None:
        if 2**height > (max_padding * K if allow_padding else K):
            raise ValueError(f"height={height} is impossible: a tree of that height has at "
                             f"least 2^{height} bins")
    top = check_int(top, "top", 0)
    pool = check_int(pool, "pool", 1)
    check_count(K, MAX_SEARCH_BINS, f"n_bins = {K}",
                "the search takes minutes beyond it; use fewer bins")
    check_memory(K * SEARCH_BYTES_PER_BIN, f"the tree search over {K} bins", "use fewer bins")
    workload = _resolve_workload(workload, K)
    if budgets is None:   # the default: optimal wherever it is searched
        budgets = "optimal" if isinstance(workload, str) else "equal"
    if not isinstance(workload, str):  # identity / custom ranges: exhaustive enumeration
        return at_total_budget(_workload_search(
            K, 1.0, noise, neighbours, public, estimator, budgets, workload,
            bool(allow_padding), float(max_padding), max_height, height, top), budget)
    if workload == "all_range" and estimator != "blue":
        raise ValueError("workload='all_range' is searched for estimator='blue' only (the "
                         f"covering and refined searches are for the CDF), got {estimator!r}")
    max_refined = check_int(max_refined, "max_refined", 0)
    refined_pool = check_int(refined_pool, "refined_pool", 1)
    if max_height is not None and height is not None and height > max_height:
        raise ValueError(f"height={height} exceeds max_height={max_height}")

    t0 = time.perf_counter()
    # searched at unit budget, then restated at ``budget`` (at_total_budget: exact)
    s = SearchSetting(K, 1.0, noise, neighbours, public, estimator, budgets, workload)
    numerical = budgets == "optimal" and estimator != "covering"
    search_s = replace(s, budgets="equal") if numerical else s
    search_s.__post_init__()
    size = top + 1
    if numerical:
        size = max(size, pool)
    table = RankedTable(size)
    def engine(setting: SearchSetting, into: RankedTable) -> BranchAndBound:
        return BranchAndBound(setting, into, allow_padding=bool(allow_padding),
                              max_padding=float(max_padding), max_height=max_height,
                              height=height)

    eng = engine(search_s, table)
    span = f"K' <= {max_padding:g} K" if allow_padding else "K' = K"
    certificate = ""
    if estimator == "refined":
        eng.max_scored = max_refined
    ranked: list[Ranked]
    try:
        eng.run()
        ranked = table.ranked()
        how = f"exhaustive branch and bound ({span}; {eng.leaves} trees reached)"
    except TooManyTrees:
        # Fallback: the best `refined_pool` trees by the BLUE (exhaustive B&B), refined scored.
        # Unscored trees have refined >= BLUE >= the pool's BLUE bar: a certificate / a gap.
        blue_s = replace(search_s, estimator="blue")
        blue_s.__post_init__()
        btable = RankedTable(max(refined_pool, size))
        beng = engine(blue_s, btable)
        beng.run()
        pool_trees = btable.ranked()
        bar = btable.theta
        rescored: list[Ranked] = [(refined_equal_error(search_s, ks), ks, None)
                                  for _, ks, _ in pool_trees]
        ranked = sorted(rescored, key=lambda x: (x[0], len(x[1]), x[1]))[:size]
        nth = ranked[min(len(ranked), size) - 1][0]
        if nth <= bar:
            certificate = "certified exact"
        else:
            gap = ranked[0][0] / bar - 1.0 if ranked[0][0] > bar else 0.0
            certificate = (f"NOT certified: trees outside the pool have refined error >= "
                           f"{bar:.6g}; the best is within {100 * gap:.3g}% of optimal")
        how = (f"refined error of the {len(pool_trees)} best trees by the BLUE error "
               f"(exhaustive BLUE branch and bound, {span}); {certificate}")
    if not ranked:
        raise ValueError(f"no level-uniform tree with factors >= 2 fits n_bins={K} with the "
                         f"given height / padding constraints")
    if numerical:
        designs, exhaustive = _optimise_pool(s, ranked, eng, pool, top)
        how = (f"budgets optimised for {len(designs)} trees (the best equal-budget trees, "
               f"their finest refinements, the finest 3-smooth trees"
               + (", and every finest tree of every K': the global optimum over all trees, "
                  "since a refinement never loses with optimal budgets" if exhaustive else "")
               + f") from: {how}")
    else:
        designs = [(score, ks, extra) for score, ks, extra in ranked]
    out = []
    for score, ks, extra in designs:
        if estimator == "covering" or numerical:
            assert extra is not None  # both searches give every tree its budgets
            b = extra
        else:
            b = s.equal_budgets(len(ks))
        out.append(_design(s, ks, score, b, ""))
    out.sort(key=lambda d: (d.error, d.height, d.branching))
    out = out[: top + 1]
    if numerical:  # the pool is not exhaustive: certify against every mechanism instead
        how += "; " + _bound_certificate(s, out[0].error, budget)
    secs = time.perf_counter() - t0
    if workload != "prefix":
        how = f"workload {workload}: {how}"
    method = f"{how}; {secs:.3g} s"
    return at_total_budget(replace(out[0], method=method, alternatives=tuple(
        replace(d, method=how) for d in out[1:])), budget)


def _refined_optimal_budgets(s: SearchSetting, ks: Branching) -> tuple[float, Budgets]:
    """Budgets minimising the refined error of one tree: scipy SLSQP over the simplex
    (sum = B, b >= 0) on the closed form, from the equal split and the covering optimum."""
    h = len(ks)
    n = s.n_noisy(h)
    B = s.budget

    f0 = refined_prefix_error(ks, s.variances(h, s.equal_budgets(h)), s.K)

    def f(x: npt.NDArray[np.float64]) -> float:
        # relative to the equal split, so that SLSQP's tolerances are meaningful
        b = np.maximum(x, 0.0) * B
        return refined_prefix_error(ks, s.variances(h, b), s.K) / f0

    starts = [np.full(n, 1.0 / n)]
    cov = covering_score(replace(s, estimator="covering", budgets="optimal"), ks)[1]
    starts.append(np.asarray(cov) / B)
    best_x, best_f = starts[0], f(starts[0])
    def total_one(x: npt.NDArray[np.float64]) -> float:
        return float(x.sum() - 1.0)

    for x0 in starts:
        res = minimize(f, x0, method="SLSQP", bounds=[(0.0, 1.0)] * n,
                       constraints=[{"type": "eq", "fun": total_one}],
                       options={"ftol": 1e-12, "maxiter": 500})
        x = np.maximum(res.x, 0.0)
        x /= x.sum()
        fx = f(x)
        if np.isfinite(fx) and fx < best_f:
            best_x, best_f = x, fx
    return float(best_f * f0), tuple(float(v) for v in best_x * B)


def _bound_certificate(s: SearchSetting, error: float, budget: float) -> str:
    """'certified within X of any mechanism': the SVD lower bound on the error of every
    mechanism (tree or not) for the workload (``bounds.error_lower_bound``; exactly what
    the best tree can at most lose against the best tree, and more), from the setting's
    budget and ``error`` at it, the bound stated at the total ``budget``."""
    wl = prefix(s.K) if s.workload == "prefix" else all_range(s.K)
    laplace = s.noise == "laplace"
    lb = error_lower_bound(wl, noise=s.noise, neighbours=s.neighbours, public_total=s.public,
                           epsilon=s.budget if laplace else None,
                           rho=None if laplace else s.budget)
    kind = "l1 SVD bound, loose" if s.noise == "laplace" else "SVD bound"
    if s.noise == "gaussian" and s.neighbours == "add_remove" and not s.public:
        # the dual of the Gaussian optimum (docs/math.md section 7): a bound at every iterate,
        # per unit sigma^2 at unit column norm, i.e. times 1 / (2 rho)
        dual = gaussian_optimal_implicit(wl, tol=1e-2, max_iter=40, time_limit=5.0)
        if dual.lower_bound / (2.0 * s.budget) > lb:
            lb, kind = dual.lower_bound / (2.0 * s.budget), "dual of the Gaussian optimum"
    try:
        shown = f"{at_budget(lb, s.noise, budget):.6g}"  # lb at unit budget (s)
    except ValueError:  # the bound alone is not a double at this budget
        shown = f"{lb:.6g} at {'epsilon' if s.noise == 'laplace' else 'rho'} = {s.budget:g}"
    return (f"certified: no mechanism has error below {shown} ({kind}), so this tree is "
            f"within a factor {error / lb:.4g} of the best tree")


# budgets="optimal" with the BLUE and Gaussian noise (each tree's optimum exact, PAVA): when
# the padded K' have at most this many finest trees in all (distinct orders of their prime
# factors; K <= ~400), all of them are optimised: the search is then exhaustive over every
# tree (a refinement never loses with optimal budgets) and its answer the global optimum.
# Not for Laplace: each tree's budgets are a non-convex multistart search (~30 ms a tree)
MAX_EXHAUSTIVE_FINEST_TREES = 3000


def _all_finest_trees(s: SearchSetting, eng: BranchAndBound) -> list[Branching] | None:
    """All finest trees (prime factors in every distinct order) of every K' the search may
    use ([K, max_padding K] with padding, else K) whose height is allowed; None when there
    are more than MAX_EXHAUSTIVE_FINEST_TREES."""
    hi = max_padded(s.K, eng.max_pad) if eng.pad else s.K
    out: list[Branching] = []
    total = 0
    for kp in range(max(s.K, 2), hi + 1):
        f = eng.div.factor(kp)
        n = math.factorial(sum(f.values()))
        for e in f.values():
            n //= math.factorial(e)
        total += n
        if total > MAX_EXHAUSTIVE_FINEST_TREES:
            return None
        out += [ks for ks in distinct_orders(f) if len(ks) in eng.heights]
    return out


def _optimise_pool(s: SearchSetting, ranked: list[Ranked], eng: BranchAndBound, pool: int,
                   top: int) -> tuple[list[Ranked], bool]:
    """Optimal budgets for each tree of the pool (the best equal-budget trees); with the BLUE
    for every finest tree when there are few (exhaustive). Returns (designs, exhaustive)."""
    out: list[Ranked] = []
    exhaustive = False

    if s.estimator == "blue":
        # with optimal budgets a refinement never hurts (a coarse tree is its refinement with
        # the inserted levels unfunded), so each pool tree's finest refinement joins the pool
        candidates = dict.fromkeys(ks for _, ks, _ in ranked[:pool])
        candidates.update(dict.fromkeys(finest_refinement(ks) for ks in list(candidates)))
        if s.K > 1:  # and the finest unpadded tree: K's prime factorisation
            candidates.setdefault(finest_refinement((s.K,)), None)
        # and the finest trees over the 3-smooth K' = 2^a 3^b within the padding: tall trees
        # with optimal budgets often win (K = 5000, rho = 0.1: binary over 8192) but rank low
        # with equal budgets (many levels share the budget)
        for ks in smooth_finest_trees(s.K, eng.max_pad if eng.pad else 1.0):
            if len(ks) in eng.heights:
                candidates.setdefault(ks, None)
        # Gaussian only: Laplace budgets are a non-convex multistart search (~30 ms a tree)
        finest = _all_finest_trees(s, eng) if s.noise == "gaussian" else None
        if finest is not None:
            exhaustive = True
            candidates.update(dict.fromkeys(finest))
        for ks in candidates:
            d = optimal_blue_budgets(ks, s.budget, noise=s.noise, neighbours=s.neighbours,
                                     public_total=s.public, workload=s.workload, n_queries=s.K)
            out.append((d.error, ks, d.budgets))
    else:
        for _, ks, _ in ranked[:pool]:
            err, b = _refined_optimal_budgets(s, ks)
            out.append((err, ks, b))
    return out, exhaustive