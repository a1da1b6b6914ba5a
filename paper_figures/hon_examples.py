"""[HON] worked examples (Sec. 3.2.1, 3.3, 3.3.1) and the Sec. 3.4 erratum, exact vs claimed.

Honaker, "Efficient Use of Differentially Private Binary Trees" (TPDP 2015). Every node has
the same noise variance s^2 (we use s^2 = 1: Gaussian, swap, rho_l = 1 per level, so
sigma_l^2 = 2 / (2 rho_l) = 1). Weights are read off the linear estimators by feeding unit
vectors through ``dptree_opt.tree_estimates``; variances are its exact variances.

The Sec. 3.4 claim "sigma(t^*) = sigma sqrt(2)/7 = 0.202 sigma, variance reduced by a factor
of 25, about eighty percent" does not follow from its own inputs: with
var(t^-) = var(t^-_sibling) = s^2/2 and var(t^+_parent) = s^2/3,
var(t^*) = 1 / (2 + 1/(1/3 + 1/2)) s^2 = 5 s^2 / 16 (docs/math.md section 2). The best case is a
depth-1 node of a tall tree with N known: s^2 / 4.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

import dptree_opt as dp
from dptree_opt import strategies
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "hon_examples"
TITLE = "[HON] worked examples and the Sec. 3.4 erratum (exact vs claimed)"
MAX_HEIGHT_FULL = 16
MAX_HEIGHT_QUICK = 14


def unit_tree(height: int, n_known: bool = True) -> dp.Mechanism:
    """Binary tree of the given height (2^height leaves), noise variance 1 on every noisy node.

    N known: swap neighbours (root = N exact), Gaussian rho_l = 1 (sensitivity sqrt 2).
    N unknown: add/remove, root noisy, rho_l = 1/2 (sensitivity 1), height + 1 levels."""
    K = 2**height
    if n_known:
        return dp.Mechanism(strategies.tree(K, [2] * height), noise="gaussian",
                            neighbours="swap", rho=float(height),
                            level_budgets=[1.0] * height)
    return dp.Mechanism(strategies.tree(K, [2] * height), noise="gaussian",
                        neighbours="add_remove", rho=(height + 1) / 2.0,
                        level_budgets=[0.5] * (height + 1))


def node_row(mech: dp.Mechanism, level: int, index: int) -> int:
    """Row of node ``index`` (0-based, left to right) of ``level`` (0 = root)."""
    return mech.released.level_slice(level).start + index


def weight(mech: dp.Mechanism, attr: str, target: int, source: int) -> float:
    """d (estimate of node ``target``) / d (measurement of node ``source``): linear estimator."""
    y = np.zeros(mech.released.n_rows)
    y[source] = 1.0
    return float(getattr(dp.tree_estimates(mech, y), attr)[target])


def variances(mech: dp.Mechanism):
    return dp.tree_estimates(mech, np.zeros(mech.released.n_rows))


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    H = MAX_HEIGHT_QUICK if quick else MAX_HEIGHT_FULL
    checks, rows, colors = [], [], []
    ok_col, err_col = "#e5f5e0", "#fde0dd"

    def row(item, claim, ours, status, good=True):
        def pretty(text):
            for a, b in (("t_10^-", "t₁₀⁻"), ("t_10^+", "t₁₀⁺"), ("t^-", "t⁻"), ("t^+", "t⁺"),
                         ("t^*", "t*"), ("t_1000", "t₁₀₀₀"), ("t_1011", "t₁₀₁₁"),
                         ("t_100", "t₁₀₀"), ("t_101", "t₁₀₁"), ("t_10", "t₁₀"), ("c_j", "cⱼ")):
                text = text.replace(a, b)
            return text
        rows.append([pretty(item), pretty(claim), pretty(ours), status])
        colors.append(ok_col if good else err_col)

    # --- Sec. 3.2.1: the 8-leaf tree (figure 1 of [HON]), t_10 = left child of the root
    m8 = unit_tree(3)
    t10 = node_row(m8, 1, 0)
    w_self = weight(m8, "below", t10, t10)
    w_child = weight(m8, "below", t10, node_row(m8, 2, 0))
    w_grand = weight(m8, "below", t10, node_row(m8, 3, 0))
    v8 = variances(m8)
    src = "[HON] Sec. 3.2.1, eq. (9)"
    checks.append(C.check("weight of t_10 in t_10^- (8-leaf tree)", w_self, 4 / 7, src))
    checks.append(C.check("weight of t_100 in t_10^-", w_child, 2 / 7, src))
    checks.append(C.check("weight of t_1000 in t_10^-", w_grand, 1 / 7, src))
    checks.append(C.check("var(t_10^-) / s^2 (Remark 2: = weight)", float(v8.below_var[t10]),
                          4 / 7, "[HON] Remark 2; docs/math.md sec. 2"))
    row("Sec. 3.2.1 eq. (9): weights in t_10^-\n(8 leaves, equal s)",
        "t_10: 4/7 ≈ 0.571; t_100, t_101: (1/2)/(7/4);\nt_1000..t_1011: (1/4)/(7/4)",
        f"{w_self:.6f} = 4/7; {w_child:.6f} = 2/7;\n{w_grand:.6f} = 1/7", "matches")
    row("var(t_10^-)", "σ(t^-) = σ √c_j  ⇒  4/7 s²", f"{v8.below_var[t10]:.6f} s² = 4/7 s²",
        "matches")

    # --- Sec. 3.3.1: t_10^+ with N known in the 8-leaf tree
    w_plus = weight(m8, "above", t10, t10)
    v_plus = float(v8.above_var[t10])
    src = "[HON] Sec. 3.3.1, eq. (12)"
    checks.append(C.check("var(t_10^+) / s^2, 8 leaves, N known", v_plus, 4 / 11, src))
    checks.append(C.check("weight of t_10 in t_10^+ = 1/(1 + c^-) with c^- = 7/4", w_plus, 4 / 11,
                          src))
    row("Sec. 3.3.1 eq. (12): t_10^+, N known", "se = σ/√(11/4)  ⇒  var 4/11 s² ≈ 0.3636 s²",
        f"{v_plus:.6f} s² (se {np.sqrt(v_plus):.4f} σ)", "matches")

    # --- tall-tree limits: var(t^-), var(t^+), var(t^*) at depths 1 and 2 vs height
    heights = list(range(2, H + 1))
    curves = {f"{e}_d{d}": [] for e in ("below", "above", "efficient") for d in (1, 2)}
    for h in heights:
        mh = unit_tree(h)
        vh = variances(mh)
        for d in (1, 2):
            r = node_row(mh, d, 0)
            curves[f"below_d{d}"].append(float(vh.below_var[r]))
            curves[f"above_d{d}"].append(float(vh.above_var[r]))
            curves[f"efficient_d{d}"].append(float(vh.efficient_var[r]))
    lim_below = curves["below_d1"][-1]
    lim_above = curves["above_d1"][-1]
    lim_eff1 = curves["efficient_d1"][-1]
    lim_eff2 = curves["efficient_d2"][-1]
    tol = 2.0 ** (-H + 4)  # the limits are approached geometrically in the height
    checks.append(C.check(f"var(t^-) at depth 1, height {H} (tall-tree limit 1/2)", lim_below,
                          0.5, "[HON] Sec. 3.2", abs_tol=tol))
    checks.append(C.check(f"var(t^+) at depth 1, height {H}, N known (best case 1/3)",
                          lim_above, 1 / 3, "[HON] Sec. 3.3", abs_tol=tol))
    row("Sec. 3.2: tall tree, var(t^-)", "σ(t^-) → σ/√2  ⇒  s²/2",
        f"{lim_below:.6f} s² (height {H})", "matches")
    row("Sec. 3.3: tall tree, best-case t^+\n(depth 1, N known)", "σ/√3  ⇒  s²/3",
        f"{lim_above:.6f} s² (height {H})", "matches")

    # --- Sec. 3.4: the erratum
    paper_sd = np.sqrt(2) / 7
    fixed = 1.0 / (2.0 + 1.0 / (1.0 / 3.0 + 1.0 / 2.0))  # (13) with the paper's inputs
    src = "[HON] Sec. 3.4, eq. (13); docs/math.md sec. 2 erratum"
    checks.append(C.check("eq. (13) with var(t^-)=var(t^-_sib)=1/2, var(t^+_par)=1/3",
                          fixed, float(Fraction(5, 16)), src, rel=1e-12,
                          note="[HON] claims sd 0.202σ (variance 2/49 = 0.0408 s²)"))
    checks.append(C.check(f"var(t^*) at depth 2 of a height-{H} tree, N known", lim_eff2,
                          5 / 16, src, abs_tol=tol))
    checks.append(C.check(f"best case: var(t^*) at depth 1, height {H}, N known", lim_eff1,
                          1 / 4, "docs/math.md sec. 2 (75 % MSE reduction)", abs_tol=tol))
    claim_reproduced = abs(np.sqrt(fixed) - paper_sd) < 0.01
    checks.append(C.flag_check("[HON] Sec. 3.4 claim σ(t^*) = σ√2/7 ≈ 0.202σ is an erratum",
                               f"{np.sqrt(fixed):.4f}σ", "≠ 0.202σ (docs/math.md)",
                               not claim_reproduced, src))
    row("Sec. 3.4 eq. (13): t^* with\nvar(t^-) = var(t^-_sibling) = s²/2,\nvar(t^+_parent) = s²/3",
        "σ(t^*) = σ√2/7 ≈ 0.202σ, 'variance σ²·49/2';\nvariance ÷25, 'about 80 %'",
        f"1/(2 + 1/(1/3+1/2)) = 5/16 = {fixed:.4f} s²;\nsd {np.sqrt(fixed):.4f}σ, variance "
        f"÷{1 / fixed:.2f} (−{100 * (1 - fixed):.2f} %)", "ERRATUM\n(claim not reproduced)",
        good=False)
    row("tall tree, depth-2 node, N known\n(where those inputs hold)", "0.202σ (as above)",
        f"{lim_eff2:.6f} s² (height {H}) → 5/16", "corrected value")
    row("true best case: depth-1 node,\ntall tree, N known", "(not stated)",
        f"{lim_eff1:.6f} s² → 1/4 (−75 % MSE)", "docs/math.md")

    # --- Sec. 4 "about one quarter" and the hat-matrix identity on the 16-leaf tree
    m16 = unit_tree(4)
    v16 = variances(m16)
    noisy = np.asarray(m16.released.levels) > 0
    mean_known = float(v16.efficient_var[noisy].mean())
    m16u = unit_tree(4, n_known=False)
    v16u = variances(m16u)
    mean_unknown = float(v16u.efficient_var.mean())
    r_top = float(v16.efficient_var[node_row(m16, 1, 0)])
    checks.append(C.check("mean var(t^*)/s^2, 16 leaves, N known (= 15/30)", mean_known, 0.5,
                          "docs/math.md sec. 2 identity"))
    checks.append(C.check("mean var(t^*)/s^2, 16 leaves, N unknown (= 16/31)", mean_unknown,
                          16 / 31, "docs/math.md sec. 2 identity"))
    row("Sec. 4: 16 leaves, N known,\nratio at depth 1", "'about one quarter'",
        f"{r_top:.4f} (= 2.4/9)", "consistent with 5/16-type\nvalues, not with 0.0408")
    row("hat-matrix trace: mean var(t^*)/s²\nover noisy nodes, 16 leaves",
        "(not in [HON])", f"N known {mean_known:.6f} = 15/30;\nN unknown {mean_unknown:.6f} = 16/31",
        "identity holds")

    # ------------------------------------------------------------------ figure
    fig = C.plt.figure(figsize=(14, 11.2))
    gs = fig.add_gridspec(2, 2, height_ratios=[1.55, 1.0], hspace=0.28, wspace=0.22)
    ax = fig.add_subplot(gs[0, :])
    C.table_axes(ax, rows, ["item ([HON] section)", "[HON] claims", "exact (dptree_opt)",
                            "status"], col_widths=[0.25, 0.29, 0.29, 0.17], font_size=9.5,
                 row_colors=colors, scale_y=2.55)
    ax.set_title("(a) worked examples: every node has noise variance s² (equal σ)", loc="left")
    for j, d in enumerate((1, 2)):
        ax = fig.add_subplot(gs[1, j])
        for e, c in (("below", C.PALETTE["below"]), ("above", C.PALETTE["above"]),
                     ("efficient", C.PALETTE["efficient"])):
            ax.plot(heights, curves[f"{e}_d{d}"], "o-", ms=4, color=c,
                    label={"below": "var(t⁻)", "above": "var(t⁺)", "efficient": "var(t*)"}[e])
        lims = {1: [(0.5, "1/2"), (1 / 3, "1/3"), (0.25, "1/4")],
                2: [(0.5, "1/2"), (5 / 16, "5/16 (corrected)")]}[d]
        for v, lab in lims:
            ax.axhline(v, color="k", lw=0.8, ls=":")
            ax.text(heights[-1] + 0.2, v, lab, va="center", fontsize=8.5)
        if d == 2:
            ax.axhline(2 / 49, color=C.PALETTE["raw"], lw=1.2, ls="--",
                       label="[HON] claim (0.202σ)² = 2/49")
        ax.set_xlim(heights[0] - 0.5, heights[-1] + 2.6)
        ax.set_ylim(0, 0.75 if d == 1 else 1.05)
        ax.set_xlabel("tree height (2^height leaves)")
        ax.set_ylabel("variance / s² (dimensionless)")
        ax.set_title(f"({'bc'[j]}) node at depth {d}, N known: variances vs tree height")
        ax.legend(loc="upper right", ncol=2 if d == 2 else 1)
    C.caption(fig, "Reproduces [HON] Honaker (TPDP 2015) Sec. 3.2.1, 3.3, 3.3.1 and checks "
                   "Sec. 3.4: the claimed 0.202σ does not follow from eq. (13); the corrected "
                   "value is 5/16 s² (docs/math.md sec. 2).", y=0.008)
    fig.subplots_adjust(left=0.06, right=0.97, top=0.95, bottom=0.08)
    png = C.save_png(fig, out_dir, NAME)

    data = {"unit_variance": 1.0, "rows": [dict(zip(["item", "claim", "exact", "status"], r))
                                           for r in rows],
            "weights_t10_below": {"t10": w_self, "t100": w_child, "t1000": w_grand},
            "var_t10_below": float(v8.below_var[t10]), "var_t10_above": v_plus,
            "heights": heights, "curves": curves,
            "erratum": {"claimed_sd": paper_sd, "claimed_var": paper_sd**2,
                        "corrected_var": fixed, "corrected_sd": float(np.sqrt(fixed))},
            "hat_trace": {"n_known": mean_known, "n_unknown": mean_unknown},
            "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
