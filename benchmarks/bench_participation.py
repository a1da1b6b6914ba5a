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

Usage: ``python benchmarks/bench_participation.py [--sections noise] [--dim 1000000]
[--steps 256] [--sqrt-dim 10000] [--secure-dim 100000] [--quick]``.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from dptree_opt import participation, strategies
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


SECTIONS = {"noise": section_noise}


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
