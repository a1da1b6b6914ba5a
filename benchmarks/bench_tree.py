"""Benchmark the tree fast paths at scale (issue 3): time and peak memory.

For K = 2^16, 2^20, 2^24 and branching k = 2, 16 (equal budgets, add/remove, root noised,
so every node has the same variance and the BLUE is OpenDP's OLS):

* mechanism construction;
* ``tree_estimates`` (Honaker's recursions, all three passes) on one noisy tree;
* the exact BLUE error of the CDF workload, total and per query (``expected_error``), and
  the per-query identity error;
* if ``opendp`` is importable: OpenDP's ``make_consistent_b_ary_tree`` on the same (rounded)
  tree, its agreement with our leaves, and the time ratio. The list conversion OpenDP needs
  is timed separately and not charged to it.

Time is the best of ``--repeats`` runs (time.perf_counter); peak memory is the tracemalloc
peak of one separate run (numpy reports its buffers to tracemalloc).

Usage: python benchmarks/bench_tree.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

import dptree_opt as dp
from dptree_opt import strategies, workloads


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def peak_mb(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def opendp_postprocessor(k: int):
    try:
        import opendp.prelude as odp
    except ImportError:
        return None
    odp.enable_features("contrib")
    return odp.t.make_consistent_b_ary_tree(branching_factor=k, TIA=int, TOA=float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only K = 2^16 and 2^20")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = (16, 20) if args.quick else (16, 20, 24)
    rows = []
    for log2_k in sizes:
        for k in (2, 16):
            n = 2**log2_k
            t0 = time.perf_counter()
            mech = dp.Mechanism(strategies.tree(n, k), epsilon=1.0, neighbours="add_remove")
            t_mech = time.perf_counter() - t0
            rng = np.random.default_rng(0)
            y = np.round(mech.measure(rng.poisson(10, n), rng))
            cdf, ident = workloads.prefix(n), workloads.identity(n)

            def estimates():
                return dp.tree_estimates(mech, y)

            def err_total():
                return dp.expected_error(cdf, mech)

            def err_per_query():
                return dp.expected_error(cdf, mech, per_query=True)

            def err_identity():
                return dp.expected_error(ident, mech, per_query=True)

            row = {
                "K": f"2^{log2_k}", "k": k, "mechanism s": t_mech,
                "tree_estimates s": best_time(estimates, args.repeats),
                "tree_estimates MB": peak_mb(estimates),
                "cdf error s": best_time(err_total, args.repeats),
                "cdf per-query s": best_time(err_per_query, args.repeats),
                "cdf per-query MB": peak_mb(err_per_query),
                "identity per-query s": best_time(err_identity, args.repeats),
            }
            post = opendp_postprocessor(k)
            if post is not None:
                t0 = time.perf_counter()
                as_list = y.astype(np.int64).tolist()
                row["opendp list s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                leaves = np.asarray(post(as_list))
                row["opendp s"] = time.perf_counter() - t0
                ours = estimates().efficient[-n:]
                row["max |diff|"] = float(np.abs(leaves - ours).max())
                row["opendp / ours"] = row["opendp s"] / row["tree_estimates s"]
            rows.append(row)
            print(" ".join(f"{key}={val:.4g}" if isinstance(val, float) else f"{key}={val}"
                           for key, val in row.items()), flush=True)
    keys = list(dict.fromkeys(key for row in rows for key in row))
    print("\n| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        cells = [f"{row[k]:.3g}" if isinstance(row.get(k), float) else str(row.get(k, ""))
                 for k in keys]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
