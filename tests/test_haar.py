"""Privelet's Haar strategy: layout from its definition, sensitivities by brute force over
neighbouring datasets, closed-form sensitivities, and the BLUE against a dense computation."""

import itertools

import numpy as np
import pytest

from dptree_opt import Mechanism, blue, blue_covariance, expected_error, workloads
from dptree_opt.strategies import haar
from dptree_opt.strategies.haar import haar_matrix, haar_sensitivity
from oracles import brute_loss


def haar_by_definition(n):
    """Privelet's weighted coefficients: W(c) * c for c_0 = mean (W = n) and each node's
    c = (mean(left) - mean(right)) / 2 (W = |subtree|), built from the averages."""
    rows = [np.ones(n)]  # n * mean
    width = n
    while width > 1:
        for start in range(0, n, width):
            half = width // 2
            r = np.zeros(n)
            r[start:start + half] = 1.0 / half  # mean of the left half
            r[start + half:start + width] = -1.0 / half
            rows.append(width * r / 2.0)
        width //= 2
    return np.array(rows)


def brute_sensitivity(a, weights, model, p):
    """max over datasets of <= 2 records and their neighbours of ||diag(w) A (h - h')||_p."""
    return brute_loss(np.asarray(a, dtype=float), np.asarray(weights, dtype=float), model, p)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_layout_is_privelet_weighted_transform(n):
    np.testing.assert_allclose(haar_matrix(n).toarray(), haar_by_definition(n), atol=1e-15)
    assert haar(n).n_rows == n and np.all(haar(n).levels == 1)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("model", ["swap", "add_remove"])
@pytest.mark.parametrize("p", [1, 2])
def test_sensitivity_brute_force_and_closed_form(n, model, p):
    strat = haar(n)
    a = strat.matrix.toarray()
    ones = np.ones(strat.n_rows)
    got = strat.sensitivity(ones, model, p)
    assert got == pytest.approx(brute_sensitivity(a, ones, model, p), rel=1e-12)
    assert got == pytest.approx(haar_sensitivity(n, model, p), rel=1e-12)
    w = np.random.default_rng(n).random(strat.n_rows)  # arbitrary row weights
    assert strat.sensitivity(w, model, p) == pytest.approx(brute_sensitivity(a, w, model, p),
                                                           rel=1e-12)


@pytest.mark.parametrize("n", [3, 5, 6, 7])
def test_padding_not_power_of_two(n):
    strat = haar(n)
    big = haar_by_definition(1 << (n - 1).bit_length())[:, :n]
    kept = big[np.any(big != 0, axis=1)]
    np.testing.assert_array_equal(strat.matrix.toarray(), kept)
    assert np.linalg.matrix_rank(kept) == n
    for model, p in itertools.product(["swap", "add_remove"], [1, 2]):
        ones = np.ones(strat.n_rows)
        assert strat.sensitivity(ones, model, p) == pytest.approx(
            brute_sensitivity(kept, ones, model, p), rel=1e-12)


def test_haar_sensitivity_large_n_generic_equals_closed_form():
    strat = haar(1024)
    ones = np.ones(strat.n_rows)
    for model, p in itertools.product(["swap", "add_remove"], [1, 2]):
        assert strat.sensitivity(ones, model, p) == pytest.approx(
            haar_sensitivity(1024, model, p), rel=1e-12)


@pytest.mark.parametrize("noise,budget", [("laplace", {"epsilon": 1.0}),
                                          ("gaussian", {"rho": 0.5})])
@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_blue_matches_dense_gls(noise, budget, neighbours):
    n = 16
    mech = Mechanism(haar(n), noise=noise, neighbours=neighbours, **budget)
    a = mech.released.matrix.toarray()
    v = mech.variances
    noisy = v > 0
    # dense GLS by hand: minimise weighted residual with the exact rows as constraints
    an, vn = a[noisy], v[noisy]
    m = an.T @ (an / vn[:, None])
    e = a[~noisy]
    kkt = np.block([[m, e.T], [e, np.zeros((e.shape[0], e.shape[0]))]])
    rng = np.random.default_rng(3)
    h = rng.poisson(5, n)
    y = mech.measure(h, rng)
    rhs = np.concatenate([an.T @ (y[noisy] / vn), y[~noisy]])
    x_dense = np.linalg.solve(kkt, rhs)[:n]
    np.testing.assert_allclose(blue(mech, y), x_dense, rtol=1e-9, atol=1e-9)
    cov = np.linalg.inv(kkt)[:n, :n]
    np.testing.assert_allclose(blue_covariance(mech), cov, rtol=1e-9, atol=1e-12)
    w = workloads.prefix(n).dense()
    assert expected_error(workloads.prefix(n), mech) == pytest.approx(
        np.trace(w @ cov @ w.T), rel=1e-9)


def test_privelet_variance_of_a_prefix():
    # add/remove, Laplace eps: every weighted coefficient gets Lap((1 + log2 n)/eps), A square
    # and invertible -> Cov = 2 ((1 + L)/eps)^2 (A'A)^-1 ([XWG] Sec. IV)
    n, eps = 32, 0.7
    mech = Mechanism(haar(n), epsilon=eps, neighbours="add_remove")
    a = haar_by_definition(n)
    cov = 2.0 * ((1 + 5) / eps) ** 2 * np.linalg.inv(a.T @ a)
    np.testing.assert_allclose(blue_covariance(mech), cov, rtol=1e-9, atol=1e-12)


def test_bad_n():
    with pytest.raises(ValueError, match="n"):
        haar(0)
    with pytest.raises(ValueError, match="power of two"):
        haar_sensitivity(6, "swap", 1)
