"""Secure noise for real releases: OpenDP's exact integer samplers, never numpy.

A release measures the integer answers of the tree (node counts) and adds, per noisy level,
integer noise from OpenDP (Rust core, OS randomness, exact arithmetic, no floating-point
sampling; Mironov 2012 shows why floating-point Laplace leaks):

* Laplace (eps-DP): ``make_laplace(vector_domain(atom_domain(T="i64")), l1_distance(T="i64"),
  scale=b)`` samples the discrete Laplace P(z) ~ exp(-|z| / b) ([GRS12]; [CKS20] Alg. 2). For
  integer queries with l1 sensitivity D its privacy map is D / b -- the same eps as the
  continuous Laplace of scale b, so the mechanism's per-level scales b_l = D_l / eps_l are used
  unchanged.
* Gaussian (rho-zCDP): ``make_gaussian(vector_domain(atom_domain(T="i64")),
  l2_distance(T="f64"), scale=sigma)`` samples the discrete Gaussian P(z) ~ exp(-z^2 /
  (2 sigma^2)) ([CKS20] Alg. 3) -- ``scale`` is sigma itself (OpenDP: "scale == standard
  deviation" of the underlying continuous parameter; the discrete variance is slightly below
  sigma^2, see ``mechanism.discrete_variance``). Its privacy map is D2^2 / (2 sigma^2) for l2
  sensitivity D2 ([CKS20] Thm. 4: the discrete Gaussian on integer shifts has the same zCDP
  bound as the continuous one), so sigma_l = D2_l / sqrt(2 rho_l) is used unchanged.

For every level, before sampling, OpenDP's own privacy map at the level's sensitivity is
checked against the level's budget (an independent account of the calibration). The whole
mechanism's loss (all levels together, rows with different scales) is the sensitivity of
diag(1/scale) A, as for continuous noise, because the answers and their shifts between
neighbours are integers ([CKS20] Thm. 4 and its multivariate form for independent
coordinates; for Laplace the pmf ratio is bounded coordinate-wise by exp(|shift| / b)).

Designs (:func:`secure_form`). A design from ``optimize`` (``best_mechanism``'s ``Design``, any
optimiser's result with ``.mechanism()``, or a ``Mechanism``) is released through its integer
form: integer strategies as they are (discrete noise of the same scale), real-valued ones as
the scaled integer strategy round(s A) of ``strategies.scaled`` (nested strategies as nested
ones, integer local matrices per depth, no matrix at any size), whose noise is calibrated to
its EXACT sensitivity: before any draw the integer sensitivity, the scale and the budget are
checked in rational arithmetic and with OpenDP's privacy map at the exact sensitivity, with
no tolerance (``docs/releasing_designs.md``).

This module takes no ``rng``: there is no way to make a release with simulation noise.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NotRequired, TypedDict

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .. import workloads
from ..error import expected_error
from ..mechanism import Mechanism, check_histogram, row_sensitivities
from ..optimize.design import Design
from ..privacy import EXACT_LIMIT, check_budget, loss_from_sensitivity
from ..strategies import IntervalStrategy, KroneckerStrategy, QuadtreeStrategy, Strategy
from ..strategies.haar import HaarStrategy
from ..strategies.nested import NestedStrategy
from ..strategies.scaled import (
    SCALE_BITS,
    IntegerNested,
    IntegerStrategy,
    IntegerToeplitz,
    max_scale_bits,
    scaled_integer,
    secure_route,
)

__all__ = ["secure_measure", "noise_ahead", "sampler_description", "exact_answers",
           "largest_answer", "check_unchanged",
           "SecureForm", "secure_form", "design_mechanism", "design_budget",
           "check_private_total",
           "ROUNDING_TOLERANCE", "l2_upper"]

# the scaled integer form of a real-valued design: s = 2^16, x16 while the exact prefix
# error grows by more than this (relative) through rounding (docs/releasing_designs.md)
ROUNDING_TOLERANCE = 1e-3
_SCALE_STEP = 4
# secure_form per design mechanism (weak: dropped with the mechanism)
_FORMS: weakref.WeakKeyDictionary[Mechanism, SecureForm] = weakref.WeakKeyDictionary()


class _SamplerArgs(TypedDict):
    """The keyword arguments of :func:`opendp_measurement` for one noise group."""

    noise: str
    scale: float
    sensitivity: float
    budget: float
    exact: NotRequired[int]


# [(rows, sampler arguments)]: one OpenDP measurement per group of rows
_Plan = list[tuple[npt.NDArray[np.intp], _SamplerArgs]]


def opendp_prelude() -> Any:
    """``opendp.prelude`` with the contrib features enabled (an opaque third-party module);
    ValueError when OpenDP is not installed."""
    try:
        import opendp.prelude as odp
    except ImportError:  # pragma: no cover - opendp is a main dependency
        raise ValueError("a release needs OpenDP's secure samplers: pip install opendp") from None
    odp.enable_features("contrib")
    return odp


def sampler_description(noise: str) -> str:
    """One line naming the sampler a release uses for ``noise`` ("laplace" | "gaussian")."""
    from importlib.metadata import version
    fn = "make_laplace" if noise == "laplace" else "make_gaussian"
    dist = "discrete Laplace" if noise == "laplace" else "discrete Gaussian"
    return (f"OpenDP {version('opendp')} {fn} on vector_domain(atom_domain(T=i64)): exact "
            f"{dist} sampler (integer arithmetic, OS randomness)")


def opendp_measurement(*, noise: str, scale: float, sensitivity: float, budget: float,
                        exact: int | None = None) -> Any:
    """OpenDP's integer-noise measurement of ``scale`` for one group of rows, after checking
    its privacy map at ``sensitivity`` against ``budget`` (ValueError; nothing drawn).

    ``exact``: the group's exact integer sensitivity (D1, or D2^2 for Gaussian noise) when
    it is known (scaled integer strategies): then the map is evaluated at it (D1 itself; the
    least double >= sqrt(D2^2)), the loss is also checked in rational arithmetic
    (:func:`_exact_loss_ok`), and both checks are strict (no tolerance)."""
    odp = opendp_prelude()
    if noise == "laplace":
        space = (odp.vector_domain(odp.atom_domain(T="i64")), odp.l1_distance(T="i64"))
        meas = odp.m.make_laplace(*space, scale=float(scale))
        d_in = int(np.ceil(sensitivity - 1e-12)) if exact is None else int(exact)
        loss = meas.map(d_in)
    else:
        space = (odp.vector_domain(odp.atom_domain(T="i64")), odp.l2_distance(T="f64"))
        meas = odp.m.make_gaussian(*space, scale=float(scale))
        loss = meas.map(float(sensitivity) if exact is None else l2_upper(exact))
    if exact is None:
        if loss > budget * (1 + 1e-9):
            raise ValueError(f"calibration error: OpenDP's privacy map gives {loss!r} > level "
                             f"budget {budget!r} at sensitivity {sensitivity!r}, scale "
                             f"{scale!r}")
    elif loss > budget or not _exact_loss_ok(noise, exact, scale, budget):
        raise ValueError(f"calibration error: at the exact sensitivity {exact!r} the loss "
                         f"({loss!r} by OpenDP's map) exceeds the level budget {budget!r} "
                         f"(scale {scale!r})")
    return meas


def l2_upper(d2: int) -> float:
    """The least double >= sqrt(d2) for an integer d2 (checked in rational arithmetic)."""
    d = math.sqrt(d2)
    while Fraction(d) ** 2 < d2:
        d = math.nextafter(d, math.inf)
    return d


def _exact_loss_ok(noise: str, exact: int, scale: float, budget: float) -> bool:
    """Whether the loss at the exact integer sensitivity is within the budget, in rational
    arithmetic: D1 / b <= eps (discrete Laplace, [CKS20]) or D2^2 / (2 sigma^2) <= rho
    (discrete Gaussian, [CKS20] Thm. 4); every double is an exact rational."""
    if noise == "laplace":
        return Fraction(int(exact)) <= Fraction(budget) * Fraction(scale)
    return Fraction(int(exact)) <= 2 * Fraction(budget) * Fraction(scale) ** 2


def _opendp_sample(values: npt.NDArray[np.int64], *, noise: str, scale: float,
                   sensitivity: float, budget: float,
                   exact: int | None = None) -> npt.NDArray[np.int64]:
    """values + integer noise of ``scale`` from OpenDP, for one group of rows (int64 in,
    int64 out), after checking OpenDP's privacy map (:func:`opendp_measurement`)."""
    meas = opendp_measurement(noise=noise, scale=scale, sensitivity=sensitivity,
                               budget=budget, exact=exact)
    return np.asarray(meas(values.tolist()), dtype=np.int64)


