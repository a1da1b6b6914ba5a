"""[RTS] Sec. V: the optimal integer tree for K = 2^m (equal budgets, covering estimator),
its height h*(K), Thm V.1 (balanced exponents), Thm V.2's bounds and Cor. V.1.

With equal budgets eps/h the covering error is c h^2 sum_l (k_l - 1), c = 4K / (N eps)^2
(Thm IV.1); the table lists the normalised error h^2 sum_l (k_l - 1).

* Exact optimum: ``optimize.level_uniform(K, eps, allow_padding=False, estimator="covering",
  neighbours="swap", budgets="equal")`` (exhaustive search over ordered factorisations of K;
  [RTS]'s setting, given explicitly: the package defaults are add/remove, BLUE, optimal).
* Thm V.1: for K = p^m and height h (m = q h + r), the best tree has r levels p^(q+1) and h - r
  levels p^q; its error is computed here from the formula; the minimum over h must equal the
  search's optimum.
* Thm V.2: if K^(1/h) is an integer >= 17 then h* >= h; if it is <= 16 then h* <= h. For
  K = 2^m this brackets h* between the divisors h of m with 2^(m/h) >= 17 and <= 16.
* Cor. V.1: K = p^m with p >= 17 prime: the optimum is all-p (h* = m); checked for p = 17, 19.
* The relaxed height (Lemma IV.3 / Thm IV.3, real equal branching): argmin_h h^3 (K^(1/h) - 1)
  (``optimize.optimal_height(K, method="relaxed")``), close to ln K / ln k*.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dptree_opt import optimize
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "rts_optimal_height"
TITLE = "[RTS] Sec. V: optimal integer trees and heights for K = 2^m (Thm V.1, V.2, Cor. V.1)"
M_QUICK = 20
# [RTS]'s setting: direct (covering) sums, swap neighbours (N public), equal budgets
RTS = dict(estimator="covering", neighbours="swap", budgets="equal")
M_FULL = 24


def balanced_error(p: int, m: int, h: int) -> tuple[float, tuple]:
    """Thm V.1: the balanced tree of height h over p^m and its normalised error."""
    q, r = divmod(m, h)
    ks = (p ** (q + 1),) * r + (p**q,) * (h - r)
    return float(h * h * sum(k - 1 for k in ks)), ks


def v2_bounds(m: int) -> tuple[int, float]:
    """Thm V.2 bounds on h*(2^m): (max h | m with 2^(m/h) >= 17, min h | m with 2^(m/h) <= 16)."""
    divs = [h for h in range(1, m + 1) if m % h == 0]
    lo = max([h for h in divs if 2 ** (m // h) >= 17], default=1)
    hi = min([h for h in divs if 2 ** (m // h) <= 16], default=math.inf)
    return lo, hi


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    M = M_QUICK if quick else M_FULL
    k_star = optimize.optimal_branching_factor()
    table, checks = [], []
    curves = {}
    src1, src2 = "[RTS] Thm V.1", "[RTS] Thm V.2 / Cor. V.2"
    bounds_ok, v1_ok = True, True
    for m in range(1, M + 1):
        K = 2**m
        best = optimize.level_uniform(K, 1.0, allow_padding=False, top=0, **RTS)
        hstar = best.height
        bal = {h: balanced_error(2, m, h) for h in range(1, m + 1)}
        curves[m] = [bal[h][0] for h in range(1, m + 1)]
        h_bal = min(bal, key=lambda h: bal[h][0])
        v1_match = abs(bal[h_bal][0] - best.normalised_error) < 1e-9 * best.normalised_error
        v1_ok &= v1_match and abs(bal[hstar][0] - best.normalised_error) < 1e-6
        lo, hi = v2_bounds(m)
        bounds_ok &= lo <= hstar <= hi
        table.append({"m": m, "K": K, "branching": list(best.branching), "h_star": hstar,
                      "normalised_error": best.normalised_error,
                      "thm_v1_balanced_best": list(bal[h_bal][1]),
                      "thm_v1_error": bal[h_bal][0], "v2_lower": lo,
                      "v2_upper": hi if math.isfinite(hi) else None,
                      "relaxed_height": optimize.optimal_height(K, method="relaxed"),
                      "lnK_over_ln_kstar": math.log(K) / math.log(k_star)})
    checks.append(C.flag_check(f"Thm V.1 balanced trees attain the exact optimum, m = 1..{M}",
                               v1_ok, "True", v1_ok, src1))
    checks.append(C.flag_check(f"Thm V.2 bounds hold: lo <= h*(2^m) <= hi, m = 1..{M}",
                               bounds_ok, "True", bounds_ok, src2))
    row = {r["m"]: r for r in table}
    checks.append(C.check("h*(2^16) (tree (16,16,16,16))", row[16]["h_star"], 4,
                          "docs/math.md / tests: (16,16,16,16)"))
    checks.append(C.check("normalised error of 2^16: 16 * 60", row[16]["normalised_error"], 960,
                          "Thm IV.1: h^2 sum(k-1)"))
    checks.append(C.check("h*(2^20) (tree (16,16,16,16,16))", row[20]["h_star"], 5,
                          "Thm V.2: 2^(20/4) = 32 >= 17, 2^(20/5) = 16 <= 16"))
    checks.append(C.check("relaxed height for 2^20 (Lemma IV.3)", row[20]["relaxed_height"], 5,
                          "docs/math.md sec. 4 / optimize tests"))
    cor = []
    for p, ms in ((17, (1, 2, 3) if quick else (1, 2, 3, 4)), (19, (2, 3))):
        for m in ms:
            best = optimize.level_uniform(p**m, 1.0, allow_padding=False, top=0, **RTS)
            ok = tuple(best.branching) == (p,) * m
            cor.append({"p": p, "m": m, "K": p**m, "branching": list(best.branching), "ok": ok})
            checks.append(C.flag_check(f"Cor. V.1: K = {p}^{m} optimum is all-{p}",
                                       list(best.branching), f"{[p] * m}", ok, "[RTS] Cor. V.1"))

    # ------------------------------------------------------------------ figure
    fig = C.plt.figure(figsize=(15.5, 8.4))
    gs = fig.add_gridspec(1, 2, width_ratios=[1.35, 1.0], wspace=0.12)
    ax = fig.add_subplot(gs[0, 0])
    rows = []
    for r in table:
        hi = "∞" if r["v2_upper"] is None else str(r["v2_upper"])
        rows.append([str(r["m"]), f"{r['K']:,}", ",".join(map(str, r["branching"])),
                     str(r["h_star"]), f"{r['normalised_error']:,.0f}",
                     f"{r['v2_lower']} ≤ h* ≤ {hi}", str(r["relaxed_height"]),
                     f"{r['lnK_over_ln_kstar']:.2f}"])
    colors = [("#fff7dc" if r["h_star"] != r["relaxed_height"] else None) for r in table]
    C.table_axes(ax, rows, ["m", "K = 2^m", "optimal tree (k_1..k_h)", "h*",
                            "h²Σ(k_l−1)", "Thm V.2 bounds", "relaxed h", "ln K / ln k*"],
                 col_widths=[0.05, 0.13, 0.27, 0.06, 0.12, 0.16, 0.1, 0.12], font_size=9,
                 row_colors=colors, scale_y=1.72 if M <= 20 else 1.43)
    ax.set_title("(a) exact optimum over ordered factorisations of K (no padding); shaded: "
                 "integer h* ≠ relaxed height", loc="left", fontsize=10.5)

    ax = fig.add_subplot(gs[0, 1])
    cmap = C.plt.get_cmap("viridis")
    show = [m for m in (6, 8, 10, 12, 14, 16, 18, 20, 22, 24) if m <= M]
    for i, m in enumerate(show):
        hs = np.arange(1, min(m, 10) + 1)
        y = np.array(curves[m][: hs.size]) / row[m]["normalised_error"]
        col = cmap(i / max(len(show) - 1, 1))
        ax.plot(hs, y, "o-", ms=3.5, color=col, label=f"K = 2^{m}")
        ax.plot([row[m]["h_star"]], [1.0], "*", ms=12, color=col, mec="k", mew=0.5)
    ax.set_ylim(0.9, 4.0)
    ax.set_xlabel("tree height h")
    ax.set_ylabel("error of the best height-h tree / optimum (ratio)")
    ax.set_title("(b) Thm V.1 balanced tree per height (★ = optimal height h*)")
    ax.legend(loc="upper center", ncol=3, fontsize=8.5)
    fig.suptitle("Optimal integer branching factors and heights for K = 2^m, equal budgets, "
                 "covering estimator (swap, Laplace)", fontsize=12)
    corr = ", ".join(f"{c['p']}^{c['m']}" for c in cor)
    C.caption(fig, "Reproduces [RTS] (arXiv 2409.18573) Sec. V: Thm V.1 (balanced exponents), "
                   f"Thm V.2 / Cor. V.2 bounds, Cor. V.1 (all-p optimum verified for {corr}). "
                   "Error unit 4K/(Nε)².", y=0.008)
    fig.subplots_adjust(left=0.02, right=0.98, top=0.89, bottom=0.09)
    png = C.save_png(fig, out_dir, NAME)
    data = {"table": table, "balanced_error_by_height": curves, "corollary_v1": cor,
            "k_star": k_star, "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
