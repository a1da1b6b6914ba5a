"""Releasing designs, attacked as a careless or hostile user would: ``release(design=)``,
``release_file(design=)``, the grid release with ``design=`` and ``stream.Counter(design=)``.

Every refusal is a ValueError naming what is wrong, raised before OpenDP is asked for any
measurement (the ``opendp_calls`` spy records none: nothing built, nothing drawn); a failure
after the draw still returns the noisy measurements in an incomplete release."""

import copy
import functools
import math
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import dptree_opt as dp
from dptree_opt import Mechanism, optimize, strategies, workloads
from dptree_opt.data_release import core
from dptree_opt.data_release import secure_noise as sn
from dptree_opt.strategies import scaled
from dptree_opt.stream import Counter

RNG = np.random.default_rng(11)
K = 16
GRID = (4, 4)


@functools.lru_cache(maxsize=None)
def _design(family: str, n=K, neighbours="add_remove", **budget):
    budget = budget or {"rho": 0.5}
    w = workloads.prefix(n)
    return optimize.best_mechanism(w, families=[family], neighbours=neighbours, **budget)


@functools.lru_cache(maxsize=None)
def _grid_design(family: str, neighbours="add_remove", **budget):
    budget = budget or {"epsilon": 1.0}
    return optimize.best_mechanism(workloads.prefix(GRID), families=[family],
                                   neighbours=neighbours, **budget)


def _one_d(design, **kw):
    args = {"counts": RNG.integers(0, 9, K), "lower": 0, "upper": 1, "bins": K,
            "quantiles": ()} | kw
    return dp.release(design=design, **args)


def _grid(design, **kw):
    args = {"counts": RNG.integers(0, 5, GRID), "lower": [0, 0], "upper": [1, 1],
            "bins": list(GRID)} | kw
    return dp.release(design=design, **args)


def _counts_file(tmp_path, n=K):
    path = tmp_path / "counts.txt"
    path.write_text("\n".join(str(int(v)) for v in RNG.integers(0, 9, n)) + "\n")
    return path


def _refused(call, match, opendp_calls):
    with pytest.raises(ValueError, match=match):
        call()
    assert opendp_calls.events == [], "OpenDP was asked for a measurement before the refusal"


# --------------------------------------------------------------------- shape and axes
def test_a_design_over_other_bins_or_axes_is_refused(tmp_path, opendp_calls):
    """A 1-D design over 16 bins released over 17 bins, as a grid, from a counts file of 17
    bins, or as a counter of 17 steps; a grid design over 4 x 4 cells released in 1-D, over
    4 x 8 cells, or as a counter: refused, nothing asked of OpenDP."""
    one, grid = _design("sqrt"), _grid_design("grid_quadtree")
    _refused(lambda: _one_d(one, counts=np.ones(17, int), bins=17), "made for 16 bins",
             opendp_calls)
    _refused(lambda: dp.release_file(counts_file=_counts_file(tmp_path, 17), lower=0, upper=1,
                                     bins=17, design=one), "made for 16 bins", opendp_calls)
    _refused(lambda: _grid(one), "1-D design over 16 bins", opendp_calls)
    _refused(lambda: Counter(17, design=one), "made for 16 steps", opendp_calls)
    _refused(lambda: _one_d(grid), "per-axis lower", opendp_calls)
    _refused(lambda: _grid(grid, counts=np.ones((4, 8), int), bins=[4, 8]),
             r"made for the grid \[4, 4\]", opendp_calls)
    _refused(lambda: Counter(16, design=grid), "grid design", opendp_calls)


def test_the_other_neighbour_model_must_be_said(opendp_calls):
    """A swap design (N public) released with the default add_remove neighbours, and an
    add_remove design released with neighbours='swap': refused, for 1-D, grids and counters
    (a counter protects one event: no swap design at all)."""
    swap = _design("sqrt", neighbours="swap")
    _refused(lambda: _one_d(swap), "made for 'swap' neighbours", opendp_calls)
    _refused(lambda: _one_d(_design("sqrt"), neighbours="swap"),
             "made for 'add_remove' neighbours", opendp_calls)
    _refused(lambda: Counter(K, design=swap), "one event", opendp_calls)
    g = _grid_design("grid_quadtree", neighbours="swap")
    _refused(lambda: _grid(g), "made for 'swap' neighbours", opendp_calls)


