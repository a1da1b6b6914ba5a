"""``release``: raw data -> bins -> tree -> secure noise -> BLUE -> consistent CDF, quantiles.

Pipeline (ektelo's vocabulary: select a strategy, measure, infer):

1. **Bins** (public): K equal-width bins over [lower, upper), rule in ``binning``; data are
   counted block by block (``np.bincount``), never held whole when read from a file.
2. **Tree** (public): ``tree="optimal"`` asks ``optimize.level_uniform(K, ...,
   estimator="blue")`` for the level-uniform tree whose BLUE has the least exact CDF error
   (its per-level budgets included); a list of branching factors is used as given (equal
   budgets, or ``budgets="optimal"``). If prod k_l = K' > K the histogram is padded with
   K' - K empty bins. They are *public zeros*: no record can fall there, so the sensitivities
   (and the guarantee) are those of the real bins, and the released CDF covers the K real bins
   only (see "Padding" below). With ``design=`` (a ``Design`` from
   ``optimize.best_mechanism``, any optimiser's result with ``.mechanism()``, or a
   ``Mechanism`` over the K bins) the design's strategy is used instead, in its secure form
   (``secure_noise.secure_form``: integer strategies as they are, budgets per level or per
   node; real-valued ones as the scaled integer strategy round(s A) with noise calibrated to
   its exact sensitivity; ``docs/releasing_designs.md``).
3. **Secure noise**: ``secure_noise.secure_measure`` adds OpenDP's discrete Laplace /
   discrete Gaussian to the integer node counts, per level at the mechanism's calibrated
   scale. There is no rng argument anywhere on this path; simulation noise
   (``Mechanism.measure`` / ``sample_noise``) is never called.
4. **Estimation** (post-processing): ``pipeline.cdf_from_measurements`` on the *discrete*
   mechanism (its variances are the discrete noise's, so the BLUE weights and the standard
   errors match what was added): raw cumulative counts and exact SEs.
5. **Consistency** (post-processing): ``consistency.project_cdf`` onto integer, non-decreasing
   counts in [0, N] ending at N -- N public under swap; under add/remove the pipeline's rule
   N_hat = max(0, round(raw total)).
6. **Quantiles**: ``queries.quantiles`` of the consistent CDF (linear inside bins) and
   ``quantile_intervals``: per quantile, an interval for the TRUE quantile of the data with
   coverage >= ``interval_level`` (exact test inversion per bin; critical values calibrated
   to the discrete noise, Laplace tails included; see that module), and the noise-only
   interval of the estimate; both contain the estimate.

Validation first, nothing after the noise. Every argument, the bins (edges strictly
increasing; at most ``MAX_BINS`` = 2^20), the input file and its header (before the design),
the output of the design, the memory the tree and the quantile tests' calibration need (the
least any tree needs before the design, the designed tree's after), the noise scales (not so
small that the noise is identically 0, not so large that answers + noise leave the exact
integer range of doubles), the quantile tests' calibration, the exact total of the counts
(< 2^53) are checked BEFORE ``secure_measure`` draws the noise. After it, post-processing
never raises: undefined answers (quantiles when N_hat <= 0) are NaN with a line in
``Release.notes``, and an unexpected failure still returns the noisy measurements (the DP
output) in a Release marked incomplete.

Padding. With K' > K the tree is over K' leaves, the last K' - K empty. The BLUE is computed
on the whole tree (it treats the padded bins as unknown rather than as known zeros: still
unbiased, SEs exact, slightly less efficient than a constrained estimator would be); the
release keeps the first K cumulative counts and SEs. The CDF is projected on the K real bins
with the known fact C_K = C_K' = N: under swap N exactly; under add/remove N_hat is the
rounded estimate of C_K or of C_K' -- whichever has the smaller (public, data-independent) SE.

Neighbours. The default is ``"add_remove"``: one person's presence in the data is protected,
including the count N (N is estimated with noise). ``"swap"`` only protects a change of one
record's value: **N is then released exactly** (the description says so loudly); use it only
when N is already public.
"""

from __future__ import annotations

import functools
import math
import time
import os
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Callable, Literal, Sequence, cast

import numpy as np
import numpy.typing as npt

from .. import optimize, strategies
from ..strategies import LevelUniformTree
from ..consistency import project_cdf
from ..mechanism import Mechanism, check_histogram
from ..pipeline import CONSISTENCY, PrivateCDF, cdf_from_measurements
from ..limits import check_memory
from ..privacy import EXACT_LIMIT, NOISE_TAIL
from ..queries import (cdf_standard_errors, check_level, check_probabilities,
                       quantiles as _quantiles)
from ..quantile_intervals import (NORMAL_SIGMA, QuantileCalibration, calibrate_quantile_tests,
                                  check_quantile_intervals, quantile_intervals)
from ..strategies.base import check_neighbours, frozen_copy
from .binning import BinSpec, check_out_of_range
from .checks import (DEFAULT_QUANTILES, budget_choice, check_budgets, check_histogram_total,
                     check_mechanism_noise, check_tiny_budget, exact_total)
from .io import (check_chunk_bytes, check_columns, histogram_from_file, histogram_from_values,
                 read_counts)
from .result import Release, incomplete_note
from .sources import engine_counts, is_engine_input
from .secure_noise import (SecureForm, check_private_total, design_budget, design_mechanism,
                           sampler_description, secure_form, secure_measure)
from .grid import is_grid_bins, release_grid, release_grid_file
from .grid_result import GridRelease

