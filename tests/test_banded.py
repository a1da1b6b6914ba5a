"""Banded lower-triangular strategies (``strategies.banded``) and their engine.

Oracles: the textbook GLS of ``tests/oracles.py`` (``constrained_gls``) and workload
matrices written here from their definitions; sensitivities by brute force over
neighbouring datasets (``oracles.brute_loss``) and column norms by hand; the banded square
root's published numbers (docs/math.md section 11); the Toeplitz engine (FFT power-series
inverse, an independent algorithm) on the same truncated coefficients.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import brute_loss, constrained_gls

import dptree_opt as d
from dptree_opt import Mechanism, engines
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.engines import banded as banded_engine
from oracles import dense_1d_workload

KINDS = ("prefix", "identity", "total", "all_range")
RTOL = 1e-9


# ------------------------------------------------------------------------------ helpers
def random_banded(rng, n: int, bands: int) -> np.ndarray:
    """A dense, well-conditioned banded lower-triangular matrix (row diagonally dominant:
    the inverse stays small, so a 1e-9 comparison is meaningful)."""
    m = np.zeros((n, n))
    for k in range(1, bands):
        m[np.arange(k, n), np.arange(n - k)] = rng.uniform(-1.0, 1.0, n - k) / bands
    m[np.diag_indices(n)] = rng.uniform(1.0, 2.0, n) * rng.choice([-1.0, 1.0], n)
    return m


def mechanism(strategy, rng, per_row: bool = False) -> Mechanism:
    """Add/remove (N private: no total row), Laplace or Gaussian, one scale or budgets per
    row."""
    noise = "laplace" if rng.random() < 0.5 else "gaussian"
    budget = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    if per_row:  # per-row budgets summing to at most the total on every column
        share = rng.uniform(0.2, 1.0, strategy.n_rows)
        budget["row_budgets"] = share / share.sum() * next(iter(budget.values()))
    return Mechanism(strategy, noise=noise, neighbours="add_remove", **budget)


# ------------------------------------------------------------------------- the strategy
def test_coefficients_give_the_truncated_toeplitz_matrix():
    a = np.array([2.0, -1.0, 0.5, 0.25, 7.0])
    s = S.banded(a, 3, n=6)
    expected = np.zeros((6, 6))
    for i in range(6):
        for j in range(max(0, i - 2), i + 1):
            expected[i, j] = a[i - j]
    assert isinstance(s, S.BandedStrategy)
    np.testing.assert_array_equal(s.matrix.toarray(), expected)
    assert s.bands == 3 and s.diagonals.shape == (6, 3)
    np.testing.assert_array_equal(s.diagonals[4], [2.0, -1.0, 0.5])
    np.testing.assert_array_equal(s.diagonals[0], [2.0, 0.0, 0.0])  # left of column 0
    assert np.all(s.levels == 1)
    assert S.banded(a, 2).n_bins == 5  # n defaults to len(coefs)


def test_matrix_input_drops_the_entries_below_the_band():
    rng = np.random.default_rng(0)
    m = np.tril(rng.normal(size=(7, 7)))
    m[np.diag_indices(7)] = 1.5
    for bands in (1, 3, 7):
        expected = np.where(np.subtract.outer(np.arange(7), np.arange(7)) < bands, m, 0.0)
        dense = S.banded(m, bands)
        sparse = S.banded(sp.csr_matrix(m), bands)
        np.testing.assert_array_equal(dense.matrix.toarray(), expected)
        np.testing.assert_array_equal(sparse.matrix.toarray(), expected)
        np.testing.assert_array_equal(sparse.diagonals, dense.diagonals)


@pytest.mark.parametrize("args, match", [
    ((np.ones(4), 0), "bands must be in \\[1, 4\\]"),
    ((np.ones(4), 5), "bands must be in \\[1, 4\\]"),
    ((np.ones(4), 2.0), "bands must be an integer"),
    ((np.ones(4), True), "bands must be an integer"),
    ((np.ones(4), 3, 2), "bands must be in \\[1, 2\\]"),
    ((np.ones(4), 2, 0), "n must be >= 1"),
    ((np.ones(4), 2, 3.5), "n must be an integer"),
    ((np.ones(2), 3, 5), "bands = 3 is more than the 2 coefficients"),
    ((np.array([]), 1), "coefficient vector is empty"),
    ((np.array([0.0, 1.0]), 2), "coefs_or_matrix\\[0\\] \\(the diagonal\\) is zero"),
    ((np.array([1.0, np.nan, 1.0]), 3), "coefs_or_matrix\\[1\\] is not finite"),
    ((np.ones((2, 2, 2)), 1), "1-D \\(coefficients\\) or 2-D"),
    ((np.ones((2, 3)), 1), "square \\(n, n\\) matrix"),
    ((np.eye(3), 2, 4), "n = 4 does not match the matrix's 3 rows"),
    ((np.array([[1.0, 0.0], [1.0, 0.0]]), 2), "diagonal entry \\(1, 1\\) is zero"),
    ((np.array([[1.0, 0.5], [1.0, 1.0]]), 2), "lower-triangular: entry \\(0, 1\\)"),
    ((np.array([[1.0, 0.0], [np.inf, 1.0]]), 1), "coefs_or_matrix\\[1, 0\\] is not finite"),
    ((sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0, 1, 0], [0, 0, 1]])), 3),
     "lower-triangular: entry \\(0, 2\\)"),
    ((sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 0.0]])), 1), "diagonal entry \\(1, 1\\)"),
    ((sp.csr_matrix(np.array([[1.0, 0.0], [np.nan, 1.0]])), 2), "\\[1, 0\\] is not finite"),
    (("abc", 1), "coefs_or_matrix must be"),
])
def test_bad_input_is_refused_with_the_parameter_named(args, match):
    with pytest.raises(ValueError, match=match):
        S.banded(*args)


def test_zero_below_the_band_is_not_needed_but_a_zero_diagonal_inside_is_refused():
    # a zero diagonal entry beyond the kept band is still the diagonal: refused (index 2)
    m = np.eye(4)
    m[2, 2] = 0.0
    with pytest.raises(ValueError, match="diagonal entry \\(2, 2\\) is zero"):
        S.banded(m, 1)
    with pytest.raises(ValueError, match="non-finite entry at \\(3, 1\\)"):
        S.BandedStrategy(np.array([[1.0, 0], [1, 0], [1, 0], [1, np.nan]]))
    with pytest.raises(ValueError, match="shape \\(n, bands\\)"):
        S.BandedStrategy(np.ones((2, 3)))


def test_size_is_limited_before_the_band_is_allocated():
    # 10^13 bins x 2 bands would be 8e14 bytes: refused by arithmetic, nothing allocated
    with pytest.raises(ValueError, match="a banded strategy over 10000000000000 bins with 2 "
                                         "bands would need about"):
        S.banded(np.ones(2), 2, n=10**13)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.data())
def test_sensitivity_is_the_brute_force_over_neighbouring_datasets(n, data):
    bands = data.draw(st.integers(1, n))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    m = random_banded(rng, n, bands) * (rng.random((n, n)) < 0.8)
    m[np.diag_indices(n)] = rng.uniform(0.5, 2.0, n)
    s = S.banded(m, bands)
    w = rng.uniform(0.0, 2.0, n)
    total = s.with_total_row()  # the released rows of a public N: the band's swap search
    wt = np.append(w, rng.uniform(0.0, 2.0))
    mt = np.vstack([m, np.ones(n)])
    for neighbours in ("swap", "add_remove"):
        for p in (1, 2):
            assert s.sensitivity(w, neighbours, p) == pytest.approx(
                brute_loss(m, w, neighbours, p), rel=1e-12, abs=1e-12)
            assert total.sensitivity(wt, neighbours, p) == pytest.approx(
                brute_loss(mt, wt, neighbours, p), rel=1e-12, abs=1e-12)


def test_add_remove_sensitivity_is_the_largest_column_norm():
    m = np.array([[2.0, 0, 0, 0], [-3.0, 1.0, 0, 0], [0, 4.0, 1.0, 0], [0, 0, -1.0, 0.5]])
    s = S.banded(m, 2)
    # columns by hand: l1 = 5, 5, 2, 0.5; l2^2 = 13, 17, 2, 0.25
    assert s.sensitivity(np.ones(4), "add_remove", 1) == pytest.approx(5.0)
    assert s.sensitivity(np.ones(4), "add_remove", 2) == pytest.approx(np.sqrt(17.0))
    w = np.array([1.0, 1.0, 0.5, 1.0])  # column 1: 1 + 2 = 3 (l1), 1 + 4 = 5 (l2^2)
    assert s.sensitivity(w, "add_remove", 1) == pytest.approx(5.0)  # column 0 still 5
    assert s.sensitivity(w, "add_remove", 2) == pytest.approx(np.sqrt(13.0))
    # swap, columns 0 and 1: |2| + |-3 - 1| + |0 - 4| = 10; columns 0 and 3 (disjoint): 5.5
    assert s.sensitivity(np.ones(4), "swap", 1) == pytest.approx(10.0)


# --------------------------------------------------------------------------- the engine
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.data())
def test_blue_is_forward_substitution_and_the_gls(n, data):
    bands = data.draw(st.integers(1, n))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    m = random_banded(rng, n, bands)
    mech = mechanism(S.banded(m, bands), rng, per_row=data.draw(st.booleans()))
    assert engines.select("estimate", mech).name == "banded"
    y = rng.normal(0.0, 10.0, (3, n))
    x = d.blue(mech, y)
    np.testing.assert_allclose(x, np.linalg.solve(m, y.T).T, rtol=1e-12, atol=1e-12)
    coef, _, identified = constrained_gls(m, mech.variances, np.eye(n))
    assert identified.all()
    np.testing.assert_allclose(x[0], coef @ y[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(d.blue(mech, y[1]), x[1], rtol=0, atol=0)


def test_blue_refuses_bad_answers():
    mech = Mechanism(S.banded(np.ones(3), 2), epsilon=1.0, neighbours="add_remove")
    with pytest.raises(ValueError, match="y must have 3 entries"):
        d.blue(mech, np.ones(4))
    with pytest.raises(ValueError, match="NaN or infinite"):
        d.blue(mech, np.array([1.0, np.nan, 1.0]))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.data())
def test_exact_errors_are_the_gls_trace(n, data):
    bands = data.draw(st.integers(1, n))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    m = random_banded(rng, n, bands)
    mech = mechanism(S.banded(m, bands), rng, per_row=data.draw(st.booleans()))
    for kind in KINDS:
        wl = getattr(W, kind)(n)
        _, var, _ = constrained_gls(m, mech.variances, dense_1d_workload(kind, n))
        for task in ("error", "per_query"):
            assert engines.select(task, mech, wl).name == "banded"
        np.testing.assert_allclose(d.expected_error(wl, mech, per_query=True), var,
                                   rtol=RTOL, atol=0)
        assert d.expected_error(wl, mech) == pytest.approx(var.sum(), rel=RTOL)


@pytest.mark.parametrize("n, bands", [(40, 1), (40, 3), (70, 33), (90, 90), (100, 18)])
def test_exact_errors_across_block_sizes(n, bands):
    """Sizes around the recursion's blocks (one block, a partial last block, b - 1 above
    the smallest block), against the dense GLS."""
    rng = np.random.default_rng(n + bands)
    m = random_banded(rng, n, bands)
    mech = mechanism(S.banded(m, bands), rng)
    for kind in KINDS:
        _, var, _ = constrained_gls(m, mech.variances, dense_1d_workload(kind, n))
        np.testing.assert_allclose(d.expected_error(getattr(W, kind)(n), mech, per_query=True),
                                   var, rtol=RTOL, atol=0)


def test_banded_toeplitz_errors_equal_the_toeplitz_engine():
    """The square-root coefficients truncated to 20 bands: as a BandedStrategy (block
    recursion) and as a ToeplitzStrategy (FFT power-series inverse) on the same matrix."""
    n, bands = 300, 20
    k = np.arange(1, n)
    c = np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])  # C(2k, k) / 4^k
    trunc = np.where(np.arange(n) < bands, c, 0.0)
    band = Mechanism(S.banded(c, bands), rho=1.0, neighbours="add_remove")
    toep = Mechanism(S.toeplitz(trunc), rho=1.0, neighbours="add_remove")
    assert band.variances[0] == pytest.approx(toep.variances[0], rel=1e-12)
    for kind in KINDS:
        wl = getattr(W, kind)(n)
        assert engines.select("per_query", band, wl).name == "banded"
        assert engines.select("per_query", toep, wl).name == "toeplitz"
        np.testing.assert_allclose(d.expected_error(wl, band, per_query=True),
                                   d.expected_error(wl, toep, per_query=True), rtol=1e-9)
    for neighbours in ("swap", "add_remove"):
        for p in (1, 2):
            assert band.strategy.sensitivity(np.ones(n), neighbours, p) == pytest.approx(
                toep.strategy.sensitivity(np.ones(n), neighbours, p), rel=1e-12)


def _sqrt_coefficients(n):
    k = np.arange(1, n)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])


def test_banded_square_root_reproduces_the_published_numbers():
    """docs/math.md section 11 (verified by dense numpy): n = 2052, fixed-epoch k = 6,
    b = 342, banded square root on C: sens^2 17.5399 and loss 80.6074 = sens^2 x the mean
    prefix error per unit noise. Columns 342 apart are disjoint, so sens^2 is 6 x the
    squared norm of column 0 (the add/remove l2 sensitivity)."""
    n, bands = 2052, 342
    s = S.banded(_sqrt_coefficients(n), bands)
    sens2 = 6 * s.sensitivity(np.ones(n), "add_remove", 2) ** 2
    assert sens2 == pytest.approx(17.5399, abs=6e-5)
    mech = Mechanism(s, rho=1.0, neighbours="add_remove")
    mean = d.expected_error(W.prefix(n), mech) / mech.variances[0] / n
    assert mean * sens2 == pytest.approx(80.6074, abs=6e-5)


@pytest.mark.slow
def test_full_square_root_reproduces_the_published_mean_error():
    """docs/math.md section 11: the square root (all n bands) at n = 2052 has mean prefix
    error 3.17600 per unit noise."""
    n = 2052
    mech = Mechanism(S.banded(_sqrt_coefficients(n), n), rho=1.0, neighbours="add_remove")
    mean = d.expected_error(W.prefix(n), mech) / mech.variances[0] / n
    assert mean == pytest.approx(3.17600, abs=6e-6)


def test_a_total_row_hands_the_mechanism_to_the_generic_engine():
    """With a public N (swap, or add/remove with public_total) the mechanism releases an
    extra total row: not the banded engine's; the dense GLS serves it (and it is better)."""
    n = 12
    rng = np.random.default_rng(5)
    m = random_banded(rng, n, 3)
    for kwargs in ({"neighbours": "swap"}, {"neighbours": "add_remove", "public_total": True}):
        mech = Mechanism(S.banded(m, 3), epsilon=1.0, **kwargs)
        assert mech.released.n_rows == n + 1
        assert not isinstance(mech.released, S.BandedStrategy)
        assert engines.select("error", mech, W.prefix(n)).name == "dense"
        _, var, _ = constrained_gls(mech.released.matrix.toarray(), mech.variances,
                                    dense_1d_workload("prefix", n))
        assert d.expected_error(W.prefix(n), mech) == pytest.approx(var.sum(), rel=RTOL)


