"""The DuckDB adapter (``sources.duckdb_source``): counted inside DuckDB by the generated SQL,
identical to ``tally_columns`` / ``BinSpec.bin_index`` on adversarial values (every edge and one
ulp either side, -0.0, +-inf, NaN, NULL, integers around 2^53 in every wide integer type),
grids, files, and ``release(relation, column=...)`` (counted before any noise is drawn)."""

import numpy as np
import pytest

from dptree_opt.data_release import core, grid
from dptree_opt.data_release.binning import BinSpec, GridHistogramAccumulator
from dptree_opt.data_release.core import release
from dptree_opt.data_release.sources import base, source_for, source_named
from dptree_opt.data_release.sources.base import finish, tally_columns
from dptree_opt.data_release.sources.duckdb_source import SOURCE, tally_relation, tally_sql

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")

FIELDS = ("hist", "missing", "infinite", "below", "above", "too_large")
SPECS = [(0.0, 101.0, 101), (0.1, 0.7, 6), (-1e300, 1e300, 1000), (1e15, 1e15 + 1024, 1024),
         (-1e-300, 1e-300, 64), (2.0**52, 2.0**52 + 3, 3), (-5e307, 5e307, 2)]


def _adversarial(spec: BinSpec) -> np.ndarray:
    e = spec.bin_edges
    x = np.concatenate([e, np.nextafter(e, -np.inf), np.nextafter(e, np.inf),
                        [-0.0, 0.0, np.nan, np.inf, -np.inf, -np.nan, 1e308, -1e308]])
    return x


def _same(a, b):
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    assert a.rows == b.rows


def _relation(con, **cols):
    con.register("input_table", pa.table(cols))
    return con.sql("SELECT * FROM input_table")


@pytest.mark.parametrize("lower,upper,K", SPECS)
def test_duckdb_counts_like_the_python_rule(lower, upper, K):
    spec = BinSpec(lower, upper, K)
    x = _adversarial(spec)
    mask = np.zeros(x.size, dtype=bool)
    mask[::7] = True  # some NULLs
    arr = pa.array(x, mask=mask)
    got = tally_relation(_relation(duckdb.connect(), x=arr), spec, ("x",))
    _same(got, tally_columns([arr], spec))
    ok = x[~mask & np.isfinite(x)]
    # independent oracle: the last edge <= the clipped value
    v = np.clip(ok, spec.lower, np.nextafter(spec.upper, -np.inf))
    oracle = np.bincount(np.searchsorted(spec.bin_edges, v, side="right") - 1, minlength=K)
    np.testing.assert_array_equal(got.hist, oracle)
    assert got.missing[0] == mask.sum() + np.isnan(x[~mask]).sum()
    assert got.infinite[0] == np.isinf(x[~mask]).sum()


@pytest.mark.parametrize("sql_type,values,big", [
    ("BIGINT", [2**53 - 1, 2**53, 2**53 + 1, -2**53, -2**53 - 1, 2**63 - 1, -2**63, None], 4),
    ("UBIGINT", [2**53, 2**53 + 1, 2**64 - 1, 0, None], 2),
    ("HUGEINT", [2**53, 2**53 + 1, -(2**100), 5, None], 2),
    ("UHUGEINT", [2**53, 2**120, None], 1),
    ("DECIMAL(20,0)", [2**53, 2**53 + 1, -(2**53) - 1, 7, None], 2),
    ("DECIMAL(38,2)", [2**53, 2**53 + 1, 3, None], 1),
    ("DECIMAL(10,2)", [12345678.25, -3, None], 0),
    ("INTEGER", [2**31 - 1, -2**31, None], 0),
])
def test_integers_beyond_2_53_are_refused_in_every_wide_type(sql_type, values, big):
    con = duckdb.connect()
    rows = ", ".join(f"({'NULL' if v is None else v})" for v in values)
    rel = con.sql(f"SELECT CAST(v AS {sql_type}) AS v FROM (VALUES {rows}) t(v)")
    spec = BinSpec(-2.0**130, 2.0**130, 2)
    got = tally_relation(rel, spec, None)
    assert got.too_large.tolist() == [big] and got.missing.tolist() == [1]
    assert got.hist.sum() == len(values) - 1 - big and got.rows == len(values)
    if big:
        with pytest.raises(ValueError, match=r"beyond 2\^53"):
            finish(got, spec, names=["v"])


