"""Emulations of deployed mechanisms: Google's and OpenDP's trees (docs/math.md section 6), ektelo's
2-D plans, and OpenDP's own tree run for a Monte Carlo cross-check.

Each constructor returns an :class:`Anchor`: a :class:`~dptree_opt.Mechanism` (strategy with
calibrated noise), the estimator that the emulated system uses, and ``n_bins`` = the number
of real bins K (the strategy may be padded to K' >= K bins; errors are then over the first K
prefixes / bins). Definitions (docs/math.md section 6; eps-DP, add/remove, Laplace in the anchors):

* ``binary_covering``: the binary tree mechanism of Dwork et al. / Chan et al.: every level
  of the dyadic tree over 2^ceil(log2 K) bins, root included, gets eps / (h + 1); prefixes are
  answered by the covering sums ([RTS] Sec. IV, [SU]).
* ``binary_ols``: the same tree with equal variances and ordinary least squares (Hay et al.;
  = Honaker's efficient estimator = our BLUE with equal variances).
* ``google_default``: Google's differential-privacy library default for quantile trees:
  branching 16, height h = ceil(log16 K) (leaves padded to 16^h), the root **not** noised
  (not measured), eps / h per level, covering sums.
* ``opendp_default``: OpenDP's ``make_b_ary_tree`` + ``make_consistent_b_ary_tree`` with the
  branching factor from its ``choose_branching_factor(K)`` rule (QYL13 formula (3); 26, 21, 19
  for K = 2^10, 2^16, 2^20). OpenDP builds the tree over ceil(log_b K) + 1 layers, root
  included, all noised with Lap(layers / eps) (l1 stability = number of layers); the
  postprocessor treats every node that lies entirely in the padding as a *known zero*, so the
  effective strategy is the b-ary tree truncated to K leaves (the last node of each layer has
  fewer children), estimated by OLS (equal variances). OpenDP samples *discrete* Laplace noise
  on integer counts: ``variance_factor`` = Var(discrete Laplace) / Var(Laplace) at that scale
  (:func:`discrete_laplace_variance`); multiply an exact error of the mechanism by it for the
  discrete-noise value (the BLUE error of an equal-variance tree is linear in the variance).

Under other settings (swap neighbours, Gaussian noise, public total) the same shapes and
estimators are calibrated by :class:`Mechanism` for that setting; the label then says it
generalises the anchor.

ektelo's data-independent 2-D plans (McKenna et al.'s ektelo, plans/standalone.py and
selection.py), for the grid comparison: ``HB`` on a 2-D domain (:func:`ektelo_hb_branching`,
:func:`ektelo_hb2d_branchings`), the ``QuadTree`` plan as coded
(:func:`ektelo_quadtree_plan`) and ``UniformGrid`` (:func:`uniform_grid_side`,
:func:`uniform_grid_noise`).

OpenDP itself: :func:`run_opendp` runs its b-ary tree and consistency postprocessor (Monte
Carlo), to check the ``opendp_default`` emulation against the real thing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import numpy.typing as npt

from . import strategies
from .engines.kron_product import product_form_max
from .limits import at_budget
from .mechanism import Mechanism, discrete_variance
from .privacy import check_neighbours, check_noise_scales, resolve_public
from .strategies import IntervalStrategy, QuadtreeStrategy
from .validation import check_int
from .workloads import KroneckerWorkload

__all__ = ["Anchor", "binary_covering", "binary_ols", "google_default", "opendp_default",
           "opendp_tree", "choose_branching_factor", "opendp_layers",
           "discrete_laplace_variance", "ANCHORS", "ektelo_hb_branching",
           "ektelo_hb2d_branchings", "ektelo_quadtree_plan", "uniform_grid_side",
           "uniform_grid_noise", "UNIFORM_GRID_C", "OpenDPRun", "run_opendp",
           "opendp_noise_problem"]

UNIFORM_GRID_C = 10.0          # Qardaji-Yang-Li ICDE 2013's constant (ektelo's default c)


@dataclass(frozen=True)
class Anchor:
    """A deployed mechanism emulated in this framework.

    Attributes
    ----------
    key : short name ("binary_covering", "binary_ols", "google_default", "opendp_default").
    label : human-readable name.
    emulates : what it reproduces (system, paper, rule).
    mechanism : the Mechanism (strategy over ``mechanism.n_bins`` >= n_bins bins, with noise).
    estimator : "covering" or "blue" (for :func:`dptree_opt.expected_error`).
    n_bins : the number of real bins K; errors are over the first K prefixes / bins.
    branching : the tree's branching factor(s).
    variance_factor : Var(noise actually sampled by the system) / Var(noise assumed by the
        mechanism): 1 except for OpenDP's discrete Laplace.
    note : padding and other details, one line.
    """

    key: str
    label: str
    emulates: str
    mechanism: Mechanism
    estimator: str
    n_bins: int
    branching: tuple[int, ...]
    variance_factor: float = 1.0
    note: str = ""


def _budget(noise: str, epsilon: float | None,
            rho: float | None) -> tuple[float | None, float | None]:
    """(epsilon, rho) for the Mechanism: the one ``noise`` reads, the other None."""
    return (epsilon, None) if noise == "laplace" else (None, rho)


def _check_bins(n_bins: object) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    return n_bins


def _pad_note(n_bins: int, padded: int) -> str:
    return "" if padded == n_bins else (f"padded {n_bins} -> {padded} bins (extra bins empty, "
                                        "noised)")


def _root_private(neighbours: str, public_total: bool | None) -> bool:
    return neighbours == "add_remove" and not public_total


def _binary(key: str, label: str, emulates: str, estimator: str, n_bins: int,
            epsilon: float | None, rho: float | None, noise: str, neighbours: str,
            public_total: bool | None) -> Anchor:
    n = _check_bins(n_bins)
    h = strategies.padded_height(n, 2)
    eps, rho_ = _budget(noise, epsilon, rho)
    mech = Mechanism(strategies.tree(2**h, 2), noise=noise, neighbours=neighbours,
                     public_total=public_total, epsilon=eps, rho=rho_)
    return Anchor(key, label, emulates, mech, estimator, n, (2,) * h, note=_pad_note(n, 2**h))


def binary_covering(n_bins: int, epsilon: float | None = 1.0, *, rho: float | None = None,
                    noise: str = "laplace", neighbours: str = "add_remove",
                    public_total: bool | None = None) -> Anchor:
    """Binary tree, covering sums, every level (root included when N is private) gets an
    equal share (Dwork et al. 2010 / Chan et al. 2011; docs/math.md section 6 row 1)."""
    return _binary("binary_covering", "binary tree, covering sums",
                   "Dwork et al. / Chan et al. binary tree mechanism (root level included)",
                   "covering", n_bins, epsilon, rho, noise, neighbours, public_total)


def binary_ols(n_bins: int, epsilon: float | None = 1.0, *, rho: float | None = None,
               noise: str = "laplace", neighbours: str = "add_remove",
               public_total: bool | None = None) -> Anchor:
    """Binary tree, equal variances, OLS = Honaker's efficient estimator (Hay et al. 2010;
    docs/math.md section 6 row 2)."""
    return _binary("binary_ols", "binary tree + OLS",
                   "Hay et al. consistency (OLS, equal variances) = Honaker efficient estimator",
                   "blue", n_bins, epsilon, rho, noise, neighbours, public_total)


def google_default(n_bins: int, epsilon: float | None = 1.0, *, rho: float | None = None,
                   noise: str = "laplace", neighbours: str = "add_remove",
                   public_total: bool | None = None, branching: int = 16) -> Anchor:
    """Google DP library quantile-tree default: b = 16, root not noised, covering sums
    (docs/math.md section 6 row 3). Height ceil(log16 K), leaves padded to 16^h; the budget is
    split equally over the h non-root levels."""
    n = _check_bins(n_bins)
    h = strategies.padded_height(n, branching)
    padded = branching**h
    levels = None
    eps, rho_ = _budget(noise, epsilon, rho)
    total = eps if noise == "laplace" else rho_
    if _root_private(neighbours, public_total) and total is not None:
        levels = [0.0] + [total / h] * h  # root not measured
    # (a missing or bad budget: the Mechanism's ValueError naming it)
    mech = Mechanism(strategies.tree(padded, branching), noise=noise, neighbours=neighbours,
                     public_total=public_total, level_budgets=levels, epsilon=eps, rho=rho_)
    return Anchor("google_default", f"Google default (b = {branching})",
                  "Google differential-privacy library: branching 16, root not noised, "
                  "covering sums", mech, "covering", n, (branching,) * h,
                  note=_pad_note(n, padded))


def choose_branching_factor(size_guess: int) -> int:
    """OpenDP's ``choose_branching_factor`` rule, reimplemented: the b in 2..n minimising
    QYL13 formula (3), (b - 1) h^3 - 2 (b + 1) h^2 / 3 with h = log_b n real (Qardaji, Yang,
    Li 2013, Prop. 1). 26 / 21 / 19 for n = 2^10 / 2^16 / 2^20. O(n) evaluations of a closed
    form (vectorised)."""

    n = int(size_guess)
    if n < 2:
        raise ValueError(f"size_guess must be >= 2, got {size_guess!r}")
    b = np.arange(2, n + 1, dtype=float)
    h = math.log(n) / np.log(b)
    v = (b - 1.0) * h**3 - 2.0 * (b + 1.0) * h**2 / 3.0
    return int(b[int(np.argmin(v))])  # argmin: first minimiser, as Rust's min_by keeps


def opendp_layers(n_bins: int, branching: int) -> int:
    """Number of layers of OpenDP's b-ary tree over n leaves: ceil(log_b n) + 1 (root
    included); its l1 stability, hence the Laplace scale is layers / eps."""
    return strategies.padded_height(n_bins, branching) + 1


def opendp_tree(n_bins: int, branching: int) -> IntervalStrategy:
    """The strategy OpenDP's tree + consistency postprocessor amounts to: the b-ary tree of
    ceil(log_b n) + 1 layers truncated to n leaves (nodes lying entirely in the padding are
    known zeros, i.e. absent; the last node of each layer keeps only its real children), as an
    ``IntervalStrategy`` (rows in level order, left to right). Built with numpy per layer:
    node i of layer d (width w_d = b^(layers - 1 - d)) covers bins [i w_d, min((i+1) w_d, n)),
    its parent is node i // b of layer d - 1. O(n) nodes, no Python loop over them."""
    n = _check_bins(n_bins)
    b = int(branching)
    if b < 2:
        raise ValueError(f"branching must be >= 2, got {branching!r}")
    strat = strategies.truncated_tree(n, (b,) * (opendp_layers(n, b) - 1))
    strat.name = "opendp_tree"
    return strat


