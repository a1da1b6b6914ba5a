"""Noise generators for :class:`dptree_opt.stream.CorrelatedNoise`, one class per strategy
structure, behind a small registry (docs/math.md sections 9 and 11).

A generator streams noise_t = (B z)_t, shape (dim,), for t = 1..n: z the strategy's row noise
(one (dim,) vector per released row, from a :mod:`~dptree_opt.stream.correlated_sources`
source, drawn when the generator first needs the row) and B the estimator's map from the
rows to the running sums (the prefix workload M). Adding noise_t to the exact running sum of
the clipped gradients gives exactly the mechanism's estimate of that running sum.

* :class:`ToeplitzGenerator` (``ToeplitzStrategy``, ``SqrtFactorization``, ``BLTStrategy``):
  C = T(c) square, so the BLUE is C^-1 y and B = M C^-1 = T(b). BLT: the buffer recurrence
  (:class:`~dptree_opt.stream.factorization.BLTRecurrence`), O(buffers x dim). Any other
  Toeplitz (the square root, B = C): every past draw is kept, noise_t = sum_k b_k z_(t-k),
  O(n x dim) memory (refused beyond the memory limit, by arithmetic, before anything is
  allocated) and O(t x dim) work per step.
* :class:`LowerTriangularGenerator` (any explicit square lower-triangular C with a non-zero
  diagonal: banded, BSR, column-normalised banded, a dense optimum): forward substitution
  w_t = (z_t - sum_(j<t) C_tj w_j) / C_tt, noise_t = sum_(s<=t) w_s, keeping the last
  ``reach`` = max_t (t - first column of row t) vectors w (bands - 1 for a banded C).
* :class:`TreeGenerator` (interval strategies whose nodes' children partition them, with
  single-step leaves: binary / k-ary / truncated trees, hierarchies): "causal" is Honaker's
  bottom-up estimate (the causal BLUE: each complete node combines its own noisy count with
  its children's estimates, F_v = 1 / (1 / v + 1 / sum F_children), and the running sum is the
  sum of the maximal complete nodes' estimates, :mod:`dptree_opt.stream.tree`); "covering"
  sums the maximal complete nodes' noisy counts. Memory: one vector per (depth, child position)
  of the open path, O(depth x branching x dim) (O(log n) vectors).
* :class:`RestartedGenerator` (``strategies.restarted(block, n)``: block-diagonal copies):
  the block's generator on each copy in turn, plus the finished copies' totals (the copies
  share no step and no noise, so the estimator splits per copy). A truncated last copy of a
  tree stays a tree; of a factorisation it is not square (its later rows measure the first
  steps too), so only the offline BLUE (drawn ahead) serves it.
* :class:`AheadGenerator` (any strategy, estimator "blue"): the offline BLUE is not causal in
  general, so every row's noise is drawn at the first step and the whole noise path
  M x_hat(z) is computed then (O((rows + n) x dim) memory, stated and checked first).

Registry: :func:`register_generator` adds a class; :func:`select_generator` returns the first
that claims the mechanism's structure, serves the estimator and does not refuse
(:class:`~dptree_opt.engines.NotServed` with every refusal otherwise). Estimator "auto": the
first claiming generator's default (the exact BLUE for square lower-triangular factorisations,
where it is causal; the causal BLUE for trees; a restarted strategy: its block's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from ..engines import NotServed
from ..estimation import blue as blue_estimate
from ..mechanism import Mechanism
from ..strategies import (BLTStrategy, IntervalStrategy, ScaledToeplitzStrategy,
                          SqrtFactorization, Strategy, ToeplitzStrategy)
from ..strategies.factorization import sqrt_coefficients
from ..strategies.restarted import RestartedStrategy
from .correlated_sources import NoiseSource, RowsSource
from .factorization import BLTRecurrence
from .secret import NoiseBuffer, SecretState

__all__ = ["NoiseGenerator", "ToeplitzGenerator", "LowerTriangularGenerator", "TreeGenerator",
           "AheadGenerator", "RestartedGenerator", "register_generator", "registered_generators",
           "select_generator", "MAX_EXPLICIT_STEPS"]

_F: TypeAlias = "npt.NDArray[np.float64]"
_I: TypeAlias = "npt.NDArray[np.int64]"
# LowerTriangularGenerator reads the strategy's sparse matrix: at most this many steps
MAX_EXPLICIT_STEPS = 1 << 16
# AheadGenerator computes the BLUE on blocks of this many coordinates (bounds temporaries)
_AHEAD_CHUNK = 1024


class Released(Protocol):
    """What a generator reads of a mechanism: the released strategy and each row's noise
    variance (a :class:`~dptree_opt.Mechanism`, or one copy of a restarted one)."""

    @property
    def released(self) -> Strategy: ...

    @property
    def variances(self) -> _F: ...


class NoiseGenerator(SecretState):
    """One structure's generator (module docstring). Class side: ``claims`` (the structure),
    ``estimators`` it serves and ``default_estimator``, ``why_not`` (a refusal, or None),
    ``state_vectors`` (how many (dim,) float64 vectors it holds: the memory arithmetic done
    before anything is allocated) and ``memory`` (in words). Instance side: ``step()``
    returns the next noise_t (a new (dim,) array)."""

    name: ClassVar[str] = "generator"
    structure: ClassVar[str] = ""
    estimators: ClassVar[tuple[str, ...]] = ()
    default_estimator: ClassVar[str] = "blue"

    @classmethod
    def claims(cls, mech: Released) -> bool:
        """Whether the mechanism's released strategy has this generator's structure."""
        raise NotImplementedError

    @classmethod
    def why_not(cls, mech: Released, estimator: str) -> str | None:
        """Why this generator cannot serve (a claimed) ``mech`` with ``estimator``, or None."""
        return None

    @classmethod
    def state_vectors(cls, mech: Released, estimator: str) -> int:
        """How many (dim,) float64 vectors the generator holds at most (temporaries
        included): 8 x dim x this is its memory."""
        raise NotImplementedError

    @classmethod
    def extra_bytes(cls, mech: Released) -> int:
        """Temporaries that do not grow with dim (bytes; default 0)."""
        return 0

    @classmethod
    def nbytes(cls, mech: Released, estimator: str, dim: int) -> int:
        """The generator's memory in bytes for ``dim`` coordinates: the arithmetic checked
        before anything is allocated."""
        return 8 * int(dim) * cls.state_vectors(mech, estimator) + cls.extra_bytes(mech)

    @classmethod
    def memory(cls, mech: Released, estimator: str) -> str:
        """The memory in words, e.g. "O(buffers x dim): 6 vectors"."""
        return f"{cls.state_vectors(mech, estimator)} vectors of dim floats"

    def __init__(self, mech: Released, estimator: str, source: NoiseSource) -> None:
        self.mechanism, self.estimator, self.source = mech, estimator, source
        self.dim = source.dim
        self.secure = source.secure
        self.t = 0

    def step(self) -> _F:
        """noise_(t+1), a new (dim,) array; the caller stops at the horizon."""
        raise NotImplementedError


_GENERATORS: list[type[NoiseGenerator]] = []


@dataclass(frozen=True)
class BlockView:
    """The rows of one copy of a restarted strategy as a generator sees a mechanism: the
    block strategy (``released``) and those rows' noise ``variances``."""

    released: Strategy
    variances: _F


