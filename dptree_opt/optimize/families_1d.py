"""The 1-D families of ``optimize.best_mechanism`` (its docstring describes each): one
``*_applies`` check (None or why not) and one ``*_family`` builder per family."""

from __future__ import annotations

from functools import partial


from ..limits import at_budget
from ..mechanism import Mechanism, row_sensitivities
from ..strategies import (Strategy, blt,
                          gaussian_optimal_implicit, haar, histogram, kron,
                          sqrt_factorization, tree)
from ..strategies.optimized import laplace_p_identity
from ..strategies.p_identity_sparse import hat_support, laplace_p_identity_hats
from ..workloads import KroneckerWorkload, StackedWorkload
from .beyond_trees import (GAUSSIAN_DENSE_ITERATIONS, dense_optimum_seconds,
                           optimized_strategy)
from .blue_budgets import optimal_blue_budgets
from .direct import MAX_DIRECT_ENTRIES, direct_rows
from .factorisations import factorisations_by_height
from .levels import level_variances, noisy_levels
from .nested_design import optimal_nested
from .node_budgets import optimal_node_budgets
from .search import MAX_WORKLOAD_SEARCH_TREES, finest_refinement, level_uniform
from .family import (Candidate, GAUSSIAN_DENSE_MAX_ITER, GAUSSIAN_DENSE_SHARE, IMPLICIT_SHARE,
                     IMPLICIT_TOL, MAX_DENSE_BINS, MAX_GAUSSIAN_DENSE_BINS,
                     HATS_DENSE_FACTOR, HATS_ITERATION_FIT, HATS_MAX_ITERATIONS, HATS_MIN_BINS,
                     HATS_MIN_ITERATIONS, HATS_SHARE, MAX_HATS_BINS, MIN_SECONDS,
                     MAX_OPTIMAL_SEARCH_BINS, MAX_P_IDENTITY_BINS, NESTED_MAX_FANOUT,
                     NESTED_MIN_BINS, NESTED_SHARE, NODE_BUDGETS_SHARE, Problem,
                     RANGE_SCORE_SECONDS, TREE_SCORE_SECONDS, shape_of, too_slow,
                     tree_design_candidate)



# --------------------------------------------------------------------------- families
# Each family is ``applies(problem) -> None | reason`` (cheap checks: workload, noise, size)
# and ``build(problem) -> [candidates] | reason`` (the work; a reason only for time).
def anywhere(p: Problem) -> None:
    return None


def one_d(p: Problem) -> str | None:
    return None if p.one_d else "1-D workloads only"


def one_d_tree(p: Problem) -> str | None:
    if not p.one_d:
        return "1-D workloads only (grids: grid_kron_trees, grid_quadtree)"
    if p.n < 2:
        return "a tree needs at least 2 bins"
    return None


def histogram_family(p: Problem) -> list[Candidate]:
    return [Candidate(p.mechanism(histogram(shape_of(p.workload))), "every bin measured once "
                       "(strategies.histogram)")]


def direct_applies(p: Problem) -> str | None:
    w = p.workload
    if w.n_queries > p.n:
        return (f"more queries ({w.n_queries}) than bins ({p.n}): measuring every query "
                "costs more than a strategy over the bins")
    if p.one_d and w.kind == "identity":
        return "the workload's rows are the bins: the same mechanism as 'histogram'"
    if isinstance(w, StackedWorkload) and (w.n_queries * p.n > MAX_DIRECT_ENTRIES
                                           or p.n > MAX_DENSE_BINS):
        return (f"a stacked workload is measured as a dense matrix, up to {MAX_DENSE_BINS} "
                f"cells (got {p.n})")
    return None


def direct_family(p: Problem) -> list[Candidate] | str:
    w = p.workload
    strat: Strategy | str
    if p.one_d:
        strat = direct_rows(w, "workload rows", MAX_DENSE_BINS)
    elif isinstance(w, KroneckerWorkload):
        parts = [direct_rows(f, f"{f.kind} rows", MAX_DENSE_BINS) for f in w.factors]
        why = [x for x in parts if isinstance(x, str)]
        strat = why[0] if why else kron(*[x for x in parts if isinstance(x, Strategy)],
                                        name="workload rows")
    else:
        strat = Strategy(w.dense(), name="workload rows")
    if isinstance(strat, str):
        return strat
    return [Candidate(p.mechanism(strat), "the workload's own rows measured directly "
                       "(distinct rows, one noise scale)")]


