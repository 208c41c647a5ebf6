"""Every name a benchmark takes from a sibling benchmark module exists there.

The benchmarks import each other by file name (``from _capacity_calls import REPLY``,
``import capacity`` then ``capacity.run_calls``), often inside the function that needs
it, so a name moved out of a module breaks a benchmark only when someone next runs it:
mypy does not check ``benchmarks/`` and ruff does not read a sibling's names. This reads
every benchmark's source (nothing is imported or run) and checks each such name against
the names its module defines at top level.
"""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _defined(tree: ast.Module) -> set[str]:
    """The names a module binds at top level (defs, classes, assignments, imports),
    including those bound inside a top-level ``try``/``if``."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                if isinstance(node.target, ast.Name):
                    names.add(node.target.id)
            elif isinstance(node, ast.Import):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.update(a.asname or a.name for a in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                for extra in ("orelse", "finalbody"):
                    visit(getattr(node, extra, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return names


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in sorted(BENCHMARKS.glob("*.py"))}


def _sibling_uses(tree: ast.Module, siblings: set[str]) -> list[tuple[str, str, int]]:
    """(module, name, line) for every ``from sibling import name`` and every
    ``sibling.name`` after an ``import sibling`` anywhere in the file."""
    uses: list[tuple[str, str, int]] = []
    imported: dict[str, str] = {}  # local alias -> sibling module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in siblings:
            uses.extend((node.module, a.name, node.lineno) for a in node.names if a.name != "*")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in siblings:
                    imported[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in imported):
            uses.append((imported[node.value.id], node.attr, node.lineno))
    return uses


def test_the_checker_finds_a_name_a_module_does_not_define() -> None:
    sibling = ast.parse("from _x import KEPT\nVALUE = 1\ndef run(): ...\n")
    user = ast.parse("def f():\n    from calls import VALUE, GONE\n    import calls\n"
                     "    return calls.run, calls.moved\n")
    defined = _defined(sibling)
    missing = [(m, n) for m, n, _ in _sibling_uses(user, {"calls"}) if n not in defined]
    assert missing == [("calls", "GONE"), ("calls", "moved")]
    assert {"KEPT", "VALUE", "run"} <= defined


def test_every_name_a_benchmark_takes_from_a_sibling_exists() -> None:
    modules = _modules()
    defined = {name: _defined(tree) for name, tree in modules.items()}
    missing = [f"benchmarks/{name}.py:{line}: {module}.{attr} is not defined in "
               f"benchmarks/{module}.py"
               for name, tree in modules.items()
               for module, attr, line in _sibling_uses(tree, set(modules))
               if attr not in defined[module]]
    assert len(modules) > 40
    assert missing == []
