"""The BLUE of single-scale Kronecker products by per-axis least squares (engines.kron_product)
against the dense GLS oracle, with exact, noisy and no total rows."""

import math

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import engines, strategies as S
from tests.oracles import constrained_gls


@pytest.mark.parametrize("second", ["histogram", "tree", "prefix_like"])
@pytest.mark.parametrize("neighbours,public", [("swap", None), ("add_remove", None),
                                               ("add_remove", True)])
@pytest.mark.parametrize("totals", [0, 1, 2])
def test_per_axis_blue_matches_the_dense_gls(second, neighbours, public, totals):
    rng = np.random.default_rng(7)
    f2 = {"histogram": S.histogram(3), "tree": S.tree(4, [2, 2]),
          "prefix_like": S.Strategy(np.tril(np.ones((3, 3))) + np.eye(3))}[second]
    strat = S.KroneckerStrategy([S.histogram(4), f2], n_totals=totals)
    mech = dp.Mechanism(strat, epsilon=1.0, neighbours=neighbours, public_total=public)
    strat = mech.released   # a public total adds a total row when the strategy has none
    sd = np.sqrt(np.where(np.isfinite(mech.variances), mech.variances, 0.0))
    y = rng.normal(size=(4, strat.n_rows)) * sd + strat.apply(
        rng.poisson(5, strat.n_bins).astype(float))   # exact rows answered exactly
    engine = engines.select("estimate", mech)
    try:
        got = engine.estimate(mech, y, None, "blue")
    except engines.Declined:      # an exact core row: the generic GLS serves it
        assert engine.name == "kron_product" and np.any(mech.variances[:math.prod(f.n_rows for f in strat.factors)] == 0)
        return
    a = strat.matrix.toarray()
    coef, _, ok = constrained_gls(a, mech.variances, np.eye(strat.n_bins))
    assert ok.all()
    want = y @ coef.T
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())
    np.testing.assert_allclose(dp.blue(mech, y), got, rtol=1e-12, atol=1e-12)
