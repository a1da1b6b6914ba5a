"""Exact BLUE error of Kronecker strategies with one noise scale, and exact per-query maxima of
grid mechanisms (docs/math.md section 8; HDMM, McKenna et al. VLDB 2018, Sec. 6).

**Single noise scale.** The strategy is A = A_1 x .. x A_d (``strategies.kron`` of any 1-D
strategies: the flat grid ``histogram(shape)``, HDMM's Kronecker p-Identity, products of
Gaussian optima, ...) and every noisy row of A has the same variance v. The workload is
W = W_1 x .. x W_d (any 1-D factors). With X_i = A_i'A_i, C_i = X_i^+ and G_i = W_i'W_i the
BLUE has covariance v (x)_i C_i, so (docs/math.md section 8)

    E = v prod_i t_i,    t_i = tr(G_i C_i),      Var(q) = v prod_i s_i(q_i),  s_i = diag(W_i C_i W_i'),

(HDMM, McKenna et al. VLDB 2018, Sec. 6: the error of a Kronecker strategy on a Kronecker
workload factorises). Identifiability is per axis: the W x^ is estimable iff every W_i lies in
the row space of A_i (W_i (I - C_i X_i) = 0), checked; C_i is the inverse (Cholesky) or, for a
numerically singular X_i (Cholesky fails or max |C_i| max diag X_i > 1e12), the
pseudo-inverse (eigh, eigenvalues below 1e-10 of the largest dropped).

**Total rows.** The grand total 1 = 1_1 x .. x 1_d is a Kronecker vector too. Extra total rows
with summed precision tau (``with_total_row`` rows measured with noise) add tau 11' to the
information, and Sherman-Morrison keeps everything a product: with h_i = C_i 1_i,
b_i = 1_i'h_i, a_i = h_i'G_i h_i, r_i = W_i h_i, B = prod b_i, c = tau v,

    E = v (prod t_i - kappa prod a_i),     Var(q) = v (prod s_i(q_i) - kappa prod r_i(q_i)^2),
    kappa = c / (1 + c B)        (noisy totals),     kappa = 1 / B     (N exact: c -> inf, the
                                                                         constrained BLUE).

A public (exact) total row inside the product (a product of all-ones factor rows, e.g. the
root x root row under swap) is the same exact constraint: the constrained BLUE does not change
when a noisy measurement of 1'x is added or removed, so its core rows are treated as noisy with
variance v plus the constraint. When some X_i is singular the total must lie in every row
space (1_i in range(X_i)): otherwise it identifies a direction the product does not contain,
the error is not a product and the case is refused (``ValueError``). Cost: one n_i x n_i
Cholesky (or eigh) per distinct axis, O(sum_i n_i^3); per-query output O(prod q_i).

**Per-query maxima.** :func:`product_form_max` / :func:`kron_product_max` (the engine's
"max" task): the maximum over queries of the formula above without listing the prod q_i
queries: prod_i max s_i without totals; with the rank-one term, for each query of the first
axis the maximum of the linear function (x, y) -> s_1 x - kappa r_1^2 y over the other axes'
points (x, y) = (prod s_i, prod r_i^2), attained at a vertex of their convex hull. The
maxima of Kronecker trees and quadtrees are in :mod:`dptree_opt.engines.kronecker`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, overload

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike
import scipy.linalg as sla

from ..mechanism import Mechanism
from ..strategies import KroneckerStrategy, Strategy
from ..workloads import KroneckerWorkload, Workload, along_axis
from .base import ANY_WORKLOAD, Capability, Engine, QueryMax, TooManyQueries
from .kronecker import MAX_ENUMERATED
from .registry import Declined

__all__ = ["KronProductEngine", "kron_product_blue", "MAX_AXIS_BINS", "MAX_PER_QUERY",
           "TooManyQueries", "KronNoise", "kron_product_noise", "is_kron_product_mechanism",
           "kron_product_supports", "kron_product_error", "kron_product_max",
           "product_form_max", "product_form_argmax"]

MAX_AXIS_BINS = 4096        # per-axis dense X_i, G_i and inverse: n_i^2 floats, O(n_i^3)
MAX_PER_QUERY = 10**8       # per-query output (prod q_i floats)

_F: TypeAlias = "npt.NDArray[np.float64]"


def _kron_strategy(mechanism: Mechanism) -> KroneckerStrategy:
    """The mechanism's released strategy, which must be a Kronecker product."""
    strat = mechanism.released
    if not isinstance(strat, KroneckerStrategy):
        raise ValueError(f"a Kronecker strategy is needed, got {strat.name!r}")
    return strat


