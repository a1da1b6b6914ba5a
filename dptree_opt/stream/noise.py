"""Noise for streaming counters: secure (OpenDP) for real use, numpy for simulation.

Two kinds, shared by every counter in :mod:`dptree_opt.stream`:

* :class:`GroupNoise`: integer counts of tree nodes, one (scale, budget, sensitivity) per group
  of nodes (a tree level). Secure (``rng=None``): OpenDP's exact discrete Laplace / discrete
  Gaussian on integers ([GRS12], [CKS20]); every group's measurement is built and its privacy
  map checked against the group's budget when the noise object is made (nothing is drawn
  before every check passes), and ``variances`` are those of the discrete noise
  (:func:`dptree_opt.mechanism.discrete_variance`). Simulation (a numpy ``Generator``):
  continuous Laplace / Gaussian, variances 2 b^2 / sigma^2.
* :func:`gaussian_vector`: i.i.d. N(0, sigma^2) draws for factorisation counters, whose noise
  is correlated afterwards (z -> B z). Secure: OpenDP's float Gaussian (an exact discrete
  Gaussian on a fine dyadic grid, rounded to double) applied to zeros, from the measurement
  :func:`checked_float_gaussian` built and checked once; simulation: numpy.

Budget sanity (:func:`dptree_opt.privacy.check_noise_scales`), secure and simulation alike:
``GroupNoise`` refuses, before any measurement is built, a group whose discrete noise is
identically 0 in double precision or whose scale x NOISE_TAIL reaches 2^53 (the rule of the
releases; a simulation is refused whatever the secure counter would refuse, so studies never
report numbers for budgets the real counter cannot run).

Noise objects hold secure sampler state: they refuse copying and pickling
(:mod:`~dptree_opt.stream.secret`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

# the releases' samplers (OpenDP's checked integer measurements), looked up when called
from ..data_release import secure_noise
from ..mechanism import discrete_variance, discrete_variances
from ..privacy import calibrate, check_noise_scales
from .secret import SecretState

if TYPE_CHECKING:
    from opendp.mod import Measurement

__all__ = ["GroupNoise", "group_variances", "gaussian_vector", "float_gaussian_measurement",
           "checked_float_gaussian", "check_group_scales", "check_rng"]


def check_rng(rng: object) -> np.random.Generator | None:
    """None (secure noise) or a numpy Generator (simulation); ValueError otherwise."""
    if rng is None or isinstance(rng, np.random.Generator):
        return rng
    raise ValueError("rng must be None (secure noise) or a numpy.random.Generator "
                     "(simulation)")


def group_variances(noise: str, budgets: ArrayLike, secure: bool,
                    sensitivities: ArrayLike | None = None) -> npt.NDArray[np.float64]:
    """Per-group noise variances without building any sampler: discrete (secure) or
    continuous (simulation) Laplace / Gaussian calibrated to each group's budget."""
    budgets = np.asarray(budgets, dtype=float)
    sens = np.ones(len(budgets)) if sensitivities is None else np.asarray(sensitivities, float)
    if secure:
        return np.array([discrete_variance(calibrate(d, b, noise)[0], noise)
                         for d, b in zip(sens, budgets)])
    return np.array([calibrate(d, b, noise)[1] for d, b in zip(sens, budgets)])


def check_group_scales(noise: str, scales: ArrayLike, *, budget: float, groups: Sequence[str],
                       group_budgets: ArrayLike | None = None,
                       min_variance: float = 0.0) -> None:
    """Refuse integer-noise groups of ``scales`` whose discrete noise (OpenDP's, secure or
    simulated alike) is identically 0 (or has a variance below ``min_variance``) or
    saturates; ``budget`` is the counter's total (epsilon for Laplace, rho for Gaussian),
    ``groups`` / ``group_budgets`` name the groups in the message
    (:func:`dptree_opt.privacy.check_noise_scales`)."""
    scales = np.asarray(scales, dtype=float)
    with np.errstate(all="ignore"):      # extreme scales: inf / 0 variances are the point
        variances = discrete_variances(scales, noise)
    check_noise_scales(scales, variances, budget_name="epsilon" if noise == "laplace" else "rho",
                       budget=budget, groups=groups, group_budgets=group_budgets,
                       min_variance=min_variance)


