"""Optimal per-level budgets for the BLUE (dptree_opt.optimize.blue_budgets).

Oracles: the generic dense GLS path of ``expected_error(method="dense")`` (independent of the
Haar formulas), cvxpy for the convex Gaussian problem, finite differences for the analytic
gradient, brute-force grids and exhaustive support enumeration for the non-convex Laplace
problem."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import minimize

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.optimize.levels import level_variances
from dptree_opt.optimize.blue_budgets import (
    _FundableObjective,
    _laplace_multistart,

    _sensitivity_proxy,
    _simplex_newton,
    blue_budget_problem,
    equal_budgets,
    gaussian_budgets_cvxpy,
    gaussian_optimal_budgets,
    laplace_dp_budgets,
    optimal_blue_budgets,
)
from dptree_opt.optimize.result import error_unit
from dptree_opt.engines.tree_error import blue_error, blue_haar_variances, haar_workload_weights


SETTINGS = [  # (neighbours, public_total, measure_root)
    ("swap", None, True),
    ("add_remove", None, True),
    ("add_remove", None, False),
    ("add_remove", True, True),
]


def mechanism(branching, budgets, noise, neighbours, public_total, total=1.0):
    K = math.prod(branching)
    kw = {"epsilon": total} if noise == "laplace" else {"rho": total}
    return dp.Mechanism(S.tree(K, list(branching)), noise=noise, neighbours=neighbours,
                        public_total=public_total, level_budgets=budgets, **kw)


# ------------------------------------------------------------------ haar_workload_weights
@pytest.mark.parametrize("branching", [(2, 2, 2), (3, 1, 5, 2), (4, 4), (1, 3), (7,), (),
                                       (2, 3, 1, 4)])
@pytest.mark.parametrize("workload", ["prefix", "identity", "all_range"])
def test_haar_weights_reproduce_blue_error(branching, workload):
    rng = np.random.default_rng(len(branching))
    q = haar_workload_weights(branching, workload)
    assert q.shape == (len(branching) + 1,) and np.all(q >= 0)
    assert all(q[j] == 0 for j in range(1, len(branching) + 1) if branching[j - 1] == 1)
    for root in (0.0, 1.7, np.inf):
        for _ in range(3):
            v = np.concatenate([[root], rng.uniform(0.2, 5.0, len(branching))])
            if root == np.inf and len(branching) == 0:
                continue
            if len(branching) and root != 0:
                v[rng.integers(1, len(branching) + 1)] = np.inf if len(branching) > 1 else 1.0
            try:
                mu = blue_haar_variances(branching, v)
            except ValueError:
                continue  # unidentifiable draw
            err = blue_error(branching, v, workload)
            assert q @ mu == pytest.approx(err, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("branching", [(2, 2, 2, 2), (3, 5, 2), (4, 1, 3), (5,)])
def test_haar_weights_first_prefixes(branching):
    K = math.prod(branching)
    v = np.concatenate([[1.3], np.linspace(0.5, 2.0, len(branching))])
    per = blue_error(branching, v, "prefix", per_query=True)
    mu = blue_haar_variances(branching, v)
    for n in range(1, K + 1):
        assert haar_workload_weights(branching, "prefix", n) @ mu == pytest.approx(
            per[:n].sum(), rel=1e-12)
    # n = K is the full workload, the same exact integers
    np.testing.assert_array_equal(haar_workload_weights(branching, "prefix", K),
                                  haar_workload_weights(branching, "prefix"))


def test_haar_weights_bad_input():
    for bad in [dict(workload="nope"), dict(n_queries=0), dict(n_queries=9),
                dict(n_queries=2.0), dict(workload="identity", n_queries=2)]:
        with pytest.raises(ValueError):
            haar_workload_weights((2, 2, 2), **bad)
    with pytest.raises(ValueError):
        haar_workload_weights((2, 0))


# ------------------------------------------------------------------ variance calibration
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("neighbours,public_total", [("swap", None), ("add_remove", None),
                                                     ("add_remove", True)])
@pytest.mark.parametrize("branching", [(2, 3, 2), (1, 1, 3, 2), (4,)])
def test_level_variances_match_mechanism(noise, neighbours, public_total, branching):
    rng = np.random.default_rng(7)
    public = neighbours == "swap" or public_total
    n = len(branching) + (0 if public else 1)
    for trial in range(3):
        b = rng.dirichlet(np.ones(n)) * 0.7
        if trial == 1 and n > 1:
            b[0] = 0.0
            b *= 0.7 / b.sum()
        v = level_variances(branching, b, noise=noise, neighbours=neighbours,
                             public_total=public_total)
        mv = mechanism(branching, b, noise, neighbours, public_total, 0.7).level_variances
        np.testing.assert_allclose(v, [mv[lvl] for lvl in range(len(branching) + 1)],
                                   rtol=1e-15)


@pytest.mark.parametrize("branching", [(2, 3, 2), (1, 1, 3, 2), (4,), (1,), (1, 1), (),
                                       (3, 1, 1, 2), (1, 5, 1)])
def test_sensitivity_proxy_matches_real_tree(branching):
    K = math.prod(branching)
    real = S.LevelUniformTree(K, branching)
    proxy_ks = _sensitivity_proxy(branching)
    proxy = S.LevelUniformTree(math.prod(proxy_ks), proxy_ks)
    for neighbours in ("swap", "add_remove"):
        for norm in (1, 2):
            for lvl in range(len(branching) + 1):
                assert proxy.level_sensitivity(lvl, neighbours, norm) == \
                    real.level_sensitivity(lvl, neighbours, norm)


# --------------------------------------------------------- the contract, dense oracle
@pytest.mark.parametrize("noise,total", [("laplace", 1.0), ("gaussian", 0.5)])
@pytest.mark.parametrize("neighbours,public_total,measure_root", SETTINGS)
@pytest.mark.parametrize("branching", [(2, 2, 2, 2), (3, 4, 2), (1, 3, 4), (4, 1, 2, 2),
                                       (8, 2)])
def test_error_matches_dense_oracle(noise, total, neighbours, public_total, measure_root,
                                    branching):
    K = math.prod(branching)
    d = optimal_blue_budgets(branching, total, noise=noise, neighbours=neighbours,
                             public_total=public_total, measure_root=measure_root, starts=3)
    public = neighbours == "swap" or bool(public_total)
    assert len(d.budgets) == len(branching) + (0 if public else 1)
    assert min(d.budgets) >= 0 and sum(d.budgets) == pytest.approx(total, rel=1e-12)
    if not public and not measure_root:
        assert d.budgets[0] == 0.0
    mech = mechanism(branching, d.budgets, noise, neighbours, public_total, total)
    dense = dp.expected_error(W.prefix(K), mech, "blue", method="dense")
    assert d.error == pytest.approx(dense, rel=1e-9)
    assert d.normalised_error == pytest.approx(d.error / error_unit(K, total, noise), rel=1e-15)
    assert (d.n_bins, d.branching, d.estimator, d.noise, d.neighbours, d.public_total) == (
        K, branching, "blue", noise, neighbours, public)
    # the alternative is the equal split (Mechanism's default when every level is fundable)
    (eq,) = d.alternatives
    assert eq.method == "equal split"
    mech_eq = mechanism(branching, eq.budgets, noise, neighbours, public_total, total)
    assert eq.error == pytest.approx(
        dp.expected_error(W.prefix(K), mech_eq, "blue", method="dense"), rel=1e-9)
    if measure_root or public:
        default = mechanism(branching, None, noise, neighbours, public_total, total)
        np.testing.assert_allclose(eq.budgets, list(default.level_budgets.values()), rtol=1e-15)
    assert d.error <= eq.error * (1 + 1e-12)


@pytest.mark.parametrize("workload", ["identity", "all_range"])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_other_workloads_dense(workload, noise):
    branching = (3, 2, 2)
    K = 12
    d = optimal_blue_budgets(branching, 1.0, noise=noise, neighbours="add_remove",
                             workload=workload, starts=2)
    mech = mechanism(branching, d.budgets, noise, "add_remove", None)
    wl = W.identity(K) if workload == "identity" else W.all_range(K)
    assert d.error == pytest.approx(dp.expected_error(wl, mech, "blue", method="dense"),
                                    rel=1e-9)
    assert d.error <= d.alternatives[0].error


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_padded_tree_first_prefixes(noise):
    branching, n = (4, 4, 2), 23  # 32 bins, the CDF of the first 23
    d = optimal_blue_budgets(branching, 1.0, noise=noise, neighbours="add_remove", n_queries=n,
                             starts=2)
    assert d.n_bins == n and d.padded_bins == 32
    mech = mechanism(branching, d.budgets, noise, "add_remove", None)
    wl = W.ranges(32, [(0, t - 1) for t in range(1, n + 1)])
    assert d.error == pytest.approx(dp.expected_error(wl, mech, "blue"), rel=1e-9)
    assert d.normalised_error == pytest.approx(d.error / error_unit(n, 1.0, noise))


def test_trivial_trees():
    d = optimal_blue_budgets((), 1.0, neighbours="swap")  # one bin, N public
    assert d.budgets == () and d.error == 0.0
    d = optimal_blue_budgets((), 2.0, neighbours="add_remove")  # one bin, root = the bin
    assert d.budgets == (2.0,) and d.error == pytest.approx(2 * 1 / 4)  # Var Lap(1/2)
    d = optimal_blue_budgets((5,), 1.0, neighbours="swap")  # only the leaves are noisy
    assert d.budgets == (1.0,)


def test_bad_input():
    with pytest.raises(ValueError):
        optimal_blue_budgets((2, 2), 0.0)
    with pytest.raises(ValueError):
        optimal_blue_budgets((2, 2), 1.0, noise="cauchy")
    with pytest.raises(ValueError):
        optimal_blue_budgets((2, 2), 1.0, neighbours="swap", public_total=False)
    with pytest.raises(ValueError):
        optimal_blue_budgets((2, 2), 1.0, starts=-1)
    with pytest.raises(ValueError):
        optimal_blue_budgets((2, 2), 1.0, workload="identity", n_queries=3)
    with pytest.raises(ValueError):  # no level can identify the single bin
        optimal_blue_budgets((), 1.0, neighbours="add_remove", measure_root=False)
    with pytest.raises(ValueError):
        optimal_blue_budgets((2, 2), 1.0, measure_root="no")


# -------------------------------------------------------------------------- gradient
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("neighbours,public_total,measure_root", SETTINGS)
def test_analytic_gradient_equals_finite_differences(noise, neighbours, public_total,
                                                     measure_root):
    P = blue_budget_problem((3, 2, 4, 2), noise=noise, neighbours=neighbours,
                            public_total=public_total, measure_root=measure_root)
    rng = np.random.default_rng(3)
    for _ in range(5):
        b = np.where(P.fundable, rng.uniform(0.1, 1.0, len(P.noisy_levels)), 0.0)
        g = P.gradient(b)
        for i in np.flatnonzero(P.fundable):
            hstep = 1e-6 * b[i]
            up, dn = b.copy(), b.copy()
            up[i] += hstep
            dn[i] -= hstep
            fd = (P.error(up) - P.error(dn)) / (2 * hstep)
            assert g[i] == pytest.approx(fd, rel=1e-6, abs=1e-9 * abs(P.error(b)))
        if not P.fundable.all():
            assert np.all(g[~P.fundable] == 0)
        # the O(h) objective equals error.tree.blue_error on Mechanism-calibrated variances
        assert P.error(b) == pytest.approx(P.blue_error(b), rel=1e-12)


# -------------------------------------------------------------------------- Gaussian
def random_trees(seed, count, max_h=6, max_k=5):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        h = int(rng.integers(1, max_h + 1))
        out.append(tuple(int(k) for k in rng.integers(1, max_k + 1, h)))
    return out


@pytest.mark.parametrize("neighbours,public_total,measure_root", SETTINGS)
def test_gaussian_pava_equals_cvxpy(neighbours, public_total, measure_root):
    for branching in random_trees(11, 6) + [(2,) * 10, (4, 4, 4, 4, 4)]:
        P = blue_budget_problem(branching, noise="gaussian", neighbours=neighbours,
                                public_total=public_total, measure_root=measure_root)
        try:
            rho, value = gaussian_optimal_budgets(P, 0.5)
        except ValueError:
            continue  # unidentifiable setting (e.g. nothing fundable)
        assert P.error(rho) == pytest.approx(value, rel=1e-12)  # E* = S^2 / total
        rho_c, value_c = gaussian_budgets_cvxpy(P, 0.5)
        assert P.error(rho) == pytest.approx(P.error(rho_c), rel=1e-6)
        assert P.error(rho) <= P.error(rho_c) * (1 + 1e-9)  # PAVA is exact, cvxpy approximate
        assert value_c == pytest.approx(value, rel=1e-6)


@pytest.mark.parametrize("neighbours,public_total,measure_root", SETTINGS)
def test_gaussian_kkt_and_random_perturbations(neighbours, public_total, measure_root):
    rng = np.random.default_rng(5)
    for branching in random_trees(12, 8) + [(2,) * 10, (16, 16, 4)]:
        try:
            d = optimal_blue_budgets(branching, 0.5, noise="gaussian", neighbours=neighbours,
                                     public_total=public_total, measure_root=measure_root)
        except ValueError:
            continue
        P = blue_budget_problem(branching, noise="gaussian", neighbours=neighbours,
                                public_total=public_total, measure_root=measure_root)
        rho = np.array(d.budgets)
        if P.fundable.sum() <= 1:
            continue
        benefit = -P.gradient(rho)  # marginal error reduction per unit of rho
        f = P.fundable
        support = f & (rho > 1e-12 * rho.sum())
        nu = benefit[support].max()
        # KKT: equal benefit on the support, no larger benefit off it
        np.testing.assert_allclose(benefit[support], nu, rtol=1e-8)
        assert np.all(benefit[f & ~support] <= nu * (1 + 1e-8))
        # no feasible direction improves (convex problem: a global optimum)
        E0 = P.error(rho)
        for _ in range(200):
            target = np.where(f, rng.dirichlet(np.ones(len(rho))), 0.0)
            target *= 0.5 / target.sum()
            for t in (1e-3, 0.1, 0.7):
                assert P.error((1 - t) * rho + t * target) >= E0 * (1 - 1e-12)


def test_gaussian_known_cases():
    # one fundable level besides the leaves would be pooled when the leaves dominate; for a
    # 2-level tree under swap (levels 1, 2 noisy) compare with the 1-d closed form.
    P = blue_budget_problem((4, 4), noise="gaussian", neighbours="swap")
    rho, value = gaussian_optimal_budgets(P, 1.0)
    grid = np.linspace(0, 1, 100001)
    vals = [P.error(np.array([x, 1 - x])) for x in grid[:-1]]
    assert value <= min(vals) * (1 + 1e-12)
    assert value == pytest.approx(min(vals), rel=1e-8)


# --------------------------------------------------------------------------- Laplace
@pytest.mark.parametrize("neighbours,public_total,measure_root", SETTINGS)
def test_laplace_never_worse_than_equal_or_any_start(neighbours, public_total, measure_root):
    for branching in random_trees(21, 5) + [(2,) * 8, (4, 4, 4)]:
        P = blue_budget_problem(branching, noise="laplace", neighbours=neighbours,
                                public_total=public_total, measure_root=measure_root)
        if P.fundable.sum() <= 1:
            continue
        x, info = _laplace_multistart(P, 1.0, starts=4, seed=1)
        best = P.error(x)
        assert best <= min(info["start_values"]) * (1 + 1e-12)
        assert best <= min(info["local_values"]) * (1 + 1e-12)
        assert best <= P.error(equal_budgets(P, 1.0)) * (1 + 1e-12)
        d = optimal_blue_budgets(branching, 1.0, neighbours=neighbours,
                                 public_total=public_total, measure_root=measure_root,
                                 starts=4, seed=1)
        assert d.error == pytest.approx(best, rel=1e-12)
        assert d.error <= d.alternatives[0].error


def simplex_grid(n, steps):
    """All points of the simplex in n coordinates with denominators ``steps``."""
    pts = [c for c in itertools.product(range(steps + 1), repeat=n - 1) if sum(c) <= steps]
    pts = np.array(pts, dtype=float)
    return np.column_stack([pts, steps - pts.sum(axis=1)]) / steps


@pytest.mark.parametrize("branching,neighbours,public_total", [
    ((4, 8), "add_remove", None),      # root, 4 nodes, 32 leaves: 3 budgets
    ((2, 16), "add_remove", None),
    ((16, 2), "add_remove", None),
    ((3, 3, 3), "swap", None),         # levels 1..3: 3 budgets
    ((2, 8, 4), "add_remove", True),
])
def test_laplace_brute_force_grid(branching, neighbours, public_total):
    """On trees with 3 budgets a grid with step 1/300 (45,451 points) finds nothing better
    than the returned point (a grid point's error is >= the true optimum, so the check is
    one-sided and exact up to rounding, 1e-9)."""
    P = blue_budget_problem(branching, noise="laplace", neighbours=neighbours,
                            public_total=public_total)
    d = optimal_blue_budgets(branching, 1.0, neighbours=neighbours, public_total=public_total)
    pts = simplex_grid(3, 300)
    lam_rows = []
    for x in pts:  # vectorisation is not worth it at this size: O(h) per point
        lam_rows.append(P.error(x))
    grid_best = float(np.min(lam_rows))
    assert d.error <= grid_best * (1 + 1e-9)
    # and the grid optimum is close to it (the grid resolves the optimum to ~1e-4)
    assert grid_best <= d.error * (1 + 1e-3)


@pytest.mark.parametrize("branching,neighbours", [((2,) * 8, "add_remove"),
                                                  ((3, 2, 4, 2, 2), "swap"),
                                                  ((2, 4, 2, 2, 2), "add_remove")])
def test_laplace_exhaustive_supports_small(branching, neighbours):
    """Every support (set of funded levels) is a local-minimum face for Laplace noise; the
    optimiser must match the best over all 2^(n-1) faces (the leaves are always funded)."""
    _check_exhaustive(branching, neighbours)


@pytest.mark.slow
@pytest.mark.parametrize("branching,neighbours", [((2,) * 10, "add_remove"),
                                                  ((2,) * 10, "swap"),
                                                  ((2,) * 12, "add_remove"),
                                                  ((2,) * 13, "swap"),
                                                  ((3, 5, 2, 4, 2, 2), "add_remove"),
                                                  ((4, 2, 2, 4, 2, 2, 2, 4), "add_remove")])
def test_laplace_exhaustive_supports_slow(branching, neighbours):
    _check_exhaustive(branching, neighbours)


def _check_exhaustive(branching, neighbours):
    """Each face is solved by the local Newton method from its centre (it can only shrink
    the support, so it stays in the face); the local method itself is checked against
    SLSQP in test_local_newton_matches_slsqp."""
    P = blue_budget_problem(branching, noise="laplace", neighbours=neighbours)
    obj = _FundableObjective(P, 1.0)
    n = obj.idx.size
    best = math.inf
    for mask in itertools.product([0.0, 1.0], repeat=n - 1):
        m = np.array(mask + (1.0,))
        best = min(best, _simplex_newton(obj, m / m.sum())[1])
    d = optimal_blue_budgets(branching, 1.0, neighbours=neighbours)
    assert d.error <= best * (1 + 1e-9)


def test_local_newton_is_a_local_minimum_for_slsqp():
    """The active-set Newton local solver ends at points SLSQP (scipy, independent) cannot
    improve, and that satisfy the first-order conditions on their face. (From the same start
    the two may reach different local minima: the problem is non-convex.)"""
    rng = np.random.default_rng(4)
    for branching, neighbours in [((2,) * 8, "add_remove"), ((3, 2, 4, 2, 2), "swap")]:
        P = blue_budget_problem(branching, noise="laplace", neighbours=neighbours)
        obj = _FundableObjective(P, 1.0)
        n = obj.idx.size

        def full(z):
            x = np.zeros(len(P.noisy_levels))
            x[obj.idx] = z
            return x

        for _ in range(6):
            m = np.append(rng.integers(0, 2, n - 1), 1).astype(float)
            z0 = m * rng.uniform(0.5, 1.5, n)
            z0 /= z0.sum()
            z, val, _ = _simplex_newton(obj, z0)
            assert val == pytest.approx(P.error(full(z)), rel=1e-14)
            assert val <= P.error(full(z0))
            g = P.gradient(full(z))[obj.idx]
            on = z > 0
            np.testing.assert_allclose(g[on], g[on].mean(), rtol=1e-8)
            res = minimize(lambda y: P.error(full(y)),
                           z, jac=lambda y: P.gradient(full(y))[obj.idx], method="SLSQP",
                           bounds=[(0.0, 1.0)] * n,
                           constraints=[{"type": "eq", "fun": lambda y: y.sum() - 1}],
                           options={"ftol": 1e-15, "maxiter": 500})
            zs = np.clip(res.x, 0, 1)
            assert P.error(full(zs / zs.sum())) >= val * (1 - 1e-9)


def test_laplace_local_optimality():
    """First-order conditions at the returned Laplace point: equal marginal benefit on the
    funded levels (SLSQP precision); unfunded levels have zero gradient (p ~ eps^2)."""
    for branching in [(2,) * 10, (4, 4, 4, 4, 4), (3, 5, 2, 4, 2, 2)]:
        d = optimal_blue_budgets(branching, 1.0, neighbours="add_remove")
        P = blue_budget_problem(branching, neighbours="add_remove")
        eps = np.array(d.budgets)
        benefit = -P.gradient(eps)
        on = eps > 0
        np.testing.assert_allclose(benefit[on], benefit[on].mean(), rtol=1e-5)
        assert np.all(benefit[~on] == 0)


def test_dp_start_is_near_optimal():
    P = blue_budget_problem((2,) * 12, noise="laplace", neighbours="add_remove")
    x = laplace_dp_budgets(P, 1.0)
    assert x.sum() == pytest.approx(1.0) and np.all(x >= 0)
    d = optimal_blue_budgets((2,) * 12, 1.0, neighbours="add_remove")
    assert P.error(x) <= d.error * 1.01


# ------------------------------------------------------------------ known direction
def test_upper_levels_get_less_binary_1024():
    """MATH.md section 4 ('the root and upper levels should receive less budget'), checked
    on binary K = 2^10, add/remove, root measured: the leaves get the largest budget and the
    root less than an equal share. Laplace additionally leaves the root and level 1 unfunded
    (all budget on levels 2, 6 and 10: an effective (4, 16, 16) tree); Gaussian keeps every
    level but is not monotone in depth (level 9 gets less than the root)."""
    lap = optimal_blue_budgets((2,) * 10, 1.0, neighbours="add_remove")
    b = np.array(lap.budgets)
    assert np.argmax(b) == 10 and b[0] == 0 and b[1] == 0
    assert set(np.flatnonzero(b > 0)) == {2, 6, 10}
    assert lap.error / 1024 == pytest.approx(118.9579, abs=1e-4)
    assert lap.alternatives[0].error / 1024 == pytest.approx(298.93, abs=5e-3)  # MATH.md 298.9
    gau = optimal_blue_budgets((2,) * 10, 0.5, noise="gaussian", neighbours="add_remove")
    g = np.array(gau.budgets)
    assert np.argmax(g) == 10 and g[0] < 0.5 / 11 and np.all(g > 0)
    assert g[9] < g[0]


@pytest.mark.parametrize("noise,power", [("laplace", 2), ("gaussian", 1)])
def test_optimal_budgets_scale_with_the_total_even_at_extreme_budgets(noise, power):
    """E(c b) = E(b) / c^power (variances 2 D^2 / b^2 or D^2 / (2 b)): the optimal split does
    not depend on the total, up to the largest totals whose variances are still doubles."""
    from dptree_opt.optimize import optimal_blue_budgets
    ks = [3, 2, 4]
    ref = optimal_blue_budgets(ks, 1.0, noise=noise, neighbours="add_remove")
    extreme = 1e150 if noise == "laplace" else 1e300
    for c in (1.0 / extreme, 1e-3, 7.0, extreme):
        d = optimal_blue_budgets(ks, c, noise=noise, neighbours="add_remove")
        assert np.allclose(np.asarray(d.budgets) / c, ref.budgets, rtol=1e-9, atol=0)
        assert d.error * c**power == pytest.approx(ref.error, rel=1e-9)
