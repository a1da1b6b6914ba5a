"""Grid comparison (issue 15 items 2 and 6): single-scale Kronecker errors, grid-tree per-query
maxima, HDMM's Kronecker p-Identity, ektelo's 2-D plans and the 2-D SVD bound, each against
an independent computation (dense numpy GLS from np.kron matrices, brute force over
neighbouring histograms, transcriptions of ektelo's code, MATH.md / paper numbers)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import null_space

from dptree_opt import Mechanism, expected_error, optimize, strategies, workloads
from dptree_opt.cli import main
from dptree_opt.compare import (compare_grid, ektelo_hb2d_branchings, ektelo_hb_branching,
                                ektelo_quadtree_plan, grid_error_lower_bound,
                                grid_svd_bound, uniform_grid_noise, uniform_grid_side)
from dptree_opt.engines.kron_product import (kron_product_error, kron_product_max,
                                           kron_product_supports)
from dptree_opt.engines import base as engine_base
from dptree_opt.engines import kronecker as kronecker_engines
from dptree_opt.engines.kronecker import grid_tree_max, grid_tree_summary
from dptree_opt.strategies.base import Strategy
from dptree_opt.strategies.optimized import _SingleLevelKronecker

from oracles import brute_loss, constrained_gls, tree_matrix

KINDS = ("prefix", "identity", "total", "all_range")


# ------------------------------------------------------------------ independent oracles
def _one_d(kind, n):
    return getattr(workloads, kind)(n)


def _dense_w(kinds, dims) -> np.ndarray:
    """W = np.kron of the 1-D query matrices, built from the definitions (not the library)."""
    out = np.ones((1, 1))
    for kind, n in zip(kinds, dims):
        if kind == "prefix":
            m = np.tril(np.ones((n, n)))
        elif kind == "identity":
            m = np.eye(n)
        elif kind == "total":
            m = np.ones((1, n))
        else:  # all ranges [a, b], lexicographic
            m = np.array([[1.0 if a <= c <= b else 0.0 for c in range(n)]
                          for a in range(n) for b in range(a, n)])
        out = np.kron(out, m)
    return out


def _gls_cov(a: np.ndarray, var: np.ndarray):
    """Covariance of the (constrained) GLS from the dense rows and their noise variances:
    rows of variance 0 are equality constraints, inf rows are dropped. Returns (N, M^+) with
    Cov = N M^+ N' on x = x0 + N z, and M = N'A'V^-1 A N (for identifiability checks)."""
    exact = var == 0
    keep = np.isfinite(var) & ~exact
    n = a.shape[1]
    nb = null_space(a[exact]) if exact.any() else np.eye(n)
    an = a[keep] @ nb
    m = an.T @ (an / var[keep][:, None])
    return nb, m


def _dense_query_variances(a, var, wd):
    """(per-query variances, identifiable?) of the GLS for the dense workload wd: the textbook
    constrained GLS of tests/oracles.py (exact rows as equality constraints; the pseudo-inverse
    of the noisy rows' information missed exact rows that duplicate noisy ones)."""
    _, v, ok = constrained_gls(a, var, wd)
    return v, bool(ok.all())


def _released_dense(mech: Mechanism) -> np.ndarray:
    """The released rows as a dense matrix: np.kron of the factors' dense matrices (+ the
    appended all-ones total rows)."""
    strat = mech.released
    a = np.ones((1, 1))
    for f in strat.factors:
        a = np.kron(a, f.matrix.toarray())
    extra = mech.variances.size - a.shape[0]
    return np.vstack([a] + [np.ones((1, a.shape[1]))] * extra)


# ------------------------------------------------------------------ factor strategies
def _factor(kind: str, n: int, rng):
    if kind == "histogram":
        return strategies.histogram(n)
    if kind == "tree":
        return strategies.binary_tree(n) if n & (n - 1) == 0 else strategies.tree(n, [n])
    if kind == "prefix_sums":
        return strategies.prefix_sums(n)
    if kind == "coarse":  # root + blocks of 2, no leaves: rank-deficient when n > 2
        rows = [np.ones(n)] + [np.eye(n)[i:i + 2].sum(axis=0) for i in range(0, n, 2)]
        return Strategy(np.array(rows), name="coarse")
    if kind == "p_identity":
        theta = rng.random((2, n)) * (rng.random((2, n)) < 0.6)
        return strategies.p_identity(theta)
    # a dense random non-negative strategy
    return Strategy(rng.random((n + 1, n)) + 0.1, name="random")


FACTORS = ("histogram", "tree", "prefix_sums", "coarse", "p_identity", "random")


@settings(max_examples=60, deadline=None)
@given(dims=st.lists(st.integers(1, 5), min_size=2, max_size=3),
       facs=st.lists(st.sampled_from(FACTORS), min_size=3, max_size=3),
       kinds=st.lists(st.sampled_from(KINDS), min_size=3, max_size=3),
       noise=st.sampled_from(["laplace", "gaussian"]),
       neighbours=st.sampled_from(["add_remove", "swap"]),
       public=st.booleans(), extra_total=st.booleans(), seed=st.integers(0, 10**6))
