"""Engines: one module per strategy structure, each serving the BLUE, the exact errors and
(where it has one) the causal restriction of its structure, behind one registry.

``blue``, ``expected_error``, ``monte_carlo_error``, ``causal_blue``, the range standard errors
and compare's "can this row be computed" ask :mod:`~dptree_opt.engines.registry`; nothing
outside this package tests a strategy's structure. The engines are registered below, once, in
the order the registry asks them (most specific first, the generic dense GLS last). A new
structure is a strategy class, one engine module and one line here; the conformance test
(tests/test_engine_conformance.py) covers it automatically.
"""

from .base import ANY_WORKLOAD, ESTIMATORS, TASKS, Capability, Engine
from .registry import (Declined, capability_table, engine_named, register, registered, run,
                       select)
from .tree import TreeEngine
from .kronecker import KronTreeEngine, QuadtreeEngine
from .kron_product import KronProductEngine
from .banded import BandedEngine
from .toeplitz import ToeplitzEngine
from .implicit import ImplicitEngine
from .causal_error import TriangularEngine
from .interval import HaarEngine, IntervalEngine
from .gls import DenseEngine

__all__ = ["ANY_WORKLOAD", "ESTIMATORS", "TASKS", "Capability", "Engine", "Declined",
           "capability_table", "engine_named", "register", "registered", "run", "select"]

register(TreeEngine())
register(KronTreeEngine())
register(QuadtreeEngine())
register(KronProductEngine())
register(BandedEngine())
register(ToeplitzEngine())
register(ImplicitEngine())
register(TriangularEngine())
register(IntervalEngine())
register(HaarEngine())
register(DenseEngine())          # the fallback: last
