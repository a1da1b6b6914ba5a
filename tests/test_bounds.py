"""The SVD lower bound (Li & Miklau 2012; MATH.md section 6): closed form vs numpy singular
values, the 8.466 anchor, units, and validity (no strategy beats it; the public-total
variants are below the exact optimum from cvxpy)."""

import numpy as np
import pytest

from dptree_opt import Mechanism, bounds, expected_error, workloads
from dptree_opt import strategies as S
from dptree_opt.strategies.optimized import gaussian_optimal


@pytest.mark.parametrize("n", [1, 2, 3, 10, 64, 257])
def test_prefix_closed_form_equals_numpy(n):
    sv = np.linalg.svd(np.tril(np.ones((n, n))), compute_uv=False)
    np.testing.assert_allclose(np.sort(bounds.prefix_singular_values(n)), np.sort(sv),
                               rtol=1e-10)
    assert bounds.svd_bound(workloads.prefix(n)) == pytest.approx(sv.sum() ** 2 / n, rel=1e-10)
    assert bounds.svd_bound("prefix", n) == pytest.approx(sv.sum() ** 2 / n, rel=1e-10)


@pytest.mark.parametrize("make", [workloads.all_range, workloads.identity, workloads.total,
                                  lambda n: workloads.ranges(n, [(0, 3), (2, 9), (5, n - 1)])])
def test_dense_workloads_equal_numpy(make):
    w = make(12)
    sv = np.linalg.svd(w.dense(), compute_uv=False)
    assert bounds.svd_bound(w) == pytest.approx(sv.sum() ** 2 / 12, rel=1e-10)


def test_anchor_8_466():
    # MATH.md section 6: SVD lower bound, mean prefix MSE at n = 2^10, sigma^2 = 1
    assert bounds.svd_bound("prefix", 1024) / 1024 == pytest.approx(8.466, abs=5e-4)


def test_units():
    w = workloads.prefix(50)
    b = bounds.svd_bound(w)
    assert bounds.error_lower_bound(w, noise="gaussian", rho=2.0) == pytest.approx(b / 4.0)
    assert bounds.error_lower_bound(w, noise="laplace", epsilon=0.5) == pytest.approx(8.0 * b)
    with pytest.raises(ValueError, match="rho"):
        bounds.error_lower_bound(w, noise="gaussian", epsilon=1.0)
    with pytest.raises(ValueError, match="n"):
        bounds.svd_bound("prefix")


STRATS = [S.histogram, S.prefix_sums, S.binary_tree, lambda n: S.tree(n, 4), S.haar,
          S.sqrt_factorization]


@pytest.mark.parametrize("neighbours,public", [("add_remove", None), ("add_remove", True),
                                               ("swap", None)])
@pytest.mark.parametrize("noise,budget", [("gaussian", {"rho": 0.3}),
                                          ("laplace", {"epsilon": 0.8})])
def test_no_strategy_beats_the_bound(neighbours, public, noise, budget):
    n = 16
    for work in (workloads.prefix(n), workloads.all_range(n)):
        lb = bounds.error_lower_bound(work, noise=noise, neighbours=neighbours,
                                      public_total=public, **budget)
        for make in STRATS:
            mech = Mechanism(make(n), noise=noise, neighbours=neighbours, public_total=public,
                             **budget)
            assert expected_error(work, mech) >= lb * (1 - 1e-9)


def test_gaussian_optimum_between_bound_and_strategies():
    n = 64
    w = workloads.prefix(n)
    opt = gaussian_optimal(w)
    assert bounds.svd_bound(w) <= opt.lower_bound * (1 + 1e-12) <= opt.error * (1 + 1e-12)


@pytest.mark.parametrize("neighbours", ["swap", "add_remove"])
def test_public_total_bounds_below_cvxpy_optimum(neighbours):
    # exact optimum over all Gaussian strategies with N public, as an SDP (n = 6):
    # minimise tr(G_Q (Q'XQ)^-1), X >= 0, sensitivity^2 <= 1 (linear in X)
    cp = pytest.importorskip("cvxpy")
    n = 6
    w = workloads.prefix(n)
    q = np.linalg.qr(np.column_stack([np.ones(n), np.eye(n)[:, :n - 1]]))[0][:, 1:]
    gq = q.T @ w.gram_dense() @ q
    x = cp.Variable((n, n), PSD=True)
    if neighbours == "swap":
        cons = [x[a, a] + x[b, b] - 2 * x[a, b] <= 1 for a in range(n) for b in range(a + 1, n)]
    else:
        cons = [cp.diag(x) <= 1]
    prob = cp.Problem(cp.Minimize(cp.matrix_frac(np.linalg.cholesky(gq), q.T @ x @ q)), cons)
    prob.solve(solver="CLARABEL")
    lb = bounds.svd_bound(w, neighbours=neighbours, public_total=True)
    assert lb <= prob.value * (1 + 1e-6)
    assert lb >= 0.5 * prob.value  # and not vacuous


@pytest.mark.parametrize("kind", ["prefix", "all_range"])
@pytest.mark.parametrize("n", [2, 3, 10, 257, 3000])
def test_public_total_nuclear_quadrature_equals_dense(kind, n):
    """||W P||_* by the resolvent quadrature (used above 8192 bins) = the dense eigenvalues."""
    from dptree_opt.bounds import _projected_nuclear_of, _projected_nuclear_quadrature

    dense = _projected_nuclear_of(getattr(workloads, kind)(n))
    assert _projected_nuclear_quadrature(kind, n) == pytest.approx(dense, rel=1e-9)


def test_public_total_closed_forms_and_scale():
    from dptree_opt.bounds import _projected_nuclear_of, svd_bound

    for n in (2, 7, 50):
        assert svd_bound("identity", n, neighbours="add_remove", public_total=True) == \
            pytest.approx(_projected_nuclear_of(workloads.identity(n)) ** 2 / n, rel=1e-12)
    # above the dense limit the public-N bounds exist, and lie below the private ones
    n = 1 << 14
    for kind in ("prefix", "all_range"):
        pub = svd_bound(kind, n, neighbours="add_remove", public_total=True)
        priv = svd_bound(kind, n, neighbours="add_remove")
        assert 0 < pub <= priv