def test_the_sql_sees_the_column_types():
    q = tally_sql(BinSpec(0, 1, 2), ["a b"], ["DOUBLE"], "t")
    assert '"a b"' in q and "isnan" in q and "9007199254740992" not in q
    assert "9007199254740992" in tally_sql(BinSpec(0, 1, 2), ["v"], ["BIGINT"], "t")
    with pytest.raises(ValueError, match="name: a column of type VARCHAR cannot be binned"):
        tally_relation(duckdb.sql("SELECT 'a' AS name"), BinSpec(0, 1, 2), None)


def test_grid_cells_are_row_major_and_match_the_accumulator():
    rng = np.random.default_rng(3)
    xy = np.column_stack([rng.uniform(-1, 11, 500), rng.uniform(0, 3, 500)])
    xy[::50, 1] = 1.5  # an edge
    specs = (BinSpec(0, 10, 7), BinSpec(0, 3, 2))
    rel = _relation(duckdb.connect(), a=pa.array(xy[:, 0]), b=pa.array(xy[:, 1]),
                    junk=pa.array(["s"] * 500))
    got = finish(tally_relation(rel, specs, ("a", "b")), specs, out_of_range="clip")
    acc = GridHistogramAccumulator(specs, out_of_range="clip")
    acc.add(xy)
    np.testing.assert_array_equal(got, acc.histogram())
    # the axes swapped: the transposed counts
    got_ba = finish(tally_relation(rel, specs[::-1], ("b", "a")), specs[::-1],
                    out_of_range="clip")
    np.testing.assert_array_equal(got_ba, acc.histogram().T)


def test_column_picking():
    rel = duckdb.sql("SELECT 1.0 AS a, 2.0 AS b")
    spec = BinSpec(0, 4, 4)
    with pytest.raises(ValueError, match="the relation has 2 columns"):
        tally_relation(rel, spec, None)
    with pytest.raises(ValueError, match="'c' is not a column"):
        tally_relation(rel, spec, ("c",))
    assert finish(tally_relation(rel, spec, ("b",)), spec).tolist() == [0, 0, 1, 0]
    odd = duckdb.sql('SELECT CAST(3.5 AS DOUBLE) AS "we""ird col", 1 AS other')
    assert base.count(odd, spec, column='we"ird col').tolist() == [0, 0, 0, 1]


def test_accepts_relations_only_and_is_the_registered_duckdb():
    assert SOURCE.accepts(duckdb.sql("SELECT 1")) and source_named("duckdb") is SOURCE
    assert source_for(duckdb.connect().sql("SELECT 1 AS x")) is SOURCE
    assert not SOURCE.accepts(np.zeros(2)) and not SOURCE.accepts(duckdb.connect())
    assert not SOURCE.accepts("SELECT 1")


def test_open_files_reads_parquet_and_csv_globs(tmp_path):
    import pyarrow.parquet as pq
    for i in range(2):
        pq.write_table(pa.table({"x": [float(i), 2.5], "y": [1, 2]}), tmp_path / f"p{i}.parquet")
    (tmp_path / "a.csv").write_text("x,y\n0.5,1\n3.5,\n")
    spec = BinSpec(0, 4, 4)
    rel = SOURCE.open_files(str(tmp_path / "p*.parquet"), ["x"])
    assert finish(SOURCE.tally(rel, spec, columns=("x",), out_of_range="error"),
                  spec).tolist() == [1, 1, 2, 0]
    rel = SOURCE.open_files(str(tmp_path / "a.csv"), None)
    t = SOURCE.tally(rel, spec, columns=("y",), out_of_range="error")
    assert t.missing.tolist() == [1] and t.hist.tolist() == [0, 1, 0, 0]
    with pytest.raises(ValueError, match="path: .* must end in"):
        SOURCE.open_files(str(tmp_path / "a.json"), None)