__all__ = ["release", "release_file", "default_cdf_error", "DEFAULT_QUANTILES", "MAX_BINS",
           "MAX_LEAVES", "EXACT_LIMIT", "NOISE_TAIL", "exact_total"]

# K above this is refused. Measured with counts (2 shared cores, 23 GiB): the default
# release at K = 2^20 (optimal tree of 1.77M leaves, 3.54M nodes) peaks at 8.8 GiB and takes
# ~4 min (design and the quantile tests' calibration ~3.5 min, secure noise 15 s); at 2^24 the
# same design (28M leaves) would need ~140 GiB.
MAX_BINS = 1 << 20
MAX_LEAVES = 1 << 21  # a tree with more leaves than this is refused (2 MAX_BINS: padding)
# Peak memory: BYTES_PER_LEAF per tree leaf (measured ~360 bytes above the interpreter's own,
# binary tree of 2^18 leaves, discrete Gaussian noise normal enough for the calibration's
# shortcut; a margin for the design search), plus the quantile tests' calibration when the
# noise law is not normal: the weights of every checked prefix on every row, then again on
# the noisy rows, 8 bytes each. Prefixes checked (quantile_intervals): every one up to
# K = 64, else between 65 (the ends and the random ones) and 225 (also up to 160 few-node
# ones; 211 at K = 2^20). The estimate for the default release at 2^20 is 9.9 GiB (measured
# peak 8.8).
BYTES_PER_LEAF = 512
CALIBRATION_PREFIXES = (65, 225)


# ------------------------------------------------------------------ argument checks
def _check_quantiles(qs: npt.ArrayLike) -> tuple[float, ...]:
    return tuple(float(v) for v in check_probabilities(qs, "quantiles"))


def _check_level(level: float) -> float:
    level = check_level(level, "interval_level")
    if 1 - float(level) < 1e-9:
        raise ValueError(f"interval_level must be <= 1 - 1e-9 (the critical values are not "
                         f"meaningful closer to 1), got {level!r}")
    return float(level)


def _check_bins(bins: object) -> int:
    """K: an integer in [1, MAX_BINS] (checked before the O(K) edges are built)."""
    if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, Integral) or int(bins) < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    if int(bins) > MAX_BINS:
        raise ValueError(f"bins = {bins} is above the limit {MAX_BINS} (2^20): the default "
                         "release over 2^20 bins already needs ~9 GiB of memory and minutes; "
                         "use fewer bins")
    return int(bins)


def _memory_need(leaves: int, rows: int, noisy_rows: int, prefixes: int) -> int:
    """Estimated peak bytes of a release over a tree of ``leaves`` leaves and ``rows`` nodes
    (``noisy_rows`` measured with noise), ``prefixes`` calibrated on the noise law (0 when it
    is normal): the model above ``BYTES_PER_LEAF``."""
    return leaves * BYTES_PER_LEAF + 8 * prefixes * (rows + noisy_rows)


def _check_memory(need: int, what: str) -> None:
    """Refuse a release whose estimated peak memory (``_memory_need``) exceeds half the
    available memory."""
    check_memory(need, f"{what}: the release (the tree and the quantile tests' calibration)",
                 "use fewer bins")


def _calibrated_prefixes(bins: int, most: bool, quantiles: bool = True) -> int:
    """How many prefixes the quantile tests' calibration checks: all K + 1 up to K = 64,
    else at least / at most CALIBRATION_PREFIXES; none when no quantile is asked (there is
    no calibration then)."""
    if not quantiles:
        return 0
    return bins + 1 if bins <= 64 else CALIBRATION_PREFIXES[1 if most else 0]


def _check_plan_memory(mech: Mechanism, bins: int, quantiles: bool) -> None:
    """The memory check with the designed tree (before the calibration allocates): its
    nodes, its noisy nodes and whether the calibration needs the noise law's weights (not
    for Gaussian noise whose every scale is >= the calibration's normal threshold, nor
    without quantiles)."""
    var = np.asarray(mech.variances)
    noisy = (var > 0) & np.isfinite(var)
    scales = np.asarray(mech.scales)[noisy]
    normal = mech.noise == "gaussian" and float(np.min(scales, initial=np.inf)) >= NORMAL_SIGMA
    _check_memory(_memory_need(mech.n_bins, var.size, int(noisy.sum()),
                               0 if normal else _calibrated_prefixes(bins, True, quantiles)),
                  "tree")


def _check_tree(tree: object, bins: int) -> tuple[int, ...] | None:
    """None for "optimal", else the validated branching factors (prod >= bins)."""
    if isinstance(tree, str):
        if tree != "optimal":
            raise ValueError(f"tree must be 'optimal' or a list of branching factors, got "
                             f"{tree!r}")
        return None
    try:
        ks = list(tree)  # type: ignore[call-overload]  # any input: TypeError handled
    except TypeError:
        raise ValueError(f"tree must be 'optimal' or a list of branching factors, got "
                         f"{tree!r}") from None
    if any(isinstance(k, (bool, np.bool_)) or not isinstance(k, Integral) or k < 1 for k in ks):
        raise ValueError(f"tree: branching factors must be integers >= 1, got {ks!r}")
    leaves = math.prod(int(k) for k in ks)
    if leaves < bins:
        raise ValueError(f"tree: branching {ks} has {leaves} leaves, fewer than bins = {bins} "
                         "(the product of the branching factors must be >= bins)")
    if leaves > MAX_LEAVES:
        raise ValueError(f"tree: branching {ks} has {leaves} leaves (> {MAX_LEAVES}); use "
                         "factors whose product is close to bins")
    return tuple(int(k) for k in ks)


