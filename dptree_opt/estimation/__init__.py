"""Estimators: the generic BLUE (GLS with exact rows as constraints) and the [RTS] covering sums."""

from .covering import covering_cdf, covering_variances
from .gls import GLS, blue, blue_covariance, gls

__all__ = ["GLS", "gls", "blue", "blue_covariance", "covering_cdf", "covering_variances"]
