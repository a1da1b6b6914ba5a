"""dptree_opt.opendp: a tree release as a real OpenDP Measurement (docs/opendp.md).

Expected numbers come from independent computations in the tests: the privacy loss from the
strategy's dense matrix in rational arithmetic, the BLUE from ``dp.blue`` on known answers,
the noise from a stated statistical bound around the exact ``expected_error``."""

from fractions import Fraction

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import optimize, strategies as S, workloads

odp = pytest.importorskip("opendp.prelude")
dpo = pytest.importorskip("dptree_opt.opendp")

VEC = odp.vector_domain(odp.atom_domain(T="i64"))
L1 = (VEC, odp.l1_distance(T="i64"))
L2 = (VEC, odp.l2_distance(T="f64"))


def _independent_loss(mech) -> Fraction:
    """sum over noisy levels of D_l / b_l (Laplace) or D_l^2 / (2 sigma_l^2) (Gaussian), the
    sensitivities read off the dense strategy matrix, every double taken as a rational."""
    a = mech.released.matrix.toarray()
    total = Fraction(0)
    for lvl, sc in mech.level_scales.items():
        if sc == 0 or not np.isfinite(sc):
            continue
        block = a[mech.released.levels == lvl]
        if mech.noise == "laplace":
            d = int(np.abs(block).sum(axis=0).max())
            total += Fraction(d) / Fraction(sc)
        else:
            d2 = int((block ** 2).sum(axis=0).max())
            total += Fraction(d2) / (2 * Fraction(sc) ** 2)
    return total


# ---------------------------------------------------------------- privacy maps
@pytest.mark.parametrize("mech, space", [
    (dp.Mechanism(S.tree(8, 2), epsilon=1.0), L1),      # 4 levels, eps/4 each, b = 4
    (dp.Mechanism(S.tree(64, 4), rho=0.5), L2),         # 4 levels, rho/4 each, sigma = 2
    (dp.Mechanism(S.tree(64, 4), rho=0.5), L1),
])
def test_privacy_map_at_one_is_the_budget_exactly(mech, space):
    # dyadic budgets: every quotient D / b, D^2 / (2 sigma^2) and their sum is exact in
    # binary, so OpenDP's outward rounding changes nothing and equality is exact
    meas = dpo.make_private_cdf(*space, mech)
    budget = mech.requested_budget
    assert _independent_loss(mech) == Fraction(budget)
    assert meas.map(1) == budget
    assert meas.output_measure == (odp.max_divergence() if mech.noise == "laplace"
                                   else odp.zero_concentrated_divergence())


def test_privacy_map_with_optimal_level_budgets():
    # non-dyadic budgets: OpenDP rounds each group's loss and the sum up, so its map is the
    # exact rational loss rounded up by at most one ulp per operation
    d = optimize.optimal_blue_budgets([2] * 5, 1.0, noise="laplace", neighbours="add_remove")
    mech = d.mechanism()
    meas = dpo.make_private_cdf(*L1, d)
    exact = _independent_loss(mech)
    n_ops = 2 * len(mech.level_scales)
    assert Fraction(meas.map(1)) >= exact
    assert meas.map(1) <= float(exact) * (1 + n_ops * 2.0 ** -52)
    assert abs(exact - 1) <= Fraction(1, 10**9)   # the Mechanism's calibration tolerance
    # d_in = k records: k times the loss (the stability maps are linear in d_in)
    assert Fraction(meas.map(3)) >= 3 * exact


def test_l2_input_metric_counts_changes_by_floor_of_square():
    # integer vectors with ||d||_2 <= r have ||d||_1 <= floor(r^2): the map is tight at 1
    mech = dp.Mechanism(S.tree(64, 4), rho=0.5)
    meas = dpo.make_private_cdf(*L2, mech)
    assert meas.map(1.0) == 0.5
    assert meas.map(1.4) == 0.5          # only +-e_j below sqrt(2)
    assert meas.map(1.5) == 0.5 * 4      # ||d||_1 <= 2: l2 shift <= 2 D2, loss x 4


