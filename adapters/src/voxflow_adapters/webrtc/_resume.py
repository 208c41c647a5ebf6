"""A resume's admission for :class:`~voxflow_adapters.webrtc.server.WebRtcServer` (a
collaborator it holds, given its store, settings, worker id and live calls): the same
page reconnecting (its live call's slot is taken over, its state read once) and the
lease of the call's session (a new one, or the resumed one once its token is checked).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from voxflow.errors import FencedWriteError

from ..hosting.metrics import CallMetrics
from ..hosting.ownership import OwnerDead, SessionBusyError, SessionOwnership
from ..hosting.resume import check_resume_token
from ..hosting.wire import ResumeRequest
from .peer import WebRtcPeer
from .signaling import CallRefused, ServerSettings

__all__ = ["ResumeAdmission", "StoredRead"]


@dataclass(frozen=True, slots=True)
class StoredRead:
    """A resumed session's state (None: not stored) read once, for its token: the call's
    own is loaded under its new lease (whose epoch fences every write), never this one."""

    stored: Mapping[str, Any] | None


class ResumeAdmission:
    """The resume side of :class:`~voxflow_adapters.webrtc.server.WebRtcServer`'s
    admission: whether an offer is its page reconnecting, and the lease of a call's
    session.

    Args:
        store: where calls' sessions are kept (None: no call is resumed).
        settings: the server's (``lease_seconds``, ``resume_wait``).
        worker_id: the server's name in lease owners.
        sessions: the server's live calls by session (session id -> call id), read only.
        calls: the server's live calls (call id -> its peer and task), read only.
        metrics: told of each lease acquired (an
            :class:`~voxflow_adapters.hosting.ownership.OwnershipWatch`); None: nothing.
    """

    def __init__(
        self, store: Any | None, *, settings: ServerSettings, worker_id: str,
        sessions: Mapping[str, str], calls: Mapping[str, tuple[WebRtcPeer, asyncio.Task[None]]],
        metrics: CallMetrics | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._worker_id = worker_id
        self._sessions = sessions
        self._calls = calls
        self._metrics = metrics
        self.owner_dead: OwnerDead | None = None
        """Whether the holder of a resumed session's lease is dead (None: every live
        lease is waited out); the server's :attr:`owner_dead
        <voxflow_adapters.webrtc.server.WebRtcServer.owner_dead>`."""

    async def reconnecting(
        self, resume: ResumeRequest | None
    ) -> tuple[str | None, StoredRead | None]:
        """The call of this process that ``resume`` goes on with, if it is live here and
        the resume token is its session's (the same page reconnecting: the new call takes
        that call's place, not one more slot), else None; and the state read, if it was."""
        if resume is None or self._store is None:
            return None, None
        live = self._sessions.get(resume.session_id)
        if live is None or live not in self._calls:
            return None, None
        try:
            stored = await asyncio.to_thread(self._store.load_state, resume.session_id)
        except Exception:  # (judged as a new call: the resume then meets the store's 503)
            return None, None
        return (live if check_resume_token(stored, resume.token) else None), StoredRead(stored)

    async def own(
        self, call_id: str, resume: ResumeRequest | None, on_lost: Callable[[FencedWriteError],
                                                                            None],
        read: StoredRead | None = None,
    ) -> SessionOwnership:
        """The lease of the call's session (a new one, or the resumed one once its token
        is checked: on ``read``, the state :meth:`reconnecting` read, if it did).

        Raises:
            CallRefused: the resume token is not the session's (403), or its lease is
                still held by a live worker (409).
        """
        assert self._store is not None
        settings, owner = self._settings, f"{self._worker_id}/{call_id}"
        if resume is None:
            return await SessionOwnership.acquire(
                self._store, str(uuid.uuid4()), owner, ttl=settings.lease_seconds,
                on_lost=on_lost, watch=self._metrics)
        stored = (read.stored if read is not None
                  else await asyncio.to_thread(self._store.load_state, resume.session_id))
        if not check_resume_token(stored, resume.token):
            raise CallRefused(403, "resume refused: no such session, or the resume token "
                              "is not this session's (start a new call)", "resume_token")
        live = self._sessions.get(resume.session_id)
        if live is not None and live in self._calls:  # the same page reconnecting
            old_peer, old_task = self._calls[live]
            old_peer.close_soon("the page reconnected: the call goes on in a new connection")
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(old_task)
        try:
            return await SessionOwnership.acquire(
                self._store, resume.session_id, owner, ttl=settings.lease_seconds,
                wait=settings.resume_wait, on_lost=on_lost, owner_dead=self.owner_dead,
                watch=self._metrics)
        except SessionBusyError:
            raise CallRefused(409, f"the session is live on another worker (still held "
                              f"after {settings.resume_wait:g} s); retry the resume later",
                              "resume_busy") from None
