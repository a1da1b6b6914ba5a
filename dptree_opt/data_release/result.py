"""The result of a private release: CDF, quantiles, range helper data and the full account
of the mechanism and its guarantee (frozen; everything in it is safe to publish)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from ..mechanism import Mechanism
from ..pipeline import PrivateCDF
from .. import plotting
from .binning import BinSpec
from ..files import check_writable_path, write_text_atomic

__all__ = ["Release", "FORMAT", "json_floats"]

FORMAT = "dptree_opt.release/1"
BIN_RULE = ("edges[i] = lower + (upper - lower) * i / K (IEEE double, in this order) for "
            "i < K, edges[K] = upper; bin(x) = i iff edges[i] <= x < edges[i+1]")
INTERVAL_GUARANTEE = (
    "lower/upper: an interval_level confidence interval for the true quantile of the data "
    "(np.quantile(data, q, method='inverted_cdf')), bin-edge aligned, by exact test inversion "
    "with critical values calibrated to the discrete noise (dptree_opt.quantile_intervals); "
    "noise_lower/noise_upper: the noise-only uncertainty of the reported estimate; both "
    "contain the estimate")


def incomplete_note(exc: BaseException, rerun: str = "") -> str:
    """The note of a release whose post-processing failed (``exc``: a bug) or was interrupted
    (KeyboardInterrupt: Ctrl-C) after the noise was drawn: the noisy measurements are kept;
    ``rerun`` (appended) says how to redo the estimation from them."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    why = "was interrupted" if interrupted else f"failed ({type(exc).__name__}: {exc})"
    return (f"post-processing {why} after the noise was drawn; the noisy measurements (the DP "
            f"output) are kept in `measurements` and written to the JSON{rerun}"
            + ("" if interrupted else ". This is a bug: please report it"))


def json_floats(a) -> list:
    """JSON-safe list: integers kept, floats as floats, NaN/inf as None (null)."""
    arr = np.asarray(a)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.tolist()
    arr = arr.astype(np.float64)
    if np.all(np.isfinite(arr)):
        return arr.tolist()
    return np.where(np.isfinite(arr), arr.astype(object), None).tolist()


def _design_lines(design: dict, mechanism: Mechanism, expected: dict) -> list[str]:
    """The summary's lines for a release of a design (``release(..., design=d)``): what was
    released (family, strategy, route and, for a scaled strategy, s) and its exact mean CDF
    error next to the design's own (when the design was made for the CDF)."""
    fam = f"{design['family']}: " if design.get("family") else ""
    if design["route"] == "scaled":
        bits = int(design["scale"]).bit_length() - 1
        how = (f"route 'scaled': the integer strategy round(s A), s = 2^{bits}, noise "
               "calibrated to its exact sensitivity")
    else:
        per_row = mechanism.row_budgets is not None
        how = ("route 'integer': the strategy as it is"
               + (", a budget per row (node)" if per_row else ""))
    lines = [f"design: {fam}{mechanism.released.name}", f"  {how}"]
    err = (f"exact mean CDF error {expected['mean_prefix_mse']:.6g} per prefix (counts^2, "
           "under the noise drawn)")
    own, workload = design.get("mean_error_per_query"), design.get("workload") or ""
    if own is not None and workload.startswith("prefix("):
        err += f"; the design's own {own:.6g}"
        if design["route"] == "scaled":
            err += f" (rounding {design['rounding_increase']:+.2e})"
    return lines + [f"  {err}"]


