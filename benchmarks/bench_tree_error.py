"""Benchmark dptree_opt.tree_error.blue_error: time and peak memory at large K.

Runs the prefix and identity workloads, total and per-query, for equal-branching trees
k = 2 and k = 16 at K = 2^16, 2^20, 2^24 (equal variances, root noised). Time is the best of
``REPEATS`` runs (time.perf_counter); peak memory is the tracemalloc peak of one separate run
(numpy reports its buffers to tracemalloc). Usage: python benchmarks/bench_tree_error.py
"""

from __future__ import annotations

import time
import tracemalloc

from dptree_opt.tree_error import blue_error

REPEATS = 3
LOG2_K = (16, 20, 24)
BRANCHING = (2, 16)
CASES = (("prefix", False), ("prefix", True), ("identity", False), ("identity", True))


def best_time(fn) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def peak_bytes(fn) -> int:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> None:
    header = ("K", "k", "h", "workload", "output", "time [ms]", "peak [MB]")
    print("{:>9} {:>3} {:>3} {:>9} {:>9} {:>10} {:>10}".format(*header))
    for log2_k in LOG2_K:
        for k in BRANCHING:
            h = {2: log2_k, 16: log2_k // 4}[k]
            branching = [k] * h
            variances = [1.0] * (h + 1)
            for workload, per_query in CASES:
                def run():
                    return blue_error(branching, variances, workload, per_query=per_query)

                seconds = best_time(run)
                peak = peak_bytes(run)
                print(
                    f"{2**log2_k:>9} {k:>3} {h:>3} {workload:>9} "
                    f"{'per-query' if per_query else 'total':>9} "
                    f"{1e3 * seconds:>10.3f} {peak / 2**20:>10.1f}"
                )


if __name__ == "__main__":
    main()
