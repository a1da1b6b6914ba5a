"""Plots of private CDFs and releases (matplotlib, imported lazily inside the functions).

* :func:`plot_cdf` -- a :class:`~dptree_opt.pipeline.PrivateCDF`: the consistent CDF as a step
  function over the bin edges (F(e_j) = C_{j-1} / N, held until the next edge), the raw
  estimate faintly, a pointwise or simultaneous confidence band for the true CDF shaded, and,
  in simulations, the true CDF; the title names the mechanism and its guarantee.
* :func:`plot_release` -- a :class:`~dptree_opt.data_release.Release`: the same, plus each
  reported quantile at height q with its interval for the true quantile (thin bar) and its
  noise-only interval (thick bar).
* :func:`plot_grid_release` -- a :class:`~dptree_opt.data_release.GridRelease`: the heat map
  of its cells (and of the truth, in simulations).
* :func:`save_figure` -- write a figure to a file atomically, never over an existing file
  unless asked.

The plot functions return the matplotlib Axes (a new figure when ``ax`` is None). Nothing
here changes the release or needs more privacy budget: it is post-processing of published
numbers."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .files import write_atomic
from .validation import check_choice

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .data_release import GridRelease, Release
    from .mechanism import Mechanism
    from .pipeline import PrivateCDF

__all__ = ["plot_cdf", "plot_release", "plot_grid_release", "guarantee_label", "save_figure"]

BANDS = ("pointwise", "simultaneous", None)


def guarantee_label(mechanism: Mechanism | None) -> str:
    """'discrete laplace noise, 1-DP (pure), add_remove neighbours' style one-liner."""
    if mechanism is None:
        return "mechanism unknown"
    kind = f"discrete {mechanism.noise}" if mechanism.discrete else mechanism.noise
    if mechanism.noise == "laplace":
        guarantee = f"\u03b5 = {mechanism.epsilon:.3g} (pure DP)"
    else:
        guarantee = f"\u03c1 = {mechanism.rho:.3g} (zCDP)"
    who = ("N public" if mechanism.public_total else "N private")
    return f"{kind} noise, {guarantee}, {mechanism.neighbours} neighbours, {who}"


def _axes(ax: Axes | None) -> Axes:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt  # lazy: importing matplotlib costs ~0.3 s

    _, ax = plt.subplots(figsize=(8, 5))
    return ax


def _edges(cdf: PrivateCDF, bin_edges: ArrayLike | None) -> tuple[npt.NDArray[np.float64], str]:
    k = cdf.n_bins
    if bin_edges is None:
        return np.arange(k + 1, dtype=float), "bin index"
    e = np.asarray(bin_edges, dtype=float)
    if e.shape != (k + 1,) or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
        raise ValueError(f"bin_edges must hold K + 1 = {k + 1} finite, increasing values")
    return e, "value"


def plot_cdf(cdf: PrivateCDF, bin_edges: ArrayLike | None = None, ax: Axes | None = None,
             band: Literal["pointwise", "simultaneous"] | None = "pointwise",
             level: float = 0.95, truth: ArrayLike | None = None) -> Axes:
    """Plot a PrivateCDF (module docstring); returns the Axes.

    Parameters
    ----------
    cdf : PrivateCDF
        The released CDF.
    bin_edges : array of shape (K + 1,), optional
        The bin edges in value units (default: bin index 0..K).
    ax : Axes, optional
        Where to draw (default: a new figure).
    band : "pointwise" (default), "simultaneous" or None
        "pointwise": normal critical value (``PrivateCDF.band``); "simultaneous": Sidak,
        tightened by the monotone envelope; None: no band.
    level : float
        The band's confidence level (default 0.95).
    truth : array of shape (K,), optional
        True cumulative counts, for simulations: drawn as the true CDF.

    Returns
    -------
    Axes
        The axes drawn on.
    """
    check_choice(band, "band", BANDS)
    edges, xlabel = _edges(cdf, bin_edges)
    if truth is not None:
        truth = np.asarray(truth, dtype=float)
        if truth.shape != (cdf.n_bins,) or not np.all(np.isfinite(truth)):
            raise ValueError(f"truth must hold K = {cdf.n_bins} finite cumulative counts")
    raw = np.asarray(cdf.raw, dtype=float)
    n = float(cdf.total) if cdf.total else max(float(raw[-1]), 1.0)
    ax = _axes(ax)
    zero = np.array([0.0])
    if band is not None:
        lo, up = cdf.band(level, simultaneous=band == "simultaneous",
                          monotone=band == "simultaneous")
        how = ("Sidak, monotone envelope" if band == "simultaneous" else
               "normal approx." if cdf.mechanism is not None
               and cdf.mechanism.noise == "laplace" else "normal")
        ax.fill_between(edges, np.concatenate([zero, lo]) / n, np.concatenate([zero, up]) / n,
                        step="post", alpha=0.22, color="tab:blue", linewidth=0,
                        label=f"{level:.0%} {band} band ({how})")
    ax.step(edges, np.concatenate([zero, raw]) / n, where="post", color="tab:gray",
            alpha=0.55, linewidth=0.8, label="raw estimate (unbiased, not monotone)")
    if truth is not None:
        ax.step(edges, np.concatenate([zero, truth]) / max(truth[-1], 1.0), where="post",
                color="black", linestyle="--", linewidth=1.0, label="true CDF")
    if cdf.consistency is not None:
        ax.step(edges, np.concatenate([zero, np.asarray(cdf.consistent, float)]) / n,
                where="post", color="tab:blue", linewidth=1.6,
                label=f"private CDF ({cdf.consistency}-consistent)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("cumulative fraction  F(x) = count(< x) / N")
    ax.set_xlim(edges[0], edges[-1])
    total = (f"N = {cdf.total} (public)" if cdf.total_public else
             f"N \u2248 {cdf.total} (estimated)" if cdf.total is not None else "N private")
    ax.set_title(f"Private CDF, {cdf.n_bins} bins, {total}\n"
                 f"{guarantee_label(cdf.mechanism)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return ax


def plot_release(release: Release, ax: Axes | None = None,
                 truth: ArrayLike | None = None) -> Axes:
    """Plot a Release: its CDF (``plot_cdf``, pointwise band at the release's level, value
    axis) and each quantile at height q with its ``interval_level`` interval for the true
    quantile (thin bar with caps) and the noise-only interval (thick bar). Returns the Axes."""
    level = float(release.interval_level)
    ax = plot_cdf(release.cdf, bin_edges=release.bin_edges, ax=ax, band="pointwise",
                  level=level, truth=truth)
    q = np.asarray(release.quantile_levels, dtype=float)
    est = np.asarray(release.quantiles, dtype=float)
    lo = np.asarray(release.quantile_lower, dtype=float)
    up = np.asarray(release.quantile_upper, dtype=float)
    nlo = np.asarray(release.quantile_noise_lower, dtype=float)
    nup = np.asarray(release.quantile_noise_upper, dtype=float)
    ok = np.isfinite(lo) & np.isfinite(up)
    if np.any(ok):
        centre = np.where(np.isfinite(est), est, (lo + up) / 2)[ok]
        ax.errorbar(centre, q[ok], xerr=[np.maximum(centre - lo[ok], 0.0),
                                         np.maximum(up[ok] - centre, 0.0)],
                    fmt="o", color="tab:red", markersize=4, capsize=4, linewidth=1.0,
                    label=f"quantiles: {level:.0%} interval for the true quantile")
        nok = ok & np.isfinite(nlo) & np.isfinite(nup)
        if np.any(nok):
            ax.hlines(q[nok], nlo[nok], nup[nok], color="tab:red", linewidth=4, alpha=0.45,
                      label="noise-only interval of the estimate")
        for qi, x in zip(q[ok], centre):
            ax.annotate(f"q={qi:g}", (x, qi), textcoords="offset points", xytext=(-6, 7),
                        ha="right", fontsize=7, color="tab:red",
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))
        ax.legend(loc="lower right", fontsize=8)
    return ax


def plot_grid_release(release: GridRelease, ax: Axes | Sequence[Axes] | None = None,
                      truth: ArrayLike | None = None) -> Axes | list[Axes]:
    """Heat map of a GridRelease over its first two axes (further axes summed): the
    consistent cells (the raw BLUE without consistency), value units on both axes, a colour
    bar, the guarantee and the exact cell SE in the title. With ``truth`` (true cell counts,
    shape ``release.shape``) a second panel shows it on the same colour scale. Returns the
    Axes, or a list of two Axes with ``truth``."""
    import matplotlib.pyplot as plt

    cells = release.consistent if release.consistent is not None else release.raw
    cells = np.asarray(cells, dtype=float)
    panels = [("private (consistent)" if release.consistent is not None
               else "private (raw BLUE)", cells)]
    if truth is not None:
        t = np.asarray(truth, dtype=float)
        if t.shape != cells.shape:
            raise ValueError(f"truth must have shape {cells.shape}, got {t.shape}")
        panels.append(("truth", t))
    if ax is None:
        fig, grid_axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4),
                                      squeeze=False)
        axes: list[Axes] = list(grid_axes[0])
    else:
        axes = list(ax) if isinstance(ax, (list, tuple, np.ndarray)) else [cast("Axes", ax)]
        if len(axes) != len(panels):
            raise ValueError(f"ax: need {len(panels)} Axes, got {len(axes)}")
    extra = tuple(range(2, cells.ndim))
    vmax = max(float(np.max(p[1].sum(axis=extra))) for p in panels) or 1.0
    s0, s1 = release.specs[0], release.specs[1]
    p = release.privacy
    budget = (f"eps = {p['epsilon']:g}" if p["noise"] == "laplace" else f"rho = {p['rho']:g}")
    for a, (title, grid) in zip(axes, panels):
        img = a.imshow(grid.sum(axis=extra).T, origin="lower", aspect="auto",
                       extent=(s0.lower, s0.upper, s1.lower, s1.upper), cmap="viridis",
                       vmin=min(0.0, float(np.min(grid))), vmax=vmax, interpolation="nearest")
        a.set_xlabel(release.names[0])
        a.set_ylabel(release.names[1])
        a.set_title(title, fontsize=9)
        a.figure.colorbar(img, ax=a, label="count per cell")
    axes[0].set_title(f"{panels[0][0]}: {budget}, {p['neighbours']}; cell SE "
                      f"{release.cell_standard_error:.3g}", fontsize=9)
    return axes if truth is not None else axes[0]


def save_figure(fig: Figure, path: str | os.PathLike[str], *, force: bool = False,
                **savefig_kwargs: Any) -> Path:
    """Write the matplotlib figure ``fig`` to ``path`` atomically (``files.write_atomic``: a
    reader never sees a half-written file, an existing file is replaced only with ``force``,
    else FileExistsError; permissions as ``open`` would give); returns the Path. The format is
    the file's suffix (png when it has none) unless ``format=`` is given; other keywords go to
    ``Figure.savefig`` (e.g. ``dpi``)."""
    out = Path(os.fspath(path))
    fmt = savefig_kwargs.pop("format", None) or out.suffix.lstrip(".").lower() or "png"
    return write_atomic(out, lambda f: fig.savefig(f, format=fmt, **savefig_kwargs),
                        force=force)
