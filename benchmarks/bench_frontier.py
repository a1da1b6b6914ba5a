"""The frontier (issue 14): the best mechanisms at scale, with certificates.

Run:  python benchmarks/bench_frontier.py [n ...]     (default 1024 4096 65536; add 1048576)

Part 1, the Gaussian optimum (rho-zCDP, add/remove, per unit sigma^2) as an implicit operator
(``strategies.gaussian_optimal_implicit``, MATH.md section 7 "route to scale"): for the prefix
(CDF) and all-range workloads, the certified primal value (the column-normalised strategy's
exact BLUE error) and the dual lower bound, mean per query, to a gap of 1e-3 and (n <= 2^16)
1e-6; iterations, wall time and peak traced memory. Then, on the prefix optimum, the exact
identity / all-range errors of its mechanism (a fresh strategy from the dual point: the first
error call computes all the moments, the others reuse them) and the BLUE of one release.

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


def main(ns):
    best = optimum_table(ns)
    strategy_table(best)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1024, 4096, 65536])
