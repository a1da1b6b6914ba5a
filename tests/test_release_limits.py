"""The one-column release's size limit is the one it can keep: MAX_BINS = 2^20, and a
memory estimate that counts the quantile tests' calibration (the peak of a large release),
checked before the design when the least any tree needs does not fit, and with the designed
tree before the calibration allocates."""

import math

import numpy as np
import pytest

from dptree_opt import quantile_intervals as qi
from dptree_opt import limits, strategies
from dptree_opt.data_release import core, release
from dptree_opt.mechanism import Mechanism


def test_bins_above_the_limit_are_refused_before_the_design(monkeypatch, opendp_calls):
    """bins = 2^24 was documented, then refused by the memory check after a 30-134 s design
    (the default design pads it to 28M leaves; measured at 2^20: 8.8 GiB, so ~140 GiB)."""
    monkeypatch.setattr(core, "_design", lambda *a: pytest.fail("design started"))
    for bins in (core.MAX_BINS + 1, 2**24):
        with pytest.raises(ValueError, match=r"above the limit 1048576 \(2\^20\)"):
            release(counts=[0], lower=0, upper=1, bins=bins, epsilon=1.0)
    assert core.MAX_BINS == 2**20 and core.MAX_LEAVES == 2**21
    assert opendp_calls.events == []


def test_the_memory_estimate_counts_the_calibration(monkeypatch, opendp_calls):
    """Tree [64, 64] over 4096 bins, Laplace, equal budgets: 1 + 64 + 4096 = 4161 nodes, all
    noisy; the calibration holds up to 225 prefix weights per row and per noisy row, 8 bytes
    each: 8 * 225 * 2 * 4161 = 14 979 600 bytes, plus 512 per leaf = 2 097 152. The old
    estimate (512 per leaf) let it through with 4 MiB available; now it is refused with
    33 MiB and runs with 35 MiB."""
    need = 8 * 225 * 2 * 4161 + 512 * 4096
    kw = dict(lower=0, upper=1, bins=4096, epsilon=1.0, tree=[64, 64], budgets="equal")
    designed = []
    real = core._design
    monkeypatch.setattr(core, "_design", lambda *a: designed.append(1) or real(*a))
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * need - 2**21)
    with pytest.raises(ValueError, match=r"tree: the release \(the tree and the quantile "
                                         r"tests' calibration\) would need about 16\.3 MiB"):
        release(counts=np.ones(4096, dtype=np.int64), **kw)
    assert designed == [1] and opendp_calls.events == []
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * need + 2**21)
    assert release(counts=np.ones(4096, dtype=np.int64), **kw).complete


def test_the_least_need_is_checked_before_the_design(monkeypatch, opendp_calls):
    """Any tree over K bins has K leaves and K + 1 nodes, and Laplace noise always needs the
    calibration's weights (at least 65 prefixes): refused at once when even that does not
    fit; Gaussian noise may be normal (no weights), so only the leaves count."""
    monkeypatch.setattr(core, "_design", lambda *a: pytest.fail("design started"))
    k = 1 << 16
    least = 512 * k + 8 * 65 * (2 * k + 1)
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * least - 2)
    with pytest.raises(ValueError, match="^bins: the release .* would need about"):
        release(counts=np.zeros(k, dtype=np.int64), lower=0, upper=1, bins=k, epsilon=1.0)
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * 512 * k - 2)
    with pytest.raises(ValueError, match="^bins: the release .* would need about"):
        release(counts=np.zeros(k, dtype=np.int64), lower=0, upper=1, bins=k, rho=1.0)
    assert opendp_calls.events == []


@pytest.mark.parametrize("branching", [[64, 64], [2] * 12, [16, 16, 16], [3, 3, 3, 2, 2, 2,
                                                                         2, 2, 2, 2, 2, 2]])
def test_the_calibration_checks_the_prefixes_the_estimate_assumes(branching):
    """The estimate's bounds (65..225 prefixes above K = 64) hold for the release's trees."""
    k = 4096
    mech = Mechanism(strategies.tree(math.prod(branching), branching), epsilon=1.0,
                     discrete=True)
    m = qi._checked_prefixes(mech, k).size
    assert core.CALIBRATION_PREFIXES[0] <= m <= core.CALIBRATION_PREFIXES[1]
    assert qi._checked_prefixes(mech, 64).size == 65   # every prefix b = -1..63


@pytest.mark.slow
def test_a_release_at_the_limit_completes():
    """The documented limit is true: counts over 2^20 bins, the default design (measured:
    8.8 GiB peak, ~4 min on 2 shared cores). Needs ~20 GiB available."""
    need = 10 * 2**30
    avail = limits.available_memory()
    if avail is not None and avail // 2 < need:
        pytest.skip(f"needs about {2 * need / 2**30:.0f} GiB available")
    counts = np.random.default_rng(0).integers(0, 100, core.MAX_BINS)
    r = release(counts=counts, lower=0, upper=1, bins=core.MAX_BINS, epsilon=1.0)
    assert r.complete and r.consistent_cdf.shape == (core.MAX_BINS,)
    assert abs(r.total - int(counts.sum())) < 50 * float(r.standard_errors[-1])