def register_generator(cls: type[NoiseGenerator]) -> type[NoiseGenerator]:
    """Add a generator class after those registered so far (most specific first)."""
    if not (isinstance(cls, type) and issubclass(cls, NoiseGenerator)):
        raise ValueError("a generator must be a NoiseGenerator subclass")
    if any(g.name == cls.name for g in _GENERATORS):
        raise ValueError(f"a generator named {cls.name!r} is already registered")
    _GENERATORS.append(cls)
    return cls


def registered_generators() -> tuple[type[NoiseGenerator], ...]:
    """Every registered generator class, in the order they are asked."""
    return tuple(_GENERATORS)


def select_generator(mech: Released, estimator: str) -> tuple[type[NoiseGenerator], str]:
    """(generator class, resolved estimator) for ``mech``: the first registered generator
    that claims the structure and serves ``estimator`` ("auto": its default) without
    refusing; :class:`~dptree_opt.engines.NotServed` (a ValueError) naming every refusal."""
    reasons: list[tuple[str, str]] = []
    for cls in _GENERATORS:
        if not cls.claims(mech):
            continue
        est = cls.default_estimator if estimator == "auto" else estimator
        if est == "auto" and issubclass(cls, RestartedGenerator):
            est = cls.resolve(mech, "auto")
        if est not in cls.estimators:
            reasons.append((cls.name, f"serves the estimators {cls.estimators}, not {est!r}"))
            continue
        why = cls.why_not(mech, est)
        if why is None:
            return cls, est
        reasons.append((cls.name, why))
    why = "; ".join(f"{n}: {r}" for n, r in reasons) or "no generator claims the structure"
    raise NotServed(f"no noise generator streams the {estimator} estimator of the running sums "
                    f"for the strategy {mech.released.name!r} ({why})", reasons)


