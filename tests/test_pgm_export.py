"""A release's measurements in private-pgm's form (``measurements_for_pgm``): the records
hold everything the release measured (an independent dense GLS on them gives the release's
own BLUE), and, when mbi is installed, they convert to ``mbi.LinearMeasurement`` and its
estimator recovers the histogram from a nearly noiseless release."""

from __future__ import annotations

import numpy as np
import pytest

from dptree_opt import optimize
from dptree_opt.data_release import PGMMeasurement, load_release, release, release_grid
from oracles import constrained_gls

RNG = np.random.default_rng(3)


def _gls_from_records(records, n_cells: int, w: np.ndarray) -> np.ndarray:
    """The BLUE of the queries w from the records alone (test-side textbook GLS)."""
    q = np.vstack([r.query.toarray() for r in records])
    y = np.concatenate([r.noisy_measurement for r in records])
    var = np.concatenate([np.full(r.rows.size, r.stddev**2) for r in records])
    assert q.shape[1] == n_cells
    coef, _, ok = constrained_gls(q, var, w)
    assert ok.all()
    return coef @ y


def _check_fields(rel, records, clique) -> None:
    mech = rel.mechanism
    assert all(isinstance(r, PGMMeasurement) for r in records)
    rows = np.concatenate([r.rows for r in records])
    assert np.unique(rows).size == rows.size                   # each row once
    measured = np.isfinite(mech.scales) & np.isfinite(rel.measurements)
    np.testing.assert_array_equal(np.sort(rows), np.flatnonzero(measured))
    for r in records:
        assert r.clique == clique and r.stddev >= 0
        np.testing.assert_array_equal(r.noisy_measurement, rel.measurements[r.rows])
        np.testing.assert_allclose(r.stddev**2, mech.variances[r.rows])
        np.testing.assert_array_equal(r.query.toarray(),
                                      mech.released.matrix[r.rows].toarray())


@pytest.mark.parametrize("kw", [{"epsilon": 1.0}, {"rho": 0.5, "neighbours": "swap"}])
def test_records_reproduce_the_blue_1d(kw):
    data = np.clip(RNG.normal(size=1500), -2.9, 2.9)
    rel = release(data, lower=-3, upper=3, bins=24, tree=[4, 6], quantiles=(), **kw)
    records = rel.measurements_for_pgm()
    _check_fields(rel, records, ("x",))
    kp = rel.padded_bins
    prefixes = np.tril(np.ones((kp, kp)))[: rel.spec.bins]
    np.testing.assert_allclose(_gls_from_records(records, kp, prefixes), rel.raw_cdf,
                               rtol=1e-9, atol=1e-7)


def test_records_of_a_node_budget_design():
    rel = release(counts=RNG.integers(0, 20, 8), lower=0, upper=8, bins=8, quantiles=(),
                  design=optimize.optimal_node_budgets([2, 2, 2], epsilon=1.0))
    records = rel.measurements_for_pgm("age")
    assert len(records) >= 1                                    # one per noise level
    _check_fields(rel, records, ("age",))
    np.testing.assert_allclose(_gls_from_records(records, 8, np.tril(np.ones((8, 8)))),
                               rel.raw_cdf, rtol=1e-9, atol=1e-7)


def test_records_reproduce_the_blue_grid():
    g = release_grid(RNG.uniform(0, 1, size=(800, 2)), lower=[0, 0], upper=[1, 1],
                     bins=[4, 4], tree=[[2, 2], [4]], epsilon=1.0, names=["a", "b"])
    records = g.measurements_for_pgm()
    _check_fields(g, records, ("a", "b"))
    np.testing.assert_allclose(_gls_from_records(records, 16, np.eye(16)),
                               g.raw.ravel(), rtol=1e-9, atol=1e-7)


def test_no_measurements_no_records(tmp_path):
    rel = release(counts=RNG.integers(0, 9, 8), lower=0, upper=1, bins=8, epsilon=1.0,
                  tree=[2, 4], quantiles=())
    path = tmp_path / "r.json"
    rel.to_json(path)
    with pytest.raises(ValueError, match="include_measurements=True"):
        load_release(path).measurements_for_pgm()
    rel.to_json(path, force=True, include_measurements=True)
    assert len(load_release(path).measurements_for_pgm()) == len(rel.measurements_for_pgm())


def test_mbi_estimation_recovers_the_histogram():
    """With mbi installed: the records convert to mbi.LinearMeasurement and mbi's estimator
    recovers the true histogram from a release whose noise is negligible (eps = 40: scale
    0.1 per level, the discrete Laplace noise is 0 with probability > 0.9999 per row; bound:
    0.5 per cell)."""
    mbi = pytest.importorskip("mbi")
    hist = np.array([5, 0, 12, 3, 7, 1, 0, 9])
    rel = release(counts=hist, lower=0, upper=8, bins=8, epsilon=40.0, tree=[2, 2, 2],
                  quantiles=())
    measurements = [m.to_mbi() for m in rel.measurements_for_pgm() if m.stddev > 0]
    domain = mbi.Domain(["x"], [8])
    model = mbi.estimation.MirrorDescent().estimate(domain, measurements,
                                                    known_total=float(hist.sum()), iters=3000)
    got = np.asarray(model.project(("x",)).datavector())
    np.testing.assert_allclose(got, hist, atol=0.5)
