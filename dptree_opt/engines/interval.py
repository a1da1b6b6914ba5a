"""Interval (laminar) strategies: exact BLUE error in cumulative coordinates.

Hierarchies such as OpenDP's truncated tree, padded or ragged trees, the histogram and the
prefix sums: every row measures one range sum, i.e. one difference c_hi - c_lo of the
cumulative counts, so the information matrix is a weighted graph Laplacian.

* :func:`laminar_errors`: the bridge decomposition of :mod:`dptree_opt.engines.laminar`
  (numpy passes per depth, O(K) work): per-prefix and per-bin variances, the total and the
  all-range total. Used by :func:`dptree_opt.expected_error` for every interval strategy that
  is not a level-uniform tree, and by :func:`interval_blue_errors`.
* :func:`interval_blue_errors`: the comparison tables' entry point; it uses
  :func:`laminar_errors` when the hierarchy is at most ``laminar.MAX_DEPTH`` deep, otherwise
  (e.g. prefix sums: K nested ranges) a sparse LDL' elimination with Takahashi's selected
  inverse in pure Python (~1 s per 10^5 points).

* :class:`IntervalEngine`'s "covariance" task (Cov @ U, what the quantile tests' calibration
  asks for trees with a budget per node): when every bin is a noisy row of its own, the BLUE
  of synthetic answers, one O(K) bridge pass per column
  (:func:`~dptree_opt.engines.laminar.laminar_covariance`, derivation there).

All are checked against the dense GLS (tests/test_laminar.py, tests/test_compare.py,
tests/test_engine_conformance.py).
"""

from __future__ import annotations

from typing import TypeAlias, TypedDict

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .gls import gls
from .base import ANY_WORKLOAD, Capability, Engine
from .registry import Declined
from .causal_error import laminar_causal_prefix_variances
from .covering import (MAX_COVERING_DENSE_BINS, covering_cdf, covering_covariance,
                       covering_moments, covering_range_variances, covering_variances)
from .haar import haar_blue, haar_model, is_haar_mechanism
from .laminar import (MAX_DEPTH, has_noisy_leaves, is_laminar_mechanism, laminar_blue,
                      laminar_covariance, laminar_model, point_moments, point_sum_variance,
                      range_variances, star_moments)
from ..limits import rescaled
from ..mechanism import Mechanism
from ..workloads import Workload
from ..strategies import IntervalStrategy

__all__ = ["IntervalEngine", "HaarEngine", "interval_blue_errors", "laminar_errors", "laminar_range_variances",
           "has_bridge_structure",
           "LAMINAR_WORKLOADS", "MAX_LAMINAR_DENSE_BINS"]

LAMINAR_WORKLOADS = ("prefix", "identity", "all_range", "total", "ranges")

MAX_LAMINAR_DENSE_BINS = 2048  # interval_blue_errors: dense M^-1 for the all-range max

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"


class LaminarErrors(TypedDict):
    """What :func:`laminar_errors` returns (a plain dict at run time)."""

    cdf: _F
    identity: _F
    total: float
    all_range_total: float | None


class IntervalErrors(TypedDict):
    """What :func:`interval_blue_errors` returns (a plain dict at run time)."""

    cdf: _F
    identity: _F | None
    all_range_total: float | None
    all_range_max: float | None


def _laminar_system(mech: Mechanism) -> tuple[_I, _I, _I, _F, _I]:
    """Cumulative-coordinate information matrix of an interval strategy.

    Unknowns c_1..c_K' (c_0 = 0); row r measures c_hi - c_lo with variance v_r. Exact rows
    must be totals (then c_K' is known). Returns (unknown index of each vertex 0..K' or -1,
    weights per noisy edge (lo, hi, w))."""
    strat = mech.released
    if not isinstance(strat, IntervalStrategy):
        raise ValueError(f"an interval (laminar) strategy is needed, got {strat.name!r}")
    kp = strat.n_bins
    var = np.asarray(mech.variances)
    lo, hi = np.asarray(strat.lo), np.asarray(strat.hi)
    exact = var == 0
    if np.any(exact & ~((lo == 0) & (hi == kp))):
        raise ValueError("only the total may be released exactly: a row other than the "
                         "total has noise variance 0")
    known_total = bool(np.any(exact))
    index = np.full(kp + 1, -1, dtype=np.int64)
    free = np.arange(1, kp + (0 if known_total else 1))
    index[free] = np.arange(free.size)
    noisy = np.isfinite(var) & (var > 0)
    return index, lo[noisy], hi[noisy], 1.0 / var[noisy], free


