"""Where the noise of :class:`dptree_opt.stream.CorrelatedNoise` comes from: the strategy's
row noise z (one (dim,) vector per released row, with the mechanism's scale), drawn when a
generator asks for the rows it needs (docs/math.md section 11).

* :class:`OpenDPSource` (``secure=True``): OpenDP's float samplers, ``make_gaussian`` /
  ``make_laplace`` on ``vector_domain(atom_domain(T=float, nan=False))`` with the l2 / l1
  distance (an exact discrete Gaussian / Laplace on a fine dyadic grid, rounded to double;
  OS randomness), applied to zeros, one measurement per distinct row scale, each built and its
  privacy map checked before anything is drawn: OpenDP must charge at most 1/2 (Gaussian,
  rho) or 1 (Laplace, epsilon) for a query of sensitivity equal to the scale, the per-unit loss
  from which the mechanism computed its guarantee. What it cannot provide: the correlation
  B z and the training loop's sums are computed in double precision (floating-point effects of
  that post-processing are not analysed), and it is slow, about 50 us per Gaussian coordinate
  (measured with opendp 0.16: ~50 s per step at dim 10^6), so it suits small models; OpenDP has
  no fast vector sampler for training-sized noise.
* :class:`SimulationSource` (a numpy ``Generator``): numpy's normal / Laplace draws,
  SIMULATION noise with no privacy guarantee (labelled so everywhere).
* :class:`InjectedSource` (``noise_source=``): the caller's function ``rows -> (len(rows), dim)``
  array, for tests and reproducible studies (simulation: no guarantee).

Sources holding OpenDP samplers refuse copying and pickling
(:class:`~dptree_opt.stream.secret.SecretState`).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..data_release import secure_noise
from .noise import check_rng, float_gaussian_measurement
from .secret import SecretState

if TYPE_CHECKING:
    from opendp.mod import Measurement

__all__ = ["NoiseSource", "OpenDPSource", "SimulationSource", "InjectedSource", "RowsSource",
           "MAX_SECURE_SCALES", "RowNoise"]

_F: TypeAlias = "npt.NDArray[np.float64]"
#: a noise_source hook: released row indices (int64, shape (k,)) -> z, shape (k, dim)
RowNoise: TypeAlias = "Callable[[npt.NDArray[np.int64]], ArrayLike]"
# one OpenDP measurement per distinct row scale: budgets per node can give one per row
MAX_SECURE_SCALES = 4096
# OpenDP's per-unit loss of noise whose scale equals the sensitivity
_UNIT_LOSS = {"gaussian": 0.5, "laplace": 1.0}


class NoiseSource(SecretState):
    """Row noise for a generator: ``draw(rows)`` returns z for the released ``rows`` (shape
    (len(rows), dim)), row r with the mechanism's scale ``scales[r]`` (0 for an exact row and
    for an unmeasured one, whose weight is 0). ``label`` says what the noise is."""

    label: str
    secure: bool

    def __init__(self, scales: ArrayLike, noise: str, dim: int) -> None:
        s = np.asarray(scales, dtype=float)
        self.noise, self.dim = noise, int(dim)
        self._scales = np.where(np.isfinite(s), s, 0.0)

    def draw(self, rows: npt.NDArray[np.int64]) -> _F:
        """z for ``rows``, shape (len(rows), dim), float64."""
        raise NotImplementedError


class SimulationSource(NoiseSource):
    """numpy draws (SIMULATION, no privacy guarantee): scale x standard normal / Laplace."""

    def __init__(self, scales: ArrayLike, noise: str, dim: int,
                 rng: np.random.Generator) -> None:
        super().__init__(scales, noise, dim)
        rng_checked = check_rng(rng)
        assert rng_checked is not None
        self._rng = rng_checked
        self.secure = False
        self.label = ("numpy simulation (Generator.standard_normal; no privacy guarantee)"
                      if noise == "gaussian" else
                      "numpy simulation (Generator.laplace; no privacy guarantee)")

    def draw(self, rows: npt.NDArray[np.int64]) -> _F:
        shape = (rows.size, self.dim)
        unit = (self._rng.standard_normal(shape) if self.noise == "gaussian"
                else self._rng.laplace(0.0, 1.0, shape))
        unit *= self._scales[rows][:, None]
        return unit


class InjectedSource(NoiseSource):
    """The caller's row noise (``noise_source=``): ``function(rows)`` must return a finite
    array of shape (len(rows), dim). Simulation: no privacy guarantee."""

    def __init__(self, scales: ArrayLike, noise: str, dim: int, function: RowNoise) -> None:
        if not callable(function):
            raise ValueError("noise_source must be a function rows -> (len(rows), dim) array")
        super().__init__(scales, noise, dim)
        self._function = function
        self.secure = False
        self.label = "injected by the caller (noise_source; simulation, no privacy guarantee)"

    def draw(self, rows: npt.NDArray[np.int64]) -> _F:
        try:
            z = np.array(self._function(rows.copy()), dtype=float)
        except (TypeError, ValueError):
            raise ValueError("noise_source must return an array of numbers") from None
        if z.shape != (rows.size, self.dim):
            raise ValueError(f"noise_source returned shape {z.shape} for {rows.size} rows, "
                             f"expected ({rows.size}, {self.dim})")
        if not np.all(np.isfinite(z)):
            raise ValueError("noise_source returned non-finite noise")
        return z


def float_laplace_measurement(scale: float) -> Measurement:
    """OpenDP's float Laplace measurement of ``scale`` on float vectors (l1 distance)."""
    odp = secure_noise.opendp_prelude()
    return odp.m.make_laplace(odp.vector_domain(odp.atom_domain(T=float, nan=False)),
                              odp.l1_distance(T=float), scale=float(scale))


