"""Size limits checked before allocating, and extreme budgets in the analysis library.

Sizes: every public constructor / function taking a size refuses, with the size, the limit and
what to do, before anything of that size is allocated (tracemalloc: the refusal allocates
less than a few MB; numpy reports its buffers to tracemalloc). Budgets: errors are
homogeneous in the budget, so the library computes at a well-scaled budget and rescales; the
expected numbers come from the papers' closed forms ([RTS] Lemma III.2, Thm IV.1) or from a
direct computation at budget 1 divided by eps^2 (rho) in the test, and a budget is refused
only when the result is not a double.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import dptree_opt as dp
from dptree_opt import bounds, closed_forms, compare, optimize
from dptree_opt import strategies as S
from dptree_opt import workloads as W
from dptree_opt.engines.causal_error import tree_causal_prefix_variances
from dptree_opt.engines.refined import refined_workload_error
from dptree_opt.optimize import rts
from dptree_opt.optimize.levels import level_variances

HUGE = 2**40
MB = 2**20


def _refused_without_allocating(fn, *words):
    """fn() raises ValueError naming every word, having allocated < 4 MB."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as info:
            fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MB, f"{peak / MB:.1f} MB allocated before the refusal"
    msg = str(info.value)
    for w in words:
        assert w in msg, (w, msg)
    return msg


# ------------------------------------------------------------------ sizes (issue item 7)
@pytest.mark.parametrize("make, size", [
    (lambda: S.tree(HUGE, 2), str(HUGE)),
    (lambda: S.binary_tree(HUGE), str(HUGE)),
    (lambda: W.prefix(HUGE), str(HUGE)),
    (lambda: W.identity(HUGE), str(HUGE)),
    (lambda: S.histogram(HUGE), str(HUGE)),
    (lambda: S.prefix_sums(HUGE), str(HUGE)),
    (lambda: S.truncated_tree(HUGE, [2] * 41), str(HUGE)),
    (lambda: S.tree(5 * 10**11, [5 * 10**11]), str(5 * 10**11)),
    (lambda: S.haar(HUGE), str(HUGE)),
    (lambda: S.haar(HUGE + 1), str(HUGE + 1)),
    (lambda: S.sqrt_factorization(HUGE), str(HUGE)),
    (lambda: S.blt(HUGE, theta=[0.5], omega=[0.5]), str(HUGE)),
    (lambda: S.gaussian_optimal_implicit(W.all_range(2**34)), str(2**34)),
    (lambda: S.quadtree((2**20, 2**20), 2), str(HUGE)),
    (lambda p=S.prefix_sums(2**17): p.matrix, "nonzeros"),
    (lambda: W.all_range(2**20).gram_dense(), "1048576 x 1048576"),
    (lambda: refined_workload_error([2] * 40, np.ones(41), "prefix"), str(HUGE)),
    (lambda: tree_causal_prefix_variances([2] * 40, np.ones(41)), str(HUGE)),
    (lambda: optimize.optimal_node_budgets([2] * 40, epsilon=1.0), str(HUGE)),
])
def test_huge_sizes_are_refused_before_allocating(make, size):
    _refused_without_allocating(make, size, "of memory, above the limit", "use")


def test_kron_of_two_huge_trees_is_lazy():
    """kron(tree(2^20, 2), tree(2^20, 2)) allocated a 32 TiB level array: it is now built
    without any per-row array (the README's promise), answers structural questions, and
    refuses the per-row array and a Mechanism with the size."""
    tracemalloc.start()
    try:
        a = S.tree(2**20, 2)
        before = tracemalloc.get_traced_memory()[0]
        k = S.kron(a, a)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < MB
    rows = (2**21 - 1) ** 2
    assert k.n_rows == rows and k.grid_shape == (2**20, 2**20) and k.n_bins == HUGE
    # one level tuple: the product of a level of each tree; add/remove: one node per axis
    assert k.level_sensitivity(int(np.ravel_multi_index((3, 5), (21, 21))),
                               "add_remove", 1) == 1.0
    _refused_without_allocating(lambda: k.levels, str(rows), "of memory")
    _refused_without_allocating(lambda: dp.Mechanism(k, epsilon=1.0), str(rows), "of memory")


