"""The generic argument validators (dptree_opt.validation) and the modules that use them:
bad input raises a ValueError naming the parameter; good input comes back as a plain Python
value."""

from fractions import Fraction

import numpy as np
import pytest

from dptree_opt import Mechanism, optimize, queries, strategies, stream, workloads
from dptree_opt.engines import honaker
from dptree_opt.privacy import check_budget, check_neighbours, check_noise
from dptree_opt.strategies.base import readonly
from dptree_opt.validation import (check_bool, check_choice, check_int, check_n, check_positive,
                                   check_real)


# ------------------------------------------------------------------ check_int
@pytest.mark.parametrize("value", [True, False, np.bool_(True), 2.0, np.float64(3.0), "3",
                                   None, [2], 1 + 0j])
def test_check_int_refuses_what_is_not_an_integer(value):
    with pytest.raises(ValueError, match=r"^height must be an integer >= 1, got "):
        check_int(value, "height", 1)


@pytest.mark.parametrize("value", [3, np.int64(3), np.int8(3), np.uint32(3)])
def test_check_int_returns_a_python_int(value):
    out = check_int(value, "k", 1, 10)
    assert out == 3 and type(out) is int


def test_check_int_bounds_and_messages():
    # not an integer: the type and the bounds; an integer out of range: the bounds
    with pytest.raises(ValueError, match=r"^k must be an integer in \[2, 5\], got 2.5$"):
        check_int(2.5, "k", 2, 5)
    with pytest.raises(ValueError, match=r"^k must be in \[2, 5\], got 6$"):
        check_int(6, "k", 2, 5)
    with pytest.raises(ValueError, match=r"^k must be in \[2, 5\], got 1$"):
        check_int(np.int64(1), "k", 2, 5)      # the value as a plain int, not np.int64(1)
    with pytest.raises(ValueError, match=r"^starts must be a non-negative integer, got -1$"):
        check_int(-1, "starts", 0)
    with pytest.raises(ValueError, match=r"^k must be <= 4, got 5$"):
        check_int(5, "k", maximum=4)
    with pytest.raises(ValueError, match=r"^k must be >= 2, got 1$"):
        check_int(1, "k", 2)
    with pytest.raises(ValueError, match=r"^k must be an integer, got 'a'$"):
        check_int("a", "k")
    # a power of two from 2^20 up is written as one
    with pytest.raises(ValueError, match=r"^horizon must be in \[1, 2\^40\], got 1099511627777$"):
        check_int(2**40 + 1, "horizon", 1, 2**40)
    with pytest.raises(ValueError, match=r"^steps must be in \[1, 1000\] \(the horizon\), got 0"):
        check_int(0, "steps", 1, 1000, why="the horizon")
    assert check_int(2**40, "horizon", 1, 2**40) == 2**40


def test_check_int_none():
    assert check_int(None, "primal_every", 1, none=True) is None
    with pytest.raises(ValueError, match=r"^primal_every must be None or an integer >= 1"):
        check_int(1.0, "primal_every", 1, none=True)
    with pytest.raises(ValueError, match=r"^primal_every must be >= 1, got 0"):
        check_int(0, "primal_every", 1, none=True)
    with pytest.raises(ValueError, match="must be an integer"):
        check_int(None, "primal_every", 1)


def test_check_n():
    assert check_n(np.int32(7)) == 7
    for bad in (2.0, True, "4"):
        with pytest.raises(ValueError, match=r"^n \(number of bins\) must be an integer >= 1"):
            check_n(bad)
    for bad in (0, -3):
        with pytest.raises(ValueError, match=r"^n \(number of bins\) must be >= 1"):
            check_n(bad)


# ------------------------------------------------------------------ check_real
@pytest.mark.parametrize("value", [True, np.bool_(False), "1", None, [1.0], 1 + 0j])
def test_check_real_refuses_non_numbers(value):
    with pytest.raises(ValueError, match=r"^epsilon must be a number > 0, got "):
        check_real(value, "epsilon", above=0)


@pytest.mark.parametrize("value", [0, 0.0, -1, -np.inf, np.inf, np.nan, np.float64(-2.0),
                                   10**400])