def test_kron_product_error_equals_dense_gls(dims, facs, kinds, noise, neighbours, public,
                                              extra_total, seed):
    """Total and per-query errors and the per-query maximum of one-scale Kronecker
    mechanisms (any factors, N private / public / measured by an extra noisy total row)
    equal the dense constrained GLS; non-identified workloads are refused."""
    rng = np.random.default_rng(seed)
    d = len(dims)
    facs, kinds = facs[:d], kinds[:d]
    strat = strategies.kron(*[_factor(f, n, rng) for f, n in zip(facs, dims)])
    if extra_total:  # a noisy total row (add/remove, N private: same scale as the rest)
        strat = strat.with_total_row()
    kw = {"epsilon": 1.3} if noise == "laplace" else {"rho": 0.7}
    pub = True if (public and neighbours == "add_remove") else None
    try:
        mech = Mechanism(strat, noise=noise, neighbours=neighbours, public_total=pub, **kw)
    except ValueError:
        return  # e.g. a level whose rows cannot change under swap is not all-ones
    w = workloads.kron(*[_one_d(k, n) for k, n in zip(kinds, dims)])
    if not kron_product_supports(mech, w):
        return
    a = _released_dense(mech)
    want, ok = _dense_query_variances(a, np.asarray(mech.variances), _dense_w(kinds, dims))
    if not ok:
        with pytest.raises(ValueError):
            kron_product_error(mech, w)
        return
    try:
        got = expected_error(w, mech)
    except ValueError as exc:  # the one refusal allowed: a total outside a singular product
        assert "does not factorise" in str(exc)
        return
    assert got == pytest.approx(want.sum(), rel=1e-7, abs=1e-9)
    per = expected_error(w, mech, per_query=True)
    np.testing.assert_allclose(per, want, rtol=1e-7, atol=1e-9 * max(1.0, want.max()))
    mx = kron_product_max(mech, w)
    assert mx.variance == pytest.approx(want.max(), rel=1e-7, abs=1e-9)
    assert want[mx.query] == pytest.approx(want.max(), rel=1e-7, abs=1e-9)


def test_histogram_of_a_shape_is_the_flat_grid():
    h = strategies.histogram((3, 4))
    assert h.grid_shape == (3, 4) and np.array_equal(h.matrix.toarray(), np.eye(12))
    assert strategies.histogram((5,)).n_bins == 5 and strategies.histogram(5).n_rows == 5
    # flat grid on the CDF, add/remove, eps = 1: every dominance box [0,a]x[0,b] has variance
    # 2 (a + 1)(b + 1): the mean is 2 (mean a + 1)(mean b + 1)
    m = Mechanism(strategies.histogram((3, 4)), epsilon=1.0, neighbours="add_remove")
    assert expected_error(workloads.prefix((3, 4)), m) == pytest.approx(2 * 6 * 10)
    with pytest.raises(ValueError):
        strategies.histogram((3, 0))


def test_total_row_outside_a_singular_product_is_refused():
    """A noisy total on a product whose factor does not measure its axis total: the total
    adds a direction outside the product, so the error is not a product -> refused."""
    diff = Strategy(np.array([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]]), name="differences")
    strat = strategies.kron(diff, strategies.histogram(2)).with_total_row()
    mech = Mechanism(strat, rho=1.0, neighbours="add_remove")
    w = workloads.kron(workloads.identity(3), workloads.identity(2))
    with pytest.raises(ValueError, match="does not factorise"):
        kron_product_error(mech, w)


# ------------------------------------------------------------------ sensitivities
def _unit_sens(strat, neighbours, p):
    return strat.sensitivity(np.ones(strat.n_rows), neighbours, p)


@settings(max_examples=15, deadline=None)
@given(n1=st.integers(2, 3), n2=st.integers(1, 3), zero_col=st.booleans(),
       seed=st.integers(0, 10**6))
def test_unit_column_kronecker_sensitivities_equal_brute_force(n1, n2, zero_col, seed):
    """Kronecker products of p-Identity factors: both neighbour models, l1 and l2, against
    every neighbouring pair of histograms of <= 2 records (tests/oracles.py)."""
    rng = np.random.default_rng(seed)
    th1 = rng.random((1, n1)) + 0.05
    if zero_col:  # a pure-identity column: disjoint from every other column
        th1[:, 0] = 0.0
    th2 = rng.random((2, n2)) + 0.05
    strat = _SingleLevelKronecker([strategies.p_identity(th1), strategies.p_identity(th2)])
    a = strat.matrix.toarray()
    for neighbours, p in itertools.product(("add_remove", "swap"), (1, 2)):
        want = brute_loss(a, np.ones(a.shape[0]), neighbours, p)
        assert _unit_sens(strat, neighbours, p) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert (strat._unit_l1_swap is not None) == zero_col


