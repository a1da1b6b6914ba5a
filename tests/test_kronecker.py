"""Kronecker strategies (strategies.kron): products, level codes and exact sensitivities
against np.kron of the factors' dense matrices and a brute force over neighbouring datasets."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dptree_opt import Mechanism, expected_error, strategies, workloads
from dptree_opt.strategies import kron
from dptree_opt.strategies.base import Strategy

from oracles import brute_loss


def _dense_kron(factors):
    out = np.ones((1, 1))
    for f in factors:
        out = np.kron(out, f.matrix.toarray())
    return out


@st.composite
def factor(draw):
    kind = draw(st.sampled_from(["tree", "hist", "prefix", "haar", "toeplitz", "random01",
                                 "randomreal"]))
    if kind == "tree":
        br = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
        return strategies.tree(int(np.prod(br)), br)
    n = draw(st.integers(1, 4))
    if kind == "hist":
        return strategies.histogram(n)
    if kind == "prefix":
        return strategies.prefix_sums(n)
    if kind == "haar":
        return strategies.haar(draw(st.sampled_from([1, 2, 4])))
    if kind == "toeplitz":
        a = draw(st.lists(st.floats(-2, 2).filter(lambda v: abs(v) > 0.1), min_size=n,
                          max_size=n))
        return strategies.toeplitz(a)
    m = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    if kind == "random01":
        mat = (rng.random((m, n)) < 0.6).astype(float)
    else:
        mat = rng.normal(size=(m, n)) * (rng.random((m, n)) < 0.7)
    if not np.any(mat):
        mat[0, 0] = 1.0
    levels = rng.integers(1, 3, size=m)
    return Strategy(mat, levels)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(factor(), min_size=1, max_size=3), st.integers(0, 2**31), st.booleans())
def test_kron_matches_dense_and_brute_force(factors, seed, total):
    k = kron(*factors)
    if total:
        k = k.with_total_row()
    dense = _dense_kron(factors)
    if total:
        dense = np.vstack([dense, np.ones((1, dense.shape[1]))])
    rng = np.random.default_rng(seed)
    assert k.n_bins == dense.shape[1] and k.n_rows == dense.shape[0]
    np.testing.assert_allclose(k.matrix.toarray(), dense, atol=1e-12)
    x = rng.normal(size=(k.n_bins, 2))
    u = rng.normal(size=(k.n_rows, 2))
    np.testing.assert_allclose(k.apply(x), dense @ x, atol=1e-10)
    np.testing.assert_allclose(k.rmatvec(u), dense.T @ u, atol=1e-10)
    np.testing.assert_allclose(k.gram_matvec(x[:, 0]), dense.T @ dense @ x[:, 0], atol=1e-9)
    # level codes: mixed radix of the factors' levels, row by row as np.kron orders them
    lv = np.zeros(1, dtype=int)
    radix = [int(f.levels.max()) + 1 for f in factors]
    for f, r in zip(factors, radix):
        lv = (lv[:, None] * r + f.levels[None, :]).ravel()
    lv = np.concatenate([lv, np.zeros(int(total), dtype=int)])
    np.testing.assert_array_equal(k.levels, lv)
    for code in np.unique(lv):
        assert k.level_tuple(int(code)) == tuple(
            int(code) // int(np.prod(radix[i + 1:])) % radix[i] for i in range(len(radix)))
    np.testing.assert_array_equal(k.total_row_mask(), np.all(dense == 1.0, axis=1))
    if k.n_bins > 12:
        return  # the brute force below enumerates every dataset of <= 2 records
    w = rng.uniform(0.2, 2.0, size=int(lv.max()) + 1)[lv]
    for model in ("swap", "add_remove"):
        for p in (1, 2):
            want = brute_loss(dense, w, model, p)
            assert k.sensitivity(w, model, p) == pytest.approx(want, rel=1e-9, abs=1e-12)
            code = int(rng.choice(np.unique(lv)))
            want = brute_loss(dense, (lv == code).astype(float), model, p)
            assert k.level_sensitivity(code, model, p) == pytest.approx(want, rel=1e-9,
                                                                         abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=2), min_size=2, max_size=2),
       st.integers(0, 2**31))
def test_kron_of_trees_sensitivity_equals_generic(branchings, seed):
    """Larger grids (up to 256 cells): the structured sensitivity = the generic matrix one,
    under every calibration weight (not only products over axes)."""
    k = kron(*[strategies.tree(int(np.prod(b)), b) for b in branchings])
    generic = Strategy(k.matrix, k.levels)
    w = np.random.default_rng(seed).uniform(0.1, 3.0, size=int(k.levels.max()) + 1)[k.levels]
    for model in ("swap", "add_remove"):
        for p in (1, 2):
            assert k.sensitivity(w, model, p) == pytest.approx(
                generic.sensitivity(w, model, p), rel=1e-12)


def test_kron_tree_sensitivities_closed_form():
    """A product of level-uniform trees: every cell lies in one node per pair of levels, so
    the add/remove loss of equal weights is (h1 + 1)(h2 + 1) (L1) and its square root (L2);
    under swap it follows from the two cells' LCA depths (below)."""
    h = 5
    k = kron(strategies.binary_tree(2**h), strategies.binary_tree(2**h))
    w = np.ones(k.n_rows)
    levels = (h + 1) ** 2
    assert k.sensitivity(w, "add_remove", 1) == pytest.approx(levels)
    assert k.sensitivity(w, "add_remove", 2) == pytest.approx(np.sqrt(levels))
    # swap: two cells whose LCA depths are (d1, d2) share the rows of level pairs
    # (l1 <= d1, l2 <= d2): |A_c - A_c'|_1 = 2 (levels - (d1 + 1)(d2 + 1)), maximal at
    # d1 = d2 = 0 (only the root pair shared) -> 2 (levels - 1)
    assert k.sensitivity(w, "swap", 1) == pytest.approx(2 * (levels - 1))
    assert k.sensitivity(w, "swap", 2) == pytest.approx(np.sqrt(2 * (levels - 1)))


