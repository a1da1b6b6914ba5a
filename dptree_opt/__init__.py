"""dptree_opt: differentially private CDFs, prefix sums and range queries with tree mechanisms.

Every mechanism is a matrix mechanism: a workload W (``dptree_opt.workloads``), a strategy A
(``dptree_opt.strategies``) released with calibrated noise (``Mechanism``), a linear estimator
(``blue``, ``causal_blue``, ``covering_cdf``) and an exact error (``expected_error``), each
computed by the engine of the strategy's structure (``dptree_opt.engines``); the best mechanism
for a workload: ``optimize.best_mechanism``; comparisons: ``compare``; real data: ``release``;
continual release: ``stream``; multiple participations (private learning): ``participation``,
``stream.CorrelatedNoise``. See docs/README.md and docs/math.md.
"""

from . import closed_forms, consistency, participation, queries, strategies, workloads
from . import bounds
from .error import MonteCarloResult, expected_error, monte_carlo_error
from .estimation import (
    TreeEstimates,
    blue,
    blue_covariance,
    causal_blue,
    covering_cdf,
    covering_variances,
    refined_cdf,
    refined_variances,
    tree_estimates,
)
from .mechanism import Mechanism
from .pipeline import PrivateCDF, cdf_from_measurements, private_cdf
# the real-data release path lives in dptree_opt.data_release (binning, io, secure_noise)
from .data_release import GridRelease, Release, load_release, release, release_file
from . import engines, optimize
from . import anchors, compare  # noqa: E402  (after Mechanism / error: they build on them)
from . import stream  # noqa: E402
from . import opendp  # noqa: E402  (OpenDP itself loads only when a measurement is built)

__version__ = "0.1.0"

__all__ = [
    "Mechanism",
    "MonteCarloResult",
    "PrivateCDF",
    "Release",
    "TreeEstimates",
    "anchors",
    "blue",
    "blue_covariance",
    "bounds",
    "causal_blue",
    "engines",
    "optimize",
    "cdf_from_measurements",
    "closed_forms",
    "compare",
    "stream",
    "consistency",
    "covering_cdf",
    "covering_variances",
    "expected_error",
    "load_release",
    "opendp",
    "participation",
    "monte_carlo_error",
    "private_cdf",
    "queries",
    "refined_cdf",
    "refined_variances",
    "release",
    "release_file",
    "GridRelease",
    "strategies",
    "tree_estimates",
    "workloads",
]
