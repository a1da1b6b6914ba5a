"""[RTS] Sec. VI-3 (reconstruction): CDF errors before and after consistency post-processing.

[RTS] Sec. VI-3: "we set K = [lost] and N = [lost] and use a level-uniform tree-based mechanism
with tree height [lost] ... since from Corollary V.1 the optimal height ... is indeed [lost],
since [lost] is prime. We first sample N uniformly random points in the interval [0, B) ...
compute the noisy CDF via (3), (4) and Definition IV.1. Next we ... compute optimal,
consistent solutions c^(1) and c^(2) corresponding to the l1 and l2 error metrics ... the
errors shown below are the empirical average errors ... when eps = [lost]." The numbers were
lost with the formulas (docs/math.md: reproduce as a reconstruction).

**Our reconstruction**: K = 17^2 = 289 bins, the tree (17, 17) (Cor. V.1: all-17 is optimal
for K = 17^m), N = 1000 points uniform on [0, 1) drawn afresh for every trial, swap neighbours
(N public), Laplace noise, equal budgets, eps in a grid. The noisy CDF is the [RTS] covering
estimate (Def. IV.1); it is projected with ``dptree_opt.consistency.project_cdf(C~, total=N,
metric="l2" | "l1", integer=True, method="fast")`` (exact; checked here against the paper's
trellis DP, ``method="trellis"``, on a few draws) and, for one draw, through the public
pipeline ``dptree_opt.private_cdf``. Beyond the paper the same is done for the BLUE
(Honaker / GLS) estimate. Errors: E||F_hat - F||_2^2 and E||F_hat - F||_1 with F = C / N.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import dptree_opt as dp
from dptree_opt import closed_forms, consistency, strategies, workloads
import _figures as C  # paper_figures/_figures.py (on sys.path: script dir / load_script)

NAME = "rts_consistency"
TITLE = "[RTS] Sec. VI-3 (reconstruction): CDF errors before and after consistency"
K = 289
BRANCHING = [17, 17]
N = 1000
EPS_QUICK = (0.5, 1.0, 2.0)
EPS_FULL = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
TRIALS_QUICK = 200
TRIALS_FULL = 2000
SEED = 2409_18573
VARIANTS = ("raw", "l2", "l1")
ESTIMATORS = ("covering", "blue")


def draw_histograms(rng: np.random.Generator, trials: int) -> np.ndarray:
    """N uniform points on [0, 1) binned into K equal bins, per trial: (trials, K) counts."""
    x = rng.uniform(0.0, 1.0, size=(trials, N))
    bins = np.minimum((x * K).astype(np.int64), K - 1)
    return np.stack([np.bincount(b, minlength=K) for b in bins])


def simulate(mech: dp.Mechanism, trials: int, rng: np.random.Generator) -> dict:
    """Per-trial errors (normalised by N) of raw / l2- / l1-consistent CDFs, both estimators."""
    hist = draw_histograms(rng, trials)
    truth = np.cumsum(hist, axis=1).astype(float)
    y = mech.released.apply(hist.T).T + mech.sample_noise(rng, size=trials)
    raw = {"covering": dp.covering_cdf(mech, y), "blue": np.cumsum(dp.blue(mech, y), axis=1)}
    out = {}
    for est in ESTIMATORS:
        for var in VARIANTS:
            sq, ab = np.empty(trials), np.empty(trials)
            for i in range(trials):
                c = raw[est][i] if var == "raw" else consistency.project_cdf(
                    raw[est][i], total=N, metric=var, integer=True, method="fast")
                d = (np.asarray(c, float) - truth[i]) / N
                sq[i], ab[i] = float(d @ d), float(np.abs(d).sum())
            out[(est, var)] = (sq, ab)
    return out, raw, truth, hist, y


def run(out_dir: Path, quick: bool = True) -> dict:
    C.style()
    out_dir = Path(out_dir)
    eps_grid = EPS_QUICK if quick else EPS_FULL
    trials = TRIALS_QUICK if quick else TRIALS_FULL
    rng = np.random.default_rng(SEED)
    checks = []
    res = {est: {var: {"l2sq": [], "l2sq_se": [], "l1": [], "l1_se": []} for var in VARIANTS}
           for est in ESTIMATORS}
    exact = {"covering": [], "blue": []}
    z_raw = []
    trellis_dev = 0.0
    sample = None
    for e in eps_grid:
        mech = dp.Mechanism(strategies.tree(K, BRANCHING), epsilon=e, neighbours="swap")
        sims, raw, truth, hist, y = simulate(mech, trials, rng)
        ex_cov = closed_forms.theorem_iv_1(BRANCHING, [e / 2] * 2, n_records=N)
        ex_blue = dp.expected_error(workloads.prefix(K), mech, "blue") / N**2
        exact["covering"].append(ex_cov)
        exact["blue"].append(ex_blue)
        for est in ESTIMATORS:
            for var in VARIANTS:
                sq, ab = sims[(est, var)]
                r = res[est][var]
                r["l2sq"].append(float(sq.mean()))
                r["l2sq_se"].append(float(sq.std(ddof=1) / np.sqrt(trials)))
                r["l1"].append(float(ab.mean()))
                r["l1_se"].append(float(ab.std(ddof=1) / np.sqrt(trials)))
            ex = ex_cov if est == "covering" else ex_blue
            mc_raw = res[est]["raw"]["l2sq"][-1]
            z_raw.append((abs(mc_raw - ex) / res[est]["raw"]["l2sq_se"][-1], mc_raw, ex, est, e))
        # the paper's trellis DP vs the fast exact method on a few draws (same optimum value)
        for i in range(3):
            for metric in ("l2", "l1"):
                fast = consistency.project_cdf(raw["covering"][i], total=N, metric=metric)
                dpv = consistency.project_cdf(raw["covering"][i], total=N, metric=metric,
                                              method="trellis")
                f1 = consistency.objective(fast, raw["covering"][i], metric)
                f2 = consistency.objective(dpv, raw["covering"][i], metric)
                trellis_dev = max(trellis_dev, abs(f1 - f2) / max(f2, 1e-12))
        if abs(e - 1.0) < 1e-12 or sample is None:
            # one draw through the public pipeline (measure -> covering -> project)
            pc2 = dp.cdf_from_measurements(mech, y[0], consistency="l2", estimator="covering")
            pc1 = dp.cdf_from_measurements(mech, y[0], consistency="l1", estimator="covering")
            pipe_dev = max(float(np.max(np.abs(pc2.raw - raw["covering"][0]))),
                           float(np.max(np.abs(pc2.consistent - consistency.project_cdf(
                               raw["covering"][0], total=N, metric="l2")))),
                           float(np.max(np.abs(pc1.consistent - consistency.project_cdf(
                               raw["covering"][0], total=N, metric="l1")))))
            sample = {"eps": e, "truth": truth[0], "raw": pc2.raw, "l2": pc2.consistent,
                      "l1": pc1.consistent, "pipeline_max_abs_dev": pipe_dev,
                      "consistent_l2": bool(consistency.is_consistent(pc2.consistent, N)),
                      "consistent_l1": bool(consistency.is_consistent(pc1.consistent, N))}
        # private_cdf end to end once (the public one-call API)
        pcdf = dp.private_cdf(hist[0], mech, np.random.default_rng(1), consistency="l2",
                              estimator="covering")
        if not consistency.is_consistent(pcdf.consistent, N):
            raise RuntimeError("private_cdf returned an inconsistent CDF")

    # ------------------------------------------------------------------ checks
    src = "[RTS] Sec. VI-3 (reconstruction)"
    zw = max(z_raw)
    checks.append(C.check(f"MC raw E||F_hat-F||^2 vs exact (Thm IV.1 covering; BLUE trace), "
                          f"{trials} trials per eps; worst: {zw[3]} at eps={zw[4]:g}",
                          zw[1], zw[2], "[RTS] Thm IV.1 / docs/math.md sec. 2", ok=zw[0] <= 4.0,
                          note=f"max |z| = {zw[0]:.2f} (<= 4 standard errors)"))
    checks.append(C.check("fast projection = [RTS] trellis DP optimum (max rel. dev. of the "
                          "objective)", trellis_dev, 0.0, "[RTS] Sec. VI-2 eqs. (8)-(10)",
                          abs_tol=1e-9))
    checks.append(C.check("pipeline (cdf_from_measurements) = covering + project_cdf",
                          sample["pipeline_max_abs_dev"], 0.0, "dptree_opt.private_cdf",
                          abs_tol=1e-9))
    checks.append(C.flag_check("projected CDFs are consistent (integer, monotone, in [0,N], "
                               "end at N)", sample["consistent_l2"] and sample["consistent_l1"],
                               "True", sample["consistent_l2"] and sample["consistent_l1"],
                               "[RTS] problem (Oc)"))
    for est in ESTIMATORS:
        for var, metric in (("l2", "l2sq"), ("l1", "l1")):
            before = np.array(res[est]["raw"][metric])
            after = np.array(res[est][var][metric])
            ok = bool(np.all(after < before))
            worst = float(np.max(after / before))
            label = "squared l2" if metric == "l2sq" else "l1"
            checks.append(C.flag_check(
                f"{est}: {var}-consistency lowers the {label} error at every eps",
                f"after/before <= {worst:.3f}", "< 1 ('results in smaller errors')", ok, src))
    i1 = list(eps_grid).index(1.0)
    table = {est: {var: {"l2sq": res[est][var]["l2sq"][i1], "l1": res[est][var]["l1"][i1]}
                   for var in VARIANTS} for est in ESTIMATORS}

    # ------------------------------------------------------------------ figure
    fig = C.plt.figure(figsize=(16, 5.6))
    gs = fig.add_gridspec(1, 3, width_ratios=[1, 1, 1.15], wspace=0.28)
    styles = {("covering", "raw"): ("o", "-", C.PALETTE["17-ary"]),
              ("covering", "l2"): ("s", "-", C.PALETTE["binary"]),
              ("covering", "l1"): ("^", "-", C.PALETTE["histogram"]),
              ("blue", "raw"): ("o", "--", C.PALETTE["17-ary"]),
              ("blue", "l2"): ("s", "--", C.PALETTE["binary"]),
              ("blue", "l1"): ("^", "--", C.PALETTE["histogram"])}
    names = {"raw": "before (noisy)", "l2": "after l2-consistency c⁽²⁾",
             "l1": "after l1-consistency c⁽¹⁾"}
    ax = fig.add_subplot(gs[0, 0])
    for est in ESTIMATORS:
        for var in VARIANTS:
            mk, ls, col = styles[(est, var)]
            ax.errorbar(eps_grid, res[est][var]["l2sq"],
                        yerr=2 * np.array(res[est][var]["l2sq_se"]), marker=mk, ls=ls,
                        color=col, ms=4.5, mfc="none" if est == "blue" else col,
                        label=f"{'covering' if est == 'covering' else 'BLUE'}: {names[var]}")
    ax.plot(eps_grid, exact["covering"], ":", color="k", lw=1,
            label="exact raw (Thm IV.1; BLUE trace)")
    ax.plot(eps_grid, exact["blue"], ":", color="k", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(eps_grid)
    C.plain_log_ticks(ax, "x")
    C.plain_log_ticks(ax, "y")
    ax.set_xlabel("total privacy budget ε (pure DP)")
    ax.set_ylabel("E‖F̂ − F‖₂²  (F = C/N, dimensionless)")
    ax.set_title(f"(a) squared l2 error, {trials} trials per ε (± 2 se)")
    ax.legend(loc="lower left", fontsize=7.8)

    ax = fig.add_subplot(gs[0, 1])
    for est in ESTIMATORS:
        ls = "-" if est == "covering" else "--"
        lab = "covering" if est == "covering" else "BLUE"
        for var, metric, col, mk in (("l2", "l2sq", C.PALETTE["binary"], "s"),
                                     ("l1", "l1", C.PALETTE["histogram"], "^"),
                                     ("l1", "l2sq", "#9467bd", "v"),
                                     ("l2", "l1", "#8c564b", "D")):
            ratio = np.array(res[est][var][metric]) / np.array(res[est]["raw"][metric])
            mname = "‖·‖₂²" if metric == "l2sq" else "‖·‖₁"
            ax.plot(eps_grid, ratio, marker=mk, ls=ls, color=col, ms=4.5,
                    mfc="none" if est == "blue" else col,
                    label=f"{lab}: {var}-consistent, {mname} error")
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xticks(eps_grid)
    C.plain_log_ticks(ax, "x")
    ax.set_xlabel("total privacy budget ε (pure DP)")
    ax.set_ylabel("error after / before consistency (ratio)")
    ax.set_title("(b) error reduction by consistency (< 1: better)")
    ax.legend(loc="lower right", fontsize=7.5, ncol=1)
    ax = fig.add_subplot(gs[0, 2])
    t = np.arange(1, K + 1)
    win = slice(0, 60)
    ax.plot(t[win], np.asarray(sample["raw"])[win] / N, ".", color="#999999", ms=5,
            label="noisy covering estimate C̃/N")
    ax.step(t[win], np.asarray(sample["truth"])[win] / N, where="post", color="k", lw=1.5,
            label="true F")
    ax.step(t[win], np.asarray(sample["l2"])[win] / N, where="post", color=C.PALETTE["binary"],
            lw=1.2, label="l2-consistent c⁽²⁾/N")
    ax.step(t[win], np.asarray(sample["l1"])[win] / N, where="post",
            color=C.PALETTE["histogram"], lw=1.2, ls="--", label="l1-consistent c⁽¹⁾/N")
    ax.set_xlabel("bin index j (first 60 of K = 289)")
    ax.set_ylabel("CDF value F_j (fraction of N)")
    ax.set_title(f"(c) one draw at ε = {sample['eps']:g}: noisy vs consistent CDF")
    ax.legend(loc="upper left", fontsize=8.5)
    tb = table["covering"]
    fig.suptitle(f"Consistency post-processing of a private CDF: K = 289, tree (17,17), "
                 f"N = {N} uniform points, swap, Laplace. At ε = 1 (covering): ‖·‖₂² "
                 f"{tb['raw']['l2sq']:.4f} → {tb['l2']['l2sq']:.4f} (l2) / "
                 f"{tb['l1']['l2sq']:.4f} (l1)", fontsize=11.5)
    C.caption(fig, "Reconstruction of [RTS] (arXiv 2409.18573) Sec. VI-3: the paper's K, N, ε "
                   "and numbers were lost; K = 17², N = 1000 and the ε grid are ours. "
                   "Projections: consistency.project_cdf (exact; = the paper's trellis DP).")
    fig.subplots_adjust(left=0.05, right=0.98, top=0.86, bottom=0.14)
    png = C.save_png(fig, out_dir, NAME)
    data = {"K": K, "branching": BRANCHING, "N": N, "eps": list(eps_grid), "trials": trials,
            "seed": SEED, "data": "N uniform points on [0,1), fresh each trial",
            "results": res, "exact_raw_l2sq": exact, "table_eps_1": table,
            "sample": sample, "checks": checks}
    js = C.write_json(out_dir, NAME, data)
    return C.summary(NAME, TITLE, png, js, checks)


if __name__ == "__main__":
    C.cli(run, __doc__)
