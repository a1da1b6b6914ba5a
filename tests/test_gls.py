"""The generic BLUE against an independent dense GLS oracle (KKT for the equality constraint)."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt.engines.gls import gls


def dense_gls(a: np.ndarray, v: np.ndarray, y: np.ndarray):
    """Textbook GLS: drop unmeasured rows, solve [[A_n'V^-1A_n, E'], [E, 0]] [x; lam] = [b; e]
    with E the exact (zero-variance) rows. Returns (x_hat, Cov). The pseudo-inverse keeps it
    valid with dependent exact rows (x is unique even when the multipliers are not)."""
    used = np.isfinite(v)
    a, v, y = a[used], v[used], y[used]
    ex = v == 0
    an, e = a[~ex], a[ex]
    m = an.T @ (an / v[~ex, None])
    n, p = a.shape[1], e.shape[0]
    kkt = np.block([[m, e.T], [e, np.zeros((p, p))]])
    inv = np.linalg.pinv(kkt)
    rhs = np.concatenate([an.T @ (y[~ex] / v[~ex]), y[ex]])
    return (inv @ rhs)[:n], inv[:n, :n]


def random_hierarchy(draw, max_leaves=24):
    """A random rooted tree (networkx DiGraph) with 1-4 children per internal node."""
    g = nx.DiGraph()
    g.add_node(0)
    frontier, nxt, leaves = [0], 1, 1
    while frontier and leaves < max_leaves:
        v = frontier.pop(0)
        k = draw(st.integers(1, 4))
        for _ in range(k):
            g.add_edge(v, nxt)
            frontier.append(nxt)
            nxt += 1
        leaves += k - 1
        if draw(st.booleans()) and len(frontier) > 1:
            frontier.pop()  # stop growing some branches
    return g


@st.composite
def strategies_(draw):
    kind = draw(st.sampled_from(["tree", "hierarchy", "histogram", "prefix", "custom"]))
    if kind == "tree":
        ks = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
        n = int(np.prod(ks))
        return S.tree(n, ks)
    if kind == "hierarchy":
        return S.hierarchy(random_hierarchy(draw))
    n = draw(st.integers(1, 20))
    if kind == "histogram":
        return S.histogram(n)
    if kind == "prefix":
        return S.prefix_sums(n)
    # random full-column-rank matrix: identity plus random extra 0/1 and real rows
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    extra = rng.integers(0, 2, size=(draw(st.integers(0, 6)), n)) * rng.choice([1.0, 2.5, -1.0])
    a = np.vstack([np.eye(n), extra])
    a = a[np.any(a != 0, axis=1)]
    levels = rng.integers(1, 4, size=a.shape[0])
    return S.Strategy(a, levels)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strat=strategies_(), data=st.data())
def test_blue_equals_dense_gls(strat, data):
    """BLUE (both backends) = dense KKT GLS: estimates, covariance, weights 1/variance."""
    nb = data.draw(st.sampled_from(["swap", "add_remove"]))
    public = data.draw(st.sampled_from([None, True])) if nb == "add_remove" else None
    noise = data.draw(st.sampled_from(["laplace", "gaussian"]))
    budget = {"epsilon": 0.7} if noise == "laplace" else {"rho": 0.3}
    probe = dp.Mechanism(strat, neighbours=nb, public_total=public, noise=noise, **budget)
    n_levels = len(probe.level_budgets)
    raw = np.array(data.draw(st.lists(st.floats(0.05, 1.0), min_size=n_levels,
                                      max_size=n_levels)))
    total = next(iter(budget.values()))
    split = list(raw / raw.sum() * total) if n_levels else None
    if split:
        split[-1] = total - sum(split[:-1])
    mech = dp.Mechanism(strat, neighbours=nb, public_total=public, noise=noise,
                        level_budgets=split, **budget)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    h = rng.poisson(4, strat.n_bins)
    y = mech.measure(h, rng)
    x_ref, cov_ref = dense_gls(mech.released.matrix.toarray(), mech.variances, y)
    finite = mech.variances[np.isfinite(mech.variances)]
    scale = max(np.abs(cov_ref).max(), finite.max(), 1e-300)
    for method in ("sparse", "dense"):
        solver = gls(mech, method)
        np.testing.assert_allclose(solver.estimate(y), x_ref, atol=1e-8 * (1 + np.abs(x_ref).max()))
        np.testing.assert_allclose(solver.covariance(), cov_ref, atol=1e-9 * scale)
        np.testing.assert_allclose(solver.cov_times(np.eye(strat.n_bins)), cov_ref,
                                   atol=1e-9 * scale)
    # exact rows hold exactly in the estimate
    if mech.exact_rows.any():
        a_ex = mech.released.matrix.toarray()[mech.exact_rows]
        np.testing.assert_allclose(a_ex @ dp.blue(mech, y), y[mech.exact_rows], rtol=1e-9)


def test_blue_weights_are_inverse_variances():
    """Two direct measurements of one bin with variances 1 and 4: weights 4/5 and 1/5 (the
    mbi lesson: BLUE weights are 1/variance, not 1/sd)."""
    strat = S.Strategy(np.array([[1.0], [1.0]]), levels=[1, 2])
    # swap on one bin: nothing is private, so use add/remove with budgets giving b = 1/eps
    mech = dp.Mechanism(strat, epsilon=1.0, neighbours="add_remove",
                        level_budgets=[2.0 / 3.0, 1.0 / 3.0])
    v = mech.variances
    assert v[1] / v[0] == pytest.approx(4.0)
    x = dp.blue(mech, np.array([10.0, 20.0]))
    assert x[0] == pytest.approx(0.8 * 10 + 0.2 * 20)
    assert dp.blue_covariance(mech)[0, 0] == pytest.approx(1 / (1 / v[0] + 1 / v[1]))


def test_blue_batch_matches_single():
    mech = dp.Mechanism(S.tree(27, 3), epsilon=1.0, neighbours="add_remove")
    rng = np.random.default_rng(3)
    ys = np.stack([mech.measure(rng.poisson(5, 27), rng) for _ in range(4)])
    batch = dp.blue(mech, ys)
    for i in range(4):
        np.testing.assert_allclose(batch[i], dp.blue(mech, ys[i]), atol=1e-10)


def test_blue_noise_free_is_exact():
    """With noise-free answers, the BLUE returns the true histogram."""
    h = np.arange(16) % 5
    for strat in (S.binary_tree(16), S.prefix_sums(16), S.tree(16, [4, 1, 4])):
        mech = dp.Mechanism(strat, epsilon=1.0)
        np.testing.assert_allclose(dp.blue(mech, mech.released.apply(h)), h, atol=1e-9)


def test_unidentifiable_strategy_raises():
    a = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # bins 0, 1 inseparable
    mech = dp.Mechanism(S.Strategy(a), epsilon=1.0, neighbours="add_remove")
    with pytest.raises(ValueError, match="cannot identify"):
        dp.blue(mech, np.zeros(3))
    for method in ("dense", "sparse"):
        with pytest.raises(ValueError, match="cannot identify"):
            gls(mech, method)
    # a level with zero budget on the leaves of a tree leaves bins unidentified
    mech = dp.Mechanism(S.binary_tree(4), epsilon=1.0, level_budgets=[1.0, 0.0], neighbours="swap")
    with pytest.raises(ValueError, match="cannot identify"):
        dp.expected_error(dp.workloads.identity(4), mech)


def test_unmeasured_root_is_ignored():
    """A zero-budget root (add/remove) equals the same tree without its root row."""
    tree = S.tree(16, [4, 4])
    with_root = dp.Mechanism(tree, epsilon=1.0, neighbours="add_remove",
                             level_budgets=[0.0, 0.5, 0.5])
    a = tree.matrix.toarray()[1:]
    no_root = dp.Mechanism(S.Strategy(a, tree.levels[1:]), epsilon=1.0,
                           neighbours="add_remove")
    np.testing.assert_allclose(dp.blue_covariance(with_root), dp.blue_covariance(no_root),
                               rtol=1e-10)
