"""[RTS] Sec. IV design problems: budgets given branching (O1), branching given budgets (O2),
both jointly (Thm IV.3), and the optimal branching factor (Lemma IV.3).

Setting of the paper: covering estimator, swap neighbours, N public, Laplace noise. By
Thm IV.1 the CDF error in counts^2 is E = 4K sum_l (k_l - 1) / eps_l^2 (N = 1), so every
problem minimises F = sum_l (k_l - 1) / eps_l^2 and reports E and E / c, c = 4K / eps^2.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import cvxpy as cp
import numpy as np
from scipy.special import lambertw

from .result import TreeDesign, error_unit

__all__ = ["budgets", "branching", "joint", "degenerate_joint_example", "psi",
           "optimal_branching_factor", "optimal_height"]


def _positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return value


def _bins(n_bins) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    return int(n_bins)


def _covering_design(n_bins, ks, eps_l, epsilon, method) -> TreeDesign:
    ks = np.asarray(ks, dtype=float)
    eps_l = np.asarray(eps_l, dtype=float)
    used = ks > 1  # a k_l = 1 level adds nothing to any prefix and needs no budget
    f = float(np.sum((ks[used] - 1) / eps_l[used] ** 2))  # [RTS] Thm IV.1
    err = 4.0 * n_bins * f
    kept = tuple(int(round(k)) if abs(k - round(k)) < 1e-9 else float(k) for k in ks)
    return TreeDesign(n_bins=int(n_bins), branching=kept, budgets=tuple(float(e) for e in eps_l),
                      error=err, normalised_error=err / error_unit(n_bins, epsilon, "laplace"),
                      estimator="covering", noise="laplace", neighbours="swap",
                      public_total=True, method=method)


def _solve(problem: cp.Problem) -> None:
    # Clarabel (bundled with cvxpy) with tight tolerances: the optimum is flat, so the
    # solution is only as accurate as the square root of the objective tolerance
    # (status OPTIMAL_INACCURATE at these tolerances is accepted silently: the tests hold every
    # solution to the closed forms at 1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise ValueError(f"the convex program did not solve: status {problem.status}")


def budgets(branching: Sequence[int], epsilon: float, estimator: str = "covering") -> TreeDesign:
    """Problem O1 ([RTS] Thm IV.2(a)): the budgets minimising sum_l (k_l - 1) / eps_l^2
    subject to sum_l eps_l = eps, solved with cvxpy (convex in eps).

    Closed form: eps_l = eps (k_l - 1)^(1/3) / sum_m (k_m - 1)^(1/3), minimum error
    (4K / eps^2) (sum_l (k_l - 1)^(1/3))^3 (checked in the tests)."""
    if estimator != "covering":
        raise ValueError(f"estimator={estimator!r}: problem O1 is the covering estimator's; for "
                         "the refined estimator or the BLUE use "
                         "optimize.level_uniform(..., budgets='optimal')")
    eps = _positive(epsilon, "epsilon")
    ks = [int(k) for k in branching]
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"branching must be a non-empty list of integers >= 1, got {branching!r}")
    c = np.array([k - 1.0 for k in ks])
    n_bins = math.prod(ks)
    if not np.any(c > 0):
        raise ValueError(f"branching {ks} has no level with k >= 2")
    used = c > 0
    e = cp.Variable(int(used.sum()), pos=True)
    problem = cp.Problem(cp.Minimize(c[used] @ cp.power(e, -2)), [cp.sum(e) == eps])
    _solve(problem)
    eps_l = np.zeros(len(ks))
    eps_l[used] = e.value * eps / e.value.sum()  # exact feasibility after the solver
    return _covering_design(n_bins, ks, eps_l, eps, "cvxpy (O1)")


def branching(n_bins: int, budgets: Sequence[float], min_branching: float = 1.0) -> TreeDesign:
    """Problem O2 ([RTS] Thm IV.2(b)): real branching factors minimising
    sum_l (k_l - 1) / eps_l^2 subject to prod k_l = K, k_l >= ``min_branching``, solved with
    cvxpy in x_l = ln k_l (the objective sum_l (e^{x_l} - 1) / eps_l^2 is convex in x).

    Closed form when no bound is active: k_l = K^(1/h) eps_l^2 / (prod_m eps_m)^(2/h)."""
    k = _bins(n_bins)
    eps_l = np.array([_positive(b, "budgets") for b in budgets])
    h = eps_l.size
    if h == 0:
        raise ValueError("budgets must hold one budget per level")
    lo = math.log(_positive(min_branching, "min_branching"))
    if lo * h > math.log(k) + 1e-12:
        raise ValueError(f"min_branching={min_branching} is infeasible: {h} levels of at least "
                         f"{min_branching} exceed n_bins={k}")
    x = cp.Variable(h)
    objective = cp.Minimize(cp.sum(cp.multiply(1.0 / eps_l**2, cp.exp(x))))
    _solve(cp.Problem(objective, [cp.sum(x) == math.log(k), x >= lo]))
    ks = np.exp(x.value - (x.value.sum() - math.log(k)) / h)  # exact product after the solver
    return _covering_design(k, ks, eps_l, float(eps_l.sum()), "cvxpy (O2)")


def joint(n_bins: int, epsilon: float, height: int, min_branching: float = 3.0,
          max_iter: int = 500, tol: float = 1e-10) -> TreeDesign:
    """The joint problem of [RTS] Thm IV.3: branching and budgets together, fixed height,
    every k_l >= ``min_branching`` (>= 3).

    f(x, y) = (e^x - 1) / y^2 is jointly convex exactly where e^x >= 3 (Hessian determinant
    2 e^x (e^x - 3) / y^6), so the restricted problem is convex, but no DCP form of it exists
    for cvxpy to verify. It is solved by block coordinate descent over its two exact convex
    sub-problems, O1 (budgets | k) and O2 (k | budgets, with k_l >= min_branching), each a cvxpy
    program, from an unequal start; on a smooth jointly convex objective this converges to
    the global optimum, which Thm IV.3 gives in closed form: k_l = K^(1/h), eps_l = eps / h,
    error (4K h^3 / eps^2) (K^(1/h) - 1) (checked in the tests). Without the restriction the
    optimum degenerates: see ``degenerate_joint_example``."""
    k = _bins(n_bins)
    eps = _positive(epsilon, "epsilon")
    if isinstance(height, bool) or not isinstance(height, (int, np.integer)) or height < 1:
        raise ValueError(f"height must be an integer >= 1, got {height!r}")
    if _positive(min_branching, "min_branching") < 3:
        raise ValueError(f"min_branching={min_branching}: the joint problem is convex only for "
                         "k_l >= 3 (Thm IV.3); see degenerate_joint_example() for what happens "
                         "without it")
    if min_branching ** height > k * (1 + 1e-12):
        raise ValueError(f"height={height} with every k_l >= {min_branching} exceeds "
                         f"n_bins={k}")
    eps_l = eps * np.linspace(1.0, 2.0, height) / np.linspace(1.0, 2.0, height).sum()
    for _ in range(max_iter):  # stop on the variables: the objective is flat at the optimum
        ks = np.array(branching(k, eps_l, min_branching=min_branching).branching, dtype=float)
        c = (ks - 1) ** (1 / 3)  # O1 in closed form is exact; cvxpy O1 is tested separately
        new = eps * c / c.sum()
        done = np.max(np.abs(new - eps_l) / new) <= tol
        eps_l = new
        if done:
            break
    return _covering_design(k, ks, eps_l, eps, "cvxpy (O2) + O1, block coordinate descent")


def degenerate_joint_example(epsilon: float = 1.0) -> tuple[TreeDesign, TreeDesign]:
    """MATH.md section 4: without k_l >= 3 the joint optimum degenerates. For K = 4, h = 2,
    (4, 1) with the whole budget on level 1 costs 3 (in units 4K/eps^2, i.e. 3/eps^2 [RTS]-
    normalised) while the balanced (2, 2) with eps/2 each costs 8: a level with k = 1 is
    free, so the 'height-2' optimum is really a height-1 tree. Returns ((4, 1), (2, 2))."""
    eps = _positive(epsilon, "epsilon")
    return (_covering_design(4, (4, 1), (eps, 0.0), eps, "closed form"),
            _covering_design(4, (2, 2), (eps / 2, eps / 2), eps, "closed form"))


def psi(k) -> np.ndarray | float:
    """[RTS] Lemma IV.3: psi(k) = (k - 1) / ln^3 k; with h = ln K / ln k the equal-branching
    error is (4K (ln K)^3 / eps^2) psi(k)."""
    k = np.asarray(k, dtype=float)
    if np.any(k <= 1):
        raise ValueError("psi(k) needs k > 1")
    out = (k - 1) / np.log(k) ** 3
    return float(out) if out.ndim == 0 else out


def optimal_branching_factor(integer: bool = False) -> float | int:
    """The minimiser of psi ([RTS] Lemma IV.3): the root of ln k = 3 (1 - 1/k),
    k* = -3 / W0(-3 e^-3) = 16.801016..., independent of K and eps; ``integer=True`` gives
    the better of floor/ceil, 17 (psi(16) = 0.703777 > psi(17) = 0.703529)."""
    k_star = float((-3.0 / lambertw(-3.0 * math.exp(-3.0), 0)).real)
    if not integer:
        return k_star
    lo, hi = math.floor(k_star), math.ceil(k_star)
    return lo if psi(lo) <= psi(hi) else hi


def optimal_height(n_bins: int, integer: bool = True) -> int | float:
    """Optimal tree height for equal branching and equal budgets (covering, [RTS] Thm IV.3
    relaxation): the height h minimising h^3 (K^(1/h) - 1) over integers h >= 1
    (``integer=True``), or the real optimum ln K / ln k* of Lemma IV.3. The exact integer
    optimum over integer branching factors is ``level_uniform(...)``'s height."""
    k = _bins(n_bins)
    if not integer:
        return math.log(k) / math.log(optimal_branching_factor())
    heights = np.arange(1, max(1, int(math.log2(k))) + 1)
    cost = heights**3 * (k ** (1.0 / heights) - 1)
    return int(heights[int(np.argmin(cost))])
