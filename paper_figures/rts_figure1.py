"""[RTS] Figure 1 (reconstruction): normalised squared l2 CDF error of the range (threshold),
histogram, binary-tree and 17-ary tree mechanisms, at K = 289 and across K = 2^4 .. 2^20.

Rameshwar, Tandon, Sharma, "Optimal Tree-Based Mechanisms for Differentially Private
Approximate CDFs" (arXiv 2409.18573), Sec. IV after Lemma IV.3: "Figure 1 shows comparisons
between the (normalized) l2^2-errors of the mechanisms ... for the case when K = [lost]; the
errors are each multiplied by the common value [lost]. ... for this (relatively small) value
of K, the naive histogram-based estimator performs better than even the binary tree
mechanism ... the 17-ary ... mechanism with equal privacy budgets has the lowest error."

The paper's K and normalising constant were lost with its formulas (docs/math.md). **Our
reconstruction**: K = 289 = 17^2 (the 17-ary tree fits exactly), eps = 1, and the plotted
quantity is N^2 eps^2 E||F_hat - F||^2 = eps^2 x (total squared error of the K cumulative
counts), which is free of N and eps (every error here scales as 1/(N eps)^2). Setting: swap
neighbours (N public), Laplace noise, covering estimator ([RTS] Def. IV.1), equal budgets.

* range: C_j + Lap((K-1)/eps), [RTS] Lemma III.1: 2 (K-1)^3.
* histogram: h_i + Lap(2/eps), Lemma III.2: 4 K (K-1).
* binary tree: h = log2 K levels, eps/h each (Thm IV.1: 4 K h^3 when K = 2^h). K = 289 is not
  a power of 2: the tree is padded to 512 bins (the extra bins are empty) and the error is
  that of the 289 real prefixes ([RTS] Sec. V pads to a prime power >= K).
* 17-ary tree: (17, 17) at K = 289 (Thm IV.1: 4 K h^2 sum (k_l - 1)); for K = 2^m it is padded
  to 17^ceil(log_17 K).

Exact errors come from ``Mechanism`` + ``expected_error(prefix, mech, "covering")`` (trees:
per-query variances of the padded tree, summed over the K real prefixes, or
``optimize.design_error``, the same exact sums in O(h)); for the range and histogram
mechanisms at K > 2^16 (quick: 2^12) the closed forms ``closed_forms.lemma_iii_1/2`` are
plotted instead (they equal the exact values wherever both are computed).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import dptree_opt as dp
from dptree_opt import closed_forms, optimize, strategies, workloads
from dptree_opt.strategies import padded_height
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "rts_figure1"
TITLE = "[RTS] Figure 1 (reconstruction): range vs histogram vs binary vs 17-ary, K = 289 and 2^4..2^20"
K_SMALL = 289
EPS = 1.0
RTS = dict(estimator="covering", neighbours="swap")  # [RTS]'s setting: direct sums, N public
MECHS = ("range", "histogram", "binary", "17-ary")
LABELS = {"range": "range / threshold (Lemma III.1)", "histogram": "histogram (Lemma III.2)",
          "binary": "binary tree (Thm IV.1)", "17-ary": "17-ary tree (Thm IV.1)"}


def tree_error_exact(K: int, k: int) -> float:
    """Exact covering error (counts^2, eps = 1) of the first K prefixes of a k-ary tree padded
    to k^h >= K bins, from the Mechanism's per-query variances."""
    h = padded_height(K, k)
    Kp = k**h
    mech = dp.Mechanism(strategies.tree(Kp, [k] * h), epsilon=EPS, neighbours="swap")
    per_q = dp.expected_error(workloads.prefix(Kp), mech, "covering", per_query=True)
    return float(np.sum(per_q[:K]))


