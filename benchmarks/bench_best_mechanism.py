"""``optimize.best_mechanism`` at the reference points of the best-mechanism front door.

Plain script: ``python benchmarks/bench_best_mechanism.py`` (a few minutes). For each point
it prints the mean expected squared error per query (total / number of queries, counts^2,
add/remove neighbours, BLUE), the family that won, the certified gap when there is one, and
the wall time, next to the target:

====================================  =========================  ==========
point                                 target (mean per query)    time
====================================  =========================  ==========
CDF 2^16, Gaussian, rho = 1/2         <= 18.20, with a gap       <= 30 s
CDF 2^16, Laplace, eps = 1            <= 400                     <= 120 s
CDF 2^10, Laplace, eps = 1            <= 91.3
all ranges, 4096 bins, Laplace eps 1  <= 260.87
2-D CDF 256 x 256, Laplace, eps = 1   <= 1490
20 brackets of 5 on 100 bins, eps 0.5 8.0 (2 / 0.5^2, direct)
====================================  =========================  ==========

rho = 1/2 is sigma = 1 per unit l2 sensitivity (Gaussian variance D^2 / (2 rho)), so the
Gaussian numbers are "per unit sigma^2". BLAS runs on one thread (set below, before numpy
loads): the machine's two cores are shared, and a multi-threaded BLAS on a loaded machine
slowed the dense p-Identity 30-fold in our measurements. Optional argument ``--quick``: the
small points only (CDF 2^10, brackets). ``--dense-times``: instead, the time model of the
``dense_optimum`` family (``optimize.beyond_trees.dense_optimum_seconds``) beside the
measured CPU time (optimiser and exact scoring) at 64, 256, 512 and 1024 bins: Laplace (HDMM's
p-Identity on the CDF) and Gaussian (the dense optimum on K random ranges plus the K bins,
seed 0; the prediction for the default iteration count and for the iterations it took).
"""

from __future__ import annotations

import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import dptree_opt as dp  # noqa: E402  (after the thread settings)
from dptree_opt.optimize import best_mechanism  # noqa: E402
from dptree_opt.optimize.beyond_trees import (  # noqa: E402
    clear_cache, dense_optimum_seconds, optimized_strategy)

from _bench import timed  # noqa: E402

BRACKETS = [(5 * i, 5 * i + 4) for i in range(20)]

# (label, workload, budget keywords, best_mechanism keywords, target mean, target seconds)
POINTS = [
    ("CDF 2^16, Gaussian, rho = 1/2", lambda: dp.workloads.prefix(2**16), {"rho": 0.5},
     {"time_limit": 30.0}, 18.20, 30.0),
    ("CDF 2^16, Laplace, eps = 1", lambda: dp.workloads.prefix(2**16), {"epsilon": 1.0},
     {"time_limit": 120.0}, 400.0, 120.0),
    ("CDF 2^10, Laplace, eps = 1", lambda: dp.workloads.prefix(2**10), {"epsilon": 1.0},
     {"time_limit": 60.0}, 91.3, None),
    ("all ranges, 4096 bins, Laplace, eps = 1", lambda: dp.workloads.all_range(4096),
     {"epsilon": 1.0}, {"time_limit": 60.0}, 260.87, None),
    ("2-D CDF 256 x 256, Laplace, eps = 1", lambda: dp.workloads.prefix((256, 256)),
     {"epsilon": 1.0}, {"time_limit": 60.0}, 1490.0, None),
    ("20 brackets of 5 bins on 100, Laplace, eps = 0.5",
     lambda: dp.workloads.ranges(100, BRACKETS), {"epsilon": 0.5}, {"time_limit": 60.0},
     8.0, None),
]
QUICK = {"CDF 2^10, Laplace, eps = 1", "20 brackets of 5 bins on 100, Laplace, eps = 0.5"}


def _random_ranges(n: int):
    """n random ranges (seed 0) plus the n bins (full column rank)."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, n, n), rng.integers(0, n, n)
    iv = list(zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist()))
    return dp.workloads.ranges(n, iv + [(i, i) for i in range(n)])


def dense_times() -> int:
    """The dense_optimum time model against CPU seconds measured on this machine."""
    print("| noise | workload | K | predicted s | measured s | ratio | iterations | "
          "predicted at those iterations |")
    print("|---|---|---|---|---|---|---|---|")
    for noise, name, make in (("laplace", "CDF", dp.workloads.prefix),
                              ("gaussian", "K random ranges + bins", _random_ranges)):
        budget = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
        for n in (64, 256, 512, 1024):
            w = make(n)
            clear_cache()
            c0 = time.process_time()
            res = optimized_strategy(w, noise)
            dp.expected_error(w, dp.Mechanism(res.strategy, **budget))
            secs = time.process_time() - c0
            pred = dense_optimum_seconds(noise, n)
            at = ("" if noise == "laplace" else
                  f"{dense_optimum_seconds(noise, n, res.iterations):.3g}")
            print(f"| {noise} | {name} | {n} | {pred:.3g} | {secs:.3g} | {secs / pred:.2f} | "
                  f"{res.iterations} | {at} |", flush=True)
    return 0


def main(argv) -> int:
    if "--dense-times" in argv:
        return dense_times()
    quick = "--quick" in argv
    print("| point | mean/query | target | family | gap | seconds | target s | ok |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for label, make, budget, kw, target, target_s in POINTS:
        if quick and label not in QUICK:
            continue
        d, secs, _ = timed(best_mechanism, make(), **budget, **kw)
        ok = d.mean <= target * (1 + 1e-9) and (target_s is None or secs <= target_s)
        failed += not ok
        gap = "n/a" if d.gap is None else f"{d.gap:.2e} ({d.bound_method.split(' (')[0]})"
        print(f"| {label} | {d.mean:.6g} | <= {target:g} | {d.family} | {gap} | {secs:.1f} | "
              f"{'' if target_s is None else f'<= {target_s:g}'} | {'yes' if ok else 'NO'} |")
        runners = ", ".join(f"{a.family} {a.mean:.4g}" for a in d.alternatives[:4])
        print(f"|  | runners-up: {runners} |  |  |  |  |  |  |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
