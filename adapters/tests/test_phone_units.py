"""The phone transport's parts without models: μ-law against the G.711 formula, the
Twilio serializer against hostile input (hypothesis), the webhook's signature, the stream
token, and marks as receipts over a real WebSocket with the simulated carrier."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from xml.etree import ElementTree

import numpy as np
import pytest
from aiohttp import ClientSession, web
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_adapters.phone import PhoneTransport
from voxflow_adapters.phone.codec import MulawDecoder, MulawEncoder, mulaw_decode, mulaw_encode
from voxflow_adapters.phone.server import PhoneServer, PhoneSettings, SignatureCheck
from voxflow_adapters.phone.twilio import TwilioSerializer
from voxflow_adapters.phone.wire import (
    MAX_MEDIA_BYTES,
    MAX_MESSAGE_CHARS,
    CarrierMessageError,
    Dtmf,
    Mark,
    Media,
    Started,
    Stopped,
)
from voxflow_adapters.testkit.phone_carrier import (
    SimulatedCarrier,
    mulaw_to_pcm16,
    pcm16_to_mulaw,
    twilio_signature,
)
from voxflow_voice.testing import CHECKS, TransportHarness, check_transport

from .conftest import MeasuredMachine

TWILIO = TwilioSerializer()


def test_the_codec_tables_agree_with_the_g711_formula() -> None:
    samples = np.arange(-32768, 32768, dtype=np.int16)
    assert mulaw_encode(samples) == pcm16_to_mulaw(samples)
    codes = bytes(range(256))
    assert np.array_equal(mulaw_decode(codes), mulaw_to_pcm16(codes))


def test_the_decoder_upsamples_a_tone_to_16_khz_and_allocates_no_arrays_per_frame() -> None:
    t = np.arange(8000) / 8000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    encoder, decoder = MulawEncoder(160), MulawDecoder()
    frames = [encoder.encode(tone[i : i + 160]) for i in range(0, 8000, 160)]
    decoded = np.frombuffer(b"".join(decoder.decode(f) for f in frames), np.int16) / 32768
    expected = 0.5 * np.sin(2 * np.pi * 440 * (np.arange(16000) - 2 * MulawDecoder.HALF) / 16000)
    assert decoded.size == 16000
    assert np.abs(decoded[64:-64] - expected[64:-64]).max() < 0.03  # μ-law's own step
    # Beyond the bytes handed on, what one frame allocates does not grow with the frame:
    # no array of the frame's size is made (only a few small views).
    def overhead(size: int, work: object, frame: object, handed_on: int) -> int:
        work(frame)  # type: ignore[operator]
        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        work(frame)  # type: ignore[operator]
        peak = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
        return peak - handed_on

    small = overhead(160, MulawDecoder().decode, bytes(range(160)), 640)
    large = overhead(1600, MulawDecoder().decode, bytes(range(160)) * 10, 6400)
    assert abs(large - small) < 256, (small, large)
    small = overhead(160, MulawEncoder(1600).encode, np.zeros(160, np.float32), 160)
    large = overhead(1600, MulawEncoder(1600).encode, np.zeros(1600, np.float32), 1600)
    assert abs(large - small) < 256, (small, large)


def _start(**start: object) -> str:
    body = {"streamSid": "MZ1", "callSid": "CA1", "customParameters": {"a": "b"},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            **start}
    return json.dumps({"event": "start", "sequenceNumber": "1", "start": body})


def test_the_twilio_messages_parse_into_typed_messages() -> None:
    started = TWILIO.parse(_start())
    assert started == Started("MZ1", "CA1", "audio/x-mulaw", 8000, 1, {"a": "b"})
    payload = base64.b64encode(b"\xff" * 160).decode()
    assert TWILIO.parse(json.dumps({"event": "media", "media": {
        "track": "inbound", "chunk": "2", "timestamp": "40", "payload": payload}})
    ) == Media(b"\xff" * 160, 40)
    assert TWILIO.parse('{"event":"dtmf","dtmf":{"track":"inbound_track","digit":"5"}}'
                        ) == Dtmf("5")
    assert TWILIO.parse('{"event":"mark","mark":{"name":"1:d:0"}}') == Mark("1:d:0")
    assert TWILIO.parse('{"event":"stop","stop":{}}') == Stopped()
    media = json.loads(TWILIO.media("MZ1", b"\x00\x01"))
    assert media == {"event": "media", "streamSid": "MZ1", "media": {"payload": "AAE="}}
    assert json.loads(TWILIO.clear("MZ1")) == {"event": "clear", "streamSid": "MZ1"}
    content_type, twiml = TWILIO.answer("wss://h/media?x=1&y=2", {"t": '<"&>'})
    assert content_type == "text/xml"
    stream = ElementTree.fromstring(twiml).find("./Connect/Stream")
    assert stream is not None and stream.get("url") == "wss://h/media?x=1&y=2"
    assert [(p.get("name"), p.get("value")) for p in stream] == [("t", '<"&>')]


@pytest.mark.parametrize("text", [
    "", "[]", "null", '{"event": 5}', '{"event": "nope"}', '{"event": "media"}',
    '{"event":"media","media":{"payload":"***"}}',
    '{"event":"media","media":{"payload":"AAAA","track":"outbound"}}',
    json.dumps({"event": "media", "media": {"payload": "A" * (4 * MAX_MEDIA_BYTES)}}),
    '{"event":"dtmf","dtmf":{"digit":"55"}}', '{"event":"mark","mark":{"name":""}}',
    json.dumps({"event": "mark", "mark": {"name": "x" * 200}}),
    '{"event":"mark","mark":{"name":"a\\u0000b"}}',
    _start(mediaFormat={"encoding": "audio/l16", "sampleRate": 8000, "channels": 1}),
    _start(mediaFormat={"encoding": "audio/x-mulaw", "sampleRate": 16000, "channels": 1}),
    _start(callSid=None), _start(customParameters={str(i): "v" for i in range(40)}),
    "[" * 100_000, " " * (MAX_MESSAGE_CHARS + 1),
])
def test_a_malformed_or_oversized_message_is_a_typed_error(text: str) -> None:
    with pytest.raises(CarrierMessageError) as caught:
        TWILIO.parse(text)
    assert text[:40] not in caught.value.reason or len(text) < 3  # never echoes it


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=12)
_EVENTS = st.sampled_from(["connected", "start", "media", "dtmf", "mark", "stop", "clear"])


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.text(max_size=200),
    _JSON.map(json.dumps),
    st.builds(lambda event, body: json.dumps({"event": event, event: body,
                                              "start": body, "media": body}),
              _EVENTS, _JSON)))
def test_the_parser_gives_a_message_or_a_typed_error_for_any_input(text: str) -> None:
    try:
        message = TWILIO.parse(text)
    except CarrierMessageError as exc:
        assert exc.reason
        return
    assert isinstance(message, Started | Media | Dtmf | Mark | Stopped) or message is not None
    if isinstance(message, Media):
        assert len(message.payload) <= MAX_MEDIA_BYTES


async def _serve(server: PhoneServer) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def _no_calls(*args: object, **kwargs: object) -> object:
    raise AssertionError("no call may start")


async def test_an_unsigned_or_forged_webhook_is_refused_and_a_signed_one_answered() -> None:
    token = "secret-auth-token"
    server = PhoneServer(_no_calls, None,  # type: ignore[arg-type]
                         settings=PhoneSettings(signature=SignatureCheck(token)))
    runner, base = await _serve(server)
    url = f"{base}/voice"
    params = {"CallSid": "CA1", "From": "+15550100"}
    try:
        async with ClientSession() as http:
            unsigned = await http.post(url, data=params)
            forged = await http.post(url, data=params, headers={
                "X-Twilio-Signature": twilio_signature("wrong", url, params)})
            tampered = await http.post(url, data={**params, "From": "+1999"}, headers={
                "X-Twilio-Signature": twilio_signature(token, url, params)})
            signed = await http.post(url, data=params, headers={
                "X-Twilio-Signature": twilio_signature(token, url, params)})
            assert [r.status for r in (unsigned, forged, tampered)] == [403, 403, 403]
            assert signed.status == 200 and "<Connect><Stream" in await signed.text()
            assert server.refused_webhooks == 3
            # the stream without a token the webhook issued is refused
            ws = await http.ws_connect(f"{base}/media")
            await ws.send_str(_start())
            closed = await ws.receive()
            assert closed.type.name in ("CLOSE", "CLOSED") and ws.close_code == 1008
    finally:
        await runner.cleanup()
    assert token not in repr(server.settings) and token not in repr(SignatureCheck(token))


async def test_an_expired_stream_token_frees_its_place_for_the_next_call() -> None:
    """A webhook whose stream never came holds a place only until its token expires:
    the next webhook is answered, not rejected busy (before: the count included expired
    tokens and they were dropped only after the check, so the server stayed busy)."""
    server = PhoneServer(_no_calls, None,  # type: ignore[arg-type]
                         settings=PhoneSettings(max_calls=1))
    runner, base = await _serve(server)
    try:
        async with ClientSession() as http:
            first = await (await http.post(f"{base}/voice", data={"CallSid": "CA1"})).text()
            assert "<Connect><Stream" in first
            busy = await (await http.post(f"{base}/voice", data={"CallSid": "CA2"})).text()
            assert '<Reject reason="busy"/>' in busy  # the token is live: its place held
            # the token's stream_token_seconds are over (aged, not waited for)
            server._tokens = dict.fromkeys(server._tokens, time.monotonic() - 1.0)
            later = await (await http.post(f"{base}/voice", data={"CallSid": "CA3"})).text()
            assert "<Connect><Stream" in later and "Reject" not in later
            assert len(server._tokens) == 1  # the expired one gone, the new one issued
    finally:
        await runner.cleanup()


async def test_a_signed_carrier_call_starts_and_the_hang_up_ends_it(
    engines: object,
) -> None:
    from voxflow_adapters.hosting.calls import flow_call_factory
    from voxflow_adapters.testkit.flows import Teller

    token = "t0ken"
    digits: list[str] = []
    server = PhoneServer(flow_call_factory(Teller), engines,  # type: ignore[arg-type]
                         settings=PhoneSettings(signature=SignatureCheck(token)),
                         on_call=lambda transport, call: setattr(
                             transport, "on_dtmf", digits.append))
    runner, base = await _serve(server)
    try:
        async with SimulatedCarrier(f"{base}/voice", auth_token=token) as carrier:
            async with asyncio.timeout(10):
                while server.calls == 0:  # noqa: ASYNC110 (the server's count)
                    await asyncio.sleep(0.01)
            await carrier.press("1")
            await carrier.press("#")
            async with asyncio.timeout(10):
                while len(digits) < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        async with asyncio.timeout(20):
            while server.calls:  # noqa: ASYNC110 (the stop ends the call)
                await asyncio.sleep(0.02)
    finally:
        await runner.cleanup()
    assert digits == ["1", "#"]
    assert server.ended[0]["call_id"] == carrier.call_sid
    assert server.ended[0]["frames_in"] > 0 and server.ended[0]["bad_messages"] == 0


async def test_two_streams_naming_the_same_call_each_hold_their_own_place(
    engines: object,
) -> None:
    """Calls are counted by stream, not by the call id a start message gives: a second
    stream naming the first's call id took its slot and, ending, freed the first's."""
    from voxflow_adapters.hosting.calls import flow_call_factory
    from voxflow_adapters.testkit.flows import Teller

    server = PhoneServer(flow_call_factory(Teller), engines,  # type: ignore[arg-type]
                         settings=PhoneSettings(max_calls=2))
    runner, base = await _serve(server)
    try:
        first = SimulatedCarrier(f"{base}/voice")
        second = SimulatedCarrier(f"{base}/voice", call_sid=first.call_sid)
        async with first:
            async with second:
                async with asyncio.timeout(10):
                    while server.calls < 2:  # noqa: ASYNC110 (the server's count)
                        await asyncio.sleep(0.01)
            async with asyncio.timeout(20):
                while server.calls > 1:  # noqa: ASYNC110 (the second hung up)
                    await asyncio.sleep(0.02)
            assert server.calls == 1  # the first is still counted
        async with asyncio.timeout(20):
            while server.calls:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        await runner.cleanup()
    assert [e["call_id"] for e in server.ended] == [first.call_sid] * 2


@contextlib.asynccontextmanager
async def phone_line() -> AsyncIterator[TransportHarness]:
    """A PhoneTransport on a real WebSocket, the simulated carrier at the other end."""
    made: asyncio.Future[PhoneTransport] = asyncio.get_running_loop().create_future()

    async def voice(request: web.Request) -> web.Response:
        url = f"ws://{request.host}/media"
        content_type, body = TWILIO.answer(url, {})
        return web.Response(text=body, content_type=content_type)

    async def media(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        transport = PhoneTransport(TWILIO, ws.send_str)
        sender = asyncio.create_task(transport.run())
        made.set_result(transport)
        async for message in ws:
            transport.receive(message.data)
        transport.end_input()
        await transport.aclose()
        sender.cancel()
        return ws

    app = web.Application()
    app.router.add_post("/voice", voice)
    app.router.add_get("/media", media)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with SimulatedCarrier(f"{base}/voice") as carrier:
            transport = await asyncio.wait_for(made, 10)
            async with asyncio.timeout(10):
                while transport.started is None:  # noqa: ASYNC110 (the start message)
                    await asyncio.sleep(0.01)

            async def close() -> None:
                await carrier.hang_up()
                await transport.aclose()

            yield TransportHarness(transport, sleep=asyncio.sleep, close=close)
    finally:
        await runner.cleanup()


async def test_the_phone_transport_keeps_the_transport_contract_with_the_carrier() -> None:
    report = await check_transport(phone_line)
    assert report == {**{name: "passed" for name in CHECKS},
                      "mute": "skipped: the harness cannot mute"}  # (a phone has no mute)


def _voxflow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "VOXFLOW_TWILIO_AUTH_TOKEN"}
    return subprocess.run([sys.executable, "-m", "voxflow.cli", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=False)


def test_voxflow_phone_needs_the_auth_token_and_keeps_unsigned_calls_on_loopback() -> None:
    helped = _voxflow("phone", "--help")
    assert helped.returncode == 0 and "--public-url" in helped.stdout
    unsigned = _voxflow("phone", "--port", "1")
    assert unsigned.returncode == 2
    assert "VOXFLOW_TWILIO_AUTH_TOKEN" in unsigned.stderr and "Traceback" not in unsigned.stderr
    exposed = _voxflow("phone", "--no-signature", "--host", "0.0.0.0")
    assert exposed.returncode == 2 and "loopback" in exposed.stderr
    bad_url = _voxflow("phone", "--public-url", "example.com", VOXFLOW_TWILIO_AUTH_TOKEN="x")
    assert bad_url.returncode == 2 and "https://" in bad_url.stderr
    none = _voxflow("phone", "--no-signature", "--max-calls", "0")
    assert none.returncode == 2 and "--max-calls 0" in none.stderr, none.stderr


def test_voxflow_phone_roles_need_the_database_and_their_own_options() -> None:
    helped = _voxflow("phone", "--help")
    assert "--front-door" in helped.stdout and "--worker" in helped.stdout
    worker = _voxflow("phone", "--worker", VOXFLOW_DATABASE_URL="")
    assert worker.returncode == 2 and "VOXFLOW_DATABASE_URL" in worker.stderr, worker.stderr
    stray = _voxflow("phone", "--drain-seconds", "5", VOXFLOW_TWILIO_AUTH_TOKEN="x")
    assert stray.returncode == 2 and "--drain-seconds is for --worker" in stray.stderr
    door = _voxflow("phone", "--front-door", "--drain-seconds", "5")
    assert door.returncode == 2 and "--drain-seconds is for --worker" in door.stderr
    # A worker on every address has none to give the carrier for its media stream
    # (ws://0.0.0.0:8090/media reaches nobody): refused before anything starts.
    for wildcard in ("0.0.0.0", "::"):
        wild = _voxflow("phone", "--worker", "--host", wildcard,
                        VOXFLOW_DATABASE_URL="postgresql://127.0.0.1:1/none")
        assert wild.returncode == 2, wild.stderr
        assert "--public-url https://" in wild.stderr and "Traceback" not in wild.stderr


@pytest.mark.parametrize("bad", [{"max_calls": 0}, {"max_calls": -1}, {"lead": 0.0},
                                 {"stream_token_seconds": 0.0},
                                 {"max_call_seconds": float("nan")},
                                 {"media_path": "media"}])
def test_phone_settings_out_of_range_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        PhoneSettings(**bad)  # type: ignore[arg-type]


async def test_with_no_cap_the_webhook_admits_calls_by_their_measured_cost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``voxflow phone`` admits like ``voxflow serve``: its slots are what the cores hold
    at the CPU a call costs here (before: a fixed 8 whatever the machine), the webhook
    holding a call's slot from its token on; a refused call is rejected busy, the reason
    logged; ``GET /load`` reports it to this machine only."""
    from voxflow_adapters.hosting.admission import (
        UNBOUNDED_CALLS,
        AdmissionController,
        AdmissionSettings,
    )
    from voxflow_adapters.hosting.call_cost import CallCostMeter, CostSettings

    machine = MeasuredMachine()
    meter = CallCostMeter(CostSettings(window_seconds=2.0, smoothing=1.0), cores=1,
                          cpu_time=machine.cpu_time, machine_time=lambda: None,
                          clock=machine.clock)
    settings = PhoneSettings()
    assert settings.max_calls is None
    server = PhoneServer(_no_calls, None, settings=settings,  # type: ignore[arg-type]
                         admission=AdmissionController(AdmissionSettings(),
                                                       clock=machine.clock, meter=meter))
    assert server.max_calls == UNBOUNDED_CALLS
    runner, base = await _serve(server)
    try:
        async with ClientSession() as http:
            async def call(sid: str) -> str:
                return await (await http.post(f"{base}/voice", data={"CallSid": sid})).text()

            # the prior, 28 % of a core: 70 % of one core holds 2 calls
            assert ["<Connect><Stream" in await call(f"CA{n}") for n in (1, 2)] == [True] * 2
            with caplog.at_level("WARNING", logger="voxflow_adapters.phone.server"):
                busy = await call("CA3")
            assert '<Reject reason="busy"/>' in busy and "<Connect" not in busy
            said = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
            assert said == ["rejected a call (busy): this server is full: 2 calls, as many as "
                            "it holds: a call costs 28% of a core here (until one is "
                            "measured), and 70% of its 1 core hold 2; more would slow every "
                            "call down; try again in a moment"]
            load = await (await http.get(f"{base}/load")).json()
            assert (load["active_calls"], load["slots"], load["headroom"], load["max_calls"],
                    load["cost_source"]) == (2, 2, 0, None, "prior")
            forwarded = await http.get(f"{base}/load", headers={"X-Forwarded-For": "1.2.3.4"})
            assert forwarded.status == 403
            # the two calls ran 2 s on a whole core: 50 % each, and one core holds 1
            machine.now, machine.cpu = 2.0, 2.0
            assert (server.load().slots, server.load().cost_source) == (1, "measured")
            # their streams never came: the tokens expire and give the slots back
            server._tokens = dict.fromkeys(server._tokens, time.monotonic() - 1.0)
            assert "<Connect><Stream" in await call("CA4")
            assert '<Reject reason="busy"/>' in await call("CA5")
    finally:
        await runner.cleanup()
    assert server.refusals() == {"busy": 2}
    assert server.load().active_calls == 1  # CA4's token is live: its slot held


