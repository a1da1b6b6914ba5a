"""The grid families of ``optimize.best_mechanism`` (Kronecker workloads): trees and
quadtrees with optimal budgets, HDMM's Kronecker p-Identity, the product of 1-D Gaussian
optima."""

from __future__ import annotations

from collections.abc import Iterable


from ..mechanism import Mechanism
from ..workloads import KroneckerWorkload
from ..strategies import (kron,
                          kron_gaussian_optimal, kron_p_identity, truncated_tree)
from .beyond_trees import (dense_optimum_seconds)
from .grid import GRID_WORKLOADS, GridDesign, best_grid_hierarchy
from .family import (Candidate, GAUSSIAN_AXIS_SECONDS, MAX_DENSE_BINS, MAX_KRON_AXIS, Problem,
                     too_slow)



def grid_only(p: Problem) -> str | None:
    w = p.workload
    if not isinstance(w, KroneckerWorkload):
        return "Kronecker (grid) workloads only"
    kinds = tuple(f.kind for f in w.factors)
    if any(k not in GRID_WORKLOADS for k in kinds):
        return f"per-axis workloads in {GRID_WORKLOADS} only (got {kinds})"
    if any(f.n_bins < 2 for f in w.factors):
        return "every axis needs at least 2 cells"
    return None


def kron_axes(p: Problem) -> str | None:
    w = p.workload
    if not isinstance(w, KroneckerWorkload):
        return "Kronecker (grid) workloads only"
    if max(f.n_bins for f in w.factors) > MAX_KRON_AXIS:
        return f"dense per-axis optimisation: axes up to {MAX_KRON_AXIS} cells"
    return None


def _axes_seconds(p: Problem, seconds_at_max: float) -> float:
    """Measured cost at MAX_KRON_AXIS cells, cubic per distinct axis length."""
    return sum(seconds_at_max * (n / MAX_KRON_AXIS) ** 3
               for n in {f.n_bins for f in p.grid.factors})


def _chains(branching: Iterable[Iterable[int]]) -> str:
    return " x ".join("(" + ",".join(map(str, c)) + ")" for c in branching)


def _grid_hierarchy(p: Problem, family: str, padding: bool = False) -> tuple[GridDesign, str]:
    w = p.grid
    res = best_grid_hierarchy(w.grid_shape, w, p.epsilon, rho=p.rho, neighbours=p.neighbours,
                              budgets="optimal", family=family, allow_padding=padding, top=1)
    return res.best, (f"optimize.best_grid_hierarchy(family='{family}', budgets='optimal', "
                      f"{'padded' if padding else 'unpadded'}): "
                      f"{_chains(res.best.branching)}; {res.method}")


def grid_kron_trees_family(p: Problem) -> list[Candidate]:
    d, how = _grid_hierarchy(p, "kron")
    if p.n > MAX_DENSE_BINS:
        return [Candidate(d.mechanism(), f"{how}; padded designs are tried up to "
                           f"{MAX_DENSE_BINS} cells (truncated Kronecker trees: dense GLS)")]
    out = [Candidate(d.mechanism(), how)]
    # the best padded design, truncated to the real cells: the padding is known to be
    # empty, which the padded search (padding as unknown empty cells) does not use, so its
    # BLUE error is at most the padded design's; scored by the dense GLS (no structured
    # engine for truncated Kronecker trees)
    pd, how = _grid_hierarchy(p, "kron", padding=True)
    if pd.padded_shape != pd.shape:
        strat = kron(*[truncated_tree(n, c) for n, c in zip(pd.shape, pd.branching)],
                     name=f"truncated Kronecker trees {_chains(pd.branching)}")
        mech = Mechanism(strat, noise=p.noise, neighbours=p.neighbours,
                         level_budgets=list(pd.budgets), epsilon=p.epsilon, rho=p.rho)
        out.append(Candidate(mech, f"{how}; truncated to the real cells (the padding "
                              "known empty)"))
    return out


def grid_quadtree_family(p: Problem) -> list[Candidate]:
    d, how = _grid_hierarchy(p, "quadtree")
    return [Candidate(d.mechanism(), how)]


def kron_p_identity_family(p: Problem) -> list[Candidate] | str:
    w = p.grid
    slow = too_slow(sum(dense_optimum_seconds("laplace", n)
                         for n in {f.n_bins for f in w.factors}), p)
    if slow:
        return slow
    res = kron_p_identity(w)
    note = "" if p.noise == "laplace" else " (optimised for Laplace noise)"
    return [Candidate(p.mechanism(res.strategy), f"strategies.kron_p_identity{note}: "
                       f"{res.method}")]


def kron_gaussian_applies(p: Problem) -> str | None:
    return "Gaussian noise only (rho)" if p.noise != "gaussian" else kron_axes(p)


def kron_gaussian_optimum_family(p: Problem) -> list[Candidate] | str:
    slow = too_slow(_axes_seconds(p, GAUSSIAN_AXIS_SECONDS), p)
    if slow:
        return slow
    res = kron_gaussian_optimal(p.workload)
    return [Candidate(p.mechanism(res.strategy), f"strategies.kron_gaussian_optimal: "
                       f"{res.method}")]


