"""Announcements are conversation: what the user heard of one enters the history.

A delivered announcement (a background job's result, spoken once the floor was free) is
appended to ``state.messages`` as an assistant message, so the next turn's LLM knows it
was said. Its metadata marks it as an announcement and names the job(s) and the
delivery; a cut announcement keeps only the words heard (nothing heard: no message).
The message is an ordinary history item, persisted with the next save like any other.
"""

from __future__ import annotations

from typing import Any

from voxflow.conversation.helpers import append_message
from voxflow.ids import DeliveryId

__all__ = ["INTERRUPTED_MARK", "record_announcement"]

INTERRUPTED_MARK = "[interrupted by the user]"
"""Appended to a cut reply's content, so the model sees where the user stopped it."""


def record_announcement(
    flow: Any,
    delivery_id: DeliveryId,
    *,
    heard_text: str,
    full_text: str,
    interrupted: bool,
    heard_seconds: float | None = None,
) -> Any | None:
    """Append what the user heard of announcement ``delivery_id`` to ``flow``'s history.

    Call it under the session's state lock, once the delivery settled.

    Args:
        flow: the conversational flow (its state holds the delivery record).
        delivery_id: the announcement's delivery.
        heard_text: the words heard (all of them when it was played whole).
        full_text: the whole announcement text.
        interrupted: the announcement was cut (by a barge-in, a mute, a hang-up).
        heard_seconds: how much of it was heard, if known.

    Returns:
        The appended message, or None when nothing was heard.
    """
    text = heard_text.strip()
    if not text:
        return None
    deliveries = getattr(flow.state, "deliveries", {})
    record = deliveries.get(delivery_id)
    job_ids = [c.job_id for c in record.covered_updates] if record is not None else []
    metadata: dict[str, Any] = {
        "announcement": True,
        "job_ids": job_ids,
        "delivery_id": delivery_id,
        "turn_id": record.turn_id if record is not None else None,
        "heard_text": text,
        "interrupted": interrupted,
    }
    if interrupted:
        metadata["generated_text"] = full_text
        text = f"{text} {INTERRUPTED_MARK}"
    if heard_seconds is not None:
        metadata["heard_seconds"] = round(heard_seconds, 3)
    return append_message(flow, "assistant", text, metadata=metadata)
