"""Release data path: the bin rule, out-of-range policy, chunked CSV, counts files."""

import numpy as np
import pytest

from dptree_opt.data_release import BinSpec
from dptree_opt.data_release import io as rio


# ------------------------------------------------------------------ the bin rule
def test_bin_rule_half_open_and_upper_excluded():
    spec = BinSpec(0.0, 1.0, 4)
    assert spec.bin_edges.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    x = [0.0, 0.2499999, 0.25, 0.5, 0.75, np.nextafter(1.0, 0.0)]
    assert spec.count(x).tolist() == [2, 1, 1, 2]
    with pytest.raises(ValueError, match=r"1 value\(s\) outside .* 1 at or above upper"):
        spec.count([0.5, 1.0])  # upper itself is out of range


def test_bin_rule_matches_the_sql_formula_exactly():
    """bin = min(floor(((x - L) / (U - L)) * K), K - 1) in IEEE double, as in the README's
    SQL / Spark / Dask one-liners; checked on random values and values near every edge."""
    rng = np.random.default_rng(3)
    lower, upper, K = -3.7, 1234.5, 977
    spec = BinSpec(lower, upper, K)
    edges = spec.bin_edges
    x = np.concatenate([rng.uniform(lower, upper, 20000), edges[:-1],
                        np.nextafter(edges[1:], -np.inf), np.nextafter(edges[:-1], np.inf)])
    x = x[(x >= lower) & (x < upper)]
    formula = np.minimum(np.floor(((x - lower) / (upper - lower)) * K), K - 1).astype(int)
    np.testing.assert_array_equal(spec.count(x), np.bincount(formula, minlength=K))
    # and agrees with the nominal edges away from rounding distance
    far = np.abs(x[:, None] - edges[None, :]).min(axis=1) > 1e-9 * (upper - lower)
    by_edges = np.searchsorted(edges, x[far], side="right") - 1
    np.testing.assert_array_equal(spec.bin_index(x[far]), by_edges)


def test_out_of_range_error_counts_rows_and_clip_moves_them():
    spec = BinSpec(10, 20, 5)
    x = np.array([9.0, 12, 25, 20, 15, 5])
    with pytest.raises(ValueError, match=r"income: 4 value\(s\) outside \[lower, upper\) = "
                                         r"\[10.0, 20.0\) \(2 below lower, 2 at or above upper;"
                                         r" first at data row 1\)"):
        spec.count(x, name="income")
    assert spec.count(x, out_of_range="clip").tolist() == [2, 1, 1, 0, 2]
    with pytest.raises(ValueError, match="out_of_range must be one of"):
        spec.count(x, out_of_range="drop")


@pytest.mark.parametrize("bad,what", [(np.nan, "NaN"), (np.inf, "infinite"),
                                      (-np.inf, "infinite")])
def test_nan_and_infinite_values_are_errors_even_with_clip(bad, what):
    spec = BinSpec(0, 1, 2)
    x = np.array([0.1, bad, 0.2, bad])
    for policy in ("error", "clip"):
        with pytest.raises(ValueError, match=rf"age: 2 {what}.*first at data row 2"):
            spec.count(x, name="age", out_of_range=policy)


@pytest.mark.parametrize("kw,match", [
    ({"lower": 1, "upper": 1, "bins": 3}, "lower must be < upper"),
    ({"lower": 2, "upper": 1, "bins": 3}, "lower must be < upper"),
    ({"lower": np.nan, "upper": 1, "bins": 3}, "lower must be finite"),
    ({"lower": 0, "upper": np.inf, "bins": 3}, "upper must be finite"),
    ({"lower": "0", "upper": 1, "bins": 3}, "lower must be a finite number"),
    ({"lower": -1e308, "upper": 1e308, "bins": 3}, "overflows"),
    ({"lower": 0, "upper": 1, "bins": 0}, "bins must be >= 1"),
    ({"lower": 0, "upper": 1, "bins": 2.5}, "bins must be an integer"),
    ({"lower": 0, "upper": 1, "bins": True}, "bins must be an integer"),
])
def test_bad_bin_specs(kw, match):
    with pytest.raises(ValueError, match=match):
        BinSpec(**kw)


def test_extreme_values_do_not_overflow_the_index():
    spec = BinSpec(0.0, 1e-300, 3)
    assert spec.count([1e308, -1e308, 0.0], out_of_range="clip").tolist() == [2, 0, 1]


# ------------------------------------------------------------------ in-memory values
@pytest.mark.parametrize("data,match", [
    ([], "data: no values"),
    ([[1.0, 2.0]], "must be 1-D"),
    ([0.1, "abc", 0.3], r"non-numeric value 'abc' at data row 2"),
    ([0.1, None], r"1 NaN/missing value\(s\); first at data row 2"),
    ([0.1, {}], r"non-numeric value \{\} at data row 2"),
    ([True, False], "real numbers"),
])
def test_bad_in_memory_values(data, match):
    with pytest.raises(ValueError, match=match):
        rio.histogram_from_values(data, BinSpec(0, 1, 2))


