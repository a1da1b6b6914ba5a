"""Optimised strategies with their safety net: the best of an optimiser and the best tree.

``optimized_strategy`` (what ``dptree-opt compare`` calls) runs the optimisers of
:mod:`dptree_opt.strategies.optimized` (the Gaussian optimum; HDMM's p-Identity for Laplace)
and, for Laplace, compares the result with the best level-uniform tree (``best_tree``, exact
BLUE errors), returning the better. It lives here, above ``Mechanism`` and ``expected_error``,
because scoring a candidate needs both (the package is layered: nothing lower imports something higher).
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from functools import lru_cache

import numpy as np

from .. import strategies
from ..error import expected_error
from ..mechanism import Mechanism
from ..strategies.base import Strategy, check_neighbours
from ..strategies.optimized import (
    MAX_BINS,
    OptimizedStrategy,
    check_workload,
    gaussian_optimal,
    laplace_p_identity,
)
from ..validation import check_int
from ..workloads import Workload
from .search import level_uniform

__all__ = ["best_tree", "optimized_strategy", "clear_cache", "dense_optimum_seconds",
           "P_IDENTITY_FIT", "GAUSSIAN_ITERATION_FIT", "GAUSSIAN_DENSE_ITERATIONS"]

# Time models of the dense optimisers (CPU seconds on one core): fits of a + b n^2 + c n^3 to
# times measured on prefix and random-range workloads at n = 64, 256, 512, 1024
# (``python benchmarks/bench_best_mechanism.py --dense-times`` prints both).
# laplace_p_identity, 2 starts (L-BFGS-B stops after about 1000 evaluations from n = 256 on):
P_IDENTITY_FIT = (0.0, 6.1e-6, 5.2e-9)
# gaussian_optimal, per fixed-point iteration (a dense eigendecomposition):
GAUSSIAN_ITERATION_FIT = (2e-4, 9.3e-8, 1.6e-10)
GAUSSIAN_DENSE_ITERATIONS = 15  # iterations to the gap 1e-5 (measured: 1 to 15)


def _unit_budget(noise: str) -> tuple[float | None, float | None]:
    """(epsilon, rho) of the unit budget: eps = 1 (Laplace) or rho = 1/2 (Gaussian)."""
    return (1.0, None) if noise == "laplace" else (None, 0.5)


def best_tree(workload: Workload, noise: str = "laplace", neighbours: str = "add_remove",
              public_total: bool | None = None) -> tuple[float, Strategy | None]:
    """(error, Strategy) of the best equal-budget level-uniform tree at unit budget (eps = 1
    or rho = 1/2), exact BLUE error from ``expected_error``.

    Prefix workload: the exact integer search ``optimize.level_uniform`` (no padding),
    confirmed with ``strategies.tree`` + ``expected_error``; other workloads: every tree
    tree(n, k) with k^h = n."""
    n = workload.n_bins
    epsilon, rho = _unit_budget(noise)
    cands: list[tuple[int, ...]] = []
    if workload.kind == "prefix" and n >= 2:
        design = level_uniform(n, epsilon, rho=rho, estimator="blue", noise=noise,
                               neighbours=neighbours, public_total=public_total,
                               budgets="equal", allow_padding=False)
        cands.append(tuple(design.branching))
    else:
        for k in range(2, n + 1):
            h = round(math.log(n, k))
            if k**h == n:
                cands.append((k,) * h)
    best: tuple[float, Strategy | None] = (math.inf, None)
    for ks in cands:
        strat = strategies.tree(n, list(ks))
        mech = Mechanism(strat, noise=noise, neighbours=neighbours, public_total=public_total,
                         epsilon=epsilon, rho=rho)
        err = expected_error(workload, mech, "blue")
        if err < best[0]:
            best = (err, strat)
    return best


def _cubic(fit: tuple[float, float, float], n: int) -> float:
    a, b, c = fit
    return a + b * n * n + c * n ** 3


def dense_optimum_seconds(noise: str, n_bins: int, iterations: int | None = None) -> float:
    """Predicted CPU seconds (one core) of :func:`optimized_strategy` on ``n_bins`` bins:
    HDMM's p-Identity with 2 starts (``noise="laplace"``; the tree comparison is
    negligible), or ``iterations`` (default GAUSSIAN_DENSE_ITERATIONS) fixed-point
    iterations of the dense Gaussian optimum. Fits of a + b n^2 + c n^3 to measured times
    (P_IDENTITY_FIT, GAUSSIAN_ITERATION_FIT; within 0.6x-1.5x of them at 64..1024 bins)."""
    if noise == "laplace":
        return _cubic(P_IDENTITY_FIT, n_bins)
    its = GAUSSIAN_DENSE_ITERATIONS if iterations is None else iterations
    return its * _cubic(GAUSSIAN_ITERATION_FIT, n_bins)


def _unit_error(workload: Workload, strategy: Strategy, noise: str, neighbours: str,
                public_total: bool | None) -> float:
    epsilon, rho = _unit_budget(noise)
    mech = Mechanism(strategy, noise=noise, neighbours=neighbours, public_total=public_total,
                     epsilon=epsilon, rho=rho)
    return expected_error(workload, mech, "blue")


def _workload_key(w: Workload) -> tuple[Hashable, ...]:
    if w.kind == "ranges":
        return ("ranges", w.n_bins, np.asarray(w.lo).tobytes(), np.asarray(w.hi).tobytes())
    return (w.kind, w.n_bins)


def optimized_strategy(workload: Workload, noise: str = "gaussian", *,
                       neighbours: str = "add_remove", public_total: bool | None = None,
                       p: int | None = None, starts: int = 2, seed: int | None = 0,
                       tol: float = 1e-5,
                       max_iter: int = 500) -> OptimizedStrategy:
    """The optimised strategy the ``compare`` command uses (cached in memory).

    ``noise="gaussian"``: ``gaussian_optimal`` (the optimum of (P) to the certified gap
    ``tol``, at most ``max_iter`` iterations). ``noise="laplace"``: ``laplace_p_identity``
    (``p``, ``starts``, ``seed``, ``max_iter``) compared with ``best_tree``; the
    better of the two is returned (``method`` says which). ``error`` is in the units of
    ``OptimizedStrategy`` (unit budget); with neighbours other than add/remove (or a public
    total) the Laplace comparison uses the exact ``expected_error`` of both candidates in
    that setting, and ``error`` is that exact value.

    Cache: an in-memory ``functools.lru_cache`` keyed by (workload kind, n[, intervals],
    noise, neighbours, public_total, p, starts, seed, tol, max_iter); ``clear_cache()``
    empties it. No disk cache."""
    if isinstance(workload, Workload) and workload.n_bins > MAX_BINS:
        raise ValueError(
            f"optimize.optimized_strategy builds dense n x n strategies: refused for "
            f"{workload.n_bins} > {MAX_BINS} bins. Use optimize.best_mechanism(workload, "
            "epsilon=... or rho=...), which tries every structured family at this size; for "
            "Gaussian noise and the prefix, all-range or identity workload it includes the "
            "implicit optimum, strategies.gaussian_optimal_implicit (certified gap, no matrix)")
    w = check_workload(workload)
    check_neighbours(neighbours)
    if noise not in ("gaussian", "laplace"):
        raise ValueError(f"noise must be 'gaussian' or 'laplace', got {noise!r}")
    check_int(seed, "seed", 0, none=True)

    return _cached(_workload_key(w), w, noise, neighbours, public_total, p, starts, seed, tol,
                   max_iter)


@lru_cache(maxsize=16)
def _cached_impl(key: tuple[Hashable, ...], noise: str, neighbours: str,
                 public_total: bool | None, p: int | None, starts: int, seed: int | None,
                 tol: float, max_iter: int) -> OptimizedStrategy:
    w = _KEYED[key]
    if noise == "gaussian":
        return gaussian_optimal(w, tol=tol, max_iter=max_iter)
    opt = laplace_p_identity(w, p, starts=starts, seed=seed, max_iter=max_iter)
    t0 = time.perf_counter()
    default = neighbours == "add_remove" and not public_total
    opt_err = opt.error if default else _unit_error(w, opt.strategy, "laplace", neighbours,
                                                    public_total)
    tree_err, tree_strat = best_tree(w, "laplace", neighbours, public_total)
    secs = opt.seconds + time.perf_counter() - t0
    if tree_strat is not None and tree_err < opt_err:
        return OptimizedStrategy(
            strategy=tree_strat, error=tree_err, start_error=opt.start_error,
            lower_bound=None, iterations=opt.iterations, seconds=secs,
            method=(f"fallback to the best level-uniform tree {tree_strat.name} (error "
                    f"{tree_err:.6g} < p-Identity {opt_err:.6g}); {opt.method}"))
    return OptimizedStrategy(
        strategy=opt.strategy, error=opt_err, start_error=opt.start_error, lower_bound=None,
        iterations=opt.iterations, seconds=secs,
        method=f"{opt.method}; beats the best level-uniform tree ({tree_err:.6g})")


_KEYED: dict[tuple[Hashable, ...], Workload] = {}


def _cached(key: tuple[Hashable, ...], w: Workload, noise: str, neighbours: str,
            public_total: bool | None, p: int | None, starts: int, seed: int | None,
            tol: float, max_iter: int) -> OptimizedStrategy:
    _KEYED[key] = w
    return _cached_impl(key, noise, neighbours, public_total, p, starts, seed, tol, max_iter)


def clear_cache() -> None:
    """Empty the in-memory cache of ``optimized_strategy``."""
    _cached_impl.cache_clear()
    _KEYED.clear()
