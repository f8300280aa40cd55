"""Sphinx configuration for skdpcluster."""

import sys
from importlib.metadata import version as _version
from pathlib import Path

# The benchmark modules live beside the package, not inside it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

project = "skdpcluster"
author = "skdpcluster developers"
release = _version("skdpcluster")
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
autodoc_member_order = "bysource"
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
