"""Benchmark of the CSV readers considered for ``data_release.io``: read one numeric column of
a 10^7-row CSV and bin it (2^16 bins, ``BinSpec.bin_index`` + ``np.bincount``).

Readers: ``io.read_csv_column`` (pyarrow's ``read_csv`` on blocks cut by us, at two block
sizes), pyarrow's streaming ``pyarrow.csv.open_csv`` (which reads ahead of a slower consumer:
see its memory), and DuckDB's ``read_csv`` (embedded; fetched with ``to_arrow_reader`` and
binned by the same numpy code, and, for reference, binned and counted inside DuckDB by the
SQL the duckdb adapter generates from the ``BinSpec``). Each reader runs in a fresh subprocess, so its peak RSS (``ru_maxrss``,
minus the RSS after imports) is its own. Prints a markdown table.

Usage: ``python benchmarks/bench_reader.py [--rows 10000000] [--repeat 3] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

LOWER, UPPER, BINS = 0.0, 1e6, 1 << 16
READERS = {
    "io-16MiB": "`io.read_csv_column` (pyarrow `read_csv` per 16 MiB block, the default)",
    "io-64MiB": "`io.read_csv_column`, 64 MiB blocks",
    "open_csv-16MiB": "pyarrow streaming `open_csv`, 16 MiB blocks",
    "duckdb": "DuckDB `read_csv`, Arrow reader (2^20 rows), binned in numpy",
    "duckdb-sql": "DuckDB `read_csv`, binned and counted in SQL (generated SQL)",
}


def write_csv(path: str, rows: int) -> None:
    """``id,value,note`` with value ~ lognormal(10, 1) rounded to cents; pyarrow's writer."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    rng = np.random.default_rng(0)
    with pacsv.CSVWriter(path, pa.schema([("id", pa.int64()), ("value", pa.float64()),
                                          ("note", pa.string())])) as w:
        for start in range(0, rows, 1 << 20):
            n = min(1 << 20, rows - start)
            w.write_table(pa.table({
                "id": np.arange(start, start + n),
                "value": np.round(np.minimum(rng.lognormal(10.0, 1.0, n), UPPER - 1), 2),
                "note": pa.array(np.where(rng.random(n) < 0.5, "a,b", "c"))}))


def child(reader: str, path: str) -> dict:
    """Run one reader once in this (fresh) process: seconds, rows, peak RSS increase (MB)."""
    from dptree_opt.data_release import BinSpec
    from dptree_opt.data_release.io import read_csv_column
    from dptree_opt.data_release.sources.duckdb_source import tally_sql
    import duckdb  # noqa: F401  (imported before the baseline, like pyarrow)
    import pyarrow  # noqa: F401
    spec = BinSpec(LOWER, UPPER, BINS)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    hist = np.zeros(BINS, dtype=np.int64)
    if reader.startswith("io-"):
        chunk = (64 if reader.endswith("64MiB") else 16) << 20
        for values, _ in read_csv_column(path, "value", chunk_bytes=chunk):
            hist += np.bincount(spec.bin_index(values), minlength=BINS)
    elif reader.startswith("open_csv"):
        import pyarrow as pa
        import pyarrow.csv as pacsv
        r = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=16 << 20,
                                                                use_threads=False),
                           convert_options=pacsv.ConvertOptions(
                               include_columns=["value"], column_types={"value": pa.float64()}))
        for batch in r:
            hist += np.bincount(spec.bin_index(batch.column(0).to_numpy()), minlength=BINS)
    elif reader == "duckdb":
        con = duckdb.connect()
        quoted = path.replace("'", "''")
        rel = con.sql(f"SELECT value FROM read_csv('{quoted}', header = true)")
        for batch in rel.to_arrow_reader(1 << 20):
            values = batch.column(0).to_numpy()
            hist += np.bincount(spec.bin_index(values), minlength=BINS)
    else:
        quoted = path.replace("'", "''")
        sql = tally_sql(spec, ["value"], ["DOUBLE"], f"read_csv('{quoted}', header = true)")
        c = duckdb.connect().execute(sql).fetchnumpy()
        ok = c["p"] == 0
        np.add.at(hist, c["cell"][ok].astype(np.int64), c["n"][ok])
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "rows": int(hist.sum()), "rss_mb": (peak - base) / 1024,
            "checksum": int((hist * np.arange(BINS)).sum())}


def main(argv=None) -> None:
    """Write the CSV, run every reader ``--repeat`` times (fresh processes), print a table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=10**7)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="10^6 rows, one run")
    ap.add_argument("--child", nargs=2, metavar=("READER", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    rows, repeat = (10**6, 1) if args.quick else (args.rows, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.csv")
        t0 = time.perf_counter()
        write_csv(path, rows)
        size = os.path.getsize(path) / 1e6
        print(f"{rows} rows (id,value,note), {size:.0f} MB, written in "
              f"{time.perf_counter() - t0:.1f} s; value binned into {BINS} bins; median of "
              f"{repeat} run(s), each in a fresh process\n")
        print("| reader | time (s) | rows/s | MB/s | peak RSS increase (MB) |")
        print("|---|---:|---:|---:|---:|")
        sums = set()
        for name, label in READERS.items():
            runs = []
            for _ in range(repeat):
                proc = subprocess.run([sys.executable, __file__, "--child", name, path],
                                      capture_output=True, text=True)
                if proc.returncode:
                    sys.exit(f"{name} failed:\n{proc.stderr}")
                runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            runs.sort(key=lambda r: r["seconds"])
            r = runs[len(runs) // 2]
            assert r["rows"] == rows, (name, r)
            sums.add(r["checksum"])
            print(f"| {label} | {r['seconds']:.2f} | {rows / r['seconds'] / 1e6:.2f} M | "
                  f"{size / r['seconds']:.0f} | {max(run['rss_mb'] for run in runs):.0f} |")
        print("\nsame histogram from every reader:", len(sums) == 1)


if __name__ == "__main__":
    main()
