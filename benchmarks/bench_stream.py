"""Benchmark of the streaming counters (issue 16): time per update, construction time and the
exact per-step variances, for every mechanism, with secure (OpenDP) and simulation noise.

Prints one markdown row per (mechanism, noise kind): the horizon, construction seconds, steps
pushed and microseconds per update, step_variances seconds, the mean variance.
Usage: ``python benchmarks/bench_stream.py [--log-t 20] [--steps 100000] [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dptree_opt.stream import Counter

CASES = [
    ("binary", {}, {"epsilon": 1.0}),
    ("binary", {"estimator": "causal"}, {"epsilon": 1.0}),
    ("kary", {"branching": 8, "estimator": "causal"}, {"epsilon": 1.0}),
    ("negative_digits", {"branching": 19}, {"epsilon": 1.0}),
    ("binary", {"estimator": "causal"}, {"rho": 0.5}),
    ("sqrt", {}, {"rho": 0.5}),
    ("blt", {}, {"rho": 0.5}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-t", type=int, default=20, help="horizon 2^LOG_T (default 20)")
    ap.add_argument("--steps", type=int, default=100_000, help="steps pushed (default 1e5)")
    ap.add_argument("--quick", action="store_true", help="2^16 horizon, 10^4 steps")
    args = ap.parse_args()
    T = 2 ** (16 if args.quick else args.log_t)
    steps = min(T, 10_000 if args.quick else args.steps)
    counts = np.random.default_rng(0).integers(0, 10, steps).tolist()
    print("| mechanism | options | budget | noise | T | build s | steps | us / update | "
          "step_variances s | mean variance |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mech, opts, budget in CASES:
        for secure in (False, True):
            rng = None if secure else np.random.default_rng(1)
            n = steps if not (secure and mech == "sqrt") else min(steps, 10_000)
            t0 = time.perf_counter()
            c = Counter(T, mechanism=mech, rng=rng, **budget, **opts)
            build = time.perf_counter() - t0
            t0 = time.perf_counter()
            for x in counts[:n]:
                c.update(x)
            per = (time.perf_counter() - t0) / n * 1e6
            t0 = time.perf_counter()
            v = c.step_variances()
            sv = time.perf_counter() - t0
            b = ", ".join(f"{k}={val:g}" for k, val in budget.items())
            o = ", ".join(f"{k}={val}" for k, val in opts.items()) or "-"
            print(f"| {mech} | {o} | {b} | {'OpenDP' if secure else 'numpy'} | 2^"
                  f"{T.bit_length() - 1} | {build:.2f} | {n} | {per:.1f} | {sv:.2f} | "
                  f"{v.mean():.4g} |", flush=True)


if __name__ == "__main__":
    main()
