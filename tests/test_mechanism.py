"""Mechanism budget rules that are not plain calibration."""

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import strategies as S


def test_data_independent_level_is_exact_and_free():
    """tree(4, [1, 4]) under swap: level 1 is one node covering every bin, so it never changes
    (sensitivity 0). It is released exactly; the default split gives the whole budget to
    level 2 (variance 8 / eps^2 as in [RTS] eq. (3)), and the guarantee is the full eps."""
    mech = dp.Mechanism(S.tree(4, [1, 4]), epsilon=2.0)
    assert mech.level_budgets == {1: 0.0, 2: 2.0}
    assert mech.level_variances[1] == 0.0 and mech.level_variances[2] == pytest.approx(2.0)
    assert mech.exact_rows.tolist() == [True, True, False, False, False, False]
    assert mech.epsilon == pytest.approx(2.0)
    # budget given to the free level is unused, and the reported guarantee says so
    wasteful = dp.Mechanism(S.tree(4, [1, 4]), epsilon=2.0, level_budgets=[1.0, 1.0])
    assert wasteful.epsilon == pytest.approx(1.0)


def test_one_bin_under_swap_spends_nothing():
    mech = dp.Mechanism(S.histogram(1), epsilon=1.0)
    assert mech.epsilon == 0.0 and np.all(mech.variances == 0)
    assert dp.blue(mech, np.array([3.0, 3.0])).tolist() == [3.0]
