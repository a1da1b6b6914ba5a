"""[RTS] Sec. IV design problems (cvxpy) against the paper's closed forms (relative 1e-5)."""

import math

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import optimize
from dptree_opt import strategies as S
from dptree_opt import workloads as W


@pytest.mark.parametrize("ks", [[4, 8, 32], [2] * 6, [17, 17], [3, 5, 1, 7], [64, 2]])
@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_o1_equals_theorem_iv_2a(ks, eps):
    """eps_l = eps (k_l - 1)^(1/3) / sum_m (k_m - 1)^(1/3); error (4K/eps^2)(sum (k_l-1)^(1/3))^3."""
    design = optimize.budgets(ks, eps)
    c = np.array([k - 1.0 for k in ks]) ** (1 / 3)
    np.testing.assert_allclose(design.budgets, eps * c / c.sum(), rtol=1e-5, atol=1e-12)
    k = math.prod(ks)
    assert design.error == pytest.approx(4 * k / eps**2 * c.sum() ** 3, rel=1e-5)
    assert design.normalised_error == pytest.approx(c.sum() ** 3, rel=1e-5)
    # the error is the exact covering error of the mechanism with those budgets
    used = [b for b, kk in zip(design.budgets, ks)]
    if all(b > 0 for b in used):
        mech = dp.Mechanism(S.tree(k, ks), epsilon=eps, level_budgets=used)
        assert dp.expected_error(W.prefix(k), mech, "covering") == pytest.approx(design.error,
                                                                                 rel=1e-9)


@pytest.mark.parametrize("eps_l", [[0.2, 0.3, 0.5], [1.0, 1.0], [0.3, 0.3, 0.4, 0.5]])
def test_o2_equals_theorem_iv_2b(eps_l):
    """k_l = K^(1/h) eps_l^2 / (prod eps_m)^(2/h) where every k_l >= 1."""
    k, e = 2**16, np.array(eps_l)
    design = optimize.branching(k, eps_l)
    h = e.size
    closed = k ** (1 / h) * e**2 / np.prod(e) ** (2 / h)
    assert np.all(closed >= 1)
    np.testing.assert_allclose(design.branching, closed, rtol=1e-5)
    assert design.error == pytest.approx(4 * k * np.sum((closed - 1) / e**2), rel=1e-5)


@pytest.mark.parametrize("k,h", [(4096, 3), (10**6, 4)])
def test_joint_equals_theorem_iv_3(k, h):
    """k_l = K^(1/h), eps_l = eps/h, error (4K h^3 / eps^2)(K^(1/h) - 1)."""
    design = optimize.joint(k, 2.0, h)
    np.testing.assert_allclose(design.branching, k ** (1 / h), rtol=1e-5)
    np.testing.assert_allclose(design.budgets, 2.0 / h, rtol=1e-5)
    assert design.error == pytest.approx(4 * k * h**3 / 4.0 * (k ** (1 / h) - 1), rel=1e-5)


def test_joint_degenerates_without_restriction():
    """MATH.md section 4: K = 4, h = 2: (4, 1) with all budget on one level costs 3/eps^2
    ([RTS]-normalised) vs 8/eps^2 for (2, 2)."""
    degenerate, balanced = optimize.degenerate_joint_example(1.0)
    assert degenerate.normalised_error == pytest.approx(3.0)
    assert balanced.normalised_error == pytest.approx(8.0)
    with pytest.raises(ValueError, match="min_branching"):
        optimize.joint(4, 1.0, 2, min_branching=1)


def test_optimal_branching_factor():
    """Lemma IV.3: ln k = 3(1 - 1/k), k* = 16.801016..., integer optimum 17."""
    k = optimize.optimal_branching_factor()
    assert k == pytest.approx(16.801016, abs=1e-6)
    assert math.log(k) == pytest.approx(3 * (1 - 1 / k), rel=1e-12)
    assert optimize.optimal_branching_factor(integer=True) == 17
    assert optimize.psi(16) == pytest.approx(0.703777, abs=1e-6)
    assert optimize.psi(17) == pytest.approx(0.703529, abs=1e-6)
    ks = np.linspace(2, 60, 5801)
    assert abs(ks[np.argmin(optimize.psi(ks))] - k) < 0.01  # brute-force minimiser


def test_optimal_height():
    """Relaxed optimum ln K / ln k*; the integer height minimises h^3 (K^(1/h) - 1)."""
    k = 2**20
    assert optimize.optimal_height(k, integer=False) == pytest.approx(
        math.log(k) / math.log(16.801016), rel=1e-6)
    hs = range(1, 21)
    best = min(hs, key=lambda h: h**3 * (k ** (1 / h) - 1))
    assert optimize.optimal_height(k) == best == 5


@pytest.mark.parametrize("call", [
    lambda: optimize.budgets([4, 4], 0.0),
    lambda: optimize.budgets([4, 4], 1.0, estimator="blue"),
    lambda: optimize.budgets([], 1.0),
    lambda: optimize.branching(1, [1.0]),
    lambda: optimize.branching(64, [1.0, -1.0]),
    lambda: optimize.joint(64, 1.0, 0),
    lambda: optimize.joint(16, 1.0, 3),  # 3 levels of k >= 3 need K >= 27
])
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()