# ---------------------------------------------------------------- the output
@pytest.mark.parametrize("mech", [dp.Mechanism(S.tree(16, 2), epsilon=0.7),
                                  dp.Mechanism(S.tree(27, 3), rho=0.3),
                                  dp.Mechanism(S.sqrt_factorization(16), rho=0.5)])
def test_postprocessing_is_the_blue_of_the_answers(mech):
    # rng-free: known integer noisy answers through the composed function
    rows, estimate = dpo.postprocessor(mech, consistency=None)
    released = dp.data_release.secure_noise.secure_form(mech).mechanism   # what is run
    rng = np.random.default_rng(3)
    h = rng.integers(0, 20, mech.n_bins)
    y = released.released.matrix @ h + rng.integers(-5, 6, released.released.n_rows)
    y = y.astype(float)
    got = estimate([y[r].astype(np.int64).tolist() for r in rows])
    np.testing.assert_allclose(got, np.cumsum(dp.blue(released, y)), rtol=1e-12, atol=1e-9)
    assert not got.flags.writeable


def test_consistent_output_is_integer_and_monotone():
    mech = dp.Mechanism(S.tree(32, 2), epsilon=0.5)
    meas = dpo.make_private_cdf(*L1, mech)            # consistency="l2" by default
    out = meas(list(range(32)))
    assert out.shape == (32,) and np.all(out == np.round(out)) and np.all(np.diff(out) >= 0)
    raw_meas = dpo.make_private_cdf(*L1, mech, consistency=None)
    assert raw_meas(list(range(32))).shape == (32,)


@pytest.mark.parametrize("mech", [dp.Mechanism(S.tree(8, 2), epsilon=1.0),
                                  dp.Mechanism(S.tree(9, 3), rho=0.5),
                                  optimize.optimal_node_budgets([2] * 3, epsilon=1.0)])
def test_monte_carlo_error_matches_expected_error(mech):
    # E sum_t (C_hat_t - C_t)^2 = expected_error(prefix, discrete mechanism) exactly; the
    # mean of R draws of that sum is within 5 of its standard errors (estimated from the
    # draws) of it, except with probability < 1e-6 by the CLT
    released = dp.data_release.secure_noise.secure_form(mech).mechanism
    meas = dpo.make_private_cdf(*(L1 if released.noise == "laplace" else L2), mech,
                                consistency=None)
    want = dp.expected_error(workloads.prefix(released.n_bins), released)
    h = np.array([3, 0, 7, 1, 0, 0, 5, 2, 4][:released.n_bins])
    truth = np.cumsum(h)
    R = 600
    sq = np.array([np.sum((meas(h.tolist()) - truth) ** 2) for _ in range(R)])
    se = sq.std(ddof=1) / np.sqrt(R)
    assert abs(sq.mean() - want) < 5 * se
    assert se < 0.15 * want    # the check has power


def test_node_budgets_use_the_joint_loss_not_the_per_scale_composition():
    nodes = optimize.optimal_node_budgets([2] * 6, epsilon=1.0)
    mech = dp.data_release.secure_noise.secure_form(nodes).mechanism
    a, scales = mech.released.matrix.toarray(), mech.scales
    noisy = np.isfinite(scales) & (scales > 0)
    # independent: the worst bin of sum_r |A_rj| / b_r, in rationals
    inv = [Fraction(1) / Fraction(float(b)) if ok else Fraction(0) for b, ok in zip(scales, noisy)]
    joint = max(sum((inv[r] * int(abs(a[r, j])) for r in range(a.shape[0])), Fraction(0))
                for j in range(a.shape[1]))
    per_scale = sum(max(sum((inv[r] * int(abs(a[r, j])) for r in np.flatnonzero(scales == b)),
                            Fraction(0)) for j in range(a.shape[1]))
                    for b in np.unique(scales[noisy]))
    meas = dpo.make_private_cdf(*L1, nodes, consistency=None)
    assert Fraction(meas.map(1)) >= joint
    assert meas.map(1) <= 1.0 * (1 + 1e-9)                    # the design's budget
    assert per_scale > 3 * joint           # what basic composition per scale would charge
    assert Fraction(meas.map(2)) >= 2 * joint
    out = meas(list(range(64)))
    assert out.shape == (64,)
    rows, estimate = dpo.postprocessor(nodes, consistency=None)
    y = (a @ np.arange(64)).astype(float)                     # noiseless answers
    np.testing.assert_allclose(estimate([y]), np.cumsum(np.arange(64)), atol=1e-8)