# ----------------------------------------------------------------- single noise scale
@dataclass(frozen=True)
class KronNoise:
    """The noise of a single-scale Kronecker mechanism: ``variance`` v of every noisy core row,
    ``exact_total`` (N known exactly: public total row, inside or appended) and
    ``total_precision`` tau (sum of 1 / variance of the noisy appended total rows)."""

    variance: float
    exact_total: bool
    total_precision: float


def kron_product_noise(mechanism: Mechanism) -> KronNoise | None:
    """The single-scale structure of ``mechanism`` (module docstring), or None when it does
    not apply: the released strategy is not a ``KroneckerStrategy``, its noisy core rows have
    different variances, some core row is unmeasured, or an exact core row is not an all-ones
    (total) row. O(rows)."""
    if not isinstance(mechanism, Mechanism):
        return None
    strat = mechanism.released
    if not isinstance(strat, KroneckerStrategy):
        return None
    var = np.asarray(mechanism.variances, dtype=float)
    n_core = math.prod(f.n_rows for f in strat.factors)
    core, extra = var[:n_core], var[n_core:]
    if not np.all(np.isfinite(core)):
        return None
    noisy = core > 0
    if not noisy.any():
        return None
    v = float(core[noisy][0])
    if np.any(np.abs(core[noisy] - v) > 1e-12 * v):
        return None
    exact = ~noisy
    exact_total = bool(exact.any())
    if exact_total and not np.all(strat.total_row_mask()[:n_core][exact]):
        return None
    exact_total = exact_total or bool(np.any(extra == 0))
    pos = extra[(extra > 0) & np.isfinite(extra)]
    return KronNoise(v, exact_total, float(np.sum(1.0 / pos)) if pos.size else 0.0)


def is_kron_product_mechanism(mechanism: Mechanism) -> bool:
    """Whether the single-scale Kronecker path applies (:func:`kron_product_noise`)."""
    return kron_product_noise(mechanism) is not None


def kron_product_supports(mechanism: Mechanism, workload: Workload | None,
                          per_query: bool = False) -> bool:
    """Whether :func:`kron_product_error` answers this pair: a single-scale Kronecker
    mechanism, a Kronecker workload over the same grid, axes of at most MAX_AXIS_BINS bins
    and (per query) at most MAX_PER_QUERY queries."""
    if not isinstance(workload, KroneckerWorkload) or not is_kron_product_mechanism(mechanism):
        return False
    strat = _kron_strategy(mechanism)
    if workload.grid_shape != strat.grid_shape or len(strat.factors) != len(workload.factors):
        return False
    if max(strat.grid_shape) > MAX_AXIS_BINS:
        return False
    return not per_query or workload.n_queries <= MAX_PER_QUERY


@dataclass(frozen=True)
class _Axis:
    """Per-axis moments: t = tr(G C); with totals a = h'Gh, b = 1'h; per query s, r."""

    t: float
    a: float
    b: float
    s: _F | None
    r: _F | None

    def per_query(self) -> tuple[_F, _F]:
        """(s, r): the per-query moments (r zeros when there is no total row)."""
        if self.s is None:
            raise ValueError("the per-query moments were not computed")
        return self.s, np.zeros_like(self.s) if self.r is None else self.r


