"""Participation schemas: how many steps of a stream one user's data enters (docs/math.md
section 11).

In private learning (DP-FTRL, DP-MF) the "bins" of a strategy are the n steps of a stream and
one user contributes to several of them. Neighbouring datasets differ by one user's
contributions (add / remove, "zero-out"): x - x' is supported on a participation pattern P
(a set of steps) with one contribution g_t per step of P, ``||g_t|| <= 1``.

Schemas (:func:`single`, :func:`fixed_epoch`, :func:`min_sep`):

* ``single()``: one step (event-level privacy; the default everywhere).
* ``fixed_epoch(k, b)``: n = k b steps in k epochs of b; a user participates at
  o, o + b, ..., o + (k - 1) b for one offset 0 <= o < b.
* ``min_sep(k, b)``: at most k participations, any two at least b steps apart:
  t_(i+1) - t_i >= b (jax_privacy's ``min_sep``; TF Privacy's ``min_separation`` counts the
  steps strictly between, b - 1: use :func:`min_sep_tf`). ``k=None``: as many as fit.

Contributions. ``vector=True`` (the default: clipped gradients, any dimension): each g_t is a
vector of norm <= 1 in the norm the noise calibrates to (l2 for Gaussian, l1 for Laplace).
``vector=False``: scalar contributions in [-1, 1]. The vector sensitivity is never below the
scalar one (take every g_t on one axis), so the default is private for both.

Sensitivity of a strategy A with row weights w (scaled rows W = diag(w) A, X = W'W), over the
schema's patterns P (docs/math.md section 11):

* l2, vector: max_P max over unit vectors u_i of ``||sum_(i in P) W_i u_i'||_F^2``
  = max_P max over Gram matrices G (psd, unit diagonal) of <X_PP, G>. It lies between the
  scalar value max_(s in {-1, 1}^P) s'X_PP s and sum_(i, j in P) ``|X_ij|``; all three are
  equal when X_PP >= 0 entrywise (trees, the square root, BLT with positive coefficients).
* l1, vector: max_P sum_(i in P) ``||W_i||_1`` exactly (put each contribution on its own
  coordinate; the triangle inequality bounds every other choice): a dynamic programme,
  O(n k). Scalar: at most that, equal when A >= 0.

:class:`Sensitivity` says whether a value is exact or a certified upper bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from .validation import check_bool, check_int

__all__ = ["Participation", "Sensitivity", "single", "fixed_epoch", "min_sep", "min_sep_tf",
           "as_participation", "parse", "KINDS", "max_linear", "gram_sensitivity",
           "column_norms_sensitivity", "offset_blocks_sensitivity", "ENUMERATION_LIMIT"]

KINDS = ("single", "fixed_epoch", "min_sep")
# brute-force enumerations (patterns, or patterns x signs) are run up to this many terms
ENUMERATION_LIMIT = 1 << 22

_F = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Participation:
    """A participation schema (module docstring): ``kind`` in :data:`KINDS`, ``k`` the most
    participations (None: as many as fit, min_sep only), ``b`` the epoch length (fixed_epoch)
    or the minimum separation t_(i+1) - t_i >= b (min_sep), ``vector`` whether contributions
    are vectors (default) or scalars. Build with :func:`single`, :func:`fixed_epoch`,
    :func:`min_sep`."""

    kind: str
    k: int | None
    b: int
    vector: bool = True

    def __post_init__(self) -> None:
        """ValueError for a schema built by hand with a bad field (the builders check too)."""
        if self.kind not in KINDS:
            raise ValueError(f"participation kind must be one of {KINDS}, got {self.kind!r}")
        check_int(self.b, "b", minimum=1)
        check_bool(self.vector, "vector")
        if self.k is None and self.kind != "min_sep":
            raise ValueError(f"{self.kind}: k must be an integer >= 1 (None is for min_sep)")
        if self.k is not None:
            check_int(self.k, "k", minimum=1)

    @property
    def is_single(self) -> bool:
        """True for event-level privacy (one participation)."""
        return self.kind == "single" or self.k == 1

    def check_steps(self, n: int) -> int:
        """``n`` (the strategy's number of steps) if the schema applies to it, else
        ValueError: fixed_epoch needs n = k b."""
        n = check_int(n, "n", minimum=1)
        if self.kind == "fixed_epoch" and self.k is not None and n != self.k * self.b:
            raise ValueError(f"participation fixed_epoch(k={self.k}, b={self.b}) needs "
                             f"n = k b = {self.k * self.b} steps, the strategy has {n}")
        return n

    def max_participations(self, n: int) -> int:
        """The most participations any pattern has over n steps."""
        if self.kind == "single":
            return 1
        if self.kind == "fixed_epoch":
            return int(self.k or 1)
        fit = -(-n // self.b)
        return fit if self.k is None else min(self.k, fit)

    def count_patterns(self, n: int) -> int:
        """How many patterns :meth:`patterns` lists over n steps (exact integer, no listing):
        n (single), b (fixed_epoch), or the number of non-empty sets of at most k steps with
        gaps >= b (min_sep): sum_j C(n - (j - 1)(b - 1), j)."""
        if self.kind == "single":
            return n
        if self.kind == "fixed_epoch":
            return self.b
        return sum(math.comb(n - (j - 1) * (self.b - 1), j)
                   for j in range(1, self.max_participations(n) + 1))

    def patterns(self, n: int) -> Iterator[npt.NDArray[np.int64]]:
        """Every pattern over n steps (sorted step indices), for brute force and tests:
        refused beyond :data:`ENUMERATION_LIMIT` patterns."""
        for batch in self.pattern_batches(n):
            yield from batch

    def pattern_batches(self, n: int, size: int = 1 << 16) -> Iterator[npt.NDArray[np.int64]]:
        """:meth:`patterns` as arrays of shape (c, j), c <= ``size`` patterns of j steps each
        (for vectorised brute force); refused beyond :data:`ENUMERATION_LIMIT` patterns."""
        self.check_steps(n)
        count = self.count_patterns(n)
        if count > ENUMERATION_LIMIT:
            raise ValueError(f"{count} participation patterns over {n} steps: too many to list "
                             f"(limit {ENUMERATION_LIMIT})")
        if self.kind == "single":
            yield np.arange(n, dtype=np.int64)[:, None]
            return
        if self.kind == "fixed_epoch":
            yield (np.arange(self.b)[:, None] + self.b * np.arange(int(self.k or 1)))
            return
        b = min(self.b, n)
        for j in range(1, self.max_participations(n) + 1):
            # gaps >= b  <=>  t_i - (i - 1)(b - 1) strictly increasing in [0, n - (j-1)(b-1))
            combos = itertools.combinations(range(n - (j - 1) * (b - 1)), j)
            shift = (b - 1) * np.arange(j)
            while True:
                chunk = np.fromiter(itertools.chain.from_iterable(
                    itertools.islice(combos, size)), dtype=np.int64)
                if not chunk.size:
                    break
                yield chunk.reshape(-1, j) + shift

    def max_linear(self, x: ArrayLike) -> float | _F:
        """max over patterns P of sum_(i in P) x_i for x >= 0 of shape (..., n) (one value per
        leading index): :func:`max_linear`."""
        return max_linear(x, self)

    def argmax_linear(self, x: ArrayLike) -> npt.NDArray[np.int64]:
        """A pattern attaining :meth:`max_linear` for a 1-D x >= 0 (sorted steps)."""
        v = _check_linear(x)
        if v.ndim != 1:
            raise ValueError("argmax_linear takes a 1-D x")
        n = self.check_steps(v.size)
        if self.kind == "single":
            return np.array([int(np.argmax(v))])
        if self.kind == "fixed_epoch":
            k = int(self.k or 1)
            o = int(np.argmax(v.reshape(k, self.b).sum(axis=0)))
            return o + self.b * np.arange(k)
        b, kmax = min(self.b, n), self.max_participations(n)   # b >= n: one participation
        tables = _min_sep_tables(v, b, kmax)          # (kmax + 1, n + b): F[j][i]
        out, i, j = [], 0, kmax
        while j > 0 and i < n:
            take = v[i] + tables[j - 1][i + b]
            if take >= tables[j][i + 1] and take > 0:
                out.append(i)
                i, j = i + b, j - 1
            else:
                i += 1
        return np.asarray(out, dtype=np.int64)

    def describe(self) -> str:
        """One line, e.g. "min_sep(k=6, b=342), vector contributions"."""
        what = "vector" if self.vector else "scalar"
        if self.kind == "single":
            return f"single participation, {what} contributions"
        return f"{self.kind}(k={self.k}, b={self.b}), {what} contributions"


@dataclass(frozen=True)
class Sensitivity:
    """A sensitivity under a participation schema: ``value`` (the norm, not squared),
    ``exact`` (False: a certified upper bound), ``method`` (how it was computed),
    ``lower`` (a value some pattern attains, when known: the sensitivity is in
    [lower, value])."""

    value: float
    exact: bool
    method: str
    lower: float | None = None


def single(*, vector: bool = True) -> Participation:
    """Event-level privacy: one participation (today's neighbours)."""
    return Participation("single", 1, 1, check_bool(vector, "vector"))


def fixed_epoch(k: int, b: int, *, vector: bool = True) -> Participation:
    """k epochs of b steps (n = k b): participations at o, o + b, ..., o + (k - 1) b."""
    return Participation("fixed_epoch", check_int(k, "k", minimum=1),
                         check_int(b, "b", minimum=1), check_bool(vector, "vector"))


def min_sep(k: int | None, b: int, *, vector: bool = True) -> Participation:
    """At most k participations (None: as many as fit), any two at least b steps apart
    (t_(i+1) - t_i >= b; b = 1 allows consecutive steps)."""
    kk = None if k is None else check_int(k, "k", minimum=1)
    return Participation("min_sep", kk, check_int(b, "b", minimum=1),
                         check_bool(vector, "vector"))


def min_sep_tf(k: int | None, min_separation: int, *, vector: bool = True) -> Participation:
    """:func:`min_sep` from TF Privacy's convention: ``min_separation`` steps strictly
    between two participations (t_(i+1) - t_i - 1 >= min_separation), i.e. b =
    min_separation + 1."""
    return min_sep(k, check_int(min_separation, "min_separation", minimum=0) + 1,
                   vector=vector)


def as_participation(obj: object) -> Participation:
    """``obj`` as a schema: None is :func:`single`; a :class:`Participation` itself; anything
    else is refused."""
    if obj is None:
        return single()
    if isinstance(obj, Participation):
        return obj
    raise ValueError("participation must be dptree_opt.participation.single(), fixed_epoch(k, "
                     f"b) or min_sep(k, b), got {obj!r}")


def parse(spec: str) -> Participation:
    """A schema from text (command lines): "single", "fixed_epoch:K:B", "min_sep:K:B" or
    "min_sep_tf:K:S" (K may be "none" for min_sep: as many as fit); append ":scalar" for
    scalar contributions. ValueError naming the spec otherwise.

    >>> parse("fixed_epoch:6:342").describe()
    'fixed_epoch(k=6, b=342), vector contributions'
    >>> parse("min_sep:none:4:scalar") == min_sep(None, 4, vector=False)
    True
    """
    if not isinstance(spec, str):
        raise ValueError(f"participation must be text such as 'fixed_epoch:6:342', got {spec!r}")
    parts = spec.strip().lower().split(":")
    vector = True
    if len(parts) > 1 and parts[-1] in ("scalar", "vector"):
        vector = parts.pop() == "vector"
    usage = ("participation: expected 'single', 'fixed_epoch:K:B', 'min_sep:K:B' or "
             f"'min_sep_tf:K:S' (optionally ':scalar'), got {spec!r}")
    if parts == ["single"]:
        return single(vector=vector)
    if len(parts) != 3 or parts[0] not in ("fixed_epoch", "min_sep", "min_sep_tf"):
        raise ValueError(usage)
    try:
        k = None if parts[1] == "none" and parts[0] != "fixed_epoch" else int(parts[1])
        b = int(parts[2])
    except ValueError:
        raise ValueError(usage) from None
    if parts[0] == "fixed_epoch":
        if k is None:
            raise ValueError(usage)
        return fixed_epoch(k, b, vector=vector)
    return (min_sep if parts[0] == "min_sep" else min_sep_tf)(k, b, vector=vector)


def _check_linear(x: ArrayLike) -> _F:
    v = np.asarray(x, dtype=float)
    if v.ndim < 1 or v.shape[-1] < 1:
        raise ValueError("x must have at least one step")
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise ValueError("x must be finite and >= 0")
    return v


def _min_sep_tables(x: _F, b: int, kmax: int) -> _F:
    """F[j][..., i] = max over sets of <= j steps in [i, n) with gaps >= b of their x-sum
    (the dynamic programme of Choquette-Choo et al. 2023, Alg. 3 "VecSens"), padded with b
    zeros; shape (kmax + 1, ..., n + b)."""
    n = x.shape[-1]
    tables = np.zeros((kmax + 1,) + x.shape[:-1] + (n + b,))
    for j in range(1, kmax + 1):
        f = tables[j]
        f[..., :n] = x + tables[j - 1][..., b:b + n]
        tables[j] = np.maximum.accumulate(f[..., ::-1], axis=-1)[..., ::-1]
    return tables


def max_linear(x: ArrayLike, participation: Participation) -> float | _F:
    """max over the schema's patterns P of sum_(i in P) x_i, for x >= 0 of shape (..., n)
    (returns a float for 1-D x, else one value per leading index). single: the maximum;
    fixed_epoch: the best offset's sum, O(n); min_sep: a dynamic programme over steps,
    O(n k) (Choquette-Choo et al. 2023, "(Amplified) banded matrix factorization", Alg. 3)."""
    v = _check_linear(x)
    part = as_participation(participation)
    n = part.check_steps(v.shape[-1])
    if part.kind == "single":
        out = v.max(axis=-1)
    elif part.kind == "fixed_epoch":
        k = int(part.k or 1)
        out = v.reshape(v.shape[:-1] + (k, part.b)).sum(axis=-2).max(axis=-1)
    else:
        b, kmax = min(part.b, n), part.max_participations(n)   # b >= n: one participation
        f = np.zeros(v.shape[:-1] + (n + b,))
        for _ in range(kmax):
            f[..., :n] = v + f[..., b:b + n]
            f = np.maximum.accumulate(f[..., ::-1], axis=-1)[..., ::-1]
        out = f[..., 0]
    return float(out) if np.ndim(out) == 0 else np.asarray(out, dtype=float)


def column_norms_sensitivity(norms: ArrayLike, participation: Participation, p: int, *,
                             orthogonal: bool = False, nonnegative: bool = False) -> Sensitivity:
    """The sensitivity from the weighted column norms ``||W_i||_p`` alone (shape (n,)).

    * p = 1: max_P sum_(i in P) ``||W_i||_1``, exact for vector contributions, and for scalar
      ones when ``nonnegative`` (A >= 0); else an upper bound.
    * p = 2: exact sqrt(max_P sum_(i in P) ``||W_i||^2``) when ``orthogonal`` (columns of a
      pattern are orthogonal: X_PP diagonal, e.g. banded with bands <= b under min_sep);
      otherwise the triangle bound max_P sum_(i in P) ``||W_i||`` (certified upper bound)."""
    c = np.asarray(norms, dtype=float)
    part = as_participation(participation)
    if part.is_single:
        return Sensitivity(float(c.max(initial=0.0)), True, "largest column norm")
    if p == 1:
        exact = part.vector or nonnegative
        return Sensitivity(float(max_linear(c, part)), exact,
                           "column l1 norms over the worst pattern (dynamic programme)")
    if orthogonal:
        return Sensitivity(math.sqrt(float(max_linear(c * c, part))), True,
                           "orthogonal columns: squared column norms over the worst pattern")
    return Sensitivity(float(max_linear(c, part)), False,
                       "upper bound: the triangle inequality over the worst pattern's columns")


def _sign_vectors(k: int) -> _F:
    """All 2^(k-1) sign vectors of length k with first entry +1 (s and -s give the same
    quadratic form), shape (2^(k-1), k)."""
    if k == 0:
        return np.ones((1, 0))
    bits = (np.arange(1 << (k - 1))[:, None] >> np.arange(k - 1)) & 1
    return np.hstack([np.ones((bits.shape[0], 1)), 1.0 - 2.0 * bits])


def gram_sensitivity(X: ArrayLike, participation: Participation) -> Sensitivity:
    """The l2 sensitivity from a dense Gram matrix X = W'W (shape (n, n)), under the schema.

    * single: sqrt(max_i X_ii).
    * fixed_epoch: per offset o the block X_PP, P = {o + j b}: exact sqrt(sum X_PP) when every
      block is >= 0; with negative entries the certified bound sqrt(sum ``|X_PP|``) (Choquette-
      Choo et al. 2023's absolute-value bound), exact for scalar contributions by enumerating
      the 2^(k-1) signs (k small) and for vector ones when the sign maximum reaches the bound.
    * min_sep: exact sqrt(max_P sum_(i in P) X_ii) (dynamic programme) when X_ij = 0 for
      ``|i - j|`` >= b (pattern columns orthogonal, e.g. banded with <= b bands); otherwise
      exact by enumerating the patterns (and signs) while they number at most
      :data:`ENUMERATION_LIMIT`, else the certified upper bound of Choquette-Choo et al. 2023
      (each row's best pattern of ``|X|``, then the best pattern of those maxima), O(n^2 k)."""
    x = np.asarray(X, dtype=float)
    if x.ndim != 2 or x.shape[0] != x.shape[1]:
        raise ValueError(f"X must be square, got shape {x.shape}")
    part = as_participation(participation)
    n = part.check_steps(x.shape[0])
    diag = np.clip(np.diagonal(x), 0.0, None)
    if part.is_single:
        return Sensitivity(math.sqrt(float(diag.max())), True, "largest column norm")
    if part.kind == "fixed_epoch":
        k = int(part.k or 1)
        blocks = np.diagonal(x.reshape(k, part.b, k, part.b), axis1=1, axis2=3)  # (k, k, b)
        return offset_blocks_sensitivity(np.moveaxis(blocks, 2, 0), part)
    b = part.b
    far = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) >= b
    if not np.any(x[far]):
        v = float(max_linear(diag, part))
        return Sensitivity(math.sqrt(v), True,
                           "orthogonal pattern columns: diagonal over the worst pattern")
    count = part.count_patterns(n)
    kmax = part.max_participations(n)
    nonneg = bool(np.all(x >= 0))
    signs = 1 if nonneg else 1 << (kmax - 1)
    if count * signs * kmax <= ENUMERATION_LIMIT:
        best, lower = 0.0, 0.0
        for pats in part.pattern_batches(n, max(1, ENUMERATION_LIMIT // 64 // kmax**2)):
            blk = x[pats[:, :, None], pats[:, None, :]]                  # (c, j, j)
            best = max(best, float(np.abs(blk).sum(axis=(1, 2)).max()))
            if nonneg:
                lower = max(lower, float(blk.sum(axis=(1, 2)).max()))
            else:
                sv = _sign_vectors(pats.shape[1])
                lower = max(lower, float(np.einsum("si,cij,sj->cs", sv, blk, sv).max()))
        exact = nonneg or not part.vector or math.isclose(lower, best, rel_tol=1e-12)
        value = best if part.vector else lower
        return Sensitivity(math.sqrt(value), exact,
                           "every pattern enumerated" if exact else
                           "upper bound: sum of |X| over the worst pattern (every pattern "
                           "enumerated; mixed signs)", math.sqrt(lower))
    ax = np.abs(x)
    rows = np.asarray(max_linear(ax, part))
    bound = float(max_linear(rows, part))
    return Sensitivity(math.sqrt(bound), False,
                       "upper bound: each row's worst pattern of |X|, then the worst pattern "
                       "of those (Choquette-Choo et al. 2023)")


def offset_blocks_sensitivity(blocks: ArrayLike, part: Participation) -> Sensitivity:
    """The fixed-epoch l2 sensitivity from the Gram blocks of every offset, shape (b, k, k):
    ``blocks[o, i, j] = X_(o + i b, o + j b)``. Non-negative blocks: exact
    sqrt(max_o sum X_PP). Mixed signs: the certified bound sqrt(max_o sum ``|X_PP|``) (Choquette-
    Choo et al. 2023's absolute-value bound) and the sign maximum over the 2^(k-1) sign
    vectors while 2^(k-1) b k^2 is within :data:`ENUMERATION_LIMIT` (exact for scalar
    contributions; for vector ones the bound is exact when a sign vector attains it)."""
    x = np.asarray(blocks, dtype=float)
    nb, k, _ = x.shape
    upper = np.abs(x).sum(axis=(1, 2))
    bound = math.sqrt(float(upper.max()))
    if np.all(x >= 0):
        return Sensitivity(bound, True, "non-negative Gram: the worst offset's block sum")
    if (1 << (k - 1)) * nb * k * k > ENUMERATION_LIMIT:
        return Sensitivity(bound, False, "upper bound: sum of |X| over the worst offset "
                           "(mixed signs; too many signs to enumerate)")
    s = _sign_vectors(k)
    lower = math.sqrt(max(float(np.einsum("si,oij,sj->os", s, x, s).max()), 0.0))
    if not part.vector:
        return Sensitivity(lower, True, "scalar contributions: every sign enumerated", lower)
    exact = math.isclose(lower, bound, rel_tol=1e-12)
    return Sensitivity(bound, exact, "sum of |X| over the worst offset" + (
        "" if exact else " (upper bound: mixed signs; a sign pattern attains the lower "
        "value)"), lower)
