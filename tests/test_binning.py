"""The bin rule by published edges (docs/math.md section 10; ``data_release.binning``),
checked against ``np.searchsorted(edges, x, side="right") - 1`` on every edge and one ulp
either side, on random doubles (hypothesis), and the SQL generated for DuckDB
(``sources.duckdb_source.bin_sql``) run in DuckDB against the same oracle."""

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from dptree_opt.data_release import BinSpec
from dptree_opt.data_release.binning import MAX_BINS
from dptree_opt.data_release.sources.duckdb_source import bin_sql, tally_relation

SPECS = [
    (0.0, 101.0, 101),  # the age regression: 29, 57, 58, 59 were one bin low
    (0.0, 1.0, 10),  # 0.1-step decimals
    (0.1, 0.7, 6),
    (0.3, 3.3, 30),
    (-3.7, 1234.5, 977),
    (-101.0, 0.0, 101),
    (-1.0, -0.1, 9),
    (-5.0, 5.0, 10),
    (0.0, 100.0, 100),  # integer ranges
    (0.0, 120.0, 7),
    (17.0, 1000.0, 983),
    (0.0, 500000.0, 1000),
    (0.0, 1e6, 1 << 16),
    (-1e300, 1e300, 1000),  # huge
    (1e300, 1.5e300, 333),
    (-1.7e308, 0.0, 1),
    (-5e307, 5e307, 2),
    (1e15, 1e15 + 1024, 1024),  # 1e15 offsets
    (1e15, 1e15 + 1, 8),
    (-1e15 - 7, 1e15, 999),
    (0.0, 1e-300, 1000),  # tiny
    (1e-300, 3e-300, 7),
    (-1e-300, 1e-300, 64),
    (2.0**52, 2.0**52 + 3, 3),  # bins of one unit in the last place
    (0.0, 1.0, 1),
]


def _twin(spec: BinSpec, x: np.ndarray) -> np.ndarray:
    """The obviously-correct bin: the last edge <= x (x in [lower, upper))."""
    return np.searchsorted(spec.bin_edges, x, side="right") - 1


def _python_edges(lower, upper, K):
    """The definition, in plain Python floats: lower + (upper - lower) * i / K, last = upper."""
    return [lower + (upper - lower) * i / K for i in range(K)] + [upper]


def _adversarial(spec: BinSpec) -> np.ndarray:
    """Every edge and one ulp either side, every integer in range (if few), kept in range."""
    e = spec.bin_edges
    x = np.concatenate([e, np.nextafter(e, -np.inf), np.nextafter(e, np.inf),
                        np.nextafter(np.nextafter(e, -np.inf), -np.inf),
                        np.nextafter(np.nextafter(e, np.inf), np.inf)])
    if spec.upper - spec.lower <= 5000:
        x = np.concatenate([x, np.arange(np.ceil(spec.lower), spec.upper)])
    return x[(x >= spec.lower) & (x < spec.upper)]


@pytest.mark.parametrize("lower,upper,K", SPECS)
def test_edges_are_the_published_formula(lower, upper, K):
    spec = BinSpec(lower, upper, K)
    e = spec.bin_edges
    assert e.shape == (K + 1,) and e.dtype == np.float64
    assert e.tolist() == _python_edges(lower, upper, K)  # bit for bit
    assert e[0] == lower and e[-1] == upper
    assert np.all(np.diff(e) > 0)
    assert not e.flags.writeable


@pytest.mark.parametrize("lower,upper,K", SPECS)
def test_every_edge_and_one_ulp_either_side(lower, upper, K):
    spec = BinSpec(lower, upper, K)
    x = _adversarial(spec)
    got = spec.bin_index(x)
    np.testing.assert_array_equal(got, _twin(spec, x))
    e = spec.bin_edges
    assert np.all((e[got] <= x) & (x < e[got + 1]))
    np.testing.assert_array_equal(spec.count(x), np.bincount(_twin(spec, x), minlength=K))


@pytest.mark.parametrize("lower,upper,K", SPECS)
def test_the_guess_is_within_one_bin(lower, upper, K):
    """The proof of the module docstring, on the adversarial values: the formula guess is
    never off by more than one bin (what the README's one-step SQL correction relies on)."""
    spec = BinSpec(lower, upper, K)
    x = _adversarial(spec)
    guess = np.clip(np.floor((x - lower) / (upper - lower) * K), 0, K - 1)
    assert np.abs(guess - _twin(spec, x)).max() <= 1


def test_age_29_regression():
    spec = BinSpec(0, 101, 101)
    ages = np.array([29.0, 57.0, 58.0, 59.0])
    assert ((ages - 0) / 101 * 101).tolist() != ages.tolist()  # the old formula's trap
    assert spec.bin_index(ages).tolist() == [29, 57, 58, 59]
    assert spec.bin_index(np.arange(101.0)).tolist() == list(range(101))
    assert spec.count(np.arange(101.0)).tolist() == [1] * 101


@st.composite
def _specs(draw):
    kind = draw(st.sampled_from(["any", "unit", "offset", "tiny", "huge", "integer"]))
    if kind == "integer":
        lower = float(draw(st.integers(-10**6, 10**6)))
        upper = lower + draw(st.integers(1, 10**4))
    else:
        scale = {"any": 1e6, "unit": 1.0, "offset": 1e15, "tiny": 1e-300, "huge": 1e300}[kind]
        a = draw(st.floats(-scale, scale, allow_nan=False, allow_infinity=False))
        b = draw(st.floats(-scale, scale, allow_nan=False, allow_infinity=False))
        lower, upper = min(a, b), max(a, b)
    K = draw(st.integers(1, 4096))
    try:
        spec = BinSpec(lower, upper, K)
    except ValueError:
        assume(False)
    return spec


