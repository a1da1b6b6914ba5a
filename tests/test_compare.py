"""dptree_opt.compare / anchors and `dptree-opt compare`: docs/math.md section 6 anchors, the O(K)
interval-strategy BLUE error against dense linear algebra built here, OpenDP cross-checks, the
front-door rows per workload column, the prefix-sums baseline's closed form, and the ranking of
the streaming counters against their exact variances."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import anchors, compare
from dptree_opt import strategies as S
from dptree_opt.cli import main
from dptree_opt.compare import protocol
from dptree_opt.engines.interval import interval_blue_errors


def cdf_means(K, keys):
    res = compare.compare(K, 1.0, neighbours="add_remove", rows=keys, workloads=("cdf",))
    return {r.key: r.errors["cdf"].mean for r in res.rows}


# --------------------------------------------------------------- MATH.md section 6 anchors
# Laplace, eps = 1, add/remove, mean prefix MSE over t = 1..n; tolerance = half a unit of the
# last printed digit.
ANCHORS = {
    2**10: {"binary_covering": (1210, 0.5), "binary_ols": (298.9, 0.05),
            "google_default": (297.1, 0.05), "opendp_default_noised_padding": (284.8, 0.05)},
    2**16: {"binary_covering": (4624, 0.5), "binary_ols": (1002.8, 0.05),
            "google_default": (960.0, 0.05), "opendp_default_noised_padding": (615.7, 0.05)},
}


@pytest.mark.parametrize("K", sorted(ANCHORS))
def test_compare_rows_reproduce_math_md_anchors(K):
    got = cdf_means(K, list(ANCHORS[K]))
    for key, (value, tol) in ANCHORS[K].items():
        assert abs(got[key] - value) <= tol, (key, got[key], value)


def test_binary_covering_anchor_closed_form():
    """Independent: 11 levels, Lap(11) (variance 242), covering of t uses popcount(t) nodes
    (t = 1024 is the root)."""
    v = 2 * 11.0**2
    t = np.arange(1, 1025)
    nodes = np.array([bin(x % 1024).count("1") for x in t])
    nodes[-1] = 1
    want = v * nodes.mean()
    assert cdf_means(1024, ["binary_covering"])["binary_covering"] == pytest.approx(want, 1e-12)


def test_choose_branching_factor_rule():
    assert [anchors.choose_branching_factor(n) for n in (2**10, 2**16, 2**20)] == [26, 21, 19]
    assert anchors.opendp_layers(1024, 26) == 4 and anchors.opendp_layers(65536, 21) == 5


def test_opendp_b_2_4_16_with_discrete_laplace():
    """MATH.md: OpenDP at n = 1024, eps = 1, b = 2 / 4 / 16: 298.7 / 173.5 / 182.8 (discrete
    Laplace variances, padding nodes known zeros)."""
    for b, want in ((2, 298.7), (4, 173.5), (16, 182.8)):
        a = anchors.opendp_default(1024, branching=b)
        s = anchors.opendp_layers(1024, b)  # Laplace scale = layers / eps
        q = math.exp(-1 / s)
        assert a.variance_factor == pytest.approx(2 * q / (1 - q) ** 2 / (2 * s * s), 1e-12)
        mean = compare.interval_blue_errors(a.mechanism, 1024)["cdf"].mean()
        assert abs(mean * a.variance_factor - want) <= 0.05, (b, mean * a.variance_factor)


def test_opendp_truncated_tree_shape():
    strat = anchors.opendp_tree(10, 2)  # OpenDP's own example: 10 leaves, b = 2, 5 layers
    widths = sorted((strat.hi - strat.lo).tolist())
    assert strat.n_bins == 10
    assert widths.count(1) == 10 and max(widths) == 10
    # layers (root first): [10], [8, 2], [4, 4, 2], [2, 2, 2, 2, 2]; the padding nodes are gone
    assert sorted(widths) == sorted([10, 8, 2, 4, 4, 2, 2, 2, 2, 2, 2] + [1] * 10)


# --------------------------------------------------------------- dense oracle (built here)
def dense_blue_cov(mech):
    A = mech.released.matrix.toarray()
    v = np.asarray(mech.variances)
    exact = v == 0
    noisy = np.isfinite(v) & ~exact
    info = A[noisy].T @ (A[noisy] / v[noisy, None])
    if exact.any():  # constrained GLS: restrict to the complement of the exact rows' span
        E = A[exact]
        _, sv, vt = np.linalg.svd(E)
        Q = vt[np.sum(sv > 1e-9):].T
        return Q @ np.linalg.inv(Q.T @ info @ Q) @ Q.T
    return np.linalg.inv(info)


def dense_workloads(n):
    P = np.tril(np.ones((n, n)))
    R = np.array([[1.0 if a <= i <= b else 0.0 for i in range(n)]
                  for a in range(n) for b in range(a, n)])
    return {"cdf": P, "identity": np.eye(n), "all_range": R}


def dense_errors(mech, K):
    cov = dense_blue_cov(mech)
    out = {}
    for wl, W in dense_workloads(mech.n_bins).items():
        if wl == "all_range":
            lo_hi = [(a, b) for a in range(mech.n_bins) for b in range(a, mech.n_bins)]
            W = W[[i for i, (a, b) in enumerate(lo_hi) if b < K]]
        elif wl == "cdf" or wl == "identity":
            W = W[:K]
        per = np.einsum("qi,ij,qj->q", W, cov, W)
        out[wl] = (per.mean(), per.max())
    return out


STRATS = [
    (lambda: anchors.opendp_tree(50, 4), "add_remove", None),
    (lambda: anchors.opendp_tree(37, 3), "swap", None),
    (lambda: anchors.opendp_tree(30, 5), "add_remove", True),
    (lambda: S.prefix_sums(20), "add_remove", None),
    (lambda: S.prefix_sums(20), "swap", None),
    (lambda: S.histogram(15), "add_remove", None),
]


@pytest.mark.parametrize("make, neighbours, public", STRATS)
def test_interval_blue_errors_equal_dense(make, neighbours, public):
    strat = make()
    mech = dp.Mechanism(strat, epsilon=0.7, neighbours=neighbours, public_total=public)
    K = strat.n_bins
    got = compare.row_errors(compare.Candidate(mech, "blue", "x", K))
    want = dense_errors(mech, K)
    for wl in compare.WORKLOADS:
        assert got[wl].mean == pytest.approx(want[wl][0], rel=1e-9), wl
        assert got[wl].max == pytest.approx(want[wl][1], rel=1e-9), wl
    # the O(K) path itself, without the dense max
    fast = interval_blue_errors(mech, K)
    np.testing.assert_allclose(fast["cdf"], np.diag(
        dense_workloads(K)["cdf"] @ dense_blue_cov(mech) @ dense_workloads(K)["cdf"].T),
        rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("ks, K, neighbours, est", [
    ((4, 4, 4), 50, "add_remove", "blue"), ((2,) * 5, 32, "swap", "blue"),
    ((3, 3, 3), 20, "swap", "blue"), ((2,) * 4, 16, "add_remove", "refined")])
def test_tree_rows_equal_dense(ks, K, neighbours, est):
    """Padded level-uniform trees: errors over the first K prefixes / bins / ranges."""
    Kp = math.prod(ks)
    mech = dp.Mechanism(S.tree(Kp, list(ks)), epsilon=1.0, neighbours=neighbours)
    got = compare.row_errors(compare.Candidate(mech, est, "x", K))
    if est == "blue":
        want = dense_errors(mech, K)
        for wl in compare.WORKLOADS:
            assert got[wl].mean == pytest.approx(want[wl][0], rel=1e-9), wl
            assert got[wl].max == pytest.approx(want[wl][1], rel=1e-9), wl
    else:
        assert got["cdf"].mean > dense_errors(mech, K)["cdf"][0]  # BLUE is best


@pytest.mark.parametrize("est", ["blue", "covering", "refined"])
def test_padded_all_range_total_formula(monkeypatch, est):
    """Above MAX_ALL_RANGE_MAX_BINS the all-range mean of a padded tree is
    ((K + 1) tr Z - 1'Z1) / (K (K + 1) / 2) (the BLUE from the registry's covariance task,
    the covering and refined estimators from their closed forms): forced here at K = 50 on a
    64-bin tree, against the dense BLUE built here and the engines' dense per-range twins."""
    monkeypatch.setattr(protocol, "MAX_ALL_RANGE_MAX_BINS", 8)
    mech = dp.Mechanism(S.tree(64, [4, 4, 4]), epsilon=1.0, neighbours="add_remove")
    got = compare.row_errors(compare.Candidate(mech, est, "x", 50), ("all_range",))
    assert got["all_range"].max is None and "max n/a" in got["all_range"].note
    if est == "blue":
        want = dense_errors(mech, 50)["all_range"][0]
    else:
        lo, hi = dp.workloads.all_range(50).intervals()
        w = dp.workloads.ranges(64, np.stack([lo, hi - 1], axis=1))
        want = dp.expected_error(w, mech, est, per_query=True, method="dense").mean()
    assert got["all_range"].mean == pytest.approx(want, rel=1e-9)


