"""[RTS] Lemma V.2: unequal integer branching factors can beat every equal-branching tree.

With equal budgets and integer branching the covering error is c h^2 sum_l (k_l - 1),
c = 4K / (N eps)^2 (Thm IV.1). For K = 2^m with m prime the only equal-branching trees are
the binary tree (2,...,2) and the histogram (K); for m >= 7 prime a tree with unequal factors
is strictly better (App. C: heights ~ m/3 with factors 8 and 16). K = 2^7 = 128: (8, 16) has
normalised error 4 * 22 = 88 < 127 (histogram) < 343 (binary).

For every m = 3..M we compare the best equal-branching tree (k, ..., k) with k^h = 2^m (all
divisors h of m) and the best tree with unequal factors, both from
``optimize.level_uniform(2^m, eps, allow_padding=False, estimator="covering",
neighbours="swap", budgets="equal", top=...)``'s exhaustive ranking ([RTS]'s setting, given
explicitly: the package defaults are add/remove, BLUE, optimal budgets), cross-checked with
``optimize.design_error``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dptree_opt import optimize
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "rts_lemma_v2"
TITLE = "[RTS] Lemma V.2: unequal integer branching beats every equal-branching tree (K = 2^m)"
M_QUICK = 20
# [RTS]'s setting: direct (covering) sums, swap neighbours (N public), equal budgets
RTS = dict(estimator="covering", neighbours="swap", budgets="equal")
M_FULL = 22
PRIMES = {2, 3, 5, 7, 11, 13, 17, 19, 23}


def normalised(ks) -> float:
    """h^2 sum (k_l - 1): the Thm IV.1 equal-budget error in units of 4K/(N eps)^2."""
    return float(len(ks) ** 2 * sum(k - 1 for k in ks))


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    M = M_QUICK if quick else M_FULL
    rows, checks = [], []
    unit_dev = 0.0
    for m in range(3, M + 1):  # K = 4 has no tree with unequal factors
        K = 2**m
        best = optimize.level_uniform(K, 1.0, allow_padding=False, top=60, **RTS)
        ranked = (best,) + tuple(best.alternatives)
        unequal = next((d for d in ranked if len(set(d.branching)) > 1), None)
        equal_trees = [(2 ** (m // h),) * h for h in range(1, m + 1) if m % h == 0]
        eq_best = min(equal_trees, key=normalised)
        # design_error (counts^2, eps = 1) / (4K) must be the normalised error
        unit_dev = max(unit_dev, abs(optimize.design_error(K, eq_best, estimator="covering",
                                                         neighbours="swap") / (4 * K)
                                     / normalised(eq_best) - 1))
        rows.append({"m": m, "K": K, "prime_m": m in PRIMES,
                     "best": list(best.branching), "best_error": best.normalised_error,
                     "best_equal": list(eq_best), "best_equal_error": normalised(eq_best),
                     "best_unequal": list(unequal.branching) if unequal else None,
                     "best_unequal_error": unequal.normalised_error if unequal else None,
                     "binary_error": normalised((2,) * m), "histogram_error": float(K - 1)})
    src = "[RTS] Lemma V.2 / App. C"
    r7 = next(r for r in rows if r["m"] == 7)
    checks.append(C.check("K=2^7: best unequal tree error (8,16): 4*(7+15)", r7["best_unequal_error"],
                          88.0, src))
    checks.append(C.check("K=2^7: best equal-branching error (histogram, 127)",
                          r7["best_equal_error"], 127.0, src))
    checks.append(C.check("K=2^7: binary tree error 7^2*7", r7["binary_error"], 343.0,
                          "[RTS] Thm IV.1"))
    checks.append(C.check("design_error / (4K) = h^2 sum(k-1) (max rel. dev.)", unit_dev, 0.0,
                          "[RTS] Thm IV.1", abs_tol=1e-12))
    lemma = [r for r in rows if r["prime_m"] and r["m"] >= 7]
    holds = all(r["best_unequal_error"] < r["best_equal_error"] for r in lemma)
    checks.append(C.flag_check("unequal beats every equal tree for every prime m >= 7 "
                               f"({', '.join(str(r['m']) for r in lemma)})", holds, "True",
                               holds, src))
    small = [r for r in rows if r["prime_m"] and r["m"] < 7]
    small_txt = ", ".join(f"m={r['m']}: equal {r['best_equal_error']:.0f} vs unequal "
                          f"{r['best_unequal_error']:.0f}" for r in small if r["best_unequal"])
    no_small = all(r["best_unequal_error"] >= r["best_equal_error"] for r in small
                   if r["best_unequal"])
    checks.append(C.flag_check("for prime m < 7 the histogram (equal) is optimal", small_txt,
                               "unequal not better (why docs/math.md says m >= 7)", no_small, src))
    best_is_unequal = all(len(set(r["best"])) > 1 for r in lemma)
    checks.append(C.flag_check("for prime m >= 7 the overall optimum has unequal factors",
                               best_is_unequal, "True", best_is_unequal, src))

    # ------------------------------------------------------------------ figure
    fig, axes = C.plt.subplots(1, 2, figsize=(15, 5.6), gridspec_kw={"width_ratios": [1.25, 1]})
    ms = np.array([r["m"] for r in rows])
    ax = axes[0]
    ax.plot(ms, [r["binary_error"] for r in rows], "^-", color=C.PALETTE["binary"], ms=4,
            label="binary tree (2,…,2)")
    ax.plot(ms, [r["histogram_error"] for r in rows], "o-", color=C.PALETTE["histogram"],
            ms=4, label="histogram (K)")
    ax.plot(ms, [r["best_equal_error"] for r in rows], "s--", color="k", ms=5, mfc="none",
            label="best equal-branching tree (k,…,k)")
    ax.plot(ms, [r["best_unequal_error"] for r in rows], "D-", color=C.PALETTE["17-ary"], ms=5,
            label="best tree with unequal factors")
    for r in rows:
        if r["prime_m"] and r["m"] >= 7:
            ax.annotate(",".join(map(str, r["best_unequal"])), (r["m"], r["best_unequal_error"]),
                        xytext=(0, -26), textcoords="offset points", ha="center", fontsize=7.5,
                        rotation=90, va="top", color=C.PALETTE["17-ary"])
    ax.set_yscale("log")
    ax.set_ylim(4, 3e4)
    C.plain_log_ticks(ax)
    ax.set_xticks(ms)
    ax.set_xlabel("m  (K = 2^m bins)")
    ax.set_ylabel("error / (4K/(Nε)²) = h² Σ(k_l − 1)")
    ax.set_title("(a) best equal vs best unequal integer branching (equal budgets)")
    ax.legend(loc="upper left")
    ax = axes[1]
    ratio = np.array([r["best_unequal_error"] / r["best_equal_error"] for r in rows])
    cols = [C.PALETTE["17-ary"] if x < 1 else "#bbbbbb" for x in ratio]
    bars = ax.bar(ms, ratio, color=cols)
    for b, r in zip(bars, rows):
        if r["prime_m"]:
            b.set_edgecolor("k")
            b.set_linewidth(1.6)
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xticks(ms)
    ax.set_xlabel("m  (K = 2^m bins); black outline: m prime (Lemma V.2's case)")
    ax.set_ylabel("best unequal / best equal error (ratio)")
    ax.set_title("(b) ratio < 1 (green): unequal factors win")
    ax.set_ylim(0, max(1.6, ratio.max() * 1.05))
    fig.suptitle("Lemma V.2 of [RTS]: with integer branching factors and equal budgets, equal "
                 "branching is not always optimal", fontsize=12)
    C.caption(fig, "Reproduces [RTS] (arXiv 2409.18573) Lemma V.2 / App. C for K = 2^m: for "
                   "prime m ≥ 7 only (2,…,2) and (K) have equal factors, and an unequal tree "
                   "beats both (e.g. K = 2^7: (8,16) 88 < 127 < 343).")
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    png = C.save_png(fig, out_dir, NAME)
    data = {"rows": rows, "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
