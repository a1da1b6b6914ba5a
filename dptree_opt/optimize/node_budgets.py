"""Budgets per NODE (not per level) on a complete tree: the exact CDF error, its adjoint
gradient, and the optimal split (pure DP at scale; docs/math.md section 7).

The family
----------
A level-uniform tree with branching k_1..k_h over K = prod k_l bins, every node measured with
its own budget b_u. Under add/remove a record touches one node per level (a root-to-leaf
path), so the mechanism is eps-DP (Laplace, variance 2 / b_u^2) or rho-zCDP (Gaussian,
variance 1 / (2 b_u)) exactly when every root-to-leaf path sums to at most the budget
(docs/math.md section 0: the loss of diag(1/scale) A is the largest column sum). Under swap the
root is the public total and a record leaves one path for another: paths summing to half the
budget (root excluded) are sufficient. Per-level budgets are the special case b_u = eps_l.
The parametrisation b_u = R_u f_u, R_root = total, R_child = R_u (1 - f_u), f_leaf = 1 makes
every path sum to the total exactly; the optimiser works on logit(f) (unconstrained).

The error and its gradient, O(K)
--------------------------------
The BLUE on an interval strategy is a hierarchy of Gaussian bridges in cumulative coordinates
x_p (``estimation.laminar``; node precisions w_u = 1 / variance):

* bottom-up, effective conductances g_u = w_u + 1 / R_u, R_u = sum_c 1 / g_c (leaves: g = w);
* top-down, with (Va, Vb, D) = (Var x_a, Var x_b, Var(x_b - x_a)) for a node [a, b) and its
  chain a = s_0 < .. < s_k = b (children's end points), rho_j = sum_(i<j) 1 / g_(c_i),
  t_j = rho_j / R:

      Var x_(s_j) = (1 - t_j) Va + t_j Vb - t_j (1 - t_j) D + rho_j (R - rho_j) / R,
      child j:  (Va, Vb, D) <- (V_j, V_(j+1), (r_j / R)^2 D + r_j (R - r_j) / R);

  the root has (0, 1/g, 1/g) (or zeros with a public total).

The CDF's total error is sum_p Var x_p over p = 1..K (the points s_1..s_(k-1) of every node
plus x_K). :func:`tree_cdf_error` evaluates it and, by reverse-mode differentiation of the
same two passes written out by hand (every step vectorised over a level), dE/dw for every node
in O(K): the cost of one evaluation, however many nodes. Checked against the dense GLS and
finite differences (tests/test_node_budgets.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
import numpy.typing as npt
import scipy.optimize as so
from numpy.typing import ArrayLike
from scipy.special import expit, logit

from ..limits import at_budget, check_memory
from ..mechanism import Mechanism
from ..privacy import check_noise, infer_noise, resolve_budget
from ..strategies import tree
from ..strategies.base import check_neighbours
from ..validation import check_int, check_positive, check_real
from .blue_budgets import optimal_blue_budgets
from .levels import check_branching

__all__ = ["tree_cdf_error", "NodeBudgets", "optimal_node_budgets", "path_budgets"]

NODE_BUDGETS_BYTES_PER_BIN = 640  # memory estimate: ~500 bytes per bin measured at 2^20


_Floats = npt.NDArray[np.float64]


def _check_branching(branching: Sequence[int]) -> tuple[int, ...]:
    """Branching factors k_1..k_h (``levels.check_branching``), at least one, each >= 2."""
    ks = check_branching(branching)
    if not ks or min(ks) < 2:
        raise ValueError(f"branching factors must be integers >= 2, got {branching!r}")
    return ks


def _level_starts(ks: Sequence[int]) -> npt.NDArray[np.int64]:
    sizes = np.cumprod((1,) + tuple(ks))
    return np.concatenate([[0], np.cumsum(sizes)])


@overload
def tree_cdf_error(branching: Sequence[int], precisions: ArrayLike, *,
                   public_total: bool = ..., gradient: Literal[False] = ...) -> float: ...
@overload
def tree_cdf_error(branching: Sequence[int], precisions: ArrayLike, *,
                   public_total: bool = ..., gradient: Literal[True]) -> tuple[float, _Floats]: ...
@overload
def tree_cdf_error(branching: Sequence[int], precisions: ArrayLike, *,
                   public_total: bool = ..., gradient: bool = ...
                   ) -> float | tuple[float, _Floats]: ...


def tree_cdf_error(branching: Sequence[int], precisions: ArrayLike, *,
                   public_total: bool = False,
                   gradient: bool = False) -> float | tuple[float, _Floats]:
    """Exact total BLUE error of the CDF (sum of the K prefix variances) on the complete tree
    with branching k_1..k_h whose nodes have the given noise precisions (1 / variance; shape
    (nodes,), level by level, root first, left to right: the row order of
    ``strategies.tree``). ``public_total``: the root is released exactly (its precision is
    ignored). Internal nodes may have precision 0 (unmeasured); leaves need > 0.

    Returns E, or (E, dE/dw) with ``gradient=True`` (shape (nodes,), <= 0). The bridge passes
    and their adjoint (module docstring), O(nodes) numpy work, a Python loop over levels."""
    ks = _check_branching(branching)
    h = len(ks)
    starts = _level_starts(ks)
    w = np.asarray(precisions, dtype=float)
    if w.shape != (int(starts[-1]),):
        raise ValueError(f"precisions must have one entry per node ({int(starts[-1])}), "
                         f"got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("precisions must be finite and >= 0")
    if not np.all(w[starts[h]:] > 0):
        raise ValueError("every leaf needs a positive precision (else its bin is not "
                         "identified)")
    lev = [w[starts[lv]:starts[lv + 1]] for lv in range(h + 1)]
    # bottom-up: conductances g and chain resistances R (R per internal node)
    empty = np.empty(0)
    g: list[_Floats] = [empty] * (h + 1)
    R: list[_Floats] = [empty] * h
    r: list[_Floats] = [empty] * h  # r[l]: resistances of level l's children, (n_l, k_(l+1))
    g[h] = lev[h]
    for lv in range(h - 1, -1, -1):
        r[lv] = (1.0 / g[lv + 1]).reshape(-1, ks[lv])
        R[lv] = r[lv].sum(axis=1)
        g[lv] = lev[lv] + 1.0 / R[lv]
    if public_total:
        g0 = math.inf
        va, vb, d = np.zeros(1), np.zeros(1), np.zeros(1)
        total = 0.0
    else:
        g0 = float(g[0][0])
        va, vb, d = np.zeros(1), np.array([1.0 / g0]), np.array([1.0 / g0])
        total = 1.0 / g0
    # top-down: point variances; keep each level's inputs for the adjoint
    saved: list[tuple[_Floats, _Floats, _Floats, _Floats, _Floats]] = []
    for lv in range(h):
        k = ks[lv]
        rr, RR = r[lv], R[lv][:, None]
        rho = np.concatenate([np.zeros((rr.shape[0], 1)), np.cumsum(rr, axis=1)], axis=1)
        rho[:, -1] = RR[:, 0]
        t = rho / RR
        V = ((1 - t) * va[:, None] + t * vb[:, None] - t * (1 - t) * d[:, None]
             + rho * (RR - rho) / RR)
        V[:, 0], V[:, -1] = va, vb
        total += float(V[:, 1:k].sum())
        saved.append((va, vb, d, rho, t))
        q = rr / RR
        va, vb = V[:, :k].ravel(), V[:, 1:].ravel()
        d = (q * q * d[:, None] + rr * (1 - q)).ravel()
    if not gradient:
        return total
    # adjoint of the top-down pass (levels h-1 .. 0)
    ava: _Floats | None = None
    avb: _Floats | None = None
    ad: _Floats | None = None
    ar: list[_Floats] = [empty] * h
    aR: list[_Floats] = [empty] * h
    for lv in range(h - 1, -1, -1):
        k = ks[lv]
        va, vb, d, rho, t = saved[lv]
        rr, RR = r[lv], R[lv][:, None]
        n = rr.shape[0]
        aV = np.zeros((n, k + 1))
        aV[:, 1:k] = 1.0
        if ava is not None and avb is not None and ad is not None:  # set together
            aV[:, :k] += ava.reshape(n, k)
            aV[:, 1:] += avb.reshape(n, k)
            adc = ad.reshape(n, k)
        else:
            adc = np.zeros((n, k))
        q = rr / RR
        dcol = d[:, None]
        # D_child = q^2 D + r (1 - r / R)
        n_ad = np.sum(adc * q * q, axis=1)
        a_r = adc * (2.0 * q * dcol / RR[:, 0:1] + 1.0 - 2.0 * q)
        a_R = np.sum(adc * (q * q - 2.0 * q * q * dcol / RR), axis=1)
        # interior / end points V_j (j = 0 and k are the parent's Va / Vb themselves)
        inner = slice(1, k)
        ti, aVi = t[:, inner], aV[:, inner]
        n_ava = aV[:, 0] + np.sum(aVi * (1 - ti), axis=1)
        n_avb = aV[:, k] + np.sum(aVi * ti, axis=1)
        n_ad += np.sum(aVi * (-ti * (1 - ti)), axis=1)
        a_t = aVi * (vb[:, None] - va[:, None] - (1 - 2 * ti) * dcol)
        a_rho = a_t / RR + aVi * (1 - 2 * ti)
        a_R += np.sum(-a_t * ti / RR + aVi * ti * ti, axis=1)
        # rho_j = sum_(i<j) r_i for j = 1..k-1: r_i gets the sum of a_rho over j > i
        rev = np.cumsum(a_rho[:, ::-1], axis=1)[:, ::-1]      # rev[:, m] = sum_(j>=m+1)
        a_r[:, :k - 1] += rev
        ar[lv], aR[lv] = a_r, a_R
        ava, avb, ad = n_ava, n_avb, n_ad
    # root: (0, 1/g0, 1/g0) and the x_K term
    assert avb is not None and ad is not None  # h >= 1 levels ran
    grad = np.zeros_like(w)
    ag = np.zeros(1) if public_total else np.array([-(avb[0] + ad[0] + 1.0) / g0 ** 2])
    for lv in range(h + 1):   # adjoint of the bottom-up pass, top-down
        if not (public_total and lv == 0):
            grad[starts[lv]:starts[lv + 1]] = ag
        if lv == h:
            break
        a_R_tot = aR[lv] - (ag / R[lv] ** 2 if not (public_total and lv == 0) else 0.0)
        a_rc = ar[lv] + a_R_tot[:, None]
        ag = (-a_rc * r[lv] ** 2).ravel()     # r = 1 / g
    return total, grad


def path_budgets(branching: Sequence[int], fractions: ArrayLike,
                 total: float) -> npt.NDArray[np.float64]:
    """Node budgets b_u = R_u f_u from per-node fractions f (shape (nodes,), leaves' ignored =
    1): R_root = total, R_child = R_u (1 - f_u); every root-to-leaf path sums to ``total``."""
    ks = _check_branching(branching)
    f = np.asarray(fractions, dtype=float)
    n_nodes = int(_level_starts(ks)[-1])
    if f.shape != (n_nodes,) or not np.all((f >= 0) & (f <= 1)):
        raise ValueError(f"fractions must be {n_nodes} numbers in [0, 1] (one per node)")
    total = check_positive(total, "total")
    return _remaining(ks, f, total)[0]


def _remaining(ks: tuple[int, ...], fractions: ArrayLike,
               total: float) -> tuple[_Floats, _Floats, _Floats]:
    starts = _level_starts(ks)
    f = np.asarray(fractions, dtype=float).copy()
    f[starts[-2]:] = 1.0
    rem = np.empty_like(f)
    rem[0] = total
    for lv in range(len(ks)):
        sl, ch = slice(starts[lv], starts[lv + 1]), slice(starts[lv + 1], starts[lv + 2])
        rem[ch] = np.repeat(rem[sl] * (1.0 - f[sl]), ks[lv])
    return rem * f, rem, f


def _budgets_and_chain(ks: tuple[int, ...], f: _Floats, total: float
                       ) -> tuple[_Floats, Callable[[_Floats], _Floats]]:
    """b = R f and the vector-Jacobian product v -> d(b' v)/df (O(nodes))."""
    starts = _level_starts(ks)
    h = len(ks)
    b, rem, f_eff = _remaining(ks, f, total)

    def vjp(v: _Floats) -> _Floats:
        # sub[u] = sum over u's subtree (u included) of v_s b_s
        sub = v * b
        for lv in range(h - 1, -1, -1):
            sl, ch = slice(starts[lv], starts[lv + 1]), slice(starts[lv + 1], starts[lv + 2])
            sub[sl] += sub[ch].reshape(-1, ks[lv]).sum(axis=1)
        below = sub - v * b                      # strict descendants
        out = v * rem - below / np.where(f_eff < 1, 1.0 - f_eff, 1.0)
        out[starts[h]:] = 0.0
        return out
    return b, vjp


@dataclass(frozen=True)
class NodeBudgets:
    """Optimal per-node budgets on a complete tree (:func:`optimal_node_budgets`).

    ``budgets``: one absolute budget per node (eps_u or rho_u), ``strategies.tree`` row
    order; ``error``: exact total CDF error (counts^2); ``mean``: per prefix;
    ``start_mean``: the per-level optimum it starts from (``optimal_blue_budgets``; returned
    instead if the search does not improve on it); ``iterations``, ``evaluations``."""

    branching: tuple[int, ...]
    noise: str
    neighbours: str
    total: float
    budgets: np.ndarray
    error: float
    mean: float
    start_mean: float
    iterations: int
    evaluations: int

    def mechanism(self) -> Mechanism:
        """The Mechanism (``row_budgets``) on ``strategies.tree`` with these budgets."""
        n = int(np.prod(self.branching))
        laplace = self.noise == "laplace"
        return Mechanism(tree(n, self.branching), noise=self.noise, neighbours=self.neighbours,
                         row_budgets=self.budgets, epsilon=self.total if laplace else None,
                         rho=None if laplace else self.total)


def optimal_node_budgets(branching: Sequence[int], epsilon: float | None = None, *,
                         rho: float | None = None, noise: str | None = None,
                         neighbours: str = "add_remove", maxiter: int = 500,
                         tol: float = 1e-9, time_limit: float | None = None) -> NodeBudgets:
    """Budgets per node minimising the exact BLUE error of the CDF on the complete tree with
    ``branching`` (K = prod k bins), Laplace (eps-DP) or Gaussian (rho-zCDP).

    Privacy (module docstring): add/remove, every root-to-leaf path sums to the budget;
    swap, the root is the public total and the other nodes of every path sum to half of it.
    Method: L-BFGS-B on logit(f) of the path parametrisation with the exact adjoint gradient
    (:func:`tree_cdf_error`), from the optimal per-level budgets
    (:func:`optimal_blue_budgets`); each step is O(K). A local optimum (the Laplace problem
    is not convex); never worse than its per-level start. ``maxiter`` iterations at most;
    ``time_limit`` (seconds) stops after the iteration running then (the best point so far
    is returned)."""
    ks = _check_branching(branching)
    K = math.prod(ks)
    check_memory(NODE_BUDGETS_BYTES_PER_BIN * K, f"budgets per node on a tree over {K} bins",
                 "use fewer bins")
    noise = check_noise(infer_noise(noise, epsilon, rho))
    neighbours = check_neighbours(neighbours)
    requested = resolve_budget(noise, epsilon, rho)
    total = 1.0  # solved at unit budget, restated at ``requested`` (exact: the errors
    # are homogeneous in the budget and the best split does not depend on it)
    maxiter = check_int(maxiter, "maxiter", 0)
    time_limit = check_real(time_limit, "time_limit (seconds)", above=0, none=True)
    t0 = time.perf_counter()
    public = neighbours == "swap"
    path_total = total / 2.0 if public else total
    starts = _level_starts(ks)
    h = len(ks)
    depth = np.repeat(np.arange(h + 1), np.diff(starts))
    level = optimal_blue_budgets(ks, total, noise=noise, neighbours=neighbours)
    bl = np.zeros(h + 1)
    given = np.asarray(level.budgets, dtype=float)
    bl[h + 1 - given.size:] = given              # swap: no root budget
    bl = bl / max(bl.sum(), 1e-300) * path_total
    rem = path_total - np.concatenate([[0.0], np.cumsum(bl)[:-1]])
    f_level = np.clip(np.where(rem > 0, bl / np.maximum(rem, 1e-300), 1.0), 1e-9, 1 - 1e-9)
    if public:
        f_level[0] = 0.0   # the root spends nothing: it is exact
    free = (depth < h) & ~((depth == 0) & public)
    z0 = logit(f_level[depth][free])

    def precisions(b: _Floats) -> _Floats:
        return b * b / 2.0 if noise == "laplace" else 2.0 * b

    def fractions(z: _Floats) -> _Floats:
        f = np.zeros(starts[-1]) if public else np.ones(starts[-1])
        f[depth == h] = 1.0
        f[free] = expit(z)
        return f

    calls = [0]

    def objective(z: _Floats) -> tuple[float, _Floats]:
        calls[0] += 1
        f = fractions(z)
        b, vjp = _budgets_and_chain(ks, f, path_total)
        e, g_w = tree_cdf_error(ks, precisions(b), public_total=public, gradient=True)
        g_b = g_w * (b if noise == "laplace" else 2.0)
        g_f = vjp(g_b)
        return e, (g_f * f * (1.0 - f))[free]

    b_level = bl[depth]                        # the per-level optimum, exactly
    e_level = tree_cdf_error(ks, precisions(b_level), public_total=public)
    e0, _ = objective(z0)
    def stop(intermediate_result: so.OptimizeResult) -> None:
        # scipy >= 1.11: StopIteration ends the run cleanly
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            raise StopIteration

    def scaled(z: _Floats) -> tuple[float, _Floats]:
        e, g = objective(z)
        return e / e0, g / e0

    res = so.minimize(scaled, z0, jac=True,

                      method="L-BFGS-B", callback=stop,
                      options={"maxiter": int(maxiter), "ftol": tol, "gtol": 1e-12,
                               "maxcor": 20})
    b = path_budgets(ks, fractions(res.x), path_total)
    # an internal node the search all but switched off (logit(f) -> -inf) is left unmeasured:
    # budgets ~1e-9 give variances ~1e18 that only spoil the conditioning of other solvers
    b[(b < 1e-7 * path_total) & (depth < h)] = 0.0
    err = tree_cdf_error(ks, precisions(b), public_total=public)
    if not err < e_level:
        b, err = b_level, e_level
    n = int(starts[h + 1] - starts[h])
    err, e_level = (at_budget(float(e), noise, requested) for e in (err, e_level))
    return NodeBudgets(ks, noise, neighbours, float(requested), b * requested, err, err / n,
                       e_level / n, int(res.nit), calls[0])
