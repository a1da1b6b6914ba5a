"""Closed-form error sums of level-uniform trees, from (branching, level variances) alone
(docs/math.md sections 3 and 4; the tree searches' exact scores).

A tree is a chain of node widths K' = w_0 > w_1 > ... > w_h = 1, w_l = w_(l-1) / k_l
(:func:`chain_widths`). The prefixes are [0, t), t = 1..K (K <= K': a padded tree's first K
bins), T = K + 1 (t = 0 contributes nothing). Every sum is exact (integers) or a ratio of
exact integers, O(h) per tree; the tests check each against the generic dense oracles.

* covering ([RTS] Thm IV.1 proof): the covering estimate of [0, t) uses d_l(t) =
  floor(t / w_l) mod k_l nodes of level l (mixed-radix digits; t = K' is the root itself),
  so its error is sum_l v_l F_l, F_l = sum_(t < T) d_l(t) (:func:`digit_sum`,
  :func:`covering_level_sums`); unpadded F_l = K (k_l - 1) / 2.
* BLUE (docs/math.md section 3): q' Cov q = mu_0 (1'q)^2 / K' + sum_j mu_j
  N_j(t mod w_(j-1)) / w_(j-1), N_j(R) = i (k - i) w^2 - 2 i w r + (k - 1) r^2 for
  R = i w + r, w = w_j, summed over t < T in closed form (:func:`haar_sum`,
  :func:`blue_level_sums`), mu_j the Haar variances of ``engines.tree_error``.
* refined ([RTS] App. B): :func:`refined_prefix_error`, an O(h^3) closed form.
* per-axis workload weights of a (padded) tree for grids (docs/math.md section 8):
  :func:`node_gram_sum` and :func:`haar_level_weight` for the prefix, identity, total and
  all-range workloads restricted to the first n bins.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

__all__ = ["chain_widths", "digit_sum", "haar_sum", "haar_sum_float", "covering_level_sums",
           "blue_level_sums", "refined_prefix_error", "sum_of_squares",
           "node_gram_sum", "haar_level_weight"]


def chain_widths(ks: Sequence[int]) -> list[int]:
    """The node widths [K', w_1, .., w_h = 1] of the chain ks = (k_1..k_h), K' = prod k_l."""
    w = [math.prod(ks)]
    for k in ks:
        w.append(w[-1] // k)
    return w


def digit_sum(T: int, W: int, w: int) -> int:
    """sum_{t < T} (floor(t / w) mod k), k = W / w: full cycles of W plus one partial cycle."""
    k = W // w
    a, r = divmod(T, W)
    b, c = divmod(r, w)
    return a * w * k * (k - 1) // 2 + w * b * (b - 1) // 2 + b * c


@lru_cache(maxsize=1 << 16)
def haar_sum(T: int, W: int, w: int) -> int:
    """sum_{t < T} N(t mod W), N(R) = i (k - i) w^2 - 2 i w r + (k - 1) r^2, R = i w + r.

    One full cycle sums to (k - 1) W (W w + 1) / 6 (exact integer); the partial cycle of
    R < rem = b w + c adds the b full children and the first c offsets of child b."""
    k = W // w
    a, rem = divmod(T, W)
    full = (k - 1) * W * (W * w + 1) // 6
    b, c = divmod(rem, w)
    s_i, s_i2 = b * (b - 1) // 2, (b - 1) * b * (2 * b - 1) // 6
    s_r, s_r2 = w * (w - 1) // 2, (w - 1) * w * (2 * w - 1) // 6
    part = w**3 * (k * s_i - s_i2) - 2 * w * s_r * s_i + (k - 1) * b * s_r2
    part += (b * (k - b) * w * w * c - 2 * b * w * (c * (c - 1) // 2)
             + (k - 1) * ((c - 1) * c * (2 * c - 1) // 6))
    return a * full + part


def haar_sum_float(T: float, W: ArrayLike, w: ArrayLike) -> npt.NDArray[np.float64]:
    """:func:`haar_sum` in float64, vectorised over arrays W, w (relative error ~1e-15: for
    bounds only, which the searches shrink by a safety factor before pruning)."""
    Tf = float(T)
    Wf = np.asarray(W, dtype=float)
    wf = np.asarray(w, dtype=float)
    k = Wf / wf
    a = np.floor(Tf / Wf)
    rem = Tf - a * Wf
    full = (k - 1) * Wf * (Wf * wf + 1) / 6
    b = np.floor(rem / wf)
    c = rem - b * wf
    s_i, s_i2 = b * (b - 1) / 2, (b - 1) * b * (2 * b - 1) / 6
    s_r, s_r2 = wf * (wf - 1) / 2, (wf - 1) * wf * (2 * wf - 1) / 6
    part = wf**3 * (k * s_i - s_i2) - 2 * wf * s_r * s_i + (k - 1) * b * s_r2
    part += b * (k - b) * wf * wf * c - 2 * b * wf * (c * (c - 1) / 2) \
        + (k - 1) * ((c - 1) * c * (2 * c - 1) / 6)
    return np.maximum(a * full + part, 0.0)


def covering_level_sums(branching: Iterable[float],
                        n_prefixes: int | None = None) -> tuple[int, ...]:
    """(F_0, F_1..F_h): how often each level's nodes are used by the covering estimator over
    the first ``n_prefixes`` prefixes of the tree (default all K' = prod k_l).

    F_l = sum_{t=1}^{K} (floor(t / w_l) mod k_l) for l >= 1 (mixed-radix digits); F_0 = 1 if the
    total K' is among the prefixes (the root alone covers it), else 0. Unpadded,
    F_l = K (k_l - 1) / 2 ([RTS] Thm IV.1 proof). Exact integers, O(h)."""
    ks = tuple(int(k) for k in branching)
    w = chain_widths(ks)
    K = w[0] if n_prefixes is None else int(n_prefixes)
    if not 1 <= K <= w[0]:
        raise ValueError(f"n_prefixes must be in [1, {w[0]}], got {n_prefixes!r}")
    return (int(K == w[0]),) + tuple(digit_sum(K + 1, w[l - 1], w[l])
                                     for l in range(1, len(ks) + 1))


def blue_level_sums(branching: Iterable[float],
                    n_prefixes: int | None = None) -> tuple[float, ...]:
    """(H_0, H_1..H_h) with the BLUE error of the first K prefixes = sum_j mu_j H_j
    (mu_j = Haar eigenvalues of the BLUE covariance,
    ``engines.tree_error.blue_haar_variances``):
    H_0 = sum_{t<=K} t^2 / K', H_j = sum_{t<=K} N_j(t mod w_{j-1}) / w_{j-1}. O(h)."""
    ks = tuple(int(k) for k in branching)
    w = chain_widths(ks)
    K = w[0] if n_prefixes is None else int(n_prefixes)
    if not 1 <= K <= w[0]:
        raise ValueError(f"n_prefixes must be in [1, {w[0]}], got {n_prefixes!r}")
    h0 = K * (K + 1) * (2 * K + 1) // 6 / w[0]
    return (h0,) + tuple(haar_sum(K + 1, w[l - 1], w[l]) / w[l - 1]
                         for l in range(1, len(ks) + 1))


def _below_variances(ks: Sequence[int], v: Sequence[float]) -> list[float]:
    """var(t^-) per level, root first ([HON] estimation from below): leaves v_h, then
    1 / (1 / v_l + 1 / (k_(l+1) var_(l+1))) with 1/inf = 0 and 1/0 = inf. The values of
    ``engines.causal.from_below_variances`` without its validation, in scalar floats: the
    refined search calls this ~10^5 times on h <= 26 levels (3.5x faster measured)."""
    h = len(ks)
    vb = [0.0] * (h + 1)
    vb[h] = float(v[h])
    for lev in range(h - 1, -1, -1):
        prec = 0.0
        for var in (float(v[lev]), ks[lev] * vb[lev + 1]):
            prec += 0.0 if math.isinf(var) else (math.inf if var == 0 else 1.0 / var)
        vb[lev] = math.inf if prec == 0 else (0.0 if math.isinf(prec) else 1.0 / prec)
    return vb


def refined_prefix_error(branching: Iterable[float], level_variances: Iterable[float],
                         n_prefixes: int | None = None) -> float:
    """Total variance of the [RTS] App. B refined estimates of the first ``n_prefixes``
    prefix counts of a (possibly padded) level-uniform tree, in closed form, O(h^3).

    Equal to ``engines.honaker.refined_error(branching, v, per_query=True)[:n].sum()``
    (tests), which costs O(K'). Derivation: with b_l = var(t^-) of level l and the digits d_l
    of t, L_t = sum_l d_l b_l. If p is the deepest level with d_p > 0, the right covering of
    [t, K') has digits k_l - 1 - d_l (l < p), k_p - d_p (l = p), 0 (l > p)
    (K' - t = (K' - 1 - t) + 1), so
    L_t + R_t = v_0 + sum_{l<p} (k_l - 1) b_l + k_p b_p = M_p depends on p only and
    var_t = L_t R_t / (L_t + R_t) = L_t - L_t^2 / M_p. Summing over the prefixes with a given
    p needs only the mean and variance of L_t (independent uniform digits); t < K splits into
    the usual mixed-radix blocks (digits of K fixed above level j, d_j < D_j, free below).
    t = K' is the root's t^- (variance vb_0)."""
    ks = tuple(int(k) for k in branching)
    h = len(ks)
    v = [float(x) for x in level_variances]
    Kp = math.prod(ks)
    K = Kp if n_prefixes is None else int(n_prefixes)
    vb = _below_variances(ks, v)
    b = vb[1:]
    M, acc = [], 0.0
    for p in range(h):
        M.append(v[0] + acc + ks[p] * b[p])
        acc += (ks[p] - 1) * b[p]
    free_mean = [b[l] * (ks[l] - 1) / 2.0 for l in range(h)]
    free_var = [b[l] ** 2 * (ks[l] ** 2 - 1) / 12.0 for l in range(h)]
    last_mean = [b[l] * ks[l] / 2.0 for l in range(h)]  # d_p uniform on [1, k_p)
    last_var = [b[l] ** 2 * (ks[l] ** 2 - 2 * ks[l]) / 12.0 for l in range(h)]

    def group(p: int, n: int, mean: float, var: float) -> float:
        if n == 0:
            return 0.0
        s1, s2 = n * mean, n * (var + mean * mean)
        return s1 if math.isinf(M[p]) else s1 - s2 / M[p]

    def single(digits: Sequence[int]) -> float:
        L = sum(d * bl for d, bl in zip(digits, b) if d)
        p = max(i for i, d in enumerate(digits) if d > 0)
        return L if math.isinf(M[p]) else L * (M[p] - L) / M[p]

    total = 0.0
    if K == Kp:  # t = 1..K'-1: every nonzero digit tuple, then t = K'
        count, mean, var = 1, 0.0, 0.0
        for p in range(h):
            total += group(p, count * (ks[p] - 1), mean + last_mean[p], var + last_var[p])
            count *= ks[p]
            mean += free_mean[p]
            var += free_var[p]
        return total + vb[0]
    w = chain_widths(ks)
    D = [(K // w[l + 1]) % ks[l] for l in range(h)]
    A = 0.0
    for j in range(h):
        Dj = D[j]
        if Dj > 0:
            if any(D[:j]):  # deepest nonzero digit above j: one prefix
                total += single(D[:j] + [0] * (h - j))
            if Dj >= 2:  # p = j, d_j in [1, D_j)
                total += group(j, Dj - 1, A + b[j] * Dj / 2.0,
                               b[j] ** 2 * ((Dj - 1) ** 2 - 1) / 12.0)
            count, mean = Dj, A + b[j] * (Dj - 1) / 2.0
            var = b[j] ** 2 * (Dj**2 - 1) / 12.0
            for p in range(j + 1, h):  # d_j < D_j, free digits between, d_p in [1, k_p)
                total += group(p, count * (ks[p] - 1), mean + last_mean[p], var + last_var[p])
                count *= ks[p]
                mean += free_mean[p]
                var += free_var[p]
        A += Dj * b[j]
    return total + single(D)


def sum_of_squares(m: int) -> int:
    """sum_(r <= m) r^2, exact."""
    return m * (m + 1) * (2 * m + 1) // 6


def _all_range_block(n: int, s: int, L: int) -> int:
    """sum over x, y in [s, s + L) of (min(x, y) + 1)(n - max(x, y)) (the all-range Gram on
    [0, n); ``engines.tree_error`` has it in floats), exact integer."""
    sx = L * s + L * (L - 1) // 2
    return n * L * L + (n - 1) * L * sx - (n + 1) * (L**3 - L) // 6 - sx * sx


@lru_cache(maxsize=1 << 16)
def node_gram_sum(kind: str, n: int, w: int) -> int:
    """G(w) = sum over the queries of ``kind`` within the first n bins of sum over the nodes
    [o, o + w), o = 0, w, 2w, .., of (query . 1_node)^2: an exact integer (the Q_l of
    ``engines.tree_error``, for a tree padded beyond n). a, b = divmod(n, w): a full nodes and
    one cut by n."""
    a, b = divmod(n, w)
    if kind == "identity":
        return n
    if kind == "total":
        return a * w * w + b * b
    if kind == "prefix":  # [0, t), t = 1..n: G = (t // w) w^2 + (t mod w)^2
        return (w**3 * a * (a - 1) // 2 + a * sum_of_squares(w - 1) + (b + 1) * a * w * w
                + sum_of_squares(b))
    # all_range: sum over nodes of 1_N' G 1_N; full nodes at s = c w, c < a (sx linear in c)
    h = w * (w - 1) // 2
    sum_sx = w * w * a * (a - 1) // 2 + a * h
    sum_sx2 = (w**4 * (a - 1) * a * (2 * a - 1) // 6 + 2 * w * w * h * (a * (a - 1) // 2)
               + a * h * h)
    full = a * n * w * w + (n - 1) * w * sum_sx - a * (n + 1) * (w**3 - w) // 6 - sum_sx2
    return full + (_all_range_block(n, a * w, b) if b else 0)


@lru_cache(maxsize=1 << 16)
def haar_level_weight(kind: str, n: int, W: int, u: int) -> float:
    """q_j = sum over the queries of ||D_j q||^2 for a level of node width u under parents of
    width W (u = W: the root's q_0 with W = K'): ||D_j q||^2 = ||E_j q||^2 - ||E_(j-1) q||^2
    and ||E_l q||^2 summed = G(w_l) / w_l (docs/math.md section 3), so
    q_j = (W G(u) - u G(W)) / (u W), the numerator exact (no cancellation)."""
    if W == u:
        return node_gram_sum(kind, n, W) / W
    return (W * node_gram_sum(kind, n, u) - u * node_gram_sum(kind, n, W)) / (u * W)

