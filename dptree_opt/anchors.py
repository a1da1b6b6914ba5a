"""Emulations of the deployed tree mechanisms of docs/math.md section 6, as mechanism + estimator.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import strategies
from .mechanism import Mechanism, discrete_variance

__all__ = ["Anchor", "binary_covering", "binary_ols", "google_default", "opendp_default",
           "opendp_tree", "choose_branching_factor", "opendp_layers",
           "discrete_laplace_variance", "ANCHORS"]


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
    branching: tuple
    variance_factor: float = 1.0
    note: str = ""


def _budget(noise: str, epsilon, rho) -> dict:
    return {"epsilon": epsilon} if noise == "laplace" else {"rho": rho}


def _check_bins(n_bins) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    return n_bins


def _pad_note(n_bins: int, padded: int) -> str:
    return "" if padded == n_bins else (f"padded {n_bins} -> {padded} bins (extra bins empty, "
                                        "noised)")


def _root_private(neighbours: str, public_total) -> bool:
    return neighbours == "add_remove" and not public_total


def _binary(key, label, emulates, estimator, n_bins, epsilon, rho, noise, neighbours,
            public_total) -> Anchor:
    n = _check_bins(n_bins)
    h = strategies.padded_height(n, 2)
    mech = Mechanism(strategies.tree(2**h, 2), noise=noise, neighbours=neighbours,
                     public_total=public_total, **_budget(noise, epsilon, rho))
    return Anchor(key, label, emulates, mech, estimator, n, (2,) * h, note=_pad_note(n, 2**h))


def binary_covering(n_bins: int, epsilon: float | None = 1.0, *, rho=None,
                    noise: str = "laplace", neighbours: str = "add_remove",
                    public_total=None) -> Anchor:
    """Binary tree, covering sums, every level (root included when N is private) gets an
    equal share (Dwork et al. 2010 / Chan et al. 2011; docs/math.md section 6 row 1)."""
    return _binary("binary_covering", "binary tree, covering sums",
                   "Dwork et al. / Chan et al. binary tree mechanism (root level included)",
                   "covering", n_bins, epsilon, rho, noise, neighbours, public_total)


def binary_ols(n_bins: int, epsilon: float | None = 1.0, *, rho=None, noise: str = "laplace",
               neighbours: str = "add_remove", public_total=None) -> Anchor:
    """Binary tree, equal variances, OLS = Honaker's efficient estimator (Hay et al. 2010;
    docs/math.md section 6 row 2)."""
    return _binary("binary_ols", "binary tree + OLS",
                   "Hay et al. consistency (OLS, equal variances) = Honaker efficient estimator",
                   "blue", n_bins, epsilon, rho, noise, neighbours, public_total)


def google_default(n_bins: int, epsilon: float | None = 1.0, *, rho=None,
                   noise: str = "laplace", neighbours: str = "add_remove", public_total=None,
                   branching: int = 16) -> Anchor:
    """Google DP library quantile-tree default: b = 16, root not noised, covering sums
    (docs/math.md section 6 row 3). Height ceil(log16 K), leaves padded to 16^h; the budget is
    split equally over the h non-root levels."""
    n = _check_bins(n_bins)
    h = strategies.padded_height(n, branching)
    padded = branching**h
    levels = None
    if _root_private(neighbours, public_total):
        total = epsilon if noise == "laplace" else rho
        levels = [0.0] + [total / h] * h  # root not measured
    mech = Mechanism(strategies.tree(padded, branching), noise=noise, neighbours=neighbours,
                     public_total=public_total, level_budgets=levels,
                     **_budget(noise, epsilon, rho))
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


def opendp_tree(n_bins: int, branching: int):
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


def opendp_default(n_bins: int, epsilon: float | None = 1.0, *, rho=None,
                   noise: str = "laplace", neighbours: str = "add_remove", public_total=None,
                   branching: int | None = None, padding: str = "known_zeros") -> Anchor:
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
    mech = Mechanism(strat, noise=noise, neighbours=neighbours, public_total=public_total,
                     **_budget(noise, epsilon, rho))
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


ANCHORS = {"binary_covering": binary_covering, "binary_ols": binary_ols,
           "google_default": google_default, "opendp_default": opendp_default}
