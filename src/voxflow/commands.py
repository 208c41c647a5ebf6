"""The commands of the ``voxflow`` CLI that installed packages supply.

The core (:mod:`voxflow.cli`) never names the package that runs a voice call. A package
declares its commands in the ``voxflow.commands`` entry-point group; the CLI loads each
entry point when it builds its parser. An entry named like no command of the core is a
command of its own (:class:`Command`: ``voxflow serve``, or a fourth transport's); an
entry named ``chat`` or ``demo`` is the voice mode of that core command
(:class:`CommandMode`: ``chat --voice``, ``demo``'s voice call). ``voxflow-adapters``
declares all four:

========== ==================================== ===============================
name       what it is                           the extra that installs it
========== ==================================== ===============================
``chat``   the mode of ``chat --voice``         ``voxflow[local]``
``serve``  the command ``serve``                ``voxflow[webrtc]``
``demo``   the mode of ``demo``'s voice call    ``voxflow[voice]``
``status`` the command ``status``               ``voxflow[voice,postgres]``
========== ==================================== ===============================

A package that provides a command adds, in its ``pyproject.toml``::

    [project.entry-points."voxflow.commands"]
    phone = "my_package.commands:phone"

where the object named is a :class:`Command`. It is loaded for every ``voxflow``
invocation (to list it in ``voxflow --help``), so its module imports nothing heavy: its
:meth:`Command.run` imports the implementation, and turns an ``ImportError`` there into
a :class:`MissingCommandError` (:func:`implementation`).

Each command gets the options every command that runs an assistant shares, defined once
in the core (``FLOW``, ``--model``, ``--log-level``, ``--log-format`` and the
``VOXFLOW_*`` variables in its ``--help``), then adds its own
(:meth:`Command.add_arguments`); its :meth:`Command.run` reads the shared ones checked
through the :class:`CommandLine` it is given.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .plugins import declared
from .settings import Settings

__all__ = [
    "COMMAND_GROUP",
    "MODES",
    "Command",
    "CommandLine",
    "CommandMode",
    "InstalledCommands",
    "MissingCommandError",
    "UsageError",
    "add_metrics_arguments",
    "check_seconds",
    "implementation",
    "installed_commands",
]

COMMAND_GROUP = "voxflow.commands"

MODES = ("chat", "demo")
"""The core commands whose voice mode an entry point of the group supplies."""

_EXTRA: dict[str, str] = {"chat": "local", "serve": "webrtc", "phone": "phone", "demo": "voice",
                          "status": "voice,postgres"}


class UsageError(Exception):
    """A bad option or path, found before the command ran; the message says the fix
    (the CLI prints it on one line and exits 2)."""


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` and ``--metrics-host``: the options of every long-running
    process (``serve`` in each role, ``jobs worker``; :mod:`voxflow.monitoring`)."""
    group = parser.add_argument_group(
        "monitoring (README: Monitoring; a bearer token for /metrics: VOXFLOW_METRICS_TOKEN)")
    group.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="serve /metrics (Prometheus), /health and /ready on this port "
                            "(default: $VOXFLOW_METRICS_PORT, else off)")
    group.add_argument("--metrics-host", default=None, metavar="IP",
                       help="their bind address (default: $VOXFLOW_METRICS_HOST, else "
                            "127.0.0.1; beyond loopback needs VOXFLOW_METRICS_TOKEN)")


def check_seconds(value: float, option: str, least: float, most: float) -> float:
    """``value`` if it is seconds from ``least`` to ``most``, both included (NaN and
    infinity never are): the check of a command's seconds option.

    Raises:
        UsageError: it is not; the message names ``option`` and gives the range.
    """
    if not least <= value <= most:
        raise UsageError(f"{option} {value:g}: give seconds, at least {least:g} and at most "
                         f"{most:g}")
    return value


class MissingCommandError(Exception):
    """No installed package provides the command, or its package failed to import; the
    message says what to install (the CLI prints it and exits 1).

    Args:
        name: the entry point's name (``serve``).
        reason: what is missing.
        install: the fix; for voxflow's own commands, the extra that installs them.
    """

    def __init__(self, name: str, reason: str, *, install: str | None = None) -> None:
        self.name = name
        if install is None:
            install = f"pip install 'voxflow[{_EXTRA.get(name, 'all')}]'"
        self.install = install
        super().__init__(f"{reason}; install it with: {install}")


class CommandLine(Protocol):
    """What the core CLI offers a command's :meth:`Command.run`: the shared options,
    checked (each raises :class:`UsageError` with the fix)."""

    def settings(self, *, log_level: str | None = None) -> Settings:
        """The ``VOXFLOW_*`` variables with the command's options over them, applied to
        logging and the LLM policy; ``log_level``: the command's own default level,
        used when neither ``--log-level`` nor ``VOXFLOW_LOG_LEVEL`` is given."""
        ...

    def check_assistant(self, settings: Settings, *, voice: bool = True) -> str | None:
        """Check ``FLOW`` and the model; returns the model the assistant uses.
        ``voice``: the flow must keep turn records (a call)."""
        ...


