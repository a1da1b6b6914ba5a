"""The causal BLUE (issue 16 item 2): exact errors against an independent dense constrained
GLS, structured paths against the dense filter, the estimator's properties, Monte Carlo."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.engines.causal_error import (laminar_causal_prefix_variances,
                                     tree_causal_all_range_total, tree_causal_prefix_variances,
                                     tree_causal_range_variances)
from dptree_opt.estimation import causal_blue
from dptree_opt.engines.causal import MAX_CAUSAL_DENSE_BINS, from_below_variances

RTOL = 1e-8


# ---------------------------------------------------------------------------------------------
# The obviously-correct twin: for every query, the constrained GLS on the rows complete by its
# step (computed from the dense matrix), by least squares on whitened rows.
# ---------------------------------------------------------------------------------------------
def oracle_variances(mech, lo, hi):
    """Var of the causal BLUE of each query [lo, hi) (inf if not identified).

    Rows complete at e = 1 + last non-zero column; the estimator of q'x is d'y_noisy/sqrt(v)
    + f'y_exact with B'd + E'f = q (unbiased) and minimal ||d||^2: over x = x0 + N u (N a basis
    of null(E)), d is the min-norm solution of (B N)' d = N'q."""
    A = mech.released.matrix.toarray()
    var = np.asarray(mech.variances, dtype=float)
    n = A.shape[1]
    nz = A != 0
    e = np.where(nz.any(axis=1), n - np.argmax(nz[:, ::-1], axis=1), 0)
    out = np.empty(len(lo))
    for i, (a, t) in enumerate(zip(lo, hi)):
        rows = np.isfinite(var) & (e > 0) & (e <= t)
        noisy, exact = rows & (var > 0), rows & (var == 0)
        B = A[noisy, :t] / np.sqrt(var[noisy])[:, None]
        q = np.zeros(t)
        q[a:t] = 1.0
        N = sla.null_space(A[exact, :t]) if exact.any() else np.eye(t)
        G, c = B @ N, N.T @ q
        if G.size == 0:
            out[i] = 0.0 if np.allclose(c, 0) else np.inf
            continue
        d = np.linalg.lstsq(G.T, c, rcond=None)[0]
        ok = np.linalg.norm(G.T @ d - c) <= 1e-8 * max(1.0, np.linalg.norm(c))
        out[i] = d @ d if ok else np.inf
    return out


def offline_refuses(mech) -> bool:
    try:
        dp.expected_error(W.total(mech.n_bins), mech, "blue")
    except ValueError:
        return True
    return False


def check_against_oracle(mech, wl, methods=("auto", "dense")):
    """expected_error(causal) per query and total == the oracle, or ValueError when the
    oracle has a non-identified query (or the offline engine refuses a query answered at n)."""
    lo, hi = wl.intervals()
    ref = oracle_variances(mech, lo, hi)
    refuse = (not np.all(np.isfinite(ref))
              or (np.any(hi == mech.n_bins) and offline_refuses(mech)))
    for method in methods:
        if refuse:
            with pytest.raises(ValueError):
                dp.expected_error(wl, mech, "causal", per_query=True, method=method)
            continue
        got = dp.expected_error(wl, mech, "causal", per_query=True, method=method)
        scale = max(float(np.max(ref)), 1e-300)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=1e-9 * scale, err_msg=method)
        total = dp.expected_error(wl, mech, "causal", method=method)
        assert total == pytest.approx(float(ref.sum()), rel=RTOL, abs=1e-9 * scale)


# ---------------------------------------------------------------------------------------------
# Random trees
# ---------------------------------------------------------------------------------------------
@st.composite
def tree_mechanisms(draw, max_bins=64):
    ks = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    while math.prod(ks) > max_bins:
        ks.pop()
    assume(math.prod(ks) >= 2)
    noise = draw(st.sampled_from(["laplace", "gaussian"]))
    neighbours = draw(st.sampled_from(["swap", "add_remove"]))
    public = None if neighbours == "swap" else draw(st.sampled_from([None, True]))
    n_noisy = len(ks) if (neighbours == "swap" or public) else len(ks) + 1
    budgets = [draw(st.floats(0.05, 1.0)) for _ in range(n_noisy)]
    if n_noisy > 1 and draw(st.booleans()):
        budgets[draw(st.integers(0, n_noisy - 1))] = 0.0  # an unmeasured level
    total = float(sum(budgets))
    kw = {"epsilon": total} if noise == "laplace" else {"rho": total}
    try:
        return dp.Mechanism(S.tree(math.prod(ks), ks), noise=noise, neighbours=neighbours,
                            public_total=public, level_budgets=budgets, **kw)
    except ValueError:
        assume(False)


def _random_ranges(draw, n, count=6):
    pairs = []
    for _ in range(count):
        a = draw(st.integers(0, n - 1))
        pairs.append((a, draw(st.integers(a, n - 1))))
    return W.ranges(n, pairs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mech=tree_mechanisms(), data=st.data())
def test_trees_match_dense_gls(mech, data):
    """Random level-uniform trees (k = 1 levels, an unmeasured level, public / private /
    unmeasured root, Laplace / Gaussian, swap / add_remove): structured and dense causal
    errors equal the independent GLS on the complete rows, per query and in total."""
    n = mech.n_bins
    wls = [W.prefix(n), W.identity(n), _random_ranges(data.draw, n)]
    if n <= 24:
        wls.append(W.all_range(n))
    for wl in wls:
        check_against_oracle(mech, wl)


@settings(max_examples=40, deadline=None)
@given(mech=tree_mechanisms(max_bins=256))
def test_tree_prefix_structured_equals_dense(mech):
    """The O(K) tree prefix path equals the dense filter (larger trees, no oracle needed)."""
    n = mech.n_bins
    try:
        dense = dp.expected_error(W.prefix(n), mech, "causal", per_query=True, method="dense")
    except ValueError:
        with pytest.raises(ValueError):
            dp.expected_error(W.prefix(n), mech, "causal", per_query=True)
        return
    fast = dp.expected_error(W.prefix(n), mech, "causal", per_query=True)
    np.testing.assert_allclose(fast, dense, rtol=1e-8, atol=1e-9 * dense.max())


@settings(max_examples=30, deadline=None)
@given(ks=st.lists(st.integers(1, 5), min_size=1, max_size=4).filter(
           lambda k: 2 <= math.prod(k) <= 300),
       v=st.lists(st.floats(0.1, 10.0), min_size=5, max_size=5),
       root=st.sampled_from(["public", "noisy", "unmeasured"]))
def test_tree_all_range_total_closed_form(ks, v, root):
    """The O(h^2) all-range total equals the sum of the O(h) per-range variances."""
    lv = np.array(v[: len(ks) + 1])
    lv[0] = {"public": 0.0, "noisy": lv[0], "unmeasured": np.inf}[root]
    n = math.prod(ks)
    lo, hi = W.all_range(n).intervals()
    per = tree_causal_range_variances(ks, lv, lo, hi)
    assert tree_causal_all_range_total(ks, lv) == pytest.approx(per.sum(), rel=1e-10)
    prefix = tree_causal_prefix_variances(ks, lv)
    np.testing.assert_allclose(prefix, tree_causal_range_variances(ks, lv, np.zeros(n, int),
                                                                    np.arange(1, n + 1)),
                               rtol=1e-12, atol=1e-12)
    assert tree_causal_prefix_variances(ks, lv, per_query=False) == pytest.approx(prefix.sum(),
                                                                                  rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Other strategies: lower-triangular cores, interval strategies, generic matrices
# ---------------------------------------------------------------------------------------------
def _hierarchy():
    g = nx.DiGraph()
    g.add_edges_from([("r", "a"), ("r", "b"), ("r", "c"), ("a", 0), ("a", 1), ("a", 2),
                      ("b", 3), ("c", "d"), ("c", 6), ("d", 4), ("d", 5)])
    return S.hierarchy(g)


OTHER = {
    "sqrt swap": lambda: dp.Mechanism(S.sqrt_factorization(16), rho=0.5),
    "sqrt add_remove": lambda: dp.Mechanism(S.sqrt_factorization(16), rho=0.5,
                                            neighbours="add_remove"),
    "toeplitz": lambda: dp.Mechanism(S.toeplitz([2.0, -0.7, 0.3, 0.5, 0.0, 0.2, -0.1, 0.4]),
                                     epsilon=1.0),
    "histogram swap": lambda: dp.Mechanism(S.histogram(12), epsilon=1.0),
    "prefix sums add_remove": lambda: dp.Mechanism(S.prefix_sums(12), epsilon=1.0,
                                                   neighbours="add_remove"),
    "truncated tree": lambda: dp.Mechanism(S.truncated_tree(13, [2, 2, 2, 2]), epsilon=1.0),
    "truncated tree 3-ary": lambda: dp.Mechanism(S.truncated_tree(20, [3, 3, 3]), rho=0.5,
                                                 neighbours="add_remove"),
    "hierarchy": lambda: dp.Mechanism(_hierarchy(), epsilon=1.0, neighbours="add_remove"),
    "node budgets": lambda: dp.Mechanism(
        S.tree(8, 2), epsilon=1.0, neighbours="add_remove",
        row_budgets=np.r_[0.1, 0.2, 0.3, np.linspace(0.2, 0.4, 4), np.linspace(0.1, 0.6, 8)] * 0.7),
    "tree k1 exact level": lambda: dp.Mechanism(S.tree(6, [1, 2, 3]), epsilon=1.0),
    "p_identity": lambda: dp.Mechanism(
        S.p_identity(np.array([[0, 1, 1, 0, 0, 0, 0, 0, 0, 0],
                               [0, 0, 0, 0, 1, 2, 1, 0, 0, 0],
                               [1, 1, 1, 1, 1, 1, 1, 1, 1, 1.0]])),
        epsilon=1.0, neighbours="add_remove"),
}


@pytest.mark.parametrize("name", sorted(OTHER))
@pytest.mark.parametrize("kind", ["prefix", "identity", "all_range", "ranges"])
def test_other_strategies_match_dense_gls(name, kind):
    mech = OTHER[name]()
    n = mech.n_bins
    wl = {"prefix": W.prefix(n), "identity": W.identity(n), "all_range": W.all_range(n),
          "ranges": W.ranges(n, [(1, 3), (0, n - 1), (2, n - 1), (n - 1, n - 1), (0, 0)])}[kind]
    check_against_oracle(mech, wl)


@st.composite
def random_mechanisms(draw):
    n = draw(st.integers(2, 14))
    m = draw(st.integers(n // 2, 2 * n))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, n)) * (rng.random((m, n)) < draw(st.floats(0.15, 0.8)))
    if draw(st.booleans()):  # sometimes a histogram underneath (then identified offline)
        A = np.vstack([A, np.diag(rng.uniform(0.5, 2.0, n))])
    A = A[np.abs(A).sum(axis=1) > 0]
    assume(A.shape[0] > 0)
    noise = draw(st.sampled_from(["laplace", "gaussian"]))
    neighbours = draw(st.sampled_from(["swap", "add_remove"]))
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    try:
        return dp.Mechanism(S.Strategy(A), noise=noise, neighbours=neighbours, **kw)
    except ValueError:
        assume(False)


@settings(max_examples=40, deadline=None)
@given(mech=random_mechanisms())
def test_random_strategies_match_dense_gls(mech):
    """Random sparse strategies (often not identified causally; then ValueError)."""
    n = mech.n_bins
    for wl in (W.prefix(n), W.all_range(n)):
        check_against_oracle(mech, wl, methods=("auto",))


def test_laminar_prefix_path_matches_dense():
    """Interval strategies' O(rows) prefix path (truncated tree at 300 bins, per-node budgets)
    equals the dense filter."""
    mech = dp.Mechanism(S.truncated_tree(300, [4, 4, 4, 5]), epsilon=1.0,
                        neighbours="add_remove")
    fast = laminar_causal_prefix_variances(mech)
    dense = dp.expected_error(W.prefix(300), mech, "causal", per_query=True, method="dense")
    np.testing.assert_allclose(fast, dense, rtol=1e-9)
    np.testing.assert_allclose(dp.expected_error(W.prefix(300), mech, "causal",
                                                 per_query=True), dense, rtol=1e-9)


# ---------------------------------------------------------------------------------------------
# Causal vs offline
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tree", "tree gauss", "truncated tree", "p_identity",
                                  "sqrt swap", "hierarchy"])
def test_causal_at_least_offline(name):
    mech = {"tree": lambda: dp.Mechanism(S.tree(27, 3), epsilon=1.0),
            "tree gauss": lambda: dp.Mechanism(S.tree(16, [2, 4, 2]), rho=0.5,
                                               neighbours="add_remove"),
            **OTHER}[name]()
    n = mech.n_bins
    for wl in (W.prefix(n), W.identity(n), W.all_range(n)):
        causal = dp.expected_error(wl, mech, "causal", per_query=True)
        offline = dp.expected_error(wl, mech, "blue", per_query=True)
        assert np.all(causal >= offline * (1 - 1e-9) - 1e-9 * offline.max())
        last = wl.intervals()[1] == n  # every row is complete at n
        np.testing.assert_allclose(causal[last], offline[last], rtol=1e-9,
                                   atol=1e-9 * offline.max())


@pytest.mark.parametrize("strategy", ["sqrt", "histogram", "toeplitz"])
def test_lower_triangular_causal_equals_offline(strategy):
    """N private: M A^-1 is lower triangular, the offline BLUE is causal (equal per query).
    The "auto" path returns the offline error by this very argument, so the causal side is
    the dense filter, which knows nothing of it."""
    st_ = {"sqrt": S.sqrt_factorization(64), "histogram": S.histogram(64),
           "toeplitz": S.toeplitz(np.r_[1.0, 0.5 ** np.arange(1, 64)])}[strategy]
    mech = dp.Mechanism(st_, rho=0.5, neighbours="add_remove")
    for wl in (W.prefix(64), W.identity(64), W.all_range(64)):
        np.testing.assert_allclose(
            dp.expected_error(wl, mech, "causal", per_query=True, method="dense"),
            dp.expected_error(wl, mech, "blue", per_query=True), rtol=1e-9)


def test_trees_strictly_worse_than_offline_on_some_prefix():
    mech = dp.Mechanism(S.binary_tree(64), epsilon=1.0, neighbours="add_remove")
    causal = dp.expected_error(W.prefix(64), mech, "causal", per_query=True)
    offline = dp.expected_error(W.prefix(64), mech, "blue", per_query=True)
    assert np.all(causal[:-1] > offline[:-1] * (1 + 1e-6))
    assert causal[-1] == pytest.approx(offline[-1], rel=1e-12)


def test_sqrt_factorisation_with_public_total_at_scale():
    """Swap (N public): before n the total row is not complete, so Var(C_t) = v S2(t) exactly
    (no constraint step); C_n = N is exact. Structured (Toeplitz FFT) at n = 2^14."""
    n = 1 << 14
    mech = dp.Mechanism(S.sqrt_factorization(n), rho=0.5, neighbours="swap")
    v = float(mech.variances[0])
    c = np.cumprod(np.r_[1.0, (2 * np.arange(1, n) - 1) / (2 * np.arange(1, n))])
    var = dp.expected_error(W.prefix(n), mech, "causal", per_query=True)
    np.testing.assert_allclose(var[:-1], v * np.cumsum(c * c)[:-1], rtol=1e-9)
    assert abs(var[-1]) < 1e-6 * var[-2]
    offline = dp.expected_error(W.prefix(n), mech, "blue", per_query=True)
    assert np.all(var[:-1] > offline[:-1])


# ---------------------------------------------------------------------------------------------
# The binary tree: Var_t from the from-below recursion and the binary digits of t
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("log_n", [5, 20])
def test_binary_tree_popcount_formula(noise, log_n):
    """Equal budgets, add/remove: every level has variance v (Laplace 2 (h+1)^2 / eps^2,
    Gaussian (h+1) / (2 rho)); a node of width 2^j has from-below variance F_0 = v,
    F_j = 1 / (1/v + 1/(2 F_(j-1))); Var(C_t) = sum of F_j over the set bits j of t (t < K),
    and the root's F at t = K."""
    n = 1 << log_n
    kw = {"epsilon": 1.0} if noise == "laplace" else {"rho": 0.5}
    mech = dp.Mechanism(S.binary_tree(n), neighbours="add_remove", **kw)
    h = log_n
    v = 2 * (h + 1) ** 2 if noise == "laplace" else (h + 1) / (2 * 0.5)
    F = [float(v)]
    for _ in range(h):
        F.append(1.0 / (1.0 / v + 1.0 / (2.0 * F[-1])))
    t = np.arange(1, n + 1, dtype=np.int64)
    expected = np.zeros(n)
    for j in range(h):
        expected += ((t >> j) & 1) * F[j]
    expected[-1] = F[h]
    got = dp.expected_error(W.prefix(n), mech, "causal", per_query=True)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert dp.expected_error(W.prefix(n), mech, "causal") == pytest.approx(expected.sum(),
                                                                             rel=1e-12)
    # the recursion of the library (root first) is the same numbers
    np.testing.assert_allclose(from_below_variances((2,) * h, [v] * (h + 1))[::-1], F,
                               rtol=1e-14)


