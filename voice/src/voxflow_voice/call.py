"""CallContext: what the parts of one voice call share.

A :class:`~voxflow_voice.session.VoiceSession` builds one per call and hands it to each
of its parts (the speaker, the overlap handler, the floor, the announcement delivery,
the speculative replies) instead of a callback apiece: the identities (the runner whose
flow state names the session), the session clock and the sample-to-time anchor of the
input, where session events go, the call's voice settings, the locks every part takes,
the ReplyQueue and the JobRunner, and whether the client is still there.

The settings' type is a parameter: this module sits under the speaking and listening
layers whose settings make up a session's
:class:`~voxflow_voice.session.VoiceSettings`, so a part names only what it reads (the
session's parts ``CallContext[VoiceSettings]``, the speaker a protocol of its two
fields), and each reads its settings here rather than taking them one by one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from voxflow.clock import Clock
from voxflow.ids import SessionId
from voxflow.jobs import JobRunner
from voxflow.replies import ReplyQueue
from voxflow.turns import TurnRunner

from .audio import STT_SAMPLE_RATE
from .events import SessionEvent

__all__ = ["CallContext"]

_S = TypeVar("_S", covariant=True)  # a context of VoiceSettings serves a part reading less


@dataclass(eq=False, slots=True)
class CallContext(Generic[_S]):
    """What the parts of one voice call share (see the module docs).

    Attributes:
        turns: the TurnRunner of the conversational flow that answers.
        clock: the session clock.
        emit: records one session event (the session's own recorder).
        settings: the call's voice settings (the session's
            :class:`~voxflow_voice.session.VoiceSettings`).
        lock: the state lock: serialises turns, job commits and queue operations (the
            JobRunner's ``state_lock`` when there is one).
        speaking: held while a reply (answer or announcement) is spoken: one at a time.
        replies: the ReplyQueue of background announcements, if any.
        jobs: the JobRunner of the call's background jobs, if any.
        gone: the client is gone (the transport's input ended): nobody hears us any more.
        anchor: (clock time, input sample) of the latest input frame (:meth:`time_of`).
    """

    turns: TurnRunner
    clock: Clock
    emit: Callable[[SessionEvent], None]
    settings: _S
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    speaking: asyncio.Lock = field(default_factory=asyncio.Lock)
    replies: ReplyQueue | None = None
    jobs: JobRunner | None = None
    gone: bool = False
    anchor: tuple[float, int] = (0.0, 0)

    @property
    def session_id(self) -> SessionId:
        """The conversation's identity (the flow state's ``id``, read each time: a restore
        may replace the state)."""
        return SessionId(str(self.turns.flow.state.id))

    @property
    def state(self) -> Any:
        """The flow's live state (its turns, replies, jobs and deliveries)."""
        return self.turns.flow.state

    def time_of(self, sample: int) -> float:
        """The clock time of input ``sample`` (from the latest frame's anchor)."""
        at, position = self.anchor
        return at + (sample - position) / STT_SAMPLE_RATE
