"""Level-uniform trees: exact error of the BLUE (Honaker's efficient estimator), O(h) or O(K).

Setting (docs/math.md sections 0-3)
------------------------------
A level-uniform tree over K bins has branching (k_1, ..., k_h), prod k_l = K, k_l >= 1. Level l
(0 = root) has m_l = k_1 ... k_l nodes of width w_l = K / m_l; node i covers the bins
[i w_l, (i+1) w_l). Every level-l node is measured with independent noise of variance v_l:
v_0 = 0 means the total N is public (an equality constraint 1'x = N), v_l = inf means the level
is not measured. The BLUE (generalised least squares, constrained when v_0 = 0) is unbiased with
covariance Cov, so its expected squared error on a workload W is trace(W Cov W') (docs/math.md
section 2).

Derivation (docs/math.md section 3, verified here and in tests/test_tree_error.py)
------------------------------------------------------------------------------
Let E_l = (1/w_l) (I_{m_l} kron J_{w_l}): the orthogonal projector onto vectors constant on every
level-l node. The ranges are nested (E_0 is the constants, E_h = I), so E_l E_j = E_min(l, j).
The *generalised Haar* projectors D_0 = E_0 and D_j = E_j - E_{j-1} (j = 1..h) are therefore
mutually orthogonal, sum to I, and D_j has rank m_{j-1} (k_j - 1) (zero when k_j = 1): its range
holds the vectors constant on level-j nodes whose sum over the children of every level-(j-1)
node is zero. The information matrix is

    A' V^-1 A = sum_l (w_l / v_l) E_l = sum_j lambda_j D_j,   lambda_j = sum_{l >= j} w_l / v_l,

(1/inf = 0), so its eigenvalue on the Haar subspace j is lambda_j and

    Cov = sum_j mu_j D_j,   mu_j = 1 / lambda_j,

over the non-empty subspaces (j = 0, and j >= 1 with k_j >= 2). With N public (v_0 = 0) the
constrained-GLS covariance is the inverse restricted to 1'x = 0, the complement of D_0: since
every E_l commutes with D_0 this just sets mu_0 = 0 and leaves the other mu_j unchanged
(lambda_j, j >= 1, does not involve v_0). The histogram is identifiable iff lambda_j > 0 on
every non-empty subspace (j = 0 excepted when N is public); lambda_j decreases with j, so this
fails exactly when no level at depth >= J is measured, J the deepest level with k_J >= 2 (for
K = 1, J = 0: N must be public or measured).

Rewriting D_j = E_j - E_{j-1} gives the block form of docs/math.md section 3,

    Cov = sum_l c_l (I_{m_l} kron J_{w_l}),   c_l = (mu_l - mu_{l+1}) / w_l,  mu_{h+1} = 0,

where an empty subspace (k_j = 1) takes mu_j = mu_{j-1} (then E_j = E_{j-1} and the choice only
moves weight between equal matrices). Since mu_l <= mu_{l+1}, c_l <= 0 for l < h and sums
built from the c_l cancel; the error formulas below use the Haar form (non-negative terms).

Errors. For a query vector q, q' Cov q = mu_0 (1'q)^2 / K + sum_{j >= 1} mu_j ||D_j q||^2 and
||D_j q||^2 = (k_j G_j(q) - G_{j-1}(q)) / w_{j-1} with the integer G_l(q) = sum over level-l
nodes of (q . 1_node)^2 (the numerator is an exact integer >= 0). Summed over a workload,
sum_q G_l(q) = Q_l = sum over level-l nodes of 1_node' (W'W) 1_node, a polynomial in (m_l, w_l)
evaluated in exact integer arithmetic for the prefix (W'W = K - max(i, j)), identity (W'W = I) and
all-range (W'W = (min(i, j) + 1)(K - max(i, j))) workloads. The total error is therefore
sum_j q_j mu_j with workload weights q_0 = Q_0 / K, q_j = (k_j Q_j - Q_{j-1}) / w_{j-1}
(:func:`haar_workload_weights`; also for the first n prefixes only, for padded trees).

Complexity: coefficients O(h); totals O(h) (no dependence on K); per-query prefix O(K) (the
level-j contribution depends only on t mod w_{j-1}: it is built on [0, w_{j-1}) and tiled,
sum_j w_{j-1} <= 2K); per-query identity O(K); per-query all-range O(K^2 h), only for
K <= 4096. No K x K matrix is ever formed.
"""

