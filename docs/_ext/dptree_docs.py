"""Sphinx extension of the dptree_opt documentation site.

At ``builder-inited`` it generates, into the source tree (git-ignored folders):

* ``api/generated/<module>.md``: one API page per public module: ``dptree_opt`` itself (the
  names of ``dptree_opt.__all__`` that are not modules), every module named in
  ``dptree_opt.__all__``, and every other module or subpackage of ``dptree_opt`` that declares
  an ``__all__``; each object is documented once, on the first page that lists it (later pages
  link to it; a page with nothing new is left out). ``api/generated/cli_help.md``: the
  ``--help`` of every subcommand.
* ``papers/items/<stem>.md`` (+ ``<stem>.png``): one page per item of ``dptree-opt figures
  --quick`` (the reproduced paper figures and the beyond-the-papers studies): the claim, the
  figure and the table of checks. The figures run once per build (about 30 s on 2 cores) into
  ``_build/figures``; set ``DPTREE_DOCS_FIGURES=DIR`` to reuse the output of an earlier
  ``dptree-opt figures --quick --out DIR``. A failed check is a build warning (an error under
  ``-W``).

It also renders every docstring that is not valid reStructuredText as a literal block (most
docstrings are plain text with formulas), and warns when docs/engines.md differs from
``dptree-opt engines --format markdown``.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

from docutils.core import publish_doctree
from dptree_opt.cli import build_parser  # the checkout's package: conf.py puts it on the path
from sphinx.util import logging

LOG = logging.getLogger(__name__)
DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
PACKAGE = "dptree_opt"
CLI = "import sys; from dptree_opt.cli import main; sys.exit(main(sys.argv[1:]))"


# ------------------------------------------------------------------------ small helpers
def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (keeps incremental builds incremental)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _prune(folder: Path, keep: set[str]) -> None:
    """Remove generated files of ``folder`` that this build no longer produces."""
    for p in folder.glob("*"):
        if p.is_file() and p.name not in keep:
            p.unlink()


# ------------------------------------------------------------------------ API pages
def _public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, obj in vars(module).items()
                 if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__
                 and (inspect.isclass(obj) or inspect.isfunction(obj))]
    return list(names)


def _api_modules() -> list[types.ModuleType]:
    top = importlib.import_module(PACKAGE)
    mods = [top]
    for name in top.__all__:
        obj = getattr(top, name)
        if isinstance(obj, types.ModuleType):
            mods.append(obj)
    pkg_dir = Path(top.__file__).parent
    found = [p.parent.name for p in pkg_dir.glob("*/__init__.py")] + [
        p.stem for p in pkg_dir.glob("*.py") if p.stem != "__init__"]
    for stem in sorted(found):  # every other module or subpackage that declares __all__
        name = f"{PACKAGE}.{stem}"
        if name in {m.__name__ for m in mods} or stem.startswith("_"):
            continue
        mod = importlib.import_module(name)
        if hasattr(mod, "__all__"):
            mods.append(mod)
    return [mods[0]] + sorted(mods[1:], key=lambda m: m.__name__)


def _directive(obj) -> str | None:
    if inspect.isclass(obj):
        return "autoclass"
    if callable(obj):
        return "autofunction"
    return None


def generate_api(out: Path) -> None:
    """One page per public module (see the module docstring); objects documented once."""
    seen: dict[int, str] = {}
    pages = []
    for mod in _api_modules():
        name = mod.__name__
        lines = [f"# `{name}`", "", "```{eval-rst}", f".. automodule:: {name}", ""]
        others, data = [], []
        for n in _public_names(mod):
            obj = getattr(mod, n, None)
            if obj is None or isinstance(obj, types.ModuleType):
                continue
            kind = _directive(obj)
            if kind is None:
                data.append(n)
                continue
            if id(obj) in seen:
                others.append(f":py:obj:`{n} <{seen[id(obj)]}>`")
                continue
            seen[id(obj)] = f"{name}.{n}"
            opts = ["   :members:", "   :show-inheritance:"] if kind == "autoclass" else []
            lines += [f".. {kind}:: {name}.{n}", *opts, ""]
        if data:
            lines += ["Constants: " + ", ".join(f"``{n}``" for n in data) + ".", ""]
        if others:
            lines += ["Also exported here (documented on the page shown): " + ", ".join(others)
                      + ".", ""]
        lines += ["```", ""]
        if mod.__name__ != PACKAGE and not any(ln.startswith(".. auto") and "automodule" not in ln
                                               for ln in lines):
            continue  # only re-exports of objects documented on an earlier page
        fname = f"{name}.md"
        _write_if_changed(out / fname, "\n".join(lines))
        pages.append(fname)
    _prune(out, set(pages) | {"cli_help.md"})


# ------------------------------------------------------------------------ docstrings
_RST_CACHE: dict[str, str] = {}


def rst_problem(text: str, env=None) -> str:
    """The first docutils warning on ``text`` ('' when it is valid reST). Reported to a
    buffer, not printed; Sphinx's roles are known here (this runs inside the build's reader)."""
    if text not in _RST_CACHE:
        stream = io.StringIO()
        try:
            publish_doctree(text, settings_overrides={
                "report_level": 2, "halt_level": 5, "warning_stream": stream,
                "file_insertion_enabled": False, "raw_enabled": False, "env": env})
            problem = stream.getvalue().strip().splitlines()
            _RST_CACHE[text] = problem[0] if problem else ""
        except Exception as exc:  # noqa: BLE001 - any parser failure: not valid reST
            _RST_CACHE[text] = f"{type(exc).__name__}: {exc}"
    return _RST_CACHE[text]


def literal_unless_rst(app, what, name, obj, options, lines) -> None:
    """``autodoc-process-docstring`` hook (after napoleon): keep valid reST, otherwise show the
    original docstring as a literal block (and list it in _build/literal_docstrings.txt)."""
    if not lines:
        return
    problem = rst_problem("\n".join(lines), app.env)
    if not problem:
        return
    original = inspect.getdoc(obj) or "\n".join(lines)
    found = getattr(app.env, "dptree_literal_docstrings", {})
    found[name] = problem.replace("<string>", "docstring line")
    app.env.dptree_literal_docstrings = found
    lines[:] = ["::", ""] + ["    " + ln if ln else "" for ln in original.splitlines()] + [""]


# ------------------------------------------------------------------------ paper pages
def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.6g}"
    return str(v)


def _cell(v) -> str:
    return _fmt(v).replace("|", "\\|").replace("\n", " ")


def _readme_sections() -> dict[str, str]:
    """paper_figures/README.md's sections by script stem ('## ... — `stem.py`')."""
    path = ROOT / "paper_figures" / "README.md"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    out = {}
    parts = re.split(r"^(## .*)$", text, flags=re.MULTILINE)
    for head, body in zip(parts[1::2], parts[2::2]):
        m = re.search(r"`(\w+)\.py`", head)
        if m:
            out[m.group(1)] = body.split("\n---")[0].strip()
    return out