def _equal_leaf_variance(p: Problem, h: int) -> float:
    """The leaves' noise variance of a height-h tree (every factor >= 2: their level
    sensitivities are those of (2, .., 2)) with the budget split equally over its noisy
    levels (``optimize.levels``, Mechanism's calibration)."""
    m = len(noisy_levels(h, p.neighbours))
    return float(level_variances((2,) * h, (p.budget / m,) * m, noise=p.noise,
                                 neighbours=p.neighbours)[-1])


def _identity_heights(p: Problem, flat_error: float) -> int:
    """The tallest height an unpadded equal-budget tree can have and still beat the flat
    tree (K) on the identity workload: a height-h tree has error >= (K / 2) v_h, v_h its
    leaf variance (docs/math.md section 4), so heights where that exceeds ``flat_error``
    are not searched."""
    tallest = len(finest_refinement((p.n,)))
    return max([1] + [h for h in range(2, tallest + 1)
                      if p.n / 2 * _equal_leaf_variance(p, h) <= flat_error * (1 + 1e-9)])


def tree_equal_family(p: Problem) -> list[Candidate] | str:
    w = p.workload
    search = partial(level_uniform, p.n, p.epsilon, rho=p.rho, estimator="blue",
                     neighbours=p.neighbours, budgets="equal", top=0)
    if w.kind in ("prefix", "all_range"):
        d = search(workload=w.kind)
        return [tree_design_candidate(p, d, "optimize.level_uniform, BLUE, equal budgets")]
    # identity, total, custom ranges: unpadded trees scored exactly, one by one
    if w.kind == "identity":
        flat = search(workload=w, allow_padding=False, height=1)
        h = _identity_heights(p, flat.error)
        d = flat if h == 1 else search(workload=w, allow_padding=False, max_height=h)
        return [tree_design_candidate(p, d, f"optimize.level_uniform, BLUE, equal budgets, "
                                       f"every tree of height <= {h} (a taller one has "
                                       f"error >= (K / 2) x its leaf variance, above the "
                                       f"flat tree's)")]
    by_height = factorisations_by_height(p.n)
    total = sum(by_height.values())
    if total <= MAX_WORKLOAD_SEARCH_TREES:
        d = search(workload=w, allow_padding=False)
        return [tree_design_candidate(p, d, "optimize.level_uniform, BLUE, equal budgets, "
                                       f"all {total} trees")]
    h, count = 0, 0
    while h + 1 in by_height and count + by_height[h + 1] <= MAX_WORKLOAD_SEARCH_TREES:
        h += 1
        count += by_height[h]
    slow = too_slow(count * (TREE_SCORE_SECONDS + w.n_queries * RANGE_SCORE_SECONDS), p)
    if slow:
        return slow
    d = search(workload=w, allow_padding=False, max_height=h)
    return [tree_design_candidate(p, d, f"optimize.level_uniform, BLUE, equal budgets, not "
                                   f"exhaustive: the {count} trees of height <= {h} of "
                                   f"{total} (scored one by one, up to "
                                   f"{MAX_WORKLOAD_SEARCH_TREES})")]


def tree_optimal_applies(p: Problem) -> str | None:
    if p.one_d and p.workload.kind not in ("prefix", "all_range", "identity"):
        return ("optimal per-level budgets are computed for the prefix, all-range and "
                "identity workloads only")
    return one_d_tree(p)


