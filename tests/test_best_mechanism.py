"""``optimize.best_mechanism``: never worse than any family's own optimiser, errors equal to an
independent dense GLS of the returned mechanisms, privacy checked by brute force, the
direct-workload family on disjoint brackets, filtering, bad input, the time limit."""

import json
import math

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, settings
from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import Mechanism, optimize, strategies, workloads
from dptree_opt.data_release.secure_noise import secure_form, secure_measure
from dptree_opt.optimize import families_1d

from oracles import brute_loss, factorisations

# --------------------------------------------------------------------------- oracles


def dense_blue_error(w_dense: np.ndarray, mech: Mechanism) -> float:
    """trace(W Cov W') of the GLS BLUE from the dense released matrix and its per-row noise
    scales s (variance 2 s^2 for Laplace, s^2 for Gaussian; ``check_private`` checks the
    scales): noisy rows weighted 1 / variance, exact rows (s = 0) as equality constraints (Z
    spans their null space), unmeasured rows (s = inf) dropped. The workload need only lie in
    the row space of the measurements (pseudo-inverse), which is checked."""
    a = mech.released.matrix.toarray()
    s = np.asarray(mech.scales, dtype=float)
    v = (2.0 if mech.noise == "laplace" else 1.0) * s * s
    noisy = np.isfinite(v) & (v > 0)
    exact = v == 0
    z = sla.null_space(a[exact]) if exact.any() else np.eye(a.shape[1])
    an = a[noisy] @ z
    info = an.T @ (an / v[noisy, None])
    wz = w_dense @ z
    pinv = np.linalg.pinv(info, rcond=1e-12, hermitian=True)
    assert np.allclose(wz @ pinv @ info, wz, atol=1e-8 * max(1.0, np.abs(wz).max()))
    return float(np.trace(wz @ pinv @ wz.T))


def check_private(mech: Mechanism, budget: float, neighbours: str) -> None:
    """The scaled released matrix diag(1 / scale) A loses at most the budget over every pair
    of neighbouring datasets of 1-2 records (brute force): eps (l1) or rho = D2^2 / 2 (l2)."""
    a = mech.released.matrix.toarray()
    s = np.asarray(mech.scales, dtype=float)
    w = np.where((s > 0) & np.isfinite(s), 1.0 / np.where(s > 0, s, 1.0), 0.0)
    if mech.noise == "laplace":
        assert brute_loss(a, w, neighbours, 1) <= budget * (1 + 1e-9)
    else:
        assert brute_loss(a, w, neighbours, 2) ** 2 / 2 <= budget * (1 + 1e-9)


def all_designs(d):
    return (d,) + tuple(d.alternatives)


def check_against_oracles(d, w, budget, neighbours, rel=1e-8):
    """Every ranked design: error = dense GLS of its mechanism, the ranking sorted, private."""
    dense = w.dense()
    errors = [x.error for x in all_designs(d)]
    assert errors == sorted(errors)
    for x in all_designs(d):
        assert x.error == pytest.approx(dense_blue_error(dense, x.mechanism()), rel=rel)
        assert x.mean == pytest.approx(x.error / w.n_queries)
        check_private(x.mechanism(), budget, neighbours)
        if x.lower_bound is not None:
            assert x.lower_bound <= x.error * (1 + 1e-9)


def family(d, name):
    found = [x for x in all_designs(d) if x.family == name]
    return found[0] if found else None


# --------------------------------------------------------------------------- vs each family


