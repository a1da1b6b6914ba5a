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
small points only (CDF 2^10, brackets).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import dptree_opt as dp  # noqa: E402  (after the thread settings)
from dptree_opt.optimize import best_mechanism  # noqa: E402

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


def main(argv) -> int:
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