@pytest.mark.parametrize("kind", ["prefix", "identity", "all_range"])
def test_causal_blue_of_a_banded_strategy_is_the_offline_one(kind):
    """A lower-triangular strategy completes one row per step, so the causal BLUE equals
    the offline BLUE (the triangular engine, delegating to this one), checked against the
    dense causal filter."""
    n = 15
    rng = np.random.default_rng(7)
    m = random_banded(rng, n, 4)
    mech = mechanism(S.banded(m, 4), rng)
    wl = getattr(W, kind)(n)
    assert engines.select("per_query", mech, wl, "causal").name == "triangular"
    causal = d.expected_error(wl, mech, estimator="causal", per_query=True)
    dense = d.expected_error(wl, mech, estimator="causal", per_query=True, method="dense")
    _, offline, _ = constrained_gls(m, mech.variances, dense_1d_workload(kind, n))
    np.testing.assert_allclose(causal, dense, rtol=RTOL)
    np.testing.assert_allclose(causal, offline, rtol=RTOL)


def test_requests_above_the_limits_are_refused_so_the_registry_moves_on(monkeypatch):
    engine = engines.engine_named("banded")
    big = Mechanism(S.banded(np.ones(1), 1, n=14142), epsilon=1.0, neighbours="add_remove")
    reason = engine.refusal("per_query", big, W.all_range(14142), "blue")
    assert "100005153 queries" in reason
    with pytest.raises(ValueError, match="banded: all_range\\(14142\\) has 100005153 queries"):
        d.expected_error(W.all_range(14142), big, per_query=True)
    assert engine.refusal("error", big, W.all_range(14142), "blue") is None
    n = 20
    rng = np.random.default_rng(3)
    m = random_banded(rng, n, 5)
    mech = mechanism(S.banded(m, 5), rng)
    monkeypatch.setattr(banded_engine, "MAX_BANDED_WORK", 100)
    assert "exact error costs about" in engine.refusal("error", mech, W.prefix(n), "blue")
    assert engines.select("error", mech, W.prefix(n)).name == "dense"
    _, var, _ = constrained_gls(m, mech.variances, dense_1d_workload("prefix", n))
    assert d.expected_error(W.prefix(n), mech) == pytest.approx(var.sum(), rel=RTOL)
