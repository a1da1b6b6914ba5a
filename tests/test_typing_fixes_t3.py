"""Behaviour bugs the type checker found in ``anchors``, ``compare`` and ``data_release``
(typing round 2): each used to raise a TypeError (or return None) where a ValueError naming
the parameter is due."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dptree_opt import anchors
from dptree_opt.data_release.grid import release_grid


@pytest.mark.parametrize("kw, name", [({"epsilon": None}, "epsilon"),
                                      ({"noise": "gaussian"}, "rho")])
def test_google_default_without_its_budget_is_a_value_error(kw, name):
    """The budget split of the non-root levels (total / h) used to run on None (TypeError)
    before the Mechanism could refuse the missing budget."""
    with pytest.raises(ValueError, match=name):
        anchors.google_default(16, **kw)


def test_google_default_still_leaves_the_root_unmeasured():
    """The fix keeps the rule: root budget 0, the total split equally over the h levels."""
    a = anchors.google_default(256, epsilon=1.0)
    h = len(a.branching)
    assert h == 2                                    # 16^2 = 256 leaves
    assert a.mechanism.level_budgets.get(0, 0.0) == 0.0
    assert [a.mechanism.level_budgets[lvl] for lvl in (1, 2)] == [0.5, 0.5]


@pytest.mark.parametrize("n_cells", [1, 0, -3, 2.5, True])
def test_ektelo_hb_branching_refuses_fewer_than_two_cells(n_cells):
    """With fewer than 2 cells the search range is empty: the function returned None
    (annotated int); it is now a ValueError naming n_cells."""
    with pytest.raises(ValueError, match="n_cells"):
        anchors.ektelo_hb_branching(n_cells)


def test_ektelo_hb_branching_matches_an_independent_search():
    """ektelo's find_best_branching(N): argmin over b of (b - 1) h^3 - 2 (b + 1) h^2 / 3 with
    h = ceil(log_b N), first minimiser; recomputed here independently (numpy, all b)."""
    for n in (2, 3, 100, 4096):
        b = np.arange(2, n + 1)
        h = np.ceil(np.log(n) / np.log(b) - 1e-12)
        v = (b - 1) * h ** 3 - 2 * (b + 1) * h ** 2 / 3
        expected = int(b[int(np.argmin(v))])
        got = anchors.ektelo_hb_branching(n)
        assert got == expected or math.isclose(float(v[got - 2]), float(v.min())), (n, got)


def test_grid_release_refuses_non_iterable_names_with_a_value_error():
    """``names=5`` used to reach tuple(5) (TypeError) while checking the axis names; it is
    refused before any noise with a ValueError naming ``names``."""
    with pytest.raises(ValueError, match="names"):
        release_grid(counts=np.ones((4, 4), dtype=np.int64), lower=[0, 0], upper=[1, 1],
                     bins=[4, 4], epsilon=1.0, names=5)
