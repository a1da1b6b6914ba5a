"""Participation sensitivities of trees, restarted trees and the online (completed-node) tree
against brute force over every pattern and sign (tests/oracle_participation.py), the
published hand-solved cases of Google's federated-compute accounting, the restarted engine
against the dense GLS oracle, and a Mechanism end to end (docs/math.md section 11)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_participation import (completed_dyadic_rows, cyclic_patterns,
                                  fixed_epoch_patterns, min_sep_patterns, scalar_sensitivity,
                                  vector_sensitivity)
from oracles import causal_gls, constrained_gls

from dptree_opt import Mechanism, engines
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.engines.restarted import RestartedEngine
from dptree_opt.participation import fixed_epoch, min_sep, single
from dptree_opt.strategies.interval_participation import min_sep_l2
from dptree_opt.strategies.restarted import online_tree, restarted

REL = 1e-9


def _weights(rng, strat, per_level):
    """Random positive row weights: constant per budget level, or per row."""
    if per_level:
        return rng.uniform(0.3, 1.5, int(strat.levels.max()) + 1)[strat.levels]
    return rng.uniform(0.3, 1.5, strat.n_rows)


def _schema(rng, n):
    """A random non-single schema over n steps (fixed_epoch only when it divides n)."""
    divisors = [b for b in range(1, n + 1) if n % b == 0 and n // b > 1]
    if divisors and rng.random() < 0.4:
        b = divisors[int(rng.integers(len(divisors)))]
        return fixed_epoch(n // b, b), fixed_epoch_patterns(n, n // b, b)
    b = int(rng.integers(1, n + 1))
    k = None if rng.random() < 0.2 else int(rng.integers(2, 5))
    return min_sep(k, b), min_sep_patterns(n, k, b)


def _check(strat, w, part, patterns, p):
    wa = w[:, None] * strat.matrix.toarray()
    got = strat.participation_sensitivity(w, part, p)
    want = vector_sensitivity(wa, patterns, p)
    assert got.exact, got
    assert got.value == pytest.approx(want, rel=REL), (strat.name, part, p, got)
    # 0/1 rows (A >= 0): scalar contributions are no better than vector ones, and equal
    if sum(len(q) for q in patterns) <= 4000 and max(len(q) for q in patterns) <= 6:
        assert scalar_sensitivity(wa, patterns, p) == pytest.approx(want, rel=REL)


def _random_tree(rng, max_bins):
    ks = [int(rng.integers(2, 4)) for _ in range(int(rng.integers(1, 4)))]
    while math.prod(ks) > max_bins:
        ks.pop()
    return S.tree(math.prod(ks), ks)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), p=st.sampled_from((1, 2)), per_level=st.booleans())
def test_tree_sensitivities_are_brute_force(seed, p, per_level):
    """k-ary level-uniform trees (n <= 16), random level or row weights, fixed_epoch and
    min_sep, Gaussian (l2) and Laplace (l1): exact and equal to every pattern enumerated."""
    rng = np.random.default_rng(seed)
    strat = _random_tree(rng, 16)
    part, patterns = _schema(rng, strat.n_bins)
    _check(strat, _weights(rng, strat, per_level), part, patterns, p)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), p=st.sampled_from((1, 2)))
def test_interval_strategies_are_brute_force(seed, p):
    """Other interval strategies (truncated trees, prefix sums, online trees): the same."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 13))
    strat = [S.truncated_tree(n, [2] * max(1, math.ceil(math.log2(n)))), S.prefix_sums(n),
             online_tree(n, int(rng.integers(2, 4)))][int(rng.integers(3))]
    part, patterns = _schema(rng, n)
    _check(strat, _weights(rng, strat, False), part, patterns, p)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), p=st.sampled_from((1, 2)), per_level=st.booleans())
def test_restarted_tree_sensitivities_are_brute_force(seed, p, per_level):
    """Trees restarted every period steps for n <= 14 steps (the last copy truncated when
    the period does not divide n): exact and equal to brute force."""
    rng = np.random.default_rng(seed)
    block = _random_tree(rng, 6)
    n = int(rng.integers(1, 15))
    strat = restarted(block, n)
    if n == 1:
        return
    part, patterns = _schema(rng, n)
    _check(strat, _weights(rng, strat, per_level), part, patterns, p)


