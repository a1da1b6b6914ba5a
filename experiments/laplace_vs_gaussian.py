"""Laplace (pure eps-DP) vs Gaussian (rho-zCDP) noise on the same trees, exact CDF error vs K.

Matching: eps-DP implies (eps^2 / 2)-zCDP (Bun & Steinke 2016, Prop. 1.4), so the Gaussian
mechanism gets rho = eps^2 / 2: it is then at least as private as the Laplace one in the zCDP
sense (not in the pure-DP sense). With equal budgets over the L noisy levels a tree node gets
Lap(L Delta_1 / eps), variance 2 L^2 / eps^2 (add/remove, Delta_1 = 1 per level), or
N(0, sigma^2) with sigma^2 = L / (2 rho) = L / eps^2: the Gaussian/Laplace variance ratio is
1 / (2 L), so the taller the tree the more the Gaussian wins.

Trees: binary, 16-ary (both padded to k^h, h = ceil(log_k K)) and the best tree for the BLUE
found by ``optimize.level_uniform`` for each noise. Estimator: BLUE; add/remove neighbours
(N private); eps = 1. Errors: mean per-prefix squared error (counts^2) of the first K prefixes
(``optimize.design_error``, exact).
"""

from __future__ import annotations

from pathlib import Path

from dptree_opt import optimize
from dptree_opt.strategies import padded_height

import _experiments as C  # experiments/_experiments.py (on sys.path: script dir / load_script)

NAME = "laplace_vs_gaussian"
EPSILON = 1.0
RHO = EPSILON**2 / 2.0  # eps-DP => eps^2/2-zCDP
NEIGHBOURS = "add_remove"
ESTIMATOR = "blue"
BINS = tuple(2**m for m in range(4, 21, 2))
QUICK_BINS = tuple(2**m for m in range(4, 15, 2))  # level_uniform above 2^14 takes seconds each
TREES = ("binary", "16-ary", "best")
# --set NAME=VALUE on the command line (dptree-opt experiment laplace_vs_gaussian --help)
PARAMETERS = {
    "K": {"type": "ints", "sets": ("BINS", "QUICK_BINS"), "min": 2, "help": "bins K"},
    "epsilon": {"type": "float", "sets": ("EPSILON",), "min": 1e-6,
                "help": "Laplace budget (set rho too to change the Gaussian one)"},
    "rho": {"type": "float", "sets": ("RHO",), "min": 1e-6,
            "help": "Gaussian budget (zCDP; default eps^2 / 2)"},
    "neighbours": {"type": "str", "sets": ("NEIGHBOURS",), "choices": ("add_remove", "swap"),
                   "help": "neighbour model"},
}


def _shape(tree: str, K: int, noise: str) -> tuple:
    if tree == "binary":
        return (2,) * padded_height(K, 2)
    if tree == "16-ary":
        return (16,) * padded_height(K, 16)
    kw = {"epsilon": EPSILON} if noise == "laplace" else {"rho": RHO}
    return optimize.level_uniform(K, estimator=ESTIMATOR, noise=noise, neighbours=NEIGHBOURS,
                                  budgets="equal", top=0, **kw).branching


def run(out_dir: Path, quick: bool = True) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for K in (QUICK_BINS if quick else BINS):
        for tree in TREES:
            row = {"n_bins": K, "tree": tree}
            for noise, budget in (("laplace", EPSILON), ("gaussian", RHO)):
                ks = _shape(tree, K, noise)
                err = optimize.design_error(K, ks, estimator=ESTIMATOR, noise=noise,
                                            neighbours=NEIGHBOURS, total_budget=budget)
                row[f"{noise}_branching"] = " ".join(map(str, ks))
                row[f"{noise}_mean"] = err / K
            row["ratio_gaussian_over_laplace"] = row["gaussian_mean"] / row["laplace_mean"]
            rows.append(row)
    # equal-variance trees (binary, 16-ary: the same shape for both noises): the ratio is
    # 1 / (2 L) exactly, L = h + 1 noisy levels (module docstring)
    checks = [C.check(f"Gaussian / Laplace ratio, {r['tree']}, K = {r['n_bins']}",
                      r["ratio_gaussian_over_laplace"],
                      1.0 / (2 * (len(r["laplace_branching"].split()) + 1)),
                      "variance ratio 1 / (2 L) (module docstring)")
              for r in rows if r["tree"] != "best"]
    C.write_csv(rows, out_dir, NAME)
    C.style()
    fig, (ax, ax2) = C.plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"binary": "#1f77b4", "16-ary": "#2ca02c", "best": "#d62728"}
    for tree in TREES:
        sub = [r for r in rows if r["tree"] == tree]
        Ks = [r["n_bins"] for r in sub]
        ax.plot(Ks, [r["laplace_mean"] for r in sub], "-o", ms=3, color=colors[tree],
                label=f"{tree}, Laplace eps = {EPSILON:g}")
        ax.plot(Ks, [r["gaussian_mean"] for r in sub], "--s", ms=3, color=colors[tree],
                label=f"{tree}, Gaussian rho = {RHO:g}")
        ax2.plot(Ks, [r["ratio_gaussian_over_laplace"] for r in sub], "-o", ms=3,
                 color=colors[tree], label=tree)
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xlabel("number of bins K")
    ax.set_yscale("log")
    ax.set_ylabel("mean per-prefix squared error (counts$^2$)")
    ax.set_title("BLUE, add/remove neighbours (N private)")
    ax.legend(ncol=2, fontsize=7.5)
    ax2.set_ylabel("Gaussian error / Laplace error")
    ax2.set_title("ratio (below 1: Gaussian better)")
    ax2.legend()
    binary_best = [r["n_bins"] for r in rows if r["tree"] == "best"
                   and set(r["gaussian_branching"].split()) == {"2"}]
    note = (f" Under Gaussian noise the best tree is binary for K >= {min(binary_best)} (dashed "
            "red on dashed blue)." if binary_best else "")
    C.caption(fig, "Laplace eps-DP vs Gaussian rho-zCDP matched by rho = eps^2/2 (eps-DP implies "
                   "eps^2/2-zCDP); equal budgets per level; binary and 16-ary trees padded to "
                   "k^h, 'best' = optimize.level_uniform for each noise. Exact errors." + note)
    png = C.save_png(fig, out_dir, NAME, bottom=0.07)
    last = {r["tree"]: r["ratio_gaussian_over_laplace"] for r in rows
            if r["n_bins"] == rows[-1]["n_bins"]}
    return {"name": NAME, "png": str(png), "csv": str(out_dir / f"{NAME}.csv"),
            "ratio_at_largest_K": last, "rows": rows, "checks": checks}


if __name__ == "__main__":
    C.cli(run, NAME)