@settings(max_examples=15, deadline=None)
@given(dims=st.lists(st.integers(1, 3), min_size=2, max_size=3), seed=st.integers(0, 10**6))
def test_single_level_kronecker_l2_swap_equals_brute_force(dims, seed):
    """Signed dense single-level factors (e.g. Gaussian optima): the hull-based l2 swap
    sensitivity (and add/remove) = brute force over neighbouring histograms."""
    rng = np.random.default_rng(seed)
    facs = [Strategy(rng.standard_normal((n + 1, n)), name="signed") for n in dims]
    strat = _SingleLevelKronecker(facs)
    a = strat.matrix.toarray()
    for neighbours in ("add_remove", "swap"):
        want = brute_loss(a, np.ones(a.shape[0]), neighbours, 2)
        assert _unit_sens(strat, neighbours, 2) == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_kron_gaussian_optimal_is_the_product_of_1d_optima():
    """Error = the dense GLS at sigma^2 = 1 (rho = 1/2, add/remove), = the product of the
    1-D optima's errors, and at least the product of their dual bounds."""
    from dptree_opt.strategies.optimized import gaussian_optimal

    w = workloads.kron(workloads.prefix(5), workloads.all_range(4))
    opt = strategies.kron_gaussian_optimal(w)
    g1, g2 = gaussian_optimal(workloads.prefix(5)), gaussian_optimal(workloads.all_range(4))
    assert opt.error == pytest.approx(g1.error * g2.error, rel=1e-12)
    assert opt.lower_bound <= opt.error
    mech = Mechanism(opt.strategy, rho=0.5, neighbours="add_remove")
    want, _ = _dense_query_variances(opt.strategy.matrix.toarray(), np.asarray(mech.variances),
                                     _dense_w(["prefix", "all_range"], [5, 4]))
    assert opt.error == pytest.approx(want.sum(), rel=1e-8)
    assert expected_error(w, mech) == pytest.approx(want.sum(), rel=1e-9)


def test_kron_p_identity_is_the_product_of_1d_p_identities_and_calibrated():
    """kron_p_identity = per-axis laplace_p_identity (same seed), unit-l1 columns, error the
    product form; Mechanism errors equal the dense GLS; sensitivities equal brute force."""
    from dptree_opt.strategies.optimized import laplace_p_identity

    w = workloads.kron(workloads.prefix(4), workloads.all_range(3))
    opt = strategies.kron_p_identity(w, p=[2, 1])
    f1 = laplace_p_identity(workloads.prefix(4), 2)
    f2 = laplace_p_identity(workloads.all_range(3), 1)
    a = opt.strategy.matrix.toarray()
    np.testing.assert_allclose(a, np.kron(f1.strategy.matrix.toarray(),
                                          f2.strategy.matrix.toarray()))
    np.testing.assert_allclose(np.abs(a).sum(axis=0), 1.0)
    # the 1-D objective's Woodbury form is accurate to ~1e-5 here (a tiny identity weight);
    # kron_p_identity's error is recomputed exactly (= the dense GLS below)
    assert opt.error == pytest.approx(2 * (f1.error / 2) * (f2.error / 2), rel=1e-4)
    for neighbours, p in itertools.product(("add_remove", "swap"), (1, 2)):
        want = brute_loss(a, np.ones(a.shape[0]), neighbours, p)
        assert _unit_sens(opt.strategy, neighbours, p) == pytest.approx(want, rel=1e-12)
    mech = Mechanism(opt.strategy, epsilon=1.0, neighbours="add_remove")
    want, _ = _dense_query_variances(a, np.asarray(mech.variances), _dense_w(
        ["prefix", "all_range"], [4, 3]))
    assert expected_error(w, mech) == pytest.approx(want.sum(), rel=1e-9)
    assert opt.error == pytest.approx(want.sum(), rel=1e-9)  # eps = 1, add/remove, N private
    with pytest.raises(ValueError):
        strategies.kron_p_identity(workloads.prefix(8))


def test_ektelo_plan_sensitivities_equal_brute_force():
    """HB2D, ektelo's quadtree plan (columns in its permuted order) and the uniform grid's
    cells: the Mechanism's calibration (unit level sensitivities x levels) = brute force."""
    for shape in [(2, 4), (4, 2)]:
        strat, order = ektelo_quadtree_plan(shape)
        a = _ektelo_quadtree_rows(shape)
        for neighbours, p in itertools.product(("add_remove", "swap"), (1, 2)):
            want = brute_loss(a, np.ones(a.shape[0]), neighbours, p)
            assert _unit_sens(strat, neighbours, p) == pytest.approx(want, rel=1e-12)
    ks = ektelo_hb2d_branchings((2, 4))
    strat = strategies.quadtree((2, 4), [list(k) for k in ks])
    a = strat.matrix.toarray()[1:]  # HB2D: no root
    m = Mechanism(strat, epsilon=1.0, neighbours="add_remove",
                  level_budgets=[0.0] + [1.0 / strat.tree.height] * strat.tree.height)
    assert m.epsilon == pytest.approx(brute_loss(
        a, 1.0 / m.scales[1:], "add_remove", 1), rel=1e-12)


