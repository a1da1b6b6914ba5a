"""The pandas adapter (sources.pandas_source): integer columns with NULLs are never turned into
floats (nullable, Arrow-backed and object columns keep integers exact and NA missing),
counting is block by block, bad columns are refused by name. Expected numbers come from the
data built here and from ``BinSpec.bin_index`` + ``np.bincount``."""

from __future__ import annotations

import numpy as np
import pytest

from dptree_opt.data_release import BinSpec
from dptree_opt.data_release.sources import count, pandas_source, source_for

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

TWO_53 = 2 ** 53
SPEC = BinSpec(-2.0 ** 54, 2.0 ** 54, 4)  # edges -2^54, -2^53, 0, 2^53, 2^54
SRC = pandas_source.SOURCE


def oracle(columns, specs):
    idx = [s.bin_index(np.asarray(c, dtype=np.float64)) for c, s in zip(columns, specs)]
    shape = tuple(s.bins for s in specs)
    return np.bincount(np.ravel_multi_index(idx, shape),
                       minlength=int(np.prod(shape))).reshape(shape)


@pytest.mark.parametrize("make", [
    lambda v: pd.Series(pd.array(v, dtype="Int64")),
    lambda v: pd.Series(v, dtype=pd.ArrowDtype(pa.int64())),
    lambda v: pd.Series(v, dtype=object),
    lambda v: pd.Series([pd.NA if x is None else x for x in v], dtype=object),
], ids=["Int64", "int64[pyarrow]", "object-None", "object-pd.NA"])
def test_integer_column_with_nulls_is_never_a_float(make):
    # as floats, 2^53 + 1 would become 2^53 (a valid value) and the count would be silent
    s = make([TWO_53 + 1, None, 5, -(TWO_53 + 1), TWO_53])
    t = SRC.tally(s, (SPEC,), columns=None)
    assert (int(t.missing[0]), int(t.too_large[0]), t.rows) == (1, 2, 5)
    np.testing.assert_array_equal(t.hist, oracle([[5, TWO_53]], [SPEC]))
    with pytest.raises(ValueError, match=r"2 integer\(s\) beyond 2\^53"):
        count(s, SPEC)


def test_uint64_beyond_2_53_is_refused_exactly():
    s = pd.Series(pd.array([2 ** 64 - 1, TWO_53, None], dtype="UInt64"), name="u")
    t = SRC.tally(s, (SPEC,), columns=None)
    assert (int(t.too_large[0]), int(t.missing[0])) == (1, 1)


def test_float_nan_and_nullable_na_are_missing():
    df = pd.DataFrame({"f": [0.5, np.nan, 1.5],
                       "g": pd.array([0.5, None, 1.5], dtype="Float64")})
    for c in ("f", "g"):
        with pytest.raises(ValueError, match=rf"^{c}: 1 NaN/missing"):
            count(df, BinSpec(0, 2, 4), column=c)


def test_counts_per_block_equal_the_rule(monkeypatch):
    monkeypatch.setattr(pandas_source, "BLOCK_ROWS", 7)  # 100 rows -> 15 blocks
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 101, 100)
    i = rng.integers(-TWO_53, TWO_53, 100)
    df = pd.DataFrame({"x": x, "skip": "text", "i": pd.array(i, dtype="Int64")})
    specs = [BinSpec(0, 101, 101), SPEC]
    np.testing.assert_array_equal(count(df, specs, columns=["x", "i"]), oracle([x, i], specs))
    np.testing.assert_array_equal(count(df["x"], specs[0]), oracle([x], specs[:1]))


@pytest.mark.parametrize("values, what", [
    (pd.Series(["1", "2"], name="s"), "s: "),
    (pd.Series([True, False], name="b"), "b: "),
    (pd.Series(pd.to_datetime(["2020-01-01", "2021-01-01"]), name="d"), "d: "),
])
def test_non_numbers_are_refused_by_name(values, what):
    with pytest.raises(ValueError, match=rf"^{what}.*cannot be binned"):
        count(values, BinSpec(0, 1, 2))


def test_column_picking_errors():
    df = pd.DataFrame({"a": [1.0], "b": [2.0]})
    with pytest.raises(ValueError, match="columns: 'c' is not a column"):
        count(df, BinSpec(0, 4, 2), column="c")
    with pytest.raises(ValueError, match="columns: the frame has 2 columns"):
        count(df, BinSpec(0, 4, 2))
    dup = pd.DataFrame([[1.0, 2.0]], columns=["a", "a"])
    with pytest.raises(ValueError, match="columns: 'a' is duplicated"):
        count(dup, BinSpec(0, 4, 2), column="a")
    with pytest.raises(ValueError, match="no values"):
        count(pd.Series([], dtype="float64"), BinSpec(0, 4, 2))
    assert source_for(df) is SRC and source_for(df["a"]) is SRC


def test_open_files_keeps_integers_with_nulls(tmp_path):
    (tmp_path / "a.csv").write_text(f"x,y\n1,0.5\n,1.5\n{TWO_53 + 1},2.5\n")
    (tmp_path / "b.csv").write_text("x,y\n3,0.5\n")
    df = SRC.open_files(str(tmp_path / "*.csv"), ["x"])
    t = SRC.tally(df, (SPEC,), columns=("x",))
    assert (t.rows, int(t.missing[0]), int(t.too_large[0])) == (4, 1, 1)
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"x": pa.array([1, None, TWO_53 + 1], pa.int64())}),
                   tmp_path / "c.parquet")
    t = SRC.tally(SRC.open_files(str(tmp_path / "c.parquet"), ["x"]), (SPEC,), columns=("x",))
    assert (t.rows, int(t.missing[0]), int(t.too_large[0])) == (3, 1, 1)
    with pytest.raises(ValueError, match="no file matches"):
        SRC.open_files(str(tmp_path / "none*.csv"), ["x"])
