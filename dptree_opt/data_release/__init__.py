"""Private release of real data: bins, secure noise, estimation, consistency, output.

``release(data, lower=, upper=, bins=, epsilon=|rho=, ...)`` (in-memory values or
``counts=``) and ``release_file(path, column=, ...)`` / ``release_file(counts_file=...)``
return a :class:`Release`. Modules: ``binning`` (the bin rule, validation), ``io`` (chunked
CSV / Parquet / counts files), ``secure_noise`` (OpenDP's exact samplers), ``result``
(the frozen result, JSON), ``saved`` (``load_release``: a saved JSON back into a result,
post-processing only), ``core`` (the pipeline and its privacy account); ``grid`` and
``grid_result``: the same for a d-D grid of cells (per-axis ``lower``, ``upper``, ``bins``).
"""

from .binning import OUT_OF_RANGE, BinSpec
from .core import DEFAULT_QUANTILES, default_cdf_error, release, release_file
from .grid import release_grid, release_grid_file
from .grid_result import BoxCount, GridRelease
from .result import PGMMeasurement, Release
from .saved import load_release

__all__ = ["release", "release_file", "default_cdf_error", "Release", "BinSpec", "OUT_OF_RANGE", "DEFAULT_QUANTILES",
           "release_grid", "release_grid_file", "GridRelease", "BoxCount", "load_release",
           "PGMMeasurement"]
