"""What the page is told of each session event, pinned: the JSON of every event class
(byte for byte what the page and its tests read), and any event, hypothesis-generated,
encoded from its class's declaration and read back by the strict wire reader."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from voxflow_adapters.hosting.wire import read_json
from voxflow_adapters.webrtc.protocol import (
    ByeMessage,
    HelloMessage,
    MuteMessage,
    messages_for_event,
    parse_page_message,
    state_message,
)
from voxflow_voice.events import (
    AnnouncementQueued,
    AudioStarted,
    BargeIn,
    BargeInPaused,
    BargeInResumed,
    DeliverySettled,
    MuteObserved,
    ReplyFinished,
    ReplyInterrupted,
    ReplyStarted,
    ReplyTextStreamed,
    SessionClosed,
    SessionEvent,
    SpeculativeReplyDiscarded,
    SpeechEnded,
    SpeechStarted,
    TranscriptDiscarded,
    TurnCommitted,
    TurnMetrics,
    TurnRevoked,
)

from voxflow.ids import DeliveryId, JobId, SessionId, TurnId

pytestmark = pytest.mark.unit

EVENTS: tuple[type[Any], ...] = get_args(get_args(SessionEvent)[0])
S, T, D = SessionId("s-1"), TurnId("t-1"), DeliveryId("d-1")
RECEIVE_MS = 12.5
LISTENING = '{"v":1,"type":"state","state":"listening"}'

# Every event class, and what the page gets: the JSON main's per-event message classes
# sent at ab222c9, before the events declared their messages.
PINNED: list[tuple[Any, list[str]]] = [
    (SpeechStarted(session_id=S, at=1.5, onset_at=1.25),
     ['{"v":1,"type":"state","state":"user_speaking"}']),
    (SpeechEnded(session_id=S, at=2.5, end_at=2.25),
     ['{"v":1,"type":"state","state":"thinking"}']),
    (TranscriptDiscarded(session_id=S, at=2.5, reason="no words"), []),
    (TurnCommitted(session_id=S, at=3.0, turn_id=T, text="Où est ma « valise » ?",
                   speech_end_at=2.25),
     ['{"v":1,"type":"transcript","role":"user","turn_id":"t-1",'
      '"text":"Où est ma « valise » ?"}']),
    (ReplyStarted(session_id=S, at=3.0, turn_id=T, delivery_id=D, reply_kind="answer"), []),
    (ReplyTextStreamed(session_id=S, at=3.1, delivery_id=D, segment_id=2,
                       text='She said "hi".'),
     ['{"v":1,"type":"reply_text","delivery_id":"d-1","segment_id":2,'
      '"text":"She said \\"hi\\"."}']),
    (SpeculativeReplyDiscarded(session_id=S, at=3.0, turn_id=T, text="so", reason="on"), []),
    (TurnRevoked(session_id=S, at=3.0, turn_id=T, text="so", reason="went on"), []),
    (AudioStarted(session_id=S, at=3.2, delivery_id=D),
     ['{"v":1,"type":"state","state":"speaking"}']),
    (BargeIn(session_id=S, at=4.0, delivery_id=D, onset_at=3.9),
     ['{"v":1,"type":"interrupted","delivery_id":"d-1","heard_text":null}']),
    (BargeInPaused(session_id=S, at=3.95, delivery_id=D, onset_at=3.9), []),
    (BargeInResumed(session_id=S, at=4.1, delivery_id=D, onset_at=3.9, reason="backchannel",
                    text="mm"), []),
    (ReplyInterrupted(session_id=S, at=4.0, turn_id=T, delivery_id=D, heard_text="Once",
                      full_text="Once upon", heard_seconds=0.4),
     ['{"v":1,"type":"interrupted","delivery_id":"d-1","heard_text":"Once"}', LISTENING]),
    (ReplyFinished(session_id=S, at=5.0, turn_id=T, delivery_id=D, text="Done."),
     ['{"v":1,"type":"reply_done","delivery_id":"d-1"}', LISTENING]),
    (AnnouncementQueued(session_id=S, at=6.0, delivery_id=D, turn_id=T,
                        job_ids=(JobId("j-1"),)), []),
    (DeliverySettled(session_id=S, at=7.0, delivery_id=D, status="completed"), []),
    (MuteObserved(session_id=S, at=8.0, muted=True), ['{"v":1,"type":"mute","muted":true}']),
    (TurnMetrics(session_id=S, at=9.0, turn_id=T, delivery_id=D, speech_end=2.25,
                 transcript_final=2.5123, first_text=2.75, first_audio=3.00049,
                 playback_end=None, interrupted=False, fenced_chunks=0),
     ['{"v":1,"type":"latency","turn_id":"t-1","transcript_ms":262.3,"first_text_ms":500.0,'
      '"first_audio_ms":750.5,"interrupted":false,"receive_ms":12.5}']),
    (SessionClosed(session_id=S, at=10.0), ['{"v":1,"type":"state","state":"ended"}']),
]


def _texts(event: Any, receive_ms: float | None = RECEIVE_MS) -> list[str]:
    return [m.model_dump_json()
            for m in messages_for_event(event, {"receive_ms": lambda: receive_ms})]


def test_every_event_class_is_pinned() -> None:
    assert {type(event) for event, _ in PINNED} == set(EVENTS)


@pytest.mark.parametrize("event, expected", PINNED, ids=lambda v: type(v).__name__)
def test_each_event_gives_the_page_the_json_it_always_got(event: Any,
                                                          expected: list[str]) -> None:
    assert _texts(event) == expected


def test_the_calls_own_messages_and_an_unsupplied_measurement() -> None:
    assert state_message("listening").model_dump_json() == LISTENING
    assert HelloMessage(session_id=S, max_call_seconds=600, resume_token=None).model_dump_json() \
        == ('{"v":1,"type":"hello","session_id":"s-1","max_call_seconds":600.0,'
            '"resume_token":null,"resumed":false}')
    assert ByeMessage(reason="bye").model_dump_json() == '{"v":1,"type":"bye","reason":"bye"}'
    metrics = TurnMetrics(session_id=S, at=9.0, turn_id=T, delivery_id=None, speech_end=2.25,
                          transcript_final=2.5, first_text=None, first_audio=None,
                          playback_end=None, interrupted=True, fenced_chunks=3)
    unsupplied = '{"v":1,"type":"latency","turn_id":"t-1","transcript_ms":250.0,' \
        '"first_text_ms":null,"first_audio_ms":null,"interrupted":true,"receive_ms":null}'
    assert [m.model_dump_json() for m in messages_for_event(metrics)] == [unsupplied]
    assert _texts(metrics, None) == [unsupplied]


def test_every_declared_field_is_the_events_fixed_or_supplied() -> None:
    for event in EVENTS:
        for view in event.wire:
            for name in view.fields:
                assert (name in event.model_fields or isinstance(getattr(event, name, None),
                                                                 property)
                        or name in view.fixed or name in view.supplied), (event, name)
            assert set(view.fixed) | set(view.supplied) <= set(view.fields), event


# -- any event --------------------------------------------------------------------------

_finite = st.floats(-1e9, 1e9)  # clock readings (ms of one past 1e305 s would overflow)


def _event(cls: type[Any]) -> st.SearchStrategy[Any]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in cls.model_fields.items():
        if name == "kind":
            continue
        annotation = info.annotation
        if annotation is float:
            fields[name] = _finite
        elif annotation == float | None:
            fields[name] = st.none() | _finite
        elif name == "input_revision":
            fields[name] = st.integers(1, 2**40)
        else:
            fields[name] = st.from_type(annotation)
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


@settings(max_examples=600, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of([_event(cls) for cls in EVENTS]), st.none() | _finite)
def test_any_event_is_encoded_as_its_class_declares(event: Any,
                                                    receive_ms: float | None) -> None:
    texts = _texts(event, receive_ms)
    assert len(texts) == len(type(event).wire)
    for text, view in zip(texts, type(event).wire, strict=True):
        message = read_json(text, max_bytes=len(text.encode()))  # the strict reader
        assert list(message) == ["v", "type", *view.fields]
        assert message["v"] == 1 and message["type"] == view.type
        for name in view.fields:
            if name in view.fixed:
                expected = view.fixed[name]
            elif name in view.supplied:
                expected = receive_ms
            else:
                expected = json.loads(json.dumps(getattr(event, name)))
            assert message[name] == expected, name
        if view.type == "mute":  # the one server message a page sends back as it is
            assert parse_page_message(text) == MuteMessage(type="mute", muted=event.muted)
