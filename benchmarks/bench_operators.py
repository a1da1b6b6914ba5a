"""Structured operators (issue 13): exact error and BLUE of every structure at scale.

Run:  python benchmarks/bench_operators.py [n ...]        (default 8192 65536 1048576)

Part 1, Toeplitz strategies (square-root factorisation). Part 2, interval strategies and
Haar (the bridge decomposition, dptree_opt.engines.laminar / .haar): OpenDP's truncated
tree (known-zero padding: a ragged, non-level-uniform hierarchy), Haar on 2^L bins, and the
level-uniform binary tree for reference (its own O(h) path): mechanism build, exact total error (prefix, identity,
all-range; cold = fresh mechanism, so the decomposition is rebuilt), per-query prefix /
identity, the BLUE of 1 and of 16 releases. Laplace, eps = 1, add/remove.

For the square-root factorisation (Gaussian, rho = 1/2, i.e. sigma^2 = 1 per unit l2
sensitivity), under add/remove (N private: BLUE = A^-1 y) and swap (N public: the rank-one
constrained BLUE), it times and measures the peak Python-heap memory (tracemalloc; numpy
buffers are traced, FFT work arrays inside pocketfft are not) of

* building the mechanism (exact sensitivity and calibration, no matrix),
* exact total error for prefix / identity / all-range (cold: the power-series inverse is
  recomputed on a fresh strategy each time) and per-query error for prefix / identity /
  all-range (n(n+1)/2 outputs: refused above 10^8 queries, i.e. n > 14141) and for 500
  random custom ranges,
* the BLUE of one noisy release and of a batch of 16 releases.

Prints markdown tables (and the mean per-prefix error, MATH.md section 7: 19.6643 at 2^16,
28.2753 at 2^20 under add/remove). Part 3: Kronecker products of trees on 2-D grids:
calibration, the exact 2-D CDF / all-box BLUE errors (eigen-sum over level pairs: ~1.5 ms at
256^2, 1024^2 and 4096^2 alike; issue 15's target is 5 s at 1024^2), A x and A' u. Measured
(binary x binary, Laplace eps 1): calibration 0.30 s / 0.19 s at 1024^2 (add/remove / swap),
3.9 s / 5.9 s at 4096^2 (closed-form sensitivities for products of trees; was 6.8 s / 23.8 s
with the per-axis profile search; what remains is the Mechanism's per-row arrays, 67M rows);
the BLUE of one release at 4096^2 in 2.6 s (issue 15's target: 10 s);
mean 2-D CDF error 15004.28 at 256^2 add/remove (MATH.md section 8's 15004). Part 4:
optimal budgets per level tuple (add/remove, 2-D CDF, mean per query; equal -> optimal):
256^2 binary x binary Laplace 15004.28 -> 2420.28, Gaussian 92.62 -> 78.52; quadtree
Laplace 16095.17 -> 3138.16, Gaussian 894.18 -> 393.79; 1024^2 binary x binary Laplace
44679.82 -> 6894.77 (0.7 s). Under Laplace the equal split over (h + 1)^2 level pairs is
far from optimal.
"""

from __future__ import annotations

import sys

import numpy as np

from _bench import timed

from dptree_opt import Mechanism, blue, expected_error, workloads
from dptree_opt.strategies import sqrt_factorization


def mechanism(n: int, neighbours: str) -> Mechanism:
    return Mechanism(sqrt_factorization(n), rho=0.5, noise="gaussian", neighbours=neighbours)


def cold_error(n, neighbours, kind, per_query):
    mech = mechanism(n, neighbours)  # fresh strategy: the inverse is not cached yet
    return timed(expected_error, getattr(workloads, kind)(n), mech, per_query=per_query)


