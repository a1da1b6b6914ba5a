"""The frontier (issue 14): the best mechanisms at scale, with certificates.

Run:  python benchmarks/bench_frontier.py [n ...]     (default 1024 4096 65536; add 1048576)

Part 1, the Gaussian optimum (rho-zCDP, add/remove, per unit sigma^2) as an implicit operator
(``strategies.gaussian_optimal_implicit``, MATH.md section 7 "route to scale"): for the prefix
(CDF) and all-range workloads, the certified primal value (the column-normalised strategy's
exact BLUE error) and the dual lower bound, mean per query, to a gap of 1e-3 and (n <= 2^16)
1e-6; iterations, wall time and peak traced memory. Then, on the prefix optimum, the exact
identity / all-range errors of its mechanism (a fresh strategy from the dual point: the first
error call computes all the moments, the others reuse them) and the BLUE of one release.

Part 2 (pure DP, issue 14 item 5): the best tree with optimal budgets and the non-tree rows
under Laplace. Tried so far: only trees (the optimal-budget search now also scores the finest
3-smooth trees: 118.23 / 412.71 / 758.44 at 2^10 / 2^16 / 2^20 against MATH.md's 119.0 /
414.5 / 760.9); Haar and the square-root factorisation are far worse under L1; p-Identity is
dense (256 bins). Part 3: budgets per NODE (not per level) on the binary tree, every root-to-leaf path summing to
eps (``optimize.optimal_node_budgets``: L-BFGS-B with the exact O(K) adjoint gradient of the
bridge passes; Mechanism(row_budgets=...)): 256 bins 66.69 (per-level optimum 70.77, best
tree 69.73, p-Identity 54.56); 1024: 112.77 (per-level 118.96; the best 1024-bin tree with
optimal per-level budgets, 3,3,3,2,.. over 1728 bins, is 118.23); 2^16: 384.63 in 31 s
(target 400; per-level 414.49, best tree 412.71); 2^20: 707.49 after 100 iterations (58 s),
706.70 at convergence (1280 iterations, 763 s on a loaded machine) (target 740; per-level
760.94, best tree 758.44). Every other
complete tree tried at 1024 ((4,)*5, (8,8,16), (32,32), (16,16,4) ...) is no better than
binary: per-node budgets do not reach the 2^10 aim of 88 (p-Identity 91.2 is dense).
Tried before the adjoint: f shared by the nodes of a level whose indices end in the same
2 / 3 binary digits, finite differences (commit 6df5e5a): 2^16 401.11 (376 s) / 393.55
(786 s): superseded by full per-node freedom.

Part 4 (issue 28 item 1, a failure recorded): local optimisation of the full l1 problem from
HDMM's p-Identity. Variables P, N >= 0 (the strategy B = P - N, so the l1 column norms
u_j = sum_r (P + N)_rj are smooth), A = B diag(1 / u) (every column of l1 norm 1, eps = 1
exactly), objective tr(G (A'A)^-1) with its analytic gradient, L-BFGS-B from P = p-Identity's A
(p = n / 16), N = 0. At 256 bins: 54.5564 -> 54.2819 after 100 iterations (8 s); at 1024:
91.2365 -> 91.1412 per prefix after 300 iterations (171 s, 2 cores), about 3e-4 per 100
iterations: p-Identity is near a local optimum of the full problem,
and this route does not reach the aim of 88. Now ``optimize.l1_local``: 256 bins 54.5564 -> 54.28 / 53.94 / 53.69 / 53.65
after 100 / 300 / 1000 / 2443 iterations (converged; 4 / 9 / 25 / 90 s, one core); p-Identity
itself converged (max_iter 3000) 54.535; starts p = 32 / 64: 54.70 -> 54.44, 57.01 -> 55.44
(1000 iterations): the default p = 16 is the best start; at 8 bins 9.00003 -> 9.0, at 16-64
bins p-Identity is already a local optimum of the full problem. On the 256 x 256 CDF the
Kronecker product (family ``kron_l1_local``) gives 1441.2 per query against Kronecker
p-Identity's 1488.2 (issue 28 item 4; 27 s in ``best_mechanism``). (Plain L-BFGS on B with |B| stops at once: sign(0)
gives a zero gradient on p-Identity's zeros.) p-Identity itself at 1024 bins
(``strategies.optimized.laplace_p_identity``, dyadic start): p = 32: 93.71, p = 64 (HDMM's
n / 16): 91.24 (500 iterations) and 90.89 (3000 iterations, 97 s), p = 128: 93.46 (500) and
91.84 (3000, 157 s): more rows or more iterations do not reach 88 either.

Part 5 (issue 28 item 2): nested strategies (``strategies.nested``, docs/math.md section 12:
local matrices S_d on the children totals of every node at depth d, exact error in O(L k^3)),
optimised by ``optimize.optimal_nested`` (L-BFGS-B with the hand-written reverse pass).
What was tried (Laplace, eps = 1, mean per prefix; lead's jax prototypes, then the package):
- starts "tree" / "identity" / "p_identity" with 2 extra rows: 256: 32 x 8 60.57, 16 x 16 62.15,
  4 x 8 x 8 67.56, 2^8 78.58 (depths whose budget goes to 0: poor local optima); 1024: 32 x 32
  112.91, 32 x 4 x 8 112.93, 8 x 8 x 16 114.08; 2^16: 64 x 32 x 32 378.58, 32 x 8 x 32 x 8
  385.06, 16^4 386.77, 8^5 x 2 451.60, 256 x 256 564.05 (stuck): at best level with budgets
  per node (384.63).
- budgets per node on top (every node's S_d scaled, paths summing to 1): 64 x 32 x 32 378.58 ->
  378.38: nothing. Local matrices per child index (types): no descent from the shared optimum.
- nested of p-Identities optimised for their own size, budgets per depth only: 1024: 32 x 32
  120.38, 16 x 64 118.31, 4 x 16 x 16 147.42 (worse than the per-node tree).
- **the full l1 optimum of each fan-out as the start** (``optimize.l1_local`` from p-Identity,
  300 iterations, as it is): 2^16 = 256 x 256: start 371.34, 330.33 after 5000 iterations
  (156 s, one core; the engine's exact error of the calibrated mechanism agrees to 1e-15,
  eps = 1); 2^20 = 256 x 256 x 16: start 826.55, 629.47 after 5000 iterations (322 s, the
  package; 629.82 after 3000 in the prototype);
  256 x 64 x 64: 762.33 -> 648.41 (converged); 1024 x 1024: too slow to finish (1024^3 per
  evaluation); 1024 = 32 x 32: 120.39 -> 105.22 (p-Identity 91.24 stays the best at 1024).
Targets of the issue: <= 350 at 2^16 and <= 640 at 2^20 (budgets per node 384.63 / 706.7): met.

Part 6 (issue 28, this session): **p-Identity from multi-scale hats**
(``strategies.optimized.hat_start``: triangles of half-width h = 16, 64, 256, .. with 2 h < n,
each scale a partition of unity, about n / 12 rows; ``laplace_p_identity(hats=True)``;
``best_mechanism`` family ``p_identity_hats``). Found by reading the l1_local optimum at 256
bins: it IS a p-Identity (every identity row kept, 15 non-negative rows after a sign flip,
one empty), made of hats 22-48 bins wide plus two rows over half the domain, so its 53.65
against p-Identity's 54.54 is a better basin of the same family, not the extra freedom.
Mean per prefix, eps = 1, 3000 iterations (one core): 256: dyadic 54.96 -> hats 53.66 (1.7 s);
512: 71.04 -> 70.92 (hat_start's scales 16, 64; adding 256 gives 70.37, but at
2048 adding 1024 is worse, 115.42 against 114.67, so the rule 2 h < n stays); 1024: 90.61 (dyadic converged, 8511 it., 78 s) vs 90.60 (hats, 20000 it.
cap, converged at 7310, 90 s); 2048: 114.67 (169 s; 115.73 after 500 it., 33 s) against
budgets per node 145.63 and the nested family 128.3; 4096 (hat scales 16, 64, 256, 1024; 344 rows): 143.94 after
2500 it. (652 s on a loaded core) against budgets per node 179.09 (8192: 220.21). The optima
are sparse (2048: 9,650 non-zeros of 171 x 2048), hence ``strategies.p_identity_sparse``:
the same objective on the hats' support widened twice, O(p^3 + p nnz + n p) per evaluation
(7 ms / 80 ms / 0.37 s / 2.1 s at 2^10 / 2^12 / 2^13 / 2^14, against the dense 12 ms / 0.2 s /
~1.6 s / -). Masked dense runs at 1024 (5000 it.): support widened 1x 91.08, 1.5x 90.70, 2x
90.61 (unrestricted 90.60); the sparse optimiser at 1024: 90.595 (converged, 3917 it., 46 s).
4096: 143.63 after 2500 it. (206 s; the dense engine agrees to 1e-11); 8192 (684 rows, 126,992 entries):
176.20 after 2500 it. (1040 s; the dense engine agrees, 16 s).
Front door (default minute, family p_identity_hats): 2048 115.50 (1074 it.), 4096 145.54
(229 it.); nested in the same searches 128.45 / 159.68, at 8192 197.15 (48 s). All ranges
(mean per range; the same support, G applied in O(n) per column): 256 64.87 (p-Identity
64.90), 1024 121.20 (3000 it., 16 s; p-Identity 122.44, best tree 153.85); front door 2048
156.87 and 4096 202.79 (25 s) against the best tree with optimal budgets 201.79 / 259.53.
Item 1 (<= 88 at 2^10), all failures: hat scales (16, 64, 256) 90.60, (24, 96, 384) 90.80,
(12, 48, 192) 91.02, (32, 128, 512) 91.55, (8, 32, 128, 512) with 174 rows 91.37 (more rows,
worse optima); basin hopping from the 90.60 optimum (the 20 dead rows and 20 live ones
re-seeded as random hats of width 8-600, 6000 it. each, 8 hops): 90.63-91.00, never better;
l1_local (full problem) from that optimum with its single-bin rows dropped (start 182.4):
back to 90.66 after 1200 it. (440 s); from the converged optimum itself (90.5958): 90.5526
after 600 it. (220 s), falling by ~0.002 per 100 (the best value of this session at 2^10); full-problem starts at 256 bins with no
identity (a tridiagonal base, or identity plus overlapping pairs, plus hats): 53.71 both,
the same basin as 53.65; random dense starts of the full problem at 32 bins: 26.2-40.1
against p-Identity's 19.65 (L-BFGS-B stops in ~100 iterations). Every start we found ends at
the identity plus hats plus a few long rows; at 1024 bins that family sits at 90.6.

Part 7 (issue 28 item 1: is 88 at 2^10 within reach?): random multi-start of the FULL l1
problem (``optimize.l1_local``, 3000 iterations) at small n, to see whether the hats basin is
only the best start we thought of or the best basin there is. Starts: the identity (a random
weight) plus 3..n/4 random hats (half-width log-uniform in [1.5, n/1.5], random centre and
height); at 64 bins also signed rows (hats with random or step signs, up to n/3 of them), starts
with no identity (n..2n random hats down to half-width 0.6) and perturbed Haar wavelets. Best
value against the hats basin (p-Identity from ``hat_start``, then ``l1_local``;
``multistart_table()`` reruns the identity-plus-hats rows below with their seeds, ~40 min in
all; the signed, identity-free and Haar starts at 64 bins and the 1024-bin p-Identity starts
were one-off scripts, their recipes as given here):
  64 bins: hats basin 28.3248; 125 random starts: best 28.3248, reached by 62 of them (44 of 60
    identity+hats, 16 of 30 signed, 2 of 25 without the identity; Haar: 29.30 at best);
  128: hats basin 39.4753; 21 random starts: best 39.4757 (median 39.87);
  256: hats basin 53.6202 (converged); 12 random starts (3000 iterations): two end below it,
    53.5795 and 53.5943 (converged: 53.5792 / 53.5858), the rest 53.69-54.03 (one 63.84). The
    better basin has fewer rows: the identity at a larger weight (mean 0.471 against 0.442), one
    row over the whole domain and 11 hats 21-59 bins wide, some with holes (56 non-zeros over
    94 bins), against 16 hats in the hats basin;
  512: hats basin 70.7895 (70.9228 -> 70.7895 after 3000 iterations of l1_local); 8 random
    starts (3000 iterations, ~4 min each): 70.6975 and 70.7020 (0.13 % below it), the rest
    70.98-71.84 (one 101.50);
  1024 (p-Identity only: the full problem costs ~17 min per start there): 80 random starts of
    15..120 hats (half-width log-uniform from 4 to 64, 256 or 700; half of them with a row
    over the whole domain), 1500 iterations: best 90.65, median 91.6; the best of each
    40 continued to convergence: 90.587 (63 rows) and 90.760, against the hats basin's 90.60;
    starts shaped like the better 256-bin basin (a row over the whole domain plus hats of
    half-width 16 / 24 / 20 + 128 / 24 + 256 / 32 + 256 / 16 + 256, 3000 iterations): 91.49,
    91.30, 91.33, 91.27, 92.27, 90.71.
The hats basin is the best basin at 64 and 128 bins (at 64, where the search is nearly
exhaustive, half of all starts end at its value to 4 digits and none below), within 0.08 % /
0.13 % of the best found at 256 / 512 and within 0.02 % of the best of 80 random starts at
1024. Extrapolating the best values (64..512: 28.32, 39.48, 53.58, 70.70; successive
differences 11.15, 14.10, 17.12, second differences 2.95, 3.01) gives about
70.70 + 17.12 + 3.0 = 90.8 at 1024; the 90.55 found there is already below that trend, and 88
would need the second difference to fall from about 3 to 0.2 in one doubling. The evidence
is that no linear Laplace mechanism reaches 88 at 2^10 (not a proof: the problem is
non-convex). Discrete Laplace noise does not change this: on the identity rows of the 90.55
mechanism (integer rows, noise scale 1 / w_j with w_j their budget, 0.19..0.96) its exact
variance 1 / (2 sinh^2(w_j / 2)) instead of 2 / w_j^2 gives 90.22; the hats' rows are real and
gain nothing measurable from a lattice (variance 2 s^2 - 1/6 at scale s).

Reference values (MATH.md section 7): 8.7348 (2^10), 11.4906 (2^12), 18.1759 (2^16); the
square-root factorisation 9.6708 / 19.6643 / 28.2753 (2^10 / 2^16 / 2^20); SVD bound 17.911
(2^16); Henzinger-Kalinin-Upadhyay's asymptotic bracket [26.150, 26.633] at 2^20.
"""

