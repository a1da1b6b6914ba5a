"""Shared fixtures: spies on the secure samplers, traps on numpy noise."""

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from dptree_opt.data_release import secure_noise as sn
from dptree_opt.stream import noise as stream_noise


if os.environ.get("PYTEST_XDIST_WORKER"):
    # the workers (one per core, `-n auto`) share the cores: one BLAS thread each
    threadpool_limits(limits=1, user_api="blas")


class OpenDPLog:
    """What a spied run did with OpenDP: ``events`` ("built" / "drawn" in order), ``built``
    (the keyword arguments of every measurement asked for, logged before it is made and its
    privacy map checked, so a refused one counts too; the float Gaussian of the factorisation
    counters as ``noise="float_gaussian", scale=sigma``), ``drawn`` (the argument of every
    call of one, i.e. every noise draw)."""

    def __init__(self):
        self.events, self.built, self.drawn = [], [], []

    def count(self, event: str) -> int:
        return self.events.count(event)


class _Spied:
    """A measurement whose calls (draws) are logged; anything else (``map``) is passed on."""

    def __init__(self, log, meas):
        self._log, self._meas = log, meas

    def __call__(self, values):
        self._log.events.append("drawn")
        self._log.drawn.append(values)
        return self._meas(values)

    def __getattr__(self, name):
        return getattr(self._meas, name)


@pytest.fixture
def opendp_calls(monkeypatch):
    """An :class:`OpenDPLog` of the OpenDP measurements made and drawn while the test runs:
    the integer samplers of the releases and the tree counters, and the float Gaussian of the
    "sqrt" / "blt" counters."""
    log = OpenDPLog()
    real = sn.opendp_measurement
    real_float = stream_noise.float_gaussian_measurement

    def spy(**kw):
        log.events.append("built")
        log.built.append(kw)
        return _Spied(log, real(**kw))

    def spy_float(sigma):
        log.events.append("built")
        log.built.append({"noise": "float_gaussian", "scale": sigma})
        return _Spied(log, real_float(sigma))

    monkeypatch.setattr(sn, "opendp_measurement", spy)
    monkeypatch.setattr(stream_noise, "float_gaussian_measurement", spy_float)
    return log


@pytest.fixture
def no_numpy_noise(monkeypatch):
    """Any numpy generator or legacy noise draw raises (numpy's Generator type is immutable,
    so its constructor and the module-level samplers are trapped)."""
    def boom(*a, **k):
        raise AssertionError("numpy noise on a secure path")

    for name in ("default_rng", "RandomState", "laplace", "normal", "standard_normal",
                 "random"):
        monkeypatch.setattr(np.random, name, boom)


@pytest.fixture(scope="session")
def spark_session():
    """A local[2] SparkSession shared by the Spark tests of this process (``getOrCreate``;
    their ``xdist_group("spark")`` marker keeps them on one worker: one JVM). Skips without
    pyspark or Java."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java")
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master("local[2]").appName("dptree-opt-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate())


@pytest.fixture(scope="session")
def ext():
    """The docs site's Sphinx extension module (docs/_ext/dptree_docs.py), imported from its
    directory; skips without Sphinx (the ``docs`` extra)."""
    pytest.importorskip("sphinx")
    pytest.importorskip("sphinx.ext.napoleon")
    path = str(Path(__file__).resolve().parents[1] / "docs" / "_ext")
    sys.path.insert(0, path)
    try:
        import dptree_docs
    finally:
        sys.path.remove(path)
    return dptree_docs
