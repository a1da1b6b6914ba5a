"""Every public docstring of the package is valid reStructuredText after napoleon.

The docs build (docs/_ext/dptree_docs.py) shows a docstring that is not valid reST as a literal
block and lists it in ``_build/literal_docstrings.txt``; the build does not fail on it. This
test makes the list a ratchet: it runs the build's own check (``dptree_docs.rst_problem``,
after ``sphinx.ext.napoleon`` with the site's settings, Sphinx's roles known) on the
docstrings the API pages document (each module's docstring; each public object of a module's
``__all__`` once, on the first page that lists it; a class's own public members), so a new
plain-text docstring fails here without building the site (about 3 s).

``EXPECTED_FAILURES`` names the docstrings still being fixed, with their owner; it may only
shrink: an entry whose docstring has become valid fails :func:`test_expected_failures_are_current`
until it is removed.
"""

from __future__ import annotations

import ast
import inspect
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# documented name (as in literal_docstrings.txt) -> who fixes it; remove an entry once fixed
# (empty: every entry of the last build's literal_docstrings.txt has been fixed; an entry looks
# like "dptree_opt.data_release.BinSpec": "typing round 2, data_release/ owner")
EXPECTED_FAILURES: dict[str, str] = {}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Sphinx:
    """A Sphinx application with the site's napoleon settings (not the site's own conf.py:
    its extension generates the API and paper pages when the application starts)."""
    pytest.importorskip("sphinx")
    from sphinx.application import Sphinx

    src = tmp_path_factory.mktemp("docstrings_rst")
    napoleon = {}  # the site's napoleon_* settings (literals in docs/conf.py)
    for node in ast.parse((DOCS / "conf.py").read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.startswith("napoleon_")):
            napoleon[node.targets[0].id] = ast.literal_eval(node.value)
    assert napoleon.get("napoleon_numpy_docstring") is True, napoleon
    (src / "conf.py").write_text(
        "extensions = ['sphinx.ext.autodoc', 'sphinx.ext.napoleon', 'sphinx.ext.mathjax']\n"
        + "".join(f"{k} = {v!r}\n" for k, v in sorted(napoleon.items())), encoding="utf-8")
    (src / "index.rst").write_text("index\n=====\n", encoding="utf-8")
    sphinx = Sphinx(str(src), str(src), str(src / "_build"), str(src / "_doctrees"), "html",
                    status=None, warning=None, freshenv=True)
    # as while the build reads a page: unprefixed roles (:class:) are the Python domain's
    sphinx.env.prepare_settings("index")
    sphinx.env.temp_data["default_domain"] = sphinx.env.domains["py"]
    return sphinx


def _members(cls: type) -> Iterator[tuple[str, object]]:
    """A class's own public members that ``autoclass :members:`` documents (with a
    docstring; ``undoc-members`` is off)."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property) or inspect.isfunction(value) or inspect.isclass(value):
            yield name, value


def _documented(ext: types.ModuleType) -> Iterator[tuple[str, str, object]]:
    """(what, name, object) of every docstring the API pages show, named as the build
    names it (the page of its first listing)."""
    seen: set[int] = set()
    for mod in ext._api_modules():
        yield "module", mod.__name__, mod
        for n in ext._public_names(mod):
            obj = getattr(mod, n, None)
            if obj is None or isinstance(obj, types.ModuleType) or ext._directive(obj) is None:
                continue
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            name = f"{mod.__name__}.{n}"
            if inspect.isclass(obj):
                yield "class", name, obj
                for m, member in _members(obj):
                    kind = ("property" if isinstance(member, property) else
                            "class" if inspect.isclass(member) else "method")
                    yield kind, f"{name}.{m}", member
            else:
                yield "function", name, obj


def _problems(ext: types.ModuleType, app: Sphinx) -> dict[str, str]:
    """Documented name -> the first reST problem of its docstring after napoleon."""
    from sphinx.util.docstrings import prepare_docstring
    from sphinx.util.docutils import sphinx_domains

    env = app.env
    found = {}
    with sphinx_domains(env):
        for what, name, obj in _documented(ext):
            doc = inspect.getdoc(obj.fget if isinstance(obj, property) else obj)
            if not doc:
                continue
            lines = prepare_docstring(doc)
            # the build's hook: napoleon turns the numpy sections into reST fields
            app.emit("autodoc-process-docstring", what, name, obj, {}, lines)
            problem = ext.rst_problem("\n".join(lines), env)
            if problem:
                found[name] = problem.replace("<string>", "docstring line")
    return found


@pytest.fixture(scope="module")
def problems(ext: types.ModuleType, app: Sphinx) -> dict[str, str]:
    return _problems(ext, app)


def test_the_check_sees_the_public_docstrings(ext: types.ModuleType) -> None:
    """The walk reaches the objects the API pages document (a walk that found nothing
    would pass the test below)."""
    names = {name for _, name, _ in _documented(ext)}
    for expected in ("dptree_opt", "dptree_opt.Mechanism", "dptree_opt.cdf_from_measurements",
                     "dptree_opt.PrivateCDF.band", "dptree_opt.consistency.project_cdf",
                     "dptree_opt.stream.Counter"):
        assert expected in names, expected
    assert len(names) > 200


def test_the_check_flags_plain_text_after_napoleon(ext: types.ModuleType, app: Sphinx) -> None:
    """napoleon's sections become reST fields; a ``|x|`` in them, or a parameter written as
    one line of text followed by free text (the old ``cdf_from_measurements``), is not."""
    from sphinx.util.docutils import sphinx_domains

    def check(doc: str) -> tuple[list[str], str]:
        lines = inspect.cleandoc(doc).splitlines()
        app.emit("autodoc-process-docstring", "function", "m.f", None, {}, lines)
        with sphinx_domains(app.env):
            return lines, ext.rst_problem("\n".join(lines), app.env)

    good = """Sum.

    Parameters
    ----------
    x : array
        The bins; ``|x|`` and :func:`len` and :math:`x^2`.

    Returns
    -------
    float
        The total.
    """
    lines, problem = check(good)
    assert problem == "" and ":param x: The bins; ``|x|`` and :func:`len` and :math:`x^2`." \
        in lines, lines  # napoleon ran
    assert "substitution" in check(good.replace("``|x|``", "|x|"))[1]
    old = """Estimate.

    Parameters
    ----------
    y : array (rows,), NaN allowed only on unmeasured rows.
    weighted : weight the projection by 1 / se_t^2;
        prefixes with se_t = 0 are not allowed then.

    Returns a :class:`PrivateCDF`. Post-processing only.
    """
    assert "Field list ends without a blank line" in check(old)[1]


def test_public_docstrings_are_rest(problems: dict[str, str]) -> None:
    new = {n: why for n, why in problems.items() if n not in EXPECTED_FAILURES}
    assert not new, "docstrings that are not valid reST after napoleon (write ``|x|`` or " \
        "abs(x), put text after the sections in Notes, a blank line before an indented " \
        "block):\n" + "\n".join(f"{n}: {why}" for n, why in sorted(new.items()))


def test_expected_failures_are_current(problems: dict[str, str]) -> None:
    fixed = sorted(set(EXPECTED_FAILURES) - set(problems))
    assert not fixed, "valid reST now: remove from EXPECTED_FAILURES in " \
        "tests/test_docstrings_rst.py: " + ", ".join(fixed)
