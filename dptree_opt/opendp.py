"""OpenDP interop: a tree release as a real OpenDP ``Measurement`` (docs/opendp.md).

``make_private_cdf(input_domain, input_metric, mechanism)`` maps a vector of K bin counts
(``vector_domain(atom_domain(T=<integer>))`` with ``l1_distance`` or ``l2_distance``) to the
BLUE cumulative counts of ``mechanism``, built from OpenDP's own parts:

* per noise group g (a level of the strategy, the rows sharing one noise scale b_g): the
  linear map x -> A_g x as ``make_user_transformation`` with its EXACT stability map (the
  group's integer sensitivity D_g, an l1 norm or a squared l2 norm, times the input distance;
  docs/math.md section 0), chained with OpenDP's ``make_laplace`` (discrete Laplace, eps-DP)
  or ``make_gaussian`` (discrete Gaussian, rho-zCDP) on integer answers, the very samplers
  and checks of a release (``data_release.secure_noise.opendp_measurement``);
* the groups composed with ``make_composition`` (basic composition: the privacy map is the
  sum of the groups' maps, which for a tree or any design with budgets per level is the
  mechanism's own epsilon or rho: every bin meets every level at its worst);
* the BLUE and the consistency projection as a post-processor (``queries.estimate_cdf``,
  ``consistency.project_cdf``: the release's own estimation steps), run once on zero
  answers when the measurement is built, so it cannot fail after the noise is drawn.

Budgets per node (rows of many scales in each level) are the exception: OpenDP's noise
measurements take one scale per vector and basic composition would charge the sum of every
scale group's worst bin, so they are one ``make_user_measurement`` whose function is the
release's secure path (OpenDP's samplers, one per scale) and whose privacy map is the joint
bound of the release (the sensitivity of diag(1 / scale) A, rounded up).

The design is run in its secure form (``secure_noise.secure_form``, as ``release(design=)``):
integer strategies as they are, real-valued ones as the scaled integer strategy round(2^16 A)
calibrated to its exact sensitivity. Building one needs OpenDP's ``contrib`` and
``honest-but-curious`` features (user transformations and post-processors); both are enabled
process-wide by this module. Supported: OpenDP >= 0.12 (``make_basic_composition`` before
0.14), ``register`` (the Context API) from 0.13.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Literal, cast

import numpy as np

from .consistency import project_cdf
from .data_release.checks import check_mechanism_noise
from .data_release.secure_noise import (check_private_total, design_mechanism, exact_answers,
                                        l2_upper, largest_answer, opendp_measurement,
                                        opendp_prelude, secure_form, secure_measure)
from .mechanism import Mechanism
from .pipeline import CONSISTENCY
from .queries import estimate_cdf
from .privacy import EXACT_LIMIT
from .strategies import KroneckerStrategy, QuadtreeStrategy
from .strategies.scaled import IntegerNested, IntegerStrategy, IntegerToeplitz
from .validation import check_choice

if TYPE_CHECKING:   # OpenDP ships its types (py.typed); imported at run time only when used
    from opendp.mod import Domain, Measurement, Metric, Transformation

Consistency = Literal["l2", "l1"] | None
Estimate = Callable[[list], np.ndarray]
_CHOICES = cast("tuple[Consistency, ...]", CONSISTENCY)

__all__ = ["make_private_cdf", "postprocessor", "register", "opendp_version", "MIN_OPENDP",
           "MIN_OPENDP_REGISTER"]

MIN_OPENDP = (0, 12)            # user transformations, honest-but-curious post-processors
MIN_OPENDP_REGISTER = (0, 13)   # dp.register (Context API plugins)
_INT_ATOMS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "usize")
_REGISTERED: set[str] = set()


def opendp_version() -> tuple[int, ...]:
    """The installed OpenDP version as a tuple of ints (e.g. (0, 16, 0)); ValueError below
    ``MIN_OPENDP`` or when OpenDP is not installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        text = version("opendp")
    except PackageNotFoundError:
        raise ValueError("dptree_opt.opendp needs OpenDP: pip install 'opendp>=0.12'") from None
    parts = tuple(int(p) for p in text.split(".")[:3] if p.isdigit())
    if parts[:2] < MIN_OPENDP:
        raise ValueError(f"dptree_opt.opendp needs OpenDP >= 0.12 (user transformations and "
                         f"honest-but-curious post-processors); installed: {text}")
    return parts


