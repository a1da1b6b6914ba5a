"""Privacy tests: sensitivities, calibration and the reported guarantee, checked independently.

Every expected number comes from MATH.md (sections 0-1), [SU] / [RTS], or from a brute-force
enumeration written here: small datasets (every dataset of 1 or 2 records over the D bins, as
histograms), all their neighbours (swap: one record changes bin; add/remove: one record added
or removed), and the norm of the change of the (weighted) released answers, computed with a
dense matrix that the test builds itself from the definition of the strategy.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from dptree_opt import Mechanism, strategies
from dptree_opt.strategies import Strategy
from oracles import brute_loss, tree_matrix

REL = 1e-9
HYP = settings(max_examples=60, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------
# Dense matrices built here, from the definitions (not from the library)
# ---------------------------------------------------------------------------------------------
def dyadic_matrix(d: int) -> np.ndarray:
    """All 2D - 1 dyadic counts of the binary tree over D bins ([SU])."""
    rows = []
    width = d
    while width >= 1:
        for start in range(0, d, width):
            r = np.zeros(d)
            r[start:start + width] = 1
            rows.append(r)
        width //= 2
    return np.array(rows)


def prefix_matrix(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n)))


def with_total(a: np.ndarray) -> np.ndarray:
    return np.vstack([a, np.ones((1, a.shape[1]))])


# ---------------------------------------------------------------------------------------------
# Hypothesis generators
# ---------------------------------------------------------------------------------------------
def weight_vectors(size: int):
    return hnp.arrays(np.float64, size, elements=st.one_of(
        st.just(0.0), st.floats(0.0, 5.0, allow_nan=False, allow_infinity=False)))


@st.composite
def branchings(draw, max_bins=24):
    ks = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    if draw(st.booleans()):  # force a level with k = 1 somewhere
        ks.insert(draw(st.integers(0, len(ks))), 1)
    while math.prod(ks) > max_bins:
        ks.pop()
    return ks or [1]


@st.composite
def random_hierarchies(draw, max_leaves=12, max_depth=4):
    """A random rooted tree (every internal node has 1-4 children), as a networkx graph, and
    the child lists used to build it (insertion order = children order)."""
    children = {0: []}
    frontier = [(0, 0)]
    next_id = 1
    n_leaves_budget = max_leaves
    while frontier:
        v, depth = frontier.pop(0)
        can_split = depth < max_depth and n_leaves_budget > 1
        k = draw(st.integers(1 if v == 0 and can_split else 0, 4 if can_split else 0))
        k = min(k, n_leaves_budget)
        n_leaves_budget -= max(k - 1, 0)
        for _ in range(k):
            children[v].append(next_id)
            children[next_id] = []
            frontier.append((next_id, depth + 1))
            next_id += 1
    directed = draw(st.booleans())
    g = nx.DiGraph() if directed else nx.Graph()
    g.add_node(0)
    order = [0]
    while order:  # add edges parent -> child in children order
        v = order.pop(0)
        for c in children[v]:
            g.add_edge(v, c)
            order.append(c)
    return g, children


def hierarchy_matrix(children, node_order):
    """Rows (in ``node_order``) = leaves below each node; bins = leaves in DFS preorder."""
    leaves = []

    def dfs(v):
        if not children[v]:
            leaves.append(v)
        for c in children[v]:
            dfs(c)

    dfs(0)
    col = {leaf: j for j, leaf in enumerate(leaves)}

    def below(v):
        if not children[v]:
            return [v]
        return [x for c in children[v] for x in below(c)]

    a = np.zeros((len(node_order), len(leaves)))
    for r, v in enumerate(node_order):
        a[r, [col[x] for x in below(v)]] = 1
    return a


# =============================================================================================
# 1. Binary tree sensitivity ([SU], MATH.md section 1), brute force over dataset pairs
# =============================================================================================
@pytest.mark.parametrize("d", [2, 4, 8, 16])
def test_binary_tree_l1_sensitivity_brute_force(d):
    strat = strategies.binary_tree(d)
    a = dyadic_matrix(d)
    assert a.shape == (2 * d - 1, d)
    np.testing.assert_array_equal(strat.matrix.toarray(), a)  # same queries, same order
    ones = np.ones(a.shape[0])
    log = math.log2(d)

    swap = brute_loss(a, ones, "swap", 1)
    add_remove = brute_loss(a, ones, "add_remove", 1)
    assert swap == pytest.approx(2 * log, rel=REL)
    assert add_remove == pytest.approx(log + 1, rel=REL)
    # under swap the root (level 0) never changes: the brute force without it agrees
    assert brute_loss(a[1:], ones[1:], "swap", 1) == pytest.approx(2 * log, rel=REL)
    assert brute_loss(a[:1], ones[:1], "swap", 1) == 0.0

    assert strat.sensitivity(ones, "swap", 1) == pytest.approx(swap, rel=REL)
    assert strat.sensitivity(ones, "add_remove", 1) == pytest.approx(add_remove, rel=REL)
    # l2: swap sqrt(2 log2 D), add/remove sqrt(log2 D + 1) (same pairs, 0/1 changes)
    assert strat.sensitivity(ones, "swap", 2) == pytest.approx(math.sqrt(2 * log), rel=REL)
    assert strat.sensitivity(ones, "swap", 2) == pytest.approx(
        brute_loss(a, ones, "swap", 2), rel=REL)
    assert strat.sensitivity(ones, "add_remove", 2) == pytest.approx(math.sqrt(log + 1), rel=REL)


@pytest.mark.parametrize("d", [2, 4, 8, 16])
def test_binary_tree_per_level_sensitivity(d):
    """MATH.md section 0: each tree level is a partition: l1 2 / l2 sqrt(2) under swap,
    1 / 1 under add/remove; the root level: 0 under swap, 1 under add/remove."""
    strat = strategies.binary_tree(d)
    a = dyadic_matrix(d)
    levels = np.asarray(strat.levels)
    for lvl in range(int(math.log2(d)) + 1):
        w = (levels == lvl).astype(float)
        for p, swap_expected in ((1, 2.0), (2, math.sqrt(2))):
            if lvl == 0:
                swap_expected = 0.0
            assert brute_loss(a, w, "swap", p) == pytest.approx(swap_expected, rel=REL, abs=0)
            assert strat.sensitivity(w, "swap", p) == pytest.approx(swap_expected, rel=REL)
            assert brute_loss(a, w, "add_remove", p) == pytest.approx(1.0, rel=REL)
            assert strat.sensitivity(w, "add_remove", p) == pytest.approx(1.0, rel=REL)


# =============================================================================================
# 2. Brute force against .sensitivity for every strategy family (l1, l2, random weights)
# =============================================================================================
def _check_against_brute(strat, a_dense, w):
    for model in ("swap", "add_remove"):
        for p in (1, 2):
            expected = brute_loss(a_dense, w, model, p)
            got = strat.sensitivity(w, model, p)
            assert got == pytest.approx(expected, rel=REL, abs=1e-12), (model, p, w)


@HYP
@given(n=st.integers(1, 12), data=st.data())
def test_histogram_sensitivity_brute_force(n, data):
    strat = strategies.histogram(n)
    a = np.eye(n)
    np.testing.assert_array_equal(strat.matrix.toarray(), a)
    _check_against_brute(strat, a, data.draw(weight_vectors(n)))
    _check_against_brute(strat, a, np.ones(n))


@HYP
@given(n=st.integers(1, 12), data=st.data())
def test_prefix_sums_sensitivity_brute_force(n, data):
    strat = strategies.prefix_sums(n)
    a = prefix_matrix(n)
    np.testing.assert_array_equal(strat.matrix.toarray(), a)
    _check_against_brute(strat, a, data.draw(weight_vectors(n)))
    _check_against_brute(strat, a, np.ones(n))


@HYP
@given(ks=branchings(), data=st.data())
def test_tree_mixed_branching_sensitivity_brute_force(ks, data):
    n = math.prod(ks)
    strat = strategies.tree(n, ks)
    a, levels = tree_matrix(ks)
    np.testing.assert_array_equal(strat.matrix.toarray(), a)
    np.testing.assert_array_equal(strat.levels, levels)
    # arbitrary row weights (generic path) ...
    _check_against_brute(strat, a, data.draw(weight_vectors(a.shape[0])))
    # ... and weights constant per level (the closed-form path)
    per_level = data.draw(weight_vectors(len(ks) + 1))
    _check_against_brute(strat, a, per_level[levels])
    # one level at a time
    for lvl in range(len(ks) + 1):
        _check_against_brute(strat, a, (levels == lvl).astype(float))


@pytest.mark.parametrize("ks", [[2, 1, 3], [1, 4], [4, 1], [1, 1, 2], [3, 1, 1, 2], [1], [2, 2, 2, 2]])
def test_tree_explicit_branching_with_k1(ks):
    n = math.prod(ks)
    strat = strategies.tree(n, ks)
    a, levels = tree_matrix(ks)
    rng = np.random.default_rng(sum(ks))
    for w in (np.ones(a.shape[0]), rng.uniform(0, 3, a.shape[0]),
              rng.uniform(0, 3, len(ks) + 1)[levels]):
        _check_against_brute(strat, a, w)


@HYP
@given(tree=random_hierarchies(), data=st.data())
def test_hierarchy_sensitivity_brute_force(tree, data):
    g, children = tree
    strat = strategies.hierarchy(g, root=None if g.is_directed() else 0)
    a = hierarchy_matrix(children, strat.node_labels)
    np.testing.assert_array_equal(strat.matrix.toarray(), a)
    # levels = depth of the node, root = 0
    depth = nx.shortest_path_length(g, 0)
    np.testing.assert_array_equal(strat.levels, [depth[v] for v in strat.node_labels])
    _check_against_brute(strat, a, data.draw(weight_vectors(a.shape[0])))
    _check_against_brute(strat, a, np.ones(a.shape[0]))


def test_hierarchy_with_chains_explicit():
    """Nodes with a single child (chains) and leaves at different depths."""
    g = nx.DiGraph()
    g.add_edges_from([("r", "a"), ("a", "b"), ("b", "c"), ("b", "d"), ("r", "e"),
                      ("e", "f"), ("r", "g")])
    children = {"r": ["a", "e", "g"], "a": ["b"], "b": ["c", "d"], "c": [], "d": [],
                "e": ["f"], "f": [], "g": []}
    strat = strategies.hierarchy(g)
    # hierarchy_matrix expects the root to be called 0
    relabel = {v: (0 if v == "r" else v) for v in children}
    ch = {relabel[v]: [relabel[c] for c in cs] for v, cs in children.items()}
    a = hierarchy_matrix(ch, [relabel[v] for v in strat.node_labels])
    np.testing.assert_array_equal(strat.matrix.toarray(), a)
    rng = np.random.default_rng(7)
    for w in (np.ones(a.shape[0]), rng.uniform(0, 2, a.shape[0])):
        _check_against_brute(strat, a, w)


@HYP
@given(shape=st.tuples(st.integers(1, 6), st.integers(1, 6)), binary=st.booleans(),
       data=st.data())
def test_generic_strategy_sensitivity_brute_force(shape, binary, data):
    elements = (st.sampled_from([0.0, 1.0]) if binary
                else st.one_of(st.just(0.0), st.integers(-3, 3).map(float),
                               st.floats(-3, 3, allow_nan=False, allow_infinity=False)))
    a = data.draw(hnp.arrays(np.float64, shape, elements=elements))
    strat = Strategy(a)
    _check_against_brute(strat, a, data.draw(weight_vectors(shape[0])))
    _check_against_brute(strat, a, np.ones(shape[0]))


def test_generic_strategy_negative_entries_explicit():
    # column 0 = (1, -1), column 1 = (-1, 1): swap difference (2, -2), l1 4, l2 sqrt(8)
    a = np.array([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.5]])
    strat = Strategy(a)
    w = np.ones(2)
    assert brute_loss(a, w, "swap", 1) == pytest.approx(4.0)
    assert strat.sensitivity(w, "swap", 1) == pytest.approx(4.0)
    assert strat.sensitivity(w, "swap", 2) == pytest.approx(math.sqrt(8.0))
    assert strat.sensitivity(w, "add_remove", 1) == pytest.approx(2.0)
    assert strat.sensitivity(w, "add_remove", 2) == pytest.approx(math.sqrt(2.0))


def test_generic_strategy_large_enough_to_chunk():
    """More columns than one chunk of the generic pairwise search (exercise chunk seams)."""
    rng = np.random.default_rng(3)
    n = 300
    a = rng.integers(-2, 3, size=(3, n)).astype(float)
    # plant the worst pair across the chunk boundary
    a[:, 10] = [5, -5, 5]
    a[:, 290] = [-5, 5, -5]
    strat = Strategy(a)
    w = np.array([1.0, 0.5, 2.0])
    # exact answers computed here: the planted pair differs by (10, -10, 10)
    assert strat.sensitivity(w, "swap", 1) == pytest.approx(10 * 3.5)
    assert strat.sensitivity(w, "swap", 2) == pytest.approx(10 * math.sqrt(1 + 0.25 + 4))
    # binary matrix across chunks
    b = np.zeros((4, n))
    b[:, 5] = 1
    strat_b = Strategy(b)
    assert strat_b.sensitivity(np.ones(4), "swap", 1) == pytest.approx(4.0)


# =============================================================================================
# 3. Calibration (MATH.md sections 0-1)
# =============================================================================================
TREES = [(2, 2, 2), (4, 8, 2), (3, 5, 2), (16,), (2, 3, 4, 2)]


@pytest.mark.parametrize("ks", TREES)
@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_laplace_tree_swap_calibration(ks, eps):
    n = math.prod(ks)
    h = len(ks)
    mech = Mechanism(strategies.tree(n, ks), epsilon=eps, neighbours="swap")  # Laplace by default
    eps_l = eps / h  # equal split over the h noisy levels; the root is exact
    assert set(mech.level_budgets) == set(range(1, h + 1))
    levels = np.asarray(mech.released.levels)
    for lvl in range(1, h + 1):
        assert mech.level_budgets[lvl] == pytest.approx(eps_l, rel=REL)
        assert mech.level_sensitivities[lvl] == pytest.approx(2.0, rel=REL)  # partition, swap
        b = 2.0 / eps_l
        assert mech.level_scales[lvl] == pytest.approx(b, rel=REL)
        assert mech.level_variances[lvl] == pytest.approx(8.0 / eps_l**2, rel=REL)
        np.testing.assert_allclose(mech.scales[levels == lvl], b, rtol=REL)
        np.testing.assert_allclose(mech.variances[levels == lvl], 2 * b * b, rtol=REL)
    assert mech.variances[levels == 0].tolist() == [0.0]
    assert mech.exact_rows.tolist() == (levels == 0).tolist()
    assert mech.epsilon == pytest.approx(eps, rel=REL)
    assert mech.rho is None


@pytest.mark.parametrize("ks", TREES)
def test_laplace_tree_add_remove_calibration(ks):
    n, h, eps = math.prod(ks), len(ks), 2.0
    mech = Mechanism(strategies.tree(n, ks), epsilon=eps, neighbours="add_remove")
    eps_l = eps / (h + 1)  # h + 1 noisy levels including the root
    assert set(mech.level_budgets) == set(range(h + 1))
    assert not mech.exact_rows.any()
    assert not mech.public_total
    for lvl in range(h + 1):
        assert mech.level_budgets[lvl] == pytest.approx(eps_l, rel=REL)
        assert mech.level_sensitivities[lvl] == pytest.approx(1.0, rel=REL)
        assert mech.level_variances[lvl] == pytest.approx(2.0 / eps_l**2, rel=REL)
    np.testing.assert_allclose(mech.variances, 2.0 / eps_l**2, rtol=REL)
    assert mech.epsilon == pytest.approx(eps, rel=REL)


@pytest.mark.parametrize("ks", TREES)
def test_laplace_tree_add_remove_public_total_calibration(ks):
    n, h, eps = math.prod(ks), len(ks), 2.0
    mech = Mechanism(strategies.tree(n, ks), epsilon=eps, neighbours="add_remove",
                     public_total=True)
    eps_l = eps / h  # the root is exact and free
    assert set(mech.level_budgets) == set(range(1, h + 1))
    levels = np.asarray(mech.released.levels)
    assert mech.exact_rows.tolist() == (levels == 0).tolist()
    assert mech.variances[0] == 0.0
    for lvl in range(1, h + 1):
        assert mech.level_sensitivities[lvl] == pytest.approx(1.0, rel=REL)
        assert mech.level_variances[lvl] == pytest.approx(2.0 / eps_l**2, rel=REL)
    assert mech.epsilon == pytest.approx(eps, rel=REL)
    assert mech.released.n_rows == mech.strategy.n_rows  # the root is already there


@pytest.mark.parametrize("ks", TREES)
@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
def test_gaussian_tree_calibration(ks, neighbours):
    n, h, rho = math.prod(ks), len(ks), 0.7
    mech = Mechanism(strategies.tree(n, ks), rho=rho, noise="gaussian", neighbours=neighbours)
    if neighbours == "swap":
        d2, noisy = math.sqrt(2.0), list(range(1, h + 1))
    else:
        d2, noisy = 1.0, list(range(h + 1))
    rho_l = rho / len(noisy)
    assert sorted(mech.level_budgets) == noisy
    for lvl in noisy:
        assert mech.level_budgets[lvl] == pytest.approx(rho_l, rel=REL)
        assert mech.level_sensitivities[lvl] == pytest.approx(d2, rel=REL)
        assert mech.level_variances[lvl] == pytest.approx(d2**2 / (2 * rho_l), rel=REL)
        assert mech.level_scales[lvl] == pytest.approx(d2 / math.sqrt(2 * rho_l), rel=REL)
    assert mech.rho == pytest.approx(rho, rel=REL)
    assert mech.epsilon is None


@pytest.mark.parametrize("d", [2, 8, 64])
def test_binary_tree_su_scale(d):
    """[SU] (MATH.md section 1): eps_l = eps / log2 D, per-node scale 2 log2 D / eps (swap)."""
    eps = 1.5
    mech = Mechanism(strategies.binary_tree(d), epsilon=eps, neighbours="swap")
    log = math.log2(d)
    for lvl in range(1, int(log) + 1):
        assert mech.level_budgets[lvl] == pytest.approx(eps / log, rel=REL)
        assert mech.level_scales[lvl] == pytest.approx(2 * log / eps, rel=REL)


def test_histogram_and_prefix_calibration_match_rts():
    """[RTS] Sec. III (MATH.md section 1): histogram Lap(2/eps); range mechanism Lap((K-1)/eps)."""
    k, eps = 10, 0.8
    hist = Mechanism(strategies.histogram(k), epsilon=eps, neighbours="swap")
    np.testing.assert_allclose(hist.scales[:k], 2 / eps, rtol=REL)
    np.testing.assert_allclose(hist.variances[:k], 8 / eps**2, rtol=REL)
    assert hist.epsilon == pytest.approx(eps, rel=REL)
    pre = Mechanism(strategies.prefix_sums(k), epsilon=eps, neighbours="swap")
    np.testing.assert_allclose(pre.scales[:-1], (k - 1) / eps, rtol=REL)
    np.testing.assert_allclose(pre.variances[:-1], 2 * (k - 1) ** 2 / eps**2, rtol=REL)
    assert pre.epsilon == pytest.approx(eps, rel=REL)


@HYP
@given(ks=st.lists(st.integers(2, 4), min_size=1, max_size=4),
       raw=st.lists(st.floats(0.01, 1.0), min_size=5, max_size=5),
       noise=st.sampled_from(["laplace", "gaussian"]),
       mode=st.sampled_from(["swap", "add_remove", "public"]))
def test_tree_random_level_budgets_reported_exactly(ks, raw, noise, mode):
    """With every k_l >= 2 the worst neighbour pair touches every noisy level at its full
    sensitivity, so the loss is exactly the sum of the level budgets (= the request)."""
    n, h = math.prod(ks), len(ks)
    n_noisy = h + 1 if mode == "add_remove" else h
    total = 1.3
    b = np.array(raw[:n_noisy])
    b = b / b.sum() * total
    kw = {"epsilon": total} if noise == "laplace" else {"rho": total}
    mech = Mechanism(strategies.tree(n, ks), noise=noise, level_budgets=b,
                     neighbours="swap" if mode == "swap" else "add_remove",
                     public_total=True if mode == "public" else None, **kw)
    reported = mech.epsilon if noise == "laplace" else mech.rho
    assert reported == pytest.approx(total, rel=1e-9)
    first = 0 if mode == "add_remove" else 1
    for i, lvl in enumerate(range(first, h + 1)):
        assert mech.level_budgets[lvl] == pytest.approx(b[i], rel=1e-12)
        if noise == "laplace":
            sens = 2.0 if mode == "swap" else 1.0
            assert mech.level_variances[lvl] == pytest.approx(2 * (sens / b[i]) ** 2, rel=REL)
        else:
            sens2 = 2.0 if mode == "swap" else 1.0
            assert mech.level_variances[lvl] == pytest.approx(sens2 / (2 * b[i]), rel=REL)


# =============================================================================================
# 4. Independent recomputation of the reported guarantee (brute force over neighbours)
# =============================================================================================
def _own_released_matrix(kind, arg, neighbours, public):
    """(dense released matrix built here, whether an exact total row was appended)."""
    if kind == "tree":
        a, _ = tree_matrix(arg)
        return a  # has its root (level 0)
    if kind == "histogram":
        a = np.eye(arg)
        return with_total(a) if (neighbours == "swap" or public) else a
    if kind == "prefix":
        return prefix_matrix(arg)  # its last row is the total (level 0)
    if kind == "generic":
        return with_total(arg) if (neighbours == "swap" or public) else arg
    raise AssertionError(kind)


def _strategy(kind, arg):
    if kind == "tree":
        return strategies.tree(math.prod(arg), arg)
    if kind == "histogram":
        return strategies.histogram(arg)
    if kind == "prefix":
        return strategies.prefix_sums(arg)
    return Strategy(arg)


GENERIC = np.array([[1.0, -2.0, 0.5, 0.0], [0.0, 1.0, 1.0, -1.0], [2.0, 0.0, 0.0, 1.0]])
CASES = [("tree", [2, 2, 2]), ("tree", [3, 1, 2]), ("tree", [1, 4]), ("tree", [4, 3]),
         ("histogram", 6), ("prefix", 7), ("generic", GENERIC)]


def _loss_from_scales(a, scales, model, p):
    s = np.asarray(scales, dtype=float)
    w = np.zeros_like(s)
    ok = np.isfinite(s) & (s > 0)  # exact rows (scale 0) and unmeasured rows (inf) skipped
    w[ok] = 1.0 / s[ok]
    return brute_loss(a, w, model, p)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}")
@pytest.mark.parametrize("mode", ["swap", "add_remove", "public"])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_reported_guarantee_recomputed_by_brute_force(case, mode, noise):
    kind, arg = case
    neighbours = "swap" if mode == "swap" else "add_remove"
    public = mode == "public"
    budget = 0.9
    kw = {"epsilon": budget} if noise == "laplace" else {"rho": budget}
    mech = Mechanism(_strategy(kind, arg), noise=noise, neighbours=neighbours,
                     public_total=True if public else None, **kw)
    a = _own_released_matrix(kind, arg, neighbours, public)
    np.testing.assert_array_equal(mech.released.matrix.toarray(), a)
    if noise == "laplace":
        eps = _loss_from_scales(a, mech.scales, neighbours, 1)
        assert mech.epsilon == pytest.approx(eps, rel=REL, abs=1e-12)
        assert mech.epsilon <= budget * (1 + 1e-9)
    else:
        rho = 0.5 * _loss_from_scales(a, mech.scales, neighbours, 2) ** 2
        assert mech.rho == pytest.approx(rho, rel=REL, abs=1e-12)
        assert mech.rho <= budget * (1 + 1e-9)
    # the exact rows really take no budget: they are all-ones rows, and only when N is public
    if neighbours == "swap" or public:
        np.testing.assert_array_equal(a[mech.exact_rows], 1.0)
    else:
        assert not mech.exact_rows.any()


@HYP
@given(tree=random_hierarchies(max_leaves=10), noise=st.sampled_from(["laplace", "gaussian"]),
       mode=st.sampled_from(["swap", "add_remove", "public"]), data=st.data())
def test_hierarchy_guarantee_never_above_request(tree, noise, mode, data):
    g, children = tree
    strat = strategies.hierarchy(g, root=None if g.is_directed() else 0)
    n_levels = int(strat.levels.max())
    neighbours = "swap" if mode == "swap" else "add_remove"
    public = mode == "public"
    n_noisy = n_levels + (0 if (neighbours == "swap" or public) else 1)
    if n_noisy == 0:
        return  # a single-node hierarchy under swap has nothing to measure
    raw = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n_noisy,
                                      max_size=n_noisy)))
    budgets = None if raw.sum() == 0 else raw / raw.sum() * 1.1
    kw = {"epsilon": 1.1} if noise == "laplace" else {"rho": 1.1}
    mech = Mechanism(strat, noise=noise, neighbours=neighbours, level_budgets=budgets,
                     public_total=True if public else None, **kw)
    a = hierarchy_matrix(children, strat.node_labels)
    np.testing.assert_array_equal(strat.matrix.toarray(), a)
    reported = mech.epsilon if noise == "laplace" else mech.rho
    p = 1 if noise == "laplace" else 2
    loss = _loss_from_scales(a, mech.scales, neighbours, p)
    expected = loss if noise == "laplace" else 0.5 * loss**2
    assert reported == pytest.approx(expected, rel=REL, abs=1e-12)
    assert reported <= 1.1 * (1 + 1e-9)


@HYP
@given(shape=st.tuples(st.integers(1, 5), st.integers(2, 5)), data=st.data(),
       noise=st.sampled_from(["laplace", "gaussian"]),
       neighbours=st.sampled_from(["swap", "add_remove"]))
def test_generic_random_levels_guarantee_never_above_request(shape, data, noise, neighbours):
    a = data.draw(hnp.arrays(np.float64, shape, elements=st.integers(-2, 2).map(float)))
    levels = np.array(data.draw(st.lists(st.integers(1, 3), min_size=shape[0],
                                         max_size=shape[0])))
    strat = Strategy(a, levels)
    kw = {"epsilon": 0.5} if noise == "laplace" else {"rho": 0.5}
    mech = Mechanism(strat, noise=noise, neighbours=neighbours, **kw)
    released = with_total(a) if neighbours == "swap" else a
    np.testing.assert_array_equal(mech.released.matrix.toarray(), released)
    p = 1 if noise == "laplace" else 2
    loss = _loss_from_scales(released, mech.scales, neighbours, p)
    reported = mech.epsilon if noise == "laplace" else mech.rho
    assert reported == pytest.approx(loss if p == 1 else 0.5 * loss**2, rel=REL, abs=1e-12)
    assert reported <= 0.5 * (1 + 1e-9)
    # every level is calibrated to its own sensitivity (computed here by brute force)
    rel_levels = np.append(levels, 0) if neighbours == "swap" else levels
    for lvl, bud in mech.level_budgets.items():
        sens = brute_loss(released, (rel_levels == lvl).astype(float), neighbours, p)
        rows = rel_levels == lvl
        if sens == 0:
            assert np.all(mech.variances[rows] == 0)
        elif noise == "laplace":
            np.testing.assert_allclose(mech.variances[rows], 2 * (sens / bud) ** 2, rtol=1e-9)
        else:
            np.testing.assert_allclose(mech.variances[rows], sens**2 / (2 * bud), rtol=1e-9)


# =============================================================================================
# 5. Zero budgets, exact rows, appended total rows
# =============================================================================================
def test_zero_level_budget_unmeasured_and_nan():
    mech = Mechanism(strategies.tree(8, 2), epsilon=1.0, level_budgets=[0.5, 0.0, 0.5],
                     neighbours="swap")
    levels = np.asarray(mech.released.levels)
    assert np.all(np.isinf(mech.variances[levels == 2]))
    assert np.all(np.isinf(mech.scales[levels == 2]))
    assert math.isinf(mech.level_variances[2])
    # the other levels: Lap(2 / 0.5) -> variance 2 * 4^2 = 32
    np.testing.assert_allclose(mech.variances[(levels == 1) | (levels == 3)], 32.0)
    h = np.array([3, 0, 1, 4, 1, 5, 9, 2])
    y = mech.measure(h, np.random.default_rng(0))
    assert np.all(np.isnan(y[levels == 2]))
    assert np.all(np.isfinite(y[levels != 2]))
    assert y[0] == h.sum()  # exact root
    # the loss is still exactly 1: a pair split at the root touches levels 1 and 3 (2 nodes
    # each, weight 0.5 / 2 per node)
    assert mech.epsilon == pytest.approx(1.0, rel=REL)
    a, _ = tree_matrix([2, 2, 2])
    assert _loss_from_scales(a, mech.scales, "swap", 1) == pytest.approx(1.0, rel=REL)


def test_zero_budget_gaussian_nan_rows():
    mech = Mechanism(strategies.tree(9, 3), rho=0.4, noise="gaussian",
                     neighbours="add_remove", level_budgets=[0.0, 0.2, 0.2])
    levels = np.asarray(mech.released.levels)
    assert np.all(np.isinf(mech.variances[levels == 0]))
    y = mech.measure(np.arange(9), 1)
    assert np.isnan(y[0])
    assert np.all(np.isfinite(y[1:]))
    # loss: each leaf lies under one node of levels 1, 2: rho = 0.2 + 0.2
    assert mech.rho == pytest.approx(0.4, rel=REL)


@pytest.mark.parametrize("ks", [(2, 2, 2), (3, 4), (16,)])
def test_exact_rows_get_true_value(ks):
    n = math.prod(ks)
    rng = np.random.default_rng(11)
    h = rng.integers(0, 50, n)
    for mech in (Mechanism(strategies.tree(n, ks), epsilon=1.0, neighbours="swap"),
                 Mechanism(strategies.tree(n, ks), epsilon=1.0, neighbours="add_remove",
                           public_total=True)):
        y = mech.measure(h, rng)
        assert mech.exact_rows.sum() == 1
        assert y[mech.exact_rows].tolist() == [float(h.sum())]
        assert np.all(y[~mech.exact_rows] != mech.released.matrix.toarray()[~mech.exact_rows] @ h)


def test_histogram_swap_appends_exact_total_row():
    k = 6
    strat = strategies.histogram(k)
    mech = Mechanism(strat, epsilon=1.0, neighbours="swap")
    assert strat.n_rows == k
    rel = mech.released
    assert rel.n_rows == k + 1
    dense = rel.matrix.toarray()
    np.testing.assert_array_equal(dense[:k], np.eye(k))
    np.testing.assert_array_equal(dense[-1], np.ones(k))
    assert rel.levels[-1] == 0
    assert mech.variances[-1] == 0.0
    assert mech.exact_rows.tolist() == [False] * k + [True]
    h = np.array([1, 0, 7, 2, 2, 5])
    y = mech.measure(h, 5)
    assert y.shape == (k + 1,)
    assert y[-1] == 17.0
    # add/remove: nothing appended, unless N is declared public
    assert Mechanism(strat, epsilon=1.0, neighbours="add_remove").released.n_rows == k
    pub = Mechanism(strat, epsilon=1.0, neighbours="add_remove", public_total=True)
    assert pub.released.n_rows == k + 1
    assert pub.variances[-1] == 0.0 and pub.exact_rows[-1]
    np.testing.assert_allclose(pub.variances[:k], 2.0)  # sensitivity 1, Lap(1/1)


def test_prefix_sums_swap_last_row_exact():
    k = 8
    mech = Mechanism(strategies.prefix_sums(k), epsilon=2.0, neighbours="swap")
    assert mech.released.n_rows == k  # the total is already the last row
    assert mech.exact_rows.tolist() == [False] * (k - 1) + [True]
    assert mech.variances[-1] == 0.0
    h = np.array([2, 0, 0, 3, 1, 1, 0, 4])
    y = mech.measure(h, 0)
    assert y[-1] == 11.0
    np.testing.assert_allclose(mech.variances[:-1], 2 * (k - 1) ** 2 / 4.0)


def test_generic_strategy_swap_appends_total_row():
    a = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    mech = Mechanism(Strategy(a), epsilon=1.0, neighbours="swap")
    np.testing.assert_array_equal(mech.released.matrix.toarray(), with_total(a))
    assert mech.exact_rows.tolist() == [False, False, True]
    y = mech.measure([4, 5, 6], 0)
    assert y[-1] == 15.0


# =============================================================================================
# 6. Empirical noise check
# =============================================================================================
N_DRAWS = 200_000
N_SE = 5.0  # bound: 5 standard errors


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_sample_noise_variances_match(noise):
    """Per-row sample variance within 5 standard errors of ``.variances``. The standard
    error of the sample variance of n draws is sigma^2 sqrt((kurtosis - 1) / n):
    kurtosis 6 for Laplace (mu4 = 24 b^4, sigma^2 = 2 b^2), 3 for Gaussian. The sample mean
    is within 5 sigma / sqrt(n) of 0."""
    strat = strategies.tree(16, [2, 4, 2])
    if noise == "laplace":
        mech = Mechanism(strat, epsilon=1.0, level_budgets=[0.2, 0.3, 0.5], neighbours="swap")
        kurt = 6.0
    else:
        mech = Mechanism(strat, rho=0.5, noise="gaussian", neighbours="add_remove",
                         level_budgets=[0.05, 0.1, 0.15, 0.2])
        kurt = 3.0
    z = mech.sample_noise(np.random.default_rng(12345), size=N_DRAWS)
    assert z.shape == (N_DRAWS, mech.released.n_rows)
    v = np.asarray(mech.variances)
    exact = v == 0
    assert np.all(z[:, exact] == 0)
    zz = z[:, ~exact]
    vv = v[~exact]
    s2 = zz.var(axis=0, ddof=1)
    se = vv * np.sqrt((kurt - 1) / N_DRAWS)
    assert np.all(np.abs(s2 - vv) <= N_SE * se), np.max(np.abs(s2 - vv) / se)
    assert np.all(np.abs(zz.mean(axis=0)) <= N_SE * np.sqrt(vv / N_DRAWS))
    # rows are independent: sample correlation of two rows within 5 / sqrt(n)
    c = np.corrcoef(zz[:, 0], zz[:, -1])[0, 1]
    assert abs(c) <= N_SE / math.sqrt(N_DRAWS)
    # distribution shape: standardised draws of one row against the reference law
    scale = mech.scales[~exact][0]
    ref = stats.laplace() if noise == "laplace" else stats.norm()
    assert stats.kstest(zz[:20_000, 0] / scale, ref.cdf).pvalue > 1e-4


def test_sample_noise_unmeasured_rows_nan_and_shapes():
    mech = Mechanism(strategies.tree(4, 2), epsilon=1.0, level_budgets=[1.0, 0.0],
                     neighbours="swap")
    z = mech.sample_noise(0, size=(3, 5))
    assert z.shape == (3, 5, 7)
    assert np.all(np.isnan(z[..., 3:]))
    assert np.all(z[..., 0] == 0)
    assert mech.sample_noise(0).shape == (7,)
    # same seed, same draws (reproducible simulation)
    np.testing.assert_array_equal(mech.sample_noise(42, size=4), mech.sample_noise(42, size=4))


# =============================================================================================
# 7. Immutability
# =============================================================================================
def test_mechanism_is_immutable():
    mech = Mechanism(strategies.tree(8, 2), epsilon=1.0, neighbours="swap")
    with pytest.raises(AttributeError):
        mech.epsilon = 5.0
    with pytest.raises(AttributeError):
        mech.foo = 1
    with pytest.raises(AttributeError):
        mech._actual = 100.0
    with pytest.raises(AttributeError):
        mech._scales = np.zeros(15)
    for arr in (mech.variances, mech.scales, mech.exact_rows):
        with pytest.raises(ValueError):
            arr[1] = 0
    # dict views are copies: mutating them does not change the mechanism
    mech.level_budgets[1] = 100.0
    mech.level_variances[1] = 0.0
    assert mech.level_budgets[1] == pytest.approx(1.0 / 3)
    assert mech.level_variances[1] == pytest.approx(8.0 * 9)
    assert mech.epsilon == pytest.approx(1.0)
    assert mech.variances[1] == pytest.approx(72.0)


def test_identical_columns_have_zero_swap_l2_sensitivity():
    """Hypothesis found it: the Gram route's g_a + g_b - 2 C_ab cancelled to ~1e-16, reported
    as an l2 swap sensitivity of 1.05e-8; moving a record between identical columns changes
    nothing, so it is exactly 0 (the degenerate case is recomputed from the differences)."""
    import scipy.sparse as sps

    from dptree_opt.strategies.base import Strategy

    a = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.4375, 0.4375]])
    strat = Strategy(sps.csr_matrix(a))
    w = np.full(4, 1.39867483)
    assert strat.sensitivity(w, "swap", 2) == 0.0
    assert strat.sensitivity(w, "swap", 1) == 0.0
