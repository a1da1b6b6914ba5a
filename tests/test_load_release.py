"""``load_release``: a release written by ``to_json`` and loaded back answers every query as
the in-process object did (1-D, grids, designs), without data or noise; hostile or damaged
files are refused with a clear ValueError."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from dptree_opt import Mechanism, optimize, strategies, workloads
from dptree_opt.data_release import core, load_release, release, release_grid
from dptree_opt.data_release.result import with_checksum
from oracles import constrained_gls

RNG = np.random.default_rng(11)
DATA = np.clip(RNG.normal(size=3000), -3.9, 3.9)


def _roundtrip(rel, tmp_path, **kw):
    path = tmp_path / "release.json"
    rel.to_json(path, force=True, **kw)
    return load_release(path)


def _same_1d(a, b) -> None:
    """Every query of two 1-D releases agrees (to the last bit where the path is the same)."""
    assert a.to_dict() == b.to_dict()
    for name in ("raw_cdf", "consistent_cdf", "standard_errors", "quantiles", "quantile_lower",
                 "quantile_upper", "quantile_noise_lower", "quantile_noise_upper",
                 "bin_edges"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.total == b.total and a.total_public == b.total_public
    lo, hi = a.spec.lower, a.spec.upper
    xs = np.sort(RNG.uniform(lo - 1, hi + 1, size=(2, 25)), axis=0)
    for got, want in zip(b.range_answer(xs[0], xs[1]), a.range_answer(xs[0], xs[1])):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    for got, want in zip(b.cumulative_answer(xs[0]), a.cumulative_answer(xs[0])):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(b.range_count(xs[0], xs[1]), a.range_count(xs[0], xs[1]))
    k = a.spec.bins
    i = np.sort(RNG.integers(0, k, size=(2, 10)), axis=0)
    np.testing.assert_allclose(b.cdf.range_standard_errors(i[0], i[1]),
                               a.cdf.range_standard_errors(i[0], i[1]), rtol=1e-12)
    if a.complete and a.quantile_levels:
        qs = list(a.quantile_levels[:2]) + [0.37]
        ta, tb = a.quantile_answers(qs), b.quantile_answers(qs)
        for key in ta:
            np.testing.assert_allclose(tb[key], ta[key], rtol=1e-12, equal_nan=True)
    assert a.summary() == b.summary()


def test_range_answer_matches_an_independent_dense_computation(tmp_path):
    """The SE of a range with both ends inside bins (interpolated), computed from range
    variances, equals the variance of the same linear query by the test suite's textbook
    GLS on the dense strategy (``oracles.constrained_gls``), in-process and loaded."""
    rel = release(DATA, lower=-4, upper=4, bins=16, epsilon=1.0)
    mech = rel.mechanism
    kp = mech.n_bins
    x, y = -1.3, 2.2
    px, py = np.interp([x, y], rel.bin_edges, np.arange(17.0))
    c = np.zeros(kp + 1)                    # coefficients of the prefixes C_0 .. C_K'
    for pos, sign in ((py, 1.0), (px, -1.0)):
        i = int(np.floor(pos))
        c[i] += sign * (1 - (pos - i))
        c[i + 1] += sign * (pos - i)
    row = np.array([c[b + 1:].sum() for b in range(kp)])     # C_t = sum_(b < t) x_b
    _, var, ok = constrained_gls(mech.released.matrix.toarray(), mech.variances, row[None])
    assert ok[0]
    want = float(np.sqrt(var[0]))
    assert rel.range_answer(x, y).standard_error == pytest.approx(want, rel=1e-9)
    assert _roundtrip(rel, tmp_path).range_answer(x, y).standard_error == pytest.approx(
        want, rel=1e-9)


@pytest.mark.parametrize("kw", [
    {"epsilon": 1.0},
    {"rho": 0.3, "neighbours": "swap"},
    {"epsilon": 0.5, "consistency": None},
    {"rho": 0.2, "consistency": "l1", "quantiles": (0.1, 0.5, 0.99), "interval_level": 0.9},
    {"epsilon": 1.0, "tree": [4, 4, 4], "budgets": "equal"},
])
def test_one_d_release_roundtrip(tmp_path, kw):
    rel = release(DATA, lower=-4, upper=4, bins=50, **kw)
    loaded = _roundtrip(rel, tmp_path)
    _same_1d(rel, loaded)
    assert loaded.measurements.size == 0          # not in the JSON unless asked
    with_y = _roundtrip(rel, tmp_path, include_measurements=True)
    np.testing.assert_array_equal(with_y.measurements, rel.measurements)
    assert with_y.to_dict(include_measurements=True) == rel.to_dict(include_measurements=True)


def test_incomplete_release_roundtrip(tmp_path, monkeypatch):
    """A release whose post-processing failed keeps y in the JSON; loaded, it is the same
    incomplete release (NaN estimates, the measurements, the note)."""
    def boom(*args, **kwargs):
        raise RuntimeError("injected")
    monkeypatch.setattr(core, "project_cdf", boom)
    rel = release(DATA, lower=-4, upper=4, bins=20, epsilon=1.0)
    assert not rel.complete
    loaded = _roundtrip(rel, tmp_path)
    assert not loaded.complete and loaded.notes == rel.notes
    np.testing.assert_array_equal(loaded.measurements, rel.measurements)
    assert loaded.to_dict() == rel.to_dict()


@functools.lru_cache(maxsize=2)
def _designs(kind: str):
    if kind == "rho":
        d = optimize.best_mechanism(workloads.prefix(16), rho=0.5, releasable=True)
    else:
        d = optimize.best_mechanism(workloads.prefix(16), epsilon=1.0, releasable=True)
    return (d,) + tuple(d.alternatives)


@pytest.mark.parametrize("kind", ["rho", "epsilon"])
def test_design_releases_roundtrip(tmp_path, kind):
    """Every releasable design of best_mechanism (scaled integer Toeplitz / dense optima,
    trees with budgets per node, Haar, histograms, workload rows) loads back exactly."""
    hist = RNG.integers(0, 40, 16)
    seen = set()
    for d in _designs(kind):
        rel = release(counts=hist, lower=0.0, upper=16.0, bins=16, design=d, quantiles=())
        _same_1d(rel, _roundtrip(rel, tmp_path))
        seen.add(d.family)
    assert {"sqrt", "blt", "node_budgets"} <= seen


def test_node_budget_design_roundtrip(tmp_path):
    res = optimize.optimal_node_budgets([2, 2, 2], epsilon=1.0)
    rel = release(counts=RNG.integers(0, 9, 8), lower=0, upper=8, bins=8, design=res,
                  quantiles=(0.5,))
    assert rel.mechanism.row_budgets is not None
    _same_1d(rel, _roundtrip(rel, tmp_path))


@pytest.mark.parametrize("make", [
    lambda: strategies.toeplitz(np.ones(12)),                        # integer Toeplitz
    lambda: strategies.Strategy(np.tril(np.ones((12, 12))) + np.eye(12)),   # a plain matrix
    lambda: strategies.banded(np.array([1.0, 1.0, 1.0]), 3, 12),
], ids=["toeplitz", "matrix", "banded"])
def test_hand_built_mechanism_designs_roundtrip(tmp_path, make):
    mech = Mechanism(make(), epsilon=1.0)
    rel = release(counts=RNG.integers(0, 9, 12), lower=0, upper=12, bins=12, design=mech,
                  quantiles=())
    _same_1d(rel, _roundtrip(rel, tmp_path))


def _same_grid(a, b) -> None:
    assert a.to_dict() == b.to_dict()
    np.testing.assert_array_equal(a.raw, b.raw)
    assert (a.consistent is None) == (b.consistent is None)
    if a.consistent is not None:
        np.testing.assert_array_equal(a.consistent, b.consistent)
    assert a.cell_standard_error == b.cell_standard_error
    d = len(a.specs)
    lo = np.array([s.lower for s in a.specs])
    hi = np.array([s.upper for s in a.specs])
    pts = np.sort(RNG.uniform(lo, hi, size=(2, 20, d)), axis=0)
    for got, want in zip(b.range_count(pts[0], pts[1]), a.range_count(pts[0], pts[1])):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9, equal_nan=True)
    assert a.summary() == b.summary()


@pytest.mark.parametrize("kw", [{"epsilon": 1.0}, {"rho": 0.5, "neighbours": "swap"},
                                {"epsilon": 1.0, "consistency": None}])
def test_grid_release_roundtrip(tmp_path, kw):
    pts = RNG.normal(size=(2000, 2))
    g = release_grid(pts, lower=[-3, -3], upper=[3, 3], bins=[12, 8], out_of_range="clip",
                     tree=[[4, 3], [2, 4]], **kw)
    _same_grid(g, _roundtrip(g, tmp_path))


@pytest.mark.parametrize("family", ["grid_quadtree", pytest.param(
    "grid_kron_trees", marks=pytest.mark.slow)])
def test_grid_design_roundtrip(tmp_path, family):
    d = optimize.best_mechanism(workloads.prefix((4, 4)), epsilon=1.0, families=[family])
    g = release(counts=RNG.integers(0, 5, (4, 4)), lower=[0, 0], upper=[1, 1], bins=[4, 4],
                design=d)
    _same_grid(g, _roundtrip(g, tmp_path))


# --------------------------------------------------------------------------- hostile files
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "r.json"
    release(DATA, lower=-4, upper=4, bins=32, epsilon=1.0).to_json(path)
    return path


def _write(tmp_path, text: str | bytes):
    p = tmp_path / "bad.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return p


def _edited(saved, edit, resign: bool = True) -> str:
    doc = json.loads(saved.read_text())
    edit(doc)
    if resign:
        doc.pop("checksum")
        with_checksum(doc)
    return json.dumps(doc)


def test_refuses_bom_nan_truncation_and_other_formats(tmp_path, saved):
    text = saved.read_text()
    with pytest.raises(ValueError, match="byte-order mark"):
        load_release(_write(tmp_path, b"\xef\xbb\xbf" + text.encode()))
    with pytest.raises(ValueError, match="NaN"):
        load_release(_write(tmp_path, text.replace('"total": ', '"total": NaN, "x": ', 1)))
    with pytest.raises(ValueError, match="not valid JSON.*truncated"):
        load_release(_write(tmp_path, text[: len(text) // 2]))
    with pytest.raises(ValueError, match="not UTF-8"):
        load_release(_write(tmp_path, b'{"format": "\xff"}'))
    with pytest.raises(ValueError, match="not an object"):
        load_release(_write(tmp_path, "[1, 2]"))
    with pytest.raises(ValueError, match="format 'dptree_opt.release/2'"):
        load_release(_write(tmp_path, text.replace("dptree_opt.release/1",
                                                   "dptree_opt.release/2")))
    with pytest.raises(ValueError, match="not a file"):
        load_release(tmp_path)
    with pytest.raises(ValueError, match="path must be"):
        load_release(3)


def test_refuses_edits(tmp_path, saved):
    """An edit without the checksum redone is refused by the checksum; with it redone, by
    the field checks and the rebuilt mechanism."""
    def bump(doc):
        doc["cdf"]["raw"][3] += 1.0
    with pytest.raises(ValueError, match="checksum does not match"):
        load_release(_write(tmp_path, _edited(saved, bump, resign=False)))

    def old(doc):
        del doc["mechanism"]
    with pytest.raises(ValueError, match="older version"):
        load_release(_write(tmp_path, _edited(saved, old, resign=False).replace(
            '"checksum"', '"x"')))

    cases = {
        "cdf.raw must be a list of 32": lambda d: d["cdf"]["raw"].pop(),
        "bins.K must be an integer in": lambda d: d["bins"].__setitem__("K", 1 << 40),
        "bins.edges are not": lambda d: d["bins"].__setitem__("upper", 5.0),
        "does not calibrate": lambda d: d["mechanism"].__setitem__(
            "level_budgets", [-x for x in d["mechanism"]["level_budgets"]]),
        "the scale of level": lambda d: d["privacy"]["levels"][1].__setitem__(
            "scale", -abs(d["privacy"]["levels"][1]["scale"] or 1.0)),
        "mechanism.budget must be": lambda d: d["mechanism"].__setitem__("budget", -1.0),
        "standard_errors are not": lambda d: d["cdf"]["standard_errors"].__setitem__(
            0, d["cdf"]["standard_errors"][0] / 2),
        "privacy.achieved": lambda d: d["mechanism"].update(
            budget=2.0, level_budgets=[2 * x for x in d["mechanism"]["level_budgets"]]),
        "n_bins must be an integer": lambda d: d["mechanism"]["strategy"].__setitem__(
            "n_bins", 1 << 40),
        "total must be a non-negative": lambda d: d.__setitem__("total", -5),
    }
    for message, edit in cases.items():
        with pytest.raises(ValueError, match=message):
            load_release(_write(tmp_path, _edited(saved, edit)))


def test_refuses_edited_grid(tmp_path):
    g = release_grid(RNG.normal(size=(500, 2)), lower=[-3, -3], upper=[3, 3], bins=[4, 4],
                     out_of_range="clip", tree=[[2, 2], [4]], epsilon=1.0)
    path = tmp_path / "g.json"
    g.to_json(path)

    def short(doc):
        doc["cells"]["raw"][1].pop()
    with pytest.raises(ValueError, match="cells.raw does not have the grid's shape"):
        load_release(_write(tmp_path, _edited(path, short)))

    def cell_se(doc):
        doc["cells"]["standard_error"] *= 1.5
    with pytest.raises(ValueError, match="cells.standard_error"):
        load_release(_write(tmp_path, _edited(path, cell_se)))
