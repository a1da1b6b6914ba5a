"""CLI tests: the printed covering errors equal [RTS]'s closed forms computed here.

Expected totals (counts^2, N = 1, MATH.md section 1):
* tree, swap, Laplace, equal budgets eps_l = eps / h:  4 K sum_l (k_l - 1) / eps_l^2
  ([RTS] Theorem IV.1);
* histogram (Lemma III.2): 4 K (K - 1) / eps^2; prefix / range (Lemma III.1): 2 (K - 1)^3 / eps^2;
* otherwise: the covering of the prefix [1, t] uses the mixed-radix digits of t (d_l nodes at
  level l), so the total is the per-node variance times the digit sums, computed here by brute
  force.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from functools import lru_cache

import pytest

from dptree_opt.cli import main

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
PRINT_REL = 5e-6  # the table prints 6 significant digits


@lru_cache(maxsize=None)
def run(*argv):
    """(exit code, stdout, stderr) of ``main(argv)``; cached so each command runs once.
    ``error`` runs in [RTS]'s setting, swap neighbours, unless the test gives --neighbours
    (the CLI default is add/remove: tested in test_error_defaults_to_add_remove)."""
    if argv and argv[0] == "error" and "--neighbours" not in argv:
        argv = argv + ("--neighbours", "swap")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def table(stdout: str) -> dict:
    """{estimator: {"total", "mean", "max", "time"[, "normalised"]}} from the printed table."""
    rows = {}
    for line in stdout.splitlines():
        m = re.match(rf"^(covering|blue)\s+((?:{NUM}\s*)+)$", line.strip())
        if m:
            vals = [float(v) for v in m.group(2).split()]
            keys = ["total", "mean", "max", "time", "normalised"]
            rows[m.group(1)] = dict(zip(keys, vals))
    return rows


def digit_sum(t: int, branching) -> int:
    """Number of nodes in the greedy covering of the prefix [1, t] (t < K): the mixed-radix
    digits of t, most significant (root's children) first."""
    widths = []
    w = math.prod(branching)
    for k in branching:
        w //= k
        widths.append(w)
    total = 0
    for w in widths:
        total += t // w
        t %= w
    return total


def covering_total(branching, per_level_variance, n_real, root_variance=0.0):
    """Sum over t = 1..n_real of the covering variance, from digit sums (brute force)."""
    k = math.prod(branching)
    tot = 0.0
    for t in range(1, n_real + 1):
        if t == k:
            tot += root_variance
        else:
            tot += per_level_variance * digit_sum(t, branching)
    return tot


# ------------------------------------------------------------------------ [RTS] Theorem IV.1
def test_tree_4_8_32_matches_theorem_iv_1():
    code, out, err = run("error", "--bins", "1024", "--strategy", "tree:4,8,32", "--epsilon", "1")
    assert code == 0, err
    rows = table(out)
    eps, ks, k = 1.0, (4, 8, 32), 1024
    eps_l = eps / len(ks)
    expected = 4 * k * sum((kl - 1) / eps_l**2 for kl in ks)  # Theorem IV.1 with N = 1
    assert expected == 1511424.0
    assert rows["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)
    assert rows["covering"]["mean"] == pytest.approx(expected / k, rel=PRINT_REL)
    # the worst prefix uses the most nodes: digits (3, 7, 31), variance 8 / eps_l^2 each
    assert rows["covering"]["max"] == pytest.approx(41 * 8 / eps_l**2, rel=PRINT_REL)
    # the digit-sum brute force agrees with the theorem
    assert covering_total(ks, 8 / eps_l**2, k) == pytest.approx(expected, rel=1e-12)
    # the BLUE is never worse than the (linear unbiased) covering estimator; here much better
    assert 0 < rows["blue"]["total"] < expected
    assert rows["blue"]["max"] <= rows["covering"]["max"]
    # the description: per-level eps 1/3, sensitivity 2, variance 72
    assert "1-DP" in out
    assert len(re.findall(r"level [123]: eps_l = 0.333333, sensitivity 2, scale 6, "
                          r"variance 72\b", out)) == 3


@pytest.mark.parametrize("eps", ["0.5", "2"])
def test_tree_equal_branching_theorem_iv_1(eps):
    code, out, err = run("error", "--bins", "64", "--strategy", "tree:4", "--epsilon", eps)
    assert code == 0, err
    e = float(eps)
    expected = 4 * 64 * 3 * 3 / (e / 3) ** 2  # h = 3 levels of k = 4
    assert table(out)["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)


def test_binary_strategy_is_the_binary_tree():
    code, out, _ = run("error", "--bins", "16", "--strategy", "binary", "--epsilon", "1")
    assert code == 0
    expected = 4 * 16 * 4 * 1 / (1 / 4) ** 2  # h = 4, k = 2
    assert table(out)["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)


# -------------------------------------------------------------- [RTS] Lemmas III.1 and III.2
@pytest.mark.parametrize("bins, eps", [(64, "0.5"), (10, "1"), (2, "3")])
def test_histogram_matches_lemma_iii_2(bins, eps):
    code, out, err = run("error", "--bins", str(bins), "--strategy", "histogram",
                         "--epsilon", eps)
    assert code == 0, err
    e = float(eps)
    expected = 4 * bins * (bins - 1) / e**2
    rows = table(out)
    assert rows["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)
    assert rows["blue"]["total"] <= expected * (1 + PRINT_REL)


@pytest.mark.parametrize("bins, eps", [(64, "0.5"), (10, "1"), (3, "2")])
def test_prefix_matches_lemma_iii_1(bins, eps):
    code, out, err = run("error", "--bins", str(bins), "--strategy", "prefix", "--epsilon", eps)
    assert code == 0, err
    e = float(eps)
    expected = 2 * (bins - 1) ** 3 / e**2
    rows = table(out)
    assert rows["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)
    # the BLUE also uses the exact total: it can only be better (best linear unbiased)
    assert rows["blue"]["total"] <= expected * (1 + PRINT_REL)


def test_records_column_divides_by_n_squared():
    code, out, _ = run("error", "--bins", "16", "--strategy", "histogram", "--epsilon", "1",
                       "--records", "10")
    assert code == 0
    rows = table(out)
    expected = 4 * 16 * 15  # Lemma III.2, counts^2
    assert rows["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)
    assert rows["covering"]["normalised"] == pytest.approx(expected / 100, rel=PRINT_REL)


def test_histogram_beats_range_mechanism_from_k4():
    """MATH.md section 1: the histogram beats the range mechanism for K >= 4 (not K = 3)."""
    def cov(strategy, bins):
        return table(run("error", "--bins", str(bins), "--strategy", strategy,
                         "--epsilon", "1")[1])["covering"]["total"]
    assert cov("histogram", 3) > cov("prefix", 3)
    assert cov("histogram", 4) < cov("prefix", 4)


# ------------------------------------------------------------ other neighbour models, Gaussian
def test_gaussian_tree_covering():
    code, out, err = run("error", "--bins", "16", "--strategy", "tree:4,4", "--noise",
                         "gaussian", "--rho", "0.5")
    assert code == 0, err
    # swap: l2 sensitivity sqrt(2), rho_l = 0.25, sigma^2 = 2 / (2 rho_l) = 4
    expected = 16 / 2 * (3 + 3) * 4.0
    assert table(out)["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)
    assert "0.5-zCDP" in out


def test_add_remove_tree_covering_root_noised():
    code, out, err = run("error", "--bins", "16", "--strategy", "tree:4,4", "--epsilon", "1",
                         "--neighbours", "add_remove")
    assert code == 0, err
    v = 2 * 3.0**2  # 3 noisy levels (root included), sensitivity 1, Lap(3)
    expected = covering_total((4, 4), v, 16, root_variance=v)
    assert expected == 16 / 2 * 6 * v + v
    assert table(out)["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)


def test_error_defaults_to_add_remove(capsys):
    """Without --neighbours, ``error`` protects N (add/remove): the root is a noisy level, as
    in test_add_remove_tree_covering_root_noised (3 levels, Lap(3), variance 18)."""
    assert main(["error", "--bins", "16", "--strategy", "tree:4,4", "--epsilon", "1"]) == 0
    out = capsys.readouterr().out
    assert "add_remove neighbours" in out
    v = 2 * 3.0**2
    assert table(out)["covering"]["total"] == pytest.approx(16 / 2 * 6 * v + v, rel=PRINT_REL)


def test_add_remove_public_total_covering():
    code, out, err = run("error", "--bins", "16", "--strategy", "tree:4,4", "--epsilon", "1",
                         "--neighbours", "add_remove", "--public-total")
    assert code == 0, err
    v = 2 * 2.0**2  # 2 noisy levels, sensitivity 1, Lap(2); the root is exact
    assert table(out)["covering"]["total"] == pytest.approx(16 / 2 * 6 * v, rel=PRINT_REL)
    assert "NOT protected" in out


def test_add_remove_histogram_no_total_row():
    code, out, _ = run("error", "--bins", "8", "--strategy", "histogram", "--epsilon", "1",
                       "--neighbours", "add_remove")
    assert code == 0
    # C_t = sum of t noisy bins (Lap(1), variance 2), t = 1..8, C_8 included
    assert table(out)["covering"]["total"] == pytest.approx(2 * 8 * 9 / 2, rel=PRINT_REL)


def test_binary_add_remove_math_md_anchors():
    """MATH.md section 6 (n = 2^10, eps = 1, add/remove, root noised): binary tree covering
    sums mean prefix MSE 1210; binary tree + OLS (equal variances = our BLUE) 298.9."""
    code, out, err = run("error", "--bins", "1024", "--strategy", "binary", "--epsilon", "1",
                         "--neighbours", "add_remove")
    assert code == 0, err
    rows = table(out)
    v = 2 * 11.0**2  # 11 levels, Lap(11)
    assert covering_total((2,) * 10, v, 1024, root_variance=v) / 1024 == pytest.approx(1210.24,
                                                                                       abs=0.01)
    assert rows["covering"]["mean"] == pytest.approx(1210, abs=0.5)
    assert rows["blue"]["mean"] == pytest.approx(298.9, abs=0.05)


# --------------------------------------------------------------------------------- padding
def test_tree_17_pads_1024_bins():
    code, out, err = run("error", "--bins", "1024", "--strategy", "tree:17", "--epsilon", "1")
    assert code == 0, err
    assert "note:" in out and "padded to 4913 bins" in out
    assert "3889 extra bins" in out
    rows = table(out)
    # 17^3 = 4913 bins, 3 levels with eps_l = 1/3: node variance 8 * 9 = 72; the errors are
    # over the 1024 real prefixes only
    expected = covering_total((17, 17, 17), 72.0, 1024)
    assert rows["covering"]["total"] == pytest.approx(expected, rel=PRINT_REL)
    assert rows["covering"]["mean"] == pytest.approx(expected / 1024, rel=PRINT_REL)
    assert 0 < rows["blue"]["total"] < expected


def test_tree_pads_small():
    code, out, err = run("error", "--bins", "10", "--strategy", "tree:3", "--epsilon", "1")
    assert code == 0, err
    assert "padded to 27 bins" in out
    v = 8 * 3.0**2
    assert table(out)["covering"]["total"] == pytest.approx(
        covering_total((3, 3, 3), v, 10), rel=PRINT_REL)


def test_branching_list_too_small_exits_2():
    code, out, err = run("error", "--bins", "1024", "--strategy", "tree:5,5", "--epsilon", "1")
    assert code == 2
    assert "error" in err and "--strategy" in err and "[5, 5]" in err and "1024" in err


def test_branching_list_larger_is_padded():
    code, out, err = run("error", "--bins", "20", "--strategy", "tree:5,5", "--epsilon", "1")
    assert code == 0, err
    assert "padded to 25 bins" in out
    v = 8 * 2.0**2
    assert table(out)["covering"]["total"] == pytest.approx(
        covering_total((5, 5), v, 20), rel=PRINT_REL)


# ------------------------------------------------------------------------------ bad input
def test_help_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "usage" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["error", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--strategy" in out and "--epsilon" in out and "--rho" in out


@pytest.mark.parametrize("argv, needle", [
    (("error", "--bins", "16", "--strategy", "tree:2", "--noise", "gaussian"), "--rho"),
    (("error", "--bins", "16", "--strategy", "tree:2", "--noise", "gaussian",
      "--epsilon", "1"), "--rho"),
    (("error", "--bins", "16", "--strategy", "tree:2"), "--epsilon"),
    (("error", "--bins", "16", "--strategy", "tree:2", "--epsilon", "1", "--rho", "1"),
     "--epsilon"),
    (("error", "--bins", "16", "--strategy", "tree:2", "--epsilon", "0"), "epsilon"),
    (("error", "--bins", "16", "--strategy", "tree:2", "--epsilon", "-1"), "epsilon"),
    (("error", "--bins", "16", "--strategy", "tree:2", "--epsilon", "nan"), "epsilon"),
    (("error", "--bins", "0", "--strategy", "tree:2", "--epsilon", "1"), "--bins"),
    (("error", "--bins", "16", "--strategy", "quadtree", "--epsilon", "1"), "--strategy"),
    (("error", "--bins", "16", "--strategy", "tree:a", "--epsilon", "1"), "--strategy"),
    (("error", "--bins", "16", "--strategy", "tree:1", "--epsilon", "1"), "--strategy"),
    (("error", "--bins", "16", "--strategy", "tree:4,0", "--epsilon", "1"), "branching"),
])
def test_bad_input_exits_2(argv, needle):
    code, out, err = run(*argv)
    assert code == 2
    assert err.startswith("dptree-opt: error:")
    assert needle in err


def test_argparse_errors_exit_2(capsys):
    for argv in (["error", "--strategy", "tree:2", "--epsilon", "1"],  # no --bins
                 ["error", "--bins", "x", "--strategy", "tree:2", "--epsilon", "1"],
                 ["error", "--bins", "16", "--strategy", "tree:2", "--noise", "poisson",
                  "--epsilon", "1"],
                 ["frobnicate"], []):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    capsys.readouterr()


@pytest.mark.parametrize("records", ["-5", "0", "nan", "inf"])
def test_bad_records_exits_2(records):
    code, out, err = run("error", "--bins", "4", "--strategy", "histogram", "--epsilon", "1",
                         f"--records={records}")
    assert code == 2
    assert "--records" in err
