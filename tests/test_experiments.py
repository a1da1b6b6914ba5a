"""experiments/*.py in quick mode, their numbers against independent computations, and
`dptree-opt experiment`."""

from __future__ import annotations

import csv
import math

import pytest

import dptree_opt as dp
from dptree_opt import closed_forms
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.cli import main
from dptree_opt.cli._scripts import list_scripts, load_script


def rows_of(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_experiment_list():
    assert set(list_scripts("experiments")) >= {"compare_table", "k_sweep", "eps_split",
                                                "k_and_eps_sweep", "laplace_vs_gaussian",
                                                "frontier"}


def test_k_sweep(tmp_path):
    res = load_script("experiments", "k_sweep").run(tmp_path, quick=True)
    assert (tmp_path / "k_sweep.png").stat().st_size > 1000
    rows = rows_of(tmp_path / "k_sweep.csv")
    checked = 0
    for r in rows:
        K, k = int(r["n_bins"]), int(r["k"])
        h = round(math.log(K, k))
        if r["neighbours"] != "swap" or k**h != K:
            continue
        # [RTS] Thm IV.1 (swap, equal budgets 1/h), counts^2 per prefix
        want = closed_forms.theorem_iv_1((k,) * h, [1.0 / h] * h) / K
        assert float(r["covering_mean"]) == pytest.approx(want, rel=1e-9), (K, k)
        checked += 1
    assert checked == 9  # k = 2, 4, 8, 16, 64 at 2^12; 2, 4, 16, 32 at 2^20
    # a BLUE value through a Mechanism (the structured Haar path, not design_error)
    r = next(r for r in rows if r["neighbours"] == "add_remove" and r["n_bins"] == "4096"
             and r["k"] == "8")
    mech = dp.Mechanism(S.tree(4096, 8), epsilon=1.0, neighbours="add_remove")
    assert float(r["blue_mean"]) == pytest.approx(
        dp.expected_error(W.prefix(4096), mech, "blue") / 4096, rel=1e-9)
    for key, best in res["best_k"].items():
        sub = [x for x in rows if f"{x['neighbours']} K={x['n_bins']}" == key]
        for est, k in best.items():
            assert min(sub, key=lambda x: float(x[f"{est}_mean"]))["k"] == str(k)


def test_laplace_vs_gaussian(tmp_path):
    load_script("experiments", "laplace_vs_gaussian").run(tmp_path, quick=True)
    assert (tmp_path / "laplace_vs_gaussian.png").stat().st_size > 1000
    rows = rows_of(tmp_path / "laplace_vs_gaussian.csv")
    for r in rows:
        if r["tree"] in ("binary", "16-ary"):
            # equal-variance tree, add/remove: L levels, Laplace var 2 L^2 / eps^2, Gaussian
            # var L / (2 rho) = L / eps^2 with rho = eps^2 / 2: the BLUE error ratio is 1/(2L)
            L = len(r["laplace_branching"].split()) + 1
            assert float(r["ratio_gaussian_over_laplace"]) == pytest.approx(1 / (2 * L), 1e-9)
    r = next(r for r in rows if r["tree"] == "binary" and r["n_bins"] == "1024")
    assert abs(float(r["laplace_mean"]) - 298.9) <= 0.05  # MATH.md section 6: binary + OLS


def test_eps_split(tmp_path):
    load_script("experiments", "eps_split").run(tmp_path, quick=True)
    rows = rows_of(tmp_path / "eps_split.csv")
    for r in rows:
        ks = [int(k) for k in r["tree"].split(",")]
        K = math.prod(ks)
        if r["split"] == "equal":
            want = closed_forms.theorem_iv_1(ks, [1.0 / len(ks)] * len(ks)) / K
        elif r["split"] == "RTS-optimal":  # Thm IV.2(a) minimum: (4K/eps^2)(sum (k-1)^(1/3))^3
            want = 4 * sum((k - 1) ** (1 / 3) for k in ks) ** 3
        else:
            continue
        assert float(r["covering_mean"]) == pytest.approx(want, rel=1e-6), r
        b = [float(x) for x in r["budgets"].split()]
        mech = dp.Mechanism(S.tree(K, ks), epsilon=1.0, neighbours="swap", level_budgets=b)
        assert float(r["blue_mean"]) == pytest.approx(
            dp.expected_error(W.prefix(K), mech, "blue") / K, rel=1e-6)
    for r in rows:  # the BLUE-optimal split is never worse for the BLUE
        if r["split"] != "BLUE-optimal":
            best = next(x for x in rows if x["tree"] == r["tree"] and x["split"] == "BLUE-optimal")
            assert float(best["blue_mean"]) <= float(r["blue_mean"]) * (1 + 1e-9)


@pytest.mark.slow
def test_k_and_eps_sweep(tmp_path):
    res = load_script("experiments", "k_and_eps_sweep").run(tmp_path, quick=True)
    rows = rows_of(tmp_path / "k_and_eps_sweep.csv")
    assert res["shape_depends_on_eps"] is False
    for r in rows:
        K, eps = int(r["n_bins"]), float(r["epsilon"])
        ks = [int(k) for k in r["branching"].split()]
        mech = dp.Mechanism(S.tree(math.prod(ks), ks), epsilon=eps, neighbours="swap")  # as the sweep
        want = dp.expected_error(W.prefix(math.prod(ks)), mech, r["estimator"],
                                 per_query=True)[:K].mean()
        assert float(r["mean_error"]) == pytest.approx(want, rel=1e-9)


@pytest.mark.slow
def test_compare_table(tmp_path):
    res = load_script("experiments", "compare_table").run(tmp_path, quick=True)
    assert (tmp_path / "compare_table.png").stat().st_size > 1000
    cdf = res["cdf_mean"]["1024"]
    assert abs(cdf["binary_covering"] - 1210) <= 0.5
    assert abs(cdf["google_default"] - 297.1) <= 0.05


def test_experiment_cli(tmp_path, capsys):
    assert main(["experiment", "--list"]) == 0
    assert "k_sweep" in capsys.readouterr().out
    assert main(["experiment", "nosuch"]) == 2
    assert "unknown script" in capsys.readouterr().err
    assert main(["experiment"]) == 2
    assert "NAME" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["EVIL_ABS", "../experiments/k_sweep", "k_sweep.py",
                                  "_experiments", "EVIL_REL"])