def discrete_laplace_variance(scale: float) -> float:
    """Variance of OpenDP's integer Laplace of scale s: 2 e^(-1/s) / (1 - e^(-1/s))^2
    (``mechanism.discrete_variance``); tends to 2 s^2 as s grows."""
    s = float(scale)
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    return discrete_variance(s, "laplace")


def opendp_default(n_bins: int, epsilon: float | None = 1.0, *, rho: float | None = None,
                   noise: str = "laplace", neighbours: str = "add_remove",
                   public_total: bool | None = None, branching: int | None = None,
                   padding: str = "known_zeros") -> Anchor:
    """OpenDP default: b = choose_branching_factor(K) (or ``branching``), root noised, OLS
    (docs/math.md section 6 row 4). Equal budgets over the layers (the Mechanism's default split)
    give every node Lap(layers / eps) under add/remove, as OpenDP's stability map.

    ``padding``: "known_zeros" (what ``make_consistent_b_ary_tree`` does: nodes lying
    entirely in the padding are set to zero with zero variance; the strategy is the truncated
    tree :func:`opendp_tree`) or "noised" (the complete b-ary tree over b^h leaves, every node
    noised, the padding bins estimated too; this is the reading that reproduces docs/math.md
    section 6 row 4's printed 284.8 / 615.7 / 1030.6). ``variance_factor``: discrete /
    continuous Laplace variance at the node scale (OpenDP samples discrete Laplace)."""
    n = _check_bins(n_bins)
    if padding not in ("known_zeros", "noised"):
        raise ValueError(f"padding must be 'known_zeros' or 'noised', got {padding!r}")
    b = choose_branching_factor(n) if branching is None else int(branching)
    layers = opendp_layers(n, b)
    if padding == "known_zeros":
        strat = opendp_tree(n, b)
        how = f"tree truncated to {n} leaves (padding nodes known zeros)"
    else:
        strat = strategies.tree(b ** (layers - 1), b)
        how = (f"complete tree over {b ** (layers - 1)} leaves, padding nodes noised"
               if b ** (layers - 1) != n else "complete tree")
    eps, rho_ = _budget(noise, epsilon, rho)
    mech = Mechanism(strat, noise=noise, neighbours=neighbours, public_total=public_total,
                     epsilon=eps, rho=rho_)
    factor = 1.0
    if noise == "laplace":
        scales = {s for lvl, s in mech.level_scales.items() if 0 < s < math.inf}
        if len(scales) == 1:
            s = scales.pop()
            factor = discrete_laplace_variance(s) / (2.0 * s * s)
    rule = "choose_branching_factor" if branching is None else "given branching"
    key = "opendp_default" if padding == "known_zeros" else "opendp_default_noised_padding"
    return Anchor(key, f"OpenDP default (b = {b})",
                  f"OpenDP make_b_ary_tree + make_consistent_b_ary_tree, b from {rule}, "
                  "root noised, OLS",
                  mech, "blue", n, (b,) * (layers - 1), variance_factor=factor,
                  note=f"{layers} layers; {how}; discrete-Laplace variance factor {factor:.6f}")


