"""Issue 15 item 5: the d-D release (``release(data_2d, lower=(..), upper=(..), bins=(..))``,
``dptree-opt release FILE --columns x,y``): exact box variances against the dense GLS, the
estimates' errors against their exact SEs under the SECURE noise (Monte Carlo), consistency,
``range_count`` against independent numpy sums, and every release input rule, refused before
any noise is drawn."""

import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dptree_opt import strategies
from dptree_opt.cli import main
from dptree_opt.data_release import GridRelease, grid, release, release_file
from dptree_opt.data_release import secure_noise as sn
from dptree_opt.engines.kronecker import axis_interval_weights, kron_box_variances
from dptree_opt.engines.tree_error import haar_workload_weights
from dptree_opt.mechanism import Mechanism


# ------------------------------------------------------------------ oracles
def _overlap(a, b, n):
    """Per-bin overlap of [a, b) with the bins [t, t + 1): the fractional indicator."""
    t = np.arange(n)
    return np.clip(np.minimum(b, t + 1) - np.maximum(a, t), 0, None)


def _dense_covariance(mech):
    """The GLS covariance of the cells from the explicit matrix (exact total by KKT)."""
    A = mech.released.matrix.toarray()
    v = mech.variances
    noisy = np.isfinite(v) & (v > 0)
    info = A[noisy].T @ (A[noisy] / v[noisy, None])
    n = A.shape[1]
    exact = A[v == 0]
    if exact.size:
        kkt = np.block([[info, exact.T], [exact, np.zeros((exact.shape[0],) * 2)]])
        return np.linalg.inv(kkt)[:n, :n]
    return np.linalg.inv(info)


def _kron_mech(branchings, noise, neighbours, seed):
    strat = strategies.kron(*[strategies.tree(math.prod(ks), list(ks)) for ks in branchings])
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    n_levels = len(Mechanism(strat, noise=noise, neighbours=neighbours, **kw).level_budgets)
    b = np.random.default_rng(seed).random(n_levels) + 0.05
    b *= next(iter(kw.values())) / b.sum()
    return Mechanism(strat, noise=noise, neighbours=neighbours, level_budgets=b, **kw)


BRANCHINGS = st.lists(st.integers(2, 3), min_size=1, max_size=2).map(tuple)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b1=BRANCHINGS, b2=BRANCHINGS, noise=st.sampled_from(["laplace", "gaussian"]),
       neighbours=st.sampled_from(["add_remove", "swap"]), seed=st.integers(0, 10**6))
def test_box_variances_equal_the_dense_gls(b1, b2, noise, neighbours, seed):
    mech = _kron_mech((b1, b2), noise, neighbours, seed)
    n1, n2 = math.prod(b1), math.prod(b2)
    cov = _dense_covariance(mech)
    rng = np.random.default_rng(seed)
    lo = rng.uniform(0, 1, (6, 2)) * [n1, n2]
    hi = lo + rng.uniform(0, 1, (6, 2)) * ([n1, n2] - lo)
    lo[0], hi[0] = 0, [n1, n2]                       # the grand total
    lo[1], hi[1] = [0, 1], [1, 2]                    # one cell
    got = kron_box_variances(mech, lo, hi)
    for (a, b), v in zip(zip(lo, hi), got):
        u = np.kron(_overlap(a[0], b[0], n1), _overlap(a[1], b[1], n2))
        assert v == pytest.approx(u @ cov @ u, rel=1e-9, abs=1e-9)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(levels=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1,
                       max_size=2), noise=st.sampled_from(["laplace", "gaussian"]),
       neighbours=st.sampled_from(["add_remove", "swap"]), seed=st.integers(0, 10**6))
