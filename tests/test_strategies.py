"""Strategy layouts: rows, levels and ranges follow the documented conventions."""

import networkx as nx
import numpy as np
import pytest

from dptree_opt import strategies as S
from oracles import tree_matrix as tree_rows_by_definition


@pytest.mark.parametrize("ks", [(2, 2, 2), (3, 5, 2), (4, 1, 3), (7,), ()])
def test_tree_layout(ks):
    n = int(np.prod(ks)) if ks else 1
    strat = S.tree(n, list(ks))
    rows, levels = tree_rows_by_definition(ks)
    np.testing.assert_array_equal(strat.matrix.toarray(), rows)
    np.testing.assert_array_equal(strat.levels, levels)
    assert strat.n_bins == n and strat.matrix.format == "csr"
    # parents: the parent's range contains the child's, one level up
    par = strat.parent
    for r in range(1, strat.n_rows):
        p = par[r]
        assert strat.levels[p] == strat.levels[r] - 1
        assert strat.lo[p] <= strat.lo[r] and strat.hi[r] <= strat.hi[p]
    x = np.arange(n, dtype=float)
    np.testing.assert_allclose(strat.apply(x), rows @ x)


def test_int_branching_and_binary():
    assert S.tree(81, 3).branching == (3, 3, 3, 3)
    assert S.binary_tree(16).branching == (2, 2, 2, 2)
    assert S.tree(1, 5).n_rows == 1


@pytest.mark.parametrize("n,branching", [(100, 3), (12, [2, 5]), (16, [4, 2]), (10, 1)])
def test_branching_mismatch_names_both(n, branching):
    with pytest.raises(ValueError) as info:
        S.tree(n, branching)
    msg = str(info.value)
    assert str(n) in msg and ("branching" in msg or "k=" in msg)


def test_hierarchy_from_networkx():
    g = nx.DiGraph()
    g.add_edges_from([("r", "a"), ("r", "b"), ("a", "a1"), ("a", "a2"), ("a", "a3"),
                      ("b", "b1"), ("b1", "b11"), ("b1", "b12")])
    strat = S.hierarchy(g)
    assert strat.n_bins == 5  # leaves a1 a2 a3 b11 b12
    assert strat.node_labels == ["r", "a", "b", "a1", "a2", "a3", "b1", "b11", "b12"]
    np.testing.assert_array_equal(strat.levels, [0, 1, 1, 2, 2, 2, 2, 3, 3])
    dense = strat.matrix.toarray()
    np.testing.assert_array_equal(dense[0], np.ones(5))
    np.testing.assert_array_equal(dense[2], [0, 0, 0, 1, 1])  # b covers b11, b12
    np.testing.assert_array_equal(dense[6], [0, 0, 0, 1, 1])  # b1 has the same range
    # undirected with explicit root gives the same strategy
    und = S.hierarchy(g.to_undirected(), root="r")
    np.testing.assert_array_equal(und.matrix.toarray(), dense)
    # a balanced hierarchy equals the level-uniform tree
    bal = nx.balanced_tree(3, 2, create_using=nx.DiGraph)
    np.testing.assert_array_equal(S.hierarchy(bal).matrix.toarray(), S.tree(9, 3).matrix.toarray())


def test_hierarchy_bad_input():
    with pytest.raises(ValueError, match="root"):
        S.hierarchy(nx.path_graph(3))
    with pytest.raises(ValueError, match="tree"):
        S.hierarchy(nx.cycle_graph(4), root=0)
    with pytest.raises(ValueError, match="arborescence"):
        S.hierarchy(nx.DiGraph([(0, 1), (2, 1)]))


def test_histogram_and_prefix_layout():
    np.testing.assert_array_equal(S.histogram(4).matrix.toarray(), np.eye(4))
    p = S.prefix_sums(4)
    np.testing.assert_array_equal(p.matrix.toarray(), np.tril(np.ones((4, 4))))
    np.testing.assert_array_equal(p.levels, [1, 1, 1, 0])
    h = S.histogram(3).with_total_row()
    np.testing.assert_array_equal(h.matrix.toarray()[-1], np.ones(3))
    assert h.levels[-1] == 0


def test_custom_strategy_level_zero_must_be_total():
    with pytest.raises(ValueError, match="level 0"):
        S.Strategy(np.array([[1.0, 0.0], [1.0, 1.0]]), levels=[0, 1])
    ok = S.Strategy(np.array([[1.0, 0.0], [1.0, 1.0]]), levels=[1, 0])
    assert ok.total_row_mask().tolist() == [False, True]


def test_huge_tree_is_lazy():
    """A 2^24-bin binary tree is built without its 4e8-nonzero matrix."""
    strat = S.binary_tree(2**24)
    assert strat.n_rows == 2**25 - 1
    w = np.ones(strat.n_rows)
    assert strat.sensitivity(w, "add_remove", 1) == 25
    assert "matrix" not in strat.__dict__


def test_padded_height_is_the_smallest_covering_height():
    for n in range(1, 300):
        for k in range(2, 20):
            assert S.padded_height(n, k) == min(h for h in range(12) if k**h >= n)
    for bad in (1, 0, 2.0, True):
        with pytest.raises(ValueError, match="branching factor k"):
            S.padded_height(8, bad)
