"""The transports' ``VOXFLOW_*`` settings: where and how many calls a process takes
(:class:`HostingSection`, ``serve`` and ``phone`` alike), WebRTC's
(:class:`WebRtcSection`) and the phone's (:class:`PhoneSection`), secrets the core never
knows.

======================================  ===========================  ==================
variable                                setting                      default
======================================  ===========================  ==================
``VOXFLOW_HOST`` / ``VOXFLOW_PORT``     ``host`` / ``port``          ``127.0.0.1`` / 8080
``VOXFLOW_MAX_CALLS``                   ``max_calls``                none (measured)
``VOXFLOW_P95_TARGET_MS``               ``p95_target_ms``            1000
``VOXFLOW_TURN_USERNAME``               ``turn_username``            none
``VOXFLOW_TURN_CREDENTIAL``             ``turn_credential``          none (secret)
``VOXFLOW_WEBRTC_RECEIVE_HOLD``         ``webrtc_receive_hold``      ``3``
``VOXFLOW_TWILIO_AUTH_TOKEN``           ``twilio_auth_token``        none (secret)
======================================  ===========================  ==================

Sections of :class:`voxflow.settings.Settings`, registered in ``pyproject.toml`` (the
``voxflow.settings`` entry points, one per variable) so the core lists and checks these
variables without importing this package; read them with
``settings.section(WebRtcSection)``. This module imports no transport, so listing the
variables (``--help``) loads neither aiortc nor the carrier's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, SecretStr

from voxflow.settings import SettingsSection

__all__ = ["HostingSection", "PhoneSection", "WebRtcSection"]


class HostingSection(SettingsSection):
    """Where a process answering calls listens (``--host``, ``--port``) and how many calls
    it takes (``voxflow serve`` and ``voxflow phone``)."""

    FIXES: ClassVar[Mapping[str, str]] = {
        "port": "give a TCP port from 1 to 65535",
        "max_calls": "give a whole number from 1 to 10000, or leave it unset (as many calls "
        "as their measured cost leaves room for)",
    }

    host: str = Field("127.0.0.1", description="`voxflow serve` bind address")
    port: int = Field(8080, ge=1, le=65535, description="`voxflow serve` port")
    max_calls: int | None = Field(
        None, ge=1, le=10_000, description="`voxflow serve` and `voxflow phone`: "
        "concurrent calls a process takes at most; below it, as many as the calls' measured "
        "CPU cost leaves room for (unset: no other bound); the next is refused (503; a phone "
        "call rejected busy) rather than slowing every call down",
    )
    p95_target_ms: float = Field(
        1000.0, gt=0, le=60_000, description="`voxflow serve` and `voxflow phone`: refuse "
        "calls while the recent "
        "voice-to-voice p95 (ms) is above this",
    )


class WebRtcSection(SettingsSection):
    """``voxflow serve``'s WebRTC settings: the TURN server's account, and how long a
    lost packet may hold the audio behind it."""

    FIXES: ClassVar[Mapping[str, str]] = {
        "webrtc_receive_hold": "give a whole number of 20 ms packets from 0 to 15 (3: a lost "
        "packet holds the audio behind it at most 60 ms; packets in order are never held)",
    }

    turn_username: str | None = Field(
        None, description="`voxflow serve --ice-server turn:...`: the TURN user name"
    )
    turn_credential: SecretStr | None = Field(
        None, description="`voxflow serve --ice-server turn:...`: the TURN password (never "
        "on the command line)",
    )
    webrtc_receive_hold: int = Field(
        3, ge=0, le=15, description="`voxflow serve`: inbound RTP packets a "
        "lost or overtaken packet may hold before it is skipped (packets in order are "
        "decoded at once)",
    )


class PhoneSection(SettingsSection):
    """``voxflow phone``'s settings: the carrier account's secret."""

    twilio_auth_token: SecretStr | None = Field(
        None, description="`voxflow phone`: the carrier account's auth token, which every "
        "webhook's signature is checked with (never on the command line, never logged)",
    )
