"""Shared builders for the tests: random trees and mechanisms from (branching, budgets)."""

import math

from hypothesis import strategies as st

import dptree_opt as dp
from dptree_opt import strategies as S


@st.composite
def tree_variances(draw, max_k=512):
    """(branching, level variances v_0..v_h): entries 2-7 (sometimes one k = 1 level),
    log-uniform variances over 3 decades, root public (0) / private / unmeasured (inf),
    sometimes an unmeasured level or unmeasured leaves (maybe unidentifiable)."""
    ks = draw(st.lists(st.integers(2, 7), min_size=1, max_size=5))
    while math.prod(ks) > max_k:
        ks.pop()
    if draw(st.booleans()):  # a level duplicating its parent's nodes
        ks.insert(draw(st.integers(0, len(ks))), 1)
    h = len(ks)
    v = [10.0 ** draw(st.floats(-1.5, 1.5)) for _ in range(h + 1)]
    v[0] = draw(st.sampled_from([0.0, v[0], math.inf]))
    if draw(st.integers(0, 3)) == 0:
        v[draw(st.integers(1, h))] = math.inf
    if draw(st.integers(0, 9)) == 0:
        v[-1] = math.inf  # identifiable only through k = 1 levels
    return ks, v


def tree_mechanism(branching, budgets, noise, neighbours, public_total):
    """Mechanism on tree(prod k, branching) with the given absolute level budgets."""
    total = float(sum(budgets))
    kw = {"epsilon": total} if noise == "laplace" else {"rho": total}
    return dp.Mechanism(S.tree(math.prod(branching), list(branching)), noise=noise,
                        neighbours=neighbours, public_total=public_total,
                        level_budgets=list(budgets), **kw)
