"""Correlated noise for private training loops (DP-FTRL / DP-MF): ``CorrelatedNoise``
(docs/math.md sections 9 and 11).

In DP-FTRL and matrix-factorisation training (Kairouz et al. 2021; Denisov et al. 2022;
Choquette-Choo et al. 2023) step t adds noise to the running sum s_t = g_1 + .. + g_t of the
clipped gradients (each of shape (dim,)), and the model is a function of the noisy sums.
``CorrelatedNoise(strategy, dim, rho=..., participation=...)`` is an iterator: ``next(noise)``
returns noise_t (shape (dim,), float64) such that s_t + noise_t is EXACTLY the mechanism's
estimate of the running sum after t steps: noise_t = (B z)_t with z the strategy's row noise
at the mechanism's scales (one (dim,) vector per row, independent over coordinates) and B the
estimator's map from the rows to the running sums (the prefix workload). Each coordinate
therefore has the variance of :func:`dptree_opt.expected_error` per query
(:meth:`CorrelatedNoise.step_variances`).

The mechanism is ``Mechanism(strategy, rho= | epsilon=, participation=...)``: its noise is
calibrated to the participation schema (a user's gradients enter up to k steps), with
``participation.vector`` contributions of l2 norm (Gaussian) or l1 norm (Laplace) at most 1
per step: clip to norm 1, or multiply the noise by your clip norm. ``.rho`` / ``.epsilon``,
``.participation`` and ``.sensitivity`` are the mechanism's account.

The generator is chosen by structure from a small registry
(:mod:`~dptree_opt.stream.correlated_generators`): BLT (buffer recurrence, O(buffers x dim)
memory), explicit lower-triangular / banded factorisations (forward substitution over the
last bands - 1 steps), trees (Honaker's bottom-up causal BLUE or covering sums, O(log n)
vectors), restarted strategies (the block's generator per copy, plus the finished copies'
totals), general Toeplitz such as the square root (every past draw: O(n x dim), refused
beyond the memory limit) and, for estimator "blue" on any strategy whose BLUE is not causal,
the offline BLUE with its noise drawn ahead (O((rows + n) x dim)). Every check (dim,
budget, participation, estimator, memory by arithmetic, OpenDP's privacy maps) runs when the
object is made, before the first draw; after the horizon ``next`` raises StopIteration.

Noise (:mod:`~dptree_opt.stream.correlated_sources`). ``secure=True`` (the default when no
``rng`` is given): OpenDP's float Gaussian / Laplace on float vectors; the correlation B z is
then computed in double precision (the guarantee is that of the real-valued mechanism;
floating-point effects of the post-processing are not analysed), and it is slow (~50 us per
coordinate with opendp 0.16). ``rng=`` a numpy Generator: SIMULATION noise, no privacy
guarantee (``describe()`` says so). ``noise_source=`` a function rows -> (len(rows), dim):
the caller's z (tests, reproducible studies; simulation).

A secure generator holds sampler state and noise kept for later steps: it refuses copying
and pickling (:mod:`~dptree_opt.stream.secret`: a checkpoint restored twice would replay the
noise with other gradients). Checkpoint the released model instead, and continue with a new
generator (a new budget) for the remaining steps.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..engines import ESTIMATORS
from ..error import expected_error
from ..limits import check_memory, format_bytes
from ..mechanism import Mechanism
from ..participation import Participation, Sensitivity
from ..strategies import Strategy
from ..validation import check_bool, check_choice, check_int
from ..workloads import prefix
from .correlated_generators import NoiseGenerator, select_generator
from .correlated_sources import (InjectedSource, NoiseSource, OpenDPSource, RowNoise,
                                 SimulationSource)
from .noise import check_rng
from .secret import SecretState

__all__ = ["CorrelatedNoise", "CORRELATED_ESTIMATORS"]

#: estimators: "auto" is the structure's streaming default (module docstring)
CORRELATED_ESTIMATORS = ("auto",) + tuple(ESTIMATORS)


def _mechanism(source: object, rho: float | None, epsilon: float | None,
               participation: Participation | None) -> Mechanism:
    """The mechanism: built from a Strategy (with the budget and schema), a Mechanism as it
    is, or a design's ``.mechanism()`` (rebuilt on its strategy when a budget or schema is
    given)."""
    if isinstance(source, Strategy):
        if rho is None and epsilon is None:
            raise ValueError("give rho= (Gaussian, zCDP) or epsilon= (Laplace, pure DP)")
        return Mechanism(source, rho=rho, epsilon=epsilon, participation=participation)
    if not isinstance(source, Mechanism):
        make = getattr(source, "mechanism", None)
        mech = make() if callable(make) else None
        if not isinstance(mech, Mechanism):
            raise ValueError("strategy_or_design must be a Strategy, a Mechanism, or a design "
                             f"with .mechanism(); got {type(source).__name__}")
        if rho is None and epsilon is None and participation is None:
            return mech
        return Mechanism(mech.strategy, rho=rho, epsilon=epsilon, participation=participation)
    if rho is not None or epsilon is not None or participation is not None:
        raise ValueError("strategy_or_design is a Mechanism, already calibrated: do not give "
                         "rho, epsilon or participation (or pass its strategy instead)")
    return source


class CorrelatedNoise(SecretState):
    """Iterator of the noise to add to each step's running sum of clipped gradients (module
    docstring).

    Parameters
    ----------
    strategy_or_design : Strategy | Mechanism | design with ``.mechanism()``
        The strategy over the n training steps (n = its number of bins = the horizon).
    dim : int
        Coordinates per step (the model size).
    rho, epsilon : float
        The budget (zCDP with Gaussian noise, or pure DP with Laplace noise); not with a
        Mechanism.
    participation : Participation, optional
        ``participation.single()`` (default), ``fixed_epoch(k, b)``, ``min_sep(k, b)``.
    estimator : "auto" | "blue" | "causal" | "covering"
        "auto": the structure's streaming estimator (module docstring).
    rng : numpy Generator, optional
        Simulation noise (no privacy guarantee).
    secure : bool, optional
        Default: True without ``rng`` / ``noise_source``. True: OpenDP's samplers.
    noise_source : function, optional
        rows (int64 array) -> z for those released rows, shape (len(rows), dim) (tests,
        studies; simulation).

    Examples
    --------
    >>> import numpy as np
    >>> from dptree_opt import strategies, participation
    >>> from dptree_opt.stream import CorrelatedNoise
    >>> blt = strategies.blt(8, theta=[0.9, 0.5], omega=[0.3, 0.2])
    >>> noise = CorrelatedNoise(blt, 3, rho=0.5, participation=participation.fixed_epoch(2, 4),
    ...                         rng=np.random.default_rng(0))
    >>> noise.horizon, noise.structure
    (8, 'toeplitz')
    >>> sum(1 for _ in noise)
    8
    """

    def __init__(self, strategy_or_design: object, dim: int, *, rho: float | None = None,
                 epsilon: float | None = None, participation: Participation | None = None,
                 estimator: str = "auto", rng: np.random.Generator | None = None,
                 secure: bool | None = None, noise_source: RowNoise | None = None) -> None:
        dim = check_int(dim, "dim", 1)
        estimator = check_choice(estimator, "estimator", CORRELATED_ESTIMATORS)
        rng = check_rng(rng)
        secure = check_bool(secure, "secure", none=True)
        if secure is None:
            secure = rng is None and noise_source is None
        if secure and (rng is not None or noise_source is not None):
            raise ValueError("secure=True draws OpenDP noise: do not give rng or noise_source "
                             "(those are simulation noise)")
        if rng is not None and noise_source is not None:
            raise ValueError("give rng or noise_source, not both")
        mech = _mechanism(strategy_or_design, rho, epsilon, participation)
        if mech.discrete:
            raise ValueError("strategy_or_design: the mechanism adds integer (discrete) noise; "
                             "training noise is real-valued: use discrete=False")
        cls, est = select_generator(mech, estimator)
        need = cls.nbytes(mech, est, dim)
        check_memory(need, f"the {cls.name} noise generator ({cls.memory(mech, est)}, dim = "
                     f"{dim}, n = {mech.n_bins} steps)",
                     "use a strategy with a finite-state recurrence (BLT, banded) or a tree, "
                     "fewer steps or a smaller dim")
        self.secure = bool(secure)
        src: NoiseSource
        if noise_source is not None:
            src = InjectedSource(mech.scales, mech.noise, dim, noise_source)
        elif secure:
            src = OpenDPSource(mech.scales, mech.noise, dim)   # built and checked here
        else:
            src = SimulationSource(mech.scales, mech.noise, dim,
                                   rng if rng is not None else np.random.default_rng())
        self._mechanism = mech
        self._estimator = est
        self._generator: NoiseGenerator = cls(mech, est, src)   # ValueError: nothing drawn
        self._bytes = need
        self._source = src
        self.dim = dim
        self.steps_taken = 0

    # ------------------------------------------------------------- iteration
    def __iter__(self) -> CorrelatedNoise:
        return self

    def __next__(self) -> npt.NDArray[np.float64]:
        if self.steps_taken >= self.horizon:
            raise StopIteration
        out = self._generator.step()
        self.steps_taken += 1
        return out

    # ------------------------------------------------------------- account
    @property
    def mechanism(self) -> Mechanism:
        """The calibrated mechanism whose estimate the noisy running sums are."""
        return self._mechanism

    @property
    def participation(self) -> Participation:
        """The participation schema the noise is calibrated to."""
        return self._mechanism.participation

    @property
    def sensitivity(self) -> Sensitivity:
        """The mechanism's sensitivity under the schema (exact, or a certified bound)."""
        return self._mechanism.sensitivity

    @property
    def rho(self) -> float | None:
        """The zCDP guarantee (Gaussian noise), the mechanism's; None for Laplace."""
        return self._mechanism.rho

    @property
    def epsilon(self) -> float | None:
        """The pure-DP guarantee (Laplace noise), the mechanism's; None for Gaussian."""
        return self._mechanism.epsilon

    @property
    def horizon(self) -> int:
        """The number of steps n (the strategy's bins)."""
        return self._mechanism.n_bins

    @property
    def estimator(self) -> str:
        """The estimator whose noise is streamed ("auto" resolved)."""
        return self._estimator

    @property
    def structure(self) -> str:
        """The generator's name in the registry."""
        return self._generator.name

    @property
    def memory_bytes(self) -> int:
        """The memory the generator was checked for (bytes, by arithmetic)."""
        return self._bytes

    def step_variances(self) -> npt.NDArray[np.float64]:
        """Exact variance of each coordinate of noise_t, t = 1..n (shape (n,)): the
        mechanism's per-query error on the prefix workload with this estimator
        (:func:`dptree_opt.expected_error`, ``per_query=True``)."""
        return np.asarray(expected_error(prefix(self.horizon), self._mechanism,
                                         self._estimator, per_query=True), dtype=float)

    def describe(self) -> str:
        """The account, the generator and the noise, in words."""
        cls = type(self._generator)
        mech = self._mechanism
        budget = (f"rho = {mech.rho:.6g} (zCDP)" if mech.noise == "gaussian"
                  else f"epsilon = {mech.epsilon:.6g} (pure DP)")
        sens = mech.sensitivity
        noisy = mech.scales[np.isfinite(mech.scales) & (mech.scales > 0)]
        kind = "sigma" if mech.noise == "gaussian" else "Laplace scale"
        scales = (f"{kind} {noisy.min():.6g}" if noisy.min() == noisy.max()
                  else f"{kind} from {noisy.min():.6g} to {noisy.max():.6g}")
        lines = [
            f"correlated {mech.noise} noise for running sums: {self.horizon} steps x "
            f"{self.dim} coordinates, {budget}, {mech.participation.describe()}",
            f"row noise: {scales}; the scaled strategy's sensitivity is {sens.value:.6g} "
            f"({'exact' if sens.exact else 'a certified upper bound'}: {sens.method})",
            f"clip each step's contribution to {'l2' if mech.noise == 'gaussian' else 'l1'} "
            "norm 1, or multiply the noise by the clip norm",
            f"generator: {cls.name} ({cls.structure}); estimator {self._estimator}; memory "
            f"{cls.memory(mech, self._estimator)}, about {format_bytes(self._bytes)}",
            f"noise: {self._source.label}",
        ]
        if self.secure:
            lines.append("caveat: B z and the sums are computed in double precision; the "
                         "guarantee is that of the real-valued mechanism")
        else:
            lines.append("SIMULATION noise: no privacy guarantee")
        lines.append(f"steps taken: {self.steps_taken} of {self.horizon}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<CorrelatedNoise {self._generator.name}, {self._estimator}, "
                f"{self.steps_taken}/{self.horizon} steps x {self.dim}, "
                f"{'secure' if self.secure else 'simulation'}>")
