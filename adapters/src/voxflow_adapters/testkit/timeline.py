"""A scripted call as text: who spoke when, what was said, what the user heard.

:func:`call_timeline` renders a finished :class:`~voxflow_adapters.testkit.scenario.CallResult`
as one line per fact, on call time (seconds since the call started), with short labels
for the identities (``turn 1``, ``reply 2``) in order of appearance::

     0.30  user       starts speaking
     1.28  user       stops speaking
     1.34  user       turn 1 committed: "Tell me a story."
     1.35  assistant  reply 1 starts (answer to turn 1)
     1.35  assistant  reply 1 says: "Once upon a time, in a small harbour town, ..."
     1.52  assistant  reply 1 audio starts
     5.02  user       starts speaking
     5.31  user       barges in on reply 1
     5.33  client     reply 1 flushed (41280 samples dropped)
     5.34  assistant  reply 1 interrupted after 3.80 s; heard: "Once upon a time, in ..."

A background announcement shows when its job's result was queued (``announcement
queued: reply 2 (job ..., for turn 1), waits for the floor``), then when it started and
was heard, so the wait for the floor is on the page.

The assertions of :mod:`voxflow_adapters.testkit.assertions` put it under every failure, so a
failed call test shows the call, not a bare ``assert False``. :class:`Labels` gives the
same short names to use in messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .result import CallResult

__all__ = ["Labels", "announcements", "call_timeline", "quote"]

_QUOTE_LIMIT = 90


@dataclass(slots=True)
class Labels:
    """Short names for a call's turns and replies (``turn 1``, ``reply 1``), in order of
    appearance in its events."""

    turns: dict[str, str] = field(default_factory=dict)
    replies: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, call: CallResult) -> Labels:
        """Label every turn and reply of ``call``."""
        labels = cls()
        for e in call.events:
            if e.kind in ("turn_committed", "speculative_reply_discarded"):
                labels.turn(e.turn_id)
            delivery_id = getattr(e, "delivery_id", None)
            if delivery_id is not None and e.kind != "announcement_queued":
                labels.reply(delivery_id)  # replies are numbered as they start
        for e in call.events:  # then those queued but never started
            if e.kind == "announcement_queued":
                labels.reply(e.delivery_id)
        return labels

    def turn(self, turn_id: str) -> str:
        """``turn N`` for ``turn_id`` (a new label if unseen)."""
        return self.turns.setdefault(turn_id, f"turn {len(self.turns) + 1}")

    def reply(self, delivery_id: str) -> str:
        """``reply N`` for ``delivery_id`` (a new label if unseen)."""
        return self.replies.setdefault(delivery_id, f"reply {len(self.replies) + 1}")


def announcements(call: CallResult) -> set[str]:
    """The delivery ids of the call's background announcements (job results spoken
    through the ReplyQueue: a ``progress`` reply, or one settled as a delivery), as
    opposed to answers to the user's turns."""
    settled = {e.delivery_id for e in call.events if e.kind == "delivery_settled"}
    return {
        e.delivery_id for e in call.events
        if e.kind == "reply_started" and (e.reply_kind == "progress" or e.delivery_id in settled)
    }


def quote(text: str, limit: int = _QUOTE_LIMIT) -> str:
    """``text`` in double quotes, shortened with an ellipsis past ``limit`` characters."""
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return f'"{text}"'


