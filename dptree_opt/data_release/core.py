"""``release``: raw data -> bins -> tree -> secure noise -> BLUE -> consistent CDF, quantiles.

Pipeline (DESIGN.md: select a strategy, measure, infer):

1. **Bins** (public): K equal-width bins over [lower, upper), rule in ``binning``; data are
   counted block by block (``np.bincount``), never held whole when read from a file.
2. **Tree** (public): ``tree="optimal"`` asks ``optimize.level_uniform(K, ...,
   estimator="blue")`` for the level-uniform tree whose BLUE has the least exact CDF error
   (its per-level budgets included); a list of branching factors is used as given (equal
   budgets, or ``budgets="optimal"``). If prod k_l = K' > K the histogram is padded with
   K' - K empty bins. They are *public zeros*: no record can fall there, so the sensitivities
   (and the guarantee) are those of the real bins, and the released CDF covers the K real bins
   only (see "Padding" below).
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
6. **Quantiles**: ``queries.quantiles`` of the consistent CDF (linear inside bins); intervals
   by inverting the pointwise normal band raw +- z se (``_interval``): an edge-aligned one
   that covers the true quantile of the raw data (bin resolution included), and a noise-only
   one around the interpolated estimate. Normal critical values: approximate for Laplace
   noise (a sum of many discrete Laplace terms is close to normal; the simulated critical
   values of ``PrivateCDF.band`` would need simulation noise, which a release never draws).

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
from numbers import Integral, Real

import numpy as np

from .. import optimize, strategies
from ..consistency import project_cdf
from ..mechanism import Mechanism, check_histogram
from ..pipeline import CONSISTENCY, PrivateCDF, cdf_from_measurements
from ..privacy import check_budget
from ..queries import confidence_band, quantiles as _quantiles
from ..strategies.base import check_neighbours
from .binning import BinSpec, check_out_of_range
from .io import histogram_from_file, histogram_from_values, read_counts
from .result import Release
from .secure_noise import sampler_description, secure_measure

__all__ = ["release", "release_file", "DEFAULT_QUANTILES", "MAX_LEAVES"]

DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
MAX_LEAVES = 1 << 26  # a tree with more leaves than this is refused (memory)


# ------------------------------------------------------------------ argument checks
def _budget(epsilon, rho) -> tuple[str, str, float]:
    """(noise, budget name, value) from exactly one of epsilon / rho."""
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (pure eps-DP, discrete Laplace noise) or "
                         "rho (rho-zCDP, discrete Gaussian noise)"
                         + ("; got both" if epsilon is not None else "; got neither"))
    if epsilon is not None:
        return "laplace", "epsilon", check_budget(epsilon, "epsilon")
    return "gaussian", "rho", check_budget(rho, "rho")


def _check_quantiles(qs) -> tuple:
    try:
        q = np.atleast_1d(np.asarray(qs, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"quantiles must be probabilities in [0, 1], got {qs!r}") from None
    if q.ndim != 1 or not np.all(np.isfinite(q)) or np.any((q < 0) | (q > 1)):
        raise ValueError(f"quantiles must be probabilities in [0, 1], got {qs!r}")
    return tuple(float(v) for v in q)


def _check_level(level) -> float:
    if (isinstance(level, (bool, np.bool_)) or not isinstance(level, Real)
            or not 0 < float(level) < 1):
        raise ValueError(f"interval_level must be in (0, 1), got {level!r}")
    return float(level)


def _check_tree(tree, bins: int) -> tuple[int, ...] | None:
    """None for "optimal", else the validated branching factors (prod >= bins)."""
    if isinstance(tree, str):
        if tree != "optimal":
            raise ValueError(f"tree must be 'optimal' or a list of branching factors, got "
                             f"{tree!r}")
        return None
    try:
        ks = list(tree)
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


def _check_budgets(budgets: str) -> str:
    if budgets not in ("equal", "optimal"):
        raise ValueError(f"budgets must be 'equal' or 'optimal', got {budgets!r}")
    return budgets


def _check_counts(counts, bins: int) -> np.ndarray:
    """Validated precomputed histogram (int64 (K,)); errors name ``counts``."""
    try:
        return check_histogram(counts, bins)
    except ValueError as exc:
        raise ValueError(f"counts: {exc} (need {bins} non-negative integer counts, one per "
                         "bin)") from None


# ------------------------------------------------------------------ design
@functools.lru_cache(maxsize=32)
def _design(bins: int, branching, noise: str, budget_name: str, budget: float,
            neighbours: str, budgets: str):
    """(branching, level budgets or None, note) of the tree to release with. Cached: the
    design depends on public parameters only (the search takes seconds for K = 2^16)."""
    kw = {budget_name: budget}
    if branching is None:
        if bins == 1:
            return (), None, "one bin: the tree is the root alone"
        d = optimize.level_uniform(bins, estimator="blue", noise=noise, neighbours=neighbours,
                                   budgets=budgets, **kw)
        note = (f"optimize.level_uniform(estimator='blue', budgets='{budgets}'): {d.method}")
        return tuple(int(k) for k in d.branching), tuple(d.budgets), note
    if budgets == "optimal" and branching:
        d = optimize.optimal_blue_budgets(branching, budget, noise=noise, neighbours=neighbours,
                                          n_queries=bins)
        return branching, tuple(d.budgets), "given branching, optimal BLUE budgets"
    return branching, None, "given branching, equal budgets"


def _interval(raw, se, total, public, qs, edges, level):
    """Per-quantile intervals from the pointwise band raw +- z se (z for ``level``).

    Test inversion: x is kept when the band at x contains the target q N (under add/remove
    q N uses N's own band: the lower end targets q L_N, the upper end q U_N). With the first
    crossings i = first bin whose upper band reaches the target, j = first bin whose lower
    band does:

    * (lower, upper) = (e_i, e_{j+1}): edge-aligned, it contains the true quantile of the
      raw data whenever the band covers the true cumulative counts at those edges (no
      assumption on where data sit inside a bin);
    * (noise_lower, noise_upper): the same crossings with linear interpolation inside bins
      (the quantile rule): the noise-only uncertainty of the reported estimate.

    Returns four (len(qs),) arrays. O(K + len(qs) log K)."""
    q = np.asarray(qs, dtype=float)
    if q.size == 0:
        return (np.zeros(0),) * 4
    lo, up = confidence_band(raw, se, level, "pointwise")
    up_first = np.maximum.accumulate(np.maximum(up, 0.0))  # first t with up_t >= target
    lo_first = np.maximum.accumulate(np.maximum(lo, 0.0))
    n_lo, n_up = (total, total) if public else (max(lo[-1], 0.0), max(up[-1], 0.0))
    k = raw.size
    i = np.searchsorted(up_first, q * n_lo, side="left")
    j = np.searchsorted(lo_first, q * n_up, side="left")
    lower = edges[np.minimum(i, k - 1)]
    upper = np.where(j < k, edges[np.minimum(j, k - 1) + 1], edges[-1])
    noise_lower = (_quantiles(up_first, edges, q, n_lo) if up_first[-1] > 0
                   else np.full(q.size, edges[0]))
    noise_upper = (_quantiles(lo_first, edges, q, n_up) if lo_first[-1] > 0
                   else np.full(q.size, edges[-1]))
    return lower, upper, noise_lower, noise_upper


def _privacy(mech: Mechanism, noise: str, budget_name: str, budget: float, spec: BinSpec,
             branching, out_of_range: str, design_note: str) -> dict:
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
    public = [f"lower = {spec.lower!r}, upper = {spec.upper!r}, K = {spec.bins} bins and the "
              "bin rule",
              f"the tree (branching {list(branching)}), its per-level budgets, sensitivities "
              "and noise scales",
              "the sampler and the neighbour model"]
    if padded != spec.bins:
        public.append(f"the {padded - spec.bins} padding bins (after the K real ones) are "
                      "empty: public zeros, no record can fall there")
    if mech.public_total:
        public.append("N, the number of records: RELEASED EXACTLY (swap neighbours)")
    meaning = ("add_remove: adding or removing one record (N is protected)"
               if mech.neighbours == "add_remove" else
               "swap: changing one record's value; N is NOT protected and is released exactly")
    achieved = mech.epsilon if noise == "laplace" else mech.rho
    return {
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


def _description(mech: Mechanism, privacy: dict, spec: BinSpec, branching) -> str:
    lines = []
    if mech.public_total:
        lines.append("WARNING: swap neighbours -- the number of records N is released EXACTLY "
                     "and is not protected.")
    lines += [f"Private CDF of {spec.bins} equal-width bins over [{spec.lower!r}, "
              f"{spec.upper!r}) ({privacy['definition']}, {privacy['neighbours_meaning']}).",
              mech.describe(), f"sampler: {privacy['sampler']}",
              f"tree: {privacy['design']}"]
    if math.prod(branching) != spec.bins:
        lines.append(f"padding: {math.prod(branching)} leaves for {spec.bins} bins; the extra "
                     "bins are empty (public zeros); the CDF covers the real bins only")
    lines.append("public: " + "; ".join(privacy["public"]))
    lines.append(f"out-of-range values: {privacy['out_of_range']} (how many were clipped is "
                 "not released)")
    return "\n".join(lines)


# ------------------------------------------------------------------ the release
def _release_histogram(hist: np.ndarray, spec: BinSpec, *, epsilon, rho, tree, neighbours,
                       quantiles, consistency, budgets, interval_level, out_of_range,
                       timings: dict) -> Release:
    noise, budget_name, budget = _budget(epsilon, rho)
    t0 = time.perf_counter()
    branching = _check_tree(tree, spec.bins)
    branching, level_budgets, note = _design(spec.bins, branching, noise, budget_name, budget,
                                             neighbours, budgets)
    padded = math.prod(branching)
    mech = Mechanism(strategies.tree(padded, list(branching)), **{budget_name: budget},
                     noise=noise, neighbours=neighbours,
                     level_budgets=None if level_budgets is None else list(level_budgets),
                     discrete=True)
    full = np.zeros(padded, dtype=np.int64)
    full[:spec.bins] = hist  # the padding bins are empty (public zeros)
    t1 = time.perf_counter()
    y = secure_measure(mech, full)  # OpenDP's exact samplers; no rng on this path
    y.flags.writeable = False
    t2 = time.perf_counter()
    est = cdf_from_measurements(mech, y, consistency=None, estimator="blue")
    raw, se = np.asarray(est.raw), np.asarray(est.standard_errors)
    K = spec.bins
    if mech.public_total:
        total, public = int(est.total), True
    else:  # the better (public SE) unbiased estimate of N: C_K, or C_K' (padding is empty)
        pick = K - 1 if se[K - 1] <= se[-1] else padded - 1
        total, public = max(0, int(np.rint(raw[pick]))), False
    t3 = time.perf_counter()
    raw, se = raw[:K], se[:K]
    if consistency is None:
        consistent = raw.copy()
    else:
        consistent = project_cdf(raw, total=total, metric=consistency, integer=True)
    cdf = PrivateCDF(raw=_readonly(raw), consistent=_readonly(consistent),
                     standard_errors=_readonly(se), total=total, total_public=public,
                     description=mech.describe(), consistency=consistency, estimator="blue",
                     integer=True, weighted=False, mechanism=mech)
    t4 = time.perf_counter()
    edges = spec.bin_edges
    qs = quantiles
    if consistency is None:
        qv = np.full(len(qs), np.nan)  # quantiles need a consistent CDF
        ql = qu = nl = nu = qv
    else:
        qv = _quantiles(consistent, edges, qs, total)
        ql, qu, nl, nu = _interval(raw, se, total, public, qs, edges, interval_level)
    t5 = time.perf_counter()
    timings.update(design=t1 - t0, noise=t2 - t1, estimation=t3 - t2, consistency=t4 - t3,
                   quantiles=t5 - t4)
    privacy = _privacy(mech, noise, budget_name, budget, spec, branching, out_of_range, note)
    return Release(spec=spec, cdf=cdf, quantile_levels=tuple(qs), quantiles=_readonly(qv),
                   quantile_lower=_readonly(ql), quantile_upper=_readonly(qu),
                   quantile_noise_lower=_readonly(nl), quantile_noise_upper=_readonly(nu),
                   interval_level=interval_level, mechanism=mech, branching=tuple(branching),
                   measurements=y, privacy=privacy,
                   description=_description(mech, privacy, spec, branching), timings=timings)


def _readonly(a) -> np.ndarray:
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


def _common(lower, upper, bins, epsilon, rho, tree, neighbours, out_of_range, quantiles,
            consistency, budgets, interval_level):
    """Validate every argument before any data is read (cheap failures first)."""
    spec = BinSpec(lower, upper, bins)
    _budget(epsilon, rho)
    check_neighbours(neighbours)
    check_out_of_range(out_of_range)
    if consistency not in CONSISTENCY:
        raise ValueError(f"consistency must be one of {CONSISTENCY}, got {consistency!r}")
    _check_tree(tree, spec.bins)
    _check_budgets(budgets)
    return spec, _check_quantiles(quantiles), _check_level(interval_level)


def release(data=None, *, lower, upper, bins, epsilon=None, rho=None, counts=None,
            tree="optimal", neighbours: str = "add_remove", out_of_range: str = "error",
            quantiles=DEFAULT_QUANTILES, consistency: str | None = "l2",
            budgets: str = "equal", interval_level: float = 0.95) -> Release:
    """Release a differentially private CDF and quantiles of real data (secure noise).

    Parameters
    ----------
    data : 1-D array-like of numbers (one value per record), or None with ``counts``.
    lower, upper, bins : K = ``bins`` equal-width bins over [lower, upper) (public; choose
        them without looking at the data). Bin rule: ``binning`` module docstring.
    epsilon | rho : exactly one: eps for pure eps-DP (discrete Laplace noise) or rho for
        rho-zCDP (discrete Gaussian noise).
    counts : instead of ``data``, the K bin counts computed elsewhere (non-negative integers).
    tree : "optimal" (``optimize.level_uniform`` for the BLUE; may pad K to K') or a list of
        branching factors (root first) whose product is >= K.
    neighbours : "add_remove" (default; N protected) or "swap" (N RELEASED EXACTLY).
    out_of_range : "error" (default; counts the offending rows) or "clip" (values below lower
        go to the first bin, values >= upper to the last).
    quantiles : probabilities in [0, 1] to report.
    consistency : "l2" (default), "l1" or None (raw only; then no quantiles).
    budgets : "equal" or "optimal" per-level budgets (for the BLUE).
    interval_level : coverage of the per-quantile intervals (default 0.95).

    Returns a :class:`Release`. Raises ValueError naming the input for every bad input
    (module docs of ``binning``/``io``). Privacy: ``Release.description``; module docstring.
    """
    timings: dict = {}
    spec, qs, level = _common(lower, upper, bins, epsilon, rho, tree, neighbours, out_of_range,
                              quantiles, consistency, budgets, interval_level)
    t0 = time.perf_counter()
    if (data is None) == (counts is None):
        raise ValueError("give exactly one of data (the values) or counts (the K bin counts)")
    if counts is not None:
        hist = _check_counts(counts, spec.bins)
    else:
        hist, _ = histogram_from_values(data, spec, out_of_range=out_of_range, name="data")
    timings["read_and_bin"] = time.perf_counter() - t0
    return _release_histogram(hist, spec, epsilon=epsilon, rho=rho, tree=tree,
                              neighbours=neighbours, quantiles=qs, consistency=consistency,
                              budgets=budgets, interval_level=level, out_of_range=out_of_range,
                              timings=timings)


def release_file(path=None, *, column=None, counts_file=None, lower, upper, bins,
                 epsilon=None, rho=None, tree="optimal", neighbours: str = "add_remove",
                 out_of_range: str = "error", quantiles=DEFAULT_QUANTILES,
                 consistency: str | None = "l2", budgets: str = "equal",
                 interval_level: float = 0.95, delimiter=None,
                 chunk_bytes: int | None = None) -> Release:
    """``release`` of one column of a CSV/TSV/Parquet file read in bounded memory (blocks of
    ``chunk_bytes``), or of a counts file (``counts_file``: one count per bin, or
    ``bin,count`` lines). Other parameters as for :func:`release`."""
    timings: dict = {}
    spec, qs, level = _common(lower, upper, bins, epsilon, rho, tree, neighbours, out_of_range,
                              quantiles, consistency, budgets, interval_level)
    t0 = time.perf_counter()
    if (path is None) == (counts_file is None):
        raise ValueError("give exactly one of a data file (with column) or a counts file")
    if counts_file is not None:
        hist = read_counts(counts_file, spec.bins)
    else:
        if not isinstance(column, str) or not column:
            raise ValueError("column: name the column of the data file to release")
        kw = {} if chunk_bytes is None else {"chunk_bytes": int(chunk_bytes)}
        if delimiter is not None:
            kw["delimiter"] = delimiter
        hist, _ = histogram_from_file(path, column, spec, out_of_range=out_of_range, **kw)
    timings["read_and_bin"] = time.perf_counter() - t0
    return _release_histogram(hist, spec, epsilon=epsilon, rho=rho, tree=tree,
                              neighbours=neighbours, quantiles=qs, consistency=consistency,
                              budgets=budgets, interval_level=level, out_of_range=out_of_range,
                              timings=timings)
