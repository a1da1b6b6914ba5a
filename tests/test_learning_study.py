"""experiments/learning_study.py (private learning under multiple participations): its losses
at a small n against independent dense computations, its check helper, its place in
`dptree-opt figures`; the whole quick run (every check passes) is marked slow."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from dptree_opt.cli import figures_cmd
from dptree_opt.cli._scripts import load_script


@pytest.fixture(scope="module")
def study():
    return load_script("experiments", "learning_study")


def test_registered(study):
    assert "learning_study" in figures_cmd.EXPERIMENT_ITEMS
    for spec in study.PARAMETERS.values():
        assert all(hasattr(study, name) for name in spec["sets"])


def _dense(n, k, bands=None):
    """Square root C (c_j = binom(2j, j) / 4^j), optionally truncated to ``bands`` diagonals;
    fixed_epoch(k, n / k): sens^2 = max over offsets of sum X[P, P] (X = C'C >= 0), mean
    loss = sens^2 ||W C^-1||_F^2 / n, max loss = sens^2 max_t ||row t of W C^-1||^2."""
    c = np.array([comb(2 * j, j) / 4.0**j for j in range(n)])
    C = np.array([[c[i - j] if 0 <= i - j < (bands or n) else 0.0 for j in range(n)]
                  for i in range(n)])
    X = C.T @ C
    b = n // k
    sens2 = max(X[np.ix_(P, P)].sum() for P in (np.arange(o, n, b) for o in range(b)))
    B = np.tril(np.ones((n, n))) @ np.linalg.inv(C)
    rows = (B**2).sum(axis=1)
    return sens2 * rows.mean(), sens2 * rows.max()


def test_losses_against_dense_computations(study):
    """n = 24, k = 3: square root, BSR (8 bands) by dense numpy; independent noise in closed
    form, Gaussian k (n + 1) / 2 and Laplace (l1 sens k, variance 2 k^2) k^2 (n + 1)."""
    n, k = 24, 3
    only = ("sqrt", "bsr", "independent", "tree")
    g = study.losses(n, k, "gaussian", only=only)
    for key, bands in (("sqrt_blue", None), ("bsr_blue", n // k)):
        mean, mx = _dense(n, k, bands)
        assert g[key] == pytest.approx(mean, rel=1e-9)
        assert g[f"{key}_max"] == pytest.approx(mx, rel=1e-9)
    assert g["independent_blue"] == pytest.approx(k * (n + 1) / 2, rel=1e-12)
    lap = study.losses(n, k, "laplace", only=only)
    assert lap["independent_blue"] == pytest.approx(k * k * (n + 1), rel=1e-12)
    # a tree under Laplace: exactly k^2 times its single-participation loss (equal l1 norms)
    single = study.losses(n, 1, "laplace", only=only)
    assert lap["tree_blue"] == pytest.approx(k * k * single["tree_blue"], rel=1e-9)


def test_recorded_check_tolerance(study):
    """A recorded value passes when the reproduced number rounds to it, and fails beyond."""
    assert study._recorded("x", 118.15684, "118.1568", "s")["ok"]
    assert not study._recorded("x", 118.15686, "118.1568", "s")["ok"]
    assert study._recorded("x", 324446.6, "324447", "s")["ok"]
    assert not study._recorded("x", 324446.4, "324447", "s")["ok"]


@pytest.mark.slow
def test_quick_run(study, tmp_path):
    res = study.run(tmp_path, quick=True)
    assert (tmp_path / "learning_study.png").stat().st_size > 10_000
    data = json.loads((tmp_path / "learning_study.json").read_text())
    assert data["rows"] and data["stackoverflow"] and len(data["picks"]) == 2
    assert len(res["checks"]) >= 30 and all(c["ok"] for c in res["checks"]), [
        c["what"] for c in res["checks"] if not c["ok"]]
