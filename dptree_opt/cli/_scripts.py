"""Locate and load the repository's script folders (``paper_figures/``, ``experiments/``).

They live next to the package in a clone (the repository's top level) and call only the public API;
each script is a module with ``run(out_dir: pathlib.Path, quick: bool = True) -> dict`` that
may import its folder's helper module (``_figures``, ``_experiments``). A script writes only
files named after itself (:func:`script_outputs`), so that a run's outputs can be checked
before it starts.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_SUFFIXES = (".png", ".json", ".csv")


def script_outputs(stem: str) -> list[str]:
    """The names of the files script ``stem`` may write into its output directory:
    ``stem.png``, ``stem.json``, ``stem.csv`` (it writes the figure and one of the tables)."""
    return [f"{stem}{suffix}" for suffix in OUTPUT_SUFFIXES]


def script_dir(name: str) -> Path:
    """The folder ``name`` at the repository root; ValueError if this is not a clone."""
    folder = REPO_ROOT / name
    if not folder.is_dir():
        raise ValueError(f"{name}/ not found next to the package ({REPO_ROOT}); run from a "
                         "clone installed with `pip install -e .`")
    return folder


def list_scripts(name: str) -> list[str]:
    """Names (file stems) of the runnable scripts in ``name``/, sorted; skips ``_*.py``."""
    return sorted(p.stem for p in script_dir(name).glob("*.py") if not p.stem.startswith("_"))


def load_script(name: str, stem: str) -> ModuleType:
    """Import ``name``/``stem``.py as a module (ValueError listing the choices if unknown)."""
    choices = list_scripts(name)
    # only a shipped script, by its bare name: never a path (an absolute or "../" name would
    # otherwise run any Python file on the machine)
    if not isinstance(stem, str) or stem not in choices:
        raise ValueError(f"unknown script {stem!r} in {name}/; choose from {', '.join(choices)}")
    path = script_dir(name) / f"{stem}.py"
    folder = str(path.parent)
    if folder not in sys.path:  # the scripts import their folder's shared helper module
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"_dptree_{name}_{stem}", path)
    if spec is None or spec.loader is None:  # not for a .py file: cannot happen here
        raise ValueError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run", None)):
        raise ValueError(f"{path} has no run(out_dir, quick) function")
    return module