def tree_optimal_family(p: Problem) -> list[Candidate]:
    w = p.workload
    if w.kind == "identity":
        # no tree with any per-level budgets beats the histogram (docs/math.md section 4),
        # which is the finest tree with every budget on its leaves
        d = optimal_blue_budgets(finest_refinement((p.n,)), p.budget, noise=p.noise,
                                 neighbours=p.neighbours, workload="identity")
        return [tree_design_candidate(p, d, "optimize.optimal_blue_budgets on the finest tree "
                                       "(identity: no level-uniform tree with any budgets "
                                       "beats the histogram)")]
    if p.n <= MAX_OPTIMAL_SEARCH_BINS:
        d = level_uniform(p.n, p.epsilon, rho=p.rho, estimator="blue",
                          neighbours=p.neighbours, budgets="optimal", workload=w.kind, top=0)
        return [tree_design_candidate(p, d, "optimize.level_uniform, BLUE, optimal budgets")]
    # larger K: optimal budgets on the best equal-budget tree's finest
    # refinement and on the finest tree of K (with optimal budgets a refinement never loses)
    eq = level_uniform(p.n, p.epsilon, rho=p.rho, estimator="blue", neighbours=p.neighbours,
                       budgets="equal", top=0, workload=w.kind)
    out = []
    for ks in sorted({finest_refinement((p.n,)), finest_refinement(eq.branching)}):
        d = optimal_blue_budgets(ks, p.budget, noise=p.noise, neighbours=p.neighbours,
                                 workload=w.kind, n_queries=p.n)
        out.append(tree_design_candidate(p, d, "optimize.optimal_blue_budgets on a finest tree"))
    return out


def node_budgets_applies(p: Problem) -> str | None:
    if not p.participation.is_single and p.noise != "laplace":
        return ("budgets per node under a participation schema: Laplace noise only (the l1 "
                "loss adds over a pattern's root-to-leaf paths)")
    if p.one_d and p.workload.kind != "prefix":
        return "budgets per node are optimised for the CDF (prefix workload) only"
    return one_d_tree(p)


def node_budgets_family(p: Problem) -> list[Candidate]:
    """Budgets per node on the finest tree. Under a participation schema (Laplace): the
    optimum for one participation at eps / k' (k' the most participations a pattern holds),
    each node's scale kept: a pattern crosses at most k' root-to-leaf paths, each summing
    to eps / k' in 1 / scale, so the l1 loss is at most eps (docs/math.md section 11)."""
    ks = finest_refinement((p.n,))
    k = p.participation.max_participations(p.n)
    budget = p.budget / k if p.noise == "laplace" else p.budget
    res = optimal_node_budgets(ks, budget if p.epsilon is not None else None, rho=p.rho,
                               neighbours=p.neighbours, time_limit=p.share(NODE_BUDGETS_SHARE))
    how = (f"optimize.optimal_node_budgets on the finest tree {list(ks)}: {res.iterations} "
           f"L-BFGS-B iterations from the optimal per-level budgets ({res.start_mean:.6g} per "
           "prefix)")
    if p.participation.is_single:
        return [Candidate(res.mechanism(), how)]
    strat = tree(p.n, ks)
    own = row_sensitivities(strat, p.neighbours, p.participation)
    mech = Mechanism(strat, epsilon=p.epsilon, neighbours=p.neighbours,
                     row_budgets=res.budgets * own, participation=p.participation)
    return [Candidate(mech, f"{how}; optimised for one participation at eps / {k}, each "
                      f"node's scale kept under {p.participation.describe()}")]


def haar_applies(p: Problem) -> str | None:
    if p.one_d and p.n & (p.n - 1) and p.n > MAX_DENSE_BINS:
        return (f"K = {p.n} is not a power of two: the Haar strategy is then a plain matrix, "
                f"scored densely up to {MAX_DENSE_BINS} bins")
    return one_d(p)


def haar_family(p: Problem) -> list[Candidate]:
    return [Candidate(p.mechanism(haar(p.n)), "Privelet's Haar wavelet (strategies.haar)")]


def sqrt_family(p: Problem) -> list[Candidate]:
    return [Candidate(p.mechanism(sqrt_factorization(p.n)),
                       "square-root factorisation of the prefix matrix "
                       "(strategies.sqrt_factorization)")]


def blt_family(p: Problem) -> list[Candidate]:
    """BLT optimised for the mean prefix error; under a participation schema with Gaussian
    noise, for the loss under the schema (``strategies.blt(..., participation=)``)."""
    part = p.participation
    if part.is_single or p.noise != "gaussian" or p.workload.kind != "prefix":
        s = blt(p.n)
        return [Candidate(p.mechanism(s), f"buffered linear Toeplitz, {s.buffers} buffers "
                          "optimised for the mean prefix error (strategies.blt)")]
    s = blt(p.n, participation=part)
    return [Candidate(p.mechanism(s), f"buffered linear Toeplitz, {s.buffers} buffers "
                      f"optimised for the mean loss under {part.describe()} (strategies.blt)")]


