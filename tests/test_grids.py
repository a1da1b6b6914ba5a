"""Grids (issue 15): d-D workloads (Kronecker, marginals) against brute force, and the exact
BLUE error of Kronecker products of trees against the dense GLS."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dptree_opt import Mechanism, expected_error, strategies, workloads
from dptree_opt.engines.kronecker import is_kron_tree_mechanism, kron_tree_error

KINDS = ("prefix", "identity", "total", "all_range")


def _one_d(kind, n):
    return getattr(workloads, kind)(n)


@settings(max_examples=40, deadline=None)
@given(dims=st.lists(st.integers(1, 5), min_size=2, max_size=3),
       kinds=st.lists(st.sampled_from(KINDS), min_size=3, max_size=3),
       seed=st.integers(0, 10**6))
def test_kronecker_workload_products_equal_np_kron(dims, kinds, seed):
    w = workloads.kron(*[_one_d(k, n) for k, n in zip(kinds, dims)])
    D = np.ones((1, 1))
    for k, n in zip(kinds, dims):
        D = np.kron(D, _one_d(k, n).dense())
    rng = np.random.default_rng(seed)
    x, u = rng.standard_normal(w.n_bins), rng.standard_normal(w.n_queries)
    X = rng.standard_normal((w.n_bins, 3))
    assert w.shape == D.shape
    assert np.allclose(w.matvec(x), D @ x)
    assert np.allclose(w.matvec(X), D @ X)
    assert np.allclose(w.rmatvec(u), D.T @ u)
    assert np.allclose(w.gram_matvec(x), D.T @ D @ x)
    assert np.allclose(w.gram_dense(), D.T @ D)
    assert np.allclose(w.dense(), D)
    C = np.atleast_2d(np.cov(rng.standard_normal((w.n_bins, 3 * w.n_bins))))
    assert np.allclose(w.query_variances(C), np.diag(D @ C @ D.T))
    assert np.isclose(w.total_variance(C), np.trace(D @ C @ D.T))


def test_grid_cdf_and_boxes_are_dominance_and_axis_aligned_boxes():
    """prefix((n1, n2)) answers sum x[:a+1, :b+1] and all_range((n1, n2)) every box
    x[a1:b1+1, a2:b2+1], in np.kron order (brute force on a random grid)."""
    n1, n2 = 3, 4
    x = np.random.default_rng(0).integers(0, 9, (n1, n2)).astype(float)
    cdf = workloads.prefix((n1, n2)).matvec(x.ravel())
    want = [x[:a + 1, :b + 1].sum() for a in range(n1) for b in range(n2)]
    assert np.allclose(cdf, want)
    boxes = workloads.all_range((n1, n2)).matvec(x.ravel())
    r1 = [(a, b) for a in range(n1) for b in range(a, n1)]
    r2 = [(a, b) for a in range(n2) for b in range(a, n2)]
    want = [x[a1:b1 + 1, a2:b2 + 1].sum() for (a1, b1), (a2, b2) in itertools.product(r1, r2)]
    assert np.allclose(boxes, want)
    assert workloads.identity((n1, n2)).n_queries == n1 * n2
    # a 1-D shape keeps today's meaning
    assert workloads.prefix((7,)).kind == "prefix" and workloads.prefix(7).n_bins == 7


def test_marginals_sum_out_the_other_axes():
    shape = (3, 4, 2)
    x = np.random.default_rng(1).integers(0, 9, shape).astype(float)
    m = workloads.marginals(shape, (0, 2))
    assert np.allclose(m.matvec(x.ravel()), x.sum(axis=1).ravel())
    both = workloads.marginals(shape, [(1,), (0, 2), ()])
    assert np.allclose(both.matvec(x.ravel()),
                       np.concatenate([x.sum(axis=(0, 2)), x.sum(axis=1).ravel(), [x.sum()]]))
    D = both.dense()
    u = np.random.default_rng(2).standard_normal(both.n_queries)
    assert np.allclose(both.rmatvec(u), D.T @ u)
    assert np.allclose(both.gram_dense(), D.T @ D)
    C = np.eye(x.size)
    assert np.isclose(both.total_variance(C), np.trace(D @ D.T))


@pytest.mark.parametrize("bad", [((3, 0), ValueError), ((), ValueError), ("ab", ValueError),
                                 ((2.5, 3), ValueError)])
def test_grid_shapes_refused(bad):
    shape, err = bad
    with pytest.raises(err):
        workloads.prefix(shape)


def test_marginal_axes_refused():
    for axes in ((3,), (0, 0), (-1,), ("a",), (True,)):
        with pytest.raises(ValueError, match="axes"):
            workloads.marginals((3, 4, 2), axes)
    with pytest.raises(ValueError, match="1-D workloads"):
        workloads.kron(workloads.prefix((2, 2)), workloads.prefix(3))


trees = st.lists(st.integers(2, 3), min_size=1, max_size=3)


def _random_kron_mechanism(b1, b2, neighbours, noise, rng):
    """T(b1) x T(b2) (at most ~400 cells) with random budgets per level pair, each at least
    half the equal share: the dense oracle (normal equations) keeps ~9 digits, and tiny
    budgets (variances ~1e6 x the others) would test its rounding, not ours."""
    n1, n2 = int(np.prod(b1)), int(np.prod(b2))
    if n1 * n2 > 400:
        b2 = b2[:1]
        n2 = b2[0]
    A = strategies.kron(strategies.tree(n1, b1), strategies.tree(n2, b2))
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    n_levels = (len(b1) + 1) * (len(b2) + 1) - (neighbours == "swap")
    b = 0.5 / n_levels + 0.5 * rng.dirichlet(np.ones(n_levels))
    return (Mechanism(A, neighbours=neighbours, level_budgets=b * next(iter(kw.values())),
                      **kw), n1, n2)


@settings(max_examples=40, deadline=None)
@given(b1=trees, b2=trees, kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=2),
       neighbours=st.sampled_from(["add_remove", "swap"]),
       noise=st.sampled_from(["laplace", "gaussian"]), seed=st.integers(0, 10**6))
def test_kron_tree_error_equals_dense_gls(b1, b2, kinds, neighbours, noise, seed):
    """Per-level-tuple budgets (random, positive), both neighbour models and noises: the
    O(prod (h_i + 1)) eigen-sum equals the dense GLS covariance's trace(W Cov W')."""
    mech, n1, n2 = _random_kron_mechanism(b1, b2, neighbours, noise,
                                          np.random.default_rng(seed))
    assert is_kron_tree_mechanism(mech)
    w = workloads.kron(_one_d(kinds[0], n1), _one_d(kinds[1], n2))
    fast = expected_error(w, mech)
    dense = expected_error(w, mech, method="dense")
    assert fast == pytest.approx(dense, rel=1e-8, abs=1e-8)  # public N: total exactly 0


def test_three_axes_and_marginal_workloads():
    A = strategies.kron(strategies.tree(4, (2, 2)), strategies.tree(3, (3,)),
                        strategies.tree(2, (2,)))
    mech = Mechanism(A, epsilon=1.0, neighbours="add_remove")
    for w in (workloads.prefix((4, 3, 2)), workloads.marginals((4, 3, 2), (0, 2)),
              workloads.all_range((4, 3, 2))):
        assert expected_error(w, mech) == pytest.approx(
            expected_error(w, mech, method="dense"), rel=1e-9)


def test_binary_by_binary_cdf_anchor_at_256_squared():
    """MATH.md section 8 (helper-computed, verified here by the structured formula, which the
    test above checks against the dense GLS): the 2-D CDF over 256 x 256 cells, Laplace
    eps 1, add/remove, binary x binary with equal budgets per level pair: 15004 mean per
    query. The flat grid's 33024 is the closed form 2 (mean(a + 1))^2 = 2 x 128.5^2."""
    n = 256
    A = strategies.kron(strategies.tree(n, (2,) * 8), strategies.tree(n, (2,) * 8))
    mech = Mechanism(A, epsilon=1.0, neighbours="add_remove")
    assert round(expected_error(workloads.prefix((n, n)), mech) / n**2) == 15004
    assert 2 * 128.5**2 == pytest.approx(33024.5)