def _square(mech: Released) -> str | None:
    """Why the released strategy is not one square block of rows (or None)."""
    s = mech.released
    if s.n_rows != s.n_bins:
        return (f"the released strategy has {s.n_rows} rows over {s.n_bins} steps (not a "
                "square factorisation; e.g. an appended total row)")
    if not np.all(np.isfinite(mech.variances)):
        return "a row is not measured (budget 0): the running sums are not identified"
    return None


# ================================================================== Toeplitz family
@register_generator
class ToeplitzGenerator(NoiseGenerator):
    """C = T(c) (module docstring): BLT by its buffer recurrence, any other Toeplitz (the
    square root) with every past draw kept."""

    name = "toeplitz"
    structure = "lower-triangular Toeplitz factorisation (BLT: buffer recurrence; else history)"
    estimators = ("blue", "causal")

    @classmethod
    def claims(cls, mech: Released) -> bool:
        s = mech.released
        return isinstance(s, ToeplitzStrategy) and not isinstance(s, ScaledToeplitzStrategy)

    @classmethod
    def why_not(cls, mech: Released, estimator: str) -> str | None:
        return _square(mech)

    @classmethod
    def state_vectors(cls, mech: Released, estimator: str) -> int:
        s = mech.released
        if isinstance(s, BLTStrategy):
            return s.buffers + 4          # buffers, running sum, w, z, the returned copy
        return s.n_bins + 3               # every past draw, z, the sum, the returned copy

    @classmethod
    def memory(cls, mech: Released, estimator: str) -> str:
        s = mech.released
        k = cls.state_vectors(mech, estimator)
        if isinstance(s, BLTStrategy):
            return f"O(buffers x dim): {k} vectors ({s.buffers} buffers)"
        return f"O(n x dim): {k} vectors (every past draw; no finite recurrence)"

    def __init__(self, mech: Released, estimator: str, source: NoiseSource) -> None:
        super().__init__(mech, estimator, source)
        s = mech.released
        assert isinstance(s, ToeplitzStrategy)
        self._blt: BLTRecurrence | None = None
        if isinstance(s, BLTStrategy):
            self._blt = BLTRecurrence(s.theta, s.omega, self.dim)
            return
        n = s.n_bins
        # B = M C^-1 = T(b): the square root has B = C exactly; else b = cumsum(1 / c(z))
        self._b = (sqrt_coefficients(n) if isinstance(s, SqrtFactorization)
                   else np.cumsum(s.inverse_coefficients()))
        self._past = NoiseBuffer(np.zeros((n, self.dim)), secure=self.secure)

    def step(self) -> _F:
        t = self.t
        z = self.source.draw(np.array([t], dtype=np.int64))[0]
        self.t += 1
        if self._blt is not None:
            return self._blt.step(z).copy()
        past = self._past.values
        past[t] = z
        return self._b[t::-1] @ past[: t + 1]


