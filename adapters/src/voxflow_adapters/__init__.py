"""voxflow adapters.

This package provides the ``voxflow`` CLI's voice commands through the
``voxflow.commands`` entry points in its ``pyproject.toml`` (see :mod:`voxflow.commands`
and :mod:`voxflow_adapters.commands`); the block below makes mypy check that each object
named there has its command's shape.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voxflow.commands import Command, CommandMode

    from . import commands

    _chat: CommandMode = commands.voice_chat
    _serve: Command = commands.serve
    _demo: CommandMode = commands.voice_demo
