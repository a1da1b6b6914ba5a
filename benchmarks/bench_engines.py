"""Benchmark of the engine adapters (``dptree_opt.data_release.sources``) against the pyarrow
block reader: count one float64 column of a Parquet file of 10^8 rows into 2^16 bins.

Engines: the pyarrow block reader (``io.histogram_from_file``, the release's own reader),
DuckDB (``duckdb.read_parquet`` relation, counted in SQL by the adapter), Dask on its default
(threaded) scheduler and on a 2-worker ``distributed.LocalCluster`` (processes), Spark
``local[2]`` (``mapInArrow`` per partition) and Polars (``scan_parquet`` LazyFrame, streamed).
Each engine runs in a fresh subprocess; a sampler thread adds up the RSS of the whole process
tree (the JVM, Dask's workers, Spark's Python workers) every 50 ms; the table shows the peak
of that sum during the count and its increase over the tree after start-up (imports, session,
cluster). Start-up (Spark session, LocalCluster) is timed apart and not in rows/s. Every
engine must return the same histogram (checked). Needs psutil and the ``engines`` extra.

Usage: ``python benchmarks/bench_engines.py [--rows 100000000] [--repeat 1]
[--engines pyarrow,duckdb,...] [--quick]`` (--quick: 10^6 rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

LOWER, UPPER, BINS = 0.0, 1e6, 1 << 16
ENGINES = {
    "pyarrow": "pyarrow block reader (`io.histogram_from_file`, 2^20-row batches)",
    "duckdb": "DuckDB relation, counted in SQL (`sources.duckdb_source`)",
    "dask": "Dask, default threaded scheduler (`read_parquet`, per-partition Tally)",
    "dask-cluster": "Dask, 2-worker LocalCluster (processes, 1 thread each)",
    "spark": "Spark `local[2]`, `mapInArrow` per partition",
    "polars": "Polars `scan_parquet`, streamed 2^22-row chunks",
}


def write_parquet(path: str, rows: int) -> None:
    """``id`` (int64), ``value`` ~ lognormal(10, 1) clipped below 10^6, rounded to cents;
    row groups of 2^20 rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(0)
    schema = pa.schema([("id", pa.int64()), ("value", pa.float64())])
    with pq.ParquetWriter(path, schema) as w:
        for start in range(0, rows, 1 << 20):
            n = min(1 << 20, rows - start)
            w.write_table(pa.table({
                "id": np.arange(start, start + n),
                "value": np.round(np.minimum(rng.lognormal(10.0, 1.0, n), UPPER - 1), 2)},
                schema=schema))


class TreeRSS:
    """Peak RSS (bytes) of this process and all its descendants, sampled every 50 ms."""

    def __init__(self):
        import psutil
        self.proc, self.peak, self._stop = psutil.Process(), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        import psutil
        total = 0
        for p in [self.proc] + self.proc.children(recursive=True):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(0.05)

    def __enter__(self):
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


def child(engine: str, path: str) -> dict:
    """Count ``value`` of ``path`` once with ``engine`` in this (fresh) process."""
    from dptree_opt.data_release import BinSpec
    from dptree_opt.data_release.io import histogram_from_file
    from dptree_opt.data_release.sources import count, source_named
    spec = BinSpec(LOWER, UPPER, BINS)
    t0 = time.perf_counter()
    stack = []
    if engine == "spark":
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
            .config("spark.driver.memory", "2g").getOrCreate()
    elif engine == "dask-cluster":
        from distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        stack = [cluster, Client(cluster)]
    elif engine == "dask":
        import dask
        dask.config.set(scheduler="threads")
    startup = time.perf_counter() - t0
    with TreeRSS() as mem:
        base = mem.peak
        t0 = time.perf_counter()
        if engine == "pyarrow":
            hist, _ = histogram_from_file(path, "value", spec)
        else:
            src = source_named("dask" if engine.startswith("dask") else engine)
            hist = count(src.open_files(path, ["value"]), spec, column="value")
        seconds = time.perf_counter() - t0
    for obj in reversed(stack):
        obj.close()
    return {"seconds": seconds, "startup": startup, "rows": int(hist.sum()),
            "peak_mb": mem.peak / 2**20, "inc_mb": (mem.peak - base) / 2**20,
            "checksum": int((hist * np.arange(BINS)).sum())}


def main(argv=None) -> None:
    """Write the Parquet file once, run every engine ``--repeat`` times (fresh processes),
    print a markdown table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=10**8)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--quick", action="store_true", help="10^6 rows, one run")
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    rows, repeat = (10**6, 1) if args.quick else (args.rows, args.repeat)
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        sys.exit(f"unknown engine(s) {sorted(unknown)}; choose from {list(ENGINES)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.parquet")
        t0 = time.perf_counter()
        write_parquet(path, rows)
        size = os.path.getsize(path) / 1e6
        print(f"{rows} rows (id int64, value float64), Parquet {size:.0f} MB, written in "
              f"{time.perf_counter() - t0:.1f} s; value counted into {BINS} bins; median of "
              f"{repeat} run(s), each in a fresh process; RSS = the whole process tree\n")
        print("| engine | time (s) | rows/s | start-up (s) | peak RSS (MB) | "
              "increase (MB) |")
        print("|---|---:|---:|---:|---:|---:|")
        sums = set()
        for name in engines:
            runs = []
            for _ in range(repeat):
                proc = subprocess.run([sys.executable, __file__, "--child", name, path],
                                      capture_output=True, text=True)
                if proc.returncode:
                    sys.exit(f"{name} failed:\n{proc.stderr[-4000:]}")
                runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            runs.sort(key=lambda r: r["seconds"])
            r = runs[len(runs) // 2]
            if r["rows"] != rows:
                sys.exit(f"{name} counted {r['rows']} rows, expected {rows}")
            sums.add(r["checksum"])
            print(f"| {ENGINES[name]} | {r['seconds']:.2f} | {rows / r['seconds'] / 1e6:.2f} M "
                  f"| {r['startup']:.1f} | {max(x['peak_mb'] for x in runs):.0f} | "
                  f"{max(x['inc_mb'] for x in runs):.0f} |", flush=True)
        print("\nsame histogram from every engine:", len(sums) == 1)


if __name__ == "__main__":
    main()
