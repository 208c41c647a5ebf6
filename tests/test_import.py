"""``import voxflow`` stays light: lazy re-exports, no heavy modules, no schema builds.

The public names load on first access (PEP 562, see ``src/voxflow/__init__.py``). These
tests check that every name in ``__all__`` resolves to the object its module defines, that
the three places a re-export is declared agree, and, in fresh interpreters, which modules
an import pulls in. Import *times* are figures, not assertions: they are printed by
``benchmarks/flow_overhead.py``.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import voxflow

pytestmark = pytest.mark.unit

INIT = Path(voxflow.__file__)

# Never loaded by the core, whatever is imported from ``voxflow``.
HEAVY: tuple[str, ...] = ("litellm", "numpy", "yaml", "rich", "soxr", "faster_whisper")
HEAVY += ("piper", "aiortc", "sounddevice", "onnxruntime", "ctranslate2", "aiohttp")

# Needed by the turn, reply, job, agent and declaration APIs, not by the Flow core.
NOT_FLOW_CORE: tuple[str, ...] = ("voxflow.agent", "voxflow.jobs", "voxflow.turns")
NOT_FLOW_CORE += ("voxflow.replies", "voxflow.conversation.declaration", "voxflow.testing")
NOT_FLOW_CORE += ("sqlite3",)


def _probe(statement: str) -> tuple[set[str], list[str]]:
    """Run ``statement`` in a fresh interpreter.

    Returns:
        The modules it loaded, and the voxflow pydantic models whose validators were
        built (empty when every model defers its build to first use).
    """
    code = "\n".join(
        [
            "import json, sys",
            statement,
            "built = []",
            "if 'pydantic' in sys.modules:",
            "    from pydantic import BaseModel",
            "    todo = list(BaseModel.__subclasses__())",
            "    while todo:",
            "        cls = todo.pop()",
            "        todo.extend(cls.__subclasses__())",
            "        if cls.__module__.startswith('voxflow') and cls.__pydantic_complete__:",
            "            built.append(f'{cls.__module__}.{cls.__qualname__}')",
            "print(json.dumps({'modules': sorted(sys.modules), 'built': sorted(built)}))",
        ]
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    return set(report["modules"]), report["built"]


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def _declared_reexports() -> dict[str, str]:
    """name -> module of every ``from M import N as N`` in the TYPE_CHECKING block."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
        if node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, "voxflow/__init__.py needs one `if TYPE_CHECKING:` block"
    declared: dict[str, str] = {}
    for stmt in blocks[0].body:
        assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.unparse(stmt)
        for alias in stmt.names:
            assert alias.asname == alias.name, f"re-export as `{alias.name} as {alias.name}`"
            declared[alias.name] = stmt.module
    return declared


def test_every_public_name_resolves_to_its_defining_object() -> None:
    for name in voxflow.__all__:
        module = importlib.import_module(voxflow._LAZY[name])
        assert getattr(voxflow, name) is getattr(module, name), name
        assert getattr(voxflow, name) is vars(voxflow)[name], f"{name} is not cached"


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from voxflow import *", namespace)
    assert set(voxflow.__all__) <= set(namespace)
    assert namespace["Flow"] is voxflow.Flow


def test_reexports_are_declared_in_step() -> None:
    """TYPE_CHECKING imports (what type checkers see) == _LAZY (what runs) == __all__."""
    declared = _declared_reexports()
    assert declared == voxflow._LAZY
    assert set(voxflow.__all__) == set(declared)
    assert len(voxflow.__all__) == len(set(voxflow.__all__))

    def isort_key(name: str) -> tuple[int, str]:  # ruff RUF022 order
        return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)

    assert voxflow.__all__ == sorted(voxflow.__all__, key=isort_key)


def test_unknown_attribute_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'NoSuchThing'"):
        _ = voxflow.NoSuchThing  # type: ignore[attr-defined]
    assert not hasattr(voxflow, "flow_core")
    with pytest.raises(ImportError, match="NoSuchThing"):
        exec("from voxflow import NoSuchThing", {})


def test_dir_lists_the_public_names_before_they_load() -> None:
    assert set(voxflow.__all__) <= set(dir(voxflow))


def test_subpackages_are_attributes_without_an_explicit_import() -> None:
    assert voxflow.flow is importlib.import_module("voxflow.flow")
    assert voxflow.testing is importlib.import_module("voxflow.testing")  # type: ignore[attr-defined]


def test_bare_import_loads_no_submodule_and_no_dependency() -> None:
    modules, built = _probe("import voxflow")
    assert _loaded(modules, ("voxflow",)) == ["voxflow"]
    assert _loaded(modules, ("pydantic", "asyncio", "sqlite3", *HEAVY)) == []
    assert built == []


def test_flow_core_import_skips_the_other_apis_and_builds_no_model() -> None:
    modules, built = _probe("from voxflow import Flow, FlowState, and_, listen, or_, router, start")
    assert "voxflow.flow.runtime" in modules
    assert _loaded(modules, HEAVY + NOT_FLOW_CORE) == []
    assert built == []


def test_every_public_name_loads_no_heavy_dependency_and_builds_no_record_model() -> None:
    modules, built = _probe("import voxflow\nfor name in voxflow.__all__: getattr(voxflow, name)")
    assert _loaded(modules, HEAVY) == []
    # A Flow subclass validates its wiring when the class is created, so the library's own
    # JobWorkFlow builds its FlowDefinition; every state, record and event model waits.
    assert set(built) <= {"voxflow.flow.definition.FlowDefinition"}


def test_a_deferred_state_model_still_validates_on_first_use() -> None:
    """FlowState defers its build; a subclass validates (and rejects) as before."""
    from pydantic import ValidationError

    from voxflow import FlowState

    class Counter(FlowState):
        count: int = 0

    assert Counter(count="3").count == 3  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="count"):
        Counter(count="three")  # type: ignore[arg-type]
    assert Counter.__pydantic_complete__
