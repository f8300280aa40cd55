"""Sphinx configuration for skdpcluster."""

from importlib.metadata import version as _version

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
