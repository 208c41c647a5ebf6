"""The public surface: sorted ``__all__`` everywhere, and a light import."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import voxflow_voice


def isort_key(name: str) -> tuple[int, str]:
    """ruff RUF022's order: SCREAMING_CASE, then CamelCase, then the rest."""
    if name.isupper() or (name.replace("_", "").isupper()):
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_every_module_has_a_sorted_all_of_existing_names() -> None:
    modules = [voxflow_voice] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(voxflow_voice.__path__, "voxflow_voice.")
        if not info.name.rsplit(".", 1)[-1].startswith("_")
    ]
    for module in modules:
        exported = module.__all__
        assert exported == sorted(exported, key=isort_key), module.__name__
        assert len(set(exported)) == len(exported), module.__name__
        for name in exported:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_package_reexports_the_building_blocks() -> None:
    for name in ("AudioChunk", "PiperTts", "SileroVad", "TextSegmenter", "TurnDetector"):
        assert name in voxflow_voice.__all__


def test_import_loads_no_model_runtime() -> None:
    code = (
        "import sys, voxflow_voice; "
        "print(sorted(m for m in ('faster_whisper', 'ctranslate2', 'piper', 'onnxruntime', "
        "'soxr') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"