def test_prefix_laplace_no_worse_than_each_family_optimiser():
    """CDF of 16 bins, eps = 1, add/remove: best_mechanism <= each optimiser's own result
    (tree searches, budgets per node, HDMM p-Identity, the structured strategies), and every
    ranked error is the dense GLS of its mechanism."""
    K, eps = 16, 1.0
    w = workloads.prefix(K)
    d = optimize.best_mechanism(w, eps, time_limit=60)
    check_against_oracles(d, w, eps, "add_remove")
    own = {
        "tree_equal": optimize.level_uniform(K, eps, estimator="blue", neighbours="add_remove",
                                             budgets="equal").error,
        "tree_optimal": optimize.level_uniform(K, eps, estimator="blue",
                                               neighbours="add_remove",
                                               budgets="optimal").error,
        "node_budgets": optimize.optimal_node_budgets(optimize.finest_refinement((K,)), eps,
                                                      neighbours="add_remove").error,
        # unit budget (eps = 1), add/remove, N private: the setting of this test
        "dense_optimum": optimize.optimized_strategy(w, "laplace").error,
    }
    for name, make in (("haar", strategies.haar), ("sqrt", strategies.sqrt_factorization),
                       ("blt", strategies.blt)):
        own[name] = dp.expected_error(w, Mechanism(make(K), epsilon=eps,
                                                   neighbours="add_remove"))
    for name, err in own.items():
        assert d.error <= err * (1 + 1e-9), name
        assert family(d, name).error <= err * (1 + 1e-9), name
    assert d.lower_bound is not None and d.gap >= 0


def test_prefix_gaussian_certified_by_the_implicit_optimum():
    """Gaussian, rho = 1/2 (sigma = 1 per unit l2 sensitivity), add/remove: the best is no
    worse than the implicit optimum at its default tolerance, within 1e-4 of its certified
    dual bound, and every ranked error is the dense GLS of its mechanism."""
    w = workloads.prefix(24)
    d = optimize.best_mechanism(w, rho=0.5, time_limit=60)
    check_against_oracles(d, w, 0.5, "add_remove")
    assert d.error <= strategies.gaussian_optimal_implicit(w).error * (1 + 1e-12)
    tight = strategies.gaussian_optimal_implicit(w, tol=1e-7)    # OPT to 1e-7
    assert "dual of the Gaussian optimum" in d.bound_method
    assert tight.lower_bound <= d.error
    assert tight.lower_bound * (1 - 1e-4) <= d.lower_bound <= tight.error
    assert d.gap <= 1e-4
    assert family(d, "dense_optimum") is None          # the implicit optimum covers prefix
    assert dict(d.skipped)["dense_optimum"].startswith("the implicit optimum")


def test_all_range_and_swap_against_each_family():
    """All ranges of 12 bins, Laplace eps = 2, swap neighbours (N public: exact total rows)."""
    K, eps = 12, 2.0
    w = workloads.all_range(K)
    d = optimize.best_mechanism(w, eps, neighbours="swap", time_limit=60)
    check_against_oracles(d, w, eps, "swap")
    eq = optimize.level_uniform(K, eps, estimator="blue", neighbours="swap", budgets="equal",
                                workload="all_range")
    opt = optimize.level_uniform(K, eps, estimator="blue", neighbours="swap",
                                 budgets="optimal", workload="all_range")
    assert d.error <= min(eq.error, opt.error) * (1 + 1e-9)
    assert family(d, "workload") is None                # K (K + 1) / 2 queries > K bins
    assert "more queries" in dict(d.skipped)["workload"]


def test_identity_gaussian_reaches_its_lower_bound():
    """The 12 bins themselves, rho = 1/2, add/remove: one record changes one bin by 1 (l2
    sensitivity 1 of the histogram), Gaussian variance 1 / (2 rho) = 1 per bin, and the SVD
    bound (sum of the 12 unit singular values)^2 / 12 = 12 matches it: mean 1, gap 0. The
    per-level optimum (optimal_blue_budgets on the finest tree) cannot do better."""
    w = workloads.identity(12)
    d = optimize.best_mechanism(w, rho=0.5)
    check_against_oracles(d, w, 0.5, "add_remove")
    assert d.mean == pytest.approx(1.0, rel=1e-9)
    assert d.lower_bound == pytest.approx(12.0, rel=1e-9) and d.gap == pytest.approx(0, abs=1e-9)
    assert family(d, "tree_optimal").mean >= 1.0 * (1 - 1e-9)


def test_grid_against_grid_optimisers():
    """2-D CDF on 4 x 4 cells, Laplace eps = 1, add/remove: no worse than the best unpadded
    grid hierarchy with optimal budgets and than HDMM's Kronecker p-Identity."""
    w = workloads.prefix((4, 4))
    d = optimize.best_mechanism(w, 1.0, time_limit=60)
    check_against_oracles(d, w, 1.0, "add_remove")
    hier = optimize.best_grid_hierarchy((4, 4), w, 1.0, neighbours="add_remove",
                                        budgets="optimal", allow_padding=False)
    pid = strategies.kron_p_identity(w)                  # error at eps = 1, add/remove
    assert d.error <= min(hier.best.error, pid.error) * (1 + 1e-9)
    assert {"grid_kron_trees", "grid_quadtree", "kron_p_identity"} <= {
        x.family for x in all_designs(d)}
    assert dict(d.skipped)["tree_equal"].startswith("1-D workloads only")


