"""The private-CDF pipeline: measure -> estimate -> project, with its result object.

References: the same steps done by hand with the lower-level API (blue, covering_cdf,
project_cdf), the dense GLS covariance for standard errors, and the data's own totals."""

import dataclasses

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import consistency, queries
from dptree_opt import strategies as S


def tree_mech(**kw):
    kw.setdefault("neighbours", "swap")   # N public unless a test says otherwise
    return dp.Mechanism(S.tree(64, [4, 4, 4]), epsilon=kw.pop("epsilon", 1.0), **kw)


HIST = np.random.default_rng(0).poisson(4, 64)
N = int(HIST.sum())


def test_private_cdf_is_measure_then_cdf_from_measurements():
    mech = tree_mech()
    res = dp.private_cdf(HIST, mech, np.random.default_rng(11))
    y = mech.measure(HIST, np.random.default_rng(11))
    again = dp.cdf_from_measurements(mech, y)
    np.testing.assert_array_equal(res.raw, again.raw)
    np.testing.assert_array_equal(res.consistent, again.consistent)
    # by hand
    np.testing.assert_allclose(res.raw, np.cumsum(dp.blue(mech, y)), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(res.consistent, consistency.project_cdf(res.raw, total=N))
    assert res.total == N and res.total_public
    assert res.consistent.dtype == np.int64 and res.consistent[-1] == N
    assert res.consistent[0] >= 0 and np.all(np.diff(res.consistent) >= 0)
    # a simulation never describes itself as a DP release (issue 12 item 12)
    assert res.description.startswith("SIMULATION") and "no privacy guarantee" in res.description
    assert res.description.endswith(mech.describe())
    assert (res.consistency, res.estimator) == ("l2", "blue")
    cov = dp.blue_covariance(mech)
    prefix = np.tril(np.ones((64, 64)))
    np.testing.assert_allclose(res.standard_errors,
                               np.sqrt(np.maximum(np.diag(prefix @ cov @ prefix.T), 0)),
                               rtol=1e-6, atol=1e-6)


def test_result_is_immutable():
    res = dp.private_cdf(HIST, tree_mech(), np.random.default_rng(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.total = 3
    with pytest.raises(ValueError):
        res.raw[0] = 1.0
    with pytest.raises(ValueError):
        res.consistent[0] = 1


@pytest.mark.parametrize("estimator", ["covering", "refined"])
def test_other_estimators(estimator):
    mech = tree_mech()
    y = mech.measure(HIST, np.random.default_rng(2))
    res = dp.cdf_from_measurements(mech, y, "l1", estimator)
    ref_raw = (dp.covering_cdf(mech, y) if estimator == "covering" else dp.refined_cdf(mech, y))
    np.testing.assert_allclose(res.raw, ref_raw, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(res.consistent,
                                  consistency.project_cdf(res.raw, N, "l1"))
    var = dp.expected_error(dp.workloads.prefix(64), mech, estimator, per_query=True)
    np.testing.assert_allclose(res.standard_errors ** 2, var, rtol=1e-12)


def test_add_remove_uses_the_rounded_estimated_total():
    mech = tree_mech(neighbours="add_remove")
    y = mech.measure(HIST, np.random.default_rng(3))
    res = dp.cdf_from_measurements(mech, y)
    assert not res.total_public
    assert res.total == max(0, int(np.rint(np.cumsum(dp.blue(mech, y))[-1])))
    assert res.consistent[-1] == res.total
    # a negative estimated total is clipped to 0: everything projects to 0
    neg = dp.cdf_from_measurements(mech, -np.abs(y) - 50.0)
    assert neg.total == 0 and not neg.consistent.any()


def test_no_consistency_and_weighted():
    mech = tree_mech()
    y = mech.measure(HIST, np.random.default_rng(4))
    res = dp.cdf_from_measurements(mech, y, None)
    assert res.consistency is None and res.consistent.dtype == np.float64
    np.testing.assert_array_equal(res.consistent, res.raw)
    assert res.total == N
    private = dp.cdf_from_measurements(tree_mech(neighbours="add_remove"), y, None)
    assert private.total is None
    w = dp.cdf_from_measurements(mech, y, "l2", weighted=True)
    var = w.standard_errors ** 2
    weights = 1.0 / np.append(var[:-1], 1.0)
    np.testing.assert_array_equal(w.consistent,
                                  consistency.project_cdf(w.raw, N, "l2", weights=weights))
    real = dp.cdf_from_measurements(mech, y, "l2", integer=False)
    assert real.consistent.dtype == np.float64 and real.consistent[-1] == N


def test_non_tree_mechanism_gets_its_public_total_row():
    mech = dp.Mechanism(S.histogram(64), epsilon=1.0,
                        neighbours="swap")  # swap: an exact total row is appended
    res = dp.private_cdf(HIST, mech, np.random.default_rng(5))
    assert res.total == N and res.consistent[-1] == N
    mech_g = dp.Mechanism(S.prefix_sums(64), rho=0.5, noise="gaussian", neighbours="swap")
    res_g = dp.private_cdf(HIST, mech_g, np.random.default_rng(6), consistency="l1")
    assert res_g.total == N and res_g.consistent[-1] == N


def test_convenience_methods_match_queries():
    mech = tree_mech()
    res = dp.private_cdf(HIST, mech, np.random.default_rng(7))
    edges = np.linspace(0.0, 1.0, 65)
    qs = np.array([0.1, 0.5, 0.9])
    np.testing.assert_array_equal(res.quantiles(edges, qs),
                                  queries.quantiles(res.consistent, edges, qs, N))
    np.testing.assert_array_equal(res.cdf(), res.consistent / N)
    a, b = np.array([0, 10, 63]), np.array([5, 40, 63])
    np.testing.assert_array_equal(res.range_count(a, b),
                                  [res.consistent[5], res.consistent[40] - res.consistent[9],
                                   res.consistent[63] - res.consistent[62]])
    np.testing.assert_allclose(res.range_count(a, b, raw=True),
                               [res.raw[5], res.raw[40] - res.raw[9], res.raw[63] - res.raw[62]])
    np.testing.assert_allclose(res.range_standard_errors(a, b),
                               queries.range_standard_errors(mech, a, b))
    lo, up = res.band(0.9)
    z = queries.critical_value(0.9)
    np.testing.assert_allclose(up - lo, 2 * z * res.standard_errors)
    slo, sup = res.band(0.9, simultaneous=True, monotone=True)
    assert slo.dtype == np.float64 and np.all(np.diff(slo) >= 0) and np.all(np.diff(sup) >= 0)
    assert slo[-1] == sup[-1] == N
    blo, bup = res.band(0.9, simultaneous=True, method="simulated", rng=8, draws=500)
    assert np.all(bup >= up - 1e-9)  # a simultaneous band is at least as wide as pointwise
    qlo, qup = res.quantile_bounds(edges, qs, 0.9)
    assert np.all(qlo <= qup)
    true_q = queries.quantiles(np.cumsum(HIST), edges, qs)
    # the monotone simultaneous band holds the truth in this seeded draw (90% event), so
    # the quantile bounds must hold the true quantiles (deterministic consequence)
    tlo, tup = res.band(0.9, simultaneous=True, monotone=True)
    if np.all((tlo <= np.cumsum(HIST)) & (np.cumsum(HIST) <= tup)):
        assert np.all((qlo <= true_q + 1e-12) & (true_q <= qup + 1e-12))


def test_bad_input():
    mech = tree_mech()
    y = mech.measure(HIST, np.random.default_rng(9))
    with pytest.raises(ValueError, match="consistency"):
        dp.cdf_from_measurements(mech, y, "l3")
    with pytest.raises(ValueError, match="estimator"):
        dp.cdf_from_measurements(mech, y, "l2", "ols")
    with pytest.raises(ValueError, match="y must have shape"):
        dp.cdf_from_measurements(mech, y[:-1])
    with pytest.raises(ValueError, match="mechanism"):
        dp.cdf_from_measurements("tree", y)
    with pytest.raises(ValueError, match="mechanism"):
        dp.private_cdf(HIST, "tree", 0)
    bad = y.copy()
    bad[0] = N + 0.5  # the exact root row must hold an integer count
    with pytest.raises(ValueError, match="exact total row"):
        dp.cdf_from_measurements(mech, bad)
    nan = y.copy()
    nan[5] = np.nan
    with pytest.raises(ValueError):
        dp.cdf_from_measurements(mech, nan)
    with pytest.raises(ValueError, match="histogram"):
        dp.private_cdf(-HIST, mech, 0)
    res = dp.cdf_from_measurements(mech, y)
    with pytest.raises(ValueError, match="method"):
        res.band(0.9, method="sidak")  # pointwise band has no Sidak
    with pytest.raises(ValueError, match="monotone"):
        res.band(0.9, monotone=True)
    with pytest.raises(ValueError, match="public total"):
        dp.cdf_from_measurements(tree_mech(neighbours="add_remove"), y).quantile_bounds(
            np.linspace(0, 1, 65), 0.5)


def test_consistent_l2_error_never_exceeds_raw_in_expectation():
    """Monte Carlo over 300 draws: the real l2 projection never increases the error draw by
    draw (non-expansive projection onto a convex set holding the truth); the integer one on
    average stays below the raw error too (rounding costs at most sqrt(K)/2 per draw)."""
    mech = tree_mech(epsilon=0.5)
    truth = np.cumsum(HIST)
    rng = np.random.default_rng(10)
    raw_err, int_err = [], []
    for _ in range(300):
        y = mech.measure(HIST, rng)
        real = dp.cdf_from_measurements(mech, y, "l2", integer=False)
        r = np.sum((real.raw - truth) ** 2)
        assert np.sum((real.consistent - truth) ** 2) <= r * (1 + 1e-12) + 1e-9
        res = dp.cdf_from_measurements(mech, y)
        raw_err.append(r)
        int_err.append(np.sum((res.consistent - truth) ** 2))
    assert np.mean(int_err) < np.mean(raw_err)


# ----------------------------------------------------------------------------- padded trees
def released_cdf(k=13, branching=(4, 4), neighbours="add_remove", seed=12):
    """A PrivateCDF built as ``data_release.core`` builds it: the tree over K' >= K leaves
    (padding bins empty), the estimate over K' bins cut to the first K bins."""
    kp = int(np.prod(branching))
    mech = dp.Mechanism(S.tree(kp, list(branching)), epsilon=1.0, neighbours=neighbours,
                        discrete=True)
    hist = np.zeros(kp, dtype=np.int64)
    hist[:k] = np.random.default_rng(seed).poisson(6, k)
    est = dp.cdf_from_measurements(mech, mech.measure(hist, np.random.default_rng(seed + 1)),
                                   consistency=None)
    raw, se = np.asarray(est.raw)[:k], np.asarray(est.standard_errors)[:k]
    total = est.total if mech.public_total else max(0, int(np.rint(raw[-1])))
    cons = consistency.project_cdf(raw, total=total, metric="l2", integer=True)
    cdf = dp.PrivateCDF(raw=raw, consistent=cons, standard_errors=se, total=total,
                        total_public=mech.public_total, description=mech.describe(),
                        consistency="l2", estimator="blue", mechanism=mech)
    return cdf, hist[:k]


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_simulated_band_on_a_padded_release(neighbours):
    """Regression: band(method="simulated") used to raise on K < K' (mechanism over the
    padded tree, raw and SEs over the K real bins). Shapes, ordering and simultaneous >=
    pointwise are deterministic; coverage on this path is tested in test_queries."""
    cdf, _ = released_cdf(neighbours=neighbours)
    for simultaneous in (False, True):
        lo, up = cdf.band(0.9, simultaneous=simultaneous, method="simulated", rng=3,
                          draws=400)
        assert lo.shape == up.shape == (13,)
        assert np.all(lo <= cdf.raw + 1e-9) and np.all(cdf.raw <= up + 1e-9)
    slo, sup = cdf.band(0.9, simultaneous=True, method="simulated", rng=3, draws=400)
    plo, pup = cdf.band(0.9, simultaneous=False, method="simulated", rng=3, draws=400)
    assert np.all(sup - slo >= pup - plo - 1e-9)  # the max-|Z| quantile >= each |Z_t| one


def test_quantile_intervals_method_matches_the_module():
    from dptree_opt.quantile_intervals import quantile_intervals
    cdf, _ = released_cdf()
    edges = np.linspace(0.0, 13.0, 14)
    qs = [0.1, 0.5, 0.9]
    got = cdf.quantile_intervals(edges, qs, 0.9)
    want = quantile_intervals(cdf.mechanism, cdf.raw, edges, qs, total_public=False,
                              level=0.9, estimates=cdf.quantiles(edges, qs))
    for name in ("lower", "upper", "noise_lower", "noise_upper"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    est = cdf.quantiles(edges, qs)
    assert np.all((got.lower <= est) & (est <= got.upper))
    with pytest.raises(ValueError, match="bin_edges"):
        cdf.quantile_intervals(edges[:-1], qs)
    with pytest.raises(ValueError, match="level"):
        cdf.quantile_intervals(edges, qs, 1.5)


# ----------------------------------------------------------------------------- plots
def _agg():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


@pytest.mark.parametrize("band", ["pointwise", "simultaneous", None])
def test_cdf_plot_draws_the_expected_artists(band, tmp_path):
    plt = _agg()
    cdf, hist = released_cdf()
    ax = cdf.plot(bin_edges=np.linspace(0, 1, 14), band=band, truth=np.cumsum(hist))
    # step lines: raw, truth, consistent; the band is one PolyCollection
    assert len(ax.lines) == 3
    assert len(ax.collections) == (0 if band is None else 1)
    labels = ax.get_legend_handles_labels()[1]
    assert any("true CDF" in s for s in labels) and any("raw" in s for s in labels)
    assert "laplace" in ax.get_title() and "\u03b5" in ax.get_title()
    assert ax.get_xlabel() == "value"
    path = tmp_path / f"cdf_{band}.png"
    ax.figure.savefig(path)
    assert path.stat().st_size > 5000
    plt.close(ax.figure)
    ax = cdf.plot()  # bin index axis, no truth
    assert ax.get_xlabel() == "bin index" and len(ax.lines) == 2
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="band"):
        cdf.plot(band="both")
    with pytest.raises(ValueError, match="truth"):
        cdf.plot(truth=np.ones(3))


def test_release_plot_marks_quantiles_with_intervals(tmp_path):
    from types import SimpleNamespace

    from dptree_opt.plotting import plot_release
    plt = _agg()
    cdf, hist = released_cdf()
    edges = np.linspace(0.0, 26.0, 14)
    qs = (0.1, 0.5, 0.9)
    qi = cdf.quantile_intervals(edges, qs)
    release = SimpleNamespace(cdf=cdf, bin_edges=edges, quantile_levels=qs,
                              quantiles=cdf.quantiles(edges, qs), quantile_lower=qi.lower,
                              quantile_upper=qi.upper, quantile_noise_lower=qi.noise_lower,
                              quantile_noise_upper=qi.noise_upper, interval_level=0.95)
    ax = plot_release(release, truth=np.cumsum(hist))
    labels = ax.get_legend_handles_labels()[1]
    assert any("true quantile" in s for s in labels)
    assert any("noise-only" in s for s in labels)
    # 3 CDF step lines + the errorbar's data line; collections: band, error bars, hlines
    assert len(ax.lines) >= 4 and len(ax.collections) >= 3
    assert len(ax.texts) == len(qs)
    path = tmp_path / "release.png"
    ax.figure.savefig(path, dpi=110)
    assert path.stat().st_size > 5000
    plt.close(ax.figure)
