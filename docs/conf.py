"""Sphinx configuration: the Markdown pages of docs/ (myst-parser) and the API reference from the
docstrings (autodoc).  Build: ``pip install -e '.[docs]' && sphinx-build -W -b html docs docs/_build``."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import seccomm  # noqa: E402

project = "seccomm"
author = "the seccomm developers"
copyright = "the seccomm developers"
release = seccomm.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "scaling-data", "*.json", "Thumbs.db", ".DS_Store"]

# Markdown: "## A heading" gets the anchor #a-heading, so pages link as [text](page.md#a-heading)
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

# autodoc: public names only, in source order.  CuPy and torch are mocked, so the reference builds
# with the docs extra alone (no GPU, no multi-GB torch); pytest, which the plugin's fixtures need
# at import, is in the docs extra.
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": True}
autodoc_typehints = "description"
autodoc_mock_imports = ["cupy", "torch"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"seccomm {release}"
