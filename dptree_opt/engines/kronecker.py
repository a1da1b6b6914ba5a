"""The BLUE of a Kronecker product of level-uniform trees on a grid, without a grid-sized
matrix (docs/math.md section 8).

The information matrix M = A' V^-1 A of T_1 x .. x T_d with a variance per level tuple is
diagonal in the product of the trees' orthonormal generalised Haar bases
(``error.kronecker``): on axis i the basis is built level by level, each node's k child
coefficients turned by the k x k Helmert matrix (first row 1 / sqrt(k): the node's own
coefficient; the others: orthonormal contrasts, the node's detail coefficients of level
j = its depth + 1). So the GLS solution is one analysis transform per axis of b = A' V^-1 y,
a division of every coefficient by lambda_(j_1, .., j_d), and one synthesis per axis: O(cells
x sum_i h_i) numpy work. A public grand total fixes the constant coefficient to N / sqrt(K)
(the exact row's answer; the exact rows take no part in b or lambda). Equal to the dense GLS
on small grids (tests/test_grids.py).

Exact errors
------------
Exact BLUE error of Kronecker products of level-uniform trees on Kronecker workloads.

Setting (docs/math.md section 8): the strategy is T_1 x .. x T_d
(``strategies.kron`` of ``strategies.tree`` factors, complete: K_i = prod of the branching) and
every row of the level tuple l = (l_1, .., l_d) carries noise of variance v_l (budgets per
level tuple, ``Mechanism(..., level_budgets=...)``). The workload is W_1 x .. x W_d with 1-D
factors of kind prefix, identity, total or all_range.

On axis i, the level-l rows' Gram A_il'A_il acts on the tree's generalised Haar subspaces
D_ij (``error.tree``): it is w_il I on D_ij for j <= l (those vectors are constant on level-l
nodes) and 0 for j > l (they sum to zero on every level-l node). The d-D information matrix
sum_l v_l^-1 (x)_i A_il'A_il is therefore diagonal on the product subspaces
D_j = D_1j_1 x .. x D_dj_d, with eigenvalue

    lambda_j = sum over l >= j (componentwise) of prod_i w_(i, l_i) / v_l,

and the BLUE's covariance is sum_j D_j / lambda_j. The workload's weight on D_j is
prod_i q_(i, j_i) (q = ``error.tree.haar_workload_weights``; q = (K, 0, .., 0) for the
total), so

    E = sum_j prod_i q_(i, j_i) / lambda_j,

an O(prod_i (h_i + 1)) sum: the 2-D CDF over 4096 x 4096 cells costs as much as over 4 x 4.
lambda is a reverse cumulative sum of the level-tuple information along every axis. A public
grand total (the level tuple (0, .., 0) exact, swap neighbours) fixes D_(0,..,0): its term is
0 and the exact row leaves every other lambda unchanged. Checked against the dense GLS on
small grids (tests/test_grids.py).

Per-query maxima
----------------
A query q = (q_1, .., q_d) of a Kronecker workload of interval factors has variance
Var(q) = sum_j prod_i u_i(q_i, j_i) / lambda_j with u_i(q, j) = ||D_ij w_q||^2 the query's
energy on the axis tree's Haar subspace j (:func:`axis_interval_weights`; dense blocks for a
permuted axis). :func:`grid_tree_max` (the engines' "max" task) and
:func:`grid_tree_summary` take the maximum without listing the prod q_i queries: the other
axes' distinct rows of u are contracted with 1 / lambda, and the first axis's distinct rows
scored against that in blocks (BLAS products). An axis may carry a permutation of its cells
(the tree measures the cells ``order[0], order[1], ..``): ektelo's quadtree plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..mechanism import Mechanism
from ..strategies import KroneckerStrategy, LevelUniformTree, QuadtreeStrategy, Strategy
from ..workloads import KroneckerWorkload, Workload, along_axis
from .base import ANY_WORKLOAD, Capability, Engine, QueryMax, TooManyQueries
from .honaker import honaker_recursions
from .registry import Declined
from .tree_error import haar_workload_weights

__all__ = ["KronTreeEngine", "QuadtreeEngine", "is_kron_tree_mechanism", "is_quadtree_mechanism", "grid_trees", "level_tuple_of",
           "level_tuple_lambdas", "kron_tree_blue", "quadtree_blue", "haar_analysis",
           "haar_synthesis", "helmert", "is_grid_tree_mechanism", "kron_tree_error",
           "axis_workload_weights", "axis_interval_weights", "kron_box_variances",
           "KRON_TREE_WORKLOADS", "GRID_TREE_MAX_WORKLOADS", "grid_tree_axis_weights",
           "grid_tree_summary", "grid_tree_max", "MAX_TREE_MAX_QUERIES", "MAX_ENUMERATED",
           "MAX_PAIRS"]

# per-axis queries of the Kronecker-tree / quadtree per-query maxima (each axis's rows of u)
MAX_TREE_MAX_QUERIES = 40000
MAX_ENUMERATED = 1 << 24    # entries per block / of the "other axes" tensor in the maxima
MAX_PAIRS = 5 * 10**8       # distinct query combinations scored by the grid-tree maximum
_BLOCK_FLOATS = 1 << 22     # floats per block of an enumerated maximum

_F: TypeAlias = "npt.NDArray[np.float64]"


def _grid_strategy(mechanism: Mechanism) -> KroneckerStrategy | QuadtreeStrategy:
    """The released strategy, which must be a Kronecker product or a quadtree."""
    strat = mechanism.released
    if not isinstance(strat, (KroneckerStrategy, QuadtreeStrategy)):
        raise ValueError(f"a Kronecker product of trees or a quadtree is needed, got "
                         f"{strat.name!r}")
    return strat


def is_kron_tree_mechanism(mechanism: Mechanism) -> bool:
    """Whether the Kronecker-tree paths apply: a Kronecker product of complete level-uniform
    trees (no appended total rows) with budgets per level tuple (not per row)."""
    if not isinstance(mechanism, Mechanism):
        return False
    strat = mechanism.released
    if not isinstance(strat, KroneckerStrategy) or strat.n_totals:
        return False
    if mechanism.row_budgets is not None:
        return False
    return all(isinstance(f, LevelUniformTree) and f.n_bins == math.prod(f.branching)
               and np.array_equal(f.levels, f.depth) for f in strat.factors)


def is_quadtree_mechanism(mechanism: Mechanism) -> bool:
    """Whether the quadtree paths apply: a QuadtreeStrategy with budgets per level whose
    non-root levels are noisy or unmeasured (the root may be the public total)."""
    return (isinstance(mechanism, Mechanism)
            and isinstance(mechanism.released, QuadtreeStrategy)
            and mechanism.row_budgets is None
            and all(v > 0 for lvl, v in mechanism.level_variances.items() if lvl > 0))


def grid_trees(strategy: Strategy) -> tuple[LevelUniformTree, ...]:
    """The per-axis trees of a Kronecker product of trees or of a quadtree."""
    if isinstance(strategy, QuadtreeStrategy):
        return strategy.axis_trees
    factors = strategy.factors if isinstance(strategy, KroneckerStrategy) else ()
    trees = tuple(f for f in factors if isinstance(f, LevelUniformTree))
    if not trees or len(trees) != len(factors):
        raise ValueError("a Kronecker product of level-uniform trees or a quadtree is needed, "
                         f"got {strategy.name!r}")
    return trees


def level_tuple_of(strategy: Strategy, level: int) -> tuple[int, ...]:
    """The per-axis levels (l_1, .., l_d) of a budget level: the mixed-radix code of a
    Kronecker product, the diagonal (l, .., l) of a quadtree."""
    if isinstance(strategy, QuadtreeStrategy):
        return (level,) * len(strategy.axis_trees)
    if not isinstance(strategy, KroneckerStrategy):
        raise ValueError(f"a Kronecker product or a quadtree is needed, got {strategy.name!r}")
    return strategy.level_tuple(level)


def _level_tuple_variances(mechanism: Mechanism, trees: Sequence[LevelUniformTree]) -> _F:
    """v_l per level tuple (inf where nothing is measured)."""
    var = np.full(tuple(t.height + 1 for t in trees), np.inf)
    for code, v in mechanism.level_variances.items():
        var[level_tuple_of(mechanism.released, code)] = v
    return var


def level_tuple_lambdas(mechanism: Mechanism) -> tuple[_F, bool]:
    """(lambda, public) for a Kronecker product of trees or a quadtree: lambda_j = sum over
    level tuples l >= j (componentwise) of prod_i w_(i, l_i) / v_l, shape (h_1 + 1, ..,
    h_d + 1), the eigenvalues of the information matrix on the product Haar subspaces
    (``error.kronecker``; a quadtree measures the diagonal tuples only); ``public``: the grand total
    (level tuple (0, .., 0)) is exact and takes no part in lambda. ValueError if another
    level tuple is exact."""
    trees = grid_trees(mechanism.released)
    dims = tuple(t.height + 1 for t in trees)
    var = _level_tuple_variances(mechanism, trees)
    exact = var == 0
    if np.any(exact & (np.indices(dims).sum(axis=0) > 0)):
        raise ValueError("only the grand total (level tuple (0, .., 0)) may be exact")
    info = np.where(exact | np.isinf(var), 0.0, 1.0 / np.where(var > 0, var, 1.0))
    for i, t in enumerate(trees):
        shape = [1] * len(trees)
        shape[i] = dims[i]
        info = info * np.asarray(t.level_widths, dtype=float).reshape(shape)
    lam = info
    for axis in range(len(trees)):
        lam = np.flip(np.cumsum(np.flip(lam, axis), axis=axis), axis)
    return lam, bool(exact.flat[0])


def helmert(k: int) -> _F:
    """The k x k orthonormal Helmert matrix: row 0 = 1 / sqrt(k); row i = (1, .., 1, -i, 0,
    ..) / sqrt(i (i + 1)) with i ones."""
    H = np.zeros((k, k))
    H[0] = 1.0 / math.sqrt(k)
    for i in range(1, k):
        H[i, :i] = 1.0
        H[i, i] = -float(i)
        H[i] /= math.sqrt(i * (i + 1))
    return H


def _levels_of_coefficients(ks: Sequence[int]) -> npt.NDArray[np.int64]:
    """Detail level j of every coefficient in haar_analysis order: 0 (the root's), then
    n_(j-1) (k_j - 1) coefficients of level j for j = 1..h."""
    out = [np.zeros(1, np.int64)]
    n = 1
    for j, k in enumerate(ks, start=1):
        out.append(np.full(n * (k - 1), j, np.int64))
        n *= k
    return np.concatenate(out)


def haar_analysis(ks: Sequence[int], X: _F) -> _F:
    """Orthonormal tree-Haar coefficients of the columns of X (shape (K, r), K = prod ks):
    root coefficient first, then the details of level 1, 2, .., h (node order)."""
    a = X
    details: list[_F] = []
    n = a.shape[0]
    for k in reversed(ks):
        n //= k
        t = np.einsum("ij,njr->nir", helmert(k), a.reshape(n, k, -1))
        a = t[:, 0, :]
        details.append(t[:, 1:, :].reshape(n * (k - 1), -1))
    return np.concatenate([a] + details[::-1])


def haar_synthesis(ks: Sequence[int], C: _F) -> _F:
    """The inverse (= transpose) of :func:`haar_analysis`."""
    a = C[:1]
    pos = 1
    n = 1
    for k in ks:
        d = C[pos:pos + n * (k - 1)].reshape(n, k - 1, -1)
        pos += n * (k - 1)
        t = np.concatenate([a.reshape(n, 1, -1), d], axis=1)
        a = np.einsum("ji,njr->nir", helmert(k), t).reshape(n * k, -1)
        n *= k
    return a


def kron_tree_blue(mechanism: Mechanism, y: ArrayLike) -> _F:
    """The BLUE of the grid's cells (row-major, shape (cells,), or (trials, cells) for y of
    shape (trials, rows)) for a Kronecker product of complete trees with a variance per level
    tuple (module docstring)."""
    if not is_kron_tree_mechanism(mechanism):
        raise ValueError("kron_tree_blue needs a Kronecker product of complete level-uniform "
                         "trees with budgets per level tuple")
    strat = mechanism.released
    if not isinstance(strat, KroneckerStrategy):  # is_kron_tree_mechanism checked it
        raise ValueError("kron_tree_blue needs a Kronecker product of trees")
    y = np.asarray(y, dtype=float)
    if y.ndim not in (1, 2) or y.shape[-1] != strat.n_rows:
        raise ValueError(f"y must have {strat.n_rows} entries per trial, got shape {y.shape}")
    var = np.asarray(mechanism.variances, dtype=float)
    exact = var == 0
    noisy = np.isfinite(var) & ~exact
    if not np.all(np.isfinite(y[..., noisy | exact])):
        raise ValueError("y has NaN or infinite answers on measured rows")
    lam, exact_total = level_tuple_lambdas(mechanism)
    trees = grid_trees(strat)
    yy = np.atleast_2d(y)
    weighted = np.where(noisy, yy / np.where(noisy, var, 1.0), 0.0)
    b = strat.rmatvec(weighted.T).T                                 # A' V^-1 y per trial
    grid = b.reshape((b.shape[0],) + strat.grid_shape)
    for i, t in enumerate(trees):
        def analysis(X: _F, ks: tuple[int, ...] = t.branching) -> _F:
            return haar_analysis(ks, X)

        grid = along_axis(grid, i + 1, analysis)
    levels = [_levels_of_coefficients(t.branching) for t in trees]
    lam_c = lam[np.ix_(*levels)]
    need_zero = lam_c <= 0
    if exact_total:
        need_zero.flat[0] = False
    if np.any(need_zero):
        raise ValueError("the strategy cannot identify the grid (an unmeasured level tuple)")
    coef = grid / np.where(lam_c > 0, lam_c, 1.0)
    if exact_total:
        n_total = yy[:, np.flatnonzero(exact)[0]]
        coef[(slice(None),) + (0,) * len(trees)] = n_total / math.sqrt(strat.n_bins)
    for i, t in enumerate(trees):
        def synthesis(X: _F, ks: tuple[int, ...] = t.branching) -> _F:
            return haar_synthesis(ks, X)

        coef = along_axis(coef, i + 1, synthesis)
    out = coef.reshape(coef.shape[0], -1)
    return out[0] if y.ndim == 1 else out


def quadtree_blue(mechanism: Mechanism, y: ArrayLike) -> _F:
    """The BLUE of the row-major cells for a quadtree: Honaker's recursions on its Morton
    tree (``QuadtreeStrategy.tree``), the leaves read back in row-major order. O(rows)."""
    if not is_quadtree_mechanism(mechanism):
        raise ValueError("quadtree_blue needs a QuadtreeStrategy with budgets per level and "
                         "noisy or unmeasured non-root levels")
    strat = mechanism.released
    if not isinstance(strat, QuadtreeStrategy):  # is_quadtree_mechanism checked it
        raise ValueError("quadtree_blue needs a QuadtreeStrategy")
    tree = strat.tree
    y = np.asarray(y, dtype=float)
    if y.ndim not in (1, 2) or y.shape[-1] != strat.n_rows:
        raise ValueError(f"y must have {strat.n_rows} entries per trial, got shape {y.shape}")
    v = np.array([mechanism.level_variances[lvl] for lvl in range(tree.height + 1)])
    est = honaker_recursions(tree.branching, v, y)
    leaf_rows = tree.level_slice(tree.height)
    if not np.all(np.isfinite(est.efficient_var[leaf_rows])):
        raise ValueError("the strategy cannot identify the histogram (no measured level "
                         "resolves the cells)")
    return est.efficient[..., leaf_rows][..., strat.morton]


KRON_TREE_WORKLOADS = ("prefix", "identity", "total", "all_range")
# per-axis workloads of the per-query maxima: any interval workload
GRID_TREE_MAX_WORKLOADS = KRON_TREE_WORKLOADS + ("ranges",)


def is_grid_tree_mechanism(mechanism: Mechanism) -> bool:
    """A Kronecker product of complete trees or a quadtree, budgets per level (tuple)."""
    return is_kron_tree_mechanism(mechanism) or is_quadtree_mechanism(mechanism)


def axis_workload_weights(tree: LevelUniformTree, workload: Workload) -> _F:
    """q_0..q_h of a 1-D workload factor on one axis's tree (``error.tree.
    haar_workload_weights``; the total: (K, 0, .., 0), all of 1'1 on the constants)."""
    if workload.kind == "total":
        q = np.zeros(tree.height + 1)
        q[0] = float(tree.n_bins)   # (1'1)^2 / K on the constants, nothing on D_j, j >= 1
        return q
    return haar_workload_weights(tree.branching, workload.kind)