def _axis_moments(factor: Strategy, w: Workload, totals: bool, per_query: bool) -> _Axis:
    """Moments of one axis (module docstring). O(n^3) for the inverse, O(n^2 + q) else."""
    n = factor.n_bins
    a_mat = factor.matrix
    x = np.asarray((a_mat.T @ a_mat).todense(), dtype=float)  # X_i = A_i'A_i, n x n
    g = w.gram_dense()                                       # G_i = W_i'W_i
    scale = float(np.max(np.diag(x))) if n else 1.0
    try:
        c = sla.cho_solve(sla.cho_factor(x, lower=True), np.eye(n))
        if not np.all(np.isfinite(c)):
            raise np.linalg.LinAlgError
        # a Cholesky of a numerically singular X_i can succeed: its inverse then explodes
        if float(np.max(np.abs(c))) * scale > 1e12:
            raise np.linalg.LinAlgError
    except np.linalg.LinAlgError:
        ev, u = np.linalg.eigh(x)
        keep = ev > 1e-10 * max(float(ev[-1]), 1e-300)
        uk = u[:, keep]
        c = (uk / ev[keep]) @ uk.T
        if totals:  # first: a total outside the product makes the error non-separable
            ones = np.ones(n)
            if float(np.sum((ones - uk @ (uk.T @ ones)) ** 2)) > 1e-9 * n:
                raise ValueError(
                    "a total row on a Kronecker strategy whose factor "
                    f"{factor.name!r} does not measure its axis total (1 not in its row "
                    "space): the total adds a direction outside the product and the error "
                    "does not factorise; refused")
        # W_i in the row space of A_i  <=>  tr((I - P) G) = 0 (G psd), P = U_k U_k'
        resid = float(np.trace(g) - np.einsum("ij,ik,kj->", uk, g, uk))
        if resid > 1e-9 * max(float(np.trace(g)), 1e-300):
            raise ValueError(f"the factor strategy {factor.name!r} does not identify the "
                             f"{w.kind!r} workload on its axis (rank-deficient: some queries "
                             "have no unbiased linear estimate)")
    c = 0.5 * (c + c.T)
    t = float(np.einsum("ij,ij->", c, g))
    a = b = 0.0
    r = None
    if totals:
        ones = np.ones(n)
        h = c @ ones
        b = float(ones @ h)
        a = float(h @ w.gram_matvec(h))
        if per_query:
            r = np.asarray(w.matvec(h), dtype=float)
    s = np.asarray(w.query_variances(c), dtype=float) if per_query else None
    return _Axis(t, a, b, s, r)


def _moments(mechanism: Mechanism, workload: Workload,
             per_query: bool) -> tuple[KronNoise, list[_Axis], float]:
    """(noise, per-axis moments, kappa) after the checks; identical axes computed once."""
    noise = kron_product_noise(mechanism)
    if noise is None:
        raise ValueError("the Kronecker-product error formula needs a Kronecker strategy whose "
                         "noisy rows all have one variance (exact rows only all-ones totals)")
    strat = _kron_strategy(mechanism)
    if (not isinstance(workload, KroneckerWorkload)
            or workload.grid_shape != strat.grid_shape
            or len(workload.factors) != len(strat.factors)):
        raise ValueError("the workload must be a Kronecker workload over the strategy's grid "
                         f"{strat.grid_shape}")
    if max(strat.grid_shape) > MAX_AXIS_BINS:
        raise ValueError(f"kron_product_error inverts each axis densely: refused for an axis "
                         f"of more than {MAX_AXIS_BINS} bins")
    totals = noise.exact_total or noise.total_precision > 0
    cache: dict[tuple[object, ...], _Axis] = {}
    axes: list[_Axis] = []
    for f, w in zip(strat.factors, workload.factors):
        key = (id(f), w.kind, w.n_bins, None if w.lo is None else w.lo.tobytes(),
               None if w.hi is None else w.hi.tobytes())
        if key not in cache:
            cache[key] = _axis_moments(f, w, totals, per_query)
        axes.append(cache[key])
    kappa = 0.0
    if totals:
        big_b = math.prod(ax.b for ax in axes)
        if noise.exact_total:
            kappa = 1.0 / big_b
        else:
            cc = noise.total_precision * noise.variance
            kappa = cc / (1.0 + cc * big_b)
    return noise, axes, kappa