# --------------------------------------------------------------------------- direct workload


def test_disjoint_brackets_measured_directly():
    """20 age brackets of 5 bins on 100 bins, eps = 0.5, add/remove. Each record lies in one
    bracket, so the bracket rows have l1 sensitivity 1, Laplace scale 1 / 0.5 = 2, variance
    2 * 2^2 = 8; nothing else is measured, so the noisy brackets are their own BLUE: 8.0 per
    bracket. Any tree or histogram adds the noise of 5 bins or of several nodes."""
    eps = 0.5
    brackets = [(5 * i, 5 * i + 4) for i in range(20)]
    w = workloads.ranges(100, brackets)
    expected = 2.0 * (1.0 / eps) ** 2
    assert expected == 8.0
    d = optimize.best_mechanism(w, eps)
    assert d.family == "workload"
    assert d.mean == pytest.approx(expected, rel=1e-12)
    # a release publishes the CDF of its bins, which disjoint brackets do not determine
    assert not d.releasable and "prefix" in d.release_note
    rows = d.mechanism().released.matrix.toarray()
    assert sorted(map(tuple, rows)) == sorted(map(tuple, w.dense()))
    assert dense_blue_error(w.dense(), d.mechanism()) == pytest.approx(8.0 * 20, rel=1e-12)
    others = [x.mean for x in d.alternatives]
    assert min(others) >= 40.0 * (1 - 1e-12)            # the histogram: 5 bins x 8


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 9), data=st.data())
def test_direct_family_matches_the_dense_oracle(n, data):
    """Random ranges (nested, disjoint or crossing, duplicates allowed): the workload family
    measures the distinct ranges with one Laplace scale D / eps (D = the brute-force l1
    sensitivity of the distinct rows); its error equals the dense GLS, or the family is
    skipped with a reason when its rows do not identify the queries."""
    q = data.draw(st.integers(1, n))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               min_size=q, max_size=q))
    iv = [(min(a, b), max(a, b)) for a, b in pairs]
    w = workloads.ranges(n, iv)
    d = optimize.best_mechanism(w, 1.0, families=["histogram", "workload"])
    direct = family(d, "workload")
    if direct is None:
        assert dict(d.skipped)["workload"].startswith("not scored")
        return
    a = np.unique(w.dense(), axis=0)
    sens = brute_loss(a, np.ones(a.shape[0]), "add_remove", 1)
    v = np.full(a.shape[0], 2.0 * sens**2)
    info = a.T @ (a / v[:, None])
    dense = w.dense()
    expected = float(np.trace(dense @ np.linalg.pinv(info, hermitian=True) @ dense.T))
    assert direct.error == pytest.approx(expected, rel=1e-8)


# --------------------------------------------------------------------------- filters


def test_families_filter_and_unknown_names():
    w = workloads.prefix(32)
    d = optimize.best_mechanism(w, 1.0, families=["haar", "tree_equal"])
    assert {x.family for x in all_designs(d)} == {"haar", "tree_equal"}
    assert d.skipped == ()
    with pytest.raises(ValueError, match="families.*'nope'.*tree_equal"):
        optimize.best_mechanism(w, 1.0, families=["tree_equal", "nope"])
    with pytest.raises(ValueError, match="families"):
        optimize.best_mechanism(w, 1.0, families=[])