def kron_tree_error(mechanism: Mechanism, workload: Workload) -> float:
    """sum_q Var(answer_q) of the BLUE for ``workload`` (module docstring). Raises
    ValueError when the structure does not apply or the grid is not identified."""
    if not is_grid_tree_mechanism(mechanism):
        raise ValueError("kron_tree_error needs a Kronecker product of complete level-uniform "
                         "trees or a quadtree, with budgets per level (tuple)")
    strat = _grid_strategy(mechanism)
    if not isinstance(workload, KroneckerWorkload) or workload.grid_shape != strat.grid_shape:
        raise ValueError("the workload must be a Kronecker workload over the strategy's grid "
                         f"{strat.grid_shape}")
    if any(f.kind not in KRON_TREE_WORKLOADS for f in workload.factors):
        raise ValueError(f"per-axis workloads must be one of {KRON_TREE_WORKLOADS}")
    trees = grid_trees(strat)
    dims = tuple(t.height + 1 for t in trees)
    lam, public = level_tuple_lambdas(mechanism)
    q = np.ones(dims)
    for i, (t, w) in enumerate(zip(trees, workload.factors)):
        shape = [1] * len(trees)
        shape[i] = dims[i]
        q = q * axis_workload_weights(t, w).reshape(shape)
    if public:
        q.flat[0] = 0.0                  # the constant direction is known exactly
    need = q > 0
    if np.any(need & ~(lam > 0)):
        raise ValueError("the strategy cannot identify the grid: some level tuples needed "
                         "by the workload are unmeasured")
    return float(np.sum(np.where(need, q / np.where(lam > 0, lam, 1.0), 0.0)))


