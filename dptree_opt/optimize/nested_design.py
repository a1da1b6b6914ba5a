"""Optimal nested strategies for pure DP (Laplace, add/remove): the exact total prefix error of
a nested strategy, its gradient, and a multistart L-BFGS-B over the local matrices and the
budgets per depth (docs/math.md section 12).

The error and its gradient, O(L k^3)
------------------------------------
For fan-outs k_0..k_(L-1) (root first) and local Grams Q_d = S_d' S_d (unit noise per row),
:func:`nested_prefix_error` is the sum over the n inclusive prefixes of the BLUE variances, by
the aggregated bottom-up recursion of docs/math.md section 12: per depth (d = L-1 .. 0)

    C = (Q_d + I / tau_(d+1))^-1,  w = C 1,  tau_d = 1' w,  W_c = sum_(c' < c) w_c',
    A_d  = N <C, M> + 2 S1 <C, U> + S2 tr C + k_d cond,   (M_ij = k_d - 1 - max(i, j),
    sb   = N sum_c W_c + S1 tau_d,                         U_ij = [i < j], N = N_(d+1))
    sb2  = sum_c (N W_c^2 + 2 S1 W_c w_c + S2 w_c^2),
    cond <- A_d - sb2 / tau_d,  S1 <- sb / tau_d,  S2 <- sb2 / tau_d^2,

from S1 = S2 = 1, cond = 0, 1 / tau_L = 0 at the bins; the total is A_0. The gradient is the
same recursion run backwards (reverse mode written out by hand): the adjoints of (cond, S1,
S2, 1 / tau) flow from the root down, each depth adds G_C (the adjoint of C) and returns
dE/dQ_d = -C G_C C and dE/d(1 / tau_(d+1)) = -tr(C G_C C). Same O(L k^3) as the error.

The optimiser
-------------
Parameters: budget logits z (e = softmax(z), sum_d e_d = 1) and, per depth, P_d, N_d >= 0 of
shape (m_d, k_d); S_d = e_d (P_d - N_d) / colsum(P_d + N_d). Every column of S_d has l1 norm
at most e_d (exactly e_d where P_d and N_d do not overlap), so the strategy's add/remove l1
sensitivity sum_d max_c ||S_d[:, c]||_1 is at most 1 (docs/math.md section 12). Objective: the
mean squared error per prefix of the Laplace mechanism at eps = 1, 2 E / n (variance 2 per
row), minimised by L-BFGS-B with the analytic gradient chained through S_d -> Q_d and the
normalisation. The landscape has many local optima (a depth whose budget goes to 0, or
rows stuck near the start's shape), so several starts are run and the best is kept:

* ``"tree"``: the dyadic intervals of the k_d children (the binary tree inside every node;
  the node's own total only at the root), columns of l1 norm 1;
* ``"identity"``: the children (identity) plus, at the root, their total;
* ``"p_identity"``: HDMM's p-Identity optimised for the prefix workload of size k_d
  (``strategies.optimized.laplace_p_identity``, p = extra_rows + 1);
* ``"l1_local"``: the local optimum of the full l1 problem of size k_d (``optimize.l1_local``
  from HDMM's p-Identity with p = k_d / 16, at most L1_LOCAL_START_ITER iterations), as it
  is: no extra rows, no perturbation. By far the best start at scale: 2^16 as 256 x 256
  starts at 371.3 per prefix (budgets per node on the binary tree: 384.6) and reaches 330.3;
  2^20 as 256 x 256 x 16 reaches 629.47 (706.7).

Each start gets ``extra_rows`` more rows of small positive random entries and a small random
perturbation (seeded), equal budgets. A warm start (``warm``) continues from a design with the
same fan-outs or one depth fewer (the new depth starts as ``"tree"``): growth from a smaller
problem (:func:`best_nested`; measured on one core: 333.9 at 2^16 in ~2 minutes as
64 x 32 x 8 x 4, 611.2 at 2^20 in ~3 minutes as 64 x 16 x 32 x 8 x 4). S_d does not change
when a column of (P_d, N_d) is scaled; a penalty (colsum(P_d + N_d) - 1)^2 fixes that
direction (it keeps columns away from 0 and helped L-BFGS-B converge). At the end the local
matrices are normalised exactly (every column of S_d of l1 norm e_d, or the whole strategy
divided by its sensitivity, whichever has the lower error), so the strategy's sensitivity is
1 (to rounding) and the mean is recomputed from it.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.optimize as so
from numpy.typing import ArrayLike

from ..limits import check_memory
from ..mechanism import Mechanism
from ..strategies.nested import NestedStrategy, nested
from ..strategies.optimized import laplace_p_identity
from .l1_local import l1_local
from ..validation import check_bool, check_choice, check_int, check_positive
from ..workloads import prefix

__all__ = ["nested_prefix_error", "NestedDesign", "optimal_nested", "nested_fanouts",
           "best_nested", "START_KINDS"]

_F = npt.NDArray[np.float64]

#: the start shapes of :func:`optimal_nested` (module docstring)
START_KINDS = ("tree", "identity", "p_identity", "l1_local")
# largest fan-out / local rows the optimiser accepts: one evaluation costs O(sum m_d k_d^2)
MAX_FANOUT = 1024
MAX_LOCAL_ROWS = 4096
# the logits z are kept in [-_Z_BOUND, _Z_BOUND]: no budget underflows to exactly 0
_Z_BOUND = 30.0
# scale of the random extra rows and of the perturbation of a start
_JITTER = 1e-3
# L-BFGS-B iterations of the full l1 problem per fan-out for the "l1_local" start (256: ~9 s)
L1_LOCAL_START_ITER = 300
# memory per parameter: L-BFGS-B's 2 x 10 correction pairs and work arrays, the gradient,
# the local matrices and their temporaries
_BYTES_PER_PARAMETER = 8 * 40
# weight of the penalty (colsum(P_d + N_d) - 1)^2, which leaves S_d unchanged
_SCALE_PENALTY = 1.0


# ------------------------------------------------------------------ error and gradient
def _masks(k: int) -> tuple[_F, _F, _F]:
    """M_ij = k - 1 - max(i, j), U_ij = [i < j], r_i = k - 1 - i (module docstring)."""
    i = np.arange(k)
    return ((k - 1 - np.maximum.outer(i, i)).astype(float),
            (i[:, None] < i[None, :]).astype(float), (k - 1 - i).astype(float))


def _error_core(grams: Sequence[_F], ks: Sequence[int],
                gradient: bool) -> tuple[float, list[_F]]:
    """The recursion and its adjoint (module docstring); no validation. Raises
    numpy.linalg.LinAlgError when some Q_d + I / tau_(d+1) is not positive definite."""
    depth = len(ks)
    s1, s2, cond, tinv, width = 1.0, 1.0, 0.0, 0.0, 1
    saved: list[tuple] = [()] * depth
    total = 0.0
    for d in range(depth - 1, -1, -1):
        k = ks[d]
        mpre, upper, roww = _masks(k)
        q = grams[d] + tinv * np.eye(k)
        try:
            c = sla.cho_solve(sla.cho_factor(q, lower=True), np.eye(k))
        except sla.LinAlgError:
            raise np.linalg.LinAlgError(f"depth {d}") from None
        c = 0.5 * (c + c.T)
        w = c.sum(axis=1)
        tau = float(w.sum())
        cw = np.concatenate([[0.0], np.cumsum(w)[:-1]])
        total = (width * float(np.sum(c * mpre)) + 2.0 * s1 * float(np.sum(c * upper))
                 + s2 * float(np.trace(c)) + k * cond)
        sb = width * float(cw.sum()) + s1 * tau
        sb2 = float(np.sum(width * cw * cw + 2.0 * s1 * cw * w + s2 * w * w))
        saved[d] = (c, w, tau, cw, sb, sb2, s1, s2, width)
        cond = total - sb2 / tau
        s1, s2, tinv, width = sb / tau, sb2 / tau ** 2, 1.0 / tau, width * k
    if not gradient:
        return total, []
    out: list[_F] = [np.empty(0)] * depth
    g_cond = g_s1 = g_s2 = g_tinv = 0.0
    g_direct = 1.0
    for d in range(depth):
        k = ks[d]
        mpre, upper, roww = _masks(k)
        c, w, tau, cw, sb, sb2, s1, s2, width = saved[d]
        g_a = g_direct + g_cond
        g_sb2 = -g_cond / tau + g_s2 / tau ** 2
        g_sb = g_s1 / tau
        g_tau = (g_cond * sb2 / tau ** 2 - g_s1 * sb / tau ** 2 - 2.0 * g_s2 * sb2 / tau ** 3
                 - g_tinv / tau ** 2 + g_sb * s1)
        new_s1 = (2.0 * g_a * float(np.sum(c * upper)) + g_sb * tau
                  + 2.0 * g_sb2 * float(np.sum(cw * w)))
        new_s2 = g_a * float(np.trace(c)) + g_sb2 * float(np.sum(w * w))
        new_cond = g_a * k
        g_w = g_sb * width * roww + 2.0 * g_sb2 * (s1 * cw + s2 * w) + g_tau
        g_cw = 2.0 * g_sb2 * (width * cw + s1 * w)
        g_w[:-1] += np.cumsum(g_cw[::-1])[::-1][1:]      # W_c = sum_(c' < c) w_c'
        g_c = g_a * (width * mpre + 2.0 * s1 * upper + s2 * np.eye(k)) + g_w[:, None]
        g_q = -c @ g_c @ c
        out[d] = 0.5 * (g_q + g_q.T)
        g_tinv = float(np.trace(g_q))
        g_cond, g_s1, g_s2, g_direct = new_cond, new_s1, new_s2, 0.0
    return total, out


def _check_fanouts(fanouts: object, name: str = "fanouts") -> tuple[int, ...]:
    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, (Sequence, np.ndarray)):
        raise ValueError(f"{name} must be a sequence of integers >= 2, got {fanouts!r}")
    ks = tuple(check_int(k, f"{name}[{d}]", 2, MAX_FANOUT) for d, k in enumerate(fanouts))
    if not ks:
        raise ValueError(f"{name} must hold at least one fan-out, got none")
    return ks


@overload
def nested_prefix_error(grams: Sequence[ArrayLike], fanouts: Sequence[int], *,
                        gradient: Literal[False] = ...) -> float: ...
@overload
def nested_prefix_error(grams: Sequence[ArrayLike], fanouts: Sequence[int], *,
                        gradient: Literal[True]) -> tuple[float, list[_F]]: ...
@overload
def nested_prefix_error(grams: Sequence[ArrayLike], fanouts: Sequence[int], *,
                        gradient: bool = ...) -> float | tuple[float, list[_F]]: ...


def nested_prefix_error(grams: Sequence[ArrayLike], fanouts: Sequence[int], *,
                        gradient: bool = False) -> float | tuple[float, list[_F]]:
    """Sum over the n = prod k_d inclusive prefixes of the BLUE variances of the nested
    strategy whose depth-d local matrix S_d has Gram ``grams[d]`` = S_d' S_d (shape
    (k_d, k_d), symmetric positive semidefinite), noise of unit variance on every row.
    Multiply by the noise variance (2 / eps^2 for Laplace at unit sensitivity) for the error.

    The aggregated recursion of docs/math.md section 12, O(L k^3) whatever n. With
    ``gradient=True`` returns (E, [G_0, .., G_(L-1)]): G_d (k_d, k_d) symmetric, the gradient
    with respect to the symmetric Q_d (dE = sum_d <G_d, dQ_d>; dE/dS_d = 2 S_d G_d), by the
    hand-written reverse pass (module docstring), same cost. ValueError when the deepest
    Gram (or any Q_d + I / tau_(d+1)) is not positive definite (the histogram is then not
    identified).

    >>> import numpy as np
    >>> round(nested_prefix_error([np.eye(2), np.eye(2)], [2, 2]), 6)  # halves, then bins
    4.0
    """
    ks = _check_fanouts(fanouts)
    if isinstance(grams, (str, bytes, np.ndarray)) or not isinstance(grams, Sequence) \
            or len(grams) != len(ks):
        raise ValueError(f"grams must be a sequence of {len(ks)} (k_d, k_d) matrices, one per "
                         "fan-out")
    qs = []
    for d, (g, k) in enumerate(zip(grams, ks)):
        try:
            q = np.array(g, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"grams[{d}] must be a real ({k}, {k}) matrix") from None
        if q.shape != (k, k) or not np.all(np.isfinite(q)):
            raise ValueError(f"grams[{d}] must be a finite real ({k}, {k}) matrix, got shape "
                             f"{q.shape}")
        if not np.allclose(q, q.T, rtol=1e-10, atol=1e-12 * max(1.0, float(np.abs(q).max()))):
            raise ValueError(f"grams[{d}] must be symmetric (a Gram S_d' S_d)")
        qs.append(0.5 * (q + q.T))
    try:
        e, grads = _error_core(qs, ks, bool(gradient))
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"grams: {exc} (Q_d + I / tau_(d+1)) is not positive definite; the "
                         "deepest Gram must be nonsingular") from None
    return (e, grads) if gradient else e


# ------------------------------------------------------------------ the optimiser
class _Objective:
    """x = [z (L), P_0, N_0, .., P_(L-1), N_(L-1)] (flattened) -> (2 E / n, gradient)."""

    def __init__(self, ks: tuple[int, ...], ms: tuple[int, ...]) -> None:
        self.ks, self.ms, self.depth = ks, ms, len(ks)
        self.n = math.prod(ks)
        sizes = [m * k for m, k in zip(ms, ks)]
        self.offsets = np.concatenate([[self.depth], self.depth + np.cumsum(
            [s for s in sizes for _ in (0, 1)])]).astype(int)
        self.size = int(self.offsets[-1])
        self.evals = 0

    def parts(self, x: _F) -> tuple[_F, list[tuple[_F, _F]]]:
        """The budgets e = softmax(z) and the (P_d, N_d) views of x."""
        z = x[:self.depth]
        e = np.exp(z - z.max())
        e /= e.sum()
        o = self.offsets
        pn = [(x[o[2 * d]:o[2 * d + 1]].reshape(m, k), x[o[2 * d + 1]:o[2 * d + 2]].reshape(m, k))
              for d, (m, k) in enumerate(zip(self.ms, self.ks))]
        return e, pn

    def __call__(self, x: _F) -> tuple[float, _F]:
        self.evals += 1
        e, pn = self.parts(x)
        units, sums = [], []
        for p, q in pn:
            cs = (p + q).sum(axis=0)
            if not np.all(cs > 0):              # a column of P + N at 0: S_d undefined
                return math.inf, np.zeros_like(x)
            units.append((p - q) / cs)          # X_d / colsum: columns of l1 norm <= 1
            sums.append(cs)
        ss = [ed * u for ed, u in zip(e, units)]
        try:
            err, grads = _error_core([s.T @ s for s in ss], self.ks, True)
        except np.linalg.LinAlgError:
            return math.inf, np.zeros_like(x)
        scale = 2.0 / self.n
        g = np.empty_like(x)
        g_e = np.empty(self.depth)
        o = self.offsets
        for d, (s, u, cs) in enumerate(zip(ss, units, sums)):
            g_s = (2.0 * scale) * (s @ grads[d])      # dE/dS_d = 2 S_d G_d
            g_e[d] = float(np.sum(g_s * u))
            g_u = e[d] * g_s                          # S = e U, U = X / cs
            g_x = g_u / cs
            g_cs = -np.sum(g_u * u, axis=0) / cs
            g[o[2 * d]:o[2 * d + 1]] = (g_x + g_cs).ravel()
            g[o[2 * d + 1]:o[2 * d + 2]] = (g_cs - g_x).ravel()
        g[:self.depth] = e * (g_e - float(e @ g_e))
        # S_d does not change when a column of (P_d, N_d) is scaled: a penalty on
        # (colsum - 1)^2 along that direction only keeps the columns away from 0
        pen = 0.0
        for d, cs in enumerate(sums):
            pen += _SCALE_PENALTY * float(np.sum((cs - 1.0) ** 2))
            g_pen = np.broadcast_to(2.0 * _SCALE_PENALTY * (cs - 1.0),
                                    (self.ms[d], self.ks[d])).ravel()
            g[o[2 * d]:o[2 * d + 1]] += g_pen
            g[o[2 * d + 1]:o[2 * d + 2]] += g_pen
        return scale * err + pen, g

    def value(self, x: _F) -> float:
        """2 E / n without the scale penalty."""
        e, pn = self.parts(x)
        ss = [ed * (p - q) / (p + q).sum(axis=0) for ed, (p, q) in zip(e, pn)]
        return 2.0 / self.n * _error_core([s.T @ s for s in ss], self.ks, False)[0]

    def pack(self, s_locals: Sequence[_F], budgets: ArrayLike) -> _F:
        """x reproducing S_d exactly: z = log e_d, and per column c with l1 norm
        u = ||S_d[:, c]||_1 / e_d <= 1, P = (S_d / e_d)_+ and N = (S_d / e_d)_- plus
        (1 - u) / (2 m_d) on every entry of the column of both (colsum(P + N) = 1)."""
        parts = [np.log(np.maximum(np.asarray(budgets, dtype=float), math.exp(-_Z_BOUND)))]
        for s, e in zip(s_locals, np.asarray(budgets, dtype=float)):
            u = s / e
            pad = np.maximum(1.0 - np.abs(u).sum(axis=0), 0.0) / (2 * s.shape[0])
            parts += [(np.maximum(u, 0) + pad).ravel(), (np.maximum(-u, 0) + pad).ravel()]
        return np.concatenate(parts)


def _dyadic(k: int, root: bool) -> _F:
    """The dyadic intervals of k children (halving, floor splits) as 0/1 rows, coarse first;
    the whole range only when ``root``."""
    levels = max(1, math.ceil(math.log2(k))) if k > 1 else 0
    pairs: set[tuple[int, int]] = set()
    for j in range(levels + 1):  # O(log k) levels, each vectorised
        edges = (np.arange(2 ** j + 1) * k) // 2 ** j
        pairs.update(zip(edges[:-1].tolist(), edges[1:].tolist()))
    rows = sorted(((a, b) for a, b in pairs if b > a and (root or b - a < k)),
                  key=lambda ab: (-(ab[1] - ab[0]), ab[0]))
    a = np.array([r[0] for r in rows])
    b = np.array([r[1] for r in rows])
    c = np.arange(k)
    return ((c[None, :] >= a[:, None]) & (c[None, :] < b[:, None])).astype(float)


def _start_rows(kind: str, k: int, d: int, extra: int) -> int:
    """Rows of the depth-d local matrix of a start (checked before anything is built)."""
    if kind == "l1_local":
        return k + max(1, k // 16)
    if kind == "tree":
        return 2 * k - 1 - (d > 0) + extra if k > 1 else 1 + extra
    return k + 1 + extra


def _start(kind: str, ks: tuple[int, ...], extra: int,
           rng: np.random.Generator) -> list[_F]:
    """The start's local matrices, every column of l1 norm 1 (module docstring)."""
    out = []
    if kind == "l1_local":
        found: dict[int, _F] = {}
        for k in sorted(set(ks)):
            found[k] = l1_local(prefix(k), maxiter=L1_LOCAL_START_ITER).strategy.matrix.toarray()
        return [found[k] / np.abs(found[k]).sum(axis=0) for k in ks]
    for d, k in enumerate(ks):
        if kind == "tree":
            base = _dyadic(k, d == 0)
        elif kind == "identity":
            base = np.vstack([np.eye(k), np.ones((1, k)) if d == 0
                              else _JITTER * rng.random((1, k))])
        else:
            base = laplace_p_identity(prefix(k), extra + 1, seed=int(rng.integers(2**31)),
                                      starts=1).strategy.matrix.toarray()
        base = base / np.abs(base).sum(axis=0)
        rows = [base + _JITTER * rng.random(base.shape)]
        if kind != "p_identity" and extra:
            rows.append(_JITTER * rng.random((extra, k)))
        s = np.vstack(rows)
        out.append(s / np.abs(s).sum(axis=0))
    return out


