"""Private learning under multiple participations: which noise for the running gradient sums.

Setting (docs/math.md section 11): DP-FTRL / DP-MF release the running sums of clipped
gradients over n steps (the prefix workload); one user enters k steps, fixed-epoch (k epochs
of b steps, n = k b, one offset per user), vector contributions of norm <= 1 (l2 Gaussian, l1
Laplace), add/remove. Loss per unit noise: Gaussian, sens^2 times the mean (or max) over steps
of the estimator's squared error at unit noise, i.e. expected_error(prefix(n), Mechanism(C,
rho = 1/2, participation=...)) / n (mean) and the max over steps of the per-step errors (max);
Laplace: the same expected_error at epsilon = 1 (counts^2, as is: 2 sens^2 per unit).

Panels: (a) mean loss vs k (n_k = k round(N / k)); (b) max loss vs k; (c) mean loss vs n
at k = 4; top row Gaussian, bottom row (d, e, f) the same under Laplace. Mechanisms:
independent noise; the square root; the banded square root with b bands (BSR), plain and
column-normalised; its inverse truncated (BISR); banded Toeplitz optimised for the mean (l2
or l1); BLT (optimised under the schema when strategies.blt takes participation=; 1 buffer
in quick mode); binary trees without restart (over 2^h >= n, truncated) with the BLUE,
Honaker's bottom-up (causal) and covering sums; the online tree (completed dyadic nodes);
binary trees restarted each epoch (BLUE, causal); the certified optimum and its lower bound
(optimize.participation_optimum, Gaussian, small n, when present); optimize.best_mechanism's
pick at one setting.

Findings (full mode, n ~ 2048, k = 1..16): under Gaussian noise the banded factorisations
(column-normalised BSR for k <= 4, optimised banded Toeplitz above) are the best at every k
and the best tree (with the BLUE) is 1.5-1.6 times worse; under Laplace the order reverses:
every tree's loss is k^2 times its single-participation loss, and the best tree is 5.4-6.0
times better than the best square factorisation (the identity: correlated noise does not pay
under l1).

Checks: the StackOverflow setting n = 2052, k = 6, b = 342 (docs/math.md section 11: square
root and BSR verified by independent dense computations; the rest recomputed by the framework,
exact, against the recorded values), the published TreeNoRestart cases of Google's
federated-compute accounting, and the pure-DP identity: under Laplace with vector contributions
a tree's loss at k participations is exactly k^2 times its single-participation loss.
"""

from __future__ import annotations

import inspect
import math
import time
from pathlib import Path

import numpy as np

from dptree_opt import Mechanism, expected_error, optimize, participation, strategies, workloads

import _experiments as C  # experiments/_experiments.py (on sys.path: script dir / load_script)

NAME = "learning_study"
RHO, EPSILON = 0.5, 1.0
N_TOTAL, QUICK_N_TOTAL = 2048, 512              # panels (a), (b): n_k = k round(N / k)
KS, QUICK_KS = tuple(range(1, 17)), (1, 2, 4, 8)
NS, QUICK_NS = (128, 256, 512, 1024, 2048), (64, 128, 256, 512)   # panel (c)
K_FIXED = 4                                     # panel (c)
OPT_MAX_N, QUICK_OPT_MAX_N = 512, 64            # participation_optimum only up to this n
OPT_SECONDS, QUICK_OPT_SECONDS = 120.0, 10.0    # its time limit
BLT_BUFFERS, QUICK_BLT_BUFFERS = None, 1        # BLT buffers (None: its default search)
# --set NAME=VALUE on the command line (dptree-opt experiment learning_study --help)
PARAMETERS = {
    "N": {"type": "int", "sets": ("N_TOTAL", "QUICK_N_TOTAL"), "min": 16,
          "help": "steps of the k sweep (n_k = k round(N / k))"},
    "k": {"type": "ints", "sets": ("KS", "QUICK_KS"), "min": 1,
          "help": "participations of the k sweep"},
    "n": {"type": "ints", "sets": ("NS", "QUICK_NS"), "min": 16,
          "help": "steps of the n sweep at k = 4 (rounded to a multiple of 4)"},
}
SO_N, SO_K, SO_B = 2052, 6, 342                 # the StackOverflow setting
BLT_TAKES_PARTICIPATION = "participation" in inspect.signature(strategies.blt).parameters
OPTIMUM = getattr(optimize, "participation_optimum", None)
SECTION = "docs/math.md section 11"
RECOMPUTED = (f"{SECTION}: recomputed by the framework (exact), matches the recorded value")
DENSE = f"{SECTION}: independent dense numpy computation"