def has_bridge_structure(mechanism: Mechanism) -> bool:
    """Whether :func:`laminar_errors` applies: an interval strategy of depth <=
    laminar.MAX_DEPTH with only the total exact, or Privelet's Haar strategy on 2^L bins."""
    return is_laminar_mechanism(mechanism) or is_haar_mechanism(mechanism)


def laminar_errors(mechanism: Mechanism, n_bins: int | None = None,
                   all_range: bool = True) -> LaminarErrors:
    """Exact BLUE variances of an interval strategy on its first ``n_bins`` bins (default
    K'), from the bridge decomposition (:mod:`dptree_opt.engines.laminar`).

    Returns ``"cdf"`` (Var of the prefixes C_1..C_K, shape (K,)), ``"identity"`` (Var of
    the bins, shape (K,)), ``"total"`` (Var of the estimate of N = x_K'), and
    ``"all_range_total"`` = sum over the K (K + 1) / 2 ranges [a, b) of Var(x_b - x_a)
    = (K + 1) sum_p Var(x_p) - Var(sum_p x_p) over p = 0..K (one bottom-up pass) when
    ``all_range``. Entries are inf where the strategy does not identify the query.
    Privelet's Haar strategy (n = 2^L) has the same decomposition
    (:mod:`dptree_opt.engines.haar`) and is accepted too."""
    kp = mechanism.released.n_bins
    K = kp if n_bins is None else int(n_bins)
    if not 1 <= K <= kp:
        raise ValueError(f"n_bins must be in [1, {kp}], got {n_bins!r}")
    star = None if is_haar_mechanism(mechanism) else star_moments(mechanism)
    if star is not None:  # prefix sums: independent x_p
        var = star[0]
        bins = var[1:] + var[:-1]
        star_var = var

        def sum_var(u: _F) -> float:
            return float(np.sum(u * u * star_var))
    else:
        lam = haar_model(mechanism) if is_haar_mechanism(mechanism) else laminar_model(mechanism)
        mom = point_moments(lam)
        var, bins = mom.var, mom.bin_var

        def sum_var(u: _F) -> float:
            return point_sum_variance(lam, u)

    out: LaminarErrors = {"cdf": var[1:K + 1].copy(), "identity": bins[:K].copy(),
                          "total": float(var[kp]), "all_range_total": None}
    if all_range:
        cdf = out["cdf"]
        if not np.all(np.isfinite(cdf)):
            out["all_range_total"] = float("inf")
        else:
            u = np.zeros(kp + 1)
            u[:K + 1] = 1.0
            out["all_range_total"] = float((K + 1) * cdf.sum() - sum_var(u))
    return out


def laminar_range_variances(mechanism: Mechanism, lo: ArrayLike, hi: ArrayLike) -> _F:
    """Var of the BLUE of sum x[lo:hi] for half-open ranges on an interval strategy or Haar
    (2^L): :func:`~dptree_opt.engines.laminar.range_variances`, O(depth) per range
    (prefix sums: v_hi + v_lo, independent points). inf where not identified."""
    lo_a = np.asarray(lo, dtype=np.int64)
    hi_a = np.asarray(hi, dtype=np.int64)
    star = None if is_haar_mechanism(mechanism) else star_moments(mechanism)
    if star is not None:
        var = star[0]
        return np.where(lo_a == hi_a, 0.0, var[hi_a] + var[lo_a])
    lam = haar_model(mechanism) if is_haar_mechanism(mechanism) else laminar_model(mechanism)
    return range_variances(lam, lo_a, hi_a)


