"""[SU] Smith & Ullman, lecture 7 (the binary tree mechanism): expected maximum error of the
D threshold (prefix) queries vs D, against the O(log^3 D) bound and the exact harmonic-number
formula.

The lecture's mechanism (Sec. 2.2): the 2D - 1 dyadic interval counts of [D] (D = 2^m), each
released with Laplace noise of scale b = 2 log2(D) / eps (Claim 2.2: swap l1 sensitivity
2 log2 D), thresholds f_{1,t} answered by summing the <= log2 D nodes of the binary covering of
[1, t] (Claim 2.3). Its bound (eq. (15)):

    E max_t |b_{1,t} - f_{1,t}|  <=  log2 D * E max_{(u,v) in T} |Z_{u,v}|  =  O(log^3 D / eps),

and eq. (10) states E max |Z| = 2 log2(D) (ln(2D - 1) + 1) / eps. The exact value is
E max |Z| = b H_{2D-1} (|Z| ~ Exp(b), and the maximum of n i.i.d. Exp(b) has mean b H_n,
H_n the n-th harmonic number), so eq. (10)'s right side is the upper bound
b (ln n + 1) >= b H_n, not an equality (docs/math.md sec. 1).

Here: ``Mechanism(strategies.binary_tree(D), epsilon=eps)`` (swap, N public) gives every
non-root level eps / log2 D and scale b; the lecture also noises the root (the tree T has
2D - 1 nodes), so the simulation adds Lap(b) to the root row; the covering sums are
``dptree_opt.covering_cdf`` applied to the noise (the estimator is linear, so its output on
the noise is the error). D = 1: the tree is one node, log2 D = 0 and every error is 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import scipy.special

import dptree_opt as dp
from dptree_opt import strategies
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "su_max_error"
TITLE = "[SU] binary tree mechanism: expected max threshold error vs D, exact and bounds"
EPS = 1.0
M_MAX = 20
SEED = 7


def harmonic(n: int) -> float:
    """H_n = psi(n + 1) + Euler's gamma (exact to rounding for every n)."""
    return float(scipy.special.digamma(n + 1) + np.euler_gamma)


def mc_plan(quick: bool) -> dict[int, int]:
    """Monte Carlo trials per m (D = 2^m)."""
    if quick:
        return {m: 500 for m in range(1, 13)}
    return {m: (2000 if m <= 12 else 1000 if m <= 16 else 200) for m in range(1, M_MAX + 1)}


