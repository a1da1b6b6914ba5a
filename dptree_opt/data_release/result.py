"""The result of a private release: CDF, quantiles, range helper data and the full account
of the mechanism and its guarantee (frozen; everything in it is safe to publish)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from ..mechanism import Mechanism
from ..pipeline import PrivateCDF
from .. import plotting
from ..strategies.records import strategy_record
from .binning import BinSpec
from ..files import check_writable_path, write_text_atomic

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Release", "FORMAT", "MECHANISM_FORMAT", "BoxCount", "PGMMeasurement", "json_floats",
           "mechanism_record", "document_checksum", "with_checksum", "pgm_measurements"]

FORMAT = "dptree_opt.release/1"
MECHANISM_FORMAT = "dptree_opt.mechanism/1"
CHECKSUM_RULE = ("sha256 of json.dumps(the document without 'checksum', sort_keys=True, "
                 "separators=(',', ':')) in UTF-8")
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


def json_floats(a: npt.ArrayLike) -> list[Any]:
    """JSON-safe list: integers kept, floats as floats, NaN/inf as None (null)."""
    arr = np.asarray(a)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.tolist()
    arr = arr.astype(np.float64)
    if np.all(np.isfinite(arr)):
        return arr.tolist()
    out: list[Any] = np.where(np.isfinite(arr), arr.astype(object),
                              np.array(None, dtype=object)).tolist()
    return out


class BoxCount(NamedTuple):
    """Answers to ranges (1-D) or boxes (grids): ``estimate`` (the raw BLUE, unbiased),
    ``standard_error`` (its exact SE under the discrete noise drawn), ``consistent`` (the same
    query over the consistent CDF / cells; no exact SE, NaN without consistency). Arrays of
    shape (m,), or floats for one query."""

    estimate: float | npt.NDArray[np.float64]
    standard_error: float | npt.NDArray[np.float64]
    consistent: float | npt.NDArray[np.float64]


@dataclass(frozen=True)
class PGMMeasurement:
    """One group of noisy linear measurements in the form private-pgm (``mbi``) consumes
    (its ``LinearMeasurement``: ``noisy_measurement``, ``clique``, ``stddev``, ``query``),
    without depending on it: y = Q x + noise, noise i.i.d. with standard deviation
    ``stddev`` (0: released exactly), x the (padded) histogram over ``clique``'s domain
    (row-major for several attributes). ``query`` is a scipy.sparse CSR matrix (rows, cells);
    ``rows`` are the indices of these measurements in the release's ``measurements``."""

    noisy_measurement: np.ndarray
    query: sp.csr_matrix
    stddev: float
    clique: tuple
    rows: np.ndarray

    def to_mbi(self) -> Any:
        """An ``mbi.LinearMeasurement`` (private-pgm >= 2; ImportError when it is not
        installed) whose query applies Q, as a JAX sparse matrix, to the clique's data vector.
        An exact group (stddev 0) is refused (ValueError): mbi weighs measurements by
        1 / stddev; give an exact total as mbi's ``known_total`` instead."""
        import mbi  # optional third-party packages (private-pgm and its JAX)
        from jax.experimental import sparse as jsparse

        if self.stddev <= 0:
            raise ValueError("stddev: this group is released exactly (stddev 0), which mbi "
                             "cannot weigh; pass an exact total as known_total instead")
        return mbi.LinearMeasurement(self.noisy_measurement, self.clique, self.stddev,
                                     _SparseQuery(jsparse.BCOO.from_scipy_sparse(self.query)))


class _SparseQuery:
    """Q @ factor.datavector() for mbi (hashable by identity, as its static query field
    requires)."""

    def __init__(self, matrix: Any) -> None:
        self.matrix = matrix

    def __call__(self, factor: Any) -> Any:
        return self.matrix @ factor.datavector()


def mechanism_record(mechanism: Mechanism) -> dict:
    """JSON-able record (format ``MECHANISM_FORMAT``) from which ``load_release`` rebuilds the
    released Mechanism exactly: the strategy (``strategies.records``), the noise, neighbour
    model, budget and the budgets per level or per row it was calibrated with. Public: no
    data, no noise."""
    strat = mechanism.strategy
    try:
        record = strategy_record(strat)
    except ValueError as exc:  # never fail to write a release: it is then not loadable
        record = {"unavailable": f"the strategy has no record ({exc})"}
    out = {"format": MECHANISM_FORMAT, "strategy": record,
           "noise": mechanism.noise, "neighbours": mechanism.neighbours,
           "budget": mechanism.requested_budget,
           "public_total": bool(mechanism.public_total),
           "discrete": bool(mechanism.discrete), "level_budgets": None, "row_budgets": None}
    if mechanism.row_budgets is not None:
        out["row_budgets"] = json_floats(mechanism.row_budgets[:strat.n_rows])
    elif mechanism.level_budgets:
        budgets = mechanism.level_budgets
        out["level_budgets"] = [budgets[k] for k in sorted(budgets)]
    return out


