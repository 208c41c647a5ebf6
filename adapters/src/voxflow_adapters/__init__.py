"""voxflow adapters.

This package provides the ``voxflow`` CLI's voice commands through the
``voxflow.commands`` entry points in its ``pyproject.toml`` (see :mod:`voxflow.commands`);
the block below makes mypy check that each module named there has its command's shape.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voxflow.commands import Serve, VoiceChat, VoiceDemo

    from . import demo, local_chat
    from .webrtc import command

    _chat: VoiceChat = local_chat
    _serve: Serve = command
    _demo: VoiceDemo = demo
