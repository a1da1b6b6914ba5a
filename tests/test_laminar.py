"""The bridge decomposition (estimation.laminar, estimation.haar, error.interval) against the
dense GLS: random hierarchies with unmeasured levels, truncated / padded trees, duplicated
rows, public totals, prefix sums and Haar; the BLUE itself and the error entry points."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dptree_opt import Mechanism, engines, expected_error, strategies, workloads
from dptree_opt.anchors import opendp_default
from dptree_opt.engines.interval import IntervalEngine, interval_blue_errors, laminar_errors
from dptree_opt.estimation.blue import blue, blue_covariance
from dptree_opt.engines.haar import is_haar_mechanism
from dptree_opt.engines.laminar import (SegmentPlan, is_laminar_mechanism, laminar_blue,
                                           laminar_model, point_moments, point_sum_variance)
from dptree_opt.quantile_intervals import calibrate_quantile_tests
from dptree_opt.strategies.interval import IntervalStrategy

TOL = 1e-9


def _dense_moments(mech):
    """Covariance of x_0..x_K' (x_p = c_0 + .. + c_(p-1)) from the dense GLS."""
    cov = blue_covariance(mech)
    kp = cov.shape[0]
    z = np.zeros((kp + 1, kp + 1))
    z[1:, 1:] = np.cumsum(np.cumsum(cov, 0), 1)
    return z, np.diag(cov)