# ------------------------------------------------------------------ boxes, one at a time
def axis_interval_weights(tree: LevelUniformTree, lo: ArrayLike, hi: ArrayLike) -> _F:
    """||D_j u||^2, j = 0..h, of the fractional interval indicators u on one axis's tree.

    u is the indicator of [lo, hi) in bin coordinates (real 0 <= lo <= hi <= K; bin t is
    [t, t + 1), so a fraction of a bin counts with its overlap, the linear interpolation
    inside bins). With M_j the averaging onto the level-j nodes (width w_j = K / (k_1 ..
    k_j)), ||M_j u||^2 = sum over nodes of overlap^2 / w_j: nodes wholly inside [lo, hi)
    give w_j each, and at most two are cut, so it is O(1) per level; D_j = M_j - M_(j-1)
    (M_(-1) = 0, M_0 the grand mean). Shapes: lo, hi (m,) -> (m, h + 1). Summed over the
    prefixes [0, t) it is ``error.tree.haar_workload_weights`` (tested)."""
    lo = np.atleast_1d(np.asarray(lo, dtype=float))
    hi = np.atleast_1d(np.asarray(hi, dtype=float))
    K = tree.n_bins
    if lo.shape != hi.shape or lo.ndim != 1:
        raise ValueError("lo and hi must be 1-D arrays of the same length")
    if np.any(~np.isfinite(lo) | ~np.isfinite(hi)) or np.any((lo < 0) | (lo > hi) | (hi > K)):
        raise ValueError(f"intervals must satisfy 0 <= lo <= hi <= {K} (bin coordinates)")
    widths = np.asarray(tree.level_widths, dtype=float)          # w_0 = K, .., w_h = 1
    w = widths[None, :]
    L = np.floor(lo[:, None] / w)
    R = np.floor(hi[:, None] / w)
    same = L == R
    left = (L + 1) * w - lo[:, None]
    right = hi[:, None] - R * w
    m = np.where(same, (hi - lo)[:, None] ** 2 / w,
                 (left * left + right * right) / w + (R - L - 1) * w)
    p = np.diff(m, axis=1, prepend=0.0)
    return np.maximum(p, 0.0)                                      # rounding below 0