def test_kron_tree_error_refusals():
    A = strategies.kron(strategies.tree(4, (2, 2)), strategies.tree(4, (2, 2)))
    mech = Mechanism(A, epsilon=1.0)
    with pytest.raises(ValueError, match="grid"):
        kron_tree_error(mech, workloads.prefix((2, 8)))
    with pytest.raises(ValueError, match="per-axis"):
        kron_tree_error(mech, workloads.kron(workloads.ranges(4, [(0, 1)]),
                                             workloads.prefix(4)))
    other = Mechanism(strategies.tree(16, (4, 4)), epsilon=1.0)
    with pytest.raises(ValueError, match="Kronecker product"):
        kron_tree_error(other, workloads.prefix((4, 4)))
    # an unmeasured level tuple the workload needs: not identified
    lv = np.append(np.ones(7) / 7, 0.0)   # the leaf x leaf level pair unmeasured
    bad = Mechanism(A, epsilon=1.0, neighbours="swap", level_budgets=lv)
    with pytest.raises(ValueError, match="identify"):
        kron_tree_error(bad, workloads.identity((4, 4)))


@settings(max_examples=30, deadline=None)
@given(b1=trees, b2=trees, neighbours=st.sampled_from(["add_remove", "swap"]),
       noise=st.sampled_from(["laplace", "gaussian"]), seed=st.integers(0, 10**6))