def test_compare_result_structure_and_sorting():
    res = compare.compare(64, 1.0, neighbours="add_remove")
    means = [r.errors["cdf"].mean for r in res.rows if r.available]
    assert means == sorted(means)
    keys = {r.key for r in res.rows}
    assert {"binary_covering", "binary_ols", "google_default", "opendp_default",
            "best_blue_equal", "best_covering_equal"} <= keys
    cov = next(r for r in res.rows if r.key == "binary_covering")
    # covering rows answer bins and ranges by differences of their prefixes
    assert cov.errors["identity"].mean > 0 and cov.errors["all_range"].mean > 0
    d = compare.as_dict(res)
    json.dumps(d)
    assert d["rows"][0]["errors"]["cdf"]["mean"] == means[0]


def test_compare_bad_input():
    with pytest.raises(ValueError, match="n_bins"):
        compare.compare(1, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        compare.compare(16, -1.0)
    with pytest.raises(ValueError, match="workload"):
        compare.compare(16, 1.0, workloads=("cdf", "quantiles"))
    with pytest.raises(ValueError, match="row"):
        compare.compare(16, 1.0, rows=["nope"])


# --------------------------------------------------------------- OpenDP itself
def opendp_exact_error(K, b, eps=1.0):
    """Exact mean prefix error of OpenDP's own postprocessor, by linearity: probe it with unit
    noise on every node (padding nodes are zeroed by OpenDP itself), continuous variance."""
    odp = pytest.importorskip("opendp.prelude")
    odp.enable_features("contrib")
    space = (odp.vector_domain(odp.atom_domain(T=int)), odp.l1_distance(T=int))
    tree = odp.t.make_b_ary_tree(*space, leaf_count=K, branching_factor=b)
    m = len(tree([0] * K))
    post = odp.t.make_consistent_b_ary_tree(branching_factor=b, TIA=int, TOA=float)
    layers = anchors.opendp_layers(K, b)
    R = np.array([np.asarray(post([10**6 if i == r else 0 for i in range(m)])) / 1e6
                  for r in range(m)])
    return float(np.mean(np.sum(np.cumsum(R, axis=1) ** 2, axis=0))) * 2 * (layers / eps) ** 2


@pytest.mark.parametrize("K, b", [(100, 3), (200, 6), (1000, 10)])
def test_emulation_equals_opendp_postprocessor_exactly(K, b):
    want = opendp_exact_error(K, b)
    a = anchors.opendp_default(K, branching=b)
    got = compare.interval_blue_errors(a.mechanism, K)["cdf"].mean()
    assert got == pytest.approx(want, rel=1e-8)


def test_choose_branching_factor_equals_opendp():
    odp = pytest.importorskip("opendp.prelude")
    odp.enable_features("contrib")
    for n in (2, 3, 10, 100, 1000, 1024, 5000, 2**16):
        assert anchors.choose_branching_factor(n) == odp.t.choose_branching_factor(n)


def test_opendp_monte_carlo_agrees_with_emulation():
    pytest.importorskip("opendp")
    K = 256
    run = compare.run_opendp(K, 1.0, trials=400, rng=3, sampler="numpy")
    a = anchors.opendp_default(K)
    exact = compare.row_errors(compare.Candidate(a.mechanism, "blue", "x", K))
    for wl in compare.WORKLOADS:
        want = exact[wl].mean * a.variance_factor
        assert abs(run.means[wl] - want) <= 4 * run.std_errors[wl], (wl, run, want)
    assert run.std_errors["cdf"] < 0.1 * run.means["cdf"]


# --------------------------------------------------------------- CLI
def run_cli(*argv, capsys):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--help"])
    assert exc.value.code == 0
    assert "--bins" in capsys.readouterr().out


def test_cli_errors(capsys):
    code, _, err = run_cli("compare", "--bins", "1", "--epsilon", "1", capsys=capsys)
    assert code == 2 and "--bins" in err
    code, _, err = run_cli("compare", "--bins", "64", capsys=capsys)
    assert code == 2 and "--epsilon" in err
    code, _, err = run_cli("compare", "--bins", "64", "--epsilon", "1", "--workloads", "cdf,x",
                           capsys=capsys)
    assert code == 2 and "--workloads" in err
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--bins", "abc", "--epsilon", "1"])
    assert exc.value.code == 2


def test_cli_table_json_and_plot(capsys, tmp_path):
    png = tmp_path / "c.png"
    code, out, err = run_cli("compare", "--bins", "64", "--epsilon", "1", "--neighbours",
                             "add_remove", "--opendp-trials", "0", "--plot", str(png),
                             capsys=capsys)
    assert code == 0, err
    assert png.stat().st_size > 1000
    assert "binary tree, covering sums" in out and "OpenDP default (emulated)" in out
    code, out, err = run_cli("compare", "--bins", "64", "--epsilon", "1", "--neighbours",
                             "add_remove", "--opendp-trials", "0", "--json", "--workloads",
                             "cdf", capsys=capsys)
    d = json.loads(out)
    rows = {r["key"]: r for r in d["rows"]}
    # binary tree over 64 bins, 7 levels, Lap(7): covering of t uses popcount(t mod 64) nodes
    v = 2 * 49.0
    nodes = [bin(t % 64).count("1") or 1 for t in range(1, 65)]
    assert rows["binary_covering"]["errors"]["cdf"]["mean"] == pytest.approx(
        v * np.mean(nodes), rel=1e-12)
    assert d["workloads"] == ["cdf"]


@pytest.mark.parametrize("n, b", [(10, 2), (37, 3), (50, 4), (1000, 26), (4097, 16)])
def test_opendp_tree_equals_the_networkx_hierarchy(n, b):
    """The vectorised truncated tree = strategies.hierarchy of the graph built node by node
    from OpenDP's definition (layer d: ceil(n / b^(layers-1-d)) nodes, children b i..b i+b-1)."""
    import networkx as nx

    layers = anchors.opendp_layers(n, b)
    counts = [-(-n // b ** (layers - 1 - d)) for d in range(layers)]
    g = nx.DiGraph()
    g.add_node((0, 0))
    for d in range(layers - 1):
        for i in range(counts[d]):
            g.add_edges_from(((d, i), (d + 1, c))
                             for c in range(b * i, min(b * i + b, counts[d + 1])))
    want = S.hierarchy(g)
    got = anchors.opendp_tree(n, b)
    for attr in ("lo", "hi", "parent", "levels", "depth", "bin_row"):
        np.testing.assert_array_equal(getattr(got, attr), getattr(want, attr), err_msg=attr)
    assert got.n_bins == want.n_bins == n


def test_cli_plot_path_is_reported_as_written(capsys, tmp_path):
    """--plot DIR (an existing directory) writes DIR/compare_K<bins>.png, --plot NAME (no
    suffix) writes NAME.png, and the path printed is the file that exists (issue 12 item 6);
    a missing parent fails before the comparison runs."""
    from dptree_opt.cli.compare_cmd import plot_path

    assert plot_path(str(tmp_path), 64) == tmp_path / "compare_K64.png"
    assert plot_path(str(tmp_path / "fig"), 64) == tmp_path / "fig.png"
    for target, written in [(tmp_path, tmp_path / "compare_K64.png"),
                            (tmp_path / "fig", tmp_path / "fig.png")]:
        code, out, err = run_cli("compare", "--bins", "64", "--epsilon", "1", "--workloads",
                                 "cdf", "--opendp-trials", "0", "--plot", str(target),
                                 capsys=capsys)
        assert code == 0, err
        assert written.stat().st_size > 1000
        assert f"plot written to {written}" in out
    code, out, err = run_cli("compare", "--bins", "64", "--epsilon", "1", "--plot",
                             str(tmp_path / "missing" / "x.png"), capsys=capsys)
    assert code == 2 and "does not exist" in err


def test_all_range_column_uses_the_tree_searched_for_all_ranges():
    """The "best tree, BLUE" rows answer each column with the front door's tree for that
    workload: the all-range column with the tree level_uniform finds for all ranges, the
    identity column with the best unpadded tree for the bins, not the CDF's tree."""
    K = 200
    res = compare.compare(K, 1.0, neighbours="add_remove", rows=["best_blue_equal"])
    row = res.rows[0]
    common = dict(estimator="blue", neighbours="add_remove", budgets="equal", top=0)
    best = dp.optimize.level_uniform(K, 1.0, workload="all_range", **common)
    assert row.errors["all_range"].mean == pytest.approx(best.error / (K * (K + 1) / 2),
                                                         rel=1e-9)
    ident = dp.optimize.level_uniform(K, 1.0, workload=dp.workloads.identity(K),
                                      allow_padding=False, **common)
    assert row.errors["identity"].mean == pytest.approx(ident.error / K, rel=1e-9)
    cdf = dp.optimize.level_uniform(K, 1.0, workload="prefix", **common)
    assert row.errors["cdf"].mean == pytest.approx(cdf.error / K, rel=1e-9)
    assert row.strategy == "per workload"
    assert "all_range: " in row.note and ",".join(map(str, best.branching)) in row.note
    cdf_only = compare.compare(K, 1.0, neighbours="add_remove", rows=["best_blue_equal"],
                               workloads=("cdf",))
    assert "all_range" not in cdf_only.rows[0].note


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_best_rows_come_from_the_front_door_per_column(noise):
    """One "best" row per column: the front door's winner for that workload, its family in
    the label, evaluated exactly on every column (= the dense BLUE built here), and never
    worse on its own column than any row of a front-door family (it is their best)."""
    K = 24
    budget = {"epsilon": 0.5} if noise == "laplace" else {"rho": 0.5}
    res = compare.compare(K, **budget, neighbours="add_remove")
    rows = {r.key: r for r in res.rows}
    families = ("best_blue_equal", "best_blue_optimal", "best_node_budgets", "optimized",
                "blt", "direct", "haar", "sqrt_factorization", "histogram")
    for wl, kind in (("cdf", "prefix"), ("identity", "identity"), ("all_range", "all_range")):
        row = rows[f"best_{wl}"]
        d = dp.optimize.best_mechanism(getattr(dp.workloads, kind)(K), **budget)
        assert row.label.endswith(": " + d.family)
        assert row.errors[wl].mean == pytest.approx(d.mean, rel=1e-9)
        want = dense_errors(d.mechanism(), K)
        for col in compare.WORKLOADS:
            assert row.errors[col].mean == pytest.approx(want[col][0], rel=1e-7), (wl, col)
            assert row.errors[col].max == pytest.approx(want[col][1], rel=1e-7), (wl, col)
        for key in families:
            other = rows[key].errors[wl].mean
            if rows[key].available and other is not None:
                assert row.errors[wl].mean <= other * (1 + 1e-9), (wl, key)
        assert row.errors[wl].mean >= res.bounds[wl] * (1 - 1e-9)


@pytest.mark.parametrize("K, neighbours, noise, public", [
    (64, "add_remove", "laplace", None), (1024, "add_remove", "laplace", None),
    (64, "add_remove", "gaussian", None), (50, "swap", "laplace", None),
    (40, "add_remove", "laplace", True)])
def test_prefix_sums_row_has_one_noise_scale(K, neighbours, noise, public):
    """The prefix sums with one noise scale, that of the whole prefix matrix. Add/remove,
    N private: adding a record to bin 0 changes all K prefixes by 1, so the l1 sensitivity is
    K and every prefix has variance 2 (K / eps)^2 (Laplace), the l2 sensitivity sqrt(K) and
    variance K / (2 rho) (Gaussian). With N public (swap, or declared) C_K is exact and a
    record changes at most K - 1 of the other prefixes by 1 (moving it across them, swap;
    adding it to bin 0, add/remove): mean (K - 1) / K x 2 ((K - 1) / eps)^2. (It was split
    in two levels, the total and the rest, with half the budget each: ~4x these.)"""
    eps, rho = 0.7, 0.3
    budget = {"epsilon": eps} if noise == "laplace" else {"rho": rho}
    row = compare.compare(K, **budget, noise=noise, neighbours=neighbours, public_total=public,
                          rows=["prefix_sums"], workloads=("cdf",)).rows[0]
    if public or neighbours == "swap":
        want_mean, want_max = (K - 1) / K * 2 * ((K - 1) / eps) ** 2, 2 * ((K - 1) / eps) ** 2
    elif noise == "laplace":
        want_mean = want_max = 2 * (K / eps) ** 2
    else:
        want_mean = want_max = K / (2 * rho)
    assert row.errors["cdf"].mean == pytest.approx(want_mean, rel=1e-12)
    assert row.errors["cdf"].max == pytest.approx(want_max, rel=1e-12)


def test_optimized_row_above_1024_bins_is_the_implicit_gaussian_optimum():
    """Gaussian above 1024 bins: the "optimized" row is the implicit optimum (certified gap
    in the note); its CDF error lies between the SVD bound and the square-root factorisation
    (the optimum beats it: MATH.md section 7, 11.4906 vs 12.233 optimal-Toeplitz at 2^12),
    and its three columns equal expected_error on its mechanism."""
    K = 4096
    res = compare.compare(K, rho=0.5, noise="gaussian", neighbours="add_remove",
                          rows=["optimized", "sqrt_factorization"])
    rows = {r.key: r for r in res.rows}
    opt, sqrt = rows["optimized"], rows["sqrt_factorization"]
    assert opt.available and "certified gap" in opt.note
    cdf = opt.errors["cdf"].mean
    assert res.bounds["cdf"] <= cdf <= sqrt.errors["cdf"].mean
    assert cdf == pytest.approx(11.4906, abs=0.02)  # gap <= 1e-3 (tol) around MATH.md's value
    for wl in ("identity", "all_range"):
        assert opt.errors[wl].mean is not None and opt.errors[wl].mean > 0


@pytest.mark.parametrize("neighbours,noise", [("add_remove", "laplace"), ("swap", "gaussian")])
def test_node_budget_row_is_exact_and_private(neighbours, noise):
    """The "best_node_budgets" row: budgets per node on the finest tree of K; its CDF column
    equals the dense GLS of a Mechanism rebuilt from the optimiser's budgets (whose loss is
    recomputed from the scaled matrix), the other columns are n/a (the front door optimises
    budgets per node for the CDF only); a public N under add/remove is n/a."""
    K = 48
    budget = {"epsilon": 1.0} if noise == "laplace" else {"rho": 1.0}
    res = compare.compare(K, noise=noise, neighbours=neighbours, rows=["best_node_budgets"],
                          **budget)
    row = res.rows[0]
    assert row.available
    ks = dp.optimize.finest_refinement((K,))
    opt = dp.optimize.optimal_node_budgets(ks, noise=noise, neighbours=neighbours, **budget)
    mech = dp.Mechanism(S.tree(K, ks), noise=noise, neighbours=neighbours,
                        row_budgets=opt.budgets, **budget)
    assert (mech.epsilon or mech.rho) <= 1.0 + 1e-9
    per = dp.expected_error(dp.workloads.prefix(K), mech, per_query=True, method="dense")
    assert row.errors["cdf"].mean == pytest.approx(per.mean(), rel=1e-6)
    for wl in ("identity", "all_range"):  # budgets per node are optimised for the CDF only
        assert row.errors[wl].mean is None and "CDF" in row.errors[wl].note
    assert row.errors["cdf"].mean <= opt.start_mean * (1 + 1e-12)
    pub = compare.compare(K, 1.0, neighbours="add_remove", public_total=True,
                          rows=["best_node_budgets"]).rows[0]
    assert not pub.available