def test_experiment_runs_only_shipped_scripts(tmp_path, capsys, name):
    """`dptree-opt experiment PATH` must never execute a file outside experiments/ (issue 12
    item 6): an evil script that would create a marker file is refused by name."""
    marker = tmp_path / "executed"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef run(out_dir, quick=True):\n"
                    "    return {}\n")
    name = {"EVIL_ABS": str(tmp_path / "evil"),
            "EVIL_REL": "../../../../../../../../" + str(tmp_path / "evil")}.get(name, name)
    assert main(["experiment", name, "--out", str(tmp_path / "o")]) == 2
    assert "unknown script" in capsys.readouterr().err
    assert not marker.exists()
    with pytest.raises(ValueError, match="unknown script"):
        load_script("experiments", name)
    assert not marker.exists()


def test_frontier(tmp_path):
    """Quick mode (K = 2^4 .. 2^12): every check passes (MATH.md section 7 numbers, every
    mechanism above the bound); the Gaussian optimum is the best non-tree strategy and lies
    above its own certified dual bound; the best tree is never better than the optimum."""
    res = load_script("experiments", "frontier").run(tmp_path, quick=True)
    assert (tmp_path / "frontier.png").stat().st_size > 1000
    assert res["checks"] and all(c["ok"] for c in res["checks"])
    gauss = [r for r in res["rows"] if r["noise"] == "gaussian"]
    assert len(gauss) == 5
    for r in gauss:
        assert r["best_non_tree_key"] == "optimized"
        assert r["optimum_dual"] <= r["best_non_tree"] * (1 + 1e-12)
        assert r["best_non_tree"] <= r["best_tree"]
        assert r["bound"] <= r["optimum_dual"] * (1 + 1e-12)