from __future__ import annotations

import sys

import numpy as np

from _bench import timed

from dptree_opt import Mechanism, blue, expected_error, workloads
from dptree_opt.bounds import svd_bound
from dptree_opt.strategies import ImplicitFactorization, gaussian_optimal_implicit
from dptree_opt.strategies.implicit_optimum import _gram_inverse


def optimum_table(ns):
    print("| workload | n | tol | iterations | time (s) | peak MiB | primal / query | "
          "dual / query | gap | SVD bound / query |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    best = {}
    for n in ns:
        for kind in ("prefix", "all_range"):
            w = getattr(workloads, kind)(n)
            q = w.n_queries
            for tol in ((1e-3, 1e-6) if n <= 1 << 16 else (1e-3,)):
                res, secs, mib = timed(gaussian_optimal_implicit, w, tol=tol)
                print(f"| {kind} | {n} | {tol:g} | {res.iterations} | {secs:.2f} | {mib:.0f} | "
                      f"{res.error / q:.6f} | {res.lower_bound / q:.6f} | {res.gap:.1e} | "
                      f"{svd_bound(w) / q:.4f} |", flush=True)
                if kind == "prefix":
                    best[n] = res
    return best


def strategy_table(best):
    print()
    print("| n | step | time (s) | peak MiB | value |")
    print("|---|---|---|---|---|")
    for n, res in best.items():
        # a fresh strategy at the optimum's dual point: nothing cached from the solver
        w = workloads.prefix(n)
        fresh, secs, mib = timed(ImplicitFactorization, *_gram_inverse(w),
                                 res.strategy.dual_point)
        print(f"| {n} | strategy from the dual point (diag(S), accurate quadrature) | "
              f"{secs:.3f} | {mib:.0f} | max column norm^2 {fresh.column_norms_squared.max():.12f} |",
              flush=True)
        mech, secs, mib = timed(Mechanism, fresh, rho=0.5, noise="gaussian",
                                neighbours="add_remove")
        print(f"| {n} | mechanism (exact add/remove L2 sensitivity) | {secs:.3f} | {mib:.0f} | "
              f"sigma^2 = {mech.variances[0]:.10f} |", flush=True)
        for kind in ("prefix", "identity", "all_range"):
            w = getattr(workloads, kind)(n)
            val, secs, mib = timed(expected_error, w, mech)  # the first call computes moments
            print(f"| {n} | exact error, {kind} (mean) | {secs:.3f} | {mib:.0f} | "
                  f"{val / w.n_queries:.6f} |", flush=True)
        y = mech.measure(np.random.default_rng(0).integers(0, 100, n), np.random.default_rng(1))
        _, secs, mib = timed(blue, mech, y)
        print(f"| {n} | BLUE of one release (A^-1 y) | {secs:.3f} | {mib:.0f} | |", flush=True)
        swap, secs, mib = timed(Mechanism, fresh, rho=0.5, noise="gaussian",
                                neighbours="swap")
        low, high = fresh.swap_bracket()
        print(f"| {n} | mechanism under swap (bracket [{low:.9f}, {high:.1f}]) | {secs:.3f} | "
              f"{mib:.0f} | CDF mean {expected_error(workloads.prefix(n), swap) / n:.4f} |",
              flush=True)


def laplace_table(ns):
    """Part 2 (issue 14 item 5, pure DP): what stands at each size, eps = 1, add/remove, mean
    per prefix. The best tree is compare's "best_blue_optimal" row (the exact search with
    optimal BLUE budgets up to 4096 bins, its pool extended by the finest 3-smooth trees;
    above, the finest trees of K and of the 3-smooth K' <= 2K), also on the real bins with
    the padding as known zeros (its design's mechanism); non-tree rows: Haar, the square-root
    factorisation, HDMM's p-Identity (dense: 256 bins here)."""
    from dptree_opt import compare, optimize
    print()
    print("| n | best tree (optimal budgets) | on the real bins | Haar | sqrt factorisation | "
          "p-Identity | l1 SVD bound | time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in ns:
        rows = ["best_blue_optimal", "haar", "sqrt_factorization"] + (
            ["optimized"] if n <= 256 else [])
        res, secs, _ = timed(compare.compare, n, 1.0, neighbours="add_remove", rows=rows,
                             workloads=("cdf",))
        r = {row.key: row for row in res.rows}

        def mean(key):
            row = r.get(key)
            return f"{row.errors['cdf'].mean:.2f}" if row and row.available else "n/a"

        real = "-"
        if n <= 4096:
            d = optimize.level_uniform(n, 1.0, neighbours="add_remove", estimator="blue",
                                       budgets="optimal", top=0)
            real = f"{expected_error(workloads.prefix(n), d.mechanism()) / n:.2f}"
        print(f"| {n} | {mean('best_blue_optimal')} ({r['best_blue_optimal'].strategy}) | {real} "
              f"| {mean('haar')} | {mean('sqrt_factorization')} | {mean('optimized')} | "
              f"{res.bounds['cdf']:.2f} | {secs:.1f} |", flush=True)


def node_budgets_table(ns, maxiter: int = 300):
    """Part 3 (issue 14 item 5): budgets per NODE on the binary tree (every root-to-leaf path
    sums to eps; Laplace, eps 1, add/remove, BLUE, mean per prefix), by
    ``optimize.optimal_node_budgets``: L-BFGS-B with the exact O(K) adjoint gradient of the
    bridge passes, from the per-level optimum; then the Mechanism (``row_budgets``) and its
    exact error through ``expected_error`` (the bridge engine), as a check."""
    from dptree_opt import optimize
    print()
    print("| n | per-level optimum | per-node | L-BFGS-B iterations | time (s) | peak MiB | "
          "Mechanism's eps | expected_error / n |")
    print("|---|---|---|---|---|---|---|---|")
    for n in ns:
        h = n.bit_length() - 1
        res, secs, mib = timed(optimize.optimal_node_budgets, (2,) * h, 1.0,
                               neighbours="add_remove", maxiter=maxiter)
        mech = res.mechanism()
        check = expected_error(workloads.prefix(n), mech) / n
        print(f"| {n} | {res.start_mean:.2f} | {res.mean:.2f} | {res.iterations} | {secs:.0f} | "
              f"{mib:.0f} | {mech.epsilon:.12f} | {check:.2f} |", flush=True)


def l1_local_table(ns, iterations: int = 300):
    """Part 4: the full l1 problem from p-Identity (``optimize.l1_local``: L-BFGS-B on the
    split B = P - N, columns normalised), and the Kronecker product of the result on the
    n x n CDF (the grid family ``kron_l1_local``): mean per query E^2 / (2 n^2), E the 1-D
    total at eps = 1 (docs/math.md section 8)."""
    from dptree_opt.optimize import l1_local
    print("\n| n | p-Identity | after L-BFGS-B | iterations | seconds | n x n CDF |")
    print("|---|---|---|---|---|---|")
    for n in ns:
        res, secs, _ = timed(l1_local, workloads.prefix(n), maxiter=iterations)
        print(f"| {n} | {res.start_error / n:.4f} | {res.error / n:.4f} | {res.iterations} | "
              f"{secs:.0f} | {res.start_error**2 / (2 * n * n):.1f} -> "
              f"{res.error**2 / (2 * n * n):.1f} |", flush=True)


def nested_table(plans=((256, 256), (256, 256, 16)), seconds: float = 900.0):
    """Part 5: nested strategies from the full l1 optimum of each fan-out."""
    from dptree_opt.optimize.nested_design import optimal_nested
    print("\n| n | fan-outs | start | optimised | iterations | seconds | engine check | eps |")
    print("|---|---|---|---|---|---|---|---|")
    for ks in plans:
        d = optimal_nested(ks, starts=("l1_local",), maxiter=5000, max_seconds=seconds)
        mech = d.mechanism()
        n = d.n_bins
        check = expected_error(workloads.prefix(n), mech) / n
        print(f"| {n} | {'x'.join(map(str, ks))} | {d.start_mean:.2f} | {d.mean:.2f} | "
              f"{d.iterations} | {d.seconds:.0f} | {check:.2f} | {mech.epsilon:.12f} |",
              flush=True)


def hats_table(ns=(256, 512, 1024, 2048, 4096, 8192), iterations: int = 3000,
               dense_up_to: int = 2048):
    """Part 6: p-Identity from the dyadic start and from the multi-scale hat start (dense
    optimiser, one start each, up to ``dense_up_to`` bins), on the hats' sparse support
    (``strategies.p_identity_sparse``), ``iterations`` L-BFGS-B iterations each, and budgets
    per node on the binary tree; the sparse result's error checked by the dense engine."""
    from dptree_opt import Mechanism, optimize
    from dptree_opt.strategies.optimized import laplace_p_identity
    from dptree_opt.strategies.p_identity_sparse import laplace_p_identity_hats
    print("\n| n | dyadic start | s | hat start | s | hats' sparse support | s | "
          "dense engine check | budgets per node |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in ns:
        w = workloads.prefix(n)
        dense = ["-", "-", "-", "-"]
        if n <= dense_up_to:
            dy, s1, _ = timed(laplace_p_identity, w, starts=1, max_iter=iterations)
            ha, s2, _ = timed(laplace_p_identity, w, starts=0, hats=True, max_iter=iterations)
            dense = [f"{dy.error / n:.4f}", f"{s1:.0f}", f"{ha.error / n:.4f}", f"{s2:.0f}"]
        sp_, s3, _ = timed(laplace_p_identity_hats, w, max_iter=iterations)
        check = expected_error(w, Mechanism(sp_.strategy, epsilon=1.0)) / n
        nb = optimize.optimal_node_budgets((2,) * (n.bit_length() - 1), 1.0, maxiter=2000)
        print(f"| {n} | {' | '.join(dense)} | {sp_.error / n:.4f} | {s3:.0f} | {check:.4f} | "
              f"{nb.mean:.2f} |", flush=True)


def _random_hats_start(rng, n: int):
    """Part 7's random start: the identity at a random weight plus 3..n/4 random hats."""
    x = np.arange(n) + 0.5
    rows = []
    for _ in range(rng.integers(3, max(4, n // 4))):
        h = np.exp(rng.uniform(np.log(1.5), np.log(n / 1.5)))
        rows.append(np.clip(1 - np.abs(x - rng.uniform(0, n)) / h, 0, None) * rng.uniform(0.3, 1.5))
    return np.vstack([np.eye(n) * rng.uniform(0.5, 1.5)] + [r for r in rows if r.sum() > 0])


def multistart_table(plan=((64, 60, 1), (128, 21, 2), (256, 12, 7), (512, 4, 21), (512, 4, 22)),
                     iterations: int = 3000):
    """Part 7: the full l1 problem (``optimize.l1_local``) from random identity-plus-hats
    starts against the hats basin (p-Identity from ``hat_start``, then ``l1_local``). ``plan``:
    (n, starts, seed) rows, one generator per row (the defaults reproduce the identity-plus-hats
    numbers of the module docstring; the 512-bin rows take ~16 min each on one core); per row:
    the basin's value, the best and median random result and how many end at or below it."""
    from dptree_opt.optimize.l1_local import l1_local
    from dptree_opt.strategies.optimized import laplace_p_identity
    print("\n| n | seed | hats basin | random starts | best | median | "
          "at or below the basin (rel. 1e-4) |")
    print("|---|---|---|---|---|---|---|")
    basins = {}
    for n, count, seed in plan:
        w = workloads.prefix(n)
        if n not in basins:
            basins[n] = l1_local(w, laplace_p_identity(w, hats=True, max_iter=iterations),
                                 maxiter=iterations).error / n
        rng = np.random.default_rng(seed)
        got = np.array([l1_local(w, _random_hats_start(rng, n), maxiter=iterations).error / n
                        for _ in range(count)])
        print(f"| {n} | {seed} | {basins[n]:.4f} | {count} | {got.min():.4f} | "
              f"{np.median(got):.4f} | {int(np.sum(got <= basins[n] * (1 + 1e-4)))} |", flush=True)


def main(ns):
    best = optimum_table(ns)
    strategy_table(best)
    node_budgets_table([n for n in [256] + list(ns) if n <= 1 << 20])
    laplace_table([n for n in [256] + list(ns) if n <= 1 << 20])
    l1_local_table([n for n in [256] + list(ns) if n <= 1024])
    nested_table()
    hats_table()
    multistart_table()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1024, 4096, 65536])
