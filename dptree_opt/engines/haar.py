"""Privelet's Haar strategy (n = 2^L): the BLUE and its exact moments without a matrix.

In cumulative coordinates x_p = c_0 + .. + c_(p-1) the total row measures x_n and the row of
node [a, b) with middle m measures 2 x_m - x_a - x_b. The n measurements determine the n
unknowns x_1..x_n (A is square and invertible), so the BLUE is A^-1 y, solved top-down:
x_n = y_total (or the public N), then x_m = (x_a + x_b + y_node) / 2 level by level. With
v the node's noise variance this is the bridge decomposition of
:mod:`dptree_opt.engines.laminar` with one interior point per node: t_m = 1/2,
Var(beta_m) = v / 4, and each half's difference Var(x_m - x_a) = D_v / 4 + v / 4. So the
laminar engine's passes give the exact prefix, bin, total and all-range errors in O(n).
Checked against the dense GLS (tests/test_laminar.py).
"""

from __future__ import annotations

import weakref

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..mechanism import Mechanism
from ..strategies.haar import HaarStrategy
from .laminar import Laminar, SegmentPlan

__all__ = ["is_haar_mechanism", "haar_model", "haar_blue"]


def is_haar_mechanism(mechanism: Mechanism) -> bool:
    """Whether the Haar paths apply: a HaarStrategy whose n Haar rows carry finite noise of
    positive variance and whose appended totals are exact."""
    if not isinstance(mechanism, Mechanism) or not isinstance(mechanism.released, HaarStrategy):
        return False
    n = mechanism.released.n_bins
    if n < 2:
        return False
    var = np.asarray(mechanism.variances)
    return bool(np.all(np.isfinite(var[:n]) & (var[:n] > 0)) and np.all(var[n:] == 0))


_CACHE: "weakref.WeakKeyDictionary[Mechanism, Laminar]" = weakref.WeakKeyDictionary()


def haar_model(mechanism: Mechanism) -> Laminar:
    """The bridge decomposition (:class:`~dptree_opt.engines.laminar.Laminar`) of a Haar
    mechanism: nodes = the n - 1 tree nodes (level order), chains (a, m, b). O(n), cached."""
    if not is_haar_mechanism(mechanism):
        raise ValueError("haar_model needs a HaarStrategy mechanism with noisy Haar rows")
    hit = _CACHE.get(mechanism)
    if hit is not None:
        return hit
    strat = mechanism.released
    assert isinstance(strat, HaarStrategy)  # is_haar_mechanism checked it
    n = strat.n_bins
    var = np.asarray(mechanism.variances, dtype=float)
    a, mid, b = strat.node_bounds()
    M = n - 1
    v = var[1:n]
    ent_pt = np.stack([a, mid, b], axis=1).ravel()
    ent_node = np.repeat(np.arange(M), 3)
    ent_ptr = 3 * np.arange(M + 1)
    # children of node r = 2^j + i - 1: rows 2r + 1 and 2r + 2 of the node list (level order)
    left, right = 2 * np.arange(M) + 1, 2 * np.arange(M) + 2
    seg_child = np.stack([np.where(left < M, left, -1), np.where(right < M, right, -1),
                          np.full(M, -1)], axis=1).ravel()
    zero, one = np.zeros(M), np.ones(M)
    t = np.stack([zero, 0.5 * one, one], axis=1).ravel()
    f = np.stack([zero, v / 4.0, one], axis=1).ravel()
    g = np.stack([one, one, zero], axis=1).ravel()
    dt = np.stack([0.5 * one, 0.5 * one, zero], axis=1).ravel()
    dvar = np.stack([v / 4.0, v / 4.0, zero], axis=1).ravel()
    first = np.zeros(3 * M, bool)
    first[0::3] = True
    last = np.zeros(3 * M, bool)
    last[2::3] = True
    L = n.bit_length() - 1
    node_ptr = np.concatenate([[0], np.cumsum(1 << np.arange(L))])
    exact = var == 0
    root_exact = bool(np.any(exact))
    cond = np.zeros(max(M, 1))
    cond[0] = 1.0 / var[0]
    plan = SegmentPlan(ent_ptr)  # x_n's variance when N is private: the total row's
    model = Laminar(
        n_points=n + 1, lo=a, hi=b, w=1.0 / v, parent=(np.arange(M) - 1) // 2,
        node_ptr=node_ptr, root_exact=root_exact, cond=cond, R=np.full(M, np.inf),
        ent_ptr=ent_ptr, ent_node=ent_node, ent_pt=ent_pt, seg_child=seg_child,
        r=np.zeros(3 * M), t=t, f=f, g=g, mid=np.zeros(3 * M, bool), dt=dt, dvar=dvar,
        run_ptr=ent_ptr, row_node=np.arange(var.size), row_w=np.where(exact, 0.0, 1.0 / np.where(exact, 1.0, var)),
        exact_rows=exact, plan=plan, run_plan=plan, first=first, last=last)
    _CACHE[mechanism] = model
    return model


def haar_blue(mechanism: Mechanism, y: ArrayLike) -> npt.NDArray[np.float64]:
    """The BLUE A^-1 y of a Haar mechanism (exact total if N is public): shape (n,), or
    (trials, n) for y of shape (trials, rows). Top-down, one numpy step per level. O(n)."""
    if not is_haar_mechanism(mechanism):
        raise ValueError("haar_blue needs a HaarStrategy mechanism with noisy Haar rows")
    strat = mechanism.released
    assert isinstance(strat, HaarStrategy)  # is_haar_mechanism checked it
    n = strat.n_bins
    y = np.asarray(y, dtype=float)
    rows = strat.n_rows
    if y.ndim == 0 or y.shape[-1] != rows:
        raise ValueError(f"y must have {rows} entries per trial (one per released row), "
                         f"got shape {y.shape}")
    single = y.ndim == 1
    Y = y.reshape(-1, rows)
    used = np.ones(rows, bool)
    if strat.n_totals:  # the exact total replaces the noisy one (row 0 is not used)
        used[0] = False
        used[n + 1:] = False
    if not np.all(np.isfinite(Y[:, used])):
        raise ValueError("y must be finite on the measured rows")
    x = np.zeros((Y.shape[0], n + 1))
    x[:, n] = Y[:, n] if strat.n_totals else Y[:, 0]
    a, mid, b = strat.node_bounds()
    L = n.bit_length() - 1
    for j in range(L):
        r = slice((1 << j) - 1, (1 << (j + 1)) - 1)
        x[:, mid[r]] = 0.5 * (x[:, a[r]] + x[:, b[r]] + Y[:, 1 + r.start:1 + r.stop])
    out = np.diff(x, axis=1)
    return out[0] if single else out