@pytest.mark.parametrize("coeffs", [(1.0, 0.5, 0.25), (1.0, -0.6, 0.3)])
@pytest.mark.parametrize("b", [1, 2, 3, 4])
def test_restarted_non_interval_blocks(coeffs, b):
    """A Toeplitz block (non-negative, or mixed signs) restarted every 3 steps for 9:
    min_sep(None, b) / fixed_epoch; l1 (vector) exact; l2 exact with a non-negative Gram,
    else a certified value at least every sign pattern's."""
    strat = restarted(S.toeplitz(np.array(coeffs)), 9)
    wa = strat.matrix.toarray()
    w = np.ones(strat.n_rows)
    for part, pats in ((min_sep(None, b), min_sep_patterns(9, None, b)),
                       (fixed_epoch(3, 3), fixed_epoch_patterns(9, 3, 3))):
        got1 = strat.participation_sensitivity(w, part, 1)
        assert got1.exact and got1.value == pytest.approx(vector_sensitivity(wa, pats, 1))
        got2 = strat.participation_sensitivity(w, part, 2)
        scalar = scalar_sensitivity(wa, pats, 2)
        if min(coeffs) >= 0:
            assert got2.exact and got2.value == pytest.approx(vector_sensitivity(wa, pats, 2))
        assert got2.value >= scalar * (1 - 1e-12)


def test_one_participation_per_block_is_exact_beyond_the_dense_gram():
    """A Toeplitz block over 64 steps restarted to 8192 > DENSE_GRAM_BINS steps, min_sep with
    b >= period: no block holds two participations, so the squared column norms over the
    worst pattern are exact: every full block's worst column is its first (norm^2 = sum of
    the squared coefficients), and k = 3 of them fit."""
    coeffs = 0.9 ** np.arange(64)
    strat = restarted(S.toeplitz(coeffs), 8192)
    got = strat.participation_sensitivity(np.ones(strat.n_rows), min_sep(3, 64), 2)
    assert got.exact
    assert got.value == pytest.approx(math.sqrt(3 * float(np.sum(coeffs ** 2))), rel=1e-12)


@pytest.mark.parametrize("k, b", [(4, 3), (None, 7), (3, 1)])
def test_branch_and_bound_on_a_larger_tree(k, b):
    """binary_tree(32) with random row weights (so no two subtrees are alike): the branch
    and bound equals every pattern enumerated (tens of thousands of patterns)."""
    t = S.binary_tree(32)
    w = np.random.default_rng(11).uniform(0.2, 1.5, t.n_rows)
    got = t.participation_sensitivity(w, min_sep(k, b), 2)
    want = vector_sensitivity(w[:, None] * t.matrix.toarray(), min_sep_patterns(32, k, b), 2)
    assert got.exact and got.value == pytest.approx(want, rel=REL)


# ------------------------------------------------ the online tree (completed nodes only)
def test_online_tree_rows_are_the_completed_dyadic_nodes():
    for n, k in [(1, 2), (6, 2), (7, 3), (16, 2), (24, 2), (27, 3)]:
        t = online_tree(n, k)
        got = sorted(map(tuple, t.matrix.toarray().tolist()))
        want = sorted(map(tuple, completed_dyadic_rows(n, k).tolist()))
        assert got == want, (n, k)
    assert np.array_equal(online_tree(8).matrix.toarray(), S.binary_tree(8).matrix.toarray())
    with pytest.raises(ValueError, match="k"):
        online_tree(8, 1)


@pytest.mark.parametrize("z, n, s, rho", [(1.0, 4, 2, 4.0), (2.0, 4, 2, 1.0), (1.0, 5, 2, 4.5),
                                          (1.0, 7, 2, 5.5), (1.0, 7, 3, 4.5)])
def test_federated_compute_tree_no_restart_cases(z, n, s, rho):
    """Google federated-compute (fcp/confidentialcompute/python/accounting_test.py,
    ``test_zcdp_simple``; Kairouz et al. 2021 App. D, Algorithm 4): TreeNoRestart over n
    steps, a user at every step = o mod s (min_sep_data_source), zCDP rho = sens^2 /
    (2 z^2). The cyclic orders through the tree's own sensitivity (cyclic values), and
    min_sep(None, s) (brute force says the cyclic order is the worst min-sep pattern in
    these five cases, so the library's min_sep value gives the published rho too)."""
    t = online_tree(n)
    wa = t.matrix.toarray()
    cyclic = vector_sensitivity(wa, cyclic_patterns(n, s), 2)
    assert cyclic ** 2 / (2 * z * z) == pytest.approx(rho, rel=1e-12)
    assert vector_sensitivity(wa, min_sep_patterns(n, None, s), 2) == pytest.approx(cyclic)
    got = t.participation_sensitivity(np.ones(t.n_rows), min_sep(None, s), 2)
    assert got.exact and got.value ** 2 / (2 * z * z) == pytest.approx(rho, rel=1e-12)


