"""Integer arithmetic of tree shapes: prime factors, divisors, ordered factorisations (a
level-uniform tree over K' bins is an ordered factorisation k_1..k_h of K'), their counts
(checked before anything is listed), finest refinements and the padded sizes the tree
searches consider (docs/math.md section 4).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import lru_cache

import numpy as np
import numpy.typing as npt

__all__ = ["finest_refinement", "prime_exponents", "divisors", "factorisations",
           "iter_factorisations",
           "count_factorisations", "factorisations_by_height", "padded_chain_count",
           "distinct_orders", "prime_orderings", "max_padded", "smooth_finest_trees",
           "smallest_prime_factors", "Divisors"]


def finest_refinement(ks: Iterable[int]) -> tuple[int, ...]:
    """Split every branching factor into its prime factors (ascending), level by level: the
    tree keeps all of ks's nodes and gains intermediate levels. Trial division, O(sqrt k)
    per factor."""
    out = []
    for k in ks:
        f, d = [], 2
        while d * d <= k:
            while k % d == 0:
                f.append(d)
                k //= d
            d += 1
        if k > 1:
            f.append(k)
        out.extend(f)
    return tuple(out)


def prime_exponents(w: int) -> list[tuple[int, int]]:
    """[(p, e)]: the prime factorisation of w >= 1, primes ascending
    (:func:`finest_refinement`); w = 1: []."""
    return [(p, len(list(run))) for p, run in itertools.groupby(finest_refinement((w,)))]


def divisors(w: int) -> list[int]:
    """The divisors of w >= 1, ascending, built from its prime factorisation
    (:func:`prime_exponents`); only the divisors are held."""
    divs = [1]
    for p, e in prime_exponents(w):
        divs = [d * p**i for d in divs for i in range(e + 1)]
    return sorted(divs)


@lru_cache(maxsize=None)
def factorisations(w: int) -> tuple:
    """Every ordered factorisation of w into factors >= 2 (w = 1: the empty one), in
    lexicographic order; memoised. Count first (:func:`count_factorisations`): there are
    2^(m - 1) for w = 2^m."""
    if w == 1:
        return ((),)
    return tuple((k,) + rest for k in divisors(w) if k >= 2
                 for rest in factorisations(w // k))


def iter_factorisations(w: int, max_height: int | None = None) -> Iterator[tuple[int, ...]]:
    """The ordered factorisations of w into at most ``max_height`` factors >= 2 (None: all),
    lazily, in lexicographic order (w = 1: the empty one)."""
    if max_height is None:
        yield from factorisations(w)
        return
    if w == 1:
        yield ()
        return
    if max_height <= 0:
        return
    for k in divisors(w)[1:]:
        for rest in iter_factorisations(w // k, max_height - 1):
            yield (k,) + rest


@lru_cache(maxsize=None)
def count_factorisations(w: int) -> int:
    """H(w), the number of ordered factorisations of w into factors >= 2 (H(1) = 1), by
    the recursion H(w) = sum of H(d) over the divisors d < w (Kalmar 1931), without
    listing them: the size of ``factorisations(w)``."""
    if w == 1:
        return 1
    return sum(count_factorisations(d) for d in divisors(w)[:-1])


def factorisations_by_height(w: int) -> dict:
    """{h: F_h(w)}, the number of ordered factorisations of w into exactly h factors >= 2,
    for every h >= 1 with F_h > 0 (w = 1: {0: 1}), counted, never listed: by inclusion-
    exclusion over the factors equal to 1, F_h = sum_j (-1)^j C(h, j) G_(h - j), where
    G_m = prod_p C(e_p + m - 1, m - 1) counts ordered factorisations into m factors >= 1
    (stars and bars per prime exponent e_p)."""
    if w == 1:
        return {0: 1}
    exps = [e for _, e in prime_exponents(w)]

    def g(m: int) -> int:
        return math.prod(math.comb(e + m - 1, m - 1) for e in exps) if m else 0
    return {h: sum((-1) ** j * math.comb(h, j) * g(h - j) for j in range(h + 1))
            for h in range(1, sum(exps) + 1)}   # at most one factor per prime factor


def padded_chain_count(n: int, limit: int) -> int:
    """The number of padded trees over n bins (every subtree of width w_1 < n under its
    smallest top factor), sum of H(w_1) over w_1 < n, or limit + 1 as soon as it exceeds
    ``limit`` (every H >= 1, so n - 1 > limit decides at once): counted, never listed."""
    if n - 1 > limit:
        return limit + 1
    total = 0
    for w1 in range(1, n):
        total += count_factorisations(w1)
        if total > limit:
            return limit + 1
    return total


def distinct_orders(counts: dict) -> list:
    """Every distinct ordering of the multiset {p: multiplicity} (multinomial many), in
    lexicographic order."""
    if not counts:
        return [()]
    out = []
    for p in sorted(counts):
        rest = dict(counts)
        rest[p] -= 1
        if not rest[p]:
            del rest[p]
        out += [(p,) + tail for tail in distinct_orders(rest)]
    return out


def prime_orderings(n: int, cap: int) -> list[tuple] | None:
    """Every distinct ordering of n's prime factors (the finest chains of n), or None when
    there are more than ``cap`` (the multinomial count is checked first)."""
    counts = Counter(finest_refinement((n,)))
    total = math.factorial(sum(counts.values()))
    for c in counts.values():
        total //= math.factorial(c)
    if total > cap:
        return None
    return distinct_orders(dict(counts))


def max_padded(K: int, max_padding: float) -> int:
    """The largest padded K' the tree searches consider: floor(min(max_padding, 2) K).
    Larger paddings cannot help: a tree over K' >= 2K has top factor k_1 > ceil(K / w_1), so
    the same subtree under the smallest top factor (K' < 2K) is at least as good
    (``optimize.tree_search``, item 1); this also keeps K' an exact integer for any finite
    max_padding."""
    return int(math.floor(min(float(max_padding), 2.0) * K))


def smooth_finest_trees(K: int, max_pad: float) -> list[tuple]:
    """Both orders (2s first, 3s first) of the prime factors of every K' = 2^a 3^b in
    [K, max_pad K] (max_pad above 2: as 2, :func:`max_padded`)."""
    out = []
    top = max_padded(K, max_pad)
    b, p3 = 0, 1
    while p3 <= top:
        a, kp = 0, p3
        while kp < K:
            a, kp = a + 1, kp * 2
        while kp <= top:
            out += [(2,) * a + (3,) * b, (3,) * b + (2,) * a]
            a, kp = a + 1, kp * 2
        b, p3 = b + 1, p3 * 3
    return [ks for ks in dict.fromkeys(out) if ks]


@lru_cache(maxsize=4)
def smallest_prime_factors(limit: int) -> np.ndarray:
    """Smallest prime factor of every n <= limit (numpy sieve; 0 and 1 map to 0 and 1)."""
    spf = np.zeros(limit + 1, dtype=np.int64)
    spf[1:] = 1
    for p in range(2, math.isqrt(limit) + 1):
        if spf[p] == 1:
            block = spf[p * p:: p]
            block[block == 1] = p
    idx = np.arange(limit + 1)
    spf[(spf == 1) & (idx >= 2)] = idx[(spf == 1) & (idx >= 2)]
    return spf


class Divisors:
    """Memoised factorisations, divisors and Omega (prime factors with multiplicity) of the
    integers up to ``limit`` via a sieve (trial division above 2^23)."""

    def __init__(self, limit: int):
        self.spf = smallest_prime_factors(max(limit, 2)) if limit <= 1 << 23 else None
        self._div: dict[int, list[int]] = {}
        self._arr: dict[int, npt.NDArray[np.int64]] = {}
        self._omega: dict[int, int] = {}

    def factor(self, n: int) -> dict[int, int]:
        """{p: e}: the prime factorisation of n >= 1."""
        if self.spf is not None and n < self.spf.size:
            f: dict[int, int] = {}
            while n > 1:
                p = int(self.spf[n])
                f[p] = f.get(p, 0) + 1
                n //= p
            return f
        return dict(prime_exponents(n))

    def omega(self, n: int) -> int:
        """The number of prime factors of n, with multiplicity (the tallest tree over n)."""
        if n not in self._omega:
            self._omega[n] = sum(self.factor(n).values())
        return self._omega[n]

    def divisor_array(self, n: int) -> npt.NDArray[np.int64]:
        """The divisors d >= 2 of n as an increasing int64 array (memoised): products of
        the prime powers, one outer product per distinct prime."""
        arr = self._arr.get(n)
        if arr is None:
            ds = np.ones(1, np.int64)
            for p, e in self.factor(n).items():
                ds = np.multiply.outer(ds, p ** np.arange(e + 1, dtype=np.int64)).ravel()
            ds.sort()
            arr = self._arr[n] = ds[1:]
        return arr

    def divisors(self, n: int) -> list[int]:
        """Divisors d >= 2 of n, increasing (a list, memoised)."""
        if n not in self._div:
            self._div[n] = self.divisor_array(n).tolist()
        return self._div[n]