def _script_summary(script: str) -> str:
    path = ROOT / script
    try:
        tree = compile(path.read_text(encoding="utf-8"), str(path), "exec", 0x400)  # AST only
        doc = inspect.cleandoc(tree.body[0].value.value)  # type: ignore[attr-defined]
    except (OSError, SyntaxError, AttributeError, IndexError):
        return ""
    return doc if isinstance(doc, str) else ""


def _run_figures(out: Path) -> Path:
    reuse = os.environ.get("DPTREE_DOCS_FIGURES")
    if reuse:
        return Path(reuse)
    out.mkdir(parents=True, exist_ok=True)
    LOG.info("running dptree-opt figures --quick (about 30 s) ...")
    proc = subprocess.run([sys.executable, "-c", CLI, "figures", "--quick", "--out", str(out),
                           "--force", "--no-progress"], cwd=ROOT, capture_output=True,
                          text=True)
    if proc.returncode not in (0, 1):
        LOG.warning("dptree-opt figures failed (exit %s): %s", proc.returncode,
                    proc.stderr[-2000:])
    return out


def _item_page(item: dict, claims: dict[str, str], fig_dir: Path, out: Path) -> str | None:
    script = item.get("script", "")
    stem = Path(script).stem
    checks = item.get("checks", [])
    summary = "" if item.get("title") else _script_summary(script)
    head, _, summary = summary.partition("\n\n")  # a study's docstring: title, blank, text
    title = (item.get("title") or " ".join(head.split()).rstrip(".")
             or stem.replace("_", " "))
    passed = sum(bool(c.get("ok")) for c in checks)
    lines = [f"# {title}", "",
             f"Script `{script}` · {passed}/{len(checks)} checks passed · "
             f"{item.get('seconds', 0):.1f} s in quick mode "
             f"(`dptree-opt figures --quick --only {stem}`).", ""]
    if item.get("error"):
        LOG.warning("figure item %s failed: %s", stem, item["error"])
        lines += [f"**This item failed:** `{item['error']}`", ""]
    for c in checks:
        if not c.get("ok"):
            LOG.warning("figure item %s: check failed: %s", stem, c.get("what"))
    claim = claims.get(stem)
    if claim:
        claim = re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", claim, flags=re.MULTILINE)
        lines += ["## What the paper says and what is reproduced", "", claim, ""]
    elif summary.strip():
        lines += ["## What the study shows", "", "```text", summary.strip(), "```", ""]
    png = fig_dir / f"{stem}.png"
    if png.is_file():
        _write_bytes_if_changed(out / png.name, png.read_bytes())
        lines += ["## Figure", "", "```{image} " + png.name, f":alt: {title}", ":width: 100%",
                  "```", ""]
    lines += ["## Checks", "",
              "| check | reproduced | expected | deviation | source | ok |",
              "|---|---|---|---|---|---|"]
    for c in checks:
        lines.append("| " + " | ".join(_cell(c.get(k)) for k in
                                          ("what", "reproduced", "expected", "deviation",
                                           "source")) + f" | {'pass' if c.get('ok') else '**FAIL**'} |")
    lines.append("")
    return "\n".join(lines)