# ================================================================== explicit lower triangular
@register_generator
class LowerTriangularGenerator(NoiseGenerator):
    """Any explicit square lower-triangular C (module docstring): forward substitution
    keeping the last ``reach`` vectors of C^-1 z."""

    name = "lower_triangular"
    structure = ("square lower-triangular factorisation given by its matrix (banded, BSR, "
                 "dense): forward substitution over the last `reach` steps")
    estimators = ("blue", "causal")

    @classmethod
    def claims(cls, mech: Released) -> bool:
        s = mech.released
        return s.n_rows == s.n_bins and not isinstance(s, (ToeplitzStrategy, IntervalStrategy,
                                                           RestartedStrategy))

    @staticmethod
    def _reach(mech: Released) -> tuple[int | None, str | None]:
        s = mech.released
        if s.n_bins > MAX_EXPLICIT_STEPS:
            return None, (f"{s.n_bins} steps: the generator reads the strategy's matrix, at "
                          f"most {MAX_EXPLICIT_STEPS} steps")
        a = s.matrix.tocsr()
        rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
        nz = a.data != 0
        if np.any(a.indices[nz] > rows[nz]):
            return None, "the strategy is not lower-triangular"
        diag = np.asarray(a.diagonal())
        if np.any(diag == 0):
            return None, (f"row {int(np.flatnonzero(diag == 0)[0])} has a zero diagonal entry "
                          "(not invertible causally)")
        first = np.full(a.shape[0], np.iinfo(np.int64).max)
        np.minimum.at(first, rows[nz], a.indices[nz])
        return int(np.max(np.arange(a.shape[0]) - first)), None

    @classmethod
    def why_not(cls, mech: Released, estimator: str) -> str | None:
        return _square(mech) or cls._reach(mech)[1]

    @classmethod
    def state_vectors(cls, mech: Released, estimator: str) -> int:
        reach = cls._reach(mech)[0]
        return (reach or 0) + 4              # the last `reach` w, the sum, z, w, the copy

    @classmethod
    def memory(cls, mech: Released, estimator: str) -> str:
        reach = cls._reach(mech)[0]
        return (f"O(reach x dim): {cls.state_vectors(mech, estimator)} vectors (C^-1 z over "
                f"the last {reach} steps)")

    def __init__(self, mech: Released, estimator: str, source: NoiseSource) -> None:
        super().__init__(mech, estimator, source)
        reach, why = self._reach(mech)
        assert reach is not None, why
        a = mech.released.matrix.tocsr()
        a.sort_indices()
        self._a = a
        self.reach = reach
        self._ring = NoiseBuffer(np.zeros((reach, self.dim)), secure=self.secure)
        self._sum = np.zeros(self.dim)

    def step(self) -> _F:
        t, a, reach = self.t, self._a, self.reach
        z = self.source.draw(np.array([t], dtype=np.int64))[0]
        lo, hi = a.indptr[t], a.indptr[t + 1]
        cols, vals = a.indices[lo:hi], a.data[lo:hi]
        past = cols < t
        w = z
        if reach and np.any(past):
            ring = self._ring.values
            coef = np.zeros(reach)
            coef[cols[past] % reach] = vals[past]     # slot of w_j is j mod reach
            used = min(t, reach)                      # slots filled so far
            w = z - coef[:used] @ ring[:used]
        w = w / float(vals[~past][0])
        if reach:
            self._ring.values[t % reach] = w
        self._sum += w
        self.t += 1
        return self._sum.copy()