@pytest.fixture
def spies(monkeypatch):
    """The exact counts handed on to the release (1-D and grid) and the secure sampler's
    calls."""
    seen = {"counts": [], "draws": 0}

    def wrap(module, name, counts):
        real = getattr(module, name)

        def spy(hist, *args):
            if counts:
                seen["counts"].append(np.array(hist))
            else:
                seen["draws"] += 1
            return real(hist, *args)
        monkeypatch.setattr(module, name, spy)

    wrap(core, "_release_histogram", True)
    wrap(grid, "_release_cells", True)
    for module in (core, grid):
        real_measure = module.secure_measure

        def measure(mech, hist, real=real_measure):
            seen["draws"] += 1
            return real(mech, hist)
        monkeypatch.setattr(module, "secure_measure", measure)
    return seen


def test_release_counts_a_relation_before_the_noise(spies):
    rng = np.random.default_rng(0)
    x = np.round(rng.uniform(0, 101, 2000), 1)
    con = duckdb.connect()
    rel = _relation(con, x=pa.array(x), other=pa.array(rng.uniform(-1, 1, 2000)))
    r = release(rel, column="x", lower=0, upper=101, bins=101, epsilon=1.0, quantiles=())
    assert r.bin_edges.size == 102 and spies["draws"] == 1
    np.testing.assert_array_equal(spies["counts"][-1], BinSpec(0, 101, 101).count(x))
    g = release(rel, columns=["x", "other"], lower=[0, -1], upper=[101, 1], bins=[4, 2],
                epsilon=1.0)
    assert g.names == ("x", "other") and spies["draws"] == 2
    acc = GridHistogramAccumulator((BinSpec(0, 101, 4), BinSpec(-1, 1, 2)))
    acc.add(np.column_stack([x, rel.fetchnumpy()["other"]]))
    np.testing.assert_array_equal(spies["counts"][-1], acc.histogram())
    with pytest.raises(ValueError, match=r"^data: 1 NaN/missing"):
        release(con.sql("SELECT 'nan'::DOUBLE AS x UNION ALL SELECT 1.0"), lower=0,
                upper=101, bins=101, epsilon=1.0, quantiles=())
    with pytest.raises(ValueError, match="the relation has 2 columns"):
        release(rel, lower=0, upper=101, bins=101, epsilon=1.0, quantiles=())
    with pytest.raises(ValueError, match="columns: need 2 column name"):
        release(rel, columns=["x"], lower=[0, -1], upper=[101, 1], bins=[4, 2], epsilon=1.0)
    with pytest.raises(ValueError, match="column / columns pick the columns"):
        release(x, column="x", lower=0, upper=101, bins=101, epsilon=1.0, quantiles=())
    assert spies["draws"] == 2 and len(spies["counts"]) == 2  # nothing for a refused input


def test_count_front_door_on_a_relation():
    rel = duckdb.sql("SELECT * FROM (VALUES (0.5, 1), (1.5, 2)) t(a, b)")
    got = base.count(rel, (BinSpec(0, 2, 2), BinSpec(0, 4, 2)), columns=("a", "b"))
    assert got.tolist() == [[1, 0], [0, 1]]


def test_grid_classes_are_counted_per_column():
    """Each column's classes over a 2-D relation (counted by hand), and only the rows valid
    in both columns binned (out-of-range ones clipped)."""
    a = pa.array([1.0, None, float("nan"), 5.0, -1.0, 2.0, float("inf"), 3.0])
    b = pa.array([1, 2, 3, None, 2**53 + 1, 9, 1, 2], pa.int64())
    specs = (BinSpec(0, 4, 4), BinSpec(0, 4, 2))
    got = tally_relation(_relation(duckdb.connect(), a=a, b=b), specs, ("a", "b"))
    assert got.rows == 8
    assert got.missing.tolist() == [2, 1] and got.infinite.tolist() == [1, 0]
    assert got.too_large.tolist() == [0, 1]
    assert got.below.tolist() == [1, 0] and got.above.tolist() == [1, 1]
    # binned: (1, 1) -> cell (1, 0); (2, 9) -> (2, 1) clipped; (3, 2) -> (3, 1)
    expected = np.zeros((4, 2), np.int64)
    expected[1, 0] = expected[2, 1] = expected[3, 1] = 1
    np.testing.assert_array_equal(got.hist.reshape(4, 2), expected)
    _same(got, tally_columns([a, b], specs))
