"""The frontier (issue 14): the best mechanisms at scale, with certificates.

Run:  python benchmarks/bench_frontier.py [n ...]     (default 1024 4096 65536; add 1048576)

Part 1, the Gaussian optimum (rho-zCDP, add/remove, per unit sigma^2) as an implicit operator
(``strategies.gaussian_optimal_implicit``, MATH.md section 7 "route to scale"): for the prefix
(CDF) and all-range workloads, the certified primal value (the column-normalised strategy's
exact BLUE error) and the dual lower bound, mean per query, to a gap of 1e-3 and (n <= 2^16)
1e-6; iterations, wall time and peak traced memory. Then, on the prefix optimum, the exact
identity / all-range errors of its mechanism (a fresh strategy from the dual point: the first
error call computes all the moments, the others reuse them) and the BLUE of one release.

Part 2 (pure DP, issue 14 item 5): the best tree with optimal budgets and the non-tree rows
under Laplace. Tried so far: only trees (the optimal-budget search now also scores the finest
3-smooth trees: 118.23 / 412.71 / 758.44 at 2^10 / 2^16 / 2^20 against MATH.md's 119.0 /
414.5 / 760.9); Haar and the square-root factorisation are far worse under L1; p-Identity is
dense (256 bins). Part 3: budgets per node (not per level) on the binary tree, 256 bins,
dense: 66.69 against 70.77 for the per-level optimum (-5.8 %) and 69.73 for the best tree;
p-Identity reaches 54.56 there. Part 4: the same with f shared by the nodes of a level whose
indices end in the same 2 binary digits (68 parameters at 2^16), evaluated exactly at scale
through the bridge engine with per-row variances (``laminar_model_of``): 1024 bins 114.31
(dense twin 114.32); 2^16 415.07 -> 401.11 (2 digits, 68 parameters, 35 finite-difference
L-BFGS-B iterations, 376 s) and -> 393.55 (3 digits, 136 parameters, 42 iterations, 786 s):
below the best level-uniform tree (412.71) and below the issue's 400 at 2^16
(``python -c "import bench_frontier as b; b.digit_budgets_at_scale(2**16, 3, maxiter=150)"``
from benchmarks/; ``main`` runs the 2-digit, 30-iteration version).

Reference values (MATH.md section 7): 8.7348 (2^10), 11.4906 (2^12), 18.1759 (2^16); the
square-root factorisation 9.6708 / 19.6643 / 28.2753 (2^10 / 2^16 / 2^20); SVD bound 17.911
(2^16); Henzinger-Kalinin-Upadhyay's asymptotic bracket [26.150, 26.633] at 2^20.
"""

from __future__ import annotations

import sys

import numpy as np

from _bench import timed

from dptree_opt import Mechanism, blue, expected_error, workloads
from dptree_opt.bounds import svd_bound
from dptree_opt.strategies import ImplicitFactorization, gaussian_optimal_implicit
from dptree_opt.strategies.implicit_optimum import _gram_inverse