def simulate(m: int, trials: int, rng: np.random.Generator) -> dict:
    """Max over thresholds of |covering error| and max over the 2D-1 nodes of |Z|, per trial."""
    D = 2**m
    mech = dp.Mechanism(strategies.binary_tree(D), epsilon=EPS, neighbours="swap")
    root = np.flatnonzero(np.asarray(mech.released.levels) == 0)
    b = 2 * m / EPS
    rows = mech.released.n_rows
    chunk = max(1, min(trials, (1 << 22) // rows))
    max_prefix, max_node = [], []
    done = 0
    while done < trials:
        n = min(chunk, trials - done)
        z = mech.sample_noise(rng, size=n)
        z[:, root] = rng.laplace(0.0, b, size=(n, root.size))  # [SU] noises the root too
        err = dp.covering_cdf(mech, z)  # (n, D): covering estimate of a zero histogram
        max_prefix.append(np.abs(err).max(axis=1))
        max_node.append(np.abs(z).max(axis=1))
        done += n
    mp, mn = np.concatenate(max_prefix), np.concatenate(max_node)
    scale = float(np.unique(np.asarray(mech.scales)[np.asarray(mech.released.levels) > 0])[0])
    return {"mean_max_prefix": float(mp.mean()), "se_max_prefix": float(mp.std(ddof=1)
                                                                         / np.sqrt(mp.size)),
            "mean_max_node": float(mn.mean()), "se_max_node": float(mn.std(ddof=1)
                                                                    / np.sqrt(mn.size)),
            "trials": int(mp.size), "scale": scale, "epsilon_actual": float(mech.epsilon)}


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    rng = np.random.default_rng(SEED)
    ms = np.arange(1, M_MAX + 1)
    Ds = 2**ms
    b = 2 * ms / EPS
    H = np.array([harmonic(2 * D - 1) for D in Ds])
    exact_max_node = b * H  # E max over 2D-1 nodes
    notes_max_node = b * (np.log(2 * Ds - 1) + 1)  # [SU] eq. (10) right-hand side
    bound_exact = ms * exact_max_node  # eq. (15) with the exact E max |Z|
    bound_notes = ms * notes_max_node  # eq. (15) with eq. (10)
    plan = mc_plan(quick)
    mc = {}
    for m, trials in plan.items():
        mc[m] = simulate(m, trials, rng)
    mc_m = np.array(sorted(mc))

    # ------------------------------------------------------------------ checks
    src = "[SU] Claim 2.2, eqs. (10), (15); docs/math.md sec. 1"
    checks = []
    scale_dev = max(abs(mc[m]["scale"] / (2 * m / EPS) - 1) for m in mc)
    checks.append(C.check("node scale = 2 log2(D)/eps (max rel. dev. over D)", scale_dev, 0.0,
                          "[SU] Claim 2.2 / eq. (9)", abs_tol=1e-12))
    checks.append(C.check("mechanism's recomputed eps (max over D)",
                          max(mc[m]["epsilon_actual"] for m in mc), EPS,
                          "[SU] Claim 2.2 (sensitivity 2 log2 D)", rel=1e-9))
    z_node = [abs(mc[m]["mean_max_node"] - exact_max_node[m - 1]) / mc[m]["se_max_node"]
              for m in mc]
    worst = int(mc_m[int(np.argmax(z_node))])
    checks.append(C.check(f"MC E max|Z| vs b H_(2D-1), D = 2..2^{mc_m.max()} (worst D = 2^{worst})",
                          mc[worst]["mean_max_node"], float(exact_max_node[worst - 1]),
                          "docs/math.md sec. 1 (exact harmonic formula)", ok=max(z_node) <= 4.0,
                          note=f"max |z| over D = {max(z_node):.2f} (<= 4 standard errors)"))
    checks.append(C.bound_check("eq. (10) value / exact b H_(2D-1), min over D = 2..2^20",
                                float(np.min(notes_max_node / exact_max_node)), 1.0, src,
                                kind=">=", note="eq. (10) is an upper bound (ln n + 1 >= H_n), "
                                "not an equality; ratio up to "
                                f"{float(np.max(notes_max_node / exact_max_node)):.3f} (D = 2)"))
    below = all(mc[m]["mean_max_prefix"] <= bound_exact[m - 1] for m in mc)
    checks.append(C.flag_check("MC E max prefix error <= log2 D * b H_(2D-1) (eq. (15)), all D",
                               below, "True", below, src))
    for m_chk in (10, 20):
        if m_chk <= M_MAX:
            checks.append(C.check(f"E max|Z| at D = 2^{m_chk}: 2 log2 D H_(2D-1)/eps",
                                  float(exact_max_node[m_chk - 1]),
                                  float(2 * m_chk * math.fsum(1.0 / i for i in
                                                              range(1, 2 * 2**m_chk))),
                                  "harmonic sum (fsum)", rel=1e-12))
    fit = mc_m >= 4
    slope = float(np.polyfit(np.log(mc_m[fit]), np.log([mc[m]["mean_max_prefix"]
                                                        for m in mc_m[fit]]), 1)[0])
    checks.append(C.bound_check(f"growth exponent of E max prefix error in log2 D "
                                f"(fit over D = 2^4..2^{mc_m.max()})", slope, 3.0, src,
                                note="O(log^3 D) bound; [SU] remark: log^2.5 with a careful "
                                "analysis"))

    # ------------------------------------------------------------------ figure
    fig, axes = C.plt.subplots(1, 2, figsize=(14.5, 5.6))
    ax = axes[0]
    ax.plot(Ds, bound_notes, "--", color=C.PALETTE["bound"], lw=1.2,
            label="eq. (15) with eq. (10): log₂D · 2log₂D (ln(2D−1)+1)/ε")
    ax.plot(Ds, bound_exact, "-", color=C.PALETTE["bound"], lw=1.8,
            label="eq. (15) with exact E max|Z|: log₂D · 2log₂D H₂D₋₁/ε")
    ax.plot(Ds, notes_max_node, "--", color="#6a3d9a", lw=1.2,
            label="eq. (10): E max|Z| 'formula' 2log₂D (ln(2D−1)+1)/ε")
    ax.plot(Ds, exact_max_node, "-", color="#6a3d9a", lw=1.8,
            label="exact E max|Z| = 2log₂D · H₂D₋₁/ε")
    ax.errorbar(Ds[mc_m - 1], [mc[m]["mean_max_node"] for m in mc_m],
                yerr=[2 * mc[m]["se_max_node"] for m in mc_m], fmt="s", ms=4, mfc="none",
                color="#6a3d9a", label="MC max over the 2D−1 nodes of |Z|")
    ax.errorbar(Ds[mc_m - 1], [mc[m]["mean_max_prefix"] for m in mc_m],
                yerr=[2 * mc[m]["se_max_prefix"] for m in mc_m], fmt="o", ms=5,
                color=C.PALETTE["binary"], label="MC max over t of |threshold error| (covering)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("domain size D (number of bins)")
    ax.set_ylabel("expected max absolute error (counts, ε = 1)")
    ax.set_title("(a) expected max error vs D: Monte Carlo, exact formula, bounds")
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[1]
    L = ms.astype(float)
    ax.plot(Ds, bound_exact / L**3, "-", color=C.PALETTE["bound"], lw=1.8,
            label="eq. (15) bound (exact E max|Z|) / (log₂D)³")
    ax.plot(Ds, bound_notes / L**3, "--", color=C.PALETTE["bound"], lw=1.2,
            label="eq. (15) bound (eq. (10)) / (log₂D)³")
    mcv = np.array([mc[m]["mean_max_prefix"] for m in mc_m])
    ax.plot(Ds[mc_m - 1], mcv / L[mc_m - 1] ** 3, "o-", color=C.PALETTE["binary"], ms=5,
            label="MC E max threshold error / (log₂D)³")
    ax.plot(Ds[mc_m - 1], mcv / L[mc_m - 1] ** 2, "o--", color="#17becf", ms=4, mfc="none",
            label="MC E max threshold error / (log₂D)²")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("domain size D (number of bins)")
    ax.set_ylabel("error / (log₂D)³ or / (log₂D)²  (counts, ε = 1)")
    ax.set_ylim(0.09, 6)
    from matplotlib.ticker import FixedLocator
    ax.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5]))
    C.plain_log_ticks(ax)
    ax.set_title(f"(b) scaled by (log₂D)³: the bound is Θ(log³D); the simulated\n"
                 f"error grows like (log₂D)^{slope:.2f} (fit), well inside O(log³D)")
    ax.legend(loc="center right", bbox_to_anchor=(1.0, 0.5), fontsize=8.5)
    mode = ("quick: Monte Carlo to D = 2^12, 500 trials each" if quick else
            "Monte Carlo to D = 2^20: 2000 / 1000 / 200 trials for D ≤ 2^12 / 2^16 / 2^20")
    fig.suptitle(f"Binary tree mechanism for thresholds, Laplace scale 2log₂D/ε on all 2D−1 "
                 f"nodes ({mode})", fontsize=11.5)
    C.caption(fig, "Reproduces [SU] Smith & Ullman, Lecture 7, Sec. 2.2 (Claim 2.2, eqs. (10), "
                   "(15), Thm 2.5). Exact: E max of n i.i.d. |Lap(b)| = b·Hₙ; eq. (10) is its "
                   "upper bound b(ln n + 1). D = 1: zero error (one node).")
    fig.tight_layout(rect=(0, 0.04, 1, 0.94))
    png = C.save_png(fig, out_dir, NAME)
    data = {"epsilon": EPS, "D": [1] + Ds.tolist(), "log2D": [0] + ms.tolist(),
            "scale_b": [0.0] + b.tolist(), "harmonic_2D_minus_1": [1.0] + H.tolist(),
            "exact_E_max_node": [0.0] + exact_max_node.tolist(),
            "notes_eq10_E_max_node": [0.0] + notes_max_node.tolist(),
            "bound_eq15_exact": [0.0] + bound_exact.tolist(),
            "bound_eq15_notes": [0.0] + bound_notes.tolist(),
            "note_D1": "D = 1: one node (the total), log2 D = 0, scale 0, every error 0",
            "monte_carlo": {int(2**m): mc[m] for m in mc_m}, "growth_exponent_fit": slope,
            "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