def interval_blue_errors(mechanism: Mechanism, n_bins: int | None = None,
                         all_range: bool = True) -> IntervalErrors:
    """Exact BLUE error of an interval (laminar) strategy, O(K) for trees.

    In cumulative coordinates c_t = x_0 + ... + x_{t-1} (c_0 = 0) every row of a laminar
    strategy measures one difference c_hi - c_lo, so the information matrix
    M = sum_r (e_hi - e_lo)(e_hi - e_lo)' / v_r is a weighted graph Laplacian (grounded at
    c_0, and at c_K' when N is public) and Z = M^-1 is the covariance of the BLUE of the
    cumulative counts (GLS is invariant under the change of coordinates x = D c).
    Eliminating the boundary points innermost-first (decreasing number of measured rows
    containing them in their interior, then left to right) keeps at most two uneliminated
    neighbours per point for a tree, so the LDL' factor has O(K) entries; Takahashi's
    selected inversion (Z_vv = 1/D_v - sum_j L_jv Z_jv, Z_jv = -sum_k L_kv Z_kj over the
    neighbours j, k of v) gives Z on the factor's pattern in O(K) (pure Python loops:
    ~1 s per 10^5 points).

    Returns per-query variances for the first ``n_bins`` (default K') prefixes (``"cdf"``)
    and bins (``"identity"``; from the factor's pattern, else from a dense inverse when
    K' <= MAX_LAMINAR_DENSE_BINS, else None), the all-range total (``"all_range_total"``)
    = (K + 1) tr Z_K - 1'Z_K 1 over the first K points (one L D L' solve) and the all-range
    per-query maximum (``"all_range_max"``, dense inverse, K' <= MAX_LAMINAR_DENSE_BINS
    only, else None). Computed on ``mechanism.normalised()`` and rescaled (any budget whose
    errors are doubles; ValueError otherwise)."""
    strat = mechanism.released
    if not isinstance(strat, IntervalStrategy):
        raise ValueError("the interval-strategy errors need an interval (laminar) strategy, "
                         f"got {strat.name!r}")
    twin, c = mechanism.normalised()
    res = _interval_blue_errors(twin, n_bins, all_range)
    if c == 1.0:
        return res
    noise, budget = mechanism.noise, mechanism.requested_budget
    ident, total, mx = res["identity"], res["all_range_total"], res["all_range_max"]
    return {"cdf": rescaled(res["cdf"], c, noise, budget),
            "identity": None if ident is None else rescaled(ident, c, noise, budget),
            "all_range_total": None if total is None else rescaled(total, c, noise, budget),
            "all_range_max": None if mx is None else rescaled(mx, c, noise, budget)}


