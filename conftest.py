"""Collection rules for the doctests of the documentation pages (the tests' own fixtures are
in tests/conftest.py).

A page whose examples use the optional engines (the ``engines`` extra: pandas, Dask, PySpark,
Polars) is skipped, with the reason, when one of them is not installed; CI installs them. Its
Spark session runs in the same pytest-xdist worker as the Spark tests (``--dist loadgroup``),
so that one JVM starts, not one per worker."""

from __future__ import annotations

import importlib.util

import pytest

ENGINE_PAGES = {"data_engines.md": ("pandas", "dask", "pyspark", "polars")}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        needs = ENGINE_PAGES.get(item.path.name) if item.path.suffix == ".md" else None
        if not needs:
            continue
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        if missing:
            item.add_marker(pytest.mark.skip(
                reason=f"needs the engines extra ({', '.join(missing)} not installed)"))
        item.add_marker(pytest.mark.xdist_group("spark"))