def gaussian_optimum_applies(p: Problem) -> str | None:
    if p.noise != "gaussian":
        return "Gaussian noise only (rho)"
    if not p.one_d or p.workload.kind not in ("prefix", "all_range", "identity"):
        return "1-D prefix, all-range and identity workloads only (a tridiagonal G^-1)"
    return None


def gaussian_optimum_family(p: Problem) -> list[Candidate]:
    res = gaussian_optimal_implicit(p.workload, tol=IMPLICIT_TOL,
                                    time_limit=p.share(IMPLICIT_SHARE))
    method = f"strategies.gaussian_optimal_implicit: {res.method}"
    if p.neighbours != "add_remove":
        return [Candidate(p.mechanism(res.strategy), method + " (optimal for add/remove "
                           "neighbours; no certificate under swap)")]
    # the dual value at unit sensitivity and sigma^2 = 1 (rho = 1/2), restated at rho
    return [Candidate(p.mechanism(res.strategy), method, float(at_budget(
        res.lower_bound / 2.0, "gaussian", p.budget)), "dual of the Gaussian optimum, certified")]


def dense_optimum_applies(p: Problem) -> str | None:
    if not p.one_d:
        return "1-D workloads only (grids: kron_p_identity, kron_gaussian_optimum)"
    if p.noise == "gaussian":
        if p.workload.kind in ("prefix", "all_range", "identity"):
            return "the implicit optimum (gaussian_optimum) solves the same problem at any size"
        if p.n > MAX_GAUSSIAN_DENSE_BINS:
            return (f"dense: a dense eigendecomposition per iteration, up to "
                    f"{MAX_GAUSSIAN_DENSE_BINS} bins (got {p.n})")
    elif p.n > MAX_P_IDENTITY_BINS:
        return (f"dense: HDMM's p-Identity is optimised up to {MAX_P_IDENTITY_BINS} bins "
                f"(got {p.n}; its cost is cubic in K)")
    return None