@overload
def kron_product_error(mechanism: Mechanism, workload: Workload,
                       per_query: Literal[False] = ...) -> float: ...
@overload
def kron_product_error(mechanism: Mechanism, workload: Workload,
                       per_query: Literal[True]) -> _F: ...
@overload
def kron_product_error(mechanism: Mechanism, workload: Workload,
                       per_query: bool) -> float | _F: ...
def kron_product_error(mechanism: Mechanism, workload: Workload,
                       per_query: bool = False) -> float | _F:
    """Exact expected squared error (counts^2) of the BLUE of a single-noise-scale Kronecker
    mechanism on a Kronecker workload: the total sum_q Var(answer_q) (float) or, with
    ``per_query``, every query's variance in the workload's (np.kron) order, shape
    (prod q_i,). Formula, identifiability and the total rows: module docstring. ValueError
    when the structure does not apply, a factor does not identify its workload factor, or a
    total row makes the error non-separable."""
    noise, axes, kappa = _moments(mechanism, workload, per_query)
    v = noise.variance
    if not per_query:
        e = math.prod(ax.t for ax in axes)
        if kappa:
            e -= kappa * math.prod(ax.a for ax in axes)
        return float(v * max(e, 0.0))
    if workload.n_queries > MAX_PER_QUERY:
        raise TooManyQueries(f"per-query output of {workload.n_queries} > {MAX_PER_QUERY} "
                             "queries refused (use the total, or the largest per-query error)")
    var = np.ones(1)
    for ax in axes:
        var = np.multiply.outer(var, ax.per_query()[0]).ravel()
    if kappa:
        rr = np.ones(1)
        for ax in axes:
            r = ax.per_query()[1]
            rr = np.multiply.outer(rr, r * r).ravel()
        var = var - kappa * rr
    return v * np.maximum(var, 0.0)


def _hull_vertices(x: _F, y: _F) -> npt.NDArray[np.intp]:
    """Indices of the vertices of the convex hull of the points (x, y) (Andrew's monotone
    chain on the distinct points; every point if there are fewer than 3). O(m log m)."""
    pts, idx = np.unique(np.stack([x, y], axis=1), axis=0, return_index=True)
    if pts.shape[0] < 3:
        return idx

    def chain(order: Iterable[int]) -> list[int]:
        out: list[int] = []
        for k in order:
            while len(out) >= 2:
                o, a = pts[out[-2]], pts[out[-1]]
                if (a[0] - o[0]) * (pts[k][1] - o[1]) - (a[1] - o[1]) * (pts[k][0] - o[0]) <= 0:
                    out.pop()
                else:
                    break
            out.append(k)
        return out

    m = pts.shape[0]
    lower = chain(range(m))
    upper = chain(range(m - 1, -1, -1))
    return idx[np.unique(np.array(lower[:-1] + upper[:-1]))]


