"""One conformance test over every registered engine adapter (dptree_opt.data_release.sources).

Each adapter counts the same adversarial data, built here as a pyarrow table and handed to the
engine in its own form (DuckDB relation, pandas frames with Arrow-backed / nullable / object
columns, Dask on the default scheduler and on a 2-worker LocalCluster, Spark ``local[2]``,
Polars DataFrame and LazyFrame): every edge of several BinSpecs and one ulp either side, -0.0,
huge and tiny ranges, integers at +-2^53 in int64 columns, a 2-D grid. The expected counts are
computed HERE, by ``BinSpec.bin_index`` + ``np.bincount`` on the valid values (the published
bin rule, docs/math.md section 10), never by the code under test. Each invalid class (NaN, NULL,
+inf, -inf, below lower, at upper, integers 2^53 + 1 and -(2^53 + 1)) must give the same
ValueError naming the column and the class under out_of_range "error" and "clip" (below / above
are counted in bin 0 / K - 1 under "clip"). Each engine is ONE test item (one Spark session,
one LocalCluster per module), so under pytest-xdist one worker starts one JVM.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from dptree_opt.data_release import BinSpec
from dptree_opt.data_release.sources import count, source_for, source_names

TWO_53 = 2 ** 53
ONE = 1.0
SPECS = [
    BinSpec(0.0, 101.0, 101),  # (29 / 101) * 101 = 28.999...: the shortcut is one bin low
    BinSpec(-3.5, 7.25, 37),
    BinSpec(-1e307, 1e307, 8),  # huge: (upper - lower) * (K - 1) just below the overflow
    BinSpec(ONE, ONE + 64 * float(np.spacing(ONE)), 8),  # tiny: 8 ulp per bin
]
INT_SPEC = BinSpec(-2.0 ** 54, 2.0 ** 54, 4)  # edges -2^54, -2^53, 0, 2^53, 2^54
INTS = [TWO_53, -TWO_53, TWO_53 - 1, -(TWO_53 - 1), 0, 1, -1, 2 ** 52 + 1, -(2 ** 52) - 1]


def edge_values(spec: BinSpec) -> np.ndarray:
    """Every edge, one ulp either side, -0.0 and 0.0, kept inside [lower, upper)."""
    e = spec.bin_edges
    v = np.concatenate([e, np.nextafter(e, -np.inf), np.nextafter(e, np.inf),
                        [-0.0, 0.0, 29.0, 57.0, 58.0, 59.0]])
    return v[(v >= spec.lower) & (v < spec.upper)]


def oracle(columns, specs) -> np.ndarray:
    """Counts by the published rule: bin_index per axis, row-major cells, np.bincount."""
    idx = [s.bin_index(np.asarray(c, dtype=np.float64)) for c, s in zip(columns, specs)]
    shape = tuple(s.bins for s in specs)
    return np.bincount(np.ravel_multi_index(idx, shape), minlength=int(np.prod(shape))) \
        .reshape(shape if len(specs) > 1 else (shape[0],))


# invalid classes: (column, extra value, spec, kind of the message, counted under "clip")
BASE_F = edge_values(SPECS[0])
BASE_I = np.resize(np.array(INTS, dtype=np.int64), BASE_F.size)
INVALID = [
    ("f_nan", float("nan"), "float", r"1 NaN/missing"),
    ("f_null", None, "float", r"1 NaN/missing"),
    ("f_pinf", float("inf"), "float", r"1 infinite"),
    ("f_ninf", float("-inf"), "float", r"1 infinite"),
    ("f_below", float(np.nextafter(0.0, -1.0)), "float", r"outside \[lower, upper\)"),
    ("f_above", 101.0, "float", r"outside \[lower, upper\)"),
    ("i_big", TWO_53 + 1, "int", r"1 integer\(s\) beyond 2\^53"),
    ("i_negbig", -(TWO_53 + 1), "int", r"1 integer\(s\) beyond 2\^53"),
    ("i_null", None, "int", r"1 NaN/missing"),
]


def invalid_table() -> pa.Table:
    cols = {}
    for name, bad, kind, _ in INVALID:
        if kind == "float":
            cols[name] = pa.array(list(BASE_F) + [bad], pa.float64())
        else:
            cols[name] = pa.array([int(v) for v in BASE_I] + [bad], pa.int64())
    return pa.table(cols)


# ------------------------------------------------------------------ engines


@pytest.fixture(scope="module")
def dask_client():
    pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


def _pandas(table: pa.Table, how: str):
    pd = pytest.importorskip("pandas")
    if how == "arrow":
        return table.to_pandas(types_mapper=pd.ArrowDtype)
    if how == "nullable":
        return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(),
                                             pa.float64(): pd.Float64Dtype()}.get)
    return pd.DataFrame({c: pd.Series(table.column(c).to_pylist(), dtype=object)
                         for c in table.column_names})


def _dask(table: pa.Table):
    dd = pytest.importorskip("dask.dataframe")
    return dd.from_pandas(_pandas(table, "arrow"), npartitions=3)


ENGINES = {  # id -> (builder(table, request), registered adapter name)
    "duckdb": (lambda t, r: pytest.importorskip("duckdb").from_arrow(t), "duckdb"),
    "pandas-arrow": (lambda t, r: _pandas(t, "arrow"), "pandas"),
    "pandas-nullable": (lambda t, r: _pandas(t, "nullable"), "pandas"),
    "pandas-object": (lambda t, r: _pandas(t, "object"), "pandas"),
    "dask": (lambda t, r: _dask(t), "dask"),
    "dask-cluster": (lambda t, r: _dask(t), "dask"),
    "spark": (lambda t, r: r.getfixturevalue("spark_session").createDataFrame(t), "spark"),
    "polars": (lambda t, r: pytest.importorskip("polars").from_arrow(t), "polars"),
    "polars-lazy": (lambda t, r: pytest.importorskip("polars").from_arrow(t).lazy(), "polars"),
}


@contextlib.contextmanager
def scheduler(engine: str, request):
    """The Dask scheduler of the engine id (no-op for the others)."""
    if not engine.startswith("dask"):
        yield
        return
    import dask
    if engine == "dask":
        with dask.config.set(scheduler="threads"):
            yield
        return
    client = request.getfixturevalue("dask_client")
    with dask.config.set(scheduler=client):
        assert dask.delayed(os.getpid)().compute() != os.getpid()  # runs on the workers
        yield


def test_every_registered_adapter_has_a_case():
    assert {name for _, name in ENGINES.values()} == set(source_names())


@pytest.mark.parametrize("engine", [  # xdist_group: with --dist loadgroup, one JVM per run
    pytest.param(e, marks=pytest.mark.xdist_group("spark")) if e == "spark" else e
    for e in ENGINES])
def test_conformance(engine, request):
    build, expected_source = ENGINES[engine]

    def make(table):
        obj = build(table, request)
        assert source_for(obj).name == expected_source
        return obj

    with scheduler(engine, request):
        # 1-D: every edge and one ulp either side (one job per count on Spark, so the other
        # three specs, huge and tiny ranges, go on one 3-D grid below)
        v = edge_values(SPECS[0])
        got = count(make(pa.table({"x": pa.array(v, pa.float64())})), SPECS[0], column="x")
        np.testing.assert_array_equal(got, oracle([v], SPECS[:1]))
        assert got.dtype == np.int64
        cols = [edge_values(s) for s in SPECS[1:]]
        n = max(c.size for c in cols)
        cols = [np.resize(c, n) for c in cols]  # every value of every axis at least once
        got = count(make(pa.table({f"a{k}": pa.array(c) for k, c in enumerate(cols)})),
                    SPECS[1:], columns=["a0", "a1", "a2"])
        np.testing.assert_array_equal(got, oracle(cols, SPECS[1:]))
        # integers at +-2^53 and one below in an int64 column (exact in double: edges of INT_SPEC)
        ints = np.array(INTS, dtype=np.int64)
        got = count(make(pa.table({"i": pa.array(ints)})), INT_SPEC, column="i")
        np.testing.assert_array_equal(got, oracle([ints.astype(np.float64)], [INT_SPEC]))
        # a 2-D grid: float edges x int64 column, picked out of three columns
        grid = pa.table({"x": pa.array(BASE_F), "skip": pa.array(np.ones(BASE_F.size)),
                         "i": pa.array(BASE_I)})
        got = count(make(grid), [SPECS[0], INT_SPEC], columns=["x", "i"])
        np.testing.assert_array_equal(got, oracle([BASE_F, BASE_I], [SPECS[0], INT_SPEC]))
        # every invalid class, under both policies
        obj = make(invalid_table())
        for name, bad, kind, message in INVALID:
            spec = SPECS[0] if kind == "float" else INT_SPEC
            for policy in ("error", "clip"):
                if policy == "clip" and name in ("f_below", "f_above"):
                    got = count(obj, spec, column=name, out_of_range=policy)
                    np.testing.assert_array_equal(
                        got, oracle([np.append(BASE_F, bad)], [spec]))  # bin_index clips
                    continue
                with pytest.raises(ValueError, match=rf"^{name}: .*{message}") as exc:
                    count(obj, spec, column=name, out_of_range=policy)
                assert re.search(name, str(exc.value))


def test_accepts_imports_no_engine():
    # a fresh interpreter: asking every adapter about a foreign object imports no engine
    code = ("import sys; from dptree_opt.data_release.sources import source_for; "
            "assert source_for(object()) is None and source_for(1.5) is None; "
            "print(sorted(m for m in ('pyspark', 'dask', 'distributed', 'polars', 'duckdb', "
            "'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_polars_series_and_streamed_lazyframe(monkeypatch):
    pl = pytest.importorskip("polars")
    from dptree_opt.data_release.sources import polars_source
    monkeypatch.setattr(polars_source, "BLOCK_ROWS", 3)  # several chunks / slices
    v = edge_values(SPECS[0])
    np.testing.assert_array_equal(count(pl.Series("x", v), SPECS[0]), oracle([v], SPECS[:1]))
    lazy = pl.LazyFrame({"x": v, "i": BASE_I})
    got = count(lazy, [SPECS[0], INT_SPEC], columns=["x", "i"])
    np.testing.assert_array_equal(got, oracle([v, BASE_I], [SPECS[0], INT_SPEC]))
    with pytest.raises(ValueError, match="columns: 'zz' is not a column"):
        count(lazy, SPECS[0], column="zz")