def dense_optimum_family(p: Problem) -> list[Candidate] | str:
    slow = too_slow(dense_optimum_seconds(p.noise, p.n), p)
    if slow:
        return slow
    if p.noise == "gaussian":   # as many iterations as its share of the time left allows
        per = dense_optimum_seconds("gaussian", p.n, iterations=1)
        max_iter = int(min(GAUSSIAN_DENSE_MAX_ITER, max(
            GAUSSIAN_DENSE_ITERATIONS, p.share(GAUSSIAN_DENSE_SHARE) // per)))
        res = optimized_strategy(p.workload, p.noise, neighbours=p.neighbours,
                                 max_iter=max_iter)
    else:
        res = optimized_strategy(p.workload, p.noise, neighbours=p.neighbours)
    method = f"optimize.optimized_strategy: {res.method}"
    if p.noise == "gaussian" and p.neighbours == "add_remove" and res.lower_bound:
        return [Candidate(p.mechanism(res.strategy), method, float(at_budget(
            res.lower_bound / 2.0, "gaussian", p.budget)),
            "dual of the Gaussian optimum, certified")]
    return [Candidate(p.mechanism(res.strategy), method)]




def hats_applies(p: Problem) -> str | None:
    if not p.one_d or p.workload.kind not in ("prefix", "all_range"):
        return ("p-Identity from multi-scale hats is measured on the CDF and all ranges "
                "(prefix and all_range workloads) only")
    if p.noise != "laplace" or not p.participation.is_single:
        return "p-Identity from multi-scale hats: Laplace noise, one participation"
    if not HATS_MIN_BINS <= p.n <= MAX_HATS_BINS:
        return (f"p-Identity from multi-scale hats runs on {HATS_MIN_BINS}..{MAX_HATS_BINS} "
                f"bins (got {p.n}; the candidate is scored by the dense GLS; "
                "strategies.p_identity_sparse.laplace_p_identity_hats itself runs to 2^15)")
    return None


def hats_family(p: Problem) -> list[Candidate] | str:
    """HDMM's p-Identity from the multi-scale hats: up to MAX_P_IDENTITY_BINS bins the dense
    optimiser (``strategies.optimized.laplace_p_identity(starts=0, hats=True)``), above on the
    widened hats' support (``strategies.p_identity_sparse.laplace_p_identity_hats``; the
    restriction costs 0.7 % at 512 bins, nothing measurable at 1024), as many L-BFGS-B
    iterations as its share of the time left allows (at most HATS_MAX_ITERATIONS)."""
    rows, _, _ = hat_support(p.n)
    m, nnz = int(rows.max()) + 1, rows.size
    a, b, c, d = HATS_ITERATION_FIT
    dense = p.n <= MAX_P_IDENTITY_BINS   # no support restriction where dense is cheap
    per = (a + b * m**3 + c * m * nnz + d * p.n * m) * (HATS_DENSE_FACTOR if dense else 1.0)
    final = dense_optimum_seconds("laplace", p.n) / 50.0  # one dense solve (fit of 2 starts)
    budget = p.share(HATS_SHARE) - final
    its = int(min(HATS_MAX_ITERATIONS, budget // per)) if budget > 0 else 0
    if its < HATS_MIN_ITERATIONS:
        return (f"time limit: {HATS_MIN_ITERATIONS} iterations need about "
                f"{HATS_MIN_ITERATIONS * per + final:.3g} s (one core), its share is "
                f"{max(budget + final, 0.0):.3g} s")
    limit = max(budget, MIN_SECONDS)
    res = (laplace_p_identity(p.workload, starts=0, hats=True, max_iter=its, time_limit=limit)
           if dense else laplace_p_identity_hats(p.workload, max_iter=its, time_limit=limit))
    q = p.workload.n_queries
    how = ("strategies.optimized.laplace_p_identity(hats=True)" if dense else
           "strategies.p_identity_sparse.laplace_p_identity_hats")
    return [Candidate(p.mechanism(res.strategy), f"{how}: {res.method}, "
                      f"{res.iterations} iterations ({res.start_error / q:.6g} -> "
                      f"{res.error / q:.6g} per query)")]


def nested_plan(n: int, top: int = NESTED_MAX_FANOUT) -> tuple[int, ...] | None:
    """Fan-outs (root first) of the nested family over n bins: the largest divisor <= top at
    each depth (2^16: 256 x 256; 2^20: 256 x 256 x 16), None when a prime factor of n
    exceeds ``top`` or n < 4."""
    out, rest = [], n
    while rest > 1:
        k = next((d for d in range(min(top, rest), 1, -1) if rest % d == 0), None)
        if k is None or (k == rest and rest > top):
            return None
        out.append(k)
        rest //= k
    return tuple(out) if len(out) >= 2 or (out and n >= 4) else None


def nested_applies(p: Problem) -> str | None:
    if not p.one_d or p.workload.kind != "prefix":
        return "nested strategies are optimised for the CDF (prefix workload) only"
    if p.noise != "laplace" or p.neighbours != "add_remove" or not p.participation.is_single:
        return ("nested strategies are optimised for Laplace noise, add/remove neighbours, one "
                "participation")
    if p.n <= NESTED_MIN_BINS:
        return (f"K <= {NESTED_MIN_BINS}: the dense optimum (dense_optimum) and the full l1 "
                "optimum (optimize.l1_local) cover small domains")
    if nested_plan(p.n) is None:
        return (f"K = {p.n} has a prime factor above {NESTED_MAX_FANOUT} (the nested "
                "family needs K = a product of fan-outs)")
    return None


def nested_family(p: Problem) -> list[Candidate]:
    """Nested strategies (docs/math.md section 12) optimised for the mean prefix error:
    local matrices and budgets per depth by ``optimize.optimal_nested`` from the full l1
    optima of each fan-out (``optimize.l1_local``), within a share of the time left."""
    ks = nested_plan(p.n)
    assert ks is not None and p.epsilon is not None
    d = optimal_nested(ks, epsilon=p.epsilon, starts=("l1_local",),
                       max_seconds=p.share(NESTED_SHARE))
    return [Candidate(d.mechanism(), f"optimize.optimal_nested: {d.method}")]
