"""Moved to :mod:`dptree_opt.error.refined` (level-uniform trees, refined estimator's error);
this alias keeps old imports working."""

from .error.refined import *  # noqa: F403
from .error.refined import __all__ as _moved

__all__ = list(_moved)
