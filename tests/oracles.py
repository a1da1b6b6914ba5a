"""Slow, obviously-correct reference constructions shared by the tests (no library code)."""

import heapq
import itertools
import math
from functools import lru_cache

import numpy as np
import scipy.linalg as sla


def tree_matrix(branching):
    """Dense 0/1 strategy of the level-uniform tree ([RTS] Def. IV.1) and each row's level:
    level order, root first, left to right; node i of level l covers bins [i w, (i+1) w)."""
    n = math.prod(branching)
    rows, levels, m = [], [], 1
    for level in range(len(branching) + 1):
        if level:
            m *= branching[level - 1]
        width = n // m
        for i in range(m):
            row = np.zeros(n)
            row[i * width:(i + 1) * width] = 1.0
            rows.append(row)
            levels.append(level)
    return np.array(rows), np.array(levels)


# ---------------------------------------------------------------------------------------------
# Brute force over neighbouring datasets
# ---------------------------------------------------------------------------------------------
def _datasets(n_bins: int, max_records: int = 2):
    """Every dataset of 1..max_records records over the bins (multisets of bin indices)."""
    for r in range(1, max_records + 1):
        yield from itertools.combinations_with_replacement(range(n_bins), r)


def _neighbour_datasets(ds: tuple, n_bins: int, model: str):
    if model == "swap":  # one record changes its value (bin)
        for i, b in itertools.product(range(len(ds)), range(n_bins)):
            if b != ds[i]:
                yield ds[:i] + (b,) + ds[i + 1:]
    else:  # one record removed, or one record added
        for i in range(len(ds)):
            yield ds[:i] + ds[i + 1:]
        for b in range(n_bins):
            yield ds + (b,)


@lru_cache(maxsize=None)
def neighbour_differences(n_bins: int, model: str) -> np.ndarray:
    """h - h' for every neighbouring pair (h, h') of datasets of 1 or 2 records (deduplicated;
    the maximum over pairs is unchanged by removing repeated differences)."""
    diffs = set()
    for ds in _datasets(n_bins):
        h = np.bincount(np.array(ds, dtype=int), minlength=n_bins)
        for nb in _neighbour_datasets(ds, n_bins, model):
            h2 = np.bincount(np.array(nb, dtype=int), minlength=n_bins)
            diffs.add(tuple(h - h2))
    if not diffs:  # one bin under swap: no record can change its value
        return np.zeros((0, n_bins))
    return np.array(sorted(diffs), dtype=float)


def brute_loss(a_dense: np.ndarray, weights, model: str, p: int) -> float:
    """max over neighbouring datasets of ||diag(w) A (h - h')||_p."""
    a = np.asarray(a_dense, dtype=float)
    w = np.asarray(weights, dtype=float)
    d = neighbour_differences(a.shape[1], model)
    if d.shape[0] == 0:
        return 0.0
    changes = (d @ a.T) * w[None, :]  # (pairs, rows)
    return float(np.max(np.linalg.norm(changes, ord=p, axis=1)))


def slope_trick_l1(y, w, integer):
    """Weighted isotonic median regression by the heap-based slope trick (independent of the
    partitioning method). Real: each point adds |c - y| (breakpoint y, jump 2w); integer: the
    interpolated |.| has breakpoints floor(y) (weight w(1 - f)) and floor(y) + 1 (weight w f).
    After adding, w units of slope are popped from the top; the top is the stage's argmin."""
    heap, tops = [], []
    for yi, wi in zip(y, w):
        if integer:
            f = yi - math.floor(yi)
            for pos, wt in ((math.floor(yi), wi * (1 - f)), (math.floor(yi) + 1, wi * f)):
                if wt > 0:
                    heapq.heappush(heap, [-float(pos), 2 * wt])
        else:
            heapq.heappush(heap, [-float(yi), 2 * wi])
        rem = wi
        while rem > 1e-15 * wi:
            if heap[0][1] <= rem:
                rem -= heapq.heappop(heap)[1]
            else:
                heap[0][1] -= rem
                rem = 0.0
        tops.append(-heap[0][0])
    c = np.array(tops)
    c = np.minimum.accumulate(c[::-1])[::-1]  # c_t = min(top_t, c_{t+1})
    return c


