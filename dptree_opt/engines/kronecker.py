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
"""

from __future__ import annotations

import math

import numpy as np

from ..mechanism import Mechanism
from ..strategies import KroneckerStrategy, LevelUniformTree, QuadtreeStrategy
from ..workloads import KroneckerWorkload, along_axis
from .base import ANY_WORKLOAD, Capability, Engine
from .honaker import honaker_recursions
from .tree_error import haar_workload_weights

__all__ = ["KronTreeEngine", "QuadtreeEngine", "is_kron_tree_mechanism", "is_quadtree_mechanism", "grid_trees", "level_tuple_of",
           "level_tuple_lambdas", "kron_tree_blue", "quadtree_blue", "haar_analysis",
           "haar_synthesis", "helmert", "is_grid_tree_mechanism", "kron_tree_error",
           "axis_workload_weights", "axis_interval_weights", "kron_box_variances",
           "KRON_TREE_WORKLOADS"]



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


def grid_trees(strategy) -> tuple[LevelUniformTree, ...]:
    """The per-axis trees of a Kronecker product of trees or of a quadtree."""
    return strategy.factors if isinstance(strategy, KroneckerStrategy) else strategy.axis_trees


def level_tuple_of(strategy, level: int) -> tuple[int, ...]:
    """The per-axis levels (l_1, .., l_d) of a budget level: the mixed-radix code of a
    Kronecker product, the diagonal (l, .., l) of a quadtree."""
    if isinstance(strategy, QuadtreeStrategy):
        return (level,) * len(strategy.axis_trees)
    return strategy.level_tuple(level)


def _level_tuple_variances(mechanism: Mechanism, trees) -> np.ndarray:
    """v_l per level tuple (inf where nothing is measured)."""
    var = np.full(tuple(t.height + 1 for t in trees), np.inf)
    for code, v in mechanism.level_variances.items():
        var[level_tuple_of(mechanism.released, code)] = v
    return var


def level_tuple_lambdas(mechanism: Mechanism) -> tuple[np.ndarray, bool]:
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


def helmert(k: int) -> np.ndarray:
    """The k x k orthonormal Helmert matrix: row 0 = 1 / sqrt(k); row i = (1, .., 1, -i, 0,
    ..) / sqrt(i (i + 1)) with i ones."""
    H = np.zeros((k, k))
    H[0] = 1.0 / math.sqrt(k)
    for i in range(1, k):
        H[i, :i] = 1.0
        H[i, i] = -float(i)
        H[i] /= math.sqrt(i * (i + 1))
    return H


def _levels_of_coefficients(ks) -> np.ndarray:
    """Detail level j of every coefficient in haar_analysis order: 0 (the root's), then
    n_(j-1) (k_j - 1) coefficients of level j for j = 1..h."""
    out = [np.zeros(1, np.int64)]
    n = 1
    for j, k in enumerate(ks, start=1):
        out.append(np.full(n * (k - 1), j, np.int64))
        n *= k
    return np.concatenate(out)


def haar_analysis(ks, X: np.ndarray) -> np.ndarray:
    """Orthonormal tree-Haar coefficients of the columns of X (shape (K, r), K = prod ks):
    root coefficient first, then the details of level 1, 2, .., h (node order)."""
    a = X
    details = []
    n = a.shape[0]
    for k in reversed(ks):
        n //= k
        t = np.einsum("ij,njr->nir", helmert(k), a.reshape(n, k, -1))
        a = t[:, 0, :]
        details.append(t[:, 1:, :].reshape(n * (k - 1), -1))
    return np.concatenate([a] + details[::-1])


def haar_synthesis(ks, C: np.ndarray) -> np.ndarray:
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


def kron_tree_blue(mechanism: Mechanism, y) -> np.ndarray:
    """The BLUE of the grid's cells (row-major, shape (cells,), or (trials, cells) for y of
    shape (trials, rows)) for a Kronecker product of complete trees with a variance per level
    tuple (module docstring)."""
    if not is_kron_tree_mechanism(mechanism):
        raise ValueError("kron_tree_blue needs a Kronecker product of complete level-uniform "
                         "trees with budgets per level tuple")
    strat = mechanism.released
    y = np.asarray(y, dtype=float)
    if y.ndim not in (1, 2) or y.shape[-1] != strat.n_rows:
        raise ValueError(f"y must have {strat.n_rows} entries per trial, got shape {y.shape}")
    var = np.asarray(mechanism.variances, dtype=float)
    exact = var == 0
    noisy = np.isfinite(var) & ~exact
    if not np.all(np.isfinite(y[..., noisy | exact])):
        raise ValueError("y has NaN or infinite answers on measured rows")
    lam, exact_total = level_tuple_lambdas(mechanism)
    trees = strat.factors
    yy = np.atleast_2d(y)
    weighted = np.where(noisy, yy / np.where(noisy, var, 1.0), 0.0)
    b = strat.rmatvec(weighted.T).T                                 # A' V^-1 y per trial
    grid = b.reshape((b.shape[0],) + strat.grid_shape)
    for i, t in enumerate(trees):
        grid = along_axis(grid, i + 1, lambda X, ks=t.branching: haar_analysis(ks, X))
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
        coef = along_axis(coef, i + 1, lambda X, ks=t.branching: haar_synthesis(ks, X))
    out = coef.reshape(coef.shape[0], -1)
    return out[0] if y.ndim == 1 else out


def quadtree_blue(mechanism: Mechanism, y) -> np.ndarray:
    """The BLUE of the row-major cells for a quadtree: Honaker's recursions on its Morton
    tree (``QuadtreeStrategy.tree``), the leaves read back in row-major order. O(rows)."""
    if not is_quadtree_mechanism(mechanism):
        raise ValueError("quadtree_blue needs a QuadtreeStrategy with budgets per level and "
                         "noisy or unmeasured non-root levels")
    strat = mechanism.released
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


def is_grid_tree_mechanism(mechanism: Mechanism) -> bool:
    """A Kronecker product of complete trees or a quadtree, budgets per level (tuple)."""
    return is_kron_tree_mechanism(mechanism) or is_quadtree_mechanism(mechanism)


def axis_workload_weights(tree: LevelUniformTree, workload) -> np.ndarray:
    """q_0..q_h of a 1-D workload factor on one axis's tree (``error.tree.
    haar_workload_weights``; the total: (K, 0, .., 0), all of 1'1 on the constants)."""
    if workload.kind == "total":
        q = np.zeros(tree.height + 1)
        q[0] = float(tree.n_bins)   # (1'1)^2 / K on the constants, nothing on D_j, j >= 1
        return q
    return haar_workload_weights(tree.branching, workload.kind)


