"""Release data path: out-of-range policy, the CSV reader (pyarrow, by blocks), Parquet, counts
files, in-memory values. The bin rule itself: tests/test_binning.py."""

import datetime
import gzip
import resource
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from dptree_opt.data_release import BinSpec
from dptree_opt.data_release import io as rio


# ------------------------------------------------------------------ validation of values
def test_bin_rule_half_open_and_upper_excluded():
    spec = BinSpec(0.0, 1.0, 4)
    assert spec.bin_edges.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    x = [0.0, 0.2499999, 0.25, 0.5, 0.75, np.nextafter(1.0, 0.0)]
    assert spec.count(x).tolist() == [2, 1, 1, 2]
    with pytest.raises(ValueError, match=r"1 value\(s\) outside .* 1 at or above upper"):
        spec.count([0.5, 1.0])  # upper itself is out of range


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
    ([[1.0], [2.0, 3.0]], r"nested sequence .* at data row 1"),
    (5.0, "must be 1-D"),
    ([0.1, "abc", 0.3], r"text 'abc' .* at data row 2"),
    ([0.1, {}], r"non-numeric value \{\} of type dict at data row 2"),
    ([0.1, 1 + 2j], r"non-numeric value \(1\+2j\) .* at data row 2"),
    (np.array([1 + 2j]), "real numbers, got dtype complex"),
])
def test_bad_in_memory_values(data, match):
    with pytest.raises(ValueError, match=match):
        rio.histogram_from_values(data, BinSpec(0, 1, 2))


@pytest.mark.parametrize("data,match", [
    (np.ma.array([0.1, 0.2], mask=[False, True]), "masked arrays are refused"),
    (np.ma.array([0.1, 0.2]), "masked arrays are refused"),  # even with nothing masked
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "dates / durations"),
    (np.array([3], dtype="timedelta64[s]"), "dates / durations"),
    ([0.1, datetime.datetime(2020, 1, 1)], r"of type datetime at data row 2"),
    ([0.1, datetime.date(2020, 1, 1)], r"of type date at data row 2"),
    ([0.1, datetime.timedelta(seconds=1)], r"of type timedelta at data row 2"),
    (np.array([True, False]), "booleans"),
    ([True, False], r"boolean True at data row 1"),
    ([0, 1, True], r"boolean True at data row 3"),  # np.asarray would make it the int 1
    ([0.5, np.bool_(False)], r"boolean .*False at data row 2"),
    ([0.1, None], r"missing value None at data row 2"),
    (np.array([0.1, None], dtype=object), r"missing value None at data row 2"),
    (["0.1", "0.7"], r"text '0.1' \(numeric strings are not converted"),
    (np.array(["0.1", "0.7"]), "numeric strings are not converted"),
    ([0.5, 2**53 + 1], r"integer 9007199254740993 at data row 2 is beyond 2\^53"),
    ([0.5, -(2**70)], r"integer -1180591620717411303424 at data row 2 is beyond 2\^53"),
    (np.array([1, 2**62]), r"integer 4611686018427387904 at data row 2 is beyond 2\^53"),
    (np.array([2**64 - 1], dtype=np.uint64), r"beyond 2\^53"),
    ([np.int64(2**60)], r"beyond 2\^53"),
    ([Decimal("sNaN")], "cannot be converted to a double"),
])
def test_refused_in_memory_values(data, match):
    with pytest.raises(ValueError, match=match):
        rio.histogram_from_values(data, BinSpec(0, 2**54, 2))


def test_accepted_in_memory_values():
    spec = BinSpec(-(2**53), 2**53 + 2, 2)
    for data in ([2**53, -(2**53), 0], np.array([2**53, -(2**53), 0]),
                 [np.int64(2**53), -(2**53), np.float32(0.0)], (2**53, -(2**53), 0.0),
                 [Decimal(2**53), Fraction(-(2**53)), 0]):
        h, n = rio.histogram_from_values(data, spec)
        assert h.tolist() == [1, 2] and n == 3
    h, _ = rio.histogram_from_values([Decimal("0.1"), Fraction(1, 3), 0.9, 1], BinSpec(0, 2, 2))
    assert h.tolist() == [3, 1]
    with pytest.raises(ValueError, match="1 NaN"):  # NaN passes the type check, not the count
        rio.histogram_from_values([Decimal("NaN"), 0.5], BinSpec(0, 1, 2))


