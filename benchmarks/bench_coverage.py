"""Monte Carlo coverage of the quantile confidence intervals (``quantile_intervals``).

The release's own pipeline, with simulation noise (``Mechanism.sample_noise``: the same
discrete Laplace / discrete Gaussian laws as OpenDP's samplers): a level-uniform tree (the
one ``optimize.level_uniform(K, estimator="blue")`` picks, with its budgets, and the padded
tree [4, 16, 16] over K = 1000 real bins), ``Mechanism(..., discrete=True)``, the BLUE raw
CDF (``queries.estimate_cdf``, batched), N public (swap) or the rounded estimate
(add_remove), ``consistency.project_cdf`` (l2, integer), ``queries.quantiles`` for the
estimates and ``quantile_intervals`` with a calibration computed once per mechanism.

Data: fixed data sets over [0, 1) (K equal bins; the true quantile is the order statistic
``np.quantile(x, q, method="inverted_cdf")``): "skewed" (log-normal), "bimodal" (two
normals), "edges" (point masses exactly on bin edges, where a quantile sits at the left end
of its bin) and "adversarial" (per q, m = ceil(q N): m - 1 records in bin j - 1, one in bin
j = K/2, the rest in bin j + 1 -- both tests at b* = j are tight and the neighbouring bins
are decided by the same errors, so coverage is close to the level once sd << m).

Columns: coverage of [lower, upper] for the true quantile, its binomial SE, mean width in
bins, how often the estimate had to be added (extended), and the old rule's coverage
(first crossing of the pointwise normal band, as ``core._interval`` did before) for
comparison. Cells below 0.95 - 2 SE are flagged "LOW".

Usage: ``python benchmarks/bench_coverage.py [--bins 1024] [--runs 1000] [--quick]
[--timing] [--check-subsample]``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.special import ndtri

import dptree_opt as dp
from dptree_opt import consistency, optimize, queries
from dptree_opt import quantile_intervals as QI
from dptree_opt import strategies as S

QS = (0.01, 0.1, 0.5, 0.9, 0.99)
NOISES = (("laplace", {"epsilon": 1.0}), ("gaussian", {"rho": 0.5}))


# ------------------------------------------------------------------------- mechanisms
def mechanisms(k: int, noise: str, budget: dict, neighbours: str, which=("optimal", "padded")):
    """[(label, mechanism, K real bins)] for the optimal BLUE tree and a padded tree."""
    out = []
    if "optimal" in which:
        d = optimize.level_uniform(k, estimator="blue", noise=noise, neighbours=neighbours,
                                   budgets="equal", **budget)
        m = dp.Mechanism(S.tree(math.prod(d.branching), list(d.branching)), noise=noise,
                         neighbours=neighbours, level_budgets=list(d.budgets), discrete=True,
                         **budget)
        out.append((f"optimal {list(d.branching)}", m, k))
    if "padded" in which:
        m = dp.Mechanism(S.tree(1024, [4, 16, 16]), noise=noise, neighbours=neighbours,
                         discrete=True, **budget)
        out.append(("padded [4,16,16], K=1000", m, 1000))
    return out


# ------------------------------------------------------------------------- data
def dataset(kind: str, n: int, k: int, rng, q: float | None = None) -> np.ndarray:
    """n values in [0, 1) (see the module docstring)."""
    edges = np.linspace(0.0, 1.0, k + 1)
    if kind == "skewed":
        x = rng.lognormal(-2.0, 0.8, n)
    elif kind == "bimodal":
        x = np.where(rng.random(n) < 0.6, rng.normal(0.3, 0.05, n), rng.normal(0.75, 0.03, n))
    elif kind == "edges":
        atoms = edges[[k // 10, k // 3, k // 2, (3 * k) // 4, k - 1]]
        x = atoms[rng.choice(5, size=n, p=[0.05, 0.3, 0.3, 0.3, 0.05])]
    elif kind == "adversarial":
        m = max(math.ceil(q * n), 1)
        j = k // 2
        x = np.concatenate([np.full(m - 1, edges[j - 1]), [edges[j]],
                            np.full(n - m, edges[j + 1])])
    else:
        raise ValueError(kind)
    return np.clip(x, 0.0, np.nextafter(1.0, 0.0))


def histogram(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Counts with the release's bin rule e_i <= x < e_{i+1}."""
    b = np.searchsorted(edges, x, side="right") - 1
    return np.bincount(np.clip(b, 0, edges.size - 2), minlength=edges.size - 1)