def test_quadtree_box_variances_equal_the_dense_gls(levels, noise, neighbours, seed):
    """Quadtrees (any per-axis branchings per level) share the product Haar eigenbasis."""
    if math.prod(a * b for a, b in levels) > 200 or any(a * b < 2 for a, b in levels):
        return
    shape = (math.prod(a for a, _ in levels), math.prod(b for _, b in levels))
    strat = strategies.quadtree(shape, [[a for a, _ in levels], [b for _, b in levels]])
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    n_levels = len(Mechanism(strat, noise=noise, neighbours=neighbours, **kw).level_budgets)
    b = np.random.default_rng(seed).random(n_levels) + 0.05
    b *= next(iter(kw.values())) / b.sum()
    mech = Mechanism(strat, noise=noise, neighbours=neighbours, level_budgets=b, **kw)
    cov = _dense_covariance(mech)
    rng = np.random.default_rng(seed)
    lo = rng.uniform(0, 1, (5, 2)) * shape
    hi = lo + rng.uniform(0, 1, (5, 2)) * (np.asarray(shape) - lo)
    for a, bb, v in zip(lo, hi, kron_box_variances(mech, lo, hi)):
        u = np.kron(_overlap(a[0], bb[0], shape[0]), _overlap(a[1], bb[1], shape[1]))
        assert v == pytest.approx(u @ cov @ u, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("ks", [(2, 2, 2), (3, 2), (4, 3, 2)])
@pytest.mark.parametrize("kind", ["prefix", "all_range"])
def test_interval_weights_sum_to_the_workload_weights(ks, kind):
    """Summed over the real prefixes / ranges of a padded axis, the per-interval Haar
    energies are the closed-form workload weights of error.tree."""
    tree = strategies.tree(math.prod(ks), list(ks))
    for n in range(1, tree.n_bins + 1):
        if kind == "prefix":
            lo, hi = np.zeros(n), np.arange(1, n + 1)
        else:
            pairs = np.array([(a, b) for a in range(n) for b in range(a + 1, n + 1)])
            lo, hi = pairs[:, 0], pairs[:, 1]
        got = axis_interval_weights(tree, lo, hi).sum(axis=0)
        np.testing.assert_allclose(got, haar_workload_weights(ks, kind, n_queries=n),
                                   rtol=1e-10, atol=1e-9)


def test_kronecker_exact_answers_equal_the_sparse_product():
    mech = _kron_mech(((2, 3), (2, 2)), "laplace", "add_remove", 1).discretised()
    h = np.random.default_rng(0).integers(0, 10**6, mech.n_bins)
    expected = mech.released.matrix.astype(np.int64) @ h
    np.testing.assert_array_equal(sn.exact_answers(mech, h), expected)


# ------------------------------------------------------------------ the release
@pytest.fixture
def noise_calls(monkeypatch):
    """Count the secure sampler's calls made by the grid release (the budget is spent at
    the first)."""
    calls = []
    real = grid.secure_measure

    def spy(mech, hist):
        calls.append(mech)
        return real(mech, hist)

    monkeypatch.setattr(grid, "secure_measure", spy)
    return calls


def _records(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(0, 10, n), rng.uniform(-1, 1, n)])


GRID = dict(lower=(0, -1), upper=(10, 1), bins=(6, 4), epsilon=1.0)


def _true_cells(x, bins=(6, 4)):
    h, _, _ = np.histogram2d(x[:, 0], x[:, 1], bins=bins, range=[[0, 10], [-1, 1]])
    return h.astype(np.int64)


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_release_is_complete_consistent_and_honest(budget, neighbours, noise_calls):
    x = _records()
    kw = {k: v for k, v in GRID.items() if k != "epsilon"}
    r = release(x, neighbours=neighbours, **kw, **budget)
    assert isinstance(r, GridRelease) and r.complete and len(noise_calls) == 1
    truth = _true_cells(x)
    assert r.raw.shape == r.consistent.shape == (6, 4)
    assert r.consistent.dtype == np.int64 and r.consistent.min() >= 0
    assert r.consistent.sum() == r.total
    if neighbours == "swap":
        assert r.total_public and r.total == 400
    else:
        assert not r.total_public
    # the guarantee recomputed from the scaled strategy is within the request
    achieved = r.mechanism.epsilon if "epsilon" in budget else r.mechanism.rho
    assert achieved <= next(iter(budget.values())) * (1 + 1e-9)
    # box counts on bin edges are sums of whole cells (independent numpy sums)
    box = r.range_count((10 / 6 * 1, -0.5), (10 / 6 * 4, 1.0))
    assert box.estimate == pytest.approx(r.raw[1:4, 1:4].sum(), abs=1e-6)
    assert box.consistent == pytest.approx(r.consistent[1:4, 1:4].sum())
    assert np.isfinite(box.standard_error) and box.standard_error > 0
    # a JSON round trip keeps the numbers
    d = json.loads(r.to_json())
    assert d["total"] == r.total and np.allclose(d["cells"]["raw"], r.raw)
    assert d["axes"][1]["K"] == 4 and d["privacy"]["neighbours"] == neighbours
    assert np.all(truth >= 0)