def test_a_swap_design_releases_n_exactly_and_says_so(opendp_calls):
    """Said again, a swap design releases N exactly: the total is the true one, the release
    says N is public, and the description warns first."""
    counts = RNG.integers(0, 9, K)
    rel = _one_d(_design("blt", neighbours="swap"), counts=counts, neighbours="swap")
    assert rel.total == int(counts.sum()) and rel.total_public
    assert rel.description.startswith("WARNING: swap neighbours")
    assert "RELEASED EXACTLY" in " ".join(rel.privacy["public"])


def test_a_design_with_a_public_total_under_add_remove_is_refused(opendp_calls):
    """Mechanism(..., public_total=True) under add_remove releases N exactly while those
    neighbours promise to protect it: refused by the 1-D and grid releases and the counter."""
    tree = Mechanism(strategies.tree(K, [4, 4]), epsilon=1.0, public_total=True)
    _refused(lambda: _one_d(tree), "public_total=True", opendp_calls)
    _refused(lambda: Counter(K, design=tree), "public total", opendp_calls)
    kron = Mechanism(strategies.kron(strategies.tree(4, [2, 2]), strategies.tree(4, [2, 2])),
                     epsilon=1.0, public_total=True)
    _refused(lambda: _grid(kron), "public_total=True", opendp_calls)


# --------------------------------------------------------------------- budgets
@pytest.mark.parametrize("given, match", [
    ({"rho": math.nextafter(0.5, 1.0)}, "made for rho = 0.5"),
    ({"rho": math.nextafter(0.5, 0.0)}, "made for rho = 0.5"),
    ({"rho": 0.25}, "made for rho = 0.5"),
    ({"epsilon": 0.5}, "gaussian noise"),
    ({"rho": 0.5, "epsilon": 1.0}, "at most one"),
    ({"rho": float("nan")}, "rho"),
    ({"rho": float("inf")}, "rho"),
])
def test_a_budget_other_than_the_designs_is_refused(given, match, tmp_path, opendp_calls):
    """The budget given with a design must be the design's exactly: one ulp less would spend
    more than asked, one ulp more is not what the design was optimised for. Refused by every
    path (1-D, counts file, grid, counter) before OpenDP is asked."""
    d = _design("gaussian_optimum")
    _refused(lambda: _one_d(d, **given), match, opendp_calls)
    _refused(lambda: dp.release_file(counts_file=_counts_file(tmp_path), lower=0, upper=1,
                                     bins=K, design=d, quantiles=(), **given), match,
             opendp_calls)
    _refused(lambda: Counter(K, design=d, **given), match, opendp_calls)
    g = _grid_design("grid_quadtree", rho=0.5)
    _refused(lambda: _grid(g, **given), match, opendp_calls)


def test_the_designs_own_budget_given_again_is_accepted(opendp_calls):
    """The exact budget, given again, is the design's: the release spends it and no more."""
    d = _design("gaussian_optimum")
    rel = _one_d(d, rho=0.5)
    assert rel.privacy["rho"] == 0.5 and rel.privacy["achieved"] <= 0.5
    assert opendp_calls.events[-1] == "drawn"