def _prelude() -> Any:
    """OpenDP's prelude with the features a user transformation needs (checked version)."""
    opendp_version()
    odp = opendp_prelude()
    odp.enable_features("contrib", "honest-but-curious")
    return odp


def _check_space(input_domain: Domain, input_metric: Metric, n_bins: int) -> str:
    """The input metric's kind ("l1" | "l2") after checking the domain is a vector of integer
    counts (of size K when sized) and the metric an l1 or l2 distance (ValueError)."""
    dtype: Any = getattr(input_domain, "type", None)
    if getattr(dtype, "origin", None) != "VectorDomain" or \
            str(dtype.args[0]) not in {f"AtomDomain<{t}>" for t in _INT_ATOMS}:
        raise ValueError(f"input_domain must be a vector of integer bin counts "
                         f"(dp.vector_domain(dp.atom_domain(T='i64'))), got {input_domain!r}")
    size = getattr(input_domain, "size", None)
    if size is not None and int(size) != n_bins:
        raise ValueError(f"input_domain: its vectors have size {size}, the mechanism has "
                         f"{n_bins} bins")
    kind = {"L1Distance": "l1", "L2Distance": "l2"}.get(
        str(getattr(getattr(input_metric, "type", None), "origin", None)))
    if kind is None:
        raise ValueError(f"input_metric must be dp.l1_distance or dp.l2_distance on the bin "
                         f"counts (one record added or removed moves one count by 1), got "
                         f"{input_metric!r}")
    return kind


def _check_mechanism(mechanism: Any) -> Mechanism:
    """The source Mechanism of ``mechanism`` (anything ``release(design=)`` accepts), with
    add/remove neighbours and N private (ValueError otherwise)."""
    try:
        source = design_mechanism(mechanism)
    except ValueError as exc:
        raise ValueError(str(exc).replace("design", "mechanism", 1)) from None
    if source.neighbours != "add_remove":
        raise ValueError("mechanism: it is calibrated for swap neighbours (one record's value "
                         "changed, N public); OpenDP's metrics on count vectors (l1 / l2 "
                         "distance) measure added or removed records, under which a swap is a "
                         "distance of 2 and the swap calibration does not hold: make the "
                         "mechanism with neighbours='add_remove'")
    try:
        check_private_total(source)
    except ValueError as exc:
        raise ValueError(str(exc).replace("design", "mechanism", 1)) from None
    if isinstance(source.released, (KroneckerStrategy, QuadtreeStrategy)):
        raise ValueError("mechanism: a grid design releases boxes, not a 1-D CDF; use "
                         "dptree_opt.release with per-axis bins")
    return source


def _exact_sensitivity(mech: Mechanism, level: int, rows: np.ndarray) -> int:
    """The exact integer sensitivity of one noisy level under add/remove neighbours: D1 (an
    integer) for Laplace noise, D2^2 (an integer) for Gaussian noise; scaled integer
    strategies from their integer matrix, other (integer) strategies from the level's
    structured sensitivity, checked to be integral."""
    released, p = mech.released, 1 if mech.noise == "laplace" else 2
    if isinstance(released, IntegerNested):     # one level per depth, no total rows
        return released.exact_level_sensitivity(level, "add_remove", p)
    if isinstance(released, (IntegerStrategy, IntegerToeplitz)):
        return released.exact_sensitivity("add_remove", p) if level > 0 else int(rows.size)
    d = float(mech.level_sensitivities[level])
    exact = round(d) if p == 1 else round(d * d)
    if abs((d if p == 1 else d * d) - exact) > 1e-9 * max(exact, 1):
        raise ValueError("mechanism: a level's sensitivity is not an integer (the strategy "
                         "is not integral); use its secure form")
    return int(exact)


