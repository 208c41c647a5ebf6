"""Assertions on a scripted call that read like the spec.

Each takes a finished :class:`~voxflow_adapters.testkit.scenario.CallResult` and either returns
what it found (the event, the delivery id) or raises :class:`CallAssertionError`, whose
message says what was expected, what happened, and then shows the whole call
(:func:`~voxflow_adapters.testkit.timeline.call_timeline`: who spoke when, what was heard)::

    call = voice_call(Assistant(), script)
    assert_turn_committed(call, "Tell me a story.", max_wer=0.25)
    assert_interrupted(call, heard_at_least="Once upon a time")
    assert_no_stale_audio(call)
    assert_history_is_heard(call)

* :func:`assert_interrupted`: a reply was cut by the user, and where (the heard words);
* :func:`assert_completed`: a reply was played whole;
* :func:`assert_no_stale_audio`: not one sample of a reply was played after its fence;
* :func:`assert_history_is_heard`: the flow's history holds what the user heard of each
  reply and announcement (a cut one: the words played, marked interrupted);
* :func:`assert_floor_held`: no background announcement started while the user was
  speaking, had the microphone muted, another reply was playing, or a turn waited for
  its answer;
* :func:`assert_announcement_waited`: an announcement was queued, waited while the floor
  was busy, and started only once it was free (an :class:`AnnouncementWait`: when its
  result was ready and when it was queued, what held the floor, when it started);
* :func:`assert_turn_committed`: a turn was committed with a transcript within a word
  error rate of the script (:func:`word_error_rate`).

Each function that raises sets ``__tracebackhide__``, as pytest's own helpers do: a
failure's traceback ends at the test's line, not in this module's source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from voxflow_voice.speak.history import INTERRUPTED_MARK

from voxflow.ids import DeliveryId

from .flows import words
from .timeline import Labels, announcements, call_timeline, quote

if TYPE_CHECKING:
    from voxflow_voice.events import ReplyFinished, ReplyInterrupted, TurnCommitted

    from .result import CallResult
    from .simulated import StepOutcome

__all__ = [
    "AnnouncementWait",
    "CallAssertionError",
    "ScriptStepError",
    "assert_announcement_waited",
    "assert_completed",
    "assert_floor_held",
    "assert_history_is_heard",
    "assert_interrupted",
    "assert_no_stale_audio",
    "assert_turn_committed",
    "word_error_rate",
]

class CallAssertionError(AssertionError):
    """A call assertion failed; the message ends with the call's timeline.

    Attributes:
        reason: what was expected and what happened, without the timeline.
        timeline: the call as text.
    """

    def __init__(self, reason: str, timeline: str) -> None:
        super().__init__(f"{reason}\n\n{timeline}")
        self.reason = reason
        self.timeline = timeline


class ScriptStepError(CallAssertionError):
    """A reactive step of the call's script could not happen when it said (its reply
    never came): raised by :func:`~voxflow_adapters.testkit.scenario.run_call` after the call,
    so a test never passes on a call in which a line was said at another time, or never.

    Attributes:
        call: the finished call (its client's ``steps()`` say what became of each).
        missed: the steps that could not happen, in order.
    """

    def __init__(self, call: CallResult, missed: Sequence[StepOutcome]) -> None:
        reason = "; ".join(f"{o.describe()}, could not happen when it said: {o.missed}"
                           for o in missed)
        super().__init__(reason, call_timeline(call))
        self.call = call
        self.missed = tuple(missed)


def _fail(call: CallResult, labels: Labels, reason: str) -> CallAssertionError:
    return CallAssertionError(reason, call_timeline(call, labels=labels))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level edit distance of ``hypothesis`` from ``reference``, over the reference's
    length (words as :func:`~voxflow_adapters.testkit.flows.words` spells them; punctuation and
    case do not count). 0.0 is a perfect match; an empty reference gives 0.0 for an empty
    hypothesis and 1.0 otherwise.

    >>> word_error_rate("Tell me a story.", "tell me the story")
    0.25
    """
    ref, hyp = words(reference), words(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / len(ref)


def _check_rate(max_wer: float) -> float:
    __tracebackhide__ = True
    if isinstance(max_wer, bool) or not isinstance(max_wer, int | float) or not max_wer >= 0:
        raise ValueError(f"max_wer must be a number >= 0, got {max_wer!r}")
    return float(max_wer)


def _delivery(call: CallResult, reply: str | None) -> DeliveryId | None:
    __tracebackhide__ = True
    if reply is None:
        return None
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a delivery id (str), not {type(reply).__name__}")
    if reply not in call.replies():
        raise ValueError(f"reply {reply!r} is not a reply of this call: {call.replies()}")
    return DeliveryId(reply)


def assert_turn_committed(
    call: CallResult, text: str, *, max_wer: float = 0.25
) -> TurnCommitted:
    """A user turn was committed whose transcript is within ``max_wer`` of ``text``.

    Returns:
        The first such ``turn_committed`` event.

    Raises:
        CallAssertionError: no committed turn is close enough; the message gives the
            closest one and its word error rate.
        ValueError: ``max_wer`` is negative; TypeError: ``text`` is not a string.
    """
    __tracebackhide__ = True
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    bound = _check_rate(max_wer)
    labels = Labels.of(call)
    committed: list[TurnCommitted] = call.of_kind("turn_committed")
    scored = [(word_error_rate(text, e.text), i, e) for i, e in enumerate(committed)]
    for rate, _, event in scored:
        if rate <= bound:
            return event
    if not scored:
        raise _fail(call, labels, f"expected a turn committed as {quote(text)}, "
                                  "but no turn was committed")
    rate, _, best = min(scored, key=lambda s: (s[0], s[1]))
    raise _fail(call, labels, (
        f"expected a turn committed as {quote(text)} (word error rate <= {bound:.2f}); "
        f"the closest was {labels.turn(best.turn_id)}, {quote(best.text)}, "
        f"at word error rate {rate:.2f}"
    ))


def _settled(call: CallResult, kind: str, delivery: DeliveryId | None) -> list[Any]:
    return [e for e in call.of_kind(kind) if delivery is None or e.delivery_id == delivery]


def _outcome(call: CallResult, labels: Labels, delivery: DeliveryId) -> str:
    status = call.settled(delivery)
    return f"{labels.reply(delivery)} was {status or 'never settled (not played whole, not cut)'}"


def assert_interrupted(
    call: CallResult, reply: str | None = None, *, heard_at_least: str | None = None,
    heard_at_most: str | None = None,
) -> ReplyInterrupted:
    """A reply (``reply``, a delivery id; default: any) was interrupted by the user.

    The words the user heard of it must be the start of what it was saying (the
    pipeline's own invariant), and:

    * ``heard_at_least``: the heard words begin with these words;
    * ``heard_at_most``: the heard words are at most these (a start of this text):
      the cut came before its end.

    Returns:
        The ``reply_interrupted`` event (``heard_text``, ``full_text``, ``heard_seconds``).

    Raises:
        CallAssertionError: no such reply was cut, or it was cut elsewhere.
    """
    __tracebackhide__ = True
    delivery = _delivery(call, reply)
    labels = Labels.of(call)
    cuts: list[ReplyInterrupted] = _settled(call, "reply_interrupted", delivery)
    if not cuts:
        if delivery is not None:
            raise _fail(call, labels, (
                f"expected {labels.reply(delivery)} to be interrupted by the user, but "
                f"{_outcome(call, labels, delivery)}"
            ))
        outcomes = "; ".join(_outcome(call, labels, d) for d in call.replies()) or "no reply"
        raise _fail(call, labels, f"expected a reply interrupted by the user, but: {outcomes}")
    cut = cuts[0]
    name = labels.reply(cut.delivery_id)
    heard, full = words(cut.heard_text), words(cut.full_text)
    if heard != full[: len(heard)]:
        raise _fail(call, labels, (
            f"{name} was interrupted, but what the user heard, {quote(cut.heard_text)}, is "
            f"not the start of what it said, {quote(cut.full_text)}"
        ))
    if heard_at_least is not None:
        least = words(heard_at_least)
        if heard[: len(least)] != least:
            raise _fail(call, labels, (
                f"{name} was interrupted too early: the user heard "
                f"{quote(cut.heard_text) if heard else 'nothing'}, expected at least "
                f"{quote(heard_at_least)}"
            ))
    if heard_at_most is not None:
        most = words(heard_at_most)
        if heard != most[: len(heard)] or len(heard) > len(most):
            raise _fail(call, labels, (
                f"{name} was interrupted too late: the user heard {quote(cut.heard_text)}, "
                f"expected at most {quote(heard_at_most)}"
            ))
    return cut


def assert_completed(call: CallResult, reply: str | None = None) -> ReplyFinished:
    """A reply (``reply``, a delivery id; default: the first one) was played whole.

    Raises:
        CallAssertionError: it was cut, or never finished playing.
    """
    __tracebackhide__ = True
    labels = Labels.of(call)
    replies = call.replies()
    delivery = _delivery(call, reply)
    if delivery is None:
        if not replies:
            raise _fail(call, labels, "expected a reply played whole, but nothing was said")
        delivery = replies[0]
    finished: list[ReplyFinished] = _settled(call, "reply_finished", delivery)
    if not finished:
        raise _fail(call, labels, (
            f"expected {labels.reply(delivery)} to be played whole, but "
            f"{_outcome(call, labels, delivery)}"
        ))
    return finished[0]


def assert_no_stale_audio(call: CallResult) -> None:
    """Not one sample of any reply was played after its fence (flush).

    Raises:
        CallAssertionError: some reply's audio was played after it was flushed.
    """
    __tracebackhide__ = True
    labels = Labels.of(call)
    flushed = {d: at for at, d, _ in reversed(call.tape.flushes)}
    late = sorted({
        labels.reply(r.delivery_id) for r in call.tape.receipts
        if r.delivery_id in flushed and r.at > flushed[r.delivery_id]
    })
    stale = {labels.reply(d): n for d, n in call.tape.played_after_flush.items() if n}
    if stale or late:
        parts = [f"{n} samples of {name}" for name, n in sorted(stale.items())]
        parts += [f"audio of {name} receipted after its flush" for name in late
                  if name not in stale]
        raise _fail(call, labels, "stale audio after a fence: " + "; ".join(parts))


@dataclass(frozen=True, slots=True)
class _Expected:
    delivery: DeliveryId
    content: str
    by_id_only: bool  # found by its delivery id only (cut replies, announcements)


def assert_history_is_heard(call: CallResult) -> None:
    """The flow's history holds exactly what the user heard of each reply, in order.

    An answer played whole is its text; a cut answer is the words played, followed by
    ``[interrupted by the user]`` (and never the words that were not played). A background
    announcement that was heard is in the history the same way (marked by its
    ``delivery_id``); one cut before a word was heard is not, nor is such an answer to a
    turn then continued (committed again with all its words). Reads the flow of the
    call's ``TurnRunner``.

    Raises:
        CallAssertionError: a reply's message is missing or differs from what was heard.
    """
    __tracebackhide__ = True
    labels = Labels.of(call)
    background = announcements(call)
    started: dict[Any, tuple[Any, int]] = {}  # a reply: its turn, where it started
    continued: dict[Any, int] = {}  # a turn: where it was last committed again
    for order, e in enumerate(call.events):
        if e.kind == "reply_started":
            started[e.delivery_id] = (e.turn_id, order)
        elif e.kind == "turn_committed" and e.input_revision > 1:
            continued[e.turn_id] = order
    expected: list[_Expected] = []
    unheard: list[DeliveryId] = []
    for e in call.events:
        if e.kind == "reply_interrupted" and not e.heard_text.strip():
            turn, begun = started.get(e.delivery_id, (None, len(call.events)))
            if e.delivery_id in background:
                unheard.append(e.delivery_id)
                continue
            if begun < continued.get(turn, -1):
                continue  # replaced by the continued turn's answer
        if e.kind == "reply_interrupted":
            content = f"{e.heard_text.strip()} {INTERRUPTED_MARK}".strip()
            expected.append(_Expected(e.delivery_id, content, True))
        elif e.kind == "reply_finished":
            expected.append(_Expected(e.delivery_id, e.text, e.delivery_id in background))
    messages = [m for m in call.session.turns.flow.state.messages if m.role == "assistant"]
    history = "\n".join(f"    assistant: {quote(str(m.content), 200)}" for m in messages)
    for delivery in unheard:
        if any(m.metadata.get("delivery_id") == delivery for m in messages):
            raise _fail(call, labels, (
                f"announcement {labels.reply(delivery)} was cut before a word was heard, "
                f"but the history has a message for it:\n{history}"
            ))
    position = 0
    for item in expected:
        name = labels.reply(item.delivery)
        found = None
        for index in range(position, len(messages)):
            message = messages[index]
            by_id = message.metadata.get("delivery_id") == item.delivery
            if by_id or (not item.by_id_only and message.content == item.content):
                found = index
                break
        if found is None:
            raise _fail(call, labels, (
                f"the history has no message for {name}; expected {quote(item.content, 200)}."
                f"\nassistant messages in the history:\n{history or '    (none)'}"
            ))
        content = messages[found].content
        if content != item.content:
            raise _fail(call, labels, (
                f"the history differs from what was heard for {name}:\n"
                f"    history:  {quote(str(content), 200)}\n"
                f"    heard:    {quote(item.content, 200)}"
            ))
        position = found + 1


def _spans(call: CallResult) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The user's speech spans and mute spans, on the session clock."""
    end_of_call = max([e.at for e in call.events] or [0.0])
    speech: list[tuple[float, float]] = []
    onset: float | None = None
    for e in call.events:
        if e.kind == "speech_started" and onset is None:
            onset = e.onset_at
        elif e.kind == "speech_ended" and onset is not None:
            speech.append((onset, e.end_at))
            onset = None
    if onset is not None:
        speech.append((onset, end_of_call))
    mutes: list[tuple[float, float]] = []
    muted_at: float | None = None
    for e in call.of_kind("mute"):
        if e.muted and muted_at is None:
            muted_at = e.at
        elif not e.muted and muted_at is not None:
            mutes.append((muted_at, e.at))
            muted_at = None
    if muted_at is not None:
        mutes.append((muted_at, end_of_call))
    return speech, mutes


def _playing(call: CallResult) -> dict[DeliveryId, tuple[float, float]]:
    """Each reply's audible span: its first receipt to the end of its last."""
    spans: dict[DeliveryId, tuple[float, float]] = {}
    for r in call.tape.receipts:
        end = r.at + r.num_samples / r.sample_rate
        begin, last = spans.get(r.delivery_id, (r.at, end))
        spans[r.delivery_id] = (min(begin, r.at), max(last, end))
    return spans


def _announcements(call: CallResult) -> list[tuple[DeliveryId, float, str]]:
    """(delivery, audio start, text) of every announcement that was heard."""
    background = announcements(call)
    out = []
    for e in call.of_kind("reply_started"):
        if e.delivery_id not in background:
            continue
        starts = [a.at for a in call.of_kind("audio_started") if a.delivery_id == e.delivery_id]
        if starts:
            text = " ".join(t.text for t in call.of_kind("reply_text")
                            if t.delivery_id == e.delivery_id)
            out.append((e.delivery_id, starts[0], text))
    return out


@dataclass(frozen=True, slots=True)
class _Busy:
    begin: float
    end: float
    what: str  # who held the floor, e.g. "the user was speaking"

    def covers(self, at: float) -> bool:
        return self.begin <= at < self.end - 1e-6


def _busy_spans(call: CallResult, labels: Labels, delivery: DeliveryId) -> list[_Busy]:
    """Every stretch of the call when the floor was not free for ``delivery``."""
    speech, mutes = _spans(call)
    background = announcements(call)
    out = [_Busy(a, b, "the user was speaking") for a, b in speech]
    out += [_Busy(a, b, "the microphone was muted") for a, b in mutes]
    out += [_Busy(a, b, f"{labels.reply(d)} was playing")
            for d, (a, b) in _playing(call).items() if d != delivery]
    # A user's turn holds the floor from the end of its speech until its answer settled.
    settled = {e.delivery_id: e.at for e in call.events
               if e.kind in ("reply_finished", "reply_interrupted")}
    answers = {e.turn_id: e.delivery_id for e in call.of_kind("reply_started")
               if e.delivery_id not in background}
    for turn in call.of_kind("turn_committed"):
        answer = answers.get(turn.turn_id)
        if answer is not None and answer in settled:
            out.append(_Busy(turn.speech_end_at, settled[answer],
                             f"{labels.turn(turn.turn_id)} waited for its answer"))
    return out


def _floor_busy(call: CallResult, labels: Labels, delivery: DeliveryId, at: float) -> list[str]:
    """Why the floor was not free at ``at`` for ``delivery`` (empty: it was free)."""
    start = call.tape.start
    return [f"{b.what} ({b.begin - start:.2f}-{b.end - start:.2f} s)"
            for b in _busy_spans(call, labels, delivery) if b.covers(at)]


def _free_from(spans: Sequence[_Busy], at: float) -> float:
    """The first moment at or after ``at`` when no span holds the floor."""
    while True:
        holding = [b.end for b in spans if b.covers(at)]
        if not holding:
            return at
        at = max(holding)


def assert_floor_held(call: CallResult) -> None:
    """No background announcement started while the floor was taken: the user speaking,
    the microphone muted, another reply playing, or a user's turn waiting for its answer
    (from the end of its speech until its answer settled).

    Raises:
        CallAssertionError: one did; the message says when and what held the floor.
    """
    __tracebackhide__ = True
    labels = Labels.of(call)
    for delivery, at, text in _announcements(call):
        why = _floor_busy(call, labels, delivery, at)
        if why:
            raise _fail(call, labels, (
                f"announcement {labels.reply(delivery)} ({quote(text)}) started at "
                f"{at - call.tape.start:.2f} s while " + " and ".join(why)
            ))


@dataclass(frozen=True, slots=True)
class AnnouncementWait:
    """What :func:`assert_announcement_waited` proved, on call time (seconds since the
    call started, as in the timeline).

    Attributes:
        delivery_id: the announcement's delivery (and reply) id.
        text: what it said.
        ready_at: when its jobs' results were ready (the last of them completed; the
            event's ``ready_at``, else ``queued_at``).
        queued_at: when it was queued for announcement (never before ``ready_at``).
        started_at: when its audio started playing at the client.
        held_by: what held the floor when the result was ready, with each stretch
            (empty: the floor was free then).
        floor_free_at: when the floor was next free (``ready_at`` if it was free then);
            ``started_at`` is never before it.
    """

    delivery_id: DeliveryId
    text: str
    ready_at: float
    queued_at: float
    started_at: float
    held_by: tuple[str, ...]
    floor_free_at: float

    @property
    def waited(self) -> float:
        """Seconds from the result being ready to the announcement starting."""
        return self.started_at - self.ready_at

    def __str__(self) -> str:
        held = " and ".join(self.held_by) if self.held_by else "nothing (the floor was free)"
        queued = ("" if self.queued_at == self.ready_at
                  else f" (queued at {self.queued_at:.2f} s)")
        return (f"ready at {self.ready_at:.2f} s{queued} while {held}; floor free at "
                f"{self.floor_free_at:.2f} s; started at {self.started_at:.2f} s "
                f"(waited {self.waited:.2f} s)")


def assert_announcement_waited(
    call: CallResult, *, text: str | None = None
) -> AnnouncementWait:
    """A background announcement (whose text contains ``text``, if given) was heard, and
    it waited for the floor.

    From the call's events it proves: its jobs' results were ready at ``r`` and it was
    queued at ``q >= r`` (its ``announcement_queued`` event), its audio started at
    ``s >= q``, and the floor was free at ``s`` (as :func:`assert_floor_held` sees it:
    nobody speaking per the session's VAD, no mute, no other reply playing, no turn
    waiting for its answer). If the floor was busy at ``r``, ``s`` is therefore not before
    the floor became free again (:attr:`AnnouncementWait.floor_free_at`). The wait it
    reports runs from ``r``, when the result was ready, not from when it was queued.

    Returns:
        What was found: when the result was ready and queued, what held the floor
        then, when it started.

    Raises:
        CallAssertionError: none was heard, its queueing was not recorded, or it started
            before it was queued or while the floor was busy.
    """
    __tracebackhide__ = True
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    if text is not None and not words(text):
        raise ValueError("text must have words")
    labels = Labels.of(call)
    heard = _announcements(call)
    matching = [a for a in heard if text is None or words(text) == _find(words(a[2]), text)]
    if not matching:
        said = "; ".join(f"{labels.reply(d)}: {quote(t)}" for d, _, t in heard) or "none"
        wanted = f" saying {quote(text)}" if text is not None else ""
        raise _fail(call, labels, f"expected an announcement{wanted} to be heard; "
                                  f"announcements heard: {said}")
    delivery, at, said = matching[0]
    name = f"announcement {labels.reply(delivery)} ({quote(said)})"
    start = call.tape.start
    queued = [e for e in call.of_kind("announcement_queued") if e.delivery_id == delivery]
    if not queued:
        raise _fail(call, labels, (
            f"{name} was heard, but the call has no record of when it was queued "
            "(no announcement_queued event), so its wait for the floor cannot be proved"
        ))
    queued_at = queued[0].at
    ready_at = queued[0].ready_at if queued[0].ready_at is not None else queued_at
    if ready_at > queued_at:
        raise _fail(call, labels, (
            f"{name} was queued at {queued_at - start:.2f} s, before its result was "
            f"ready at {ready_at - start:.2f} s"
        ))
    if at < queued_at:
        raise _fail(call, labels, (
            f"{name} started at {at - start:.2f} s, before it was queued at "
            f"{queued_at - start:.2f} s"
        ))
    spans = _busy_spans(call, labels, delivery)
    held_by = tuple(_floor_busy(call, labels, delivery, ready_at))
    free_at = _free_from(spans, ready_at)
    why = _floor_busy(call, labels, delivery, at)
    if why:
        busy_at_queue = tuple(_floor_busy(call, labels, delivery, queued_at))
        when = (f"while {' and '.join(busy_at_queue)}" if busy_at_queue
                else "with the floor free")
        raise _fail(call, labels, (
            f"{name} did not wait for the floor: it was queued at {queued_at - start:.2f} s "
            f"{when}, and started at {at - start:.2f} s while " + " and ".join(why)
        ))
    return AnnouncementWait(
        delivery_id=delivery, text=said, ready_at=ready_at - start,
        queued_at=queued_at - start, started_at=at - start, held_by=held_by,
        floor_free_at=free_at - start,
    )


def _find(haystack: Sequence[str], needle: str) -> list[str]:
    """``words(needle)`` if it occurs in ``haystack`` as a run of words, else []."""
    target = words(needle)
    for i in range(len(haystack) - len(target) + 1):
        if list(haystack[i : i + len(target)]) == target:
            return target
    return []