# ------------------------------------------------------------------ CSV
def _write_csv(path, values, extra=True):
    with open(path, "w") as f:
        f.write('id,"value",note\n' if extra else "value\n")
        for i, v in enumerate(values):
            f.write(f'{i},{v},"a, b"\n' if extra else f"{v}\n")
    return path


def _hist(path, spec=None, **kw):
    return rio.histogram_from_file(path, "value", spec or BinSpec(0, 10, 2), **kw)


def test_chunked_csv_equals_in_memory_binning(tmp_path):
    rng = np.random.default_rng(0)
    x = np.round(rng.uniform(0, 100, 5000), 3)
    path = _write_csv(tmp_path / "d.csv", x)
    spec = BinSpec(0, 100, 37)
    blocks = list(rio.read_csv_column(path, "value", chunk_bytes=4096))
    assert len(blocks) > 20  # really chunked: bounded memory
    assert [off for _, off in blocks] == list(np.cumsum([0] + [b.size for b, _ in blocks])[:-1])
    np.testing.assert_array_equal(np.concatenate([b for b, _ in blocks]), x)
    hist, rows = rio.histogram_from_file(path, "value", spec, chunk_bytes=4096)
    assert rows == 5000
    np.testing.assert_array_equal(hist, rio.histogram_from_values(x, spec)[0])
    for chunk in (20, 100, 1 << 20):  # any block size gives the same values
        got = np.concatenate([b for b, _ in rio.read_csv_column(path, "value",
                                                                chunk_bytes=chunk)])
        np.testing.assert_array_equal(got, x)


def test_row_with_a_different_field_count_is_an_error(tmp_path):
    """Regression: "1,1,234" under a 2-column header was read as 1."""
    (tmp_path / "d.csv").write_text("a,value\n1,1\n1,1,234\n3,4\n")
    with pytest.raises(ValueError, match=r"data row 2 has 3 field\(s\) but the header has 2 "
                                         r"\('1,1,234'\)"):
        _hist(tmp_path / "d.csv")
    (tmp_path / "s.csv").write_text("a,value\n1,2\n\n3\n")  # too few; the blank line skipped
    with pytest.raises(ValueError, match=r"data row 2 has 1 field\(s\) but the header has 2"):
        _hist(tmp_path / "s.csv")


def test_field_count_error_names_the_row_across_blocks(tmp_path):
    (tmp_path / "d.csv").write_text("a,value\n" + "1,1\n" * 3000 + "\n" * 4 + "1,2,3\n"
                                    + "2,2\n" * 10)
    for chunk in (37, 1000, 1 << 20):
        with pytest.raises(ValueError, match="data row 3001 has 3 field"):
            _hist(tmp_path / "d.csv", chunk_bytes=chunk)


def test_utf8_byte_order_mark(tmp_path):
    (tmp_path / "d.csv").write_bytes(b"\xef\xbb\xbfvalue,x\n1,2\n7,4\n")
    assert _hist(tmp_path / "d.csv")[0].tolist() == [1, 1]


def test_quoted_fields(tmp_path):
    (tmp_path / "d.csv").write_text('note,"value",x\n"a,b","1.5",3\n"c ""d""",7,"e,f"\n')
    assert _hist(tmp_path / "d.csv")[0].tolist() == [1, 1]


def test_duplicate_column_names_are_an_error(tmp_path):
    (tmp_path / "d.csv").write_text("value,a,value\n1,2,3\n")
    with pytest.raises(ValueError, match="duplicate column name.*'value'"):
        _hist(tmp_path / "d.csv")
    (tmp_path / "e.csv").write_text("a, value,a\n1,2,3\n")  # a duplicate elsewhere, too
    with pytest.raises(ValueError, match="duplicate column name.*'a'"):
        _hist(tmp_path / "e.csv")


def test_gzip_and_tsv_gzip(tmp_path):
    with gzip.open(tmp_path / "d.csv.gz", "wt") as f:
        f.write("id,value\n" + "".join(f"{i},{i % 10}\n" for i in range(5000)))
    hist, rows = _hist(tmp_path / "d.csv.gz", chunk_bytes=1000)
    assert rows == 5000 and hist.tolist() == [2500, 2500]
    with gzip.open(tmp_path / "d.tsv.gz", "wt") as f:
        f.write("id\tvalue\na\t1\nb\t7\n")
    assert _hist(tmp_path / "d.tsv.gz")[0].tolist() == [1, 1]
    (tmp_path / "bad.csv.gz").write_bytes(b"value\n1\n")  # not gzip inside
    with pytest.raises(ValueError, match="bad.csv.gz: cannot read"):
        _hist(tmp_path / "bad.csv.gz")


