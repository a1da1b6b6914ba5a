"""Mechanism budget rules that are not plain calibration."""

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import strategies as S


def test_data_independent_level_is_exact_and_free():
    """tree(4, [1, 4]) under swap: level 1 is one node covering every bin, so it never changes
    (sensitivity 0). It is released exactly; the default split gives the whole budget to
    level 2 (variance 8 / eps^2 as in [RTS] eq. (3)), and the guarantee is the full eps."""
    mech = dp.Mechanism(S.tree(4, [1, 4]), epsilon=2.0, neighbours="swap")
    assert mech.level_budgets == {1: 0.0, 2: 2.0}
    assert mech.level_variances[1] == 0.0 and mech.level_variances[2] == pytest.approx(2.0)
    assert mech.exact_rows.tolist() == [True, True, False, False, False, False]
    assert mech.epsilon == pytest.approx(2.0)
    # budget given to the free level is unused, and the reported guarantee says so
    wasteful = dp.Mechanism(S.tree(4, [1, 4]), epsilon=2.0, level_budgets=[1.0, 1.0],
                            neighbours="swap")
    assert wasteful.epsilon == pytest.approx(1.0)


def test_one_bin_under_swap_spends_nothing():
    mech = dp.Mechanism(S.histogram(1), epsilon=1.0, neighbours="swap")
    assert mech.epsilon == 0.0 and np.all(mech.variances == 0)
    assert dp.blue(mech, np.array([3.0, 3.0])).tolist() == [3.0]


@pytest.mark.parametrize("noise, budget", [("laplace", 1e-25), ("laplace", 1e-150),
                                           ("gaussian", 1e-40), ("gaussian", 1e-300)])
def test_discrete_simulator_is_noisy_at_tiny_budgets(noise, budget):
    """Issue 12 item 12: numpy's int64 geometric sampler saturates at huge scales, which made
    the discrete simulator return exactly 0 noise at tiny eps. The draws must be non-zero and
    of the right size: for 4000 draws, |log(sample var / var)| < 0.25 holds with overwhelming
    probability for both (finite-variance) laws, Laplace kurtosis 6 included (SE of the log
    variance ~ sqrt((kurtosis - 1) / n) = 0.035)."""
    kw = {"epsilon": budget} if noise == "laplace" else {"rho": budget}
    mech = dp.Mechanism(S.histogram(4), noise=noise, discrete=True, **kw)
    z = mech.sample_noise(np.random.default_rng(3), size=1000)[:, ~mech.exact_rows].ravel()
    assert z.size == 4000 and np.count_nonzero(z) == z.size
    scale = mech.scales[0]
    want = 2 * scale**2 if noise == "laplace" else scale**2
    got = np.mean((z / scale) ** 2) * scale**2  # avoid overflow of z^2 at scale 1e300
    assert abs(np.log(np.mean((z / scale) ** 2)) - np.log(want / scale**2)) < 0.25, (got, want)


def test_describe_says_simulation_has_no_guarantee():
    text = dp.Mechanism(S.tree(8, [2, 2, 2]), epsilon=1.0).describe()
    assert "secure sampler" in text and "SIMULATION" in text



def test_discrete_variance_never_divides_by_zero():
    """eps = 1e-300 raised ZeroDivisionError in the discrete Laplace variance (issue 12 item
    11): 2q/(1-q)^2 = 1/(2 sinh^2(1/(2s))) = 2 s^2 - 1/6 + O(1/s^2) for large s."""
    from dptree_opt.mechanism import discrete_variance

    s = 1e7
    exact = 0.5 / np.sinh(0.5 / s) ** 2
    assert discrete_variance(s, "laplace") == pytest.approx(exact, rel=1e-12)
    assert discrete_variance(1e300, "laplace") == np.inf  # beyond double precision
    mech = dp.Mechanism(S.tree(8, [2, 2, 2]), epsilon=1e-300, discrete=True)
    assert all(np.isinf(v) for lvl, v in mech.level_variances.items() if lvl)


def test_default_neighbours_are_add_remove_with_a_private_total():
    """The default protects N: add/remove neighbours, no public total, so the root of a tree is
    a noisy level with its own share (4 levels of eps / 4, sensitivity 1: Lap(4), variance
    32) and no exact total row is appended."""
    mech = dp.Mechanism(S.tree(8, 2), epsilon=1.0)
    assert mech.neighbours == "add_remove" and mech.public_total is False
    assert mech.level_budgets == pytest.approx({0: 0.25, 1: 0.25, 2: 0.25, 3: 0.25})
    assert mech.level_variances[0] == pytest.approx(32.0)
    assert mech.released.n_rows == 15 and not mech.exact_rows.any()
