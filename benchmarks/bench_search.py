"""Time of the exact tree search (`optimize.level_uniform`) and of `dptree-opt optimize`.

Plain script: ``python benchmarks/bench_search.py [--quick]``. For K = 1000, 2^16, 2^20 and
each estimator (covering, refined, BLUE) with equal budgets, Laplace eps = 1, swap neighbours,
padding up to 2K: wall and CPU seconds of ``level_uniform``, the tree it returns and its mean
prefix MSE; then the wall time of the CLI's default call (BLUE, equal budgets) in a fresh
process (import included). Best of ``--repeat`` runs. Issue 4 asks for "within seconds".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from dptree_opt import optimize


def timed(fn, repeat):
    """(best wall s, its CPU s, result) over ``repeat`` calls of fn()."""
    best = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        res = fn()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if best is None or w < best[0]:
            best = (w, c, res)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="K = 1000 and 2^16 only")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    sizes = (1000, 2**16) if args.quick else (1000, 2**16, 2**20)
    print("| K | estimator | wall s | CPU s | branching | mean prefix MSE |")
    print("|---|---|---|---|---|---|")
    for K in sizes:
        for est in ("covering", "refined", "blue"):
            wall, cpu, d = timed(lambda: optimize.level_uniform(
                K, 1.0, estimator=est, neighbours="swap", budgets="equal"),
                                 args.repeat)
            print(f"| {K} | {est} | {wall:.2f} | {cpu:.2f} | {','.join(map(str, d.branching))}"
                  f" | {d.error / K:.2f} |", flush=True)
    print("\n| K | `dptree-opt optimize --bins K --epsilon 1` wall s (fresh process) |")
    print("|---|---|")
    for K in sizes:
        cmd = [sys.executable, "-c", "import sys; from dptree_opt.cli import main; "
               f"sys.exit(main(['optimize', '--bins', '{K}', '--epsilon', '1']))"]
        best = min(_run(cmd) for _ in range(args.repeat))
        print(f"| {K} | {best:.2f} |", flush=True)


def _run(cmd) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
