"""Secure noise for real releases: OpenDP's exact integer samplers, never numpy.

A release measures the integer answers of the tree (node counts) and adds, per noisy level,
integer noise from OpenDP (Rust core, OS randomness, exact arithmetic, no floating-point
sampling; Mironov 2012 shows why floating-point Laplace leaks):

* Laplace (eps-DP): ``make_laplace(vector_domain(atom_domain(T="i64")), l1_distance(T="i64"),
  scale=b)`` samples the discrete Laplace P(z) ~ exp(-|z| / b) ([GRS12]; [CKS20] Alg. 2). For
  integer queries with l1 sensitivity D its privacy map is D / b -- the same eps as the
  continuous Laplace of scale b, so the mechanism's per-level scales b_l = D_l / eps_l are used
  unchanged.
* Gaussian (rho-zCDP): ``make_gaussian(vector_domain(atom_domain(T="i64")),
  l2_distance(T="f64"), scale=sigma)`` samples the discrete Gaussian P(z) ~ exp(-z^2 /
  (2 sigma^2)) ([CKS20] Alg. 3) -- ``scale`` is sigma itself (OpenDP: "scale == standard
  deviation" of the underlying continuous parameter; the discrete variance is slightly below
  sigma^2, see ``mechanism.discrete_variance``). Its privacy map is D2^2 / (2 sigma^2) for l2
  sensitivity D2 ([CKS20] Thm. 4: the discrete Gaussian on integer shifts has the same zCDP
  bound as the continuous one), so sigma_l = D2_l / sqrt(2 rho_l) is used unchanged.

For every level, before sampling, OpenDP's own privacy map at the level's sensitivity is
checked against the level's budget (an independent account of the calibration). The whole
mechanism's loss (all levels together, rows with different scales) is the sensitivity of
diag(1/scale) A, as for continuous noise, because the answers and their shifts between
neighbours are integers ([CKS20] Thm. 4 and its multivariate form for independent
coordinates; for Laplace the pmf ratio is bounded coordinate-wise by exp(|shift| / b)).

This module takes no ``rng``: there is no way to make a release with simulation noise.
"""

from __future__ import annotations

import numpy as np

from ..mechanism import Mechanism, check_histogram
from ..strategies import IntervalStrategy, KroneckerStrategy

__all__ = ["secure_measure", "sampler_description", "exact_answers"]


def _opendp():
    try:
        import opendp.prelude as odp
    except ImportError:  # pragma: no cover - opendp is a main dependency
        raise ValueError("a release needs OpenDP's secure samplers: pip install opendp") from None
    odp.enable_features("contrib")
    return odp


def sampler_description(noise: str) -> str:
    """One line naming the sampler a release uses for ``noise`` ("laplace" | "gaussian")."""
    from importlib.metadata import version
    fn = "make_laplace" if noise == "laplace" else "make_gaussian"
    dist = "discrete Laplace" if noise == "laplace" else "discrete Gaussian"
    return (f"OpenDP {version('opendp')} {fn} on vector_domain(atom_domain(T=i64)): exact "
            f"{dist} sampler (integer arithmetic, OS randomness)")


def _opendp_measurement(*, noise: str, scale: float, sensitivity: float, budget: float):
    """OpenDP's integer-noise measurement of ``scale`` for one group of rows, after checking
    its privacy map at ``sensitivity`` against ``budget`` (ValueError; nothing drawn)."""
    odp = _opendp()
    if noise == "laplace":
        space = (odp.vector_domain(odp.atom_domain(T="i64")), odp.l1_distance(T="i64"))
        meas = odp.m.make_laplace(*space, scale=float(scale))
        d_in = int(np.ceil(sensitivity - 1e-12))  # tree levels: integer l1 sensitivity
        loss = meas.map(d_in)
    else:
        space = (odp.vector_domain(odp.atom_domain(T="i64")), odp.l2_distance(T="f64"))
        meas = odp.m.make_gaussian(*space, scale=float(scale))
        loss = meas.map(float(sensitivity))
    if loss > budget * (1 + 1e-9):
        raise ValueError(f"calibration error: OpenDP's privacy map gives {loss!r} > level "
                         f"budget {budget!r} at sensitivity {sensitivity!r}, scale {scale!r}")
    return meas


def _opendp_sample(values: np.ndarray, *, noise: str, scale: float, sensitivity: float,
                   budget: float) -> np.ndarray:
    """values + integer noise of ``scale`` from OpenDP, for one group of rows (int64 in,
    int64 out), after checking OpenDP's privacy map (:func:`_opendp_measurement`)."""
    meas = _opendp_measurement(noise=noise, scale=scale, sensitivity=sensitivity,
                               budget=budget)
    return np.asarray(meas(values.tolist()), dtype=np.int64)


