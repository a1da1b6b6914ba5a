"""[RTS] Theorem IV.2 (and IV.3): optimal per-level budgets eps_l given the branching factors,
optimal real branching factors given the budgets, and both jointly.

Setting of the paper: level-uniform tree, covering estimator, swap (N public), Laplace;
error (4K / N^2) sum_l (k_l - 1) / eps_l^2 (Thm IV.1).

* Thm IV.2(a) (problem O1): eps_l = eps (k_l - 1)^(1/3) / sum_m (k_m - 1)^(1/3), minimum
  (4K / (N eps)^2) (sum_l (k_l - 1)^(1/3))^3. Solved with cvxpy by ``optimize.budgets`` and
  compared with the closed form and with the exact error of a ``Mechanism`` carrying those
  budgets (``expected_error(..., "covering")``).
* Thm IV.2(b) (problem O2): k_l proportional to eps_l^2 (``optimize.branching``, cvxpy, vs
  the closed form).
* Thm IV.3: for fixed h and k_l >= 3, k_l = K^(1/h), eps_l = eps / h (``optimize.joint``).

Four trees over K = 1024 bins are compared: (4, 8, 32), (2, 4, 8, 16), (64, 16), (2, 2, 2, 128).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import dptree_opt as dp
from dptree_opt import optimize, strategies, workloads
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "rts_budget_splits"
TITLE = "[RTS] Theorem IV.2: optimal per-level budgets (and branching) vs equal splits"
EPS = 1.0
TREES = [(4, 8, 32), (2, 4, 8, 16), (64, 16), (2, 2, 2, 128)]
O2_CASES = [(4096, (0.2, 0.3, 0.5)), (4096, (1 / 7, 2 / 7, 4 / 7))]
JOINT = [(4096, 3), (17**3, 3)]


def exact_covering(ks, eps_l) -> float:
    """Exact covering CDF error (counts^2) of the tree with the given level budgets."""
    K = math.prod(ks)
    mech = dp.Mechanism(strategies.tree(K, list(ks)), epsilon=EPS, neighbours="swap",
                        level_budgets=list(eps_l))
    return dp.expected_error(workloads.prefix(K), mech, "covering")


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    checks, rows = [], []
    src_a = "[RTS] Thm IV.2(a); docs/math.md sec. 4"
    for ks in TREES:
        K = math.prod(ks)
        h = len(ks)
        design = optimize.budgets(ks, EPS)
        closed = optimize.budgets_closed_form(ks, EPS)
        # the closed form, typed in independently here
        r = np.cbrt(np.array(ks, float) - 1)
        mine = EPS * r / r.sum()
        err_opt = exact_covering(ks, design.budgets)
        err_eq = exact_covering(ks, [EPS / h] * h)
        formula_opt = 4 * K / EPS**2 * r.sum() ** 3
        formula_eq = 4 * K * h**2 / EPS**2 * sum(k - 1 for k in ks)
        checks.append(C.check(f"{ks}: cvxpy eps_l = closed form (max abs dev.)",
                              float(np.max(np.abs(np.array(design.budgets) - mine))), 0.0,
                              src_a, abs_tol=1e-6))
        checks.append(C.check(f"{ks}: optimize.budgets_closed_form = (k_l-1)^(1/3) rule",
                              float(np.max(np.abs(np.array(closed) - mine))), 0.0, src_a,
                              abs_tol=1e-14))
        checks.append(C.check(f"{ks}: exact error at optimal budgets = (4K/eps^2)(sum (k-1)^(1/3))^3",
                              err_opt, formula_opt, src_a, rel=1e-9))
        checks.append(C.check(f"{ks}: exact error at equal budgets = 4K h^2 sum(k-1)/eps^2",
                              err_eq, formula_eq, "[RTS] Thm IV.1", rel=1e-12))
        checks.append(C.bound_check(f"{ks}: optimal / equal error", err_opt / err_eq, 1.0,
                                    src_a))
        rows.append({"branching": ks, "K": K, "optimal": list(design.budgets),
                     "closed_form": list(mine), "equal": [EPS / h] * h,
                     "error_optimal": err_opt, "error_equal": err_eq,
                     "ratio": err_opt / err_eq,
                     "normalised_optimal": err_opt / (4 * K / EPS**2),
                     "normalised_equal": err_eq / (4 * K / EPS**2)})

    o2 = []
    src_b = "[RTS] Thm IV.2(b); docs/math.md sec. 4"
    for K, shares in O2_CASES:
        e = np.array(shares) * EPS
        design = optimize.branching(K, e)
        h = e.size
        mine = K ** (1 / h) * e**2 / np.prod(e) ** (2 / h)
        checks.append(C.check(f"O2 K={K}, eps_l={tuple(round(x, 3) for x in shares)}: cvxpy k_l = "
                              "closed form (max rel. dev.)",
                              float(np.max(np.abs(np.array(design.branching) / mine - 1))), 0.0,
                              src_b, abs_tol=1e-5))
        checks.append(C.check(f"O2 K={K}: prod k_l = K", math.prod(design.branching), K, src_b,
                              rel=1e-9))
        o2.append({"K": K, "budgets": e, "branching_cvxpy": list(design.branching),
                   "branching_closed_form": mine, "normalised_error": design.normalised_error})

    joint = []
    src_c = "[RTS] Thm IV.3"
    for K, h in JOINT:
        d = optimize.joint(K, EPS, h)
        kk = K ** (1 / h)
        checks.append(C.check(f"joint K={K}, h={h}: k_l = K^(1/h) = {kk:.4g} (max rel. dev.)",
                              float(np.max(np.abs(np.array(d.branching) / kk - 1))), 0.0, src_c,
                              abs_tol=1e-5))
        checks.append(C.check(f"joint K={K}, h={h}: eps_l = eps/h (max abs dev.)",
                              float(np.max(np.abs(np.array(d.budgets) - EPS / h))), 0.0, src_c,
                              abs_tol=1e-5))
        checks.append(C.check(f"joint K={K}, h={h}: error = 4K h^3 (K^(1/h)-1)/eps^2", d.error,
                              4 * K * h**3 * (kk - 1) / EPS**2, src_c, rel=1e-6))
        joint.append({"K": K, "h": h, "branching": list(d.branching), "budgets": list(d.budgets),
                      "error": d.error})

    # ------------------------------------------------------------------ figure
    fig = C.plt.figure(figsize=(15, 9.6))
    gs = fig.add_gridspec(2, 4, height_ratios=[1.0, 0.8], hspace=0.55, wspace=0.32)
    for i, row in enumerate(rows):
        ax = fig.add_subplot(gs[0, i])
        h = len(row["branching"])
        x = np.arange(1, h + 1)
        ax.bar(x - 0.2, row["equal"], width=0.4, color="#bbbbbb", label="equal ε/h")
        ax.bar(x + 0.2, row["optimal"], width=0.4, color=C.PALETTE["17-ary"],
               label="optimal (cvxpy, O1)")
        ax.plot(x + 0.2, row["closed_form"], "k_", ms=16, mew=2,
                label="closed form ∝ (k_l − 1)^⅓")
        ax.set_xticks(x)
        ax.set_xticklabels([f"{l}\nk={k}" for l, k in zip(x, row["branching"])])
        ax.set_xlabel("level l (root = level 0 is N, free)")
        if i == 0:
            ax.set_ylabel("budget ε_l (ε = 1 in total)")
        ax.set_ylim(0, 0.75)
        ax.set_title(f"tree {row['branching']}, K = {row['K']}\noptimal/equal error = "
                     f"{row['ratio']:.3f}", fontsize=10.5)
        if i == 0:
            ax.legend(loc="upper left", fontsize=8.5)
    ax = fig.add_subplot(gs[1, 0:2])
    labels = [str(r["branching"]) for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["normalised_equal"] for r in rows], width=0.4, color="#bbbbbb",
           label="equal budgets: h² Σ(k_l − 1)")
    ax.bar(x + 0.2, [r["normalised_optimal"] for r in rows], width=0.4,
           color=C.PALETTE["17-ary"], label="optimal budgets: (Σ(k_l − 1)^⅓)³")
    for xi, r in zip(x, rows):
        ax.text(xi + 0.2, r["normalised_optimal"] * 1.02, f"{r['normalised_optimal']:.0f}",
                ha="center", fontsize=8.5)
        ax.text(xi - 0.2, r["normalised_equal"] * 1.02, f"{r['normalised_equal']:.0f}",
                ha="center", fontsize=8.5)
    ax.set_xticks(x)
    ax.set_xticklabels(labels)
    ax.set_ylabel("error / (4K/ε²)  (dimensionless)")
    ax.set_title("(e) exact covering error, equal vs Thm IV.2(a) budgets (K = 1024)")
    ax.legend(loc="upper left", fontsize=8.5)
    ax.set_ylim(0, max(r["normalised_equal"] for r in rows) * 1.2)

    ax = fig.add_subplot(gs[1, 2:4])
    width = 0.35
    for j, case in enumerate(o2):
        h = len(case["budgets"])
        xx = np.arange(h) + j * (h + 1)
        ax.bar(xx - width / 2, case["branching_cvxpy"], width=width, color=C.PALETTE["binary"],
               label="optimal real k_l (cvxpy, O2)" if j == 0 else None)
        ax.bar(xx + width / 2, case["branching_closed_form"], width=width, color="#9ecae1",
               label="closed form K^(1/h) ε_l² / (Π ε_m)^(2/h)" if j == 0 else None)
        for xi, kv in zip(xx, case["branching_cvxpy"]):
            ax.text(xi - width / 2, kv + 0.8, f"{kv:.2f}", ha="center", fontsize=8)
        ax.text(xx.mean(), 1.0, f"K = {case['K']}", ha="center", va="bottom", fontsize=9,
                transform=ax.get_xaxis_transform())
    ax.set_xticks(np.concatenate([np.arange(len(c["budgets"])) + j * (len(c["budgets"]) + 1)
                                  for j, c in enumerate(o2)]))
    ax.set_xticklabels([f"level {l + 1}\nε_l = {c['budgets'][l]:.3f}" for c in o2
                        for l in range(len(c["budgets"]))], fontsize=8.5)
    ax.set_ylabel("branching factor k_l (real)")
    ax.set_title("(f) Thm IV.2(b): optimal real branching for given budgets (k_l ∝ ε_l²)",
                 pad=16)
    ax.legend(loc="upper left", fontsize=8.5)
    fig.suptitle("Theorem IV.2 of [RTS]: optimal per-level privacy budgets for fixed branching "
                 "(a-d: budgets per level, e: errors) and optimal branching for fixed budgets (f)",
                 fontsize=12)
    jt = "; ".join(f"K={j['K']}, h={j['h']}: k_l = {j['branching'][0]:.3f}, ε_l = "
                   f"{j['budgets'][0]:.4f}" for j in joint)
    C.caption(fig, "Reproduces [RTS] (arXiv 2409.18573) Thm IV.2 (a), (b); Thm IV.3 (joint, "
                   f"k_l ≥ 3): {jt}. Swap, Laplace, covering estimator, exact errors.",
              y=0.008)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.1)
    # panel letters for the four budget plots
    for i, a in enumerate(fig.axes[:4]):
        a.set_title(f"({'abcd'[i]}) " + a.get_title(), fontsize=10.5)
    png = C.save_png(fig, out_dir, NAME)
    data = {"epsilon": EPS, "trees": rows, "o2": o2, "joint": joint, "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
