"""The engine-adapter contract (``data_release.sources.base``): ``tally_columns`` bins like
``BinSpec.bin_index`` / the accumulators, partitions merge by addition, every invalid class is
counted and named, integers beyond 2^53 are refused exactly, Arrow nulls are missing; the
registry and the front door ``count``."""

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from dptree_opt.data_release.binning import BinSpec, GridHistogramAccumulator
from dptree_opt.data_release.sources import base
from dptree_opt.data_release.sources.base import Tally, finish, tally_columns

SPEC = BinSpec(0.0, 101.0, 101)


def _oracle_1d(spec, x):
    """Independent: the last edge <= clipped x, over the finite values."""
    x = x[np.isfinite(x)]
    v = np.clip(x, spec.lower, np.nextafter(spec.upper, -np.inf))
    return np.bincount(np.searchsorted(spec.bin_edges, v, side="right") - 1,
                       minlength=spec.bins)


_values = st.lists(st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-5, max_value=110),
    st.sampled_from([0.0, -0.0, 29.0, 57.0, 58.0, 59.0, 101.0, np.nextafter(101.0, 0),
                     np.nextafter(29.0, 0), np.nextafter(29.0, 200)])), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_values)
def test_tally_agrees_with_bin_index_and_counts_every_class(values):
    x = np.array(values, dtype=np.float64)
    t = tally_columns([x], [SPEC], out_of_range="clip")
    np.testing.assert_array_equal(t.hist, _oracle_1d(SPEC, x))
    fin = x[np.isfinite(x)]
    assert t.rows == x.size
    assert t.missing.tolist() == [int(np.isnan(x).sum())]
    assert t.infinite.tolist() == [int(np.isinf(x).sum())]
    assert t.below.tolist() == [int((fin < 0).sum())]
    assert t.above.tolist() == [int((fin >= 101).sum())]
    assert t.too_large.tolist() == [0]
    if x.size and np.isfinite(x).all():
        np.testing.assert_array_equal(finish(t, SPEC, out_of_range="clip"),
                                      SPEC.count(x, out_of_range="clip"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-2, 12, allow_nan=False), st.floats(-1, 6)),
                min_size=1, max_size=50), st.data())
def test_partitions_merge_by_addition_and_grid_agrees(rows, data):
    specs = (BinSpec(0, 10, 7), BinSpec(0.5, 5.5, 3))
    xy = np.array(rows, dtype=np.float64)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(xy)), max_size=4)))
    parts = np.split(xy, cuts)
    total = Tally.empty(specs)
    for p in parts:
        total = total + tally_columns([p[:, 0], p[:, 1]], specs, out_of_range="clip")
    whole = tally_columns([xy[:, 0], xy[:, 1]], specs, out_of_range="clip")
    for f in ("hist", "missing", "infinite", "below", "above", "too_large"):
        np.testing.assert_array_equal(getattr(total, f), getattr(whole, f))
    assert total.rows == whole.rows == len(xy)
    acc = GridHistogramAccumulator(specs, out_of_range="clip")
    acc.add(xy)
    np.testing.assert_array_equal(finish(total, specs, out_of_range="clip"), acc.histogram())


def test_the_age_regression_and_the_0_101_101_example():
    x = np.array([29.0, 57.0, 58.0, 59.0, 0.0, np.nextafter(101.0, 0)])
    got = finish(tally_columns([x], SPEC), SPEC)
    assert got[29] == got[57] == got[58] == got[59] == got[0] == got[100] == 1
    assert got.sum() == 6


def test_a_row_invalid_in_any_column_is_not_binned():
    specs = (BinSpec(0, 4, 4), BinSpec(0, 4, 4))
    x = np.array([1.0, np.nan, 2.0, 3.0])
    y = np.array([1.0, 1.0, np.inf, 3.0])
    t = tally_columns([x, y], specs)
    assert t.hist.sum() == 2 and t.hist[1 * 4 + 1] == 1 and t.hist[3 * 4 + 3] == 1
    assert t.missing.tolist() == [1, 0] and t.infinite.tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"^x: 1 NaN/missing value\(s\) .*no first row"):
        finish(t, specs, names=("x", "y"))


def test_int64_around_2_53_is_exact():
    two53 = 2**53
    v = np.array([two53 - 1, two53, two53 + 1, -two53, -two53 - 1, 2**62], dtype=np.int64)
    spec = BinSpec(-2.0**54, 2.0**54, 4)
    t = tally_columns([v], spec)
    assert t.too_large.tolist() == [3] and t.hist.sum() == 3 and t.rows == 6
    # edges -2^54, -2^53, 0, 2^53, 2^54: -2^53 in bin 1, 2^53 - 1 in bin 2, 2^53 in bin 3
    assert t.hist.tolist() == [0, 1, 1, 1]
    with pytest.raises(ValueError, match=r"3 integer\(s\) beyond 2\^53 .*never rounded"):
        finish(t, spec)
    u = np.array([two53, two53 + 1, 2**64 - 1], dtype=np.uint64)
    assert tally_columns([u], spec).too_large.tolist() == [2]
    small = np.array([2**31 - 1, -2**31], dtype=np.int32)
    assert tally_columns([small], BinSpec(-2.0**31, 2.0**31, 2)).hist.tolist() == [1, 1]


