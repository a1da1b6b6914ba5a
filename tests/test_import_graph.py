"""The package's import structure, read with ast by tests/import_graph.py (never imported).

The house rules (no import cycle, no function-level import, no private name across modules, no
module above 800 lines) do not hold yet, so the first four tests are ratchets: they hold the
offenders known today, fail on a new one, and fail when a listed one has gone, so that the lists
can only shrink. `python tests/import_graph.py --lists` prints the current lists to paste here;
`python tests/import_graph.py` prints where each one is.
"""

import ast
import textwrap

import pytest
from import_graph import MAX_LINES, build, chain, main, predicate_calls_outside, report

REGENERATE = "python tests/import_graph.py --lists"

KNOWN_CYCLES = [
]

KNOWN_FUNCTION_IMPORTS = [
]

KNOWN_PRIVATE_IMPORTS = [
]

KNOWN_OVER_800_LINES = [
]


@pytest.fixture(scope="module")
def graph():
    return build()


def _ratchet(what, found, known, where):
    """Fail on a new offender (with `where(key)`) or on a listed one that has gone."""
    dupes = sorted({k for k in known if known.count(k) > 1})
    assert not dupes, f"listed twice in the known {what}: {dupes}"
    new, gone = sorted(set(found) - set(known)), sorted(set(known) - set(found))
    msgs = []
    if new:
        msgs.append(f"new {what} (fix the code; do not add it to the list):\n"
                    + "\n".join(f"  {where(k)}" for k in new))
    if gone:
        msgs.append(f"listed {what} no longer found: remove it from the list "
                    f"(`{REGENERATE}` prints the current lists):\n"
                    + "\n".join(f"  {k!r}" for k in gone))
    assert not msgs, "\n".join(msgs)


def test_no_new_import_cycle(graph):
    _ratchet("import cycles", graph.cycles(), KNOWN_CYCLES,
             lambda c: " ".join(c) if c[0] == "SCC" else chain(graph, c, where=True))


def test_no_new_function_level_import(graph):
    at = {f.key: f"{f.path}:{f.line}" for f in graph.function_imports}
    _ratchet("function-level imports", [f.key for f in graph.function_imports],
             KNOWN_FUNCTION_IMPORTS, lambda k: f"{at[k]}  {k[1]}() imports {k[2]}")


def test_no_new_private_import(graph):
    at = {p.key: f"{p.path}:{p.line}" for p in graph.private_imports}
    _ratchet("private names imported across modules", [p.key for p in graph.private_imports],
             KNOWN_PRIVATE_IMPORTS, lambda k: f"{at[k]}  {k[1]}.{k[2]}")


def test_no_new_module_over_800_lines(graph):
    _ratchet(f"modules above {MAX_LINES} lines", graph.over(MAX_LINES), KNOWN_OVER_800_LINES,
             lambda m: f"{graph.files[m]}: {graph.lines[m]} lines")


def test_no_cycle_at_import_time(graph):
    """Not a ratchet: holds today. A cycle of imports that all run at import time."""
    assert graph.components(import_time=True) == []