def _draw(plan: _Plan, answers: npt.NDArray[np.int64],
          y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """y[rows] = answers[rows] + noise for every (rows, sampler arguments) of ``plan``:
    called once every group's measurement has been built and its privacy map checked, so
    nothing is refused after the first noise is drawn."""
    for rows, kw in plan:
        y[rows] = _opendp_sample(answers[rows], **kw)
    return y


def exact_answers(mechanism: Mechanism, histogram: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The exact integer answers A h of the released rows (int64, shape (rows,)).

    Interval strategies (trees): int64 cumulative sums, O(rows + bins), exact for any count.
    Haar: int64 cumulative sums (2 S_m - S_a - S_b per node), O(bins). Quadtrees and
    Kronecker products of 0/1 factors (grid hierarchies): the structured product in float64,
    exact because every partial sum is a count of records <= N < 2^53 (checked). None of
    these reads the (mutable) explicit matrix.
    Scaled integer strategies (``strategies.scaled``): int64 products (a convolution for the
    Toeplitz ones, O(n^2)); exact when max|M_ij| x N < 2^53 (``largest_answer``, checked).
    Nested strategies with integer local matrices (``IntegerNested``): int64 children totals
    and one int64 product by M_d per depth, O(n + sum_d P_d m_d k_d), no matrix; exact when
    max_d max|M_d| x N < 2^53 (checked first).
    Other strategies: the sparse product, checked to be integral."""
    h = check_histogram(histogram, mechanism.n_bins)
    released = mechanism.released
    if isinstance(released, NestedStrategy):
        return _nested_answers(released, h)
    if isinstance(released, IntervalStrategy):
        c = np.concatenate([[0], np.cumsum(h, dtype=np.int64)])
        return c[released.hi] - c[released.lo]
    if isinstance(released, (IntegerToeplitz, IntegerStrategy)):
        if largest_answer(released, int(np.sum(h, dtype=np.float64))) >= EXACT_LIMIT:
            raise ValueError("the counts are too large for exact integer answers of the "
                             "scaled strategy (max|entry| x N >= 2^53)")
        n_core = int(np.sum(released.levels > 0))
        if isinstance(released, IntegerToeplitz):
            core = np.convolve(h, released.integer_coefficients())[:released.n_bins]
        else:
            m = released.core
            core = sp.csr_matrix((m.data.astype(np.int64), m.indices, m.indptr),
                                 shape=m.shape) @ h
        tot = np.full(released.n_rows - n_core, int(np.sum(h, dtype=np.int64)), np.int64)
        return np.concatenate([np.asarray(core, dtype=np.int64), tot])
    if isinstance(released, HaarStrategy):
        c = np.concatenate([[0], np.cumsum(h, dtype=np.int64)])
        lo, mid, hi = released.node_bounds()
        out = np.full(released.n_rows, c[-1], dtype=np.int64)       # the total rows
        out[1:released.n_bins] = 2 * c[mid] - c[lo] - c[hi]
        return out
    if isinstance(released, QuadtreeStrategy) or (isinstance(released, KroneckerStrategy) and all(
            np.all((f.matrix.data == 0) | (f.matrix.data == 1)) for f in released.factors)):
        if float(np.sum(h, dtype=np.float64)) >= 2.0**53:
            raise ValueError("the counts sum to 2^53 or more: not exact in double precision")
        return np.rint(released.apply(h.astype(np.float64))).astype(np.int64)
    a = released.matrix
    if not np.all(a.data == np.round(a.data)):
        raise ValueError("a secure release needs an integer strategy matrix")
    return np.asarray(a @ h, dtype=np.int64)


def _nested_answers(strategy: NestedStrategy,
                    h: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The exact answers of a nested strategy with integer local matrices (int64, rows in
    the strategy's order): children totals summed in int64 bottom-up, then per depth the
    (P_d, k_d) totals times M_d' in int64. The bound max_d max|M_d| x N < 2^53 is checked
    by arithmetic before any product (every answer and partial sum is then an exact
    integer, well inside int64)."""
    if isinstance(strategy, IntegerNested):
        mats = strategy.integer_locals()
    else:
        if not all(np.all(m == np.round(m)) for m in strategy.locals):
            raise ValueError("a secure release needs integer local matrices (release a "
                             "real-valued nested strategy in its scaled integer form)")
        mats = [m.astype(np.int64) for m in strategy.locals]
    if largest_answer(strategy, int(np.sum(h, dtype=np.float64))) >= EXACT_LIMIT:
        raise ValueError("the counts are too large for exact integer answers of the nested "
                         "strategy (max|entry| x N >= 2^53)")
    ks, nodes = strategy.fanouts, strategy.nodes
    totals = [h]                                           # depth L: the bins
    for d in range(strategy.height - 1, 0, -1):
        totals.append(totals[-1].reshape(nodes[d], ks[d]).sum(axis=1, dtype=np.int64))
    totals = totals[::-1]                                  # totals[d]: depth d + 1 nodes
    return np.concatenate([(totals[d].reshape(nodes[d], ks[d]) @ m.T).ravel()
                           for d, m in enumerate(mats)])


def _check_discrete(mechanism: object) -> None:
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if not mechanism.discrete:
        raise ValueError("secure_measure needs a discrete mechanism (Mechanism(..., "
                         "discrete=True) or mech.discretised()): its variances must describe "
                         "the integer noise actually added")


def _row_sensitivities_of(mechanism: Mechanism) -> npt.NDArray[np.float64]:
    """The per-row sensitivities of a mechanism with budgets per row (the Mechanism sets both
    together; ValueError, before any draw, if they are not)."""
    sens = mechanism.row_sensitivities
    if sens is None:
        raise ValueError("mechanism: budgets per row without per-row sensitivities")
    return sens


def _noise_groups(mechanism: Mechanism) -> tuple[_Plan, npt.NDArray[np.intp]]:
    """([(rows, sampler arguments)], unmeasured rows): one group per noisy level (tuple), or
    with budgets per row one per distinct (scale, own sensitivity), checked against the
    least budget of its rows; exact rows (scale 0) are in no group."""
    scale = mechanism.scales
    groups: _Plan = []
    sens, budget = mechanism.row_sensitivities, mechanism.row_budgets
    if budget is not None:                             # budgets per row
        sens = _row_sensitivities_of(mechanism)
        noisy = np.flatnonzero(np.isfinite(scale) & (scale > 0))
        keys, inv = np.unique(np.stack([scale[noisy], sens[noisy]]), axis=1,
                              return_inverse=True)
        order = np.argsort(inv, kind="stable")
        bounds = np.searchsorted(inv[order], np.arange(keys.shape[1] + 1))
        for g in range(keys.shape[1]):
            rows = noisy[order[bounds[g]:bounds[g + 1]]]
            groups.append((rows, _SamplerArgs(noise=mechanism.noise, scale=float(keys[0, g]),
                                              sensitivity=float(keys[1, g]),
                                              budget=float(budget[rows].min()))))
        return groups, np.flatnonzero(np.isinf(scale))
    levels = mechanism.released.levels
    budgets, lsens = mechanism.level_budgets, mechanism.level_sensitivities
    order = np.argsort(levels, kind="stable")          # the rows of each level, in one pass
    bounds = np.searchsorted(levels[order], np.arange(int(levels.max()) + 2))
    for lvl, sc in mechanism.level_scales.items():     # one group per level (tuple)
        if sc == 0 or np.isinf(sc):
            continue  # exact (public or data-independent) rows, or not measured
        kw = _SamplerArgs(noise=mechanism.noise, scale=sc, sensitivity=lsens[lvl],
                          budget=budgets[lvl])
        exact = _exact_level_sensitivity(mechanism, lvl)
        if exact is not None:
            kw["exact"] = exact
        groups.append((order[bounds[lvl]:bounds[lvl + 1]], kw))
    return groups, np.flatnonzero(np.isinf(scale))


def secure_measure(mechanism: Mechanism, histogram: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Noisy answers y = A h + z of a discrete mechanism, z from OpenDP's exact samplers.

    ``mechanism`` must have ``discrete=True`` (so its variances are those of the noise added
    here). Returns float64 of shape (rows,): exact rows (public total, data-independent levels)
    carry the exact answer, unmeasured rows (budget 0) NaN, every other row an integer. One
    OpenDP call per noise group (:func:`_noise_groups`), every group's measurement built and
    its privacy map checked before the first draw; no numpy randomness is used."""
    _check_discrete(mechanism)
    answers = exact_answers(mechanism, histogram)
    y = answers.astype(float)
    groups, unmeasured = _noise_groups(mechanism)
    y[unmeasured] = np.nan
    for _, kw in groups:
        opendp_measurement(**kw)  # every check first: nothing refused after a draw
    return _draw(groups, answers, y)


def noise_ahead(mechanism: Mechanism) -> npt.NDArray[np.float64]:
    """The noise z of every released row, drawn before any data (a counter's noise drawn
    ahead, ``stream.ahead``): OpenDP's exact samplers on zero answers, each group's
    measurement (:func:`_noise_groups`) built and its privacy map checked once, all before
    the first draw. float64 (rows,): integers, 0 on exact rows, NaN on unmeasured ones."""
    _check_discrete(mechanism)
    groups, unmeasured = _noise_groups(mechanism)
    built = [(rows, opendp_measurement(**kw)) for rows, kw in groups]
    z = np.zeros(mechanism.released.n_rows)
    z[unmeasured] = np.nan
    for rows, meas in built:
        z[rows] = np.asarray(meas([0] * len(rows)), dtype=float)
    return z


def _exact_level_sensitivity(mechanism: Mechanism, level: int) -> int | None:
    """The exact integer sensitivity (D1, or D2^2 for Gaussian noise) of one noisy level of
    a scaled integer strategy: its integer rows (level >= 1; for a nested one, the rows of
    depth level - 1), or its all-ones total rows (level 0, each changing by 1 when a record
    is added or removed); None for other strategies (their levels' sensitivities are the
    structured ones)."""
    released = mechanism.released
    p = 1 if mechanism.noise == "laplace" else 2
    if isinstance(released, IntegerNested):     # one level per depth (no total rows)
        return released.exact_level_sensitivity(level, mechanism.neighbours, p)
    if not isinstance(released, (IntegerStrategy, IntegerToeplitz)):
        return None
    if level > 0:
        return released.exact_sensitivity(mechanism.neighbours, p)
    return int(np.sum(released.levels == 0)) if mechanism.neighbours == "add_remove" else 0


def _matrix_backed(strategy: Strategy) -> bool:
    """Whether the strategy's answers and sensitivities are read from its stored explicit
    matrix (a hand-built ``Strategy``; its arrays are the caller's and writeable), rather
    than from read-only structure (trees, interval strategies, Haar, quadtrees, Kronecker
    products, Toeplitz coefficients, the scaled integer strategies, whose arrays are
    read-only)."""
    return type(strategy).matrix is Strategy.matrix and not isinstance(strategy,
                                                                        IntegerStrategy)


def check_unchanged(mechanism: Mechanism) -> None:
    """Refuse a mechanism whose strategy was changed after it was calibrated (ValueError,
    before anything is drawn), then make that strategy's arrays read-only.

    Only strategies read from their stored matrix (:func:`_matrix_backed`) can change: for
    them the calibration is recomputed from the matrix as it is now -- the sensitivity of
    every noisy level (or row, with budgets per row), the whole loss of diag(1 / scale) A
    (``Strategy.sensitivity``, docs/math.md section 0) within the budget as ``Mechanism``
    checks it, and the exact rows still unchanged by any neighbour (a public total aside) --
    and must be the mechanism's. O(the mechanism's own calibration)."""
    released = mechanism.released
    if not _matrix_backed(released):
        return
    nb, noise = mechanism.neighbours, mechanism.noise
    p = 1 if noise == "laplace" else 2
    scales = mechanism.scales
    noisy = np.isfinite(scales) & (scales > 0)
    same: bool | np.bool_
    if mechanism.row_budgets is not None:
        same = np.array_equal(row_sensitivities(released, nb)[noisy],
                              _row_sensitivities_of(mechanism)[noisy])
    else:
        sens = mechanism.level_sensitivities
        same = all(released.level_sensitivity(lvl, nb, p) == sens[lvl]
                   for lvl, sc in mechanism.level_scales.items() if 0 < sc < math.inf)
    exact = scales == 0
    if mechanism.public_total:
        exact &= released.levels != 0
    if same and exact.any():
        same = released.sensitivity(exact.astype(float), nb, p) == 0
    if same and noisy.any():
        w = np.where(noisy, 1.0 / np.where(noisy, scales, 1.0), 0.0)
        top = float(w.max())
        loss = loss_from_sensitivity(released.sensitivity(w / top, nb, p), noise)
        loss *= top if noise == "laplace" else top * top
        same = loss <= mechanism.requested_budget * (1 + 1e-9)
    if not same:
        raise ValueError("design: its strategy's matrix no longer matches the noise it was "
                         "calibrated for (was it changed after the mechanism was made?); "
                         "build the Mechanism again from the strategy as it is")


def largest_answer(strategy: Strategy, total: int) -> int:
    """An upper bound on |(A h)_r| for counts h summing to ``total``: max |A_rj| x total
    (1 for 0/1 and +-1 strategies, the largest entry of a scaled integer strategy, the
    product of the factors' for a Kronecker product, max_d max |S_d| rounded up for a
    nested strategy: its entries are those of its local matrices)."""
    if isinstance(strategy, (IntegerStrategy, IntegerToeplitz, IntegerNested)):
        return strategy.max_entry * int(total)
    if isinstance(strategy, NestedStrategy):
        top = max(math.ceil(float(np.max(np.abs(m)))) for m in strategy.locals)
        return max(top, 1) * int(total)
    if isinstance(strategy, KroneckerStrategy):
        top = 1
        for f in strategy.factors:
            top *= largest_answer(f, 1)
        return top * int(total)
    if isinstance(strategy, IntervalStrategy) or strategy.max_matrix_bins is not None:
        return int(total)
    return max(int(np.max(np.abs(strategy.matrix.data), initial=1.0)), 1) * int(total)


# ------------------------------------------------------------------ designs
def design_mechanism(design: object) -> Mechanism:
    """The Mechanism of ``design``: a ``Design`` (``optimize.best_mechanism``), any
    optimiser's result with a ``mechanism()`` method (``TreeDesign``, ``NodeBudgets``,
    ``GridDesign``), or a ``Mechanism``; ValueError naming ``design`` otherwise, and for a
    ``Design`` whose ``releasable`` is False (with its ``release_note``: refused before
    anything is built or drawn)."""
    if isinstance(design, Mechanism):
        return _single_participation(design)
    if isinstance(design, Design) and not design.releasable:
        why = design.release_note or "Design.releasable is False"
        raise ValueError(f"design: the {design.family!r} design is not releasable ({why}); "
                         "optimize.best_mechanism(..., releasable=True) keeps the designs "
                         "that release and stream.Counter run")
    make = getattr(design, "mechanism", None)
    mech = make() if callable(make) else None
    if not isinstance(mech, Mechanism):
        raise ValueError(f"design must be a Design (optimize.best_mechanism), an optimiser's "
                         f"result with .mechanism(), or a Mechanism; got "
                         f"{type(design).__name__}")
    return _single_participation(mech)


def _single_participation(mech: Mechanism) -> Mechanism:
    """``mech`` when its noise is calibrated to one participation (a release or a counter
    protects one record / event); ValueError for a participation schema (docs/math.md
    section 11), whose noise is for a stream of contributions (``stream.CorrelatedNoise``)."""
    if not mech.participation.is_single:
        raise ValueError(f"design: its mechanism is calibrated to {mech.participation.describe()}"
                         "; releases and counters protect one record (single participation): "
                         "use stream.CorrelatedNoise for noise under multiple participations")
    return mech


def check_private_total(mechanism: Mechanism) -> None:
    """Refuse a design that releases N exactly under add/remove neighbours (a ``Mechanism``
    made with ``public_total=True``): those neighbours protect N, and a release states the
    guarantee of its neighbour model (swap neighbours release N exactly, and say so)."""
    if mechanism.public_total and mechanism.neighbours == "add_remove":
        raise ValueError("design: it releases N, the number of records, exactly "
                         "(public_total=True) under add_remove neighbours, which protect N; "
                         "make it with N private (the default), or with neighbours='swap' "
                         "when N is public")


def design_budget(mechanism: Mechanism, epsilon: float | None = None,
                  rho: float | None = None) -> tuple[str, str, float]:
    """(noise, budget name, budget) of a release of the design ``mechanism``: its own when
    neither ``epsilon`` nor ``rho`` is given; a given one must be of the design's kind and
    equal its budget exactly (a design is optimised for one budget, and a release never
    spends more than the budget asked for, by even one ulp). ValueError otherwise."""
    name = "epsilon" if mechanism.noise == "laplace" else "rho"
    if epsilon is None and rho is None:
        return mechanism.noise, name, mechanism.requested_budget
    if epsilon is not None and rho is not None:
        raise ValueError("give at most one of epsilon or rho with a design (or neither: the "
                         "design's own budget)")
    given = "epsilon" if epsilon is not None else "rho"
    value = check_budget(epsilon if epsilon is not None else rho, given)
    if given != name:
        raise ValueError(f"{given}: the design uses {mechanism.noise} noise, whose budget is "
                         f"{name}; give {name}= or leave the budget out")
    if value != mechanism.requested_budget:     # exactly: not one ulp more, nor one less
        raise ValueError(f"{name} = {value!r}: the design was made for {name} = "
                         f"{mechanism.requested_budget!r}; make the design at the budget you "
                         f"release with (optimize.best_mechanism(..., {name}={value!r})) or "
                         "leave the budget out")
    return mechanism.noise, name, mechanism.requested_budget


@dataclass(frozen=True, eq=False)
class SecureForm:
    """How a design is released securely (:func:`secure_form`).

    mechanism : the discrete Mechanism actually released (integer strategy, OpenDP noise).
    source : the design's own Mechanism.
    route : "integer" (the strategy as it is) or "scaled" (round(s A), ``strategies.scaled``).
    scale_bits : s = 2^scale_bits for a scaled strategy, else None.
    design_error, rounded_error : exact total prefix (CDF) errors, counts^2, of the design
        and of its scaled integer form under the same continuous noise (the cost of the
        rounding alone), 1-D scaled designs only (None otherwise).
    note : one line on how the design is released.
    """

    mechanism: Mechanism
    source: Mechanism
    route: str
    scale_bits: int | None = None
    design_error: float | None = None
    rounded_error: float | None = None
    note: str = ""

    @property
    def rounding_increase(self) -> float:
        """rounded_error / design_error - 1 (0 for an integer design)."""
        if self.design_error is None or self.rounded_error is None:
            return 0.0
        return self.rounded_error / self.design_error - 1.0

    def account(self) -> dict[str, Any]:
        """JSON-able: the strategy released, its route and, for a scaled one, s, the exact
        integer sensitivity the noise is calibrated to and the measured rounding cost."""
        mech = self.mechanism
        out: dict[str, Any] = {"strategy": mech.released.name, "source": self.source.released.name,
               "route": self.route, "note": self.note}
        released = mech.released
        if (self.route == "scaled" and self.scale_bits is not None
                and isinstance(released, (IntegerStrategy, IntegerToeplitz, IntegerNested))):
            p = 1 if mech.noise == "laplace" else 2
            what = "l1" if p == 1 else "squared l2"
            if isinstance(released, IntegerNested):     # one noise level per depth
                exact: int | list[int] = [
                    released.exact_level_sensitivity(d + 1, mech.neighbours, p)
                    for d in range(released.height)]
                is_ = f"{what} per depth, root first (integers; one noise level each)"
            else:
                exact = released.exact_sensitivity(mech.neighbours, p)
                is_ = f"{what} (an integer)"
            out.update(scale=2 ** self.scale_bits, exact_sensitivity=exact,
                       exact_sensitivity_is=is_,
                       design_cdf_error=self.design_error, rounded_cdf_error=self.rounded_error,
                       rounding_increase=self.rounding_increase)
        return out


def _rebuilt(source: Mechanism, strategy: Strategy) -> Mechanism:
    """A Mechanism on ``strategy`` with the setting of ``source`` (noise, budget, neighbours,
    public total, budgets of its noisy levels in level order)."""
    laplace = source.noise == "laplace"
    budgets = source.level_budgets
    levels = [budgets[lvl] for lvl in sorted(budgets)] if len(budgets) > 1 else None
    public = True if source.public_total and source.neighbours == "add_remove" else None
    return Mechanism(strategy, noise=source.noise, neighbours=source.neighbours,
                     public_total=public, level_budgets=levels,
                     epsilon=source.requested_budget if laplace else None,
                     rho=None if laplace else source.requested_budget)


def secure_form(design: object) -> SecureForm:
    """The form in which ``design`` (:func:`design_mechanism`) is released securely.

    Integer strategies (trees with budgets per level or per node, interval strategies, Haar,
    quadtrees, Kronecker products of trees, integer matrices): the same mechanism with
    discrete noise. Real-valued single-level 1-D strategies (square root, BLT, the Gaussian
    optimum, p-Identity, dense optima) and nested strategies (one noise level per depth):
    the scaled integer strategy M = round(s A) (per depth M_d = round(s S_d / 2^(e_d)) for a
    nested one, add/remove neighbours with N private) with s = 2^16, multiplied by 16 while
    its exact CDF error exceeds the design's by more than ``ROUNDING_TOLERANCE`` (up to 2^24
    within ``max_scale_bits``, where every exact sensitivity is an integer below 2^53; the
    measured increase is reported). ValueError, with the reason, when the design has no
    secure form, or when its strategy no longer matches its calibration
    (:func:`check_unchanged`, on every call). Data-independent; cached per design mechanism
    (weakly)."""
    source = design_mechanism(design)
    check_unchanged(source)         # every call: a cached form is checked again
    hit = _FORMS.get(source)
    if hit is not None:
        return hit
    route, how = secure_route(source.strategy, row_budgets=source.row_budgets is not None)
    if route is None:
        raise ValueError(f"design: no secure sampler path for this design: {how}")
    if (route == "scaled" and isinstance(source.strategy, NestedStrategy)
            and source.released is not source.strategy):
        raise ValueError("design: a nested design that releases N exactly (public_total=True "
                         "or swap neighbours) has no scaled integer form; make it under "
                         "add_remove neighbours with N private")
    if route == "integer":
        form = SecureForm(source.discretised(), source, "integer", note=how)
    else:
        if isinstance(source.strategy, KroneckerStrategy) or source.strategy.n_bins < 1:
            raise ValueError("design: scaled integer forms are made for 1-D designs only")
        w = workloads.prefix(source.n_bins)
        ref = float(expected_error(w, source))
        best, top = None, max_scale_bits(source.strategy)
        for bits in [b for b in range(SCALE_BITS, top + 1, _SCALE_STEP)] or [top]:
            try:
                cand = _rebuilt(source, scaled_integer(source.strategy, bits,
                                                       noise=source.noise))
                err = float(expected_error(w, cand))
            except (ValueError, np.linalg.LinAlgError):
                continue        # rounding lost the strategy's rank: a finer scale
            best = (bits, cand, err)
            if err <= ref * (1.0 + ROUNDING_TOLERANCE):
                break
        if best is None:
            raise ValueError(f"design: its scaled integer forms (s = 2^{min(SCALE_BITS, top)} "
                             f".. 2^{top}) cannot be estimated (rounding made the strategy "
                             "rank-deficient)")
        bits, cand, err = best
        form = SecureForm(cand.discretised(), source, "scaled", bits, ref, err,
                          f"{how}; s = 2^{bits}: rounding changes the exact CDF error by "
                          f"{err / ref - 1:+.2e} (relative, measured)")
    _FORMS[source] = form
    return form

