"""Tree estimators for mechanisms on level-uniform trees (the O(n) fast paths).

Wraps the pure recursions of :mod:`dptree_opt.engines.honaker` with a mechanism's
branching factors and per-level noise variances (root: 0 when N is public, inf when the
root is not measured).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..mechanism import Mechanism
from ..strategies import LevelUniformTree
from ..workloads import Workload
from .base import ANY_WORKLOAD, Capability, Engine
from .causal import tree_causal_answers
from .registry import Declined
from .covering import all_levels_measured, tree_covering_range_variances
from .causal_error import tree_causal_error
from .refined import MAX_REFINED_DENSE_BINS, refined_histogram_covariance, refined_workload_error
from .tree_error import (MAX_ALL_RANGE_PER_QUERY_K, WORKLOADS, blue_covariance_coefficients,
                         blue_error, blue_range_variances)
from .honaker import (TreeEstimates, check_answers, honaker_recursions, is_tree_mechanism,
                      refined_error, refined_recursion, tree_parameters)

__all__ = ["TreeEngine", "tree_estimates", "tree_blue",
           "refined_cdf", "refined_variances", "TreeEstimates"]


def tree_estimates(mechanism: Mechanism, y: ArrayLike) -> TreeEstimates:
    """[HON] node estimates t^-, t^+, t^* and their variances, in the strategy's row order.

    y: noisy answers, shape (nodes,) or (trials, nodes). O(nodes), vectorised per level."""
    ks, v = tree_parameters(mechanism)
    return honaker_recursions(ks, v, check_answers(mechanism, y))


def tree_blue(mechanism: Mechanism, y: ArrayLike) -> npt.NDArray[np.float64]:
    """The BLUE of the histogram on a tree: the leaf level of t^* ([HON] = GLS)."""
    est = tree_estimates(mechanism, y)
    tree = mechanism.released
    assert isinstance(tree, LevelUniformTree)  # tree_parameters checked it
    leaves = tree.level_slice(tree.height)
    if not np.all(np.isfinite(est.efficient_var[leaves])):
        raise ValueError("the strategy cannot identify the histogram (no measured level "
                         "resolves the leaves)")
    return est.efficient[..., leaves]


def refined_cdf(mechanism: Mechanism, y: ArrayLike) -> npt.NDArray[np.float64]:
    """[RTS] App. B refined estimates of the K cumulative counts (shape (K,) or (trials, K)):
    estimation from below, then inverse-variance combination of the left covering sum and
    the total minus the right covering sum (see ``honaker.refined_recursion``)."""
    ks, v = tree_parameters(mechanism)
    return refined_recursion(ks, v, check_answers(mechanism, y))[0]


def refined_variances(mechanism: Mechanism) -> np.ndarray:
    """Exact variance of each refined prefix estimate, t = 1..K; O(K)."""
    ks, v = tree_parameters(mechanism)
    return refined_error(ks, v, per_query=True)


# ------------------------------------------------------------------------------ the engine
_INTERVALS = ("prefix", "identity", "all_range", "ranges", "total")


class TreeEngine(Engine):
    """Level-uniform trees with budgets per level: Honaker's recursions (BLUE), the Haar
    form of the BLUE's covariance (exact errors), [RTS] App. B (refined) and the causal BLUE
    by estimates from below (:mod:`~dptree_opt.engines.causal`)."""

    name = "tree"
    structure = "level-uniform tree, budgets per level"
    capabilities = (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n) per trial"),
        Capability("error", "blue", _INTERVALS, "O(h); ranges O(h) each"),
        Capability("per_query", "blue", _INTERVALS, "O(n); all_range O(n^2), n <= 4096"),
        Capability("covariance", "blue", (ANY_WORKLOAD,), "O(n h) per column"),
        Capability("error", "covering", ("ranges", "total"), "O(h) per range, all levels measured"),
        Capability("per_query", "covering", ("ranges", "total"),
                   "O(h) per range, all levels measured"),
        Capability("estimate", "refined", (ANY_WORKLOAD,), "O(n) per trial"),
        Capability("error", "refined", (ANY_WORKLOAD,),
                   "O(n) prefix / identity / all_range; else dense, n <= 4096"),
        Capability("per_query", "refined", (ANY_WORKLOAD,),
                   "O(n) prefix / identity; else dense, n <= 4096"),
        Capability("estimate", "causal", _INTERVALS, "O(n h) per trial"),
        Capability("error", "causal", _INTERVALS, "prefix O(n), ranges O(h) each"),
        Capability("per_query", "causal", _INTERVALS, "prefix O(n), ranges O(h) each"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return is_tree_mechanism(mechanism)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        if estimator == "covering" and not all_levels_measured(mechanism):
            return "the O(h) covering formula needs every level measured"
        if workload is None:        # the "estimate" task: nothing to refuse
            return None
        if (estimator == "blue" and task == "per_query" and workload.kind == "all_range"
                and mechanism.n_bins > MAX_ALL_RANGE_PER_QUERY_K):
            return (f"per-query all-range errors need K <= {MAX_ALL_RANGE_PER_QUERY_K}, got "
                    f"K = {mechanism.n_bins}; the total (per_query=False) works at any K")
        if (estimator == "refined" and task != "estimate"
                and (workload.kind not in WORKLOADS
                     or (task == "per_query" and workload.kind == "all_range"))
                and mechanism.n_bins > MAX_REFINED_DENSE_BINS):
            return (f"the refined estimator's {workload.kind!r} errors need its dense "
                    f"covariance: refused for {mechanism.n_bins} > {MAX_REFINED_DENSE_BINS} "
                    "bins")
        return None

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        if estimator == "blue":
            return tree_blue(mechanism, y)
        if estimator == "refined":
            x = np.diff(refined_cdf(mechanism, y), axis=-1, prepend=0.0)
            if not np.all(np.isfinite(x)):   # NaN: some prefix has no estimate from below
                raise ValueError("the refined estimator cannot estimate the histogram: an "
                                 "unmeasured level leaves some prefixes without an estimate")
            return x
        if workload is None:
            raise ValueError("workload: the causal estimate answers a workload")
        return tree_causal_answers(mechanism, y, workload)

    def covariance(self, mechanism: Mechanism,
                   u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # Cov = sum_l c_l (I kron J_(w_l)) (the Haar form of the BLUE's covariance)
        ks, v = tree_parameters(mechanism)
        u = np.asarray(u, dtype=float)
        cols = u.reshape(u.shape[0], -1).T                      # (m, n)
        n = cols.shape[1]
        x = np.zeros_like(cols)
        tree = mechanism.released
        assert isinstance(tree, LevelUniformTree)  # tree_parameters checked it
        for c_l, w in zip(blue_covariance_coefficients(ks, v), tree.level_widths):  # O(n) each
            w = int(w)
            x += np.repeat(c_l * cols.reshape(cols.shape[0], n // w, w).sum(axis=2), w, axis=1)
        return x.T.reshape(u.shape)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        ks, v = tree_parameters(mechanism)
        kind = workload.kind
        if estimator == "causal":
            return tree_causal_error(workload, mechanism, per_query)
        if estimator == "covering":             # ranges and the total
            if dense:
                raise Declined("the dense covariance of the covering sums was asked for")
            lo, hi = workload.intervals()
            var = tree_covering_range_variances(mechanism, lo, hi)
            return var if per_query else float(var.sum())
        if estimator == "refined":
            if not dense and kind in WORKLOADS:
                return refined_workload_error(ks, v, kind, per_query=per_query)
            cov = refined_histogram_covariance(mechanism)
            if not per_query:
                total = workload.total_variance(cov)
                if np.isfinite(total):
                    return total
            var = workload.query_variances(cov)
            if not np.all(np.isfinite(var)):  # an unmeasured level: no estimate from below
                raise ValueError("the refined estimator does not identify every query of the "
                                 f"{kind!r} workload: an unmeasured level leaves some prefixes "
                                 "without an estimate")
            return var if per_query else float(var.sum())
        if kind in WORKLOADS:
            return blue_error(ks, v, kind, per_query=per_query)
        lo, hi = workload.intervals()
        var = blue_range_variances(ks, v, lo, hi)  # O(h) each
        return var if per_query else float(var.sum())