def _check_against_dense(mech):
    kp = mech.n_bins
    res = laminar_errors(mech)
    z, bins = _dense_moments(mech)
    dz = np.diag(z)
    np.testing.assert_allclose(res["cdf"], dz[1:], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(res["identity"], bins, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(res["total"], dz[kp], rtol=TOL, atol=TOL)
    allr = (kp + 1) * dz.sum() - z.sum()
    np.testing.assert_allclose(res["all_range_total"], allr, rtol=TOL)
    # the first K < K' bins (padded use)
    if kp > 2:
        K = kp - 1
        sub = laminar_errors(mech, K)
        zk = z[:K + 1, :K + 1]
        np.testing.assert_allclose(sub["all_range_total"],
                                   (K + 1) * np.trace(zk) - zk.sum(), rtol=TOL)
    rng = np.random.default_rng(7)
    # custom ranges (O(depth) each) and the total, against the dense covariance
    iv = np.sort(rng.integers(0, kp, (60, 2)), axis=1)
    lo, hi = iv[:, 0], iv[:, 1] + 1
    got = expected_error(workloads.ranges(kp, iv), mech, per_query=True)
    np.testing.assert_allclose(got, dz[hi] + dz[lo] - 2 * z[lo, hi], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(expected_error(workloads.total(kp), mech), dz[kp], rtol=TOL,
                               atol=TOL)
    y = rng.normal(size=(3, mech.released.n_rows)) * 5 + 10
    np.testing.assert_allclose(blue(mech, y), blue(mech, y, method="dense"), rtol=1e-9,
                               atol=1e-8)


@st.composite
def hierarchies(draw):
    """A random hierarchy (networkx arborescence) with per-depth levels."""
    g = nx.DiGraph()
    counter = [0]

    def grow(v, depth):
        if depth >= 4:
            return
        k = draw(st.integers(0 if depth else 1, 4))
        if k == 1:
            k = 2
        for _ in range(k):
            counter[0] += 1
            c = counter[0]
            g.add_edge(v, c)
            grow(c, depth + 1)

    g.add_node(0)
    grow(0, 0)
    return g


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hierarchies(), st.lists(st.sampled_from([0.0, 0.2, 1.0, 3.0]), min_size=5, max_size=5),
       st.sampled_from(["swap", "add_remove"]), st.sampled_from(["laplace", "gaussian"]))
def test_random_hierarchies_match_dense_gls(graph, budgets, neighbours, noise):
    strat = strategies.hierarchy(graph)
    depth = int(strat.levels.max())
    budgets = np.array(budgets[: depth + 1])
    if neighbours == "swap":
        budgets = budgets[1:]  # the root level is the exact total
    if strat.n_bins < 2 or budgets.sum() == 0:
        return
    total = 1.0 if noise == "laplace" else 0.5
    kw = {"epsilon": total} if noise == "laplace" else {"rho": total}
    mech = Mechanism(strat, noise=noise, neighbours=neighbours,
                     level_budgets=list(budgets / budgets.sum() * total), **kw)
    assert is_laminar_mechanism(mech)
    res = laminar_errors(mech, all_range=False)
    if not np.all(np.isfinite(res["identity"])):
        # the strategy does not identify every bin: the dense GLS refuses too
        with pytest.raises(ValueError):
            blue_covariance(mech)
        with pytest.raises(ValueError):
            expected_error(workloads.identity(strat.n_bins), mech)
        with pytest.raises(ValueError):
            laminar_blue(mech, np.zeros(mech.released.n_rows))
        return
    _check_against_dense(mech)


@pytest.mark.parametrize("K", [7, 50, 100, 300])
@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
@pytest.mark.parametrize("padding", ["known_zeros", "noised"])
def test_opendp_truncated_and_padded_trees(K, neighbours, padding):
    a = opendp_default(K, epsilon=1.0, neighbours=neighbours, padding=padding)
    _check_against_dense(a.mechanism)


def test_opendp_default_numbers_at_1024():
    """MATH.md section 6: OpenDP's default at 2^10 (b = 26, known-zero padding, continuous
    Laplace) is 256.2 mean per prefix."""
    a = opendp_default(1024, epsilon=1.0, neighbours="add_remove")
    res = laminar_errors(a.mechanism)
    assert res["cdf"].mean() == pytest.approx(256.2, abs=0.06)


@pytest.mark.parametrize("K", [5, 16, 40])
@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
def test_prefix_sums_histogram_and_trees(K, neighbours):
    for strat in (strategies.prefix_sums(K), strategies.histogram(K),
                  strategies.tree(K, [K]) if K < 20 else strategies.tree(K, [8, K // 8])
                  if K % 8 == 0 else strategies.tree(K, [K])):
        _check_against_dense(Mechanism(strat, epsilon=1.0, neighbours=neighbours))


def test_tree_with_unmeasured_levels_and_public_total():
    strat = strategies.tree(27, [3, 3, 3])
    for budgets in ([0, 0.5, 0, 0.5], [0.2, 0, 0, 0.8], [0, 0, 0.3, 0.7]):
        for neighbours in ("swap", "add_remove"):
            lv = budgets[1:] if neighbours == "swap" else budgets  # swap: the root is exact
            if sum(lv) == 0:
                continue
            lv = [b / sum(lv) for b in lv]
            mech = Mechanism(strat, epsilon=1.0, neighbours=neighbours, level_budgets=lv)
            _check_against_dense(mech)


def test_duplicated_rows_and_gaps():
    """A hand-made laminar family: [0, 8) twice, [0, 4) with leaves, [4, 8) without its
    leaves except [6, 7) and [7, 8): bins 4 and 5 are only identified through [4, 6)."""
    lo = np.array([0, 0, 0, 4, 0, 1, 2, 3, 4, 6, 7])
    hi = np.array([8, 8, 4, 8, 1, 2, 3, 4, 6, 7, 8])
    parent = np.array([-1, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3])
    depth = np.array([0, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3])
    levels = np.array([1, 2, 1, 2, 1, 1, 2, 2, 1, 2, 1])
    bin_row = np.array([4, 5, 6, 7, 8, 8, 9, 10])
    strat = IntervalStrategy(lo, hi, parent, levels, n_bins=8, depth=depth, bin_row=bin_row,
                             name="custom")
    mech = Mechanism(strat, epsilon=1.0, neighbours="add_remove", level_budgets=[.6, .4])
    res = laminar_errors(mech, all_range=False)
    # bins 4, 5: only their sum [4, 6) is measured
    assert np.isinf(res["identity"][4]) and np.isinf(res["identity"][5])
    assert np.isinf(res["cdf"][4])                      # x_5 = C_4 + c_4 is not determined
    assert np.all(np.isfinite(res["cdf"][[0, 1, 2, 3, 5, 6, 7]]))
    with pytest.raises(ValueError, match="cannot identify.*not estimable"):
        expected_error(workloads.identity(8), mech)
    # ranges: [4, 6) is measured, [0, 5) is not determined
    ok = expected_error(workloads.ranges(8, [(4, 5), (0, 3), (6, 7)]), mech, per_query=True)
    assert np.all(np.isfinite(ok))
    with pytest.raises(ValueError, match="cannot identify.*not estimable"):
        expected_error(workloads.ranges(8, [(0, 4)]), mech)
    # adding the two leaves makes it full rank: compare with the dense GLS
    lo2, hi2 = np.append(lo, [4, 5]), np.append(hi, [5, 6])
    parent2 = np.append(parent, [8, 8])
    strat2 = IntervalStrategy(lo2, hi2, parent2, np.append(levels, [1, 2]), n_bins=8,
                              depth=np.append(depth, [4, 4]),
                              bin_row=np.array([4, 5, 6, 7, 11, 12, 9, 10]), name="custom")
    _check_against_dense(Mechanism(strat2, epsilon=1.0, neighbours="add_remove",
                                   level_budgets=[.6, .4]))
    _check_against_dense(Mechanism(strat2, epsilon=1.0, neighbours="swap",
                                   level_budgets=[.6, .4]))


@pytest.mark.parametrize("n", [2, 4, 8, 64, 256])
@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_haar_matches_dense(n, neighbours, noise):
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    mech = Mechanism(strategies.haar(n), noise=noise, neighbours=neighbours, **kw)
    assert is_haar_mechanism(mech)
    _check_against_dense(mech)
    for wl in (workloads.prefix(n), workloads.identity(n), workloads.all_range(n),
               workloads.total(n)):
        fast = expected_error(wl, mech, per_query=wl.kind != "all_range")
        dense = expected_error(wl, mech, per_query=wl.kind != "all_range", method="dense")
        np.testing.assert_allclose(fast, dense, rtol=TOL, atol=TOL)


def test_haar_strategy_equals_matrix_definition():
    """HaarStrategy's fast transform and closed-form sensitivities = the explicit matrix's
    (generic Strategy on haar_matrix), including appended totals and unequal weights."""
    from dptree_opt.strategies.base import Strategy
    from dptree_opt.strategies.haar import HaarStrategy, haar_matrix

    rng = np.random.default_rng(3)
    for n in (1, 2, 8, 32):
        h, g = HaarStrategy(n), Strategy(haar_matrix(n), np.ones(n, dtype=np.int32))
        x = rng.normal(size=(n, 2))
        np.testing.assert_allclose(h.apply(x), g.apply(x), atol=1e-12)
        for w in (np.ones(n), np.r_[0.3, np.full(n - 1, 0.7)], rng.uniform(0.1, 1, n)):
            for nb in ("add_remove", "swap"):
                for p in (1, 2):
                    assert h.sensitivity(w, nb, p) == pytest.approx(g.sensitivity(w, nb, p),
                                                                    rel=1e-12)
        h2, g2 = h.with_total_row(), g.with_total_row()
        assert (h2.matrix != g2.matrix).nnz == 0
        w = np.r_[np.ones(n), 0.5]
        for nb in ("add_remove", "swap"):
            for p in (1, 2):
                assert h2.sensitivity(w, nb, p) == pytest.approx(g2.sensitivity(w, nb, p))


def test_point_sum_variance_random_weights():
    a = opendp_default(60, epsilon=1.0, neighbours="add_remove")
    lam = laminar_model(a.mechanism)
    z, _ = _dense_moments(a.mechanism)
    rng = np.random.default_rng(0)
    for _ in range(5):
        u = rng.normal(size=61)
        u[0] = 0.0
        assert point_sum_variance(lam, u) == pytest.approx(u @ z @ u, rel=1e-10)
    mom = point_moments(lam)
    np.testing.assert_allclose(mom.var, np.diag(z), rtol=1e-10, atol=1e-12)


@given(st.lists(st.integers(0, 9), min_size=1, max_size=30), st.booleans())
def test_segment_cumsum_matches_python(lengths, reverse):
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    vals = np.arange(ptr[-1], dtype=float) * 1.5 - 3
    got = SegmentPlan(ptr).cumsum(vals, reverse=reverse)
    want = np.zeros_like(vals)
    for a, b in zip(ptr[:-1], ptr[1:]):
        seg = vals[a:b][::-1] if reverse else vals[a:b]
        cs = np.cumsum(seg)
        want[a:b] = cs[::-1] if reverse else cs
    np.testing.assert_allclose(got, want)
    two = SegmentPlan(ptr).cumsum(np.stack([vals, -2 * vals]), reverse=reverse)  # (trials, E)
    np.testing.assert_allclose(two, np.stack([want, -2 * want]))


def test_interval_blue_errors_uses_the_bridge_path_at_scale():
    """OpenDP's truncated tree at 2^16 (MATH.md section 6: 560.1 mean per prefix)."""
    a = opendp_default(2**16, epsilon=1.0, neighbours="add_remove")
    res = interval_blue_errors(a.mechanism)
    assert res["cdf"].mean() == pytest.approx(560.1, abs=0.06)
    assert res["identity"] is not None and res["all_range_total"] > 0


@pytest.mark.parametrize("make", [
    lambda: Mechanism(strategies.haar(256), epsilon=1.0, neighbours="add_remove"),
    lambda: opendp_default(300, epsilon=1.0, neighbours="swap").mechanism,
])
def test_monte_carlo_agrees_with_exact(make):
    """monte_carlo_error runs the structured BLUE; the exact error must lie within 4 SE."""
    from dptree_opt import monte_carlo_error

    mech = make()
    wl = workloads.prefix(mech.n_bins)
    exact = expected_error(wl, mech)
    mc = monte_carlo_error(wl, mech, trials=400, rng=11)
    assert mc.within(exact, 4.0), (exact, mc)


@pytest.mark.parametrize("make", [
    lambda: Mechanism(strategies.haar(8), epsilon=1.0, neighbours="swap"),
    lambda: Mechanism(strategies.prefix_sums(8), epsilon=1.0, neighbours="add_remove"),
    lambda: opendp_default(30, epsilon=1.0, neighbours="swap").mechanism,
])
def test_structured_blue_refuses_non_finite_answers(make):
    """A NaN on a row the estimate uses (including the public total) is a ValueError, not a
    silently NaN histogram."""
    mech = make()
    y = np.zeros(mech.released.n_rows)
    exact = np.flatnonzero(mech.exact_rows)
    y[exact[0] if exact.size else 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        blue(mech, y)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(2, 3), min_size=1, max_size=4), st.integers(0, 2**31))
def test_laminar_model_of_any_per_row_variances_equals_dense_gls(branching, seed):
    """Per-row (per-node) variances without a Mechanism: prefix variances = the dense GLS."""
    from dptree_opt.engines.laminar import laminar_model_of, point_moments
    n = int(np.prod(branching))
    strat = strategies.truncated_tree(n, branching)
    rng = np.random.default_rng(seed)
    var = rng.uniform(0.2, 5.0, strat.n_rows)
    var[rng.random(strat.n_rows) < 0.2] = np.inf  # some rows unmeasured ...
    var[strat.bin_row] = rng.uniform(0.2, 5.0, n)  # ... but every bin measured
    a = strat.matrix.toarray()
    w = np.where(np.isfinite(var), 1.0 / var, 0.0)
    cov = np.linalg.inv(a.T @ (w[:, None] * a))
    want = workloads.prefix(n).query_variances(cov)
    got = point_moments(laminar_model_of(strat, var)).var[1:]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    with pytest.raises(ValueError, match="variances"):
        laminar_model_of(strat, var[:-1])
    bad = var.copy()
    bad[-1] = 0.0
    with pytest.raises(ValueError, match="exact"):
        laminar_model_of(strat, bad)


def test_quantile_calibration_of_budgets_per_node_uses_the_interval_covariance(monkeypatch):
    """The quantile tests' calibration of a tree with a budget per node (discrete Laplace,
    K = 64: every prefix checked) takes Cov p_b from the registry's "covariance" task, which
    the interval engine serves (the BLUE of synthetic answers); its critical values equal
    those computed with the generic GLS's covariance (the interval engine's refused)."""
    strat = strategies.tree(64, [4, 4, 4])
    b = np.random.default_rng(7).uniform(0.2, 1.0, strat.n_rows) / 4

    def mech():  # a new object each time: the calibration cache is per mechanism here
        return Mechanism(strat, noise="laplace", neighbours="add_remove", row_budgets=b,
                         epsilon=float(b.sum()), discrete=True)

    served = []
    real = IntervalEngine.covariance
    monkeypatch.setattr(IntervalEngine, "covariance",
                        lambda self, m, u: served.append(u.shape) or real(self, m, u))
    got = calibrate_quantile_tests(mech(), 64, (0.25, 0.5), 0.95)
    assert served and got.prefixes_checked == 65
    monkeypatch.setattr(IntervalEngine, "refusal", lambda self, task, *a: (
        "refused by the test" if task == "covariance" else None))
    generic = mech()
    assert engines.select("covariance", generic).name == "dense"
    want = calibrate_quantile_tests(generic, 64, (0.25, 0.5), 0.95)
    np.testing.assert_array_equal(got.critical, want.critical)
    assert np.all(got.critical > 1.96)  # Laplace noise is not normal (module docstring there)