def test_releasable_keeps_secure_families_and_they_release():
    """releasable=True: every ranked design is releasable; the real-valued 1-D families are
    kept (their scaled integer forms), the grid's real-valued families are skipped saying
    why; every design's secure form runs through the secure samplers (integer answers plus
    integer noise)."""
    w = workloads.prefix(16)
    d = optimize.best_mechanism(w, rho=0.5, releasable=True)
    assert all(x.releasable for x in all_designs(d))
    full = optimize.best_mechanism(w, rho=0.5)
    assert full.family == "gaussian_optimum" and full.releasable
    assert d.family == full.family and d.error == pytest.approx(full.error, rel=1e-12)
    assert {"sqrt", "blt"} <= {x.family for x in all_designs(d)}
    laplace = optimize.best_mechanism(w, 1.0, releasable=True)
    grid = optimize.best_mechanism(workloads.prefix((4, 4)), 1.0, releasable=True)
    assert {"node_budgets", "tree_optimal"} <= {x.family for x in all_designs(laplace)}
    assert {"grid_kron_trees", "grid_quadtree"} <= {x.family for x in all_designs(grid)}
    skipped = dict(grid.skipped)
    assert skipped["kron_p_identity"].startswith("not releasable")
    hist = np.arange(16) % 5
    for x in all_designs(d) + all_designs(laplace):
        y = secure_measure(secure_form(x).mechanism, hist)
        noisy = np.isfinite(y)
        assert noisy.any() and np.all(y[noisy] == np.round(y[noisy]))
    for x in all_designs(grid):
        y = secure_measure(x.mechanism().discretised(), hist)
        noisy = np.isfinite(y)
        assert noisy.any() and np.all(y[noisy] == np.round(y[noisy]))


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, name", [
    ({"epsilon": 1.0, "rho": 0.5}, "exactly one of epsilon"),
    ({}, "exactly one of epsilon"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"rho": float("nan")}, "rho"),
    ({"epsilon": 1.0, "time_limit": 0}, "time_limit"),
    ({"epsilon": 1.0, "time_limit": -5.0}, "time_limit"),
    ({"epsilon": 1.0, "time_limit": math.inf}, "time_limit"),
    ({"epsilon": 1.0, "time_limit": True}, "time_limit"),
    ({"epsilon": 1.0, "time_limit": "60"}, "time_limit"),
    ({"epsilon": 1.0, "neighbours": "bounded"}, "neighbours"),
    ({"epsilon": 1.0, "families": "nope"}, "families"),
    ({"epsilon": 1.0, "families": [3]}, "families"),
    ({"epsilon": 1.0, "releasable": "yes"}, "releasable"),
])
def test_bad_input_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        optimize.best_mechanism(workloads.prefix(8), **kwargs)


def test_bad_workload_refused():
    with pytest.raises(ValueError, match="workload"):
        optimize.best_mechanism(np.ones((3, 3)), 1.0)


# --------------------------------------------------------------------------- time limit


def test_time_limit_skips_with_a_reason():
    """A spent time limit: every family that applies but the O(K) histogram is skipped with
    reason "time limit" (the others with why they do not apply); a family that cannot be
    stopped is skipped when its cost exceeds what is left."""
    w = workloads.prefix(64)
    d = optimize.best_mechanism(w, 1.0, time_limit=1e-9)
    assert d.family == "histogram" and d.alternatives == ()
    reasons = dict(d.skipped)
    assert set(reasons) == set(optimize.best.FAMILIES) - {"histogram"}
    applies = {"workload", "tree_equal", "tree_optimal", "haar", "sqrt", "blt",
               "node_budgets", "dense_optimum"}
    assert {f for f, r in reasons.items() if r.startswith("time limit")} == applies
    assert reasons["gaussian_optimum"] == "Gaussian noise only (rho)"
    big = optimize.best_mechanism(workloads.prefix(1024), 1.0, time_limit=0.5,
                                  families=["histogram", "dense_optimum"])
    assert big.family == "histogram"
    assert dict(big.skipped)["dense_optimum"].startswith("time limit: needs about")


# --------------------------------------------------------------------------- Design, messages


def test_design_report_and_dict():
    d = optimize.best_mechanism(workloads.prefix(16), 1.0, families=["tree_equal", "haar",
                                                                      "gaussian_optimum"])
    assert isinstance(d, optimize.Design) and isinstance(d.mechanism(), Mechanism)
    text = str(d)
    assert text.startswith("best mechanism: ") and "skipped:" in text
    assert "gaussian_optimum: Gaussian noise only" in text
    out = json.loads(json.dumps(d.as_dict()))
    assert out["family"] == d.family and out["epsilon"] == 1.0
    assert [a["family"] for a in out["alternatives"]] == [a.family for a in d.alternatives]
    assert out["skipped"] == [{"family": "gaussian_optimum", "reason": "Gaussian noise only (rho)"}]