def test_numeric_strings_are_accepted():
    h, n = rio.histogram_from_values(["0.1", "0.7", "0.2"], BinSpec(0, 1, 2))
    assert h.tolist() == [2, 1] and n == 3


# ------------------------------------------------------------------ CSV
def _write_csv(path, values, extra=True):
    with open(path, "w") as f:
        f.write('id,"value",note\n' if extra else "value\n")
        for i, v in enumerate(values):
            f.write(f'{i},{v},"a, b"\n' if extra else f"{v}\n")
    return path


def test_chunked_csv_equals_in_memory_binning(tmp_path):
    rng = np.random.default_rng(0)
    x = np.round(rng.uniform(0, 100, 5000), 3)
    path = _write_csv(tmp_path / "d.csv", x)
    spec = BinSpec(0, 100, 37)
    blocks = list(rio.read_csv_column(path, "value", chunk_bytes=4096))
    assert len(blocks) > 20  # really chunked: bounded memory
    assert [off for _, off in blocks] == list(np.cumsum([0] + [b.size for b, _ in blocks])[:-1])
    hist, rows = rio.histogram_from_file(path, "value", spec, chunk_bytes=4096)
    assert rows == 5000
    np.testing.assert_array_equal(hist, rio.histogram_from_values(x, spec)[0])


def test_csv_non_numeric_cell_names_column_and_line(tmp_path):
    path = _write_csv(tmp_path / "d.csv", ["1.5", "2", "n/a", "3"])
    with pytest.raises(ValueError, match=r"column 'value' has the non-numeric value 'n/a' at "
                                         r"line 4"):
        rio.histogram_from_file(path, "value", BinSpec(0, 10, 2))
    path = _write_csv(tmp_path / "e.csv", ["1.5", "", "3"])
    with pytest.raises(ValueError, match=r"column 'value' has an empty \(missing\) value at "
                                         r"line 3"):
        rio.histogram_from_file(path, "value", BinSpec(0, 10, 2))


def test_csv_line_numbers_count_across_chunks(tmp_path):
    values = ["1"] * 3000 + ["oops"] + ["2"] * 10
    path = _write_csv(tmp_path / "d.csv", values, extra=False)
    with pytest.raises(ValueError, match="'oops' at line 3002"):
        rio.histogram_from_file(path, "value", BinSpec(0, 10, 2), chunk_bytes=1000)


def test_csv_value_errors_name_the_data_row(tmp_path):
    path = _write_csv(tmp_path / "d.csv", ["1"] * 2500 + ["nan", "5"], extra=False)
    with pytest.raises(ValueError, match=r"column 'value': 1 NaN/missing value\(s\); first at "
                                         r"data row 2501"):
        rio.histogram_from_file(path, "value", BinSpec(0, 10, 2), chunk_bytes=1000)
    path = _write_csv(tmp_path / "e.csv", ["1"] * 2501 + ["50"], extra=False)
    with pytest.raises(ValueError, match=r"column 'value': 1 value\(s\) outside .* first at "
                                         r"data row 2502"):
        rio.histogram_from_file(path, "value", BinSpec(0, 10, 2), chunk_bytes=1000)


def test_invalid_values_are_counted_over_the_whole_file(tmp_path):
    """The error counts every offending row of every block, not just the first block's."""
    values = ["1"] * 100 + ["-3", "inf"] + ["1"] * 3000 + ["11", "12", "nan"] + ["2"] * 5
    path = _write_csv(tmp_path / "d.csv", values, extra=False)
    with pytest.raises(ValueError, match=r"1 NaN/missing and 1 infinite value\(s\); first at "
                                         r"data row 102"):
        rio.histogram_from_file(path, "value", BinSpec(0, 10, 2), chunk_bytes=500)
    path = _write_csv(tmp_path / "e.csv", [v for v in values if v not in ("inf", "nan")],
                      extra=False)
    with pytest.raises(ValueError, match=r"3 value\(s\) outside .*\(1 below lower, 2 at or "
                                         r"above upper; first at data row 101\)"):
        rio.histogram_from_file(path, "value", BinSpec(0, 10, 2), chunk_bytes=500)
    hist, rows = rio.histogram_from_file(path, "value", BinSpec(0, 10, 2), chunk_bytes=500,
                                         out_of_range="clip")
    assert rows == 3108 and hist.tolist() == [3106, 2]


