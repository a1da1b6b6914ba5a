"""Benchmarks of multiple participations (private training), one function per section;
``main`` runs the sections asked for (default: all).

Sections:

* ``noise``: ``stream.CorrelatedNoise`` at dim = 10^6 (default), n = 2052 steps, fixed-epoch
  participation k = 6, b = 342: for BLT (4 buffers), banded square root (64 bands), the binary
  (truncated) tree with Honaker's causal estimator, that tree restarted every epoch (b steps)
  and the square root (every past draw kept):
  build seconds, milliseconds per step (mean and max over the steps run, simulation noise),
  peak traced memory (tracemalloc: numpy's allocations) and the memory the generator was
  checked for. The square root at dim 10^6 needs n x dim x 8 bytes (16 GB): refused by
  arithmetic before anything is allocated (the message is printed); it is then timed at
  ``--sqrt-dim`` over the full horizon (its per-step cost grows with t). Plus the cost of
  secure noise: one step of OpenDP float Gaussian draws at ``--secure-dim``.

* ``anchors``: every learning mechanism at n = 2052, fixed_epoch(6, 342), prefix workload,
  Gaussian: mean loss per unit noise (``expected_error(prefix, Mechanism(C, rho=0.5,
  participation=...)) / n``), the sensitivity (exact or a bound) and the seconds to
  calibrate and score, against the recorded values of docs/math.md section 11; the
  relaxation lower bound.
* ``sensitivity``: seconds of the exact sensitivities at larger n (trees under min-sep by
  branch and bound, Toeplitz / banded in closed form) at n = 2^14 and 10^5.
* ``optimisers``: ``optimize.banded_toeplitz`` at n = 2052 and 10^5 (seconds, loss), BLT under
  the schema, and (unless ``--quick``) ``optimize.participation_optimum`` at n = 2052:
  certified loss, dual bound, gap, seconds (about 4 minutes on 2 idle cores).

Usage: ``python benchmarks/bench_participation.py [--sections noise] [--dim 1000000]
[--steps 256] [--sqrt-dim 10000] [--secure-dim 100000] [--quick]``.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from dptree_opt import Mechanism, expected_error, optimize, participation, strategies, workloads
from dptree_opt.strategies.factorization import sqrt_coefficients
from dptree_opt.strategies.restarted import restarted
from dptree_opt.stream import CorrelatedNoise

N_STEPS, K, B = 2052, 6, 342


def _noise_cases(n: int) -> list[tuple[str, object]]:
    return [
        ("BLT, 4 buffers", lambda: strategies.blt(n, buffers=4)),
        ("banded sqrt, 64 bands", lambda: strategies.banded(sqrt_coefficients(n), 64)),
        ("binary tree, causal", lambda: strategies.truncated_tree(n, [2] * 12)),
        ("binary tree restarted per epoch, causal",
         lambda: restarted(strategies.truncated_tree(B, [2] * 9), n)),
        ("square root (history)", lambda: strategies.sqrt_factorization(n)),
    ]


def _time_steps(make, dim: int, steps: int, part) -> dict[str, float | str]:
    """Build and run ``steps`` steps with tracemalloc on: build s, ms per step, peak MiB."""
    tracemalloc.start()
    t0 = time.perf_counter()
    gen = CorrelatedNoise(make(), dim, rho=0.5, participation=part,
                          rng=np.random.default_rng(0))
    build = time.perf_counter() - t0
    times = []
    for _ in range(min(steps, gen.horizon)):
        t1 = time.perf_counter()
        next(gen)
        times.append(time.perf_counter() - t1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"structure": gen.structure, "build_s": build, "steps": len(times),
            "mean_ms": 1e3 * float(np.mean(times)), "max_ms": 1e3 * float(np.max(times)),
            "last_ms": 1e3 * float(np.mean(times[-16:])),
            "peak_mib": peak / 2**20, "checked_mib": gen.memory_bytes / 2**20}


def section_noise(args: argparse.Namespace) -> None:
    """CorrelatedNoise: time and memory per step at dim = args.dim (module docstring)."""
    n = N_STEPS
    part = participation.fixed_epoch(K, B)
    print(f"\n## CorrelatedNoise: n = {n}, fixed_epoch(k={K}, b={B}), rho = 0.5, numpy "
          "simulation noise\n")
    print("| strategy | generator | dim | build s | steps run | ms / step (mean) | "
          "ms / step (max) | ms / step (last 16) | peak MiB (traced) | checked MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, make in _noise_cases(n):
        dims = [args.dim]
        if name.startswith("square root"):
            try:
                CorrelatedNoise(make(), args.dim, rho=0.5, participation=part,
                                rng=np.random.default_rng(0))
            except ValueError as exc:
                print(f"| {name} | refused at dim {args.dim} | | | | | | | | {exc} |")
            dims = [args.sqrt_dim]
        for dim in dims:
            steps = n if name.startswith("square root") else args.steps
            r = _time_steps(make, dim, steps, part)
            print(f"| {name} | {r['structure']} | {dim} | {r['build_s']:.2f} | {r['steps']} | "
                  f"{r['mean_ms']:.1f} | {r['max_ms']:.1f} | {r['last_ms']:.1f} | "
                  f"{r['peak_mib']:.0f} | {r['checked_mib']:.0f} |")
    # secure noise: OpenDP's float Gaussian, one step of a BLT
    gen = CorrelatedNoise(strategies.blt(n, buffers=4), args.secure_dim, rho=0.5,
                          participation=part, secure=True)
    t0 = time.perf_counter()
    next(gen)
    secs = time.perf_counter() - t0
    print(f"\nsecure (OpenDP float Gaussian) BLT step at dim {args.secure_dim}: {secs:.2f} s "
          f"({1e6 * secs / args.secure_dim:.1f} us per coordinate; x dim for other sizes)")


# recorded values (docs/math.md section 11) at n = 2052, k = 6, b = 342, mean loss
ANCHORS = {"square root": 118.1568, "BSR (342 bands)": 80.6074, "BISR (342 bands)": 93.2268,
           "independent noise": 6159.0, "restarted binary tree (512 -> 342), BLUE": 130.015,
           "optimised banded Toeplitz": 77.5123}


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _loss(strategy, part, estimator: str = "blue") -> tuple[float, object, float]:
    """(mean loss per unit noise, the unit-weight strategy's Sensitivity, seconds)."""
    def run():
        m = Mechanism(strategy, rho=0.5, participation=part)
        unit = strategy.participation_sensitivity(np.ones(strategy.n_rows), part, 2)
        return expected_error(workloads.prefix(strategy.n_bins), m, estimator) / \
            strategy.n_bins, unit
    (loss, sens), secs = _timed(run)
    return loss, sens, secs


def section_anchors(args: argparse.Namespace) -> None:
    """The learning mechanisms at the StackOverflow setting against docs/math.md."""
    n, part = N_STEPS, participation.fixed_epoch(K, B)
    print(f"\n## Mean loss per unit noise, n = {n}, fixed_epoch(k={K}, b={B}), Gaussian\n")
    print("| mechanism | loss | recorded | sens^2 | exact | seconds |")
    print("|---|---|---|---|---|---|")
    bt = optimize.banded_toeplitz(n, B, part).strategy
    cases = [("square root", strategies.sqrt_factorization(n), "blue"),
             ("BSR (342 bands)", strategies.banded_sqrt(n, B), "blue"),
             ("BSR, columns normalised", strategies.normalise_columns(
                 strategies.banded_sqrt(n, B)), "blue"),
             ("BISR (342 bands)", strategies.banded_inverse_sqrt(n, B), "blue"),
             ("optimised banded Toeplitz", bt, "blue"),
             ("BLT optimised under the schema", strategies.blt(n, participation=part), "blue"),
             ("independent noise", strategies.histogram(n), "blue"),
             ("binary tree 4096 -> 2052, no restart, equal budget per level, BLUE",
              strategies.truncated_tree(
                 n, (2,) * 12), "blue"),
             ("restarted binary tree (512 -> 342), BLUE", strategies.restarted(
                 strategies.truncated_tree(B, (2,) * 9), n), "blue"),
             ("restarted binary tree (512 -> 342), Honaker bottom-up", strategies.restarted(
                 strategies.truncated_tree(B, (2,) * 9), n), "causal")]
    for name, strat, est in cases:
        loss, sens, secs = _loss(strat, part, est)
        rec = ANCHORS.get(name)
        print(f"| {name} | {loss:.4f} | {'' if rec is None else rec} | {sens.value ** 2:.4f} | "
              f"{sens.exact} | {secs:.2f} |")
    bound, secs = _timed(lambda: optimize.participation_lower_bound(n, part))
    print(f"\nrelaxation lower bound (every factorisation): {bound.value:.4f} ({secs:.2f} s)")


def section_sensitivity(args: argparse.Namespace) -> None:
    """Seconds of the exact sensitivities at larger n."""
    print("\n## Sensitivities under participation at larger n (seconds)\n")
    print("| strategy | n | schema | sens | exact | seconds |")
    print("|---|---|---|---|---|---|")
    big = 10**4 if args.quick else 10**5
    cases = [("binary tree", strategies.binary_tree(2**14), participation.min_sep(6, 341)),
             ("binary tree", strategies.binary_tree(2**14), participation.fixed_epoch(16, 1024)),
             ("square root", strategies.sqrt_factorization(big), participation.min_sep(None, 1000)),
             ("BISR (1000 bands)", strategies.banded_inverse_sqrt(big, 1000),
              participation.min_sep(10, 1000)),
             ("BSR (1000 bands)", strategies.banded_sqrt(big, 1000),
              participation.min_sep(None, 1000))]
    for name, strat, part in cases:
        sens, secs = _timed(lambda: strat.participation_sensitivity(
            np.ones(strat.n_rows), part, 2))
        print(f"| {name} | {strat.n_bins} | {part.describe()} | {sens.value:.6g} | "
              f"{sens.exact} | {secs:.2f} |")


def section_optimisers(args: argparse.Namespace) -> None:
    """banded_toeplitz, BLT and participation_optimum: seconds and losses."""
    print("\n## Optimisers under participation\n")
    print("| optimiser | n | schema | loss | bound / gap | seconds |")
    print("|---|---|---|---|---|---|")
    part = participation.fixed_epoch(K, B)
    big = 10**4 if args.quick else 10**5
    for n, bands, sch in ((N_STEPS, B, part),
                          (big, B, participation.fixed_epoch(big // 10**3, 10**3)),
                          (big, 2000, participation.min_sep(None, 2000))):
        res, secs = _timed(lambda: optimize.banded_toeplitz(n, bands, sch))
        print(f"| banded_toeplitz ({bands} bands) | {n} | {sch.describe()} | {res.loss:.4f} | "
              f"| {secs:.2f} |")
    blt, secs = _timed(lambda: strategies.blt(N_STEPS, participation=part))
    print(f"| blt (4 buffers) | {N_STEPS} | {part.describe()} | "
          f"{_loss(blt, part)[0]:.4f} | | {secs:.2f} |")
    if args.quick:
        res, secs = _timed(lambda: optimize.participation_optimum(
            256, participation.fixed_epoch(4, 64)))
        n_opt = 256
    else:
        res, secs = _timed(lambda: optimize.participation_optimum(N_STEPS, part))
        n_opt = N_STEPS
    print(f"| participation_optimum | {n_opt} | {res.participation.describe()} | "
          f"{res.loss:.6f} | {res.lower_bound:.6f} / {res.gap:.2g} | {secs:.1f} |")


SECTIONS = {"noise": section_noise, "anchors": section_anchors,
            "sensitivity": section_sensitivity, "optimisers": section_optimisers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", nargs="*", default=list(SECTIONS), choices=list(SECTIONS))
    ap.add_argument("--dim", type=int, default=10**6, help="coordinates per step (10^6)")
    ap.add_argument("--steps", type=int, default=256, help="steps timed per case (256)")
    ap.add_argument("--sqrt-dim", type=int, default=10**4,
                    help="dim for the square root's full-horizon run (10^4)")
    ap.add_argument("--secure-dim", type=int, default=10**5,
                    help="dim of the timed secure step (10^5)")
    ap.add_argument("--quick", action="store_true", help="dim 10^4, 32 steps, small secure")
    args = ap.parse_args()
    if args.quick:
        args.dim, args.steps, args.sqrt_dim, args.secure_dim = 10**4, 32, 10**3, 10**3
    for name in args.sections:
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