def _interval_blue_errors(mechanism: Mechanism, n_bins: int | None,
                          all_range: bool) -> IntervalErrors:
    """interval_blue_errors on a normalised mechanism."""
    strat = mechanism.released
    kp = strat.n_bins
    K = kp if n_bins is None else int(n_bins)
    if is_laminar_mechanism(mechanism):
        res = laminar_errors(mechanism, K, all_range)
        if not np.all(np.isfinite(res["cdf"])):
            raise ValueError("the strategy cannot identify the histogram (singular system)")
        ident = res["identity"]
        mx = None
        if all_range and kp <= MAX_LAMINAR_DENSE_BINS and np.all(np.isfinite(ident)):
            zc = np.cumsum(np.cumsum(gls(mechanism).covariance(), 0), 1)[:K, :K]
            z = np.zeros((K + 1, K + 1))
            z[1:, 1:] = zc
            dz = np.diag(z)
            mx = float(np.max(dz[:, None] + dz[None, :] - 2.0 * z))
        return {"cdf": res["cdf"], "identity": ident if np.all(np.isfinite(ident)) else None,
                "all_range_total": res["all_range_total"], "all_range_max": mx}
    index, lo, hi, w, free = _laminar_system(mechanism)
    n = free.size
    # elimination order: points inside more measured rows first, then left to right
    inside = np.zeros(kp + 2, dtype=np.int64)
    wide = hi - lo >= 2
    np.add.at(inside, lo[wide] + 1, 1)
    np.add.at(inside, hi[wide], -1)
    inside = np.cumsum(inside)[: kp + 1]
    order = free[np.lexsort((free, -inside[free]))]
    order = index[order]
    diag = np.zeros(n)
    adj: list[dict[int, float]] = [dict() for _ in range(n)]
    a_idx, b_idx = index[lo], index[hi]
    for a, b, wt in zip(a_idx.tolist(), b_idx.tolist(), w.tolist()):
        if a >= 0:
            diag[a] += wt
        if b >= 0:
            diag[b] += wt
        if a >= 0 and b >= 0:
            adj[a][b] = adj[a].get(b, 0.0) - wt
            adj[b][a] = adj[b].get(a, 0.0) - wt
    if n == 0:
        raise ValueError("nothing to estimate")
    dg = diag.tolist()
    D = [0.0] * n
    Lcols: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for v in order.tolist():
        d = dg[v]
        if not d > 1e-300:
            raise ValueError("the strategy cannot identify the histogram (singular system)")
        items = list(adj[v].items())
        D[v] = d
        Lcols[v] = [(j, m / d) for j, m in items]
        for j, m in items:
            del adj[j][v]
            dg[j] -= m * m / d
        for i1 in range(len(items)):
            j, mj = items[i1]
            aj = adj[j]
            for i2 in range(i1 + 1, len(items)):
                k, mk = items[i2]
                val = -mj * mk / d
                aj[k] = aj.get(k, 0.0) + val
                adj[k][j] = adj[k].get(j, 0.0) + val
    # Takahashi selected inversion, reverse elimination order
    zd = [0.0] * n
    zo: dict[tuple[int, int], float] = {}
    for v in reversed(order.tolist()):
        col = Lcols[v]
        zv: list[float] = []
        for j, _ in col:
            acc = 0.0
            for k, lk in col:
                acc -= lk * (zd[k] if k == j else zo[(k, j) if k < j else (j, k)])
            zv.append(acc)
        dv = 1.0 / D[v]
        for (j, lj), val in zip(col, zv):
            zo[(v, j) if v < j else (j, v)] = val
            dv -= lj * val
        zd[v] = dv
    zarr = np.asarray(zd)
    pts = np.arange(1, K + 1)
    idx = index[pts]
    cdf = np.where(idx >= 0, zarr[np.maximum(idx, 0)], 0.0)
    out: IntervalErrors = {"cdf": cdf, "identity": None, "all_range_total": None,
                           "all_range_max": None}
    ident = np.empty(K)
    ok = True
    il = index.tolist()
    for i in range(K):  # bin i = c_{i+1} - c_i
        a, b = il[i], il[i + 1]
        val = (zarr[a] if a >= 0 else 0.0) + (zarr[b] if b >= 0 else 0.0)
        if a >= 0 and b >= 0:
            key = (a, b) if a < b else (b, a)
            if key not in zo:
                ok = False
                break
            val -= 2.0 * zo[key]
        ident[i] = val
    zk = None
    if kp <= MAX_LAMINAR_DENSE_BINS:  # dense Z = M^-1, O(K^3): all-range max, identity
        m = np.zeros((n, n))
        ia, ib = index[lo], index[hi]
        for a, b, wt in zip(ia.tolist(), ib.tolist(), w.tolist()):
            if a >= 0:
                m[a, a] += wt
            if b >= 0:
                m[b, b] += wt
            if a >= 0 and b >= 0:
                m[a, b] -= wt
                m[b, a] -= wt
        zfull = np.zeros((kp + 1, kp + 1))
        sel = np.flatnonzero(index >= 0)
        zfull[np.ix_(sel, sel)] = np.linalg.inv(m)
        zk = zfull[: K + 1, : K + 1]
        if not ok:
            dz = np.diag(zk)
            ident = dz[1:] + dz[:-1] - 2.0 * np.diag(zk, 1)
            ok = True
    out["identity"] = ident if ok else None
    if all_range:
        # 1'Z_K 1 = e'M^-1 e, e = indicator of the unknowns among c_1..c_K: L D L' solve
        y = [0.0] * n
        for i in idx[idx >= 0].tolist():
            y[i] = 1.0
        e = np.asarray(y)
        for v in order.tolist():
            yv = y[v]
            if yv:
                for j, l in Lcols[v]:
                    y[j] -= l * yv
        y = [yi / di for yi, di in zip(y, D)]
        for v in reversed(order.tolist()):
            acc = y[v]
            for j, l in Lcols[v]:
                acc -= l * y[j]
            y[v] = acc
        out["all_range_total"] = float((K + 1) * cdf.sum() - e @ np.asarray(y))
        if zk is not None:
            dz = np.diag(zk)
            out["all_range_max"] = float(np.max(dz[:, None] + dz[None, :] - 2.0 * zk))
    return out


# ----------------------------------------------------------------------------- the engines
def _check_identified(var: _F, mechanism: Mechanism, kind: str) -> None:
    """Decline a workload the bridge decomposition leaves unidentified (infinite variances):
    the dense engine decides whether it is still estimable."""
    if not np.all(np.isfinite(var)):
        raise Declined(f"the {kind} workload is not identified by the bins' estimates "
                       "(rank-deficient strategy)")


def _bridge_error(mechanism: Mechanism, workload: Workload, per_query: bool) -> float | _F:
    """BLUE errors of an interval or Haar strategy from the bridge decomposition."""
    kind = workload.kind
    if kind == "ranges":
        var = laminar_range_variances(mechanism, *workload.intervals())
    else:
        res = laminar_errors(mechanism, all_range=kind == "all_range" and not per_query)
        art = res["all_range_total"]
        var = {"prefix": res["cdf"], "identity": res["identity"],
               "total": np.array([res["total"]]),
               "all_range": np.array([np.nan if art is None else art])}[kind]
    _check_identified(var, mechanism, kind)
    return var.copy() if per_query else float(var.sum())


_BRIDGE_CAPABILITIES = (
    Capability("error", "blue", LAMINAR_WORKLOADS, "O(n); ranges O(depth) each"),
    Capability("per_query", "blue", ("prefix", "identity", "total", "ranges"),
               "O(n); ranges O(depth) each"),
)