class Command(Protocol):
    """A command of its own (``voxflow <name>``), supplied by an installed package.

    A command that runs no flow (``voxflow status``) sets ``runs_flow = False``: it gets
    ``--log-level`` and ``--log-format``, not ``FLOW`` and ``--model``.
    """

    @property
    def help(self) -> str:
        """Its line in ``voxflow --help``."""
        ...

    @property
    def description(self) -> str:
        """The first line of its own ``--help``."""
        ...

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add its own options (the shared ones are there already)."""
        ...

    def run(self, args: argparse.Namespace, cli: CommandLine) -> int:
        """Check the options, then run; the exit code.

        Raises:
            UsageError: a bad option, before anything ran.
            MissingCommandError: its implementation cannot be imported.
        """
        ...


class CommandMode(Protocol):
    """The voice mode of a core command (``chat --voice``, ``demo``'s voice call)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> Sequence[argparse.Action]:
        """Add the mode's own options to the core command's parser; returns them (the
        core refuses them when the mode is not chosen)."""
        ...

    def run(self, args: argparse.Namespace, settings: Settings, model: str | None) -> int:
        """Run the mode with the checked shared options (``model``: the assistant's); the
        exit code.

        Raises:
            UsageError: a bad option, before anything ran.
            MissingCommandError: its implementation cannot be imported.
        """
        ...


def _lacks(loaded: object, *, mode: bool) -> list[str]:
    """What ``loaded`` lacks to be a :class:`CommandMode` (``mode``) or a :class:`Command`."""
    names = ("add_arguments", "run") if mode else ("add_arguments", "run", "help", "description")
    return [name for name in names
            if not (isinstance(getattr(loaded, name, None), str) if name in ("help", "description")
                    else callable(getattr(loaded, name, None)))]


@dataclass(frozen=True, slots=True)
class InstalledCommands:
    """The entry points of :data:`COMMAND_GROUP`, loaded.

    Attributes:
        commands: the commands of their own, by name (in name order).
        modes: the modes of the core commands in :data:`MODES`, by name.
        missing: each of voxflow's own voice commands that no installed package provides,
            and each command whose entry point cannot be loaded: why, with what to install.
    """

    commands: Mapping[str, Command]
    modes: Mapping[str, CommandMode]
    missing: Mapping[str, MissingCommandError]


def installed_commands(*, core: Sequence[str] = ()) -> InstalledCommands:
    """Load the entry points of :data:`COMMAND_GROUP` (the first of each name).

    Args:
        core: the core's own commands; an entry point named like one of them that is not
            in :data:`MODES` is ignored (the core's command stays).
    """
    commands: dict[str, Command] = {}
    modes: dict[str, CommandMode] = {}
    missing: dict[str, MissingCommandError] = {}
    for entry, package, _ in sorted(declared(COMMAND_GROUP), key=lambda d: d.entry.name):
        name, dist = entry.name, package if package != "?" else "unknown"
        if name in commands or name in modes or name in missing:
            continue
        if name in core and name not in MODES:
            continue
        try:
            loaded = entry.load()
        except Exception as exc:  # a broken package: said when its command is typed
            why = "cannot be imported" if isinstance(exc, ImportError) else "failed to load"
            missing[name] = MissingCommandError(
                name, f"{entry.value} (from {dist}) {why} ({type(exc).__name__}: {exc})",
                install=None if name in _EXTRA else f"pip install --force-reinstall {dist}")
            continue
        lacks = _lacks(loaded, mode=name in MODES)
        if lacks:  # (e.g. an older voxflow-adapters whose entry points name modules)
            missing[name] = MissingCommandError(
                name, f"{entry.value} (from {dist}) is not a voxflow command: it has no "
                f"{', '.join(lacks)}",
                install=None if name in _EXTRA else f"pip install --force-reinstall {dist}")
        elif name in MODES:
            modes[name] = loaded
        else:
            commands[name] = loaded
    for name in _EXTRA:
        if name not in commands and name not in modes and name not in missing:
            missing[name] = MissingCommandError(name, "no installed package provides it")
    return InstalledCommands(commands=commands, modes=modes, missing=missing)


@contextlib.contextmanager
def implementation(name: str) -> Iterator[None]:
    """Around the import of the implementation of the command ``name`` (in its
    :meth:`Command.run`, so listing the commands imports nothing heavy): an
    ``ImportError`` there (a missing extra or native library) becomes a
    :class:`MissingCommandError` that says what to install."""
    try:
        yield
    except ImportError as exc:
        raise MissingCommandError(name, f"{exc.name or 'a module'} cannot be imported ({exc})"
                                  ) from None