def _times_up(x: float, k: int) -> float:
    """The least double >= x * k (x a double, k an int), checked in rational arithmetic."""
    v = x * k
    while Fraction(v) < Fraction(x) * k:
        v = math.nextafter(v, math.inf)
    return v


def _input_changes(d_in: float, kind: str) -> int:
    """An upper bound on ||d||_1 for integer count vectors d at input distance ``d_in``:
    d_in itself (l1), floor(d_in^2) for l2 (|d_i| <= d_i^2 for integers)."""
    r = Fraction(d_in)
    if r < 0:
        raise ValueError("d_in must be >= 0")
    return math.floor(r if kind == "l1" else r * r)


def _groups(mech: Mechanism) -> list[tuple[np.ndarray, int, dict]]:
    """[(rows, exact sensitivity, opendp_measurement arguments)] for every noisy level, in
    level order (budgets per level; budgets per row are measured jointly, ``_joint``)."""
    levels = mech.released.levels
    out = []
    for lvl, sc in sorted(mech.level_scales.items()):
        if sc == 0 or math.isinf(sc):
            continue   # exact (data-independent) or unmeasured rows: no noise, no loss
        rows = np.flatnonzero(levels == lvl)
        exact = _exact_sensitivity(mech, lvl, rows)
        kw = dict(noise=mech.noise, scale=float(sc),
                  sensitivity=float(mech.level_sensitivities[lvl]),
                  budget=float(mech.level_budgets[lvl]))
        if isinstance(mech.released, (IntegerStrategy, IntegerToeplitz, IntegerNested)):
            kw["exact"] = exact   # strict rational check, as a release of a scaled design
        out.append((rows, exact, kw))
    return out


def _joint_loss(mech: Mechanism) -> float:
    """An upper bound (a double) on the loss of one added or removed record for budgets per
    row: the sensitivity of diag(1 / scale) A (eps), or half its square (rho), the joint
    bound of a release (docs/math.md section 0; integer answers and shifts, [CKS20]), with
    every weight rounded up and a relative margin of 2^-40 for the rounding of its sums."""
    scales = mech.scales
    noisy = np.isfinite(scales) & (scales > 0)
    w = np.where(noisy, np.nextafter(1.0 / np.where(noisy, scales, 1.0), np.inf), 0.0)
    p = 1 if mech.noise == "laplace" else 2
    d = float(mech.released.sensitivity(w, "add_remove", p))
    loss = d if p == 1 else d * d / 2.0
    return math.nextafter(loss * (1.0 + 2.0 ** -40), math.inf)


def _joint(odp: Any, space: tuple[Domain, Metric], mech: Mechanism, kind: str,
           estimate: Estimate) -> Measurement:
    """Budgets per row: one ``make_user_measurement`` whose function is the release's
    secure path (``secure_measure``: one OpenDP Laplace / Gaussian measurement per distinct
    scale, every map checked before the first draw) and whose privacy map is the joint
    bound (``_joint_loss``) times the input changes (Laplace) or their square (rho)."""
    K, cap, unit = mech.n_bins, _count_cap(mech), _joint_loss(mech)

    def run(x: Any) -> np.ndarray:
        h = np.asarray(x, dtype=np.int64).reshape(-1)
        if h.size != K:  # the length is public under l1 / l2 distances
            raise ValueError(f"the input must hold {K} bin counts, got {h.size}")
        return estimate([secure_measure(mech, np.clip(h, 0, cap))])

    def privacy_map(d_in: float) -> float:
        k = _input_changes(d_in, kind)
        return _times_up(unit, k if mech.noise == "laplace" else k * k)

    measure = (odp.max_divergence() if mech.noise == "laplace"
               else odp.zero_concentrated_divergence())
    return odp.m.make_user_measurement(*space, measure, run, privacy_map)