def kron_box_variances(mechanism: Mechanism, lo: ArrayLike, hi: ArrayLike) -> float | _F:
    """Exact variances of the BLUE's answers to boxes [lo_1, hi_1) x .. x [lo_d, hi_d) (bin
    coordinates of the mechanism's grid, fractions allowed: linear interpolation inside
    cells), for a Kronecker product of complete trees with a variance per level tuple, or a
    quadtree (its information matrix is diagonal on the same product Haar subspaces: only the
    diagonal level tuples are measured, ``level_tuple_lambdas``).

    The box is the Kronecker product of its per-axis indicators u_i, and the BLUE's
    covariance is sum_j D_j / lambda_j with D_j the product Haar projectors (module
    docstring), so Var = sum_j prod_i ||D_(i, j_i) u_i||^2 / lambda_j: O(sum_i h_i + prod_i
    (h_i + 1)) per box, no grid-sized matrix. A public grand total removes the j = 0 term.
    Shapes: lo, hi (d,) or (m, d) -> () or (m,). Tested against the dense GLS."""
    if not is_grid_tree_mechanism(mechanism):
        raise ValueError("kron_box_variances needs a Kronecker product of complete "
                         "level-uniform trees with budgets per level tuple, or a quadtree")
    trees = grid_trees(mechanism.released)
    d = len(trees)
    lo_a, hi_a = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    single = lo_a.ndim == 1
    lo_a, hi_a = np.atleast_2d(lo_a), np.atleast_2d(hi_a)
    if lo_a.shape != hi_a.shape or lo_a.ndim != 2 or lo_a.shape[1] != d:
        raise ValueError(f"lo and hi must have shape (d,) or (m, d) with d = {d}")
    lam, public = level_tuple_lambdas(mechanism)
    inv = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), np.inf)
    if public:
        inv.flat[0] = 0.0
    acc: _F | None = None                         # contract axis by axis: (m, rest of lambda)
    bad: _F | None = None
    for i, t in enumerate(trees):
        p = axis_interval_weights(t, lo_a[:, i], hi_a[:, i])    # (m, h_i + 1)
        big = (p > 1e-12 * t.n_bins).astype(float)          # above the rounding of p
        if acc is None:
            acc = np.einsum("mj,j...->m...", p, np.where(np.isinf(inv), 0.0, inv))
            bad = np.einsum("mj,j...->m...", big, np.isinf(inv).astype(float))
        else:
            acc = np.einsum("mj,mj...->m...", p, acc)
            bad = np.einsum("mj,mj...->m...", big, bad)  # type: ignore[arg-type]  # set on axis 0
    if acc is None or bad is None:
        raise ValueError("the strategy has no grid axes")
    if np.any(bad > 0):
        raise ValueError("a box depends on an unmeasured level tuple: the strategy cannot "
                         "estimate it")
    return acc[0] if single else acc


