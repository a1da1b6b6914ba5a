"""The result type every tree/budget optimiser returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..limits import TINY, at_budget, out_of_range
from ..mechanism import Mechanism
from ..strategies import Strategy, tree, truncated_tree


@dataclass(frozen=True)
class TreeDesign:
    """A level-uniform tree design and its exact error.

    Attributes
    ----------
    n_bins : the number of bins K asked for.
    branching : (k_1..k_h); may multiply to a padded K' >= K (the extra bins are empty).
    budgets : one absolute budget per noisy level, increasing level order (eps_l for Laplace,
        rho_l for Gaussian); under swap levels 1..h, under add/remove with a private total
        levels 0..h (the root first; it may be 0 = root not measured).
    error : exact total squared error of the CDF workload (the first K prefix counts), in
        counts^2, for the design's estimator. Real-valued (relaxed) designs report the
        closed-form value of the relaxation.
    normalised_error : ``error / c`` with [RTS]'s unit c = 4K / eps^2 (Laplace; Sec. V writes
        the equal-budget covering error as c h^2 sum_l (k_l - 1)) or c = K / (2 rho)
        (Gaussian); free of N, K-scaling and the budget.
    estimator, noise, neighbours, public_total : the setting the error is for.
    method : how it was found ("closed form", "cvxpy", "exhaustive", "gradient", ...).
    alternatives : ranked runners-up (best first), each a TreeDesign, when a search made them.
    """

    n_bins: int
    branching: tuple
    budgets: tuple
    error: float
    normalised_error: float
    estimator: str = "covering"
    noise: str = "laplace"
    neighbours: str = "swap"
    public_total: bool = True
    method: str = ""
    alternatives: tuple = field(default=(), repr=False)

    @property
    def padded_bins(self) -> float:
        """prod k_l (= n_bins unless padded; a float for relaxed real branching factors)."""
        return math.prod(self.branching)

    @property
    def height(self) -> int:
        """Number of levels below the root, h = len(branching)."""
        return len(self.branching)

    def mechanism(self, *, padded: bool = False) -> Mechanism:
        """The design as a ``Mechanism`` (its budgets, noise, neighbour model and public
        total), on the K real bins: an unpadded design is the level-uniform tree itself; a
        padded one (prod k_l > K) is the tree truncated to the K bins
        (``strategies.truncated_tree``: the padding bins are known zeros, OpenDP's convention;
        its BLUE and covering errors are never above ``error``, which the search computed
        with the padding treated as ordinary empty bins). ``padded=True`` returns the
        level-uniform tree over all K' bins instead (the refined estimator, defined on
        level-uniform trees only, needs it; answer the first K prefixes)."""
        if any(not float(k).is_integer() or k < 1 for k in self.branching):
            raise ValueError(f"a relaxed design (branching {self.branching}) has no mechanism: "
                             "its branching factors are not integers")
        ks = tuple(int(k) for k in self.branching)
        kp = math.prod(ks)
        strat: Strategy
        if padded or kp == self.n_bins:
            strat = tree(kp, list(ks)) if ks else tree(1, [])
        else:
            strat = truncated_tree(self.n_bins, ks)
        total = float(sum(self.budgets))
        laplace = self.noise == "laplace"
        return Mechanism(strat, noise=self.noise, neighbours=self.neighbours,
                         public_total=self.public_total, level_budgets=list(self.budgets),
                         epsilon=total if laplace else None, rho=None if laplace else total)


def at_total_budget(design: TreeDesign, budget: float) -> TreeDesign:
    """A design computed at unit total budget restated at total ``budget`` (its
    alternatives too): budgets x budget, error / budget^2 (Laplace) or / budget (Gaussian),
    ``normalised_error`` unchanged. Exact: the errors are homogeneous in the budget and the
    best trees and budget fractions do not depend on it (``dptree_opt.limits``); ValueError
    when the error or a budget leaves the normal doubles."""
    b = np.asarray(design.budgets, dtype=float)
    scaled = b * budget
    small = (b > 0) & (scaled < TINY)
    if np.any(small):
        raise out_of_range(design.noise, budget, "a level's budget",
                           math.log10(float(b[small][0])) + math.log10(budget), large=False)
    return replace(design, budgets=tuple(float(x) for x in scaled),
                   error=at_budget(design.error, design.noise, budget),
                   alternatives=tuple(at_total_budget(a, budget) for a in design.alternatives))


def error_unit(n_bins: int, total_budget: float, noise: str) -> float:
    """[RTS]'s unit c for ``normalised_error``: 4K/eps^2 (Laplace) or K/(2 rho) (Gaussian)."""
    # divisions, not total_budget**2: a float power raises OverflowError above ~1e154
    if noise == "laplace":
        return 4.0 * n_bins / total_budget / total_budget
    return n_bins / (2.0 * total_budget)