def test_errors_match_the_exact_standard_errors_under_secure_noise():
    """Monte Carlo over 300 releases with OpenDP's noise: the z-scores (estimate - truth) / SE
    of fixed boxes have mean 0 and variance 1 within 4.5 of their own standard errors."""
    x = _records(300, seed=3)
    truth = _true_cells(x)
    boxes_lo = np.array([[0, -1], [10 / 6, -0.5], [2.5, -1], [0, 0]])
    boxes_hi = np.array([[10, 1], [10 / 6 * 3, 0.5], [7.5, 0.25], [10 / 6, 0.5]])
    # truth of the boxes from the cells (the boxes are unions of whole and half cells: the
    # third box cuts cells, so compare it with the uniform spread of the true cells)
    z = []
    for _ in range(300):
        r = release(counts=truth, **GRID, tree=[[3, 2], [2, 2]])
        est = r.range_count(boxes_lo, boxes_hi)
        true_box = grid_box(truth, r, boxes_lo, boxes_hi)
        z.append((est.estimate - true_box) / est.standard_error)
    z = np.array(z)
    m, v = z.mean(axis=0), z.var(axis=0, ddof=1)
    n = z.shape[0]
    k = np.mean((z - m) ** 4, axis=0) / v**2          # kurtosis: the SE of the variance
    assert np.all(np.abs(m) < 4.5 / math.sqrt(n)), m
    assert np.all(np.abs(v - 1) < 4.5 * np.sqrt((k - 1) / n)), (v, k)


def grid_box(cells, r, lo, hi):
    """Independent box sums of true cells with uniform spreading inside cells (per-axis
    overlap weights, then an outer product)."""
    out = []
    for a, b in zip(lo, hi):
        w = [_overlap((a[i] - s.lower) / s.width, (b[i] - s.lower) / s.width, s.bins)
             for i, s in enumerate(r.specs)]
        out.append(float(w[0] @ cells @ w[1]))
    return np.array(out)


def test_range_count_interpolates_and_checks_its_corners():
    r = release(counts=np.arange(24).reshape(6, 4), **GRID, tree=[[3, 2], [2, 2]])
    w = 10 / 6
    half = r.range_count((0, -1), (w / 2, -0.5))    # half of cell (0, 0)
    assert half.estimate == pytest.approx(r.raw[0, 0] / 2)
    many = r.range_count([[0, -1], [0, -1]], [[10, 1], [w, -0.5]])
    assert many.estimate.shape == (2,)
    assert many.estimate[1] == pytest.approx(r.raw[0, 0])
    # clamped outside the range; the total SE equals the variance of the grand total
    out = r.range_count((-100, -100), (100, 100))
    assert out.estimate == pytest.approx(r.raw.sum())
    assert r.cell_standard_error == pytest.approx(many.standard_error[1])
    with pytest.raises(ValueError, match="lo_corner <= hi_corner"):
        r.range_count((5, 0), (4, 1))
    with pytest.raises(ValueError, match="shape"):
        r.range_count((0, 0, 0), (1, 1, 1))
    with pytest.raises(ValueError, match="finite"):
        r.range_count((np.nan, 0), (1, 1))
    for bad in (("a", 0), [[0, 0], [1]]):
        with pytest.raises(ValueError, match="must be numbers"):
            r.range_count(bad, bad)


