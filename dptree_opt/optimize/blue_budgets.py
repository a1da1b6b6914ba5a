"""Optimal per-level budgets for the BLUE on a level-uniform tree (docs/math.md sections 2-4).

The problem
-----------
On a level-uniform tree (branching k_1..k_h, K = prod k_l, level widths w_l) with per-level
noise variances v_l, the BLUE's exact total error on a workload is (dptree_opt.engines.tree_error)

    E = sum_j q_j / lambda_j,   lambda_j = sum_{l >= j} w_l p_l,   p_l = 1 / v_l,

with Haar workload weights q_j >= 0 (``error.tree.haar_workload_weights``; q_0 drops out when
N is public). A noisy level with sensitivity D_l and budget b_l has precision

    Laplace (eps-DP):    v_l = 2 D1_l^2 / eps_l^2,  p_l = c_l eps_l^2,  c_l = 1 / (2 D1_l^2)
    Gaussian (rho-zCDP): v_l = D2_l^2 / (2 rho_l),   p_l = c_l rho_l,    c_l = 2 / D2_l^2

(docs/math.md section 0; D_l from ``LevelUniformTree.level_sensitivity``). We minimise E over
b >= 0, sum_l b_l = total. Only h + 1 numbers (q_j, w_l c_l) enter: the cost is O(h), not K.

Gaussian: exact, O(h) (isotonic / PAVA)
---------------------------------------
p_l is linear in rho_l, so E is convex: the A-optimal design problem of docs/math.md section 4.
Change variables to the eigenvalues themselves. Let f_1 < ... < f_n be the levels that may get
budget, a_i = w_{f_i} c_{f_i} > 0 and Lambda_i = sum_{i' >= i} a_{i'} rho_{f_i'}: then
lambda_j = Lambda_i for f_{i-1} < j <= f_i, so E = sum_i Qw_i / Lambda_i with Qw_i the sum of
those q_j, and the map rho <-> Lambda is a linear bijection between {rho >= 0} and
{Lambda_1 >= ... >= Lambda_n >= 0} with

    sum_l rho_l = sum_i (Lambda_i - Lambda_{i+1}) / a_i = sum_i beta_i Lambda_i,
    beta_i = 1 / a_i - 1 / a_{i-1}   (1 / a_0 = 0).

The problem is now *separable* convex, sum_i Qw_i / Lambda_i, under one linear budget and a
chain order: for a multiplier nu each Lambda_i would be sqrt(Qw_i / (nu beta_i)), and the
order constraint is handled by the pool-adjacent-violators algorithm on the ratios
Qw_i / beta_i (pooled blocks use sums of Qw and of beta; PAVA is exact for separable convex
objectives under a chain order, Best, Chakravarti & Ubhaya 2000). The pooling does not depend on
nu, so with blocks B

    Lambda_B = total * sqrt(Qw_B / beta_B) / S,   S = sum_B sqrt(Qw_B beta_B),
    E*       = S^2 / total,

and rho_{f_i} = (Lambda_i - Lambda_{i+1}) / a_i: inside a block only its deepest level gets
budget (an upper level pooled with the one below it gets exactly 0). With equal sensitivities
beta_i is proportional to m_{f_i} - m_{f_{i-1}} (node counts). Cross-checked against cvxpy
(:func:`gaussian_budgets_cvxpy`) in the tests.

Laplace: non-convex, multistart local search
--------------------------------------------
p_l = c_l eps_l^2 makes E non-convex in eps. Worse, dE/deps_l = -2 c_l w_l eps_l
sum_{j <= l} q_j / lambda_j^2 vanishes at eps_l = 0, so *every* face of the simplex holds a local
minimum (moving delta to an unfunded level gains O(delta^2) and costs O(delta)); choosing the
funded levels is choosing a coarsening of the tree (an unfunded level merges into the level
below it). Method:

1. a global start by dynamic programming over the levels on a log grid of the eigenvalues
   lambda_j (:func:`laplace_dp_budgets`, O(h grid^2): every support at once, up to the grid);
2. more starts: the equal split, the Gaussian optimum mapped to eps (eps ~ sqrt(rho): the same
   relative precisions; and eps ~ rho), and ``starts`` Dirichlet(1) points from ``seed``;
3. from each start a local active-set Newton method on the simplex with the exact (analytic)
   gradient and Hessian (:func:`_simplex_newton`).

The best point over all starts and all local solutions is returned; the equal split is a
candidate, so the result is never worse than equal budgets. The tests compare it with the
best local solution over every one of the 2^(n-1) faces (supports) on trees with up to 13
budgets (slow marker) and with brute-force grids on 3-budget trees; an ad-hoc run over 148
random trees (h <= 9) found no face better than the returned point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..privacy import check_budget, check_noise, norm_of, split_budget
from ..strategies.base import check_neighbours
from ..strategies.interval import LevelUniformTree
from ..validation import check_bool, check_choice, check_int
from ..engines.tree_error import (
    WORKLOADS,
    check_branching,
    blue_error,
    blue_haar_variances,
    haar_workload_weights,
)
from .levels import level_variances, resolve_public
from .result import TreeDesign, at_total_budget, error_unit

__all__ = [
    "BlueBudgetProblem",
    "blue_budget_problem",
    "optimal_blue_budgets",
    "gaussian_optimal_budgets",
    "gaussian_budgets_cvxpy",
    "equal_budgets",
    "laplace_dp_budgets",
]


_F = npt.NDArray[np.float64]


def _noisy_levels(h: int, public: bool) -> tuple[int, ...]:
    return tuple(range(1 if public else 0, h + 1))


def _sensitivity_proxy(ks: Sequence[int]) -> tuple[int, ...]:
    """A tree with O(h) rows and the same level sensitivities as ``ks``.

    Building ``LevelUniformTree(K, ks)`` costs O(K) (its per-row level array: 134 MB and
    0.1 s at K = 2^24), while ``level_sensitivity`` reads only the height and the first level
    with k >= 2 (a swap changes no node above the first split). The proxy keeps both: k = 2 at
    the first split, 1 elsewhere. Checked against the real tree in the tests."""
    split = next((i for i, k in enumerate(ks) if k >= 2), None)
    return tuple(2 if i == split else 1 for i in range(len(ks)))


def _level_sensitivities(ks: Sequence[int], levels: Iterable[int], neighbours: str,
                         noise: str) -> _F:
    """Each noisy level's own sensitivity (l1 Laplace, l2 Gaussian), as ``Mechanism`` uses:
    ``LevelUniformTree.level_sensitivity`` (on an O(h) proxy tree, see _sensitivity_proxy)."""
    proxy = _sensitivity_proxy(ks)
    tree = LevelUniformTree(math.prod(proxy), proxy)
    p = norm_of(noise)
    return np.array([tree.level_sensitivity(lvl, neighbours, p) for lvl in levels], dtype=float)


def _blue_variances(v: np.ndarray) -> np.ndarray:
    """Variances for ``error.tree``: a non-root level with 0 variance has sensitivity 0, which
    happens only under swap for levels above the first split, whose single node equals the
    root = the public N; it adds nothing, so it is passed as unmeasured (inf)."""
    out = v.copy()
    out[1:][out[1:] == 0] = np.inf
    return out


@dataclass(frozen=True, eq=False)
class BlueBudgetProblem:
    """The budget problem on one tree: E(b) = sum_j q_j / lambda_j(b), O(h) per evaluation.

    Attributes
    ----------
    branching, n_bins (workload bins: n_queries or K), noise, neighbours, public_total,
    workload : the setting.
    noisy_levels : the levels with a budget entry (1..h if N is public, else 0..h).
    sensitivities : their own sensitivities (l1 Laplace / l2 Gaussian).
    fundable : which noisy levels may receive budget (sensitivity > 0, and not the root when
        ``measure_root=False``).
    weights : q_0..q_h (q_0 = 0 when N is public).
    widths : w_0..w_h.
    coef : c per noisy level: precision p_l = c_l b_l^power (0 where not fundable).
    power : 2 (Laplace, b = eps_l) or 1 (Gaussian, b = rho_l).
    """

    branching: tuple
    n_bins: int
    noise: str
    neighbours: str
    public_total: bool
    workload: str
    measure_root: bool
    noisy_levels: tuple
    sensitivities: np.ndarray
    fundable: np.ndarray
    weights: np.ndarray
    widths: np.ndarray
    coef: np.ndarray
    power: int

    @property
    def height(self) -> int:
        return len(self.branching)

    def _level_info(self, budgets: ArrayLike) -> _F:
        """w_l p_l for every level 0..h (0 for the public root)."""
        b = np.asarray(budgets, dtype=float)
        info = np.zeros(self.height + 1)
        info[list(self.noisy_levels)] = self.widths[list(self.noisy_levels)] * self.coef * (
            b ** self.power)
        return info

    def _lambdas(self, budgets: ArrayLike) -> _F:
        info = self._level_info(budgets)
        return np.cumsum(info[::-1])[::-1]  # lambda_j = sum_{l >= j} w_l p_l

    def error(self, budgets: ArrayLike) -> float:
        """Exact BLUE error at ``budgets`` (one per noisy level), O(h); inf if unidentifiable.
        A budget on a non-fundable level is ignored (the level is treated as unmeasured)."""
        lam = self._lambdas(budgets)
        on = self.weights > 0
        if np.any(lam[on] <= 0):
            return math.inf
        return float(np.sum(self.weights[on] / lam[on]))

    def gradient(self, budgets: ArrayLike) -> _F:
        """dE/db_l = -(w_l dp_l/db_l) sum_{j <= l} q_j / lambda_j^2 per noisy level, O(h)."""
        b = np.asarray(budgets, dtype=float)
        lam = self._lambdas(b)
        on = self.weights > 0
        if np.any(lam[on] <= 0):
            raise ValueError("the gradient is undefined where the histogram is unidentifiable")
        s = np.zeros_like(lam)
        s[on] = self.weights[on] / lam[on] ** 2
        cum = np.cumsum(s)[list(self.noisy_levels)]
        lv = list(self.noisy_levels)
        dp = self.coef * (self.power * b ** (self.power - 1) if self.power != 1 else 1.0)
        return -self.widths[lv] * dp * cum

    def level_variances(self, budgets: ArrayLike) -> _F:
        """v_0..v_h as ``Mechanism`` calibrates them (0 exact, inf unmeasured)."""
        return level_variances(self.branching, budgets, noise=self.noise,
                                neighbours=self.neighbours, public_total=self.public_total)

    def blue_error(self, budgets: ArrayLike) -> float:
        """The error recomputed independently of the optimiser: ``error.tree.blue_error`` on
        the calibrated variances (on the first n_bins bins of a padded tree, the workload's
        Haar weights there times ``blue_haar_variances``)."""
        v = _blue_variances(self.level_variances(budgets))
        if self.n_bins == int(self.widths[0]):
            return blue_error(self.branching, v, self.workload)
        q = haar_workload_weights(self.branching, self.workload, self.n_bins)
        return float(q @ blue_haar_variances(self.branching, v))


def blue_budget_problem(branching: Iterable[int], *, noise: str = "laplace",
                        neighbours: str = "swap", public_total: bool | None = None,
                        workload: str = "prefix", n_queries: int | None = None,
                        measure_root: bool = True) -> BlueBudgetProblem:
    """Build the O(h) budget problem of a tree (see the module docstring)."""
    ks, widths = check_branching(branching)
    noise = check_noise(noise)
    neighbours = check_neighbours(neighbours)
    public = resolve_public(neighbours, public_total)
    measure_root = check_bool(measure_root, "measure_root")
    check_choice(workload, "workload", WORKLOADS)
    K = widths[0]
    q = haar_workload_weights(ks, workload, n_queries)
    if public:
        q[0] = 0.0  # mu_0 = 0: the public total carries no error
    levels = _noisy_levels(len(ks), public)
    sens = _level_sensitivities(ks, levels, neighbours, noise)
    fundable = sens > 0
    if not public and not measure_root:
        fundable[0] = False
    with np.errstate(divide="ignore"):
        c = np.where(sens > 0, 1.0 / (2.0 * sens**2) if noise == "laplace" else 2.0 / sens**2,
                     0.0)
    c = np.where(fundable, c, 0.0)
    return BlueBudgetProblem(
        branching=ks, n_bins=int(n_queries) if n_queries is not None else K, noise=noise,
        neighbours=neighbours, public_total=public, workload=workload,
        measure_root=bool(measure_root), noisy_levels=levels, sensitivities=sens,
        fundable=fundable, weights=q, widths=np.asarray(widths, dtype=float), coef=c,
        power=2 if noise == "laplace" else 1)


def _check_feasible(problem: BlueBudgetProblem) -> None:
    """Raise unless some budget allocation identifies the workload: every q_j > 0 needs a
    fundable level at depth >= j."""
    lv = np.array(problem.noisy_levels, dtype=int)
    deepest = lv[problem.fundable].max() if problem.fundable.any() else -1
    bad = [j for j in range(problem.height + 1) if problem.weights[j] > 0 and j > deepest]
    if bad:
        raise ValueError(f"no budget allocation identifies the workload: Haar subspace(s) {bad} "
                         "need a measured level at that depth or deeper (measure_root=False "
                         "with K = 1, or no noisy level)")


def equal_budgets(problem: BlueBudgetProblem, total_budget: float) -> np.ndarray:
    """The equal split over the fundable levels (0 elsewhere), as ``Mechanism`` splits."""
    n = int(problem.fundable.sum())
    return np.where(problem.fundable, total_budget / max(n, 1), 0.0)


def _trivial(problem: BlueBudgetProblem, total_budget: float) -> tuple[_F, float] | None:
    """(budgets, 0.0) when there is nothing to optimise: no level depends on the data (one
    bin under swap: nothing is spent, as ``Mechanism`` does), or the workload has zero error
    whatever the budgets (one bin with N public). None otherwise."""
    if not problem.fundable.any() or not np.any(problem.weights > 0):
        return equal_budgets(problem, total_budget), 0.0
    return None


# ---------------------------------------------------------------------------------- Gaussian
def gaussian_optimal_budgets(problem: BlueBudgetProblem, total_budget: float
                             ) -> tuple[np.ndarray, float]:
    """Exact minimiser of sum_j q_j / lambda_j(rho) on the simplex (Gaussian: p linear in
    rho) by PAVA on the eigenvalues, O(h); see the module docstring. Returns (budgets per
    noisy level, optimal value S^2 / total). Valid for the Gaussian problem, and for any
    problem read with power 1."""
    _check_feasible(problem)
    trivial = _trivial(problem, total_budget)
    if trivial is not None:
        return trivial
    lv = np.array(problem.noisy_levels, dtype=int)
    idx = np.flatnonzero(problem.fundable)  # positions in noisy_levels, shallow to deep
    f = lv[idx]
    a = problem.widths[f] * problem.coef[idx]
    # Qw_i = sum of q_j over f_{i-1} < j <= f_i
    cq = np.concatenate([[0.0], np.cumsum(problem.weights)])
    prev = np.concatenate([[-1], f[:-1]])
    qw = cq[f + 1] - cq[prev + 1]
    inv_a = 1.0 / a
    beta = inv_a - np.concatenate([[0.0], inv_a[:-1]])
    # PAVA, non-increasing ratios Qw / beta; a block with beta <= 0 is merged upwards (its
    # Lambda is pushed up to the previous one: that both frees budget and lowers E).
    blocks: list[list[float]] = []  # [Qw, beta, count]
    for qi, bi in zip(qw, beta):
        blocks.append([float(qi), float(bi), 1])
        while len(blocks) >= 2:
            q2, b2, _ = blocks[-1]
            q1, b1, _ = blocks[-2]
            if b2 <= 0 or q2 * b1 > q1 * b2:
                top = blocks.pop()
                blocks[-1][0] += top[0]
                blocks[-1][1] += top[1]
                blocks[-1][2] += top[2]
            else:
                break
    s = sum(math.sqrt(qb * bb) for qb, bb, _ in blocks)
    lam = np.empty(len(f))
    pos = 0
    for qb, bb, cnt in blocks:
        n_pooled = int(cnt)  # a count (the blocks hold floats for the sums)
        lam[pos:pos + n_pooled] = total_budget * math.sqrt(qb / bb) / s
        pos += n_pooled
    rho_free = (lam - np.append(lam[1:], 0.0)) / a
    rho_free = np.maximum(rho_free, 0.0)
    rho_free *= total_budget / rho_free.sum()
    out = np.zeros(len(lv))
    out[idx] = rho_free
    return out, s * s / total_budget


def gaussian_budgets_cvxpy(problem: BlueBudgetProblem, total_budget: float,
                           solver: str | None = None) -> tuple[np.ndarray, float]:
    """The Gaussian problem as a cvxpy program (the cross-check of the PAVA solution):
    minimise sum_j q_j inv_pos(a_j' rho) s.t. sum rho = total, rho >= 0 (unfundable levels
    fixed at 0). Scaled so the objective is O(1). Returns (budgets, optimal value)."""
    import cvxpy as cp

    _check_feasible(problem)
    trivial = _trivial(problem, total_budget)
    if trivial is not None:
        return trivial
    lv = list(problem.noisy_levels)
    n = len(lv)
    # lambda_j = sum_{l >= j} w_l c_l rho_l  ->  rows j, columns = noisy levels
    A = np.array([[problem.widths[l] * problem.coef[i] if l >= j else 0.0
                   for i, l in enumerate(lv)] for j in range(problem.height + 1)])
    on = problem.weights > 0
    eq_value = gaussian_optimal_budgets(problem, total_budget)[1]  # a scale only
    x = cp.Variable(n, nonneg=True)  # rho / total
    q = problem.weights[on] / eq_value
    obj = cp.sum(cp.multiply(q / total_budget, cp.inv_pos((A[on] @ x))))
    cons = [cp.sum(x) == 1]
    if (~problem.fundable).any():
        cons.append(x[np.flatnonzero(~problem.fundable)] == 0)
    prob = cp.Problem(cp.Minimize(obj), cons)
    prob.solve(solver=solver)
    if prob.status not in ("optimal", "optimal_inaccurate"):
        raise RuntimeError(f"cvxpy status {prob.status}")
    rho = np.maximum(np.asarray(x.value, dtype=float), 0.0) * total_budget
    rho *= total_budget / rho.sum()
    return rho, float(prob.value) * eq_value


# ----------------------------------------------------------------------------------- Laplace
def _full_arrays(problem: BlueBudgetProblem) -> tuple[_F, npt.NDArray[np.bool_]]:
    """(a_l = w_l c_l per level 0..h, fundable mask per level 0..h)."""
    lv = np.array(problem.noisy_levels, dtype=int)
    a = np.zeros(problem.height + 1)
    fund = np.zeros(problem.height + 1, dtype=bool)
    a[lv] = problem.widths[lv] * problem.coef
    fund[lv] = problem.fundable
    return a, fund


def _dp_on_grid(a: _F, fund: npt.NDArray[np.bool_], q: _F, nu: float,
                lam: _F) -> tuple[_F, _F]:
    """One pass of the dynamic programme of :func:`laplace_dp_budgets` on the grid ``lam``.
    Returns (eps per level 0..h, the lambda_j of the chosen path)."""
    h = a.size - 1
    deepest = int(np.flatnonzero(fund).max())
    diff = lam[:, None] - lam[None, :]
    root_diff = np.sqrt(np.where(diff >= 0, diff, np.inf))  # g' > g (u < 0) is impossible
    choice: list[npt.NDArray[np.intp] | None] = [None] * (h + 1)
    V = q[deepest] / lam + nu * np.sqrt(lam / a[deepest])  # u = lam: nothing deeper
    for j in range(deepest - 1, -1, -1):
        if fund[j]:
            C = root_diff * (nu / math.sqrt(a[j])) + V[None, :]
            g = np.argmin(C, axis=1)
            V = q[j] / lam + C[np.arange(lam.size), g]
            choice[j] = g
        else:
            V = q[j] / lam + V
    g = int(np.argmin(V))
    u = np.zeros(h + 1)
    path = np.zeros(h + 1)
    for j in range(deepest):
        path[j] = lam[g]
        cj = choice[j]
        if cj is not None:
            g2 = int(cj[g])
            u[j] = lam[g] - lam[g2]
            g = g2
    path[deepest] = u[deepest] = lam[g]
    eps = np.zeros(h + 1)
    eps[fund] = np.sqrt(u[fund] / a[fund])
    return eps, path[: deepest + 1]


def laplace_dp_budgets(problem: BlueBudgetProblem, total_budget: float, grid: int = 600
                       ) -> np.ndarray:
    """A near-global start for the Laplace problem: dynamic programming on a log grid of
    the eigenvalues lambda_j, O(h grid^2).

    E is homogeneous of degree -2 in eps and the budget of degree 1, so minimising E on the
    simplex is equivalent (same direction) to minimising the Lagrangian E + nu sum_l eps_l
    for any nu > 0. Writing u_l = lambda_l - lambda_{l+1} = a_l eps_l^2 (a_l = w_l c_l) it is
    a chain: V_j(lam) = q_j / lam + min_{0 <= u <= lam} [nu sqrt(u / a_j) + V_{j+1}(lam - u)],
    V at the deepest fundable level = q / lam + nu sqrt(lam / a), unfundable levels take u = 0.
    lam runs over a geometric grid (so every support, i.e. every coarsening of the tree, is
    considered at once): first a wide grid, then one zoomed on the range of the first path
    (finer steps); the better of the two, rescaled to the budget, is returned (to be
    polished by the local Newton method)."""
    _check_feasible(problem)
    a, fund = _full_arrays(problem)
    q = problem.weights
    B = float(total_budget)
    nu = 2.0 * problem.error(equal_budgets(problem, B)) / B**3  # puts the optimum near B
    wide = np.geomspace(a[fund].min() * B * B * 1e-6, 2.0 * a[fund].max() * B * B, int(grid))
    eps1, path = _dp_on_grid(a, fund, q, nu, wide)
    zoom = np.geomspace(path.min() / 4.0, path.max() * 4.0, int(grid))
    eps2, _ = _dp_on_grid(a, fund, q, nu, zoom)
    lv = list(problem.noisy_levels)
    # the first of the two unless the second is strictly better
    return min((eps[lv] * (B / eps[lv].sum()) for eps in (eps1, eps2)), key=problem.error)


class _FundableObjective:
    """E and its exact derivatives in z = budgets / total on the fundable levels, O(h^2).

    lambda_j = sum_{l >= j} A_l z_l^s (A_l = a_l total^s, s = power), C_l = sum_{j <= l}
    q_j / lambda_j^2, D_l = sum_{j <= l} q_j / lambda_j^3, u_l = s A_l z_l^(s-1):
        dE/dz_l = -u_l C_l,
        d2E/dz_l dz_m = 2 u_l u_m D_min(l, m) - [l = m] s (s - 1) A_l z_l^(s-2) C_l.
    The second term is <= 0 for Laplace (s = 2): the source of the non-convexity."""

    def __init__(self, problem: BlueBudgetProblem, total: float) -> None:
        lv = np.array(problem.noisy_levels, dtype=int)
        self.idx = np.flatnonzero(problem.fundable)
        a_full, _ = _full_arrays(problem)
        self.levels = lv[self.idx]
        self.s = problem.power
        self.A = a_full[self.levels] * total**self.s
        self.q = problem.weights
        self.on = self.q > 0
        self.h1 = problem.height + 1
        n = self.idx.size
        self.min_index = np.minimum.outer(np.arange(n), np.arange(n))

    def _lam(self, z: _F) -> _F:
        info = np.zeros(self.h1)
        info[self.levels] = self.A * z**self.s
        return np.cumsum(info[::-1])[::-1]

    def value(self, z: _F) -> float:
        lam = self._lam(z)
        if np.any(lam[self.on] <= 0):
            return math.inf
        return float(np.sum(self.q[self.on] / lam[self.on]))

    def derivatives(self, z: _F) -> tuple[float, _F, _F]:
        lam = self._lam(z)
        safe = np.where(self.on, lam, 1.0)
        r = np.where(self.on, self.q / safe, 0.0)
        C = np.cumsum(r / safe)[self.levels]
        D = np.cumsum(r / safe**2)[self.levels]
        s = self.s
        u = s * self.A * z ** (s - 1)
        g = -u * C
        H = 2.0 * np.outer(u, u) * D[self.min_index]
        if s != 1:
            H[np.diag_indices_from(H)] -= s * (s - 1) * self.A * z ** (s - 2) * C
        return float(np.sum(r)), g, H


_BASIS: dict[int, np.ndarray] = {}


def _tangent_basis(m: int) -> np.ndarray:
    """Orthonormal basis (m, m-1) of {d : sum d = 0}."""
    if m not in _BASIS:
        P = np.eye(m) - 1.0 / m
        _BASIS[m] = np.linalg.svd(P)[0][:, : m - 1]
    return _BASIS[m]


def _simplex_newton(obj: _FundableObjective, z0: ArrayLike,
                    max_iter: int = 200) -> tuple[_F, float, int]:
    """A local minimum of obj on the simplex {z >= 0, sum z = 1} from z0: active-set Newton.

    On the free set (z > 0) the Newton step on the tangent space uses the exact Hessian with
    its eigenvalues replaced by their absolute values (floored), so it is a descent direction
    also where E is concave; Armijo backtracking, capped at the step that zeroes the first
    coordinate (which then leaves the free set). A zero coordinate re-enters if its gradient
    is below the free-set average (never for Laplace: there dE/dz_l = 0 at z_l = 0).
    Pure numpy on (h+1)-sized arrays; scipy's SLSQP / L-BFGS-B were avoided because their
    BLAS calls slowed 20-fold on a loaded 2-core machine (0.47 s -> 8.9 s at K = 2^16)."""
    z = np.asarray(z0, dtype=float).copy()
    z = np.maximum(z, 0.0)
    z /= z.sum()
    E = obj.value(z)
    iters = 0
    for iters in range(1, max_iter + 1):
        E, g, H = obj.derivatives(z)
        free = z > 0
        F = np.flatnonzero(free)
        nu = float(np.mean(g[F]))
        enter = (~free) & (g < nu - 1e-12 * abs(nu))
        if enter.any():  # a zero coordinate with a better marginal value: let it in
            free |= enter
            F = np.flatnonzero(free)
        m = F.size
        if m <= 1:
            break
        Z = _tangent_basis(m)
        gr = Z.T @ g[F]
        if np.linalg.norm(gr) <= 1e-13 * abs(nu) * math.sqrt(m):
            break
        w, V = np.linalg.eigh(Z.T @ H[np.ix_(F, F)] @ Z)
        w = np.maximum(np.abs(w), 1e-10 * max(np.abs(w).max(), 1e-300))
        d = -(Z @ (V @ ((V.T @ gr) / w)))
        slope = float(g[F] @ d)
        if slope >= 0:
            break
        neg = d < 0
        ratios = np.where(neg, z[F] / np.where(neg, -d, 1.0), np.inf)
        b = int(np.argmin(ratios))
        t_max = float(ratios[b])
        t = min(1.0, t_max)
        while t > 1e-18:
            zn = z.copy()
            zn[F] += t * d
            if t == t_max:
                zn[F[b]] = 0.0
            zn = np.maximum(zn, 0.0)
            zn /= zn.sum()
            En = obj.value(zn)
            if En <= E + 1e-4 * t * slope:
                break
            t *= 0.5
        else:
            break  # no decrease possible at rounding level
        done = E - En <= 1e-15 * E
        z, E = zn, En
        if done:
            break
    return z, E, iters


def _laplace_multistart(problem: BlueBudgetProblem, total_budget: float, starts: int,
                        seed: int | np.random.Generator | None,
                        grid: int = 600) -> tuple[np.ndarray, dict[str, object]]:
    """Best point over the starts and their local (Newton) solutions (module docstring)."""
    obj = _FundableObjective(problem, float(total_budget))
    idx = obj.idx
    n = idx.size
    B = float(total_budget)

    def full(z: _F) -> _F:
        x = np.zeros(len(problem.noisy_levels))
        x[idx] = z * B
        return x

    eq = equal_budgets(problem, B)
    cands = [eq[idx] / B]
    labels = ["equal"]
    cands.append(laplace_dp_budgets(problem, B, grid)[idx] / B)
    labels.append(f"dynamic programming (grid {grid})")
    rho = gaussian_optimal_budgets(problem, 1.0)[0][idx]
    for name, z in (("gaussian optimum, eps ~ sqrt(rho)", np.sqrt(rho)),
                    ("gaussian optimum, eps ~ rho", rho)):
        cands.append(z / z.sum())
        labels.append(name)
    rng = np.random.default_rng(seed)
    for i in range(int(starts)):
        cands.append(rng.dirichlet(np.ones(n)))
        labels.append(f"dirichlet {i}")

    best_z: _F | None = None
    best_val, best_label = math.inf, ""
    start_values: list[float] = []
    local_values: list[float] = []
    iterations: list[int] = []
    for start, label in zip(cands, labels):
        z0 = np.maximum(np.asarray(start, dtype=float), 0.0)
        z0 /= z0.sum()
        v0 = obj.value(z0)
        start_values.append(v0)
        if v0 < best_val:
            best_z, best_val, best_label = z0, v0, label
        z, v, iters = _simplex_newton(obj, z0)
        local_values.append(v)
        iterations.append(iters)
        if v < best_val:
            best_z, best_val, best_label = z, v, label + " + Newton"
    if best_z is None:  # the equal split has a finite error (_check_feasible)
        raise RuntimeError("no start of the Laplace budget search has a finite error")
    info: dict[str, object] = {"labels": labels, "start_values": start_values,
                               "local_values": local_values, "iterations": iterations,
                               "starts": len(cands), "best_from": best_label}
    return full(best_z), info


# ------------------------------------------------------------------------------- the entry
def optimal_blue_budgets(branching: Iterable[int], total_budget: float, *,
                         noise: str = "laplace", neighbours: str = "swap",
                         public_total: bool | None = None, workload: str = "prefix",
                         n_queries: int | None = None, measure_root: bool = True,
                         starts: int = 8,
                         seed: int | np.random.Generator | None = 0) -> TreeDesign:
    """Per-level budgets minimising the BLUE's exact workload error on a level-uniform tree.

    Parameters
    ----------
    branching : sequence of int >= 1, (k_1..k_h); K = prod k_l.
    total_budget : eps (Laplace, pure DP) or rho (Gaussian, zCDP), > 0.
    noise : "laplace" or "gaussian".
    neighbours, public_total : as for ``Mechanism`` (swap: N public, levels 1..h noisy;
        add/remove: the root is a noisy level too unless ``public_total=True``).
    workload : "prefix" (default), "identity" or "all_range".
    n_queries : a padded tree's real bins: the prefix workload's first n_queries prefixes,
        or the all-range workload's ranges within the first n_queries bins.
    measure_root : under add/remove with a private N, False fixes the root budget to 0.
        No effect when N is public (the root is exact).
    starts, seed : Laplace only, the number of random Dirichlet starts and their seed.

    Returns
    -------
    TreeDesign with ``budgets`` one per noisy level (root first under add/remove with a
    private N), summing to ``total_budget``; ``error`` = the exact BLUE error recomputed by
    ``error.tree`` at those budgets; ``alternatives`` = (the equal-budget design,). Gaussian:
    exact O(h) optimum (PAVA). Laplace: best of a multistart local search, never worse than
    equal budgets. Cost O(h) per evaluation, independent of K.
    """
    noise = check_noise(noise)
    total = check_budget(total_budget, "epsilon" if noise == "laplace" else "rho")
    starts = check_int(starts, "starts", 0)
    if not isinstance(seed, np.random.Generator):   # None, or an int seed >= 0
        check_int(seed, "seed", 0, none=True)

    problem = blue_budget_problem(branching, noise=noise, neighbours=neighbours,
                                  public_total=public_total, workload=workload,
                                  n_queries=n_queries, measure_root=measure_root)
    _check_feasible(problem)
    # E(c b) = E(b) / c^power: solved and scored at unit total budget, then restated at
    # the total (at_total_budget; the split does not depend on it; no overflow or
    # underflow of total^power at extreme budgets)
    unit = error_unit(problem.n_bins, 1.0, noise)
    name = "epsilon" if noise == "laplace" else "rho"

    def design(budgets: ArrayLike, method: str,
               alternatives: tuple[TreeDesign, ...] = ()) -> TreeDesign:
        b = np.asarray(budgets, dtype=float)
        if problem.fundable.any():  # else nothing depends on the data and nothing is spent
            b = split_budget(1.0, len(problem.noisy_levels), b, name=name)

        err = problem.blue_error(b)
        return TreeDesign(n_bins=problem.n_bins, branching=problem.branching,
                          budgets=tuple(float(x) for x in b), error=err,
                          normalised_error=err / unit, estimator="blue", noise=noise,
                          neighbours=problem.neighbours, public_total=problem.public_total,
                          method=method, alternatives=alternatives)

    eq = equal_budgets(problem, 1.0)
    equal = design(eq, "equal split")
    if problem.fundable.sum() <= 1 or _trivial(problem, 1.0) is not None:
        return at_total_budget(design(
            eq, "nothing to optimise (at most one fundable level or zero error)", (equal,)),
            total)
    if noise == "gaussian":
        b, _ = gaussian_optimal_budgets(problem, 1.0)
        method = "PAVA on the Haar eigenvalues (exact convex optimum)"
    else:
        b, info = _laplace_multistart(problem, 1.0, starts, seed)
        method = (f"multistart active-set Newton ({info['starts']} starts; best from "
                  f"{info['best_from']})")
    best = design(np.asarray(b, dtype=float), method, (equal,))
    if best.error > equal.error:  # rounding only: the equal split is one of the candidates
        best = design(eq, "equal split (no improvement found)", (equal,))
    return at_total_budget(best, total)