def document_checksum(document: dict) -> str:
    """The sha256 (hex) of a release document without its "checksum" entry (``CHECKSUM_RULE``):
    written by ``to_dict`` and checked by ``load_release``, so any edit is detected."""
    body = {k: v for k, v in document.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def with_checksum(document: dict) -> dict:
    """``document`` with its "checksum" entry (``CHECKSUM_RULE``) added."""
    document["checksum"] = {"sha256": document_checksum(document), "rule": CHECKSUM_RULE}
    return document


def pgm_measurements(mechanism: Mechanism, measurements: Any,
                     clique: tuple) -> list[PGMMeasurement]:
    """The noisy measurements y of ``mechanism`` as :class:`PGMMeasurement` records, one per
    distinct noise standard deviation (sqrt of the discrete variances), rows unmeasured
    (NaN / infinite scale) left out; the query Q is the released strategy's sparse rows."""
    y = np.asarray(measurements, dtype=np.float64)
    released = mechanism.released
    if y.shape != (released.n_rows,):
        raise ValueError(f"measurements: need the {released.n_rows} noisy answers of the "
                         f"release, got shape {y.shape} (save the release with "
                         "include_measurements=True to export them later)")
    sd = np.sqrt(np.asarray(mechanism.variances, dtype=np.float64))
    keep = np.isfinite(sd) & np.isfinite(y) & np.isfinite(mechanism.scales)
    a = released.matrix
    out = []
    for value in np.unique(sd[keep]):
        rows = np.flatnonzero(keep & (sd == value))
        out.append(PGMMeasurement(noisy_measurement=y[rows], query=a[rows],
                                  stddev=float(value), clique=tuple(clique), rows=rows))
    return out


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
    def total(self) -> int | None:
        """N the consistent CDF ends at (exact if ``cdf.total_public``, else an estimate)."""
        return self.cdf.total

    @property
    def total_public(self) -> bool:
        """Whether N is released exactly (swap neighbours)."""
        return self.cdf.total_public

    def cumulative_count(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Consistent count of values < x (array-like x in value units), linear inside bins
        (the quantile rule's interpolation); 0 below ``lower``, the total at/above ``upper``."""
        edges = self.bin_edges
        c = np.concatenate([[0.0], np.asarray(self.cdf.consistent, dtype=float)])
        return np.interp(np.asarray(x, dtype=float), edges, c)

    def range_count(self, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Consistent count of values in [a, b) (value units, a <= b), interpolated inside
        bins; exact post-processing of the release when a and b are bin edges."""
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if np.any(~np.isfinite(a) | ~np.isfinite(b)) or np.any(a > b):
            raise ValueError("range_count needs finite a <= b")
        return self.cumulative_count(b) - self.cumulative_count(a)

    def _prefix_points(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(i, f): x (value units, (m,)) lies at bin position i + f, 0 <= i < K, f in [0, 1]
        (clamped to [lower, upper]); C(x) = (1 - f) C_i + f C_(i+1) (C_0 = 0)."""
        pos = np.interp(x, self.bin_edges, np.arange(self.spec.bins + 1.0))
        i = np.minimum(np.floor(pos), self.spec.bins - 1).astype(np.int64)
        return i, pos - i

    def _combination_se(self, points: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """Exact SE of sum_j coef[:, j] C_raw(points[:, j]) (prefix indices 0..K, (m, p)),
        from range variances: Cov(C_s, C_t) = (V_s + V_t - Var(C_max - C_min)) / 2."""
        m, p = points.shape
        s, t = np.broadcast_to(points[:, :, None], (m, p, p)), \
            np.broadcast_to(points[:, None, :], (m, p, p))
        lo, hi = np.minimum(s, t), np.maximum(s, t)
        var_range = np.zeros((m, p, p))
        live = lo < hi
        if live.any():
            se = self.cdf.range_standard_errors(lo[live], hi[live] - 1)
            var_range[live] = np.asarray(se, dtype=np.float64) ** 2
        v = np.zeros((m, p))     # Var C_t = Var(range [0, t))
        nz = points > 0
        if nz.any():
            v[nz] = np.asarray(self.cdf.range_standard_errors(
                np.zeros(int(nz.sum()), dtype=np.int64), points[nz] - 1), dtype=np.float64) ** 2
        cov = 0.5 * (v[:, :, None] + v[:, None, :] - var_range)
        var = np.einsum("mj,mjk,mk->m", coef, cov, coef)
        return np.sqrt(np.maximum(var, 0.0))

    def _answer(self, points: np.ndarray, coef: np.ndarray, single: bool) -> BoxCount:
        raw = np.concatenate([[0.0], np.asarray(self.cdf.raw, dtype=np.float64)])
        cons = np.concatenate([[0.0], np.asarray(self.cdf.consistent, dtype=np.float64)])
        est, con = np.sum(coef * raw[points], axis=1), np.sum(coef * cons[points], axis=1)
        if self.cdf.consistency is None:
            con = np.full(est.shape, np.nan)
        se = self._combination_se(points, coef)
        if single:
            return BoxCount(float(est[0]), float(se[0]), float(con[0]))
        return BoxCount(est, se, con)

    @staticmethod
    def _values(x: Any, name: str) -> np.ndarray:
        try:
            arr = np.asarray(x, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be numbers") from None
        if arr.ndim > 1 or not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be a finite number or a 1-D array of them")
        return np.atleast_1d(arr)

    def cumulative_answer(self, x: Any) -> BoxCount:
        """Count of values < x (value units; a number -> floats, (m,) -> arrays): the raw
        BLUE estimate with its exact standard error and the consistent count, linear inside
        bins (as :meth:`cumulative_count`; exact post-processing at bin edges). The SE of the
        interpolation comes from range variances (``cdf.range_standard_errors``)."""
        xs = self._values(x, "x")
        i, f = self._prefix_points(xs)
        return self._answer(np.stack([i, i + 1], axis=1), np.stack([1.0 - f, f], axis=1),
                            np.ndim(x) == 0)

    def range_answer(self, a: Any, b: Any) -> BoxCount:
        """Count of values in [a, b) (value units, a <= b; numbers -> floats, (m,) arrays ->
        arrays): the raw BLUE estimate, its exact standard error and the consistent count,
        linear inside bins (:meth:`range_count` is the consistent count)."""
        xa, xb = self._values(a, "a"), self._values(b, "b")
        if xa.shape != xb.shape:
            raise ValueError(f"a and b must have the same shape, got {xa.shape} and {xb.shape}")
        if np.any(xa > xb):
            raise ValueError("range_answer needs a <= b")
        ia, fa = self._prefix_points(xa)
        ib, fb = self._prefix_points(xb)
        points = np.stack([ib, ib + 1, ia, ia + 1], axis=1)
        coef = np.stack([1.0 - fb, fb, fa - 1.0, -fa], axis=1)
        return self._answer(points, coef, np.ndim(a) == 0 and np.ndim(b) == 0)

    def quantile_answers(self, qs: Any) -> dict:
        """The quantiles at levels ``qs`` with their intervals (dict of (len(qs),) arrays:
        q, value, lower, upper, noise_lower, noise_upper): the released ones as released,
        other levels computed now from the release (post-processing:
        ``PrivateCDF.quantile_intervals`` at ``interval_level``)."""
        q = self._values(qs, "qs")
        if np.any((q < 0) | (q > 1)):
            raise ValueError("qs must be probabilities in [0, 1]")
        known = {float(v): i for i, v in enumerate(self.quantile_levels)}
        cols = ("value", "lower", "upper", "noise_lower", "noise_upper")
        out = {c: np.full(q.size, np.nan) for c in cols}
        stored = (self.quantiles, self.quantile_lower, self.quantile_upper,
                  self.quantile_noise_lower, self.quantile_noise_upper)
        new = [j for j, v in enumerate(q) if float(v) not in known]
        for j, v in enumerate(q):
            if float(v) in known:
                for c, arr in zip(cols, stored):
                    out[c][j] = arr[known[float(v)]]
        if new and self.complete:
            qi = self.cdf.quantile_intervals(self.bin_edges, q[new], level=self.interval_level)
            est = (np.asarray(self.cdf.quantiles(self.bin_edges, q[new]), dtype=float)
                   if self.cdf.consistency is not None and self.total
                   else np.full(len(new), np.nan))
            for c, arr in zip(cols, (est, qi.lower, qi.upper, qi.noise_lower, qi.noise_upper)):
                out[c][new] = arr
        return {"q": q, **out}

    def measurements_for_pgm(self, attribute: str = "x") -> list[PGMMeasurement]:
        """The release's noisy measurements in the form private-pgm consumes (one
        :class:`PGMMeasurement` per noise level: y, sparse Q over the ``padded_bins`` cells of
        the one-attribute domain ``attribute``, stddev); ``.to_mbi()`` converts one when mbi
        is installed (docs/interop.md)."""
        return pgm_measurements(self.mechanism, self.measurements, (str(attribute),))

    # ----------------------------------------------------------------- output
    def to_dict(self, *, include_measurements: bool = False,
                include_timings: bool = False) -> dict:
        """A JSON-ready dict (format ``FORMAT``); everything in it is DP output or public.
        It holds the mechanism's record (``mechanism_record``) and a checksum, so that
        ``load_release`` rebuilds the release (docs/saved_releases.md)."""
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
        out["mechanism"] = mechanism_record(self.mechanism)
        return with_checksum(out)

    def to_json(self, path: str | os.PathLike[str] | None = None, *, indent: int | None = 2,
                force: bool = False, **kwargs: bool) -> str:
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

    def plot(self, ax: Axes | None = None, truth: npt.ArrayLike | None = None) -> Axes:
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
