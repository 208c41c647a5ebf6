"""What a call worker asks of the process's calls, whatever their transport: the
:class:`CallHost` port (a browser call host, :class:`~voxflow_adapters.webrtc.server.
WebRtcServer`, or a phone one, :class:`~voxflow_adapters.phone.host.PhoneHost`), the
answer to a dispatched request (:class:`OfferAnswer`) and its refusal
(:class:`CallRefused`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from voxflow.ids import SessionId

from .admission import Load
from .errors import SignalingError
from .ownership import OwnerDead
from .wire import ResumeRequest

__all__ = ["CallHost", "CallRefused", "OfferAnswer"]


class CallRefused(SignalingError):
    """A call request that is not answered: ``status`` (HTTP), ``reason`` (for the
    caller) and ``key`` (the counter it is recorded under)."""

    def __init__(self, status: int, reason: str, key: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.key = key


class OfferAnswer(BaseModel):
    """The answer to an accepted call request (for a browser, the ``POST /offer``
    response body; for a phone call, the media stream's address)."""

    model_config = ConfigDict(frozen=True)

    type: str = "answer"
    sdp: str
    call_id: str


class CallHost(Protocol):
    """The calls of one worker process (see the module); a
    :class:`~voxflow_adapters.hosting.worker.CallWorker` claims requests for it."""

    worker_id: str
    """Its name in lease owners (``<worker_id>/<call id>``)."""
    call_prefix: str
    """Call ids are ``<call_prefix>-<n>`` (the worker puts its id in them)."""
    on_call_ended: Callable[[str], None] | None
    """Called with the call id once a call has ended and its slot is free."""
    owner_dead: OwnerDead | None
    """Whether a session's lease holder is dead (its lease is then taken over)."""
    store: Any
    """Where the calls' sessions are kept (None: not persisted, never handed over)."""

    @property
    def max_calls(self) -> int:
        """The calls it may hold at once (the worker's slots)."""
        ...

    @property
    def calls_held(self) -> int:
        """Calls running plus requests being answered."""
        ...

    def load(self) -> Load:
        """Its admission's load and headroom."""
        ...

    async def watch_loop(self) -> None:
        """Measure the event loop's lag for its admission until cancelled."""
        ...

    async def answer_offer(self, sdp: str, resume: ResumeRequest | None = None, *,
                           trace_context: Any = None) -> OfferAnswer:
        """Start a call for the request ``sdp`` (its body: an SDP offer, a phone call's
        request).

        Raises:
            CallRefused: the call cannot be taken.
        """
        ...

    def note_refusal(self, key: str) -> None:
        """Count a refusal under ``key``."""
        ...

    def end_call(self, call_id: str, reason: str) -> bool:
        """End one running call; False if there is none."""
        ...

    def call_ids(self) -> list[str]:
        """The running calls, oldest first."""
        ...

    async def hand_over(self, call_id: str, reason: str, *, quiet_within: float
                        ) -> SessionId | None:
        """Move a running call to another worker at its next quiet moment; the session
        handed over, or None."""
        ...

    async def end_calls(self, reason: str) -> None:
        """End every running call and wait until each closed."""
        ...
