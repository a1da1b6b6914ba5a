"""The comparison's lower bounds, 1-D and grids: every row's "/bound" ratio divides by these.

The SVD bound (Li & Miklau, "Measuring the achievable error of query sets under
differential privacy", 2012): every Gaussian matrix mechanism with sigma^2 = 1 per unit l2
sensitivity has total squared error at least ||W||_*^2 / n (N private), or ||W P||_*^2 / n
(add/remove) / 2 ||W P||_*^2 / (n - 1) (swap) with N public, P = I - 11'/n
(``dptree_opt.bounds.svd_bound``, docs/math.md section 6). In counts^2 it is divided by
2 rho (Gaussian); under Laplace noise 2 / eps^2 times it is valid but loose (l1 >= l2).

* 1-D: ``bounds.error_lower_bound`` on the prefix, identity and all-range workloads.
* Grids (docs/math.md section 8): for a Kronecker workload with N private the bound factorises,
  ||W||_*^2 / n = prod_i ||W_i||_*^2 / n_i (the singular values of W_1 x W_2 are the products
  of theirs; 37.308 per unit sigma^2 per query for the 2-D CDF at 256^2); with N public,
  ||W P||_* by the resolvent quadrature of ``bounds.projection_quadrature`` on the Kronecker
  eigen-data (O(cells) per node).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from .. import bounds
from ..limits import at_budget
from ..privacy import check_neighbours, infer_noise, resolve_budget, resolve_public
from ..workloads import KroneckerWorkload, Workload
from .protocol import BudgetSetting

__all__ = ["MAX_GRID_AXIS", "MAX_BOUND_CELLS", "lower_bounds", "grid_svd_bound",
           "grid_error_lower_bound", "bound_note"]

MAX_GRID_AXIS = 4096           # per-axis dense Grams / inverses (n_i^2 floats)
MAX_BOUND_CELLS = 1 << 24      # public-total grid bound: one pass over the cells per node


def _kron_eigen(
        w: KroneckerWorkload) -> list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    """Per-axis (eigenvalues, squared coordinates of 1 / sqrt(n_i)) of G_i = W_i'W_i."""
    out = []
    for f in w.factors:
        if f.n_bins > MAX_GRID_AXIS:
            raise ValueError(f"the public-total bound needs dense per-axis Grams: refused "
                             f"for an axis of more than {MAX_GRID_AXIS} cells")
        mu, u = np.linalg.eigh(f.gram_dense())
        c2 = (u.sum(axis=0) ** 2) / f.n_bins
        out.append((mu, c2))
    return out


def _projected_nuclear_kron(w: KroneckerWorkload, nodes_per_efold: float = 3.0,
                            margin: float = 8.0) -> float:
    """||W P|| _* (P = I - 11'/n) for a Kronecker workload of full column rank, by the
    resolvent quadrature (``bounds.projection_quadrature``) on the Kronecker eigen-data:
    tr(S^1/2) = sum_k mu_k^1/2 + (2 / pi) int_0^inf (t^2 B / A - 1) dt with
    A = sum_k c_k / (mu_k + t^2), B = sum_k c_k / (mu_k + t^2)^2, mu_k = prod_i mu_(i, k_i),
    c_k = prod_i c_(i, k_i) (the squared coordinates of the normalised 1); O(cells) per node."""
    eig = _kron_eigen(w)
    if math.prod(mu.size for mu, _ in eig) > MAX_BOUND_CELLS:
        raise ValueError(f"the public-total bound is refused above {MAX_BOUND_CELLS} cells")
    for mu, _ in eig:
        if mu[0] <= 1e-12 * mu[-1]:
            raise ValueError("the public-total bound needs a workload of full column rank")
    mu = np.ones(1)
    c = np.ones(1)
    for m_i, c_i in eig:
        mu = np.multiply.outer(mu, m_i).ravel()
        c = np.multiply.outer(c, c_i).ravel()
    nuc = math.prod(float(np.sum(np.sqrt(m_i))) for m_i, _ in eig)
    g = float(c @ mu)                     # u'Gu

    def ratio(t2: float) -> float:                        # t^2 B / A from the Kronecker eigen-data
        inv = 1.0 / (mu + t2)
        return t2 * float(c @ (inv * inv)) / float(c @ inv)

    return nuc + bounds.projection_quadrature(ratio, g, float(mu.min()), float(mu.max()),
                                              nodes_per_efold, margin)