def _finish(obj: _Objective, x: _F) -> tuple[list[_F], float]:
    """Exactly normalised local matrices at eps = 1 and their total error E: of the
    optimiser's S_d divided by the strategy's sensitivity, and of S_d = e_d X_d / colsum |X_d|
    (every column of l1 norm e_d), the one with the lower error."""
    e, pn = obj.parts(x)
    cands = []
    raw = [ed * (p - q) / (p + q).sum(axis=0) for ed, (p, q) in zip(e, pn)]
    sens = sum(float(np.abs(s).sum(axis=0).max()) for s in raw)
    cands.append([s / sens for s in raw])
    xs = [p - q for p, q in pn]
    if all(np.all(np.abs(xd).sum(axis=0) > 0) for xd in xs):
        cands.append([ed * xd / np.abs(xd).sum(axis=0) for ed, xd in zip(e, xs)])
    best: tuple[list[_F], float] | None = None
    for ss in cands:
        try:
            err = _error_core([s.T @ s for s in ss], obj.ks, False)[0]
        except np.linalg.LinAlgError:
            continue
        if best is None or err < best[1]:
            best = (ss, err)
    if best is None:
        raise ValueError("the nested optimiser found no design with a nonsingular deepest "
                         "local matrix")
    return best


@dataclass(frozen=True, eq=False)
class NestedDesign:
    """An optimised nested strategy for pure DP (Laplace, add/remove, N private).

    Attributes
    ----------
    fanouts : (k_0, .., k_(L-1)), root first; n = their product bins.
    locals : the local matrices S_d (m_d, k_d) at eps = 1 (read-only): the strategy's
        add/remove l1 sensitivity sum_d max_c ||S_d[:, c]||_1 is 1.
    budgets : e_d = max_c ||S_d[:, c]||_1, the budget share of depth d (sum 1).
    epsilon : the privacy budget the errors are given at.
    mean : mean squared error per prefix (counts^2) of the BLUE with Laplace noise at
        ``epsilon`` (variance 2 / eps^2 per row): 2 E / (n eps^2), E from
        :func:`nested_prefix_error` on the final locals.
    start_mean : the same for the best start (mean <= start_mean).
    iterations : L-BFGS-B iterations summed over the starts.
    seconds : wall time.
    method : what was run (starts, their results, stops).
    """

    fanouts: tuple[int, ...]
    locals: tuple[_F, ...]
    budgets: tuple[float, ...]
    epsilon: float
    mean: float
    start_mean: float
    iterations: int
    seconds: float
    method: str

    @property
    def n_bins(self) -> int:
        """n = prod k_d."""
        return math.prod(self.fanouts)

    def strategy(self) -> NestedStrategy:
        """The nested strategy (``strategies.nested``) of the local matrices at eps = 1."""
        return nested(self.fanouts, self.locals)

    def mechanism(self) -> Mechanism:
        """``Mechanism(strategy, epsilon=eps)`` with the budget of depth d (budget level
        d + 1) eps e_d: every row gets Laplace noise of scale 1 / eps (its depth's
        sensitivity e_d over its budget); the recomputed loss is eps."""
        b = np.array(self.budgets) * self.epsilon
        b *= self.epsilon / float(b.sum())
        return Mechanism(self.strategy(), epsilon=self.epsilon, level_budgets=b)


