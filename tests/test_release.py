"""`release` / `dptree-opt release`: results, padding, neighbours, hostile input, CLI."""

import json
import re

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import optimize, queries
from dptree_opt.cli import main
from dptree_opt.data_release import Release, release, release_file

# A huge budget makes the discrete noise exactly 0 with overwhelming probability
# (q = exp(-eps_l / sensitivity) < e^-30 per node, e.g. eps_l = 300 / 5 levels = 60 at
# sensitivity 1): the release is then exact and testable. (Above eps_l ~ 745 the noise is
# identically 0 in double precision and the release refuses the budget.)
HUGE = 300.0


def _data(n=2000, seed=0):
    return np.random.default_rng(seed).uniform(0, 100, n)


def test_release_structure_and_guarantee():
    x = _data()
    r = release(x, lower=0, upper=100, bins=8, epsilon=1.0, tree=[2, 2, 2],
                quantiles=(0.25, 0.5, 0.75))
    assert isinstance(r, Release) and r.branching == (2, 2, 2) and r.padded_bins == 8
    c = r.consistent_cdf
    assert c.shape == r.raw_cdf.shape == r.standard_errors.shape == (8,)
    assert np.all(np.diff(c) >= 0) and c[0] >= 0 and c[-1] == r.total
    assert not r.cdf.total_public and r.privacy["neighbours"] == "add_remove"
    mech = r.mechanism
    assert mech.discrete and mech.epsilon <= 1.0 + 1e-12 and mech.neighbours == "add_remove"
    # SEs are those of the discrete mechanism (not of continuous Laplace)
    np.testing.assert_allclose(r.standard_errors, queries.cdf_standard_errors(mech), rtol=1e-12)
    cont = dp.Mechanism(mech.strategy, epsilon=1.0, neighbours="add_remove")
    assert np.all(r.standard_errors < queries.cdf_standard_errors(cont))
    assert np.all((r.quantile_lower <= r.quantiles) & (r.quantiles <= r.quantile_upper))
    assert np.all((r.quantile_lower <= r.quantile_noise_lower)
                  & (r.quantile_noise_lower <= r.quantiles)
                  & (r.quantiles <= r.quantile_noise_upper)
                  & (r.quantile_noise_upper <= r.quantile_upper))
    assert np.all((r.quantiles >= 0) & (r.quantiles <= 100))
    levels = {lv["level"]: lv for lv in r.privacy["levels"]}
    assert sorted(levels) == [0, 1, 2, 3]
    for lvl, info in levels.items():
        s, v = mech.level_scales[lvl], mech.level_variances[lvl]
        if np.isinf(s):  # optimal budgets: a level may get none (written as null)
            assert info["scale"] is None and info["released"] == "not measured"
        else:
            assert info["scale"] == pytest.approx(s) and info["variance"] == pytest.approx(v)
    assert "OpenDP" in r.privacy["sampler"] and "discrete Laplace" in r.privacy["sampler"]
    assert "WARNING" not in r.description
    out = json.loads(r.to_json())
    assert out["bins"]["K"] == 8 and len(out["bins"]["edges"]) == 9
    assert [q["q"] for q in out["quantiles"]] == [0.25, 0.5, 0.75]
    assert out["cdf"]["consistent"] == c.tolist() and "timings_seconds" not in out
    assert "measurements" not in out
    assert len(json.loads(r.to_json(include_measurements=True))["measurements"]) == 15


