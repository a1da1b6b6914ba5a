"""The typed public API (issue 26 item 2): cheap static facts, checked in the default run.

The type checker itself (``python -m mypy``, configured in pyproject.toml's ``[tool.mypy]``)
is a CI step of its own; here: ``py.typed`` ships, the checker's configuration covers every
module of the package (checked now, or listed as not yet covered), its strictness is on, every
function of a checked module is fully annotated, and every ``# type: ignore`` names its error
code and says why. The slow test runs the checker.
"""

from __future__ import annotations

import ast
import importlib.resources
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dptree_opt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
MYPY = PYPROJECT["tool"]["mypy"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _checked_files() -> list[Path]:
    """The .py files mypy checks: its ``files`` (directories recursively)."""
    out: list[Path] = []
    for entry in MYPY["files"]:
        p = ROOT / entry
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


def _not_covered() -> list[str]:
    """Module patterns imported but not yet checked (``follow_imports = "silent"``)."""
    out: list[str] = []
    for o in MYPY.get("overrides", []):
        if o.get("follow_imports") == "silent":
            mods = o["module"]
            out.extend([mods] if isinstance(mods, str) else mods)
    return out


def _matches(module: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        base = pattern[:-2]
        return module == base or module.startswith(base + ".")
    return module == pattern


def test_py_typed_is_in_the_package():
    assert importlib.resources.files("dptree_opt").joinpath("py.typed").is_file()
    assert (PACKAGE / "py.typed").is_file()


def test_py_typed_is_declared_as_package_data():
    """PEP 561: the marker must be in the wheel, or type checkers ignore the package's
    annotations. setuptools >= 69 adds py.typed by itself; the build requirement allows 64,
    which ships non-Python files only when declared."""
    data = PYPROJECT["tool"].get("setuptools", {}).get("package-data", {})
    assert "py.typed" in data.get("dptree_opt", []), \
        "pyproject.toml needs [tool.setuptools.package-data] dptree_opt = ['py.typed']"


def test_every_checked_path_exists():
    for entry in MYPY["files"]:
        assert (ROOT / entry).exists(), entry


def test_every_module_is_checked_or_listed_as_not_yet_covered():
    """A new module cannot slip past the checker: it is in ``files`` or named (or matched by
    a pattern) in the not-yet-covered list; and no module is in both."""
    checked = {_module_name(p) for p in _checked_files()}
    pending = _not_covered()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        listed = any(_matches(name, pat) for pat in pending)
        assert (name in checked) != listed, (
            f"{name}: {'both checked and listed as not covered' if listed else 'not checked'}")


def test_checker_strictness_is_on():
    for flag in ("disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs",
                 "warn_unused_ignores", "warn_redundant_casts", "strict_equality"):
        assert MYPY.get(flag) is True, flag
    assert "ignore_missing_imports" not in MYPY, "only per package, by name"
    assert "ignore_errors" not in MYPY
    for o in MYPY.get("overrides", []):
        mods = [o["module"]] if isinstance(o["module"], str) else o["module"]
        assert not o.get("ignore_errors"), mods
        assert o.get("disallow_untyped_defs", True), mods
        if o.get("ignore_missing_imports"):
            assert not any(m.startswith("dptree_opt") for m in mods), mods


def _unannotated(tree: ast.Module) -> list[str]:
    """Every function (methods and nested functions too) with a parameter or the return not
    annotated (``self`` / ``cls`` of methods excepted; ``__init__`` may omit ``-> None``)."""
    out: list[str] = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                params = a.posonlyargs + a.args + a.kwonlyargs
                if in_class and params and not any(
                        isinstance(d, ast.Name) and d.id == "staticmethod"
                        for d in child.decorator_list):
                    params = params[1:]
                params += [p for p in (a.vararg, a.kwarg) if p is not None]
                missing = [p.arg for p in params if p.annotation is None]
                if child.returns is None and child.name != "__init__":
                    missing.append("return")
                if missing:
                    out.append(f"{prefix}{child.name}: {', '.join(missing)}")
                visit(child, f"{prefix}{child.name}.", False)
            else:
                visit(child, prefix, in_class)

    visit(tree, "", False)
    return out


@pytest.mark.parametrize("path", _checked_files(), ids=lambda p: _module_name(p))
def test_checked_module_is_fully_annotated(path):
    """What ``disallow_untyped_defs`` demands of the checker, readable without running it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert _unannotated(tree) == []


_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<rest>.*)$")


@pytest.mark.parametrize("path", _checked_files(), ids=lambda p: _module_name(p))
def test_type_ignores_name_a_code_and_a_reason(path):
    bad = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _IGNORE.search(line)
        if m is None:
            continue
        rest = m.group("rest")
        if not re.match(r"\[[a-z-]+(, *[a-z-]+)*\]\s*#\s*\S", rest):
            bad.append(f"{i}: {line.strip()}")
    assert bad == []


def test_the_annotation_check_can_fail():
    tree = ast.parse("class C:\n    def f(self, x: int, y):\n        return x\n"
                     "def g(a: int) -> int:\n    def h(b):\n        return b\n    return a\n"
                     "def k(*args: int, **kw) -> None: ...\n")
    assert _unannotated(tree) == ["C.f: y, return", "g.h: b, return", "k: kw"]


@pytest.mark.slow
def test_wheel_ships_py_typed(tmp_path):
    """Build the wheel from a copy of the sources (no dependencies; the work
    tree gets no build/ directory) and look inside."""
    src, out = tmp_path / "src", tmp_path / "wheel"
    shutil.copytree(PACKAGE, src / "dptree_opt",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(out), str(src)], check=True, cwd=tmp_path)
    (wheel,) = out.glob("dptree_opt-*.whl")
    assert "dptree_opt/py.typed" in zipfile.ZipFile(wheel).namelist()


@pytest.mark.slow
def test_mypy_is_clean():
    pytest.importorskip("mypy")
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout[-5000:]


# ---- behaviour bugs the checker found (each raised TypeError where a ValueError is due) ----

@pytest.mark.parametrize("fn", ["theorem_iv_1", "theorem_iv_1_gaussian"])
def test_closed_form_refuses_a_bad_scalar_budget_with_a_value_error(fn):
    """A scalar level budget <= 0 used to fail while formatting the message
    (``list(-1.0)``: TypeError) instead of the ValueError naming the parameter."""
    from dptree_opt import closed_forms

    with pytest.raises(ValueError, match="level_"):
        getattr(closed_forms, fn)([2], -1.0)


def test_split_budget_refuses_a_scalar_budget_when_no_level_is_noisy():
    """``level_budgets`` given as a number with no noisy level used to hit ``len(0.5)``
    (TypeError) instead of the ValueError naming ``level_budgets``."""
    from dptree_opt.privacy import split_budget

    with pytest.raises(ValueError, match="level_budgets"):
        split_budget(1.0, 0, 0.5)
    assert split_budget(1.0, 0).size == 0
