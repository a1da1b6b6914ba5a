"""The [RTS] design problems of Sec. IV-V: budgets given branching (O1), branching given budgets
(O2), both jointly (Thm IV.3), and the optimal branching factor and height (Lemma IV.3,
Thm V.2, Cor. V.1-V.2).

Setting, as in the paper: level-uniform tree, covering estimator, swap neighbours (N public),
Laplace noise: level l gets budget eps_l, its nodes variance v_l = 8 / eps_l^2 (l1 sensitivity
2; the constants come from ``levels.level_variances``). Errors are in counts^2 for the whole
CDF, E||C_hat - C||^2 summed over the K prefixes ([RTS] divides by N^2; set N = 1):

    error = sum_l (K (k_l - 1) / 2) v_l = 4 K sum_l (k_l - 1) / eps_l^2     ([RTS] Thm IV.1)

and ``normalised_error`` = error / (4K / eps^2) = eps^2 sum_l (k_l - 1) / eps_l^2
(``result.error_unit``). Convex programs are solved with cvxpy's bundled CLARABEL.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt
import scipy.optimize
import scipy.special
from numpy.typing import ArrayLike

from ..privacy import check_budget
from ..validation import check_bool, check_choice, check_int, check_real
from .levels import check_branching, level_variances, unit_variances
from .result import TreeDesign, at_total_budget, error_unit
from .search import level_uniform

__all__ = ["budgets", "branching", "joint", "degenerate_optimum", "optimal_branching_factor",
           "psi", "optimal_height", "budgets_closed_form", "branching_closed_form"]

_SOLVER_OPTS = dict(tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)


def _solve(problem: Any) -> None:
    """Solve a cvxpy problem with CLARABEL at tight tolerances; raise if it failed."""
    import cvxpy as cp

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "optimal_inaccurate" at 1e-12 is fine
        problem.solve(solver=cp.CLARABEL, **_SOLVER_OPTS)
    if problem.status not in ("optimal", "optimal_inaccurate"):
        raise RuntimeError(f"cvxpy/CLARABEL failed: status {problem.status}")


def _value(variable: Any) -> npt.NDArray[np.float64]:
    """The value of a solved cvxpy Variable as a float array (``_solve`` raised otherwise)."""
    if variable.value is None:
        raise RuntimeError("cvxpy/CLARABEL returned no solution")
    return np.asarray(variable.value, dtype=float)


def _covering_error(ks: tuple[int, ...], eps_l: ArrayLike) -> float:
    """Exact [RTS] Thm IV.1 error of integer branching ks with budgets eps_l (swap, Laplace),
    from the Mechanism rules (levels.level_variances); a level with k_l = 1 is never used."""
    v = level_variances(ks, eps_l, noise="laplace", neighbours="swap")
    K = math.prod(ks)
    return float(sum(0.5 * K * (k - 1) * v[l] for l, k in enumerate(ks, 1) if k > 1))


def _relaxed_error(ks: tuple[float, ...], eps_l: Iterable[float]) -> float:
    """The same formula for real branching factors (the relaxation of Sec. IV)."""
    h = len(ks)
    unit = unit_variances(h)[1:]  # v_l at eps_l = 1 (8 under swap), Laplace ~ 1/eps^2
    K = math.prod(ks)
    return float(sum(0.5 * K * (k - 1) * u / e**2 for k, u, e in zip(ks, unit, eps_l)))


# --------------------------------------------------------------------------- (O1)
def budgets_closed_form(branching: Iterable[float], epsilon: float) -> tuple[float, ...]:
    """[RTS] Thm IV.2(a): eps_l = eps (k_l - 1)^(1/3) / sum_m (k_m - 1)^(1/3)."""
    ks = check_branching(branching)
    epsilon = check_budget(epsilon, "epsilon")
    r = np.array([(k - 1) ** (1.0 / 3.0) for k in ks])

    return tuple(float(x) for x in epsilon * r / r.sum())


def budgets(branching: Iterable[float], epsilon: float,
            estimator: str = "covering") -> TreeDesign:
    """Problem (O1) of [RTS] Thm IV.2(a): optimal per-level budgets for fixed branching.

    minimise sum_l (k_l - 1) / eps_l^2  s.t.  sum_l eps_l = eps, eps_l >= 0,

    solved with cvxpy (``cp.power(eps_l, -2)``, DCP; in budget shares s_l = eps_l / eps for
    scaling). Levels with k_l = 1 are never used by a prefix and get 0. The closed form is
    eps_l = eps (k_l - 1)^(1/3) / sum_m (k_m - 1)^(1/3) with error
    (4K / eps^2) (sum_l (k_l - 1)^(1/3))^3 (``budgets_closed_form``; tests compare them).

    Returns a TreeDesign (swap, Laplace, covering) whose ``error`` is the exact error of the
    budgets found, computed from the ``Mechanism`` rules. Only the covering estimator has this
    problem; for the refined estimator or the BLUE use
    ``level_uniform(..., estimator=..., budgets="optimal")`` or ``optimal_blue_budgets``.
    """
    import cvxpy as cp

    if estimator != "covering":
        raise ValueError(f"estimator={estimator!r}: budgets() solves [RTS] (O1) for the covering "
                         "estimator only; for 'refined' or 'blue' use "
                         "optimize.level_uniform(n_bins, epsilon, estimator=..., "
                         "budgets='optimal') (or optimal_blue_budgets for a given tree)")
    ks = check_branching(branching)
    if not ks or all(k == 1 for k in ks):
        raise ValueError(f"branching must have a factor >= 2 (a tree with bins to split), got "
                         f"{branching!r}")
    total = check_budget(epsilon, "epsilon")
    eps = 1.0  # solved at unit budget, restated at the total (at_total_budget: exact)
    used = [i for i, k in enumerate(ks) if k > 1]
    c = np.array([ks[i] - 1.0 for i in used])
    share = np.zeros(len(ks))
    if len(used) == 1:
        share[used[0]] = 1.0
    else:
        s = cp.Variable(len(used))
        prob = cp.Problem(cp.Minimize(c @ cp.power(s, -2)), [cp.sum(s) == 1, s >= 0])
        _solve(prob)
        share[used] = np.maximum(_value(s), 0.0)
        share /= share.sum()
    eps_l = tuple(float(x) for x in eps * share)
    err = _covering_error(ks, eps_l)
    return at_total_budget(TreeDesign(
        n_bins=math.prod(ks), branching=ks, budgets=eps_l, error=err,
        normalised_error=err / error_unit(math.prod(ks), eps, "laplace"),
        estimator="covering", noise="laplace", neighbours="swap", public_total=True,
        method="cvxpy (O1), CLARABEL"), total)


# --------------------------------------------------------------------------- (O2)
def branching_closed_form(n_bins: int, level_budgets: ArrayLike) -> tuple[float, ...]:
    """[RTS] Thm IV.2(b): k_l = K^(1/h) eps_l^2 / (prod_m eps_m)^(2/h) (ignores k_l >= 1)."""
    e = np.asarray(level_budgets, dtype=float)
    h = e.size
    return tuple(float(x) for x in n_bins ** (1.0 / h) * e**2 / np.prod(e) ** (2.0 / h))


def _check_level_budgets(level_budgets: ArrayLike) -> npt.NDArray[np.float64]:
    try:
        e = np.asarray(level_budgets, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"budgets must be a sequence of numbers, got {level_budgets!r}") \
            from None
    if e.ndim != 1 or e.size == 0 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError(f"budgets must be a non-empty sequence of finite numbers > 0 (one "
                         f"eps_l per level), got {level_budgets!r}")
    return e


def branching(n_bins: int, budgets: ArrayLike) -> TreeDesign:
    """Problem (O2) of [RTS] Thm IV.2(b): optimal real branching factors for fixed budgets.

    With x_l = ln k_l: minimise sum_l (e^{x_l} - 1) / eps_l^2  s.t.  sum_l x_l = ln K,
    x_l >= 0 (k_l >= 1), solved with cvxpy (``cp.exp``, DCP). The closed form of the theorem,
    k_l = K^(1/h) eps_l^2 / (prod_m eps_m)^(2/h) (``branching_closed_form``), ignores
    k_l >= 1; it is the solution whenever it satisfies it.

    Returns a TreeDesign with real (float) branching factors; ``error`` is the relaxation's
    value 4K sum_l (k_l - 1) / eps_l^2 (swap, Laplace, covering), ``method`` "cvxpy"."""
    import cvxpy as cp

    K = check_int(n_bins, "n_bins", 1)
    e = _check_level_budgets(budgets)
    h = e.size
    if K == 1:
        x = np.zeros(h)
    else:
        xv = cp.Variable(h)
        w = (e.min() / e) ** 2  # objective scaled to O(1)
        scale = K ** (1.0 / h)
        prob = cp.Problem(cp.Minimize(w @ (cp.exp(xv) - 1) / scale),
                          [cp.sum(xv) == math.log(K), xv >= 0])
        _solve(prob)
        x = np.maximum(_value(xv), 0.0)
        x *= math.log(K) / x.sum()
    ks = tuple(float(math.exp(t)) for t in x)
    total = float(e.sum())  # at unit total, restated at it (at_total_budget: exact)
    if not math.isfinite(total):
        raise ValueError(f"budgets must sum to a finite number, got {list(e)}")
    unit = e / total
    err = _relaxed_error(ks, unit)
    return at_total_budget(TreeDesign(
        n_bins=K, branching=ks, budgets=tuple(float(t) for t in unit), error=err,
        normalised_error=err / error_unit(K, 1.0, "laplace"), estimator="covering",
        noise="laplace", neighbours="swap", public_total=True,
        method="cvxpy (O2, x_l = ln k_l), CLARABEL; relaxed real branching factors"), total)


# --------------------------------------------------------------------------- Thm IV.3
def joint(n_bins: int, epsilon: float, height: int, min_branching: float = 3, *,
          max_iter: int = 2000, tol: float = 1e-9) -> TreeDesign:
    """[RTS] Thm IV.3: k_l and eps_l jointly, for fixed height h, under k_l >= min_branching.

    Problem (O'): minimise sum_l (e^{x_l} - 1) / eps_l^2 s.t. sum_l x_l = ln K,
    x_l >= ln(min_branching), sum_l eps_l = eps. f(x, y) = (e^x - 1) / y^2 is jointly convex
    exactly where e^x >= 3 (Hessian determinant 2 e^x (e^x - 3) / y^6, [RTS] App. A), so with
    min_branching >= 3 the problem is convex and its optimum is k_l = K^(1/h), eps_l = eps / h,
    error (4K h^3 / eps^2)(K^(1/h) - 1).

    cvxpy formulation. f is convex on the domain but is not a DCP expression: it is the convex
    e^x / y^2 = exp(x - 2 log y) (DCP) plus the concave -1 / y^2, and no rewriting in the
    natural parametrisations (x, y), (ln k, ln y), (k, y), ((k - 1)^(1/3), y), nor the
    budget-eliminated sum_l (e^{x_l} - 1)^(1/3), is DCP (each needs log(1 + a^3) or
    (e^x - 1)^(1/3) as an atom, concave / convex only on the restricted domain). So the
    exact convex problem is solved by the convex-concave procedure: each iteration solves the
    DCP problem with -1/y^2 replaced by its tangent at the current y (a majorant, affine):

        minimise sum_l [exp(x_l - 2 log s_l) + 2 s_l / s0_l^3]  (s_l = eps_l / eps, sum s = 1)

    (a DPP problem: the tangent slopes are cvxpy Parameters). The iterates decrease the true
    objective monotonically and converge to a KKT point, which on this convex feasible set is
    the global optimum. The start is deliberately unbalanced.

    Returns a TreeDesign with real branching factors, the budgets, ``error`` = the relaxed
    value 4K sum_l (k_l - 1) / eps_l^2 and ``method`` "cvxpy (convex-concave procedure)".
    """
    import cvxpy as cp

    K = check_int(n_bins, "n_bins", 1)
    total = check_budget(epsilon, "epsilon")
    eps = 1.0  # solved at unit budget, restated at the total (at_total_budget: exact)
    h = check_int(height, "height", 1)
    check_real(min_branching, "min_branching")
    if min_branching < 3:
        raise ValueError(f"min_branching={min_branching!r} < 3: (e^x - 1)/y^2 is not jointly "
                         "convex below k = 3 and the optimum degenerates (see "
                         "degenerate_optimum); use min_branching >= 3")
    if K < min_branching**h:
        raise ValueError(f"n_bins={K} is too small for height={h} with min_branching="
                         f"{min_branching}: need n_bins >= min_branching^height")
    lo = math.log(min_branching)
    L = math.log(K)
    if h == 1 or K == min_branching**h:
        xs, ss, iters = np.full(h, L / h), np.full(h, 1.0 / h), 0
    else:
        # an unbalanced feasible start
        weights = np.arange(1, h + 1, dtype=float)
        x0 = lo + (L - h * lo) * weights / weights.sum()
        s0 = weights[::-1] / weights.sum()
        x, s = cp.Variable(h), cp.Variable(h)
        slope = cp.Parameter(h, nonneg=True)
        scale = K ** (1.0 / h)
        prob = cp.Problem(cp.Minimize((cp.sum(cp.exp(x - 2 * cp.log(s))) + slope @ s) / scale),
                          [cp.sum(x) == L, x >= lo, cp.sum(s) == 1])
        xs, ss = x0, s0
        for iters in range(1, max_iter + 1):
            slope.value = 2.0 / ss**3  # tangent of 1/s^2 at the current s: majorises -1/s^2
            _solve(prob)
            xv, sv = _value(x), _value(s)
            step = max(np.abs(xv - xs).max(), np.abs(sv - ss).max())
            xs, ss = xv.copy(), sv.copy()
            if step < tol:
                break
        else:
            raise RuntimeError(f"the convex-concave procedure of the joint (branching, "
                               f"budgets) problem did not converge in {max_iter} iterations "
                               "(raise max_iter)")
        xs = np.maximum(xs, lo)
        xs *= L / xs.sum()
        ss = np.maximum(ss, 0.0) / ss.sum()
    ks = tuple(float(math.exp(t)) for t in xs)
    eps_l = tuple(float(eps * t) for t in ss)
    err = _relaxed_error(ks, eps_l)
    return at_total_budget(TreeDesign(
        n_bins=K, branching=ks, budgets=eps_l, error=err,
        normalised_error=err / error_unit(K, eps, "laplace"), estimator="covering",
        noise="laplace", neighbours="swap", public_total=True,
        method=f"cvxpy (convex-concave procedure, {iters} DCP solves), CLARABEL; "
        f"relaxed, k_l >= {min_branching:g}"), total)


def degenerate_optimum(n_bins: int = 4, epsilon: float = 1.0, height: int = 2
                       ) -> tuple[TreeDesign, TreeDesign,
                                  Callable[[ArrayLike], npt.NDArray[np.float64]]]:
    """Without k_l >= 3 the joint problem of Thm IV.3 degenerates ([RTS] Sec. IV, docs/math.md 4).

    Returns (degenerate, balanced, curve):

    * degenerate: all splitting on level 1 and all budget there, branching (K, 1, ..., 1),
      budgets (eps, 0, ..., 0) (level 2.. are unmeasured; no prefix uses them);
    * balanced: the Thm IV.3 stationary point, k_l = K^(1/h), eps_l = eps / h (integer when
      K^(1/h) is, e.g. (2, 2) for K = 4);
    * curve: a function k_1 -> the budget-optimised relaxed objective of height 2,
      eps^2 sum_l (k_l - 1) / eps_l^2 = ((k_1 - 1)^(1/3) + (K / k_1 - 1)^(1/3))^3 (Thm IV.2(a)),
      whose interior stationary point k_1 = sqrt(K) is a maximum, not a minimum.

    Units. ``error`` is in counts^2 (N = 1), 4K sum_l (k_l - 1) / eps_l^2;
    ``normalised_error`` = eps^2 sum_l (k_l - 1) / eps_l^2. For K = 4, h = 2:
    sum_l (k_l - 1) / eps_l^2 = 3 / eps^2 for (4, 1) vs 8 / eps^2 for (2, 2), i.e. errors
    48 / eps^2 vs 128 / eps^2 and normalised errors 3 vs 8 (docs/math.md section 4).
    """
    K = check_int(n_bins, "n_bins", 1)
    total = check_budget(epsilon, "epsilon")
    eps = 1.0  # at unit budget, restated at the total (at_total_budget: exact)
    h = check_int(height, "height", 2)
    if K < 2:
        raise ValueError(f"n_bins must be >= 2, got {n_bins!r}")
    unit = error_unit(K, eps, "laplace")
    ks: tuple[int, ...] = (K,) + (1,) * (h - 1)
    b = (eps,) + (0.0,) * (h - 1)
    err = _covering_error(ks, b)
    degenerate = TreeDesign(n_bins=K, branching=ks, budgets=b, error=err,
                            normalised_error=err / unit, method="degenerate (unrestricted) "
                            "optimum: the histogram on one level")
    k = K ** (1.0 / h)
    bb = (eps / h,) * h
    kb: tuple[float, ...]
    if abs(k - round(k)) < 1e-9:
        kb = ki = tuple(int(round(k)) for _ in range(h))
        err_b = _covering_error(ki, bb)
    else:
        kb = (k,) * h
        err_b = _relaxed_error(kb, bb)
    balanced = TreeDesign(n_bins=K, branching=kb, budgets=bb, error=err_b,
                          normalised_error=err_b / unit,
                          method="Thm IV.3 point k_l = K^(1/h), eps_l = eps/h")

    def curve(k1: ArrayLike) -> npt.NDArray[np.float64]:
        k = np.asarray(k1, dtype=float)
        return (np.cbrt(k - 1.0) + np.cbrt(K / k - 1.0)) ** 3

    return at_total_budget(degenerate, total), at_total_budget(balanced, total), curve


# --------------------------------------------------------------------------- Lemma IV.3
@overload
def psi(k: float) -> float: ...
@overload
def psi(k: ArrayLike) -> float | npt.NDArray[np.float64]: ...


def psi(k: ArrayLike) -> float | npt.NDArray[np.float64]:
    """[RTS] Lemma IV.3: psi(k) = (k - 1) / ln^3 k; the Thm IV.3 error with h = ln K / ln k is
    (4K (ln K)^3 / eps^2) psi(k). Works elementwise on arrays (k > 1)."""
    ka = np.asarray(k, dtype=float)
    if np.any(~(ka > 1)):
        raise ValueError(f"psi needs k > 1, got {ka!r}")
    out = (ka - 1.0) / np.log(ka) ** 3
    return float(out) if out.ndim == 0 else out


@overload
def optimal_branching_factor(integer: Literal[False] = ...) -> float: ...
@overload
def optimal_branching_factor(integer: Literal[True]) -> int: ...
@overload
def optimal_branching_factor(integer: bool) -> float | int: ...


def optimal_branching_factor(integer: bool = False) -> float | int:
    """[RTS] Lemma IV.3: the minimiser of psi(k) = (k - 1)/ln^3 k over k > 1.

    Real: the root of ln k = 3 (1 - 1/k) above 1, k* = -3 / W0(-3 e^-3) = 16.801016...
    (Lambert W, principal branch; the other branch gives the spurious root k = 1).
    integer=True: 17, the better of floor(k*) = 16 and ceil(k*) = 17 (psi(16) = 0.703777 >
    psi(17) = 0.703529); psi is unimodal, so no other integer can be better."""
    check_bool(integer, "integer")
    k_star = float(-3.0 / scipy.special.lambertw(-3.0 * math.exp(-3.0), 0).real)
    if not integer:
        return k_star
    lo, hi = math.floor(k_star), math.ceil(k_star)
    return lo if psi(lo) <= psi(hi) else hi


def _branching_factor_root() -> float:
    """The same root by bracketing (a check of the Lambert-W form)."""
    return float(scipy.optimize.brentq(lambda k: math.log(k) - 3.0 * (1.0 - 1.0 / k), 2.0, 100.0,
                                       xtol=1e-14))


def optimal_height(n_bins: int, epsilon: float = 1.0, *, method: str = "exact",
                   allow_padding: bool = False, **search_kwargs: Any) -> int:

    """The optimal tree height for equal budgets ([RTS] Thm V.2, Cor. V.1-V.2).

    method="exact" (default): the height of the best tree found by the exact integer search
    ``search.level_uniform(n_bins, epsilon, budgets="equal", allow_padding=allow_padding,
    **search_kwargs)`` (covering estimator, swap, Laplace unless overridden) — the paper's
    h*(K) = argmin_h min over integer factorisations of K of h^2 sum_l (k_l - 1). Padding is
    off by default, as in Thm V.2 (trees over exactly K bins). ``epsilon`` scales every error
    equally and does not change the answer.
    method="relaxed": the integer h >= 1 minimising the Thm IV.3 value h^3 (K^(1/h) - 1)
    (real equal branching factors K^(1/h), Lemma IV.3), i.e. the height nearest in error to
    ln K / ln k*.
    """
    K = check_int(n_bins, "n_bins", 1)
    check_budget(epsilon, "epsilon")
    check_choice(method, "method", ("exact", "relaxed"))
    if method == "relaxed":
        if K < 2:
            raise ValueError(f"n_bins must be >= 2, got {n_bins!r}")
        hs = np.arange(1, max(2, int(math.log2(K))) + 1)
        vals = hs**3 * (K ** (1.0 / hs) - 1.0)
        return int(hs[int(np.argmin(vals))])

    search_kwargs.setdefault("top", 0)
    search_kwargs.setdefault("estimator", "covering")   # the paper's setting
    search_kwargs.setdefault("neighbours", "swap")
    # the budget scales every error alike: search at unit budget (any epsilon works)
    if search_kwargs.get("noise", "laplace") == "gaussian":
        best = level_uniform(K, rho=1.0, budgets="equal", allow_padding=allow_padding,
                             **search_kwargs)
    else:
        best = level_uniform(K, 1.0, budgets="equal", allow_padding=allow_padding,
                             **search_kwargs)
    return best.height
