"""The nested family of optimize.best_mechanism (pure DP, the CDF; docs/math.md section 12)."""

from __future__ import annotations

import math

import pytest

from dptree_opt import expected_error, optimize, workloads
from dptree_opt.optimize.families_1d import nested_plan


@pytest.mark.parametrize("n, want", [(1 << 16, (256, 256)), (1 << 20, (256, 256, 16)),
                                     (4096, (256, 16)), (3000, (250, 12)),
                                     (2 * 257, None), (1 << 10, (256, 4))])
def test_plan_is_a_factorisation_into_fanouts_of_at_most_256(n, want):
    got = nested_plan(n)
    assert got == want
    if got is not None:
        assert math.prod(got) == n and max(got) <= 256 and min(got) >= 2


@pytest.mark.parametrize("n, kw, cdf, words", [
    (512, {"epsilon": 1.0}, True, "K <= 1024"),
    (2048, {"rho": 0.5}, True, "Laplace"),
    (2048, {"epsilon": 1.0}, False, "CDF"),
    (2 * 1031, {"epsilon": 1.0}, True, "prime factor"),
])
def test_family_is_skipped_with_its_reason(n, kw, cdf, words):
    wl = workloads.prefix(n) if cdf else workloads.identity(n)
    d = optimize.best_mechanism(wl, families=("histogram", "nested"), time_limit=5.0, **kw)
    assert d.family == "histogram"
    assert words in dict(d.skipped)["nested"]


@pytest.mark.slow
def test_best_mechanism_finds_a_nested_design_below_budgets_per_node_at_4096():
    """The nested design's exact error (the nested engine, recomputed from the calibrated
    strategy) is below the per-node tree's, both found by the front door."""
    d = optimize.best_mechanism(workloads.prefix(4096), epsilon=1.0,
                                families=("node_budgets", "nested"), time_limit=120.0)
    assert d.family == "nested"
    mech = d.mechanism()
    assert mech.epsilon == pytest.approx(1.0, abs=1e-12)
    assert expected_error(workloads.prefix(4096), mech) == pytest.approx(d.error, rel=1e-9)


def test_l1_local_start_gives_a_private_design_whose_error_is_the_engine_s():
    """The "l1_local" start (the full l1 optimum per fan-out): eps recomputed from the
    calibrated strategy is 1; the reported mean is the nested engine's exact error of the
    mechanism; never worse than the start; and below the equal-budget nested tree of the same
    fan-outs built by hand (identity children, a total row at the root)."""
    import numpy as np

    from dptree_opt import Mechanism, strategies
    from dptree_opt.optimize.nested_design import optimal_nested
    ks = (16, 8)
    d = optimal_nested(ks, starts=("l1_local",), maxiter=200)
    mech = d.mechanism()
    assert mech.epsilon == pytest.approx(1.0, abs=1e-12)
    n = 128
    assert expected_error(workloads.prefix(n), mech) / n == pytest.approx(d.mean, rel=1e-9)
    assert d.mean <= d.start_mean + 1e-12
    tree = strategies.nested(ks, [np.vstack([np.eye(16), np.ones((1, 16))]), np.eye(8)])
    plain = expected_error(workloads.prefix(n), Mechanism(tree, epsilon=1.0)) / n
    assert d.mean < plain


@pytest.mark.slow
def test_monte_carlo_of_a_2_16_design_is_within_its_standard_error():
    """A 2^16 nested design (256 x 256, a short optimisation from the l1_local starts): the
    simulated total prefix error (Laplace noise, the nested engine's BLUE) is within 4
    standard errors of the exact error, and the design is below budgets per node (384.63,
    bench_frontier.py part 3) already."""
    from dptree_opt import monte_carlo_error
    from dptree_opt.optimize.nested_design import optimal_nested
    d = optimal_nested((256, 256), starts=("l1_local",), maxiter=60)
    mech = d.mechanism()
    n = d.n_bins
    exact = expected_error(workloads.prefix(n), mech)
    assert exact / n == pytest.approx(d.mean, rel=1e-9) and d.mean < 384.63
    mc = monte_carlo_error(workloads.prefix(n), mech, trials=200, rng=1)
    assert mc.within(exact, 4.0), (mc.mean, mc.std_error, exact)
