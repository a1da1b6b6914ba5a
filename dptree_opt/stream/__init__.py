"""Continual release: running counts over a stream (docs/math.md section 9).

``Counter(horizon, epsilon= | rho=, mechanism=..., rng=None)`` (:mod:`dptree_opt.stream.counter`)
is the one front end; each mechanism is an engine (:mod:`dptree_opt.stream.base`): k-ary trees
with covering sums or the causal BLUE (:mod:`~dptree_opt.stream.tree`), the unbounded hybrid
(:mod:`~dptree_opt.stream.unbounded`), Andersson-Pagh's negative digits
(:mod:`~dptree_opt.stream.negative_digits`), the square-root factorisation and BLT
(:mod:`~dptree_opt.stream.factorization`). Noise: :mod:`~dptree_opt.stream.noise`. Secure
counters, engines and noise refuse copying and pickling (no replay of noise):
:mod:`~dptree_opt.stream.secret`.

``CorrelatedNoise(strategy, dim, rho= | epsilon=, participation=...)``
(:mod:`~dptree_opt.stream.correlated`) streams the correlated noise of a training loop's
running gradient sums (DP-FTRL / DP-MF), one generator per strategy structure.
"""

from .correlated import CorrelatedNoise
from .counter import MECHANISMS, Counter

__all__ = ["Counter", "CorrelatedNoise", "MECHANISMS"]
