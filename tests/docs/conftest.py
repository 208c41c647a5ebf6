"""The README code blocks, executed: a snippet can never go stale.

Every ```python block of ``README.md`` and ``voice/README.md`` runs, in order, in one
namespace per file (a block may use what an earlier one defined), from a temporary
folder with a temporary ``VOXFLOW_HOME``. Top-level ``await`` is allowed: a block is
compiled with ``PyCF_ALLOW_TOP_LEVEL_AWAIT`` and, when it awaits, run to completion on
the file's event loop. Blocks that load the speech models (they name ``VoiceEngines``,
``PiperTts``, ``WhisperStt``, ``SileroVad`` or ``run_call``) carry the ``models``
marker's logic: ``tests/docs/test_readme_blocks.py`` (unit) runs every other block,
``tests/docs/test_readme_voice_blocks.py`` (models) runs them all. A block whose first
line is a comment naming a file of the repository (``# examples/test_assistant.py``)
shows that file: it is not run here (the file has its own test) but must match it,
line for line; so must a ```toml block naming one (``# examples/engine_package/
pyproject.toml``). A ```bash block is not Python and is never run. A block that reads
``os.environ["VOXFLOW_DATABASE_URL"]`` runs against the test PostgreSQL server; where none
answers, the test runs the others and then skips, naming the blocks it could not run and
why (under ``VOXFLOW_REQUIRE_POSTGRES=1`` it fails at the first of them instead).

A failure names the block: its file, section heading and first line.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import inspect
import os
import re
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PG_URL, missing_postgres_message, postgres_required, postgres_unreachable

ROOT = Path(__file__).resolve().parents[2]
READMES = (ROOT / "README.md", ROOT / "voice" / "README.md")
MODELS = re.compile(r"\b(VoiceEngines|PiperTts|WhisperStt|SileroVad|run_call)\b")
FENCE = re.compile(r"^```(\w*)\s*$")
SHOWN_FILE = re.compile(r"^# ((?:[\w.-]+/)*[\w.-]+\.(?:py|toml))\s*$")
POSTGRES = 'os.environ["VOXFLOW_DATABASE_URL"]'


@functools.cache
def postgres_reason() -> str | None:
    """Why the test PostgreSQL server cannot be used (asked once), or None."""
    return postgres_unreachable()


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced code block of a README."""

    path: Path
    line: int  # 1-based line of its first code line
    heading: str
    language: str
    code: str

    @property
    def name(self) -> str:
        first = next((ln.strip() for ln in self.code.splitlines() if ln.strip()), "")
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{where}:{self.line} § {self.heading} «{first}»"

    @property
    def shows_file(self) -> Path | None:
        """The repository file this block is a copy of, if its first line names one."""
        first = self.code.lstrip("\n").split("\n", 1)[0]
        match = SHOWN_FILE.match(first)
        return ROOT / match.group(1) if match is not None else None

    @property
    def needs_models(self) -> bool:
        return MODELS.search(self.code) is not None

    @property
    def needs_postgres(self) -> bool:
        return POSTGRES in self.code

    @property
    def runnable(self) -> bool:
        """False for a PostgreSQL block where no test server answers."""
        return not self.needs_postgres or postgres_reason() is None


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of ``path``, with the heading of the section it sits in."""
    blocks: list[Block] = []
    heading, language, start, lines = "(top)", None, 0, list[str]()
    for number, text in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(text)
        if language is None:
            if fence is not None:
                language, start, lines = fence.group(1), number + 1, []
            elif text.startswith("#"):
                heading = text.lstrip("#").strip()
        elif fence is not None and not fence.group(1):
            blocks.append(Block(path, start, heading, language, "\n".join(lines) + "\n"))
            language = None
        else:
            lines.append(text)
    assert language is None, f"{path}: a code block opened at line {start} is never closed"
    return blocks


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks_of(path) if b.language in ("python", "py")]


@contextlib.contextmanager
def fresh_schema_url() -> Iterator[str]:
    """The test server's URL with a fresh schema first on its ``search_path`` (where the
    blocks' stores keep their tables), dropped afterwards: README runs at once on one
    database share no queue and no session."""
    import psycopg

    schema = f"vx_readme_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        yield f"{PG_URL}{'&' if '?' in PG_URL else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '60s'")  # a connection left open fails
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def run_blocks(blocks: list[Block], *, with_models: bool) -> list[Block]:
    """Run ``blocks`` in order in one namespace; returns those run. A failing block fails
    the test with its name and the traceback inside it. The PostgreSQL blocks get
    ``VOXFLOW_DATABASE_URL`` naming a fresh schema, dropped once the blocks' event loop
    is closed."""
    with contextlib.ExitStack() as stack:
        url = (stack.enter_context(fresh_schema_url())
               if any(b.needs_postgres and b.runnable for b in blocks) else None)
        return _run_blocks(blocks, with_models=with_models, url=url)


def _run_blocks(blocks: list[Block], *, with_models: bool, url: str | None) -> list[Block]:
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    ran: list[Block] = []
    with asyncio.Runner() as runner:
        for block in blocks:
            shown = block.shows_file
            if shown is not None:
                body = block.code.lstrip("\n").split("\n", 1)[1].strip()
                if not shown.is_file() or body not in shown.read_text():
                    pytest.fail(f"README block {block.name} shows {shown.relative_to(ROOT)}, "
                                "but that file does not contain it: copy the file's code "
                                "into the block again", pytrace=False)
                ran.append(block)
                continue
            if not block.runnable and postgres_required():
                pytest.fail(f"README block {block.name} needs PostgreSQL: "
                            f"{missing_postgres_message(postgres_reason() or '')}",
                            pytrace=False)
            if (block.needs_models and not with_models) or not block.runnable:
                continue
            saved = os.environ.get("VOXFLOW_DATABASE_URL")
            if block.needs_postgres:
                assert url is not None
                os.environ["VOXFLOW_DATABASE_URL"] = url
            try:
                code = compile(block.code, block.name, "exec",
                               flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
                result = eval(code, namespace)  # exec, or a coroutine if it awaits
                if inspect.iscoroutine(result):
                    runner.run(result)
            except Exception as exc:
                trace = "".join(traceback.format_exception(exc)[-6:])
                pytest.fail(f"README block failed: {block.name}\n{type(exc).__name__}: {exc}"
                            f"\n{trace}", pytrace=False)
            finally:
                if saved is None:
                    os.environ.pop("VOXFLOW_DATABASE_URL", None)
                else:
                    os.environ["VOXFLOW_DATABASE_URL"] = saved
            ran.append(block)
    return ran


def skip_unrunnable(blocks: list[Block]) -> None:
    """Skip the test, naming the blocks and the reason, when some of ``blocks`` could not
    run for want of PostgreSQL (call it after the blocks that could run have passed)."""
    unrun = [b.name for b in blocks if not b.runnable]
    if unrun:
        pytest.skip(f"{len(unrun)} block(s) need PostgreSQL, not run ({postgres_reason()}): "
                    + "; ".join(unrun))


@pytest.fixture
def readme_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary working folder and ``VOXFLOW_HOME`` for the blocks; the process's
    OpenTelemetry tracer provider as it was before them (the Traces block sets one, as
    an application does once: the tests after it must run untraced)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOXFLOW_HOME", str(tmp_path / "home"))
    try:
        import opentelemetry.trace as ot
    except ImportError:
        yield tmp_path
        return
    provider, done = ot._TRACER_PROVIDER, ot._TRACER_PROVIDER_SET_ONCE._done
    try:
        yield tmp_path
    finally:
        ot._TRACER_PROVIDER, ot._TRACER_PROVIDER_SET_ONCE._done = provider, done


@pytest.fixture
def readme() -> Callable[..., Any]:
    """``readme.blocks(path)``, ``readme.run(blocks, with_models=...)``,
    ``readme.skip_unrunnable(blocks)``, ``readme.READMES``."""

    class Readme:
        READMES = READMES
        blocks = staticmethod(python_blocks)
        all_blocks = staticmethod(blocks_of)
        run = staticmethod(run_blocks)
        skip_unrunnable = staticmethod(skip_unrunnable)

    return Readme  # type: ignore[return-value]
