"""The voice commands the ``voxflow`` CLI offers but does not implement.

The core parses and checks every command's options (:mod:`voxflow.cli`), and never
names the package that runs a voice call: the packages that implement one declare it in
the ``voxflow.commands`` entry-point group (``voxflow-adapters`` declares all three), and
the CLI finds it there by the command's name:

========== ========================================= ===============================
name       what it loads                             the extra that installs it
========== ========================================= ===============================
``chat``   :class:`VoiceChat` (``chat --voice``)     ``voxflow[local]``
``serve``  :class:`Serve` (``serve``)                ``voxflow[webrtc]``
``demo``   :class:`VoiceDemo` (``demo``'s voice call) ``voxflow[voice]``
========== ========================================= ===============================

A package that provides a command adds, in its ``pyproject.toml``::

    [project.entry-points."voxflow.commands"]
    serve = "my_package.serve_module"

where the module (or object) named has the attributes of the command's protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any, Literal, Protocol, cast, overload

from .settings import Settings

__all__ = [
    "COMMAND_GROUP",
    "CommandName",
    "MissingCommandError",
    "Serve",
    "VoiceChat",
    "VoiceDemo",
    "load_command",
]

COMMAND_GROUP = "voxflow.commands"

CommandName = Literal["chat", "serve", "demo"]

_EXTRA: dict[str, str] = {"chat": "local", "serve": "webrtc", "demo": "voice"}


class VoiceChat(Protocol):
    """``voxflow chat --voice``: the microphone and speakers."""

    def parse_device(self, value: str | None) -> int | str | None:
        """A device option: an index if numeric, else a name; ValueError if empty."""
        ...

    def run_voice_chat(
        self, *, flow: str | None, input_device: int | str | None,
        output_device: int | str | None, headphones: bool, model: str | None,
        settings: Settings,
    ) -> int:
        """Talk to ``flow`` until the user quits; the exit code."""
        ...


class Serve(Protocol):
    """``voxflow serve``: browser calls."""

    def run_serve(
        self, *, flow: str | None, host: str, port: int, token: str | None,
        model: str | None, ice_servers: Sequence[str], ice_host_addresses: Sequence[str] | None,
        max_calls: int, settings: Settings, tls_cert: str | None, tls_key: str | None,
        self_signed: bool, trust_forwarded: bool, role: str = "all",
        offer_timeout: float = 10.0, drain_seconds: float = 60.0, stale_after: float = 5.0,
    ) -> int:
        """Serve calls until interrupted; the exit code. ``role``: ``all`` (one process),
        ``front-door`` or ``worker`` (dispatch through ``VOXFLOW_DATABASE_URL``)."""
        ...


class VoiceDemo(Protocol):
    """``voxflow demo``'s simulated voice call."""

    @property
    def DEMO_LINES(self) -> Sequence[str]:
        """What the scripted caller says, in order (``--script`` gives one WAV per line)."""
        ...

    def run_voice_demo(
        self, *, fast: bool, model: str | None, json_output: bool, out: str,
        script: str | None, settings: Settings | None,
    ) -> int:
        """Run the call, print it and write its outputs; the exit code."""
        ...


class MissingCommandError(Exception):
    """No installed package provides the command, or its package failed to import; the
    message names the extra that installs it."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.extra = _EXTRA.get(name, "all")
        super().__init__(f"{reason}; install it with: pip install 'voxflow[{self.extra}]'")


def _load(name: str) -> Any:
    found = entry_points(group=COMMAND_GROUP, name=name)
    if not found:
        raise MissingCommandError(name, "no installed package provides it")
    (entry, *_) = tuple(found)
    try:
        return entry.load()
    except ImportError as exc:
        raise MissingCommandError(
            name, f"{entry.value} (from {entry.dist.name if entry.dist else 'unknown'}) "
                  f"cannot be imported ({exc})") from None


@overload
def load_command(name: Literal["chat"]) -> VoiceChat: ...
@overload
def load_command(name: Literal["serve"]) -> Serve: ...
@overload
def load_command(name: Literal["demo"]) -> VoiceDemo: ...
def load_command(name: CommandName) -> VoiceChat | Serve | VoiceDemo:
    """The command ``name`` from the ``voxflow.commands`` entry points.

    Raises:
        MissingCommandError: no installed package provides it, or it cannot be imported
            (a missing extra); the message says what to install.
    """
    return cast("VoiceChat | Serve | VoiceDemo", _load(name))
