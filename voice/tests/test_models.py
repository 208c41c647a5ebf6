"""Finding the bundled models, reassembling Whisper base, the shared loaders."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from voxflow_voice import (
    assemble_whisper_base,
    find_piper_voice,
    find_silero_vad,
    find_whisper_model,
    load_whisper_model,
)
from voxflow_voice.engines.errors import ModelNotFoundError
from voxflow_voice.engines.models import default_cache_dir

pytestmark = pytest.mark.models


def test_default_models_are_found_in_their_packages() -> None:
    whisper = find_whisper_model()
    assert (whisper / "model.bin").is_file() and (whisper / "config.json").is_file()
    model, config = find_piper_voice()
    assert model.suffix == ".onnx" and config.name == model.name + ".json"
    assert find_silero_vad().name == "silero_vad_v6.onnx"


def test_a_user_named_directory_or_voice_is_accepted() -> None:
    whisper = find_whisper_model()
    assert find_whisper_model(str(whisper)) == whisper
    model, config = find_piper_voice()
    assert find_piper_voice(model) == (model, config)


def test_missing_packages_name_what_to_install() -> None:
    with pytest.raises(ModelNotFoundError, match="pip install no-such-whisper") as stt:
        find_whisper_model(tiny_en_module="no_such_whisper")
    assert stt.value.package == "no-such-whisper"
    with pytest.raises(ModelNotFoundError, match="pip install no-such-voice") as tts:
        find_piper_voice(module="no_such_voice")
    assert tts.value.package == "no-such-voice"
    with pytest.raises(ModelNotFoundError, match=r"voxflow-voice\[base\]") as base:
        find_whisper_model("base", base_modules=("no_such_part1", "no_such_part2"))
    assert base.value.package == "no-such-part1"


def test_bad_paths_and_names_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="unknown whisper model"):
        find_whisper_model("large-v9")
    with pytest.raises(ModelNotFoundError, match="missing"):
        find_whisper_model(tmp_path)
    with pytest.raises(ModelNotFoundError, match="not found"):
        find_piper_voice(tmp_path / "voice.onnx")
    with pytest.raises(TypeError, match="model"):
        find_whisper_model(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cpu_threads"):
        load_whisper_model(find_whisper_model(), cpu_threads=0)


def test_cache_dir_follows_voxflow_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VOXFLOW_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("VOXFLOW_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "voxflow" / "models"


@pytest.fixture
def split_model(tmp_path: Path) -> Iterator[tuple[tuple[str, str], bytes]]:
    """Two real importable part packages holding the byte splits of a small model.bin."""
    payload = bytes(range(256)) * 4096 + b"tail"
    names = ("vfx_test_part1", "vfx_test_part2")
    root = tmp_path / "site"
    for index, (name, part) in enumerate(
        zip(names, (payload[:600_000], payload[600_000:]), strict=True), 1
    ):
        data = root / name / "data"
        data.mkdir(parents=True)
        (root / name / "__init__.py").write_text('"""Model data only."""\n')
        (data / f"model.bin.part{index}").write_bytes(part)
        if index == 1:
            (data / "config.json").write_text("{}")
            (data / "tokenizer.json").write_text("{}")
            (data / "vocabulary.txt").write_text("a\n")
    sys.path.insert(0, str(root))
    try:
        yield names, payload
    finally:
        sys.path.remove(str(root))
        for name in names:
            sys.modules.pop(name, None)


def test_base_parts_are_reassembled_once_and_reused(
    split_model: tuple[tuple[str, str], bytes], tmp_path: Path
) -> None:
    names, payload = split_model
    cache = tmp_path / "cache"
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(assemble_whisper_base(names, cache_dir=cache))
        )
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 1
    target = results[0]
    assert (target / "model.bin").read_bytes() == payload
    assert {p.name for p in target.iterdir()} == {
        "model.bin",
        "config.json",
        "tokenizer.json",
        "vocabulary.txt",
    }
    assert [p.name for p in cache.iterdir()] == [target.name]  # no staging dir left behind
    mtime = (target / "model.bin").stat().st_mtime_ns
    assert find_whisper_model("base", base_modules=names, cache_dir=cache) == target
    assert (target / "model.bin").stat().st_mtime_ns == mtime  # reused, not rewritten


def test_a_truncated_cached_model_is_rebuilt(
    split_model: tuple[tuple[str, str], bytes], tmp_path: Path
) -> None:
    names, payload = split_model
    target = assemble_whisper_base(names, cache_dir=tmp_path)
    (target / "model.bin").write_bytes(payload[:100])
    assert (assemble_whisper_base(names, cache_dir=tmp_path) / "model.bin").read_bytes() == payload


def test_wrong_part_sizes_are_refused(
    split_model: tuple[tuple[str, str], bytes], tmp_path: Path
) -> None:
    names, payload = split_model
    with pytest.raises(ModelNotFoundError, match="reinstall"):
        assemble_whisper_base(names, cache_dir=tmp_path / "c", expected_size=len(payload) + 1)
    assert not (tmp_path / "c").exists()
    with pytest.raises(ValueError, match="modules"):
        assemble_whisper_base((), cache_dir=tmp_path)


def test_models_load_once_per_process() -> None:
    path = find_whisper_model()
    loaded: list[object] = []
    threads = [
        threading.Thread(target=lambda: loaded.append(load_whisper_model(path))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(model) for model in loaded}) == 1
    assert load_whisper_model(path) is loaded[0]