def test_kron_tree_blue_equals_dense_gls(b1, b2, neighbours, noise, seed):
    """Per-axis Helmert-Haar transforms (estimation.kronecker) = the dense GLS estimate,
    one release and a batch, random budgets per level tuple."""
    from dptree_opt import blue
    rng = np.random.default_rng(seed)
    mech, n1, n2 = _random_kron_mechanism(b1, b2, neighbours, noise, rng)
    h = rng.integers(0, 30, n1 * n2)
    y = mech.measure(h, rng)
    scale = 1.0 + np.abs(y).max()
    assert np.allclose(blue(mech, y), blue(mech, y, method="dense"), rtol=0, atol=1e-9 * scale)
    Y = np.stack([mech.measure(h, rng) for _ in range(3)])
    assert np.allclose(blue(mech, Y), blue(mech, Y, method="dense"), rtol=0,
                       atol=1e-9 * (1.0 + np.abs(Y).max()))


def test_kron_tree_blue_three_axes_monte_carlo_and_refusals():
    from dptree_opt import blue
    from dptree_opt.error import monte_carlo_error
    from dptree_opt.engines.kronecker import haar_analysis, haar_synthesis
    A = strategies.kron(strategies.tree(4, (2, 2)), strategies.tree(3, (3,)),
                        strategies.tree(2, (2,)))
    mech = Mechanism(A, rho=0.5, neighbours="add_remove")
    rng = np.random.default_rng(5)
    y = mech.measure(rng.integers(0, 9, 24), rng)
    assert np.allclose(blue(mech, y), blue(mech, y, method="dense"), atol=1e-9)
    w = workloads.prefix((4, 3, 2))
    mc = monte_carlo_error(w, mech, trials=3000, rng=1)
    assert mc.within(expected_error(w, mech), 4.0)
    bad = y.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        blue(mech, bad)
    with pytest.raises(ValueError, match="entries"):
        blue(mech, y[:-1])
    # the per-axis transform is orthonormal: synthesis inverts analysis, norms kept
    X = rng.standard_normal((12, 2))
    C = haar_analysis((3, 2, 2), X)
    assert np.allclose(haar_synthesis((3, 2, 2), C), X)
    assert np.allclose(np.linalg.norm(C, axis=0), np.linalg.norm(X, axis=0))


