"""Honaker's O(n) efficient estimator on level-uniform trees, and the [RTS] refined CDF.

Tree layout (shared with the rest of the package): a level-uniform tree over K bins with
branching factors ``(k_1, ..., k_h)``, ``prod k_l = K``, ``k_l >= 1``. Level l (0 = root) has
``m_l = k_1 * ... * k_l`` nodes of width ``w_l = K / m_l``; node i of level l covers bins
``[i w_l, (i + 1) w_l)``. Nodes are stored level by level, root first, left to right, so
level l occupies positions ``offset_l .. offset_l + m_l - 1``; the children of node i of level
l are nodes ``i k_{l+1} .. (i + 1) k_{l+1} - 1`` of level l + 1.

Every node of level l is measured with independent zero-mean noise of variance ``v_l``.
``v_0 == 0`` means the total N is public (the root value is exact); ``v_l == inf`` means
level l is not measured (its values are ignored and may be NaN). Inverse-variance
combinations use precision ``1/inf = 0`` (the input drops out) and ``1/0 = inf`` (an exact
input dominates). A quantity that no measurement identifies gets variance ``inf`` and
estimate NaN.

Because the tree is level-uniform, every variance and every combination weight depends on
the level only: they are computed once per level in O(h), and the data are processed level
by level with vectorised reshapes, O(n) per pass over the n nodes.

Sources: [HON] Honaker, "Efficient Use of Differentially Private Binary Trees", Sec. 3.2-3.4;
[RTS] Rameshwar, Tandon, Sharma, arXiv 2409.18573, Appendix B; ``docs/math.md`` section 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Literal, TypeAlias, overload

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..limits import check_memory
from ..mechanism import Mechanism
from ..strategies import LevelUniformTree

__all__ = ["TreeEstimates", "honaker_recursions", "refined_recursion", "refined_error",
           "is_tree_mechanism", "tree_parameters", "check_answers",
           # the per-level building blocks the causal and refined engines share
           "tree_layout", "check_level_variances", "ivw", "sum_variance", "level_stats",
           "left_cover_sums"]

# refined_error's peak memory per bin, checked before it allocates: measured 61 (any
# branching) to 69 (a single level) bytes per bin at 2^18 and 2^20 bins
REFINED_BYTES_PER_BIN = 96

#: a float or a float array (the helpers work elementwise)
_FA: TypeAlias = "float | npt.NDArray[np.float64]"


@dataclass(frozen=True)
class TreeEstimates:
    """Node estimates of [HON] Sec. 3.2-3.4, in the tree's node order.

    Estimates have the shape of the input ``y`` (``(n_nodes,)`` or ``(trials, n_nodes)``);
    variances have shape ``(n_nodes,)`` (they do not depend on the data).

    Attributes:
        below, below_var: t^-, the BLUE of each node's count from the node's subtree only
            (the node and its descendants), [HON] eq. (8)/(10).
        above, above_var: t^+, the BLUE from every measurement except the node's strict
            descendants, [HON] eq. (11).
        efficient, efficient_var: t^*, the BLUE from the whole tree, [HON] eq. (13); equals
            the generalised least squares node estimates ``A x_hat`` and ``diag(A Cov A')``.
    """

    below: np.ndarray
    below_var: np.ndarray
    above: np.ndarray
    above_var: np.ndarray
    efficient: np.ndarray
    efficient_var: np.ndarray


# --------------------------------------------------------------------------- layout / validation


def tree_layout(branching: Iterable[int],
                ) -> tuple[tuple[int, ...], np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``branching``; return (k, m, w, offsets) with m_l nodes of width w_l per level."""
    try:
        given = tuple(branching)
    except TypeError:
        raise ValueError(f"branching must be a sequence of ints >= 1, got {branching!r}") from None
    for k in given:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, Integral) or int(k) < 1:
            raise ValueError(f"branching entries must be ints >= 1, got {branching!r}")
    ks = tuple(int(k) for k in given)
    m = np.cumprod((1,) + ks, dtype=np.int64)  # m_0 = 1, m_l = k_1 ... k_l
    w = m[-1] // m  # w_l = K / m_l
    offsets = np.concatenate(([0], np.cumsum(m)))  # offsets[l] = m_0 + ... + m_{l-1}
    return ks, m, w, offsets