def test_optimized_strategy_above_its_dense_limit_names_the_front_door():
    with pytest.raises(ValueError, match="best_mechanism.*gaussian_optimal_implicit"):
        optimize.optimized_strategy(workloads.prefix(2**16), "gaussian")


# --------------------------------------------------------------------------- BLT at small n


def test_blt_family_at_47_bins():
    """strategies.blt(47) failed its own check (a buffer's theta underflowed to 0); the BLT
    family is now scored at 47 bins, its error the dense GLS of its mechanism."""
    w = workloads.prefix(47)
    d = optimize.best_mechanism(w, rho=0.5, families=["histogram", "blt"])
    assert family(d, "blt") is not None and "blt" not in dict(d.skipped)
    check_against_oracles(d, w, 0.5, "add_remove")


# --------------------------------------------------------------------------- identity, any K


def _leaf_variance(mech, height):
    s = np.asarray(mech.scales, dtype=float)[mech.released.levels == height]
    return float(((2.0 if mech.noise == "laplace" else 1.0) * s * s).max())


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
def test_identity_tree_equal_against_every_tree(budget, neighbours):
    """Identity on 24 bins, equal budgets: every ordered factorisation of 24 scored by the
    dense GLS. Each tree of height h has error >= (K - K / k_h) v_h (the Haar vectors under
    its last split; the bound the family uses to search only the short trees), and the
    family's tree is the best of all of them."""
    K = 24
    w = workloads.identity(K)
    dense = w.dense()
    errors = []
    for ks in factorisations(K):
        mech = Mechanism(strategies.tree(K, list(ks)), neighbours=neighbours, **budget)
        err = dense_blue_error(dense, mech)
        assert err >= (K - K / ks[-1]) * _leaf_variance(mech, len(ks)) * (1 - 1e-9)
        errors.append(err)
    d = optimize.best_mechanism(w, neighbours=neighbours, families=["tree_equal"], **budget)
    assert d.error == pytest.approx(min(errors), rel=1e-9)
    check_against_oracles(d, w, next(iter(budget.values())), neighbours)


@settings(max_examples=30, deadline=None)
@given(ks=st.sampled_from(factorisations(12)), noise=st.sampled_from(["laplace", "gaussian"]),
       neighbours=st.sampled_from(["add_remove", "swap"]), data=st.data())
def test_no_tree_beats_the_histogram_on_the_identity(ks, noise, neighbours, data):
    """The trace bound behind tree_optimal on the identity: any tree over 12 bins with any
    per-level budgets (summing to the total) has dense GLS error >= the histogram's, whose
    error is the closed form K v (N private) or (K - 1) v (N public: Cov = v (I - J / K)),
    v = 2 (D / eps)^2 or D^2 / (2 rho), D = 1 (add/remove) or 2 / sqrt 2 (swap, l1 / l2)."""
    K, total = 12, 1.0
    levels = len(ks) + (neighbours == "add_remove")
    raw = data.draw(st.lists(st.floats(0.01, 1.0), min_size=levels, max_size=levels))
    budgets = list(np.asarray(raw) / sum(raw) * total)
    kw = {"epsilon": total} if noise == "laplace" else {"rho": total}
    mech = Mechanism(strategies.tree(K, list(ks)), noise=noise, neighbours=neighbours,
                     level_budgets=budgets, **kw)
    swap = neighbours == "swap"
    v = 2 * (2.0 if swap else 1.0) ** 2 / total**2 if noise == "laplace" else \
        (2.0 if swap else 1.0) / (2 * total)
    hist = (K - 1) * v if swap else K * v
    assert dense_blue_error(workloads.identity(K).dense(), mech) >= hist * (1 - 1e-9)


