"""The README's "Testing your assistant" example (examples/test_assistant.py) runs as a user
runs it: the test file alone in a folder of its own, no conftest, plain pytest (the
plugin comes from the installed package's entry point, the assistant from
``voxflow.examples.assistant``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.models

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_example_test_passes_in_a_project_of_its_own(tmp_path: Path) -> None:
    # The example assistant ships in the package (voxflow.examples.assistant): the test
    # file is the whole project.
    shutil.copy(EXAMPLES / "test_assistant.py", tmp_path / "test_assistant.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_assistant.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["test_assistant.py"]


def test_the_readme_shows_the_example_file_as_it_is() -> None:
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Testing your assistant", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    header, code = block.split("\n", 1)
    assert header == "# examples/test_assistant.py"
    source = (EXAMPLES / "test_assistant.py").read_text(encoding="utf-8")
    docstring_end = source.index('"""', 3) + 3
    assert code == source[docstring_end:].lstrip("\n")
