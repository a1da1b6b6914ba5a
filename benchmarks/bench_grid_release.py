"""Benchmark of a private 2-D release (issue 15 item 5): records binned on a grid, the
hierarchy search, OpenDP's noise per level tuple, the Kronecker BLUE and the consistency.

Prints one markdown row per (grid, noise): the hierarchy chosen, its rows, the time split
(``GridRelease.timings``: read and bin, prepare, noise, estimation, consistency; the design
is the rest of the total, cached per process) and the exact expected errors.
Usage: ``python benchmarks/bench_grid_release.py [--n 1000000] [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dptree_opt.data_release import release


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10**6, help="records (default 10^6)")
    ap.add_argument("--quick", action="store_true", help="64 x 64 and 256 x 256 only")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(5, 2, args.n).clip(0, 9.999),
                         rng.uniform(0, 10, args.n)])
    grids = [(64, 64), (256, 256)] if args.quick else [(64, 64), (256, 256), (1024, 1024)]
    print("| grid | budget | hierarchy | rows | total s | design s | noise s | BLUE s | "
          "consistency s | RMS cell | RMS box | RMS CDF |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in grids:
        for budget in ({"epsilon": 1.0}, {"rho": 0.5}):
            t0 = time.perf_counter()
            r = release(x, lower=(0, 0), upper=(10, 10), bins=shape, **budget)
            total = time.perf_counter() - t0
            t = r.timings
            design = total - sum(t.values())
            e = r.expected_error
            name = ", ".join(f"{k}={v:g}" for k, v in budget.items())
            print(f"| {shape[0]}x{shape[1]} | {name} | {[list(b) for b in r.branchings]} | "
                  f"{r.mechanism.released.n_rows} | {total:.1f} | {design:.1f} | "
                  f"{t['noise']:.1f} | {t['estimation']:.2f} | {t['consistency']:.2f} | "
                  f"{np.sqrt(e['cell_mse']):.3g} | {np.sqrt(e['mean_box_mse']):.3g} | "
                  f"{np.sqrt(e['mean_cdf_mse']):.3g} |", flush=True)


if __name__ == "__main__":
    main()