ANCHORS: dict[str, Callable[..., Anchor]] = {
           "binary_covering": binary_covering, "binary_ols": binary_ols,
           "google_default": google_default, "opendp_default": opendp_default}


# ------------------------------------------------------------------ ektelo's 2-D plans
def ektelo_hb_branching(n_cells: int) -> int:
    """ektelo's ``find_best_branching(N)`` (selection.py; Qardaji-Yang-Li VLDB 2013, Eq. 3):
    the b in 2..N minimising (b - 1) h^3 - 2 (b + 1) h^2 / 3, h = ceil(log_b N) (float
    logarithm, as ektelo computes it). ``n_cells`` >= 2."""
    n_cells = check_int(n_cells, "n_cells", 2)
    best_v, best_b = math.inf, 2
    for b in range(2, n_cells + 1):
        h = math.ceil(math.log(n_cells, b))
        v = (b - 1) * h ** 3 - 2 * (b + 1) * h ** 2 / 3
        if v < best_v:
            best_v, best_b = v, b
    return best_b


def ektelo_hb2d_branchings(shape: Sequence[int]) -> list[tuple[int, ...]] | None:
    """Per-axis branchings of ektelo's ``Hb2D`` for a 2-D ``shape`` with b =
    ektelo_hb_branching(n_1 n_2): every rectangle of more than one cell is split into b x b
    (``split_rectangle``: an axis of s cells splits into s single cells when b > s, into b
    equal parts when b divides s, else unevenly), until single cells. None when some split is
    uneven (not a level-uniform hierarchy)."""
    b = ektelo_hb_branching(math.prod(shape))
    sizes = list(shape)
    out: list[list[int]] = [[] for _ in shape]
    while math.prod(sizes) > 1:
        for i, sz in enumerate(sizes):
            if sz == 1:
                k = 1
            elif b > sz:
                k = sz
            elif sz % b:
                return None
            else:
                k = b
            out[i].append(k)
            sizes[i] = sz // k
    return [tuple(k) for k in out]