class OpenDPSource(NoiseSource):
    """OpenDP's float Gaussian / Laplace on zeros (module docstring): one measurement per
    distinct positive scale, built and checked at construction (ValueError; nothing drawn)."""

    def __init__(self, scales: ArrayLike, noise: str, dim: int) -> None:
        super().__init__(scales, noise, dim)
        self.secure = True
        positive = self._scales > 0
        distinct, inverse = np.unique(self._scales[positive], return_inverse=True)
        if distinct.size > MAX_SECURE_SCALES:
            raise ValueError(f"secure: the mechanism has {distinct.size} distinct noise scales; "
                             f"secure noise builds one OpenDP sampler per scale (at most "
                             f"{MAX_SECURE_SCALES}): use budgets per level, or simulation "
                             "noise (rng=)")
        self._group = np.full(self._scales.size, -1, dtype=np.int64)
        self._group[positive] = inverse
        make = float_gaussian_measurement if noise == "gaussian" else float_laplace_measurement
        self._measurements = []
        for s in distinct:
            meas = make(float(s))
            loss = meas.map(float(s))
            if loss > _UNIT_LOSS[noise] * (1 + 1e-9):
                raise ValueError(f"calibration error: OpenDP's privacy map charges {loss!r} for "
                                 f"noise of scale {s!r} at sensitivity {s!r}, more than the "
                                 f"{_UNIT_LOSS[noise]} the mechanism's account assumes")
            self._measurements.append(meas)
        what = "make_gaussian, l2_distance" if noise == "gaussian" else "make_laplace, l1_distance"
        self.label = (f"OpenDP {version('opendp')} {what} on vector_domain(atom_domain(T=float, "
                      "nan=False)): exact sampler on a fine dyadic grid rounded to double, OS "
                      "randomness, applied to zeros")

    def draw(self, rows: npt.NDArray[np.int64]) -> _F:
        out = np.zeros((rows.size, self.dim))
        groups = self._group[rows]
        for g in np.unique(groups[groups >= 0]):          # over noise scales, not rows
            sel = np.flatnonzero(groups == g)
            values = self._measurements[int(g)]([0.0] * (sel.size * self.dim))
            out[sel] = np.asarray(values, dtype=float).reshape(sel.size, self.dim)
        return out


class RowsSource(NoiseSource):
    """Another source's noise seen through a row map: ``draw(rows)`` draws the parent's rows
    ``row_map[rows]`` (a copy of a restarted strategy sees its own rows from 0)."""

    def __init__(self, parent: NoiseSource, row_map: npt.NDArray[np.int64]) -> None:
        self._parent = parent
        self._map = np.asarray(row_map, dtype=np.int64)
        self.noise, self.dim = parent.noise, parent.dim
        self.secure, self.label = parent.secure, parent.label

    def draw(self, rows: npt.NDArray[np.int64]) -> _F:
        return self._parent.draw(self._map[rows])