def test_a_line_longer_than_the_block_is_an_error(tmp_path):
    """Regression: a 200 MB line took 2.6 GB; now any line > chunk_bytes is refused (here
    with a 1000-byte limit, so the test is fast), wherever it is."""
    for before in ([], ["1"] * 5, ["1"] * 5000):
        (tmp_path / "d.csv").write_text("a,value\n" + "".join(f"x,{v}\n" for v in before)
                                        + "x," + "9" * 5000 + "\n1,2\n")
        with pytest.raises(ValueError, match="longer than chunk_bytes = 1000 bytes"):
            _hist(tmp_path / "d.csv", chunk_bytes=1000)
    (tmp_path / "h.csv").write_text("v" * 2000 + ",value\n1,2\n")
    with pytest.raises(ValueError, match="header row is longer than chunk_bytes = 1000"):
        _hist(tmp_path / "h.csv", chunk_bytes=1000)
    (tmp_path / "ok.csv").write_text("value\n" + "1" * 10 + "\n")  # exactly the limit: fine
    assert _hist(tmp_path / "ok.csv", BinSpec(0, 1e10, 1), chunk_bytes=10)[1] == 1
    with pytest.raises(ValueError, match="longer than chunk_bytes = 9 bytes"):
        _hist(tmp_path / "ok.csv", BinSpec(0, 1e10, 1), chunk_bytes=9)