def test_check_real_refuses_non_finite_and_out_of_range(value):
    with pytest.raises(ValueError, match=r"^epsilon must be finite and > 0, got "):
        check_real(value, "epsilon", above=0)


def test_check_real_bounds():
    assert check_real(Fraction(1, 4), "x", above=0, below=1) == 0.25
    assert type(check_real(np.float32(0.5), "x")) is float
    assert check_real(1, "max_padding", at_least=1) == 1.0
    with pytest.raises(ValueError, match=r"^max_padding must be finite and >= 1, got 0.5$"):
        check_real(0.5, "max_padding", at_least=1)
    for bad in (0, 1, 1.5, np.nan):
        with pytest.raises(ValueError, match=r"^level must be in \(0, 1\), got "):
            check_real(bad, "level", above=0, below=1)
    with pytest.raises(ValueError, match=r"^level must be a number in \(0, 1\), got '0.5'"):
        check_real("0.5", "level", above=0, below=1)
    with pytest.raises(ValueError, match=r"^q must be in \[0, 1\], got 2.0$"):
        check_real(2.0, "q", at_least=0, at_most=1)
    assert check_real(0, "q", at_least=0, at_most=1) == 0.0
    with pytest.raises(ValueError, match=r"^x must be finite and < 3, got 3.0$"):
        check_real(3, "x", below=3)
    with pytest.raises(ValueError, match=r"^x must be a finite number, got inf$"):
        check_real(np.inf, "x")
    assert check_real(None, "time_limit", above=0, none=True) is None
    with pytest.raises(ValueError, match=r"^time_limit must be None or a number > 0"):
        check_real("5", "time_limit", above=0, none=True)


def test_check_positive_keeps_the_budget_messages():
    assert check_positive(np.float64(0.5), "rho") == 0.5
    with pytest.raises(ValueError, match=r"^epsilon must be finite and > 0, got -1.0$"):
        check_budget(-1, "epsilon")
    with pytest.raises(ValueError, match=r"^epsilon must be a number > 0, got '1'$"):
        check_budget("1", "epsilon")


# ------------------------------------------------------------------ check_bool / check_choice
def test_check_bool():
    assert check_bool(np.bool_(True), "f") is True
    for bad in (0, 1, "yes", None, np.array([True])):
        with pytest.raises(ValueError, match=r"^discrete must be True or False, got "):
            check_bool(bad, "discrete")
    assert check_bool(None, "public_total", none=True) is None
    with pytest.raises(ValueError, match=r"^public_total must be True, False or None, got 1$"):
        check_bool(1, "public_total", none=True)


def test_check_choice():
    assert check_choice("l1", "consistency", ("l2", "l1", None)) == "l1"
    assert check_choice(None, "consistency", ("l2", "l1", None)) is None
    for bad in ("L1", ["l1"], np.array(["l1"]), 1, {"l1": 1}):
        with pytest.raises(ValueError, match=r"^consistency must be one of \('l2', 'l1', None\)"):
            check_choice(bad, "consistency", ("l2", "l1", None))
    with pytest.raises(ValueError, match=r"^neighbours must be one of \('swap', 'add_remove'\), "
                                         r"got 'bounded'$"):
        check_neighbours("bounded")
    with pytest.raises(ValueError, match=r"^noise must be one of"):
        check_noise(["laplace"])