def test_kron_levels_of_small_products_are_unchanged():
    """The lazy level codes equal the mixed-radix definition code = l_1 R_2 + l_2."""
    a, b = S.tree(4, [2, 2]), S.tree(3, [3])
    k = S.kron(a, b)
    want = (a.levels[:, None] * (b.levels.max() + 1) + b.levels[None, :]).ravel()
    assert np.array_equal(k.levels, want) and k.n_rows == want.size
    present = np.zeros(3 * 2, bool)
    present[np.unique(want)] = True
    assert np.array_equal(k._present_codes, present)


def test_monte_carlo_trials_are_limited_and_accumulated_per_chunk(monkeypatch):
    """trials = 10^12 allocated a 7 TiB array of per-trial errors: refused; below the limit
    the mean and standard error are accumulated chunk by chunk (no O(trials) array): many
    small chunks give what one chunk over the same draws gives (the same random stream)."""
    import dptree_opt.error as err

    mech = dp.Mechanism(S.tree(8, 2), epsilon=1.0)
    msg = _refused_without_allocating(
        lambda: dp.monte_carlo_error(W.prefix(8), mech, trials=10**12), "1000000000000",
        "above the limit")
    assert "expected_error" in msg
    one = dp.monte_carlo_error(W.prefix(8), mech, trials=3000, rng=1)
    monkeypatch.setattr(err, "_MC_CHUNK_FLOATS", 7 * 16)  # 7 trials of 16 rows per chunk
    many = dp.monte_carlo_error(W.prefix(8), mech, trials=3000, rng=1)
    assert many.mean == pytest.approx(one.mean, rel=1e-12)
    assert many.std_error == pytest.approx(one.std_error, rel=1e-9)
    # and both agree with the exact error: a 5-standard-error check
    assert one.within(dp.expected_error(W.prefix(8), mech, "blue"), 5.0)


def test_search_compare_and_grid_sizes_have_limits():
    _refused_without_allocating(lambda: optimize.level_uniform(10**9, 1.0), "1000000000",
                                "limit of 2^26")
    _refused_without_allocating(lambda: compare.compare(2**31, epsilon=1.0),
                                str(2**31), "limit of 2^22")
    _refused_without_allocating(lambda: compare.compare_grid((2048, 2048), epsilon=1.0),
                                "2048x2048", "4194304 cells", "limit of 2^20")
    # 30 axes of 2 cells: the Kronecker tree of 30 one-level trees has 2^30 budget levels
    _refused_without_allocating(lambda: optimize.best_grid_hierarchy((2,) * 30, "prefix", 1.0),
                                "budget levels", "limit of 2^20")


def test_grid_searches_that_would_run_for_hours_are_refused():
    """Measured before the limits: 1024^4 and 512^4 ran for over 10 minutes, 16^8 (2^32
    cells, 2e11 Kronecker trees after pruning at ~6e7 a second) for about an hour; 55440^2
    has 1.4e10 quadtrees of equal height (ordered factorisations of 2^4 3^2 5 7 11)."""
    _refused_without_allocating(lambda: optimize.best_grid_hierarchy((1024,) * 4, "prefix",
                                                                     1.0),
                                "1024x1024x1024x1024", "limit of 2^32")
    _refused_without_allocating(lambda: optimize.best_grid_hierarchy((16,) * 8, "prefix", 1.0,
                                                                     family="kron"),
                                "Kronecker trees left to compare", "limit of 2^31")
    _refused_without_allocating(lambda: optimize.best_grid_hierarchy(
        (55440, 55440), "prefix", 1.0, family="quadtree", allow_padding=False),
        "quadtrees to evaluate", "limit of 2^27")