@pytest.mark.parametrize("make", [
    lambda: Mechanism(strategies.tree(K, [4, 4]), epsilon=float("nan")),
    lambda: Mechanism(strategies.tree(K, [4, 4]), epsilon=math.inf),
    lambda: Mechanism(strategies.tree(K, [4, 4]), epsilon=1.0,
                      level_budgets=[0.5, math.nan, 0.5]),
    lambda: Mechanism(strategies.tree(K, [4, 4]), epsilon=1.0,
                      level_budgets=[0.5, math.inf, 0.5]),
    lambda: Mechanism(strategies.tree(K, [4, 4]), epsilon=1.0,
                      row_budgets=np.full(21, math.nan)),
    lambda: _one_d(Mechanism(strategies.tree(K, [4, 4]), epsilon=1e300)),
    lambda: Counter(K, design=Mechanism(strategies.tree(K, [4, 4]), rho=1e300)),
])
def test_hand_built_mechanisms_with_nan_inf_or_huge_budgets_never_reach_opendp(make,
                                                                              opendp_calls):
    """NaN and infinite budgets inside a hand-built Mechanism: refused when it is built (so
    it can never be given as a design); huge ones by the release or the counter (noise
    identically 0). Nothing asked of OpenDP."""
    _refused(make, "epsilon|rho|level_budgets|row_budgets", opendp_calls)


def test_budgets_whose_noise_vanishes_are_refused_before_any_draw(opendp_calls):
    """A Mechanism that can be built but whose discrete noise is identically 0 (eps = 1e6 on
    a tree: scale 3e-6) would publish the exact counts: refused by the release and the
    counter before any draw."""
    m = Mechanism(strategies.tree(K, [4, 4]), epsilon=1e6)
    _refused(lambda: _one_d(m), "identically 0", opendp_calls)
    _refused(lambda: Counter(K, design=m), "epsilon", opendp_calls)


# --------------------------------------------------------------------- options and kinds
@pytest.mark.parametrize("kw", [{"tree": [4, 4]}, {"tree": "optimal", "budgets": "equal"},
                                {"budgets": "equal"}])
def test_tree_options_with_a_design_are_refused(kw, opendp_calls):
    _refused(lambda: _one_d(_design("node_budgets", epsilon=1.0), **kw), "leave them out",
             opendp_calls)


@pytest.mark.parametrize("kw", [{"tree": [[2, 2], [2, 2]]}, {"budgets": "equal"},
                                {"workload": "prefix"}])
def test_grid_options_with_a_grid_design_are_refused(kw, opendp_calls):
    _refused(lambda: _grid(_grid_design("grid_quadtree"), **kw), "leave them out",
             opendp_calls)


def test_an_unreleasable_design_is_refused_first_with_its_reason(tmp_path, opendp_calls):
    """best_mechanism's designs whose ``releasable`` is False (the square root above 2^16
    bins; Kronecker p-Identity on a grid) are refused with the Design's own reason, before
    anything else: here before the (missing) counts file would be read."""
    big = _design("sqrt", n=(1 << 16) + 1)
    assert not big.releasable
    missing = tmp_path / "no-such-counts.txt"
    _refused(lambda: dp.release_file(counts_file=missing, lower=0, upper=1,
                                     bins=(1 << 16) + 1, design=big),
             r"not releasable \(a real-valued Toeplitz strategy on 65537 bins", opendp_calls)
    _refused(lambda: Counter((1 << 16) + 1, design=big), "not releasable", opendp_calls)
    kp = _grid_design("kron_p_identity")
    assert not kp.releasable
    _refused(lambda: _grid(kp), "not releasable .*trees and quadtrees", opendp_calls)


def test_a_huge_dense_scaled_design_is_refused_by_arithmetic_before_allocating(monkeypatch,
                                                                               opendp_calls):
    """A real-valued strategy without Toeplitz structure over MAX_SCALED_DENSE_BINS + 1 bins
    (a sparse one: the hostile user's cheap way to get there) has no secure form: refused by
    the size rule alone -- the scaled form (dense, n^2) is never built."""
    n = scaled.MAX_SCALED_DENSE_BINS + 1

    def never(*a, **k):
        raise AssertionError("the scaled integer form was built")

    monkeypatch.setattr(sn, "scaled_integer", never)
    m = Mechanism(strategies.Strategy(sp.identity(n, format="csr") * 0.5), rho=0.5)
    _refused(lambda: dp.release(counts=np.ones(n, int), lower=0, upper=1, bins=n, design=m,
                                quantiles=()), f"released up to {n - 1} bins", opendp_calls)
    _refused(lambda: Counter(n, design=m), f"released up to {n - 1} bins", opendp_calls)