def test_cell_variances_are_uniform_and_expected_errors_are_dense():
    """All cells share one SE; the expected errors equal dense sums over the real cells of
    a padded grid."""
    r = release(counts=np.ones((5, 3), dtype=int), lower=(0, 0), upper=(5, 3), bins=(5, 3),
                epsilon=1.0, tree=[[2, 3], [2, 2]])
    assert r.padded_shape == (6, 4)
    cov = _dense_covariance(r.mechanism)
    idx = np.arange(24).reshape(6, 4)[:5, :3].ravel()
    cell_var = np.diag(cov)[idx]
    np.testing.assert_allclose(cell_var, r.cell_standard_error**2, rtol=1e-9)
    e = r.expected_error
    assert e["cell_mse"] == pytest.approx(cell_var[0], rel=1e-9)

    def var(a, b):
        u = np.kron(_overlap(a[0], b[0], 6), _overlap(a[1], b[1], 4))
        return u @ cov @ u

    cdf = [var((0, 0), (a1, a2)) for a1 in range(1, 6) for a2 in range(1, 4)]
    boxes = [var((a1, a2), (b1, b2)) for a1 in range(5) for b1 in range(a1 + 1, 6)
             for a2 in range(3) for b2 in range(a2 + 1, 4)]
    assert e["mean_cdf_mse"] == pytest.approx(np.mean(cdf), rel=1e-9)
    assert e["max_cdf_mse"] == pytest.approx(np.max(cdf), rel=1e-9)
    assert e["mean_box_mse"] == pytest.approx(np.mean(boxes), rel=1e-9)
    assert e["total_mse"] == pytest.approx(var((0, 0), (5, 3)), rel=1e-9)


def test_design_is_no_worse_than_its_candidates():
    """The chosen hierarchy's exact all-box error over the real cells is at most that of the
    binary trees of the next power of two with the same (optimal) budget rule."""
    r = release(counts=np.ones((12, 12), dtype=int), lower=(0, 0), upper=(1, 1),
                bins=(12, 12), rho=0.5)
    binary = release(counts=np.ones((12, 12), dtype=int), lower=(0, 0), upper=(1, 1),
                     bins=(12, 12), rho=0.5, tree=[[2, 2, 2, 2], [2, 2, 2, 2]])
    assert r.expected_error["mean_box_mse"] <= binary.expected_error["mean_box_mse"] * (1 + 1e-9)


def test_release_never_uses_numpy_noise(monkeypatch):
    x = _records()
    calls = []
    real = sn._opendp_sample

    def spy(values, **kw):
        calls.append(values.size)
        return real(values, **kw)

    def boom(*a, **k):
        raise AssertionError("simulation noise in a release")

    monkeypatch.setattr(sn, "_opendp_sample", spy)
    monkeypatch.setattr(Mechanism, "measure", boom)
    monkeypatch.setattr(Mechanism, "sample_noise", boom)
    for name in ("laplace", "normal", "random", "geometric"):
        monkeypatch.setattr(np.random, name, boom)
    r = release(x, **GRID)
    assert r.complete and sum(calls) == int(np.isfinite(r.measurements).sum()) - int(
        r.mechanism.exact_rows.sum())
    ok = np.isfinite(r.measurements)
    assert np.all(r.measurements[ok] == np.round(r.measurements[ok]))


