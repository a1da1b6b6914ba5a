"""Budgets per level (tuple) for grid hierarchies: Kronecker products of trees and quadtrees
(docs/math.md section 8).

For T_1 x .. x T_d (or a quadtree, its diagonal level tuples) with a budget b_l per noisy
level tuple l and a Kronecker workload, the BLUE's exact error is the eigen-sum of
``engines.kronecker``:

    E(b) = sum_j Q_j / lambda_j,   lambda_j = sum over l >= j of P_l,
    P_l = prod_i w_(i, l_i) / v_l(b_l),   Q_j = prod_i q_(i, j_i),

with v_l = 2 (D_l / b_l)^2 (Laplace, D_l the level's l1 sensitivity) or D_l^2 / (2 b_l)
(Gaussian, l2). Its gradient is dE/dP_l = -sum over j <= l of Q_j / lambda_j^2 (a forward
cumulative sum along every axis): O(prod (h_i + 1)) per evaluation, whatever the grid size.
Every level tuple's rows cover each cell once, so the levels compose: the budgets sum to the
total (``Mechanism`` recomputes the loss exactly). We minimise over b = total softmax(z) with
L-BFGS-B: for Gaussian noise E is convex in b (1 / affine), for Laplace it is not (several
starts: the equal split and Dirichlet points). Checked against cvxpy (Gaussian) and the dense
GLS (tests/test_grids.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
import scipy.optimize as so

from .. import engines
from ..error import expected_error
from ..engines.kronecker import (KRON_TREE_WORKLOADS, axis_workload_weights, grid_trees,
                                 level_tuple_of)
from ..limits import at_budget
from ..mechanism import Mechanism
from ..privacy import infer_noise, resolve_budget
from ..strategies import KroneckerStrategy, QuadtreeStrategy
from ..workloads import KroneckerWorkload

__all__ = ["GridBudgets", "optimal_grid_budgets", "minimise_grid_budgets"]


@dataclass(frozen=True)
class GridBudgets:
    """``mechanism`` (the strategy with the optimal budgets per noisy level, level order),
    ``budgets``, ``error`` (exact, counts^2), ``mean`` (per query), ``equal_mean`` (the
    equal split's), ``evaluations``."""

    mechanism: Mechanism
    budgets: np.ndarray
    error: float
    mean: float
    equal_mean: float
    evaluations: int


def optimal_grid_budgets(strategy: KroneckerStrategy | QuadtreeStrategy, workload: KroneckerWorkload,
                         epsilon: float | None = None, *, rho: float | None = None,
                         noise: str | None = None,
                         neighbours: str = "add_remove", starts: int = 4,
                         seed: int = 0) -> GridBudgets:
    """Budgets per noisy level tuple minimising the exact BLUE error of ``workload`` (a
    Kronecker workload of prefix / identity / total / all-range factors) for ``strategy``
    (``strategies.kron`` of complete trees, or ``strategies.quadtree``), Laplace or Gaussian,
    either neighbour model (module docstring). Never worse than the equal split."""
    if not isinstance(strategy, (KroneckerStrategy, QuadtreeStrategy)):
        raise ValueError("strategy must be strategies.kron(...) of trees or "
                         "strategies.quadtree(...)")
    noise = infer_noise(noise, epsilon, rho)
    total = resolve_budget(noise, epsilon, rho)
    epsilon, rho = (total, None) if noise == "laplace" else (None, total)
    base = Mechanism(strategy, noise=noise, neighbours=neighbours, epsilon=epsilon, rho=rho)
    engine = engines.claimed_by(base, engines.GRID_TREE_ENGINES)
    if engine is None:
        raise ValueError("strategy must be a Kronecker product of complete level-uniform trees "
                         "or a quadtree")
    if (not isinstance(workload, KroneckerWorkload)
            or engine.why_not("error", base, workload, "blue") is not None):
        raise ValueError(f"workload must be a Kronecker workload over the grid "
                         f"{strategy.grid_shape} with per-axis kinds in "
                         f"{KRON_TREE_WORKLOADS}")
    if isinstance(starts, bool) or not isinstance(starts, (int, np.integer)) or starts < 0:
        raise ValueError(f"starts must be an integer >= 0, got {starts!r}")
    trees = grid_trees(base.released)
    d = len(trees)
    dims = tuple(t.height + 1 for t in trees)
    codes = sorted(base.level_budgets)
    idx = tuple(np.array(a) for a in zip(*[level_tuple_of(base.released, c) for c in codes]))
    sens = np.array([base.level_sensitivities[c] for c in codes])
    width = np.ones(len(codes))
    for i, t in enumerate(trees):
        width = width * np.asarray(t.level_widths, dtype=float)[idx[i]]
    Q = np.ones(dims)
    for i, (t, w) in enumerate(zip(trees, workload.factors)):
        shape = [1] * d
        shape[i] = dims[i]
        Q = Q * axis_workload_weights(t, w).reshape(shape)
    if base.public_total:
        Q.flat[0] = 0.0
    # precision P_l = coef_l b_l^s: Laplace b^2 / (2 D^2), Gaussian 2 b / D^2
    s = 2 if noise == "laplace" else 1
    coef = width * np.where(sens > 0, (0.5 if s == 2 else 2.0) / np.maximum(sens, 1e-300)**2,
                            0.0)
    # at unit total budget, restated at ``total`` (homogeneity, dptree_opt.limits)
    _, b, e0, calls = minimise_grid_budgets(dims, idx, coef, Q, 1.0, s,
                                        starts if noise == "laplace" else 0, seed)
    b = b * total
    mech = Mechanism(strategy, noise=noise, neighbours=neighbours, level_budgets=b,
                     epsilon=epsilon, rho=rho)
    err = float(expected_error(workload, mech))
    q = workload.n_queries
    return GridBudgets(mech, b, err, err / q, at_budget(float(e0), noise, total) / q, calls)


def minimise_grid_budgets(dims: tuple[int, ...], idx: tuple[npt.NDArray[np.intp], ...],
                          coef: npt.NDArray[np.float64], Q: npt.NDArray[np.float64],
                          total: float, s: float, starts: int, seed: int,
                          init: ArrayLike | None = None,
                          ) -> tuple[float, npt.NDArray[np.float64], float, int]:
    """The budget programme of the module docstring on arrays: minimise E(b) = sum_j Q_j /
    lambda_j, lambda = reverse cumulative sums along every axis of P, P[idx] = coef b^s,
    over b >= 0 summing to ``total`` (L-BFGS-B on softmax parameters, from the equal split,
    ``init`` budgets when given, and ``starts`` Dirichlet points). ``dims``: (h_1 + 1, ..,
    h_d + 1); ``idx``: a tuple of d index arrays, one entry per noisy level (tuple); ``Q``:
    shape ``dims``. Returns (best error, its budgets, the equal split's error,
    evaluations). O(prod dims) per evaluation."""
    d = len(dims)
    calls = [0]

    @np.errstate(divide="ignore", invalid="ignore", over="ignore")
    def error_grad(b: npt.NDArray[np.float64]) -> tuple[float, npt.NDArray[np.float64]]:
        calls[0] += 1
        P = np.zeros(dims)
        P[idx] = coef * b**s
        lam = P
        for ax in range(d):
            lam = np.flip(np.cumsum(np.flip(lam, ax), axis=ax), ax)
        need = Q > 0
        if np.any(need & ~(lam > 0)):
            return np.inf, np.zeros_like(b)
        safe = np.where(lam > 0, lam, 1.0)
        e = float(np.sum(np.where(need, Q / safe, 0.0)))
        g = np.where(need, -Q / safe**2, 0.0)
        for ax in range(d):            # dE/dP_l = sum over j <= l of dE/dlambda_j
            g = np.cumsum(g, axis=ax)
        return e, g[idx] * coef * s * b**(s - 1)

    @np.errstate(invalid="ignore", over="ignore")
    def objective(z: npt.NDArray[np.float64]) -> tuple[float, npt.NDArray[np.float64]]:
        ez = np.exp(z - z.max())
        sm = ez / ez.sum()
        e, gb = error_grad(total * sm)
        if not np.isfinite(e):
            return 1e300, np.zeros_like(z)
        gz = total * sm * (gb - np.dot(gb, sm))     # softmax Jacobian
        return e / e0, gz / e0

    n = len(coef)
    e0, _ = error_grad(np.full(n, total / n))
    rng = np.random.default_rng(seed)
    inits = [np.zeros(n)] + [np.log(rng.dirichlet(np.ones(n))) for _ in range(starts)]
    best = (e0, np.full(n, total / n))
    if init is not None:
        init = np.asarray(init, dtype=float)
        e_init, _ = error_grad(init)
        if e_init < best[0]:
            best = (e_init, init.copy())
        inits.insert(1, np.log(np.maximum(init / total, 1e-12)))
    for z0 in inits:
        r = so.minimize(objective, z0, jac=True, method="L-BFGS-B",
                        options={"maxiter": 2000, "ftol": 1e-13, "gtol": 1e-10})
        ez = np.exp(r.x - r.x.max())
        b = total * ez / ez.sum()
        b[b < 1e-12 * total] = 0.0
        b *= total / b.sum()
        e, _ = error_grad(b)
        # levels left with a vanishing share (< 1e-6) make the GLS ill-conditioned (variances
        # ~1e20) for no gain: drop them when that costs nothing (relative 1e-9)
        small = (b > 0) & (b < 1e-6 * total)
        if np.any(small):
            bz = np.where(small, 0.0, b)
            bz *= total / bz.sum()
            ez_, _ = error_grad(bz)
            if ez_ <= e * (1 + 1e-9):
                b, e = bz, ez_
        if e < best[0]:
            best = (e, b)
    return best[0], best[1], float(e0), calls[0]