def test_kron_mechanism_and_error_match_generic():
    """A Mechanism on kron(tree, tree) calibrates as on the generic matrix and its GLS error
    (dense path) is the same."""
    k = kron(strategies.tree(8, [2, 4]), strategies.binary_tree(4))
    g = Strategy(k.matrix, k.levels)
    for model in ("swap", "add_remove"):
        for noise, budget in (("laplace", {"epsilon": 1.0}), ("gaussian", {"rho": 0.5})):
            m = Mechanism(k, noise=noise, neighbours=model, **budget)
            mg = Mechanism(g, noise=noise, neighbours=model, **budget)
            np.testing.assert_allclose(m.variances, mg.variances, rtol=1e-12)
            assert m.requested_budget == mg.requested_budget
            w = workloads.prefix(k.n_bins)
            assert expected_error(w, m) == pytest.approx(expected_error(w, mg), rel=1e-10)


def test_kron_bad_input():
    with pytest.raises(ValueError, match="at least one factor"):
        kron()
    with pytest.raises(ValueError, match="Strategy objects"):
        kron(strategies.histogram(3), np.eye(3))
    big = kron(strategies.histogram(128), strategies.histogram(128))
    with pytest.raises(ValueError, match="refused"):
        big.matrix
    with pytest.raises(ValueError, match="rows"):
        big.apply(np.ones(5))
    with pytest.raises(ValueError, match="rows"):
        big.rmatvec(np.ones(5))
    # L1 swap with signed factors needs the explicit matrix: refused above 8192 cells
    signed = kron(strategies.haar(128), strategies.haar(128))
    code = signed.levels.max()  # Haar rows are level 1 on both axes: code 1 * 2 + 1
    assert code == 3 and signed.level_tuple(code) == (1, 1)
    with pytest.raises(ValueError, match="refused"):
        signed.level_sensitivity(code, "swap", 1)
    # ... while L2 and add/remove stay structured at that size: a Haar column has 1 + log2 n
    # entries +-1 (the product: 8 x 8), and the L2 swap loss is the product rule's
    # sqrt(|a|^2 |b|^2 + |c|^2 |d|^2 - 2 (a.c)(b.d)), maximal for columns on opposite sides
    # of both roots: a.c = 1 (total row) - 1 (root row) + 0 (deeper rows disjoint) = 0 on
    # each axis, so sqrt(64 + 64) = 8 sqrt(2)
    assert signed.level_sensitivity(code, "add_remove", 1) == pytest.approx(8.0 * 8.0)
    assert signed.level_sensitivity(code, "add_remove", 2) == pytest.approx(8.0)
    assert signed.level_sensitivity(code, "swap", 2) == pytest.approx(np.sqrt(2.0) * 8.0)


def test_kron_large_grid_without_matrix():
    """1024 x 1024 cells: calibration needs no matrix (only per-axis profiles)."""
    k = kron(strategies.binary_tree(1024), strategies.binary_tree(1024))
    m = Mechanism(k, epsilon=1.0, neighbours="add_remove")
    assert m.epsilon == pytest.approx(1.0)
    # 121 level pairs, each cell in one node of each: equal split gives scale 121 everywhere
    np.testing.assert_allclose(m.scales, 121.0)
    x = np.zeros(k.n_bins)
    x[5] = 1.0
    y = k.apply(x)
    assert y.shape == (k.n_rows,) and y.sum() == pytest.approx(121.0)