def kron_tree_error(mechanism: Mechanism, workload: KroneckerWorkload) -> float:
    """sum_q Var(answer_q) of the BLUE for ``workload`` (module docstring). Raises
    ValueError when the structure does not apply or the grid is not identified."""
    if not is_grid_tree_mechanism(mechanism):
        raise ValueError("kron_tree_error needs a Kronecker product of complete level-uniform "
                         "trees or a quadtree, with budgets per level (tuple)")
    strat = mechanism.released
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
def axis_interval_weights(tree: LevelUniformTree, lo, hi) -> np.ndarray:
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


def kron_box_variances(mechanism: Mechanism, lo, hi) -> np.ndarray:
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
    acc = None                                    # contract axis by axis: (m, rest of lambda)
    for i, t in enumerate(trees):
        p = axis_interval_weights(t, lo_a[:, i], hi_a[:, i])    # (m, h_i + 1)
        big = (p > 1e-12 * t.n_bins).astype(float)          # above the rounding of p
        if acc is None:
            acc = np.einsum("mj,j...->m...", p, np.where(np.isinf(inv), 0.0, inv))
            bad = np.einsum("mj,j...->m...", big, np.isinf(inv).astype(float))
        else:
            acc = np.einsum("mj,mj...->m...", p, acc)
            bad = np.einsum("mj,mj...->m...", big, bad)
    if np.any(bad > 0):
        raise ValueError("a box depends on an unmeasured level tuple: the strategy cannot "
                         "estimate it")
    return acc[0] if single else acc


# ----------------------------------------------------------------------------- the engines
def _grid_tree_refusal(mechanism, workload) -> str | None:
    """Why kron_tree_error does not serve this grid workload, or None."""
    if not isinstance(workload, KroneckerWorkload):
        return "a Kronecker product of 1-D workloads only"
    if not all(f.kind in KRON_TREE_WORKLOADS for f in workload.factors):
        return f"every axis workload must be one of {KRON_TREE_WORKLOADS}"
    if workload.grid_shape != mechanism.released.grid_shape:
        return "the workload's grid differs from the strategy's"
    return None


_GRID_ERROR = Capability("error", "blue", ("kron",), "O(prod_i (h_i + 1))")


class KronTreeEngine(Engine):
    """Kronecker products of complete level-uniform trees, budgets per level tuple: the BLUE
    by per-axis Haar transforms, the exact error from the level-tuple information."""

    name = "kron_tree"
    structure = "Kronecker product of complete trees, budgets per level tuple"
    capabilities = (Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n h) per trial"),
                    _GRID_ERROR)

    def claims(self, mechanism) -> bool:
        return is_kron_tree_mechanism(mechanism)

    def refusal(self, task, mechanism, workload, estimator):
        return None if task == "estimate" else _grid_tree_refusal(mechanism, workload)

    def estimate(self, mechanism, y, workload, estimator):
        return kron_tree_blue(mechanism, y)

    def error(self, mechanism, workload, estimator, per_query, dense=False):
        return kron_tree_error(mechanism, workload)


class QuadtreeEngine(KronTreeEngine):
    """Quadtrees (one tree over the grid's Morton order, budgets per level): Honaker's
    recursions on the Morton tree, the exact error as for Kronecker trees."""

    name = "quadtree"
    structure = "quadtree, budgets per level"
    capabilities = (Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n) per trial"),
                    _GRID_ERROR)

    def claims(self, mechanism) -> bool:
        return is_quadtree_mechanism(mechanism)

    def estimate(self, mechanism, y, workload, estimator):
        return quadtree_blue(mechanism, y)