def _check_counts(counts: npt.ArrayLike, bins: int) -> npt.NDArray[np.int64]:
    """Validated precomputed histogram (int64 (K,)); errors name ``counts``."""
    try:
        return check_histogram(counts, bins)
    except ValueError as exc:
        raise ValueError(f"counts: {exc} (need {bins} non-negative integer counts, one per "
                         "bin)") from None


# ------------------------------------------------------------------ design
@functools.lru_cache(maxsize=32)
def _design(bins: int, branching: tuple[int, ...] | None, noise: str, budget_name: str,
            budget: float, neighbours: str,
            budgets: str) -> tuple[tuple[int, ...], tuple[float, ...] | None, str]:
    """(branching, level budgets or None, note) of the tree to release with. Cached: the
    design depends on public parameters only (the search takes seconds for K = 2^16)."""
    eps, rho = (budget, None) if budget_name == "epsilon" else (None, budget)
    if branching is None:
        if bins == 1:
            return (), None, "one bin: the tree is the root alone"
        d = optimize.level_uniform(bins, estimator="blue", noise=noise, neighbours=neighbours,
                                   budgets=budgets, epsilon=eps, rho=rho)
        note = (f"optimize.level_uniform(estimator='blue', budgets='{budgets}'): {d.method}")
        return tuple(int(k) for k in d.branching), tuple(d.budgets), note
    if budgets == "optimal" and branching:
        d = optimize.optimal_blue_budgets(branching, budget, noise=noise, neighbours=neighbours,
                                          n_queries=bins)
        return branching, tuple(d.budgets), "given branching, optimal BLUE budgets"
    return branching, None, "given branching, equal budgets"


def _tree_mechanism(bins: int, given: tuple[int, ...] | None, noise: str, budget_name: str,
                    budget: float, neighbours: str, budgets: str,
                    discrete: bool = True) -> tuple[Mechanism, tuple[int, ...], str]:
    """(Mechanism, branching, note) of the tree the release runs without a design
    (:func:`_design`; padded to K' = prod(branching) leaves; discrete noise unless asked)."""
    branching, level_budgets, note = _design(bins, given, noise, budget_name, budget,
                                             neighbours, budgets)
    eps, rho = (budget, None) if budget_name == "epsilon" else (None, budget)
    mech = Mechanism(strategies.tree(math.prod(branching), list(branching)),
                     epsilon=eps, rho=rho, noise=noise, neighbours=neighbours,
                     level_budgets=None if level_budgets is None else list(level_budgets),
                     discrete=discrete)
    return mech, branching, note


def default_cdf_error(bins: int, *, epsilon: float | None = None, rho: float | None = None,
                      neighbours: str = "add_remove", discrete: bool = True) -> float:
    """The exact mean squared error per prefix (counts^2) of the raw CDF that ``release``
    publishes over ``bins`` bins without a design (``tree="optimal"``, ``budgets="optimal"``)
    under the discrete noise it draws: ``Release.expected_error["mean_prefix_mse"]`` of that
    release, computed without data or noise (to compare a design with the default);
    ``discrete=False``: under continuous noise of the same scales (as ``Design.mean``)."""
    bins = _check_bins(bins)
    noise, budget_name, budget = budget_choice(epsilon, rho)
    neighbours = check_neighbours(neighbours)
    mech, _, _ = _tree_mechanism(bins, None, noise, budget_name, budget, neighbours, "optimal",
                                 discrete=bool(discrete))
    se = np.asarray(cdf_standard_errors(mech, "blue"), dtype=np.float64)[:bins]
    return float(np.mean(se * se))


@dataclass(frozen=True)
class _Plan:
    """Everything about a release that does not depend on the data, validated."""

    spec: BinSpec
    noise: str
    budget_name: str
    budget: float
    branching: tuple[int, ...]
    note: str
    mechanism: Mechanism
    quantiles: tuple[float, ...]
    consistency: Literal["l2", "l1"] | None
    interval_level: float
    out_of_range: str
    standard_errors: npt.NDArray[np.float64]  # exact SEs of the raw CDF over the K' leaves
    calibration: QuantileCalibration | None  # None when no quantile is asked
    form: SecureForm | None = None  # with design=: how the design is released
    design: object = None           # the design given (a Design has its own error)

    @property
    def padded(self) -> int:
        """K' = prod(branching): the tree's leaves (>= K)."""
        return int(math.prod(self.branching))


def _check_design(design: object, bins: int, tree: object, budgets: str,
                  neighbours: str) -> Mechanism:
    """The design's Mechanism for a 1-D release over ``bins`` bins: the tree options left
    at their defaults, one axis of ``bins`` bins, the same neighbour model (ValueError)."""
    mech = design_mechanism(design)
    if not (isinstance(tree, str) and tree == "optimal" and budgets == "optimal"):
        raise ValueError("tree and budgets choose the tree when no design is given; with "
                         "design= the design decides: leave them out")
    if isinstance(mech.released, (strategies.KroneckerStrategy, strategies.QuadtreeStrategy)):
        raise ValueError("design: a grid design needs per-axis lower, upper and bins (a grid "
                         "release)")
    if mech.n_bins != bins:
        raise ValueError(f"design: it was made for {mech.n_bins} bins, the release has bins = "
                         f"{bins}")
    if neighbours != mech.neighbours:
        raise ValueError(f"neighbours: the design was made for {mech.neighbours!r} "
                         f"neighbours; pass neighbours={mech.neighbours!r} (release checks "
                         "that the guarantee is the one you asked for)")
    check_private_total(mech)
    return mech