def test_memory_is_bounded_by_the_block_size(tmp_path):
    """A 60 MB file read with 1 MiB blocks: the peak RSS grows by far less than the file."""
    path = tmp_path / "big.csv"
    line = b"1,2.5,abcdefghijklmnopqrstuvwxyz\n"
    with open(path, "wb") as f:
        f.write(b"id,value,note\n")
        block = line * (1 << 15)
        for _ in range(int(60e6) // len(block)):
            f.write(block)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    blocks = 0
    for values, _ in rio.read_csv_column(path, "value", chunk_bytes=1 << 20):
        blocks += 1
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert blocks > 50
    assert grown < 40, f"peak RSS grew by {grown:.0f} MB reading a 60 MB file"


@pytest.mark.parametrize("text,match", [
    ("id,value\n1,2\n2,\n", r"column 'value' has an empty \(missing\) value at data row 2"),
    ('id,value\n1,2\n2,""\n', r"an empty \(missing\) value at data row 2"),
    ("id,value\n1,2\n2,n/a\n", r"column 'value' has the non-numeric value 'n/a' at data row 2"),
    ("id,value\n1,2\n2,NA\n", r"non-numeric value 'NA' at data row 2"),
    ("id,value\n1,2\n2,3 kg\n", r"non-numeric value '3 kg' at data row 2"),
    ("id,value\n1,2\n2,nan\n", r"column 'value': 1 NaN/missing value\(s\); first at data row 2"),
    ("id,value\n1,2\n2,-inf\n", r"column 'value': 1 infinite value\(s\); first at data row 2"),
    ("id,value\n1,2\n2,Infinity\n", r"1 infinite value\(s\); first at data row 2"),
])
def test_bad_cells_name_file_column_and_row(tmp_path, text, match):
    (tmp_path / "d.csv").write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        _hist(tmp_path / "d.csv")
    assert "d.csv" in str(info.value)


def test_csv_line_numbers_count_across_chunks(tmp_path):
    values = ["1"] * 3000 + ["oops"] + ["2"] * 10
    path = _write_csv(tmp_path / "d.csv", values, extra=False)
    for chunk in (10, 1000, 1 << 20):
        with pytest.raises(ValueError, match="'oops' at data row 3001"):
            _hist(path, chunk_bytes=chunk)


def test_csv_value_errors_name_the_data_row(tmp_path):
    path = _write_csv(tmp_path / "d.csv", ["1"] * 2500 + ["nan", "5"], extra=False)
    with pytest.raises(ValueError, match=r"column 'value': 1 NaN/missing value\(s\); first at "
                                         r"data row 2501"):
        _hist(path, chunk_bytes=1000)
    path = _write_csv(tmp_path / "e.csv", ["1"] * 2501 + ["50"], extra=False)
    with pytest.raises(ValueError, match=r"column 'value': 1 value\(s\) outside .* first at "
                                         r"data row 2502"):
        _hist(path, chunk_bytes=1000)


def test_invalid_values_are_counted_over_the_whole_file(tmp_path):
    """The error counts every offending row of every block, not just the first block's."""
    values = ["1"] * 100 + ["-3", "inf"] + ["1"] * 3000 + ["11", "12", "nan"] + ["2"] * 5
    path = _write_csv(tmp_path / "d.csv", values, extra=False)
    with pytest.raises(ValueError, match=r"1 NaN/missing and 1 infinite value\(s\); first at "
                                         r"data row 102"):
        _hist(path, chunk_bytes=500)
    path = _write_csv(tmp_path / "e.csv", [v for v in values if v not in ("inf", "nan")],
                      extra=False)
    with pytest.raises(ValueError, match=r"3 value\(s\) outside .*\(1 below lower, 2 at or "
                                         r"above upper; first at data row 101\)"):
        _hist(path, chunk_bytes=500)
    hist, rows = _hist(path, chunk_bytes=500, out_of_range="clip")
    assert rows == 3108 and hist.tolist() == [3106, 2]


def test_empty_header_only_and_non_utf8_files(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "blank.csv").write_text("\n\r\n\n")
    for name in ("empty.csv", "blank.csv"):
        with pytest.raises(ValueError, match="empty file"):
            _hist(tmp_path / name)
    for text in ("value\n", "value", "value\n\n\n"):
        (tmp_path / "header.csv").write_text(text)
        with pytest.raises(ValueError, match="no data rows"):
            _hist(tmp_path / "header.csv")
    (tmp_path / "bin.csv").write_bytes(b"value\n\xff\xfe\x00\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        _hist(tmp_path / "bin.csv")
    (tmp_path / "latin1.csv").write_bytes("valeur_\xe9,value\n1,2\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not a UTF-8 text"):
        _hist(tmp_path / "latin1.csv")
    (tmp_path / "utf16.csv").write_bytes("value\n1\n".encode("utf-16"))
    with pytest.raises(ValueError, match="UTF-16 text; convert it to UTF-8"):
        _hist(tmp_path / "utf16.csv")


def test_csv_structural_errors(tmp_path):
    with pytest.raises(ValueError, match="column 'income' not found in the header .*columns: "
                                         "id, value, note"):
        rio.histogram_from_file(_write_csv(tmp_path / "d.csv", [1]), "income", BinSpec(0, 1, 2))
    with pytest.raises(ValueError, match="file not found"):
        _hist(tmp_path / "nope.csv")


@pytest.mark.parametrize("kw,match", [
    ({"chunk_bytes": 0}, "chunk_bytes must be in 1.."),
    ({"chunk_bytes": -5}, "chunk_bytes must be in 1.."),
    ({"chunk_bytes": 1 << 30}, "chunk_bytes must be in 1.."),
    ({"chunk_bytes": 2.5}, "chunk_bytes must be a positive integer"),
    ({"chunk_bytes": True}, "chunk_bytes must be a positive integer"),
    ({"delimiter": ";;"}, "delimiter must be one character"),
    ({"delimiter": '"'}, "delimiter must be one character"),
    ({"batch_rows": 5}, r"unknown option\(s\) for a CSV file"),
])
def test_bad_reader_options(tmp_path, kw, match):
    path = _write_csv(tmp_path / "d.csv", [1, 2])
    with pytest.raises(ValueError, match=match):
        _hist(path, **kw)


def test_tsv_delimiter_crlf_and_spaces(tmp_path):
    (tmp_path / "d.tsv").write_text("a\tvalue\nx\t0.1\ny\t0.9\n")
    assert _hist(tmp_path / "d.tsv", BinSpec(0, 1, 2))[0].tolist() == [1, 1]
    (tmp_path / "d.txt").write_text("a;value\nx;0.1\ny;0.9\n")
    assert _hist(tmp_path / "d.txt", BinSpec(0, 1, 2), delimiter=";")[0].tolist() == [1, 1]
    (tmp_path / "crlf.csv").write_bytes(b"a,value\r\n1,0.1\r\n\r\n2,0.9\r\n")
    for chunk in (7, 8, 9, 100):  # a CR LF may be split between blocks
        assert _hist(tmp_path / "crlf.csv", BinSpec(0, 1, 2), chunk_bytes=chunk)[0].tolist() \
            == [1, 1]
    (tmp_path / "cr.csv").write_bytes(b"a,value\r1,0.1\r2,0.9\r")
    assert _hist(tmp_path / "cr.csv", BinSpec(0, 1, 2))[0].tolist() == [1, 1]
    (tmp_path / "sp.csv").write_text("a , value \n1, 0.1 \n2,\t0.9\n")  # trimmed
    assert _hist(tmp_path / "sp.csv", BinSpec(0, 1, 2))[0].tolist() == [1, 1]


# ------------------------------------------------------------------ Parquet
def test_parquet_round_trip(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    x = np.random.default_rng(1).uniform(0, 1, 3000)
    pq.write_table(pa.table({"value": x, "i": np.arange(3000)}), tmp_path / "d.parquet",
                   row_group_size=500)
    spec = BinSpec(0, 1, 16)
    np.testing.assert_array_equal(_hist(tmp_path / "d.parquet", spec)[0],
                                  rio.histogram_from_values(x, spec)[0])
    hist, rows = rio.histogram_from_file(tmp_path / "d.parquet", "i", BinSpec(0, 3000, 3),
                                         batch_rows=7)
    assert rows == 3000 and hist.tolist() == [1000] * 3


def test_parquet_bad_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    (tmp_path / "junk.parquet").write_bytes(b"PAR1")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        _hist(tmp_path / "junk.parquet")
    pq.write_table(pa.table({"value": pa.array([0.5, None, 0.7, None]),
                             "s": pa.array(["1", "2", "3", "4"]),
                             "b": pa.array([True, False, True, False]),
                             "big": pa.array([1, 2, 2**60, 3], pa.int64())}),
                   tmp_path / "d.parquet")
    with pytest.raises(ValueError, match=r"column 'value' has 2 missing \(null\) value\(s\) .*"
                                         r"first at data row 2"):
        _hist(tmp_path / "d.parquet", BinSpec(0, 1, 2))
    for col, match in (("s", "type string, not numeric"), ("b", "type bool, not numeric"),
                       ("big", r"integers beyond 2\^53"), ("nope", "not found")):
        with pytest.raises(ValueError, match=match):
            rio.histogram_from_file(tmp_path / "d.parquet", col, BinSpec(0, 2.0**61, 2))
    with pytest.raises(ValueError, match="a Parquet file has no delimiter"):
        _hist(tmp_path / "d.parquet", delimiter=",")
    with pytest.raises(ValueError, match="chunk_bytes must be in"):
        _hist(tmp_path / "d.parquet", chunk_bytes=0)


# ------------------------------------------------------------------ counts files
def test_counts_file_formats(tmp_path):
    cases = [
        ("3\n0\n\n5\n1.0\n", 4, [3, 0, 5, 1]),
        ("bin,count\n2,7\n0,1\n", 4, [1, 0, 7, 0]),
        ("count\n1\n2\n", 2, [1, 2]),
        ("COUNT\r\n1\r\n2\r\n", 2, [1, 2]),
        ('"bin","count"\n"0","4"\n"1","5"\n', 2, [4, 5]),  # quoted header and numbers
        (' Bin , Count \n1 , 5\n', 2, [0, 5]),
        ("bin count\n1 5\n0\t2\n", 2, [2, 5]),  # whitespace separated
        ('"7"\n"8"\n', 2, [7, 8]),
        ("+3\n0004\n0.000\n", 3, [3, 4, 0]),
    ]
    for text, bins, expected in cases:
        (tmp_path / "c.csv").write_text(text)
        assert rio.read_counts(tmp_path / "c.csv", bins).tolist() == expected, text


def test_counts_bom_and_quoted_first_line_keep_bin_0(tmp_path):
    """Regression: a BOM or a quoted first line made it look like a header: bin 0 dropped."""
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf5\n6\n7\n")
    assert rio.read_counts(tmp_path / "bom.csv", 3).tolist() == [5, 6, 7]
    (tmp_path / "q.csv").write_text('"5"\n"6"\n"7"\n')
    assert rio.read_counts(tmp_path / "q.csv", 3).tolist() == [5, 6, 7]
    (tmp_path / "qb.csv").write_text('"0","5"\n"1","6"\n')
    assert rio.read_counts(tmp_path / "qb.csv", 2).tolist() == [5, 6]
    (tmp_path / "bomh.csv").write_bytes(b"\xef\xbb\xbfbin,count\n0,5\n1,6\n")  # BOM + header
    assert rio.read_counts(tmp_path / "bomh.csv", 2).tolist() == [5, 6]


def test_counts_are_exact_integers_below_2_53(tmp_path):
    (tmp_path / "ok.csv").write_text("9007199254740991\n0\n")  # 2^53 - 1: exact
    assert rio.read_counts(tmp_path / "ok.csv", 2).tolist() == [2**53 - 1, 0]
    for big in ("9007199254740993", "9007199254740992", "99999999999999999999999"):
        (tmp_path / "big.csv").write_text(f"1\n{big}\n")
        with pytest.raises(ValueError, match=r"count .* at line 2 is >= 2\^53"):
            rio.read_counts(tmp_path / "big.csv", 2)


def test_counts_total_beyond_2_53_is_refused(tmp_path):
    """Regression: 4096 lines of 2^52 summed in int64 wrapped (N = 100 was reported)."""
    (tmp_path / "c.csv").write_text(f"{2**52}\n" * 4096)
    with pytest.raises(ValueError, match=r"the counts sum to 18446744073709551616 >= 2\^53"):
        rio.read_counts(tmp_path / "c.csv", 4096)
    (tmp_path / "d.csv").write_text(f"{2**52}\n{2**52 - 1}\n")  # 2^53 - 1: fine
    assert rio.read_counts(tmp_path / "d.csv", 2).sum() == 2**53 - 1
    (tmp_path / "e.csv").write_text(f"0,{2**52}\n1,{2**52}\n")
    with pytest.raises(ValueError, match=r"sum to 9007199254740992 >= 2\^53"):
        rio.read_counts(tmp_path / "e.csv", 2)


@pytest.mark.parametrize("text,bins,match", [
    ("1\n2\n", 3, "2 counts for 3 bins"),
    ("1\n2\n3\n4\n", 3, "4 counts for 3 bins"),
    ("1\n-2\n3\n", 3, r"count '-2' at line 2 must be a non-negative integer"),
    ("1\n2.5\n3\n", 3, r"count '2.5' at line 2 must be a non-negative integer"),
    ("1\n1e3\n3\n", 3, r"count '1e3' at line 2 must be a non-negative integer"),
    ("1\nnan\n3\n", 3, r"count 'nan' at line 2 must be a non-negative integer"),
    ("1\nabc\n3\n", 3, r"'abc' is not a number at line 2"),
    ("1\n\u0663\n3\n", 3, r"is not a number at line 2"),  # a non-ASCII digit
    ("n\n1\n2\n", 2, r"'n' is not a number at line 1"),  # not a header: data
    ("counts\n1\n2\n", 2, r"'counts' is not a number at line 1"),
    ("", 3, "no counts"),
    ("\n\n", 3, "no counts"),
    ("count\n", 3, "no counts"),
    ("0,1\n1,2,3\n", 3, "lines must all hold one count.*line 2"),
    ("1\n0,2\n", 3, "lines must all hold one count.*line 2"),
    ("0,1\n5,2\n", 3, r"bin 5 at line 2 is not in 0..2"),
    ("0,1\n0,2\n", 3, r"bin 0 appears more than once \(lines 1 and 2\)"),
    ("0,1\n-1,2\n", 3, r"bin '-1' at line 2 must be a non-negative integer"),
    ('"5\n', 1, r"is not a number at line 1"),  # an unbalanced quote
])
def test_bad_counts_files(tmp_path, text, bins, match):
    (tmp_path / "c.txt").write_text(text)
    with pytest.raises(ValueError, match=match):
        rio.read_counts(tmp_path / "c.txt", bins)


def test_counts_file_encoding_errors(tmp_path):
    (tmp_path / "c.txt").write_bytes(b"1\n2\n\xff\n")
    with pytest.raises(ValueError, match=r"not UTF-8 text \(line 3\)"):
        rio.read_counts(tmp_path / "c.txt", 3)
    (tmp_path / "d.txt").write_bytes("1\n2\n".encode("utf-16"))
    with pytest.raises(ValueError, match="UTF-16"):
        rio.read_counts(tmp_path / "d.txt", 2)