# ------------------------------------------------------------------ quadtrees
axis_branchings = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1,
                           max_size=3).filter(lambda lv: all(a * b > 1 for a, b in lv))


def _quadtree(levels):
    ks1, ks2 = tuple(a for a, _ in levels), tuple(b for _, b in levels)
    return strategies.quadtree((int(np.prod(ks1)), int(np.prod(ks2))), [ks1, ks2])


@settings(max_examples=30, deadline=None)
@given(levels=axis_branchings, seed=st.integers(0, 10**6))
def test_quadtree_rows_are_the_product_boxes(levels, seed):
    """Every row is the indicator of a box, the product of one level-l node of each axis;
    each level holds every such product once; apply / rmatvec equal the matrix."""
    q = _quadtree(levels)
    n1, n2 = q.grid_shape
    A = q.matrix.toarray()
    t1, t2 = q.axis_trees
    for lv in range(q.tree.height + 1):
        rows = A[q.levels == lv]
        want = set()
        for a1, b1 in zip(t1.lo[t1.level_slice(lv)], t1.hi[t1.level_slice(lv)]):
            for a2, b2 in zip(t2.lo[t2.level_slice(lv)], t2.hi[t2.level_slice(lv)]):
                box = np.zeros((n1, n2))
                box[a1:b1, a2:b2] = 1
                want.add(box.tobytes())
        assert {r.reshape(n1, n2).tobytes() for r in rows} == want and len(rows) == len(want)
    rng = np.random.default_rng(seed)
    x, u = rng.standard_normal(n1 * n2), rng.standard_normal(q.n_rows)
    assert np.allclose(q.apply(x), A @ x) and np.allclose(q.rmatvec(u), A.T @ u)


@settings(max_examples=30, deadline=None)
@given(levels=axis_branchings, neighbours=st.sampled_from(["add_remove", "swap"]),
       noise=st.sampled_from(["laplace", "gaussian"]), seed=st.integers(0, 10**6))
def test_quadtree_privacy_error_and_blue_equal_brute_force_and_dense(levels, neighbours, noise,
                                                                     seed):
    q = _quadtree(levels)
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    h = q.tree.height
    n_levels = h + (neighbours == "add_remove")
    rng = np.random.default_rng(seed)
    b = (0.5 / n_levels + 0.5 * rng.dirichlet(np.ones(n_levels))) * next(iter(kw.values()))
    mech = Mechanism(q, neighbours=neighbours, level_budgets=b, **kw)
    A = mech.released.matrix.toarray()
    s = mech.scales
    w = np.where((s > 0) & np.isfinite(s), 1.0 / np.where(s > 0, s, 1.0), 0.0)
    cols = [A[:, j] for j in range(A.shape[1])]
    diffs = cols if neighbours == "add_remove" else [
        a - c for a, c in itertools.combinations(cols, 2)]
    p = 1 if noise == "laplace" else 2
    loss = max(np.sum(np.abs(w * d) ** p) for d in diffs) ** (1 / p) if diffs else 0.0
    got = mech.epsilon if noise == "laplace" else mech.rho
    assert got == pytest.approx(loss if p == 1 else 0.5 * loss * loss, abs=1e-9)
    n1, n2 = q.grid_shape
    for wl in (workloads.prefix((n1, n2)), workloads.all_range((n1, n2)),
               workloads.marginals((n1, n2), (1,))):
        assert expected_error(wl, mech) == pytest.approx(
            expected_error(wl, mech, method="dense"), rel=1e-8, abs=1e-8)
    from dptree_opt import blue
    y = mech.measure(rng.integers(0, 20, n1 * n2), rng)
    assert np.allclose(blue(mech, y), blue(mech, y, method="dense"), rtol=0,
                       atol=1e-9 * (1 + np.abs(y).max()))


