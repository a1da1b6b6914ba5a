"""Shared fixtures: spies on the secure sampler, traps on numpy noise."""

import numpy as np
import pytest

from dptree_opt.data_release import secure_noise as sn


class OpenDPLog:
    """What a spied run did with OpenDP: ``events`` ("built" / "drawn" in order), ``built``
    (the keyword arguments of every measurement made, after its privacy map was checked),
    ``drawn`` (the argument of every call of one, i.e. every noise draw)."""

    def __init__(self):
        self.events, self.built, self.drawn = [], [], []

    def count(self, event: str) -> int:
        return self.events.count(event)


@pytest.fixture
def opendp_calls(monkeypatch):
    """An :class:`OpenDPLog` of the OpenDP measurements made and drawn while the test runs."""
    log = OpenDPLog()
    real = sn._opendp_measurement

    def spy(**kw):
        log.events.append("built")
        log.built.append(kw)
        meas = real(**kw)

        def draw(values):
            log.events.append("drawn")
            log.drawn.append(values)
            return meas(values)
        return draw

    monkeypatch.setattr(sn, "_opendp_measurement", spy)
    return log


@pytest.fixture
def no_numpy_noise(monkeypatch):
    """Any numpy generator or legacy noise draw raises (numpy's Generator type is immutable,
    so its constructor and the module-level samplers are trapped)."""
    def boom(*a, **k):
        raise AssertionError("numpy noise on a secure path")

    for name in ("default_rng", "laplace", "normal", "random"):
        monkeypatch.setattr(np.random, name, boom)
