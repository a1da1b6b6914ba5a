"""Benchmark and issue-5 numbers for consistency post-processing (prints markdown tables).

    python benchmarks/bench_consistency.py            # everything (a few minutes)
    python benchmarks/bench_consistency.py --quick    # smaller sizes, 200 Monte Carlo runs
    python benchmarks/bench_consistency.py --only k289 --runs 1000

Sections
--------
1. fast: ``project_cdf`` at K = 2^20, N = 10^9 (integer l2 / l1, real l1, weighted l2) on two
   inputs: a tree(16^5) BLUE at eps = 1 (realistic: few monotonicity violations) and the same
   with 1000x the noise (eps = 0.001: violations everywhere). Best of ``--repeat`` runs.
   ``--heap`` also times a pure-Python heapq slope trick for l1 (the textbook O(K log K)
   alternative to the vectorised partitioning method).
2. trellis: the largest K x (N + 1) the [RTS] trellis DP solves within 10 s, K = 1024 and
   N = 2^j - 1 growing, first under the default memory bound (TRELLIS_MAX_BYTES), then with the
   bound raised to ``--trellis-gib`` GiB.
3. k289: [RTS] Sec. VI-3 reconstructed -- K = 289 bins, tree (17, 17), Laplace, swap
   neighbours (N public), eps = 1 and 0.1, N = 1000 records drawn uniformly on [0, 1) (the
   paper samples uniform points; its exact numbers are lost, see MATH.md), fixed seed.
   Monte Carlo errors of the CDF before and after integer consistency (l2 and l1), covering
   estimator ([RTS]) and BLUE: squared l2 error sum_j (C^_j - C_j)^2 and l1 error
   sum_j |C^_j - C_j|, in counts and [RTS]-normalised (F = C / N: divide by N^2 and N),
   mean +- standard error over the runs. The raw rows are checked against the exact
   expected error (``expected_error``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

import dptree_opt as dp
from dptree_opt import consistency, queries, workloads
from dptree_opt import strategies as S

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracles import slope_trick_l1  # noqa: E402  (the tests' independent l1 oracle)


def _best_time(fn, repeat):
    best, out = math.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_fast(k_log2, repeat, heap):
    k, n = 2**k_log2, 10**9
    rng = np.random.default_rng(2024)
    branching = [16] * (k_log2 // 4) + ([2 ** (k_log2 % 4)] if k_log2 % 4 else [])
    edges = np.linspace(0.0, 1.0, k + 1)
    p = np.diff(edges ** 2 * (3 - 2 * edges))  # a smooth unimodal density (smoothstep)
    hist = rng.multinomial(n, p / p.sum())
    print(f"\n## 1. project_cdf, K = 2^{k_log2} = {k}, N = 10^9 (best of {repeat})\n")
    print("| input | violations (t: raw_t > raw_t+1) | metric | integer | weights | time (s) |"
          " changed entries |")
    print("|---|---|---|---|---|---|---|")
    for eps in (1.0, 0.001):
        mech = dp.Mechanism(S.tree(k, branching), epsilon=eps, neighbours="swap")
        raw = np.cumsum(dp.blue(mech, mech.measure(hist, rng)))
        se = queries.cdf_standard_errors(mech)
        w = 1.0 / np.append(se[:-1] ** 2, 1.0)
        viol = int(np.sum(np.diff(raw) < 0))
        label = f"tree 16^{k_log2 // 4} BLUE, eps = {eps:g}"
        for metric, integer, weights in (("l2", True, None), ("l1", True, None),
                                         ("l1", False, None), ("l2", True, w)):
            t, c = _best_time(lambda: consistency.project_cdf(
                raw, n, metric, integer, weights=weights), repeat)
            assert consistency.is_consistent(c, n, integer)
            changed = int(np.sum(np.abs(c - raw) > 0.5)) if integer else int(
                np.sum(c != raw))
            print(f"| {label} | {viol} | {metric} | {integer} | "
                  f"{'1/se^2' if weights is not None else '-'} | {t:.3f} | {changed} |")
        if heap:
            t0 = time.perf_counter()
            ref = np.clip(slope_trick_l1(raw[:-1], np.ones(raw.size - 1), True), 0, n)
            t = time.perf_counter() - t0
            fast = consistency.project_cdf(raw, n, "l1")
            same = math.isclose(consistency.objective(fast[:-1], raw[:-1], "l1"),
                                consistency.objective(ref, raw[:-1], "l1"), rel_tol=1e-12)
            print(f"| {label} | {viol} | l1 (pure-Python heapq slope trick) | True | - | "
                  f"{t:.3f} | same objective: {same} |")


# --------------------------------------------------------------------------------- 2. trellis
def bench_trellis(limit_s, raised_gib, k=1024):
    rng = np.random.default_rng(7)
    print(f"\n## 2. trellis DP: largest K x (N + 1) within {limit_s:g} s (K = {k})\n")
    print("| memory bound | N | cells K (N+1) | bytes | time (s) | ns / cell | status |")
    print("|---|---|---|---|---|---|---|")
    for bound in (consistency.TRELLIS_MAX_BYTES, int(raised_gib * 2**30)):
        best = None
        for j in range(8, 40):
            n = 2**j - 1
            truth = np.sort(rng.integers(0, n + 1, k))
            truth[-1] = n
            y = truth + rng.laplace(0, n / k, k)
            width = n + 1
            nbytes = (k - 1) * width * (2 if width <= 2**16 else 4)
            if nbytes > bound:
                print(f"| {bound / 2**20:.0f} MiB | {n} | {(k - 1) * width:.3g} | "
                      f"{nbytes / 2**20:.0f} MiB | - | - | refused (memory bound) |")
                break
            t0 = time.perf_counter()
            c = consistency.project_cdf(y, n, "l2", method="trellis", trellis_max_bytes=bound)
            t = time.perf_counter() - t0
            fast = consistency.project_cdf(y, n, "l2")
            ok = math.isclose(consistency.objective(c, y), consistency.objective(fast, y),
                              rel_tol=1e-12)
            status = "ok, = fast" if ok else "MISMATCH"
            print(f"| {bound / 2**20:.0f} MiB | {n} | {(k - 1) * width:.3g} | "
                  f"{nbytes / 2**20:.0f} MiB | {t:.2f} | {1e9 * t / ((k - 1) * width):.1f} | "
                  f"{status} |")
            if t > limit_s:
                break
            best = (n, (k - 1) * width, t)
        if best:
            print(f"\nlargest within {limit_s:g} s under {bound / 2**20:.0f} MiB: K = {k}, "
                  f"N = {best[0]} ({best[1]:.3g} cells, {best[2]:.2f} s)\n")


# --------------------------------------------------------------------------------- 3. K = 289
def k289_numbers(runs, seed=289):
    k, n, branching = 289, 1000, [17, 17]
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, n)  # [RTS] Sec. VI-3: uniform points (reconstruction)
    hist = np.bincount(np.minimum((x * k).astype(int), k - 1), minlength=k)
    truth = np.cumsum(hist)
    print(f"\n## 3. K = 289, tree (17, 17), Laplace, swap (N = {n} public), {runs} runs\n")
    print("Data: 1000 points uniform on [0, 1), numpy default_rng(289), 289 equal bins.")
    print("l2 = sum_j (C^_j - C_j)^2 (counts^2), l1 = sum_j |C^_j - C_j| (counts); "
          "[RTS]-normalised: l2 / N^2, l1 / N. Mean +- standard error.\n")
    print("| eps | estimator | CDF | E l2 (counts^2) | E l1 (counts) | E l2 / N^2 | "
          "E l1 / N | l2 change vs raw (paired) |")
    print("|---|---|---|---|---|---|---|---|")
    checks = []
    for eps in (1.0, 0.1):
        mech = dp.Mechanism(S.tree(k, branching), epsilon=eps, neighbours="swap")
        y = mech.released.apply(hist) + mech.sample_noise(rng, size=runs)  # (runs, rows)
        for est in ("covering", "blue"):
            raw = queries.estimate_cdf(mech, y, est)
            exact = dp.expected_error(workloads.prefix(k), mech, est)
            rows = {"raw": raw, "l2-consistent": np.empty_like(raw),
                    "l1-consistent": np.empty_like(raw)}
            for r in range(runs):
                rows["l2-consistent"][r] = consistency.project_cdf(raw[r], n, "l2")
                rows["l1-consistent"][r] = consistency.project_cdf(raw[r], n, "l1")
                if r < 3:  # the trellis DP agrees (objective) on a few runs
                    for metric in ("l2", "l1"):
                        tr = consistency.project_cdf(raw[r], n, metric, method="trellis")
                        checks.append(math.isclose(
                            consistency.objective(tr, raw[r], metric),
                            consistency.objective(rows[metric + "-consistent"][r], raw[r],
                                                  metric), rel_tol=1e-12))
            raw_l2 = np.sum((raw - truth) ** 2, axis=1)
            for name, est_c in rows.items():
                d = est_c - truth
                l2, l1 = np.sum(d ** 2, axis=1), np.sum(np.abs(d), axis=1)
                diff = l2 - raw_l2
                change = ("" if name == "raw" else
                          f"{100 * diff.mean() / raw_l2.mean():+.1f}% +- "
                          f"{100 * diff.std(ddof=1) / math.sqrt(runs) / raw_l2.mean():.1f}%")
                m2, s2 = l2.mean(), l2.std(ddof=1) / math.sqrt(runs)
                m1, s1 = l1.mean(), l1.std(ddof=1) / math.sqrt(runs)
                print(f"| {eps:g} | {est} | {name} | {m2:.1f} +- {s2:.1f} | "
                      f"{m1:.1f} +- {s1:.1f} | {m2 / n**2:.5f} +- {s2 / n**2:.5f} | "
                      f"{m1 / n:.4f} +- {s1 / n:.4f} | {change} |")
                if name == "raw":
                    checks.append(abs(m2 - exact) <= 4 * s2)
            print(f"| {eps:g} | {est} | exact E l2 (raw) | {exact:.1f} | | {exact / n**2:.5f} |"
                  " | |")
    # Thm IV.1 (counts^2): 4 K sum_l (k_l - 1) / eps_l^2, eps_l = eps / 2 (equal split, root free)
    theorem = 4 * k * sum((kk - 1) / 0.5**2 for kk in branching)
    print(f"\nThm IV.1 check (covering, eps = 1, eps_l = 1/2): 4 K sum (k_l - 1) / eps_l^2 = "
          f"{theorem:.0f} counts^2 (eps = 0.1: x100), the exact rows above.")
    print(f"checks (trellis = fast on sampled runs; raw MC within 4 SE of exact): "
          f"{'all passed' if all(checks) else 'FAILED'} ({len(checks)})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="K = 2^16, 200 runs, 4 s trellis")
    ap.add_argument("--only", choices=("fast", "trellis", "k289"), action="append")
    ap.add_argument("--runs", type=int, default=None, help="Monte Carlo runs (default 1000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--heap", action="store_true", help="also time a heapq slope trick")
    ap.add_argument("--trellis-gib", type=float, default=2.0)
    args = ap.parse_args(argv)
    parts = set(args.only or ("fast", "trellis", "k289"))
    if "fast" in parts:
        bench_fast(16 if args.quick else 20, 1 if args.quick else args.repeat, args.heap)
    if "trellis" in parts:
        bench_trellis(4.0 if args.quick else 10.0, 0.5 if args.quick else args.trellis_gib)
    if "k289" in parts:
        k289_numbers(args.runs or (200 if args.quick else 1000))


if __name__ == "__main__":
    main()