@settings(max_examples=300, deadline=None)
@given(spec=_specs(), data=st.data())
def test_random_doubles_land_between_their_edges(spec, data):
    x = data.draw(st.lists(st.floats(spec.lower, spec.upper, exclude_max=True,
                                     allow_nan=False), min_size=1, max_size=50))
    i = data.draw(st.lists(st.integers(0, spec.bins), max_size=20))
    e = spec.bin_edges
    near = np.concatenate([e[i], np.nextafter(e[i], -np.inf), np.nextafter(e[i], np.inf)])
    x = np.concatenate([np.array(x), near])
    x = x[(x >= spec.lower) & (x < spec.upper)]
    got = spec.bin_index(x)
    np.testing.assert_array_equal(got, _twin(spec, x))
    assert np.all((e[got] <= x) & (x < e[got + 1]))


def test_out_of_range_values_go_to_the_end_bins_and_nan_is_refused():
    spec = BinSpec(0, 101, 101)
    x = np.array([-1e308, -np.inf, -0.0, np.nextafter(0, -1), 101.0, np.inf, 1e308,
                  np.nextafter(101.0, 0)])
    assert spec.bin_index(x).tolist() == [0, 0, 0, 0, 100, 100, 100, 100]
    assert spec.bin_index(np.array([[29.0, 200.0]])).tolist() == [[29, 100]]  # shape kept
    with pytest.raises(ValueError, match="NaN"):
        spec.bin_index(np.array([1.0, np.nan]))


@pytest.mark.parametrize("kw,match", [
    # bins narrower than the float resolution (the brief's example)
    ({"lower": 1e15, "upper": 1e15 + 1, "bins": 1024}, "narrower than the float resolution"),
    ({"lower": 0.0, "upper": 1e-310, "bins": 1}, "narrower than the float resolution"),
    ({"lower": 1.0, "upper": 1.0 + 2**-52, "bins": 4}, "narrower than the float resolution"),
    # wide enough on average (0.6 ulp) but two edges round to the same double
    ({"lower": 2.0**52, "upper": 2.0**52 + 3, "bins": 5}, "not strictly increasing"),
    ({"lower": 0.0, "upper": 1.7e308, "bins": 3}, "overflows"),
    ({"lower": 0, "upper": 1, "bins": MAX_BINS + 1}, "bins must be <= 2"),
])
def test_refused_specs(kw, match):
    with pytest.raises(ValueError, match=match) as info:
        BinSpec(**kw)
    if "bins must" not in match:
        assert all(w in str(info.value) for w in ("lower", "upper", "bins"))


def test_spec_is_a_value():
    a, b = BinSpec(0, 101, 101), BinSpec(0.0, 101.0, 101)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert a.width == 1.0
    with pytest.raises(Exception):
        a.lower = 3.0  # frozen


# ------------------------------------------------------------------ the generated DuckDB SQL
def _duckdb_bins(duckdb, spec: BinSpec, x: np.ndarray) -> np.ndarray:
    """The bins DuckDB computes with the SQL generated by ``bin_sql`` (row order kept)."""
    import pyarrow as pa
    con = duckdb.connect()
    con.register("v", pa.table({"i": pa.array(np.arange(x.size)), "x": pa.array(x)}))
    got = con.execute(f"SELECT {bin_sql(spec, 'x')} AS b FROM v ORDER BY i").fetchnumpy()["b"]
    con.close()
    return np.asarray(got, dtype=np.int64)


@pytest.mark.parametrize("lower,upper,K", SPECS)
def test_generated_duckdb_sql_gives_the_same_bins(lower, upper, K):
    duckdb = pytest.importorskip("duckdb")
    spec = BinSpec(lower, upper, K)
    x = _adversarial(spec)
    # the same doubles in DuckDB: its text -> double parse is exact on repr()
    got = duckdb.connect().execute(
        f"SELECT CAST('{lower!r}' AS DOUBLE), CAST('{upper!r}' AS DOUBLE)").fetchone()
    assert got == (lower, upper)
    np.testing.assert_array_equal(_duckdb_bins(duckdb, spec, x), _twin(spec, x))


@settings(max_examples=40, deadline=None)
@given(_specs(), st.data())
def test_generated_duckdb_sql_on_random_doubles(spec, data):
    duckdb = pytest.importorskip("duckdb")
    x = np.array(data.draw(st.lists(st.floats(spec.lower, spec.upper, exclude_max=True),
                                    min_size=1, max_size=30)))
    np.testing.assert_array_equal(_duckdb_bins(duckdb, spec, x), _twin(spec, x))


def test_generated_duckdb_sql_clips_and_counts_the_invalid():
    duckdb = pytest.importorskip("duckdb")
    import pyarrow as pa
    spec = BinSpec(0, 101, 101)
    x = np.array([29.0, 57.0, 58.0, 59.0, -5.0, 101.0, 1e300, -0.0, np.nan, np.inf, -np.inf])
    clipped = _duckdb_bins(duckdb, spec, x[np.isfinite(x)])
    assert clipped.tolist() == [29, 57, 58, 59, 0, 100, 100, 0]
    con = duckdb.connect()
    con.register("t", pa.table({"x": pa.array(x)}))
    tally = tally_relation(con.sql("SELECT x FROM t"), spec, None)
    assert tally.hist[0] == 2 and tally.hist[100] == 2 and tally.hist.sum() == 8
    assert (tally.missing[0], tally.infinite[0], tally.below[0], tally.above[0]) == (1, 2, 1, 2)
