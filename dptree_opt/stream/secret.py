"""Objects that hold secure noise refuse to be copied or serialised (no replay of noise).

Why. A streaming counter on the secure path (``rng=None``) holds noise that is drawn but not
yet fully used (the drawn-ahead noise of ``tree_blue``, ``sqrt``, ``blt``; the node noise kept
for later steps by the tree and negative-digit counters) or the OpenDP samplers that will draw
it. Its privacy rests on every noise value being combined with ONE stream of data. A copy fed
different data (``copy.deepcopy``, ``pickle``, a checkpoint restored twice in a training loop)
releases outputs whose difference is exactly the difference of the data: the noise cancels.

Decision: refuse, never serialise. A form that "cannot be resumed twice" cannot be enforced
by the object: serialised bytes can be duplicated and restored twice, and a restored object
cannot know whether another restore happened (that needs a trusted one-shot store outside the
process). Serialising without the noise state cannot resume either. So every object holding
secure noise or sampler state (:class:`SecretState`: ``stream.Counter``, every engine,
``GroupNoise``, :class:`NoiseBuffer`) refuses ``copy.copy``, ``copy.deepcopy``, ``pickle``
(every protocol), ``copy.replace`` and the hooks they and ``copyreg`` go through
(``__reduce_ex__``, ``__reduce__``, ``__getstate__``, ``__setstate__``, ``__replace__``) with a
TypeError (Python's "cannot pickle" convention) saying why. Copying ``vars(obj)`` by hand is
not prevented (Python cannot); the nested secret objects still refuse.

What to do instead. Checkpoint the released outputs and the account: they are public
(post-processing of the private release). To continue after a restart, start a NEW counter
(fresh secure noise) over the remaining steps and add its running counts to the last released
count: event level, the two counters see disjoint steps, so one event changes the input of
only one of them and the run keeps the budget of the larger one (its variance is the last
released count's plus the new counter's).

Simulation objects (a numpy ``Generator``: no privacy guarantee) may be copied and pickled: a
copy is independent (``copy.copy`` too, like numpy's Generator) and carries the Generator's
state, so it REPLAYS the same simulated noise (what a simulation checkpoint should do).

Convention: a subclass sets the instance attribute ``secure`` (``True`` for OpenDP noise,
``False`` for simulation); an object without it is treated as secure (fail closed).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, NoReturn, SupportsIndex

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from typing_extensions import Self   # typing.Self from Python 3.11 on

__all__ = ["SecretState", "NoiseBuffer"]

_WHY = ("it holds secure noise (or the sampler that draws it), and a copy fed different data "
        "would replay that noise, which publishes the difference of the data exactly. Save "
        "the released outputs instead (they are public) and, to continue, start a new counter "
        "with a fresh budget over the remaining steps")


def _is_secure(state: object) -> bool:
    return not (isinstance(state, dict) and state.get("secure", True) is False)


class SecretState:
    """Mixin: refuse copying and serialisation when the instance holds secure noise
    (``self.secure`` is not False); allow them, as an independent copy that replays the same
    simulated noise, otherwise (module docstring)."""

    __slots__ = ()

    def _refuse_if_secure(self, action: str) -> None:
        if _is_secure(self.__dict__):
            raise TypeError(f"cannot {action} a secure {type(self).__name__}: {_WHY}")

    def __copy__(self) -> Self:
        self._refuse_if_secure("copy")
        return self.__deepcopy__({})

    def __deepcopy__(self, memo: dict[int, object]) -> Self:
        self._refuse_if_secure("copy")
        new = object.__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        self._refuse_if_secure("pickle")
        return super().__reduce_ex__(protocol)

    def __getstate__(self) -> dict[str, object]:
        self._refuse_if_secure("pickle")
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, object]) -> None:
        if _is_secure(state):
            raise TypeError(f"cannot restore a secure {type(self).__name__}: {_WHY}")
        self.__dict__.update(state)

    def __replace__(self, **changes: object) -> NoReturn:
        self._refuse_if_secure("copy")
        raise TypeError(f"{type(self).__name__} does not support copy.replace: build a new "
                        "one")


class NoiseBuffer(SecretState):
    """Noise drawn ahead of the data (``values``, float64, shape (n,)), secure or simulated;
    a :class:`SecretState`, so a secure buffer cannot be copied or pickled. ``readonly``
    freezes the array (noise fixed at construction)."""

    def __init__(self, values: ArrayLike, *, secure: bool, readonly: bool = False) -> None:
        self.secure = bool(secure)
        self.values = np.asarray(values, dtype=float)
        if readonly:
            self.values.flags.writeable = False

    def __len__(self) -> int:
        return int(self.values.size)