def grid_svd_bound(workload: Workload, *, neighbours: str = "add_remove",
                   public_total: bool | None = None) -> float:
    """The SVD lower bound (``bounds.svd_bound``: total squared error of every Gaussian matrix
    mechanism at sigma^2 = 1 per unit l2 sensitivity) for a Kronecker ``workload`` over a
    grid (module docstring). N private: prod_i ||W_i||_*^2 / n_i, the product of the 1-D
    bounds. N public: ||W P||_*^2 / n (add/remove) or 2 ||W P||_*^2 / (n - 1) (swap)."""
    if not isinstance(workload, KroneckerWorkload):
        raise ValueError("workload: the grid bound needs a Kronecker (grid) workload; use "
                         "bounds.svd_bound in 1-D")
    check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    if not public:
        return math.prod(bounds.svd_bound(f, neighbours="add_remove") for f in workload.factors)
    n = workload.n_bins
    nuc = _projected_nuclear_kron(workload)
    return nuc * nuc / n if neighbours == "add_remove" else 2.0 * nuc * nuc / (n - 1)


def grid_error_lower_bound(workload: Workload, *, noise: str, epsilon: float | None = None,
                           rho: float | None = None, neighbours: str = "add_remove",
                           public_total: bool | None = None) -> float:
    """:func:`grid_svd_bound` in counts^2 for a noise and budget (``bounds.error_lower_bound``'s
    conversion): Gaussian bound / (2 rho); Laplace 2 bound / eps^2 (valid but loose)."""
    noise = infer_noise(noise, epsilon, rho)
    budget = resolve_budget(noise, epsilon, rho)
    unit = 0.5 if noise == "gaussian" else 2.0  # at unit budget, restated (limits.at_budget)
    return at_budget(unit * grid_svd_bound(workload, neighbours=neighbours,
                                           public_total=public_total), noise, budget,
                     "the error lower bound")


def lower_bounds(setting: BudgetSetting) -> tuple[dict[str, float | None], list[str]]:
    """({workload: mean-per-query lower bound (counts^2) or None}, [why each None]) for a
    1-D or grid comparison setting."""
    grid = getattr(setting, "shape", None) is not None
    out: dict[str, float | None] = {}
    notes: list[str] = []
    for wl in setting.workloads:
        w = setting.workload(wl)
        bound = grid_error_lower_bound if grid else bounds.error_lower_bound
        try:
            total = bound(w, noise=setting.noise, neighbours=setting.neighbours,
                          public_total=setting.public_total, **setting.budget_kwargs)
            out[wl] = float(total) / w.n_queries
        except ValueError as exc:
            out[wl] = None
            notes.append(f"{wl}: {str(exc).split(';')[0]}")
    return out, notes


def bound_note(setting: BudgetSetting, missing: list[str]) -> str:
    """One line saying what the ratio to the bound means in this setting."""
    kind = ("Gaussian: sigma^2 Delta^2 >= the SVD bound (Li & Miklau 2012), tight up to the "
            "optimum's gap" if setting.noise == "gaussian" else
            "Laplace: 2 / eps^2 x the Gaussian SVD bound, valid but loose (l1 >= l2)")
    if getattr(setting, "shape", None) is not None:
        kind += ("; N private: product of the per-axis 1-D bounds, N public: resolvent "
                 "quadrature")
    return ("ratio = mean / SVD lower bound per query; " + kind
            + ("; n/a: " + "; ".join(missing) if missing else ""))
