"""Unit tests: no JVM. Golden files for rendered screens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def golden():
    """Compare a screen with tests/unit/golden/NAME.txt; UPDATE_GOLDEN=1 rewrites it."""

    def check(name: str, text: str) -> None:
        path = GOLDEN / f"{name}.txt"
        if os.environ.get("UPDATE_GOLDEN") == "1":
            path.write_text(text, encoding="utf-8")
        assert path.exists(), f"no golden file {path}; run with UPDATE_GOLDEN=1 to create it"
        assert text == path.read_text(encoding="utf-8")

    return check