def test_object_arrays_of_python_numbers():
    v = np.array([None, 2**53 + 1, 2**70, -(2**53), 1.5, float("nan"), 2.0**60], dtype=object)
    t = tally_columns([v], BinSpec(-2.0**61, 2.0**61, 2), out_of_range="clip")
    assert t.missing.tolist() == [2]  # None and NaN
    assert t.too_large.tolist() == [2]  # Python integers beyond 2^53; the float 2^60 is exact
    assert t.hist.tolist() == [1, 2]
    with pytest.raises(ValueError, match="data: a value of type str"):
        tally_columns([np.array([1, "2"], dtype=object)], SPEC)


def test_arrow_nulls_are_missing_and_ints_stay_exact():
    a = pa.array([1, None, 2**53 + 1, 5, None], pa.int64())
    t = tally_columns([a], SPEC)
    assert t.missing.tolist() == [2] and t.too_large.tolist() == [1] and t.hist.sum() == 2
    ch = pa.chunked_array([pa.array([1.0, None]), pa.array([float("nan"), 100.5])])
    t = tally_columns([ch], SPEC)
    assert t.missing.tolist() == [2] and t.hist[1] == 1 and t.hist[100] == 1
    assert t.rows == 4
    dec = pa.array([None, 1, 2**60], pa.decimal128(30, 0))
    t = tally_columns([dec], SPEC, out_of_range="clip")
    assert t.missing.tolist() == [1] and t.too_large.tolist() == [1] and t.hist[1] == 1
    narrow = pa.array([None, Decimal("1.5"), Decimal("99.25")], pa.decimal128(20, 10))
    t = tally_columns([narrow], SPEC)  # 10 integer digits: never beyond 2^53
    assert t.missing.tolist() == [1] and t.too_large.tolist() == [0]
    assert t.hist[1] == 1 and t.hist[99] == 1
    with pytest.raises(ValueError, match="x: values of type string"):
        tally_columns([pa.array(["a"])], SPEC, names=["x"])


def test_finish_names_each_class_and_the_policy():
    x = np.array([-1.0, 5.0, 101.0, 200.0])
    t = tally_columns([x], SPEC)
    with pytest.raises(ValueError, match=r"income: 3 value\(s\) outside \[lower, upper\) = "
                                         r"\[0.0, 101.0\) \(1 below lower, 2 at or above"):
        finish(t, SPEC, names="income")
    got = finish(t, SPEC, out_of_range="clip")
    assert got[0] == 1 and got[5] == 1 and got[100] == 2
    with pytest.raises(ValueError, match="infinite"):
        finish(tally_columns([np.array([np.inf, 1.0])], SPEC), SPEC, out_of_range="clip")
    with pytest.raises(ValueError, match="no values"):
        finish(Tally.empty(SPEC), SPEC)
    with pytest.raises(ValueError, match="out_of_range"):
        finish(t, SPEC, out_of_range="drop")


def test_tallies_of_different_shapes_do_not_merge():
    with pytest.raises(ValueError, match="different shapes"):
        Tally.empty(SPEC) + Tally.empty(BinSpec(0, 1, 3))
    with pytest.raises(ValueError, match="same length"):
        tally_columns([np.zeros(2), np.zeros(3)], (SPEC, SPEC))
    with pytest.raises(ValueError, match="one column per axis"):
        tally_columns([np.zeros(2)], (SPEC, SPEC))
    huge = BinSpec(0, 1, 1 << 26)
    with pytest.raises(ValueError, match="the counts of .* cells would need about"):
        Tally.empty((huge, huge))  # 2^52 cells: refused by arithmetic


class _Fake:
    """A toy adapter for an object of a class named FakeFrame: a dict of numpy columns."""
    name = "fake-test"

    def accepts(self, obj):
        return type(obj).__name__ == "FakeFrame"

    def tally(self, obj, specs, *, columns, out_of_range):
        cols = columns if columns is not None else tuple(obj)
        return tally_columns([obj[c] for c in cols], specs, out_of_range=out_of_range)

    def open_files(self, path_or_glob, columns):
        raise NotImplementedError


class FakeFrame(dict):
    pass


def test_registry_and_front_door():
    fake = _Fake()
    base.register(fake)
    try:
        frame = FakeFrame(a=np.array([1.0, 2.0]), b=np.array([0.5, 100.0]))
        assert base.source_for(frame) is fake and base.source_named("fake-test") is fake
        assert base.source_for(np.zeros(3)) is None and base.source_for([1.0]) is None
        got = base.count(frame, SPEC, column="b")
        assert got[0] == 1 and got[100] == 1 and got.sum() == 2
        grid = base.count(frame, (SPEC, SPEC), columns=("a", "b"))
        assert grid.shape == (101, 101) and grid[1, 0] == 1 and grid[2, 100] == 1
        with pytest.raises(ValueError, match="^b: 1 value"):
            base.count(FakeFrame(b=np.array([-1.0])), SPEC, column="b")
        with pytest.raises(ValueError, match="not both"):
            base.count(frame, SPEC, column="a", columns=("a",))
        with pytest.raises(ValueError, match="columns: need 2"):
            base.count(frame, (SPEC, SPEC), columns=("a",))
    finally:
        base._REGISTRY.pop("fake-test")
    with pytest.raises(ValueError, match="engine must be one of .*got 'fake-test'"):
        base.source_named("fake-test")
    with pytest.raises(ValueError, match="no registered engine adapter accepts"):
        base.count(object(), SPEC)