def test_tree_aggregation_8_participations_over_24_steps():
    """Tree aggregation (completed nodes over 24 steps), a user every 3 steps: 8
    participations {o, o + 3, .., o + 21} = fixed_epoch(8, 3). Counted by hand per level,
    sum over nodes of (participations inside)^2, offset o = 0:
    width 1: 8 nodes x 1 = 8; width 2: 8 nodes hold one each (3 > 2) = 8;
    width 4: [0,4) {0,3}, [4,8) {6}, [8,12) {9}, [12,16) {12,15}, [16,20) {18},
    [20,24) {21}: 4+1+1+4+1+1 = 12; width 8: {0,3,6}, {9,12,15}, {18,21}: 9+9+4 = 22;
    width 16: [0,16) holds 0..15 step 3, 6 of them: 36. Total 86 (offsets 1, 2: the
    width-16 node holds 5: 75). Under min_sep(8, 3) the pattern {0, 3, .., 15, 20, 23}
    is worse: width 4 gives 4+1+1+4+0+4 = 14, width 8 9+9+4 = 22, width 16 36: 88."""
    t = online_tree(24)
    w = np.ones(t.n_rows)
    got = t.participation_sensitivity(w, fixed_epoch(8, 3), 2)
    assert got.exact and got.value ** 2 == pytest.approx(86.0, rel=1e-12)
    got = t.participation_sensitivity(w, min_sep(8, 3), 2)
    assert got.exact and got.value ** 2 == pytest.approx(88.0, rel=1e-12)
    assert vector_sensitivity(t.matrix.toarray(), [[0, 3, 6, 9, 12, 15, 20, 23]], 2) ** 2 \
        == pytest.approx(88.0)


# ------------------------------------------------------------- branch and bound bounds
def test_min_sep_stopped_early_is_a_certified_bound():
    """With too few expansions the branch and bound returns exact=False, a value at least
    the exact one and a lower value at most it."""
    t = S.binary_tree(64)
    lo, hi = np.asarray(t.lo), np.asarray(t.hi)
    w2 = np.random.default_rng(3).uniform(0.2, 1.0, t.n_rows)
    part = min_sep(5, 3)
    exact = min_sep_l2(lo, hi, w2, 64, part, t.depth)
    cut = min_sep_l2(lo, hi, w2, 64, part, t.depth, max_nodes=2)
    assert exact.exact and not cut.exact
    assert cut.value >= exact.value * (1 - 1e-12) and cut.lower <= exact.value * (1 + 1e-12)
    assert "upper bound" in cut.method


def test_branch_and_bound_matches_the_dynamic_programme_without_big_rows():
    """Rows no wider than b: participations never share a row, the diagonal answer."""
    t = S.binary_tree(16)
    got = t.participation_sensitivity(np.ones(t.n_rows), min_sep(3, 16), 2)
    assert got.exact and got.value ** 2 == pytest.approx(5.0)  # one column: 5 rows
    got = t.participation_sensitivity(np.ones(t.n_rows), min_sep(3, 8), 2)
    assert got.value ** 2 == pytest.approx(vector_sensitivity(
        t.matrix.toarray(), min_sep_patterns(16, 3, 8), 2) ** 2)


# ---------------------------------------------------------------- the restarted engine
def _restarted_mechanism(block, n, noise, seed):
    rng = np.random.default_rng(seed)
    strat = restarted(block, n)
    levels = np.unique(strat.levels)
    b = list(rng.uniform(0.3, 1.0, levels.size))
    kw = {"epsilon": float(sum(b))} if noise == "laplace" else {"rho": float(sum(b))}
    return Mechanism(strat, noise=noise, level_budgets=b, **kw)


@pytest.mark.parametrize("block, n", [(S.binary_tree(4), 12), (S.binary_tree(4), 10),
                                      (S.tree(9, [3, 3]), 20), (S.prefix_sums(3), 8),
                                      (S.toeplitz(np.array([1.0, 0.4, -0.2])), 7)])