class GroupNoise(SecretState):
    """Noise for integer node counts, one scale per group (module docstring).

    ``noise``: "laplace" | "gaussian"; ``budgets``: per-group budget (eps or rho; 0 = the
    group is not measured); ``sensitivities``: per-group sensitivity (l1 for Laplace, l2 for
    Gaussian) of one event, default 1; ``total``: the counter's whole budget and ``groups``:
    the groups' names, for the budget-sanity message (default the sum, "level i");
    ``min_variance``: the smallest variance a measured group may have (``sys.float_info.min``
    for estimators that weigh by the variances). ``scales``, ``variances``: per group. Budget
    sanity is checked before any OpenDP measurement is built (module docstring)."""

    def __init__(self, noise: str, budgets: ArrayLike, rng: np.random.Generator | None = None,
                 sensitivities: ArrayLike | None = None, *, total: float | None = None,
                 groups: Sequence[str] | None = None, min_variance: float = 0.0) -> None:
        self.noise = noise
        self.budgets = np.asarray(budgets, dtype=float)
        sens = (np.ones(len(self.budgets)) if sensitivities is None
                else np.asarray(sensitivities, dtype=float))
        self.sensitivities = sens
        self.scales = np.array([calibrate(d, b, noise)[0] for d, b in zip(sens, self.budgets)])
        self._rng = check_rng(rng)
        self.secure = rng is None
        check_group_scales(noise, self.scales,
                           budget=float(self.budgets.sum()) if total is None else total,
                           groups=(groups if groups is not None else
                                   [f"level {i}" for i in range(len(self.scales))]),
                           group_budgets=self.budgets, min_variance=min_variance)
        self.variances = group_variances(noise, self.budgets, self.secure, sens)
        self._measurements: list[Measurement | None] | None
        if self.secure:
            self._measurements = [
                None if not (math.isfinite(s) and s > 0) else
                secure_noise.opendp_measurement(noise=noise, scale=s, sensitivity=d, budget=b)
                for s, d, b in zip(self.scales, sens, self.budgets)]
        else:
            self._measurements = None

    def draw(self, group: int, count: int) -> float:
        """``count`` (an exact integer) plus one draw of group ``group``'s noise; NaN when the
        group is not measured (infinite scale)."""
        s = self.scales[group]
        if not math.isfinite(s):
            return math.nan
        if s == 0:
            return float(count)
        if self._measurements is not None:
            meas = self._measurements[group]
            assert meas is not None  # a finite positive scale has its measurement
            return float(meas([int(count)])[0])
        assert self._rng is not None  # not secure: a Generator
        z = (self._rng.laplace(0.0, s) if self.noise == "laplace"
             else self._rng.normal(0.0, s))
        return count + float(z)


def float_gaussian_measurement(sigma: float) -> Measurement:
    """OpenDP's float Gaussian measurement of scale ``sigma`` on float vectors (l2 distance):
    an exact discrete Gaussian on a fine dyadic grid, rounded to double (OpenDP docs)."""
    odp = secure_noise.opendp_prelude()
    return odp.m.make_gaussian(odp.vector_domain(odp.atom_domain(T=float, nan=False)),
                               odp.l2_distance(T=float), scale=float(sigma))


def checked_float_gaussian(sigma: float, sensitivity: float, rho: float) -> Measurement:
    """:func:`float_gaussian_measurement` of scale ``sigma`` after checking OpenDP's privacy
    map at the l2 ``sensitivity`` against ``rho`` (ValueError; nothing drawn)."""
    meas = float_gaussian_measurement(sigma)
    loss = meas.map(float(sensitivity))
    if loss > rho * (1 + 1e-9):
        raise ValueError(f"calibration error: OpenDP's privacy map gives {loss!r} > "
                         f"rho = {rho!r}")
    return meas


def gaussian_vector(sigma: float, size: int, rng: np.random.Generator | None = None,
                    measurement: Measurement | None = None) -> npt.NDArray[np.float64]:
    """``size`` i.i.d. N(0, sigma^2) draws (float64): ``rng.normal`` when ``rng`` is a
    Generator (simulation), else OpenDP's float Gaussian on zeros: ``measurement``, of scale
    sigma, from :func:`checked_float_gaussian` (its privacy map checked when the counter was
    made; required on the secure path)."""
    check_rng(rng)
    if size == 0:
        return np.zeros(0)
    if rng is not None:
        return rng.normal(0.0, sigma, size)
    if measurement is None:
        raise ValueError("measurement: secure draws need the OpenDP measurement built and "
                         "checked when the counter was made")
    return np.asarray(measurement([0.0] * int(size)), dtype=float)
