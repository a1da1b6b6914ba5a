"""Slow, obviously-correct reference constructions shared by the tests (no library code)."""

import math

import numpy as np


def tree_matrix(branching):
    """Dense 0/1 strategy of the level-uniform tree ([RTS] Def. IV.1) and each row's level:
    level order, root first, left to right; node i of level l covers bins [i w, (i+1) w)."""
    n = math.prod(branching)
    rows, levels, m = [], [], 1
    for level in range(len(branching) + 1):
        if level:
            m *= branching[level - 1]
        width = n // m
        for i in range(m):
            row = np.zeros(n)
            row[i * width:(i + 1) * width] = 1.0
            rows.append(row)
            levels.append(level)
    return np.array(rows), np.array(levels)