def optimum_table(ns):
    print("| workload | n | tol | iterations | time (s) | peak MiB | primal / query | "
          "dual / query | gap | SVD bound / query |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    best = {}
    for n in ns:
        for kind in ("prefix", "all_range"):
            w = getattr(workloads, kind)(n)
            q = w.n_queries
            for tol in ((1e-3, 1e-6) if n <= 1 << 16 else (1e-3,)):
                res, secs, mib = timed(gaussian_optimal_implicit, w, tol=tol)
                print(f"| {kind} | {n} | {tol:g} | {res.iterations} | {secs:.2f} | {mib:.0f} | "
                      f"{res.error / q:.6f} | {res.lower_bound / q:.6f} | {res.gap:.1e} | "
                      f"{svd_bound(w) / q:.4f} |", flush=True)
                if kind == "prefix":
                    best[n] = res
    return best


def strategy_table(best):
    print()
    print("| n | step | time (s) | peak MiB | value |")
    print("|---|---|---|---|---|")
    for n, res in best.items():
        # a fresh strategy at the optimum's dual point: nothing cached from the solver
        w = workloads.prefix(n)
        fresh, secs, mib = timed(ImplicitFactorization, *_gram_inverse(w),
                                 res.strategy.dual_point)
        print(f"| {n} | strategy from the dual point (diag(S), accurate quadrature) | "
              f"{secs:.3f} | {mib:.0f} | max column norm^2 {fresh.column_norms_squared.max():.12f} |",
              flush=True)
        mech, secs, mib = timed(Mechanism, fresh, rho=0.5, noise="gaussian",
                                neighbours="add_remove")
        print(f"| {n} | mechanism (exact add/remove L2 sensitivity) | {secs:.3f} | {mib:.0f} | "
              f"sigma^2 = {mech.variances[0]:.10f} |", flush=True)
        for kind in ("prefix", "identity", "all_range"):
            w = getattr(workloads, kind)(n)
            val, secs, mib = timed(expected_error, w, mech)  # the first call computes moments
            print(f"| {n} | exact error, {kind} (mean) | {secs:.3f} | {mib:.0f} | "
                  f"{val / w.n_queries:.6f} |", flush=True)
        y = mech.measure(np.random.default_rng(0).integers(0, 100, n), np.random.default_rng(1))
        _, secs, mib = timed(blue, mech, y)
        print(f"| {n} | BLUE of one release (A^-1 y) | {secs:.3f} | {mib:.0f} | |", flush=True)
        swap, secs, mib = timed(Mechanism, fresh, rho=0.5, noise="gaussian",
                                neighbours="swap")
        low, high = fresh.swap_bracket()
        print(f"| {n} | mechanism under swap (bracket [{low:.9f}, {high:.1f}]) | {secs:.3f} | "
              f"{mib:.0f} | CDF mean {expected_error(workloads.prefix(n), swap) / n:.4f} |",
              flush=True)


def laplace_table(ns):
    """Part 2 (issue 14 item 5, pure DP): what stands at each size, eps = 1, add/remove, mean
    per prefix. The best tree is compare's "best_blue_optimal" row (the exact search with
    optimal BLUE budgets up to 4096 bins, its pool extended by the finest 3-smooth trees;
    above, the finest trees of K and of the 3-smooth K' <= 2K), also on the real bins with
    the padding as known zeros (its design's mechanism); non-tree rows: Haar, the square-root
    factorisation, HDMM's p-Identity (dense: 256 bins here)."""
    from dptree_opt import compare, optimize
    print()
    print("| n | best tree (optimal budgets) | on the real bins | Haar | sqrt factorisation | "
          "p-Identity | l1 SVD bound | time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in ns:
        rows = ["best_blue_optimal", "haar", "sqrt_factorization"] + (
            ["optimized"] if n <= 256 else [])
        res, secs, _ = timed(compare.compare, n, 1.0, neighbours="add_remove", rows=rows,
                             workloads=("cdf",))
        r = {row.key: row for row in res.rows}

        def mean(key):
            row = r.get(key)
            return f"{row.errors['cdf'].mean:.2f}" if row and row.available else "n/a"

        real = "-"
        if n <= 4096:
            d = optimize.level_uniform(n, 1.0, neighbours="add_remove", estimator="blue",
                                       budgets="optimal", top=0)
            real = f"{expected_error(workloads.prefix(n), d.mechanism()) / n:.2f}"
        print(f"| {n} | {mean('best_blue_optimal')} ({r['best_blue_optimal'].strategy}) | {real} "
              f"| {mean('haar')} | {mean('sqrt_factorization')} | {mean('optimized')} | "
              f"{res.bounds['cdf']:.2f} | {secs:.1f} |", flush=True)


def per_node_budgets_study(n: int = 256, eps: float = 1.0):
    """Part 3 (issue 14 item 5, an attempt): the binary tree with a budget per NODE instead of
    per level, Laplace, add/remove, BLUE, CDF. Every root-to-leaf path must sum to eps; the
    parametrisation b_r = R_r f_r, R_child = R_r (1 - f_r), R_root = eps, f_leaf = 1 makes that
    exact. Dense GLS (n <= ~512): E = tr(G C), C = (A' P A)^-1, P = diag(b^2 / 2);
    dE/db_r = -b_r a_r' C G C a_r, chained to f through the tree; L-BFGS-B from the
    per-level optimum (optimize.optimal_blue_budgets). Prints both errors."""
    import scipy.optimize as so

    from dptree_opt import optimize, strategies
    h = n.bit_length() - 1
    tree = strategies.binary_tree(n)
    A = tree.matrix.toarray()
    parent, depth = tree.parent, tree.depth
    m = A.shape[0]
    G = workloads.prefix(n).gram_dense()
    leaf = depth == h

    def budgets(f):
        R = np.empty(m)
        R[0] = eps
        for lev in range(1, h + 1):  # level order: parents first
            sl = tree.level_slice(lev)
            R[sl] = R[parent[sl]] * (1.0 - f[parent[sl]])
        return R * f, R

    def error_grad(f):
        f = np.where(leaf, 1.0, f)
        b, R = budgets(f)
        C = np.linalg.inv(A.T @ ((b * b / 2.0)[:, None] * A))
        g = -b * np.einsum("ri,ij,rj->r", A, C @ G @ C, A)
        sub = g * b
        for lev in range(h, 0, -1):  # subtree sums of g_s b_s, bottom-up per level
            sl = tree.level_slice(lev)
            np.add.at(sub, parent[sl], sub[sl])
        df = np.where(leaf, 0.0, g * R - (sub - g * b) / np.where(leaf, 1.0, 1.0 - f))
        return float(np.sum(G * C)), df

    level = optimize.optimal_blue_budgets([2] * h, eps, neighbours="add_remove")
    bl = np.asarray(level.budgets)
    rem = eps - np.concatenate([[0.0], np.cumsum(bl)[:-1]])
    f0 = np.clip(np.where(rem > 0, bl / np.maximum(rem, 1e-300), 1.0)[depth], 1e-5, 1 - 1e-5)
    e0, _ = error_grad(f0)
    res, secs, _ = timed(so.minimize, lambda f: tuple(v / e0 for v in error_grad(f)), f0,
                         jac=True, method="L-BFGS-B", bounds=[(1e-5, 1 - 1e-5)] * m,
                         options={"maxiter": 2000})
    print()
    print(f"per-node budgets on the binary tree over {n} bins (Laplace eps = {eps:g}, "
          f"add/remove, BLUE, mean per prefix): per-level optimum {level.error / n:.3f}, "
          f"per-node {res.fun * e0 / n:.3f} ({res.nit} L-BFGS-B iterations, {secs:.1f} s)",
          flush=True)
    # families a scalable optimiser could use: f shared by the nodes of a level with the same
    # last binary digits of their index (sibling side; sibling and parent's side)
    idx = np.arange(m) - ((1 << depth) - 1)
    for name, grp in (("level + side", 2 * depth + idx % 2),
                      ("level + side + parent's side", 4 * depth + idx % 4)):
        ng = int(grp.max()) + 1
        count = np.maximum(np.bincount(grp, None, ng), 1)

        def grouped(z, grp=grp, ng=ng):
            e, g = error_grad(z[grp])
            return e / e0, np.bincount(grp, g, ng) / e0

        z0 = np.clip(np.bincount(grp, f0, ng) / count, 1e-5, 1 - 1e-5)
        r = so.minimize(grouped, z0, jac=True, method="L-BFGS-B", bounds=[(1e-5, 1 - 1e-5)] * ng,
                        options={"maxiter": 2000})
        print(f"  {name}: {ng} parameters, {r.fun * e0 / n:.3f}", flush=True)


def digit_budgets_at_scale(n: int = 1 << 16, digits: int = 2, eps: float = 1.0,
                           maxiter: int = 30):
    """Part 4: the digit-grouped per-node budgets of part 3 at scale, exact errors without a
    matrix: the binary tree's nodes of a level share f when the last ``digits`` binary digits
    of their index agree ((h + 1) 2^digits parameters); b = R f down the tree (every
    root-to-leaf path sums to eps exactly: Laplace, add/remove, unit sensitivity per node);
    per-row variances 2 / b^2 into the bridge engine (``laminar_model_of``, O(n) per
    evaluation); L-BFGS-B on logit(f) with finite differences, from the per-level optimum."""
    import scipy.optimize as so
    from scipy.special import expit, logit

    from dptree_opt import optimize, strategies
    from dptree_opt.estimation.laminar import laminar_model_of, point_moments
    h = n.bit_length() - 1
    tree = strategies.truncated_tree(n, (2,) * h)
    depth = np.asarray(tree.depth)
    idx = np.arange(tree.n_rows) - ((1 << depth) - 1)
    G = 1 << digits
    grp = depth * G + idx % G
    ng = (h + 1) * G
    leaf = depth == h
    parent = np.asarray(tree.parent)
    starts = np.concatenate([[0], np.cumsum(1 << np.arange(h + 1))])

    def mean_error(z):
        f = np.where(leaf, 1.0, expit(z)[grp])
        R = np.empty(tree.n_rows)
        R[0] = eps
        for lev in range(1, h + 1):
            sl = slice(starts[lev], starts[lev + 1])
            R[sl] = R[parent[sl]] * (1.0 - f[parent[sl]])
        b = R * f
        var = np.where(b > 0, 2.0 / np.maximum(b, 1e-300) ** 2, np.inf)
        return float(point_moments(laminar_model_of(tree, var)).var[1:].sum()) / n

    level = optimize.optimal_blue_budgets([2] * h, eps, neighbours="add_remove")
    bl = np.asarray(level.budgets)
    rem = eps - np.concatenate([[0.0], np.cumsum(bl)[:-1]])
    fl = np.clip(np.where(rem > 0, bl / np.maximum(rem, 1e-300), 1.0), 1e-4, 1 - 1e-4)
    z0 = np.repeat(logit(fl), G)
    e0 = mean_error(z0)
    res, secs, _ = timed(so.minimize, lambda z: mean_error(z) / e0, z0, method="L-BFGS-B",
                         options={"maxiter": maxiter, "eps": 1e-5})
    print(f"digit-grouped per-node budgets, binary tree over {n} bins, {ng} parameters: "
          f"start (per-level optimum, clipped) {e0:.3f} -> {res.fun * e0:.3f} "
          f"({res.nit} iterations, {secs:.0f} s)", flush=True)
    return res.fun * e0


def main(ns):
    best = optimum_table(ns)
    strategy_table(best)
    per_node_budgets_study()
    digit_budgets_at_scale()
    laplace_table([n for n in [256] + list(ns) if n <= 1 << 20])


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1024, 4096, 65536])