@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_restarted_engine_errors_are_the_dense_oracle(block, n, noise):
    """BLUE and causal per-query variances (prefix, identity, ranges, all ranges, total)
    from the restarted engine equal the dense GLS oracle's (tests/oracles.py)."""
    mech = _restarted_mechanism(block, n, noise, n)
    assert engines.select("per_query", mech, W.prefix(n)).name == "restarted"
    a, var = mech.released.matrix.toarray(), np.asarray(mech.variances)
    eng = RestartedEngine()
    pairs = [(0, n - 1), (1, n - 2), (n // 2, n - 1), (2, 3), (n - 1, n - 1)]
    for wl, dense in [(W.prefix(n), np.tril(np.ones((n, n)))), (W.identity(n), np.eye(n)),
                      (W.total(n), np.ones((1, n))), (W.ranges(n, pairs), None),
                      (W.all_range(n), None)]:
        if dense is None:
            lo, hi = wl.intervals()
            dense = np.array([[1.0 if l <= i < h else 0.0 for i in range(n)]
                              for l, h in zip(lo, hi)])
        for est, oracle in (("blue", constrained_gls), ("causal", causal_gls)):
            want = oracle(a, var, dense)[1]
            got = eng.error(mech, wl, est, per_query=True)
            np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=f"{wl.kind} {est}")


def test_restarted_engine_estimates_are_the_oracle():
    """The BLUE histogram and the causal prefix answers on simulated answers."""
    mech = _restarted_mechanism(S.binary_tree(4), 11, "gaussian", 1)
    a, var = mech.released.matrix.toarray(), np.asarray(mech.variances)
    rng = np.random.default_rng(0)
    y = a @ rng.normal(0, 5, 11) + rng.standard_normal((3, a.shape[0])) * np.sqrt(var)
    coef = constrained_gls(a, var, np.eye(11))[0]
    np.testing.assert_allclose(engines.run("estimate", mech, None, "blue", y=y), y @ coef.T,
                               atol=1e-9)
    pre = np.tril(np.ones((11, 11)))
    coef = causal_gls(a, var, pre)[0]
    np.testing.assert_allclose(engines.run("estimate", mech, W.prefix(11), "causal", y=y),
                               y @ coef.T, atol=1e-9)


def test_restarted_prefix_variance_is_j_totals_plus_the_block_prefix():
    """Var(prefix j P + r) = j Var(T) + Var(P_r) from the block's own mechanism."""
    block = S.binary_tree(8)
    mech = _restarted_mechanism(block, 32, "gaussian", 5)
    per = engines.run("per_query", mech, W.prefix(32))
    a = block.matrix.toarray()
    var = np.asarray(mech.variances)[:block.n_rows]
    blk = constrained_gls(a, var, np.tril(np.ones((8, 8))))[1]
    want = np.concatenate([j * blk[-1] + blk for j in range(4)])
    np.testing.assert_allclose(per, want, rtol=1e-9)


# ------------------------------------------------------------------ a Mechanism end to end
@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_mechanism_on_a_restarted_tree_end_to_end(noise):
    """Mechanism(restarted tree, participation=fixed_epoch(3, 8)) over 24 steps: its
    account is exact and its loss equals the brute-force sensitivity of the scaled strategy
    diag(1 / scale) A over the 8 patterns (rho = sens^2 / 2; eps = sens) within the budget;
    the same under min_sep(3, 5) (every pattern)."""
    strat = restarted(S.binary_tree(8), 24)
    for part, pats in ((fixed_epoch(3, 8), fixed_epoch_patterns(24, 3, 8)),
                       (min_sep(3, 5), min_sep_patterns(24, 3, 5))):
        kw = {"rho": 0.5} if noise == "gaussian" else {"epsilon": 1.0}
        mech = Mechanism(strat, participation=part, **kw)
        assert mech.participation == part and mech.sensitivity.exact
        wa = strat.matrix.toarray() / np.asarray(mech.scales)[:, None]
        p = 2 if noise == "gaussian" else 1
        sens = vector_sensitivity(wa, pats, p)
        got = mech.rho if noise == "gaussian" else mech.epsilon
        want = sens ** 2 / 2 if noise == "gaussian" else sens
        assert got == pytest.approx(want, rel=1e-9) and got <= (0.5 if p == 2 else 1.0) * (1 + 1e-9)
        assert np.isfinite(engines.run("error", mech, W.prefix(24)))


def test_restarted_bad_input():
    with pytest.raises(ValueError, match="block"):
        restarted(np.eye(3), 6)
    with pytest.raises(ValueError, match="block"):
        restarted(restarted(S.binary_tree(2), 4), 8)
    with pytest.raises(ValueError, match="n"):
        restarted(S.binary_tree(2), 0)


def test_single_participation_is_the_event_level_sensitivity():
    strat = restarted(S.binary_tree(4), 10)
    w = np.ones(strat.n_rows)
    assert strat.participation_sensitivity(w, single(), 2).value == pytest.approx(
        S.Strategy(strat.matrix, strat.levels).sensitivity(w, "add_remove", 2))
