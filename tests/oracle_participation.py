"""Brute-force participation sensitivities for the tests (no library code): every pattern
listed with itertools, every sign vector enumerated.

A pattern is a set of steps (columns) one user's contributions enter; a user changes the
released answers by W_P g (W = diag(w) A, g_t one contribution per step of P).

* scalar contributions in [-1, 1]: the norm is convex in g, so the worst is a vertex,
  g in {-1, 1}^P: max_s ||W_P s||_p.
* vector contributions (norm <= 1 each): l1 is max_P sum_(i in P) ||W_i||_1 (one coordinate
  per step); l2 for a Gram X_PP >= 0 entrywise is sum X_PP (all contributions equal).
"""

import itertools

import numpy as np


def fixed_epoch_patterns(n, k, b):
    """The b patterns {o, o + b, .., o + (k - 1) b} (n = k b)."""
    assert n == k * b
    return [list(range(o, n, b)) for o in range(b)]


def min_sep_patterns(n, k, b):
    """Every non-empty set of at most k steps in [0, n) with consecutive gaps >= b (k None:
    any number), grown one step at a time."""
    out, top = [], n if k is None else k
    frontier = [[t] for t in range(n)]
    while frontier:
        out.extend(frontier)
        frontier = [p + [t] for p in frontier if len(p) < top for t in range(p[-1] + b, n)]
    return out


def cyclic_patterns(n, s):
    """The "every s-th step" orders over n steps: {o, o + s, ..} for o < s (any n)."""
    return [list(range(o, n, s)) for o in range(s)]


def scalar_sensitivity(wa, patterns, p):
    """max over patterns and signs of ||W_P s||_p (wa = diag(w) A, dense)."""
    best = 0.0
    for pat in patterns:
        cols = wa[:, pat]
        for signs in itertools.product((-1.0, 1.0), repeat=len(pat)):
            best = max(best, float(np.linalg.norm(cols @ np.array(signs), ord=p)))
    return best


def vector_sensitivity(wa, patterns, p):
    """Vector contributions: l1 max_P sum of column l1 norms; l2 sqrt(max_P sum X_PP)
    (asserted X_PP >= 0, where it is exact)."""
    best = 0.0
    for pat in patterns:
        cols = wa[:, pat]
        if p == 1:
            best = max(best, float(np.abs(cols).sum()))
        else:
            x = cols.T @ cols
            assert np.all(x >= -1e-12), "vector l2 oracle needs X_PP >= 0"
            best = max(best, float(x.sum()))
    return best if p == 1 else float(np.sqrt(best))


def completed_dyadic_rows(n, k=2):
    """Dense rows of the tree keeping only completed nodes [i k^l, (i + 1) k^l),
    (i + 1) k^l <= n, written from the definition (any order)."""
    rows, width = [], 1
    while width <= n:
        for i in range(n // width):
            r = np.zeros(n)
            r[i * width:(i + 1) * width] = 1.0
            rows.append(r)
        width *= k
    return np.array(rows)
