"""Nested strategies (``strategies.nested``) and their engine (``engines.nested``).

Every number is checked against an independent computation: the dense GLS oracle
(``oracles.constrained_gls``) on random small instances (hypothesis: random fan-outs with
n <= 64, random local matrices with negative entries and extra rows), the aggregated O(L k^3)
reference formula of the lead's derivation (copied below, ``nested_error_sum``), brute force
over neighbouring histograms for the sensitivities, and the framework's own level-uniform
tree for the binary tree written as a nested strategy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from oracles import brute_loss, constrained_gls, dense_1d_workload

from dptree_opt import Mechanism, blue, engines, expected_error
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.engines.nested import NestedEngine
from dptree_opt.strategies.nested import NestedStrategy, nested

RTOL = 1e-8
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ independent references
def nested_error_sum(Qs, ks):
    """The lead's aggregated reference (derivation notes, copied verbatim): the sum over
    inclusive prefixes p of Var(e_0(p)) for the precision sum_v E_v' Q_d E_v."""
    L = len(ks)
    S1, S2, cond, tau_inv, N = 1.0, 1.0, 0.0, 0.0, 1
    for d in range(L - 1, -1, -1):
        k = ks[d]
        Q = Qs[d]
        C = np.linalg.inv(Q + tau_inv * np.eye(k))
        w = C.sum(1)
        tau = w.sum()
        Ccum = np.cumsum(np.cumsum(C, 0), 1)
        pre = np.concatenate([[0.0], np.diag(Ccum)[:-1]])
        colcum = np.cumsum(C, 0)
        cross = np.concatenate([[0.0] * 1, [colcum[c - 1, c] for c in range(1, k)]])
        Wc = np.concatenate([[0.0], np.cumsum(w)[:-1]])
        A = N * pre.sum() + 2 * S1 * cross.sum() + S2 * np.trace(C) + k * cond
        sb = N * Wc.sum() + S1 * w.sum()
        sb2 = (N * Wc**2 + 2 * Wc * w * S1 + w**2 * S2).sum()
        cond = A - sb2 / tau
        S1, S2, tau_inv, N = sb / tau, sb2 / tau**2, 1.0 / tau, N * k
    return A


def dense_nested(mats, ks):
    """The nested strategy's matrix from its definition (Kronecker products)."""
    out = []
    for d, k in enumerate(ks):
        above, below = math.prod(ks[:d]), math.prod(ks[d + 1:])
        out.append(np.kron(np.eye(above), np.kron(mats[d], np.ones((1, below)))))
    return np.vstack(out)


# ------------------------------------------------------------------ random instances
def _local_matrices(rng, ks):
    """Random local matrices: any signs, 1..k+2 rows above the deepest depth; the deepest
    with k..k+2 rows, conditioned well enough for the dense oracle's digits."""
    mats = [rng.normal(size=(int(rng.integers(1, k + 3)), k)) for k in ks[:-1]]
    k = ks[-1]
    mats.append(rng.normal(size=(k + int(rng.integers(0, 3)), k)))
    return mats


@st.composite
def instances(draw):
    ks = []
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(2, 6))
        if math.prod(ks) * k > 64:
            break
        ks.append(k)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mats = _local_matrices(rng, ks)
    assume(np.linalg.cond(mats[-1]) < 1e3)
    noise = draw(st.sampled_from(["laplace", "gaussian"]))
    budgets = rng.uniform(0.3, 1.0, len(ks))
    kw = {"epsilon": float(budgets.sum())} if noise == "laplace" else {"rho": float(budgets.sum())}
    mech = Mechanism(nested(ks, mats), noise=noise, level_budgets=list(budgets), **kw)
    return ks, mats, mech


def _oracle(mech, wd):
    a = dense_nested(mech.released.locals, mech.released.fanouts)
    return constrained_gls(a, mech.variances, wd)


