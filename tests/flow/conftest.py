"""Flow tests: hermetic data directory per test, and a recorder fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voxflow.testing import EventRecorder


@pytest.fixture(autouse=True)
def _voxflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the default persistence location at a per-test directory."""
    home = tmp_path / "voxflow-home"
    monkeypatch.setenv("VOXFLOW_HOME", str(home))
    return home


@pytest.fixture
def recorder() -> Iterator[EventRecorder]:
    """Records every event of the default bus during the test."""
    with EventRecorder() as rec:
        yield rec