def test_worked_numbers_from_math_md():
    """MATH.md section 2: with equal variances s^2 the from-below variance two levels above the
    leaves is 4 s^2 / 7; a 4-leaf binary tree's causal C_3 is then 2 s^2/3 + s^2."""
    F = from_below_variances((2, 2), [1.0, 1.0, 1.0])
    assert F[0] == pytest.approx(4 / 7) and F[1] == pytest.approx(2 / 3)
    var = tree_causal_prefix_variances((2, 2), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(var, [1.0, 2 / 3, 2 / 3 + 1.0, 4 / 7])


# ---------------------------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------------------------
EST_MECHS = {
    "tree": lambda: dp.Mechanism(S.tree(12, [3, 2, 2]), epsilon=1.0),
    "tree unmeasured level": lambda: dp.Mechanism(S.tree(12, [3, 2, 2]), rho=0.5,
                                                  neighbours="add_remove",
                                                  level_budgets=[0.1, 0.0, 0.2, 0.2]),
    "sqrt swap": lambda: dp.Mechanism(S.sqrt_factorization(12), rho=0.5),
    "truncated tree": lambda: dp.Mechanism(S.truncated_tree(12, [2, 2, 2, 2]), epsilon=1.0),
    "p_identity": OTHER["p_identity"],
}


def _completion(mech):
    A = mech.released.matrix.toarray()
    nz = A != 0
    return np.where(nz.any(axis=1), A.shape[1] - np.argmax(nz[:, ::-1], axis=1), 0)


@pytest.mark.parametrize("name", sorted(EST_MECHS))
def test_estimator_unbiased_linear_causal(name):
    mech = EST_MECHS[name]()
    n = mech.n_bins
    rng = np.random.default_rng(7)
    x = rng.poisson(10, n)
    exact = mech.released.apply(x)
    measured = np.isfinite(mech.variances)
    e = _completion(mech)
    for wl in (W.prefix(n), W.identity(n), W.all_range(n)):
        truth = wl.matvec(x.astype(float))
        lo, hi = wl.intervals()
        # zero noise reproduces the truth (unbiased: the answer map reproduces W x)
        np.testing.assert_allclose(causal_blue(mech, np.where(measured, exact, np.nan), wl),
                                   truth, rtol=1e-10, atol=1e-9)
        z = mech.sample_noise(rng, size=3)
        a1 = causal_blue(mech, exact + z, wl)
        a2 = causal_blue(mech, exact + 2.5 * z, wl)
        np.testing.assert_allclose(a2 - truth, 2.5 * (a1 - truth), rtol=1e-9, atol=1e-8)
        # structured == dense filter
        np.testing.assert_allclose(a1, causal_blue(mech, exact + z, wl, method="dense"),
                                   rtol=1e-9, atol=1e-8)
        # only complete rows: perturbing the rows complete after step t leaves earlier
        # answers unchanged (and changes some later one)
        for t in (1, 5, n - 1):
            y = exact + z
            y[:, measured & (e > t)] += 1000.0
            a3 = causal_blue(mech, y, wl)
            early = hi <= t
            np.testing.assert_allclose(a3[:, early], a1[:, early], rtol=1e-12, atol=1e-9)
            assert np.max(np.abs(a3[:, ~early] - a1[:, ~early])) > 1.0


@pytest.mark.parametrize("name", sorted(EST_MECHS))
def test_monte_carlo_matches_exact(name):
    """The simulated squared error is within 4 standard errors of the exact causal error
    (fixed seed; the mean of 3000 i.i.d. squared errors, SE = sample sd / sqrt(trials))."""
    mech = EST_MECHS[name]()
    n = mech.n_bins
    for wl in (W.prefix(n), W.all_range(n)):
        exact = dp.expected_error(wl, mech, "causal")
        mc = dp.monte_carlo_error(wl, mech, "causal", trials=3000, rng=11)
        assert mc.within(exact, 4.0), (mc, exact)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
def test_not_identified_causally_raises():
    # Haar: detail rows complete late; bin 0 alone is not known at step 1
    mech = dp.Mechanism(S.haar(8), epsilon=1.0, neighbours="swap")
    with pytest.raises(ValueError, match=r"query 0 .*step t = 1"):
        dp.expected_error(W.prefix(8), mech, "causal")
    # rows x0 + x1 and x1: x0 is identified offline, not at step 1
    mech = dp.Mechanism(S.Strategy(np.array([[1.0, 1.0], [0.0, 1.0]])), epsilon=1.0,
                        neighbours="add_remove")
    assert np.isfinite(dp.expected_error(W.prefix(2), mech, "blue"))
    with pytest.raises(ValueError, match="not identified"):
        dp.expected_error(W.prefix(2), mech, "causal", per_query=True)
    with pytest.raises(ValueError, match="not identified"):
        causal_blue(mech, np.zeros(2), W.prefix(2))
    # a tree with unmeasured leaves: odd prefixes are not identified
    mech = dp.Mechanism(S.tree(8, 2), epsilon=1.0, level_budgets=[0.5, 0.5, 0.0],
                        neighbours="swap")
    with pytest.raises(ValueError, match=r"step t = 1"):
        dp.expected_error(W.prefix(8), mech, "causal")
    # ... but the even ones are
    var = dp.expected_error(W.ranges(8, [(0, 1), (0, 3), (2, 5)]), mech, "causal",
                            per_query=True)
    assert np.all(np.isfinite(var)) and np.all(var > 0)
    wl = W.ranges(8, [(0, 1), (0, 3), (2, 5)])  # (2, 5) straddles a subtree without leaves
    x = np.arange(8)
    y = np.where(np.isfinite(mech.variances), mech.released.apply(x), np.nan)
    np.testing.assert_allclose(causal_blue(mech, y, wl), wl.matvec(x.astype(float)))
    mc = dp.monte_carlo_error(wl, mech, "causal", trials=3000, rng=2)
    assert mc.within(float(var.sum()), 4.0)


def test_bad_input():
    mech = dp.Mechanism(S.tree(8, 2), epsilon=1.0)
    with pytest.raises(ValueError, match="1-D workloads"):
        dp.expected_error(W.prefix((2, 4)), mech, "causal")
    with pytest.raises(ValueError, match="bins"):
        dp.expected_error(W.prefix(4), mech, "causal")
    with pytest.raises(ValueError, match="method"):
        dp.expected_error(W.prefix(8), mech, "causal", method="fast")
    with pytest.raises(ValueError, match="entries per trial"):
        causal_blue(mech, np.zeros(3), W.prefix(8))
    with pytest.raises(ValueError, match="method"):
        causal_blue(mech, np.zeros(15), W.prefix(8), method="fast")
    with pytest.raises(ValueError, match="Mechanism"):
        dp.expected_error(W.prefix(8), "not a mechanism", "causal")
    with pytest.raises(ValueError, match="length"):
        from_below_variances((2, 2), [1.0, 1.0])
    for lo, hi in (([3], [2]), ([0], [9]), ([0.5], [1]), ([[0]], [[1]])):
        with pytest.raises(ValueError, match="lo"):
            tree_causal_range_variances((2, 2, 2), [1.0] * 4, lo, hi)
    big = dp.Mechanism(S.truncated_tree(MAX_CAUSAL_DENSE_BINS + 10, [2] * 13), epsilon=1.0)
    with pytest.raises(ValueError, match=str(MAX_CAUSAL_DENSE_BINS)):
        dp.expected_error(W.identity(big.n_bins), big, "causal")
    # ... while its prefixes have the O(rows) interval path
    assert dp.expected_error(W.prefix(big.n_bins), big, "causal") > 0


# ---------------------------------------------------------------------------------------------
# Heavier checks
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mech=tree_mechanisms(max_bins=64), data=st.data())
def test_trees_match_dense_gls_many(mech, data):
    n = mech.n_bins
    for wl in (W.prefix(n), W.identity(n), W.all_range(n), _random_ranges(data.draw, n, 20)):
        check_against_oracle(mech, wl)


