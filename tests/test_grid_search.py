"""optimize.best_grid_hierarchy and optimize.flat_grid_error (issue 15 item 4): the ranking
of every Kronecker tree and quadtree over a grid against brute force (every candidate built by
hand as a Mechanism, its error from the dense GLS), the flat grid against the dense GLS, the
equal-budget separability against the 1-D search, and the dominance of the finest products
with optimal budgets (independently of the ranking code)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dptree_opt import Mechanism, expected_error, optimize, strategies, workloads
from oracles import factorisations
from dptree_opt.optimize import best_grid_hierarchy, flat_grid_error, optimal_grid_budgets


# ----------------------------------------------------------------- hand-built candidates


def axis_trees(n, padding):
    """Every tree over K' in [n, 2n) whose top factor is the smallest that covers n bins
    above its subtree: k_1 = ceil(n / w_1) with w_1 = K' / k_1 < n (the 1-D search's rule,
    written independently: enumerate K', then keep the factorisations obeying it)."""
    out = []
    for K in range(n, 2 * n if padding else n + 1):
        for ks in factorisations(K):
            w1 = K // ks[0]
            if w1 < n and ks[0] == -(-n // w1):
                out.append(ks)
    return out


def restricted(kind, n, K):
    """The 1-D workload over K bins asking only the queries within the first n."""
    if K == n:
        return getattr(workloads, kind)(n)
    if kind == "prefix":
        return workloads.ranges(K, [(0, t) for t in range(n)])
    return workloads.ranges(K, [(a, b) for a in range(n) for b in range(a, n)])


def brute_errors(shape, kind, kw, neighbours, padding=True, quadtrees=True):
    """{(family, chains): mean per-query error} over every candidate, each a Mechanism with
    equal budgets (Mechanism's default split) and its error from the dense GLS."""
    out = {}
    per_axis = [axis_trees(n, padding) for n in shape]
    n_q = math.prod(getattr(workloads, kind)(n).n_queries for n in shape)
    for chains in itertools.product(*per_axis):
        Ks = [math.prod(c) for c in chains]
        A = strategies.kron(*[strategies.tree(K, list(c)) for K, c in zip(Ks, chains)])
        W = workloads.kron(*[restricted(kind, n, K) for n, K in zip(shape, Ks)])
        mech = Mechanism(A, neighbours=neighbours, **kw)
        out[("kron", chains)] = expected_error(W, mech, method="dense") / n_q
    if quadtrees and len(shape) > 1:
        fs = [factorisations(n) for n in shape]
        for chains in itertools.product(*fs):
            if len({len(c) for c in chains}) != 1:
                continue
            mech = Mechanism(strategies.quadtree(shape, [list(c) for c in chains]),
                             neighbours=neighbours, **kw)
            W = workloads.kron(*[getattr(workloads, kind)(n) for n in shape])
            out[("quadtree", chains)] = expected_error(W, mech, method="dense") / n_q
    return out


SETTINGS = [({"epsilon": 1.0}, "add_remove"), ({"epsilon": 0.5}, "swap"),
            ({"rho": 0.5}, "add_remove"), ({"rho": 2.0}, "swap"),
            ({"epsilon": 1.0, "public_total": True}, "add_remove")]


@pytest.mark.parametrize("shape,kind", [((8, 8), "prefix"), ((4, 16), "all_range"),
                                        ((2, 2, 4), "prefix")])
@pytest.mark.parametrize("kw,neighbours", SETTINGS)
def test_equal_budget_ranking_is_brute_force(shape, kind, kw, neighbours):
    """Every Kronecker tree (padded ones included) and quadtree built by hand, its equal-budget
    error from the dense GLS: the search's ranking and counts are exactly that."""
    brute = brute_errors(shape, kind, kw, neighbours)
    res = best_grid_hierarchy(shape, kind, neighbours=neighbours, budgets="equal", top=8, **kw)
    assert sum(res.candidates.values()) == len(brute)
    assert res.candidates["kron"] == sum(1 for f, _ in brute if f == "kron")
    want = sorted(brute.values())[:8]
    assert [d.mean for d in res.ranked] == pytest.approx(want, rel=1e-9)
    for d in res.ranked:
        assert brute[(d.family, d.branching)] == pytest.approx(d.mean, rel=1e-9)
        assert d.equal_mean == pytest.approx(d.mean, rel=1e-12)


def test_padded_winner_is_the_dense_gls_of_its_mechanism():
    """The design object reproduces its own error: Mechanism over the padded grid, the
    workload restricted to the real cells, dense GLS (5 x 7 boxes: padded designs), equal and
    optimal budgets."""
    for budgets in ("equal", "optimal"):
        res = best_grid_hierarchy((5, 7), "all_range", 1.0, neighbours="swap", top=4,
                                  budgets=budgets, pool=3, exhaustive=0, starts=1)
        assert any(d.padded_shape != (5, 7) for d in res.ranked)
        for d in res.ranked:
            W = d.workload()
            err = expected_error(W, d.mechanism(), method="dense")
            assert err == pytest.approx(d.error, rel=1e-9)
            assert W.n_queries == 15 * 28


def test_counts_at_8x8_by_hand():
    """Per axis: the 4 factorisations of 8 and the padded (3, 3), (2, 5), (2, 6), (2, 2, 3),
    (2, 3, 2), (2, 7) -> 10; quadtrees (every level splitting both axes): (8)x(8), and the
    2 x 2 pairs of (2, 4), (4, 2), and (2, 2, 2) x (2, 2, 2): 6."""
    res = best_grid_hierarchy((8, 8), "prefix", 1.0, top=1, budgets="equal")
    assert res.candidates == {"kron": 100, "quadtree": 6}
    res = best_grid_hierarchy((8, 8), "prefix", 1.0, top=1, allow_padding=False, budgets="equal")
    assert res.candidates == {"kron": 16, "quadtree": 6}


@pytest.mark.parametrize("shape,kind", [((5, 7), "prefix"), ((4, 6), "all_range"),
                                        ((3, 4, 2), "identity"), ((3, 5), "total")])
@pytest.mark.parametrize("kw,neighbours", SETTINGS)
def test_flat_grid_error_is_the_dense_gls(shape, kind, kw, neighbours):
    """The flat grid (kron of histograms; N public under swap: the appended exact total row
    enters the GLS) against the dense GLS."""
    A = strategies.kron(*[strategies.histogram(n) for n in shape])
    mech = Mechanism(A, neighbours=neighbours, **kw)
    W = workloads.kron(*[getattr(workloads, kind)(n) for n in shape])
    want = expected_error(W, mech, method="dense")
    assert flat_grid_error(shape, kind, neighbours=neighbours, **kw) == pytest.approx(
        want, rel=1e-9)


def test_flat_grid_closed_form_256():
    """add/remove, eps 1: v = 2 per cell, mean volume of the dominance boxes (257 / 2)^2."""
    n = 256
    got = flat_grid_error((n, n), "prefix", 1.0, neighbours="add_remove") / n**2
    assert got == 2 * ((n + 1) / 2) ** 2 == 33024.5


@pytest.mark.parametrize("kind,shape", [("prefix", (256, 256)), ("all_range", (64, 128)),
                                        ("prefix", (16, 32, 8))])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_equal_budgets_add_remove_separate_into_1d_optima(kind, shape, noise):
    """With one variance on every level tuple and N private, the Kronecker error factors:
    E_d = c^(d - 1) prod_i E_1(T_i) with c = eps^2 / 2 (Laplace: v = 2 m^2 / eps^2 over
    m = prod (h_i + 1) tuples) or 2 rho (Gaussian: v = m / (2 rho)). So the best Kronecker
    tree is the product of the 1-D equal-budget optima of ``optimize.level_uniform``
    (independent code, its own padding rule)."""
    kw = {"epsilon": 0.7} if noise == "laplace" else {"rho": 0.3}
    c = 0.7**2 / 2 if noise == "laplace" else 2 * 0.3
    res = best_grid_hierarchy(shape, kind, neighbours="add_remove", family="kron", top=1,
                              budgets="equal", **kw)
    one = [optimize.level_uniform(n, estimator="blue", workload=kind, neighbours="add_remove",
                                  budgets="equal", **kw) for n in shape]
    want = c ** (len(shape) - 1) * math.prod(o.error for o in one)
    assert res.best.error == pytest.approx(want, rel=1e-9)
    assert res.best.branching == tuple(o.branching for o in one)


@pytest.mark.parametrize("neighbours", ["add_remove", "swap"])
@pytest.mark.parametrize("shape,kind", [((8, 8), "prefix"), ((4, 6), "all_range")])
def test_optimal_gaussian_budgets_exhaustive(shape, kind, neighbours):
    """Gaussian budgets (convex): the search with optimal budgets (exhaustive here) finds the
    minimum over every hand-built candidate of optimal_grid_budgets (which builds its problem
    from the Mechanism's sensitivities), and its design's error is the dense GLS."""
    W = workloads.kron(*[getattr(workloads, kind)(n) for n in shape])
    res = best_grid_hierarchy(shape, kind, rho=0.5, neighbours=neighbours, budgets="optimal",
                              allow_padding=False, top=3)
    assert res.optimised >= sum(res.candidates.values())
    errs = []
    for chains in itertools.product(*[factorisations(n) for n in shape]):
        A = strategies.kron(*[strategies.tree(n, list(c)) for n, c in zip(shape, chains)])
        errs.append(optimal_grid_budgets(A, W, rho=0.5, neighbours=neighbours).error)
    for chains in itertools.product(*[factorisations(n) for n in shape]):
        if len({len(c) for c in chains}) == 1:
            A = strategies.quadtree(shape, [list(c) for c in chains])
            errs.append(optimal_grid_budgets(A, W, rho=0.5, neighbours=neighbours).error)
    best = res.best
    assert best.error == pytest.approx(min(errs), rel=1e-6)
    assert expected_error(W, best.mechanism(), method="dense") == pytest.approx(best.error,
                                                                                 rel=1e-9)
    assert "certified" in res.method and "not certified" not in res.method


@pytest.mark.parametrize("kind", ["prefix", "all_range"])
def test_finest_products_dominate_with_optimal_budgets(kind):
    """Independently of the ranking code: over 6 x 12 cells (sides with two primes, so the
    finest chains are every ordering of the prime factors), the best optimal-budget
    Gaussian error over the products of finest chains is <= that of every Kronecker tree
    and every quadtree (optimal_grid_budgets on each; a convex problem)."""
    shape = (6, 12)
    W = workloads.kron(*[getattr(workloads, kind)(n) for n in shape])

    def opt(A):
        return optimal_grid_budgets(A, W, rho=1.0, neighbours="add_remove").error

    finest = [sorted(set(itertools.permutations(c))) for c in [(2, 3), (2, 2, 3)]]
    best_finest = min(opt(strategies.kron(strategies.tree(6, list(a)), strategies.tree(12, list(b))))
                      for a, b in itertools.product(*finest))
    others = [strategies.kron(strategies.tree(6, list(a)), strategies.tree(12, list(b)))
              for a, b in itertools.product(factorisations(6), factorisations(12))]
    others += [strategies.quadtree(shape, [list(a), list(b)])
               for a, b in itertools.product(factorisations(6), factorisations(12))
               if len(a) == len(b)]
    for A in others:
        assert best_finest <= opt(A) * (1 + 1e-7)


def test_laplace_optimal_never_worse_than_flat_or_equal():
    """Laplace budgets are a local search, but the flat grid (all budget on the cells) and
    each design's equal split are starting points: never above either."""
    for shape, kind in [((4, 4, 4), "all_range"), ((16, 16), "prefix")]:
        res = best_grid_hierarchy(shape, kind, 1.0, neighbours="add_remove", budgets="optimal",
                                  allow_padding=False, pool=3, top=3, exhaustive=0, starts=1)
        assert res.best.mean <= res.flat_mean * (1 + 1e-9)
        for d in res.ranked:
            assert d.mean <= d.equal_mean * (1 + 1e-9)
            W = workloads.kron(*[getattr(workloads, kind)(n) for n in shape])
            assert expected_error(W, d.mechanism()) == pytest.approx(d.error, rel=1e-9)


def test_height_and_family_restrictions():
    res = best_grid_hierarchy((16, 16), "prefix", 1.0, height=2, top=50, budgets="equal")
    assert all(all(len(c) == 2 for c in d.branching) for d in res.ranked)
    res = best_grid_hierarchy((16, 16), "prefix", 1.0, family="kron", height=(1, 2), top=50,
                              budgets="equal")
    assert all(tuple(map(len, d.branching)) == (1, 2) for d in res.ranked)
    res = best_grid_hierarchy((16, 16), "prefix", rho=1.0, height=2, top=50, budgets="optimal",
                              exhaustive=0, pool=3)
    assert res.ranked and all(all(len(c) == 2 for c in d.branching) for d in res.ranked)
    res = best_grid_hierarchy((16, 16), "prefix", 1.0, family="quadtree", top=50,
                              budgets="equal")
    assert {d.family for d in res.ranked} == {"quadtree"}
    assert res.candidates == {"quadtree": sum(math.comb(3, h - 1) ** 2 for h in range(1, 5))}


@pytest.mark.parametrize("kwargs,match", [
    ({"budgets": "best"}, "budgets"), ({"family": "tree"}, "family"),
    ({"height": 0}, "height"), ({"height": (1, 2), "family": "both"}, "per-axis"),
    ({"top": 0}, "top"), ({"workload": "ranges"}, "workload"),
    ({"allow_padding": 1}, "allow_padding")])
def test_refusals(kwargs, match):
    args = {"shape": (8, 8), "epsilon": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        best_grid_hierarchy(**args)


def test_refusals_shape_and_workload():
    with pytest.raises(ValueError, match="shape"):
        best_grid_hierarchy((8, 1), epsilon=1.0)
    with pytest.raises(ValueError, match="quadtree"):
        best_grid_hierarchy((8,), epsilon=1.0, family="quadtree")
    with pytest.raises(ValueError, match="workload"):
        best_grid_hierarchy((8, 8), workloads.prefix((8, 4)), epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        best_grid_hierarchy((8, 8), rho=1.0, noise="laplace")


@pytest.mark.parametrize("n,kind", [(37, "prefix"), (100, "all_range"), (1000, "prefix"),
                                    (513, "all_range")])
def test_axis_weights_match_the_1d_haar_weights(n, kind):
    """The search's per-axis workload weights (exact integer sums, padded trees included)
    equal error.tree.haar_workload_weights(..., n_queries=n) on every tree of the axis."""
    from dptree_opt.engines.tree_error import haar_workload_weights
    from dptree_opt.optimize.grid import _axis_groups
    groups = _axis_groups(n, kind, True, None)
    rng = np.random.default_rng(n)
    for g in groups.values():
        for i in rng.choice(len(g.chains), size=min(40, len(g.chains)), replace=False):
            ks = g.chains[i]
            want = haar_workload_weights(ks, kind, n_queries=n)
            assert np.allclose(g.q[i], want, rtol=1e-11, atol=0), ks


@pytest.mark.parametrize("kind", ["identity", "total", "prefix", "all_range"])
def test_axis_weights_are_the_projector_energies(kind):
    """q_j = sum over the queries (within the first n bins) of ||D_j q||^2 with the dense
    generalised-Haar projectors of the padded tree (every tree over 6 bins padded to <= 11)."""
    from dptree_opt.optimize.grid import _axis_groups
    n = 6
    W1 = getattr(workloads, kind)(n).dense()
    for g in _axis_groups(n, kind, True, None).values():
        for ks, q in zip(g.chains, g.q):
            K = math.prod(ks)
            Wq = np.zeros((W1.shape[0], K))
            Wq[:, :n] = W1
            E_prev = np.zeros((K, K))
            got = []
            w = K
            for j in range(len(ks) + 1):
                w = K if j == 0 else w // ks[j - 1]
                E = np.kron(np.eye(K // w), np.full((w, w), 1.0 / w))
                got.append(np.sum((Wq @ (E - E_prev)) ** 2))
                E_prev = E
            assert np.allclose(q, got, rtol=1e-12, atol=1e-9), (ks, kind)


def test_defaults_are_add_remove_and_optimal_budgets():
    """best_grid_hierarchy and flat_grid_error default to add/remove (N private) and, for the
    search, optimal budgets; the best design's error is the dense GLS of its own mechanism,
    never above the equal split's; the flat grid is v = 2 per cell (eps 1, sensitivity 1)
    times the summed volume of the dominance boxes, (n (n + 1) / 2)^2."""
    res = best_grid_hierarchy((4, 4), "prefix", 1.0, top=1)
    d = res.best
    assert (d.neighbours, d.public_total) == ("add_remove", False)
    assert res.method.startswith("exhaustive: budgets optimised")
    assert expected_error(d.workload(), d.mechanism(), method="dense") == pytest.approx(
        d.error, rel=1e-9)
    assert d.mean <= d.equal_mean * (1 + 1e-12)
    assert flat_grid_error((4, 4), "prefix", 1.0) == pytest.approx(2 * 10.0**2, rel=1e-12)
