"""Beyond trees (issue 8): optimiser cost and the strategy table for the prefix workload.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/bench_strategies.py [n ...]   (default 256 1024 4096)

1. Time and peak Python-heap memory (tracemalloc; numpy buffers are traced, LAPACK
   workspaces are not) of each optimiser: the Gaussian dual fixed point (gap tolerance 1e-5)
   and the Laplace p-Identity (p = n/16, 2 starts, L-BFGS-B <= 500 iterations each).
2. Mean per-prefix error (counts^2) of every strategy with the exact BLUE, under
   add/remove neighbours and a private N (MATH.md section 6): Gaussian per unit sigma^2
   (rho = 1/2 zCDP; sensitivity-normalised) and Laplace eps = 1, each with its ratio to the
   SVD bound (Laplace: the loose l1 analogue 2 * SVD bound / eps^2).
"""

from __future__ import annotations

import sys
import time

from _bench import timed

from dptree_opt import Mechanism, bounds, expected_error, workloads
from dptree_opt import strategies as S
from dptree_opt.optimize import beyond_trees as B


def unit_error(w, strat, noise):
    budget = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    mech = Mechanism(strat, noise=noise, neighbours="add_remove", **budget)
    return expected_error(w, mech) / w.n_bins


def main(ns):
    print("## Optimisers (prefix workload)")
    print("| n | optimiser | time (s) | peak traced MiB | iterations | result (mean/prefix) "
          "| start | note |")
    print("|---|---|---|---|---|---|---|---|")
    opts = {}
    for n in ns:
        w = workloads.prefix(n)
        g, secs, mib = timed(B.optimized_strategy, w, "gaussian")
        print(f"| {n} | Gaussian fixed point | {secs:.1f} | {mib:.0f} | {g.iterations} | "
              f"{g.error / n:.4f} | {g.start_error / n:.4f} | gap {g.gap:.1e} |", flush=True)
        lap, secs, mib = timed(B.optimized_strategy, w, "laplace")
        print(f"| {n} | Laplace p-Identity + tree fallback | {secs:.1f} | {mib:.0f} | "
              f"{lap.iterations} | {lap.error / n:.2f} | {lap.start_error / n:.2f} | "
              f"{lap.method.split(';')[0][:60]} |", flush=True)
        opts[n] = (g, lap)

    print("\n## Mean per-prefix error, add/remove, N private (ratio to the SVD bound)")
    print("| strategy | " + " | ".join(f"n={n} Gaussian (ratio) | n={n} Laplace eps=1 (ratio)"
                                       for n in ns) + " |")
    print("|---|" + "---|---|" * len(ns))
    rows = {}
    for n in ns:
        w = workloads.prefix(n)
        bg = bounds.error_lower_bound(w, noise="gaussian", rho=0.5) / n
        bl = bounds.error_lower_bound(w, noise="laplace", epsilon=1.0) / n
        g, lap = opts[n]
        tree_g = B.best_tree(w, "gaussian")
        tree_l = B.best_tree(w, "laplace")
        cands = [
            ("histogram", S.histogram(n), S.histogram(n)),
            ("prefix sums", S.prefix_sums(n), S.prefix_sums(n)),
            ("binary tree", S.binary_tree(n), S.binary_tree(n)),
            (f"best level-uniform tree (G: {tree_g[1].name}, L: {tree_l[1].name})",
             tree_g[1], tree_l[1]),
            ("haar (Privelet)", S.haar(n), S.haar(n)),
            ("sqrt factorisation", S.sqrt_factorization(n), S.sqrt_factorization(n)),
            ("optimal Gaussian (fixed point)", g.strategy, g.strategy),
            (f"p-Identity (Laplace opt.{' -> tree' if 'fallback' in lap.method else ''})",
             lap.strategy, lap.strategy),
        ]
        for name, sg, sl in cands:
            t0 = time.perf_counter()
            eg = unit_error(w, sg, "gaussian")
            el = unit_error(w, sl, "laplace")
            key = name.split(" (G:")[0]
            rows.setdefault(key, []).append(f"{eg:.3f} ({eg / bg:.3f}) | {el:.2f} ({el / bl:.2f})")
            print(f"  [n={n} {name}: {time.perf_counter() - t0:.1f} s]", file=sys.stderr,
                  flush=True)
        rows.setdefault("SVD lower bound", []).append(f"{bg:.3f} (1) | {bl:.2f} (1, loose)")
    for key, cells in rows.items():
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [256, 1024, 4096])