def _check_starts(starts: object, warm: bool) -> tuple[str, ...]:
    if isinstance(starts, str):
        starts = (starts,)
    if not isinstance(starts, Sequence) or not (starts or warm):
        raise ValueError(f"starts must be a non-empty sequence of names from {START_KINDS} "
                         f"(it may be empty with a warm start), got {starts!r}")
    return tuple(check_choice(s, f"starts[{i}]", START_KINDS) for i, s in enumerate(starts))


def _warm_position(warm: object, ks: tuple[int, ...]) -> int | None:
    """Where the new depth goes: None when ``warm`` has the fan-outs ``ks`` themselves, else
    the first position i with ks minus ks[i] equal to the warm fan-outs."""
    if not isinstance(warm, NestedDesign):
        raise ValueError(f"warm must be a NestedDesign, got {type(warm).__name__}")
    if warm.fanouts == ks:
        return None
    for i in range(len(ks)):
        if ks[:i] + ks[i + 1:] == warm.fanouts:
            return i
    raise ValueError(f"warm: its fan-outs {warm.fanouts} must be fanouts {ks} or fanouts with "
                     "one depth removed")


def _warm_start(warm: NestedDesign, pos: int | None, ks: tuple[int, ...], extra: int,
                rng: np.random.Generator) -> tuple[list[_F], _F]:
    """The warm design's local matrices and budgets (reproduced exactly), with a ``"tree"``
    local matrix at the new depth ``pos`` (budget 1 / L, the others scaled by (L - 1) / L)."""
    mats = [np.array(s) for s in warm.locals]
    budgets = np.array(warm.budgets, dtype=float)
    if pos is not None:
        mats = [s * (len(ks) - 1) / len(ks) for s in mats]
        mats.insert(pos, _start("tree", ks[:pos + 1], extra, rng)[pos] / len(ks))
        budgets = np.insert(budgets * (len(ks) - 1) / len(ks), pos, 1.0 / len(ks))
    return mats, budgets