def _design_branching(mech: Mechanism) -> tuple[int, ...]:
    """The branching of a design's complete level-uniform tree, else (K,) (one level: the
    strategy is described in the privacy account)."""
    released = mech.released
    if isinstance(released, LevelUniformTree) and math.prod(released.branching) == mech.n_bins:
        return tuple(int(k) for k in released.branching)
    return (mech.n_bins,)


def _plan(lower: float, upper: float, bins: object, epsilon: float | None, rho: float | None,
          tree: object, neighbours: str, out_of_range: str, quantiles: npt.ArrayLike,
          consistency: str | None, budgets: str, interval_level: float,
          before_design: Callable[[], None] | None = None, design: object = None) -> _Plan:
    """Validate every argument and build the mechanism before any data is read (cheap
    failures first, then ``before_design()`` (e.g. input files exist), then the design search
    (or the design's secure form) and the quantile tests' calibration, which take seconds
    at large K)."""
    bins = _check_bins(bins)
    spec = BinSpec(lower, upper, bins)
    check_neighbours(neighbours)
    source: Mechanism | None = None
    if design is not None:
        source = _check_design(design, spec.bins, tree, budgets, neighbours)
        noise, budget_name, budget = design_budget(source, epsilon, rho)
    else:
        noise, budget_name, budget = budget_choice(epsilon, rho)
    check_out_of_range(out_of_range)
    if consistency not in CONSISTENCY:
        raise ValueError(f"consistency must be one of {CONSISTENCY}, got {consistency!r}")
    given = _check_tree(tree, spec.bins)
    check_budgets(budgets)
    qs, level = _check_quantiles(quantiles), _check_level(interval_level)
    check_tiny_budget(noise, budget_name, budget)
    # the least any tree needs (K leaves, K + 1 nodes, the leaves noisy; Laplace noise is
    # never normal, so its calibration always holds the weights)
    _check_memory(_memory_need(bins, bins + 1, bins,
                               _calibrated_prefixes(bins, False, bool(qs))
                               if noise == "laplace" else 0), "bins")
    if before_design is not None:
        before_design()
    form: SecureForm | None = None
    if source is None:
        mech, branching, note = _tree_mechanism(spec.bins, given, noise, budget_name, budget,
                                                neighbours, budgets)
    else:
        form = secure_form(source)
        mech, branching = form.mechanism, _design_branching(source)
        family = getattr(design, "family", None)
        note = (f"{f'{family!r} ' if family else ''}({source.released.name}): "
                f"{form.note}")
    _check_plan_memory(mech, spec.bins, bool(qs))
    check_mechanism_noise(mech, budget_name, budget)
    try:
        se = np.asarray(cdf_standard_errors(mech, "blue"), dtype=np.float64)
    except ValueError as exc:
        if source is None:
            raise
        raise ValueError(f"design: the release publishes the CDF of the {spec.bins} bins, "
                         f"which this design does not estimate ({exc}); to release coarser "
                         "queries (e.g. brackets measured directly), make them the bins"
                         ) from None
    edges = spec.bin_edges
    check_quantile_intervals(mech, edges, qs, level, total_public=mech.public_total)
    # the quantile tests' calibration (about 10 s for budgets per node at 2^16): only when a
    # quantile is asked
    calibration = calibrate_quantile_tests(mech, spec.bins, qs, level) if qs else None
    return _Plan(spec=spec, noise=noise, budget_name=budget_name, budget=budget,
                 branching=tuple(branching), note=note, mechanism=mech, quantiles=qs,
                 consistency="l2" if consistency == "l2" else "l1" if consistency else None,
                 interval_level=level, out_of_range=out_of_range,
                 standard_errors=frozen_copy(se), calibration=calibration, form=form,
                 design=design)


def _rows_account(mech: Mechanism, b: npt.NDArray[np.float64]) -> dict[str, Any]:
    """Budgets per row (budgets per node): how many rows are noisy, exact, unmeasured, and
    the range of their budgets and noise scales (each row's own in ``mechanism``)."""
    s = mech.scales
    noisy = np.isfinite(s) & (s > 0)
    return {"noisy": int(noisy.sum()), "exact": int(np.sum(s == 0)),
            "unmeasured": int(np.isinf(s).sum()),
            "budget_min": float(b[noisy].min(initial=np.inf)) if noisy.any() else None,
            "budget_max": float(b[noisy].max(initial=0.0)) if noisy.any() else None,
            "scale_min": float(s[noisy].min(initial=np.inf)) if noisy.any() else None,
            "scale_max": float(s[noisy].max(initial=0.0)) if noisy.any() else None,
            "rule": "each row's own sensitivity over its own budget; the loss of the whole "
                    "scaled strategy recomputed exactly"}