# ---------------------------------------------------------------- composition
def test_composes_with_a_laplace_histogram_and_the_total_adds():
    mech = dp.Mechanism(S.tree(16, 2), epsilon=0.8)
    cdf = dpo.make_private_cdf(*L1, mech)
    other = odp.m.make_laplace(*L1, scale=4.0)               # eps = 1 / 4 at d_in = 1
    comp = odp.c.make_composition([cdf, other])
    want = _independent_loss(mech) + Fraction(1, 4)
    assert Fraction(comp.map(1)) >= want
    assert comp.map(1) <= float(want) * (1 + 12 * 2.0 ** -52)
    got_cdf, got_hist = comp(list(range(16)))
    assert got_cdf.shape == (16,) and len(got_hist) == 16


def test_zcdp_composition_and_conversion_to_approx_dp():
    mech = dp.Mechanism(S.tree(64, 4), rho=0.5)
    cdf = dpo.make_private_cdf(*L2, mech)
    other = odp.m.make_gaussian(*L2, scale=2.0)               # rho = 1 / (2 * 4)
    comp = odp.c.make_composition([cdf, other])
    rho = Fraction(1, 2) + Fraction(1, 8)
    assert Fraction(comp.map(1.0)) == rho                     # dyadic: exact
    delta = 1e-6
    eps, d = odp.c.make_fix_delta(odp.c.make_zCDP_to_approxDP(comp), delta).map(1.0)
    classic = float(rho) + 2 * np.sqrt(float(rho) * np.log(1 / delta))  # [BS16] Prop 1.3
    assert d == delta and float(rho) < eps <= classic


def test_context_compositor_spends_the_budget():
    dpo.register()
    dpo.register()                                            # idempotent
    mech = dp.Mechanism(S.tree(8, 2), epsilon=1.0)            # map(1) == 1.0 exactly
    ctx = odp.Context.compositor(data=[5, 0, 3, 1, 0, 2, 8, 4],
                                 privacy_unit=(odp.l1_distance(T="i64"), 1),
                                 privacy_loss=odp.loss_of(epsilon=1.5),
                                 split_by_weights=[2.0, 1.0], domain=VEC)
    out = ctx.query().private_cdf(mech).release()
    assert out.shape == (8,) and np.all(np.diff(out) >= 0)
    hist = ctx.query().laplace(scale=2.0).release()           # the remaining 0.5
    assert len(hist) == 8
    assert ctx.accountant.map(1) == 1.5                        # 1.0 + 0.5, both dyadic
    with pytest.raises(Exception, match="exhausted"):          # nothing left to spend
        ctx.query().laplace(scale=2.0).release()


def test_register_refuses_a_taken_name():
    with pytest.raises(ValueError, match="name"):
        dpo.register("laplace")
    with pytest.raises(ValueError, match="name"):
        dpo.register("not an identifier")


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("space, match", [
    ((odp.vector_domain(odp.atom_domain(T="f64")), odp.l1_distance(T="f64")), "input_domain"),
    ((odp.vector_domain(odp.atom_domain(T="i64"), size=9), odp.l1_distance(T="i64")),
     "input_domain"),
    ((odp.vector_domain(odp.atom_domain(T="i32")), odp.symmetric_distance()), "input_metric"),
    ((odp.atom_domain(T="i64"), odp.absolute_distance(T="i64")), "input_domain"),
])
def test_wrong_domains_and_metrics_are_refused(space, match):
    with pytest.raises(ValueError, match=match):
        dpo.make_private_cdf(*space, dp.Mechanism(S.tree(8, 2), epsilon=1.0))