# ------------------------------------------------------------------------- the old rule
def old_interval(raw, se, total, public, qs, edges, level):
    """The previous ``core._interval``: first crossings of the pointwise normal band."""
    z = float(ndtri(0.5 + level / 2))
    lo, up = raw - z * se, raw + z * se
    up_first = np.maximum.accumulate(np.maximum(up, 0.0))
    lo_first = np.maximum.accumulate(np.maximum(lo, 0.0))
    n_lo, n_up = (total, total) if public else (max(lo[-1], 0.0), max(up[-1], 0.0))
    k = raw.size
    q = np.asarray(qs)
    i = np.searchsorted(up_first, q * n_lo, side="left")
    j = np.searchsorted(lo_first, q * n_up, side="left")
    return edges[np.minimum(i, k - 1)], np.where(j < k, edges[np.minimum(j, k - 1) + 1],
                                                  edges[-1])


# ------------------------------------------------------------------------- one cell
def run_cell(m, k, hist, truth, runs, rng, cal, level=0.95, batch=200):
    """Coverage statistics over ``runs`` noise draws for every q (arrays (len(QS),))."""
    edges = np.linspace(0.0, 1.0, k + 1)
    full = np.zeros(m.n_bins, dtype=np.int64)
    full[:k] = hist
    exact = m.released.apply(full)
    se = queries.cdf_standard_errors(m)[:k]
    n_true = int(hist.sum())
    hits = np.zeros(len(QS))
    old_hits = np.zeros(len(QS))
    width = np.zeros(len(QS))
    ext = np.zeros(len(QS))
    empty = np.zeros(len(QS))
    done = 0
    while done < runs:
        size = min(batch, runs - done)
        y = exact + m.sample_noise(rng, size=size)
        raws = queries.estimate_cdf(m, y)[:, :k]
        for raw in raws:
            total = n_true if m.public_total else max(0, int(np.rint(raw[-1])))
            if total > 0:
                cons = consistency.project_cdf(raw, total=total, metric="l2", integer=True)
                qv = queries.quantiles(cons, edges, QS, total)
            else:
                qv = np.full(len(QS), np.nan)
            res = QI.quantile_intervals(m, raw, edges, QS, total_public=m.public_total,
                                        total=total, level=level, estimates=qv,
                                        calibration=cal)
            hits += (res.lower <= truth) & (truth <= res.upper)
            width += (res.upper - res.lower) * k
            ext += res.extended
            empty += res.empty
            olo, oup = old_interval(raw, se, total, m.public_total, QS, edges, level)
            old_hits += (olo <= truth) & (truth <= oup)
        done += size
    return hits / runs, width / runs, ext / runs, empty / runs, old_hits / runs