from __future__ import annotations

import math
from numbers import Integral
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias, overload

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..limits import check_memory
from .honaker import tree_parameters

if TYPE_CHECKING:
    from ..mechanism import Mechanism

#: a float or a float array (the closed forms are vectorised)
_FA: TypeAlias = "float | npt.NDArray[np.float64]"

__all__ = ["blue_haar_variances", "blue_covariance_coefficients", "blue_error",
           "all_range_level_weight",
           "blue_range_variances", "haar_workload_weights", "WORKLOADS"]

WORKLOADS = ("prefix", "identity", "all_range")

# Per-query all-range output has K (K + 1) / 2 entries: refuse above this many bins.
MAX_ALL_RANGE_PER_QUERY_K = 4096
# Per-query prefix uses int64 numerators bounded by K^2: keep K^2 < 2^63.
_MAX_PER_QUERY_K = 2**31


def check_branching(branching: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validate the branching; return (branching tuple, widths tuple of ints)."""
    if isinstance(branching, (str, bytes)) or not hasattr(branching, "__len__"):
        raise ValueError(f"branching must be a sequence of integers >= 1, got {branching!r}")
    ks: list[int] = []
    for k in branching:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, Integral) or int(k) < 1:
            raise ValueError(f"branching entries must be integers >= 1, got {list(branching)!r}")
        ks.append(int(k))
    widths = [math.prod(ks)]
    for k in ks:
        widths.append(widths[-1] // k)
    return tuple(ks), tuple(widths)


def check_tree(branching: Iterable[int], level_variances: ArrayLike,
               ) -> tuple[tuple[int, ...], tuple[int, ...], npt.NDArray[np.float64]]:
    """Validate the tree; return (branching tuple, widths tuple of ints, variances ndarray)."""
    ks, widths = check_branching(branching)

    try:
        v = np.asarray(level_variances, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"level_variances must be real numbers, got {level_variances!r}") from None
    if v.shape != (len(ks) + 1,):
        raise ValueError(
            f"level_variances must have length len(branching) + 1 = {len(ks) + 1} "
            f"(root first), got shape {v.shape}"
        )
    if np.isnan(v).any() or (v < 0).any():
        raise ValueError(f"level_variances must be >= 0 or inf (no NaN), got {v.tolist()}")
    if (v[1:] == 0).any():
        raise ValueError(
            "level_variances: only the root (index 0) may be 0 (public total); "
            f"non-root levels must be > 0 or inf, got {v.tolist()}"
        )
    return tuple(ks), tuple(widths), v


def _haar_variances(ks: Sequence[int], widths: Sequence[int], v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """mu_j of the module docstring from validated inputs (raises if not identifiable)."""
    h = len(ks)
    with np.errstate(divide="ignore"):
        precision = np.where(np.isinf(v), 0.0, 1.0 / v)  # root 0 -> inf (public)
    info = np.asarray(widths, dtype=float) * precision
    # lambda_j = sum_{l >= j} w_l / v_l over the non-root levels (the root enters lambda_0 only).
    lam = np.zeros(h + 2)
    lam[1 : h + 1] = np.cumsum(info[1:][::-1])[::-1]
    lam[0] = info[0] + lam[1]
    public = v[0] == 0
    mu = np.empty(h + 1)
    for j in range(h + 1):
        if j > 0 and ks[j - 1] == 1:
            mu[j] = mu[j - 1]  # empty Haar subspace: convention, see module docstring
        elif j == 0 and public:
            mu[0] = 0.0
        elif lam[j] > 0:
            mu[j] = 1.0 / lam[j]
        else:
            what = (
                "the total N (root unmeasured and not public, no level measured)"
                if j == 0
                else f"the split of each level-{j - 1} node among its {ks[j - 1]} children "
                f"(no level at depth >= {j} is measured)"
            )
            raise ValueError(f"the strategy cannot identify the histogram: level_variances "
                             f"leave it unidentifiable ({what})")
    return mu


def blue_haar_variances(branching: Iterable[int], level_variances: ArrayLike) -> npt.NDArray[np.float64]:
    """Eigenvalues mu_j of the BLUE covariance on the generalised Haar subspaces of the tree.

    Cov = sum_{j=0}^{h} mu_j D_j with D_0 = E_0 (constants) and D_j = E_j - E_{j-1}, where E_l
    projects onto vectors constant on the level-l nodes; mu_j = 1 / sum_{l >= j} w_l / v_l
    (docs/math.md section 3; derivation in the module docstring). mu_0 = 0 when the root is public
    (v_0 == 0). For k_j == 1 (D_j = 0) the value repeats mu_{j-1} by convention. O(h).

    Parameters
    ----------
    branching : sequence of int >= 1, the branching factors (k_1, ..., k_h).
    level_variances : sequence of h + 1 floats, root first; v_0 in {0, positive, inf},
        v_l > 0 or inf for l >= 1.

    Returns
    -------
    ndarray of shape (h + 1,), non-negative.

    Raises
    ------
    ValueError on invalid inputs or if the histogram is not identifiable.
    """
    ks, widths, v = check_tree(branching, level_variances)
    return _haar_variances(ks, widths, v)


def blue_covariance_coefficients(branching: Iterable[int],
                                 level_variances: ArrayLike) -> npt.NDArray[np.float64]:
    """Coefficients c_l with BLUE covariance Cov = sum_l c_l (I_{m_l} kron J_{w_l}).

    c_l = (mu_l - mu_{l+1}) / w_l with mu from :func:`blue_haar_variances` and mu_{h+1} = 0
    (docs/math.md section 3; derivation in the module docstring). With N public, Cov is the
    constrained-GLS covariance (Cov 1 = 0). When some k_l == 1 the representation is not
    unique (the two blocks coincide); this one puts the weight on the deeper level. Entry
    (a, b) of Cov is sum over the levels where a and b share a node of c_l. O(h).

    Note c_l <= 0 for l < h: sums built from c_l can cancel; prefer the Haar form for errors.

    Returns
    -------
    ndarray of shape (h + 1,), root first.
    """
    ks, widths, v = check_tree(branching, level_variances)
    mu = _haar_variances(ks, widths, v)
    return (mu - np.append(mu[1:], 0.0)) / np.asarray(widths, dtype=float)


def _sum_max(w: int) -> int:
    """sum_{i, j < w} max(i, j) = sum_M M (2M + 1)."""
    return (w - 1) * w * (2 * w - 1) // 3 + w * (w - 1) // 2


def _level_gram_sums(workload: str, K: int, widths: Sequence[int]) -> list[int]:
    """Q_l = sum over level-l nodes of 1_node' (W'W) 1_node, exact integers, one per level."""
    out = []
    for w in widths:
        m = K // w
        sum_o = w * m * (m - 1) // 2  # node offsets o = i w, i < m
        if workload == "identity":
            out.append(K)
        elif workload == "prefix":
            # (W'W)_{uv} = K - max(u, v)
            out.append(w * w * (m * K - sum_o) - m * _sum_max(w))
        else:
            # (W'W)_{uv} = (min + 1)(K - max) = (A + min_ij)(B - max_ij), A = o + 1, B = K - o;
            # within a node sum min = w^2 (w - 1) - sum max and sum min * max = (w (w - 1) / 2)^2.
            sum_o2 = w * w * (m - 1) * m * (2 * m - 1) // 6
            sum_ab = (K - 1) * sum_o + m * K - sum_o2
            s_max = _sum_max(w)
            s_min = w * w * (w - 1) - s_max
            out.append(
                w * w * sum_ab
                - s_max * (sum_o + m)
                + s_min * (m * K - sum_o)
                - m * (w * (w - 1) // 2) ** 2
            )
    return out


def _prefix_gram_sums_first(n: int, widths: Sequence[int]) -> list[int]:
    """Q_l over the first n prefixes [0, t), t = 1..n only (exact integers, O(h)).

    G_l([0, t)) = (t // w) w^2 + (t mod w)^2 (full level-l nodes, then the partial one). With
    n = a w + b (0 <= b < w): sum_{t < a w} = w^3 a (a - 1) / 2 + a S(w - 1) and
    sum_{t = a w}^{n} = (b + 1) a w^2 + S(b), S(m) = sum_{r <= m} r^2 (t = 0 adds 0)."""
    def s2(m: int) -> int:
        return m * (m + 1) * (2 * m + 1) // 6

    out = []
    for w in widths:
        a, b = divmod(n, w)
        out.append(w**3 * a * (a - 1) // 2 + a * s2(w - 1) + (b + 1) * a * w * w + s2(b))
    return out


def _block_gram(A: _FA, B: _FA, s: _FA, L: _FA) -> _FA:
    """sum over i, j in [s, s + L) of (A + min(i, j)) (B - max(i, j)) (float, vectorised).

    (A + m)(B - M) = AB - (A - B)(i + j) / 2 - (A + B)|i - j| / 2 - i j, with
    sum |i - j| = (L^3 - L) / 3 and sum i j = (sum i)^2 over the block."""
    sx = L * s + L * (L - 1) / 2.0
    return A * B * L * L - (A - B) * L * sx - (A + B) / 2.0 * (L**3 - L) / 3.0 - sx * sx


def all_range_parent_energy(n: _FA, d: _FA, u: _FA) -> _FA:
    """The all-range Haar energy of one parent of width d u lying inside [0, n):
    (n + 1)(d - 1)(d u^2 + 1) / 6 - u^3 d (d^2 - 1) / 12 (see all_range_level_weight)."""
    return (n + 1) * (d - 1) * (d * u * u + 1) / 6.0 - u**3 * d * (d * d - 1) / 12.0


def all_range_level_weight(n: _FA, W: _FA, u: _FA) -> _FA:
    """q_j of the all-range workload over the first n bins for a level of node width u under
    parents of width W = d u (float, vectorised over W, u; exact up to rounding).

    The all-range Gram over bins [0, n) is (min(a, b) + 1)(n - max(a, b)). A parent at
    offset o has local Gram (A + min)(B - max), A = o + 1, B = n - o, and its Haar energy
    sum_children 1_c'G 1_c / u - 1_P'G 1_P / W: the constant and the (i + j) parts cancel,
    leaving, for a parent inside [0, n), E = (n + 1)(d - 1)(d u^2 + 1) / 6 - u^3 d (d^2 - 1) / 12
    (independent of o). floor(n / W) such parents, plus the one cut by n (r = n mod W bins,
    b full children and one of c bins), summed in closed form. Checked against
    :func:`haar_workload_weights` and the dense GLS (tests/test_tree_error.py)."""
    n = float(n)
    W = np.asarray(W, dtype=float)
    u = np.asarray(u, dtype=float)
    d = W / u
    nfull = np.floor(n / W)
    r = n - nfull * W
    full = all_range_parent_energy(n, d, u)
    A, B = n - r + 1, r
    b = np.floor(r / u)
    c = r - b * u
    # sum over the b full children of _block_gram(A, B, i u, u): sx_i = u^2 i + u (u - 1) / 2
    al, be = u * u, u * (u - 1) / 2.0
    s1, s2 = b * (b - 1) / 2.0, (b - 1) * b * (2 * b - 1) / 6.0
    sum_sx = al * s1 + be * b
    sum_sx2 = al * al * s2 + 2 * al * be * s1 + be * be * b
    kids = (A * B * u * u * b - (A - B) * u * sum_sx - (A + B) / 2.0 * (u**3 - u) / 3.0 * b
            - sum_sx2) + _block_gram(A, B, b * u, c)
    partial = np.where(r > 0, kids / u - _block_gram(A, B, 0.0, r) / W, 0.0)
    return nfull * full + partial


def _haar_weights(workload: str, ks: Sequence[int], widths: Sequence[int],
                  n_queries: int | None = None) -> list[float]:
    """q_j of :func:`haar_workload_weights` from validated inputs (floats of exact ratios).

    q_0 = Q_0 / K, q_j = (k_j Q_j - Q_{j-1}) / w_{j-1} for k_j >= 2 and 0 for k_j = 1 (empty
    Haar subspace), with Q_l the exact integer workload sums of the module docstring."""
    K = widths[0]
    if workload == "all_range" and n_queries is not None:  # the first n bins of a padded tree
        n = n_queries
        q = [float(_block_gram(1.0, n, 0.0, n)) / K]
        for j in range(1, len(ks) + 1):
            q.append(float(all_range_level_weight(n, widths[j - 1], widths[j]))
                     if ks[j - 1] >= 2 else 0.0)
        return q
    if n_queries is None:
        Q = _level_gram_sums(workload, K, widths)
    else:
        Q = _prefix_gram_sums_first(n_queries, widths)
    q = [Q[0] / K]
    for j in range(1, len(ks) + 1):
        q.append((ks[j - 1] * Q[j] - Q[j - 1]) / widths[j - 1] if ks[j - 1] >= 2 else 0.0)
    return q


def haar_workload_weights(branching: Iterable[int], workload: str = "prefix",
                          n_queries: int | None = None) -> npt.NDArray[np.float64]:
    """Workload weights q_0..q_h with blue_error(branching, v, workload) == sum_j q_j mu_j.

    mu_j = :func:`blue_haar_variances` (mu_0 = 0 when N is public), so for every variance
    configuration the BLUE's total error is E = sum_j q_j / lambda_j, lambda_j =
    sum_{l >= j} w_l / v_l: linear in the Haar variances, and q_j = sum over the queries of
    ||D_j q||^2 (q_0 = sum (1'q)^2 / K) >= 0. q_j = 0 when k_j = 1. O(h), exact integer sums.

    Parameters
    ----------
    branching : sequence of int >= 1 (k_1, ..., k_h); K = prod k_l.
    workload : "prefix", "identity" or "all_range" (see :func:`blue_error`).
    n_queries : a padded tree over K >= n real bins: the prefix workload uses just the
        first n prefixes C_1..C_n, the all-range workload the n (n + 1) / 2 ranges within
        the first n bins (1 <= n <= K); None = all K. Not for "identity".

    Returns
    -------
    ndarray of shape (h + 1,), non-negative.
    """
    ks, widths = check_branching(branching)
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    if n_queries is not None:
        if workload == "identity":
            raise ValueError("n_queries is supported for workload='prefix' and 'all_range', "
                             f"got {workload!r}")
        if (isinstance(n_queries, (bool, np.bool_)) or not isinstance(n_queries, Integral)
                or not 1 <= int(n_queries) <= widths[0]):
            raise ValueError(f"n_queries must be an integer in [1, K = {widths[0]}], "
                             f"got {n_queries!r}")
        n_queries = int(n_queries)
    return np.array(_haar_weights(workload, ks, widths, n_queries))


def _prefix_per_query(ks: Sequence[int], widths: Sequence[int], mu: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Variances of C_t, t = 1..K, in O(K) time and about 3K floats of memory.

    For the prefix [0, t) the level-j Haar numerator depends only on R = t mod W (W = w_{j-1});
    writing R = i w + r (w = w_j, child i, offset r) it is the integer
    k ((R - r) w + r^2) - R^2 = i (k - i) w^2 - 2 i w r + (k - 1) r^2 >= 0.
    acc[:W] holds the sum of the levels >= j as a function of R; going up one level tiles it
    k times (acc[:w] repeats with period w on [0, W)) and adds the level-j term.
    """
    K = widths[0]
    acc = np.zeros(K)
    for j in range(len(ks), 0, -1):
        k, W, w = ks[j - 1], widths[j - 1], widths[j]
        if k == 1:
            continue
        block = acc[:W].reshape(k, w)
        block[1:] = block[0]
        i = np.arange(k, dtype=np.int64)[:, None]
        r = np.arange(w, dtype=np.int64)
        numer = (-2 * w * i) * r
        numer += i * (k - i) * w * w
        numer += (k - 1) * r * r
        block += numer * (mu[j] / W)
    out = np.arange(1, K + 1, dtype=float)
    out *= out
    out *= mu[0] / K
    out[:-1] += acc[1:]  # t = K wraps to R = 0: no Haar term
    return out


def _all_range_per_query(ks: Sequence[int], widths: Sequence[int], mu: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Variances of all intervals [a, b] (lexicographic) in O(K^2 h) time, O(K^2) memory.

    Queries are the half-open [s, e), e = b + 1. Every level-l table is indexed by s (constant
    along an output row, so gathered with np.repeat) or by e. Integers stay below K^2 <= 2^24
    (K <= MAX_ALL_RANGE_PER_QUERY_K), so int32 is exact.
    """
    K = widths[0]
    idx = np.int32
    row_len = np.arange(K, 0, -1)  # row s holds e = s + 1 .. K
    row_start = np.concatenate(([0], np.cumsum(row_len)[:-1])).astype(idx)
    q = np.arange(K * (K + 1) // 2, dtype=idx)
    span = q - np.repeat(row_start - 1, row_len)  # e - s
    e = span + np.repeat(np.arange(K, dtype=idx), row_len)
    sq_span = span * span
    g_parent = sq_span  # G_0: the root overlaps every interval fully
    out = (mu[0] / K) * sq_span
    t = np.arange(K + 1, dtype=idx)
    numer = np.empty_like(sq_span)
    same = np.empty(len(q), dtype=bool)
    for j in range(1, len(ks) + 1):
        k, W, w = ks[j - 1], widths[j - 1], widths[j]
        if k == 1:
            continue
        # G_j([s, e)) = F(e) - F(s) - 2 r_s (w - r_s) across level-j nodes, (e - s)^2 inside
        # one node (e <= end of the node holding s), with F(t) = G_j([0, t)) =
        # (t // w) w^2 + (t mod w)^2 and r_s = s mod w.
        rt = t % w
        F = (t - rt) * w + rt * rt
        rt, F_s, t_s = rt[:K], F[:K], t[:K]
        g = F[e]
        g -= np.repeat(F_s + 2 * rt * (w - rt), row_len)
        np.less_equal(e, np.repeat(t_s - rt + w, row_len), out=same)
        np.copyto(g, sq_span, where=same)
        np.multiply(g, k, out=numer)
        numer -= g_parent
        out += numer * (mu[j] / W)
        g_parent = g
    return out


@overload
def blue_error(branching: Iterable[int], level_variances: ArrayLike, workload: str = "prefix",
               per_query: Literal[False] = False) -> float: ...
@overload
def blue_error(branching: Iterable[int], level_variances: ArrayLike, workload: str = "prefix",
               *, per_query: Literal[True]) -> npt.NDArray[np.float64]: ...
@overload
def blue_error(branching: Iterable[int], level_variances: ArrayLike, workload: str,
               per_query: Literal[True]) -> npt.NDArray[np.float64]: ...
@overload
def blue_error(branching: Iterable[int], level_variances: ArrayLike, workload: str = "prefix",
               per_query: bool = False) -> float | npt.NDArray[np.float64]: ...
def blue_error(branching: Iterable[int], level_variances: ArrayLike, workload: str = "prefix",
               per_query: bool = False) -> float | npt.NDArray[np.float64]:
    """Exact expected squared error of the tree BLUE on a workload, without any K x K matrix.

    Returns trace(W Cov W') (float, counts^2) or, with ``per_query=True``, diag(W Cov W')
    (ndarray) where Cov is the (constrained, if v_0 == 0) GLS covariance of the level-uniform
    tree (see the module docstring and docs/math.md sections 2-3):

        q' Cov q = mu_0 (1'q)^2 / K + sum_{j: k_j >= 2} mu_j (k_j G_j(q) - G_{j-1}(q)) / w_{j-1},

    mu_j = 1 / sum_{l >= j} w_l / v_l (0 for j = 0 when N is public), G_l(q) = sum over
    level-l nodes of (q . 1_node)^2. Totals replace G_l by its exact integer workload sum.

    Parameters
    ----------
    branching : sequence of int >= 1 (k_1, ..., k_h); K = prod k_l.
    level_variances : h + 1 floats, root first. v_0 == 0: N public; inf: level unmeasured.
    workload : "prefix" (C_t = x_0 + ... + x_{t-1}, t = 1..K), "identity" (the K bins) or
        "all_range" (every [a, b], 0 <= a <= b < K, lexicographic in (a, b)).
    per_query : return the per-query variances instead of their sum. For "all_range" only
        for K <= MAX_ALL_RANGE_PER_QUERY_K (4096).

    Complexity: total O(h); per-query prefix / identity O(K); per-query all-range O(K^2 h).

    Raises
    ------
    ValueError naming the offending parameter, or if the histogram is not identifiable.
    """
    ks, widths, v = check_tree(branching, level_variances)
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    if not isinstance(per_query, (bool, np.bool_)):
        raise ValueError(f"per_query must be a bool, got {per_query!r}")
    mu = _haar_variances(ks, widths, v)
    K = widths[0]
    active = [j for j in range(1, len(ks) + 1) if ks[j - 1] >= 2]

    if not per_query:
        q = _haar_weights(workload, ks, widths)
        total = mu[0] * q[0]
        for j in active:
            total += mu[j] * q[j]
        return float(total)

    if K > _MAX_PER_QUERY_K:
        raise ValueError(f"per_query output needs K <= {_MAX_PER_QUERY_K} bins, got K = {K}")
    check_memory(24 * K, f"the per-query variances of {K} bins", "use fewer bins, or "
                 "per_query=False (their sum in O(h))")
    if workload == "identity":
        var = mu[0] / K + sum(mu[j] * (ks[j - 1] - 1) / widths[j - 1] for j in active)
        return np.full(K, var)
    if workload == "prefix":
        return _prefix_per_query(ks, widths, mu)
    if K > MAX_ALL_RANGE_PER_QUERY_K:
        raise ValueError(
            f"per_query=True with workload='all_range' needs K <= {MAX_ALL_RANGE_PER_QUERY_K} "
            f"(K (K + 1) / 2 outputs), got K = {K}; the total (per_query=False) works at any K"
        )
    return _all_range_per_query(ks, widths, mu)


def blue_range_variances(branching: Iterable[int], level_variances: ArrayLike, lo: ArrayLike,
                         hi: ArrayLike) -> npt.NDArray[np.float64]:
    """Var of the BLUE of sum x[lo:hi] (half-open ranges, int arrays of one shape) on a
    level-uniform tree, O(h) per range, no matrix.

    q' Cov q = mu_0 L^2 / K + sum_{j >= 1} mu_j (k_j G_j - G_{j-1}) / w_{j-1} (module
    docstring; docs/math.md section 3), L = hi - lo, G_l = sum over level-l nodes of the squared
    overlap with [lo, hi): F(hi) - F(lo) - 2 r (w - r) when the range leaves the node holding
    lo, else L^2, with F(t) = (t // w) w^2 + (t mod w)^2, r = lo mod w."""
    ks, widths = check_branching(branching)
    mu = blue_haar_variances(ks, level_variances)
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    k_bins = widths[0]
    lo_f, hi_f = lo.astype(np.float64), hi.astype(np.float64)
    length = hi_f - lo_f
    g_prev = length * length  # G_0: the root holds the whole range
    var = mu[0] * g_prev / k_bins
    for j, k in enumerate(ks, start=1):  # loop over levels (h of them), vectorised over ranges
        w = widths[j]
        r_lo, r_hi = lo % w, hi % w
        f_lo = (lo - r_lo).astype(np.float64) * w + r_lo.astype(np.float64) ** 2
        f_hi = (hi - r_hi).astype(np.float64) * w + r_hi.astype(np.float64) ** 2
        same = hi <= lo - r_lo + w
        g = np.where(same, length * length,
                     f_hi - f_lo - 2.0 * r_lo * (w - r_lo).astype(np.float64))
        if k >= 2:
            var = var + mu[j] * (k * g - g_prev) / widths[j - 1]
        g_prev = g
    return var


def _padded_tree_all_range_total(mech: Mechanism, K: int) -> float:
    """BLUE all-range total over the first K bins of a (padded) level-uniform tree.

    (K + 1) tr Z_K - 1'Z_K 1 (:mod:`dptree_opt.compare` docstring) with tr Z_K the first K
    prefix variances and 1'Z_K 1 = q' Cov q, q_i = K - i for bins i < K (0 on the padding): by the Haar form of
    the tree BLUE (module docstring), q' Cov q = mu_0 (1'q)^2 / K' +
    sum_j mu_j (k_j G_j - G_{j-1}) / w_{j-1}, G_l = sum over level-l nodes of (q . 1_node)^2.
    O(K' h)."""
    ks, v = tree_parameters(mech)
    mu = blue_haar_variances(ks, v)
    kp = mech.n_bins
    q = np.zeros(kp)
    q[:K] = K - np.arange(K, dtype=float)
    widths = [kp]
    for k in ks:
        widths.append(widths[-1] // k)
    G = [float(np.sum(q.reshape(kp // wl, wl).sum(axis=1) ** 2)) for wl in widths]
    quad = mu[0] * G[0] / kp if mu[0] > 0 else 0.0
    for j in range(1, len(ks) + 1):
        quad += mu[j] * (ks[j - 1] * G[j] - G[j - 1]) / widths[j - 1]
    tr = float(blue_error(ks, v, "prefix", per_query=True)[:K].sum())
    return (K + 1) * tr - quad
