"""The BLUE of a Kronecker product of level-uniform trees on a grid, without a grid-sized
matrix (issue 15 item 3; MATH.md section 8).

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
"""

from __future__ import annotations

import math

import numpy as np

from ..mechanism import Mechanism
from ..strategies import KroneckerStrategy, LevelUniformTree, QuadtreeStrategy
from ..workloads import along_axis
from .honaker import honaker_recursions

__all__ = ["is_kron_tree_mechanism", "is_quadtree_mechanism", "grid_trees", "level_tuple_of",
           "level_tuple_lambdas", "kron_tree_blue", "quadtree_blue", "haar_analysis",
           "haar_synthesis", "helmert"]


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
    leaves = est.efficient[..., tree.level_slice(tree.height)]
    return leaves[..., strat.morton]