# ================================================================== trees
@register_generator
class TreeGenerator(NoiseGenerator):
    """Honaker's bottom-up (causal BLUE) or covering sums over a laminar tree (module
    docstring)."""

    name = "tree"
    structure = ("tree of intervals (children partition their parent, single-step leaves): "
                 "O(depth x branching) node estimates")
    estimators = ("causal", "covering")
    default_estimator = "causal"

    @classmethod
    def claims(cls, mech: Released) -> bool:
        return isinstance(mech.released, IntervalStrategy)

    @staticmethod
    def _shape(mech: Released) -> tuple[dict[str, npt.NDArray[np.int64]] | None, str | None]:
        s = mech.released
        assert isinstance(s, IntervalStrategy)
        lo, hi, parent, depth = s.lo, s.hi, s.parent, s.depth
        m = lo.size
        length = hi - lo
        child = parent >= 0
        n_children = np.bincount(parent[child], minlength=m)
        covered = np.bincount(parent[child], weights=length[child], minlength=m)
        if np.any((n_children > 0) & (covered != length)):
            return None, ("some node's children do not partition it (e.g. prefix sums): the "
                          "bottom-up recursion needs a tree")
        if np.any((n_children == 0) & (length != 1)):
            return None, ("a leaf spans several steps: the running sums inside it are not "
                          "estimated causally")
        if np.any(np.asarray(s.bin_row) < 0):
            return None, "a step is measured by no row"
        return {"n_children": n_children, "depth": depth}, None

    @classmethod
    def why_not(cls, mech: Released, estimator: str) -> str | None:
        return cls._shape(mech)[1]

    @classmethod
    def _slots(cls, mech: Released) -> int:
        shape, _ = cls._shape(mech)
        assert shape is not None
        parents = shape["n_children"] > 0
        if not parents.any():
            return 0
        return (int(shape["depth"][parents].max()) + 1) * int(shape["n_children"].max())

    @classmethod
    def state_vectors(cls, mech: Released, estimator: str) -> int:
        shape, why = cls._shape(mech)
        assert shape is not None, why
        depth = int(np.max(shape["depth"]))
        return cls._slots(mech) + (depth + 1) + 4   # slots, one step's z, sum, est, copy

    @classmethod
    def memory(cls, mech: Released, estimator: str) -> str:
        return (f"O(depth x branching x dim): {cls.state_vectors(mech, estimator)} vectors "
                f"({cls._slots(mech)} node estimates)")

    def __init__(self, mech: Released, estimator: str, source: NoiseSource) -> None:
        super().__init__(mech, estimator, source)
        s = mech.released
        assert isinstance(s, IntervalStrategy)
        shape, why = self._shape(mech)
        assert shape is not None, why
        self._weights(mech, estimator, shape)
        lo, hi, parent, depth = s.lo, s.hi, s.parent, s.depth
        n_children = shape["n_children"]
        kmax = max(int(n_children.max()), 1)
        # a kept node waits in slot (depth of its parent) x kmax + (its rank among siblings):
        # the open nodes form one path, one per depth, so slots never collide, and a node's
        # children occupy the contiguous slots depth x kmax + [0, n_children)
        child = np.flatnonzero(parent >= 0)
        order = child[np.lexsort((lo[child], parent[child]))]
        first = np.concatenate([[True], parent[order][1:] != parent[order][:-1]])
        start = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
        slot = np.full(lo.size, -1, dtype=np.int64)
        slot[order] = depth[parent[order]] * kmax + (np.arange(order.size) - start)
        self._slot, self._parent = slot, parent
        self._child_lo = depth * kmax
        self._n_children = n_children
        # completion schedule: nodes ending at step t, deepest first
        self._order = np.lexsort((-depth, hi))
        self._ptr = np.searchsorted(hi[self._order], np.arange(1, s.n_bins + 2), side="left")
        self._pool = NoiseBuffer(np.zeros((self._slots(mech), self.dim)), secure=self.secure)
        self._sum = np.zeros(self.dim)

    def _weights(self, mech: Released, estimator: str,
                 shape: dict[str, npt.NDArray[np.int64]]) -> None:
        """Per node: the weights of its own noisy count and of its children's estimates in
        its kept estimate, and F, its variance (bottom-up by depth, vectorised per depth);
        ValueError when a running sum is not identified (an unmeasured leaf)."""
        s = mech.released
        assert isinstance(s, IntervalStrategy)
        v = np.asarray(mech.variances, dtype=float)
        parent, depth, has = s.parent, shape["depth"], shape["n_children"] > 0
        m = v.size
        a_self, a_child, F, Fc = np.ones(m), np.zeros(m), np.zeros(m), np.zeros(m)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            for d in range(int(depth.max()), -1, -1):          # over depths, not nodes
                idx = np.flatnonzero(depth == d)
                vv = v[idx]
                fc = np.where(has[idx], Fc[idx], np.inf)
                if estimator == "covering":
                    own = np.isfinite(vv)
                    ws, wc, f = own * 1.0, (~own) * 1.0, np.where(own, vv, fc)
                else:
                    both = np.isfinite(vv) & np.isfinite(fc) & (vv > 0) & (fc > 0)
                    tot = np.where(both, 0.5 * vv + 0.5 * fc, 1.0)
                    ws = np.where(both, 0.5 * fc / tot, np.where(np.isinf(vv) | (fc == 0), 0.0,
                                                                 1.0))
                    wc = 1.0 - ws
                    f = np.where(both, vv * ws, np.where(ws == 1.0, vv, fc))
                a_self[idx], a_child[idx], F[idx] = ws, wc, f
                up = idx[parent[idx] >= 0]
                np.add.at(Fc, parent[up], F[up])
        if np.any(np.isinf(F)):
            r = int(np.flatnonzero(np.isinf(F))[0])
            raise ValueError(f"the running sums over steps [{int(s.lo[r])}, {int(s.hi[r])}) are "
                             "not identified: a leaf there is not measured (budget 0)")
        self._a_self, self._a_child, self.node_variances = a_self, a_child, F

    def step(self) -> _F:
        t = self.t
        nodes = self._order[self._ptr[t]:self._ptr[t + 1]]
        z = self.source.draw(nodes)
        pool = self._pool.values
        for i, r in enumerate(nodes):          # the O(depth) nodes completing at this step
            est = self._a_self[r] * z[i]
            k = int(self._n_children[r])
            if k:
                lo = int(self._child_lo[r])
                below = pool[lo:lo + k].sum(axis=0)
                if self._a_child[r]:
                    est += self._a_child[r] * below
                self._sum -= below
            self._sum += est
            if self._parent[r] >= 0:
                pool[self._slot[r]] = est
        self.t += 1
        return self._sum.copy()


