"""Beyond [RTS]: the optimal branching factor k for the covering, refined and BLUE estimators.

Mean per-prefix CDF error (counts^2) of the level-uniform k-ary tree, k = 2..64, under the
[RTS] covering sums, the [RTS] App. B refined estimator and the BLUE (Honaker's efficient
estimator), at K = 2^12 and 2^20 bins.

Setting: Laplace, eps = 1, equal budgets over the noisy levels, two neighbour models: swap
([RTS]: N public, the root exact and free) and add/remove (N private, the root a noisy level).
Padding rule: h = ceil(log_k K) levels; all levels below the top have k children and the top
level has k_1 = ceil(K / k^(h-1)) <= k children, so the tree covers K' = k_1 k^(h-1) >= K
bins (the extra bins are empty but measured, as ``optimize.level_uniform`` pads: the smallest
K' for the subtree). When k is an integer root of K this is the k-ary tree over K. The error is
that of the first K prefixes. (Padding all the way to k^h instead penalises every k that does
not divide K so much that k = 16 wins for every estimator at K = 2^12 and 2^20.) Errors come
from ``optimize.design_error`` (exact; equal to ``expected_error`` on the same Mechanism).
"""

from __future__ import annotations

from pathlib import Path

from dptree_opt import closed_forms, optimize
from dptree_opt.strategies import padded_height
import _experiments as C  # experiments/_experiments.py (on sys.path: script dir / load_script)

NAME = "k_sweep"
BINS = (2**12, 2**20)
KS = tuple(range(2, 65))
QUICK_KS = KS  # exact closed forms: the quick mode is the full sweep
EPSILON = 1.0
NEIGHBOURS = ("swap", "add_remove")
ESTIMATORS = ("covering", "refined", "blue")
COLORS = {"covering": "#d62728", "refined": "#ff7f0e", "blue": "#1f77b4"}
# --set NAME=VALUE on the command line (dptree-opt experiment k_sweep --help)
PARAMETERS = {
    "K": {"type": "ints", "sets": ("BINS",), "min": 1, "help": "bins K (a comma list)"},
    "k": {"type": "ints", "sets": ("KS", "QUICK_KS"), "min": 2,
          "help": "branching factors k swept"},
    "epsilon": {"type": "float", "sets": ("EPSILON",), "min": 1e-6,
                "help": "Laplace budget (pure eps-DP)"},
    "neighbours": {"type": "strs", "sets": ("NEIGHBOURS",), "choices": ("swap", "add_remove"),
                   "help": "neighbour models (a comma list)"},
}


def branching(n_bins: int, k: int) -> tuple:
    """The padding rule: (ceil(K / k^(h-1)), k, ..., k) with h = ceil(log_k K)."""
    h = padded_height(n_bins, k)
    w = k ** (h - 1)
    return (-(-n_bins // w),) + (k,) * (h - 1)


def run(out_dir: Path, quick: bool = True) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for nb in NEIGHBOURS:
        for K in BINS:
            for k in (QUICK_KS if quick else KS):
                ks = branching(K, k)
                row = {"neighbours": nb, "n_bins": K, "k": k, "branching": " ".join(map(str, ks)),
                       "padded_bins": ks[0] * k ** (len(ks) - 1)}
                for est in ESTIMATORS:
                    err = optimize.design_error(K, ks, estimator=est, neighbours=nb,
                                                total_budget=EPSILON)
                    row[f"{est}_mean"] = err / K
                rows.append(row)
    best = {}
    for nb in NEIGHBOURS:
        for K in BINS:
            sub = [r for r in rows if r["n_bins"] == K and r["neighbours"] == nb]
            best[f"{nb} K={K}"] = {est: min(sub, key=lambda r: r[f"{est}_mean"])["k"]
                                   for est in ESTIMATORS}
    checks = []
    for r in rows:  # the covering error of an unpadded tree under swap is [RTS] Theorem IV.1
        if r["neighbours"] == "swap" and r["padded_bins"] == r["n_bins"]:
            ks = tuple(int(k) for k in r["branching"].split())
            thm = closed_forms.theorem_iv_1(ks, [EPSILON / len(ks)] * len(ks)) / r["n_bins"]
            checks.append(C.check(f"covering, K = {r['n_bins']}, k = {r['k']} (swap)",
                                  r["covering_mean"], thm, "[RTS] Theorem IV.1"))
    # the BLUE is the best linear unbiased estimator: never above the other two
    worst = max(r["blue_mean"] / min(r["covering_mean"], r["refined_mean"]) for r in rows)
    checks.append({"what": "BLUE <= refined and covering (every row): max ratio", "reproduced":
                   worst, "expected": "<= 1", "source": "Gauss-Markov", "ok": worst <= 1 + 1e-12,
                   "deviation": None})
    C.write_csv(rows, out_dir, NAME)

    C.style()
    fig, axes = C.plt.subplots(len(NEIGHBOURS), len(BINS), figsize=(12, 8.6),
                                 squeeze=False)
    for ax, (nb, K) in zip(axes.ravel(), [(nb, K) for nb in NEIGHBOURS for K in BINS]):
        sub = [r for r in rows if r["n_bins"] == K and r["neighbours"] == nb]
        ks = [r["k"] for r in sub]
        for est in ESTIMATORS:
            ys = [r[f"{est}_mean"] for r in sub]
            kb = best[f"{nb} K={K}"][est]
            yb = next(r[f"{est}_mean"] for r in sub if r["k"] == kb)
            ax.plot(ks, ys, "-", color=COLORS[est], lw=1.3, label=f"{est} (best k = {kb})")
            ax.plot([kb], [yb], "o", color=COLORS[est], ms=8, mfc="none", mew=2)
            ax.annotate(f"k={kb}", (kb, yb), textcoords="offset points", xytext=(5, 5),
                        color=COLORS[est], fontsize=8.5)
        exact = [r["k"] for r in sub if r["padded_bins"] == K]
        ax.set_yscale("log")
        ax.set_xlabel("branching factor k (levels below the top)")
        ax.set_ylabel("mean per-prefix squared error (counts$^2$)")
        what = "N public" if nb == "swap" else "N private, root noised"
        ax.set_title(f"K = 2^{K.bit_length() - 1} bins, {nb} neighbours ({what})\n"
                     f"no padding at k = {', '.join(map(str, exact))}", fontsize=9.5)
        ax.legend(loc="upper right")
    C.caption(fig, "Beyond [RTS]: exact CDF error of the k-ary tree vs k for three estimators "
                   "(Laplace, eps = 1, equal budgets; top level k_1 = ceil(K / k^(h-1)), "
                   "h = ceil(log_k K), extra bins empty). Circles: each estimator's optimal k.")
    png = C.save_png(fig, out_dir, NAME, bottom=0.05)
    return {"name": NAME, "png": str(png), "csv": str(out_dir / f"{NAME}.csv"),
            "best_k": best, "rows": rows, "checks": checks}


if __name__ == "__main__":
    C.cli(run, NAME)