def _close(got, want):
    scale = float(np.max(np.abs(want), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * scale)


# ------------------------------------------------------------------ the engine vs the oracle
@SETTINGS
@given(inst=instances(), seed=st.integers(0, 2**31))
def test_every_error_matches_the_dense_oracle(inst, seed):
    ks, _, mech = inst
    n = mech.n_bins
    rng = np.random.default_rng(seed)
    pairs = [(0, n - 1), (n - 1, n - 1)]
    for _ in range(5):
        a = int(rng.integers(n))
        pairs.append((a, int(rng.integers(a, n))))
    cases = [(W.prefix(n), dense_1d_workload("prefix", n)),
             (W.identity(n), dense_1d_workload("identity", n)),
             (W.total(n), dense_1d_workload("total", n)),
             (W.all_range(n), dense_1d_workload("all_range", n)),
             (W.ranges(n, pairs), dense_1d_workload("ranges", n, pairs))]
    assert engines.select("error", mech, W.prefix(n)).name == "nested"
    for wl, wd in cases:
        _, var, identified = _oracle(mech, wd)
        assert identified.all()
        _close(expected_error(wl, mech, per_query=True), var)
        _close(expected_error(wl, mech), var.sum())
        got = engines.run("max", mech, wl)
        _close(got.variance, var.max())


@SETTINGS
@given(inst=instances(), seed=st.integers(0, 2**31))
def test_estimate_and_covariance_match_the_dense_oracle(inst, seed):
    _, _, mech = inst
    n = mech.n_bins
    rng = np.random.default_rng(seed)
    a = dense_nested(mech.released.locals, mech.released.fanouts)
    coef, _, _ = constrained_gls(a, mech.variances, np.eye(n))
    x = rng.poisson(5.0, n).astype(float)
    y = a @ x + rng.standard_normal((3, a.shape[0])) * np.sqrt(mech.variances)
    assert engines.select("estimate", mech).name == "nested"
    got = blue(mech, y)
    np.testing.assert_allclose(got, y @ coef.T, rtol=0,
                               atol=1e-8 * max(1.0, float(np.abs(y).max())))
    np.testing.assert_allclose(blue(mech, y[0]), got[0], rtol=0, atol=1e-9 * np.abs(got).max())
    cov = (coef * mech.variances) @ coef.T
    u = rng.standard_normal((n, 2))
    for arg in (u, u[:, 0]):
        got_cov = engines.run("covariance", mech, None, "blue", y=arg)
        want = cov @ arg
        np.testing.assert_allclose(got_cov, want, rtol=RTOL,
                                   atol=RTOL * float(np.abs(cov).max()) * float(np.abs(arg).max()))


@SETTINGS
@given(inst=instances())
def test_summed_prefix_variances_equal_the_aggregated_reference(inst):
    ks, mats, mech = inst
    var = [mech.level_variances[d + 1] for d in range(len(ks))]
    qs = [m.T @ m / v for m, v in zip(mats, var)]
    want = nested_error_sum(qs, ks)
    twin, c = mech.normalised()
    got = NestedEngine().error(twin, W.prefix(mech.n_bins), "blue", per_query=True)
    assert math.isclose(c * float(np.sum(got)), want, rel_tol=1e-9)


def test_budgets_per_depth_and_local_row_are_folded():
    """row_budgets that are the same at every node of a depth (one per local row) stay with
    the nested engine; the errors match the oracle."""
    rng = np.random.default_rng(7)
    ks = [3, 2, 2]
    mats = _local_matrices(rng, ks)
    strat = nested(ks, mats)
    per_row = [rng.uniform(0.3, 1.0, m.shape[0]) for m in mats]
    b = np.concatenate([np.tile(r, p) for r, p in zip(per_row, strat.nodes)])
    mech = Mechanism(strat, epsilon=float(sum(r.sum() for r in per_row)), row_budgets=b)
    n = mech.n_bins
    assert engines.select("per_query", mech, W.prefix(n)).name == "nested"
    for kind in ("prefix", "identity"):
        _, var, _ = _oracle(mech, dense_1d_workload(kind, n))
        _close(expected_error(getattr(W, kind)(n), mech, per_query=True), var)


def test_refusals_leave_the_request_to_the_generic_engine():
    """Noise that differs between nodes of a depth, and an unmeasured deepest depth (bins not
    identified), are refused with a reason; the dense engine then answers (or says why
    not)."""
    rng = np.random.default_rng(3)
    ks = [2, 3]
    strat = nested(ks, _local_matrices(rng, ks))
    b = rng.uniform(0.3, 1.0, strat.n_rows)   # per node: differs between nodes
    mech = Mechanism(strat, epsilon=float(b.sum()), row_budgets=b)
    engine = NestedEngine()
    reason = engine.refusal("error", mech, W.prefix(6), "blue")
    assert reason is not None and "differs between the nodes" in reason
    assert engines.select("error", mech, W.prefix(6)).name == "dense"
    _, var, _ = _oracle(mech, dense_1d_workload("prefix", 6))
    _close(expected_error(W.prefix(6), mech, per_query=True), var)
    unmeasured = Mechanism(strat, epsilon=1.0, level_budgets=[1.0, 0.0])
    reason = engine.refusal("error", unmeasured, W.prefix(6), "blue")
    assert reason is not None and "do not identify the bins" in reason
    with pytest.raises(ValueError):
        expected_error(W.prefix(6), unmeasured)


# ------------------------------------------------------------------ front door and the tree
def test_front_door_prefix_error_equals_the_dense_oracle():
    rng = np.random.default_rng(11)
    ks = [4, 2, 3]
    mats = _local_matrices(rng, ks)
    mech = Mechanism(nested(ks, mats), epsilon=1.0)
    n = mech.n_bins
    _, var, _ = _oracle(mech, dense_1d_workload("prefix", n))
    got = expected_error(W.prefix(n), mech)
    assert math.isclose(got, float(var.sum()), rel_tol=RTOL)
    assert math.isclose(got, expected_error(W.prefix(n), mech, method="dense"), rel_tol=RTOL)


@pytest.mark.parametrize("height", [1, 2, 4])
def test_binary_tree_as_nested_equals_the_level_uniform_tree(height):
    """S_0 = [[1, 1], [1, 0], [0, 1]] (root and its children), S_d = I_2 below: the binary
    tree's rows in the same order. With budgets making every row's noise scale (L + 1) /
    eps (depth 0 has sensitivity 2, so twice a lower depth's budget), the level-uniform
    tree at equal budgets per level: same errors and the same estimate."""
    n = 2 ** height
    tree = S.tree(n, [2] * height)
    mats = [np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])] + [np.eye(2)] * (height - 1)
    strat = nested([2] * height, mats)
    budgets = [2.0 / (height + 1)] + [1.0 / (height + 1)] * (height - 1)
    mech = Mechanism(strat, epsilon=1.0, level_budgets=budgets)
    ref = Mechanism(tree, epsilon=1.0)
    np.testing.assert_array_equal(strat.matrix.toarray(), tree.matrix.toarray())
    np.testing.assert_allclose(mech.variances, ref.variances, rtol=1e-12)
    for kind in ("prefix", "identity", "total", "all_range"):
        wl = getattr(W, kind)(n)
        assert math.isclose(expected_error(wl, mech), expected_error(wl, ref), rel_tol=1e-10)
    y = np.random.default_rng(height).normal(0.0, 5.0, strat.n_rows)
    np.testing.assert_allclose(blue(mech, y), blue(ref, y), rtol=0, atol=1e-10)


