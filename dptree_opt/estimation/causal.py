"""The causal BLUE: each query answered from the rows complete at its step."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .. import engines
from ..engines.causal import check_causal_answers, check_causal_inputs, query_intervals
from ..mechanism import Mechanism
from ..workloads import Workload

__all__ = ["causal_blue"]


def causal_blue(mechanism: Mechanism, y: ArrayLike, workload: Workload,
                method: str = "auto") -> npt.NDArray[np.float64]:
    """Causal BLUE answers of every query of a 1-D ``workload``: shape (q,), or (trials, q)
    for y of shape (trials, rows).

    Query q (answered at step t_q = 1 + its last bin) is estimated from the rows complete by
    t_q only: changing the measurement of a row complete later leaves it unchanged. Linear
    and unbiased; exact variances by ``expected_error(..., estimator="causal")``.
    ``method``: "auto" (the engine for the strategy's structure: level-uniform trees by
    Honaker's from-below estimates, O(K h); lower-triangular cores by the offline BLUE of the
    restricted square core; interval strategies; otherwise the dense filter) or "dense" (the
    filter, n <= 4096). Raises ValueError when a query is not identified causally."""
    check_causal_inputs(workload, mechanism, method)
    query_intervals(workload)
    y = check_causal_answers(mechanism, y)
    flat = y.reshape(-1, y.shape[-1])
    out = engines.run("estimate", mechanism, workload, "causal", y=flat,
                      generic_only=method == "dense")
    return out.reshape(y.shape[:-1] + (out.shape[-1],))
