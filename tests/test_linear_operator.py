"""Strategies and workloads as scipy LinearOperators (``aslinearoperator``): matvec, rmatvec,
matmat and rmatmat agree with the dense matrix at small K on random vectors (hypothesis), the
adjoint identity x'(A'y) = (Ax)'y holds, and a large structured strategy never forms a dense
matrix."""

from __future__ import annotations

import functools

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import LinearOperator

from dptree_opt import strategies, workloads
from dptree_opt.strategies.optimized import gaussian_optimal, laplace_p_identity
from dptree_opt.strategies.scaled import scaled_integer


def _hierarchy():
    g = nx.DiGraph()
    g.add_edges_from([("r", "a"), ("r", "b"), ("a", 0), ("a", 1), ("a", 2), ("b", 3), ("b", 4)])
    return strategies.hierarchy(g)


@functools.lru_cache(maxsize=1)
def _strategies() -> dict:
    """One strategy per constructor (and per class), with and without an appended total row."""
    p8 = workloads.prefix(8)
    out = {
        "histogram": strategies.histogram(6),
        "prefix_sums": strategies.prefix_sums(7),
        "tree": strategies.tree(12, [3, 4]),
        "binary_tree": strategies.binary_tree(8),
        "truncated_tree": strategies.truncated_tree(7, [2, 2, 2]),
        "hierarchy": _hierarchy(),
        "haar_pow2": strategies.haar(8),
        "haar_other": strategies.haar(6),
        "toeplitz": strategies.toeplitz([1.0, 0.5, -0.25, 0.125, 0.3]),
        "scaled_toeplitz": strategies.toeplitz([1.0, 0.5, 0.25, 0.1], row_scale=[1, 2, 3, 4]),
        "sqrt_factorization": strategies.sqrt_factorization(9),
        "blt": strategies.blt(8),
        "banded": strategies.banded([1.0, 0.5, 0.25], 2, 7),
        "banded_sqrt": strategies.banded_sqrt(7, 3),
        "banded_inverse_sqrt": strategies.banded_inverse_sqrt(7, 3),
        "normalise_columns": strategies.normalise_columns(strategies.banded_sqrt(6, 2)),
        "restarted": strategies.restarted(strategies.tree(4, 2), 10),
        "online_tree": strategies.online_tree(11),
        "nested": strategies.nested([2, 3], [[[1.0, 1.0], [1.0, -0.5]], [[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [0.5, -1.0, 3.0]]]),
        "kron": strategies.kron(strategies.tree(4, 2), strategies.prefix_sums(3)),
        "quadtree": strategies.quadtree((4, 4), 2),
        "p_identity": laplace_p_identity(p8, p=2).strategy,
        "gaussian_optimal_implicit": strategies.gaussian_optimal_implicit(p8).strategy,
        "kron_p_identity": strategies.kron_p_identity(workloads.prefix((3, 4)), p=1).strategy,
        "kron_gaussian_optimal": strategies.kron_gaussian_optimal(
            workloads.prefix((3, 4))).strategy,
        "integer_toeplitz": scaled_integer(strategies.sqrt_factorization(6), 8),
        "generic": strategies.Strategy(np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0]])),
    }
    dense_opt = gaussian_optimal(workloads.prefix(5)).strategy
    out["gaussian_optimal"] = dense_opt
    out["integer_matrix"] = scaled_integer(dense_opt, 8)
    for name in list(out):
        try:
            out[name + "+total"] = out[name].with_total_row()
        except (AttributeError, ValueError, NotImplementedError):
            pass
    return out


def _workloads() -> dict:
    return {
        "prefix": workloads.prefix(7),
        "identity": workloads.identity(5),
        "total": workloads.total(6),
        "all_range": workloads.all_range(5),
        "ranges": workloads.ranges(8, [(0, 3), (2, 7), (5, 5)]),
        "kron": workloads.prefix((3, 4)),
        "marginals": workloads.marginals((3, 2, 2), [(0,), (1, 2)]),
        "all_range_2d": workloads.all_range((3, 3)),
    }


_BASE = ["histogram", "prefix_sums", "tree", "binary_tree", "truncated_tree", "hierarchy",
         "haar_pow2", "haar_other", "toeplitz", "scaled_toeplitz", "sqrt_factorization", "blt",
         "banded", "kron", "quadtree", "p_identity", "gaussian_optimal_implicit",
         "kron_p_identity", "kron_gaussian_optimal", "integer_toeplitz", "generic",
         "gaussian_optimal", "integer_matrix", "banded_sqrt", "banded_inverse_sqrt",
         "normalise_columns", "restarted", "online_tree", "nested"]
