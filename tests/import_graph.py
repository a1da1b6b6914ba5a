"""The import graph of a package, read with `ast` (the package is never imported).

`python tests/import_graph.py [--root DIR]` prints the report: import cycles, function-level
imports of package modules, private names imported across modules, the largest modules.
`--lists` prints the ratchet lists of tests/test_import_graph.py as Python literals to paste;
`--dispatch` counts the structure dispatch (predicates, isinstance on strategy classes,
comparisons of `.kind`). DIR defaults to this checkout's `dptree_opt`.

An edge a -> b means module a imports module b; it is an import-time edge when the statement
runs when a is imported (module level, class bodies, `if`/`try` blocks), a function-level one
when every such statement is inside a def. Imports under `if TYPE_CHECKING:` are no edge.
Cycles are counted over both kinds (a function-level import that closes a cycle only hides it).
Relative imports are resolved; `from p import x` is an edge to the submodule `p.x` when it
exists (and also to `p` when `p`'s `__init__` rebinds the name `x`, as `from .x import x`
does), else to `p` itself (its `__init__`, the facade). Importing `a.b.c` also runs the
`__init__` of `a` and `a.b`, so those are edges too, except for packages that contain the
importing module: their `__init__` has already started before the module runs, so importing
one of their submodules adds no dependency (importing a facade name still does: that is how a
package `__init__` -> submodule -> facade cycle shows).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "dptree_opt"
MAX_LINES = 800
# A strongly connected component with more simple cycles than this (their number can grow
# exponentially with its size) is reported as a whole instead of cycle by cycle.
MAX_CYCLES = 500


@dataclass(frozen=True)
class FunctionImport:
    """An import of a package module inside a def body (`function` is its qualified name)."""
    module: str
    function: str
    target: str
    path: Path
    line: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.module, self.function, self.target)


@dataclass(frozen=True)
class PrivateImport:
    """A private name (`_x`, not dunder) of module `source` imported or read by `module`."""
    module: str
    source: str
    name: str
    path: Path
    line: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.module, self.source, self.name)


@dataclass
class ImportGraph:
    """Modules of one package (dotted name -> file, line count) and their import graph.

    `graph` has an edge a -> b when module a imports module b, with the statements' `lines` and
    `import_time` (True when at least one of them runs when a is imported; False when every one
    is inside a def, i.e. a function-level import).
    """
    package: str
    files: dict[str, Path]
    lines: dict[str, int]
    graph: nx.DiGraph
    function_imports: list[FunctionImport] = field(default_factory=list)
    private_imports: list[PrivateImport] = field(default_factory=list)

    def _graph(self, import_time: bool) -> nx.DiGraph:
        if not import_time:
            return self.graph
        return self.graph.edge_subgraph(
            [(a, b) for a, b, t in self.graph.edges(data="import_time") if t])

    def components(self, import_time: bool = False) -> list[list[str]]:
        """Strongly connected components with more than one module, each sorted, largest first
        (of the import-time edges only when `import_time`, else of every import)."""
        comps = [sorted(c) for c in nx.strongly_connected_components(self._graph(import_time))
                 if len(c) > 1]
        return sorted(comps, key=lambda c: (-len(c), c))

    def cycles(self, import_time: bool = False) -> list[tuple[str, ...]]:
        """Every simple import cycle, rotated to start at its smallest module name, sorted.

        A component with more than MAX_CYCLES simple cycles is given as one tuple of its sorted
        modules after a leading "SCC" entry.
        """
        graph, out = self._graph(import_time), []
        for comp in self.components(import_time):
            cycles = list(itertools.islice(nx.simple_cycles(graph.subgraph(comp)),
                                           MAX_CYCLES + 1))
            if len(cycles) > MAX_CYCLES:
                out.append(("SCC", *comp))
                continue
            for cyc in cycles:
                i = cyc.index(min(cyc))
                out.append(tuple(cyc[i:] + cyc[:i]))
        return sorted(out, key=lambda c: (len(c), c))

    def over(self, max_lines: int = MAX_LINES) -> list[str]:
        """Modules with more than `max_lines` lines, sorted by name."""
        return sorted(m for m, n in self.lines.items() if n > max_lines)


def _module_name(package_dir: Path, path: Path) -> str:
    parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of Name/Attribute nodes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _ModuleVisitor(ast.NodeVisitor):
    """Collects, for one module, its import-time edges, function-level imports and private uses."""

    def __init__(self, graph: ImportGraph, module: str, facades: dict[str, set[str]]):
        self.g, self.module, self.facades = graph, module, facades
        self.is_pkg = graph.files[module].name == "__init__.py"
        self.scope: list[tuple[str, str]] = []            # (kind "def"/"class", name)
        self.bindings: list[dict[str, str]] = [{}]        # local name -> package module, per scope
        self.type_checking = 0

    # -- scopes ---------------------------------------------------------------------------
    def _in_def(self) -> bool:
        return any(kind == "def" for kind, _ in self.scope)

    def _scoped(self, kind: str, node, outer: list) -> None:
        """Visit `outer` (decorators, defaults, bases) in the enclosing scope, the body in its
        own scope."""
        for child in outer:
            if child is not None:
                self.visit(child)
        self.scope.append((kind, node.name))
        self.bindings.append({})
        for stmt in node.body:
            self.visit(stmt)
        self.bindings.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node):
        self._scoped("def", node, [*node.decorator_list, *node.args.defaults,
                                   *node.args.kw_defaults])

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._scoped("class", node, [*node.decorator_list, *node.bases, *node.keywords])

    def visit_If(self, node):
        if _is_type_checking(node.test):
            self.type_checking += 1
            for stmt in node.body:
                self.visit(stmt)
            self.type_checking -= 1
            for stmt in node.orelse:
                self.visit(stmt)
        else:
            self.generic_visit(node)

    # -- imports --------------------------------------------------------------------------
    def _resolve(self, level: int, name: str | None) -> str | None:
        if level == 0:
            return name
        base = self.module.split(".")
        if not self.is_pkg:
            base = base[:-1]
        if level - 1 >= len(base):
            return None
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([name] if name else []))

    def _contains_me(self, pkg: str) -> bool:
        return self.module == pkg or self.module.startswith(pkg + ".")

    def _record(self, node, target: str, parents_of: str | None = None) -> None:
        """An import of package module `target` (and, for `parents_of`, its parent packages)."""
        targets = [target]
        if parents_of is not None:
            parts = parents_of.split(".")
            targets += [".".join(parts[:i]) for i in range(1, len(parts))
                        if not self._contains_me(".".join(parts[:i]))]
        targets = [t for t in targets if t in self.g.files and t != self.module]
        deferred = self._in_def()
        if deferred and target in targets:
            self.g.function_imports.append(FunctionImport(
                self.module, ".".join(name for _, name in self.scope), target,
                self.g.files[self.module], node.lineno))
        if self.type_checking:
            return
        for t in targets:
            if not self.g.graph.has_edge(self.module, t):
                self.g.graph.add_edge(self.module, t, lines=[], import_time=False)
            edge = self.g.graph.edges[self.module, t]
            edge["lines"].append(node.lineno)
            edge["import_time"] |= not deferred

    def visit_Import(self, node):
        for alias in node.names:
            name = alias.name
            if name.split(".")[0] != self.g.package:
                continue
            self._record(node, name, parents_of=name)
            if alias.asname:
                self.bindings[-1][alias.asname] = name
            else:
                self.bindings[-1][name.split(".")[0]] = name.split(".")[0]

    def visit_ImportFrom(self, node):
        source = self._resolve(node.level, node.module)
        if source is None or source.split(".")[0] != self.g.package:
            return
        facade = False
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            if sub in self.g.files:
                self._record(node, sub, parents_of=sub)
                if alias.name in self.facades.get(source, ()):
                    facade = True
                else:
                    self.bindings[-1][alias.asname or alias.name] = sub
            else:
                facade = True
                if _private(alias.name) and source != self.module:
                    self.g.private_imports.append(PrivateImport(
                        self.module, source, alias.name, self.g.files[self.module],
                        node.lineno))
        if facade:
            self._record(node, source, parents_of=source)

    # -- private attributes of imported modules ---------------------------------------------
    def visit_Attribute(self, node):
        if _private(node.attr):
            base = _dotted(node.value)
            if base is not None:
                head, _, rest = base.partition(".")
                for scope in reversed(self.bindings):
                    if head in scope:
                        source = scope[head] + ("." + rest if rest else "")
                        if source in self.g.files and source != self.module:
                            self.g.private_imports.append(PrivateImport(
                                self.module, source, node.attr, self.g.files[self.module],
                                node.lineno))
                        break
        self.generic_visit(node)


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a package `__init__` binds at import time to something other than its submodule
    of that name (`from . import x` keeps the submodule; `from .x import x` replaces it)."""
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)                  # its body runs later (or in its own scope)
            continue
        if isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names
                         if not (node.level == 1 and node.module is None
                                 and a.asname in (None, a.name)))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return names