async def test_a_call_that_ends_gives_its_slot_back_and_its_turns_reach_the_admission(
    engines: object,
) -> None:
    """A stream's call holds the webhook's slot until it ends, then frees it; its turns'
    voice to voice reach the admission's p95 (what refuses calls while answers are
    slow)."""
    from voxflow_adapters.hosting.calls import flow_call_factory
    from voxflow_adapters.testkit.flows import Teller

    server = PhoneServer(flow_call_factory(Teller), engines,  # type: ignore[arg-type]
                         settings=PhoneSettings(max_calls=1))
    runner, base = await _serve(server)
    hello = np.concatenate([s.samples for s in engines.tts.synthesize(  # type: ignore[attr-defined]
        "Hello there!")])
    try:
        async with SimulatedCarrier(f"{base}/voice") as carrier:
            carrier.say(hello, rate=engines.tts.sample_rate)  # type: ignore[attr-defined]
            async with asyncio.timeout(30):
                while server.load().turns == 0:  # noqa: ASYNC110 (the answered turn)
                    await asyncio.sleep(0.05)
            assert server.load().active_calls == 1
            async with ClientSession() as http:
                busy = await http.post(f"{base}/voice", data={"CallSid": "CA9"})
                assert '<Reject reason="busy"/>' in await busy.text()
        async with asyncio.timeout(20):
            while server.calls:  # noqa: ASYNC110 (the hang-up ends it)
                await asyncio.sleep(0.02)
    finally:
        await runner.cleanup()
    assert server.load().active_calls == 0 and server.refusals() == {"busy": 1}