def optimal_nested(fanouts: Sequence[int], *, epsilon: float = 1.0, extra_rows: int = 4,
                   starts: Sequence[str] = ("tree", "tree", "p_identity"),
                   maxiter: int = 10000, seed: int = 0, max_seconds: float | None = None,
                   warm: NestedDesign | None = None) -> NestedDesign:
    """The nested strategy of the given fan-outs (root first) minimising the mean squared
    error per prefix under eps-DP (Laplace, add/remove, N private): local matrices and
    budgets per depth by L-BFGS-B with the exact gradient, best of several starts (module
    docstring; docs/math.md section 12).

    ``starts``: one name per start, from START_KINDS ("tree", "identity", "p_identity"; a
    repeated name is a new random perturbation), each seeded from ``seed``. ``extra_rows``
    (>= 0): rows added to every local matrix of a start. ``warm``: a design whose fan-outs
    are ``fanouts`` or ``fanouts`` with one depth removed (the first position that fits gets
    a new ``"tree"`` local matrix): its local matrices and budgets are the first start
    (continuation from a smaller problem); ``starts`` may then be empty. ``maxiter``:
    L-BFGS-B iterations per start. ``max_seconds``: a wall-time budget for the whole call
    (the starts not begun are skipped and the one running stops at its next iteration; the
    result then depends on the machine): None runs every start to convergence or
    ``maxiter``.

    Cost per evaluation O(sum_d m_d k_d^2), independent of n = prod k_d.
    """
    ks = _check_fanouts(fanouts)
    eps = check_positive(epsilon, "epsilon")
    extra = check_int(extra_rows, "extra_rows", 0, MAX_LOCAL_ROWS)
    pos = None if warm is None else _warm_position(warm, ks)
    kinds = _check_starts(starts, warm is not None)
    maxiter = check_int(maxiter, "maxiter", 1)
    seed = check_int(seed, "seed", 0)
    if max_seconds is not None:
        max_seconds = check_positive(max_seconds, "max_seconds")
    plans = {kind: [_start_rows(kind, k, d, extra) for d, k in enumerate(ks)]
             for kind in set(kinds)}
    if warm is not None:
        plans["warm"] = [s.shape[0] for s in warm.locals]
        if pos is not None:
            plans["warm"].insert(pos, _start_rows("tree", ks[pos], pos, extra))
    for kind, rows in plans.items():
        if max(rows) > MAX_LOCAL_ROWS:
            raise ValueError(f"fanouts/extra_rows: the {kind!r} start gives depth "
                             f"{int(np.argmax(rows))} {max(rows)} rows, above the limit of "
                             f"{MAX_LOCAL_ROWS}; use smaller fan-outs or fewer extra rows")
    params = max(len(ks) + 2 * sum(m * k for m, k in zip(rows, ks)) for rows in plans.values())
    check_memory(params * _BYTES_PER_PARAMETER, f"the nested optimiser on fan-outs {ks} "
                 f"({params} parameters)", "use smaller fan-outs or fewer extra rows")
    t0 = time.perf_counter()
    deadline = math.inf if max_seconds is None else t0 + max_seconds
    names = (("warm",) if warm is not None else ()) + kinds
    seeds = np.random.SeedSequence(seed).spawn(len(names))
    best: tuple[float, _F, _Objective] | None = None
    start_best, iters, notes = math.inf, 0, []

    def stop(intermediate_result: object) -> None:
        if time.perf_counter() > deadline:
            raise StopIteration

    for i, (kind, ss) in enumerate(zip(names, seeds)):
        if i and time.perf_counter() > deadline:
            notes.append(f"{kind}: skipped (time)")
            continue
        rng = np.random.default_rng(ss)
        if kind == "warm":
            assert warm is not None
            s0, e0 = _warm_start(warm, pos, ks, extra, rng)
        else:
            s0 = [s / len(ks) for s in _start(kind, ks, extra, rng)]
            e0 = np.full(len(ks), 1.0 / len(ks))
        obj = _Objective(ks, tuple(s.shape[0] for s in s0))
        x0 = obj.pack(s0, e0)
        f0 = obj.value(x0)
        start_best = min(start_best, f0)
        bounds = [(-_Z_BOUND, _Z_BOUND)] * len(ks) + [(0.0, None)] * (x0.size - len(ks))
        res = so.minimize(obj, x0, jac=True, method="L-BFGS-B", bounds=bounds, callback=stop,
                          options={"maxiter": maxiter, "maxfun": 2 * maxiter,
                                   "ftol": 1e-13, "gtol": 1e-9})
        iters += int(res.nit)
        f1 = obj.value(res.x) if math.isfinite(res.fun) else math.inf
        f, x = (f1, res.x) if f1 <= f0 else (f0, x0)
        notes.append(f"{kind}: {f0 / eps ** 2:.4g} -> {f / eps ** 2:.6g} ({int(res.nit)} it"
                     + (", stopped: time" if "StopIteration" in str(res.message) else "") + ")")
        if best is None or f < best[0]:
            best = (f, x, obj)
    assert best is not None  # the first start always runs
    mats, err = _finish(best[2], best[1])
    budgets = tuple(float(np.abs(s).sum(axis=0).max()) for s in mats)
    for s in mats:
        s.flags.writeable = False
    mean = 2.0 * err / (math.prod(ks) * eps * eps)
    grown = "" if warm is None else f", warm from {'x'.join(map(str, warm.fanouts))}"
    return NestedDesign(
        fanouts=ks, locals=tuple(mats), budgets=budgets, epsilon=eps, mean=mean,
        start_mean=start_best / eps ** 2, iterations=iters,
        seconds=time.perf_counter() - t0,
        method=(f"nested {'x'.join(map(str, ks))}, rows {[s.shape[0] for s in mats]}, "
                f"L-BFGS-B from {len(names)} starts{grown}: " + "; ".join(notes)))


