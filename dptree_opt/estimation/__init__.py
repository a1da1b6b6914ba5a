"""Estimators: the BLUE (Honaker's recursions on trees, generic GLS otherwise), the [RTS]
covering sums, the [RTS] App. B refined estimator and the causal BLUE."""

from .blue import blue, blue_covariance
from .causal import causal_blue
from ..engines.covering import covering_cdf, covering_variances
from ..engines.gls import GLS, gls
from ..engines.tree import TreeEstimates, refined_cdf, refined_variances, tree_estimates

__all__ = ["GLS", "gls", "blue", "blue_covariance", "covering_cdf", "covering_variances",
           "TreeEstimates", "tree_estimates", "refined_cdf", "refined_variances", "causal_blue"]