def _package_dir(root: Path | str) -> Path:
    root = Path(root).resolve()
    if not (root / "__init__.py").is_file():
        raise ValueError(f"root: {root} is not a package directory (no __init__.py)")
    return root


def _parse(package_dir: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" not in path.parts:
            out[_module_name(package_dir, path)] = (path, path.read_text(encoding="utf-8"))
    return out


def build(package_dir: Path | str = PACKAGE_DIR) -> ImportGraph:
    """Parse every module under `package_dir` (a package directory) and build its import graph."""
    package_dir = _package_dir(package_dir)
    sources = _parse(package_dir)
    graph = ImportGraph(
        package=package_dir.name,
        files={m: p for m, (p, _) in sources.items()},
        lines={m: len(text.splitlines()) for m, (_, text) in sources.items()},
        graph=nx.DiGraph())
    graph.graph.add_nodes_from(sources)
    trees = {m: ast.parse(text, filename=str(p)) for m, (p, text) in sources.items()}
    facades = {m: _bound_names(trees[m]) for m, (p, _) in sources.items()
               if p.name == "__init__.py"}
    for module in sources:
        _ModuleVisitor(graph, module, facades).visit(trees[module])
    return graph


# -- report ---------------------------------------------------------------------------------
def _rel(graph: ImportGraph, path: Path) -> str:
    root = graph.files[graph.package].parent.parent
    return str(path.relative_to(root))


def chain(graph: ImportGraph, cycle: tuple[str, ...], where: bool = False) -> str:
    """`a -> b ~> a` for a cycle (`~>` a function-level import), with each edge's first
    `file:line` when `where`."""
    out = cycle[0]
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        edge = graph.graph.edges[a, b]
        out += f" {'->' if edge['import_time'] else '~>'} {b}"
        if where:
            out += f" ({_rel(graph, graph.files[a])}:{edge['lines'][0]})"
    return out


def report(graph: ImportGraph, top: int = 10, shown: int = 8) -> str:
    """The human-readable report printed by `python tests/import_graph.py`."""
    edges = graph.graph.edges(data=True)
    out = [(f"package {graph.package}: {len(graph.files)} modules, "
            f"{sum(graph.lines.values())} lines; {len(edges)} import edges between them, "
            f"{sum(1 for *_, d in edges if d['import_time'])} at import time")]
    comps, cycles = graph.components(), graph.cycles()
    hard = graph.components(import_time=True)
    out.append(f"\nimport cycles: {len(comps)} strongly connected components of more than one "
               f"module ({len(hard)} at import time, the rest closed only by function-level "
               f"imports), {sum(c[0] != 'SCC' for c in cycles)} simple cycles "
               f"('->' import time, '~>' function-level)")
    for comp in comps:
        members = set(comp)
        mine = [c for c in cycles if members.issuperset(c[1:] if c[0] == "SCC" else c)]
        out.append(f"  component of {len(comp)}: {', '.join(comp)}")
        if mine and mine[0][0] == "SCC":
            out.append(f"    more than {MAX_CYCLES} simple cycles: not listed")
            mine = []
        out += ["    " + chain(graph, cyc) for cyc in mine[:shown]]
        if len(mine) > shown:
            out.append(f"    ... and {len(mine) - shown} longer cycles (all of them: --lists)")
        sub = graph.graph.subgraph(comp)
        for a, b, data in sorted(sub.edges(data=True)):
            if not data["import_time"]:
                out.append(f"    closed by {_rel(graph, graph.files[a])}:{data['lines'][0]}  "
                           f"{a} ~> {b}")
    fis = sorted(graph.function_imports, key=lambda f: (str(f.path), f.line))
    out.append(f"\nfunction-level imports of package modules: "
               f"{len({(f.path, f.line) for f in fis})} statements, {len(fis)} module targets, "
               f"in {len({f.module for f in fis})} modules")
    for f in fis:
        out.append(f"  {_rel(graph, f.path)}:{f.line}  {f.function}() imports {f.target}")
    pis = sorted(graph.private_imports, key=lambda p: (str(p.path), p.line))
    out.append(f"\nprivate names from another module: {len(pis)} uses, "
               f"{len({p.key for p in pis})} distinct (module, source, name)")
    for p in pis:
        out.append(f"  {_rel(graph, p.path)}:{p.line}  {p.source}.{p.name}")
    biggest = sorted(graph.lines.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    out.append(f"\nlargest modules ({len(graph.over())} above {MAX_LINES} lines):")
    for m, n in biggest:
        out.append(f"  {n:6d}  {_rel(graph, graph.files[m])}")
    return "\n".join(out)


def lists(graph: ImportGraph) -> str:
    """The ratchet lists of tests/test_import_graph.py, as Python literals to paste."""
    def item(x):
        if len(repr(x)) <= 93 or not isinstance(x, tuple):
            return f"    {x!r},\n"
        return "    (\n" + "".join(f"        {y!r},\n" for y in x) + "    ),\n"

    def block(name, items):
        return f"{name} = [\n{''.join(item(x) for x in items)}]\n"
    return "\n".join([
        block("KNOWN_CYCLES", graph.cycles()),
        block("KNOWN_FUNCTION_IMPORTS", sorted({f.key for f in graph.function_imports})),
        block("KNOWN_PRIVATE_IMPORTS", sorted({p.key for p in graph.private_imports})),
        block("KNOWN_OVER_800_LINES", graph.over()),
    ])


# -- structure dispatch counts (the before/after numbers) ----------------------------
PREDICATE = re.compile(r"^(is_\w+_mechanism|has_bridge_structure|\w+_supports)$")


def _classes(trees: dict[str, ast.Module], prefix: str) -> set[str]:
    """Names of the classes defined in module `prefix` or under package `prefix`."""
    return {node.name for m, tree in trees.items() if m == prefix or m.startswith(prefix + ".")
            for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def _count_lines(title: str, counts: Counter) -> list[str]:
    return [f"{title}: {sum(counts.values())}"] + [
        f"  {n:4d}  {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def predicate_calls_outside(subpackage: str, package_dir: Path | str = PACKAGE_DIR) -> list:
    """(module, line, name) of every call of a structure predicate (PREDICATE) in a module
    outside ``package.subpackage``: structure questions outside the engines go to the
    registry (``engines.select`` / ``engines.claimed_by``)."""
    package_dir = _package_dir(package_dir)
    inside = f"{package_dir.name}.{subpackage}"
    out = []
    for m, (path, text) in _parse(package_dir).items():
        if m == inside or m.startswith(inside + "."):
            continue
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.Call):
                fn = (_dotted(node.func) or "").rsplit(".", 1)[-1]
                if PREDICATE.match(fn):
                    out.append((m, node.lineno, fn))
    return sorted(out)


def dispatch(package_dir: Path | str = PACKAGE_DIR) -> str:
    """Counts of structure dispatch in a package: "is this structure" predicates (PREDICATE)
    defined and called, isinstance checks on the classes of its `strategies` and `workloads`,
    comparisons of a `.kind` attribute (and of a variable named `kind`)."""
    package_dir = _package_dir(package_dir)
    sources = _parse(package_dir)
    trees = {m: ast.parse(text, filename=str(p)) for m, (p, text) in sources.items()}
    families = {what: _classes(trees, f"{package_dir.name}.{what}")
                for what in ("strategies", "workloads")}
    defs, calls, modules = [], Counter(), {"calls": set(), "kind": set()}
    checks = {what: Counter() for what in families}
    kinds = Counter()
    for m, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if PREDICATE.match(node.name):
                    defs.append(f"{m}.{node.name}")
            elif isinstance(node, ast.Call):
                fn = (_dotted(node.func) or "").rsplit(".", 1)[-1]
                if PREDICATE.match(fn):
                    calls[fn] += 1
                    modules["calls"].add(m)
                elif fn == "isinstance" and len(node.args) == 2:
                    arg = node.args[1]
                    names = {(_dotted(e) or "").rsplit(".", 1)[-1]
                             for e in (arg.elts if isinstance(arg, ast.Tuple) else [arg])}
                    for what, classes in families.items():
                        if names & classes:
                            checks[what][" | ".join(sorted(names & classes))] += 1
            elif isinstance(node, ast.Compare):
                for x in [node.left, *node.comparators]:
                    if isinstance(x, ast.Attribute) and x.attr == "kind":
                        kinds["x.kind"] += 1
                        modules["kind"].add(m)
                        break
                    if isinstance(x, ast.Name) and x.id == "kind":
                        kinds["variable kind"] += 1
                        break
    out = [f"structure predicates defined: {len(defs)}"] + [f"  {d}" for d in sorted(defs)]
    out += _count_lines(f"calls of a predicate (in {len(modules['calls'])} modules)", calls)
    out += _count_lines("isinstance checks on strategy classes", checks["strategies"])
    out += _count_lines("isinstance checks on workload classes", checks["workloads"])
    out += _count_lines(f"comparisons of .kind (in {len(modules['kind'])} modules) "
                        f"and of a variable named kind", kinds)
    over = sorted((n, m) for m, (_, text) in sources.items()
                  if (n := len(text.splitlines())) > MAX_LINES)
    out.append(f"modules above {MAX_LINES} lines: {len(over)}")
    out += [f"  {n:6d}  {m}" for n, m in reversed(over)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Command line: print the report, the ratchet lists (--lists) or dispatch counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=PACKAGE_DIR,
                        help="package directory to read (default: this checkout's dptree_opt)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--lists", action="store_true",
                       help="print the ratchet lists of tests/test_import_graph.py")
    group.add_argument("--dispatch", action="store_true",
                       help="count structure predicates, isinstance checks, .kind comparisons")
    args = parser.parse_args(argv)
    try:
        if args.dispatch:
            print(dispatch(args.root))
        else:
            graph = build(args.root)
            print(lists(graph) if args.lists else report(graph))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
