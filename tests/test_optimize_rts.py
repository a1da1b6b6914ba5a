"""[RTS] Sec. IV-V design problems (optimize.rts) and the per-level variance fast path
(optimize.levels), against closed forms, the Mechanism and the slow generic error."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.optimize import rts
from dptree_opt.optimize.levels import level_variances, noisy_levels, unit_variances
from builders import tree_mechanism

REL = 1e-5
SETTINGS = [("laplace", "swap", None), ("gaussian", "swap", True),
            ("laplace", "add_remove", None), ("gaussian", "add_remove", False),
            ("laplace", "add_remove", True)]


# ------------------------------------------------------------------ levels
@pytest.mark.parametrize("noise, neighbours, public_total", SETTINGS)
def test_level_variances_equal_mechanism(noise, neighbours, public_total):
    rng = np.random.default_rng(7)
    for _ in range(12):
        h = int(rng.integers(1, 5))
        ks = tuple(int(k) for k in rng.integers(1, 5, size=h))
        if math.prod(ks) < 2:
            ks = ks[:-1] + (3,)
        lv = noisy_levels(h, neighbours, public_total)
        b = rng.uniform(0.1, 2.0, size=len(lv))
        if rng.random() < 0.3:
            b[int(rng.integers(len(lv)))] = 0.0  # an unmeasured level
        if b.sum() == 0:
            b[-1] = 1.0
        mech = tree_mechanism(ks, b, noise, neighbours, public_total)
        want = mech.level_variances
        got = level_variances(ks, b, noise=noise, neighbours=neighbours,
                              public_total=public_total)
        assert got.shape == (h + 1,)
        for lvl in range(h + 1):
            assert got[lvl] == want[lvl], (ks, b, lvl)


@pytest.mark.parametrize("noise, neighbours, public_total", SETTINGS)
def test_unit_variances_represent_every_tree_with_factors_at_least_2(noise, neighbours,
                                                                    public_total):
    rng = np.random.default_rng(3)
    for h in (1, 2, 4):
        unit = unit_variances(h, noise=noise, neighbours=neighbours, public_total=public_total)
        ks = tuple(int(k) for k in rng.integers(2, 6, size=h))
        lv = noisy_levels(h, neighbours, public_total)
        b = rng.uniform(0.2, 3.0, size=len(lv))
        v = level_variances(ks, b, noise=noise, neighbours=neighbours,
                            public_total=public_total)
        scale = 1 / b**2 if noise == "laplace" else 1 / b
        assert np.allclose(v[list(lv)], unit[list(lv)] * scale, rtol=1e-14)


def test_noisy_levels_and_bad_input():
    assert noisy_levels(3) == (1, 2, 3)
    assert noisy_levels(3, "add_remove") == (0, 1, 2, 3)
    assert noisy_levels(3, "add_remove", True) == (1, 2, 3)
    with pytest.raises(ValueError, match="public_total"):
        noisy_levels(2, "swap", False)
    with pytest.raises(ValueError, match="height"):
        noisy_levels(-1)
    with pytest.raises(ValueError, match="budgets"):
        level_variances((2, 2), [1.0])
    with pytest.raises(ValueError, match="budgets"):
        level_variances((2, 2), [1.0, -1.0])
    with pytest.raises(ValueError, match="branching"):
        level_variances((2, 0), [1.0, 1.0])
    with pytest.raises(ValueError, match="branching"):
        level_variances((2, 2.5), [1.0, 1.0])
    with pytest.raises(ValueError, match="noise"):
        level_variances((2, 2), [1.0, 1.0], noise="cauchy")
    with pytest.raises(ValueError, match="neighbours"):
        level_variances((2, 2), [1.0, 1.0], neighbours="swapped")


# ------------------------------------------------------------------ (O1)
@pytest.mark.parametrize("ks, eps", [((3, 5, 2, 7), 1.0), ((2,) * 6, 0.5), ((16, 16), 2.0),
                                     ((17, 3), 1.3), ((4, 1, 9), 1.0), ((10, 10, 10), 0.7)])
def test_o1_matches_theorem_iv2a(ks, eps):
    d = rts.budgets(ks, eps)
    want = rts.budgets_closed_form(ks, eps)
    K = math.prod(ks)
    assert d.branching == ks and d.n_bins == K
    for got, ref, k in zip(d.budgets, want, ks):
        if k == 1:
            assert got == 0.0 and ref == 0.0
        else:
            assert got == pytest.approx(ref, rel=REL)
    assert sum(d.budgets) == pytest.approx(eps, rel=1e-12)
    cubes = sum((k - 1) ** (1 / 3) for k in ks)
    assert d.error == pytest.approx(4 * K / eps**2 * cubes**3, rel=REL)
    assert d.normalised_error == pytest.approx(cubes**3, rel=REL)
    assert "cvxpy" in d.method


def test_o1_error_is_the_slow_generic_error():
    ks, eps = (3, 4, 2), 1.0
    d = rts.budgets(ks, eps)
    mech = dp.Mechanism(S.tree(24, list(ks)), epsilon=eps, neighbours="swap",
                        level_budgets=list(d.budgets))
    assert d.error == pytest.approx(dp.expected_error(W.prefix(24), mech, "covering"), rel=1e-12)


def test_o1_bad_input():
    with pytest.raises(ValueError, match="level_uniform"):
        rts.budgets((2, 2), 1.0, estimator="blue")
    with pytest.raises(ValueError, match="epsilon"):
        rts.budgets((2, 2), 0.0)
    with pytest.raises(ValueError, match="branching"):
        rts.budgets((2, 0), 1.0)
    with pytest.raises(ValueError, match="branching"):
        rts.budgets((1, 1), 1.0)


# ------------------------------------------------------------------ (O2)
@pytest.mark.parametrize("K, eps_l", [(4096, (0.2, 0.3, 0.5)), (1000, (0.4, 0.3, 0.3)),
                                      (2**20, (0.25, 0.25, 0.25, 0.25)),
                                      (5000, (1.0, 1.3)), (64, (0.1, 0.12, 0.11, 0.09))])
def test_o2_matches_theorem_iv2b(K, eps_l):
    want = rts.branching_closed_form(K, eps_l)
    assert min(want) >= 1  # the closed form is feasible here
    d = rts.branching(K, eps_l)
    for got, ref in zip(d.branching, want):
        assert isinstance(got, float)
        assert got == pytest.approx(ref, rel=REL)
    assert math.prod(d.branching) == pytest.approx(K, rel=1e-9)
    eps = sum(eps_l)
    relaxed = 4 * K * sum((k - 1) / e**2 for k, e in zip(want, eps_l))
    assert d.error == pytest.approx(relaxed, rel=REL)
    assert d.normalised_error == pytest.approx(relaxed / (4 * K / eps**2), rel=REL)
    assert "cvxpy" in d.method


def test_o2_respects_k_at_least_1_where_the_closed_form_does_not():
    K, eps_l = 16, (0.05, 1.0, 1.0)
    assert min(rts.branching_closed_form(K, eps_l)) < 1
    d = rts.branching(K, eps_l)
    assert min(d.branching) >= 1 - 1e-7
    assert math.prod(d.branching) == pytest.approx(K, rel=1e-9)
    assert d.branching[0] == pytest.approx(1.0, abs=1e-6)
    # the other two levels solve the reduced problem: k proportional to eps^2, product K
    assert d.branching[1] == pytest.approx(4.0, rel=REL)


def test_o2_bad_input():
    with pytest.raises(ValueError, match="n_bins"):
        rts.branching(0, (1.0,))
    with pytest.raises(ValueError, match="budgets"):
        rts.branching(16, (1.0, 0.0))
    with pytest.raises(ValueError, match="budgets"):
        rts.branching(16, ())


# ------------------------------------------------------------------ Thm IV.3
@pytest.mark.parametrize("K, eps, h, m", [(2**20, 1.0, 5, 3), (1000, 2.0, 3, 3),
                                          (4096, 0.5, 4, 3), (10**6, 1.0, 3, 50),
                                          (729, 1.0, 6, 3)])
def test_joint_matches_theorem_iv3(K, eps, h, m):
    d = rts.joint(K, eps, h, m)
    k = K ** (1 / h)
    for got in d.branching:
        assert got == pytest.approx(k, rel=REL)
    for got in d.budgets:
        assert got == pytest.approx(eps / h, rel=REL)
    assert d.error == pytest.approx(4 * K * h**3 / eps**2 * (k - 1), rel=REL)
    assert d.normalised_error == pytest.approx(h**3 * (k - 1), rel=REL)
    assert "cvxpy" in d.method


def test_joint_bad_input():
    with pytest.raises(ValueError, match="min_branching"):
        rts.joint(4, 1.0, 2, min_branching=2)
    with pytest.raises(ValueError, match="min_branching"):
        rts.joint(8, 1.0, 2)  # 8 < 3^2
    with pytest.raises(ValueError, match="height"):
        rts.joint(100, 1.0, 0)
    with pytest.raises(ValueError, match="epsilon"):
        rts.joint(100, -1.0, 2)


def test_degenerate_optimum_without_the_restriction():
    """K = 4, h = 2: sum_l (k_l - 1)/eps_l^2 is 3/eps^2 for (4, 1) with all budget on level 1
    but 8/eps^2 for (2, 2) (equal budgets, Thm IV.3's point): errors 48/eps^2 vs 128/eps^2
    in counts^2, normalised errors 3 vs 8 (MATH.md section 4)."""
    for eps in (1.0, 0.5):
        deg, bal, curve = rts.degenerate_optimum(4, eps, 2)
        assert deg.branching == (4, 1) and deg.budgets == (eps, 0.0)
        assert bal.branching == (2, 2) and bal.budgets == (eps / 2, eps / 2)
        assert deg.error == pytest.approx(48 / eps**2, rel=1e-12)
        assert bal.error == pytest.approx(128 / eps**2, rel=1e-12)
        assert deg.normalised_error == pytest.approx(3.0, rel=1e-12)
        assert bal.normalised_error == pytest.approx(8.0, rel=1e-12)
        # through the Mechanism and the slow generic error
        for d in (deg, bal):
            mech = dp.Mechanism(S.tree(4, list(d.branching)), epsilon=eps, neighbours="swap",
                                level_budgets=list(d.budgets))
            assert dp.expected_error(W.prefix(4), mech, "covering") == pytest.approx(d.error)
    # the budget-optimised relaxed objective along k_1 k_2 = 4: maximal at the symmetric point
    ks = np.linspace(1.0, 4.0, 301)
    vals = curve(ks)
    assert vals[0] == pytest.approx(3.0) and vals[-1] == pytest.approx(3.0)
    assert ks[int(np.argmax(vals))] == pytest.approx(2.0) and vals.max() == pytest.approx(8.0)


# ------------------------------------------------------------------ Lemma IV.3
def test_optimal_branching_factor_both_ways():
    k = rts.optimal_branching_factor()
    assert k == pytest.approx(16.801016, abs=5e-7)
    assert k == pytest.approx(rts._branching_factor_root(), rel=1e-12)
    assert math.log(k) == pytest.approx(3 * (1 - 1 / k), rel=1e-12)
    # psi is minimal there
    assert rts.psi(k) < min(rts.psi(k * 0.999), rts.psi(k * 1.001))
    assert rts.optimal_branching_factor(integer=True) == 17


def test_psi_values():
    assert rts.psi(16) == pytest.approx(0.703777, abs=5e-7)
    assert rts.psi(17) == pytest.approx(0.703529, abs=5e-7)
    assert rts.psi(16) > rts.psi(17)
    ints = np.arange(2, 200)
    assert ints[int(np.argmin(rts.psi(ints)))] == 17
    with pytest.raises(ValueError, match="psi"):
        rts.psi(1.0)
    with pytest.raises(ValueError, match="integer"):
        rts.optimal_branching_factor(integer="yes")


def test_optimal_height():
    assert rts.optimal_height(2**20, method="relaxed") == 5
    assert rts.optimal_height(2**16) == 4  # (16, 16, 16, 16)
    assert rts.optimal_height(17**3) == 3  # Cor. V.1: all-17
    assert rts.optimal_height(1000) == 3  # (10, 10, 10)
    with pytest.raises(ValueError, match="method"):
        rts.optimal_height(100, method="guess")
    with pytest.raises(ValueError, match="n_bins"):
        rts.optimal_height(0)
