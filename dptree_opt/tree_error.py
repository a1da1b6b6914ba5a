"""Moved to :mod:`dptree_opt.error.tree` (level-uniform trees, BLUE error); this alias keeps old
imports working."""

from .error.tree import *  # noqa: F403
from .error.tree import (  # noqa: F401  (not in error.tree.__all__; imported from here before)
    MAX_ALL_RANGE_PER_QUERY_K,
    _check_branching,
    _check_tree,
    _haar_variances,
)
from .error.tree import __all__ as _moved

__all__ = list(_moved) + ["MAX_ALL_RANGE_PER_QUERY_K", "_check_branching", "_check_tree",
                          "_haar_variances"]
