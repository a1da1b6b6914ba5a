"""Benchmark of a private release: 10^7 values into 2^16 bins, from memory and from a CSV.

Reports the time split (read + binning, tree design, secure noise, estimation, consistency,
quantiles) of ``dptree_opt.release`` / ``release_file`` and the CSV read throughput.
Usage: ``python benchmarks/bench_release.py [--n 10000000] [--bins 65536] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from dptree_opt.data_release import BinSpec, release, release_file
from dptree_opt.data_release.io import histogram_from_file


def _write_csv(path: str, x: np.ndarray) -> float:
    """Write a one-column CSV ("value" header, 4 decimals) with numpy's C writer; seconds."""
    t0 = time.perf_counter()
    with open(path, "w") as f:
        f.write("value\n")
        x.tofile(f, sep="\n", format="%.4f")
        f.write("\n")
    return time.perf_counter() - t0


def _split(label: str, r, total: float) -> None:
    t = r.timings
    parts = ", ".join(f"{k} {v:.2f}" for k, v in t.items())
    print(f"{label}: total {total:.2f} s  ({parts})")
    print(f"  tree {list(r.branching)} ({r.padded_bins} leaves, "
          f"{r.mechanism.released.n_rows} nodes)")


def main(argv=None) -> None:
    """Run the benchmark and print the time split."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10**7)
    ap.add_argument("--bins", type=int, default=2**16)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true", help="10^6 values")
    args = ap.parse_args(argv)
    n = 10**6 if args.quick else args.n
    rng = np.random.default_rng(0)
    x = rng.lognormal(10.0, 1.0, n)
    lower, upper = 0.0, 1e6
    print(f"{n:,} log-normal values into {args.bins} bins over [{lower:g}, {upper:g}), "
          f"eps = {args.epsilon}, add_remove, optimal tree, clip")
    kw = dict(lower=lower, upper=upper, bins=args.bins, epsilon=args.epsilon,
              out_of_range="clip")

    t0 = time.perf_counter()
    r = release(x, **kw)
    _split("in-memory array", r, time.perf_counter() - t0)

    t0 = time.perf_counter()
    r = release(x, tree=list(r.branching), **kw)
    _split("in-memory array, tree given (no search)", r, time.perf_counter() - t0)

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "values.csv")
        w = _write_csv(path, x)
        size = os.path.getsize(path)
        print(f"CSV: {size / 1e6:.0f} MB written in {w:.1f} s")
        t0 = time.perf_counter()
        hist, rows = histogram_from_file(path, "value", BinSpec(lower, upper, args.bins),
                                         out_of_range="clip")
        read = time.perf_counter() - t0
        print(f"CSV read + binning: {read:.2f} s = {rows / read / 1e6:.2f} M rows/s, "
              f"{size / read / 1e6:.0f} MB/s")
        t0 = time.perf_counter()
        r = release_file(path, column="value", tree=list(r.branching), **kw)
        _split("CSV file, tree given", r, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
