"""The paper-figure scripts (paper_figures/*.py) and `dptree-opt figures`.

Each script runs once in quick mode into a temporary folder; its JSON is then checked against
MATH.md / paper values and against computations written here independently of the package
(closed forms typed in again, brute-force enumerations, a dense GLS in numpy, a trellis DP,
an own Monte Carlo), never against stored outputs of the same code.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize

from dptree_opt.cli import main
from dptree_opt.cli._scripts import list_scripts, load_script

SCRIPTS = ["hon_figure4", "hon_examples", "rts_figure1", "rts_psi", "rts_budget_splits",
           "rts_optimal_height", "rts_lemma_v2", "rts_consistency", "su_max_error"]


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("paper_figures")


@pytest.fixture(scope="module")
def results(out_dir):
    """name -> (summary returned by run, parsed JSON); each script runs once, lazily."""
    cache = {}

    def get(name):
        if name not in cache:
            summary = load_script("paper_figures", name).run(out_dir, quick=True)
            cache[name] = (summary, json.loads(Path(summary["json"]).read_text()))
        return cache[name]

    return get


def test_every_item_has_a_script():
    assert set(SCRIPTS) <= set(list_scripts("paper_figures"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_writes_png_json_and_passes_its_checks(results, name):
    summary, data = results(name)
    assert summary["name"] == name
    png, js = Path(summary["png"]), Path(summary["json"])
    assert png.name == f"{name}.png" and js.name == f"{name}.json"
    assert png.stat().st_size > 20_000  # a real figure, not an empty canvas
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["title"] and summary["checks"]
    for c in summary["checks"]:
        assert {"what", "reproduced", "expected", "source", "ok"} <= set(c)
    failed = [c["what"] for c in summary["checks"] if not c["ok"]]
    assert not failed, failed
    assert data["checks"] == json.loads(json.dumps(summary["checks"]))


# --------------------------------------------------------------------------- [HON]
def _binary_tree_matrix(height):
    """Rows level by level (root first), columns = leaves; independent of the package."""
    K = 2**height
    rows, depth = [], []
    for d in range(height + 1):
        w = K >> d
        for j in range(2**d):
            r = np.zeros(K)
            r[j * w:(j + 1) * w] = 1
            rows.append(r)
            depth.append(d)
    return np.array(rows), np.array(depth)


def test_hon_figure4_exact_values_match_a_dense_constrained_gls(results):
    _, data = results("hon_figure4")
    A, depth = _binary_tree_matrix(4)
    noisy = depth > 0
    s2 = 9.0
    S = np.linalg.inv(A[noisy].T @ A[noisy] / s2)  # unconstrained GLS covariance
    one = np.ones(16)
    cov = S - np.outer(S @ one, one @ S) / (one @ S @ one)  # N known: 1'x = N
    node_var = np.einsum("ij,jk,ik->i", A, cov, A)[noisy]
    np.testing.assert_allclose(data["exact"]["efficient"], node_var, rtol=1e-10)
    # below / above by the [HON] recursions written for the equal-variance binary tree
    below = {4: s2}
    for d in (3, 2, 1):
        below[d] = 1 / (1 / s2 + 1 / (2 * below[d + 1]))
    above = {0: 0.0}
    for d in (1, 2, 3, 4):
        above[d] = 1 / (1 / s2 + 1 / (above[d - 1] + below[d]))
    for d in (1, 2, 3, 4):
        bd = data["by_depth"]
        assert bd["below"][str(d)]["exact"] == pytest.approx(below[d], rel=1e-12)
        assert bd["above"][str(d)]["exact"] == pytest.approx(above[d], rel=1e-12)
        assert bd["raw"][str(d)]["exact"] == pytest.approx(s2)
    assert data["by_depth"]["efficient"]["1"]["exact"] == pytest.approx(2.4, rel=1e-12)
    assert np.mean(data["exact"]["efficient"]) / s2 == pytest.approx(15 / 30, rel=1e-12)
    assert data["setting"]["trials"] == 10_000  # [HON] Sec. 4
    # the Monte Carlo per depth within 4 standard errors of the exact values
    for e in ("raw", "below", "above", "efficient"):
        for d in ("1", "2", "3", "4"):
            b = data["by_depth"][e][d]
            assert abs(b["mc"] - b["exact"]) <= 4 * b["mc_se"]


def test_hon_examples_match_the_fractions(results):
    _, data = results("hon_examples")
    w = data["weights_t10_below"]
    assert w["t10"] == pytest.approx(4 / 7, rel=1e-12)
    assert w["t100"] == pytest.approx(Fraction(1, 2) / Fraction(7, 4), rel=1e-12)
    assert w["t1000"] == pytest.approx(Fraction(1, 4) / Fraction(7, 4), rel=1e-12)
    assert data["var_t10_above"] == pytest.approx(1 / (1 + Fraction(7, 4)), rel=1e-12)
    corrected = 1 / (2 + 1 / (Fraction(1, 3) + Fraction(1, 2)))
    assert corrected == Fraction(5, 16)
    assert data["erratum"]["corrected_var"] == pytest.approx(float(corrected), rel=1e-12)
    assert data["erratum"]["claimed_sd"] == pytest.approx(0.202, abs=5e-4)  # [HON] Sec. 3.4
    assert data["erratum"]["corrected_sd"] > 2.5 * data["erratum"]["claimed_sd"]
    c = data["curves"]
    assert c["below_d1"][-1] == pytest.approx(0.5, abs=1e-3)
    assert c["above_d1"][-1] == pytest.approx(1 / 3, abs=1e-3)
    assert c["efficient_d1"][-1] == pytest.approx(1 / 4, abs=1e-3)
    assert c["efficient_d2"][-1] == pytest.approx(5 / 16, abs=1e-3)
    assert data["hat_trace"]["n_known"] == pytest.approx(15 / 30, rel=1e-12)
    assert data["hat_trace"]["n_unknown"] == pytest.approx(16 / 31, rel=1e-12)


# --------------------------------------------------------------------------- [RTS]
def _digit_sum_total(K, k, h):
    """sum_{t=1}^{K} (sum of the h base-k digits of t), t < k^h."""
    t = np.arange(1, K + 1, dtype=np.int64)
    total = 0
    for _ in range(h):
        total += int((t % k).sum())
        t //= k
    return total


def test_rts_figure1_numbers(results):
    _, data = results("rts_figure1")
    K = 289
    small = data["small"]
    assert small["range"] == 2 * (K - 1) ** 3
    assert small["histogram"] == 4 * K * (K - 1)
    assert small["17-ary"] == 4 * K * 2**2 * (16 + 16)
    # binary tree padded to 512 bins: prefix t uses popcount(t) nodes of variance 2 (2*9)^2
    assert small["binary"] == 2 * 18**2 * sum(bin(t).count("1") for t in range(1, K + 1))
    assert small["histogram"] < small["binary"]  # the paper's remark on its Figure 1
    assert min(small, key=small.get) == "17-ary"
    for i, Kb in enumerate(data["K"]):
        m = int(math.log2(Kb))
        sw = data["sweep"]
        assert sw["range"][i] == pytest.approx(2 * (Kb - 1) ** 3, rel=1e-12)
        assert sw["histogram"][i] == pytest.approx(4 * Kb * (Kb - 1), rel=1e-12)
        assert sw["binary"][i] == pytest.approx(4 * Kb * m**3, rel=1e-12)
        h = math.ceil(math.log(Kb) / math.log(17) - 1e-12)
        assert sw["17-ary"][i] == pytest.approx(8 * h * h * _digit_sum_total(Kb, 17, h),
                                                rel=1e-12)


def test_rts_psi_numbers(results):
    _, data = results("rts_psi")
    root = scipy.optimize.brentq(lambda k: math.log(k) - 3 * (1 - 1 / k), 5, 50, xtol=1e-14)
    assert data["k_star"] == pytest.approx(root, rel=1e-12)
    assert data["k_star"] == pytest.approx(16.801016, abs=5e-7)  # MATH.md sec. 4
    assert data["psi16"] == pytest.approx(15 / math.log(16) ** 3, rel=1e-14)
    assert data["psi17"] == pytest.approx(16 / math.log(17) ** 3, rel=1e-14)
    assert data["psi17"] < data["psi16"]  # [RTS] Lemma IV.3: the integer optimum is 17
    assert data["k_integer"] == 17


def test_rts_budget_splits_numbers(results):
    _, data = results("rts_budget_splits")
    for row in data["trees"]:
        ks = np.array(row["branching"], float)
        r = np.cbrt(ks - 1)
        np.testing.assert_allclose(row["optimal"], r / r.sum(), atol=1e-6)
        K = math.prod(row["branching"])
        assert row["error_optimal"] == pytest.approx(4 * K * r.sum() ** 3, rel=1e-8)
        h = len(ks)
        assert row["error_equal"] == pytest.approx(4 * K * h * h * (ks - 1).sum(), rel=1e-12)
    for case in data["o2"]:
        e = np.array(case["budgets"])
        k = np.array(case["branching_cvxpy"])
        assert np.prod(k) == pytest.approx(case["K"], rel=1e-8)
        np.testing.assert_allclose(k / k[0], (e / e[0]) ** 2, rtol=1e-4)  # k_l ~ eps_l^2
    for j in data["joint"]:
        np.testing.assert_allclose(j["branching"], j["K"] ** (1 / j["h"]), rtol=1e-5)
        np.testing.assert_allclose(j["budgets"], 1 / j["h"], atol=1e-5)


def _ordered_factorisations(n, lo=2):
    if n == 1:
        yield ()
        return
    for d in range(lo, n + 1):
        if n % d == 0:
            for rest in _ordered_factorisations(n // d):
                yield (d,) + rest


def _score(ks):
    return len(ks) ** 2 * sum(k - 1 for k in ks)


def test_rts_optimal_height_against_brute_force(results):
    _, data = results("rts_optimal_height")
    rows = {r["m"]: r for r in data["table"]}
    for m in range(1, 13):
        trees = list(_ordered_factorisations(2**m))
        best = min(_score(t) for t in trees)
        heights = {len(t) for t in trees if _score(t) == best}
        assert rows[m]["normalised_error"] == pytest.approx(best, rel=1e-12)
        assert rows[m]["h_star"] in heights
        assert _score(tuple(rows[m]["branching"])) == best
    assert rows[16]["branching"] == [16, 16, 16, 16]
    assert rows[20]["h_star"] == 5
    assert rows[20]["normalised_error"] == pytest.approx(25 * 75, rel=1e-12)
    for c in data["corollary_v1"]:
        assert c["branching"] == [c["p"]] * c["m"]


def test_rts_lemma_v2_against_brute_force(results):
    _, data = results("rts_lemma_v2")
    rows = {r["m"]: r for r in data["rows"]}
    for m in range(3, 14):
        trees = list(_ordered_factorisations(2**m))
        eq = min(_score(t) for t in trees if len(set(t)) == 1)
        uneq = min(_score(t) for t in trees if len(set(t)) > 1)
        assert rows[m]["best_equal_error"] == eq
        assert rows[m]["best_unequal_error"] == uneq
        if m in (7, 11, 13):  # Lemma V.2: m prime >= 7
            assert uneq < eq
    assert rows[7]["best_unequal_error"] == 88 and rows[7]["best_equal_error"] == 127


def _trellis(y, N, metric):
    """[RTS] Sec. VI-2 DP, written here: min over integer 0<=c_1<=..<=c_{K-1}<=N, c_K = N."""
    v = np.arange(N + 1, dtype=float)
    g = (lambda a: (v - a) ** 2) if metric == "l2" else (lambda a: np.abs(v - a))
    alpha = g(y[0])
    for a in y[1:-1]:
        alpha = g(a) + np.minimum.accumulate(alpha)
    return float(alpha.min())


def test_rts_consistency_numbers(results):
    _, data = results("rts_consistency")
    K, N = 289, 1000
    for i, e in enumerate(data["eps"]):
        exact = 4 * K * 2**2 * (16 + 16) / (N * e) ** 2  # Thm IV.1, (17, 17), eps/2 per level
        assert data["exact_raw_l2sq"]["covering"][i] == pytest.approx(exact, rel=1e-12)
        for est in ("covering", "blue"):
            r = data["results"][est]
            mc, se = r["raw"]["l2sq"][i], r["raw"]["l2sq_se"][i]
            assert abs(mc - data["exact_raw_l2sq"][est][i]) <= 4 * se
            assert r["l2"]["l2sq"][i] < r["raw"]["l2sq"][i]
            assert r["l1"]["l1"][i] < r["raw"]["l1"][i]
    s = data["sample"]
    raw = np.array(s["raw"])
    for metric in ("l2", "l1"):
        c = np.array(s[metric])
        assert c[-1] == N and np.all(np.diff(c) >= 0) and c[0] >= 0
        d = (c - raw)[:-1]
        value = float(d @ d) if metric == "l2" else float(np.abs(d).sum())
        assert value == pytest.approx(_trellis(raw, N, metric), rel=1e-9, abs=1e-9)


# --------------------------------------------------------------------------- [SU]
def test_su_max_error_exact_formula_and_an_independent_monte_carlo(results):
    _, data = results("su_max_error")
    for i, D in enumerate(data["D"]):
        if D == 1:
            assert data["exact_E_max_node"][i] == 0
            continue
        m = int(math.log2(D))
        H = math.fsum(1 / j for j in range(1, 2 * D))
        b = 2 * m  # eps = 1
        assert data["exact_E_max_node"][i] == pytest.approx(b * H, rel=1e-12)
        assert data["notes_eq10_E_max_node"][i] >= data["exact_E_max_node"][i]
        assert data["bound_eq15_exact"][i] == pytest.approx(m * b * H, rel=1e-12)
    # an own simulation of the lecture's mechanism at D = 2^6: all 2D-1 dyadic nodes noised
    rng = np.random.default_rng(12345)
    m, D, trials = 6, 64, 4000
    b = 2 * m
    t = np.arange(1, D + 1)
    errs = np.zeros((trials, D))
    for lev in range(m + 1):  # nodes of width 2^lev; root = width D
        z = rng.laplace(0, b, size=(trials, D >> lev))
        idx = (t >> lev) - 1  # node covering ((t>>lev)-1) * 2^lev + 1 .. (t>>lev) * 2^lev
        use = ((t >> lev) & 1).astype(bool) if lev < m else (t == D)
        errs[:, use] += z[:, idx[use]]
    mine = np.abs(errs).max(axis=1)
    theirs = data["monte_carlo"][str(D)]
    se = math.hypot(mine.std(ddof=1) / math.sqrt(trials), theirs["se_max_prefix"])
    assert abs(mine.mean() - theirs["mean_max_prefix"]) <= 4 * se
    assert theirs["mean_max_node"] == pytest.approx(data["exact_E_max_node"][m], rel=0.1)


# --------------------------------------------------------------------------- the CLI
def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["figures", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--only" in out and "--out" in out


def test_cli_runs_selected_items_and_prints_the_table(tmp_path, capsys):
    assert main(["figures", "--quick", "--only", "rts_psi", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "rts_psi" in out and "8/8" in out and "checks passed" in out
    assert (tmp_path / "rts_psi.png").is_file() and (tmp_path / "rts_psi.json").is_file()
    summary = json.loads((tmp_path / "figures_summary.json").read_text())
    assert summary["mode"] == "quick" and summary["items"][0]["name"] == "rts_psi"


def test_cli_progress_bar_goes_to_stderr(tmp_path, capsys):
    assert main(["figures", "--quick", "--only", "rts_psi.py", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "figures (quick)" in captured.err and "[" in captured.err
    assert "figures (quick)" not in captured.out


def test_cli_unknown_item_is_exit_2_with_a_clear_message(tmp_path, capsys):
    assert main(["figures", "--quick", "--only", "no_such_figure", "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown figure 'no_such_figure'" in err and "hon_figure4" in err
    assert not any(tmp_path.iterdir())


def test_cli_list(capsys):
    assert main(["figures", "--list"]) == 0
    out = capsys.readouterr().out
    for name in SCRIPTS:
        assert name in out
