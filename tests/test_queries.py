"""Queries on a CDF estimate: normalisation, quantiles, ranges, standard errors and bands.

References: numpy's quantile (inverted_cdf) of the binned data, direct histogram sums, the
dense GLS covariance (``blue_covariance``) and dense covering matrices, and Monte Carlo
coverage with fixed seeds and stated binomial bounds."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import norm

import dptree_opt as dp
from dptree_opt import queries, workloads
from dptree_opt import strategies as S
from dptree_opt.engines.covering import covering_operator


def examples(n):
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- cdf / ranges
def test_cdf_normalises():
    c = np.array([1.0, 3.0, 4.0])
    np.testing.assert_array_equal(queries.cdf(c), c / 4.0)
    np.testing.assert_array_equal(queries.cdf(c, total=8), c / 8.0)
    with pytest.raises(ValueError, match="total"):
        queries.cdf([0.0, 0.0])
    with pytest.raises(ValueError, match="total"):
        queries.cdf(c, total=-1)


@examples(60)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=30), st.data())
def test_range_count_equals_histogram_sums(h, data):
    h = np.array(h)
    k = h.size
    a = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=1, max_size=10)))
    b = np.array([data.draw(st.integers(int(x), k - 1)) for x in a])
    got = queries.range_count(np.cumsum(h), a, b)
    np.testing.assert_array_equal(got, [h[x:y + 1].sum() for x, y in zip(a, b)])
    assert queries.range_count(np.cumsum(h), 0, k - 1) == h.sum()  # scalars broadcast


# ----------------------------------------------------------------------------- quantiles
def _spread(h, edges):
    """The binned data: the h_i points of bin i at e_i + j (e_{i+1} - e_i) / h_i, j = 1..h_i."""
    return np.concatenate([edges[i] + np.arange(1, h[i] + 1) * (edges[i + 1] - edges[i]) / h[i]
                           for i in range(h.size) if h[i] > 0])


@st.composite
def binned(draw):
    k = draw(st.integers(1, 15))
    h = np.array(draw(st.lists(st.integers(0, 6), min_size=k, max_size=k)))
    if h.sum() == 0:
        h[draw(st.integers(0, k - 1))] = draw(st.integers(1, 6))
    gaps = np.array(draw(st.lists(st.floats(0.01, 10.0), min_size=k, max_size=k)))
    edges = draw(st.floats(-100, 100)) + np.concatenate([[0.0], np.cumsum(gaps)])
    return h, edges


@examples(120)
@given(binned())
def test_quantiles_equal_numpy_inverted_cdf_of_binned_data(data):
    """Derivation: the ECDF of the spread data z equals the bin-linear F at every point
    (F(z_m) = m / N), so the smallest x with F(x) >= m / N is z_m = the inverted-CDF
    (Hyndman-Fan type 1) sample quantile at q = m / N. Float-safe targets: q just below m / N
    (numpy rounds q N up to m; our answer moves by <= 1e-9 of a bin width)."""
    h, edges = data
    c, n = np.cumsum(h), int(h.sum())
    z = _spread(h, edges)
    m = np.arange(1, n + 1)
    q = (m - 1e-9) / n
    tol = 1e-8 * (edges[-1] - edges[0])
    np.testing.assert_allclose(queries.quantiles(c, edges, q),
                               np.quantile(z, q, method="inverted_cdf"), rtol=0, atol=tol)
    np.testing.assert_allclose(queries.quantiles(c, edges, m / n), z, rtol=0, atol=tol)


@examples(100)
@given(binned(), st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=20))
def test_quantiles_invert_the_linear_cdf(data, qs):
    """F(Q(q)) = q (F by np.interp through the edges) and F < q just left of Q(q)."""
    h, edges = data
    c = np.cumsum(h)
    q = np.array(qs)
    x = queries.quantiles(c, edges, q)
    f_edges = np.concatenate([[0.0], c / c[-1]])
    np.testing.assert_allclose(np.interp(x, edges, f_edges), q, atol=1e-9)
    left = x - 1e-6 * np.min(np.diff(edges))
    assert np.all(np.interp(left, edges, f_edges) < q)


def test_quantiles_hand_example():
    # h = (2, 0, 2) on [0, 1, 2, 3]: F(1) = F(2) = 1/2
    c, e = [2, 2, 4], [0.0, 1.0, 2.0, 3.0]
    np.testing.assert_array_equal(queries.quantiles(c, e, [0.0, 0.25, 0.5, 0.75, 1.0]),
                                  [0.0, 0.5, 1.0, 2.5, 3.0])
    # a total larger than the counts: q N beyond C_K lands on the last edge
    assert queries.quantiles(c, e, 1.0, total=8) == 3.0
    assert queries.quantiles(c, e, 0.25, total=8) == 1.0  # target 2 = C_1


def test_quantiles_bad_input():
    with pytest.raises(ValueError, match="non-decreasing"):
        queries.quantiles([2, 1, 4], [0, 1, 2, 3], 0.5)
    with pytest.raises(ValueError, match="bin_edges"):
        queries.quantiles([1, 2, 4], [0, 1, 2], 0.5)
    with pytest.raises(ValueError, match="bin_edges"):
        queries.quantiles([1, 2, 4], [0, 1, 1, 3], 0.5)
    with pytest.raises(ValueError, match="qs"):
        queries.quantiles([1, 2, 4], [0, 1, 2, 3], 1.5)
    with pytest.raises(ValueError, match="qs"):
        queries.quantiles([1, 2, 4], [0, 1, 2, 3], np.nan)


def test_range_bad_input():
    with pytest.raises(ValueError, match="inclusive bin range"):
        queries.range_count([1, 2, 3], 2, 1)
    with pytest.raises(ValueError, match="inclusive bin range"):
        queries.range_count([1, 2, 3], 0, 3)
    with pytest.raises(ValueError, match="integer"):
        queries.range_count([1, 2, 3], 0.5, 1)
    with pytest.raises(ValueError, match="broadcast"):
        queries.range_count([1, 2, 3], [0, 1], [1, 2, 2])


# ----------------------------------------------------------------------------- standard errors
MECHANISMS = [
    ("tree (2,3,2) swap", lambda: dp.Mechanism(S.tree(12, [2, 3, 2]), epsilon=1.0,
                                               neighbours="swap")),
    ("tree (4,1,3) add_remove", lambda: dp.Mechanism(S.tree(12, [4, 1, 3]), epsilon=0.5,
                                                     neighbours="add_remove")),
    ("tree (3,4) gaussian budgets", lambda: dp.Mechanism(
        S.tree(12, [3, 4]), rho=1.0, noise="gaussian", neighbours="swap",
        level_budgets=[0.2, 0.8])),
    ("histogram swap", lambda: dp.Mechanism(S.histogram(12), epsilon=1.0, neighbours="swap")),
    ("prefix sums add_remove", lambda: dp.Mechanism(S.prefix_sums(12), epsilon=1.0,
                                                    neighbours="add_remove")),
]


@pytest.mark.parametrize("name, make", MECHANISMS)
def test_standard_errors_match_dense_covariance(name, make):
    mech = make()
    k = mech.n_bins
    cov = dp.blue_covariance(mech)
    prefix = np.tril(np.ones((k, k)))
    np.testing.assert_allclose(queries.cdf_standard_errors(mech),
                               np.sqrt(np.maximum(np.diag(prefix @ cov @ prefix.T), 0)),
                               rtol=1e-6, atol=1e-6)
    a, b = np.triu_indices(k)
    w = np.array([[1.0 if x <= i <= y else 0.0 for i in range(k)] for x, y in zip(a, b)])
    ref = np.sqrt(np.maximum(np.einsum("qi,ij,qj->q", w, cov, w), 0))
    np.testing.assert_allclose(queries.range_standard_errors(mech, a, b), ref,
                               rtol=1e-6, atol=1e-6 * ref.max())


COVERING = MECHANISMS[:4] + [
    ("tree (2,3,4), level 2 unmeasured", lambda: dp.Mechanism(
        S.tree(24, [2, 3, 4]), epsilon=1.0, neighbours="swap", level_budgets=[0.5, 0.0, 0.5])),
]


@pytest.mark.parametrize("name, make", COVERING)
def test_covering_range_standard_errors(name, make):
    """Var(C_{b+1} - C_a) from the dense covering coefficients (cumsum of the operator)."""
    mech = make()
    k = mech.n_bins
    coef = np.cumsum(covering_operator(mech).toarray(), axis=0)  # row t: C_t in terms of y
    v = np.where(np.isfinite(mech.variances), mech.variances, 0.0)
    a, b = np.triu_indices(k)
    ref = np.sqrt(((coef[b + 1] - coef[a]) ** 2) @ v)
    np.testing.assert_allclose(queries.range_standard_errors(mech, a, b, "covering"), ref,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(queries.cdf_standard_errors(mech, "covering"),
                               np.sqrt((coef[1:] ** 2) @ v), rtol=1e-12)


def test_range_standard_errors_at_large_k_need_no_matrix():
    mech = dp.Mechanism(S.tree(2**20, [16] * 5), epsilon=1.0)
    a = np.array([0, 5, 1000, 0])
    b = np.array([2**20 - 2, 5, 300000, 0])
    se = queries.range_standard_errors(mech, a, b)
    # prefixes are ranges starting at 0: they must equal the prefix standard errors
    prefix_se = queries.cdf_standard_errors(mech)
    np.testing.assert_allclose(se[[0, 3]], prefix_se[[2**20 - 2, 0]], rtol=1e-9)
    # a single bin: Var = identity-workload variance (error.tree, independent formula)
    ident = dp.expected_error(workloads.identity(2**20), mech, "blue", per_query=True)
    assert math.isclose(se[1] ** 2, ident[5], rel_tol=1e-9)
    # covering: prefixes equal the covering variances; one leaf = C_6 - C_5
    cov_se = queries.range_standard_errors(mech, a, b, "covering")
    cov_prefix = dp.covering_variances(mech)
    assert math.isclose(cov_se[0] ** 2, cov_prefix[2**20 - 2], rel_tol=1e-12)
    # bin 5 = C_6 - C_5: coverings share nothing below the root's first child at levels 1..4
    # (digits of 5 and 6 in base 16 are 0,0,0,0,5 and 0,0,0,0,6): 5 + 6 leaves, 5 shared
    v_leaf = mech.level_variances[5]
    assert math.isclose(cov_se[1] ** 2, v_leaf * (5 + 6 - 2 * 5), rel_tol=1e-12)


# ----------------------------------------------------------------------------- critical values
def test_critical_values():
    z = queries.critical_value(0.95)
    assert math.isclose(z, 1.959963984540054, rel_tol=1e-12)
    bon = queries.critical_value(0.95, "bonferroni", 100)
    sid = queries.critical_value(0.95, "sidak", 100)
    assert math.isclose(2 * norm.sf(bon) * 100, 0.05, rel_tol=1e-9)  # union bound exact
    assert math.isclose((1 - 2 * norm.sf(sid)) ** 100, 0.95, rel_tol=1e-9)  # Sidak product
    assert z < sid < bon
    assert queries.critical_value(0.9, "sidak", 1) == queries.critical_value(0.9)
    with pytest.raises(ValueError, match="level"):
        queries.critical_value(1.5)
    with pytest.raises(ValueError, match="method"):
        queries.critical_value(0.9, "scheffe")
    with pytest.raises(ValueError, match="n_queries"):
        queries.critical_value(0.9, "sidak", 0)


def test_band_and_envelope_shapes():
    est = np.array([1.0, 0.5, 3.2, 4.0])
    se = np.array([1.0, 1.0, 0.5, 0.0])
    lo, up = queries.confidence_band(est, se, 0.95, critical=2.0)
    np.testing.assert_array_equal(lo, est - 2 * se)
    np.testing.assert_array_equal(up, est + 2 * se)
    elo, eup = queries.monotone_envelope(lo, up, total=4)
    # by hand: cummax(max(lo, 0)) = (0, 0, 2.2, 4) -> ceil; revcummin(up) = (2.5, 2.5, 4, 4)
    np.testing.assert_array_equal(elo, [0, 0, 3, 4])
    np.testing.assert_array_equal(eup, [2, 2, 4, 4])
    with pytest.raises(ValueError, match="standard_errors"):
        queries.confidence_band(est, se[:3])
    with pytest.raises(ValueError, match="critical"):
        queries.confidence_band(est, se, critical=[1.0, 2.0])


# ----------------------------------------------------------------------------- coverage (MC)
LEVEL = 0.95
DRAWS = 2000


def _binomial_bound(p, *ns):
    """4 binomial standard errors of a coverage estimate (sum of variances over samples)."""
    return 4 * math.sqrt(p * (1 - p) * sum(1 / n for n in ns))


def _simulate(mech, h, draws, seed):
    rng = np.random.default_rng(seed)
    y = mech.released.apply(h) + mech.sample_noise(rng, size=draws)
    return queries.estimate_cdf(mech, y), np.cumsum(h)


def test_gaussian_bands_cover_at_nominal_rate():
    """Gaussian noise: the estimate is exactly normal, so pointwise coverage is 0.95 at every
    t and the Sidak / Bonferroni bands cover all t at least 0.95 of the time. Bound: 4 binomial
    SE at 2000 draws (0.0195)."""
    mech = dp.Mechanism(S.tree(64, [4, 4, 4]), rho=1.0, noise="gaussian", neighbours="swap")
    h = np.random.default_rng(0).poisson(5, 64)
    raw, truth = _simulate(mech, h, DRAWS, 1)
    se = queries.cdf_standard_errors(mech)
    bound = _binomial_bound(LEVEL, DRAWS)
    lo, up = queries.confidence_band(raw[0], se, LEVEL)  # shape check on one draw
    assert lo.shape == up.shape == (64,)
    z = queries.critical_value(LEVEL)
    inside = np.abs(raw - truth) <= z * se + 1e-9  # C_K = N up to rounding
    for t in (0, 21, 42, 62):
        assert abs(inside[:, t].mean() - LEVEL) <= bound, t
    assert inside[:, 63].all()  # C_K = N exactly (se 0)
    for method in ("sidak", "bonferroni"):
        c = queries.critical_value(LEVEL, method, 63)
        cover = np.all(np.abs(raw - truth) <= c * se + 1e-9, axis=1)
        assert cover.mean() >= LEVEL - bound, method
        # the monotone envelope keeps every covering draw covering
        for i in np.flatnonzero(cover)[:200]:
            elo, eup = queries.monotone_envelope(raw[i] - c * se, raw[i] + c * se, total=h.sum())
            assert np.all((elo <= truth) & (truth <= eup))


def test_laplace_normal_band_undercovers_a_single_laplace_prefix():
    """Histogram mechanism, add/remove, no public total: the BLUE is y itself and C_1 = h_1 +
    Lap(b); the normal 95% interval covers with probability 1 - exp(-1.95996 sqrt 2) = 0.93746
    (Laplace tail), not 0.95. The simulated critical value restores 0.95."""
    mech = dp.Mechanism(S.histogram(16), epsilon=1.0, neighbours="add_remove")
    h = np.random.default_rng(2).poisson(5, 16)
    raw, truth = _simulate(mech, h, DRAWS, 3)
    se = queries.cdf_standard_errors(mech)
    exact = 1 - math.exp(-queries.critical_value(LEVEL) * math.sqrt(2))
    assert math.isclose(exact, 0.93746, abs_tol=1e-5)
    z = queries.critical_value(LEVEL)
    assert abs(np.mean(np.abs(raw[:, 0] - truth[0]) <= z * se[0]) - exact) <= \
        _binomial_bound(exact, DRAWS)
    crit = queries.simulated_critical_value(mech, LEVEL, simultaneous=False, draws=4000,
                                            rng=np.random.default_rng(4))
    cover = np.abs(raw[:, 0] - truth[0]) <= crit[0] * se[0]
    assert abs(cover.mean() - LEVEL) <= _binomial_bound(LEVEL, DRAWS, 4000)


def test_laplace_simulated_simultaneous_band_covers():
    """Laplace noise on a tree: the max-|Z| critical value simulated from 4000 independent
    draws gives simultaneous coverage within 4 SE of 0.95 (bound combines the 2000 test draws
    and the 4000 calibration draws)."""
    mech = dp.Mechanism(S.tree(64, [8, 8]), epsilon=1.0)
    h = np.random.default_rng(5).poisson(5, 64)
    raw, truth = _simulate(mech, h, DRAWS, 6)
    se = queries.cdf_standard_errors(mech)
    crit = queries.simulated_critical_value(mech, LEVEL, draws=4000,
                                            rng=np.random.default_rng(7))
    cover = np.all(np.abs(raw - truth) <= crit * se + 1e-9, axis=1)
    assert abs(cover.mean() - LEVEL) <= _binomial_bound(LEVEL, DRAWS, 4000)
    # covering estimator too (its own se and noise path)
    raw_c = queries.estimate_cdf(mech, mech.released.apply(h) + mech.sample_noise(
        np.random.default_rng(8), size=DRAWS))
    assert raw_c.shape == (DRAWS, 64)


def test_simulated_critical_value_bad_input():
    mech = dp.Mechanism(S.tree(16, [4, 4]), epsilon=1.0)
    with pytest.raises(ValueError, match="draws"):
        queries.simulated_critical_value(mech, draws=5)
    with pytest.raises(ValueError, match="estimator"):
        queries.simulated_critical_value(mech, estimator="ols")
    with pytest.raises(ValueError, match="mechanism"):
        queries.simulated_critical_value("tree")
    with pytest.raises(ValueError, match="standard_errors"):
        queries.simulated_critical_value(mech, standard_errors=np.ones(17))  # > K' = 16


def test_simulated_critical_value_on_the_real_prefixes_of_a_padded_tree():
    """A release pads K = 13 bins to a (4, 4) tree over K' = 16 and keeps 13 prefixes: the
    critical value uses those 13 only. Simultaneous coverage of the first 13 prefixes from
    2000 fresh draws is within 4 SE of 0.95 (bound combines the 2000 test draws and the 4000
    calibration draws); pointwise values come one per real prefix."""
    mech = dp.Mechanism(S.tree(16, [4, 4]), epsilon=1.0, neighbours="add_remove")
    k = 13
    h = np.zeros(16, dtype=np.int64)
    h[:k] = np.random.default_rng(9).poisson(3, k)
    se = queries.cdf_standard_errors(mech)[:k]
    crit = queries.simulated_critical_value(mech, LEVEL, draws=4000, standard_errors=se,
                                            rng=np.random.default_rng(10))
    raw, truth = _simulate(mech, h, DRAWS, 11)
    cover = np.all(np.abs(raw[:, :k] - truth[:k]) <= crit * se + 1e-9, axis=1)
    assert abs(cover.mean() - LEVEL) <= _binomial_bound(LEVEL, DRAWS, 4000)
    per = queries.simulated_critical_value(mech, LEVEL, simultaneous=False, draws=200,
                                           standard_errors=se, rng=np.random.default_rng(1))
    assert per.shape == (k,)