# ------------------------------------------------------------------ the strategy
@pytest.mark.parametrize("ks", [[2, 2], [3, 2], [2, 2, 2], [4]])
@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
@pytest.mark.parametrize("p", [1, 2])
def test_sensitivity_equals_brute_force(ks, neighbours, p):
    """Against brute force over neighbouring histograms (the explicit matrix), with unit
    weights, weights per depth (the closed forms) and weights per row."""
    rng = np.random.default_rng(sum(ks) + 10 * p)
    strat = nested(ks, _local_matrices(rng, ks))
    a = dense_nested(strat.locals, ks)
    depth_w = rng.uniform(0.5, 2.0, strat.height)[strat.levels - 1]
    for w in (np.ones(strat.n_rows), depth_w, rng.uniform(0.5, 2.0, strat.n_rows)):
        got = strat.sensitivity(w, neighbours, p)
        assert math.isclose(got, brute_loss(a, w, neighbours, p), rel_tol=1e-12)


@SETTINGS
@given(inst=instances(), seed=st.integers(0, 2**31))
def test_products_and_structure_match_the_definition(inst, seed):
    ks, mats, mech = inst
    strat = mech.released
    assert isinstance(strat, NestedStrategy)
    a = dense_nested(mats, ks)
    np.testing.assert_array_equal(strat.matrix.toarray(), a)
    rng = np.random.default_rng(seed)
    x, u = rng.standard_normal((a.shape[1], 2)), rng.standard_normal(a.shape[0])
    op = strat.aslinearoperator()
    np.testing.assert_allclose(op.matmat(x), a @ x, atol=1e-12 * np.abs(a).sum())
    np.testing.assert_allclose(op.rmatvec(u), a.T @ u, atol=1e-12 * np.abs(a).sum())
    depth = np.concatenate([np.full(math.prod(ks[:d]) * m.shape[0], d + 1)
                            for d, m in enumerate(mats)])
    np.testing.assert_array_equal(strat.levels, depth)
    assert strat.n_rows == a.shape[0] and strat.n_bins == a.shape[1]
    for s, m in zip(strat.grams(), mats):
        np.testing.assert_allclose(s, m.T @ m, rtol=1e-14)
    got = strat.locals
    with pytest.raises(ValueError, match="read-only"):
        got[0][0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        strat.levels[0] = 0


def test_explicit_matrix_is_refused_above_its_limit_but_products_work():
    ks = [64, 64, 64]
    strat = nested(ks, [np.eye(k) for k in ks])
    with pytest.raises(ValueError, match="explicit matrix would hold"):
        strat.matrix  # noqa: B018
    x = np.arange(strat.n_bins, dtype=float)
    y = strat.apply(x)
    assert y.shape == (strat.n_rows,)
    assert y[0] == x[:64 * 64].sum() and np.array_equal(y[-strat.n_bins:], x)
    assert strat.sensitivity(np.ones(strat.n_rows), "swap", 1) == 6.0


@pytest.mark.parametrize("fanouts, mats, match", [
    ([1, 2], [[[1.0]], np.eye(2)], r"fanouts\[0\]"),
    ([2.5], [np.eye(2)], r"fanouts\[0\]"),
    ([], [], "fanouts"),
    ("22", [np.eye(2)], "fanouts"),
    ([2, 2], [np.eye(2)], "locals must hold one matrix per depth"),
    ([2, 2], [np.ones((1, 3)), np.eye(2)], r"locals\[0\]"),
    ([2, 2], [np.ones(2), np.eye(2)], r"locals\[0\]"),
    ([2, 2], [np.ones((0, 2)), np.eye(2)], r"locals\[0\]"),
    ([2, 2], [[[1.0, np.nan]], np.eye(2)], r"locals\[0\] has non-finite"),
    ([2, 2], [[[1.0, 1.0]], [[1.0, 1.0], [2.0, 2.0]]], r"locals\[1\].*full column rank"),
    ([2], [[["a", "b"]]], r"locals\[0\]"),
    ([2], [np.eye(2) * 1j], r"locals\[0\]"),
    ([2], np.eye(2), "locals must be a sequence"),
])
def test_bad_input_is_refused(fanouts, mats, match):
    with pytest.raises(ValueError, match=match):
        nested(fanouts, mats)


@pytest.mark.slow
def test_prefix_error_at_2_20_equals_the_aggregated_reference():
    """n = 2^20, fan-outs (128, 64, 128), random local matrices: the engine's exact prefix
    error (through the front door) equals the O(L k^3) reference formula."""
    rng = np.random.default_rng(20)
    ks = [128, 64, 128]
    mats = [rng.normal(size=(k + 1, k)) for k in ks]
    mech = Mechanism(nested(ks, mats), epsilon=1.0)
    n = mech.n_bins
    assert engines.select("error", mech, W.prefix(n)).name == "nested"
    got = expected_error(W.prefix(n), mech)
    var = [mech.level_variances[d + 1] for d in range(3)]
    want = nested_error_sum([m.T @ m / v for m, v in zip(mats, var)], ks)
    assert math.isclose(got, want, rel_tol=1e-8)