def check_level_variances(level_variances: ArrayLike, h: int) -> npt.NDArray[np.float64]:
    """The per-level noise variances v_0..v_h (root first) as a float array, checked: h + 1
    entries, no NaN, >= 0, and 0 only at the root (a public total); inf marks an unmeasured
    level. ValueError naming ``level_variances`` otherwise."""
    v = np.asarray(level_variances, dtype=np.float64)
    if v.shape != (h + 1,):
        raise ValueError(
            f"level_variances must have length h + 1 = {h + 1} (root first), got shape {v.shape}"
        )
    if np.isnan(v).any():
        raise ValueError("level_variances must not contain NaN")
    if (v < 0).any():
        raise ValueError(f"level_variances must be non-negative, got {v.tolist()}")
    if (v[1:] == 0).any():
        raise ValueError("level_variances may be 0 only at the root (public total N); "
                         f"got {v.tolist()}")
    return v


def _check_y(y: ArrayLike, v: np.ndarray, offsets: np.ndarray) -> npt.NDArray[np.float64]:
    y = np.asarray(y, dtype=np.float64)
    n = int(offsets[-1])
    if y.ndim == 0 or y.shape[-1] != n:
        raise ValueError(
            f"y must have last dimension n_nodes = {n} for this branching, got shape {y.shape}"
        )
    for lev in np.flatnonzero(np.isfinite(v)):
        if not np.isfinite(y[..., offsets[lev]:offsets[lev + 1]]).all():
            raise ValueError(f"y has NaN or infinite values on measured level {lev}")
    return y


# --------------------------------------------------------------------------- combination helpers


def ivw(var_a: ArrayLike, var_b: ArrayLike) -> tuple[_FA, _FA]:
    """Inverse-variance weighting of independent a, b: the weight on ``a`` and the variance of
    the combination.

    [HON] Remark 1-2: w_a = v_a^-1 / (v_a^-1 + v_b^-1), var = 1 / (v_a^-1 + v_b^-1), computed
    in ratio form, w_a = v_b / (v_a + v_b) and var = v_a w_a, so that no reciprocal of a tiny
    variance overflows (1 / v is inf below ~5.6e-309: the variance would come out 0). An
    exact input (variance 0) dominates (if both are exact, ``a`` is taken), an unmeasured one
    (inf) drops out; if neither input carries information the weight is NaN and the variance
    inf. Works elementwise.
    """
    var_a, var_b = np.asarray(var_a, dtype=np.float64), np.asarray(var_b, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # a sum that overflows: the same ratio with both halved (the cases np.select
        # overrides below may give anything here)
        half = np.where(np.isinf(var_a + var_b), 0.5, 1.0)
        w_a = (half * var_b) / (half * var_a + half * var_b)
        var = var_a * w_a
    exact_a, exact_b = var_a == 0, var_b == 0
    inf_a, inf_b = np.isinf(var_a), np.isinf(var_b)
    w_a = np.select([exact_a, exact_b, inf_a & inf_b, inf_a, inf_b],
                    [1.0, 0.0, np.nan, 0.0, 1.0], w_a)
    var = np.select([exact_a | exact_b, inf_a, inf_b], [0.0, var_b, var_a], var)
    return w_a[()], var[()]


def _mix(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], w_a: _FA) -> npt.NDArray[np.float64]:
    """w_a a + (1 - w_a) b without letting an ignored (weight 0) NaN/inf input leak in.

    With a scalar weight an input may be returned as is (callers copy it into their output).
    """
    if np.ndim(w_a) == 0:  # one weight for a whole level
        if w_a == 1.0:
            return a
        if w_a == 0.0:
            return b
        if np.isnan(w_a):
            return np.full(np.broadcast_shapes(np.shape(a), np.shape(b)), np.nan)
        out = np.multiply(b, 1.0 - w_a)  # one temporary of the level's size
        out += w_a * a
        return out
    return np.where(w_a == 1.0, a, np.where(w_a == 0.0, b, w_a * a + (1.0 - w_a) * b))