@dataclass(frozen=True, eq=False)
class Release:
    """A differentially private CDF release (immutable; arrays are read-only).

    Attributes
    ----------
    spec : BinSpec -- the public bins: K equal-width bins over [lower, upper).
    cdf : PrivateCDF over the K real bins -- ``raw`` (unbiased BLUE cumulative counts, float
        (K,)), ``consistent`` (projected: integer, non-decreasing, in [0, total], ending at
        ``total``), ``standard_errors`` (exact SEs of ``raw`` under the discrete noise),
        ``total`` (N: exact under swap, the rounded estimate under add/remove),
        ``total_public``; its ``band``, ``range_count`` and ``range_standard_errors`` work on
        bin indices.
    quantile_levels : tuple of q in [0, 1].
    quantiles : (q,) estimates (linear inside bins, ``queries.quantiles`` rule, from the
        consistent CDF).
    quantile_lower, quantile_upper : (q,) ``interval_level`` intervals for the true quantiles
        of the data: bin-edge aligned, coverage >= interval_level for each q (exact test
        inversion, ``dptree_opt.quantile_intervals``; they include the bin resolution).
    quantile_noise_lower, quantile_noise_upper : (q,) the noise-only intervals (interpolated
        inside bins): how far noise can move the reported estimate. Both contain it.
    mechanism : the discrete Mechanism actually used (strategy over ``padded_bins`` leaves).
    branching : tuple of branching factors (root first); padded_bins = prod(branching) >= K.
    measurements : float (rows,) -- the noisy node answers y (DP output; NaN = unmeasured).
    privacy : dict -- neighbour model, noise, budget asked and achieved, per-level budgets,
        sensitivities, scales and discrete variances, what is public, the sampler.
    description : str -- a human-readable account of all of the above.
    timings : dict of seconds per phase (NOT in ``to_json`` unless asked: the time to read and
        bin the data grows with N, which is private under add/remove).
    expected_error : dict -- the exact mean and max squared error (counts^2) of the raw CDF
        over the K real bins under the noise actually drawn (data-independent).
    notes : tuple of str -- anything unusual in the post-processing (e.g. quantiles undefined
        because N_hat <= 0); empty for an ordinary release.
    complete : bool -- False only if post-processing failed after the noise was drawn (a bug);
        the estimates are then NaN and ``measurements`` (always in the JSON then) hold the DP
        output.
    """

    spec: BinSpec
    cdf: PrivateCDF
    quantile_levels: tuple
    quantiles: np.ndarray
    quantile_lower: np.ndarray
    quantile_upper: np.ndarray
    quantile_noise_lower: np.ndarray
    quantile_noise_upper: np.ndarray
    interval_level: float
    mechanism: Mechanism = field(repr=False)
    branching: tuple
    measurements: np.ndarray = field(repr=False)
    privacy: dict = field(repr=False)
    description: str = field(repr=False)
    timings: dict = field(default_factory=dict, repr=False)
    expected_error: dict = field(default_factory=dict, repr=False)
    notes: tuple = ()
    complete: bool = True

    # ------------------------------------------------------------------ views
    @property
    def bin_edges(self) -> np.ndarray:
        """Nominal bin edges, shape (K + 1,)."""
        return self.spec.bin_edges

    @property
    def padded_bins(self) -> int:
        """Leaves of the tree (>= K; the extra ones are empty, public zeros)."""
        return int(math.prod(self.branching))

    @property
    def raw_cdf(self) -> np.ndarray:
        """Raw cumulative counts at the right bin edges, float (K,)."""
        return self.cdf.raw

    @property
    def consistent_cdf(self) -> np.ndarray:
        """Consistent cumulative counts at the right bin edges, (K,)."""
        return self.cdf.consistent

    @property
    def standard_errors(self) -> np.ndarray:
        """Exact standard errors of ``raw_cdf``, (K,)."""
        return self.cdf.standard_errors

    @property
    def total(self):
        """N the consistent CDF ends at (exact if ``cdf.total_public``, else an estimate)."""
        return self.cdf.total

    @property
    def total_public(self) -> bool:
        """Whether N is released exactly (swap neighbours)."""
        return self.cdf.total_public

    def cumulative_count(self, x) -> np.ndarray:
        """Consistent count of values < x (array-like x in value units), linear inside bins
        (the quantile rule's interpolation); 0 below ``lower``, the total at/above ``upper``."""
        edges = self.bin_edges
        c = np.concatenate([[0.0], np.asarray(self.cdf.consistent, dtype=float)])
        return np.interp(np.asarray(x, dtype=float), edges, c)

    def range_count(self, a, b) -> np.ndarray:
        """Consistent count of values in [a, b) (value units, a <= b), interpolated inside
        bins; exact post-processing of the release when a and b are bin edges."""
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if np.any(~np.isfinite(a) | ~np.isfinite(b)) or np.any(a > b):
            raise ValueError("range_count needs finite a <= b")
        return self.cumulative_count(b) - self.cumulative_count(a)

    # ----------------------------------------------------------------- output
    def to_dict(self, *, include_measurements: bool = False,
                include_timings: bool = False) -> dict:
        """A JSON-ready dict (format ``FORMAT``); everything in it is DP output or public."""
        c = self.cdf
        out = {
            "format": FORMAT,
            "bins": {"lower": self.spec.lower, "upper": self.spec.upper, "K": self.spec.bins,
                     "rule": BIN_RULE,
                     "edges": json_floats(self.bin_edges)},
            "total": c.total, "total_public": c.total_public,
            "cdf": {"raw": json_floats(c.raw), "consistent": json_floats(c.consistent),
                    "standard_errors": json_floats(c.standard_errors),
                    "consistency": c.consistency, "estimator": c.estimator},
            "quantiles": [{"q": q, "value": v, "lower": lo, "upper": up, "noise_lower": nlo,
                           "noise_upper": nup}
                          for q, v, lo, up, nlo, nup in zip(
                              self.quantile_levels, json_floats(self.quantiles),
                              json_floats(self.quantile_lower), json_floats(self.quantile_upper),
                              json_floats(self.quantile_noise_lower),
                              json_floats(self.quantile_noise_upper))],
            "interval_level": self.interval_level,
            "interval_guarantee": INTERVAL_GUARANTEE,
            "expected_error": dict(self.expected_error),
            "notes": list(self.notes),
            "complete": self.complete,
            "tree": {"branching": list(self.branching), "padded_bins": self.padded_bins},
            "privacy": self.privacy,
            "description": self.description,
        }
        if include_measurements or not self.complete:
            out["measurements"] = json_floats(self.measurements)
        if include_timings:
            out["timings_seconds"] = dict(self.timings)
        return out

    def to_json(self, path=None, *, indent: int | None = 2, force: bool = False,
                **kwargs) -> str:
        """The release as JSON text (``to_dict`` keywords pass through); written to ``path``
        when given: atomically (a temporary file in the same directory, then a rename), never
        over an existing file unless ``force`` (FileExistsError), with the permissions
        ``open`` would give (``files.write_text_atomic``). A path that is not a str /
        os.PathLike, is a directory, or lies in a missing or read-only directory raises
        ValueError before anything is done. Returns the text."""
        if path is not None:  # a bad path is refused before any work (ValueError)
            check_writable_path(path)
        text = json.dumps(self.to_dict(**kwargs), indent=indent)
        if path is not None:
            write_text_atomic(path, text + "\n", force=force)
        return text

    def plot(self, ax=None, truth=None):
        """The private CDF with its band, the quantiles with their intervals and, for a
        simulation, the ``truth`` (true cumulative counts, (K,)); returns the matplotlib Axes
        (``plotting.plot_release``)."""

        return plotting.plot_release(self, ax=ax, truth=truth)

    def summary(self) -> str:
        """A short human summary: bins, guarantee, total and the quantiles with intervals."""
        p = self.privacy
        budget = (f"eps = {p['epsilon']:g} (pure eps-DP)" if p["noise"] == "laplace"
                  else f"rho = {p['rho']:g} (rho-zCDP)")
        lines = [f"{self.spec.bins} bins over [{self.spec.lower:g}, {self.spec.upper:g}); "
                 f"{p['sampler_short']}; {budget}; {p['neighbours']} neighbours"]
        design = self.expected_error.get("design")
        if design is None:
            lines.append(f"tree: branching {list(self.branching)}"
                         + (f" (padded to {self.padded_bins} leaves; the extra bins are empty)"
                            if self.padded_bins != self.spec.bins else ""))
        else:
            lines += _design_lines(design, self.mechanism, self.expected_error)
        se_total = float(self.cdf.standard_errors[-1])
        if self.cdf.total_public:
            lines.append(f"N = {self.total} (PUBLIC: released exactly under swap neighbours)")
        else:
            lines.append(f"N (private, estimated) = {self.total}  (SE {se_total:.3g})")
        if len(self.quantile_levels):
            pct = f"{100 * self.interval_level:g}%"
            lines.append(f"{'quantile':>9}  {'estimate':>12}  "
                         f"{pct + ' interval (true quantile)':<28}  noise-only interval")
            for q, v, lo, up, nlo, nup in zip(self.quantile_levels, self.quantiles,
                                              self.quantile_lower, self.quantile_upper,
                                              self.quantile_noise_lower,
                                              self.quantile_noise_upper):
                lines.append(f"{q:>9g}  {v:>12.6g}  [{lo:>12.6g}, {up:>12.6g}]  "
                             f"[{nlo:>11.6g}, {nup:>11.6g}]")
        return "\n".join(lines)