def _lines(call: CallResult, labels: Labels) -> Iterable[tuple[float, int, str, str]]:
    """(time, order, who, what) for every fact of the call."""
    background = announcements(call)
    events: list[Any] = list(call.events)  # one branch per kind: read as Any
    for order, e in enumerate(events):
        kind = e.kind
        if kind == "speech_started":
            yield e.onset_at, order, "user", "starts speaking"
        elif kind == "speech_ended":
            yield e.end_at, order, "user", "stops speaking"
        elif kind == "transcript_discarded":
            yield e.at, order, "user", f"sound discarded, no turn ({e.reason})"
        elif kind == "turn_committed" and e.input_revision > 1:
            yield e.at, order, "user", (
                f"{labels.turn(e.turn_id)} continued, committed again with all its words "
                f"(revision {e.input_revision}): {quote(e.text)}")
        elif kind == "turn_committed":
            yield e.at, order, "user", f"{labels.turn(e.turn_id)} committed: {quote(e.text)}"
        elif kind == "speculative_reply_discarded":
            yield e.at, order, "assistant", (
                f"speculative answer to {quote(e.text)} discarded unheard ({e.reason})"
            )
        elif kind == "turn_revoked":
            yield e.at, order, "user", (
                f"{labels.turn(e.turn_id)} taken back, its answer unheard ({e.reason})"
            )
        elif kind == "reply_started":
            what = (f"announcement, for {labels.turn(e.turn_id)}"
                    if e.delivery_id in background else f"answer to {labels.turn(e.turn_id)}")
            yield e.at, order, "assistant", f"{labels.reply(e.delivery_id)} starts ({what})"
        elif kind == "reply_text":
            yield e.at, order, "assistant", f"{labels.reply(e.delivery_id)} says: {quote(e.text)}"
        elif kind == "audio_started":
            yield e.at, order, "assistant", f"{labels.reply(e.delivery_id)} audio starts"
        elif kind == "barge_in_paused":
            yield e.at, order, "assistant", f"{labels.reply(e.delivery_id)} paused (user sound)"
        elif kind == "barge_in_resumed":
            said = f", {quote(e.text)}" if e.text else ""
            yield e.at, order, "assistant", (
                f"{labels.reply(e.delivery_id)} resumed ({e.reason}{said})"
            )
        elif kind == "barge_in":
            yield e.at, order, "user", f"barges in on {labels.reply(e.delivery_id)}"
        elif kind == "reply_interrupted":
            yield e.at, order, "assistant", (
                f"{labels.reply(e.delivery_id)} interrupted after {e.heard_seconds:.2f} s; "
                f"heard: {quote(e.heard_text) if e.heard_text else 'nothing'}"
            )
        elif kind == "reply_finished":
            yield e.at, order, "assistant", f"{labels.reply(e.delivery_id)} played whole"
        elif kind == "announcement_queued":
            jobs = ", ".join(e.job_ids)
            yield e.at, order, "assistant", (
                f"announcement queued: {labels.reply(e.delivery_id)} (job {jobs}, for "
                f"{labels.turn(e.turn_id)}), waits for the floor"
            )
        elif kind == "delivery_settled":
            yield e.at, order, "assistant", f"{labels.reply(e.delivery_id)} settled {e.status}"
        elif kind == "mute":
            yield e.at, order, "user", "mutes the microphone" if e.muted else "unmutes"
        elif kind == "session_closed":
            yield e.at, order, "call", "ends"
    base = len(call.events)
    start = call.tape.start
    for step in call.client.steps():  # (the flushes and stale audio are numbered after)
        if step.fired_at is not None:
            if step.trigger_at is None:
                why = f"no reply having started within its max_wait of {step.step.max_wait:g} s"
            else:
                edge = "started" if step.step.after == "reply_start" else "ended"
                why = (f"{step.fired_at - step.trigger_at:.2f} s after the reply's audio "
                       f"{edge} at {step.trigger_at:.2f}")
            yield start + step.fired_at, base, "script", (
                f"step {step.number} fires ({why}): {step.step.describe()}"
            )
        elif step.missed_at is not None:
            yield start + step.missed_at, base, "script", (
                f"step {step.number} could not happen ({step.missed}): {step.step.describe()}"
            )
    base += 1
    for i, (at, delivery_id, dropped) in enumerate(call.tape.flushes):
        yield at, base + i, "client", (
            f"{labels.reply(delivery_id)} flushed ({dropped} samples dropped)"
        )
    for delivery_id, samples in call.tape.played_after_flush.items():
        if samples:
            flushed = [at for at, d, _ in call.tape.flushes if d == delivery_id]
            yield (flushed[0] if flushed else 0.0), base + len(call.tape.flushes), "client", (
                f"STALE AUDIO: {samples} samples of {labels.reply(delivery_id)} played "
                "after its flush"
            )


def call_timeline(call: CallResult, *, labels: Labels | None = None) -> str:
    """The call as text, one fact per line on call time (see the module docstring).

    Args:
        call: a finished scripted call.
        labels: the short names to use (default: :meth:`Labels.of` the call).
    """
    labels = labels if labels is not None else Labels.of(call)
    start = call.tape.start
    rows: list[tuple[float, int, str, str]] = sorted(_lines(call, labels))
    out = ["call timeline (s since the call started):"]
    for at, _, who, what in rows:
        out.append(f"{at - start:7.2f}  {who:<9}  {what}")
    if len(out) == 1:
        out.append("    (nothing happened: no speech was detected and nothing was said)")
    return "\n".join(out)