@pytest.mark.slow
@pytest.mark.parametrize("ks", [(4, 4, 4, 4, 4), (2,) * 11, (16, 16, 4)])
def test_structured_equals_dense_filter_large(ks):
    """Trees of 1024-2048 bins: prefix, identity and ranges by the structured paths equal the
    dense filter."""
    n = math.prod(ks)
    mech = dp.Mechanism(S.tree(n, list(ks)), rho=0.5, neighbours="add_remove")
    rng = np.random.default_rng(3)
    a = rng.integers(0, n, 200)
    b = np.minimum(a + rng.integers(0, n // 3, 200), n - 1)
    for wl in (W.prefix(n), W.identity(n), W.ranges(n, np.column_stack([a, b]))):
        np.testing.assert_allclose(
            dp.expected_error(wl, mech, "causal", per_query=True),
            dp.expected_error(wl, mech, "causal", per_query=True, method="dense"),
            rtol=1e-8)


@pytest.mark.slow
def test_monte_carlo_large_tree_prefix():
    mech = dp.Mechanism(S.tree(4096, 16), epsilon=1.0, neighbours="add_remove")
    exact = dp.expected_error(W.prefix(4096), mech, "causal")
    mc = dp.monte_carlo_error(W.prefix(4096), mech, "causal", trials=4000, rng=5)
    assert mc.within(exact, 4.0), (mc, exact)
