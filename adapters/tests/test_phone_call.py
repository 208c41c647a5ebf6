"""Phone calls end to end on loopback: a simulated Twilio carrier dials ``voxflow phone``'s
webhook, streams WAV speech as paced μ-law and plays what it is sent, echoing marks; the
flow answers on the real models (faster-whisper, Piper, Silero)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
from aiohttp import web
from voxflow_adapters.hosting.calls import Call, flow_call_factory
from voxflow_adapters.phone import PhoneTransport
from voxflow_adapters.phone.server import PhoneServer, PhoneSettings
from voxflow_adapters.testkit.flows import Teller, words, words_within
from voxflow_adapters.testkit.phone_carrier import SimulatedCarrier
from voxflow_voice.audio import AudioChunk, write_wav
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import ReplyInterrupted, TurnCommitted


def speech_wav(engines: VoiceEngines, text: str, path: Path) -> Path:
    """``text`` in the bundled voice, as a 16-bit WAV file."""
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    write_wav(path, AudioChunk.from_float(samples, engines.tts.sample_rate))
    return path


@contextlib.asynccontextmanager
async def phone_server(
    engines: VoiceEngines, settings: PhoneSettings | None = None,
) -> AsyncIterator[tuple[PhoneServer, str, list[tuple[PhoneTransport, Call]]]]:
    calls: list[tuple[PhoneTransport, Call]] = []
    server = PhoneServer(flow_call_factory(Teller), engines, settings=settings,
                         on_call=lambda transport, call: calls.append((transport, call)))
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield server, f"http://127.0.0.1:{port}/voice", calls
    finally:
        await runner.cleanup()


async def until(predicate: Callable[[], object], within: float = 30.0) -> None:
    """Poll ``predicate`` (what the carrier and the session recorded) until it holds."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 (state of several objects, no one event)
            await asyncio.sleep(0.02)


async def test_a_phone_call_is_answered_and_the_reply_plays_at_the_caller(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    hello = speech_wav(engines, "Hello there!", tmp_path / "hello.wav")
    async with phone_server(engines) as (server, url, calls):
        async with SimulatedCarrier(url) as carrier:
            carrier.say(hello)
            await until(lambda: bool(carrier.deliveries()) and carrier.marks
                        and bool(calls) and not calls[0][0]._pending)
            await until(lambda: any(e.kind == "reply_finished"
                                    for e in calls[0][1].session.events))
        await until(lambda: server.calls == 0)
    transport, call = calls[0]
    committed = [e for e in call.session.events if isinstance(e, TurnCommitted)]
    assert committed and "hello" in committed[0].text.lower()
    stats = transport.statistics()
    assert stats.frames_in > 0 and stats.frames_out > 0 and stats.bad_messages == 0
    assert stats.marks_played > 0 and stats.clears == 0
    delivery = carrier.deliveries()[0]
    assert carrier.played_audio(delivery).size > 0.3 * 8000
    assert server.ended and server.ended[0]["call_id"] == carrier.call_sid


async def test_a_barge_in_clears_the_carrier_and_the_history_keeps_what_played(
    engines: VoiceEngines, tmp_path: Path,
    phone_call: Callable[[str], contextlib.AbstractAsyncContextManager[SimulatedCarrier]],
) -> None:
    story = speech_wav(engines, "Tell me a story.", tmp_path / "story.wav")
    stop = speech_wav(engines, "Stop, thanks.", tmp_path / "stop.wav")
    async with phone_server(engines) as (server, url, calls):
        async with phone_call(url) as carrier:  # (the plugin's fixture)
            carrier.say(story)
            await until(lambda: sum(p.size for d in carrier.deliveries()
                                    for p in carrier.played[d]) >= 2 * 8000)
            carrier.say(stop)
            await until(lambda: any(isinstance(e, ReplyInterrupted)
                                    for e in calls[0][1].session.events))
            await until(lambda: len(carrier.deliveries()) >= 2)  # the answer to "stop"
            await asyncio.sleep(0.5)
        await until(lambda: server.calls == 0)
    transport, call = calls[0]
    cut = next(e for e in call.session.events if isinstance(e, ReplyInterrupted))
    assert carrier.clears, "the fence sent no clear"
    assert cut.delivery_id in carrier.cleared()
    assert carrier.samples_after_clear(cut.delivery_id) == 0  # not one stale sample
    assert transport.statistics().marks_unplayed > 0  # the cleared marks came back unplayed
    segments = [e.text for e in call.session.events
                if e.kind == "reply_text" and e.delivery_id == cut.delivery_id]
    played = words_within(engines, segments, carrier.played_audio(cut.delivery_id).size, 8000)
    heard = words(cut.heard_text)
    assert heard == played[: len(heard)]
    assert abs(len(heard) - len(played)) <= 1, (heard, played)


async def test_a_key_pressed_is_a_turn_the_flow_answers(
    engines: VoiceEngines,
    phone_call: Callable[[str], contextlib.AbstractAsyncContextManager[SimulatedCarrier]],
) -> None:
    """"Press 1 …": the digit reaches the flow as the user's text, and its answer plays."""
    async with phone_server(engines) as (server, url, calls):
        async with phone_call(url) as carrier:
            await until(lambda: bool(calls))
            await carrier.press("1")
            await until(lambda: any(e.kind == "reply_finished"
                                    for e in calls[0][1].session.events))
        await until(lambda: server.calls == 0)
    transport, call = calls[0]
    committed = [e.text for e in call.session.events if isinstance(e, TurnCommitted)]
    assert committed == ["1"]
    assert call.flow.state.messages[-2].content == "1"  # the flow's history has the key
    assert transport.statistics().dtmf == 1 and carrier.deliveries()
