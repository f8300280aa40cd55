"""README's usage examples run as printed, in order, in one namespace."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.rst"


def _python_blocks(text):
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", text)
    return ["\n".join(line[3:] for line in block.splitlines()) for block in blocks]


def test_readme_examples_run_as_printed():
    if not README.is_file():
        pytest.skip("README.rst is not beside the tests (installed package)")
    blocks = _python_blocks(README.read_text())
    assert len(blocks) >= 2
    namespace = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
        assert namespace["est"].status_ == "success", block