def factorisations(n):
    """Ordered factorisations of n into factors >= 2 (n = 1: the empty one), by recursion."""
    if n == 1:
        return [()]
    return [(k,) + r for k in range(2, n + 1) if n % k == 0 for r in factorisations(n // k)]


# ---------------------------------------------------------------------------------------------
# Dense generalised least squares: the BLUE of any queries, and its causal restriction
# ---------------------------------------------------------------------------------------------
def constrained_gls(a, var, w, rtol: float = 1e-8):
    """The BLUE of the linear queries ``w`` (q, n) from y = a x + z, Var z = diag(var)
    (var 0: an exact row, an equality constraint; inf: an unmeasured row, ignored), by the
    textbook construction, no library code.

    Exact rows E: x = x0 + N u with x0 = E^+ y_E and N a basis of null(E). Noisy rows B,
    whitened G = V^-1/2 B N: the BLUE of w'x is w'x0 + d'V^-1/2 (y_B - B x0) with d the
    minimum-norm solution of G'd = N'w, variance d'd; w'x is identified (has an unbiased
    linear estimate) iff that system is consistent (relative residual <= ``rtol``).

    Returns (coef (q, m): estimate = coef @ y, zero on unmeasured rows, NaN for queries not
    identified; variances (q,), inf where not identified; identified (q,) bool). y on the
    exact rows must be consistent (E x = y_E for some x), as real answers are."""
    a = np.atleast_2d(np.asarray(a, dtype=float))
    var = np.asarray(var, dtype=float)
    w = np.atleast_2d(np.asarray(w, dtype=float))
    m, n = a.shape
    q = w.shape[0]
    exact = var == 0
    noisy = np.isfinite(var) & (var > 0)
    e = a[exact]
    if exact.any():
        basis = sla.null_space(e)
        e_pinv = np.linalg.pinv(e)
    else:
        basis, e_pinv = np.eye(n), np.zeros((n, 0))
    c = w @ basis                                             # (q, k): N'w per query
    sd = np.sqrt(var[noisy])
    g = (a[noisy] @ basis) / sd[:, None]                      # (noisy, k)
    # rounding of the null-space basis leaves ~1e-17 where B N and N'w are exactly 0 (a noisy
    # row that repeats an exact one): zero them on an absolute scale, or lstsq (whose rcond
    # is relative to g's own largest singular value) divides rounding by rounding
    g[np.abs(g) <= 1e-12 * max(1.0, float(np.abs(a[noisy] / sd[:, None]).max(initial=0.0)))] = 0.0
    c[np.abs(c) <= 1e-12 * max(1.0, float(np.abs(w).max(initial=0.0)))] = 0.0
    if g.size and basis.shape[1]:
        d = np.linalg.lstsq(g.T, c.T, rcond=1e-10)[0]         # (noisy, q), minimum norm
        resid = np.linalg.norm(g.T @ d - c.T, axis=0)
    else:
        d = np.zeros((int(noisy.sum()), q))
        resid = np.linalg.norm(c, axis=1)
    identified = resid <= rtol * np.maximum(1.0, np.linalg.norm(c, axis=1))
    coef = np.zeros((q, m))
    coef_b = (d / sd[:, None]).T                              # (q, noisy)
    coef[:, noisy] = coef_b
    coef[:, exact] = (w - coef_b @ a[noisy]) @ e_pinv
    variances = np.sum(d * d, axis=0)
    coef[~identified] = np.nan
    variances[~identified] = np.inf
    return coef, variances, identified


def completion_steps(a) -> np.ndarray:
    """1 + the last non-zero column of each row (0 for an empty row): the step at which a
    row (or a query) is complete."""
    nz = np.atleast_2d(np.asarray(a)) != 0
    n = nz.shape[1]
    return np.where(nz.any(axis=1), n - np.argmax(nz[:, ::-1], axis=1), 0)


def causal_gls(a, var, w, rtol: float = 1e-8):
    """The causal BLUE of the queries ``w`` (q, n): query j, answered at step
    t_j = completion_steps(w)[j], is the BLUE (:func:`constrained_gls`) from the rows
    complete by t_j only (those whose last non-zero column is before t_j). Same returns as
    :func:`constrained_gls`."""
    a = np.atleast_2d(np.asarray(a, dtype=float))
    var = np.asarray(var, dtype=float)
    w = np.atleast_2d(np.asarray(w, dtype=float))
    row_steps, query_steps = completion_steps(a), completion_steps(w)
    coef = np.zeros((w.shape[0], a.shape[0]))
    variances = np.zeros(w.shape[0])
    identified = np.ones(w.shape[0], dtype=bool)
    for t in np.unique(query_steps):
        qs = np.flatnonzero(query_steps == t)
        rows = np.flatnonzero(row_steps <= t)
        sub = constrained_gls(a[rows][:, :t], var[rows], w[qs][:, :t], rtol)
        coef[np.ix_(qs, rows)] = sub[0]
        coef[qs[~sub[2]]] = np.nan
        variances[qs], identified[qs] = sub[1], sub[2]
    return coef, variances, identified


def dense_1d_workload(kind, n, pairs=None):
    """The dense matrix of a 1-D workload written from its definition: prefix (inclusive,
    lower-triangular ones), identity, total, all_range (every [a, b], lexicographic) or
    ranges (the given inclusive pairs)."""
    if kind == "prefix":
        return np.tril(np.ones((n, n)))
    if kind == "identity":
        return np.eye(n)
    if kind == "total":
        return np.ones((1, n))
    if kind == "all_range":
        pairs = [(a, b) for a in range(n) for b in range(a, n)]  # lexicographic
    out = np.zeros((len(pairs), n))
    for i, (a, b) in enumerate(pairs):
        out[i, a:b + 1] = 1.0
    return out


def laplace_gls_error(a, w) -> float:
    """Total squared error of the GLS (BLUE) of the workload ``w`` (dense, queries x bins) from
    the strategy ``a`` (dense) under Laplace noise at eps = 1, add/remove: every row's noise
    has scale s = the largest column l1 norm (variance 2 s^2), so the error is
    tr(W (A'A)^-1 W') 2 s^2, computed by a dense inverse."""
    a = np.asarray(a, dtype=float)
    sens = np.abs(a).sum(axis=0).max()
    cov = 2.0 * sens**2 * np.linalg.inv(a.T @ a)
    return float(np.sum((np.asarray(w, dtype=float) @ cov) * w))
