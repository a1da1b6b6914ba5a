"""Sphinx configuration of the dptree_opt documentation site.

Build (warnings are errors):  python -m sphinx -W --keep-going -b html docs docs/_build/html
Pages are MyST Markdown; the API reference and the paper pages are generated at build time by
docs/_ext/dptree_docs.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the package from this checkout, installed or not

import dptree_opt  # noqa: E402

project = "dptree_opt"
author = "dptree_opt developers"
copyright = "dptree_opt developers"
release = version = dptree_opt.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "dptree_docs",
]

root_doc = "index"
source_suffix = {".md": "markdown"}
# README.md is the folder's index on GitHub (the site's is index.md); _build holds the output
exclude_patterns = ["_build", "README.md", "**/.ipynb_checkpoints"]

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# myst.header: pages from the repository's Markdown may skip heading levels; ref.python:
# a field name such as `total` that several classes have (not an error: nitpicky is off)
suppress_warnings = ["myst.header", "ref.python"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"undoc-members": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True
napoleon_use_rtype = False

html_theme = "furo"
html_title = f"dptree_opt {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
# API objects are not toctree entries (the side bar lists pages and their headings; the object
# entries made every page's navigation tree 10x larger and the build 2x slower)
toc_object_entries = False
