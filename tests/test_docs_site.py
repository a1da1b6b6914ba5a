"""The documentation site (docs/, built by Sphinx with docs/conf.py and docs/_ext/).

What is checked here without building the site (the build itself, with warnings as errors, is
its own CI step: see the README): the generated engine table is current, every page is in a
toctree, the README stays short and names the commands, Markdown doctest blocks are closed
properly, and the build extension's pieces (the reST check that turns plain-text docstrings
into literal blocks, the API pages, the paper pages) behave.
"""

from __future__ import annotations

import importlib
import io
import re
from contextlib import redirect_stdout
from pathlib import Path


from dptree_opt.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GENERATED = (DOCS / "_build", DOCS / "api" / "generated", DOCS / "papers" / "items")
BUILD = 'python -m sphinx -W --keep-going -b html docs docs/_build/html'
FENCE = re.compile(r"^(```+|~~~+|:::+)\s*(\{?[\w-]*\}?)(.*)$")
TOCTREE = re.compile(r"^```\{toctree\}\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _pages() -> list[Path]:
    """The site's Markdown sources (not the generated ones, not docs/README.md)."""
    return sorted(p for p in DOCS.rglob("*.md")
                  if not any(g in p.parents for g in GENERATED) and p != DOCS / "README.md")


def _doctest_files() -> list[Path]:
    return _pages() + [ROOT / "README.md"]


def test_engines_page_is_the_generated_table():
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli_main(["engines", "--format", "markdown"]) == 0
    assert out.getvalue() == (DOCS / "engines.md").read_text(encoding="utf-8"), (
        "docs/engines.md is stale: dptree-opt engines --format markdown > docs/engines.md")


def _toctree_entries(page: Path) -> set[Path]:
    found: set[Path] = set()
    for body in TOCTREE.findall(page.read_text(encoding="utf-8")):
        lines = body.splitlines()
        glob = any(ln.strip() == ":glob:" for ln in lines)
        for ln in lines:
            entry = ln.strip()
            if not entry or entry.startswith(":"):
                continue
            entry = re.sub(r"^.*<(.+)>$", r"\1", entry)  # "title <doc>"
            if glob:
                found |= {p.with_suffix("") for p in page.parent.glob(entry + ".md")}
            found.add((page.parent / entry).resolve())
    return {p.resolve() for p in found}


def test_every_page_is_in_a_toctree():
    pages = _pages()
    listed = set().union(*(_toctree_entries(p) for p in pages))
    orphans = [p.relative_to(ROOT).as_posix() for p in pages
               if p != DOCS / "index.md" and p.with_suffix("").resolve() not in listed]
    assert not orphans, "pages in no toctree (add them to docs/index.md or a section index):\n" \
        + "\n".join(orphans)


def test_readme_is_short_and_names_the_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120, "the README is a short entry point: move text to docs/"
    for command in ("pip install -e . && dptree-opt figures --quick",
                    'pip install -e ".[test]" && python -m pytest',
                    'pip install -e ".[docs]" && ' + BUILD):
        assert command in text, f"the README must give: {command}"
    assert "(docs/index.md)" in text, "the README links to the docs index"
    tour = re.search(r"^## A tour\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)
    assert tour and tour.group(1).count(">>> ") >= 10, "the tour is executed doctest code"
    assert BUILD in (DOCS / "conf.py").read_text(encoding="utf-8")


def test_markdown_doctest_blocks_end_with_a_blank_line():
    """A `>>>` block whose last output line touches the closing fence makes the fence part of
    the expected output (the doctest then fails with a confusing diff): say where."""
    bad = []
    for path in _doctest_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        open_at, has_prompt = None, False
        for i, line in enumerate(lines):
            if open_at is None and FENCE.match(line):
                open_at, has_prompt = i, False
            elif open_at is not None and line.strip() in ("```", "~~~", ":::"):
                if has_prompt and lines[i - 1].strip():
                    bad.append(f"{path.relative_to(ROOT)}:{i + 1}")
                open_at = None
            elif open_at is not None and line.lstrip().startswith(">>> "):
                has_prompt = True
    assert not bad, "leave a blank line before the closing fence of a >>> block:\n" + \
        "\n".join(bad)


# ------------------------------------------------------------------ the build extension
def test_rst_check_accepts_rest_and_flags_plain_text(ext):
    assert ext.rst_problem("A ``literal`` and *emphasis*.\n\n- a list\n- of two\n") == ""
    assert ext.rst_problem("sum over |x_i - y_i| of the bins\n")      # a substitution
    assert ext.rst_problem("the sum of *x_i over i\n")                   # an open emphasis
    assert ext.rst_problem("Parameters:\n    x: the bins\n  y\n")     # bad indentation


class _App:
    class env:  # noqa: N801 - stands for Sphinx's build environment
        pass


def test_plain_text_docstring_becomes_a_literal_block(ext):
    def f():
        """Total |x - y|, not reST."""

    lines = ["Total |x - y|, not reST."]
    ext.literal_unless_rst(_App, "function", "m.f", f, {}, lines)
    assert lines[:3] == ["::", "", "    Total |x - y|, not reST."]
    ok = ["Valid ``reST``."]
    ext.literal_unless_rst(_App, "function", "m.g", f, {}, ok)
    assert ok == ["Valid ``reST``."]


def _resolve(dotted: str):
    """The object a directive names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def test_api_pages_document_each_public_object_once(ext, tmp_path):
    import dptree_opt

    ext.generate_api(tmp_path)
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(tmp_path.glob("*.md")))
    directives = re.findall(r"^\.\. auto(?:function|class):: (\S+)$", text, re.MULTILINE)
    objects = [_resolve(d) for d in directives]
    assert len({id(o) for o in objects}) == len(objects), "an object documented twice"
    documented = {id(o) for o in objects}
    public = [n for n in dptree_opt.__all__
              if not isinstance(getattr(dptree_opt, n), type(dptree_opt))]
    missing = [n for n in public if id(getattr(dptree_opt, n)) not in documented]
    assert not missing, f"dptree_opt.__all__ names without an API entry: {missing}"
    assert (tmp_path / "dptree_opt.md").is_file() and (tmp_path / "dptree_opt.stream.md").is_file()


def test_paper_page_shows_claim_figure_and_checks(ext, tmp_path):
    fig_dir = tmp_path / "figs"
    fig_dir.mkdir()
    (fig_dir / "hon_figure4.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    item = {"script": "paper_figures/hon_figure4.py", "title": "[HON] Figure 4", "seconds": 0.5,
            "checks": [{"what": "a | b", "reproduced": 2.4000001, "expected": 2.4,
                        "deviation": 4e-8, "source": "[HON] Sec. 4", "ok": True},
                       {"what": "leaf ratio", "reproduced": 0.605, "expected": 0.667,
                        "deviation": 0.09, "source": "[HON]", "ok": False}]}
    page = ext._item_page(item, {"hon_figure4": "**Source:** [HON] Sec. 4."},
                          fig_dir, tmp_path / "out")
    assert page.startswith("# [HON] Figure 4\n")
    assert "1/2 checks passed" in page and "**Source:** [HON] Sec. 4." in page
    assert "```{image} hon_figure4.png" in page and (tmp_path / "out" / "hon_figure4.png").is_file()
    assert "| a \\| b | 2.4 | 2.4 | 4e-08 | [HON] Sec. 4 | pass |" in page
    assert "| leaf ratio | 0.605 | 0.667 | 0.09 | [HON] | **FAIL** |" in page


def test_every_paper_item_has_its_claim(ext):
    """Each script of paper_figures/ has its section in paper_figures/README.md (the page's
    claim text)."""
    stems = {p.stem for p in (ROOT / "paper_figures").glob("*.py") if not p.stem.startswith("_")}
    assert stems <= set(ext._readme_sections()), stems - set(ext._readme_sections())