# ------------------------------------------------------------------ grid trees per query
def _tree_levels(branching):
    """The rows of each level of the level-uniform tree (tests/oracles.tree_matrix)."""
    a, lv = tree_matrix(branching)
    return [a[lv == level] for level in range(len(branching) + 1)]


@settings(max_examples=30, deadline=None)
@given(b1=st.lists(st.integers(2, 3), min_size=1, max_size=2),
       b2=st.lists(st.integers(2, 3), min_size=1, max_size=2),
       kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=2),
       quad=st.booleans(), permute=st.booleans(),
       neighbours=st.sampled_from(["add_remove", "swap"]),
       noise=st.sampled_from(["laplace", "gaussian"]), seed=st.integers(0, 10**6))
def test_grid_tree_summary_equals_dense_gls(b1, b2, kinds, quad, permute, neighbours, noise,
                                            seed):
    """Total and per-query maximum of Kronecker trees / quadtrees with random budgets per
    level (tuple), optionally with a permuted axis order, = the dense GLS of the explicit
    matrix (np.kron of tree matrices, or the quadtree's boxes; columns permuted)."""
    rng = np.random.default_rng(seed)
    if quad:
        b2 = (b2 + b1)[:len(b1)] if len(b2) < len(b1) else b2[:len(b1)]
    n1, n2 = math.prod(b1), math.prod(b2)
    t1, t2 = strategies.tree(n1, b1), strategies.tree(n2, b2)
    strat = strategies.quadtree((n1, n2), [b1, b2]) if quad else strategies.kron(t1, t2)
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    base = Mechanism(strat, neighbours=neighbours, **kw)
    k = len(base.level_budgets)
    b = (0.5 / k + 0.5 * rng.dirichlet(np.ones(k))) * next(iter(kw.values()))
    mech = Mechanism(strat, neighbours=neighbours, level_budgets=b, **kw)
    order = rng.permutation(n2) if permute else None
    w = workloads.kron(_one_d(kinds[0], n1), _one_d(kinds[1], n2))
    # explicit rows from the definitions, level (tuple) by level: a quadtree level l is the
    # products of the level-l nodes of both axes; a Kronecker level tuple (l1, l2) those of
    # level l1 x level l2 (level code l1 (h2 + 1) + l2); the variance of each from the
    # mechanism (0: exact, missing: unmeasured)
    lv1, lv2 = _tree_levels(b1), _tree_levels(b2)
    blocks, var = [], []
    pairs = ([(lv, lv) for lv in range(len(b1) + 1)] if quad else
             [(i, j) for i in range(len(b1) + 1) for j in range(len(b2) + 1)])
    for code, (i, j) in enumerate(pairs):
        rows = np.kron(lv1[i], lv2[j])
        blocks.append(rows)
        var += [mech.level_variances.get(code, np.inf)] * rows.shape[0]
    a, var = np.vstack(blocks), np.array(var)
    # with a permutation the tree's position p holds the cell order[p]
    if order is not None:
        a3 = a.reshape(a.shape[0], n1, n2)
        a = np.zeros_like(a3)
        a[:, :, order] = a3
        a = a.reshape(a.shape[0], -1)
    want, ok = _dense_query_variances(a, var, _dense_w(kinds, (n1, n2)))
    if not ok:
        with pytest.raises(ValueError):
            grid_tree_summary(mech, w, orders=[None, order])
        return
    total, mx = grid_tree_summary(mech, w, orders=[None, order])
    assert total == pytest.approx(want.sum(), rel=1e-7)
    assert mx == pytest.approx(want.max(), rel=1e-7)
    quick, none = grid_tree_summary(mech, w, orders=[None, order], want_max=False)
    assert none is None and quick == pytest.approx(want.sum(), rel=1e-7)
    if order is None:
        assert expected_error(w, mech) == pytest.approx(total, rel=1e-9)
        best = grid_tree_max(mech, w)  # the engines' "max": the value and a query attaining it
        assert best.variance == pytest.approx(want.max(), rel=1e-7)
        assert want[best.query] == pytest.approx(want.max(), rel=1e-7)