def main(ns):
    print("| n | neighbours | step | time (s) | peak traced MiB | value |")
    print("|---|---|---|---|---|---|")
    for n in ns:
        for neighbours in ("add_remove", "swap"):
            mech, secs, mib = timed(mechanism, n, neighbours)
            print(f"| {n} | {neighbours} | mechanism (sensitivity, calibration) | {secs:.3f} "
                  f"| {mib:.0f} | sigma^2 = {mech.variances[0]:.4f} |", flush=True)
            for kind in ("prefix", "identity", "all_range"):
                val, secs, mib = cold_error(n, neighbours, kind, False)
                q = getattr(workloads, kind)(n).n_queries
                print(f"| {n} | {neighbours} | total error, {kind} | {secs:.3f} | {mib:.0f} | "
                      f"mean/query {val / q:.4f} |", flush=True)
            for kind in ("prefix", "identity"):
                val, secs, mib = cold_error(n, neighbours, kind, True)
                print(f"| {n} | {neighbours} | per-query error, {kind} | {secs:.3f} | "
                      f"{mib:.0f} | max {val.max():.4f} |", flush=True)
            if n * (n + 1) // 2 > 10**8:
                print(f"| {n} | {neighbours} | per-query error, all_range | - | - | refused: "
                      f"{n * (n + 1) // 2} > 10^8 queries |")
            else:
                val, secs, mib = cold_error(n, neighbours, "all_range", True)
                print(f"| {n} | {neighbours} | per-query error, all_range | {secs:.3f} | "
                      f"{mib:.0f} | max {val.max():.4f} |", flush=True)
            rng = np.random.default_rng(0)
            iv = np.sort(rng.integers(0, n, (500, 2)), axis=1)
            mech = mechanism(n, neighbours)
            val, secs, mib = timed(expected_error, workloads.ranges(n, iv), mech, per_query=True)
            print(f"| {n} | {neighbours} | per-query error, 500 random ranges (cold) | {secs:.3f} "
                  f"| {mib:.0f} | mean {val.mean():.4f} |", flush=True)
            h = rng.poisson(10.0, n)
            mech = mechanism(n, neighbours)
            y1 = mech.measure(h, rng)
            _, secs, mib = timed(blue, mech, y1)
            print(f"| {n} | {neighbours} | BLUE, 1 release (cold) | {secs:.3f} | {mib:.0f} | |",
                  flush=True)
            y16 = mech.released.apply(h)[None, :] + mech.sample_noise(rng, size=16)
            x, secs, mib = timed(blue, mech, y16)
            rmse = float(np.sqrt(np.mean((np.cumsum(x, axis=1) - np.cumsum(h)) ** 2)))
            print(f"| {n} | {neighbours} | BLUE, batch of 16 | {secs:.3f} | {mib:.0f} | "
                  f"prefix RMSE {rmse:.2f} |", flush=True)


def interval_mechanisms(n: int) -> dict:
    """Fresh mechanisms (no cached decomposition) of each interval / Haar structure."""
    from dptree_opt import strategies
    from dptree_opt.anchors import opendp_default

    out = {"OpenDP truncated tree": lambda: opendp_default(n, epsilon=1.0,
                                                           neighbours="add_remove").mechanism,
           "binary tree (level-uniform path)": lambda: Mechanism(
               strategies.binary_tree(n), epsilon=1.0, neighbours="add_remove")}
    if n & (n - 1) == 0:
        out["Haar"] = lambda: Mechanism(strategies.haar(n), epsilon=1.0,
                                        neighbours="add_remove")
    return out


def interval_main(ns):
    print()
    print("| n | structure | step | time (s) | peak traced MiB | value |")
    print("|---|---|---|---|---|---|")
    for n in ns:
        rng = np.random.default_rng(0)
        h = rng.poisson(10.0, n)
        for name, make in interval_mechanisms(n).items():
            mech, secs, mib = timed(make)
            print(f"| {n} | {name} | mechanism | {secs:.3f} | {mib:.0f} | |", flush=True)
            for kind in ("prefix", "identity", "all_range"):
                val, secs, mib = timed(lambda k=kind: expected_error(
                    getattr(workloads, k)(n), make()))
                q = getattr(workloads, kind)(n).n_queries
                print(f"| {n} | {name} | total error, {kind} (cold) | {secs:.3f} | {mib:.0f} "
                      f"| mean/query {val / q:.4f} |", flush=True)
            for kind in ("prefix", "identity"):
                val, secs, mib = timed(expected_error, getattr(workloads, kind)(n), mech,
                                       per_query=True)
                print(f"| {n} | {name} | per-query error, {kind} | {secs:.3f} | {mib:.0f} | "
                      f"max {val.max():.4f} |", flush=True)
            y1 = mech.measure(h, rng)
            _, secs, mib = timed(blue, mech, y1)
            print(f"| {n} | {name} | BLUE, 1 release | {secs:.3f} | {mib:.0f} | |", flush=True)
            y16 = mech.released.apply(h)[None, :] + mech.sample_noise(rng, size=16)
            x, secs, mib = timed(blue, mech, y16)
            rmse = float(np.sqrt(np.mean((np.cumsum(x, axis=1) - np.cumsum(h)) ** 2)))
            print(f"| {n} | {name} | BLUE, batch of 16 | {secs:.3f} | {mib:.0f} | "
                  f"prefix RMSE {rmse:.2f} |", flush=True)