# ------------------------------------------------------------------------- drivers
def coverage_table(k: int, runs: int, ns, kinds, which, seed: int = 0) -> list:
    rows = []
    print("| tree | noise | neighbours | N | data | q | coverage | SE | width (bins) | "
          "extended | old rule | flag |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for noise, budget in NOISES:
        for neighbours in ("add_remove", "swap"):
            for label, m, kk in mechanisms(k, noise, budget, neighbours, which):
                cal = QI.calibrate_quantile_tests(m, kk, QS, 0.95)
                edges = np.linspace(0.0, 1.0, kk + 1)
                for n in ns:
                    for kind in kinds:
                        rng = np.random.default_rng([seed, n, len(rows)])
                        if kind == "adversarial":  # one data set per q
                            stats = []
                            for iq, q in enumerate(QS):
                                x = dataset(kind, n, kk, rng, q)
                                truth = np.full(len(QS), np.nan)
                                truth[iq] = np.quantile(x, q, method="inverted_cdf")
                                s = run_cell(m, kk, histogram(x, edges), truth, runs, rng, cal)
                                stats.append([a[iq] for a in s])
                            stats = [np.array(col) for col in zip(*stats)]
                        else:
                            x = dataset(kind, n, kk, rng)
                            truth = np.quantile(x, QS, method="inverted_cdf")
                            stats = run_cell(m, kk, histogram(x, edges), truth, runs, rng, cal)
                        cov, wid, ext, emp, old = stats
                        for iq, q in enumerate(QS):
                            se = math.sqrt(0.95 * 0.05 / runs)
                            flag = "LOW" if cov[iq] < 0.95 - 2 * se else ""
                            row = (label, noise, neighbours, n, kind, q, cov[iq], se, wid[iq],
                                   ext[iq], old[iq], flag)
                            rows.append(row)
                            print(f"| {label} | {noise} | {neighbours} | {n:g} | {kind} | {q} | "
                                  f"{cov[iq]:.3f} | {se:.3f} | {wid[iq]:.1f} | "
                                  f"{ext[iq]:.3f} | {old[iq]:.3f} | {flag} |", flush=True)
    return rows


def summary(rows) -> None:
    """Minimum coverage over trees and data sets per (noise, neighbours, N, q)."""
    print("\nSummary: minimum coverage over trees and data sets (mean width in bins over them)")
    print("| noise | neighbours | N | " + " | ".join(f"q={q}" for q in QS) + " |")
    print("|---|---|---|" + "---|" * len(QS))
    keys = sorted({(r[1], r[2], r[3]) for r in rows})
    for noise, nb, n in keys:
        cells = []
        for q in QS:
            sel = [r for r in rows if (r[1], r[2], r[3], r[5]) == (noise, nb, n, q)]
            cells.append(f"{min(r[6] for r in sel):.3f} ({np.mean([r[8] for r in sel]):.0f})")
        print(f"| {noise} | {nb} | {n:g} | " + " | ".join(cells) + " |")
    low = [r for r in rows if r[-1]]
    ext = max(r[9] for r in rows)
    old = min(r[10] for r in rows)
    print(f"\ncells flagged LOW (< 0.95 - 2 SE): {len(low)} of {len(rows)}; "
          f"max extension rate {ext:.3f}; worst old-rule coverage {old:.3f}")
    for r in low:
        print("  LOW:", r)


def timing(bins_list=(1024, 2**16)) -> None:
    """Calibration (data-independent, once per mechanism) and per-release interval times."""
    print("\n| K | noise | neighbours | tree | calibration (s) | method | prefixes | "
          "intervals per release (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in bins_list:
        for noise, budget in NOISES + (("gaussian", {"rho": 50.0}),):
            for neighbours in ("add_remove", "swap"):
                label, m, kk = mechanisms(k, noise, budget, neighbours, ("optimal",))[0]
                QI._CAL_CACHE.clear()
                t0 = time.perf_counter()
                cal = QI.calibrate_quantile_tests(m, kk, QS, 0.95)
                t_cal = time.perf_counter() - t0
                raw = np.cumsum(np.full(kk, 3.0))  # the cost does not depend on the values
                edges = np.linspace(0.0, 1.0, kk + 1)
                t0 = time.perf_counter()
                reps = 20
                for _ in range(reps):
                    QI.quantile_intervals(m, raw, edges, QS, total_public=m.public_total,
                                          total=3 * kk, calibration=cal)
                t_int = (time.perf_counter() - t0) / reps
                print(f"| {k} | {noise} {budget} | {neighbours} | {label} | {t_cal:.2f} | "
                      f"{cal.method} | {cal.prefixes_checked} | {1000 * t_int:.1f} |",
                      flush=True)


def check_subsample(k: int) -> None:
    """Critical value over the checked prefixes vs over every prefix (slow)."""
    print("\n| noise | neighbours | tree | q | max over checked | max over all | prefixes |")
    print("|---|---|---|---|---|---|---|")
    for noise, budget in NOISES[:1] + (("gaussian", {"rho": 50.0}),):
        for neighbours in ("add_remove", "swap"):
            for label, m, kk in mechanisms(k, noise, budget, neighbours):
                noisy = (m.variances > 0) & np.isfinite(m.variances)
                s, rv = m.scales[noisy], m.variances[noisy]
                kurt = np.array([QI._level_kurtosis(float(v), noise, True) for v in s])
                tables = ({float(v): QI._dgauss_table(float(v)) for v in np.unique(s)
                           if v < QI._NORMAL_SIGMA} if noise == "gaussian" else None)
                allb = np.arange(-1, kk)
                w = QI._prefix_weights(m, allb)[:, noisy]
                wt = QI._prefix_weights(m, np.array([kk - 1]))[0, noisy]
                checked = np.isin(allb, QI._checked_prefixes(m, kk))
                for q in ((0.5,) if m.public_total else (0.01, 0.5, 0.99)):
                    c = np.array([QI._tail_critical(a - q * wt, s, rv, kurt, noise, True, 0.05,
                                                    tables) if np.any(a - q * wt) else 0.0
                                  for a in w])
                    print(f"| {noise} {budget} | {neighbours} | {label} | {q} | "
                          f"{c[checked].max():.3f} | {c.max():.3f} | {int(checked.sum())} |",
                          flush=True)


def main(argv=None) -> None:
    """Run the coverage table (and optionally timings and the subsample check)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bins", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--quick", action="store_true",
                    help="200 runs, N in {200, 10^4}, data skewed + adversarial, optimal tree")
    ap.add_argument("--timing", action="store_true", help="calibration times at 1024, 2^16")
    ap.add_argument("--check-subsample", action="store_true",
                    help="critical values over all prefixes vs the checked ones (slow)")
    ap.add_argument("--no-table", action="store_true")
    args = ap.parse_args(argv)
    if not args.no_table:
        if args.quick:
            rows = coverage_table(args.bins, 200, (200, 10**4), ("skewed", "adversarial"),
                                  ("optimal",))
        else:
            rows = coverage_table(args.bins, args.runs, (200, 10**4, 10**6),
                                  ("skewed", "bimodal", "edges", "adversarial"),
                                  ("optimal", "padded"))
        summary(rows)
    if args.timing:
        timing()
    if args.check_subsample:
        check_subsample(args.bins)


if __name__ == "__main__":
    main()
