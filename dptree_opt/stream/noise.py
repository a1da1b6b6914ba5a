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
  Gaussian on a fine dyadic grid, rounded to double) applied to zeros; simulation: numpy.
"""

from __future__ import annotations

import math

import numpy as np

from ..mechanism import discrete_variance
from ..privacy import calibrate

__all__ = ["GroupNoise", "group_variances", "gaussian_vector", "float_gaussian_measurement",
           "check_rng"]


def check_rng(rng):
    """None (secure noise) or a numpy Generator (simulation); ValueError otherwise."""
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be None (secure noise) or a numpy.random.Generator "
                         "(simulation)")
    return rng


def group_variances(noise: str, budgets, secure: bool, sensitivities=None) -> np.ndarray:
    """Per-group noise variances without building any sampler: discrete (secure) or
    continuous (simulation) Laplace / Gaussian calibrated to each group's budget."""
    budgets = np.asarray(budgets, dtype=float)
    sens = np.ones(len(budgets)) if sensitivities is None else np.asarray(sensitivities, float)
    if secure:
        return np.array([discrete_variance(calibrate(d, b, noise)[0], noise)
                         for d, b in zip(sens, budgets)])
    return np.array([calibrate(d, b, noise)[1] for d, b in zip(sens, budgets)])


class GroupNoise:
    """Noise for integer node counts, one scale per group (module docstring).

    ``noise``: "laplace" | "gaussian"; ``budgets``: per-group budget (eps or rho; 0 = the
    group is not measured); ``sensitivities``: per-group sensitivity (l1 for Laplace, l2 for
    Gaussian) of one event, default 1. ``scales``, ``variances``: per group."""

    def __init__(self, noise: str, budgets, rng=None, sensitivities=None):
        self.noise = noise
        self.budgets = np.asarray(budgets, dtype=float)
        sens = (np.ones(len(self.budgets)) if sensitivities is None
                else np.asarray(sensitivities, dtype=float))
        self.sensitivities = sens
        self.scales = np.array([calibrate(d, b, noise)[0] for d, b in zip(sens, self.budgets)])
        self._rng = check_rng(rng)
        self.secure = rng is None
        self.variances = group_variances(noise, self.budgets, self.secure, sens)
        if self.secure:
            from ..data_release.secure_noise import _opendp_measurement
            self._measurements = [
                None if not (math.isfinite(s) and s > 0) else
                _opendp_measurement(noise=noise, scale=s, sensitivity=d, budget=b)
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
            return float(self._measurements[group]([int(count)])[0])
        z = (self._rng.laplace(0.0, s) if self.noise == "laplace"
             else self._rng.normal(0.0, s))
        return count + float(z)


def float_gaussian_measurement(sigma: float):
    """OpenDP's float Gaussian measurement of scale ``sigma`` on float vectors (l2 distance):
    an exact discrete Gaussian on a fine dyadic grid, rounded to double (OpenDP docs)."""
    from ..data_release.secure_noise import _opendp
    odp = _opendp()
    return odp.m.make_gaussian(odp.vector_domain(odp.atom_domain(T=float, nan=False)),
                               odp.l2_distance(T=float), scale=float(sigma))


def gaussian_vector(sigma: float, size: int, rng=None) -> np.ndarray:
    """``size`` i.i.d. N(0, sigma^2) draws (float64): OpenDP's float Gaussian on zeros when
    ``rng`` is None (secure), else ``rng.normal``. The caller checks the privacy of what the
    draws protect (the strategy's l2 sensitivity times 1 / sigma)."""
    check_rng(rng)
    if size == 0:
        return np.zeros(0)
    if rng is not None:
        return rng.normal(0.0, sigma, size)
    return np.asarray(float_gaussian_measurement(sigma)([0.0] * int(size)), dtype=float)
