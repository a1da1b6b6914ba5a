"""Continual release: running counts over a stream (issue 16).

``Counter(horizon, epsilon= | rho=, mechanism="binary" | "kary", ...)``: the tree mechanism of
Dwork et al. 2010 / Chan et al. 2011 for counting under continual observation, with covering
sums and per-level budgets (:mod:`dptree_opt.stream.counter`).
"""

from .counter import Counter

__all__ = ["Counter"]