# ------------------------------------------------------------------ ektelo transcriptions
def _ektelo_rect_to_quads(ul, lr):
    """ektelo selection.QuadTree.rect_to_quads, transcribed (inclusive corners)."""
    upper, left = ul
    lower, right = lr
    n_rows, n_cols = lower - upper + 1, right - left + 1
    col_parity = 1 if n_cols % 2 else 0
    col_mid = left + n_cols // 2
    row_mid = upper + n_rows // 2
    if n_rows == 1:
        return [(ul, (lr[0], col_mid - 1)), ((lr[0], col_mid), lr)]
    if n_cols == 1:
        return [(ul, (row_mid - 1, lr[1])), ((row_mid, lr[1]), lr)]
    return [(ul, (row_mid - 1, col_mid - 1)), ((upper, col_mid), (row_mid - 1, right)),
            ((row_mid, left), (lower, col_mid - 1 + col_parity)),
            ((row_mid, col_mid + col_parity), lr)]


def _ektelo_quadtree_rows(shape) -> np.ndarray:
    """The rows of ektelo's QuadTree plan on a grid: selection.QuadTree((N // 2, 2)) over
    the flattened x (plans/standalone.py), as 0/1 rows over the row-major cells."""
    n = math.prod(shape)
    rows_, cols_ = n // 2, 2
    full = ((0, 0), (rows_ - 1, cols_ - 1))
    pending, quads = [full], [full]
    while pending:
        q = pending.pop()
        if (q[1][0] - q[0][0] + 1) * (q[1][1] - q[0][1] + 1) > 1:
            subs = _ektelo_rect_to_quads(*q)
            quads.extend(subs)
            pending.extend(subs)
    out = np.zeros((len(quads), n))
    for i, ((u, lft), (lo, rt)) in enumerate(quads):
        for r in range(u, lo + 1):
            for c in range(lft, rt + 1):
                out[i, r * cols_ + c] = 1.0  # cell (r, c) of the (N/2, 2) array = flat 2r + c
    return out


def _ektelo_split(n_rows, b):
    """ektelo support.split_rectangle on one axis (the even branches)."""
    if b > n_rows:
        return [(i, i) for i in range(n_rows)]
    assert n_rows % b == 0
    s = n_rows // b
    return [(i * s, (i + 1) * s - 1) for i in range(b)]


def _ektelo_hb2d_rows(shape) -> np.ndarray:
    """ektelo Hb2D(n, m, b, b) rows (no root), transcribed, for even splits."""
    n, m = shape
    b = ektelo_hb_branching(n * m)
    pending = [((0, n - 1), (0, m - 1))]
    rects = []
    while pending:
        (r0, r1), (c0, c1) = pending.pop()
        if (r1 - r0 + 1) * (c1 - c0 + 1) > 1:
            for (a0, a1) in _ektelo_split(r1 - r0 + 1, b):
                for (e0, e1) in _ektelo_split(c1 - c0 + 1, b):
                    sub = ((r0 + a0, r0 + a1), (c0 + e0, c0 + e1))
                    rects.append(sub)
                    pending.append(sub)
    out = np.zeros((len(rects), n * m))
    for i, ((r0, r1), (c0, c1)) in enumerate(rects):
        g = np.zeros((n, m))
        g[r0:r1 + 1, c0:c1 + 1] = 1.0
        out[i] = g.ravel()
    return out


def _same_rows(a, b) -> bool:
    """The same multiset of 0/1 rows: sorted exact integer fingerprints (two random integer
    projections; a collision has probability ~rows^2 / 2^40)."""
    if a.shape != b.shape:
        return False
    r = np.random.default_rng(7).integers(0, 2**40, size=(a.shape[1], 2))
    fa, fb = a.astype(np.int64) @ r, b.astype(np.int64) @ r
    return bool(np.array_equal(fa[np.lexsort(fa.T)], fb[np.lexsort(fb.T)]))


@pytest.mark.parametrize("shape", [(2, 2), (2, 8), (4, 4), (8, 4), (4, 16)])
def test_ektelo_quadtree_plan_is_ektelos_rect_to_quads(shape):
    """The emulation (a quadtree over the columns in (evens, odds) order) has exactly the rows
    of ektelo's QuadTree plan; with one noise scale its exact error = the dense GLS of those
    rows (ektelo's least squares)."""
    strat, order = ektelo_quadtree_plan(shape)
    q = strat.matrix.toarray().reshape(-1, *shape)
    mine = np.zeros_like(q)
    mine[:, :, order] = q
    ek = _ektelo_quadtree_rows(shape)
    assert _same_rows(mine.reshape(q.shape[0], -1), ek)
    mech = Mechanism(strat, epsilon=1.0, neighbours="add_remove")
    assert np.ptp(mech.variances) == 0  # one Laplace scale, as ektelo's measurement
    for kinds in [("prefix", "prefix"), ("all_range", "all_range")]:
        w = workloads.kron(*[_one_d(k, n) for k, n in zip(kinds, shape)])
        want, ok = _dense_query_variances(ek, np.full(ek.shape[0], mech.variances[0]),
                                          _dense_w(kinds, shape))
        total, mx = grid_tree_summary(mech, w, orders=[None, order])
        assert ok and total == pytest.approx(want.sum(), rel=1e-9)
        assert mx == pytest.approx(want.max(), rel=1e-9)