# -- the tool itself, on synthetic packages ---------------------------------------------------
def _package(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


DIRTY = {
    "__init__.py": "from .a import f\n",
    # a -> b at import time; b -> a only inside a def: a cycle closed by a function-level import
    "a.py": "from . import b\n\ndef f():\n    return b.g()\n",
    "b.py": """\
        import json
        from .c import _helper, public
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .d import Thing

        def g():
            import math
            from .a import f
            return f, json, math
        """,
    # a private name read as an attribute of an imported module
    "c.py": "import pkg.d as d\n\ndef _helper():\n    return d._secret\n\npublic = 1\n",
    "d.py": "_secret = 2\n\nclass Thing:\n    pass\n",
    # a package whose __init__ imports a submodule that imports the package's facade: a cycle
    # at import time (sub -> sub.m -> sub); sub.m's import of sibling sub.n by its absolute
    # name is no edge to sub (sub's __init__ is already running when sub.m runs)
    "sub/__init__.py": "from .m import h\nVALUE = 3\n",
    "sub/m.py": "from pkg.sub.n import k\nfrom pkg.sub import VALUE\n\ndef h():\n    return k\n",
    "sub/n.py": "k = 4\n",
    "big.py": "x = 1\n" * (MAX_LINES + 1),
    "edge.py": "x = 1\n" * MAX_LINES,
}


def test_structure_predicates_are_called_only_inside_the_engines():
    """Outside dptree_opt/engines a structure question is asked of the registry, never by
    calling an `is_..._mechanism` predicate (the predicates are the engines' claims)."""
    assert predicate_calls_outside("engines") == []


def test_predicate_scan_finds_a_call_outside(tmp_path):
    """The scan is not vacuous: a predicate called from a module outside `engines` is found,
    one called inside is not."""
    pkg = tmp_path / "pkg"
    (pkg / "engines").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("def is_x_mechanism(m):\n    return True\n"
                                                 "y = is_x_mechanism(1)\n")
    (pkg / "user.py").write_text("from .engines import is_x_mechanism\n\n"
                                 "ok = is_x_mechanism(2)\n")
    assert predicate_calls_outside("engines", pkg) == [
        ("pkg.user", 3, "is_x_mechanism")]


def test_tool_finds_a_cycle_a_function_import_and_private_names(tmp_path):
    g = build(_package(tmp_path / "pkg", DIRTY))
    assert g.cycles() == [("pkg.a", "pkg.b"), ("pkg.sub", "pkg.sub.m")]
    assert g.components(import_time=True) == [["pkg.sub", "pkg.sub.m"]]
    assert [f.key for f in g.function_imports] == [("pkg.b", "g", "pkg.a")]
    assert g.function_imports[0].line == 9
    assert sorted(p.key for p in g.private_imports) == [
        ("pkg.b", "pkg.c", "_helper"), ("pkg.c", "pkg.d", "_secret")]
    assert g.over() == ["pkg.big"]
    assert ("pkg.b", "pkg.d") not in g.graph.edges             # TYPE_CHECKING only
    assert ("pkg.sub.m", "pkg.sub.n") in g.graph.edges
    text = report(g)
    assert "pkg.a -> pkg.b ~> pkg.a" in text
    assert "pkg.sub -> pkg.sub.m -> pkg.sub" in text
    assert "b.py:9  g() imports pkg.a" in text


def test_tool_reports_a_clean_package_clean(tmp_path):
    g = build(_package(tmp_path / "pkg", {
        "__init__.py": "from .a import f\nfrom . import b\n",
        "a.py": "import os\n\ndef f():\n    import json\n    return json, os\n",
        # a sibling by its absolute name while the package __init__ imports b: no cycle
        "b.py": "from pkg.a import f\nfrom pkg import a\n\ndef __getattr__(name):\n"
                "    return a.__name__\n",
    }))
    assert g.cycles() == [] and g.components(import_time=True) == []
    assert g.function_imports == [] and g.private_imports == [] and g.over() == []
    assert set(g.graph.edges) == {("pkg", "pkg.a"), ("pkg", "pkg.b"), ("pkg.b", "pkg.a")}


def test_lists_print_paste_ready_literals(tmp_path, capsys):
    root = _package(tmp_path / "pkg", DIRTY)
    assert main(["--root", str(root), "--lists"]) == 0
    namespace = {node.targets[0].id: ast.literal_eval(node.value)
                 for node in ast.parse(capsys.readouterr().out).body}
    assert namespace["KNOWN_CYCLES"] == [("pkg.a", "pkg.b"), ("pkg.sub", "pkg.sub.m")]
    assert namespace["KNOWN_FUNCTION_IMPORTS"] == [("pkg.b", "g", "pkg.a")]
    assert namespace["KNOWN_PRIVATE_IMPORTS"] == [
        ("pkg.b", "pkg.c", "_helper"), ("pkg.c", "pkg.d", "_secret")]
    assert namespace["KNOWN_OVER_800_LINES"] == ["pkg.big"]


def test_ratchet_fails_on_a_new_entry_and_on_a_gone_one():
    _ratchet("things", ["a", "b"], ["a", "b"], str)
    with pytest.raises(AssertionError, match=r"new things \(fix the code.*\n\s+c\n"):
        _ratchet("things", ["a", "b", "c"], ["a", "b"], str)
    with pytest.raises(AssertionError, match="no longer found: remove it from the list"):
        _ratchet("things", ["a"], ["a", "b"], str)
    with pytest.raises(AssertionError, match="listed twice"):
        _ratchet("things", ["a"], ["a", "a"], str)


def test_root_must_be_a_package(tmp_path):
    with pytest.raises(ValueError, match="root"):
        build(tmp_path)