# ================================================================== restarted strategies
@register_generator
class RestartedGenerator(NoiseGenerator):
    """A block strategy restarted every ``period`` steps (``strategies.restarted``; Kairouz
    et al. 2021's tree with restarts): the block's own generator runs on each copy in turn
    (the last copy on the truncated block), and the running sum adds ``carry``, the sum of
    the finished copies' last outputs. The rows of different copies share no step and no
    noise, so the (causal) BLUE splits into one problem per copy, and a finished copy's last
    output is its estimate of its total from all its rows: noise_t = carry + the current
    copy's noise. Memory: two copies' generator states (the next one is built while the
    old one is dropped) and the carry."""

    name = "restarted"
    structure = ("restarted strategy (block-diagonal copies): the block's generator per "
                 "copy, plus the finished copies' totals")
    estimators = ("blue", "causal", "covering")
    default_estimator = "auto"

    @classmethod
    def claims(cls, mech: Released) -> bool:
        return isinstance(mech.released, RestartedStrategy)

    @staticmethod
    def _views(mech: Released) -> tuple[list[BlockView], str | None]:
        """The distinct copies (a full copy, then the tail) as views; why not, if the full
        copies' noise differs."""
        s = mech.released
        assert isinstance(s, RestartedStrategy)
        v = np.asarray(mech.variances, dtype=float)
        mb = s.block.n_rows
        views: list[BlockView] = []
        if s.full_copies:
            full = v[:s.full_copies * mb].reshape(s.full_copies, mb)
            if not np.array_equal(full, np.broadcast_to(full[0], full.shape)):
                return [], "the restarted copies have different noise scales (budgets per row)"
            views.append(BlockView(s.block, full[0]))
        if s.tail is not None:
            views.append(BlockView(s.tail, v[s.full_copies * mb:]))
        return views, None

    @classmethod
    def _inner(cls, mech: Released, estimator: str) -> tuple[list[tuple[
            type[NoiseGenerator], str]], str | None]:
        views, why = cls._views(mech)
        if why is not None:
            return [], why
        picked = []
        for view in views:
            try:
                picked.append(select_generator(view, estimator))
            except NotServed as exc:
                return [], f"its block: {exc}"
        return picked, None

    @classmethod
    def why_not(cls, mech: Released, estimator: str) -> str | None:
        return cls._inner(mech, estimator)[1]

    @classmethod
    def resolve(cls, mech: Released, estimator: str) -> str:
        """The estimator "auto" stands for: the block generator's default."""
        picked = cls._inner(mech, estimator)[0]
        return picked[0][1] if picked else estimator

    @classmethod
    def state_vectors(cls, mech: Released, estimator: str) -> int:
        views, _ = cls._views(mech)
        picked, _ = cls._inner(mech, estimator)
        return 2 * max(g.state_vectors(v, e) for v, (g, e) in zip(views, picked)) + 2

    @classmethod
    def memory(cls, mech: Released, estimator: str) -> str:
        views, _ = cls._views(mech)
        picked, _ = cls._inner(mech, estimator)
        inner = picked[0][0].memory(views[0], picked[0][1])
        return (f"{cls.state_vectors(mech, estimator)} vectors: two copies of the block "
                f"generator's state ({inner}) and the carry")

    def __init__(self, mech: Released, estimator: str, source: NoiseSource) -> None:
        super().__init__(mech, estimator, source)
        s = mech.released
        assert isinstance(s, RestartedStrategy)
        views, why = self._views(mech)
        picked, why = self._inner(mech, estimator)
        assert picked, why
        self._restarted = s
        self._views_, self._picked = views, picked
        self._carry = np.zeros(self.dim)
        self._copy = -1
        self._inner_gen: NoiseGenerator | None = None
        self._last = np.zeros(self.dim)
        # every copy's generator can be built (identification, weights): checked now,
        # before the first draw; the first copy's generator is kept
        self._built = [g(v, e, RowsSource(source, np.zeros(0, dtype=np.int64)))
                       for v, (g, e) in zip(views, picked)]
        self.estimator = picked[0][1]

    def _start_copy(self, j: int) -> None:
        s = self._restarted
        mb = s.block.n_rows
        tail = j == s.full_copies
        rows = (s.full_copies * mb + np.arange(s.tail_rows.size, dtype=np.int64) if tail
                else j * mb + np.arange(mb, dtype=np.int64))
        k = 1 if tail and s.full_copies else 0
        cls, est = self._picked[k]
        self._carry += self._last
        self._inner_gen = None                             # drop the old copy's state first
        if self._built:
            self._built = []                               # the check instances
        self._inner_gen = cls(self._views_[k], est, RowsSource(self.source, rows))
        self._copy = j

    def step(self) -> _F:
        j = self.t // self._restarted.period
        if j != self._copy:
            self._start_copy(j)
        assert self._inner_gen is not None
        self._last = self._inner_gen.step()
        self.t += 1
        return self._carry + self._last


