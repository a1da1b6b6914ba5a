"""The analysis subcommands (optimize, error, compare) at extreme budgets and sizes, in-process.

Bad sizes and budgets beyond double precision exit 2 with ``dptree-opt: error: ...`` naming
the flag or the budget (no traceback, nothing half printed); budgets whose errors are doubles
print them, equal to the same run at budget 1 divided by eps^2 (a direct computation in the
test); no printed error is negative, NaN or inf.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from dptree_opt.cli import main

NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|\b(?:nan|inf)\b", re.I)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, out, err)
    assert err.startswith("dptree-opt: error: ") and "Traceback" not in err
    return out, err


def table_numbers(text: str) -> list[float]:
    return [float(t) for t in NUMBER.findall(text)]


# ------------------------------------------------------------------ optimize
@pytest.mark.parametrize("argv, words", [
    (["--bins", "64", "--epsilon", "1e300"], ["epsilon = 1e+300 is too large"]),
    (["--bins", "64", "--epsilon", "1e-300"], ["epsilon = 1e-300 is too small"]),
    (["--bins", "64", "--rho", "1e-310", "--budgets", "optimal"], ["rho", "too small"]),
    (["--bins", "8x8", "--epsilon", "1e300"], ["epsilon = 1e+300 is too large"]),
    (["--bins", "8x8", "--rho", "1e-310"], ["rho = 1e-310 is too small"]),
    (["--bins", "64", "--epsilon", "1e300", "--budgets", "node"], ["too large"]),
    (["--bins", "1000000000", "--epsilon", "1"], ["--bins 1000000000", "limit of 2^26"]),
    (["--bins", "1", "--epsilon", "1"], ["--bins must be >= 2"]),
    (["--bins", "64", "--epsilon", "1", "--max-padding", "inf"], ["--max-padding"]),
    (["--bins", "64", "--epsilon", "1", "--max-padding", "nan"], ["--max-padding"]),
    (["--bins", "64", "--epsilon", "1", "--top", "-1"], ["--top"]),
    (["--bins", "8x8", "--epsilon", "1", "--top", "0"], ["--top"]),
])
def test_optimize_refuses_with_a_message(capsys, argv, words):
    out, err = refused(capsys, "optimize", *argv)
    assert out == ""
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize("extra", [[], ["--budgets", "optimal"], ["--estimator", "refined"],
                                   ["--workload", "all_range"], ["--budgets", "node"]])
def test_optimize_at_a_huge_budget_is_the_unit_run_scaled(capsys, extra):
    """--epsilon 1e100 (ZeroDivisionError before): the same tree, errors / 1e200."""
    code, out1, _ = run(capsys, "optimize", "--bins", "60", "--epsilon", "1", "--json", *extra)
    assert code == 0
    code, out2, _ = run(capsys, "optimize", "--bins", "60", "--epsilon", "1e100", "--json",
                        *extra)
    assert code == 0
    a, b = json.loads(out1), json.loads(out2)
    if "best" in a:
        assert b["best"]["branching"] == a["best"]["branching"]
        assert b["best"]["error"] == pytest.approx(a["best"]["error"] / 1e200, rel=1e-9)
        for x, y in zip(b["alternatives"], a["alternatives"]):
            assert x["error"] == pytest.approx(y["error"] / 1e200, rel=1e-9)
    else:  # --budgets node
        assert b["branching"] == a["branching"]
        assert b["error"] == pytest.approx(a["error"] / 1e200, rel=1e-9)


def test_optimize_grid_at_a_huge_budget_is_the_unit_run_scaled(capsys):
    code, out1, _ = run(capsys, "optimize", "--bins", "8x8", "--epsilon", "1", "--json")
    code2, out2, _ = run(capsys, "optimize", "--bins", "8x8", "--epsilon", "1e100", "--json")
    assert code == code2 == 0
    a, b = json.loads(out1), json.loads(out2)
    assert b["flat_mean"] == pytest.approx(a["flat_mean"] / 1e200, rel=1e-9)
    for x, y in zip(b["ranked"], a["ranked"]):
        assert x["branching"] == y["branching"]
        assert x["mean_error_per_query"] == pytest.approx(y["mean_error_per_query"] / 1e200,
                                                          rel=1e-9)


def test_optimize_max_padding_huge_is_max_padding_two(capsys):
    """--max-padding 1e308 raised OverflowError; padding beyond 2K never helps."""
    code, out1, _ = run(capsys, "optimize", "--bins", "100", "--epsilon", "1", "--json")
    code2, out2, _ = run(capsys, "optimize", "--bins", "100", "--epsilon", "1", "--json",
                         "--max-padding", "1e308")
    assert code == code2 == 0
    a, b = json.loads(out1), json.loads(out2)
    assert [d["branching"] for d in b["alternatives"]] == \
        [d["branching"] for d in a["alternatives"]]
    assert b["best"]["error"] == a["best"]["error"]


def test_optimize_table_has_no_inf_nan_or_negative(capsys):
    """--epsilon 1e-300 printed a table of inf/nan; now refused. Representable extremes
    print positive finite numbers only."""
    for eps in ("1e-120", "1e120"):
        code, out, _ = run(capsys, "optimize", "--bins", "64", "--epsilon", eps)
        assert code == 0
        assert not re.search(r"\b(nan|inf)\b", out, re.I)
        nums = table_numbers(out.split("rank")[1])
        assert nums and all(x >= 0 and math.isfinite(x) for x in nums)


# ------------------------------------------------------------------ error
@pytest.mark.parametrize("argv, words", [
    (["--bins", "64", "--strategy", "binary", "--epsilon", "1e300"],
     ["epsilon = 1e+300 is too large"]),
    (["--bins", "64", "--strategy", "binary", "--epsilon", "1e-300"],
     ["epsilon = 1e-300 is too small"]),
    (["--bins", "64", "--strategy", "prefix", "--rho", "1e-320"], ["rho", "too small"]),
    (["--bins", str(2**40), "--strategy", "binary", "--epsilon", "1"],
     [f"--bins {2**40}", "of memory"]),
    (["--bins", "5", "--strategy", "tree:1000000000000", "--epsilon", "1"],
     ["1000000000000", "of memory"]),
    (["--bins", "64", "--strategy", "histogram", "--epsilon", "1", "--records", "1e300"],
     ["--records", "double precision"]),
])
def test_error_refuses_with_a_message_and_prints_nothing(capsys, argv, words):
    out, err = refused(capsys, "error", *argv)
    assert out == ""  # nothing of the table (nor a negative squared error) printed
    for w in words:
        assert w in err, (w, err)


def test_error_at_a_huge_budget_follows_theorem_iv_1(capsys):
    """[RTS] Thm IV.1, tree:4 over 64 bins (equal budgets eps / 3, swap): covering error
    4 K sum_l (k_l - 1) / eps_l^2 = 20736 / eps^2; all three rows positive."""
    code, out, _ = run(capsys, "error", "--bins", "64", "--strategy", "tree:4",
                       "--epsilon", "1e100")
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.split() and line.split()[0] in ("covering", "refined", "blue")}
    assert float(rows["covering"][0]) == pytest.approx(20736e-200, rel=1e-5)
    for est in ("covering", "refined", "blue"):
        vals = [float(x) for x in rows[est][:3]]
        assert all(0 < v < 1e-190 for v in vals)


@pytest.mark.parametrize("neighbours, want", [("swap", 0.0), ("add_remove", 2.0)])
def test_error_one_bin(capsys, neighbours, want):
    """--bins 1 --strategy binary raised IndexError. One bin: under swap C_1 = N is public
    (error 0); under add/remove the root alone, Lap(1/eps): variance 2 / eps^2."""
    code, out, err = run(capsys, "error", "--bins", "1", "--strategy", "binary",
                         "--epsilon", "1", "--neighbours", neighbours)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in ("covering", "refined", "blue")]
    assert len(rows) == 3
    for r in rows:
        assert [float(x) for x in r[1:4]] == [want, want, want]


# ------------------------------------------------------------------ compare
@pytest.mark.parametrize("argv, words", [
    (["--bins", "2147483648", "--epsilon", "1"], ["--bins 2147483648", "limit of 2^22"]),
    (["--bins", "2048x2048", "--epsilon", "1"], ["--bins 2048x2048", "limit of 2^20"]),
    (["--bins", "16", "--epsilon", "1e300", "--opendp-trials", "0"],
     ["epsilon = 1e+300 is too large"]),
    (["--bins", "16", "--epsilon", "1e-300", "--opendp-trials", "0"],
     ["epsilon = 1e-300 is too small"]),
    (["--bins", "16", "--rho", "1e-310", "--opendp-trials", "0"], ["rho", "too small"]),
    (["--bins", "8x8", "--epsilon", "1e300"], ["epsilon = 1e+300 is too large"]),
])
def test_compare_refuses_with_a_message(capsys, argv, words):
    out, err = refused(capsys, "compare", *argv)
    assert out == ""
    assert "interval_blue_errors" not in err
    for w in words:
        assert w in err, (w, err)


def test_compare_at_a_huge_budget_is_the_unit_run_scaled(capsys):
    code, out1, _ = run(capsys, "compare", "--bins", "16", "--epsilon", "1", "--json",
                        "--opendp-trials", "0")
    code2, out2, _ = run(capsys, "compare", "--bins", "16", "--epsilon", "1e100", "--json",
                         "--opendp-trials", "0")
    assert code == code2 == 0
    a = {r["key"]: r for r in json.loads(out1)["rows"]}
    b = {r["key"]: r for r in json.loads(out2)["rows"]}
    seen = 0
    for key, row in b.items():
        for wl, e in row["errors"].items():
            for stat in ("mean", "max"):
                x, y = e[stat], a[key]["errors"][wl][stat]
                assert (x is None) == (y is None)
                if x is not None:
                    seen += 1
                    assert x > 0 and x == pytest.approx(y / 1e200, rel=1e-6), (key, wl)
    assert seen > 20