def test_a_mechanism_built_with_discrete_noise_is_the_same_design(opendp_calls):
    """Mechanism(..., discrete=True) as a design: the same secure form as without (integer
    route: the same scales; scaled route: the same s and scales), and the same exact SEs."""
    for make in (lambda **k: Mechanism(strategies.tree(K, [4, 4]), epsilon=1.0, **k),
                 lambda **k: Mechanism(strategies.sqrt_factorization(K), rho=0.5, **k)):
        a, b = sn.secure_form(make()), sn.secure_form(make(discrete=True))
        assert a.route == b.route and a.scale_bits == b.scale_bits
        assert np.array_equal(a.mechanism.scales, b.mechanism.scales)
        ra, rb = _one_d(make()), _one_d(make(discrete=True))
        assert np.array_equal(ra.standard_errors, rb.standard_errors)


def test_a_design_that_does_not_estimate_the_cdf_is_refused(opendp_calls):
    """A hand-built tree whose leaves get no budget cannot identify the bins: the release
    publishes every prefix, so it is refused (with that reason) before any draw."""
    m = Mechanism(strategies.tree(K, [4, 4]), epsilon=1.0, level_budgets=[0.5, 0.5, 0.0])
    _refused(lambda: _one_d(m), "does not estimate", opendp_calls)
    _refused(lambda: Counter(K, design=m), "does not estimate", opendp_calls)


# --------------------------------------------------------------------- mutation
def test_a_strategy_changed_after_its_mechanism_was_made_is_refused(opendp_calls):
    """A hand-built integer strategy whose matrix arrays are replaced (x 1000, or one entry
    made 5; in-place edits are refused at the source: the arrays are read-only) after the
    Mechanism was calibrated would have answers that move more
    than its noise was calibrated for: refused by the release and the counter (the
    calibration is recomputed from the matrix as it is)."""
    for mutate in (lambda a: setattr(a, "data", a.data * 1000.0),
                   lambda a: setattr(a, "data", np.where(np.arange(a.nnz) == 0, 5.0, a.data))):
        s = strategies.Strategy(sp.vstack([sp.identity(K), np.tril(np.ones((K, K)))]).tocsr())
        m = Mechanism(s, epsilon=1.0)
        mutate(m.released.matrix)
        _refused(lambda: _one_d(m), "no longer matches", opendp_calls)
        _refused(lambda: Counter(K, design=m), "no longer matches", opendp_calls)


def test_a_released_strategy_cannot_be_changed_afterwards(opendp_calls):
    """After a release, the arrays behind the released answers are read-only: a hand-built
    strategy's matrix (frozen by the first release), the scaled integer strategy's (cached
    with its exact sensitivity and reused by the next release of the same design), a tree's
    ranges."""
    s = strategies.Strategy(sp.vstack([sp.identity(K), np.tril(np.ones((K, K)))]).tocsr())
    m = Mechanism(s, epsilon=1.0)
    _one_d(m)
    tree = _one_d(_design("tree_optimal"))
    for arr in (m.released.matrix.data, m.released.matrix.indices,
                tree.mechanism.released.lo, tree.mechanism.released.hi):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 7
    dense = sn.secure_form(Mechanism(strategies.Strategy(np.tril(np.full((6, 6), 0.3))
                                                         + np.eye(6)), rho=0.5)).mechanism
    for arr in (dense.released.matrix.data, dense.released.core.data,
                dense.released.core.indptr):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 7
    assert _one_d(m).complete       # and it releases again


# --------------------------------------------------------------------- reuse
def test_a_design_released_twice_draws_fresh_noise(opendp_calls):
    """One design, two releases of the same counts: the same exact SEs, independent noise.
    Two draws of 16 discrete Gaussians with sigma > 1e4 agree everywhere with probability
    below (1 / (sigma sqrt(2 pi)))^16 < 1e-60."""
    d = _design("gaussian_optimum")
    counts = RNG.integers(0, 9, K)
    a, b = _one_d(d, counts=counts), _one_d(d, counts=counts)
    assert a.mechanism.level_scales[1] > 1e4
    assert np.array_equal(a.standard_errors, b.standard_errors)
    assert not np.array_equal(a.measurements, b.measurements)