def test_quadtree_anchor_and_refusals():
    """MATH.md section 8: the 256 x 256 quadtree with equal budgets, Laplace eps 1,
    add/remove: 16095 mean per 2-D CDF query (verified by the formula tested above)."""
    n = 256
    mech = Mechanism(strategies.quadtree((n, n)), epsilon=1.0, neighbours="add_remove")
    assert round(expected_error(workloads.prefix((n, n)), mech) / n**2) == 16095
    assert strategies.quadtree((4, 4, 4)).tree.branching == (8, 8)
    for shape, br, msg in [((8,), 2, "2 positive"), ((8, 4), 2, "one height"),
                           ((6, 6), 2, "power of 2"), ((4, 4), 1, ">= 2"),
                           ((4, 4), [(2, 2), (4,)], "same length"),
                           ((4, 4), [(2, 2), (2, 3)], "multiply"),
                           ((4, 2), [(4, 1), (2, 1)], "split at least one"),
                           ((4, 0), 2, "2 positive"), ((4, 4), "2", "one sequence of ints"),
                           ((4, 4), ["22", "22"], "one sequence of ints")]:
        with pytest.raises(ValueError, match=msg):
            strategies.quadtree(shape, br)


# ------------------------------------------------------------------ budgets per level tuple
@pytest.mark.parametrize("make", [lambda: strategies.kron(strategies.tree(8, (2, 2, 2)),
                                                          strategies.tree(4, (2, 2))),
                                  lambda: strategies.quadtree((8, 8))])
@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_gaussian_grid_budgets_equal_cvxpy(make, neighbours):
    """Gaussian budgets per level tuple: the eigen-sum optimum equals an independent convex
    program on the dense matrices (cvxpy, matrix_frac of the information matrix, the public
    total projected out under swap) within the solver's tolerance; its error is the dense
    GLS error of the returned mechanism; never worse than the equal split."""
    import cvxpy as cp

    from dptree_opt.optimize import optimal_grid_budgets
    strat = make()
    w = workloads.prefix(strat.grid_shape)
    r = optimal_grid_budgets(strat, w, rho=0.5, neighbours=neighbours)
    m = r.mechanism
    assert r.error == pytest.approx(expected_error(w, m, method="dense"), rel=1e-9)
    assert r.mean <= r.equal_mean and m.rho <= 0.5 * (1 + 1e-9)
    A, lv = m.released.matrix.toarray(), m.released.levels
    codes = sorted(m.level_budgets)
    x = cp.Variable(len(codes), nonneg=True)
    M = sum(x[i] * 2 / m.level_sensitivities[c] ** 2 * (A[lv == c].T @ A[lv == c])
            for i, c in enumerate(codes))
    Wd = w.dense()
    if m.public_total:
        K = A.shape[1]
        B = np.linalg.qr(np.eye(K) - 1.0 / K)[0][:, :K - 1]
        obj = cp.matrix_frac(B.T @ Wd.T, B.T @ M @ B)
    else:
        obj = cp.matrix_frac(Wd.T, M)
    prob = cp.Problem(cp.Minimize(obj), [cp.sum(x) == 0.5])
    prob.solve()
    assert r.error == pytest.approx(prob.value, rel=1e-4)


def test_laplace_grid_budgets_beat_equal_and_are_exact():
    from dptree_opt.optimize import optimal_grid_budgets
    strat = strategies.quadtree((16, 16))
    w = workloads.all_range((16, 16))
    r = optimal_grid_budgets(strat, w, 1.0, neighbours="add_remove")
    assert r.mean < r.equal_mean
    assert r.error == pytest.approx(expected_error(w, r.mechanism, method="dense"), rel=1e-8)
    assert r.mechanism.epsilon <= 1.0 + 1e-9
    with pytest.raises(ValueError, match="Kronecker workload"):
        optimal_grid_budgets(strat, workloads.prefix(256), 1.0)
    with pytest.raises(ValueError, match="strategy"):
        optimal_grid_budgets(strategies.tree(16, (4, 4)), w, 1.0)


