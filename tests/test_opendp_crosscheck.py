"""Cross-check against an independent implementation: OpenDP's consistency postprocessor.

MATH.md section 2: OpenDP's ``make_consistent_b_ary_tree`` is exactly OLS (equal variances,
root noised). With equal budgets under add/remove every node of our tree has the same
variance, so our BLUE must reproduce OpenDP's leaves."""

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import strategies as S

odp = pytest.importorskip("opendp.prelude")


@pytest.mark.parametrize("k,n", [(2, 16), (2, 1024), (3, 243), (4, 256), (16, 4096)])
def test_blue_equals_opendp_ols(k, n):
    odp.enable_features("contrib")
    post = odp.t.make_consistent_b_ary_tree(branching_factor=k, TIA=int, TOA=float)
    mech = dp.Mechanism(S.tree(n, k), epsilon=1.0, neighbours="add_remove")
    assert len(set(mech.level_variances.values())) == 1
    rng = np.random.default_rng(k * n)
    y = np.round(mech.measure(rng.poisson(10, n), rng))  # OpenDP takes integer nodes
    leaves = np.asarray(post(y.astype(np.int64).tolist()))
    np.testing.assert_allclose(dp.blue(mech, y), leaves, atol=1e-9)
    np.testing.assert_allclose(dp.blue(mech, y, method="generic"), leaves, atol=1e-8)