def sum_variance(count: ArrayLike, var: ArrayLike) -> _FA:
    """Variance of a sum of ``count`` independent terms of variance ``var`` (0 terms: 0)."""
    if np.ndim(count) == 0:
        return np.multiply(count, var) if count else 0.0
    with np.errstate(invalid="ignore"):  # 0 * inf is masked out
        n = np.asarray(count)
        return np.where(n > 0, n * np.asarray(var, dtype=np.float64), 0.0)


def _family_sum(fam: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Sum over the last axis of (..., families, k) sibling blocks. O(size)."""
    k = fam.shape[-1]
    if k > 8:
        return fam.sum(axis=-1)
    out = fam[..., 0].copy()
    for j in range(1, k):  # loop over the k siblings, not nodes: ~4x faster than sum(-1) at k = 2
        out += fam[..., j]
    return out


# --------------------------------------------------------------------------- per-level variances


def level_stats(ks: Sequence[int], v: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per-level variances (O(h)): below, alternative a = t^+_parent - siblings' t^-, above, t^*
    ([HON] eqs. (10), (11), (13)) for branching ``ks`` and level variances ``v`` (checked).

    Returns arrays of length h + 1; the alternative is undefined at the root (inf).
    """
    h = len(ks)
    vb = np.empty(h + 1)  # var(t^-), [HON] eq. (10): leaves v_h, node 1 / (v_l^-1 + var(S)^-1)
    vb[h] = v[h]
    for lev in range(h - 1, -1, -1):
        vb[lev] = ivw(v[lev], sum_variance(ks[lev], vb[lev + 1]))[1]
    valt = np.full(h + 1, np.inf)  # var(a) = var(t^+_parent) + (k_l - 1) var(t^-_l)
    vabove = np.empty(h + 1)  # var(t^+), [HON] eq. (11); root: v_0 (0 if N public)
    veff = np.empty(h + 1)  # var(t^*), [HON] eq. (13); root: t^* = t^-
    vabove[0], veff[0] = v[0], vb[0]
    for lev in range(1, h + 1):
        valt[lev] = vabove[lev - 1] + sum_variance(ks[lev - 1] - 1, vb[lev])
        vabove[lev] = ivw(v[lev], valt[lev])[1]
        veff[lev] = ivw(vb[lev], valt[lev])[1]
    return vb, valt, vabove, veff


def _below_pass(ks: Sequence[int], m: np.ndarray, offsets: np.ndarray, v: npt.NDArray[np.float64], vb: npt.NDArray[np.float64],
                y2: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """t^- for every node of y2 (shape (trials, n)), bottom-up, [HON] eq. (10). O(n) per trial."""
    h = len(ks)
    below = np.empty_like(y2)
    lv = slice(offsets[h], offsets[h + 1])
    below[:, lv] = y2[:, lv] if np.isfinite(v[h]) else np.nan
    for lev in range(h - 1, -1, -1):
        cur, nxt = slice(offsets[lev], offsets[lev + 1]), slice(offsets[lev + 1], offsets[lev + 2])
        # S = sum of the children's t^-: reshape (trials, m_l, k_{l+1}) and reduce, O(m_{l+1})
        s = _family_sum(below[:, nxt].reshape(y2.shape[0], m[lev], ks[lev]))
        w_y = ivw(v[lev], sum_variance(ks[lev], vb[lev + 1]))[0]
        below[:, cur] = _mix(y2[:, cur], s, w_y)
    return below


# --------------------------------------------------------------------------- public API


def honaker_recursions(branching: Iterable[int], level_variances: ArrayLike,
                       y: ArrayLike) -> TreeEstimates:
    r"""Honaker's efficient node estimates on a level-uniform k-ary tree ([HON] Sec. 3.2-3.4).

    Generalised to branching factors k_l and per-level variances v_l as in docs/math.md section 2.
    Writing t_i for the measurement of node i (variance v_l at level l) and ivw(.) for the
    inverse-variance combination of independent unbiased estimates
    (weights v^-1 / sum v^-1, variance 1 / sum v^-1, [HON] eqs. (4)-(5)):

    * from below ([HON] eq. (10)): leaves t^- = t, var v_h; a node at level l combines t_i with
      S = sum of its k_{l+1} children's t^- (var k_{l+1} var(t^-_{l+1})):
      t^- = w t_i + (1 - w) S, w = v_l^-1 / (v_l^-1 + var(S)^-1), var(t^-) = 1/(v_l^-1 + var(S)^-1).
    * from above ([HON] eq. (11)): root t^+ = t_root, var v_0 (0 if N is public). A node i at
      level l >= 1 has the alternative a_i = t^+_parent - sum of its siblings' t^-,
      var(a) = var(t^+_parent) + (k_l - 1) var(t^-_l), and t^+ = ivw(t_i, a_i).
    * fully efficient ([HON] eq. (13)): t^*_i = ivw(t^-_i, a_i); at the root t^* = t^-.
      t^-_i, the siblings' t^- and t^+_parent use disjoint sets of measurements, so the
      combinations are exact BLUEs: t^* = A x_hat and var(t^*) = diag(A Cov A') of the GLS.

    Args:
        branching: sequence of ints k_1..k_h >= 1 (empty: a single node, K = 1).
        level_variances: length h + 1, root first; 0 allowed only at the root (public total),
            inf = level not measured.
        y: measurements, shape (n_nodes,) or (trials, n_nodes), in the tree's node order; must
            be finite on measured levels.

    Returns:
        TreeEstimates; estimates shaped like ``y``, variances of shape (n_nodes,). Unidentifiable
        quantities have variance inf and estimate NaN.

    Complexity: O(h) for the variances, then two passes over the nodes, O(n) per trial; no loop
    over nodes. Memory: the outputs plus a few temporaries of the largest level's size.

    >>> est = honaker_recursions([2, 2, 2], [0.0, 1.0, 1.0, 1.0], np.zeros(15))
    >>> bool(np.isclose(est.below_var[1], 4 / 7)), bool(np.isclose(est.above_var[1], 4 / 11))
    (True, True)
    """
    ks, m, _, offsets = tree_layout(branching)
    h = len(ks)
    v = check_level_variances(level_variances, h)
    y = _check_y(y, v, offsets)
    y2 = y.reshape(-1, y.shape[-1])
    trials = y2.shape[0]
    vb, valt, vabove, veff = level_stats(ks, v)

    below = _below_pass(ks, m, offsets, v, vb, y2)
    above = np.empty_like(y2)
    efficient = np.empty_like(y2)
    root = slice(0, 1)
    above[:, root] = y2[:, root] if np.isfinite(v[0]) else np.nan
    efficient[:, root] = below[:, root]
    for lev in range(1, h + 1):
        par, cur = slice(offsets[lev - 1], offsets[lev]), slice(offsets[lev], offsets[lev + 1])
        k = ks[lev - 1]
        tb = below[:, cur].reshape(trials, m[lev - 1], k)
        # a_i = t^+_parent - (sum of the family's t^- - t^-_i): O(m_l), one temporary
        p = above[:, par] if k == 1 else above[:, par] - _family_sum(tb)
        alt = (p[..., None] if k == 1 else p[..., None] + tb).reshape(trials, m[lev])
        above[:, cur] = _mix(y2[:, cur], alt, ivw(v[lev], valt[lev])[0])
        efficient[:, cur] = _mix(below[:, cur], alt, ivw(vb[lev], valt[lev])[0])

    def per_node(level_values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.repeat(level_values, m)

    return TreeEstimates(
        below=below.reshape(y.shape),
        below_var=per_node(vb),
        above=above.reshape(y.shape),
        above_var=per_node(vabove),
        efficient=efficient.reshape(y.shape),
        efficient_var=per_node(veff),
    )


def left_cover_sums(ks: Sequence[int], family_offsets: Sequence[_FA],
                    lead_shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """S[..., t] = sum of node values over the greedy covering of [0, t), for t = 0..K-1.

    The covering of [0, t) is the covering of [0, parent start) plus the first d_l siblings of
    the level-l node containing bin t (d_l = mixed-radix digit of t), so level by level
    S_l[j] = S_{l-1}[j // k_l] + (sum of the first j % k_l siblings of node j).
    ``family_offsets[l - 1]`` holds those within-family exclusive sums, shape
    lead_shape + (m_{l-1}, k_l) or broadcastable to it. O(K) per trial (geometric series).
    """
    s = np.zeros(lead_shape + (1,))
    for fam in family_offsets:
        s = (s[..., None] + fam).reshape(lead_shape + (-1,))
    return s


def _exclusive_family_sums(level_values: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.float64]:
    """Within each family of k siblings, the sum of the preceding siblings' values. O(m_l)."""
    fam = level_values.reshape(level_values.shape[:-1] + (-1, k))
    out = np.zeros_like(fam)
    np.cumsum(fam[..., :-1], axis=-1, out=out[..., 1:])
    return out


def _refined_variances(ks: Sequence[int], v: npt.NDArray[np.float64], vb: npt.NDArray[np.float64]) -> tuple[_FA, _FA]:
    """Variances of the refined prefix estimates for t = 1..K-1, and the weight on L_t. O(K).

    var(L_t) = sum_l d_l(t) var(t^-_l); by mirror symmetry of a level-uniform tree the right
    covering of [t, K) has the level counts of the left covering of [0, K - t), so
    var(R_t) = v_0 + var(L_{K-t}) (v_0 = 0 when N is public).
    """
    digits = [np.arange(k, dtype=np.float64) for k in ks]
    var_cover = left_cover_sums(ks, [sum_variance(d, vb[lev])
                                     for lev, d in enumerate(digits, 1)], ())
    var_left, var_right = var_cover[1:], v[0] + var_cover[:0:-1]
    return ivw(var_left, var_right)


def refined_recursion(branching: Iterable[int], level_variances: ArrayLike,
                      y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    r"""[RTS] Appendix B "refined" estimates of the cumulative counts C_t = x_0 + ... + x_{t-1}.

    Step 1: t^- (estimation from below, [HON] eq. (10)) for every node.
    Step 2: for t = 1..K-1, the left estimate L_t = sum of t^- over the greedy covering of
    [0, t) and the right estimate R_t = y_root - sum of t^- over the greedy covering of [t, K)
    (y_root = N when the total is public, v_0 = 0; with a private root the raw noisy root is
    used, variance v_0 + sum of the covering variances; with an unmeasured root there is no
    R_t). The two coverings use disjoint subtrees and the raw root is not in any of them, so L_t
    and R_t are independent; they are combined with inverse-variance weights
    ([HON] eqs. (4)-(5)). For t = K the estimate is t^-_root, the BLUE of the total (combining it
    with the raw root again would count y_root twice when N is private).

    Variances are exact: var(L_t) = sum_l d_l(t) var(t^-_l) where d_l(t) is the number of
    level-l nodes in the covering (docs/math.md section 2; [RTS] Lemma B.1 for the right covering).

    Args:
        branching, level_variances, y: as in :func:`honaker_recursions`.

    Returns:
        (estimates of shape y.shape[:-1] + (K,), variances of shape (K,)), index t - 1 for C_t.

    Complexity: O(n) per trial: step 1 is one bottom-up pass; step 2 builds the covering sums
    of all K prefixes level by level from within-family cumulative sums (no per-prefix loop).
    """
    ks, m, w, offsets = tree_layout(branching)
    h = len(ks)
    v = check_level_variances(level_variances, h)
    y = _check_y(y, v, offsets)
    y2 = y.reshape(-1, y.shape[-1])
    trials, n_bins = y2.shape[0], int(w[0])
    vb = level_stats(ks, v)[0]
    below = _below_pass(ks, m, offsets, v, vb, y2)

    def cover_sums(mirror: bool) -> npt.NDArray[np.float64]:
        offs: list[_FA]
        offs = []
        for lev, k in enumerate(ks, 1):
            level = below[:, offsets[lev]:offsets[lev + 1]]
            if not np.isfinite(vb[lev]):  # t^- is NaN here; the prefixes using it get var inf
                offs.append(np.zeros(k))  # broadcast over families, expanded k-fold
                continue
            offs.append(_exclusive_family_sums(level[:, ::-1] if mirror else level, k))
        return left_cover_sums(ks, offs, (trials,))

    left = cover_sums(mirror=False)[:, 1:]  # L_t, t = 1..K-1
    # the right covering of [t, K) is the left covering of [0, K - t) in the mirrored tree
    right = y2[:, :1] - cover_sums(mirror=True)[:, :0:-1]
    w_left, var = _refined_variances(ks, v, vb)

    est = np.empty((trials, n_bins))
    est[:, :-1] = _mix(left, right, w_left)
    est[:, -1] = below[:, 0]
    return est.reshape(y.shape[:-1] + (n_bins,)), np.append(var, vb[0])


@overload
def refined_error(branching: Iterable[int], level_variances: ArrayLike,
                  per_query: Literal[False] = False) -> float: ...
@overload
def refined_error(branching: Iterable[int], level_variances: ArrayLike,
                  per_query: Literal[True]) -> npt.NDArray[np.float64]: ...
@overload
def refined_error(branching: Iterable[int], level_variances: ArrayLike,
                  per_query: bool = False) -> float | npt.NDArray[np.float64]: ...
def refined_error(branching: Iterable[int], level_variances: ArrayLike,
                  per_query: bool = False) -> float | npt.NDArray[np.float64]:
    """Total (or per-prefix) variance of the [RTS] App. B refined CDF estimator, count scale.

    Sum over t = 1..K of var(refined C_t) as returned by :func:`refined_recursion`, computed from the
    per-level variances of t^- without building any matrix or data (O(K) time and memory).
    Divide by N^2 for the [RTS] normalisation of F = C / N.

    Args:
        branching, level_variances: as in :func:`honaker_recursions`.
        per_query: return the length-K vector of per-prefix variances instead of the sum.
    """
    ks = tree_layout(branching)[0]
    v = check_level_variances(level_variances, len(ks))
    K = math.prod(ks)
    check_memory(REFINED_BYTES_PER_BIN * K, f"the refined estimator's variances over {K} "
                 "bins (one pass over every node)", "use fewer bins")
    vb = level_stats(ks, v)[0]
    var = np.append(_refined_variances(ks, v, vb)[1], vb[0])
    return var if per_query else float(var.sum())


# ------------------------------------------------------------ a mechanism's tree
def is_tree_mechanism(mechanism: Mechanism) -> bool:
    """Whether the fast tree paths apply: the released strategy is a level-uniform tree with
    budgets per level (not ``row_budgets``) whose non-root levels are noisy or unmeasured (a non-root level is exact only when it repeats
    the root, e.g. one bin under swap; the generic solver handles that)."""
    if not isinstance(mechanism.released, LevelUniformTree) or mechanism.row_budgets is not None:
        return False  # budgets per row: not level-uniform noise (the bridge engine applies)
    return all(v > 0 for lvl, v in mechanism.level_variances.items() if lvl > 0)


def tree_parameters(mechanism: Mechanism) -> tuple[tuple[int, ...], np.ndarray]:
    """(branching, level variances v_0..v_h) of a mechanism on a level-uniform tree."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if not is_tree_mechanism(mechanism):
        raise ValueError(f"{mechanism.released.name!r} is not a level-uniform tree with noisy "
                         "non-root levels (use strategies.tree, or the generic estimators)")
    tree = mechanism.released
    assert isinstance(tree, LevelUniformTree)  # is_tree_mechanism checked it
    variances = mechanism.level_variances
    return tree.branching, np.array([variances[lvl] for lvl in range(tree.height + 1)])


def check_answers(mechanism: Mechanism, y: ArrayLike) -> npt.NDArray[np.float64]:
    """y as floats, checked to hold one entry per released row (shape (rows,) or
    (trials, rows))."""
    y = np.asarray(y, dtype=float)
    rows = mechanism.released.n_rows
    if y.ndim == 0 or y.shape[-1] != rows:
        raise ValueError(f"y must have {rows} entries per trial (one per released row), got "
                         f"shape {y.shape}")
    return y
