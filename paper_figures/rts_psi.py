"""[RTS] Lemma IV.3: psi(k) = (k - 1) / ln^3 k and the optimal branching factor k* = 16.801.

With equal branching factors k = K^(1/h) and equal budgets, the Thm IV.3 covering error is
(4K (ln K)^3 / (N^2 eps^2)) psi(k): psi is the error per unit of 4K ln^3 K / (N eps)^2,
independent of K and eps. It is minimised where ln k = 3 (1 - 1/k), k* = -3 / W0(-3 e^-3) =
16.801016; over the integers psi(16) = 0.703777 > psi(17) = 0.703529, so 17 (docs/math.md sec. 4).

The script computes k* two ways (``optimize.optimal_branching_factor``, Lambert W, and a
scipy ``brentq`` root of ln k - 3 (1 - 1/k) here), psi from ``optimize.psi`` and from the
formula, and the integer minimiser by a scan of k = 2..10^4.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import scipy.optimize

from dptree_opt import optimize
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "rts_psi"
TITLE = "[RTS] Lemma IV.3: psi(k) = (k-1)/ln^3 k, k* = 16.801, integer optimum 17"


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    src = "[RTS] Lemma IV.3; docs/math.md sec. 4"
    k_star = optimize.optimal_branching_factor()
    k_int = optimize.optimal_branching_factor(integer=True)
    k_root = scipy.optimize.brentq(lambda k: math.log(k) - 3 * (1 - 1 / k), 2.0, 100.0,
                                   xtol=1e-15)
    ks_int = np.arange(2, 10_001)
    psi_int = (ks_int - 1) / np.log(ks_int) ** 3
    k_scan = int(ks_int[np.argmin(psi_int)])
    psi16, psi17 = optimize.psi(16), optimize.psi(17)
    checks = [
        C.check("k* (Lambert W, optimize.optimal_branching_factor)", k_star, 16.801016, src,
                abs_tol=5e-7),
        C.check("k* Lambert W = brentq root of ln k = 3(1 - 1/k)", k_star, k_root,
                "independent root finding", rel=1e-12),
        C.check("psi(16)", psi16, 0.703777, src, abs_tol=5e-7),
        C.check("psi(17)", psi17, 0.703529, src, abs_tol=5e-7),
        C.check("integer optimum (optimize)", k_int, 17, src),
        C.check("integer optimum (scan k = 2..10^4)", k_scan, 17, src),
        C.check("optimize.psi = (k-1)/ln^3 k (max rel. dev., k = 2..10^4)",
                float(np.max(np.abs(optimize.psi(ks_int) / psi_int - 1))), 0.0,
                "formula", abs_tol=1e-13),
        C.check("psi(k*) (minimum value)", optimize.psi(k_star), float((k_root - 1)
                / math.log(k_root) ** 3), "formula at the brentq root", rel=1e-12),
    ]

    k = np.geomspace(1.6, 2000, 800)
    p = optimize.psi(k)
    fig, axes = C.plt.subplots(1, 2, figsize=(13.5, 5.0))
    ax = axes[0]
    ax.plot(k, p, color=C.PALETTE["17-ary"], lw=2, label="ψ(k) = (k − 1) / ln³k")
    ax.axvline(k_star, color="k", ls="--", lw=1)
    for kk, mk in ((2, "s"), (17, "D")):
        ax.plot([kk], [optimize.psi(kk)], mk, ms=7, color=C.PALETTE["binary" if kk == 2
                                                                     else "17-ary"],
                label=f"k = {kk}: ψ = {optimize.psi(kk):.4f}")
    ax.plot([k_star], [optimize.psi(k_star)], "*", color="k", ms=12, zorder=5,
            label=f"k* = {k_star:.6f}, ψ(k*) = {optimize.psi(k_star):.6f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(0.5, 30)
    ax.set_xlabel("common branching factor k (log scale)")
    ax.set_ylabel("ψ(k): error in units of 4K ln³K / (Nε)²")
    ax.set_title("(a) ψ(k) over k > 1")
    ax.legend(loc="upper right")

    ax = axes[1]
    kz = np.linspace(12.5, 22.5, 400)
    ax.plot(kz, optimize.psi(kz), color=C.PALETTE["17-ary"], lw=2, label="ψ(k), real k")
    ki = np.arange(13, 23)
    ax.plot(ki, optimize.psi(ki), "o", color="#555555", ms=5, label="integer k")
    ax.axvline(k_star, color="k", ls="--", lw=1, label=f"k* = {k_star:.3f}")
    for kk, dx, dy in ((16, -105, 25), (17, 20, -25)):
        ax.annotate(f"ψ({kk}) = {optimize.psi(kk):.6f}", (kk, optimize.psi(kk)),
                    xytext=(dx, dy), textcoords="offset points", fontsize=9,
                    arrowprops=dict(arrowstyle="-", color="#555555"))
    ax.plot([17], [psi17], "D", ms=8, color=C.PALETTE["17-ary"], label="integer optimum 17")
    ax.set_xlabel("common branching factor k")
    ax.set_ylabel("ψ(k) (dimensionless)")
    ax.set_ylim(0.7030, 0.7062)
    ax.set_title("(b) zoom: ψ(16) > ψ(17), so the integer optimum is 17")
    ax.legend(loc="upper right")
    fig.suptitle("Optimal common branching factor of a level-uniform tree (equal budgets, "
                 "covering estimator)", fontsize=12)
    C.caption(fig, "Reproduces [RTS] Rameshwar-Tandon-Sharma (arXiv 2409.18573) Lemma IV.3: "
                   "ln k* = 3(1 − 1/k*), k* = −3/W₀(−3e⁻³) = 16.801016; the value is "
                   "independent of K and ε.")
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    png = C.save_png(fig, out_dir, NAME)
    data = {"k_star": k_star, "k_star_brentq": k_root, "k_integer": k_int, "psi16": psi16,
            "psi17": psi17, "psi_k_star": optimize.psi(k_star), "curve_k": k, "curve_psi": p,
            "integers": ki, "psi_integers": optimize.psi(ki), "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