def ektelo_quadtree_plan(
        shape: Sequence[int]) -> tuple[QuadtreeStrategy, npt.NDArray[np.intp]]:
    """ektelo's ``QuadTree`` plan (plans/standalone.py) on a 2-D grid of powers of 2, as
    coded: it flattens x and builds ``selection.QuadTree((N // 2, 2))``, a quadtree over an
    (N/2) x 2 array whose cell (r, c) is the flat cell 2 r + c. Its nodes are then products
    of a row band and a set of columns of one parity: level 1 = (row halves) x (even / odd
    columns), then row bands halve down to single grid rows, then each row's even (odd)
    columns halve. That is ``strategies.quadtree`` over the grid with its columns in the
    order (evens, then odds): returns (strategy, order) with order[b] = the original column
    at position b (axis-0 order unchanged). Checked against a transcription of ektelo's
    ``rect_to_quads`` in the tests."""
    n1, n2 = (int(n) for n in shape)
    if len(shape) != 2 or any(n < 2 or n & (n - 1) for n in (n1, n2)):
        raise ValueError("ektelo's quadtree plan is emulated on 2-D grids whose sides are "
                         "powers of 2 (>= 2)")
    a, c = n1.bit_length() - 1, n2.bit_length() - 1
    levels = a + c - 1                         # log2(N / 2): the (N/2) x 2 quadtree's height
    ax0 = (2,) * a + (1,) * (levels - a)
    ax1 = (2,) + (1,) * (a - 1) + (2,) * (levels - a) if a >= 1 else (2,) * levels
    strat = strategies.quadtree((n1, n2), [list(ax0), list(ax1)],
                                name=f"ektelo quadtree plan {n1}x{n2}")
    j = np.arange(n2)
    order = np.argsort((j % 2) * (n2 // 2) + j // 2)
    return strat, order


def uniform_grid_side(shape: Sequence[int], records: int, epsilon: float,
                      c: float = UNIFORM_GRID_C) -> int:
    """ektelo's ``UniformGrid`` cell side (selection.py; Qardaji-Yang-Li ICDE 2013: about
    sqrt(N eps / c) cells per axis): M = N eps / c target cells, side
    g = int(sqrt(n_1 n_2 / M) - 1) + 1 (at least 1); the grid has ceil(n_i / g) cells per axis
    (the last ones cut at the border)."""
    m = records * epsilon / c
    g = int(math.sqrt(math.prod(shape) / m) - 1) + 1 if m > 0 else max(shape)
    return max(g, 1)


def _block_fractions(lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64], n: int,
                     g: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per interval query [lo, hi): t = sum_a (|q cap P_a| / |P_a|)^2 and r = sum_a |q cap
    P_a| / |P_a| over the blocks P_a = [a g, min((a + 1) g, n))."""
    starts = np.arange(0, n, g)
    ends = np.minimum(starts + g, n)
    size = (ends - starts).astype(float)
    t = np.zeros(lo.size)
    r = np.zeros(lo.size)
    step = max(1, (1 << 22) // max(starts.size, 1))
    for s in range(0, lo.size, step):
        ov = np.clip(np.minimum(hi[s:s + step, None], ends[None, :])
                     - np.maximum(lo[s:s + step, None], starts[None, :]), 0, None) / size
        t[s:s + step] = np.einsum("qa,qa->q", ov, ov)
        r[s:s + step] = ov.sum(axis=1)
    return t, r


def uniform_grid_noise(shape: Sequence[int], side: int, workload: KroneckerWorkload, *,
                       epsilon: float, neighbours: str = "add_remove",
                       public_total: bool | None = None) -> tuple[float, float]:
    """(total, max) of the noise variance (counts^2) of ektelo's ``UniformGrid`` estimate on
    a Kronecker ``workload``: the cells of side ``side`` (cut at the border) are measured once
    with Laplace noise (variance v = 2 (D / eps)^2, D = 1 add/remove, 2 swap) and x^ spreads
    each cell's count uniformly over it (ektelo's least squares: the minimum-norm solution).
    With R the spreading map, Var(w'x^) = v ||R'w||^2 = v prod_i t_i(q_i) (t_i: module
    ``_block_fractions``); with N public the cell counts are the constrained BLUE,
    Cov = v (I - 11'/M), M cells, subtracting v (prod_i r_i(q_i))^2 / M. The bias
    w'(R R^+ x - x), from data not uniform inside cells, depends on the data and is NOT
    included."""
    neighbours = check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    ms = [-(-n // side) for n in shape]
    cells = math.prod(ms)
    if neighbours == "swap":
        sens = 2.0 if cells > 1 else 0.0
    else:
        sens = 1.0
    v = 2.0 * sens**2  # at unit eps; restated at ``epsilon`` below (limits.at_budget)
    ts: list[npt.NDArray[np.float64]] = []
    rs: list[npt.NDArray[np.float64]] = []
    for f, n in zip(workload.factors, shape):
        lo, hi = f.intervals()
        t, r = _block_fractions(lo, hi, n, side)
        ts.append(t)
        rs.append(r)
    kappa = 1.0 / cells if public else 0.0
    total = math.prod(float(t.sum()) for t in ts)
    if kappa:
        total -= kappa * math.prod(float((r * r).sum()) for r in rs)
    mx = product_form_max(ts, [r * r for r in rs] if kappa else None, kappa)
    return (at_budget(v * max(total, 0.0), "laplace", epsilon),
            at_budget(v * max(mx, 0.0), "laplace", epsilon))


# ------------------------------------------------------------------ OpenDP itself, run
@dataclass(frozen=True)
class OpenDPRun:
    """Monte Carlo of OpenDP's own b-ary tree + consistency postprocessor: mean per-query
    squared error and its standard error per workload (``means``, ``std_errors``)."""

    branching: int
    trials: int
    means: dict[str, float]
    std_errors: dict[str, float]
    seconds: float
    note: str = ""



def run_opendp(n_bins: int, epsilon: float = 1.0, *, branching: int | None = None,
               trials: int = 200, rng: int | np.random.Generator | None = None,
               time_limit: float | None = None,
               sampler: str = "opendp") -> OpenDPRun:
    """Run OpenDP's own b-ary tree and consistency postprocessor and measure the errors.

    make_b_ary_tree(leaf_count=K, b) >> then_laplace(scale = layers / eps) (discrete Laplace
    on integer counts, eps-DP under add/remove: the tree's l1 stability is its number of
    layers, checked with OpenDP's own privacy map) >> make_consistent_b_ary_tree; the
    consistent leaves give the CDF by cumulative sums. ``sampler="opendp"`` draws the noise
    with OpenDP's exact sampler (~1 s per 10^5 nodes); ``"numpy"`` feeds OpenDP's tree and
    postprocessor with discrete Laplace noise of the same scale drawn by numpy (difference
    of two geometrics; fast, for large K). Returns the mean per-query squared error on the
    CDF, the bins and all ranges (sum_{a<b} (e_b - e_a)^2 = (K + 1) sum e^2 - (sum e)^2 over
    the prefix errors, e_0 = 0) with standard errors over trials. ``rng`` seeds the
    Poisson(10) data and the numpy sampler. ``time_limit`` (s) stops early (>= 10 trials)."""
    import opendp.prelude as odp

    if sampler not in ("opendp", "numpy"):
        raise ValueError(f"sampler must be 'opendp' or 'numpy', got {sampler!r}")
    odp.enable_features("contrib")
    K = int(n_bins)
    b = int(odp.t.choose_branching_factor(K)) if branching is None else int(branching)
    layers = opendp_layers(K, b)
    scale = layers / float(epsilon)
    space = (odp.vector_domain(odp.atom_domain(T=int)), odp.l1_distance(T=int))
    tree = odp.t.make_b_ary_tree(*space, leaf_count=K, branching_factor=b)
    meas = tree >> odp.m.then_laplace(scale)
    loss = meas.map(1)
    if loss > epsilon * (1 + 1e-9):
        raise ValueError(f"OpenDP reports eps = {loss} > {epsilon}")
    post = odp.t.make_consistent_b_ary_tree(branching_factor=b, TIA=int, TOA=float)
    gen = np.random.default_rng(rng)
    data = gen.poisson(10, K).astype(np.int64)
    truth = np.cumsum(data)
    exact_tree = np.asarray(tree(data.tolist()), dtype=np.int64)
    p = -math.expm1(-1.0 / scale)
    t0 = time.perf_counter()
    cdf: list[float] = []
    ident: list[float] = []
    rng_all: list[float] = []
    for i in range(int(trials)):
        if sampler == "opendp":
            noisy = meas(data.tolist())
        else:
            z = gen.geometric(p, exact_tree.size) - gen.geometric(p, exact_tree.size)
            noisy = (exact_tree + z).tolist()
        leaves = np.asarray(post(noisy), dtype=float)
        e = np.cumsum(leaves) - truth
        cdf.append(float(np.mean(e**2)))
        ident.append(float(np.mean((leaves - data) ** 2)))
        rng_all.append(float(((K + 1) * np.sum(e**2) - np.sum(e) ** 2) / (K * (K + 1) / 2)))
        if time_limit is not None and i >= 9 and time.perf_counter() - t0 > time_limit:
            break
    n = len(cdf)
    series = (("cdf", cdf), ("identity", ident), ("all_range", rng_all))
    means = {k: float(np.mean(v)) for k, v in series}
    ses = {k: float(np.std(v, ddof=1) / math.sqrt(n)) for k, v in series}
    src = "OpenDP's sampler" if sampler == "opendp" else "numpy discrete-Laplace sampler"
    return OpenDPRun(b, n, means, ses, time.perf_counter() - t0,
                     note=f"OpenDP b = {b}, {layers} layers, discrete Laplace scale {scale:g} "
                          f"({src}), eps = {loss:g} by OpenDP's privacy map")


# ------------------------------------------------------------------ compare
def opendp_noise_problem(n_bins: int, epsilon: float) -> str:
    """Why OpenDP's own run would be meaningless at this budget ("" when it is not): its
    discrete Laplace (scale layers / eps) identically 0 or saturating, by the releases'
    rule (``privacy.check_noise_scales``)."""
    layers = opendp_layers(n_bins, choose_branching_factor(n_bins))
    scale = layers / epsilon
    try:
        check_noise_scales([scale], [discrete_variance(scale, "laplace")],
                           budget_name="epsilon", budget=epsilon, groups=["OpenDP's tree"])
    except ValueError as exc:
        return str(exc)
    return ""