# ------------------------------------------------------------------ fan-outs
def _factorisations(n: int, parts: int, top: int) -> list[tuple[int, ...]]:
    """Ordered tuples of ``parts`` factors in [2, top] with product n (pruned: what is left
    must fit in the remaining factors)."""
    if parts == 1:
        return [(n,)] if 2 <= n <= top else []
    out: list[tuple[int, ...]] = []
    for k in range(2, min(top, n) + 1):
        if n % k == 0 and n // k <= top ** (parts - 1):
            out.extend((k,) + t for t in _factorisations(n // k, parts - 1, top))
    return out


def _spread(t: tuple[int, ...]) -> float:
    return max(t) / min(t) if t else 1.0


def nested_fanouts(n: int, max_fanout: int = 64) -> list[tuple[int, ...]]:
    """Candidate fan-outs (root first) for a nested design over n bins, best guess first:
    (n,) when n <= ``max_fanout``, and the ordered factorisations of n into 2..4 factors in
    [2, ``max_fanout``], ranked: fan-outs non-increasing from the root first, then fewest
    depths, powers of two, the largest root, the most even fan-outs below the root
    (measured with Laplace noise: a wide root and smaller fan-outs below do best; a
    ranking, not a promise). Empty when n has no such factorisation (a prime above ``max_fanout``:
    pad the bins).

    >>> nested_fanouts(2**16)[:3]
    [(64, 32, 32), (64, 64, 16), (64, 16, 8, 8)]
    """
    n = check_int(n, "n (number of bins)", 2)
    top = check_int(max_fanout, "max_fanout", 2, MAX_FANOUT)
    cands: list[tuple[int, ...]] = [t for parts in range(2, 5)
                                    for t in _factorisations(n, parts, top)]
    if n <= top:
        cands.insert(0, (n,))

    def key(t: tuple[int, ...]) -> tuple:
        return (any(a < b for a, b in itertools.pairwise(t)), len(t),
                not all(k & (k - 1) == 0 for k in t), -t[0], _spread(t[1:]), t)
    return sorted(cands, key=key)


def _label(ks: tuple[int, ...]) -> str:
    return "x".join(map(str, ks))


def best_nested(n: int, *, epsilon: float = 1.0, budget_seconds: float | None = 600.0,
                max_fanout: int = 64, tries: int = 3, grow: bool = True, extra_rows: int = 4,
                starts: Sequence[str] = ("tree", "tree", "p_identity"),
                maxiter: int = 10000, seed: int = 0) -> NestedDesign:
    """The best nested design found over n bins (Laplace, add/remove, mean squared error per
    prefix at ``epsilon``), by :func:`optimal_nested` (``extra_rows``, ``starts``,
    ``maxiter``, ``seed``) on candidates of :func:`nested_fanouts`:

    * the first ``tries`` candidates from the starts, when the best candidate has at most
      two depths or ``grow`` is False;
    * else by growth (continuation from a smaller problem): k = the smallest fan-out of the
      best candidate, the ``tries`` best designs over n / k bins (recursively: a beam), then
      k inserted at every position of their fan-outs, each run warm-started from its design
      (``warm``); the best is returned. Measured: growth is several times faster than
      the starts at 2^16 and reaches lower optima at 2^20.

    ``budget_seconds``: wall time for the whole search (half to the smaller problem, the
    rest shared equally by the runs not yet begun; None: no limit; a finite budget makes
    the result depend on the machine). ``method`` lists every design tried and its mean.
    """
    n = check_int(n, "n (number of bins)", 2)
    tries = check_int(tries, "tries", 1)
    grow = check_bool(grow, "grow")
    eps = check_positive(epsilon, "epsilon")
    if budget_seconds is not None:
        budget_seconds = check_positive(budget_seconds, "budget_seconds")
    top = check_int(max_fanout, "max_fanout", 2, MAX_FANOUT)
    if not nested_fanouts(n, top):
        raise ValueError(f"n = {n} has no factorisation into fan-outs in [2, {top}] "
                         "(pad the bins to a composite size, or raise max_fanout)")
    t0 = time.perf_counter()
    found, tried = _search(n, budget_seconds, top, tries, grow, starts,
                           {"epsilon": eps, "extra_rows": extra_rows, "maxiter": maxiter,
                            "seed": seed})
    best = found[0]
    return NestedDesign(
        fanouts=best.fanouts, locals=best.locals, budgets=best.budgets,
        epsilon=best.epsilon, mean=best.mean, start_mean=best.start_mean,
        iterations=best.iterations, seconds=time.perf_counter() - t0,
        method=f"best of [{'; '.join(tried)}]: {best.method}")


def _search(n: int, budget: float | None, top: int, tries: int, grow: bool,
            starts: Sequence[str], opts: dict) -> tuple[list[NestedDesign], list[str]]:
    """:func:`best_nested`'s search (validated arguments): the best ``tries`` designs found
    (best first; growth continues from each of them: a beam) and one line per run."""
    t0 = time.perf_counter()
    cands = nested_fanouts(n, top)
    tried: list[str] = []
    plan: list[tuple[tuple[int, ...], NestedDesign | None]]
    if grow and len(cands[0]) > 2:
        k = min(cands[0])
        bases, tried = _search(n // k, None if budget is None else budget / 2, top, tries,
                               grow, starts, opts)
        # fan-outs -> the best base that gives them (bases are sorted, best first)
        grown: dict[tuple[int, ...], NestedDesign] = {}
        for base in bases:
            for i in range(len(base.fanouts) + 1):
                grown.setdefault(base.fanouts[:i] + (k,) + base.fanouts[i:], base)
        plan = list(grown.items())
        run_starts: Sequence[str] = ()
    else:
        plan, run_starts = [(ks, None) for ks in cands[:tries]], starts
    found: list[NestedDesign] = []
    for i, (ks, warm) in enumerate(plan):
        left = None
        if budget is not None:
            left = (budget - (time.perf_counter() - t0)) / (len(plan) - i)
            if left <= 0 and found:
                tried.append(f"{_label(ks)} skipped (time)")
                continue
            left = max(left, 1e-3)
        d = optimal_nested(ks, starts=run_starts, max_seconds=left, warm=warm, **opts)
        how = "" if warm is None else f" (grown from {_label(warm.fanouts)})"
        tried.append(f"{_label(ks)}{how}: {d.mean:.6g}")
        found.append(d)
    found.sort(key=lambda d: d.mean)
    return found[:tries], tried
