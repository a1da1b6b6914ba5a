"""The package's documentation is self-contained.

The package source (docstrings, comments and messages alike) cites the project's own math note
as "docs/math.md section N" with N a section that exists, never ``MATH.md`` (a file outside the
repository), never another document the repository does not hold, and never an internal issue
number. The math note keeps its section numbers 0..12. The same holds for the documentation
pages (docs/**/*.md, the README, paper_figures/README.md): their citations of docs/math.md
sections exist, they never cite MATH.md or an internal issue number, and their relative links
resolve. (The site built from them: tests/test_docs_site.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dptree_opt"
DOCS = ROOT / "docs"
MATH_NOTE = DOCS / "math.md"
SECTIONS = set(range(13))  # the numbering the citations use; renumbering breaks them

HEADING = re.compile(r"^## (\d+)\. \S", re.MULTILINE)
# a section number: not the integer part of a decimal ("section 8: 37.308" cites 8 only)
_NUM = r"\d+\b(?!\.\d)"
_SEP = r"\s*(?:-|–|,|and|to)\s*"
CITATION = re.compile(
    r"docs/math\.md(?:``|`)?\s*(?:(?:sections?|sec\.?|§)\s*)?"
    rf"(?P<numbers>{_NUM}(?:{_SEP}{_NUM})*)?",
    re.IGNORECASE,
)
ISSUE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)
# generated at build time (git-ignored): not sources
GENERATED = (DOCS / "_build", DOCS / "api" / "generated", DOCS / "papers" / "items")
ANY_MATH_MD = re.compile(r"math\.md", re.IGNORECASE)
MARKDOWN_FILE = re.compile(r"[\w./-]*\w\.md\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def cited_sections(text: str) -> list[set[int]]:
    """The section numbers of every docs/math.md citation in ``text`` (ranges expanded)."""
    out = []
    for m in CITATION.finditer(text):
        numbers = m.group("numbers")
        if not numbers:
            out.append(set())
            continue
        cited: set[int] = set()
        for part in re.split(r"\s*(?:,|and)\s*", numbers):
            ends = [int(x) for x in re.split(r"\s*(?:-|–|to)\s*", part) if x]
            cited.update(range(ends[0], ends[-1] + 1))
        out.append(cited)
    return out


def _sources():
    return [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8"))
            for p in sorted(PACKAGE.rglob("*.py"))]


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def test_citation_parser():
    assert cited_sections("(docs/math.md section 8)") == [{8}]
    assert cited_sections("docs/math.md sections 2-3 (BLUE)") == [{2, 3}]
    assert cited_sections("docs/math.md sections 0 and 7; docs/math.md Sec. 6") == [{0, 7}, {6}]
    assert cited_sections("``docs/math.md`` section 2") == [{2}]
    assert cited_sections("(docs/math.md\n    section 3; derivation)") == [{3}]
    assert cited_sections("docs/math.md section 8: 37.308 per unit") == [{8}]
    assert cited_sections("docs/math.md 6 row 4 numbers") == [{6}]
    assert cited_sections("see docs/math.md.") == [set()]


def test_math_note_keeps_its_section_numbers():
    text = MATH_NOTE.read_text(encoding="utf-8")
    numbers = [int(n) for n in HEADING.findall(text)]
    assert numbers == sorted(SECTIONS), f"docs/math.md sections are {numbers}"
    bodies = HEADING.split(text)[2::2]
    assert all(len(b.strip()) > 200 for b in bodies), "a docs/math.md section is (nearly) empty"


def test_cited_math_sections_exist():
    sections = {int(n) for n in HEADING.findall(MATH_NOTE.read_text(encoding="utf-8"))}
    found, bad = 0, []
    for path, text in _sources():
        for m, cited in zip(CITATION.finditer(text), cited_sections(text)):
            found += 1
            if not cited <= sections:
                bad.append(f"{path}:{_line(text, m.start())}: {m.group(0)!r}")
    assert found, "no docs/math.md citation found under dptree_opt/"
    assert not bad, "citations of sections docs/math.md does not have:\n" + "\n".join(bad)


def test_no_citation_of_math_md_outside_docs():
    bad = [f"{path}:{_line(text, m.start())}"
           for path, text in _sources() for m in ANY_MATH_MD.finditer(text)
           if text[max(0, m.start() - 5):m.end()] != "docs/math.md"]
    assert not bad, "cite docs/math.md, not MATH.md:\n" + "\n".join(bad)


def test_no_internal_issue_numbers():
    bad = [f"{path}:{_line(text, m.start())}: {m.group(0)!r}"
           for path, text in _sources() for m in ISSUE.finditer(text)]
    assert not bad, "internal issue numbers in the package:\n" + "\n".join(bad)


def test_package_cites_only_documents_in_the_repository():
    bad = []
    for path, text in _sources():
        for m in MARKDOWN_FILE.finditer(text):
            name = m.group(0)
            if not ((ROOT / name).is_file() or (DOCS / name).is_file()):
                bad.append(f"{path}:{_line(text, m.start())}: {name}")
    assert not bad, "documents cited but not in the repository:\n" + "\n".join(bad)


def _doc_pages() -> list[Path]:
    """Every documentation page: docs/**/*.md (not the generated ones) and the READMEs."""
    pages = [p for p in DOCS.rglob("*.md") if not any(g in p.parents for g in GENERATED)]
    return sorted(pages) + [ROOT / "README.md", ROOT / "paper_figures" / "README.md"]


def test_docs_links_resolve():
    pages = _doc_pages()
    assert MATH_NOTE in pages and DOCS / "README.md" in pages and DOCS / "index.md" in pages
    bad = [f"{page.relative_to(ROOT)}: {target}"
           for page in pages for target in LINK.findall(page.read_text(encoding="utf-8"))
           if "://" not in target and not target.startswith("mailto:")
           and not (page.parent / target).exists()]
    assert not bad, "broken relative links in the documentation:\n" + "\n".join(bad)


def test_docs_cite_existing_math_sections():
    sections = {int(n) for n in HEADING.findall(MATH_NOTE.read_text(encoding="utf-8"))}
    bad = []
    for page in _doc_pages():
        text = page.read_text(encoding="utf-8")
        for m, cited in zip(CITATION.finditer(text), cited_sections(text)):
            if not cited <= sections:
                bad.append(f"{page.relative_to(ROOT)}:{_line(text, m.start())}: {m.group(0)!r}")
    assert not bad, "docs cite sections docs/math.md does not have:\n" + "\n".join(bad)


def test_docs_cite_no_math_md_and_no_internal_issue_numbers():
    """No ``MATH.md`` (a file outside the repository) and no internal issue number; a line
    linking to another project's tracker (a URL) may name its issues."""
    bad = []
    for page in _doc_pages():
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"MATH\.md", text):
            bad.append(f"{page.relative_to(ROOT)}:{_line(text, m.start())}: MATH.md")
        for m in ISSUE.finditer(text):
            line = text.splitlines()[_line(text, m.start()) - 1]
            if "://" not in line:
                bad.append(f"{page.relative_to(ROOT)}:{_line(text, m.start())}: {m.group(0)!r}")
    assert not bad, "the documentation cites MATH.md or internal issues:\n" + "\n".join(bad)