def test_swap_public_total_and_grids_are_refused():
    with pytest.raises(ValueError, match="swap"):
        dpo.make_private_cdf(*L1, dp.Mechanism(S.tree(8, 2), epsilon=1.0, neighbours="swap"))
    with pytest.raises(ValueError, match="public_total"):
        dpo.make_private_cdf(*L1, dp.Mechanism(S.tree(8, 2), epsilon=1.0, public_total=True))
    with pytest.raises(ValueError, match="grid"):
        dpo.make_private_cdf(*L1, dp.Mechanism(S.quadtree((4, 4), 2), epsilon=1.0))
    with pytest.raises(ValueError, match="consistency"):
        dpo.make_private_cdf(*L1, dp.Mechanism(S.tree(8, 2), epsilon=1.0), consistency="l3")
    with pytest.raises(ValueError, match="mechanism"):
        dpo.make_private_cdf(*L1, "tree")


def test_wrong_length_is_refused_before_any_noise():
    meas = dpo.make_private_cdf(*L1, dp.Mechanism(S.tree(8, 2), epsilon=1.0))
    with pytest.raises(Exception, match="8 bin counts"):
        meas([1, 2, 3])


def test_negative_and_huge_counts_are_clamped_not_raised():
    mech = dp.Mechanism(S.tree(4, 2), epsilon=1.0)
    meas = dpo.make_private_cdf(*L1, mech, consistency=None)
    out = meas([-5, 2**62, 0, 1])     # no data-dependent exception
    assert out.shape == (4,)


# ---------------------------------------------------------------- OpenDP versions
def test_versions_before_0_12_are_refused(monkeypatch):
    import importlib.metadata
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.11.1")
    with pytest.raises(ValueError, match="OpenDP >= 0.12"):
        dpo.make_private_cdf(*L1, dp.Mechanism(S.tree(8, 2), epsilon=1.0))


def test_without_register_the_context_route_says_which_version(monkeypatch):
    monkeypatch.delattr(odp, "register")                     # OpenDP 0.12
    with pytest.raises(ValueError, match="0.13"):
        dpo.register("private_cdf_old")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # the old name, deprecated in 0.14
def test_before_0_14_the_composition_has_its_old_name(monkeypatch):
    monkeypatch.delattr(odp.c, "make_composition")           # OpenDP 0.12 / 0.13
    meas = dpo.make_private_cdf(*L1, dp.Mechanism(S.tree(8, 2), epsilon=1.0))
    assert meas.map(1) == 1.0


def _sqrt_without_noise():
    # its scaled form round(2^16 A) has D2^2 ~ 2^32: rho = 200 D2^2 gives every level
    # rho_l / D_l^2 >= 100 (the budget only picks the scale; no expected number comes from it)
    src = dp.Mechanism(S.sqrt_factorization(16), rho=1.0)
    d2 = dp.data_release.secure_noise.secure_form(src).mechanism.released.exact_sensitivity(
        "add_remove", 2)
    return dp.Mechanism(S.sqrt_factorization(16), rho=200.0 * d2)


@pytest.mark.parametrize("make", [lambda: dp.Mechanism(S.tree(16, 2), epsilon=500.0),
                                  lambda: dp.Mechanism(S.tree(16, 4), rho=300.0),
                                  _sqrt_without_noise,
                                  lambda: optimize.optimal_node_budgets([2] * 4, epsilon=500.0)])
def test_the_measurement_wires_each_group_to_its_rows(make):
    # every row's noise is 0 except with probability < 2 exp(-100) (discrete Laplace of
    # scale b <= 1 / 100: P(z != 0) <= 2 exp(-1 / b); discrete Gaussian with
    # 1 / (2 sigma^2) >= 100: P(z != 0) <= 2 exp(-100)), so the output is the BLUE of the
    # exact answers: the exact cumulative counts
    mech = make()
    released = dp.data_release.secure_noise.secure_form(mech).mechanism
    meas = dpo.make_private_cdf(*(L1 if released.noise == "laplace" else L2), mech,
                                consistency=None)
    h = np.random.default_rng(5).integers(0, 50, 16)
    np.testing.assert_allclose(meas(h.tolist()), np.cumsum(h), rtol=0, atol=1e-6)