# ------------------------------------------------------------------ refused before the noise
@pytest.mark.parametrize("data, kw, match", [
    ([[1, 0], [2]], {}, "shape|ragged"),
    ([[1, 0, 3]], {}, r"shape \(records, 2\)"),
    (np.array([1.0, 2.0]), {}, r"shape \(records, 2\)"),
    (np.zeros((0, 2)), {}, "empty"),
    ([[1, 0], [np.nan, 0]], {}, "data column 0: 1 NaN.*data row 2"),
    ([[1, 0], [2, np.inf]], {}, "data column 1: 1 infinite.*data row 2"),
    ([[1, 0], [10, 0]], {}, "data column 0: 1 value.*outside.*at or above upper"),
    ([[1, 0], [2, -2]], {}, "data column 1: 1 value.*below lower"),
    ([[True, 0]], {}, "boolean True at data row 1"),
    ([["1", 0]], {}, "text"),
    ([[1, 0]], {"bins": (6,)}, "needs >= 2 axes"),
    ([[1, 0]], {"bins": (6, 1)}, "integer >= 2"),
    ([[1, 0]], {"bins": (6, 2.5)}, "integer >= 2"),
    ([[1, 0]], {"bins": (4096, 8192)}, "above the limit"),
    ([[1, 0]], {"lower": (0,)}, "one entry per axis"),
    ([[1, 0]], {"lower": 0}, "sequence of 2 numbers"),
    ([[1, 0]], {"lower": (0, 1)}, "axis 1: lower must be < upper"),
    ([[1, 0]], {"upper": (10, float("inf"))}, "axis 1"),
    ([[1, 0]], {"quantiles": (0.5,)}, "quantiles"),
    ([[1, 0]], {"quantiles": 0.5}, "quantiles"),
    ([[1, 0]], {"interval_level": 0.9}, "interval_level"),
    ([[1, 0]], {"consistency": "l1"}, "consistency"),
    ([[1, 0]], {"workload": "identity"}, "workload"),
    ([[1, 0]], {"tree": [[2, 3]]}, "2 lists"),
    ([[1, 0]], {"tree": [[2, 3], [3]]}, "fewer than bins"),
    ([[1, 0]], {"tree": [[2, 3], [64]]}, "close to bins"),
    ([[1, 0]], {"tree": [[2, 3], ["2", 2]]}, "integers >= 2"),
    ([[1, 0]], {"tree": [[1, 6], [4]]}, r"axis 0: branching \[1, 6\] has a factor 1"),
    ([[1, 0]], {"tree": [[6], [2, 1, 2]]}, r"axis 1: branching \[2, 1, 2\] has a factor 1"),
    ([[1, 0]], {"tree": [[1, 6], [4]], "neighbours": "swap"}, "factor 1"),
    ([[1, 0]], {"bins": (2, 1 << 23)}, "at least 25165827 rows"),
    ([[1, 0]], {"bins": (4097, 2), "lower": (0, 0), "upper": (1, 1)},
     "axis 0 has 4097 bins; tree='optimal' searches the trees of axes of up to 4096"),
    ([[1, 0]], {"tree": "best"}, "optimal"),
    ([[1, 0]], {"epsilon": 1e-300}, "too small"),
    ([[1, 0]], {"epsilon": 1e300}, "too large"),
    ([[1, 0]], {"epsilon": None}, "exactly one"),
    ([[1, 0]], {"neighbours": "bounded"}, "neighbours"),
    ([[1, 0]], {"names": ("a",)}, "names"),
])
def test_bad_grid_input_is_refused_before_any_noise(data, kw, match, noise_calls):
    args = dict(GRID)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        release(data, **args)
    assert noise_calls == []


@pytest.mark.parametrize("counts, match", [
    (np.ones((6, 3), dtype=int), "shape"),
    (-np.ones((6, 4), dtype=int), "non-negative"),
    (np.full((6, 4), 0.5), "integer"),
    (np.full((6, 4), 2**52), "2\\^53"),
])
def test_bad_counts_are_refused_before_any_noise(counts, match, noise_calls):
    with pytest.raises(ValueError, match=match):
        release(counts=counts, **GRID)
    assert noise_calls == []


def test_clip_edges_and_one_record():
    # values on the upper edge are out of range; with clip they land in the last cell
    r = release([[10, 1]], **GRID, out_of_range="clip", neighbours="swap")
    assert r.complete and r.total == 1
    r = release([[0, -1]], **GRID)           # one record on the lower corner
    assert r.complete
    with pytest.raises(ValueError, match="at or above upper"):
        release([[10, 0]], **GRID)


# ------------------------------------------------------------------ files and the CLI
def _write_csv(path, rows, header="\ufeffid,x,y\n"):
    path.write_text(header + "".join(f"{i},{a},{b}\n" for i, (a, b) in enumerate(rows)),
                    encoding="utf-8")


def test_file_release_reads_two_columns_with_a_bom(tmp_path):
    x = _records(200, seed=5)
    f = tmp_path / "d.csv"
    _write_csv(f, x)
    r = release_file(f, columns=["x", "y"], **GRID, neighbours="swap")
    assert r.names == ("x", "y") and r.total == 200
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"y": x[:, 1], "x": x[:, 0]}), p)
    r2 = release_file(p, columns=["x", "y"], **GRID, neighbours="swap")
    assert r2.total == 200


@pytest.mark.parametrize("rows, columns, match", [
    ([(1, 0), ("a", 0)], ["x", "y"], "column 'x' has the non-numeric value 'a' at data row 2"),
    ([(1, 0), (2, "")], ["x", "y"], "column 'y' has an empty"),
    ([(1, 0)], ["x", "z"], "column 'z' not found"),
    ([(1, 0)], ["x", "x"], "distinct"),
    ([(1, 0)], ["x"], "2 axes need 2 columns"),
    ([(1, 0)], "x,y", "list of column names"),
    ([(1, 0), (2, 5)], ["x", "y"], "column 'y': 1 value.*outside"),
    ([], ["x", "y"], "no data rows"),
])
def test_bad_files_are_refused_before_any_noise(tmp_path, rows, columns, match, noise_calls):
    f = tmp_path / "d.csv"
    _write_csv(f, rows)
    with pytest.raises(ValueError, match=match):
        release_file(f, columns=columns, **GRID)
    assert noise_calls == []