def test_huge_budget_release_is_exact():
    x = _data(5000, 1)
    K = 50
    r = release(x, lower=0, upper=100, bins=K, epsilon=HUGE, tree=[5, 10],
                quantiles=(0.1, 0.5, 0.9))
    truth = np.cumsum(np.bincount(np.minimum((x / 100 * K).astype(int), K - 1), minlength=K))
    np.testing.assert_array_equal(r.consistent_cdf, truth)
    np.testing.assert_allclose(r.raw_cdf, truth, atol=1e-6)
    assert r.total == 5000
    np.testing.assert_allclose(r.quantiles, queries.quantiles(truth, r.bin_edges,
                                                              [0.1, 0.5, 0.9]))
    assert r.range_count(20, 40) == truth[19] - truth[9]
    # edge-aligned intervals contain the true quantiles of the raw data
    true_q = np.quantile(x, [0.1, 0.5, 0.9], method="inverted_cdf")
    assert np.all((r.quantile_lower <= true_q) & (true_q <= r.quantile_upper))
    # the same release from the counts (no quantiles: their calibration at this budget, a
    # nearly degenerate lattice law, takes most of the time and is checked above)
    rc = release(counts=np.diff(truth, prepend=0), lower=0, upper=100, bins=K, epsilon=HUGE,
                 tree=[5, 10], quantiles=())
    np.testing.assert_array_equal(rc.consistent_cdf, truth)


def test_padding_bins_are_public_zeros():
    """tree [2, 2, 2, 2] over 10 bins: 16 leaves, the last 6 empty. The release covers the 10
    real bins, its CDF ends at the total, and the description says the padding is public."""
    x = np.full(300, 99.0)  # everything in the last real bin
    r = release(x, lower=0, upper=100, bins=10, epsilon=HUGE, tree=[2, 2, 2, 2],
                neighbours="swap", quantiles=(0.5,))
    assert r.padded_bins == 16 and r.mechanism.n_bins == 16
    assert r.consistent_cdf.tolist() == [0] * 9 + [300] and r.total == 300
    assert r.quantiles[0] <= 100.0
    assert "padding" in r.description and "public zeros" in " ".join(r.privacy["public"])
    noisy = release(x, lower=0, upper=100, bins=10, epsilon=1.0, tree=[2, 2, 2, 2],
                    neighbours="swap")
    assert noisy.consistent_cdf[-1] == 300 and noisy.consistent_cdf.size == 10
    # add/remove: the total is estimated from C_K or C_K' (smaller public SE)
    private = release(x, lower=0, upper=100, bins=10, epsilon=1.0, tree=[2, 2, 2, 2])
    assert private.consistent_cdf[-1] == private.total and not private.cdf.total_public


def test_optimal_tree_is_the_optimisers_and_swap_is_loud():
    x = _data(500)
    r = release(x, lower=0, upper=100, bins=100, epsilon=1.0, neighbours="swap")
    d = optimize.level_uniform(100, 1.0, estimator="blue", neighbours="swap",
                               budgets="optimal")  # the release's default (issue 12 item 13)
    assert r.branching == tuple(d.branching)
    assert [r.mechanism.level_budgets.get(lvl + 1, 0.0) for lvl in range(len(d.budgets))] \
        == pytest.approx(list(d.budgets))
    # the JSON reports the design's exact error: the mean of the SE^2 of the raw CDF
    assert r.expected_error["mean_prefix_mse"] == pytest.approx(
        float(np.mean(r.standard_errors ** 2)), rel=1e-12)
    assert r.cdf.total_public and r.total == 500 and r.consistent_cdf[-1] == 500
    assert r.description.startswith("WARNING: swap neighbours -- the number of records N is "
                                    "released EXACTLY")
    assert any("RELEASED EXACTLY" in p for p in r.privacy["public"])
    assert r.standard_errors[-1] == 0.0


def test_gaussian_release_and_one_bin():
    x = _data(300)
    r = release(x, lower=0, upper=100, bins=16, rho=0.5, tree=[4, 4])
    assert r.mechanism.noise == "gaussian" and r.mechanism.rho <= 0.5 + 1e-12
    assert "discrete Gaussian" in r.privacy["sampler"]
    one = release(x, lower=0, upper=100, bins=1, epsilon=1.0, quantiles=(0.5,))
    assert one.consistent_cdf.shape == (1,) and one.branching == ()
    swap = release(x, lower=0, upper=100, bins=1, epsilon=1.0, neighbours="swap")
    assert swap.consistent_cdf.tolist() == [300]  # nothing to hide under swap


