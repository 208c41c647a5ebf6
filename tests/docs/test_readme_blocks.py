"""Every Python block of the READMEs that needs no speech model runs (see conftest)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["README.md", "voice/README.md"])
def test_the_readme_python_blocks_run(name: str, readme: Any, readme_sandbox: Path) -> None:
    path = next(p for p in readme.READMES if p.as_posix().endswith(name))
    blocks = readme.blocks(path)
    ran = readme.run(blocks, with_models=False)
    assert len(ran) == sum((not b.needs_models and b.runnable) or b.shows_file is not None
                           for b in blocks)
    readme.skip_unrunnable(blocks)


@pytest.mark.parametrize("name", ["README.md", "voice/README.md"])
def test_a_block_naming_a_file_shows_that_file(name: str, readme: Any) -> None:
    """Any block, not only Python (the engine package's pyproject.toml), whose first line
    names a repository file is a copy of it."""
    path = next(p for p in readme.READMES if p.as_posix().endswith(name))
    shown = [b for b in readme.all_blocks(path) if b.shows_file is not None]
    for block in shown:
        body = block.code.lstrip("\n").split("\n", 1)[1].strip()
        assert block.shows_file.is_file(), block.name
        assert body in block.shows_file.read_text(), (
            f"README block {block.name} does not match {block.shows_file}: copy the file "
            "into the block again")
    if name == "README.md":
        assert {b.language for b in shown} >= {"python", "toml"}


def test_blocks_are_found_by_language_and_named_by_section(
    readme: Any, tmp_path: Path
) -> None:
    doc = tmp_path / "README.md"
    doc.write_text("# Top\n\n## Jobs\n\n```bash\nuv run voxflow demo\n```\n\n"
                   "```python\nx = await run_call(flow)\n```\n\n### Deep\n\n```python\n\n"
                   "y = 1\n```\n")
    bash, first, second = readme.all_blocks(doc)
    assert bash.language == "bash"
    assert [b.code for b in readme.blocks(doc)] == [first.code, second.code]
    assert first.needs_models and not second.needs_models
    assert first.name.endswith("§ Jobs «x = await run_call(flow)»")
    assert second.name.endswith("§ Deep «y = 1»") and second.line == 16


def test_a_failing_block_is_named_in_the_failure(readme: Any, tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text("## Awaiting\n\n```python\nimport asyncio\nawait asyncio.sleep(0)\n"
                   "value = 1\n```\n\n## Broken\n\n```python\nassert value == 2, 'stale'\n```\n")
    with pytest.raises(pytest.fail.Exception) as failure:
        readme.run(readme.blocks(doc), with_models=False)
    message = str(failure.value)
    assert "§ Broken «assert value == 2, 'stale'»" in message and "stale" in message


def test_a_block_showing_a_file_must_match_it(readme: Any, tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text("## Example\n\n```python\n# examples/support.py\n"
                   "from voxflow import Flow\n```\n")
    [block] = readme.blocks(doc)
    assert block.shows_file is not None and block.shows_file.name == "support.py"
    doc.write_text("## Example\n\n```python\n# examples/support.py\nimport os  # stale\n```\n")
    with pytest.raises(pytest.fail.Exception, match="does not contain it"):
        readme.run(readme.blocks(doc), with_models=False)


def test_a_postgres_block_without_a_server_skips_naming_it_or_fails_under_ci(
    readme: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = sys.modules[readme.run.__module__]
    monkeypatch.setattr(docs, "postgres_reason", lambda: "PostgreSQL not reachable (test)")
    doc = tmp_path / "README.md"
    doc.write_text("## Plain\n\n```python\nx = 1\n```\n\n## Queue\n\n```python\nimport os\n"
                   'url = os.environ["VOXFLOW_DATABASE_URL"]\n```\n')
    blocks = readme.blocks(doc)
    monkeypatch.delenv("VOXFLOW_REQUIRE_POSTGRES", raising=False)
    assert readme.run(blocks, with_models=False) == blocks[:1]  # the others still run
    with pytest.raises(pytest.skip.Exception) as skipped:
        readme.skip_unrunnable(blocks)
    assert "PostgreSQL not reachable (test)" in str(skipped.value)
    assert "§ Queue «import os»" in str(skipped.value)
    monkeypatch.setenv("VOXFLOW_REQUIRE_POSTGRES", "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        readme.run(blocks, with_models=False)
    assert "§ Queue «import os» needs PostgreSQL" in str(failed.value)
    assert "VOXFLOW_REQUIRE_POSTGRES=1 requires it" in str(failed.value)
