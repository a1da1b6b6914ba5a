"""Per-level noise variances of a level-uniform tree from per-level budgets (the optimisers'
fast path: no ``Mechanism``, no strategy rows).

The rules are exactly those of :class:`dptree_opt.Mechanism` on ``strategies.tree(K, branching)``
with ``level_budgets=budgets`` (docs/math.md section 0):

* noisy levels: 1..h when N is public (swap, or add/remove with ``public_total=True``), else
  0..h (the root is measured like any other level);
* each noisy level l is calibrated by :func:`dptree_opt.privacy.calibrate` from its own
  sensitivity :meth:`LevelUniformTree.level_sensitivity` (l1 for Laplace, l2 for Gaussian):
  Laplace variance 2 (D_l / eps_l)^2, Gaussian D_l^2 / (2 rho_l); budget 0 -> inf (the level
  is not measured), sensitivity 0 -> 0 (the rows cannot change, e.g. k_1 = 1 under swap);
* the root variance is 0 when N is public.

Nothing here re-derives a constant: the sensitivities come from the strategy class and the
calibration from ``privacy`` (``tests/test_optimize_rts.py`` asserts equality with
``Mechanism(...).level_variances`` on random trees).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from ..privacy import calibrate, check_noise, norm_of, resolve_public
from ..strategies.base import check_neighbours
from ..strategies.interval import tree_level_sensitivity
from ..validation import check_int

__all__ = ["level_variances", "noisy_levels", "resolve_public", "check_branching"]


def noisy_levels(height: int, neighbours: str = "swap",
                 public_total: bool | None = None) -> tuple[int, ...]:
    """The levels that take a budget, in increasing order: (1..h) when N is public, else
    (0..h). This is the order of ``TreeDesign.budgets`` and of ``Mechanism``'s
    ``level_budgets``."""
    height = check_int(height, "height", 0)
    public = resolve_public(neighbours, public_total)
    return tuple(range(1 if public else 0, height + 1))


def check_branching(branching: Iterable[float]) -> tuple[int, ...]:
    """Validate integer branching factors >= 1 (k_1..k_h); return them as a tuple of ints."""
    if isinstance(branching, (str, bytes)) or not hasattr(branching, "__iter__"):
        raise ValueError(f"branching must be a sequence of integers >= 1, got {branching!r}")
    ks: list[int] = []
    for k in branching:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (Integral, Real)):
            raise ValueError(f"branching must hold integers >= 1, got {branching!r}")
        if not float(k).is_integer() or k < 1:
            raise ValueError(f"branching must hold integers >= 1, got {list(branching)!r}")
        ks.append(int(k) if isinstance(k, Integral) else int(float(k)))
    return tuple(ks)


@lru_cache(maxsize=4096)
def _sensitivities(ks: tuple[int, ...], levels: tuple[int, ...], neighbours: str,
                   norm: int) -> tuple[float, ...]:
    """Each listed level's own sensitivity, from the strategy class's rule (cached per
    tree; O(h), no tree built)."""
    return tuple(float(tree_level_sensitivity(ks, lvl, neighbours, norm)) for lvl in levels)


def level_variances(branching: Iterable[float], budgets: ArrayLike, *, noise: str = "laplace",
                    neighbours: str = "swap",
                    public_total: bool | None = None) -> npt.NDArray[np.float64]:
    """Noise variances v_0..v_h (root first) of the level-uniform tree with these budgets.

    Parameters
    ----------
    branching : sequence of int >= 1, (k_1..k_h).
    budgets : one absolute budget >= 0 per noisy level (:func:`noisy_levels`), eps_l for
        Laplace or rho_l for Gaussian. They need not sum to anything in particular.
    noise, neighbours, public_total : as for ``Mechanism``.

    Returns
    -------
    ndarray of shape (h + 1,): 0 at the root when N is public; inf for a level with budget 0;
    0 for a level whose sensitivity is 0. Equal to the ``level_variances`` of
    ``Mechanism(strategies.tree(K, branching), ..., level_budgets=budgets)`` (as an array
    indexed by level).
    """
    ks = check_branching(branching)
    noise = check_noise(noise)
    neighbours = check_neighbours(neighbours)
    levels = noisy_levels(len(ks), neighbours, public_total)
    try:
        b = np.asarray(budgets, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"budgets must be a sequence of numbers, got {budgets!r}") from None
    if b.shape != (len(levels),) or not np.all(np.isfinite(b)) or np.any(b < 0):
        raise ValueError(f"budgets must be {len(levels)} finite numbers >= 0, one per noisy "
                         f"level {levels}, got {budgets!r}")
    sens = _sensitivities(ks, levels, neighbours, norm_of(noise))
    v = np.zeros(len(ks) + 1)
    for lvl, d, bl in zip(levels, sens, b):
        v[lvl] = calibrate(d, float(bl), noise)[1]
    return v


def unit_variances(height: int, *, noise: str = "laplace", neighbours: str = "swap",
                   public_total: bool | None = None) -> npt.NDArray[np.float64]:
    """v_l at unit budget on every noisy level, for trees whose factors are all >= 2.

    Every such tree has the same level sensitivities (a level-uniform tree's level
    sensitivity depends on its height and on the first level that splits, here level 0), so
    the representative (2, ..., 2) is used. Laplace variances scale as 1 / eps_l^2 and
    Gaussian ones as 1 / rho_l (``privacy.calibrate``): v_l(b) = unit_l / b^2 or unit_l / b.
    Root entry: 0 when N is public."""
    levels = noisy_levels(height, neighbours, public_total)
    return level_variances((2,) * int(height), np.ones(len(levels)), noise=noise,
                           neighbours=neighbours, public_total=public_total)
