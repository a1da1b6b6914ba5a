"""Exact side-by-side comparisons of mechanisms: 1-D (``compare``), grids (``compare_grid``)
and streaming counters (``compare_stream``); ``dptree-opt compare`` prints them.

One row protocol for all (:mod:`~dptree_opt.compare.protocol`): a setting, rows registered
with a builder returning a :class:`Candidate` (a mechanism and its estimator), errors computed
exactly through the engine registry, the optimised families' rows and the "best" rows taken
per workload column from the front door (``optimize.best_mechanism``). The 1-D rows are in
:mod:`~dptree_opt.compare.one_d`, the grid rows in :mod:`~dptree_opt.compare.grid`, the
streaming counters in :mod:`~dptree_opt.compare.stream`, the lower bounds in
:mod:`~dptree_opt.compare.bounds`; the emulations of Google's, OpenDP's and ektelo's
mechanisms are ``dptree_opt.anchors``.
"""

from ..anchors import (OpenDPRun, ektelo_hb2d_branchings, ektelo_hb_branching,
                       ektelo_quadtree_plan, run_opendp, uniform_grid_noise, uniform_grid_side)
from ..engines.interval import interval_blue_errors
from .bounds import grid_error_lower_bound, grid_svd_bound
from .grid import (GRID_ROWS, GRID_WORKLOADS, GridComparison, GridSetting, check_cells,
                   compare_grid, format_table, parse_shape)
from .one_d import (MAX_DENSE_BINS, ROWS, Comparison, Setting, check_bins, compare,
                    register_row)
from .protocol import (MAX_ALL_RANGE_MAX_BINS, WORKLOADS, BudgetSetting, Candidate,
                       CompareRow, NotAvailable, RowSpec, WorkloadError, format_number,
                       row_errors)
from .stream import StreamComparison, compare_stream

__all__ = ["WORKLOADS", "Setting", "Candidate", "RowSpec", "NotAvailable", "WorkloadError",
           "CompareRow", "Comparison", "ROWS", "register_row", "compare", "row_errors",
           "interval_blue_errors", "OpenDPRun", "run_opendp", "MAX_DENSE_BINS",
           "MAX_ALL_RANGE_MAX_BINS", "as_dict", "check_bins", "format_number", "BudgetSetting",
           "GRID_WORKLOADS", "GRID_ROWS", "GridSetting", "GridComparison", "compare_grid",
           "parse_shape", "check_cells", "grid_svd_bound", "grid_error_lower_bound",
           "ektelo_hb_branching", "ektelo_hb2d_branchings", "ektelo_quadtree_plan",
           "uniform_grid_side", "uniform_grid_noise", "format_table", "StreamComparison",
           "compare_stream"]


def as_dict(result: Comparison | GridComparison | StreamComparison) -> dict[str, object]:
    """A JSON-ready dict of a :class:`Comparison`, :class:`GridComparison` or
    :class:`StreamComparison`."""
    if not isinstance(result, (Comparison, GridComparison, StreamComparison)):
        raise ValueError(f"result must be a comparison, got {type(result).__name__}")
    return result.as_dict()
