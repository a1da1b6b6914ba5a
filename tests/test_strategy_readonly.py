"""Every array a strategy exposes is read-only at the source.

A strategy's sensitivities and the engines' caches are computed from its matrix and its
structure arrays; an in-place edit of ``strategy.matrix.data`` (or of ``levels``, the ranges,
the coefficients, ...) would leave them stale. So every sparse matrix a strategy exposes is
canonical CSR (indices sorted within each row, no duplicates, no stored zeros) with read-only
``data`` / ``indices`` / ``indptr``, and its other exposed arrays are read-only as well: an
edit raises numpy's ValueError ("read-only"). Constructors copy what they are given, so a
caller's own matrix or arrays are neither frozen nor shared.

The canonical form is checked here from the raw CSR arrays (not scipy's flags), and the
matrices against dense matrices built in the test.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from dptree_opt import Mechanism, expected_error, strategies, workloads
from dptree_opt.strategies import optimized, scaled
from dptree_opt.strategies.base import frozen_csr

N = 8


def _matrix_constructors():
    """(label, zero-argument builder) for every strategy constructor, at small sizes."""
    rng = np.random.default_rng(3)
    lower = np.tril(rng.uniform(0.5, 1.5, (6, 6)))
    graph = nx.DiGraph([("r", "a"), ("r", "b"), ("a", "x"), ("a", "y"), ("b", "z")])
    prefix_grid = workloads.kron(workloads.prefix(4), workloads.prefix(4))
    return [
        ("Strategy", lambda: strategies.Strategy(sp.random(5, 4, density=0.6, random_state=1,
                                                           format="csr") + sp.eye(5, 4))),
        ("histogram", lambda: strategies.histogram(N)),
        ("histogram grid", lambda: strategies.histogram((3, 4))),
        ("prefix_sums", lambda: strategies.prefix_sums(N)),
        ("tree", lambda: strategies.tree(12, [3, 2, 2])),
        ("binary_tree", lambda: strategies.binary_tree(N)),
        ("truncated_tree", lambda: strategies.truncated_tree(6, [2, 2, 2])),
        ("hierarchy", lambda: strategies.hierarchy(graph)),
        ("haar 2^L", lambda: strategies.haar(N)),
        ("haar other n", lambda: strategies.haar(6)),
        ("quadtree", lambda: strategies.quadtree((4, 4))),
        ("kron", lambda: strategies.kron(strategies.tree(4, 2), strategies.haar(4))),
        ("toeplitz", lambda: strategies.toeplitz([1.0, 0.5, 0.0, 0.25, 0.125])),
        ("toeplitz row_scale", lambda: strategies.toeplitz([1.0, 0.5, 0.25],
                                                          row_scale=[1.0, 2.0, 3.0])),
        ("sqrt_factorization", lambda: strategies.sqrt_factorization(N)),
        ("blt", lambda: strategies.blt(N, buffers=2)),
        ("banded coefficients", lambda: strategies.banded([1.0, -0.5, 0.25], 2, n=N)),
        ("banded matrix", lambda: strategies.banded(lower, 3)),
        ("p_identity", lambda: strategies.p_identity(rng.uniform(0.0, 1.0, (2, 6)))),
        ("gaussian_optimal", lambda: optimized.gaussian_optimal(workloads.prefix(N),
                                                                max_iter=5).strategy),
        ("laplace_p_identity", lambda: optimized.laplace_p_identity(
            workloads.prefix(N), max_iter=5).strategy),
        ("gaussian_optimal_implicit", lambda: strategies.gaussian_optimal_implicit(
            workloads.prefix(N), max_iter=20).strategy),
        ("kron_p_identity", lambda: strategies.kron_p_identity(prefix_grid,
                                                               max_iter=5).strategy),
        ("kron_gaussian_optimal", lambda: strategies.kron_gaussian_optimal(
            prefix_grid, max_iter=5).strategy),
        ("nested", lambda: strategies.nested([2, 3], [[[1.0, 1.0], [1.0, -0.5]], [[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [0.5, -1.0, 3.0]]])),
        ("scaled integer (dense)", lambda: scaled.scaled_integer(
            strategies.p_identity(np.full((1, 6), 0.5)))),
        ("scaled integer (toeplitz)", lambda: scaled.scaled_integer(
            strategies.sqrt_factorization(N))),
    ]


CONSTRUCTORS = _matrix_constructors()
IDS = [label for label, _ in CONSTRUCTORS]


def _strategies(build):
    """The strategy and its copy with a total row appended (what a mechanism with a public
    total releases): both must be frozen."""
    s = build()
    return [s, s.with_total_row()]


def _assert_canonical(a) -> None:
    """Sorted, distinct column indices within each row and no stored zero, from the raw
    arrays."""
    assert isinstance(a, sp.csr_matrix)
    assert a.data.dtype == np.float64
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    same_row = rows[1:] == rows[:-1]
    assert np.all(np.diff(a.indices.astype(np.int64))[same_row] > 0)
    assert np.all(a.data != 0)


@pytest.mark.parametrize("build", [b for _, b in CONSTRUCTORS], ids=IDS)
def test_matrix_is_canonical_and_read_only(build):
    for s in _strategies(build):
        a = s.matrix
        _assert_canonical(a)
        dense = a.toarray()
        for arr in (a.data, a.indices, a.indptr):
            assert not arr.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            a.data[0] = 5
        with pytest.raises(ValueError, match="read-only"):
            a.indices[0] = 1
        with pytest.raises(ValueError, match="read-only"):
            a.indptr[1] = 0
        with pytest.raises(ValueError, match="read-only"):
            a.data *= 1000.0
        # scipy's in-place canonicalisations are no-ops on it; reading works as usual
        a.sort_indices()
        a.sum_duplicates()
        np.testing.assert_array_equal(a.toarray(), dense)
        assert s.matrix is a  # built once, the same object every time
        edited = a.copy()     # a copy is the user's to edit
        edited.data[0] = 5.0
        np.testing.assert_array_equal(s.matrix.toarray(), dense)


@pytest.mark.parametrize("build", [b for _, b in CONSTRUCTORS], ids=IDS)
def test_exposed_arrays_are_read_only(build):
    """levels, and every structure array a strategy class exposes (ranges, parents, depths,
    coefficients, row scales, BLT parameters, the band, dual point, Morton order, level
    sizes, ...)."""
    names = ("levels", "lo", "hi", "parent", "depth", "bin_row", "coefficients", "row_scale",
             "theta", "omega", "diagonals", "dual_point", "column_norms_squared", "morton",
             "level_sizes", "level_widths", "level_offsets")
    for s in _strategies(build):
        seen = 0
        for name in names:
            if not hasattr(type(s), name) and name not in vars(s):
                continue
            arr = getattr(s, name)
            seen += 1
            assert isinstance(arr, np.ndarray) and not arr.flags.writeable, name
            before = arr.copy()
            with pytest.raises(ValueError, match="read-only"):
                arr[0] = 5
            np.testing.assert_array_equal(getattr(s, name), before, err_msg=name)
        assert seen >= 1


def test_a_level_uniform_tree_exposes_every_structure_array_read_only():
    t = strategies.tree(12, [3, 2, 2])
    for arr in (t.levels, t.lo, t.hi, t.parent, t.depth, t.bin_row, t.level_sizes,
                t.level_widths, t.level_offsets):
        with pytest.raises(ValueError, match="read-only"):
            arr[-1] = 0


def test_toeplitz_family_exposes_its_parameters_read_only():
    for s in (strategies.toeplitz([1.0, 0.5, 0.25]), strategies.sqrt_factorization(N),
              strategies.blt(N, buffers=2)):
        with pytest.raises(ValueError, match="read-only"):
            s.coefficients[0] = 5
    b = strategies.blt(N, buffers=2)
    for arr in (b.theta, b.omega):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 0.5
    r = strategies.toeplitz([1.0, 0.5], row_scale=[1.0, 2.0])
    with pytest.raises(ValueError, match="read-only"):
        r.row_scale[0] = 5


def test_the_callers_matrix_is_copied_not_frozen():
    """Strategy(M) copies M: editing M afterwards changes neither the strategy's matrix nor
    its error, and M stays writeable."""
    m = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    s = strategies.Strategy(m)
    mech = Mechanism(s, epsilon=1.0)
    before = expected_error(workloads.identity(3), mech)
    assert m.data.flags.writeable
    m.data[:] = 100.0
    np.testing.assert_array_equal(s.matrix.toarray(), [[1, 1, 0], [0, 1, 0], [0, 0, 1]])
    assert expected_error(workloads.identity(3), mech) == before


def test_the_callers_arrays_are_copied_not_frozen():
    """IntervalStrategy and the implicit optimum copy the arrays they are given."""
    lo, hi = np.array([0, 0, 2]), np.array([4, 2, 4])
    parent, depth, bin_row = np.array([-1, 0, 0]), np.array([0, 1, 1]), np.array([1, 1, 2, 2])
    s = strategies.IntervalStrategy(lo, hi, parent, np.array([1, 1, 1]), n_bins=4,
                                    depth=depth, bin_row=bin_row, name="mine")
    for arr in (lo, hi, parent, depth, bin_row):
        assert arr.flags.writeable
    lo[:] = 3
    np.testing.assert_array_equal(s.lo, [0, 0, 2])
    opt = strategies.gaussian_optimal_implicit(workloads.prefix(N), max_iter=20).strategy
    d = np.array(opt.dual_point)
    again = strategies.ImplicitFactorization(*_tridiagonal_prefix(N), d)
    d[:] = 1.0
    np.testing.assert_array_equal(again.dual_point, opt.dual_point)


def _tridiagonal_prefix(n):
    """G^-1 = tridiag(-1, [1, 2, .., 2], -1) and diag(G) = n - i of the prefix workload
    (G = P'P, G_ij = n - max(i, j))."""
    ga = np.full(n, 2.0)
    ga[0] = 1.0
    return ga, -np.ones(n - 1), n - np.arange(n, dtype=float)


def test_frozen_csr_is_canonical_from_a_messy_matrix():
    """Duplicates summed, indices sorted, stored zeros dropped; the input left as it was."""
    data = np.array([1.0, 2.0, 0.0, 3.0, 4.0])
    indices = np.array([2, 0, 1, 2, 0])   # row 0: columns 2, 0, 1 (a zero); row 1: 2, 0
    indptr = np.array([0, 3, 5])
    messy = sp.csr_matrix((data, indices, indptr), shape=(2, 3))
    messy = sp.csr_matrix((np.append(messy.data, 5.0), np.append(messy.indices, 2),
                           np.array([0, 3, 6])), shape=(2, 3))  # row 1: column 2 twice
    a = frozen_csr(messy)
    _assert_canonical(a)
    np.testing.assert_array_equal(a.toarray(), [[2.0, 0.0, 1.0], [4.0, 0.0, 8.0]])
    assert messy.data.flags.writeable and messy.nnz == 6
    with pytest.raises(ValueError, match="read-only"):
        a.data[0] = 1.0
    again = frozen_csr(a, copy=False)   # already frozen and canonical: nothing to write
    np.testing.assert_array_equal(again.toarray(), a.toarray())
