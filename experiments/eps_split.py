"""Per-level budget splits: equal vs [RTS]-optimal (covering) vs BLUE-optimal, on a few trees.

For each tree, three splits of eps over its noisy levels:
* equal: eps / L per level (the Mechanism's default);
* [RTS]-optimal: Thm IV.2(a), optimal for the covering estimator (``optimize.budgets``; under
  swap, N public, the [RTS] setting);
* BLUE-optimal: ``optimize.optimal_blue_budgets`` (optimal for the BLUE).
Each split is scored under both estimators (``optimize.design_error``, exact): the CDF error
of a split optimised for one estimator, used with the other. Laplace, eps = 1, swap
neighbours (N public, the root exact and free), K = 4096 bins.
"""

from __future__ import annotations

from pathlib import Path

from dptree_opt import optimize

import _experiments as C  # experiments/_experiments.py (on sys.path: script dir / load_script)

NAME = "eps_split"
EPSILON = 1.0
NEIGHBOURS = "swap"
TREES = ((2,) * 12, (4,) * 6, (8,) * 4, (16,) * 3, (64, 64), (4, 8, 128))
SPLITS = ("equal", "RTS-optimal", "BLUE-optimal")
ESTIMATORS = ("covering", "blue")
# --set NAME=VALUE on the command line (dptree-opt experiment eps_split --help)
PARAMETERS = {
    "epsilon": {"type": "float", "sets": ("EPSILON",), "min": 1e-6, "help": "Laplace budget"},
    "neighbours": {"type": "str", "sets": ("NEIGHBOURS",), "choices": ("add_remove", "swap"),
                   "help": "neighbour model"},
}


def run(out_dir: Path, quick: bool = True) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for ks in TREES:
        K = 1
        for k in ks:
            K *= k
        splits = {"equal": (EPSILON / len(ks),) * len(ks),
                  "RTS-optimal": optimize.budgets(ks, EPSILON).budgets,
                  "BLUE-optimal": optimize.optimal_blue_budgets(ks, EPSILON,
                                                                neighbours=NEIGHBOURS).budgets}
        for name, b in splits.items():
            row = {"tree": ",".join(map(str, ks)), "n_bins": K, "split": name,
                   "budgets": " ".join(f"{x:.12g}" for x in b)}
            for est in ESTIMATORS:
                row[f"{est}_mean"] = optimize.design_error(
                    K, ks, b, estimator=est, neighbours=NEIGHBOURS, total_budget=EPSILON) / K
            rows.append(row)
    C.write_csv(rows, out_dir, NAME)
    C.style()
    fig, axes = C.plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"equal": "#7f7f7f", "RTS-optimal": "#d62728", "BLUE-optimal": "#1f77b4"}
    width = 0.27
    for ax, est in zip(axes, ESTIMATORS):
        for i, split in enumerate(SPLITS):
            vals = [r[f"{est}_mean"] for r in rows if r["split"] == split]
            xs = [t + (i - 1) * width for t in range(len(TREES))]
            finite = [v if v < float("inf") else float("nan") for v in vals]
            ax.bar(xs, finite, width, color=colors[split], label=f"{split} budgets", log=True)
            for x, v in zip(xs, vals):
                if not v < float("inf"):  # a level with budget 0 leaves covering sums undefined
                    ax.text(x, 0.02, "inf", transform=ax.get_xaxis_transform(), ha="center",
                            color=colors[split], fontsize=8, rotation=90)
        ax.set_xticks(range(len(TREES)))
        ax.set_xticklabels(["(" + ",".join(map(str, ks)) + ")" if len(set(ks)) > 1
                            else f"{ks[0]}^{len(ks)}" for ks in TREES])
        ax.set_xlabel("tree (branching factors, root first)")
        ax.set_ylabel("mean per-prefix squared error (counts$^2$)")
        ax.set_title(f"scored with the {est} estimator")
        ax.legend(fontsize=8)
    C.caption(fig, "Budget splits over tree levels (K = 4096, Laplace, eps = 1, swap: N public). "
                   "[RTS] Thm IV.2(a) is optimal for covering sums; the BLUE prefers other "
                   "splits (less budget at the top; 'inf': it leaves levels unfunded, which covering sums cannot use). Exact errors.")
    png = C.save_png(fig, out_dir, NAME, bottom=0.07)
    gains = {}
    for ks in TREES:
        t = ",".join(map(str, ks))
        by = {r["split"]: r for r in rows if r["tree"] == t}
        gains[t] = {"blue: equal / BLUE-optimal": by["equal"]["blue_mean"]
                    / by["BLUE-optimal"]["blue_mean"],
                    "blue: RTS-optimal / BLUE-optimal": by["RTS-optimal"]["blue_mean"]
                    / by["BLUE-optimal"]["blue_mean"],
                    "covering: equal / RTS-optimal": by["equal"]["covering_mean"]
                    / by["RTS-optimal"]["covering_mean"]}
    return {"name": NAME, "png": str(png), "csv": str(out_dir / f"{NAME}.csv"),
            "gains": gains, "rows": rows}


if __name__ == "__main__":
    C.cli(run, NAME)