def _count_cap(mech: Mechanism) -> int:
    """Each count is clamped to [0, cap]: the answers of every row are then exact integers
    (max|A_ij| x K x cap < 2^53), and clamping is 1-Lipschitz (the stability is unchanged)."""
    return int((EXACT_LIMIT - 1) // (largest_answer(mech.released, 1) * mech.n_bins))


def _group_transformation(odp: Any, space: tuple[Domain, Metric], mech: Mechanism,
                          rows: np.ndarray, exact: int, kind: str) -> Transformation:
    """x -> (A x)[rows] (int64) as an OpenDP transformation with the exact stability map
    (d_in -> D1 x changes for l1 output; the least double >= sqrt(D2^2) x changes for l2)."""
    K, cap = mech.n_bins, _count_cap(mech)
    vec = odp.vector_domain(odp.atom_domain(T="i64"))

    def answers(x: Any) -> np.ndarray:
        h = np.asarray(x, dtype=np.int64).reshape(-1)
        if h.size != K:  # the length is public under l1 / l2 distances
            raise ValueError(f"the input must hold {K} bin counts, got {h.size}")
        return exact_answers(mech, np.clip(h, 0, cap))[rows]

    def l1_map(d_in: float) -> int:
        return int(exact) * _input_changes(d_in, kind)

    def l2_map(d_in: float) -> float:
        return _times_up(d2, _input_changes(d_in, kind))

    d2 = l2_upper(exact) if mech.noise == "gaussian" else 0.0
    if mech.noise == "laplace":
        return odp.t.make_user_transformation(*space, vec, odp.l1_distance(T="i64"), answers,
                                              l1_map)
    return odp.t.make_user_transformation(*space, vec, odp.l2_distance(T="f64"), answers,
                                          l2_map)


def _compose(odp: Any, parts: list) -> Measurement:
    """OpenDP's basic composition (``make_composition``; ``make_basic_composition`` before
    0.14, where it has that name)."""
    make = getattr(odp.c, "make_composition", None) or getattr(odp.c, "make_basic_composition")
    return make(parts)


def _estimator(mech: Mechanism, row_sets: list, consistency: Consistency) -> Estimate:
    """The post-processor: the groups' noisy answers (in composition order) -> y (rows,)
    -> the BLUE cumulative counts (``queries.estimate_cdf``) -> their consistent integer
    projection (``consistency.project_cdf`` with N_hat = max(0, round(raw total)), as a
    release does). No standard errors are computed: nothing in it depends on the budget's
    size, and ``make_private_cdf`` runs it once on zero answers before any noise."""
    n_rows = mech.released.n_rows
    zero = np.flatnonzero(mech.scales == 0)   # sensitivity 0 under add/remove: zero rows
    unmeasured = np.flatnonzero(np.isinf(mech.scales))

    def estimate(noisy: list) -> np.ndarray:
        y = np.zeros(n_rows)
        y[unmeasured] = np.nan
        y[zero] = 0.0
        for rows, part in zip(row_sets, noisy):
            y[rows] = np.asarray(part, dtype=np.float64)
        out = np.asarray(estimate_cdf(mech, y, "blue"), dtype=np.float64)
        if consistency is not None:   # the release's rule for N under add/remove
            total = max(0, int(np.rint(out[-1]))) if np.isfinite(out[-1]) else 0
            out = np.asarray(project_cdf(out, total=total, metric=consistency, integer=True),
                             dtype=np.float64)
        out.flags.writeable = False
        return out
    return estimate


def postprocessor(mechanism: Any, consistency: Consistency = "l2"
                  ) -> tuple[list[np.ndarray], Estimate]:
    """(rows, estimate) of the measurement ``make_private_cdf`` builds for ``mechanism``:
    ``rows`` the released rows of each noise group in composition order (the group outputs
    are the noisy answers of these rows), ``estimate`` the post-processing function it
    composes (list of the groups' noisy answers -> cumulative counts (K,)). For checking a
    release, or re-running the estimation on recorded answers (no privacy cost)."""
    consistency = check_choice(consistency, "consistency", _CHOICES)
    mech = secure_form(_check_mechanism(mechanism)).mechanism
    rows = ([np.arange(mech.released.n_rows)] if mech.row_budgets is not None
            else [r for r, _, _ in _groups(mech)])
    return rows, _estimator(mech, rows, consistency)


def make_private_cdf(input_domain: Domain, input_metric: Metric, mechanism: Any,
                     consistency: Consistency = "l2") -> Measurement:
    """An OpenDP Measurement from K bin counts to the private cumulative counts (K,) of
    ``mechanism`` (docs/opendp.md).

    Parameters
    ----------
    input_domain : Domain
        ``dp.vector_domain(dp.atom_domain(T=<integer type>))`` (size K if sized).
    input_metric : Metric
        ``dp.l1_distance(T=...)`` or ``dp.l2_distance(T=...)`` on the counts: d_in = 1 is
        one record added or removed. Counts are clamped to [0, cap] (cap: answers stay exact
        integers, >= 2^53 / (K max ``|A_ij|``)).
    mechanism : Mechanism, Design, TreeDesign or NodeBudgets
        A ``Mechanism`` with add/remove neighbours and N private, a ``Design``, a
        ``TreeDesign``, ``NodeBudgets`` or anything 1-D ``release(design=)`` takes, run in its
        secure form; swap neighbours, a public N and grid designs are refused (ValueError
        with the reason).
    consistency : "l2" (default), "l1" or None
        "l2" / "l1": the release's consistent integer CDF ending at
        N_hat = max(0, round(raw total)); None: the BLUE cumulative counts themselves.

    Returns
    -------
    Measurement
        A read-only float64 array of the K cumulative counts.

    Notes
    -----
    The measure is ``max_divergence`` (Laplace, epsilon) or ``zero_concentrated_divergence``
    (Gaussian, rho); at d_in = 1 its map is the mechanism's budget (up to OpenDP's outward
    rounding of each group's loss and their sum: a few ulps). Budgets per row (per node)
    are one ``make_user_measurement`` around the release's secure path with the joint map
    (``_joint``): the basic composition of one measurement per scale would charge the sum
    of every group's worst bin (4x eps for ``optimal_node_budgets([2] * 6)``)."""
    consistency = check_choice(consistency, "consistency", _CHOICES)
    source = _check_mechanism(mechanism)
    kind = _check_space(input_domain, input_metric, source.n_bins)
    odp = _prelude()
    mech = secure_form(source).mechanism        # discrete: its variances are the noise's
    check_mechanism_noise(mech, "epsilon" if mech.noise == "laplace" else "rho",
                          mech.requested_budget)     # as a release: no identically-0 noise
    space = (input_domain, input_metric)
    if mech.row_budgets is not None:
        rows = [np.arange(mech.released.n_rows)]
        estimate = _estimator(mech, rows, consistency)
        estimate([np.zeros(rows[0].size)])   # the post-processing runs: checked before noise
        return _joint(odp, space, mech, kind, estimate)
    groups = _groups(mech)
    if not groups:
        raise ValueError("mechanism: no row is measured with noise")
    estimate = _estimator(mech, [rows for rows, _, _ in groups], consistency)
    estimate([np.zeros(rows.size) for rows, _, _ in groups])   # checked before any noise
    parts = [_group_transformation(odp, space, mech, rows, exact, kind)
             >> opendp_measurement(**kw) for rows, exact, kw in groups]
    return _compose(odp, parts) >> estimate


def register(name: str = "private_cdf") -> None:
    """Register ``make_private_cdf`` in OpenDP's Context API as ``name``, so that
    ``context.query().<name>(mechanism)`` builds it on the context's count vector.
    Idempotent for this module; ValueError when ``name`` is taken by another constructor
    or OpenDP is older than 0.13 (no ``dp.register``)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a Python identifier, got {name!r}")
    odp = _prelude()
    reg = getattr(odp, "register", None)
    if reg is None:   # added in MIN_OPENDP_REGISTER
        raise ValueError(f"register needs OpenDP >= 0.13 (dp.register, the Context API's "
                         f"plugins); installed: {'.'.join(map(str, opendp_version()))}. "
                         "make_private_cdf works without it")
    if name in _REGISTERED:
        return
    try:
        reg(make_private_cdf, name=name)
    except ValueError as exc:
        raise ValueError(f"name: {exc}") from None
    _REGISTERED.add(name)