# ================================================================== offline BLUE, ahead
@register_generator
class AheadGenerator(NoiseGenerator):
    """The offline BLUE with every row's noise drawn at the first step (module docstring)."""

    name = "ahead"
    structure = "any strategy: the offline BLUE with its noise drawn ahead, O((rows + n) x dim)"
    estimators = ("blue",)

    @classmethod
    def claims(cls, mech: Released) -> bool:
        return isinstance(mech, Mechanism)

    @classmethod
    def state_vectors(cls, mech: Released, estimator: str) -> int:
        s = mech.released
        return s.n_rows + s.n_bins + 1            # z (rows x dim), the path (n x dim), a copy

    @classmethod
    def extra_bytes(cls, mech: Released) -> int:
        """The BLUE's temporaries on one block of coordinates (independent of dim)."""
        s = mech.released
        return 8 * 4 * (s.n_rows + s.n_bins) * _AHEAD_CHUNK

    @classmethod
    def memory(cls, mech: Released, estimator: str) -> str:
        return (f"O((rows + n) x dim): {cls.state_vectors(mech, estimator)} vectors (all noise "
                "drawn ahead, at the first step)")

    def __init__(self, mech: Released, estimator: str, source: NoiseSource) -> None:
        super().__init__(mech, estimator, source)
        self._path: NoiseBuffer | None = None

    def _draw_ahead(self) -> NoiseBuffer:
        s = self.mechanism.released
        z = self.source.draw(np.arange(s.n_rows, dtype=np.int64))      # (rows, dim)
        path = np.empty((s.n_bins, self.dim))
        for lo in range(0, self.dim, _AHEAD_CHUNK):                      # blocks of coordinates
            hi = min(self.dim, lo + _AHEAD_CHUNK)
            assert isinstance(self.mechanism, Mechanism)
            x = np.atleast_2d(blue_estimate(self.mechanism, z[:, lo:hi].T))   # (block, n)
            path[:, lo:hi] = np.cumsum(x, axis=1).T
        return NoiseBuffer(path, secure=self.secure, readonly=True)

    def step(self) -> _F:
        if self._path is None:
            self._path = self._draw_ahead()
        out = np.array(self._path.values[self.t])
        self.t += 1
        return out