def _privacy(mech: Mechanism, noise: str, budget_name: str, budget: float, spec: BinSpec,
             branching: tuple[int, ...], out_of_range: str, design_note: str,
             form: SecureForm | None = None) -> dict[str, Any]:
    counts = np.bincount(mech.released.levels)
    levels = []
    for lvl in sorted(mech.level_scales):
        levels.append({"level": lvl, "nodes": int(counts[lvl]),
                       "budget": mech.level_budgets.get(lvl, 0.0),
                       "sensitivity": mech.level_sensitivities[lvl],
                       "scale": (mech.level_scales[lvl] if math.isfinite(mech.level_scales[lvl])
                                 else None),
                       "variance": (mech.level_variances[lvl]
                                    if math.isfinite(mech.level_variances[lvl]) else None),
                       "released": ("exactly" if mech.level_scales[lvl] == 0 else
                                    "not measured" if math.isinf(mech.level_scales[lvl]) else
                                    "with noise")})
    padded = math.prod(branching)
    what = (f"the tree (branching {list(branching)}), its per-level budgets, sensitivities "
            "and noise scales" if form is None else
            f"the strategy ({mech.released.name}), its budgets, sensitivities and noise scales")
    public = [f"lower = {spec.lower!r}, upper = {spec.upper!r}, K = {spec.bins} bins and the "
              "bin rule", what, "the sampler and the neighbour model"]
    if padded != spec.bins:
        public.append(f"the {padded - spec.bins} padding bins (after the K real ones) are "
                      "empty: public zeros, no record can fall there")
    if mech.public_total:
        public.append("N, the number of records: RELEASED EXACTLY (swap neighbours)")
    meaning = ("add_remove: adding or removing one record (N is protected)"
               if mech.neighbours == "add_remove" else
               "swap: changing one record's value; N is NOT protected and is released exactly")
    achieved = mech.epsilon if noise == "laplace" else mech.rho
    extra: dict[str, Any] = {}
    if mech.row_budgets is not None:
        extra["rows"] = _rows_account(mech, mech.row_budgets)
    if form is not None and form.route == "scaled":
        extra["scaled_integer"] = form.account()
    return {**extra,
        "definition": "pure eps-DP" if noise == "laplace" else "rho-zCDP",
        "noise": noise, "discrete": True,
        "epsilon": budget if budget_name == "epsilon" else None,
        "rho": budget if budget_name == "rho" else None,
        "achieved": achieved,
        "neighbours": mech.neighbours, "neighbours_meaning": meaning,
        "total_public": mech.public_total,
        "levels": levels,
        "public": public,
        "out_of_range": out_of_range,
        "sampler": sampler_description(noise),
        "sampler_short": ("OpenDP discrete Laplace" if noise == "laplace"
                          else "OpenDP discrete Gaussian"),
        "design": design_note,
        "post_processing": "BLUE (Honaker / GLS with the discrete noise variances), "
                           "consistency projection, quantiles: no further privacy cost",
    }


def _description(mech: Mechanism, privacy: dict[str, Any], spec: BinSpec,
                 branching: tuple[int, ...],
                 form: SecureForm | None = None) -> str:
    lines = []
    if mech.public_total:
        lines.append("WARNING: swap neighbours -- the number of records N is released EXACTLY "
                     "and is not protected.")
    lines += [f"Private CDF of {spec.bins} equal-width bins over [{spec.lower!r}, "
              f"{spec.upper!r}) ({privacy['definition']}, {privacy['neighbours_meaning']}).",
              mech.describe().replace(
                  "only when the noise is drawn by a secure sampler (dptree_opt.release); "
                  "measure() and sample_noise() draw numpy SIMULATION noise, which carries no "
                  "privacy guarantee", "(noise drawn by the secure sampler below)"),
              f"sampler: {privacy['sampler']}",
              f"{'tree' if form is None else 'design'}: {privacy['design']}"]
    if "scaled_integer" in privacy:
        sc = privacy["scaled_integer"]
        lines.append(f"scaled integer strategy: s = {sc['scale']}, noise calibrated to the "
                     f"exact sensitivity {sc['exact_sensitivity']} ({sc['exact_sensitivity_is']})"
                     f"; rounding changes the exact CDF error by {sc['rounding_increase']:+.2e}")
    if math.prod(branching) != spec.bins:
        lines.append(f"padding: {math.prod(branching)} leaves for {spec.bins} bins; the extra "
                     "bins are empty (public zeros); the CDF covers the real bins only")
    lines.append("public: " + "; ".join(privacy["public"]))
    lines.append(f"out-of-range values: {privacy['out_of_range']} (how many were clipped is "
                 "not released)")
    return "\n".join(lines)


def _expected_error(plan: _Plan) -> dict[str, Any]:
    """The exact error of the raw CDF the release publishes (data-independent)."""
    var = np.asarray(plan.standard_errors[:plan.spec.bins], dtype=np.float64) ** 2
    out: dict[str, Any] = {
        "mean_prefix_mse": float(np.mean(var)), "max_prefix_mse": float(np.max(var)),
        "unit": "counts^2: E (C_hat_t - C_t)^2 of the raw BLUE cumulative counts, "
                "t over the K real bins, under the discrete noise actually drawn (exact)"}
    form, design = plan.form, plan.design
    if form is not None:     # the design as optimised, and what its secure form costs
        mean = getattr(design, "mean", None)
        out["design"] = {"family": getattr(design, "family", None),
                         "mean_error_per_query": float(mean) if isinstance(mean, float) else None,
                         "workload": getattr(design, "workload_name", None) or None,
                         "route": form.route, "scale": None if form.scale_bits is None
                         else 2 ** form.scale_bits,
                         "rounding_increase": form.rounding_increase}
    return out