@pytest.mark.parametrize("shape", [(16, 16), (8, 32), (64, 64)])
def test_ektelo_hb2d_is_ektelos_hb2d(shape):
    """HB2D's emulation (a quadtree with ektelo's per-axis splits, root dropped) has exactly
    the rows of ektelo's Hb2D; b = 16 for 256 and 4096 cells (Qardaji-Yang-Li's 1-D rule:
    at N = 65536, b = 16 gives 15 * 4^3 - 2 * 17 * 4^2 / 3 = 778.7, b = 17: 832, b = 41:
    828, b = 256: 1354.7)."""
    ks = ektelo_hb2d_branchings(shape)
    strat = strategies.quadtree(shape, [list(k) for k in ks])
    assert _same_rows(strat.matrix.toarray()[1:], _ektelo_hb2d_rows(shape))
    assert ektelo_hb_branching(256) == 16 and ektelo_hb_branching(4096) == 16
    assert ektelo_hb_branching(65536) == 16
    assert ektelo_hb2d_branchings((128, 128)) is None  # b = 26: uneven splits, refused


def test_uniform_grid_side_and_noise_equal_dense():
    """UniformGrid: ektelo's cell side (hand-computed: 256^2 cells, N = 10^4, eps = 1:
    M = 1000 cells, sqrt(65.536) = 8.1 -> side 8; N = 10^6 -> 1) and its noise variance =
    the dense v W R Cov R' W' with the spreading map R (private and public N)."""
    assert uniform_grid_side((256, 256), 10**4, 1.0) == 8
    assert uniform_grid_side((256, 256), 10**6, 1.0) == 1
    # M = 0.01 cells: side int(sqrt(70 / 0.01) - 1) + 1 = int(82.67) + 1 = 83 > both sides,
    # a single cell (ektelo's (n - 1) // side + 1 = 1 per axis)
    assert uniform_grid_side((10, 7), 1, 0.1) == 83
    shape, g = (5, 7), 3
    blocks = [np.minimum(np.arange(n) // g, (n - 1) // g) for n in shape]
    r = [np.zeros((n, b.max() + 1)) for n, b in zip(shape, blocks)]
    for ri, b in zip(r, blocks):
        ri[np.arange(b.size), b] = 1.0
        ri /= ri.sum(axis=0)[None, :]
    big_r = np.kron(r[0], r[1])  # cells x blocks: spread each block uniformly
    m = big_r.shape[1]
    for kinds, neighbours, public in [(("prefix", "all_range"), "add_remove", None),
                                      (("all_range", "prefix"), "swap", None),
                                      (("prefix", "prefix"), "add_remove", True)]:
        w = workloads.kron(*[_one_d(k, n) for k, n in zip(kinds, shape)])
        wd = _dense_w(kinds, shape)
        sens = 2.0 if neighbours == "swap" else 1.0
        cov = 2.0 * (sens / 0.7) ** 2 * (np.eye(m) - (np.ones((m, m)) / m if (
            neighbours == "swap" or public) else 0.0))
        want = np.einsum("qi,ij,qj->q", wd @ big_r, cov, wd @ big_r)
        total, mx = uniform_grid_noise(shape, g, w, epsilon=0.7, neighbours=neighbours,
                                       public_total=public)
        assert total == pytest.approx(want.sum(), rel=1e-10)
        assert mx == pytest.approx(want.max(), rel=1e-10)


# ------------------------------------------------------------------ bounds
@pytest.mark.parametrize("kinds, dims", [(("prefix", "prefix"), (5, 4)),
                                         (("all_range", "prefix"), (4, 6)),
                                         (("identity", "all_range"), (3, 5)),
                                         (("prefix", "prefix", "all_range"), (3, 2, 3))])
def test_grid_svd_bound_equals_dense_nuclear_norms(kinds, dims):
    """N private: ||W||_*^2 / n; N public: ||W P||_*^2 / n (add/remove) and
    2 ||W P||_*^2 / (n - 1) (swap), P = I - 11'/n, from numpy's SVD of the dense W."""
    wd = _dense_w(kinds, dims)
    n = wd.shape[1]
    nuc = np.linalg.svd(wd, compute_uv=False).sum()
    nucp = np.linalg.svd(wd - wd.sum(axis=1, keepdims=True) / n, compute_uv=False).sum()
    w = workloads.kron(*[_one_d(k, m) for k, m in zip(kinds, dims)])
    assert grid_svd_bound(w) == pytest.approx(nuc**2 / n, rel=1e-10)
    assert grid_svd_bound(w, public_total=True) == pytest.approx(nucp**2 / n, rel=1e-8)
    assert grid_svd_bound(w, neighbours="swap") == pytest.approx(2 * nucp**2 / (n - 1),
                                                                  rel=1e-8)
    assert grid_error_lower_bound(w, noise="laplace", epsilon=0.5) == pytest.approx(
        8 * nuc**2 / n, rel=1e-10)


def test_anchors_at_256_squared_from_math_md():
    """MATH.md section 8 at 256^2 (2-D CDF, mean per query): SVD bound 37.31 per unit
    sigma^2, Laplace eps 1: flat 33024, quadtree equal budgets 16095, binary x binary 15004;
    Gaussian per unit sigma^2: Kronecker optimum 40.61."""
    lap = compare_grid("256x256", epsilon=1.0, neighbours="add_remove", workloads=("cdf",),
                       rows=["flat", "quadtree_equal", "kron_trees_equal"])
    by = {r.key: r.errors["cdf"].mean for r in lap.rows}
    assert by["flat"] == pytest.approx(33024, abs=0.5)
    assert by["quadtree_equal"] == pytest.approx(16095, abs=0.5)
    assert by["kron_trees_equal"] == pytest.approx(15004, abs=0.5)
    gau = compare_grid("256x256", rho=0.5, neighbours="add_remove", workloads=("cdf",),
                       rows=["kron_gaussian_optimum"])
    assert gau.bounds["cdf"] == pytest.approx(37.31, abs=0.005)
    assert gau.rows[0].errors["cdf"].mean == pytest.approx(40.61, abs=0.005)


@pytest.mark.slow
def test_kron_p_identity_matches_hdmm_readme_anchor():
    """HDMM's README (MATH.md section 8): KronPIdentity([16, 16], [256, 256]) on all 2-D
    ranges, RMSE 32.69 at unit noise (eps = sqrt 2, Laplace add/remove). Ours is a local
    optimum of the same programme: within 2%."""
    w = workloads.all_range((256, 256))
    opt = strategies.kron_p_identity(w)
    mech = Mechanism(opt.strategy, epsilon=math.sqrt(2.0), neighbours="add_remove")
    rmse = math.sqrt(expected_error(w, mech) / w.n_queries)
    assert rmse == pytest.approx(32.69, rel=0.02)


# ------------------------------------------------------------------ the CLI
def test_cli_grid_json_equals_direct_calls(capsys):
    """`dptree-opt compare --bins 16x16 --json`: every number equals a direct computation
    (closed forms for the flat grid, the library's public calls for the others)."""
    code = main(["compare", "--bins", "16x16", "--epsilon", "1", "--neighbours", "add_remove",
                 "--json", "--n", "500"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in d["rows"]}
    assert d["shape"] == [16, 16] and d["workloads"] == ["cdf", "all_range"]
    # flat, add/remove, eps = 1: Var(box) = 2 |box|; mean dominance box (8.5)^2, mean box
    # of all ranges ((16 + 2) / 3)^2 = 36
    assert rows["flat"]["errors"]["cdf"]["mean"] == pytest.approx(2 * 8.5**2, rel=1e-12)
    assert rows["flat"]["errors"]["all_range"]["mean"] == pytest.approx(72.0, rel=1e-12)
    assert rows["flat"]["errors"]["cdf"]["max"] == pytest.approx(2 * 256.0, rel=1e-12)
    # UniformGrid at N = 500: M = 50 cells, side int(sqrt(5.12) - 1) + 1 = int(1.26) + 1 = 2
    assert "8x8 cells of side 2" in rows["ektelo_uniform_grid"]["strategy"]
    for wl in ("cdf", "all_range"):
        w = getattr(workloads, "prefix" if wl == "cdf" else "all_range")((16, 16))
        mech = Mechanism(strategies.kron(strategies.binary_tree(16), strategies.binary_tree(16)),
                         epsilon=1.0, neighbours="add_remove")
        assert rows["kron_trees_equal"]["errors"][wl]["mean"] == pytest.approx(
            expected_error(w, mech) / w.n_queries, rel=1e-12)
        q = strategies.quadtree((16, 16))
        mech = Mechanism(q, epsilon=1.0, neighbours="add_remove")
        assert rows["quadtree_equal"]["errors"][wl]["mean"] == pytest.approx(
            expected_error(w, mech) / w.n_queries, rel=1e-12)
        assert rows["quadtree_equal"]["errors"][wl]["max"] == pytest.approx(
            expected_error(w, mech, method="dense", per_query=True).max(), rel=1e-9)
        bound = grid_error_lower_bound(w, noise="laplace", epsilon=1.0) / w.n_queries
        assert d["bounds_mean_per_query"][wl] == pytest.approx(bound, rel=1e-12)
        assert rows["flat"]["ratio_to_bound"][wl] == pytest.approx(
            rows["flat"]["errors"][wl]["mean"] / bound, rel=1e-12)
    assert not rows["kron_gaussian_optimum"]["available"]


def test_grid_maxima_come_from_the_registry(monkeypatch):
    """The grid rows' maxima are the registry's "max": with the grid-tree maximum limited to
    10 queries per axis and listed maxima to 100 queries, the equal-budget Kronecker trees
    (one noise scale) get theirs from the single-scale Kronecker engine, equal to the dense
    GLS of tests/oracles.py, and the optimal-budget ones none, the note naming each
    engine's reason."""
    monkeypatch.setattr(kronecker_engines, "MAX_TREE_MAX_QUERIES", 10)
    monkeypatch.setattr(engine_base, "MAX_LISTED_QUERIES", 100)
    res = compare_grid((8, 8), epsilon=1.0, neighbours="add_remove", workloads=("all_range",),
                       rows=["kron_trees_equal", "kron_trees_optimal"])
    rows = {r.key: r.errors["all_range"] for r in res.rows}
    mech = Mechanism(strategies.kron(strategies.binary_tree(8), strategies.binary_tree(8)),
                     epsilon=1.0, neighbours="add_remove")
    want, ok = _dense_query_variances(_released_dense(mech), np.asarray(mech.variances),
                                      _dense_w(("all_range", "all_range"), (8, 8)))
    assert ok and rows["kron_trees_equal"].max == pytest.approx(want.max(), rel=1e-9)
    assert rows["kron_trees_equal"].mean == pytest.approx(want.mean(), rel=1e-9)
    got = rows["kron_trees_optimal"]
    assert got.max is None and got.mean is not None
    assert "kron_tree: the largest per-query error scores at most 10 queries per axis" in got.note
    assert "dense: the largest per-query error is taken over at most 100 listed" in got.note


def test_cli_grid_gaussian_swap_table_and_errors(capsys):
    code = main(["compare", "--bins", "8x8", "--rho", "0.5", "--workloads", "cdf,identity"])
    out = capsys.readouterr().out
    assert code == 0 and "8x8 grid" in out and "Kronecker Gaussian optimum" in out
    assert "timings (s)" in out
    # swap, flat: Var = 2 * (sqrt 2)^2 / (2 rho) per cell minus the public-total share
    res = compare_grid((8, 8), rho=0.5, neighbours="swap", workloads=("identity",),
                       rows=["flat"])
    v = 2.0 / (2 * 0.5)
    assert res.rows[0].errors["identity"].mean == pytest.approx(v * (1 - 1 / 64), rel=1e-12)
    code = main(["compare", "--bins", "8x8", "--epsilon", "1", "--plot", "x.png"])
    assert code == 2
    with pytest.raises(SystemExit):
        main(["compare", "--bins", "8xa", "--epsilon", "1"])
    with pytest.raises(SystemExit):
        main(["compare", "--bins", "1x8", "--epsilon", "1"])


def test_best_hierarchy_row_is_the_certified_gaussian_optimum():
    """Gaussian, no padding needed (8 x 8): the searched row is the global optimum over
    Kronecker trees and quadtrees with optimal budgets, so it is no worse than the finest
    Kronecker row or the quadtree row (both optimal budgets) and above the SVD bound."""
    res = compare_grid((8, 8), rho=0.5, neighbours="add_remove")
    rows = {r.key: r for r in res.rows}
    for wl in ("cdf", "all_range"):
        best = rows["best_hierarchy"].errors[wl].mean
        for other in ("kron_trees_optimal", "quadtree_optimal", "flat", "kron_trees_equal"):
            assert best <= rows[other].errors[wl].mean * (1 + 1e-7)
        assert best >= res.bounds[wl] * (1 - 1e-9)


def test_grid_best_rows_come_from_the_front_door():
    """One "best" row per workload column: optimize.best_mechanism's winner for that grid
    workload, its family in the label, its errors on every column those of its mechanism
    (the dense GLS for the maxima), and no worse on its column than the rows of the
    front-door families."""
    res = compare_grid((8, 8), rho=0.5)
    rows = {r.key: r for r in res.rows}
    for wl, kind in (("cdf", "prefix"), ("all_range", "all_range")):
        row = rows[f"best_{wl}"]
        w = getattr(workloads, kind)((8, 8))
        d = optimize.best_mechanism(w, rho=0.5)
        assert row.label.endswith(": " + d.family)
        assert row.errors[wl].mean == pytest.approx(d.mean, rel=1e-9)
        for col, other in (("cdf", "prefix"), ("all_range", "all_range")):
            wc = getattr(workloads, other)((8, 8))
            per = expected_error(wc, d.mechanism(), method="dense", per_query=True)
            assert row.errors[col].mean == pytest.approx(per.mean(), rel=1e-9)
            if row.errors[col].max is not None:
                assert row.errors[col].max == pytest.approx(per.max(), rel=1e-9)
        for key in ("best_hierarchy", "kron_gaussian_optimum", "kron_p_identity", "flat"):
            assert row.errors[wl].mean <= rows[key].errors[wl].mean * (1 + 1e-9), key
    assert "best_identity" not in rows   # only the columns compared