def test_a_secure_counters_noise_is_never_copied_and_two_counters_draw_their_own(
        opendp_calls):
    """A secure Counter(design=) holds noise drawn ahead: copy, deepcopy and pickle of the
    counter and of its engine are refused; two counters from one design draw independent
    noise (each its own OpenDP draw; their noise paths differ: probability of equality
    below 1e-60 as above)."""
    d = _design("gaussian_optimum")
    a, b = Counter(K, design=d), Counter(K, design=d)
    assert opendp_calls.events.count("drawn") == 2
    for obj in (a, a.engine):
        for action in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="secure"):
                action(obj)
    ya = [a.update(1) for _ in range(K)]
    yb = [b.update(1) for _ in range(K)]
    assert ya != yb and len(set(ya)) > 1


# --------------------------------------------------------------------- data
def test_counts_whose_largest_answer_overflows_are_refused_by_arithmetic(opendp_calls):
    """Under a scaled strategy the answers are up to max|M_ij| x N: counts whose total is
    below 2^53 but whose largest answer is not are refused before any draw."""
    d = _design("dense_optimum", n=8, epsilon=1.0)
    top = sn.secure_form(d).mechanism.released.max_entry
    assert top >= 2**15
    counts = np.zeros(8, dtype=np.int64)
    counts[0] = 2**53 // top + 1
    assert counts.sum() < 2**53
    _refused(lambda: dp.release(counts=counts, lower=0, upper=1, bins=8, design=d,
                                quantiles=()), "2\\^53", opendp_calls)


@pytest.mark.parametrize("data, match", [
    ([0.5, 2.0], "outside"),
    ([0.5, float("nan")], "NaN"),
    ([], "no values"),
    (["a", "b"], "data"),
])
def test_bad_data_with_a_design_is_refused_before_any_draw(data, match, opendp_calls):
    _refused(lambda: dp.release(data, lower=0, upper=1, bins=K, design=_design("sqrt")),
             match, opendp_calls)


def test_out_of_range_values_clip_with_a_design(opendp_calls):
    rel = dp.release([-1.0, 0.5, 7.0], lower=0, upper=1, bins=K, design=_design("sqrt"),
                     out_of_range="clip", quantiles=())
    assert rel.complete and opendp_calls.events.count("drawn") == 1


def test_empty_counts_and_a_one_bin_design_release(opendp_calls):
    """All-zero counts under a scaled design, and the one-bin design best_mechanism returns
    (the histogram of one bin) as a release and a counter: complete, every draw checked."""
    rel = _one_d(_design("sqrt"), counts=np.zeros(K, int), quantiles=(0.5,))
    assert rel.complete and rel.total >= 0
    one = optimize.best_mechanism(workloads.prefix(1), epsilon=1.0)
    r1 = dp.release(counts=[5], lower=0, upper=1, bins=1, design=one, quantiles=())
    assert r1.complete and r1.consistent_cdf.shape == (1,)
    c = Counter(1, design=one)
    assert np.isfinite(c.update(3))


def test_a_failure_after_the_draw_keeps_the_measurements(monkeypatch, opendp_calls):
    """Post-processing that fails after OpenDP has drawn still returns the release, marked
    incomplete, with the noisy measurements and a note (nothing of the spent budget lost)."""
    def boom(*a, **k):
        raise RuntimeError("injected")

    monkeypatch.setattr(core, "project_cdf", boom)
    rel = _one_d(_design("blt"))
    assert not rel.complete and opendp_calls.events[-1] == "drawn"
    assert rel.measurements.shape == (rel.mechanism.released.n_rows,)
    assert np.all(np.isfinite(rel.measurements)) and "injected" in rel.notes[0]
    assert "measurements" in rel.to_dict()