def _draw(plan, answers: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y[rows] = answers[rows] + noise for every (rows, sampler arguments) of ``plan``:
    called once every group's measurement has been built and its privacy map checked, so
    nothing is refused after the first noise is drawn."""
    for rows, kw in plan:
        y[rows] = _opendp_sample(answers[rows], **kw)
    return y


def exact_answers(mechanism: Mechanism, histogram) -> np.ndarray:
    """The exact integer answers A h of the released rows (int64, shape (rows,)).

    Interval strategies (trees): int64 cumulative sums, O(rows + bins), exact for any count.
    Kronecker products of 0/1 factors (grid hierarchies): the structured product in float64,
    exact because every partial sum is a count of records <= N < 2^53 (checked).
    Other strategies: the sparse product, checked to be integral."""
    h = check_histogram(histogram, mechanism.n_bins)
    released = mechanism.released
    if isinstance(released, IntervalStrategy):
        c = np.concatenate([[0], np.cumsum(h, dtype=np.int64)])
        return c[released.hi] - c[released.lo]
    if isinstance(released, KroneckerStrategy) and all(
            np.all((f.matrix.data == 0) | (f.matrix.data == 1)) for f in released.factors):
        if float(np.sum(h, dtype=np.float64)) >= 2.0**53:
            raise ValueError("the counts sum to 2^53 or more: not exact in double precision")
        return np.rint(released.apply(h.astype(np.float64))).astype(np.int64)
    a = released.matrix
    if not np.all(a.data == np.round(a.data)):
        raise ValueError("a secure release needs an integer strategy matrix")
    return np.asarray(a @ h, dtype=np.int64)


def secure_measure(mechanism: Mechanism, histogram) -> np.ndarray:
    """Noisy answers y = A h + z of a discrete mechanism, z from OpenDP's exact samplers.

    ``mechanism`` must have ``discrete=True`` (so its variances are those of the noise added
    here). Returns float64 of shape (rows,): exact rows (public total, data-independent levels)
    carry the exact answer, unmeasured rows (budget 0) NaN, every other row an integer. One
    OpenDP call per noisy level; no numpy randomness is used."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if not mechanism.discrete:
        raise ValueError("secure_measure needs a discrete mechanism (Mechanism(..., "
                         "discrete=True) or mech.discretised()): its variances must describe "
                         "the integer noise actually added")
    answers = exact_answers(mechanism, histogram)
    y = answers.astype(float)
    if mechanism.row_budgets is not None:
        return _secure_rows(mechanism, answers, y)
    levels = mechanism.released.levels
    budgets = mechanism.level_budgets
    sens = mechanism.level_sensitivities
    order = np.argsort(levels, kind="stable")          # the rows of each level, in one pass
    bounds = np.searchsorted(levels[order], np.arange(int(levels.max()) + 2))
    plan = []
    for lvl, scale in mechanism.level_scales.items():  # one call per level (tuple)
        rows = order[bounds[lvl]:bounds[lvl + 1]]
        if scale == 0:
            continue  # exact (public or data-independent) rows
        if np.isinf(scale):
            y[rows] = np.nan  # not measured
            continue
        kw = dict(noise=mechanism.noise, scale=scale, sensitivity=sens[lvl],
                  budget=budgets[lvl])
        _opendp_measurement(**kw)  # every check first: nothing refused after a draw
        plan.append((rows, kw))
    return _draw(plan, answers, y)


def _secure_rows(mechanism: Mechanism, answers: np.ndarray, y: np.ndarray) -> np.ndarray:
    """secure_measure for budgets per row: one OpenDP call per distinct (scale, own
    sensitivity), each checked against its rows' budget."""
    scale = mechanism.scales
    sens = mechanism.row_sensitivities
    budget = mechanism.row_budgets
    y[np.isinf(scale)] = np.nan
    noisy = np.flatnonzero(np.isfinite(scale) & (scale > 0))
    keys, inv = np.unique(np.stack([scale[noisy], sens[noisy]]), axis=1, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(keys.shape[1] + 1))
    plan = []
    for g in range(keys.shape[1]):
        rows = noisy[order[bounds[g]:bounds[g + 1]]]
        kw = dict(noise=mechanism.noise, scale=float(keys[0, g]),
                  sensitivity=float(keys[1, g]), budget=float(budget[rows].min()))
        _opendp_measurement(**kw)  # every check first: nothing refused after a draw
        plan.append((rows, kw))
    return _draw(plan, answers, y)