def test_clip_policy_counts_out_of_range_in_the_end_bins():
    x = np.array([-5.0, 1, 2, 150, 100])
    r = release(x, lower=0, upper=100, bins=4, epsilon=HUGE, tree=[4], out_of_range="clip")
    assert r.consistent_cdf.tolist() == [3, 3, 3, 5]
    assert "clip" in r.description and "not released" in r.description


def _kw(**over):
    kw = dict(lower=0, upper=100, bins=8, epsilon=1.0, tree=[2, 2, 2])
    kw.update(over)
    return kw


@pytest.mark.parametrize("data,kw,match", [
    ([1, 2, 150, 200, -1], {}, r"data: 3 value\(s\) outside \[lower, upper\) .*\(1 below lower,"
                               r" 2 at or above upper; first at data row 3"),
    ([1, np.nan, 3], {}, r"data: 1 NaN/missing value\(s\); first at data row 2"),
    ([1, np.inf, -np.inf], {}, r"data: 2 infinite value\(s\)"),
    ([1, np.inf], {"out_of_range": "clip"}, r"data: 1 infinite"),
    (["1", "x"], {}, r"data: text '1' \(numeric strings are not converted"),
    ([1.0, "x"], {}, r"data: .*'x'.* at data row 2"),
    ([], {}, r"data: no values \(empty input\)"),
    ([1], {"lower": 5, "upper": 5}, "lower must be < upper"),
    ([1], {"lower": 6, "upper": 5}, "lower must be < upper"),
    ([1], {"lower": -np.inf}, "lower must be finite"),
    ([1], {"upper": np.nan}, "upper must be finite"),
    ([1], {"bins": 0}, "bins must be an integer >= 1"),
    ([1], {"bins": -3}, "bins must be an integer >= 1"),
    ([1], {"tree": [2, 2]}, r"tree: branching \[2, 2\] has 4 leaves, fewer than bins = 8"),
    ([1], {"tree": [2, 0, 4]}, "branching factors must be integers >= 1"),
    ([1], {"tree": "binary"}, "tree must be 'optimal' or a list"),
    ([1], {"tree": [2] * 40}, "leaves"),
    ([1], {"epsilon": 0.0}, "epsilon must be finite and > 0"),
    ([1], {"epsilon": -1.0}, "epsilon must be finite and > 0"),
    ([1], {"epsilon": np.nan}, "epsilon must be finite and > 0"),
    ([1], {"epsilon": "1"}, "epsilon must be a number"),
    ([1], {"rho": 0.5}, "exactly one of epsilon .* or rho .*; got both"),
    ([1], {"epsilon": None}, "exactly one of epsilon .* or rho .*; got neither"),
    ([1], {"epsilon": None, "rho": 0.0}, "rho must be finite and > 0"),
    ([1], {"neighbours": "bounded"}, "neighbours must be one of"),
    ([1], {"out_of_range": "drop"}, "out_of_range must be one of"),
    ([1], {"quantiles": (0.5, 1.5)}, r"quantiles must be probabilities in \[0, 1\]"),
    ([1], {"quantiles": (np.nan,)}, r"quantiles must be probabilities"),
    ([1], {"consistency": "l3"}, "consistency must be one of"),
    ([1], {"budgets": "best"}, "budgets must be 'equal' or 'optimal'"),
    ([1], {"interval_level": 1.0}, r"interval_level must be in \(0, 1\)"),
])
def test_hostile_input(data, kw, match):
    with pytest.raises(ValueError, match=match):
        release(data, **_kw(**kw))