@pytest.mark.parametrize("budget, per_query", [({"epsilon": 0.5}, 8.0), ({"rho": 0.25}, 2.0)])
def test_identity_at_2_16_runs_the_tree_families(budget, per_query):
    """identity(2^16) used to skip both tree families (> 20000 trees to score). Now
    tree_optimal is the finest tree with every budget on the leaves: the histogram, 2 / eps^2
    = 8 (Laplace, eps 0.5) or 1 / (2 rho) = 2 (Gaussian, rho 0.25) per bin, the SVD bound
    (gap 0); tree_equal searches the heights that can beat the flat tree."""
    d = optimize.best_mechanism(workloads.identity(2**16), **budget,
                                families=["histogram", "tree_equal", "tree_optimal"])
    assert d.skipped == ()
    assert family(d, "tree_optimal").mean == pytest.approx(per_query, rel=1e-9)
    assert d.mean == pytest.approx(per_query, rel=1e-12) and d.gap == pytest.approx(0, abs=1e-9)
    eq = family(d, "tree_equal")
    assert eq.mean >= per_query and "height <=" in eq.method


def test_custom_ranges_with_too_many_trees_search_the_short_ones(monkeypatch):
    """More unpadded trees than the search scores (here a limit of 20 on 64 bins, 32 trees;
    K = 2^16 has 32768 against 20000): the trees of height <= 3 (1 + 5 + 10 = 16) are
    searched, said in the method; the result is level_uniform's over those heights and its
    error the dense GLS of its mechanism."""
    monkeypatch.setattr(families_1d, "MAX_WORKLOAD_SEARCH_TREES", 20)
    K = 64
    w = workloads.ranges(K, [(0, 9), (3, 40), (10, 63), (17, 17), (20, 31)])
    d = optimize.best_mechanism(w, 1.0, families=["tree_equal"])
    assert "not exhaustive: the 16 trees of height <= 3 of 32" in d.method
    own = optimize.level_uniform(K, 1.0, workload=w, allow_padding=False, budgets="equal",
                                 max_height=3)
    assert d.error == pytest.approx(own.error, rel=1e-12)
    check_against_oracles(d, w, 1.0, "add_remove")


# --------------------------------------------------------------------------- grids, padding


@pytest.mark.parametrize("shape, budget", [((7, 7), {"epsilon": 1.0}),
                                           ((5, 7), {"rho": 0.5})])
def test_grid_kron_trees_try_padded_designs(shape, budget):
    """A prime side has one tree (a single level): the padded search's best Kronecker tree,
    truncated to the real cells, is scored too (dense GLS up to 2048 cells) and is no worse
    than the padded design's own error (the padding known empty helps the BLUE); the family
    beats the unpadded optimum here."""
    w = workloads.prefix(shape)
    d = optimize.best_mechanism(w, families=["grid_kron_trees"], **budget)
    check_against_oracles(d, w, next(iter(budget.values())), "add_remove")
    unpadded = optimize.best_grid_hierarchy(shape, w, **budget, allow_padding=False).best
    padded = optimize.best_grid_hierarchy(shape, w, **budget, allow_padding=True).best
    assert padded.padded_shape != shape
    assert d.error <= padded.error * (1 + 1e-9) and d.error < unpadded.error
    assert "truncated to the real cells" in d.method and not d.releasable


def test_grid_padding_named_above_the_dense_limit():
    w = workloads.prefix((2, 1031))                    # 2062 cells
    d = optimize.best_mechanism(w, 1.0, families=["grid_kron_trees"])
    assert "padded designs are tried up to 2048 cells" in d.method


# --------------------------------------------------------------------------- dense optimum


def test_dense_gaussian_optimum_on_ranges_of_300_bins():
    """The dense Gaussian optimum now runs above 256 bins (it converges in ~10 iterations,
    not the 500 its old time model assumed): on 300 bins of custom ranges it matches the
    optimiser's own result at rho = 1/2 and is above its certified bound."""
    K = 300
    iv = [(i, min(K - 1, i + 7)) for i in range(0, K, 3)] + [(i, i) for i in range(K)]
    w = workloads.ranges(K, iv)
    d = optimize.best_mechanism(w, rho=0.5, families=["histogram", "dense_optimum"])
    own = optimize.optimized_strategy(w, "gaussian")
    dense = family(d, "dense_optimum")
    assert dense is not None
    assert dense.error == pytest.approx(own.error, rel=1e-6)
    assert own.lower_bound <= dense.error * (1 + 1e-9)
    assert d.error <= own.error * (1 + 1e-6)