def _write_bytes_if_changed(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


def generate_papers(out: Path, fig_dir: Path) -> None:
    """One page per item of figures_summary.json (paper items first, then the studies)."""
    summary = fig_dir / "figures_summary.json"
    if not summary.is_file():
        LOG.warning("no %s: the paper pages are not generated", summary)
        return
    items = json.loads(summary.read_text(encoding="utf-8"))["items"]
    claims = _readme_sections()
    keep = set()
    for item in items:
        stem = Path(item.get("script", "?")).stem
        page = _item_page(item, claims, fig_dir, out)
        folder = "paper" if item.get("script", "").startswith("paper_figures/") else "study"
        name = f"{folder}_{stem}.md"
        _write_if_changed(out / name, page)
        keep |= {name, f"{stem}.png"}
    _prune(out, keep)


# ------------------------------------------------------------------------ CLI help
def generate_cli_help(out: Path) -> None:
    """``cli_help.md``: the ``--help`` text of ``dptree-opt`` and of every subcommand."""
    os.environ.setdefault("COLUMNS", "100")  # argparse wraps to the terminal width
    parser = build_parser()
    lines = ["# Command-line help", "",
             "The `--help` text of `dptree-opt` and of each subcommand, generated from the "
             "parser when the site is built.", "", "```text", parser.format_help().rstrip(),
             "```", ""]
    for name, sub in parser.commands.items():
        lines += [f"## `dptree-opt {name}`", "", "```text", sub.format_help().rstrip(), "```",
                  ""]
    _write_if_changed(out / "cli_help.md", "\n".join(lines))


# ------------------------------------------------------------------------ engines.md
def check_engines_page() -> None:
    proc = subprocess.run([sys.executable, "-c", CLI, "engines", "--format", "markdown"],
                          cwd=ROOT, capture_output=True, text=True)
    page = (DOCS / "engines.md").read_text(encoding="utf-8")
    if proc.returncode != 0 or proc.stdout != page:
        LOG.warning("docs/engines.md is not the output of `dptree-opt engines --format markdown`"
                    ": regenerate it (dptree-opt engines --format markdown > docs/engines.md)")


def on_builder_inited(app) -> None:
    generate_api(DOCS / "api" / "generated")
    generate_cli_help(DOCS / "api" / "generated")
    fig_dir = _run_figures(Path(app.outdir).parent / "figures")
    generate_papers(DOCS / "papers" / "items", fig_dir)
    check_engines_page()


def on_build_finished(app, exc) -> None:
    found = getattr(app.env, "dptree_literal_docstrings", {})
    if found and exc is None:
        report = Path(app.outdir).parent / "literal_docstrings.txt"
        report.write_text("".join(f"{n}: {why}\n" for n, why in sorted(found.items())),
                          encoding="utf-8")
        LOG.info("%d docstrings shown as literal blocks (not valid reST): %s", len(found),
                 report)


def setup(app):
    app.connect("builder-inited", on_builder_inited)
    app.connect("autodoc-process-docstring", literal_unless_rst, priority=900)
    app.connect("build-finished", on_build_finished)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
