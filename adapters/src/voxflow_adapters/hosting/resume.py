"""Resuming a call: the resume token, and what was heard, kept in the session itself.

**The resume token.** A persisted call's session gets one token when it is created
(:func:`issue_resume_token`: 256 random bits, URL-safe). The page receives it in the
``hello`` message (over the encrypted data channel) and sends it back, with the session
id, in the ``resume`` field of a later ``POST /offer``. Only its SHA-256 is stored, as a
``resume_token`` event in the session's own events, so any worker sharing the database
can check it (:func:`check_resume_token`, constant-time) and none can recover it. The
token is never logged (it is not in any repr or log line).

**What was heard.** While a reply plays, :class:`HeardJournal` keeps the words heard so
far (from the transport's receipts) in its reply record (``ReplyRecord.heard_text`` and
``heard_seconds``: one mark per reply, updated in place, so a long call stores one row
per reply however long it plays) and saves them, at most once per ``interval`` and only
when more was heard; when the reply settles (played whole or cut: the session's
``TurnMetrics``), a ``reply_settled`` event; so does a background announcement (its
``DeliverySettled``): what it covered, and the history it was heard into, are saved
then, so that a next owner never announces it again. The answer saved by the turn
carries the full generated text, so after a worker's death
:func:`settle_dropped_replies` (run on the restored state before the call goes on) cuts
every answer without a ``reply_settled`` event to its saved heard words (none saved:
nothing was heard), marked interrupted: the history never claims words the user did not
hear. Its message is found by identity (the ``delivery_id`` its turn put in its
metadata), and one is added when the turn died before recording any. A mark waits for
the session's state lock, which the turn holds while its answer is still being
generated: up to one ``interval`` of heard words, or those heard before the generation
ended, can be missing from it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from voxflow_voice.events import DeliverySettled, ReplyTextStreamed, SessionEvent, TurnMetrics
from voxflow_voice.speak.heard import HeardReply

from voxflow.conversation import ConversationEvent, ConversationMessage
from voxflow.conversation.persistence import CHECKED_TAIL
from voxflow.errors import FencedWriteError
from voxflow.ids import DeliveryId
from voxflow.turns import ReplyRecord

__all__ = [
    "CALL_ENDED_EVENT",
    "DROPPED_MARK",
    "HeardJournal",
    "call_ended",
    "check_resume_token",
    "issue_resume_token",
    "settle_dropped_replies",
]

logger = logging.getLogger(__name__)

DROPPED_MARK = "[cut off: the call dropped]"
"""Ends an answer that was cut because the call dropped (the worker died, the network)."""

_TOKEN_EVENT, _HEARD_EVENT, _SETTLED_EVENT = "resume_token", "reply_heard", "reply_settled"

CALL_ENDED_EVENT = "call_ended"
"""The session event a call saves when it ends for good (the caller hung up, or the
worker ended it): a phone call's carrier, coming back after its stream ended, is not
reconnected to a session that has it (:func:`call_ended`)."""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_resume_token(state: Any) -> str:
    """A new resume token for ``state``'s session; its hash is appended to its events
    (saved with the state's next save)."""
    token = secrets.token_urlsafe(32)
    state.events.append(ConversationEvent(type=_TOKEN_EVENT,
                                          payload={"sha256": _digest(token)}))
    return token


def check_resume_token(stored: Mapping[str, Any] | None, token: str) -> bool:
    """Whether ``token`` is the resume token of the stored session ``stored`` (a loaded
    state; None: no such session). Constant-time in the token."""
    if stored is None:
        return False
    hashes = [e.get("payload", {}).get("sha256") for e in stored.get("events", ())
              if isinstance(e, Mapping) and e.get("type") == _TOKEN_EVENT]
    expected = hashes[-1] if hashes and isinstance(hashes[-1], str) else "0" * 64
    return hmac.compare_digest(_digest(token), expected) and bool(hashes)


def call_ended(stored: Mapping[str, Any] | None) -> bool:
    """Whether the stored session ``stored`` (a loaded state; None: none) ended for good:
    it holds a :data:`CALL_ENDED_EVENT`."""
    return stored is not None and any(
        isinstance(e, Mapping) and e.get("type") == CALL_ENDED_EVENT
        for e in stored.get("events", ()))


def _events_of(state: Any, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in state.events if e.type == kind]


def settle_dropped_replies(state: Any) -> list[DeliveryId]:
    """Cut every answer that never settled (its call dropped mid-reply) to the words
    saved as heard, marked interrupted; returns their delivery ids.

    The answer's assistant message (the last one naming its ``delivery_id`` in its
    metadata; appended after the history if the turn recorded none) becomes ``"<heard
    words> [cut off: the call dropped]"`` with ``metadata.interrupted``, ``dropped``,
    ``heard_text``, ``heard_seconds``, ``generated_text``, ``turn_id`` and
    ``delivery_id``; its reply record is marked interrupted; a ``reply_settled`` event
    (``"dropped"``) records it.
    """
    settled = {p.get("delivery_id") for p in _events_of(state, _SETTLED_EVENT)}
    legacy: dict[str, dict[str, Any]] = {}  # marks of a session saved as events
    for payload in _events_of(state, _HEARD_EVENT):
        legacy[str(payload.get("delivery_id"))] = payload
    cut: list[DeliveryId] = []
    for reply in list(getattr(state, "replies", {}).values()):
        if reply.kind != "answer" or reply.delivery_id in settled:
            continue
        if reply.heard_text is not None:
            words, seconds = reply.heard_text.strip(), reply.heard_seconds
        else:
            mark = legacy.get(reply.delivery_id, {})
            words = str(mark.get("heard_text", "")).strip()
            seconds = mark.get("heard_seconds", 0.0)
        _cut_message(state, reply, words, seconds)
        reply.interrupted = True
        state.events.append(ConversationEvent(
            type=_SETTLED_EVENT, payload={"delivery_id": reply.delivery_id, "how": "dropped",
                                          "heard_text": words}))
        cut.append(reply.delivery_id)
    return cut


def _cut_message(state: Any, reply: ReplyRecord, words: str, seconds: Any) -> None:
    """Put what was heard of ``reply`` in its assistant message (or in a new one)."""
    messages: list[ConversationMessage] = state.messages
    full = reply.text or "".join(reply.segments)
    content = f"{words} {DROPPED_MARK}".strip()
    metadata = {"interrupted": True, "dropped": True, "heard_text": words,
                "heard_seconds": seconds, "generated_text": full,
                "turn_id": reply.turn_id, "delivery_id": reply.delivery_id}
    index = _message_of(messages, reply, full)
    if index is None:  # the turn died before its flow recorded the answer
        messages.append(ConversationMessage(role="assistant", content=content,
                                            metadata=metadata))
        return
    target = messages[index]
    if isinstance(target.content, str) and target.content:
        metadata["generated_text"] = target.content
    fields = target.model_dump()
    fields.update(content=content, metadata={**target.metadata, **metadata})
    cut = ConversationMessage(**fields)  # messages are frozen: replaced, validated
    if index >= len(messages) - CHECKED_TAIL:
        messages[index] = cut  # (the next save finds a replaced item of the tail)
    else:  # an older item replaced in place is not seen by a save: a new list is
        state.messages = [*messages[:index], cut, *messages[index + 1:]]


def _message_of(messages: list[ConversationMessage], reply: ReplyRecord, full: str
                ) -> int | None:
    """The index of ``reply``'s assistant message: the last one naming its delivery id
    (as its turn wrote it); for a message saved before messages named their reply, the
    last one holding its full text; None if there is none."""
    legacy: int | None = None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "assistant":
            continue
        named = message.metadata.get("delivery_id")
        if named == reply.delivery_id:
            return index
        if legacy is None and named is None and full and message.content == full:
            legacy = index
    return legacy


class HeardJournal:
    """Saves, while a call's answers play, what the user heard of them (see the module).

    Args:
        flow: the call's (persisted) flow.
        lock: the session's state lock (held around each mark and its save).
        heard: the words heard so far of a delivery (``VoiceSession.playback.heard_reply``).
        interval: the longest time (s) between two saved marks of a playing answer.
    """

    def __init__(
        self, flow: Any, lock: asyncio.Lock, heard: Callable[[DeliveryId], HeardReply], *,
        interval: float = 0.5,
    ) -> None:
        self.flow = flow
        self.lock = lock
        self.interval = interval
        self._heard = heard
        self._playing: DeliveryId | None = None
        self._saved_words: str | None = None
        self._wake = asyncio.Event()
        self._settles: asyncio.Queue[DeliveryId] = asyncio.Queue()
        # taken from the queue, not yet in the state's events; in the events, not yet
        # saved (a step cancelled by the call's end leaves them to the flush)
        self._owed: list[DeliveryId] = []
        self._unsaved = False
        self.saves = 0

    def on_event(self, event: SessionEvent) -> None:
        """Follow the session (its ``on_event``): which answer plays, when it settles."""
        if isinstance(event, ReplyTextStreamed) and self._playing != event.delivery_id:
            replies = getattr(self.flow.state, "replies", {})
            record = replies.get(event.delivery_id)
            if record is not None and record.kind == "answer":
                self._playing, self._saved_words = event.delivery_id, None
                self._wake.set()
        elif isinstance(event, TurnMetrics) and event.delivery_id is not None:
            if event.delivery_id == self._playing:
                self._playing = None
            self._settles.put_nowait(event.delivery_id)
            self._wake.set()
        elif isinstance(event, DeliverySettled):
            # an announcement settled: its coverage (and, recorded next under the lock,
            # its history) saved now, or the session's next owner announces it again
            self._settles.put_nowait(event.delivery_id)
            self._wake.set()

    async def run(self) -> None:
        """Save heard marks and settlements until cancelled (a failed save is logged; a
        refused one, the lease lost, ends the journal)."""
        while True:
            try:
                await self._step()
            except FencedWriteError:
                return
            except Exception:
                logger.warning("could not save what was heard", exc_info=True)
            self._wake.clear()
            if self._playing is None and self._settles.empty():
                await self._wake.wait()
            else:
                await asyncio.sleep(self.interval)

    async def _step(self) -> None:
        while not self._settles.empty():
            self._owed.append(self._settles.get_nowait())
        playing = self._playing
        words = None
        if playing is not None:
            mark = self._heard(playing)
            words = mark.text.strip()
            if words == (self._saved_words or "") and self._saved_words is not None:
                words = None
        if not self._owed and not self._unsaved and (playing is None or words is None):
            return
        async with self.lock:
            state = self.flow.state
            events = state.events
            record = state.replies.get(playing) if playing is not None else None
            if playing is not None and record is not None and words is not None:
                heard = self._heard(playing)
                # one mark per reply, updated: its record's row is upserted, nothing
                # appended, however long the reply plays
                record.heard_text = heard.text.strip()
                record.heard_seconds = round(heard.heard_seconds, 3)
                self._saved_words = record.heard_text
            settled, self._owed = self._owed, []
            for delivery_id in settled:
                events.append(ConversationEvent(type=_SETTLED_EVENT,
                                                payload={"delivery_id": delivery_id}))
            self._unsaved = True
            await self.flow.asave_state("heard")
            self._unsaved = False
            self.saves += 1

    async def flush(self) -> None:
        """Save what is pending now (at the call's end)."""
        await self._step()

    def __repr__(self) -> str:
        return f"HeardJournal(playing={self._playing!r}, saves={self.saves})"
