"""The documentation builds without a single warning (``sphinx-build -W``) and documents every public name."""

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "doc"
EXAMPLES = ROOT / "examples"

#: The package and every public subpackage or module whose ``__all__`` the API reference must cover.
PUBLIC_MODULES = [
    "skdpcluster",
    "skdpcluster.accountant",
    "skdpcluster.averaging",
    "skdpcluster.bounds",
    "skdpcluster.cluster",
    "skdpcluster.datasets",
    "skdpcluster.exceptions",
    "skdpcluster.ktuple",
    "skdpcluster.local",
    "skdpcluster.mechanisms",
    "skdpcluster.mixture",
    "skdpcluster.model_selection",
    "skdpcluster.preprocessing",
    "skdpcluster.utils",
    "skdpcluster.utils.estimator_checks",
]


def _documented_names(build_dir):
    """Short names of every Python object in the built site's inventory."""
    from sphinx.util.inventory import InventoryFile

    with open(build_dir / "objects.inv", "rb") as stream:
        inventory = InventoryFile.load(stream, "", lambda base, uri: uri)
    return {
        full_name.rsplit(".", 1)[-1]
        for kind, entries in inventory.items() if kind.startswith("py:")
        for full_name in entries if full_name.startswith("skdpcluster")
    }


def _build(source, target, *options):
    """Run ``sphinx-build -W`` from the repository root; fail with its last messages."""
    pytest.importorskip("sphinx")
    pytest.importorskip("sphinx_gallery")
    if not source.is_dir():
        pytest.skip("doc/ is not beside the tests (installed package)")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", *options, "-b", "html", str(source), str(target)],
        capture_output=True, text=True, timeout=1200, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_docs_build_without_warnings_and_cover_every_public_name(tmp_path):
    _build(DOC, tmp_path, "-D", "plot_gallery=0")  # the gallery's pages, scripts not run
    documented = _documented_names(tmp_path)
    missing = sorted(
        f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in importlib.import_module(module).__all__
        if not name.startswith("__") and name not in documented
    )
    assert not missing, f"public names missing from doc/api.rst: {missing}"


@pytest.mark.slow
def test_gallery_runs_every_example_and_shows_its_figure(tmp_path):
    """The full build executes every examples/plot_*.py and its figure appears in the HTML.

    Built from a copy of the sources, so images cached by an earlier build of
    ``doc/`` cannot stand in for a run.
    """
    pytest.importorskip("matplotlib")
    source = tmp_path / "src"
    shutil.copytree(DOC, source / "doc", ignore=shutil.ignore_patterns("_build", "auto_examples"))
    shutil.copytree(EXAMPLES, source / "examples")
    shutil.copytree(ROOT / "benchmarks", source / "benchmarks",
                    ignore=shutil.ignore_patterns("results", ".venv-*"))
    shutil.copy(ROOT / "README.rst", source / "README.rst")
    _build(source / "doc", tmp_path / "html")
    scripts = sorted(EXAMPLES.glob("plot_*.py"))
    assert len(scripts) >= 6
    for script in scripts:
        page = (tmp_path / "html" / "auto_examples" / f"{script.stem}.html").read_text()
        image = f"sphx_glr_{script.stem}_001.png"
        assert image in page, f"{script.name}: no figure in its page"
        assert (tmp_path / "html" / "_images" / image).stat().st_size > 10_000


@pytest.mark.parametrize(
    "path", [path for folder in ("skdpcluster", "benchmarks", "tests", "examples", "doc")
             for path in sorted((ROOT / folder).rglob("*.py")) if ".venv" not in path.parts],
    ids=lambda path: str(path.relative_to(ROOT)))
def test_sources_compile_without_warnings(path):
    # A docstring with "\L" and no r prefix compiled with a DeprecationWarning (a
    # SyntaxWarning from Python 3.12, an error later), which a cached .pyc hides.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