# ------------------------------------------------------------------ the release
def _release_histogram(hist: npt.NDArray[np.int64], plan: _Plan,
                       timings: dict[str, float]) -> Release:
    """Measure the validated histogram with secure noise, then post-process (never raises
    after the noise is drawn)."""
    t0 = time.perf_counter()
    check_histogram_total(hist, plan.mechanism)
    full = np.zeros(plan.padded, dtype=np.int64)
    full[:plan.spec.bins] = hist  # the padding bins are empty (public zeros)
    mech = plan.mechanism
    privacy = _privacy(mech, plan.noise, plan.budget_name, plan.budget, plan.spec,
                       plan.branching, plan.out_of_range, plan.note, plan.form)
    cal = plan.calibration
    description = "\n".join(
        [_description(mech, privacy, plan.spec, plan.branching, plan.form)]
        + (["quantile intervals: none (no quantile asked)"] if cal is None else
           [f"quantile intervals: exact test inversion per bin, critical values from the "
            f"discrete noise ({cal.method})"] + [f"  {n}" for n in cal.notes]))
    t1 = time.perf_counter()
    y = secure_measure(mech, full)  # OpenDP's exact samplers; no rng on this path
    y.flags.writeable = False
    timings.update(prepare=t1 - t0, noise=time.perf_counter() - t1)
    # ---- the privacy budget is spent: from here on nothing may raise
    try:
        return _infer(plan, y, privacy, description, timings)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - never lose the DP output y
        return _incomplete(plan, y, privacy, description, timings, exc)


def _infer(plan: _Plan, y: npt.NDArray[np.float64], privacy: dict[str, Any], description: str,
           timings: dict[str, float]) -> Release:
    """Post-processing of the noisy answers y: BLUE, consistency, quantiles, intervals."""
    t2 = time.perf_counter()
    mech, spec, K = plan.mechanism, plan.spec, plan.spec.bins
    notes: list[str] = []
    est = cdf_from_measurements(mech, y, consistency=None, estimator="blue")
    raw = np.asarray(est.raw, dtype=np.float64)
    se = np.asarray(plan.standard_errors, dtype=np.float64)
    if mech.public_total and est.total is not None:
        total, public = int(est.total), True
    else:  # the better (public SE) unbiased estimate of N: C_K, or C_K' (padding is empty)
        pick = K - 1 if se[K - 1] <= se[-1] else plan.padded - 1
        total, public = max(0, int(np.rint(raw[pick]))), False
        if total == 0:
            notes.append(f"the estimated total N_hat = {float(raw[pick]):.4g} rounds to <= 0: "
                         "the consistent CDF is all zeros and the quantiles are undefined (NaN)")
    t3 = time.perf_counter()
    raw, se = raw[:K], se[:K]
    consistent: npt.NDArray[np.float64] | npt.NDArray[np.int64]
    if plan.consistency is None:
        consistent = raw.copy()
    else:
        consistent = project_cdf(raw, total=total, metric=plan.consistency, integer=True)
    cdf = PrivateCDF(raw=frozen_copy(raw), consistent=frozen_copy(consistent),
                     standard_errors=frozen_copy(se), total=total, total_public=public,
                     description=description, consistency=plan.consistency, estimator="blue",
                     integer=True, weighted=False, mechanism=mech)
    t4 = time.perf_counter()
    edges, qs = spec.bin_edges, plan.quantiles
    if plan.consistency is None and qs:
        notes.append("consistency=None: no point quantiles (they need a consistent CDF); the "
                     "intervals are still given")
    if plan.consistency is None or total <= 0:
        qv = np.full(len(qs), np.nan)
    else:
        qv = np.asarray(_quantiles(consistent, edges, qs, total), dtype=np.float64)
    if qs:
        qi = quantile_intervals(mech, raw, edges, qs, total_public=public, total=total,
                                level=plan.interval_level, estimates=qv,
                                calibration=plan.calibration)
        cal_notes = () if plan.calibration is None else plan.calibration.notes
        notes += [n for n in qi.notes if n not in cal_notes]  # in description
        bounds = (qi.lower, qi.upper, qi.noise_lower, qi.noise_upper)
    else:
        bounds = (np.zeros(0),) * 4
    timings.update(estimation=t3 - t2, consistency=t4 - t3,
                   quantiles=time.perf_counter() - t4)
    lower, upper, noise_lower, noise_upper = bounds
    return Release(spec=spec, cdf=cdf, quantile_levels=tuple(qs), quantiles=frozen_copy(qv),
                   quantile_lower=frozen_copy(lower), quantile_upper=frozen_copy(upper),
                   quantile_noise_lower=frozen_copy(noise_lower),
                   quantile_noise_upper=frozen_copy(noise_upper),
                   interval_level=plan.interval_level, mechanism=mech,
                   branching=plan.branching, measurements=y, privacy=privacy,
                   description=description, timings=timings,
                   expected_error=_expected_error(plan), notes=tuple(notes))


