"""Engines: one module per strategy structure, each serving the BLUE, the exact errors and
(where it has one) the causal restriction of its structure, behind one registry.

``blue``, ``expected_error``, ``monte_carlo_error``, ``causal_blue``, the range standard errors
and compare ("can this row be computed", its per-query maxima) ask
:mod:`~dptree_opt.engines.registry`; nothing outside this package tests a strategy's
structure. The engines are registered below, once, in
the order the registry asks them (most specific first, the generic dense GLS last). A new
structure is a strategy class, one engine module and one line here; the conformance test
(tests/test_engine_conformance.py) covers it automatically.
"""

from .base import (ANY_WORKLOAD, ESTIMATORS, MAX_LISTED_QUERIES, TASKS, Capability, Engine,
                   QueryMax)
from .registry import (Declined, NotServed, capability_table, claimed_by, engine_named, register,
                       registered, run, select)
from .tree import TreeEngine
from .kronecker import KronTreeEngine, QuadtreeEngine
from .kron_product import KronProductEngine
from .banded import BandedEngine
from .toeplitz import ToeplitzEngine
from .implicit import ImplicitEngine
from .nested import NestedEngine
from .restarted import RestartedEngine
from .causal_error import TriangularEngine
from .interval import HaarEngine, IntervalEngine
from .gls import DenseEngine

__all__ = ["ANY_WORKLOAD", "ESTIMATORS", "MAX_LISTED_QUERIES", "TASKS", "Capability", "Engine",
           "QueryMax", "Declined", "NotServed", "capability_table", "engine_named", "register",
           "registered", "run", "select", "claimed_by", "GRID_TREE_ENGINES"]

# the engines of Kronecker products of complete trees and of quadtrees (what the grid release
# and the grid budget optimiser run)
GRID_TREE_ENGINES = (KronTreeEngine.name, QuadtreeEngine.name)

register(TreeEngine())
register(KronTreeEngine())
register(QuadtreeEngine())
register(KronProductEngine())
register(BandedEngine())
register(ToeplitzEngine())
register(ImplicitEngine())
register(NestedEngine())
register(RestartedEngine())
register(TriangularEngine())
register(IntervalEngine())
register(HaarEngine())
register(DenseEngine())          # the fallback: last
