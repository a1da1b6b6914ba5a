"""TreeDesign.mechanism() (issue 14 item 3), strategies.truncated_tree, and rho implying
Gaussian noise (issue 14 item 1)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.optimize import level_uniform

from oracles import tree_matrix


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_truncated_tree_is_the_padded_tree_restricted_to_the_real_bins(branching, data):
    """Rows = the padded tree's rows restricted to the first n columns, all-zero rows (nodes
    entirely in the padding) dropped, level order kept; levels = depth."""
    kp = math.prod(branching)
    n = data.draw(st.integers(1, kp))
    full, levels = tree_matrix(branching)
    restricted = full[:, :n]
    keep = restricted.any(axis=1)
    t = S.truncated_tree(n, branching)
    np.testing.assert_array_equal(t.matrix.toarray(), restricted[keep])
    np.testing.assert_array_equal(t.levels, levels[keep])
    assert t.n_bins == n
    if n == kp:  # unpadded: the level-uniform tree itself
        np.testing.assert_array_equal(t.matrix.toarray(), S.tree(kp, branching).matrix.toarray())


def test_truncated_tree_is_opendps_tree():
    from dptree_opt.anchors import opendp_layers, opendp_tree
    for n, b in ((1000, 8), (5000, 16), (7, 2)):
        ref = opendp_tree(n, b)
        t = S.truncated_tree(n, (b,) * (opendp_layers(n, b) - 1))
        np.testing.assert_array_equal(t.lo, ref.lo)
        np.testing.assert_array_equal(t.hi, ref.hi)
        np.testing.assert_array_equal(t.parent, ref.parent)


def test_truncated_tree_bad_input():
    with pytest.raises(ValueError, match="covers"):
        S.truncated_tree(10, (2, 2))
    with pytest.raises(ValueError, match=">= 1"):
        S.truncated_tree(4, (2, 0))


@pytest.mark.parametrize("estimator", ["covering", "blue", "refined"])
@pytest.mark.parametrize("setting", [dict(epsilon=1.0), dict(rho=0.3),
                                     dict(epsilon=0.5, neighbours="add_remove")])
def test_unpadded_design_round_trip(estimator, setting):
    K = 96
    d = level_uniform(K, allow_padding=False, estimator=estimator, **setting)
    mech = d.mechanism()
    assert mech.n_bins == K and mech.noise == d.noise and mech.neighbours == d.neighbours
    assert dp.expected_error(W.prefix(K), mech, estimator) == pytest.approx(d.error, rel=1e-9)


@pytest.mark.parametrize("estimator", ["covering", "blue"])
def test_padded_design_answers_the_real_bins_and_never_loses(estimator):
    """Padding as known zeros (the truncated tree): the BLUE can only gain (more exact
    constraints); the covering sums are the same rows for every prefix t < K and one
    covering node for C_K."""
    for K, setting in ((97, dict(epsilon=1.0)), (250, dict(rho=0.5, neighbours="add_remove")),
                       (1031, dict(epsilon=1.0, neighbours="add_remove"))):
        d = level_uniform(K, estimator=estimator, **setting)
        assert d.padded_bins > K
        mech = d.mechanism()
        assert mech.n_bins == K
        per = dp.expected_error(W.prefix(K), mech, estimator, per_query=True)
        assert per.sum() <= d.error * (1 + 1e-12)
        padded = d.mechanism(padded=True)
        assert padded.n_bins == d.padded_bins
        ref = dp.expected_error(W.prefix(padded.n_bins), padded, estimator, per_query=True)[:K]
        assert ref.sum() == pytest.approx(d.error, rel=1e-9)
        if estimator == "covering":
            np.testing.assert_allclose(per[:-1], ref[:-1], rtol=1e-12)


def test_issue_anchor_5000_known_zero_padding():
    """Issue 14: K = 5000, rho = 0.1, add/remove, BLUE, best equal-budget tree: 94.90 mean per
    prefix with the padding noised, 94.25 with the padding as known zeros."""
    d = level_uniform(5000, rho=0.1, neighbours="add_remove", estimator="blue", budgets="equal")
    assert d.error / 5000 == pytest.approx(94.90, abs=0.005)
    mech = d.mechanism()
    assert dp.expected_error(W.prefix(5000), mech) / 5000 == pytest.approx(94.25, abs=0.005)


def test_relaxed_design_has_no_mechanism():
    d = dp.optimize.rts.branching(1000, [0.25, 0.25, 0.25, 0.25])
    with pytest.raises(ValueError, match="relaxed"):
        d.mechanism()


def test_rho_implies_gaussian():
    mech = dp.Mechanism(S.binary_tree(8), rho=0.5)
    assert mech.noise == "gaussian" and mech.rho == pytest.approx(0.5)
    assert dp.Mechanism(S.binary_tree(8), epsilon=1.0).noise == "laplace"
    assert level_uniform(64, rho=0.5).noise == "gaussian"
    with pytest.raises(ValueError, match="rho is for noise='gaussian'"):
        dp.Mechanism(S.binary_tree(8), rho=0.5, noise="laplace")
    with pytest.raises(ValueError):
        dp.Mechanism(S.binary_tree(8), rho=0.5, epsilon=1.0)
    res = dp.compare.compare(32, rho=0.5, rows=["binary_covering"], workloads=("cdf",))
    assert res.setting.noise == "gaussian"


def test_cli_rho_alone_means_gaussian(capsys):
    from dptree_opt.cli import main
    assert main(["optimize", "--bins", "64", "--rho", "0.5"]) in (0, None)
    assert "gaussian noise" in capsys.readouterr().out
    assert main(["optimize", "--bins", "64", "--rho", "0.5", "--noise", "laplace"]) == 2
    assert "--noise laplace needs --epsilon" in capsys.readouterr().err