def test_columns_with_one_bin_count_is_refused(tmp_path, noise_calls):
    f = tmp_path / "d.csv"
    _write_csv(f, [(1, 0)])
    with pytest.raises(ValueError, match="one number of bins per axis"):
        release_file(f, columns=["x", "y"], lower=(0, -1), upper=(10, 1), bins=6, epsilon=1.0)
    assert noise_calls == []


def test_ragged_csv_row_is_named(tmp_path, noise_calls):
    f = tmp_path / "d.csv"
    f.write_text("id,x,y\n0,1,0\n1,2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="data row 2 has 2 field"):
        release_file(f, columns=["x", "y"], **GRID)
    assert noise_calls == []


def test_cli_grid_release_writes_json_and_heat_map(tmp_path, capsys):
    x = _records(300, seed=9)
    f = tmp_path / "d.csv"
    _write_csv(f, x)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["release", str(f), "--columns", "x,y", "--lower", "0,-1", "--upper", "10,1",
                 "--bins", "6x4", "--epsilon", "1", "--out", str(out), "--plot", str(png)])
    assert code == 0
    text = capsys.readouterr().out
    assert "2-D release" in text and "one cell" in text
    d = json.loads(out.read_text())
    assert d["format"] == "dptree_opt.grid_release/1"
    assert [a["name"] for a in d["axes"]] == ["x", "y"]
    assert np.asarray(d["cells"]["consistent"]).sum() == d["total"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("extra, match", [
    (["--bins", "6,4,2"], "one entry per axis"),
    (["--quantiles", "0.5"], "quantiles"),
    (["--consistency", "l1"], "l1"),
    (["--plot", "r.txt"], ".png"),
    (["--column", "x"], "not with --column"),
])
def test_cli_grid_refusals(tmp_path, capsys, extra, match, noise_calls):
    f = tmp_path / "d.csv"
    _write_csv(f, _records(20))
    args = ["release", str(f), "--columns", "x,y", "--lower", "0,-1", "--upper", "10,1",
            "--bins", "6,4", "--epsilon", "1"]
    # later flags win in argparse, so --bins / --plot given again replace the defaults
    code = main(args + [a if not a.endswith(".txt") else str(tmp_path / a) for a in extra])
    assert code == 2
    assert re.search(match, capsys.readouterr().err)
    assert noise_calls == []


def test_a_3d_grid_release_works():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (100, 3))
    r = release(x, lower=(0, 0, 0), upper=(1, 1, 1), bins=(4, 4, 2), rho=1.0,
                neighbours="swap", tree=[[2, 2], [4], [2]])
    assert r.complete and r.consistent.shape == (4, 4, 2) and r.consistent.sum() == 100
    box = r.range_count((0, 0, 0), (1, 1, 1))
    assert box.consistent == 100 and box.standard_error == pytest.approx(0, abs=1e-6)



def test_a_failure_after_the_noise_keeps_the_measurements(monkeypatch, tmp_path, capsys):
    def broken(*a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(grid, "project_histogram", broken)
    r = release(_records(), **GRID)
    assert not r.complete and np.all(np.isnan(r.raw)) and r.measurements.size > 0
    assert "simulated bug" in r.notes[0]
    d = json.loads(r.to_json())
    assert len(d["measurements"]) == r.measurements.size and d["complete"] is False


def test_cli_refuses_out_equal_to_the_input(tmp_path, capsys, noise_calls):
    f = tmp_path / "d.csv"
    _write_csv(f, _records(20))
    code = main(["release", str(f), "--columns", "x,y", "--lower", "0,-1", "--upper", "10,1",
                 "--bins", "6,4", "--epsilon", "1", "--out", str(f), "--force"])
    assert code == 2 and "is the input file" in capsys.readouterr().err
    assert noise_calls == []