def test_csv_structural_errors(tmp_path):
    with pytest.raises(ValueError, match="column 'income' not found in the header .*columns: "
                                         "id, value, note"):
        rio.histogram_from_file(_write_csv(tmp_path / "d.csv", [1]), "income", BinSpec(0, 1, 2))
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="empty file"):
        rio.histogram_from_file(tmp_path / "empty.csv", "value", BinSpec(0, 1, 2))
    (tmp_path / "header.csv").write_text("value\n")
    with pytest.raises(ValueError, match="no data rows"):
        rio.histogram_from_file(tmp_path / "header.csv", "value", BinSpec(0, 1, 2))
    (tmp_path / "short.csv").write_text("a,value\n1,2\n3\n")
    with pytest.raises(ValueError, match="too few fields for column 'value' at line 3"):
        rio.histogram_from_file(tmp_path / "short.csv", "value", BinSpec(0, 10, 2))
    with pytest.raises(ValueError, match="file not found"):
        rio.histogram_from_file(tmp_path / "nope.csv", "value", BinSpec(0, 1, 2))
    (tmp_path / "bin.csv").write_bytes(b"value\n\xff\xfe\x00\n")
    with pytest.raises(ValueError, match="UTF-8"):
        rio.histogram_from_file(tmp_path / "bin.csv", "value", BinSpec(0, 1, 2))


def test_tsv_and_quoted_numbers(tmp_path):
    (tmp_path / "d.tsv").write_text("a\tvalue\nx\t0.1\ny\t0.9\n")
    assert rio.histogram_from_file(tmp_path / "d.tsv", "value", BinSpec(0, 1, 2))[0].tolist() \
        == [1, 1]
    (tmp_path / "q.csv").write_text('value\n"0.1"\n"0.6"\n')
    assert rio.histogram_from_file(tmp_path / "q.csv", "value", BinSpec(0, 1, 2))[0].tolist() \
        == [1, 1]


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path):
    path = tmp_path / "d.parquet"
    path.write_bytes(b"PAR1")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="Parquet needs pyarrow"):
            rio.histogram_from_file(path, "value", BinSpec(0, 1, 2))
    else:
        with pytest.raises(ValueError, match="not a readable Parquet file"):
            rio.histogram_from_file(path, "value", BinSpec(0, 1, 2))


def test_parquet_round_trip_when_pyarrow_is_installed(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    x = np.random.default_rng(1).uniform(0, 1, 3000)
    pq.write_table(pa.table({"value": x}), tmp_path / "d.parquet", row_group_size=500)
    spec = BinSpec(0, 1, 16)
    np.testing.assert_array_equal(rio.histogram_from_file(tmp_path / "d.parquet", "value",
                                                          spec)[0],
                                  rio.histogram_from_values(x, spec)[0])


# ------------------------------------------------------------------ counts files
def test_counts_file_formats(tmp_path):
    (tmp_path / "a.txt").write_text("3\n0\n\n5\n1.0\n")
    assert rio.read_counts(tmp_path / "a.txt", 4).tolist() == [3, 0, 5, 1]
    (tmp_path / "b.csv").write_text("bin,count\n2,7\n0,1\n")
    assert rio.read_counts(tmp_path / "b.csv", 4).tolist() == [1, 0, 7, 0]
    (tmp_path / "c.csv").write_text("count\n1\n2\n")
    assert rio.read_counts(tmp_path / "c.csv", 2).tolist() == [1, 2]


@pytest.mark.parametrize("text,bins,match", [
    ("1\n2\n", 3, "2 counts for 3 bins"),
    ("1\n2\n3\n4\n", 3, "4 counts for 3 bins"),
    ("1\n-2\n3\n", 3, r"count -2.0 at line 2 must be a non-negative integer"),
    ("1\n2.5\n3\n", 3, r"count 2.5 at line 2 must be a non-negative integer"),
    ("1\nnan\n3\n", 3, r"count nan at line 2 must be a non-negative integer"),
    ("1\nabc\n3\n", 3, r"'abc' is not a number at line 2"),
    ("n\n\n1\n\nabc\n3\n", 3, r"'abc' is not a number at line 5"),
    ("", 3, "no counts"),
    ("count\n", 3, "no counts"),
    ("0,1\n1,2,3\n", 3, "lines must all hold one count"),
    ("0,1\n5,2\n", 3, r"bin 5 at line 2 is not in 0..2"),
    ("0,1\n0,2\n", 3, "bin 0 appears more than once"),
    ("0,1\n-1,2\n", 3, r"bin -1.0 at line 2 must be a non-negative integer"),
])
def test_bad_counts_files(tmp_path, text, bins, match):
    (tmp_path / "c.txt").write_text(text)
    with pytest.raises(ValueError, match=match):
        rio.read_counts(tmp_path / "c.txt", bins)
