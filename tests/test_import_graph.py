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
from import_graph import MAX_LINES, build, chain, main, report

REGENERATE = "python tests/import_graph.py --lists"

KNOWN_CYCLES = [
    ('dptree_opt.data_release.core', 'dptree_opt.data_release.grid'),
]

KNOWN_FUNCTION_IMPORTS = [
    ('dptree_opt.cli._common', 'budget_kwargs', 'dptree_opt.privacy'),
    ('dptree_opt.cli.stream_cmd', '_plot', 'dptree_opt.plotting'),
    ('dptree_opt.data_release.grid', '_check_grid_counts', 'dptree_opt.mechanism'),
    ('dptree_opt.data_release.grid', '_grid_plan', 'dptree_opt.data_release.core'),
    ('dptree_opt.data_release.grid', '_release_cells', 'dptree_opt.data_release.core'),
    ('dptree_opt.data_release.grid', 'release_grid_file', 'dptree_opt.data_release.io'),
    ('dptree_opt.data_release.grid_result', 'GridRelease.plot', 'dptree_opt.plotting'),
    ('dptree_opt.data_release.result', 'Release.plot', 'dptree_opt.plotting'),
    ('dptree_opt.mechanism', 'row_sensitivities', 'dptree_opt.strategies'),
    ('dptree_opt.optimize.node_budgets', 'NodeBudgets.mechanism', 'dptree_opt.mechanism'),
    ('dptree_opt.optimize.node_budgets', 'NodeBudgets.mechanism', 'dptree_opt.strategies'),
    (
        'dptree_opt.optimize.node_budgets',
        'optimal_node_budgets',
        'dptree_opt.optimize.blue_budgets',
    ),
    ('dptree_opt.optimize.result', 'TreeDesign.mechanism', 'dptree_opt.mechanism'),
    ('dptree_opt.optimize.result', 'TreeDesign.mechanism', 'dptree_opt.strategies'),
    ('dptree_opt.pipeline', 'PrivateCDF.plot', 'dptree_opt.plotting'),
    ('dptree_opt.pipeline', 'PrivateCDF.quantile_intervals', 'dptree_opt.quantile_intervals'),
    ('dptree_opt.strategies.optimized', 'kron_gaussian_optimal', 'dptree_opt.workloads'),
    ('dptree_opt.strategies.optimized', 'kron_p_identity', 'dptree_opt.workloads'),
    (
        'dptree_opt.stream.negative_digits',
        'NegativeDigitsEngine.account',
        'dptree_opt.data_release.secure_noise',
    ),
    ('dptree_opt.stream.noise', 'GroupNoise.__init__', 'dptree_opt.data_release.secure_noise'),
    (
        'dptree_opt.stream.noise',
        'float_gaussian_measurement',
        'dptree_opt.data_release.secure_noise',
    ),
]

KNOWN_PRIVATE_IMPORTS = [
    ('dptree_opt.data_release.grid', 'dptree_opt.data_release.core', '_budget'),
    ('dptree_opt.data_release.grid', 'dptree_opt.data_release.core', '_check_budgets'),
    ('dptree_opt.data_release.grid', 'dptree_opt.data_release.core', '_check_histogram_total'),
    ('dptree_opt.data_release.grid', 'dptree_opt.data_release.core', '_check_noise_scales'),
    ('dptree_opt.data_release.grid', 'dptree_opt.data_release.core', '_check_tiny_budget'),
    ('dptree_opt.data_release.grid', 'dptree_opt.data_release.io', '_check_column_names'),
    ('dptree_opt.data_release.grid_result', 'dptree_opt.data_release.result', '_floats'),
    ('dptree_opt.engines.causal', 'dptree_opt.engines.honaker', '_check_variances'),
    ('dptree_opt.engines.causal', 'dptree_opt.engines.honaker', '_layout'),
    ('dptree_opt.engines.causal', 'dptree_opt.engines.honaker', '_level_stats'),
    ('dptree_opt.engines.refined', 'dptree_opt.engines.honaker', '_ivw'),
    ('dptree_opt.engines.refined', 'dptree_opt.engines.honaker', '_left_cover_sums'),
    ('dptree_opt.engines.refined', 'dptree_opt.engines.honaker', '_level_stats'),
    ('dptree_opt.engines.refined', 'dptree_opt.engines.honaker', '_sum_var'),
    ('dptree_opt.strategies.blt', 'dptree_opt.strategies.base', '_readonly'),
    ('dptree_opt.strategies.haar', 'dptree_opt.strategies.base', '_readonly'),
    ('dptree_opt.strategies.implicit_optimum', 'dptree_opt.strategies.base', '_readonly'),
    ('dptree_opt.strategies.interval', 'dptree_opt.strategies.base', '_readonly'),
    ('dptree_opt.strategies.kronecker', 'dptree_opt.strategies.base', '_readonly'),
    ('dptree_opt.strategies.quadtree', 'dptree_opt.strategies.base', '_readonly'),
    ('dptree_opt.strategies.toeplitz', 'dptree_opt.strategies.base', '_readonly'),
    ('dptree_opt.stream.noise', 'dptree_opt.data_release.secure_noise', '_opendp'),
    ('dptree_opt.stream.noise', 'dptree_opt.data_release.secure_noise', '_opendp_measurement'),
]

KNOWN_OVER_800_LINES = [
    'dptree_opt.data_release.io',
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