STRATEGIES = _BASE + [n + "+total" for n in _BASE]
WORKLOADS = sorted(_workloads())
SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _vectors(seed: int, n: int, r: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n if r is None else (n, r))


def _check(op: LinearOperator, dense: np.ndarray, seed: int) -> None:
    m, n = dense.shape
    assert op.shape == (m, n)
    x, y = _vectors(seed, n), _vectors(seed + 1, m)
    X, Y = _vectors(seed + 2, n, 3), _vectors(seed + 3, m, 2)
    tol = dict(rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(dense).max())))
    np.testing.assert_allclose(op.matvec(x), dense @ x, **tol)
    np.testing.assert_allclose(op.rmatvec(y), dense.T @ y, **tol)
    np.testing.assert_allclose(op.matmat(X), dense @ X, **tol)
    np.testing.assert_allclose(op.rmatmat(Y), dense.T @ Y, **tol)
    np.testing.assert_allclose(op @ x, dense @ x, **tol)
    np.testing.assert_allclose(op.H @ y, dense.T @ y, **tol)
    # the adjoint identity on the operator alone: x'(A'y) = (Ax)'y
    lhs, rhs = float(x @ op.rmatvec(y)), float(op.matvec(x) @ y)
    assert abs(lhs - rhs) <= 1e-9 * max(1.0, np.linalg.norm(x) * np.linalg.norm(y)
                                        * float(np.abs(dense).sum()))


@pytest.mark.parametrize("name", STRATEGIES)
@SETTINGS
@given(seed=st.integers(0, 2**31))
def test_strategy_operator_matches_dense(name, seed):
    built = _strategies()
    if name not in built:
        pytest.skip(f"{name}: the strategy has no with_total_row")
    s = built[name]
    _check(s.aslinearoperator(), s.matrix.toarray(), seed)


@pytest.mark.parametrize("name", WORKLOADS)
@SETTINGS
@given(seed=st.integers(0, 2**31))
def test_workload_operator_matches_dense(name, seed):
    w = _workloads()[name]
    _check(w.aslinearoperator(), w.dense(), seed)


def test_every_public_constructor_is_covered():
    """Every public strategy constructor of ``strategies`` appears above (a new one must be
    added to the table)."""
    constructors = {"histogram", "prefix_sums", "tree", "binary_tree", "truncated_tree",
                    "hierarchy", "haar", "toeplitz", "sqrt_factorization", "blt", "banded",
                    "kron", "quadtree", "p_identity", "gaussian_optimal_implicit",
                    "kron_p_identity", "kron_gaussian_optimal", "banded_sqrt",
                    "banded_inverse_sqrt", "normalise_columns", "restarted", "online_tree",
                    "nested"}
    public = {n for n in strategies.__all__ if n[0].islower() and callable(
        getattr(strategies, n)) and n not in ("padded_height", "resolve_branching")}
    assert public <= constructors
    assert all(any(k.startswith(c) for k in STRATEGIES) for c in constructors)
    assert set(_strategies()) <= set(STRATEGIES)


def test_large_structured_strategies_form_no_dense_matrix():
    """At K = 2^20 the tree, Toeplitz and Kronecker operators apply in O(K) memory: the
    products match an independent computation (cumulative sums / a direct convolution of a
    few entries), and no dense K x K array could have been formed (it would be 8 TiB)."""
    K = 1 << 20
    x = np.random.default_rng(0).standard_normal(K)
    tree = strategies.tree(K, [1024, 1024]).aslinearoperator()
    y = tree.matvec(x)
    assert y.shape == (1 + 1024 + K,)
    assert np.isclose(y[0], x.sum()) and np.isclose(y[1], x[:1024].sum())
    np.testing.assert_allclose(y[-K:], x)
    u = np.zeros(tree.shape[0])
    u[1] = 1.0                              # A' e_1 = the indicator of the first node
    back = tree.rmatvec(u)
    assert back[:1024].sum() == 1024 and back[1024:].sum() == 0
    toe = strategies.sqrt_factorization(K).aslinearoperator()
    z = toe.matvec(x)
    c = np.array([1.0, 0.5, 0.375])          # C(2k, k) / 4^k
    assert np.isclose(z[2], c[2] * x[0] + c[1] * x[1] + c[0] * x[2])
