"""Behaviour fixes made while typing the optimisers and two counters (issue 26 item 2).

Each test names a case that used to raise a TypeError (from deep inside numpy or Python)
where the house rule wants a ValueError naming the parameter; and the input-validation paths
the annotations rewrote keep refusing what they refused (the same ValueError).
"""

from __future__ import annotations

import numpy as np
import pytest

from dptree_opt import workloads
from dptree_opt.optimize import blue_budgets, grid, rts, search
from dptree_opt.optimize.beyond_trees import optimized_strategy
from dptree_opt.stream import factorization, negative_digits

# ---- bugs: TypeError where a ValueError naming the parameter is due -----------------------

def test_design_error_refuses_a_scalar_budget_with_a_value_error():
    """``budgets=1.0`` used to fail in ``tuple(float(x) for x in 1.0)`` (TypeError)."""
    with pytest.raises(ValueError, match="budgets"):
        search.design_error(8, (2, 2, 2), 1.0)
    with pytest.raises(ValueError, match="budgets"):
        search.design_error(8, (2, 2, 2), ["a", 1])


def test_design_error_refuses_a_non_sequence_branching_with_a_value_error():
    with pytest.raises(ValueError, match="branching"):
        search.design_error(8, 8)


def test_budgets_closed_form_refuses_a_bad_epsilon_with_a_value_error():
    """A string epsilon used to reach ``epsilon * r`` (numpy UFuncTypeError)."""
    with pytest.raises(ValueError, match="epsilon"):
        rts.budgets_closed_form((2, 2), "a")
    with pytest.raises(ValueError, match="epsilon"):
        rts.budgets_closed_form((2, 2), -1.0)


def test_budgets_closed_form_still_matches_theorem_iv2a():
    """[RTS] Thm IV.2(a): eps_l proportional to (k_l - 1)^(1/3); (2, 9): 1 : 2."""
    assert rts.budgets_closed_form((2, 9), 3.0) == pytest.approx((1.0, 2.0))


def test_optimal_blue_budgets_refuses_a_bad_seed_with_a_value_error():
    """A string seed used to fail in numpy's SeedSequence (TypeError)."""
    with pytest.raises(ValueError, match="seed"):
        blue_budgets.optimal_blue_budgets((2, 2, 2), 1.0, seed="x")
    with pytest.raises(ValueError, match="seed"):
        blue_budgets.optimal_blue_budgets((2, 2, 2), 1.0, seed=-1)


def test_optimal_blue_budgets_takes_a_generator_as_seed():
    eq = blue_budgets.optimal_blue_budgets((2, 2, 2), 1.0, starts=0)
    d = blue_budgets.optimal_blue_budgets((2, 2, 2), 1.0, starts=2,
                                          seed=np.random.default_rng(1))
    assert d.error <= eq.alternatives[0].error * (1 + 1e-12)   # never worse than equal


def test_optimized_strategy_refuses_a_bad_seed_with_a_value_error():
    """A string seed used to reach the p-Identity optimiser's SeedSequence (TypeError)."""
    with pytest.raises(ValueError, match="seed"):
        optimized_strategy(workloads.prefix(8), "laplace", seed="a")


# ---- rewritten validation paths: the same refusals ------------------------------------------

@pytest.mark.parametrize("height", [0, -1, True, 2.5, "ab", (1, 0)])
def test_best_grid_hierarchy_refuses_bad_heights(height):
    with pytest.raises(ValueError, match="height must be None"):
        grid.best_grid_hierarchy((4, 4), epsilon=1.0, height=height, family="kron")


@pytest.mark.parametrize("k", [1, 2, 4, 3.0, True, np.int64(4), "3"])
def test_check_odd_branching_refuses(k):
    with pytest.raises(ValueError, match="branching"):
        negative_digits.check_odd_branching(k)


def test_check_odd_branching_accepts_numpy_integers():
    assert negative_digits.check_odd_branching(np.int64(19)) == 19
    assert type(negative_digits.check_odd_branching(np.int64(19))) is int


@pytest.mark.parametrize("horizon", [0, 2.5, True, "10", np.int64(0)])
def test_toeplitz_counter_refuses_bad_horizons(horizon):
    with pytest.raises(ValueError, match="horizon"):
        factorization.SqrtEngine(horizon, budget=1.0, rng=np.random.default_rng(0))


def test_toeplitz_counter_accepts_a_numpy_horizon():
    eng = factorization.SqrtEngine(np.int64(5), budget=1.0, rng=np.random.default_rng(0))
    assert eng.horizon == 5 and type(eng.horizon) is int


def test_negative_digits_rows_are_strategy_rows_with_their_extras():
    """The rows' extra attributes (now declared on a subclass of StrategyRows): one level /
    index per row, node width k^level, and y_t = L[t] (R x + z) reproduces the running
    count without noise (z = 0): L R is the lower-triangular all-ones matrix."""
    from dptree_opt.stream.base import StrategyRows

    eng = negative_digits.NegativeDigitsEngine(20, budget=1.0, branching=3,
                                               rng=np.random.default_rng(0))
    rows = eng.strategy(12)
    assert isinstance(rows, StrategyRows)
    n = rows.matrix.shape[0]
    assert rows.level.shape == rows.index.shape == rows.first_use.shape == (n,)
    widths = np.asarray(rows.matrix.sum(axis=1)).ravel()
    full = (rows.index + 1) * 3 ** rows.level <= 12
    assert np.array_equal(widths[full], 3.0 ** rows.level[full])
    prefix = (rows.coefficients @ rows.matrix).toarray()
    assert np.array_equal(prefix, np.tril(np.ones((12, 12))))