def simple_error_exact(K: int, which: str) -> float:
    strat = strategies.prefix_sums(K) if which == "range" else strategies.histogram(K)
    mech = dp.Mechanism(strat, epsilon=EPS, neighbours="swap")
    return dp.expected_error(workloads.prefix(K), mech, "covering")


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    exact_limit = 2**12 if quick else 2**16  # range/histogram via Mechanism up to here
    tree_exact_limit = 2**12 if quick else 2**16  # trees via Mechanism; design_error above
    checks = []

    # ------------------------------------------------------------ (a) K = 289
    K = K_SMALL
    small = {
        "range": simple_error_exact(K, "range"),
        "histogram": simple_error_exact(K, "histogram"),
        "binary": tree_error_exact(K, 2),
        "17-ary": tree_error_exact(K, 17),
    }
    closed = {"range": closed_forms.lemma_iii_1(K, EPS), "histogram": closed_forms.lemma_iii_2(K, EPS),
              "17-ary": closed_forms.theorem_iv_1([17, 17], [EPS / 2] * 2)}
    binary_relaxed = 4 * K * math.log2(K) ** 3  # Thm IV.1 with real h = log2 K (not a tree)
    src = "[RTS] Lemma III.1 / III.2 / Thm IV.1"
    checks.append(C.check("K=289 range: exact = 2(K-1)^3", small["range"], 2 * 288**3, src))
    checks.append(C.check("K=289 histogram: exact = 4K(K-1)", small["histogram"], 4 * 289 * 288,
                          src))
    checks.append(C.check("K=289 17-ary (17,17): exact = 4K h^2 sum(k-1)", small["17-ary"],
                          4 * 289 * 4 * 32, src))
    checks.append(C.check("K=289 binary padded to 512: Mechanism vs design_error",
                          small["binary"], optimize.design_error(K, [2] * 9, **RTS),
                          "exact sums (two code paths)"))
    for m in ("range", "histogram", "17-ary"):
        checks.append(C.check(f"K=289 {m}: closed form = exact", closed[m], small[m], src))
    hist_beats_binary = small["histogram"] < small["binary"]
    checks.append(C.flag_check("K=289: histogram beats the binary tree",
                               f"hist/binary = {small['histogram'] / small['binary']:.3f}",
                               "< 1 ('performs better than even the binary tree')",
                               hist_beats_binary, "[RTS] Sec. IV, Fig. 1 text"))
    lowest = min(small, key=small.get)
    checks.append(C.flag_check("K=289: the 17-ary tree has the lowest error", lowest, "17-ary",
                               lowest == "17-ary", "[RTS] Sec. IV, Fig. 1 text"))

    # ------------------------------------------------------------ (b) K = 2^4 .. 2^20
    ms = list(range(4, 21))
    Ks = [2**m for m in ms]
    sweep = {m: [] for m in MECHS}
    method = {m: [] for m in MECHS}
    max_dev = {"range": 0.0, "histogram": 0.0, "binary": 0.0, "17-ary": 0.0}
    for m_, Kb in zip(ms, Ks):
        cf = {"range": closed_forms.lemma_iii_1(Kb, EPS),
              "histogram": closed_forms.lemma_iii_2(Kb, EPS),
              "binary": closed_forms.theorem_iv_1([2] * m_, [EPS / m_] * m_)}
        for mech in ("range", "histogram"):
            if Kb <= exact_limit:
                v = simple_error_exact(Kb, mech)
                max_dev[mech] = max(max_dev[mech], abs(v / cf[mech] - 1))
                method[mech].append("exact (Mechanism)")
            else:
                v = cf[mech]
                method[mech].append("closed form (Lemma III.%d)" % (1 if mech == "range" else 2))
            sweep[mech].append(v)
        if Kb <= tree_exact_limit:
            vb = tree_error_exact(Kb, 2)
            v17 = tree_error_exact(Kb, 17)
            fast = optimize.design_error(Kb, [17] * padded_height(Kb, 17), **RTS)
            max_dev["17-ary"] = max(max_dev["17-ary"], abs(v17 / fast - 1))
            method["binary"].append("exact (Mechanism)")
            method["17-ary"].append("exact (Mechanism), padded")
        else:
            vb = optimize.design_error(Kb, [2] * m_, **RTS)
            v17 = optimize.design_error(Kb, [17] * padded_height(Kb, 17), **RTS)
            method["binary"].append("exact (design_error)")
            method["17-ary"].append("exact (design_error), padded")
        max_dev["binary"] = max(max_dev["binary"], abs(vb / cf["binary"] - 1))
        sweep["binary"].append(vb)
        sweep["17-ary"].append(v17)
    for mech in MECHS:
        what = {"range": "range exact vs Lemma III.1", "histogram": "histogram exact vs Lemma III.2",
                "binary": "binary exact vs Thm IV.1 (K = 2^m)",
                "17-ary": "17-ary (padded) Mechanism vs design_error"}[mech]
        checks.append(C.check(f"K=2^4..2^{int(math.log2(tree_exact_limit))} max rel. dev.: {what}",
                              max_dev[mech], 0.0, src, abs_tol=1e-12))
    # crossover: the binary tree beats the histogram from K = 2^10 on (K - 1 > (log2 K)^3)
    cross = next(m_ for m_, b, h in zip(ms, sweep["binary"], sweep["histogram"]) if b < h)
    checks.append(C.check("first K = 2^m where the binary tree beats the histogram (m)", cross,
                          10, "Lemma III.2 vs Thm IV.1: K-1 > (log2 K)^3 from m = 10"))
    # Lemma IV.3 envelope: 4K (ln K)^3 psi(k*) <= every equal-budget covering tree
    kstar = optimize.optimal_branching_factor()
    envelope = [4 * Kb * math.log(Kb) ** 3 * optimize.psi(kstar) for Kb in Ks]
    below = all(e <= min(b, t) * (1 + 1e-12) for e, b, t in zip(envelope, sweep["binary"],
                                                                 sweep["17-ary"]))
    checks.append(C.flag_check("Lemma IV.3 envelope 4K ln^3K psi(k*) below both trees",
                               below, "True", below, "[RTS] Lemma IV.3 / Thm IV.3"))

    # ------------------------------------------------------------ figure
    fig, axes = C.plt.subplots(1, 3, figsize=(16, 5.4),
                               gridspec_kw={"width_ratios": [0.9, 1.2, 1.1]})
    ax = axes[0]
    vals = [small[m] for m in MECHS]
    bars = ax.bar(range(4), vals, color=[C.PALETTE[m] for m in MECHS])
    ax.set_yscale("log")
    ax.set_xticks(range(4))
    ax.set_xticklabels(["range", "histogram", "binary\n(padded\nto 512)", "17-ary\n(17,17)"])
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v * 1.25, f"{v:,.0f}", ha="center", fontsize=9)
    ax.plot([2], [binary_relaxed], marker="_", ms=30, color="k", mew=1.5,
            label=f"binary, relaxed real h = log₂289 (Thm IV.1): {binary_relaxed:,.0f}")
    ax.set_ylim(5e4, 5e8)
    ax.set_ylabel("N²ε² · E‖F̂ − F‖²  (= total squared error\nof the K cumulative counts at ε = 1)")
    ax.set_title(f"(a) K = {K_SMALL} (our reconstruction), ε = 1")
    ax.legend(loc="upper right", fontsize=8)

    ax = axes[1]
    for mech, mk in zip(MECHS, ("s", "o", "^", "D")):
        ax.plot(Ks, sweep[mech], marker=mk, ms=4, color=C.PALETTE[mech], label=LABELS[mech])
    ax.plot(Ks, envelope, color="k", ls="--", lw=1,
            label="Lemma IV.3: 4K ln³K ψ(k*), k* = 16.80")
    ax.axvline(K_SMALL, color="#999999", lw=0.8, ls=":")
    ax.text(K_SMALL * 1.1, 3e13, "K = 289", fontsize=8.5, color="#555555")
    if exact_limit < Ks[-1]:
        ax.axvspan(exact_limit * 1.4, Ks[-1] * 1.5, color="#f0f0f0", zorder=0)
        ax.text(exact_limit * 1.7, 2e3, "shaded: range and\nhistogram from their\nclosed forms\n(Lemmas III.1/III.2)",
                fontsize=8, color="#555555")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of bins K")
    ax.set_ylabel("N²ε² · E‖F̂ − F‖²  (counts², ε = 1)")
    ax.set_title("(b) the same comparison across K = 2⁴ … 2²⁰")
    ax.legend(loc="upper left", fontsize=8.5)

    ax = axes[2]
    ref = np.array(sweep["17-ary"])
    for mech, mk in zip(MECHS[1:], ("o", "^", "D")):
        ax.plot(Ks, np.array(sweep[mech]) / ref, marker=mk, ms=4, color=C.PALETTE[mech],
                label=LABELS[mech].split(" (")[0])
    ax.plot(Ks, np.array(envelope) / ref, color="k", ls="--", lw=1, label="Lemma IV.3 envelope")
    ax.axhline(1, color="k", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(0.3, 30)
    ax.set_xlabel("number of bins K")
    ax.set_ylabel("error relative to the 17-ary tree (ratio)")
    ax.set_title("(c) ratio to the 17-ary tree (range: off-scale)")
    ax.legend(loc="upper left", fontsize=8.5)
    fig.suptitle("Squared l2 error of private CDFs: simple mechanisms vs level-uniform trees "
                 "(swap, Laplace, covering estimator, equal budgets)", fontsize=12)
    C.caption(fig, "Reconstruction of [RTS] Rameshwar-Tandon-Sharma (arXiv 2409.18573) Figure 1: "
                   "the paper's K and normaliser were lost; K = 289 = 17² and the N²ε² "
                   "normalisation are ours. Trees whose leaves do not fit K are padded "
                   "(extra bins empty).")
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    png = C.save_png(fig, out_dir, NAME)

    data = {"epsilon": EPS, "normalisation": "N^2 eps^2 E||F_hat - F||^2 (counts^2 at eps = 1)",
            "setting": "swap neighbours, Laplace, covering estimator, equal level budgets",
            "K_small": K_SMALL, "small": small, "small_closed_forms": closed,
            "binary_relaxed_real_height": binary_relaxed, "binary_padded_to": 512,
            "K": Ks, "sweep": sweep, "method": method, "lemma_iv3_envelope": envelope,
            "padded_17ary": {Kb: 17 ** padded_height(Kb, 17) for Kb in Ks},
            "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
