"""The documentation builds without a single warning (``sphinx-build -W``) and documents every public name."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "doc"

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


def test_docs_build_without_warnings_and_cover_every_public_name(tmp_path):
    pytest.importorskip("sphinx")
    if not DOC.is_dir():
        pytest.skip("doc/ is not beside the tests (installed package)")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(DOC), str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    documented = _documented_names(tmp_path)
    missing = sorted(
        f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in importlib.import_module(module).__all__
        if not name.startswith("__") and name not in documented
    )
    assert not missing, f"public names missing from doc/api.rst: {missing}"
