"""The phone's scale-out parts without models or a database: the request and answer a
phone call passes through the dispatch rows, the session a call id names, the TwiML of
the ``<Connect>`` action URL and of the hang-up, and a phone worker's slots for the
streams it expects (a stream that never comes gives its slot back)."""

from __future__ import annotations

import asyncio
from typing import Any
from xml.etree import ElementTree

import pytest
from pydantic import ValidationError
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.host import CallRefused
from voxflow_adapters.phone.dispatch import PhoneRequest, StreamAnswer, phone_session_id
from voxflow_adapters.phone.front_door import PhoneFrontDoor
from voxflow_adapters.phone.host import PhoneHost
from voxflow_adapters.phone.server import PhoneSettings
from voxflow_adapters.phone.twilio import TwilioSerializer
from voxflow_adapters.phone.wire import Started
from voxflow_voice.engines import VoiceEngines

URL = "postgresql://voxflow@127.0.0.1:5432/test"


@pytest.mark.parametrize("fields", [
    {"call_id": "CA1/../x"}, {"call_id": ""}, {"call_id": "CA" + "1" * 70},
    {"call_id": "CA1", "reconnect": -1}, {"call_id": "CA1", "kind": "webrtc"},
    {"call_id": "CA1", "extra": 1},
])
def test_a_malformed_phone_request_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PhoneRequest(**fields)


def test_a_call_id_names_one_session_and_a_bad_one_is_refused() -> None:
    assert phone_session_id("CA0123abcd") == "phone-CA0123abcd"
    assert PhoneRequest(call_id="CA1").model_dump_json() == (
        '{"kind":"phone","call_id":"CA1","reconnect":0}')
    with pytest.raises(ValueError, match="call_id"):
        phone_session_id("CA1;DROP")
    with pytest.raises(ValidationError):
        StreamAnswer(stream_url="http://worker/media", token="x" * 32)  # not a WebSocket


def test_the_answer_carries_the_action_url_and_the_hang_up_escapes_its_words() -> None:
    twilio = TwilioSerializer()
    _, body = twilio.answer("wss://w1/media", {"voxflow_stream": "t0k"},
                            action="https://door/voice/after?reconnects=0&x=\"1\"")
    connect = ElementTree.fromstring(body).find("./Connect")
    assert connect is not None
    assert connect.get("action") == "https://door/voice/after?reconnects=0&x=\"1\""
    stream = connect.find("Stream")
    assert stream is not None and stream.get("url") == "wss://w1/media"
    _, plain = twilio.answer("wss://w1/media", {})
    assert ElementTree.fromstring(plain).find("./Connect").get("action") is None  # type: ignore[union-attr]
    _, bye = twilio.hang_up("Sorry <now> & then")
    root = ElementTree.fromstring(bye)
    assert [child.tag for child in root] == ["Say", "Hangup"]
    assert root.find("Say").text == "Sorry <now> & then"  # type: ignore[union-attr]
    assert [c.tag for c in ElementTree.fromstring(twilio.hang_up()[1])] == ["Hangup"]


def test_the_phone_front_door_needs_a_phone_dispatch_store() -> None:
    with pytest.raises(ValueError, match="kind='phone'"):
        PhoneFrontDoor(DispatchStore(URL), None, signature=None)
    with pytest.raises(ValueError, match="max_reconnects"):
        PhoneFrontDoor(DispatchStore(URL, kind="phone"), None, signature=None,
                       max_reconnects=-1)


def _no_engines() -> VoiceEngines:
    """Real ``VoiceEngines`` without models (these calls never reach a session): a
    stand-in of the attributes the host reads broke each time it read one more."""
    return VoiceEngines(stt=None, tts=None, make_vad=None)  # type: ignore[arg-type]


def started(call_id: str) -> Started:
    return Started("MZ1", call_id, "audio/x-mulaw", 8000, 1, {})


async def test_a_phone_worker_holds_a_slot_for_an_expected_stream_until_it_comes_or_expires(
) -> None:
    ended: list[str] = []
    host = PhoneHost(lambda *a, **k: None, _no_engines(),
                     store=None, media_url="ws://127.0.0.1:9/media",
                     settings=PhoneSettings(max_calls=2, stream_token_seconds=0.2))
    host.on_call_ended = ended.append
    with pytest.raises(CallRefused) as bad:
        await host.answer_offer("v=0 an SDP offer")
    assert bad.value.status == 400 and host.calls_held == 0
    first = await host.answer_offer(PhoneRequest(call_id="CA1").model_dump_json())
    answer = StreamAnswer.model_validate_json(first.sdp)
    assert answer.stream_url == "ws://127.0.0.1:9/media" and host.calls_held == 1
    assert host._take_token(answer.token, started("CA2")) is None  # another call's stream
    assert host._take_token("not-a-token", started("CA1")) is None
    second = await host.answer_offer(PhoneRequest(call_id="CA3").model_dump_json())
    with pytest.raises(CallRefused) as full:
        await host.answer_offer(PhoneRequest(call_id="CA4").model_dump_json())
    assert full.value.status == 503 and host.calls_held == 2
    ticket = host._take_token(answer.token, started("CA1"))
    assert ticket is not None and host.calls_held == 2  # (opening: still held)
    assert host._take_token(answer.token, started("CA1")) is None  # used once
    await asyncio.sleep(0.4)  # the second stream never came: its slot is given back
    assert ended == [second.call_id] and host.calls_held == 1



async def test_a_phone_worker_with_no_cap_takes_as_many_calls_as_their_measured_cost_allows(
) -> None:
    """A phone call worker registers the admission's ceiling as its slots (before: a fixed
    8) and refuses, 503 with the cost, past what its cores hold at the calls' cost."""
    from voxflow_adapters.hosting.admission import (
        UNBOUNDED_CALLS,
        AdmissionController,
        AdmissionSettings,
    )
    from voxflow_adapters.hosting.call_cost import CallCostMeter

    meter = CallCostMeter(cores=1, clock=lambda: 0.0, machine_time=lambda: None)
    host = PhoneHost(lambda *a, **k: None, _no_engines(),
                     store=None, media_url="ws://127.0.0.1:9/media",
                     admission=AdmissionController(AdmissionSettings(), meter=meter))
    assert host.settings.max_calls is None and host.max_calls == UNBOUNDED_CALLS
    for sid in ("CA1", "CA2"):  # the 28 % prior: one core at 70 % holds 2
        await host.answer_offer(PhoneRequest(call_id=sid).model_dump_json())
    with pytest.raises(CallRefused) as full:
        await host.answer_offer(PhoneRequest(call_id="CA3").model_dump_json())
    assert full.value.status == 503 and "costs 28% of a core here" in full.value.reason
    assert (host.load().slots, host.load().headroom) == (2, 0)
    default = PhoneHost(lambda *a, **k: None, _no_engines(),
                        store=None, media_url="ws://127.0.0.1:9/media")
    assert default.max_calls == UNBOUNDED_CALLS and default.admission.settings.max_calls is None
