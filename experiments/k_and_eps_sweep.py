"""The best tree over K and eps: exact search (``optimize.level_uniform``) for each pair.

For K = 2^6 .. 2^20 bins and eps in EPSILONS, the best level-uniform tree (equal budgets,
padding allowed up to 2K) for the covering sums and for the BLUE, and its mean per-prefix
squared error (counts^2). Under Laplace noise every node variance scales as 1/eps^2, so the
best shape should not depend on eps and eps^2 x error should be one curve per estimator: the
sweep checks it (``shape_depends_on_eps`` in the result). Laplace, swap neighbours (N public).
"""

from __future__ import annotations

from pathlib import Path

from dptree_opt import optimize

import _experiments as C  # experiments/_experiments.py (on sys.path: script dir / load_script)

NAME = "k_and_eps_sweep"
BINS = tuple(2**m for m in range(6, 21, 2))
QUICK_BINS = tuple(2**m for m in range(6, 13, 2))
EPSILONS = (0.25, 0.5, 1.0, 2.0)
NEIGHBOURS = "swap"
ESTIMATORS = ("covering", "blue")
# --set NAME=VALUE on the command line (dptree-opt experiment k_and_eps_sweep --help)
PARAMETERS = {
    "K": {"type": "ints", "sets": ("BINS", "QUICK_BINS"), "min": 2, "help": "bins K"},
    "epsilon": {"type": "floats", "sets": ("EPSILONS",), "min": 1e-6,
                "help": "Laplace budgets (a comma list)"},
    "neighbours": {"type": "str", "sets": ("NEIGHBOURS",), "choices": ("add_remove", "swap"),
                   "help": "neighbour model"},
}


def run(out_dir: Path, quick: bool = True) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for K in (QUICK_BINS if quick else BINS):
        for eps in EPSILONS:
            for est in ESTIMATORS:
                d = optimize.level_uniform(K, eps, estimator=est, neighbours=NEIGHBOURS,
                                           budgets="equal", top=0)
                rows.append({"n_bins": K, "epsilon": eps, "estimator": est,
                             "branching": " ".join(map(str, d.branching)),
                             "height": d.height, "padded_bins": d.padded_bins,
                             "mean_error": d.error / K, "eps2_times_mean": eps**2 * d.error / K})
    shapes = {}
    for r in rows:
        shapes.setdefault((r["n_bins"], r["estimator"]), set()).add(r["branching"])
    depends = {f"{K} {est}": len(s) > 1 for (K, est), s in shapes.items()}
    C.write_csv(rows, out_dir, NAME)
    C.style()
    fig, (ax, ax2) = C.plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {0.25: "#9467bd", 0.5: "#1f77b4", 1.0: "#2ca02c", 2.0: "#d62728"}
    marks = {"covering": "-o", "blue": "--s"}
    for est in ESTIMATORS:
        for eps in EPSILONS:
            sub = [r for r in rows if r["estimator"] == est and r["epsilon"] == eps]
            ax.plot([r["n_bins"] for r in sub], [r["mean_error"] for r in sub], marks[est],
                    ms=3, color=colors[eps], label=f"{est}, eps = {eps:g}")
        sub = [r for r in rows if r["estimator"] == est and r["epsilon"] == 1.0]
        ax2.plot([r["n_bins"] for r in sub], [r["eps2_times_mean"] for r in sub], marks[est],
                 color="k" if est == "covering" else "#1f77b4", label=f"{est} (every eps)")
        for r in sub:
            ax2.annotate(r["branching"].replace(" ", ","), (r["n_bins"], r["eps2_times_mean"]),
                         textcoords="offset points", xytext=(3, 5 if est == "covering" else -11),
                         fontsize=6.5, color="k" if est == "covering" else "#1f77b4")
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("number of bins K")
    ax.set_ylabel("mean per-prefix squared error (counts$^2$)")
    ax.set_title("best tree for each (K, eps)")
    ax.legend(ncol=2, fontsize=7)
    ax2.set_ylabel("eps$^2$ x mean per-prefix error")
    ax2.set_title("scaled by eps$^2$ (labels: best branching, root first)")
    ax2.legend()
    C.caption(fig, "Best level-uniform tree by exact search (optimize.level_uniform, equal budgets, "
                   "padding <= 2K) over K and eps; Laplace, swap neighbours (N public).")
    png = C.save_png(fig, out_dir, NAME, bottom=0.07)
    return {"name": NAME, "png": str(png), "csv": str(out_dir / f"{NAME}.csv"),
            "shape_depends_on_eps": any(depends.values()), "rows": rows}


if __name__ == "__main__":
    C.cli(run, NAME)
