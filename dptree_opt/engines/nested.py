"""Nested strategies (:class:`~dptree_opt.strategies.nested.NestedStrategy`): the BLUE, its
covariance and its exact errors by one pass per depth, no n x n matrix (docs/math.md
section 12).

Setting: fan-outs k_0..k_(L-1), local matrices S_d (m_d x k_d), row (d, v, r) with noise
variance v_(d, r): the same at every node of a depth (budgets per depth, or per (depth,
local row)). The row weights 1 / v_(d, r) fold into the local precisions
Q_d = S_d' diag(1 / v_d) S_d (an unmeasured row: weight 0; an exact row is refused unless
its row of S_d is zero), so the precision of the histogram is Omega = sum_v E_v' Q_(d(v)) E_v
(E_v: the children totals of node v) and the BLUE is Omega^-1 A' V^-1 y. Noise that differs
between the nodes of a depth, or exact rows, are refused (the generic engines serve them).

Bottom-up (the posterior of each subtree from its own rows only), 1 / tau_L = 0:

    C_d = (Q_d + I / tau_(d+1))^-1,   tau_d = 1' C_d 1,

which needs Q_(L-1) nonsingular (the measured rows of the deepest depth tell the bins of a
node apart; otherwise the histogram is not identified and the request is refused).

Estimate (information form, every node of a depth at once): with z_v = S_d' V_d^-1 y_v,
m_v = C_d (z_v + tilde_t_children / tau_(d+1)) and tilde_T_v = 1' m_v bottom-up (no
children term at depth L - 1); top-down from hat_T_root = tilde_T_root,
hat_t_v = m_v + (C_d 1 / tau_d)(hat_T_v - tilde_T_v) (the children's final totals; at depth
L - 1 the bins). The map is Omega^-1 sum_v E_v' z_v for any z, so Cov @ U is the same pass
with z = U on the deepest nodes and 0 elsewhere.

Exact errors. For a linear functional f of a node's subtree let its subtree-only error have
variance a and covariance b with the error of the node total (variance tau); under the
parent's posterior its error is r + (b / tau) e_t with r uncorrelated with everything else
(Var r = a - b^2 / tau: the Markov property of the tree) and e_t the error of that child's
total in the parent's posterior (covariance C_d over the children). So a functional of a
depth-d node that is alpha't plus f inside child c has error (alpha + beta e_c)' e_children
+ r, beta = b / tau_(d+1):

* prefix (alpha = 1_(<c), f the inclusive prefix up to offset q in child c), per position
  p = c N_(d+1) + q:
  a_d(p) = u' C_d u + [a_(d+1)(q) - b_(d+1)(q)^2 / tau_(d+1)],  b_d(p) = u' C_d 1,
  u = 1_(<c) + beta_(d+1)(q) e_c; outer sums of shape (k_d, N_(d+1)), O(n) in all;
* identity (alpha = 0, f the bin): the same with u = beta_(d+1)(q) e_c;
* total: tau_0;
* the covariance of two prefixes p, p' is sum_(d <= D) u_d(p)' C_d u_d(p')
  - sum_(1 <= d <= D) b_d(p) b_d(p') / tau_d, D the depth where their paths split (the
  residuals of different children are independent): ranges [lo, hi) = P_hi - P_lo from
  three of them, O(L) per query;
* all ranges (total): (n + 1) sum_p a_0(p) - v' Cov v with v_j = n - j (one covariance
  pass).

Cost: O(n + sum_d k_d^3) for the prefix / identity variances, O(n) per column of U or trial,
O(L) per range; memory O(n) (trials and columns in chunks).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla

from ..mechanism import Mechanism
from ..strategies.nested import NestedStrategy
from ..workloads import Workload
from .base import ANY_WORKLOAD, Capability, Engine
from .honaker import check_answers
from .registry import Declined

__all__ = ["NESTED_WORKLOADS", "NestedEngine", "NestedModel", "is_nested_mechanism",
           "nested_blue", "nested_covariance", "nested_error", "nested_model"]

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"

NESTED_WORKLOADS = ("prefix", "identity", "total", "all_range", "ranges")
# per-query all-range variances: at most this many ranges (as the other engines)
_MAX_ALL_RANGE_QUERIES = 10**8
# floats per chunk of trials / columns (the pass keeps about 4 n floats per trial) and of
# range queries
_CHUNK_FLOATS = 1 << 24
_QUERY_CHUNK = 1 << 20
# Q_(L-1) (scaled to unit diagonal) is treated as singular below this smallest eigenvalue
_RCOND = 1e-13


@dataclass(eq=False)
class NestedModel:
    """The folded local precisions and the bottom-up recursion of one mechanism (module
    docstring): per depth the row weights 1 / v_(d, r) (0: unmeasured), C_d, tau_d and
    w_d = C_d 1; ``betas`` (lazily) beta_d over the N_d positions of a node, d = 1..L."""

    strategy: NestedStrategy
    weights: list[_F]
    cov: list[_F]
    tau: list[float]
    w: list[_F]
    _betas: list[_F] | None = field(default=None, repr=False)

    @property
    def height(self) -> int:
        """L, the number of depths."""
        return self.strategy.height

    def helpers(self, d: int) -> tuple[_F, _F, _F]:
        """(CC, R, Wc) at depth d: CC[c, c'] = 1_(<c)' C 1_(<c'), R[c, c'] = 1_(<c)' C e_c',
        Wc[c] = 1_(<c)' C 1."""
        c = self.cov[d]
        k = c.shape[0]
        rows = np.vstack([np.zeros((1, k)), np.cumsum(c, axis=0)])[:k]   # R
        both = np.hstack([np.zeros((k, 1)), np.cumsum(rows, axis=1)])[:, :k]
        wc = np.concatenate([[0.0], np.cumsum(self.w[d])])[:k]
        return both, rows, wc

    def positions(self, kind: str, keep_betas: bool = False) -> _F:
        """Per-position variances at the root (n,): the inclusive prefixes ("prefix") or the
        bins ("identity"), unit noise (module docstring). ``keep_betas``: store the
        prefix recursion's beta_d (d >= 1) for :meth:`prefix_covariance`."""
        beta, cond = np.ones(1), np.zeros(1)
        betas = [beta]
        for d in range(self.height - 1, -1, -1):
            c, tau, w = self.cov[d], self.tau[d], self.w[d]
            cc, r, wc = self.helpers(d)
            diag = np.diag(c)[:, None]
            if kind == "prefix":
                a = (np.diag(cc)[:, None] + 2.0 * np.diag(r)[:, None] * beta
                     + diag * beta * beta + cond)
                b = wc[:, None] + w[:, None] * beta
            else:
                a = diag * beta * beta + cond
                b = w[:, None] * beta
            if d == 0:
                break
            cond = (a - b * b / tau).ravel()
            beta = (b / tau).ravel()
            betas.append(beta)
        if keep_betas:
            self._betas = betas[::-1]  # beta_1 .. beta_L
        return a.ravel()

    def prefix_covariance(self, p: _I, pp: _I) -> _F:
        """Cov of the errors of the inclusive prefixes at positions p and pp (arrays of the
        same shape), O(L) each (module docstring)."""
        if self._betas is None:
            self.positions("prefix", keep_betas=True)
        betas = self._betas
        assert betas is not None
        widths = self.strategy.widths
        out = np.zeros(p.shape)
        active = np.ones(p.shape, dtype=bool)
        for d in range(self.height):
            c1, q1 = np.divmod(p % widths[d], widths[d + 1])
            c2, q2 = np.divmod(pp % widths[d], widths[d + 1])
            b1, b2 = betas[d][q1], betas[d][q2]  # beta_(d+1)
            cc, r, _ = self.helpers(d)
            term = (cc[c1, c2] + b2 * r[c1, c2] + b1 * r[c2, c1]
                    + b1 * b2 * self.cov[d][c1, c2])
            if d:
                term -= self.tau[d] * betas[d - 1][p % widths[d]] * betas[d - 1][pp % widths[d]]
            out += np.where(active, term, 0.0)
            active &= c1 == c2
            if not active.any():
                break
        return out

    def solve(self, z: list[_F | None], trials: int) -> _F:
        """Omega^-1 sum_v E_v' z_v, shape (trials, n), for z[d] of shape (trials, P_d, k_d)
        (None: zero): the bottom-up / top-down pass (module docstring)."""
        strat = self.strategy
        nodes, ks = strat.nodes, strat.fanouts
        ms: list[_F] = []
        tilde: _F | None = None
        for d in range(self.height - 1, -1, -1):
            zd = z[d]
            rhs = np.zeros((trials, nodes[d], ks[d])) if zd is None else zd
            if tilde is not None:
                rhs = rhs + tilde.reshape(trials, nodes[d], ks[d]) / self.tau[d + 1]
            m = rhs @ self.cov[d]
            ms.append(m)
            tilde = m.sum(axis=-1)
        assert tilde is not None
        hat = tilde
        for d, m in enumerate(ms[::-1]):
            step = (self.w[d] / self.tau[d])[None, None, :]
            hat = (m + (hat - m.sum(axis=-1))[..., None] * step).reshape(trials, nodes[d + 1])
        return hat


_MODELS: "weakref.WeakKeyDictionary[Mechanism, NestedModel | str]" = weakref.WeakKeyDictionary()


def is_nested_mechanism(mechanism: object) -> bool:
    """Whether ``mechanism`` releases a NestedStrategy (nothing appended)."""
    return isinstance(mechanism, Mechanism) and isinstance(mechanism.released, NestedStrategy)


def _smallest_eigenvalue(a: _F) -> float:
    return float(np.linalg.eigvalsh(a)[0])


def _build(mechanism: Mechanism) -> NestedModel | str:
    """The model, or the reason the engine cannot serve the mechanism."""
    strat = mechanism.released
    assert isinstance(strat, NestedStrategy)
    var = strat.row_pattern(mechanism.variances)
    if var is None:
        return ("the noise differs between the nodes of a depth (the nested engine needs "
                "one variance per depth and local row)")
    weights, grams = [], []
    for d, (s, v) in enumerate(zip(strat.locals, var)):
        exact = (v == 0) & np.any(s != 0, axis=1)
        if exact.any():
            return f"row {int(np.flatnonzero(exact)[0])} of depth {d} is released exactly"
        wt = np.where(np.isfinite(v) & (v > 0), 1.0 / np.where(v > 0, v, 1.0), 0.0)
        weights.append(wt)
        grams.append(s.T @ (wt[:, None] * s))
    cov: list[_F] = [np.zeros(0)] * strat.height
    tau: list[float] = [0.0] * strat.height
    w: list[_F] = [np.zeros(0)] * strat.height
    last = grams[-1]
    scale = np.sqrt(np.diag(last))
    if not np.all(scale > 0) or _smallest_eigenvalue(last / np.outer(scale, scale)) <= _RCOND:
        return ("the measured rows of the deepest local matrix do not identify the bins "
                "(its weighted Gram is singular): the histogram has no BLUE")
    inv_tau = 0.0
    for d in range(strat.height - 1, -1, -1):
        try:
            chol = sla.cho_factor(grams[d] + inv_tau * np.eye(strat.fanouts[d]), lower=True)
        except np.linalg.LinAlgError:
            return f"the local precision of depth {d} is numerically singular"
        c = sla.cho_solve(chol, np.eye(strat.fanouts[d]))
        cov[d] = 0.5 * (c + c.T)
        w[d] = cov[d].sum(axis=1)
        tau[d] = float(w[d].sum())
        inv_tau = 1.0 / tau[d]
    return NestedModel(strat, weights, cov, tau, w)


def nested_model(mechanism: Mechanism) -> NestedModel:
    """The mechanism's :class:`NestedModel` (cached); :class:`Declined` when the engine
    cannot serve it (noise that differs between nodes of a depth, exact rows, bins not
    identified)."""
    if not is_nested_mechanism(mechanism):
        raise Declined("not a mechanism releasing a nested strategy")
    got = _MODELS.get(mechanism)
    if got is None:
        got = _MODELS[mechanism] = _build(mechanism)
    if isinstance(got, str):
        raise Declined(got)
    return got


def _chunk(strat: NestedStrategy) -> int:
    """Trials (or columns) per pass: about 4 n + rows floats each."""
    return max(1, _CHUNK_FLOATS // (4 * strat.n_bins + strat.n_rows))


def nested_blue(mechanism: Mechanism, y: npt.ArrayLike) -> _F:
    """The BLUE of the histogram, shape (n,) / (trials, n) for y of shape (rows,) /
    (trials, rows) (unmeasured rows may hold NaN). O(n) per trial."""
    model = nested_model(mechanism)
    strat = model.strategy
    y = check_answers(mechanism, y)
    flat = y.reshape(-1, y.shape[-1])
    measured = np.concatenate([np.repeat(wt[None, :] > 0, p, axis=0).ravel()
                               for wt, p in zip(model.weights, strat.nodes)])
    if not np.all(np.isfinite(flat[:, measured])):
        raise ValueError("y has NaN or infinite values on measured rows")
    s = strat.locals
    out = np.empty((flat.shape[0], strat.n_bins))
    step = _chunk(strat)
    for a in range(0, flat.shape[0], step):
        part = flat[a:a + step]
        t = part.shape[0]
        z: list[_F | None] = []
        for d, yd in enumerate(strat.split_rows(np.ascontiguousarray(part.T))):
            wt = model.weights[d]
            yd = np.where((wt > 0)[None, :, None], yd, 0.0) * wt[None, :, None]  # (P, m, t)
            z.append(np.einsum("pmt,mk->tpk", yd, s[d], optimize=True))
        out[a:a + t] = model.solve(z, t)
    return out.reshape(y.shape[:-1] + (strat.n_bins,))


def nested_covariance(mechanism: Mechanism, u: npt.ArrayLike) -> _F:
    """Cov @ u for u of shape (n,) or (n, m) (module docstring). O(n) per column."""
    model = nested_model(mechanism)
    strat = model.strategy
    u = np.asarray(u, dtype=float)
    if u.ndim not in (1, 2) or u.shape[0] != strat.n_bins:
        raise ValueError(f"u must have shape ({strat.n_bins},) or ({strat.n_bins}, m), got "
                         f"{u.shape}")
    cols = u.reshape(strat.n_bins, -1).T  # (m, n)
    out = np.empty_like(cols)
    z: list[_F | None] = [None] * strat.height
    shape = (strat.nodes[-2], strat.fanouts[-1])
    step = _chunk(strat)
    for a in range(0, cols.shape[0], step):
        part = cols[a:a + step]
        z[-1] = part.reshape((part.shape[0],) + shape)
        out[a:a + part.shape[0]] = model.solve(z, part.shape[0])
    return out.T.reshape(u.shape)


def _range_variances(model: NestedModel, lo: _I, hi: _I) -> _F:
    """Var of the ranges [lo, hi) = P_hi - P_lo, P_t the prefix of t bins (position t - 1),
    in chunks of queries."""
    out = np.empty(lo.size)
    for a in range(0, lo.size, _QUERY_CHUNK):
        h = hi[a:a + _QUERY_CHUNK] - 1
        low = lo[a:a + _QUERY_CHUNK] - 1
        var = model.prefix_covariance(h, h)
        has = low >= 0
        if has.any():
            l1, h1 = low[has], h[has]
            var[has] += model.prefix_covariance(l1, l1) - 2.0 * model.prefix_covariance(h1, l1)
        out[a:a + h.size] = var
    return out


def nested_error(mechanism: Mechanism, workload: Workload,
                 per_query: bool) -> float | _F:
    """Exact BLUE errors of ``workload`` (kinds NESTED_WORKLOADS): the total (float) or the
    per-query variances (workload order), counts^2 (module docstring)."""
    model = nested_model(mechanism)
    kind = workload.kind
    if kind not in NESTED_WORKLOADS:
        raise ValueError(f"the nested engine computes the errors of {NESTED_WORKLOADS}, got "
                         f"{kind!r}")
    n = model.strategy.n_bins
    if kind == "total":
        var = np.array([model.tau[0]])
    elif kind in ("prefix", "identity"):
        var = model.positions(kind)
    elif kind == "all_range" and not per_query:
        v = n - np.arange(n, dtype=float)
        return float((n + 1) * model.positions("prefix").sum()
                     - v @ nested_covariance(mechanism, v))
    else:
        lo, hi = workload.intervals()
        var = _range_variances(model, np.asarray(lo, dtype=np.int64),
                               np.asarray(hi, dtype=np.int64))
    var = np.maximum(var, 0.0)
    return var if per_query else float(var.sum())


class NestedEngine(Engine):
    """Nested strategies (one local matrix per depth of a complete tree), one noise
    variance per depth and local row: the BLUE, its covariance and exact errors by one
    pass per depth (module docstring)."""

    name = "nested"
    structure = "nested local matrices per depth (one noise per depth and local row)"
    capabilities = (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n) per trial"),
        Capability("error", "blue", NESTED_WORKLOADS,
                   "O(n + sum_d k_d^3); ranges O(L) per query"),
        Capability("per_query", "blue", NESTED_WORKLOADS,
                   "O(n + sum_d k_d^3); ranges and all_range O(L) per query"),
        Capability("covariance", "blue", (ANY_WORKLOAD,), "O(n) per column"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return is_nested_mechanism(mechanism)

    def refusal(self, task: str, mechanism: Mechanism, workload: Workload | None,
                estimator: str) -> str | None:
        try:
            nested_model(mechanism)
        except Declined as exc:
            return str(exc)
        if (task == "per_query" and workload is not None and workload.kind == "all_range"
                and workload.n_queries > _MAX_ALL_RANGE_QUERIES):
            return (f"all_range({workload.n_bins}) has {workload.n_queries} queries; "
                    f"per-query variances refused above {_MAX_ALL_RANGE_QUERIES}")
        return None

    def estimate(self, mechanism: Mechanism, y: _F, workload: Workload | None,
                 estimator: str) -> _F:
        return nested_blue(mechanism, y)

    def covariance(self, mechanism: Mechanism, u: _F) -> _F:
        return nested_covariance(mechanism, u)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | _F:
        return nested_error(mechanism, workload, per_query)
