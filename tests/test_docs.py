"""The documentation builds without a single warning (``sphinx-build -W``)."""

import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "doc"


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    if not DOC.is_dir():
        pytest.skip("doc/ is not beside the tests (installed package)")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(DOC), str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
