"""What the user actually heard of each reply ("history = heard").

The playback stage records every segment's text and the word timings of every chunk it
hands to the adapter; the adapter's receipts say how far into each segment the client
really played. From both, :class:`HeardLedger` reconstructs the text the user heard, to
the word when the voice gives word timings (piper's phoneme alignments), else by the
played share of the segment's characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voxflow.ids import DeliveryId

from ..audio import ReplyChunk

__all__ = ["HeardLedger", "HeardReply"]


@dataclass(slots=True)
class _Segment:
    text: str
    sample_rate: int = 0
    words: list[tuple[str, int, int]] = field(default_factory=list)  # word, start, end
    sent: int = 0  # samples handed to the adapter
    played: int = 0  # furthest sample played (receipts)
    complete: bool = False  # all of the segment's audio was handed over


@dataclass(frozen=True, slots=True)
class HeardReply:
    """What was heard of one reply.

    Attributes:
        delivery_id: the reply.
        text: the words heard, in order.
        full_text: every segment's text that was synthesized.
        heard_seconds: seconds of the reply's audio played.
        complete: the whole synthesized audio was played.
    """

    delivery_id: DeliveryId
    text: str
    full_text: str
    heard_seconds: float
    complete: bool


class HeardLedger:
    """Per-delivery account of what was sent and what was played."""

    def __init__(self) -> None:
        self._replies: dict[DeliveryId, dict[int, _Segment]] = {}

    def begin_segment(self, delivery_id: DeliveryId, segment_id: int, text: str) -> None:
        """Record the text of a segment about to be synthesized."""
        segments = self._replies.setdefault(delivery_id, {})
        segments.setdefault(segment_id, _Segment(text))

    def sent(self, chunk: ReplyChunk) -> None:
        """Record a chunk handed to the adapter (its word timings included)."""
        seg = self._replies.setdefault(chunk.delivery_id, {}).setdefault(
            chunk.segment_id, _Segment("")
        )
        seg.sample_rate = chunk.sample_rate
        base = chunk.start_sample
        for w in chunk.words:
            seg.words.append((w.word, base + w.start, base + w.end))
        seg.sent = max(seg.sent, base + chunk.num_samples)

    def end_segment(self, delivery_id: DeliveryId, segment_id: int) -> None:
        """All of a segment's audio has been handed over."""
        seg = self._replies.get(delivery_id, {}).get(segment_id)
        if seg is not None:
            seg.complete = True

    def played(self, delivery_id: DeliveryId, segment_id: int, start: int, count: int) -> None:
        """Record a receipt: ``count`` samples from ``start`` of a segment were played."""
        seg = self._replies.get(delivery_id, {}).get(segment_id)
        if seg is not None:
            seg.played = max(seg.played, start + count)

    def played_samples(self, delivery_id: DeliveryId) -> int:
        """Samples of the reply played so far."""
        return sum(s.played for s in self._replies.get(delivery_id, {}).values())

    def sent_samples(self, delivery_id: DeliveryId) -> int:
        """Samples of the reply handed to the adapter so far."""
        return sum(s.sent for s in self._replies.get(delivery_id, {}).values())

    def heard(self, delivery_id: DeliveryId) -> HeardReply:
        """The words of ``delivery_id`` the user heard, segment by segment."""
        segments = [s for _, s in sorted(self._replies.get(delivery_id, {}).items())]
        parts: list[str] = []
        seconds = 0.0
        complete = bool(segments)
        for seg in segments:
            if seg.sample_rate:
                seconds += seg.played / seg.sample_rate
            whole = seg.complete and seg.sent > 0 and seg.played >= seg.sent
            complete = complete and whole
            if whole:
                parts.append(seg.text)
                continue
            part = _heard_part(seg)
            if part:
                parts.append(part)
            break  # later segments were not reached
        return HeardReply(
            delivery_id=delivery_id,
            text=" ".join(parts).strip(),
            full_text=" ".join(s.text for s in segments if s.text).strip(),
            heard_seconds=seconds,
            complete=complete,
        )

    def forget(self, delivery_id: DeliveryId) -> None:
        """Drop the account of a settled reply (keeps memory flat over a session)."""
        self._replies.pop(delivery_id, None)


def _heard_part(seg: _Segment) -> str:
    """The fully played words of a partly played segment."""
    if seg.played <= 0:
        return ""
    if seg.words:
        return " ".join(word for word, _, end in seg.words if end <= seg.played)
    if seg.sent <= 0:
        return ""
    # No word timings: keep the words whose characters fall in the played share.
    share = min(1.0, seg.played / seg.sent)
    cut = int(len(seg.text) * share)
    words = seg.text[:cut].split()
    if cut < len(seg.text) and not seg.text[cut].isspace() and words:
        words = words[:-1]  # the last word was cut mid-way: not heard whole
    return " ".join(words)