def test_factorisations_by_height_count_what_is_listed():
    """The quadtree count (by inclusion-exclusion) equals a brute-force listing of the
    ordered factorisations into factors >= 2, grouped by length, for every n <= 400."""
    from dptree_opt.optimize.factorisations import factorisations_by_height

    def listing(n):
        if n == 1:
            return [()]
        return [(k,) + rest for k in range(2, n + 1) if n % k == 0 for rest in listing(n // k)]
    for n in range(1, 401):
        by_h = {}
        for f in listing(n):
            by_h[len(f)] = by_h.get(len(f), 0) + 1
        assert {h: c for h, c in factorisations_by_height(n).items() if c} == by_h, n


def test_level_variances_need_no_tree():
    """Per-level variances of a 2^40-leaf tree are O(h) ([RTS]: level noise Lap(2/eps_l),
    variance 8 / eps_l^2 under swap); building the tree to ask its sensitivities allocated
    O(K)."""
    v = level_variances([2] * 40, [0.5] * 40)
    assert v[0] == 0.0 and np.allclose(v[1:], 8 / 0.25, rtol=1e-15)
    d = optimize.optimal_blue_budgets([2] * 40, 1.0, noise="gaussian")
    assert math.isclose(sum(d.budgets), 1.0, rel_tol=1e-12) and 0 < d.error < math.inf


def test_one_bin_trees_have_integer_parents():
    """error --bins 1 --strategy binary raised IndexError: tree(1, []) had float parents."""
    t = S.tree(1, [])
    assert t.parent.dtype == np.int64 and t.parent.tolist() == [-1]
    # one bin under add/remove: the root alone, Lap(1/eps), variance 2 / eps^2
    mech = dp.Mechanism(t, epsilon=0.5, neighbours="add_remove")
    for est in ("covering", "refined", "blue"):
        assert dp.expected_error(W.prefix(1), mech, est) == pytest.approx(8.0, rel=1e-12)


# ------------------------------------------------------------------ budgets (issue item 8)
EPS = (1e-150, 1e-100, 1e-30, 1.0, 1e30, 1e100, 1e150)


@pytest.mark.parametrize("eps", EPS)
def test_covering_error_follows_theorem_iv_1_at_any_budget(eps):
    """[RTS] Thm IV.1: tree [4, 4, 4] (K = 64), equal budgets eps / 3, covering:
    4 K sum_l (k_l - 1) / eps_l^2 = 4 * 64 * 3 * 3 * 9 / eps^2 = 20736 / eps^2."""
    mech = dp.Mechanism(S.tree(64, [4, 4, 4]), epsilon=eps, neighbours="swap")
    got = dp.expected_error(W.prefix(64), mech, "covering")
    assert got == pytest.approx(20736.0 / eps / eps, rel=1e-12)


@pytest.mark.parametrize("eps", [1.0, 1e152, 1e153, 1e154])
def test_covering_per_query_keeps_the_exact_zero_of_the_public_total(eps):
    """Binary tree over 64 bins under swap: six noisy levels of eps / 6, sensitivity 2, so
    Lap(12 / eps) per node (variance 288 / eps^2); the covering sum of prefix t < 64 has
    popcount(t) nodes ([RTS] Lemma III.1's counting), and prefix 64 is the public root
    (error exactly 0). At eps = 1e153 the analysis's rounding remainder of that 0 (~1e-15
    relative) used to underflow and refuse the whole budget, at 1e152 it printed -6e-317."""
    t = np.arange(1, 65)
    want = np.array([bin(x).count("1") for x in t]) * (288.0 / eps / eps)
    want[-1] = 0.0
    got = dp.expected_error(W.prefix(64), dp.Mechanism(S.tree(64, 2), epsilon=eps,
                                                       neighbours="swap"), "covering",
                            per_query=True)
    assert got[-1] == 0.0 and np.all(got[:-1] > 0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_out_of_range_message_rounds_its_mantissa():
    """9.97e-615 is reported as 1.0e-614, never as '10.0e-615'."""
    from dptree_opt.limits import out_of_range
    msg = str(out_of_range("laplace", 1e300, "x", -615 + math.log10(9.97)))
    assert "about 1.0e-614" in msg and "10.0e" not in msg


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("neighbours, want", [("add_remove", 2 * 64), ("swap", 8 * 63)])
def test_histogram_blue_at_any_budget(eps, neighbours, want):
    """The bridge (laminar) path returned 2 instead of 128 at eps = 1e100 and refused the
    identity at 1e-100. Histogram, identity workload: add/remove, K bins of Lap(1/eps), total
    2K / eps^2 ([RTS] Lemma III.2's noise); swap, Lap(2/eps) with the public total, the
    BLUE's Cov = v (I - J/K), total v (K - 1) = 8 (K - 1) / eps^2."""
    mech = dp.Mechanism(S.histogram(64), epsilon=eps, neighbours=neighbours)
    got = dp.expected_error(W.identity(64), mech, "blue")
    assert got == pytest.approx(want / eps / eps, rel=1e-12)
    per = dp.expected_error(W.identity(64), mech, "blue", per_query=True)
    assert np.all(per > 0) and per.sum() == pytest.approx(want / eps / eps, rel=1e-12)


@pytest.mark.parametrize("rho", [1e-290, 1e-100, 1.0, 1e100, 1e290])
def test_gaussian_histogram_at_any_budget(rho):
    """Add/remove, sigma^2 = 1 / (2 rho) per bin: identity total K / (2 rho)."""
    mech = dp.Mechanism(S.histogram(64), rho=rho, neighbours="add_remove")
    assert dp.expected_error(W.identity(64), mech) == pytest.approx(32.0 / rho, rel=1e-12)


@pytest.mark.parametrize("kw, word", [
    ({"epsilon": 1e300}, "epsilon = 1e+300 is too large"),
    ({"epsilon": 1e-300}, "epsilon = 1e-300 is too small"),
    ({"rho": 1e-320}, "too small"),
    ({"epsilon": 1e-310}, "too small"),
    ({"epsilon": 5e-324}, "too small"),
])
def test_budgets_beyond_double_precision_are_refused_with_the_budget(kw, word):
    def run():
        mech = dp.Mechanism(S.prefix_sums(64), **kw)
        return dp.expected_error(W.prefix(64), mech)
    msg = _refused_without_allocating(run, word, "double precision")
    assert "interval_blue_errors" not in msg and "_" not in msg.split(":")[0]


def test_interval_errors_speak_the_users_terms():
    """'interval_blue_errors: only the total may be released exactly' leaked at eps = 1e300."""
    mech = dp.Mechanism(S.prefix_sums(64), epsilon=1e300)
    with pytest.raises(ValueError, match="epsilon = 1e\\+300 is too large") as info:
        compare.interval_blue_errors(mech, 64)
    assert "interval_blue_errors" not in str(info.value)


def test_monte_carlo_refuses_budgets_beyond_doubles():
    mech = dp.Mechanism(S.tree(8, 2), epsilon=1e300)
    with pytest.raises(ValueError, match="too large"):
        dp.monte_carlo_error(W.prefix(8), mech, trials=10)


@pytest.mark.parametrize("noise, key, big, power", [("laplace", "epsilon", 1e100, 2),
                                                    ("gaussian", "rho", 1e-200, 1)])
@pytest.mark.parametrize("estimator, budgets", [("blue", "equal"), ("blue", "optimal"),
                                                ("covering", "optimal"),
                                                ("refined", "equal")])
def test_level_uniform_is_homogeneous(noise, key, big, power, estimator, budgets):
    """The search at an extreme budget = the search at 1 restated (same tree, budgets x B,
    error / B^power); the ZeroDivisionError / inf table of before."""
    kw = dict(estimator=estimator, budgets=budgets, noise=noise, neighbours="add_remove",
              top=3)
    ref = optimize.level_uniform(40, **{key: 1.0}, **kw)
    got = optimize.level_uniform(40, **{key: big}, **kw)
    assert got.branching == ref.branching
    assert [d.branching for d in got.alternatives] == [d.branching for d in ref.alternatives]
    assert got.error == pytest.approx(ref.error / big**power, rel=1e-9)
    assert np.allclose(np.asarray(got.budgets) / big, ref.budgets, rtol=1e-9)
    assert got.normalised_error == pytest.approx(ref.normalised_error, rel=1e-9)


@pytest.mark.parametrize("kw, word", [({"epsilon": 1e300}, "too large"),
                                      ({"epsilon": 1e-300}, "too small"),
                                      ({"rho": 1e-310}, "too small")])
def test_level_uniform_refuses_unrepresentable_errors(kw, word):
    with pytest.raises(ValueError, match=word):
        optimize.level_uniform(64, estimator="blue", **kw)


def test_max_padding_beyond_two_finds_the_same_trees():
    """--max-padding 1e308 raised OverflowError; padding beyond 2K never helps (the smallest
    padding of a subtree is best), so the search is the same as at 2."""
    for budgets in ("equal", "optimal"):
        ref = optimize.level_uniform(100, rho=1.0, estimator="blue", budgets=budgets, top=5)
        got = optimize.level_uniform(100, rho=1.0, estimator="blue", budgets=budgets, top=5,
                                     max_padding=1e308)
        assert [d.branching for d in (got,) + got.alternatives] == \
            [d.branching for d in (ref,) + ref.alternatives]
        assert got.error == ref.error


def test_grid_search_is_homogeneous_and_refuses_beyond_doubles():
    ref = optimize.best_grid_hierarchy((8, 8), "prefix", 1.0, top=3)
    got = optimize.best_grid_hierarchy((8, 8), "prefix", 1e100, top=3)
    assert [d.branching for d in got.ranked] == [d.branching for d in ref.ranked]
    for a, b in zip(got.ranked, ref.ranked):
        assert a.error == pytest.approx(b.error / 1e200, rel=1e-9)
        assert a.mean == pytest.approx(b.mean / 1e200, rel=1e-9)
        assert np.allclose(np.asarray(a.budgets) / 1e100, b.budgets, rtol=1e-9)
        assert a.total_budget == 1e100
    assert got.flat_mean == pytest.approx(ref.flat_mean / 1e200, rel=1e-9)
    with pytest.raises(ValueError, match="epsilon = 1e\\+300 is too large"):
        optimize.best_grid_hierarchy((8, 8), "prefix", 1e300)
    # the flat grid: one Laplace level, variance 2 (2 / eps)^2 per cell under swap, minus
    # the public total's share (flat_grid_error's docstring) -- here add/remove: 2 / eps^2
    # per cell times the cells of every dominance box, sum_a sum_b (a + 1)(b + 1) = 36^2
    assert optimize.flat_grid_error((8, 8), "prefix", 1e120, neighbours="add_remove") == \
        pytest.approx(2 * 36 * 36 / 1e240, rel=1e-12)


def test_node_and_level_budgets_are_homogeneous():
    ref = optimize.optimal_node_budgets([2, 2, 2], epsilon=1.0)
    got = optimize.optimal_node_budgets([2, 2, 2], epsilon=1e100)
    assert got.error == pytest.approx(ref.error / 1e200, rel=1e-9)
    assert np.allclose(got.budgets / 1e100, ref.budgets, rtol=1e-9)
    for fn in (lambda e: optimize.optimal_node_budgets([2, 2, 2], epsilon=e),
               lambda e: optimize.optimal_blue_budgets([2, 2, 2], e),
               lambda e: rts.budgets([4, 4], e), lambda e: rts.joint(81, e, 2)):
        for e, word in ((1e300, "too large"), (1e-300, "too small")):
            with pytest.raises(ValueError, match=word):
                fn(e)


def test_rts_designs_follow_the_closed_forms_at_extreme_budgets():
    """[RTS] Thm IV.2(a): error (4K / eps^2) (sum_l (k_l - 1)^(1/3))^3 = 64 * 24 / eps^2 for
    [4, 4]; Thm IV.3 with k_l >= 3, h = 2, K = 81: (4K h^3 / eps^2) (K^(1/h) - 1)."""
    for eps in (1e-120, 1e120):
        assert rts.budgets([4, 4], eps).error == pytest.approx(1536 / eps / eps, rel=1e-6)
        assert rts.joint(81, eps, 2).error == pytest.approx(4 * 81 * 8 * 8 / eps / eps,
                                                            rel=1e-6)
    assert rts.optimal_height(1000, 1e300) == rts.optimal_height(1000, 1.0)
    assert optimize.design_error(64, [8, 8], total_budget=1e100) == \
        pytest.approx(optimize.design_error(64, [8, 8]) / 1e200, rel=1e-12)


def test_closed_forms_and_bounds_at_extreme_budgets():
    """[RTS] Lemma III.1 2 (K-1)^3 / (N eps)^2 and III.2 4 K (K-1) / (N eps)^2; the SVD
    bound is homogeneous (2 / eps^2 x the unit bound)."""
    assert closed_forms.lemma_iii_1(64, 1e100) == pytest.approx(2 * 63**3 / 1e200, rel=1e-12)
    assert closed_forms.lemma_iii_2(64, 1e-100) == pytest.approx(4 * 64 * 63 * 1e200,
                                                                 rel=1e-12)
    assert closed_forms.theorem_iv_1([8, 8], [1e150, 1e150]) == \
        pytest.approx(4 * 64 * 14 / 1e300, rel=1e-12)
    for bad in (lambda: closed_forms.lemma_iii_1(64, 1e300),
                lambda: closed_forms.lemma_iii_2(64, 1e-300),
                lambda: closed_forms.theorem_iv_1([8, 8], [1e300, 1e300]),
                lambda: bounds.error_lower_bound(W.prefix(64), noise="laplace", epsilon=1e300)):
        with pytest.raises(ValueError, match="double precision"):
            bad()
    with pytest.raises(ValueError, match="n_records"):
        closed_forms.lemma_iii_2(64, 1.0, n_records=1e300)
    unit = bounds.error_lower_bound(W.prefix(64), noise="laplace", epsilon=1.0)
    assert bounds.error_lower_bound(W.prefix(64), noise="laplace", epsilon=1e100) == \
        pytest.approx(unit / 1e200, rel=1e-12)


def test_compare_is_homogeneous_at_extreme_budgets():
    """Every row's mean and max at eps = 1e100 and rho = 1e-150 equal the eps = 1 (rho = 1)
    comparison divided by eps^2 (rho)."""
    for key, big, power in (("epsilon", 1e100, 2), ("rho", 1e-150, 1)):
        kw = dict(neighbours="add_remove")
        ref = compare.compare(16, **{key: 1.0}, **kw)
        got = compare.compare(16, **{key: big}, **kw)
        refs = {r.key: r for r in ref.rows}
        n = 0
        for row in got.rows:
            for wl, e in row.errors.items():
                e0 = refs[row.key].errors[wl]
                for a, b in ((e.mean, e0.mean), (e.max, e0.max)):
                    assert (a is None) == (b is None)
                    if a is not None:
                        n += 1
                        assert a > 0 and a == pytest.approx(b / big**power, rel=1e-6), row.key
        assert n > 30
    with pytest.raises(ValueError, match="epsilon = 1e\\+300 is too large"):
        compare.compare(16, epsilon=1e300)


def test_compare_grid_is_homogeneous_at_extreme_budgets():
    rows = ["flat", "kron_trees_equal", "quadtree_equal", "ektelo_hb2d", "kron_trees_optimal"]
    ref = compare.compare_grid((8, 8), epsilon=1.0, rows=rows)
    got = compare.compare_grid((8, 8), epsilon=1e100, rows=rows)
    refs = {r.key: r for r in ref.rows}
    for row in got.rows:
        for wl, e in row.errors.items():
            e0 = refs[row.key].errors[wl]
            assert (e.mean is None) == (e0.mean is None)
            if e.mean is not None:
                assert e.mean == pytest.approx(e0.mean / 1e200, rel=1e-6), row.key
    with pytest.raises(ValueError, match="too small"):
        compare.compare_grid((8, 8), epsilon=1e-300, rows=rows)


def test_opendp_run_is_skipped_when_its_noise_is_degenerate():
    """OpenDP's own Monte Carlo at eps = 1e5: its discrete noise is identically 0 (the
    releases' rule), so it is skipped with a note instead of reporting 0 error."""
    pytest.importorskip("opendp")
    res = compare.compare(16, epsilon=1e5, neighbours="add_remove", rows=["histogram"],
                          opendp=20)
    assert res.opendp is None
    assert any("OpenDP's own run is skipped" in n and "epsilon" in n for n in res.notes)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs POSIX rlimits")
def test_memory_checks_respect_the_address_space_limit(tmp_path):
    """Under `ulimit -v` (RLIMIT_AS, 900 MiB) a release of 2^16 bins raised MemoryError (a
    traceback, before the noise); the memory available now counts the rlimit, so it is
    refused by the memory check (exit 2, a message naming the memory)."""
    import resource
    import subprocess
    import sys

    counts = tmp_path / "c.txt"
    counts.write_text("1\n" * 2**16)
    cap = 900 << 20

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    probe = subprocess.run([sys.executable, "-c", "from dptree_opt import limits; "
                            "print(limits.available_memory())"], preexec_fn=limit,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and 0 <= int(probe.stdout) < cap
    run = subprocess.run([sys.executable, "-c", "import sys; from dptree_opt.cli import main; "
                          "sys.exit(main(sys.argv[1:]))", "release", "--counts", str(counts), "--lower", "0", "--upper", "1", "--bins", str(2**16),
                          "--epsilon", "1"], preexec_fn=limit, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "of memory" in run.stderr, run.stderr[-500:]
    assert "Traceback" not in run.stderr