def product_form_argmax(s: Sequence[ArrayLike], r2: Sequence[ArrayLike] | None,
                        kappa: float = 0.0) -> tuple[float, int]:
    """(max, argmax) over query tuples (q_1, .., q_d) of prod_i s_i[q_i] - kappa prod_i
    r2_i[q_i], for per-axis arrays s_i >= 0 and r2_i >= 0 (the per-query variances of a
    single-scale Kronecker mechanism, or of any estimator of that product form), exact,
    without listing the prod q_i tuples; the argmax is the tuple's index in np.kron order
    (the first axis slowest). prod_i max s_i when kappa = 0; else the other axes' products
    (x, y) = (prod s_i, prod r2_i) (at most MAX_ENUMERATED of them) are reduced to the
    vertices of their convex hull, and every first-axis query is scored against those (a
    linear function of (x, y) attains its maximum over a finite set at a hull vertex)."""
    sa = [np.asarray(a, dtype=float) for a in s]
    sizes = tuple(a.size for a in sa)
    if not kappa:
        best = tuple(int(np.argmax(a)) for a in sa)
        return (float(math.prod(float(a[i]) for a, i in zip(sa, best))),
                int(np.ravel_multi_index(best, sizes)))
    if r2 is None:
        raise ValueError("r2 is needed when kappa != 0")
    r2a = [np.asarray(a, dtype=float) for a in r2]
    rest = math.prod(sizes[1:])
    if rest > MAX_ENUMERATED:
        raise TooManyQueries(f"the largest per-query error needs {rest} > {MAX_ENUMERATED} "
                             "query combinations on the axes after the first")
    xs, ys = np.ones(1), np.ones(1)
    for a, b in zip(sa[1:], r2a[1:]):
        xs = np.multiply.outer(xs, a).ravel()
        ys = np.multiply.outer(ys, b).ravel()
    hv = _hull_vertices(xs, ys)
    score = sa[0][:, None] * xs[hv][None, :] - kappa * r2a[0][:, None] * ys[hv][None, :]
    first, vertex = np.unravel_index(int(np.argmax(score)), score.shape)
    return float(score[first, vertex]), int(first) * rest + int(hv[vertex])


def product_form_max(s: Sequence[ArrayLike], r2: Sequence[ArrayLike] | None,
                     kappa: float = 0.0) -> float:
    """The max of :func:`product_form_argmax` (same arguments)."""
    return product_form_argmax(s, r2, kappa)[0]


def kron_product_max(mechanism: Mechanism, workload: Workload) -> QueryMax:
    """The largest per-query variance (counts^2) of :func:`kron_product_error` and its query
    (index in the workload's np.kron order), exact, without listing the prod q_i queries
    (:func:`product_form_argmax` on the per-axis s_i and r_i^2). ValueError as
    kron_product_error; TooManyQueries when the axes after the first have more than
    MAX_ENUMERATED query combinations and total rows are present."""
    noise, axes, kappa = _moments(mechanism, workload, per_query=True)
    moments = [ax.per_query() for ax in axes]
    best, query = product_form_argmax([s for s, _ in moments],
                                      [r * r for _, r in moments] if kappa else None, kappa)
    return QueryMax(float(noise.variance * max(best, 0.0)), query)