def _incomplete(plan: _Plan, y: npt.NDArray[np.float64], privacy: dict[str, Any],
                description: str, timings: dict[str, float], exc: BaseException) -> Release:
    """A Release that keeps the noisy measurements y (the DP output) when post-processing
    failed unexpectedly (a bug: please report it) or was interrupted (Ctrl-C); every
    estimate is NaN."""
    K, nq = plan.spec.bins, len(plan.quantiles)
    nan_k, nan_q = np.full(K, np.nan), np.full(nq, np.nan)
    se = np.asarray(plan.standard_errors[:K], dtype=np.float64)
    cdf = PrivateCDF(raw=frozen_copy(nan_k), consistent=frozen_copy(nan_k),
                     standard_errors=frozen_copy(se), total=None,
                     total_public=plan.mechanism.public_total, description=description,
                     consistency=plan.consistency, estimator="blue", integer=False,
                     weighted=False, mechanism=plan.mechanism)
    note = incomplete_note(exc, ": re-run the estimation from them "
                                "(dptree_opt.cdf_from_measurements)")
    return Release(spec=plan.spec, cdf=cdf, quantile_levels=tuple(plan.quantiles),
                   quantiles=frozen_copy(nan_q), quantile_lower=frozen_copy(nan_q),
                   quantile_upper=frozen_copy(nan_q), quantile_noise_lower=frozen_copy(nan_q),
                   quantile_noise_upper=frozen_copy(nan_q),
                   interval_level=plan.interval_level, mechanism=plan.mechanism,
                   branching=plan.branching, measurements=y, privacy=privacy,
                   description=description, timings=timings,
                   expected_error=_expected_error(plan), notes=(note,), complete=False)


def _check_one_axis(workload: str | None, names: object) -> None:
    """The grid-only options must not be given for a 1-D release."""
    if workload is not None or names is not None:
        raise ValueError("workload and names are options of a grid release (per-axis lower, "
                         "upper and bins); a 1-D release optimises for the CDF")


def release(data: object = None, *, lower: float | Sequence[float],
            upper: float | Sequence[float], bins: int | Sequence[int],
            epsilon: float | None = None, rho: float | None = None,
            counts: npt.ArrayLike | None = None, tree: str | Sequence[Any] = "optimal",
            neighbours: str = "add_remove", out_of_range: str = "error",
            quantiles: npt.ArrayLike = DEFAULT_QUANTILES, consistency: str | None = "l2",
            budgets: str = "optimal", interval_level: float = 0.95,
            workload: str | None = None, names: Sequence[str] | None = None,
            design: object = None, column: str | None = None,
            columns: Sequence[str] | None = None) -> Release | GridRelease:
    """Release a differentially private CDF and quantiles of real data (secure noise); with
    per-axis ``lower``, ``upper`` and ``bins`` (sequences), a d-D histogram of records
    (N, d) with box counts (:func:`~dptree_opt.data_release.grid.release_grid`, a
    :class:`GridRelease`; ``workload`` and ``names`` are its options).

    Parameters
    ----------
    data : 1-D array-like of numbers (one value per record), or None with ``counts``; or an
        engine's table (a DuckDB relation, a pandas / Dask / Spark / Polars DataFrame or
        Series: ``sources``, docs/data_engines.md), counted where it lives.
    column, columns : for an engine's table with several columns, the column to count
        (``columns``: one per axis for a grid). A ValueError for an in-memory array.
    lower, upper, bins : K = ``bins`` equal-width bins over [lower, upper) (public; choose
        them without looking at the data). Bin rule: ``binning`` module docstring.
    epsilon | rho : exactly one: eps for pure eps-DP (discrete Laplace noise) or rho for
        rho-zCDP (discrete Gaussian noise). With ``design``: optional (the design's own; a
        given one must equal it exactly).
    counts : instead of ``data``, the K bin counts computed elsewhere (non-negative integers).
    tree : "optimal" (``optimize.level_uniform`` for the BLUE; may pad K to K') or a list of
        branching factors (root first) whose product is >= K.
    neighbours : "add_remove" (default; N protected) or "swap" (N RELEASED EXACTLY).
    out_of_range : "error" (default; counts the offending rows) or "clip" (values below lower
        go to the first bin, values >= upper to the last).
    quantiles : probabilities in [0, 1] to report (may be empty: then the quantile tests'
        calibration, about 10 s for budgets per node at 2^16 bins, is skipped).
    consistency : "l2" (default), "l1" or None (raw only; then no point quantiles).
    budgets : "optimal" (default: the per-level budgets minimising the BLUE's exact CDF error,
        ``optimize``) or "equal".
    interval_level : coverage of the per-quantile intervals (default 0.95).
    design : instead of the tree search, a design over the K bins: a ``Design``
        (``optimize.best_mechanism``; ``releasable=True`` keeps the ones that run here), any
        optimiser's result with ``.mechanism()`` (e.g. ``optimize.optimal_node_budgets``:
        budgets per node) or a ``Mechanism``; ``tree`` and ``budgets`` left out,
        ``neighbours`` equal to the design's. Released in its secure form
        (``secure_noise.secure_form``; real-valued strategies as scaled integer strategies:
        ``docs/releasing_designs.md``); a design without one is refused before any noise.

    workload, names : grid releases only (``release_grid``).

    Returns
    -------
    Release or GridRelease
        A :class:`Release` (a :class:`GridRelease` for a grid).

    Notes
    -----
    Every argument and the data are validated BEFORE the secure noise is drawn (ValueError
    naming the input); after it nothing raises (module docstring). Privacy:
    ``Release.description``; module docstring.
    """
    if is_grid_bins(bins):
        gl, gu, gb = (cast(Sequence[float], v) for v in (lower, upper, bins))  # per axis
        return release_grid(data, lower=gl, upper=gu, bins=cast(Sequence[int], gb),
                            epsilon=epsilon, rho=rho, counts=counts, tree=tree,
                            neighbours=neighbours,
                            out_of_range=out_of_range, quantiles=quantiles,
                            consistency=consistency, budgets=budgets,
                            interval_level=interval_level,
                            workload="all_range" if workload is None else workload,
                            names=names, design=design, column=column, columns=columns)
    _check_one_axis(workload, names)
    lo, hi, k = cast(float, lower), cast(float, upper), cast(int, bins)  # 1-D: checked below
    timings: dict[str, float] = {}
    if (data is None) == (counts is None):
        raise ValueError("give exactly one of data (the values) or counts (the K bin counts)")
    engine = is_engine_input(data, column, columns)

    checked: npt.NDArray[np.int64] | None = None

    def counts_ready() -> None:  # bins is validated here; the counts before the (slow)
        nonlocal checked  # design (an engine's table is counted here, where it lives)
        if counts is not None:
            checked = _check_counts(counts, int(k))
            timings["read_and_bin"] = 0.0
        elif engine:
            t0 = time.perf_counter()
            checked = engine_counts(data, BinSpec(lo, hi, int(k)), column=column,
                                    columns=columns, out_of_range=out_of_range)
            timings["read_and_bin"] = time.perf_counter() - t0

    plan = _plan(lo, hi, k, epsilon, rho, tree, neighbours, out_of_range, quantiles,
                 consistency, budgets, interval_level, before_design=counts_ready,
                 design=design)
    if checked is not None:
        hist = checked   # checked or counted by counts_ready
    else:
        t0 = time.perf_counter()
        hist, _ = histogram_from_values(data, plan.spec, out_of_range=out_of_range, name="data")
        timings["read_and_bin"] = time.perf_counter() - t0
    return _release_histogram(hist, plan, timings)