@pytest.mark.parametrize("shape", [(8, 8), (8, 32)])
@pytest.mark.parametrize("kind", ["prefix", "all_range"])
def test_gaussian_optimum_of_kronecker_workloads_is_the_product_of_1d_optima(shape, kind):
    """Issue 15 item 4 / MATH.md section 8 ("verify"): the Kronecker product of the 1-D
    optimal strategies (unit column norms, so the product is feasible) has error
    E_1 E_2 (per unit sigma^2), and the dense 2-D solver's certified dual bound is within
    1e-6 of it: the product is the 2-D optimum."""
    from dptree_opt.strategies.optimized import gaussian_optimal
    two = gaussian_optimal(getattr(workloads, kind)(shape), tol=1e-8, max_iter=3000)
    a, b = (gaussian_optimal(getattr(workloads, kind)(n), tol=1e-10, max_iter=3000)
            for n in shape)
    product = a.error * b.error
    assert two.lower_bound * (1 - 1e-9) <= product <= two.lower_bound * (1 + 1e-6)


@settings(max_examples=40, deadline=None)
@given(b1=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       b2=st.lists(st.integers(1, 3), min_size=1, max_size=2),
       neighbours=st.sampled_from(["add_remove", "swap"]), p=st.sampled_from([1, 2]),
       seed=st.integers(0, 10**6))
def test_kron_tree_closed_form_sensitivity_equals_brute_force(b1, b2, neighbours, p, seed):
    """Products of complete trees: add/remove loss (sum_l W_l^p)^(1/p); swap 2 (sum_l W_l^p
    - sum over the tuples <= the first split depths) (^1/2 for l2); any level weights,
    branchings with k = 1 levels included; against all neighbouring pairs of cells."""
    n1, n2 = int(np.prod(b1)), int(np.prod(b2))
    K = strategies.kron(strategies.tree(n1, b1), strategies.tree(n2, b2))
    A = K.matrix.toarray()
    w = np.random.default_rng(seed).random(int(K.levels.max()) + 1)[K.levels]
    cols = [A[:, j] for j in range(A.shape[1])]
    diffs = cols if neighbours == "add_remove" else [
        a - c for a, c in itertools.combinations(cols, 2)]
    brute = max(np.sum(np.abs(w * d) ** p) ** (1 / p) for d in diffs) if diffs else 0.0
    assert K.sensitivity(w, neighbours, p) == pytest.approx(brute, rel=1e-12, abs=1e-12)


def _ordered_factorisations(n):
    if n == 1:
        return [()]
    return [(d,) + r for d in range(2, n + 1) if n % d == 0 for r in _ordered_factorisations(n // d)]


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_finest_kronecker_tree_dominates_every_hierarchy_with_optimal_gaussian_budgets(
        neighbours):
    """With optimal budgets a refinement never loses (the coarse hierarchy's rows are level
    tuples of the finer product, given budget 0), so over 8 x 8 cells binary x binary with
    optimal budgets beats (or ties) every Kronecker pair of trees and every quadtree (a
    quadtree level is one level tuple of the product), for the 2-D CDF, Gaussian (convex:
    exact optima)."""
    from dptree_opt.optimize import optimal_grid_budgets
    w = workloads.prefix((8, 8))
    best = optimal_grid_budgets(strategies.kron(strategies.tree(8, (2, 2, 2)),
                                                strategies.tree(8, (2, 2, 2))),
                                w, rho=0.5, neighbours=neighbours).error
    others = [strategies.kron(strategies.tree(8, a), strategies.tree(8, b))
              for a in _ordered_factorisations(8) for b in _ordered_factorisations(8)]
    others += [strategies.quadtree((8, 8), [a, b]) for a, b in
               [((2, 2, 2), (2, 2, 2)), ((4, 2), (2, 4)), ((8,), (8,)), ((2, 4), (4, 2)),
                ((2, 1, 2, 2), (1, 2, 2, 2)), ((1, 2, 2, 2), (2, 2, 2, 1))]]
    for strat in others:
        r = optimal_grid_budgets(strat, w, rho=0.5, neighbours=neighbours)
        assert best <= r.error * (1 + 1e-7), strat