@pytest.mark.parametrize("counts,match", [
    ([1, 2, 3], r"counts: histogram must have shape \(8,\)"),
    ([1, 2, 3, 4, 5, 6, 7, -8], "counts: histogram counts must be non-negative"),
    ([1, 2, 3, 4, 5, 6, 7, 8.5], "counts: histogram counts must be integers"),
    ([1, 2, 3, 4, 5, 6, 7, np.nan], "counts: histogram has NaN"),
])
def test_hostile_counts(counts, match):
    with pytest.raises(ValueError, match=match):
        release(counts=counts, **_kw())


def test_data_xor_counts():
    with pytest.raises(ValueError, match="exactly one of data .* or counts"):
        release([1.0], counts=[1] * 8, **_kw())
    with pytest.raises(ValueError, match="exactly one of data .* or counts"):
        release(**_kw())


def test_release_file_validates_before_reading(tmp_path):
    with pytest.raises(ValueError, match="epsilon must be finite"):
        release_file(tmp_path / "missing.csv", column="v", **_kw(epsilon=-1.0))
    with pytest.raises(ValueError, match="file not found"):
        release_file(tmp_path / "missing.csv", column="v", **_kw())
    (tmp_path / "d.csv").write_text("v\n1\n")
    with pytest.raises(ValueError, match="column: name the column"):
        release_file(tmp_path / "d.csv", **_kw())


# ------------------------------------------------------------------ CLI
def _csv(tmp_path, values, name="value"):
    path = tmp_path / "data.csv"
    path.write_text(f"id,{name}\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values)))
    return path


def test_cli_release_csv_writes_json(tmp_path, capsys):
    path = _csv(tmp_path, np.round(_data(400), 2))
    out = tmp_path / "r.json"
    code = main(["release", str(path), "--column", "value", "--lower", "0", "--upper", "100",
                 "--bins", "10", "--epsilon", "1", "--quantiles", "0.25,0.5,0.75",
                 "--tree", "10", "--out", str(out), "--describe"])
    text = capsys.readouterr().out
    assert code == 0
    assert "quantile" in text and "95% interval" in text and "N (private, estimated)" in text
    assert "OpenDP" in text and f"written: {out}" in text
    result = json.loads(out.read_text())
    assert result["format"] == "dptree_opt.release/1"
    assert [q["q"] for q in result["quantiles"]] == [0.25, 0.5, 0.75]
    assert result["privacy"]["neighbours"] == "add_remove"
    assert result["tree"]["branching"] == [10]


def test_cli_release_counts_file_and_swap_warning(tmp_path, capsys):
    counts = tmp_path / "counts.txt"
    counts.write_text("\n".join(["5"] * 16) + "\n")
    code = main(["release", "--counts", str(counts), "--lower", "0", "--upper", "16",
                 "--bins", "16", "--rho", "1", "--tree", "4,4", "--neighbours", "swap"])
    cap = capsys.readouterr()
    assert code == 0 and "N = 80 (PUBLIC" in cap.out and "WARNING" in cap.err


@pytest.mark.parametrize("args,match", [
    (["--column", "income"], "column 'income' not found"),
    (["--column", "value", "--rho", "1"], "exactly one of epsilon"),
    (["--column", "value", "--tree", "2,2"], "fewer than bins = 10"),
    (["--column", "value", "--tree", "two"], "--tree: expected 'optimal' or branching"),
    (["--column", "value", "--quantiles", "0.5,x"], "--quantiles: expected comma-separated"),
    (["--column", "value", "--upper", "50"], r"value\(s\) outside"),
    (["--column", "value", "--bins", "0"], "bins must be an integer >= 1"),
    ([], "--column: name the column"),
])
def test_cli_hostile_input_exits_2_with_a_message(tmp_path, capsys, args, match):
    path = _csv(tmp_path, np.round(_data(50), 2))
    base = ["release", str(path), "--lower", "0", "--upper", "100", "--bins", "10",
            "--epsilon", "1"]
    # later flags override earlier ones in argparse
    assert main(base + args) == 2
    err = capsys.readouterr().err
    assert err.startswith("dptree-opt: error: ") and re.search(match, err)
