"""The Dask adapter (sources.dask_source): DataFrames, Series and arrays counted partition by
partition, Tallies merged by a tree of additions in one compute, integer columns with NULLs
kept exact (also from CSV / Parquet files). Expected numbers come from the data built here and
from ``BinSpec.bin_index`` + ``np.bincount``. The 2-worker LocalCluster case is in
tests/test_sources_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest

from dptree_opt.data_release import BinSpec
from dptree_opt.data_release.sources import count, dask_source, source_for

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
da = pytest.importorskip("dask.array")
pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

TWO_53 = 2 ** 53
SPEC = BinSpec(0.0, 101.0, 101)
INT_SPEC = BinSpec(-2.0 ** 54, 2.0 ** 54, 4)
SRC = dask_source.SOURCE


@pytest.fixture(autouse=True)
def threads():
    with dask.config.set(scheduler="threads"):
        yield


def oracle(columns, specs):
    idx = [s.bin_index(np.asarray(c, dtype=np.float64)) for c, s in zip(columns, specs)]
    shape = tuple(s.bins for s in specs)
    out = np.bincount(np.ravel_multi_index(idx, shape), minlength=int(np.prod(shape)))
    return out.reshape(shape) if len(specs) > 1 else out


def test_many_partitions_merge_by_a_tree():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 101, 1000)
    ddf = dd.from_pandas(pd.DataFrame({"x": x, "y": x[::-1]}), npartitions=70)  # 2 levels
    assert ddf.npartitions > dask_source.FAN_IN ** 2 / 2
    np.testing.assert_array_equal(count(ddf, SPEC, column="x"), oracle([x], [SPEC]))
    np.testing.assert_array_equal(count(ddf["y"], SPEC), oracle([x[::-1]], [SPEC]))
    parts = [dask.delayed(i) for i in range(70)]
    graph = dict(dask_source.tree_sum(parts).__dask_graph__())
    merges = sum(str(k).startswith("merge_tallies") for k in graph)
    assert merges == 9 + 2 + 1  # ceil(70 / 8) + ceil(9 / 8) + 1 nodes, depth 3


def test_arrays_1d_and_2d():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 101, (500, 2))
    arr = da.from_array(x, chunks=(64, 1))  # chunks across the columns too: rechunked
    np.testing.assert_array_equal(count(arr, [SPEC, SPEC]), oracle([x[:, 0], x[:, 1]],
                                                                  [SPEC, SPEC]))
    np.testing.assert_array_equal(count(arr[:, 1], SPEC), oracle([x[:, 1]], [SPEC]))
    with pytest.raises(ValueError, match=r"shape \(rows, 3\)"):
        count(arr, [SPEC] * 3)
    with pytest.raises(ValueError, match="columns: a Dask array has no column names"):
        SRC.tally(arr[:, 0], (SPEC,), columns=("x",), out_of_range="error")


def test_integers_with_nulls_stay_exact():
    s = pd.Series([1, None, TWO_53 + 1, 5, -(TWO_53 + 1)], dtype="Int64")
    ddf = dd.from_pandas(pd.DataFrame({"i": s}), npartitions=2)
    t = SRC.tally(ddf, (INT_SPEC,), columns=("i",), out_of_range="error")
    assert (t.rows, int(t.missing[0]), int(t.too_large[0])) == (5, 1, 2)
    with pytest.raises(ValueError, match=r"^i: 1 NaN/missing and 2 integer\(s\) beyond 2\^53"):
        count(ddf, INT_SPEC, column="i")


def test_open_files_csv_and_parquet(tmp_path):
    # the NULL and the big integer are far from the start (dtype inference reads a sample)
    rows = ["x,y"] + [f"{i},0.5" for i in range(3000)] + [",1.5", f"{TWO_53 + 1},2.5"]
    (tmp_path / "a.csv").write_text("\n".join(rows) + "\n")
    ddf = SRC.open_files(str(tmp_path / "a.csv"), ["x"])
    t = SRC.tally(ddf, (INT_SPEC,), columns=("x",), out_of_range="error")
    assert (t.rows, int(t.missing[0]), int(t.too_large[0])) == (3002, 1, 1)
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"x": pa.array([1, None, TWO_53 + 1], pa.int64())}),
                   tmp_path / "b.parquet")
    t = SRC.tally(SRC.open_files(str(tmp_path / "b.parquet"), ["x"]), (INT_SPEC,),
                  columns=("x",), out_of_range="error")
    assert (t.rows, int(t.missing[0]), int(t.too_large[0])) == (3, 1, 1)


def test_column_errors_and_empty_input():
    ddf = dd.from_pandas(pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]}), npartitions=1)
    with pytest.raises(ValueError, match="columns: 'c' is not a column"):
        count(ddf, SPEC, column="c")
    with pytest.raises(ValueError, match="columns: the frame has 2 columns"):
        count(ddf, SPEC)
    empty = dd.from_pandas(pd.DataFrame({"a": np.zeros(0)}), npartitions=1)
    with pytest.raises(ValueError, match="no values"):
        count(empty, SPEC, column="a")
    assert source_for(ddf) is SRC and source_for(ddf["a"]) is SRC
    assert source_for(da.zeros(3)) is SRC