def kron_product_blue(mechanism: Mechanism, y: ArrayLike) -> _F:
    """The BLUE of the cells for a single-scale Kronecker product A_1 x .. x A_d: every core
    row noisy with one variance v, so the GLS is least squares and factorises per axis,
    x = (L_1 x .. x L_d) y_core with L_i = (A_i'A_i)^-1 A_i' (one dense solve per axis,
    O(sum_i n_i^3) plus O(rows sum_i n_i) per trial). Total rows (exact N, or noisy ones of
    combined variance v_N) add the rank-one step of the constrained / combined GLS, as on
    Toeplitz strategies: x - h (1'x - N^) / (q + r), h = Cov 1 / v = h_1 x .. x h_d with
    h_i = (A_i'A_i)^-1 1, q = 1'h, r = v_N / v (0 for an exact N). Shape (n,) or (trials, n)
    for y of shape (rows,) or (trials, rows). Declined when a core row is exact or a factor
    does not identify its axis (the generic GLS decides)."""
    noise = kron_product_noise(mechanism)
    strat = _kron_strategy(mechanism)
    n_core = math.prod(f.n_rows for f in strat.factors)
    var = np.asarray(mechanism.variances, dtype=float)
    if noise is None or np.any(var[:n_core] == 0):
        raise Declined("an exact core row (the total inside the product)")
    solves: list[_F] = []
    ones: list[_F] = []
    for f in strat.factors:
        a = f.matrix.toarray()
        g = a.T @ a
        if np.linalg.matrix_rank(g) < g.shape[0]:
            raise Declined("a factor does not identify its axis")
        solves.append(np.linalg.solve(g, a.T))
        ones.append(np.linalg.solve(g, np.ones(g.shape[0])))
    y = np.asarray(y, dtype=float)
    if y.ndim not in (1, 2) or y.shape[-1] != strat.n_rows:
        raise ValueError(f"y must have {strat.n_rows} entries per trial, got shape {y.shape}")
    flat = y.reshape(-1, y.shape[-1])
    t = flat[:, :n_core].T.reshape(tuple(f.n_rows for f in strat.factors) + (flat.shape[0],))
    for axis, solve in enumerate(solves):
        def apply(z: _F, s: _F = solve) -> _F:
            return s @ z

        t = along_axis(t, axis, apply)
    x = t.reshape(strat.n_bins, flat.shape[0]).T
    extra = var[n_core:]
    exact, noisy = np.flatnonzero(extra == 0), (extra > 0) & np.isfinite(extra)
    if exact.size or noisy.any():
        if exact.size:
            n_hat, r = flat[:, n_core + exact[0]], 0.0
        else:
            w = np.where(noisy, 1.0 / np.where(noisy, extra, 1.0), 0.0)
            n_hat, r = flat[:, n_core:] @ (w / w.sum()), 1.0 / (w.sum() * noise.variance)
        h: npt.NDArray[np.floating] = ones[0]
        for hi in ones[1:]:
            h = np.kron(h, hi)
        x = x - np.multiply.outer(x.sum(axis=-1) - n_hat, h / (float(h.sum()) + r))
    return x.reshape(y.shape[:-1] + (strat.n_bins,))


class KronProductEngine(Engine):
    """Kronecker products of any strategies with one noise scale (e.g. HDMM's Kronecker
    p-Identity, equal budgets on a Kronecker tree): the BLUE by per-axis least squares, the
    error v prod_i tr(G_i C_i) per axis."""

    name = "kron_product"
    structure = "Kronecker product, one noise scale"
    capabilities = (Capability("estimate", "blue", (ANY_WORKLOAD,),
                               "O(sum_i n_i^3) + O(rows sum_i n_i) per trial"),
                    Capability("error", "blue", ("kron",), "O(sum_i n_i^3)"),
                    Capability("per_query", "blue", ("kron",), "O(sum_i n_i^3 + q)"),
                    Capability("max", "blue", ("kron",),
                               "O(sum_i n_i^3 + q_1 V), V <= prod_(i>1) q_i hull vertices"))

    def claims(self, mechanism: Mechanism) -> bool:
        return is_kron_product_mechanism(mechanism)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        if task == "estimate":
            big = max(_kron_strategy(mechanism).grid_shape) > MAX_AXIS_BINS
            return f"axes of at most {MAX_AXIS_BINS} bins" if big else None
        per_query = task == "per_query"       # "max" does not list the queries
        if kron_product_supports(mechanism, workload, per_query):
            return None
        return (f"a Kronecker workload over the same grid, axes of at most {MAX_AXIS_BINS} "
                "bins" + (f", at most {MAX_PER_QUERY} queries listed" if per_query else ""))

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        return kron_product_blue(mechanism, y)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        return kron_product_error(mechanism, workload, per_query=per_query)

    def maximum(self, mechanism: Mechanism, workload: Workload, estimator: str,
                dense: bool = False) -> QueryMax:
        try:
            return kron_product_max(mechanism, workload)
        except TooManyQueries as exc:
            raise Declined(str(exc)) from None
