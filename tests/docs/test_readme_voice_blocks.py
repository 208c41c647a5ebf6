"""Every Python block of the READMEs runs, the ones that load the speech models included
(real Whisper, Piper and Silero; see conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.models


@pytest.mark.parametrize("name", ["README.md", "voice/README.md"])
def test_every_readme_python_block_runs(name: str, readme: Any, readme_sandbox: Path) -> None:
    path = next(p for p in readme.READMES if p.as_posix().endswith(name))
    blocks = readme.blocks(path)
    assert any(b.needs_models for b in blocks)  # (else the unit test covers this file)
    assert readme.run(blocks, with_models=True) == [b for b in blocks if b.runnable]
    readme.skip_unrunnable(blocks)
