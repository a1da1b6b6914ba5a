"""Generic argument validators, in one place.

Every public function of the package checks its arguments before it computes or allocates
anything, and bad input raises a ``ValueError`` whose message names the parameter and repeats
the value it got. The checks that are the same everywhere live here:

* :func:`check_int`: an integer (``int`` or a numpy integer; never a bool, ``np.bool_``, a
  float such as ``2.0``, or a string) within optional bounds;
* :func:`check_n`: a number of bins (an integer >= 1);
* :func:`check_real`, :func:`check_positive`: a finite real number (never a bool) within
  optional bounds;
* :func:`check_bool`: ``True`` or ``False`` (or a numpy bool);
* :func:`check_choice`: one of a fixed tuple of names.

What is not generic stays beside the code it guards: a budget (``privacy.check_budget``), a
noise or neighbour model (``privacy``), branching factors (``optimize.levels``), a strategy's
coefficients (``strategies.toeplitz``), a stream's steps (``stream.base``), and so on.

Sizes are the other half: how large an input may be (bins, cells, rows, trials) is decided by
arithmetic on the sizes, before anything is allocated, in :mod:`dptree_opt.limits`
(``check_memory``, ``check_count`` and the ``MAX_*`` constants). This module checks what an
argument is; ``limits`` checks whether the job it asks for fits.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from numbers import Integral, Real
from typing import Literal, TypeGuard, TypeVar, overload

import numpy as np

_T = TypeVar("_T")

__all__ = ["check_int", "check_n", "check_real", "check_positive", "check_bool",
           "check_choice"]


def _number(m: float | None) -> str:
    """A bound for messages: powers of two from 2^20 up as 2^k (2^40 rather than 1099511627776)."""
    if isinstance(m, Integral) and int(m) >= 2**20 and int(m) & (int(m) - 1) == 0:
        return f"2^{int(m).bit_length() - 1}"
    return f"{m}"


def _is_int(value: object) -> TypeGuard[int | np.integer]:
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


@overload
def check_int(value: object, name: str, minimum: int | None = None,
              maximum: int | None = None, *, none: Literal[False] = False,
              why: str | None = None) -> int: ...
@overload
def check_int(value: object, name: str, minimum: int | None = None,
              maximum: int | None = None, *, none: bool,
              why: str | None = None) -> int | None: ...
def check_int(value: object, name: str, minimum: int | None = None,
              maximum: int | None = None, *, none: bool = False,
              why: str | None = None) -> int | None:
    """``value`` as a Python int: an integer (``int`` or a numpy integer, not a bool nor a float
    such as 2.0) in [minimum, maximum] (either bound may be None). ``none=True`` also accepts
    None (returned as is). ValueError naming ``name`` otherwise: "height must be an integer
    >= 1, got 2.5" (not an integer), "height must be >= 1, got 0" (out of range), "count must
    be a non-negative integer, got -1" (minimum 0); ``why`` (what the bounds come from) is
    added in parentheses."""
    if value is None and none:
        return None
    is_int = _is_int(value)
    if (_is_int(value) and (minimum is None or value >= minimum)
            and (maximum is None or value <= maximum)):
        return int(value)
    if minimum is not None and maximum is not None:
        bound = f"in [{_number(minimum)}, {_number(maximum)}]"
    elif minimum is not None:
        bound = f">= {_number(minimum)}"
    elif maximum is not None:
        bound = f"<= {_number(maximum)}"
    else:
        bound = ""
    if minimum == 0 and maximum is None:
        what = "a non-negative integer"
    elif not is_int:
        what = f"an integer {bound}".rstrip()
    else:
        what = bound
    either = "None or " if none and not is_int else ""
    because = f" ({why})" if why else ""
    got = int(value) if _is_int(value) else value
    raise ValueError(f"{name} must be {either}{what}{because}, got {got!r}")


def check_n(n: object, name: str = "n (number of bins)") -> int:
    """A number of bins: an integer >= 1 (:func:`check_int`), as a Python int."""
    return check_int(n, name, 1)


@overload
def check_real(value: object, name: str, *, above: float | None = None,
               at_least: float | None = None, below: float | None = None,
               at_most: float | None = None, none: Literal[False] = False) -> float: ...
@overload
def check_real(value: object, name: str, *, above: float | None = None,
               at_least: float | None = None, below: float | None = None,
               at_most: float | None = None, none: bool) -> float | None: ...
def check_real(value: object, name: str, *, above: float | None = None,
               at_least: float | None = None, below: float | None = None,
               at_most: float | None = None, none: bool = False) -> float | None:
    """``value`` as a float: a finite real number (int, float, numpy number, Fraction; never a
    bool nor a string) with value > ``above``, >= ``at_least``, < ``below`` and <= ``at_most``
    (each bound optional). ``none=True`` also accepts None (returned as is). ValueError
    naming ``name`` otherwise, e.g. "epsilon must be finite and > 0, got -1.0"."""
    if value is None and none:
        return None
    low = (f"({_number(above)}" if above is not None
           else f"[{_number(at_least)}" if at_least is not None else None)
    high = (f"{_number(below)})" if below is not None
            else f"{_number(at_most)}]" if at_most is not None else None)
    if low is not None and high is not None:
        bound = f"in {low}, {high}"
    elif low is not None:
        bound = (f"> {_number(above)}" if above is not None else f">= {_number(at_least)}")
    elif high is not None:
        bound = (f"< {_number(below)}" if below is not None else f"<= {_number(at_most)}")
    else:
        bound = ""
    either = "None or " if none else ""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise ValueError(f"{name} must be {either}a number{' ' + bound if bound else ''}, "
                         f"got {value!r}")
    try:
        x = float(value)
    except OverflowError:               # an int or Fraction beyond the doubles
        x = math.inf if value > 0 else -math.inf  # type: ignore[operator]  # a Real compares with 0
    if (not math.isfinite(x) or (above is not None and not x > above)
            or (at_least is not None and not x >= at_least)
            or (below is not None and not x < below)
            or (at_most is not None and not x <= at_most)):
        if low is not None and high is not None:
            raise ValueError(f"{name} must be {bound}, got {x!r}")
        what = f"finite and {bound}" if bound else "a finite number"
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return x


def check_positive(value: object, name: str) -> float:
    """A finite number > 0 as a float (:func:`check_real`): "{name} must be finite and > 0"."""
    return check_real(value, name, above=0)


@overload
def check_bool(value: object, name: str, *, none: Literal[False] = False) -> bool: ...
@overload
def check_bool(value: object, name: str, *, none: bool) -> bool | None: ...
def check_bool(value: object, name: str, *, none: bool = False) -> bool | None:
    """``True`` or ``False`` (a numpy bool too), as a Python bool; ``none=True`` also accepts
    None (returned as is). ValueError naming ``name`` otherwise (0, 1, "yes" are refused: a
    flag is never guessed)."""
    if value is None and none:
        return None
    if not isinstance(value, (bool, np.bool_)):
        either = "True, False or None" if none else "True or False"
        raise ValueError(f"{name} must be {either}, got {value!r}")
    return bool(value)


def check_choice(value: object, name: str, choices: Sequence[_T]) -> _T:
    """``value`` when it is one of ``choices`` (compared with ==; an unhashable value such as a
    list or an array is refused); ValueError naming ``name`` and the choices otherwise."""
    try:
        ok = isinstance(value, Hashable) and value in choices
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value  # type: ignore[return-value]  # value == one of choices (checked above)