# ------------------------------------------------------------------ the modules that use them
@pytest.mark.parametrize("call, match", [
    (lambda: strategies.haar(True), r"n \(number of bins\) must be an integer >= 1"),
    (lambda: strategies.sqrt_factorization(4.0), r"n \(number of bins\) must be an integer"),
    (lambda: strategies.histogram((4, 0)), r"n \(number of bins\) must be >= 1, got 0"),
    (lambda: workloads.prefix(np.bool_(True)), r"n \(number of bins\)"),
    (lambda: strategies.banded(np.ones(4), 5), r"bands must be in \[1, 4\], got 5"),
    (lambda: strategies.ToeplitzStrategy([1.0, 0.5], n_totals=True), "n_totals must be a non-neg"),
    (lambda: strategies.KroneckerStrategy([strategies.histogram(2)] * 2, n_totals=-1),
     "n_totals must be a non-negative integer"),
    (lambda: strategies.padded_height(8, 2.0), "branching factor k must be an integer >= 2"),
    (lambda: optimize.level_uniform(64, 1.0, max_padding=np.nan), "max_padding must be finite"),
    (lambda: optimize.level_uniform(64, 1.0, allow_padding=1), "allow_padding must be True or"),
    (lambda: optimize.level_uniform(64, 1.0, height=0), "height must be >= 1, got 0"),
    (lambda: optimize.level_uniform(64, 1.0, height=2.0), "height must be None or an integer"),
    (lambda: optimize.level_uniform(64, 1.0, budgets="best"), "budgets must be one of"),
    (lambda: optimize.optimal_node_budgets([2, 2], 1.0, maxiter=1.0), "maxiter must be a non"),
    (lambda: optimize.optimal_node_budgets([2, 2], 1.0, time_limit=0), "time_limit"),
    (lambda: optimize.optimal_node_budgets([2, "2"], 1.0), "branching"),
    (lambda: optimize.optimal_blue_budgets([2, 2], 1.0, starts=True), "starts must be a non"),
    (lambda: optimize.noisy_levels(-1), "height must be a non-negative integer"),
    (lambda: queries.critical_value(0.9, "sidak", 0), "n_queries must be >= 1"),
    (lambda: queries.critical_value(1.0), r"level must be in \(0, 1\)"),
    (lambda: queries.critical_value(0.9, "holm"), "method must be one of"),
    (lambda: Mechanism(strategies.histogram(2), epsilon=1.0, discrete=1),
     "discrete must be True or False"),
    (lambda: Mechanism(strategies.histogram(2), epsilon=1.0, public_total="yes"),
     "public_total must be True, False or None"),
    (lambda: stream.Counter(None, epsilon=1.0, split=1.0), r"split must be in \(0, 1\)"),
    # balanced ternary digits over h levels reach (3^h - 1) / 2: 4 < 8 <= 13, so 3 levels
    (lambda: stream.Counter(8, epsilon=1.0, mechanism="negative_digits", branching=3,
                            levels=9), r"levels must be in \[1, 3\] \(more than 3 would add"),
])
def test_modules_refuse_bad_arguments_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_stream_steps_are_checked_against_the_horizon():
    c = stream.Counter(4, epsilon=1.0, rng=np.random.default_rng(0))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="count must be a non-negative integer"):
            c.update(bad)
    with pytest.raises(ValueError, match=r"steps must be in \[0, 4\] \(the horizon\), got 5"):
        c.step_variances(5)


# ------------------------------------------------------------------ shared helpers made public
def test_readonly_marks_the_array_itself():
    a = np.arange(3.0)
    assert readonly(a) is a and not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1.0
    tree = strategies.tree(8, 2)
    for arr in (tree.levels, tree.lo, tree.hi):
        assert not arr.flags.writeable


def test_honaker_shared_helpers_are_public():
    for name in ("tree_layout", "check_level_variances", "ivw", "sum_variance", "level_stats",
                 "left_cover_sums"):
        assert name in honaker.__all__ and callable(getattr(honaker, name))
    ks, m, w, offsets = honaker.tree_layout([2, 3])
    assert ks == (2, 3) and m.tolist() == [1, 2, 6] and w.tolist() == [6, 3, 1]
    assert offsets.tolist() == [0, 1, 3, 9]
    # inverse-variance weighting of independent estimates with variances 1 and 3:
    # weight 3 / 4 on the first, variance 1 / (1 + 1/3) = 3 / 4
    w_a, var = honaker.ivw(1.0, 3.0)
    assert w_a == pytest.approx(0.75) and var == pytest.approx(0.75)
    for bad in ([1.0, np.nan, 1.0], [1.0, -1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0]):
        with pytest.raises(ValueError, match="level_variances"):
            honaker.check_level_variances(bad, 2)