def _height(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


def _schema(k: int, b: int):
    return participation.single() if k == 1 else participation.fixed_epoch(k, b)


def _budget(noise: str) -> dict:
    return {"rho": RHO} if noise == "gaussian" else {"epsilon": EPSILON}


def _loss(mech: Mechanism, n: int, estimator: str = "blue") -> tuple[float, float]:
    """(mean, max) loss per unit noise. The error is rescaled to the budget the mechanism
    actually spends (Mechanism reports it: .rho / .epsilon), so a mechanism whose per-level
    calibration leaves budget unused is scored at its exact loss: Gaussian 2 rho_spent x
    error (= sens^2 x error at unit noise), Laplace eps_spent^2 x error (error at eps = 1)."""
    per_step = expected_error(workloads.prefix(n), mech, estimator, per_query=True)
    f = 2.0 * mech.rho if mech.noise == "gaussian" else mech.epsilon ** 2
    return f * float(np.mean(per_step)), f * float(np.max(per_step))


def _banded_toeplitz(n, b, part, noise):
    return optimize.banded_toeplitz(n, b, None if part.is_single else part, objective="mean",
                                    norm=2 if noise == "gaussian" else 1).strategy


def _blt(n, part, buffers):
    if BLT_TAKES_PARTICIPATION and not part.is_single:
        return strategies.blt(n, participation=part, buffers=buffers)
    return strategies.blt(n, buffers=buffers)


# key: (label, colour, line style, builder(n, b, part, noise), estimators)
MECHANISMS = {
    "independent": ("independent noise", "#7f7f7f", ":",
                    lambda n, b, p, z: strategies.histogram(n), ("blue",)),
    "sqrt": ("square root", "#9467bd", "-", lambda n, b, p, z: strategies.sqrt_factorization(n),
             ("blue",)),
    "bsr": ("BSR, b bands", "#d62728", "-", lambda n, b, p, z: strategies.banded_sqrt(n, b),
            ("blue",)),
    "bsr_normalised": ("BSR, columns normalised", "#d62728", "--",
                       lambda n, b, p, z: strategies.normalise_columns(
                           strategies.banded_sqrt(n, b)), ("blue",)),
    "bisr": ("BISR, b bands", "#ff7f0e", "-",
             lambda n, b, p, z: strategies.banded_inverse_sqrt(n, b), ("blue",)),
    "banded_toeplitz": ("banded Toeplitz, optimised (mean)", "#2ca02c", "-", _banded_toeplitz,
                        ("blue",)),
    "blt": ("BLT" + (" (optimised under the schema)" if BLT_TAKES_PARTICIPATION else ""),
            "#8c564b", "-", None, ("blue",)),
    "tree": ("binary tree, no restart", "#1f77b4", "-",
             lambda n, b, p, z: strategies.truncated_tree(n, (2,) * _height(n)),
             ("blue", "causal", "covering")),
    "online_tree": ("online tree (completed nodes)", "#17becf", "-",
                    lambda n, b, p, z: strategies.online_tree(n), ("blue", "causal")),
    "restarted_tree": ("binary tree restarted each epoch", "#e377c2", "-",
                       lambda n, b, p, z: strategies.restarted(
                           strategies.truncated_tree(b, (2,) * _height(b)), n),
                       ("blue", "causal")),
}
ESTIMATOR_STYLE = {"blue": ("BLUE", "-"), "causal": ("causal (Honaker)", "--"),
                   "covering": ("covering sums", ":")}


def losses(n: int, k: int, noise: str, blt_buffers: int | None = None,
           only: tuple[str, ...] | None = None) -> dict[str, float]:
    """{key_estimator: mean loss, key_estimator_max: max loss} for every mechanism (or the
    keys ``only``) at n steps, fixed_epoch(k, n / k) (single() at k = 1); BLT with
    ``blt_buffers`` buffers."""
    b = n // k
    part = _schema(k, b)
    out = {}
    for key, (_, _, _, build, estimators) in MECHANISMS.items():
        if only is not None and key not in only:
            continue
        strat = _blt(n, part, blt_buffers) if key == "blt" else build(n, b, part, noise)
        mech = Mechanism(strat, participation=part, **_budget(noise))
        for est in estimators:
            mean, mx = _loss(mech, n, est)
            out[f"{key}_{est}"], out[f"{key}_{est}_max"] = mean, mx
    return out


def _optimum(n: int, k: int, seconds: float) -> dict:
    """The certified optimum and its lower bound (Gaussian), or a skip note."""
    if OPTIMUM is None:
        return {"note": "optimize.participation_optimum is not available in this checkout: "
                        "the optimum and its lower bound are skipped"}
    part = participation.fixed_epoch(k, n // k)
    res = OPTIMUM(n, part, "mean", time_limit=seconds)
    mech = Mechanism(res.strategy, rho=RHO, participation=part)
    mean, mx = _loss(mech, n)
    return {"optimum_blue": float(res.loss), "optimum_blue_max": mx,
            "optimum_reloss": mean, "lower_bound": float(res.lower_bound),
            "gap": float(res.gap), "method": str(res.method)}


def _row(n: int, k: int, noise: str, cache: dict, quick: bool, optimum: bool) -> dict:
    if (n, k, noise) not in cache:
        row = {"n": n, "k": k, "b": n // k, "noise": noise,
               **losses(n, k, noise, QUICK_BLT_BUFFERS if quick else BLT_BUFFERS)}
        if optimum and noise == "gaussian" and k > 1 and \
                n <= (QUICK_OPT_MAX_N if quick else OPT_MAX_N):
            row.update(_optimum(n, k, QUICK_OPT_SECONDS if quick else OPT_SECONDS))
        cache[(n, k, noise)] = row
    return cache[(n, k, noise)]


# ----------------------------------------------------------------------------- the checks
def _recorded(what: str, got: float, recorded: str, source: str) -> dict:
    """A check against a value recorded to the digits of the string ``recorded``: passes when
    the reproduced number rounds to it (relative tolerance half a unit of its last digit)."""
    decimals = len(recorded.partition(".")[2])
    value = float(recorded)
    return C.check(what, got, value, source, rel=0.5 * 10.0 ** -decimals / abs(value) * 1.001)


def _so_table(quick: bool) -> dict[str, dict]:
    """Every mechanism at n = 2052, k = 6, b = 342, fixed-epoch: {key: {"label", "gaussian",
    "gaussian_max", "laplace", "laplace_max", "sens2"}} (BLT, which takes seconds, in full
    mode only)."""
    n, b = SO_N, SO_B
    part = participation.fixed_epoch(SO_K, b)
    tree = strategies.truncated_tree(n, (2,) * 12)
    rest = strategies.restarted(strategies.truncated_tree(b, (2,) * 9), n)
    # (label, strategy per noise, estimator)
    entries = {
        "independent": ("independent noise", strategies.histogram(n), "blue"),
        "sqrt": ("square root", strategies.sqrt_factorization(n), "blue"),
        "bsr": ("BSR, 342 bands", strategies.banded_sqrt(n, b), "blue"),
        "bsr_normalised": ("BSR, 342 bands, columns normalised",
                           strategies.normalise_columns(strategies.banded_sqrt(n, b)), "blue"),
        "bisr": ("BISR, 342 bands", strategies.banded_inverse_sqrt(n, b), "blue"),
        "banded_toeplitz": ("banded Toeplitz, 342 bands, optimised for the mean (l2 / l1)",
                            {z: _banded_toeplitz(n, b, part, z) for z in ("gaussian", "laplace")},
                            "blue"),
        "tree_per_level": ("binary tree (4096 truncated), no restart, BLUE", tree, "blue"),
        "tree_causal": ("the same, Honaker's bottom-up (causal)", tree, "causal"),
        "online_tree": ("online tree (completed nodes), BLUE", strategies.online_tree(n), "blue"),
        "restarted_tree": ("binary tree (512 truncated to 342) restarted each epoch, BLUE", rest,
                           "blue"),
        "restarted_tree_causal": ("the same, Honaker's bottom-up (causal)", rest, "causal"),
    }
    if not quick:
        entries["blt"] = ("BLT" + (" optimised under the schema" if BLT_TAKES_PARTICIPATION
                                   else ""), _blt(n, part, BLT_BUFFERS), "blue")
    table = {}
    for key, (label, strat, est) in entries.items():
        row = {"label": label}
        for noise in ("gaussian", "laplace"):
            st = strat[noise] if isinstance(strat, dict) else strat
            mech = Mechanism(st, participation=part, **_budget(noise))
            row[noise], row[f"{noise}_max"] = _loss(mech, n, est)
        st = strat["gaussian"] if isinstance(strat, dict) else strat
        row["sens2"] = st.participation_sensitivity(np.ones(st.n_rows), part, 2).value ** 2
        table[key] = row
    # the unrestarted tree with equal noise on every node: level budgets proportional to each
    # level's own sensitivity^2 make every level's noise scale equal
    sens = Mechanism(tree, rho=RHO, participation=part).level_sensitivities
    d2 = np.array([sens[lv] ** 2 for lv in sorted(sens)])
    equal = Mechanism(tree, rho=RHO, participation=part, level_budgets=RHO * d2 / d2.sum())
    mean, mx = _loss(equal, n)
    table["tree_equal_noise"] = {"label": "binary tree (4096 truncated), no restart, equal "
                                          "noise on every node, BLUE", "gaussian": mean,
                                 "gaussian_max": mx, "sens2": table["tree_per_level"]["sens2"]}
    return table


def _so_checks(t: dict[str, dict]) -> list[dict]:
    """The table at n = 2052, k = 6, b = 342 against docs/math.md section 11."""
    n, k = SO_N, SO_K
    so = "SO setting (n = 2052, k = 6, b = 342)"
    return [
        _recorded(f"{so}: square root, mean loss", t["sqrt"]["gaussian"], "118.1568", DENSE),
        _recorded(f"{so}: square root, sens^2", t["sqrt"]["sens2"], "37.2030", DENSE),
        _recorded(f"{so}: square root, max loss", t["sqrt"]["gaussian_max"], "129.98", DENSE),
        _recorded(f"{so}: BSR (342 bands), mean loss", t["bsr"]["gaussian"], "80.6074", DENSE),
        _recorded(f"{so}: BSR (342 bands), sens^2", t["bsr"]["sens2"], "17.5399", DENSE),
        C.check(f"{so}: independent noise, mean loss = k (n + 1) / 2",
                t["independent"]["gaussian"], k * (n + 1) / 2,
                "closed form: sens^2 = k, mean of t over t = 1..n"),
        C.check(f"{so}: Laplace, l1-optimised banded Toeplitz (the identity), mean = 2 k^2 "
                "(n + 1) / 2", t["banded_toeplitz"]["laplace"], k * k * (n + 1),
                f"closed form ({SECTION}: l1 sens k, variance 2 k^2 per step)"),
        _recorded(f"{so}: BSR, columns normalised, mean loss", t["bsr_normalised"]["gaussian"],
                  "79.9849", RECOMPUTED),
        _recorded(f"{so}: BISR (342 bands), mean loss", t["bisr"]["gaussian"], "93.2268",
                  RECOMPUTED),
        _recorded(f"{so}: banded Toeplitz optimised for the mean, mean loss",
                  t["banded_toeplitz"]["gaussian"], "77.5123", RECOMPUTED),
        _recorded(f"{so}: banded Toeplitz optimised for the mean, max loss",
                  t["banded_toeplitz"]["gaussian_max"], "110.78", RECOMPUTED),
        _recorded(f"{so}: restarted binary tree (512 truncated to 342), BLUE, mean loss",
                  t["restarted_tree"]["gaussian"], "130.015", RECOMPUTED),
        C.check(f"{so}: the same restarted tree, sens^2", t["restarted_tree"]["sens2"], 60.0,
                "closed form: 6 epochs x 10 levels, one participation per block"),
        _recorded(f"{so}: the same restarted tree, causal (Honaker), mean loss",
                  t["restarted_tree_causal"]["gaussian"], "211.29", RECOMPUTED),
        _recorded(f"{so}: binary tree over 4096 truncated to 2052, no restart, equal noise on "
                  "every node, BLUE, mean loss", t["tree_equal_noise"]["gaussian"], "194.81",
                  RECOMPUTED),
        C.check(f"{so}: the same tree, sens^2 (equal noise on every node)",
                t["tree_equal_noise"]["sens2"], 154.0, RECOMPUTED),
        _recorded(f"{so}: the same tree, equal budget per level (Mechanism's default), mean "
                  "loss", t["tree_per_level"]["gaussian"], "125.44", RECOMPUTED),
        _recorded(f"{so}: online tree, equal budget per level, mean loss",
                  t["online_tree"]["gaussian"], "121.83", RECOMPUTED),
        _recorded(f"{so}: Laplace, square root, mean at eps = 1", t["sqrt"]["laplace"],
                  "324447", RECOMPUTED),
        _recorded(f"{so}: Laplace, BSR (342 bands), mean at eps = 1", t["bsr"]["laplace"],
                  "143979", RECOMPUTED),
    ]


FCP = ("Google federated-compute accounting_test.py test_zcdp_simple (Kairouz et al. 2021 "
       "Algorithm 4, TreeNoRestart; tests/test_participation_trees.py)")


def _tree_case_checks() -> list[dict]:
    """TreeNoRestart: the online tree over n steps, a user every s-th step, rho = sens^2 /
    (2 z^2); and 8 participations over 24 steps (sens^2 86 fixed-epoch, 88 min-sep)."""
    checks = []
    for z, n, s, rho in ((1.0, 4, 2, 4.0), (2.0, 4, 2, 1.0), (1.0, 5, 2, 4.5), (1.0, 7, 2, 5.5),
                         (1.0, 7, 3, 4.5)):
        t = strategies.online_tree(n)
        v = t.participation_sensitivity(np.ones(t.n_rows), participation.min_sep(None, s), 2)
        checks.append(C.check(f"TreeNoRestart z = {z:g}, n = {n}, every {s} steps: rho",
                              v.value ** 2 / (2 * z * z), rho, FCP, rel=1e-12))
    t = strategies.online_tree(24)
    for part, want in ((participation.fixed_epoch(8, 3), 86.0),
                       (participation.min_sep(8, 3), 88.0)):
        v = t.participation_sensitivity(np.ones(t.n_rows), part, 2).value ** 2
        checks.append(C.check(f"tree aggregation over 24 steps, {part.kind}(8, 3): sens^2", v,
                              want, "counted by hand per level (tests/test_participation_trees."
                                    "py; the min-sep pattern {0, 3, .., 15, 20, 23})",
                              rel=1e-12))
    return checks


def _pure_dp_checks(n: int, ks: tuple[int, ...]) -> list[dict]:
    """Laplace, vector contributions: every column of a tree with per-level budgets has the
    same l1 norm, so its loss at k participations is exactly k^2 times the single one
    (docs/math.md section 11.1)."""
    checks = []
    for k in ks:
        b = n // k
        for label, strat in (("binary tree", strategies.truncated_tree(n, (2,) * _height(n))),
                             ("tree restarted each epoch", strategies.restarted(
                                 strategies.truncated_tree(b, (2,) * _height(b)), n))):
            one = _loss(Mechanism(strat, epsilon=EPSILON), n)[0]
            many = _loss(Mechanism(strat, epsilon=EPSILON,
                                   participation=participation.fixed_epoch(k, b)), n)[0]
            checks.append(C.check(f"Laplace, {label}, n = {n}: loss at k = {k} / loss at one "
                                  f"participation = k^2", many / one, k * k,
                                  f"{SECTION}.1 (equal l1 column norms)", rel=1e-9))
    return checks


# quick mode: the Laplace search without the dense p-Identity optimum (about 20 s alone)
QUICK_LAPLACE_FAMILIES = ("histogram", "tree_equal", "node_budgets", "sqrt", "banded_sqrt",
                          "banded_inverse_sqrt", "banded_toeplitz")


OPTIMA_RECORDED = {(256, 4): "27.16", (512, 8): "73.56"}   # docs/math.md section 11


def _optimum_checks(rows: list[dict]) -> list[dict]:
    """Where the optimum ran: its loss recomputed by Mechanism equals the one it reports, it
    lies at or below every mechanism of the row (it is optimal over all factorisations,
    vector contributions) and its lower bound at or below it (weak duality)."""
    src = "optimize.participation_optimum: certified primal, dual lower bound"
    checks = []
    for r in rows:
        if "optimum_blue" not in r:
            continue
        where = f"n = {r['n']}, k = {r['k']}"
        others = [v for key, v in r.items() if key.endswith("_blue") and key != "optimum_blue"]
        checks.append(C.check(f"{where}: the optimum's loss recomputed by Mechanism",
                              r["optimum_reloss"], r["optimum_blue"], src, rel=1e-9))
        best = min(others, default=r["optimum_blue"])
        what = (f"lower bound <= optimum <= every mechanism of the row (best {best:.4g})"
                if others else "lower bound <= optimum")
        checks.append({"what": f"{where}: {what}", "reproduced": r["optimum_blue"],
                       "expected": best, "source": src,
                       "ok": r["lower_bound"] <= r["optimum_blue"] * (1 + 1e-9)
                       and r["optimum_blue"] <= best * (1 + 1e-9),
                       "deviation": max(0.0, r["optimum_blue"] / best - 1)})
        if (r["n"], r["k"]) in OPTIMA_RECORDED:
            checks.append(_recorded(f"{where}: the optimum (orthogonality-constrained class)",
                                    r["optimum_blue"], OPTIMA_RECORDED[r["n"], r["k"]],
                                    f"{SECTION} (dense optima, recorded)"))
    return checks


def _pick(n: int, k: int, noise: str, quick: bool) -> dict:
    """optimize.best_mechanism's pick under the schema (the framework's choice)."""
    part = participation.fixed_epoch(k, n // k)
    families = QUICK_LAPLACE_FAMILIES if quick and noise == "laplace" else None
    design = optimize.best_mechanism(workloads.prefix(n), participation=part, time_limit=60.0,
                                     families=families, **_budget(noise))
    mean, mx = _loss(design.mechanism(), n, design.estimator)
    return {"n": n, "k": k, "noise": noise, "family": design.family, "mean": mean, "max": mx,
            "families": "all" if families is None else ", ".join(families),
            "ranking": [(a.family, a.mean) for a in (design, *design.alternatives)]}


# ------------------------------------------------------------------------------------ run
def run(out_dir: Path, quick: bool = True) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    N, ks = (QUICK_N_TOTAL, QUICK_KS) if quick else (N_TOTAL, KS)
    ns = QUICK_NS if quick else NS
    cache: dict = {}
    sweep_n = [_row(K_FIXED * round(n / K_FIXED), K_FIXED, noise, cache, quick, True)
               for noise in ("gaussian", "laplace") for n in ns]
    sweep_k = [_row(k * round(N / k), k, noise, cache, quick, False)
               for noise in ("gaussian", "laplace") for k in ks]
    so_table = _so_table(quick)
    checks = _so_checks(so_table)
    checks += _tree_case_checks()
    extra = []  # full mode: the second recorded optimum (n = 512, k = 8)
    if not quick and OPTIMUM is not None:
        extra = [{"n": 512, "k": 8, **_optimum(512, 8, OPT_SECONDS)}]
    checks += _optimum_checks(sweep_n + extra)
    n0 = K_FIXED * round(min(ns) / K_FIXED)          # divisible by 2 and by K_FIXED = 4
    checks += _pure_dp_checks(n0, (2, K_FIXED))
    pick_n, pick_k = (n0, K_FIXED) if quick else (SO_N, SO_K)
    picks = [_pick(pick_n, pick_k, noise, quick) for noise in ("gaussian", "laplace")]
    notes = sorted({r["note"] for r in sweep_n if "note" in r})
    rows = [dict(r, panel="k") for r in sweep_k] + [dict(r, panel="n") for r in sweep_n]
    result = {"name": NAME, "rows": rows, "checks": checks, "stackoverflow": so_table,
              "picks": picks, "notes": notes,
              "blt_under_schema": BLT_TAKES_PARTICIPATION,
              "blt_buffers": QUICK_BLT_BUFFERS if quick else BLT_BUFFERS,
              "seconds": time.perf_counter() - t0}
    C.write_json(result, out_dir, NAME)
    result["png"] = str(_plot(sweep_k, sweep_n, out_dir, N, result["blt_buffers"]))
    return result


# ----------------------------------------------------------------------------------- plot
def _curves(noise: str, blt_buffers: int | None):
    for key, (label, colour, ls, _, estimators) in MECHANISMS.items():
        if noise == "laplace" and key == "banded_toeplitz":
            label = "banded Toeplitz, optimised (l1)"
        if key == "blt" and blt_buffers is not None:
            label = f"{label}, {blt_buffers} buffer(s)"
        for est in estimators:
            name = label if len(estimators) == 1 else f"{label}, {ESTIMATOR_STYLE[est][0]}"
            yield f"{key}_{est}", name, colour, (ls if len(estimators) == 1
                                                 else ESTIMATOR_STYLE[est][1])


def _plot(sweep_k, sweep_n, out_dir: Path, N: int, blt_buffers: int | None) -> Path:
    C.style()
    fig, axes = C.plt.subplots(2, 3, figsize=(16, 10.5))
    for row, noise in enumerate(("gaussian", "laplace")):
        sk = [r for r in sweep_k if r["noise"] == noise]
        sn = [r for r in sweep_n if r["noise"] == noise]
        letters = "abc" if noise == "gaussian" else "def"
        for ax, data, x, suffix, letter in ((axes[row, 0], sk, "k", "", letters[0]),
                                            (axes[row, 1], sk, "k", "_max", letters[1]),
                                            (axes[row, 2], sn, "n", "", letters[2])):
            xs = [r[x] for r in data]
            for key, label, colour, ls in _curves(noise, blt_buffers):
                ax.plot(xs, [r[key + suffix] for r in data], color=colour, ls=ls, marker="o",
                        ms=2.5, lw=1.2, label=label)
            if noise == "gaussian" and x == "n" and any("optimum_blue" in r for r in data):
                pts = [r for r in data if "optimum_blue" in r]
                ax.plot([r["n"] for r in pts], [r["optimum_blue"] for r in pts], "k*", ms=9,
                        label="certified optimum")
                ax.plot([r["n"] for r in pts], [r["lower_bound"] for r in pts], "kv", ms=6,
                        mfc="none", label="lower bound (any factorisation)")
            ax.set_yscale("log")
            if x == "n":
                ax.set_xscale("log", base=2)
            unit = "per unit noise" if noise == "gaussian" else "at eps = 1 (counts^2)"
            what = "max" if suffix else "mean"
            ax.set_xlabel("participations k (fixed epoch)" if x == "k" else "steps n")
            ax.set_ylabel(f"{what} loss {unit}")
            title = ("Gaussian (rho = 1/2)" if noise == "gaussian" else "Laplace (eps = 1)")
            where = f"n = k round({N}/k)" if x == "k" else f"k = {K_FIXED}"
            ax.set_title(f"({letter}) {title}\n{what} loss over the steps, {where}")
            if x == "k":
                ax.set_xticks(xs)
        axes[row, 2].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    C.caption(fig, "Running sums of clipped gradients, fixed-epoch participation, vector "
              "contributions, exact errors and exact sensitivities (docs/math.md section 11). "
              "Gaussian: sens^2 x squared error at unit noise; Laplace: squared error at eps = 1 "
              "(the l1-optimised banded Toeplitz is the identity: on the independent-noise "
              "curve).")
    return C.save_png(fig, out_dir, NAME, bottom=0.04)


if __name__ == "__main__":
    C.cli(run, NAME)
