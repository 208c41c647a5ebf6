"""ruff and mypy (strict, pydantic plugin) over all three packages; the import contracts
of ``.importlinter`` (the layers adapters -> voice -> core, no cycles) with import-linter."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lint

ROOT = Path(__file__).resolve().parents[1]
_LINTED = ("src", "voice/src", "adapters/src", "tests", "voice/tests", "adapters/tests",
           "benchmarks", "examples")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    paths = [p for p in _LINTED if (ROOT / p).exists()]
    result = _run(ruff, "check", *paths)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


# The benchmarks that wrap the engines (the session's TTS timed, stamped or cached): their
# wrappers are typed as the protocols are (review 10 finding 12), so mypy checks them
# against voxflow_voice.engines.TextToSpeech. The other benchmarks are not held to it yet.
_TYPED_BENCHMARKS = ("benchmarks/voice_latency.py", "benchmarks/_v2v_stages.py",
                     "benchmarks/webrtc_load.py")


def test_mypy_strict_is_clean_on_the_engine_wrapping_benchmarks() -> None:
    result = subprocess.run(
        (sys.executable, "-m", "mypy", *_TYPED_BENCHMARKS), cwd=ROOT, capture_output=True,
        text=True, check=False, env={**os.environ, "MYPYPATH": str(ROOT / "benchmarks")})
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_import_contracts_are_kept() -> None:
    lint_imports = shutil.which("lint-imports") or str(
        Path(sys.executable).with_name("lint-imports"))
    result = _run(lint_imports, "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", result.stdout)  # they ran


def test_the_core_names_no_adapter_package() -> None:
    """What import-linter cannot see: an adapter imported by its name in a string
    (importlib); the core finds its voice commands through entry points instead."""
    by_name = re.compile(r"""(import_module|find_spec|__import__)\(\s*["']voxflow_""")
    named = [f"{path.relative_to(ROOT)}:{n}"
             for path in sorted((ROOT / "src" / "voxflow").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if by_name.search(line)]
    assert named == []


def _function_level_imports(path: Path) -> list[tuple[int, bool]]:
    """``(line, commented)`` of every import inside a function of ``path``: commented when
    its line carries a ``#`` comment, or the line above it (or above the run of import
    lines it belongs to) is one, saying what the import is for."""
    source = path.read_text()
    lines = source.splitlines()
    found: list[tuple[int, bool]] = []
    for func in ast.walk(ast.parse(source, str(path))):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Import | ast.ImportFrom):
                first = node.lineno - 1  # 0-based; a run of imports shares one comment
                while first > 0 and lines[first - 1].strip().startswith(("import ", "from ")):
                    first -= 1
                above = lines[first - 1].strip() if first > 0 else ""
                here = lines[node.lineno - 1][node.col_offset:]
                found.append((node.lineno, "#" in here or above.startswith("#")))
    return sorted(set(found))


def test_every_function_level_import_says_why() -> None:
    """An import inside a function of src/voxflow, voice/ or adapters/ keeps an import
    fast, defers an optional or native dependency or breaks a layer's load order: a
    comment on its line or the line above says which. One without a comment belongs at
    the top of its module."""
    packages = (ROOT / "src" / "voxflow", ROOT / "voice" / "src" / "voxflow_voice",
                ROOT / "adapters" / "src" / "voxflow_adapters")
    bare = [f"{path.relative_to(ROOT)}:{line}"
            for package in packages for path in sorted(package.rglob("*.py"))
            for line, commented in _function_level_imports(path) if not commented]
    assert bare == []


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements an import runs: ``body`` and the blocks in it, not the bodies of
    its functions and classes."""
    found: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        found.append(stmt)
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list):
                found += _module_level(inner)
        for handler in getattr(stmt, "handlers", []):
            found += _module_level(handler.body)
    return found


def _changes_the_environment(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.If | ast.For | ast.While | ast.With | ast.Try):
        return False  # their inner statements are looked at one by one
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and node.attr in ("putenv", "unsetenv"):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and ast.unparse(node.func.value).endswith("environ") \
                and node.func.attr in ("setdefault", "update", "pop", "clear", "popitem"):
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del) \
                and ast.unparse(node.value).endswith("environ"):
            return True
    return False


def test_no_test_module_changes_the_environment_when_imported() -> None:
    """A variable a test module sets as it is imported stays set for every test after it
    in the run (and differs with the order the files run in): a test sets what it needs
    through monkeypatch, for itself."""
    changes = [f"{path.relative_to(ROOT)}:{stmt.lineno}"
               for folder in ("tests", "voice/tests", "adapters/tests")
               for path in sorted((ROOT / folder).rglob("*.py"))
               for stmt in _module_level(ast.parse(path.read_text()).body)
               if _changes_the_environment(stmt)]
    assert changes == []


def _imports_a_module(path: Path, node: ast.ImportFrom, name: str) -> bool:
    """Whether ``from <node.module> import <name>`` in ``path`` imports a module."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    else:
        top = (node.module or "").split(".")[0]
        roots = {"voxflow": ROOT / "src", "voxflow_voice": ROOT / "voice" / "src",
                 "voxflow_adapters": ROOT / "adapters" / "src"}
        if top not in roots:
            return False
        base = roots[top]
    folder = base.joinpath(*(node.module.split(".") if node.module else []))
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def test_no_module_imports_a_private_name_of_another() -> None:
    """A module uses the others through their public names only: a private one
    (``from .incremental_stt import _Detector``) is an implementation detail of its own
    module, free to change without a caller noticing. (A private *module*, such as
    ``voxflow._loops``, is its package's own: its public names serve the package.)"""
    private = [
        f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}"
        for package in ("src/voxflow", "voice/src/voxflow_voice",
                        "adapters/src/voxflow_adapters")
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
        and not _imports_a_module(path, node, alias.name)
    ]
    assert private == []