def kronecker_main(sides=(256, 1024, 4096)):
    """Part 3: Kronecker products of binary trees on side x side grids (no grid-sized
    matrix): calibration (exact sensitivities from per-axis profiles), the exact 2-D CDF and
    all-box errors (error.kronecker), A x and A' u."""
    from dptree_opt import strategies
    print()
    print("| grid | neighbours | step | time (s) | peak traced MiB | value |")
    print("|---|---|---|---|---|---|")
    for side in sides:
        k = strategies.kron(strategies.binary_tree(side), strategies.binary_tree(side))
        for neighbours in ("add_remove", "swap"):
            k = strategies.kron(*k.factors)  # fresh: no cached profiles
            mech, secs, mib = timed(Mechanism, k, epsilon=1.0, neighbours=neighbours)
            print(f"| {side}x{side} | {neighbours} | mechanism ({len(mech.level_budgets)} "
                  f"level pairs) | {secs:.3f} | {mib:.0f} | eps = {mech.epsilon:.6f} |",
                  flush=True)
            for kind in ("prefix", "all_range"):   # exact total BLUE error (issue 15 item 3)
                w = getattr(workloads, kind)((side, side))
                err, secs, mib = timed(expected_error, w, mech)
                print(f"| {side}x{side} | {neighbours} | exact 2-D {kind} error (eigen-sum) | "
                      f"{secs:.4f} | {mib:.0f} | mean {err / w.n_queries:.2f} |", flush=True)
        x = np.random.default_rng(0).random(k.n_bins)
        y, secs, mib = timed(k.apply, x)
        print(f"| {side}x{side} | - | A x ({k.n_rows} rows) | {secs:.3f} | {mib:.0f} | |")
        noisy = mech.measure(np.random.default_rng(1).integers(0, 5, k.n_bins),
                             np.random.default_rng(2))
        _, secs, mib = timed(blue, mech, noisy)
        print(f"| {side}x{side} | swap | BLUE of one release (per-axis Haar) | {secs:.3f} | "
              f"{mib:.0f} | |", flush=True)
        _, secs, mib = timed(k.rmatvec, y)
        print(f"| {side}x{side} | - | A' u | {secs:.3f} | {mib:.0f} | |", flush=True)


def grid_budgets_main(sides=(256, 1024)):
    """Part 4 (issue 15 item 4): budgets per level tuple (optimize.optimal_grid_budgets) for
    binary x binary and the quadtree on the 2-D CDF, add/remove, mean per query: the equal
    split against the optimum (eigen-sum objective, O(h^2) per evaluation)."""
    from dptree_opt import optimize, strategies
    print()
    print("| grid | hierarchy | noise | equal split | optimal | evaluations | time (s) |")
    print("|---|---|---|---|---|---|---|")
    for side in sides:
        h = side.bit_length() - 1
        for name, strat in (("binary x binary", strategies.kron(
                strategies.tree(side, (2,) * h), strategies.tree(side, (2,) * h))),
                ("quadtree", strategies.quadtree((side, side)))):
            for kw in ({"epsilon": 1.0}, {"rho": 0.5}):
                r, secs, _ = timed(optimize.optimal_grid_budgets, strat,
                                   workloads.prefix((side, side)), neighbours="add_remove",
                                   **kw)
                noise = "Laplace eps 1" if "epsilon" in kw else "Gaussian rho 1/2"
                print(f"| {side}x{side} | {name} | {noise} | {r.equal_mean:.2f} | "
                      f"{r.mean:.2f} | {r.evaluations} | {secs:.2f} |", flush=True)


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] or [1 << 13, 1 << 16, 1 << 20]
    main(sizes)
    interval_main(sizes)
    kronecker_main()
    grid_budgets_main()
