"""Behaviour bugs the type checker found in the strategies / workloads / structure engines
(typing round 2): each raised TypeError or AttributeError where a ValueError naming the
parameter is due."""

from __future__ import annotations

import pytest

from dptree_opt import workloads
from dptree_opt.strategies import quadtree


@pytest.mark.parametrize("branching", [True, 5.0, None])
def test_quadtree_refuses_a_non_sequence_branching_with_a_value_error(branching):
    """``branching`` neither an int nor a sequence used to reach ``for ks in branching``
    (TypeError: not iterable) instead of the ValueError naming ``branching``."""
    with pytest.raises(ValueError, match="branching"):
        quadtree((4, 4), branching=branching)


def test_quadtree_still_accepts_an_int_or_per_axis_branching():
    assert quadtree((4, 4), branching=2).n_rows == 1 + 4 + 16
    assert quadtree((4, 4), branching=[[2, 2], [2, 2]]).n_rows == 1 + 4 + 16


@pytest.mark.parametrize("kind", ["prefix", "ranges"])
def test_workload_without_ranges_refuses_with_a_value_error(kind):
    """A Workload built directly without ``lo`` / ``hi`` used to return (None, None) from
    ``intervals()`` and fail later (``None.size``: AttributeError) in ``n_queries``."""
    w = workloads.Workload(kind, 4)
    with pytest.raises(ValueError, match="lo and hi"):
        w.intervals()
    with pytest.raises(ValueError, match="lo and hi"):
        _ = w.n_queries


def test_workload_intervals_unchanged_for_the_constructors():
    lo, hi = workloads.prefix(3).intervals()
    assert lo.tolist() == [0, 0, 0] and hi.tolist() == [1, 2, 3]
    assert workloads.all_range(3).n_queries == 6
    lo, hi = workloads.ranges(5, [(1, 3)]).intervals()
    assert (lo.tolist(), hi.tolist()) == ([1], [4])