class IntervalEngine(Engine):
    """Interval (laminar) strategies: every row sums a range of bins and any two ranges are
    nested or disjoint (OpenDP's truncated tree, padded or ragged trees, hierarchies, prefix
    sums, the histogram, trees with budgets per row). The BLUE by the bridge recursion
    (Honaker's passes on any hierarchy), exact errors from the bridge decomposition, Cov @ U
    when every bin is a noisy row of its own (the BLUE of synthetic answers), the [RTS]
    covering sums, and the causal prefixes."""

    name = "interval"
    structure = "interval (laminar) strategy, any budgets"
    capabilities = _BRIDGE_CAPABILITIES + (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n depth) per trial"),
        Capability("covariance", "blue", (ANY_WORKLOAD,),
                   "O(n) per column, every bin a noisy row of its own"),
        Capability("estimate", "covering", (ANY_WORKLOAD,), "O(rows) per trial"),
        Capability("error", "covering", (ANY_WORKLOAD,),
                   "prefix / identity / all_range O(rows); ranges O(nnz) each; else dense, "
                   "n <= 8192"),
        Capability("per_query", "covering", (ANY_WORKLOAD,),
                   "prefix / identity O(rows); ranges O(nnz) each; else dense, n <= 8192"),
        Capability("error", "causal", ("prefix",), "O(rows)"),
        Capability("per_query", "causal", ("prefix",), "O(rows)"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return isinstance(mechanism.released, IntervalStrategy)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        if estimator == "blue" and not is_laminar_mechanism(mechanism):
            return ("the bridge recursion needs depth < 256 and no exact row but the total")
        if task == "covariance" and not has_noisy_leaves(mechanism):
            return ("the structured covariance needs depth < 256 and every bin measured by "
                    "a noisy row of its own")
        if estimator == "covering" and task != "estimate" and workload is not None:
            structured = (workload.kind in ("prefix", "identity", "ranges", "total")
                          or (workload.kind == "all_range" and task == "error"))
            if not structured and mechanism.n_bins > MAX_COVERING_DENSE_BINS:
                return (f"{workload.kind!r} errors of the covering estimator need its dense "
                        f"covariance: refused for {mechanism.n_bins} > "
                        f"{MAX_COVERING_DENSE_BINS} bins")
        strat = mechanism.released
        if estimator == "causal" and not (
                is_laminar_mechanism(mechanism) and isinstance(strat, IntervalStrategy)
                and int(strat.depth.max(initial=0)) < MAX_DEPTH):
            return "the causal prefix recursion needs depth < 256 and no exact row but the total"
        return None

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        if estimator == "covering":
            return np.diff(covering_cdf(mechanism, y), axis=-1, prepend=0.0)
        return laminar_blue(mechanism, y)

    def covariance(self, mechanism: Mechanism,
                   u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # the BLUE of the synthetic answers V c, c = u on the leaf rows (laminar_covariance)
        return laminar_covariance(mechanism, u)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        kind = workload.kind
        if estimator == "causal":
            var = laminar_causal_prefix_variances(mechanism)
            return var if per_query else float(var.sum())
        if estimator == "blue":
            return _bridge_error(mechanism, workload, per_query)
        if kind == "prefix":                                   # covering
            var = covering_variances(mechanism)
            return var if per_query else float(var.sum())
        if not dense and kind == "identity":
            var = covering_moments(mechanism)["identity"]
            return var if per_query else float(var.sum())
        if not dense and kind == "all_range" and not per_query:
            return covering_moments(mechanism)["all_range_total"]
        if not dense and kind in ("ranges", "total"):   # O(nnz) per range, no matrix
            var = covering_range_variances(mechanism, *workload.intervals())
            return var if per_query else float(var.sum())
        if mechanism.n_bins > MAX_COVERING_DENSE_BINS:
            raise ValueError(f"{kind!r} errors of the covering estimator need its dense "
                             f"covariance: refused for {mechanism.n_bins} > "
                             f"{MAX_COVERING_DENSE_BINS} bins")
        cov = covering_covariance(mechanism)
        return workload.query_variances(cov) if per_query else workload.total_variance(cov)


class HaarEngine(Engine):
    """Privelet's Haar strategy on 2^L bins: the BLUE by its top-down solve, exact errors
    from the same bridge decomposition as interval strategies."""

    name = "haar"
    structure = "Privelet's Haar wavelet on 2^L bins"
    capabilities = _BRIDGE_CAPABILITIES + (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n) per trial"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return is_haar_mechanism(mechanism)

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        return haar_blue(mechanism, y)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        return _bridge_error(mechanism, workload, per_query)
