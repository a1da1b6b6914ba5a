"""`dptree-opt release --engine duckdb|dask|spark PATH_OR_GLOB`: the files are counted by the
engine's adapter (``sources``) into exactly the counts of the bin rule (and of the built-in
reader), 1-D and grids; bad input is refused before any noise."""

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dptree_opt.cli import main
from dptree_opt.data_release import core, grid
from dptree_opt.data_release.binning import BinSpec, GridHistogramAccumulator

RNG = np.random.default_rng(11)
X = np.round(RNG.uniform(0, 101, 3000), 2)
Y = RNG.uniform(-1, 1, 3000)
X[:5] = [29.0, 57.0, 58.0, 59.0, 0.0]  # the edge cases of the 0 / 101 / 101 bins


@pytest.fixture
def counted(monkeypatch):
    """The exact counts each release hands on to the secure noise (1-D and grid)."""
    seen = []
    for module, name in ((core, "_release_histogram"), (grid, "_release_cells")):
        real = getattr(module, name)

        def spy(hist, *args, real=real):
            seen.append(np.array(hist))
            return real(hist, *args)
        monkeypatch.setattr(module, name, spy)
    return seen


@pytest.fixture
def files(tmp_path):
    """The data split over two Parquet files, and the same data as one CSV."""
    half = X.size // 2
    for i, sl in enumerate((slice(0, half), slice(half, None))):
        pq.write_table(pa.table({"x": X[sl], "y": Y[sl], "label": ["a"] * len(X[sl])}),
                       tmp_path / f"part{i}.parquet")
    csv = tmp_path / "all.csv"
    csv.write_text("x,y\n" + "\n".join(f"{float(a)!r},{float(b)!r}" for a, b in zip(X, Y))
                   + "\n")
    return tmp_path


ONE = ["--column", "x", "--lower", "0", "--upper", "101", "--bins", "101", "--epsilon", "1",
       "--quantiles", ""]


def test_duckdb_counts_a_parquet_glob_exactly(files, counted, capsys, opendp_calls):
    out = files / "r.json"
    assert main(["release", "--engine", "duckdb", str(files / "part*.parquet"), *ONE,
                 "--out", str(out)]) == 0
    np.testing.assert_array_equal(counted[-1], BinSpec(0, 101, 101).count(X))
    assert "(counted by duckdb)" in capsys.readouterr().out
    assert json.loads(out.read_text())["complete"] and opendp_calls.events.count("drawn") >= 1


def test_duckdb_and_the_builtin_reader_agree_on_a_csv(files, counted):
    assert main(["release", str(files / "all.csv"), *ONE]) == 0
    assert main(["release", "--engine", "duckdb", str(files / "all.csv"), *ONE]) == 0
    np.testing.assert_array_equal(counted[0], counted[1])
    np.testing.assert_array_equal(counted[1], BinSpec(0, 101, 101).count(X))


def test_duckdb_grid(files, counted, capsys):
    assert main(["release", "--engine", "duckdb", str(files / "part*.parquet"), "--columns",
                 "x,y", "--lower", "0,-1", "--upper", "101,1", "--bins", "8x4",
                 "--epsilon", "1"]) == 0
    acc = GridHistogramAccumulator((BinSpec(0, 101, 8), BinSpec(-1, 1, 4)))
    acc.add(np.column_stack([X, Y]))
    np.testing.assert_array_equal(counted[-1], acc.histogram())
    assert "2-D release of columns 'x', 'y'" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--engine", "duckdb", "{d}/part*.parquet", "--column", "x", "--lower", "0", "--upper",
      "50", "--bins", "10", "--epsilon", "1"], r"x: \d+ value\(s\) outside \[lower, upper\)"),
    (["--engine", "duckdb", "{d}/nothing*.parquet", *ONE], "no file matches"),
    (["--engine", "duckdb", "{d}/part*.parquet", "--column", "nope", "--lower", "0",
      "--upper", "1", "--bins", "2", "--epsilon", "1"], "nope"),
    (["--engine", "duckdb", "{d}/all.csv", "--delimiter", ";", *ONE], "--delimiter is for"),
    (["--engine", "duckdb", "--counts", "{d}/all.csv", *ONE], "--engine reads a data FILE"),
    # checked before the files are opened (no file matches these globs)
    (["--engine", "duckdb", "{d}/none*.csv", "--column", "x", "--lower", "1", "--upper", "0",
      "--bins", "2", "--epsilon", "1"], "lower must be < upper"),
    (["--engine", "duckdb", "{d}/none*.csv", "--column", "x", "--lower", "0", "--upper", "1",
      "--bins", "2", "--epsilon", "-1"], "epsilon"),
])
def test_bad_input_is_refused_before_any_noise(files, argv, match, capsys, opendp_calls):
    argv = [a.replace("{d}", str(files)) for a in argv]
    assert main(["release", *argv]) == 2
    assert opendp_calls.events == []
    assert re.search(match, capsys.readouterr().err)


def test_a_missing_value_is_an_error_not_dropped(tmp_path, capsys, opendp_calls):
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"x": pa.array([1, None, 3], pa.int64())}), path)
    assert main(["release", "--engine", "duckdb", str(path), *ONE]) == 2
    assert "x: 1 NaN/missing value(s)" in capsys.readouterr().err
    assert opendp_calls.events == []


def test_unknown_engine_and_help(capsys):
    with pytest.raises(SystemExit):
        main(["release", "--engine", "oracle", "a.csv", *ONE])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["release", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--engine {duckdb," in text and "PATH_OR_GLOB" in text and "glob" in text


def test_a_missing_engine_package_is_a_clear_error(files, monkeypatch, capsys, opendp_calls):
    from dptree_opt.data_release.sources import source_named

    def missing(path, columns):
        raise ModuleNotFoundError("No module named 'duckdb'", name="duckdb")
    monkeypatch.setattr(source_named("duckdb"), "open_files", missing)
    assert main(["release", "--engine", "duckdb", str(files / "all.csv"), *ONE]) == 2
    assert "--engine duckdb: duckdb is not installed" in capsys.readouterr().err
    assert opendp_calls.events == []


def test_dask_engine(files, counted):
    pytest.importorskip("dask.dataframe")
    assert main(["release", "--engine", "dask", str(files / "part*.parquet"), *ONE]) == 0
    np.testing.assert_array_equal(counted[-1], BinSpec(0, 101, 101).count(X))


@pytest.mark.slow
def test_spark_engine(files, counted):
    pytest.importorskip("pyspark")
    assert main(["release", "--engine", "spark", str(files / "part*.parquet"), "--columns",
                 "x,y", "--lower", "0,-1", "--upper", "101,1", "--bins", "8x4",
                 "--epsilon", "1"]) == 0
    acc = GridHistogramAccumulator((BinSpec(0, 101, 8), BinSpec(-1, 1, 4)))
    acc.add(np.column_stack([X, Y]))
    np.testing.assert_array_equal(counted[-1], acc.histogram())
