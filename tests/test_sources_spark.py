"""The PySpark adapter (sources.spark_source): per-partition Tallies from ``mapInArrow``, sent
back as sparse rows and summed exactly on the driver; column types checked on the driver
before any job. The pure-Python parts run without a JVM; the rest shares one ``local[2]``
session per process (``getOrCreate``; the conformance test uses the same one). Expected
numbers come from the data built here and ``BinSpec.bin_index`` + ``np.bincount``."""

from __future__ import annotations


import numpy as np
import pytest

from dptree_opt.data_release import BinSpec
from dptree_opt.data_release.sources import Tally, count, spark_source, tally_columns

pa = pytest.importorskip("pyarrow")

TWO_53 = 2 ** 53
SPEC = BinSpec(0.0, 101.0, 101)
INT_SPEC = BinSpec(-2.0 ** 54, 2.0 ** 54, 4)


def test_batches_gathered_into_blocks_and_rows_round_trip(monkeypatch):
    monkeypatch.setattr(spark_source, "BLOCK_ROWS", 5)  # 7 batches of 3 rows -> 5 blocks
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 102, 21)
    x[3], x[10] = np.nan, np.inf
    i = rng.integers(-TWO_53, TWO_53, 21)
    i[0] = TWO_53 + 1
    batches = [pa.record_batch([pa.array(x[k:k + 3]), pa.array(i[k:k + 3])], ["x", "i"])
               for k in range(0, 21, 3)]
    specs = (SPEC, INT_SPEC)
    (out,) = spark_source.tally_arrow_batches(iter(batches), specs, "error", ("x", "i"))
    got = spark_source.tally_from_rows(pa.Table.from_batches([out, out]), specs)
    one = tally_columns([x, i], specs)  # the whole partition at once, independently
    for f in spark_source.FIELDS:
        np.testing.assert_array_equal(getattr(got, f), 2 * np.asarray(getattr(one, f)))
    assert int(got.missing[0]) == 2 and int(got.too_large[1]) == 2
    empty = spark_source.tally_from_rows(
        pa.Table.from_batches([spark_source.tally_rows(Tally.empty(specs))]), specs)
    assert empty.rows == 0 and not empty.hist.any()




@pytest.mark.xdist_group("spark")
def test_spark_types_names_and_files(spark_session, tmp_path):
    spark = spark_session
    df = spark.createDataFrame([("a", 1.5, 2)], "s string, `a.b` double, n int")
    with pytest.raises(ValueError, match=r"^s: column type string is not an integer, "):
        count(df, SPEC, column="s")
    with pytest.raises(ValueError, match="columns: 'zz' is not a column"):
        count(df, SPEC, column="zz")
    with pytest.raises(ValueError, match="columns: the DataFrame has 3 columns"):
        count(df, SPEC)
    np.testing.assert_array_equal(count(df, [SPEC, SPEC], columns=["a.b", "n"]),
                                  np.outer(np.eye(101)[1], np.eye(101)[2]))
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"x": pa.array([1, None, TWO_53 + 1, 7], pa.int64())}),
                   tmp_path / "a.parquet")
    src = spark_source.SOURCE
    t = src.tally(src.open_files(str(tmp_path / "a.parquet"), ["x"]), (INT_SPEC,),
                  columns=("x",), out_of_range="error")
    assert (t.rows, int(t.missing[0]), int(t.too_large[0])) == (4, 1, 1)
    (tmp_path / "b.csv").write_text("x,y\n0.5,1\n100.5,2\n")
    got = count(src.open_files(str(tmp_path / "b.csv"), None), SPEC, column="x")
    np.testing.assert_array_equal(got, np.bincount([0, 100], minlength=101))
