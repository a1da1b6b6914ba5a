"""The BLUE on the implicit Gaussian optimum (:class:`~dptree_opt.strategies.implicit_optimum.
ImplicitFactorization`): a square invertible strategy, so with one noise variance v on its n
rows the BLUE from those rows is x = A^-1 y (``ImplicitFactorization.solve``, quadratures
over tridiagonal resolvents, O(n) per node). Total rows (N public under swap, or measured
with noise) add the rank-one step of the constrained / combined GLS, as on Toeplitz
strategies: x - h (1'x - N^) / (q + r) with h = Cov(x, 1'x) / v (``total_cov``),
q = 1'h and r = v_N / v (0 for an exact N)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..mechanism import Mechanism
from ..workloads import Workload
from ..strategies.implicit_optimum import ImplicitFactorization
from .base import ANY_WORKLOAD, Capability, Engine
from .toeplitz import square_core_mechanism, total_observation, total_rows_ratio

__all__ = ["ImplicitEngine", "is_implicit_mechanism", "implicit_blue", "implicit_parameters",
           "implicit_error"]


def is_implicit_mechanism(mechanism: Mechanism) -> bool:
    """Whether the A^-1 y path applies: an ImplicitFactorization whose n rows share one
    finite variance v > 0 (total rows: exact, noisy or unmeasured)."""
    return square_core_mechanism(mechanism, ImplicitFactorization)


def implicit_parameters(mechanism: Mechanism) -> tuple[ImplicitFactorization, float, float | None,
                                                      npt.NDArray[np.float64]]:
    """(strategy, v, r, h): r = v_N / v or None (no total measured), h the unit-variance
    Cov(x^, 1'x^) of the unconstrained BLUE."""
    if not is_implicit_mechanism(mechanism):
        raise ValueError("the implicit-optimum paths need an ImplicitFactorization whose rows "
                         "share one finite noise variance")
    strat = mechanism.released
    assert isinstance(strat, ImplicitFactorization)  # is_implicit_mechanism checked it
    v = float(mechanism.variances[0])
    m = strat.moments()
    h = m["total_cov"]  # rescaled so 1'h = Var(N^) / v exactly as the prefix moments give it
    return strat, v, total_rows_ratio(mechanism, v), h * (float(m["prefix"][-1]) / float(h.sum()))


def implicit_blue(mechanism: Mechanism, y: ArrayLike) -> npt.NDArray[np.float64]:
    """x_hat: shape (n,), or (trials, n) for y of shape (rows,) or (trials, rows)."""
    strat, _, r, h = implicit_parameters(mechanism)
    y = np.asarray(y, dtype=float)
    if y.shape[-1] != strat.n_rows or y.ndim not in (1, 2):
        raise ValueError(f"y must have shape ({strat.n_rows},) or (trials, {strat.n_rows}), "
                         f"got {y.shape}")
    n = strat.n_bins
    tv = np.asarray(mechanism.variances[n:])
    measured = np.concatenate([np.ones(n, bool), np.isfinite(tv)])
    if not np.all(np.isfinite(y[..., measured])):
        raise ValueError("y has NaN or infinite values on measured rows")
    flat = y.reshape(-1, y.shape[-1])
    x = strat.solve(flat[:, :n].T).T
    if r is not None:
        resid = x.sum(axis=-1) - total_observation(mechanism, flat)
        x = x - np.multiply.outer(resid, h / (float(h.sum()) + r))
    return x.reshape(y.shape[:-1] + (n,))


def implicit_error(mechanism: Mechanism, kind: str,
                   per_query: bool) -> float | npt.NDArray[np.float64]:
    """Exact BLUE errors on the implicit optimum from its quadrature moments, minus the
    rank-one term of the total rows (Cov_c = C - h h' / (q + r))."""
    strat, v, r, h = implicit_parameters(mechanism)
    m = strat.moments()
    cum = np.concatenate([[0.0], np.cumsum(h)])  # Cov(X_p, 1'x^) at the cut points p = 0..n
    den = None if r is None else float(cum[-1]) + r
    if kind == "all_range":
        total = m["all_range_total"]
        if den is not None:  # sum_(a<b) (w_b - w_a)^2 = (n + 1) sum w^2 - (sum w)^2
            total -= ((cum.size * float(cum @ cum) - float(cum.sum()) ** 2) / den)
        return v * total
    if kind == "identity":
        var, corr = m["identity"], h
    else:
        var, corr = m["prefix"], cum[1:]
        if kind == "total":
            var, corr = var[-1:], corr[-1:]
    if den is not None:
        var = var - corr * corr / den
    var = v * np.maximum(var, 0.0)
    return var if per_query else float(var.sum())


class ImplicitEngine(Engine):
    """The implicit Gaussian optimum (``strategies.implicit_optimum``): the BLUE A^-1 y and
    exact errors from quadratures over tridiagonal resolvents, no n x n matrix."""

    name = "implicit"
    structure = "the implicit Gaussian optimum (ImplicitFactorization), one noise scale"
    capabilities = (
        Capability("estimate", "blue", (ANY_WORKLOAD,), "O(n) per node per trial"),
        Capability("error", "blue", ("prefix", "identity", "total", "all_range"),
                   "O(n) per node"),
        Capability("per_query", "blue", ("prefix", "identity", "total"), "O(n) per node"),
    )

    def claims(self, mechanism: Mechanism) -> bool:
        return is_implicit_mechanism(mechanism)

    def estimate(self, mechanism: Mechanism, y: npt.NDArray[np.float64],
                 workload: Workload | None, estimator: str) -> npt.NDArray[np.float64]:
        return implicit_blue(mechanism, y)

    def error(self, mechanism: Mechanism, workload: Workload, estimator: str, per_query: bool,
              dense: bool = False) -> float | npt.NDArray[np.float64]:
        return implicit_error(mechanism, workload.kind, per_query)