def release_file(path: str | os.PathLike[str] | None = None, *, column: str | None = None,
                 counts_file: str | os.PathLike[str] | None = None,
                 lower: float | Sequence[float], upper: float | Sequence[float],
                 bins: int | Sequence[int], epsilon: float | None = None,
                 rho: float | None = None, tree: str | Sequence[Any] = "optimal",
                 neighbours: str = "add_remove", out_of_range: str = "error",
                 quantiles: npt.ArrayLike = DEFAULT_QUANTILES,
                 consistency: str | None = "l2", budgets: str = "optimal",
                 interval_level: float = 0.95, delimiter: str | None = None,
                 chunk_bytes: int | None = None, columns: Sequence[str] | None = None,
                 workload: str | None = None, design: object = None) -> Release | GridRelease:
    """``release`` of one column of a CSV/TSV/Parquet file read in bounded memory (blocks of
    ``chunk_bytes``), or of a counts file (``counts_file``: one count per bin, or
    ``bin,count`` lines). With ``columns`` (one per axis) and per-axis ``lower``, ``upper``,
    ``bins``: a grid release of those columns (``grid.release_grid_file``). ``path`` and
    ``counts_file`` are paths (str or os.PathLike; a bytes path or an open file object is a
    ValueError); a counts file is read, and a data file's header and column checked, before
    the tree design (or the design's secure form, ``design=``). Other parameters as for
    :func:`release`."""
    if columns is not None or is_grid_bins(bins):
        if column is not None or counts_file is not None:
            raise ValueError("a grid release reads columns=[...] of a data file (not column= "
                             "or a counts file)")
        if columns is None:
            raise ValueError("columns: name one column of the file per axis")
        if path is None:
            raise ValueError("give the data file to read the columns from")
        gl, gu, gb = (cast(Sequence[float], v) for v in (lower, upper, bins))  # per axis
        return release_grid_file(path, columns=columns, lower=gl, upper=gu,
                                 bins=cast(Sequence[int], gb),
                                 epsilon=epsilon, rho=rho, tree=tree, neighbours=neighbours,
                                 out_of_range=out_of_range, quantiles=quantiles,
                                 consistency=consistency, budgets=budgets,
                                 interval_level=interval_level,
                                 workload="all_range" if workload is None else workload,
                                 delimiter=delimiter, chunk_bytes=chunk_bytes, design=design)
    _check_one_axis(workload, None)
    lo, hi, k = cast(float, lower), cast(float, upper), cast(int, bins)  # 1-D: checked below
    timings: dict[str, float] = {}
    if (path is None) == (counts_file is None):
        raise ValueError("give exactly one of a data file (with column) or a counts file")
    if counts_file is None and (not isinstance(column, str) or not column):
        raise ValueError("column: name the column of the data file to release")
    if chunk_bytes is not None:
        chunk_bytes = check_chunk_bytes(chunk_bytes)

    kw: dict[str, Any] = {} if chunk_bytes is None else {"chunk_bytes": int(chunk_bytes)}
    if delimiter is not None:
        kw["delimiter"] = delimiter

    hist: npt.NDArray[np.int64] | None = None

    def inputs_ready() -> None:  # bins is validated here; before the (slow) design: the
        nonlocal hist  # counts file (O(K), read whole), or the data file and its header
        if counts_file is not None:
            t0 = time.perf_counter()
            hist = read_counts(counts_file, int(k))
            timings["read_and_bin"] = time.perf_counter() - t0
        else:
            check_columns(path, (column,), **kw)  # type: ignore[arg-type]  # given: checked

    plan = _plan(lo, hi, k, epsilon, rho, tree, neighbours, out_of_range, quantiles,
                 consistency, budgets, interval_level, before_design=inputs_ready,
                 design=design)
    if hist is None:  # a data file (a counts file was read by inputs_ready)
        t0 = time.perf_counter()
        hist, _ = histogram_from_file(path, column, plan.spec,  # type: ignore[arg-type]  # given
                                      out_of_range=out_of_range, **kw)
        timings["read_and_bin"] = time.perf_counter() - t0
    return _release_histogram(hist, plan, timings)
