"""Sphinx configuration for skdpcluster."""

import sys
from importlib.metadata import version as _version
from pathlib import Path

# The benchmark modules live beside the package, not inside it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

project = "skdpcluster"
author = "skdpcluster developers"
release = _version("skdpcluster")
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
autodoc_member_order = "bysource"
exclude_patterns = ["_build", "_expected_failures.rst"]

# The example gallery: every examples/plot_*.py is executed and its figures shown
# (needs matplotlib). ``sphinx-build -D plot_gallery=0`` builds the pages without
# running the scripts, as the fast docs test does; the slow test runs them.
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "abort_on_example_error": True,
    "download_all_examples": False,
    "write_computation_times": False,
}
html_theme = "alabaster"
nitpicky = False


def _write_expected_failures(app):
    """Render EXPECTED_FAILED_CHECKS as a table, so the docs show the one list the tests use."""
    from skdpcluster.utils.estimator_checks import EXPECTED_FAILED_CHECKS

    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 20 30 50", "",
             "   * - estimator", "     - check", "     - reason"]
    for estimator, checks in sorted(EXPECTED_FAILED_CHECKS.items()):
        for check, reason in sorted(checks.items()):
            lines += [f"   * - {estimator}", f"     - ``{check}``", f"     - {reason}"]
    target = Path(app.srcdir) / "_expected_failures.rst"
    text = "\n".join(lines) + "\n"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)


def setup(app):
    app.connect("builder-inited", _write_expected_failures)
