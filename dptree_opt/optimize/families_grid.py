"""The grid families of ``optimize.best_mechanism`` (Kronecker workloads): trees and
quadtrees with optimal budgets, HDMM's Kronecker p-Identity, the Kronecker product of the
l1 local optima (``optimize.l1_local`` per axis, from p-Identity), the product of 1-D
Gaussian optima."""

from __future__ import annotations

from collections.abc import Iterable

from ..mechanism import Mechanism
from ..workloads import KroneckerWorkload, Workload
from ..strategies import (OptimizedStrategy, kron, kron_gaussian_optimal, kron_p_identity,
                          truncated_tree)
from ..strategies.kronecker import MAX_MATRIX_CELLS
from .beyond_trees import dense_optimum_seconds
from .l1_local import l1_local
from .grid import GRID_WORKLOADS, GridDesign, best_grid_hierarchy
from .family import (Candidate, GAUSSIAN_AXIS_SECONDS, MAX_DENSE_BINS, MAX_KRON_AXIS, Problem,
                     too_slow)

L1_LOCAL_KINDS = ("prefix", "all_range")  # axes whose 1-D start is HDMM's p-Identity
L1_LOCAL_MAX_ITER = 1000   # L-BFGS-B iterations per distinct axis at most ...
L1_LOCAL_SHARE = 0.5       # ... within this share of the time left (all axes together)


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


def kron_l1_local_applies(p: Problem) -> str | None:
    if p.noise != "laplace":
        return "Laplace noise only (epsilon)"
    why = kron_axes(p)
    if why is not None:
        return why
    kinds = tuple(f.kind for f in p.grid.factors)
    if any(k not in L1_LOCAL_KINDS for k in kinds):
        return f"per-axis workloads in {L1_LOCAL_KINDS} only (got {kinds})"
    if p.neighbours == "swap" and p.n > MAX_MATRIX_CELLS:
        return (f"swap neighbours: the exact swap sensitivity of signed factors needs the "
                f"explicit matrix (at most {MAX_MATRIX_CELLS} cells)")
    return None


def kron_l1_local_family(p: Problem) -> list[Candidate] | str:
    """The Kronecker product of the 1-D l1 local optima (``l1_local`` from p-Identity, one
    per distinct axis workload): every factor has unit-l1 columns, so the product does, and
    its Laplace error (one noise scale, add/remove) is 2 prod_i tr(G_i (A_i'A_i)^-1)
    (docs/math.md section 8), at most Kronecker p-Identity's (each factor is never worse
    than its p-Identity start). Scored by the Kronecker engine."""
    w = p.grid
    axes: dict[tuple[object, ...], Workload] = {}
    for f in w.factors:
        axes.setdefault((f.kind, f.n_bins), f)
    slow = too_slow(sum(dense_optimum_seconds("laplace", f.n_bins) for f in axes.values()), p)
    if slow:
        return slow
    seconds = p.share(L1_LOCAL_SHARE) / len(axes)
    done: dict[tuple[object, ...], OptimizedStrategy] = {
        key: l1_local(f, maxiter=L1_LOCAL_MAX_ITER, time_limit=seconds)
        for key, f in axes.items()}
    shape = "x".join(str(f.n_bins) for f in w.factors)
    strat = kron(*[done[(f.kind, f.n_bins)].strategy for f in w.factors],
                 name=f"kron l1 local {shape}")
    how = "; ".join(f"{axes[k].kind}({axes[k].n_bins}): {r.method}, mean "
                    f"{r.start_error / axes[k].n_queries:.4g} -> "
                    f"{r.error / axes[k].n_queries:.4g} at eps = 1" for k, r in done.items())
    note = "" if p.neighbours == "add_remove" else " (optimised for add/remove)"
    return [Candidate(p.mechanism(strat), f"Kronecker product of optimize.l1_local per axis "
                      f"from p-Identity{note}: {how}")]