# ------------------------------------------------------------------ per-query maxima
def grid_tree_axis_weights(tree: LevelUniformTree, workload: Workload,
                           order: ArrayLike | None = None) -> _F:
    """u(q, j) = ||D_j w_q||^2 for every query q of a 1-D workload on one axis tree (a
    complete ``LevelUniformTree``), shape (q, h + 1): the query's energy on the tree's Haar
    subspace j (module docstring). ``order``: the tree measures the axis cells order[0],
    order[1], .. (a permutation; default the identity). Sum over the queries = the
    workload's Haar weights (:func:`axis_workload_weights`). Interval queries in
    the identity order: O(q h); with a permutation: dense blocks, O(q n h)."""
    n = tree.n_bins
    if workload.n_bins != n:
        raise ValueError(f"the workload has {workload.n_bins} bins, the tree {n}")
    lo, hi = workload.intervals()
    widths = [int(w) for w in tree.level_widths]
    if order is None:  # O(1) per query and level (at most two nodes are cut)
        return axis_interval_weights(tree, lo, hi)
    order = np.asarray(order)
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError("order must be a permutation of the axis cells")
    e = np.empty((lo.size, len(widths)))
    step = max(1, _BLOCK_FLOATS // max(n, 1))
    for s in range(0, lo.size, step):  # dense blocks of the permuted query rows
        rows = ((order[None, :] >= lo[s:s + step, None])
                & (order[None, :] < hi[s:s + step, None])).astype(float)
        for j, w in enumerate(widths):
            sums = rows.reshape(rows.shape[0], n // w, w).sum(axis=2)
            e[s:s + step, j] = np.einsum("qm,qm->q", sums, sums) / w
    return np.maximum(np.diff(e, axis=1, prepend=0.0), 0.0)


def _axis_total_weights(tree: LevelUniformTree, workload: Workload,
                        order: ArrayLike | None = None) -> _F:
    """sum over the queries of u(q, j) (:func:`grid_tree_axis_weights`), shape (h + 1,):
    intervals in the identity order summed directly (O(q h)); with a permutation from the
    Gram, tr(E_l P G P') = sum over level-l nodes of 1'(P G P')1 / w_l (O(n^2 h))."""
    if order is None:
        return grid_tree_axis_weights(tree, workload).sum(axis=0)
    n = tree.n_bins
    g = workload.gram_dense()
    order = np.asarray(order)
    gp = g[np.ix_(order, order)]
    e: list[float] = []
    for w in (int(x) for x in tree.level_widths):
        m = n // w
        blocks = gp.reshape(m, w, m, w).sum(axis=(1, 3))
        e.append(float(np.trace(blocks)) / w)
    return np.maximum(np.diff(np.array(e), prepend=0.0), 0.0)


def _unique_rows(u: _F) -> tuple[_F, npt.NDArray[np.intp]]:
    """(the distinct rows of u, the index of a row equal to each)."""
    if u.shape[0] <= 1:
        return u, np.arange(u.shape[0])
    return np.unique(u, axis=0, return_index=True)


def _max_multilinear(us: Sequence[_F], m: _F) -> tuple[float, tuple[int, ...]]:
    """max over query tuples of sum_j prod_i u_i[q_i, j_i] m[j] (every u_i, m >= 0 or not)
    and a tuple (q_1, .., q_d) attaining it: the other axes' distinct rows contracted into
    T ((h_1 + 1) x R), then the first axis's distinct rows against T in blocks."""
    distinct = [_unique_rows(u) for u in us]
    us = [u for u, _ in distinct]
    size = m.shape[0] * math.prod(u.shape[0] for u in us[1:])
    if size > MAX_ENUMERATED:
        raise TooManyQueries(f"the largest per-query error needs {size} > {MAX_ENUMERATED} "
                             "entries")
    t = m
    for i in range(1, len(us)):  # contract axis i with u_i: t[.., j_i, ..] -> t[.., q_i, ..]
        t = np.moveaxis(np.tensordot(t, us[i], axes=([i], [1])), -1, i)
    t = t.reshape(t.shape[0], -1)  # (h_1 + 1, R)
    u1 = us[0]
    if u1.shape[0] * t.shape[1] > MAX_PAIRS:
        raise TooManyQueries(f"the largest per-query error needs "
                             f"{u1.shape[0] * t.shape[1]:.3g} > {MAX_PAIRS:.3g} query "
                             "combinations")
    best, first, col = -np.inf, 0, 0
    step = max(1, _BLOCK_FLOATS // max(t.shape[1], 1))
    for s in range(0, u1.shape[0], step):
        scores = u1[s:s + step] @ t
        k = int(np.argmax(scores))
        if scores.flat[k] > best:
            best, first, col = float(scores.flat[k]), s + k // t.shape[1], k % t.shape[1]
    rest = np.unravel_index(col, tuple(u.shape[0] for u in us[1:]))
    return best, (int(distinct[0][1][first]),) + tuple(
        int(idx[r]) for (_, idx), r in zip(distinct[1:], rest))


def _grid_tree_summary(mechanism: Mechanism, workload: Workload,
                       orders: Sequence[ArrayLike | None] | None,
                       want_max: bool) -> tuple[float, float | None, tuple[int, ...] | None]:
    """(total, max or None, the maximising query tuple or None) of :func:`grid_tree_summary`."""
    if not is_grid_tree_mechanism(mechanism):
        raise ValueError("the grid-tree errors need a Kronecker product of complete trees or a "
                         "quadtree with budgets per level (tuple)")
    trees = grid_trees(mechanism.released)
    if (not isinstance(workload, KroneckerWorkload) or len(workload.factors) != len(trees)
            or workload.grid_shape != tuple(t.n_bins for t in trees)):
        raise ValueError("the workload must be a Kronecker workload over the strategy's grid")
    order_list = [None] * len(trees) if orders is None else list(orders)
    us: list[_F] = []
    if want_max:
        us = [grid_tree_axis_weights(t, w, o)
              for t, w, o in zip(trees, workload.factors, order_list)]
        sums = [u.sum(axis=0) for u in us]
    else:
        sums = [_axis_total_weights(t, w, o)
                for t, w, o in zip(trees, workload.factors, order_list)]
    lam, public = level_tuple_lambdas(mechanism)
    q = np.ones(lam.shape)
    for i, u in enumerate(sums):
        shape = [1] * len(sums)
        shape[i] = lam.shape[i]
        q = q * u.reshape(shape)
    need = q > 1e-12 * max(float(q.max()), 1e-300)
    if public:
        need.flat[0] = False
    if np.any(need & ~(lam > 0)):
        raise ValueError("the strategy cannot identify the grid: some subspaces needed by the "
                         "workload are unmeasured")
    m = np.where(need, 1.0 / np.where(lam > 0, lam, 1.0), 0.0)
    if public:
        m.flat[0] = 0.0
    total = float(np.sum(q * m))
    if not want_max:
        return total, None, None
    return (total,) + _max_multilinear(us, m)


def grid_tree_summary(mechanism: Mechanism, workload: Workload,
                      orders: Sequence[ArrayLike | None] | None = None,
                      want_max: bool = True) -> tuple[float, float | None]:
    """(total, max) of the BLUE's per-query variances (counts^2) for a Kronecker product of
    complete trees or a quadtree on a Kronecker workload with any 1-D interval factors, each
    axis optionally measured in a permuted cell ``order`` (``orders[i]``, None
    for the identity): Var(q) = sum_j prod_i u_i(q_i, j_i) M_j with M_j = 1 / lambda_j
    (:func:`level_tuple_lambdas`; the constant term dropped when N is
    public). The total is sum_j prod_i (sum_q u_i(q, j_i)) M_j; the maximum enumerates the
    distinct rows of u_1 against the contracted other axes (None when ``want_max`` is False).
    ValueError when the workload needs an unmeasured subspace."""
    return _grid_tree_summary(mechanism, workload, orders, want_max)[:2]


def grid_tree_max(mechanism: Mechanism, workload: Workload) -> QueryMax:
    """The largest per-query variance of the BLUE (counts^2) of a Kronecker product of
    complete trees or a quadtree on a Kronecker workload of interval factors, and its query
    (index in the workload's np.kron order): :func:`grid_tree_summary`'s maximum, without
    listing the queries. ValueError as grid_tree_summary; TooManyQueries when the distinct
    query rows are too many to score (MAX_ENUMERATED, MAX_PAIRS)."""
    _, best, arg = _grid_tree_summary(mechanism, workload, None, True)
    if best is None or arg is None or not isinstance(workload, KroneckerWorkload):
        raise ValueError("the workload must be a Kronecker workload over the strategy's grid")
    sizes = tuple(f.n_queries for f in workload.factors)
    return QueryMax(float(best), int(np.ravel_multi_index(arg, sizes)))


# ----------------------------------------------------------------------------- the engines
def _grid_tree_refusal(mechanism: Mechanism, workload: Workload | None,
                       kinds: tuple[str, ...] = KRON_TREE_WORKLOADS) -> str | None:
    """Why the grid-tree error (per-axis ``kinds``) does not serve this workload, or None."""
    if not isinstance(workload, KroneckerWorkload):
        return "a Kronecker product of 1-D workloads only"
    if not all(f.kind in kinds for f in workload.factors):
        return f"every axis workload must be one of {kinds}"
    if workload.grid_shape != _grid_strategy(mechanism).grid_shape:
        return "the workload's grid differs from the strategy's"
    return None


_GRID_ERROR = Capability("error", "blue", ("kron",), "O(prod_i (h_i + 1))")
_GRID_MAX = Capability("max", "blue", ("kron",),
                       f"O(sum_i q_i h_i + q_1 R h_1), R = prod_(i>1) q_i (distinct rows); "
                       f"q_i <= {MAX_TREE_MAX_QUERIES}")


class KronTreeEngine(Engine):
    """Kronecker products of complete level-uniform trees, budgets per level tuple: the BLUE
    by per-axis Haar transforms, the exact error from the level-tuple information, the
    largest per-query error without listing the queries."""

    name = "kron_tree"
    structure = "Kronecker product of complete trees, budgets per level tuple"
    capabilities = (Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n h) per trial"),
                    _GRID_ERROR, _GRID_MAX)

    def claims(self, mechanism: Mechanism) -> bool:
        return is_kron_tree_mechanism(mechanism)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        if task == "estimate":
            return None
        if task != "max":
            return _grid_tree_refusal(mechanism, workload)
        why = _grid_tree_refusal(mechanism, workload, GRID_TREE_MAX_WORKLOADS)
        if (why is None and isinstance(workload, KroneckerWorkload)
                and max(f.n_queries for f in workload.factors) > MAX_TREE_MAX_QUERIES):
            why = (f"the largest per-query error scores at most {MAX_TREE_MAX_QUERIES} "
                   "queries per axis")
        return why

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        return kron_tree_blue(mechanism, y)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        return kron_tree_error(mechanism, workload)

    def maximum(self, mechanism: Mechanism, workload: Workload, estimator: str,
                dense: bool = False) -> QueryMax:
        try:
            return grid_tree_max(mechanism, workload)
        except TooManyQueries as exc:
            raise Declined(str(exc)) from None


class QuadtreeEngine(KronTreeEngine):
    """Quadtrees (one tree over the grid's Morton order, budgets per level): Honaker's
    recursions on the Morton tree, the exact errors as for Kronecker trees."""

    name = "quadtree"
    structure = "quadtree, budgets per level"
    capabilities = (Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n) per trial"),
                    _GRID_ERROR, _GRID_MAX)

    def claims(self, mechanism: Mechanism) -> bool:
        return is_quadtree_mechanism(mechanism)

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        return quadtree_blue(mechanism, y)
