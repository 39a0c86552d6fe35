from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.formats.files import FILE_FORMATS
from suffice.formats.verdicts import VERDICT_FORMATS

#: The entry points a package holding ``tests/formats/outside.py`` would declare in its pyproject.toml.
ENTRY_POINTS = """\
[suffice.verdict_formats]
routed = tests.formats.outside:ROUTED

[suffice.file_formats]
json-array = tests.formats.outside:JSON_ARRAY
"""


@pytest.fixture
def outside_formats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The formats of ``outside.py`` installed as a distribution's entry points would be (its ``dist-info`` on
    ``sys.path``); the folder to put on ``PYTHONPATH`` for a subprocess to find them too."""
    root = tmp_path_factory.mktemp("plugins")
    info = root / "suffice_test_formats-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: suffice-test-formats\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    VERDICT_FORMATS.forget()
    FILE_FORMATS.forget()
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        importlib.invalidate_caches()
        VERDICT_FORMATS.forget()
        FILE_FORMATS.forget()
