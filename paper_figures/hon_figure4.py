"""[HON] Figure 4: per-node MSE of the raw, below, above and efficient estimates, by depth.

Honaker, "Efficient Use of Differentially Private Binary Trees" (TPDP 2015), Sec. 4: 10,000
perfect binary trees with 16 leaves (5 levels, depth 0..4), leaves Poisson(10), Gaussian noise
sd 3 on every node (raw MSE 9), N known. For each tree: t^- (from below), t^+ (from above) and
t^* (fully efficient) for every node, and the squared error of each. The exact variances come
from the same recursions' variance formulas and, independently, from the generic GLS
covariance diag(A Cov A') (t^* is the BLUE; docs/math.md section 2).

Our setting: ``Mechanism(tree(16, [2,2,2,2]), noise="gaussian", rho=4/9,
level_budgets=[1/9]*4)`` (swap: N public, one level's l2 sensitivity sqrt(2), so
sigma_l^2 = 2 / (2 rho_l) = 9 on every non-root node). The root carries N exactly; its
measurement would be ignored anyway when N is known.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import dptree_opt as dp
from dptree_opt import strategies
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "hon_figure4"
TITLE = "[HON] Figure 4: per-node MSE of raw, below, above and efficient estimates by depth"
SIGMA = 3.0
LEAVES = 16
TRIALS_FULL = 10_000  # [HON] Sec. 4
TRIALS_QUICK = 10_000  # cheap (~0.3 s): quick mode keeps the published count
SEED = 20150611

ESTIMATORS = ("raw", "below", "above", "efficient")
LABELS = {"raw": "raw private value t_i", "below": "from below t⁻", "above": "from above t⁺",
          "efficient": "fully efficient t*"}


def mechanism() -> dp.Mechanism:
    """The [HON] Sec. 4 tree: 16 leaves, Gaussian sd 3 on every non-root node, N known."""
    h = 4
    return dp.Mechanism(strategies.tree(LEAVES, [2] * h), noise="gaussian", neighbours="swap",
                        rho=h / SIGMA**2, level_budgets=[1 / SIGMA**2] * h)


def simulate(mech: dp.Mechanism, trials: int, rng: np.random.Generator) -> dict:
    """Squared errors per node (trials, nodes) of each estimator; fresh data every tree."""
    A = mech.released
    hist = rng.poisson(10.0, size=(trials, LEAVES))
    truth = A.apply(hist.T).T  # (trials, nodes)
    y = truth + mech.sample_noise(rng, size=trials)
    est = dp.tree_estimates(mech, y)
    vals = {"raw": y, "below": est.below, "above": est.above, "efficient": est.efficient}
    return {k: (v - truth) ** 2 for k, v in vals.items()}


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    trials = TRIALS_QUICK if quick else TRIALS_FULL
    rng = np.random.default_rng(SEED)
    mech = mechanism()
    A = mech.released
    levels = np.asarray(A.levels)
    nodes = np.flatnonzero(levels > 0)  # the 30 noisy nodes (root = N, exact)
    depth = levels[nodes]

    # exact variances: the recursions' formulas, and the generic GLS as an independent path
    est0 = dp.tree_estimates(mech, np.zeros(A.n_rows))
    exact = {"raw": np.asarray(mech.variances)[nodes], "below": est0.below_var[nodes],
             "above": est0.above_var[nodes], "efficient": est0.efficient_var[nodes]}
    cov = dp.blue_covariance(mech)  # (16, 16) dense GLS covariance of the histogram
    M = A.matrix.toarray()
    gls_node_var = np.einsum("ij,jk,ik->i", M, cov, M)[nodes]

    sq = simulate(mech, trials, rng)
    mc = {k: v[:, nodes].mean(axis=0) for k, v in sq.items()}
    mc_se = {k: v[:, nodes].std(axis=0, ddof=1) / np.sqrt(trials) for k, v in sq.items()}

    depths = sorted(set(depth.tolist()))
    by_depth = {}
    for e in ESTIMATORS:
        by_depth[e] = {}
        for d in depths:
            sel = depth == d
            pooled = sq[e][:, nodes[sel]].mean(axis=1)  # per-tree mean over the depth's nodes
            by_depth[e][d] = {"exact": float(exact[e][sel][0]),
                              "mc": float(pooled.mean()),
                              "mc_se": float(pooled.std(ddof=1) / np.sqrt(trials)),
                              "exact_ratio": float(exact[e][sel][0] / SIGMA**2),
                              "mc_ratio": float(pooled.mean() / SIGMA**2)}

    # ------------------------------------------------------------------ checks
    src = "[HON] Sec. 4 / Fig. 4"
    checks = []
    s2 = SIGMA**2
    checks.append(C.check("exact t* variance = GLS diag(A Cov A') (max rel. dev. over 30 nodes)",
                          float(np.max(np.abs(exact["efficient"] / gls_node_var - 1))), 0.0,
                          "docs/math.md sec. 2 (Honaker = BLUE)", abs_tol=1e-10))
    checks.append(C.check("mean var(t*)/sigma^2 over the 30 noisy nodes (hat-matrix trace)",
                          float(exact["efficient"].mean() / s2), 15 / 30,
                          "docs/math.md sec. 2 identity", rel=1e-12))
    for e in ESTIMATORS:
        for d in depths:
            b = by_depth[e][d]
            z = abs(b["mc"] - b["exact"]) / b["mc_se"] if b["mc_se"] > 0 else 0.0
            checks.append(C.check(f"MC MSE {e}, depth {d} ({trials} trees) vs exact",
                                  round(b["mc"], 4), round(b["exact"], 6),
                                  "exact recursion variance", ok=bool(z <= 4.0),
                                  note=f"|z| = {z:.2f} (<= 4 standard errors)"))
    r1 = by_depth["efficient"][1]["exact_ratio"]
    rl = by_depth["efficient"][max(depths)]["exact_ratio"]
    checks.append(C.check("efficient/raw MSE ratio at depth 1 (exact)", r1, 0.25, src,
                          rel=0.1, note="paper: 'the high nodes have about one quarter the "
                          "squared error'; exact 0.2667 (= 2.4/9)"))
    checks.append(C.check("efficient/raw MSE ratio at the leaves (exact)", rl, 2 / 3, src,
                          rel=0.15, note="paper: 'even the terminal leaves have about a "
                          "one-third reduction' (ratio ~0.667); exact 0.605, a 39.5 % "
                          "reduction (docs/math.md: 'about 0.6')"))
    above_lt_below = all(by_depth["above"][d]["exact"] < by_depth["below"][d]["exact"]
                         for d in depths)
    checks.append(C.flag_check("above estimator has less error than below at every depth",
                               above_lt_below, "True", above_lt_below, src))
    dl = max(depths)
    tie = (abs(by_depth["below"][dl]["exact"] - s2) < 1e-12
           and abs(by_depth["above"][dl]["exact"] - by_depth["efficient"][dl]["exact"]) < 1e-12)
    checks.append(C.flag_check("leaves: below = raw and above = efficient (ties)", tie, "True",
                               tie, src))
    monotone = all(by_depth["efficient"][a]["exact"] < by_depth["efficient"][b]["exact"]
                   for a, b in zip(depths, depths[1:]))
    checks.append(C.flag_check("efficient MSE increases with depth (clusters by depth)",
                               monotone, "True", monotone, src))

    # ------------------------------------------------------------------ figure
    fig, axes = C.plt.subplots(1, 3, figsize=(14.5, 5.0))
    colors = {1: "#08306b", 2: "#2171b5", 3: "#6baed6", 4: "#9ecae1"}
    ax = axes[0]
    for d in depths:
        sel = depth == d
        ax.scatter(mc["raw"][sel], mc["efficient"][sel], s=28, color=colors[d],
                   edgecolor="k", linewidth=0.4, label=f"depth {d} ({sel.sum()} nodes)")
        ax.axhline(by_depth["efficient"][d]["exact"], color=colors[d], lw=1, ls="--")
    ax.set_xlabel("MSE of raw private node value (counts²)")
    ax.set_ylabel("MSE of fully efficient estimate t* (counts²)")
    ax.set_title("(a) efficient vs raw MSE per node\n(dashed: exact var(t*) by depth)")
    ax.legend(loc="center left", bbox_to_anchor=(0.01, 0.6))

    ax = axes[1]
    for i, e in enumerate(("below", "above", "efficient")):
        off = (i - 1) * 0.18
        for d in depths:
            sel = depth == d
            xs = d + off + np.linspace(-0.05, 0.05, sel.sum())
            ax.scatter(xs, mc[e][sel] / mc["raw"][sel], s=10, color=C.PALETTE[e], alpha=0.8,
                       label=LABELS[e] + " (MC, per node)" if d == depths[0] else None)
            ax.hlines(by_depth[e][d]["exact_ratio"], d + off - 0.09, d + off + 0.09,
                      color="k", lw=1.6, label="exact" if (d == depths[0] and i == 2) else None)
    for d in depths:
        r = by_depth["efficient"][d]["exact_ratio"]
        ax.annotate(f"{r:.3f}", (d + 0.18, r), xytext=(6, -3), textcoords="offset points",
                    fontsize=8.5, color=C.PALETTE["efficient"])
    ax.set_xticks(depths)
    ax.set_xlabel("node depth (0 = root = N, known)")
    ax.set_ylabel("MSE ratio to raw private value (dimensionless)")
    ax.set_ylim(0, 1.08)
    ax.set_title("(b) ratio of MSE to the raw node MSE")
    ax.legend(loc="lower right")

    ax = axes[2]
    for i, e in enumerate(ESTIMATORS):
        off = (i - 1.5) * 0.16
        ys = [by_depth[e][d]["mc"] for d in depths]
        es = [2 * by_depth[e][d]["mc_se"] for d in depths]
        ax.errorbar(np.array(depths) + off, ys, yerr=es, fmt="o", ms=5, color=C.PALETTE[e],
                    label=f"{LABELS[e]}")
        ax.hlines([by_depth[e][d]["exact"] for d in depths], np.array(depths) + off - 0.07,
                  np.array(depths) + off + 0.07, color="k", lw=1.5,
                  label="exact variance" if i == 0 else None)
    ax.axhline(SIGMA**2, color="#999999", lw=0.8, ls=":")
    ax.set_xticks(depths)
    ax.set_xlabel("node depth")
    ax.set_ylabel("mean squared error per node (counts²)")
    ax.set_ylim(0, 13.5)
    ax.set_title("(c) MSE by depth, every estimator\n(points: MC ± 2 se; bars: exact)")
    ax.legend(loc="upper center", ncol=2, fontsize=8.5)
    fig.suptitle(f"Honaker efficient estimates on a 16-leaf binary tree, Gaussian noise sd 3, "
                 f"N known, {trials:,} simulated trees", fontsize=12)
    C.caption(fig, "Reproduces [HON] Honaker (TPDP 2015), Sec. 4, Figure 4 (left and centre "
                   "panels; right panel as MSE by depth). Exact values: dptree_opt.tree_estimates "
                   "variances = GLS diag(A Cov A').")
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    png = C.save_png(fig, out_dir, NAME)

    data = {"setting": {"leaves": LEAVES, "sigma": SIGMA, "trials": trials, "seed": SEED,
                        "N_known": True, "leaf_counts": "Poisson(10), fresh per tree"},
            "node_order": "level by level, root first (root excluded: N known)",
            "node_depth": depth, "exact": exact, "gls_efficient_var": gls_node_var,
            "mc": mc, "mc_se": mc_se, "by_depth": by_depth, "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
