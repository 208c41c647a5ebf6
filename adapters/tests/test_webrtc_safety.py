"""What ``voxflow serve`` refuses and what it cleans up: bad token, foreign origin,
oversized or broken SDP, too many calls, malformed data-channel messages, a peer that
never connects and a peer that sends no audio."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes.util
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import aioice
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
from voxflow_adapters.hosting.call_cost import CallCostMeter, CostSettings
from voxflow_adapters.webrtc import (
    PeerSettings,
    ServerSettings,
    WebRtcServer,
    _libopus,
    assistant_call_factory,
    host_addresses,
)
from voxflow_adapters.webrtc._libopus import OpusLibraryError
from voxflow_adapters.webrtc.client import CALLER_TOKEN_ENV, LoopbackCaller, OfferRejected
from voxflow_adapters.webrtc.rtp_send import AiortcChanged
from voxflow_voice.audio import AudioChunk, write_wav
from voxflow_voice.engines import VoiceEngines

from .conftest import MeasuredMachine

pytestmark = pytest.mark.models  # the server shares the real engines, as in production


@contextlib.asynccontextmanager
async def serving(engines: VoiceEngines, **options: Any) -> AsyncIterator[WebRtcServer]:
    peer: dict[str, Any] = {"ice_host_addresses": ("127.0.0.1",), **options.pop("peer", {})}
    settings = ServerSettings(port=0, peer=PeerSettings(**peer), **options)
    async with WebRtcServer(assistant_call_factory(), engines, settings=settings) as server:
        yield server


async def rejected(caller: LoopbackCaller, **connect: Any) -> OfferRejected:
    try:
        with pytest.raises(OfferRejected) as info:
            await caller.connect(**connect)
    finally:
        await caller.aclose()
    return info.value


async def until_no_calls(server: WebRtcServer) -> None:
    async with asyncio.timeout(20):
        await server.wait_idle()


async def test_offers_without_the_token_or_from_a_foreign_origin_are_refused(
    engines: VoiceEngines,
) -> None:
    async with serving(engines) as server:
        base = f"http://127.0.0.1:{server.port}"
        wrong = await rejected(LoopbackCaller(base, "not-the-token"))
        foreign = await rejected(LoopbackCaller(base, server.token, origin="http://evil.example"))
        stats = server.statistics()
    assert (wrong.status, foreign.status) == (401, 403)
    assert "token" in wrong.reason and "evil.example" in foreign.reason
    assert stats.rejected == {"token": 1, "origin": 1}
    assert stats.accepted == 0 and stats.active_calls == 0


async def test_oversized_broken_and_audio_less_offers_are_refused(engines: VoiceEngines) -> None:
    async with serving(engines, max_sdp_bytes=8000) as server:
        base = f"http://127.0.0.1:{server.port}"
        big = await rejected(LoopbackCaller(base, server.token),
                             transform_offer=lambda sdp: sdp + "a=x-pad:" + "x" * 9000 + "\r\n")
        no_audio = await rejected(LoopbackCaller(base, server.token),
                                  transform_offer=lambda sdp: "v=0\r\n")
        broken = await rejected(LoopbackCaller(base, server.token),
                                transform_offer=lambda sdp: "v=0\r\nm=audio banana\r\n")
        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {server.token}"}
            async with http.post(f"{base}/offer", data="{not json", headers=headers) as response:
                not_json = (response.status, await response.json())
            huge = json.dumps({"type": "offer", "sdp": "v" * 100_000})
            async with http.post(f"{base}/offer", data=huge, headers=headers) as response:
                huge_status = response.status
        stats = server.statistics()
        load = server.load()
    assert big.status == 413 and "8000" in big.reason
    assert huge_status == 413
    assert no_audio.status == 400 and "m=audio" in no_audio.reason
    assert broken.status == 400
    assert not_json[0] == 400 and "JSON" in not_json[1]["error"]
    assert stats.rejected == {"size": 2, "sdp": 2, "malformed": 1}
    assert stats.active_calls == 0
    assert (load.active_calls, load.headroom) == (0, load.slots)  # no slot kept


async def test_a_call_whose_session_fails_to_start_gives_its_slot_back(
    engines: VoiceEngines,
) -> None:
    async def failing_factory(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the flow could not load")

    settings = ServerSettings(port=0, max_calls=1,
                              peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    async with WebRtcServer(failing_factory, engines, settings=settings) as server:
        base = f"http://127.0.0.1:{server.port}"
        # with one slot, the second offer is refused 'busy' if the first kept its slot
        refusals = [await rejected(LoopbackCaller(base, server.token)) for _ in range(2)]
        load = server.load()
    assert [(r.status, r.reason) for r in refusals] == [(500, "the call could not start")] * 2
    assert (load.active_calls, load.headroom, load.accepting) == (0, 1, True)


def _libopus_unloadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, no libopus loads (none beside PyAV, none on the system)."""
    monkeypatch.setattr(_libopus, "_lib", None)
    monkeypatch.setattr(_libopus, "_candidates", lambda: ["/opt/nowhere/libopus.so.0"])
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)


async def test_a_server_without_libopus_does_not_start_and_names_the_fix(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _libopus_unloadable(monkeypatch)
    settings = ServerSettings(port=0, peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    server = WebRtcServer(assistant_call_factory(), engines, settings=settings)
    with pytest.raises(OpusLibraryError, match="uv sync --locked"):
        await server.start()


async def test_a_call_when_libopus_cannot_load_is_the_servers_500_without_its_paths(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libopus not loadable when a call comes, which a process reaches only when start()
    was not run (library use: start() loads libopus, and once loaded it stays loaded;
    here the test unloads it): the offer is refused with a 500 (the server's fault, not
    the caller's SDP), its slot given back, and the body names no file of the server."""
    async with serving(engines, max_calls=1) as server:
        _libopus_unloadable(monkeypatch)
        base = f"http://127.0.0.1:{server.port}"
        refusals = [await rejected(LoopbackCaller(base, server.token)) for _ in range(2)]
        stats, load = server.statistics(), server.load()
    assert [(r.status, r.reason) for r in refusals] == [
        (500, "the server cannot encode audio (see its log)")] * 2
    assert stats.rejected == {"codec": 2}
    assert (load.active_calls, load.headroom) == (0, 1)


async def test_an_aiortc_not_the_locked_one_stops_the_server_at_start(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aioice, "__version__", "0.99.0")
    settings = ServerSettings(port=0, peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    server = WebRtcServer(assistant_call_factory(), engines, settings=settings)
    with pytest.raises(AiortcChanged, match=r"aioice 0\.99\.0.*uv sync --locked"):
        await server.start()


async def test_a_call_when_aiortc_changed_is_the_servers_500_not_the_callers_sdp(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiortc/aioice changed under a running server (start() was run before): the offer
    is the server's 500 'server', not a 400 'sdp' blaming the caller."""
    async with serving(engines, max_calls=1) as server:
        monkeypatch.setattr(aioice, "__version__", "0.99.0")
        base = f"http://127.0.0.1:{server.port}"
        refusals = [await rejected(LoopbackCaller(base, server.token)) for _ in range(2)]
        stats, load = server.statistics(), server.load()
    assert [(r.status, r.reason) for r in refusals] == [
        (500, "the server cannot send audio (see its log)")] * 2
    assert stats.rejected == {"server": 2}
    assert (load.active_calls, load.headroom) == (0, 1)


async def test_calls_beyond_the_limit_are_refused_until_one_ends(engines: VoiceEngines) -> None:
    async with serving(engines, max_calls=1) as server:
        base = f"http://127.0.0.1:{server.port}"
        first = LoopbackCaller(base, server.token)
        await first.connect()
        busy = await rejected(LoopbackCaller(base, server.token))
        first.send({"v": 1, "type": "hangup"})
        await until_no_calls(server)
        await first.aclose()
        async with LoopbackCaller(base, server.token) as again:
            await again.wait_message("hello")
        stats = server.statistics()
    assert busy.status == 503 and "limit 1" in busy.reason
    assert stats.accepted == 2
    assert stats.ended[0].close_reason == "the page hung up"


async def test_with_no_cap_calls_past_the_measured_slots_are_refused_with_the_cost(
    engines: VoiceEngines,
) -> None:
    machine = MeasuredMachine()
    meter = CallCostMeter(CostSettings(window_seconds=2.0, smoothing=1.0), cores=1,
                          cpu_time=machine.cpu_time, machine_time=lambda: None,
                          clock=machine.clock)
    admission = AdmissionController(AdmissionSettings(), clock=machine.clock, meter=meter)
    settings = ServerSettings(port=0, peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    assert settings.max_calls is None
    async with WebRtcServer(assistant_call_factory(), engines, settings=settings,
                            admission=admission) as server:
        base = f"http://127.0.0.1:{server.port}"
        before = server.load()  # the prior: 28 % of a core, 2 calls on 70 % of one core
        first = LoopbackCaller(base, server.token)
        await first.connect()
        machine.now, machine.cpu = 2.0, 1.0  # the call ran 2 s on half a core
        measured = server.load()
        busy = await rejected(LoopbackCaller(base, server.token))
        first.send({"v": 1, "type": "hangup"})
        await until_no_calls(server)
        await first.aclose()
        stats = server.statistics()
    assert (before.slots, before.cost_source, before.max_calls) == (2, "prior", None)
    assert (measured.slots, measured.cost_source, measured.headroom) == (1, "measured", 0)
    assert busy.status == 503
    assert busy.reason.startswith("this server is full: 1 call, as many as it holds: a call "
                                  "costs 50% of a core here (measured over its recent "
                                  "calls), and 70% of its 1 core hold 1")
    assert stats.rejected == {"busy": 1} and stats.accepted == 1


async def test_malformed_data_channel_messages_are_rejected_and_the_call_goes_on(
    engines: VoiceEngines,
) -> None:
    bad = [
        "not json",
        "[1, 2]",
        json.dumps({"v": 2, "type": "mute", "muted": True}),
        json.dumps({"v": 1, "type": "self_destruct"}),
        json.dumps({"v": 1, "type": "mute", "muted": "yes please"}),
        json.dumps({"v": 1, "type": "mute", "muted": True, "extra": 1}),
        json.dumps({"v": 1, "type": "mute", "muted": True, "pad": "x" * 5000}),
        "[" * 1500 + "]" * 1500,  # 3 KB; json.loads' RecursionError killed the call
        json.dumps({"v": True, "type": "mute", "muted": True}),
        json.dumps({"v": 1, "type": "mute", "muted": 1}),
        '{"v": 1, "type": "mute", "type": "hangup"}',  # the last key won: it hung up
        b"\xff not utf-8",
    ]
    async with serving(engines) as server, LoopbackCaller(
        f"http://127.0.0.1:{server.port}", server.token
    ) as caller:
        for message in bad:
            caller.send(message)
        await caller.wait_for(lambda: len(caller.of_type("error")) == len(bad),
                              what="an error reply per bad message")
        caller.send({"v": 1, "type": "mute", "muted": True})  # still served
        await caller.wait_message("mute", muted=True)
        stats = server.peers()[0].statistics()
    reasons = [m["reason"] for m in caller.of_type("error")]
    assert reasons[0].startswith("not JSON")
    assert "JSON object" in reasons[1]
    assert "protocol version 2" in reasons[2]
    assert "unknown message type 'self_destruct'" in reasons[3]
    assert "muted" in reasons[4]
    assert "extra" in reasons[5]
    assert "exceeds" in reasons[6]
    assert reasons[7:] == [
        "JSON nested deeper than 4 levels", "unsupported protocol version True, expected 1",
        "invalid mute message (muted: Input should be a valid boolean)",
        "duplicate key 'type'", "not JSON: the bytes are not UTF-8",
    ]
    assert stats.rejected_messages == len(bad) and stats.muted
    assert stats.connection_state == "connected" and stats.close_reason is None


async def test_many_malformed_messages_end_the_call_with_a_bye(engines: VoiceEngines) -> None:
    async with serving(engines) as server, LoopbackCaller(
        f"http://127.0.0.1:{server.port}", server.token
    ) as caller:
        for n in range(50):
            caller.send(f"garbage {n}")
        bye = await caller.wait_message("bye", within=10)
        await until_no_calls(server)
        ended = server.statistics().ended
    assert bye["reason"] == "too many malformed data-channel messages"
    assert len(caller.of_type("error")) == 50
    assert caller.messages[-1]["type"] == "bye"  # the last word
    assert [s.close_reason for s in ended] == [bye["reason"]]


async def test_a_deeply_nested_offer_body_is_a_400_with_a_one_line_reason(
    engines: VoiceEngines,
) -> None:
    nested = '{"type": "offer", "sdp": ' + "[" * 10_000 + "]" * 10_000 + "}"  # 20 kB
    async with serving(engines) as server, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{server.port}"
        headers = {"Authorization": f"Bearer {server.token}"}
        replies = []
        for body in (nested, '{"type": "offer", "type": "offer", "sdp": "v=0"}',
                     '{"type": "offer", "sdp": 1}'):
            async with http.post(f"{base}/offer", data=body, headers=headers) as response:
                replies.append((response.status, await response.text()))
        stats = server.statistics()
    for status, text in replies:
        assert status == 400 and "\n" not in text, text
        assert json.loads(text)["error"].startswith('the body must be JSON {"type": "offer"')
    assert json.loads(replies[0][1])["error"].endswith("JSON nested deeper than 4 levels")
    assert json.loads(replies[1][1])["error"].endswith("duplicate key 'type'")
    assert stats.rejected == {"malformed": 3} and stats.accepted == 0


async def test_a_silent_peer_times_out_and_frees_its_call(engines: VoiceEngines) -> None:
    async with serving(engines, peer={"media_timeout": 1.0}) as server:
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token, send_audio=False)
        async with caller:
            bye = await caller.wait_message("bye")
            await until_no_calls(server)
        ended = server.statistics().ended
    assert bye["reason"] == "no audio from the peer for 1 s"
    assert [s.close_reason for s in ended] == ["no audio from the peer for 1 s"]
    assert ended[0].connection_state == "closed"


async def test_a_peer_that_never_connects_times_out_and_frees_its_call(
    engines: VoiceEngines,
) -> None:
    async with serving(engines, peer={"connect_timeout": 1.0}) as server:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        try:
            pc.createDataChannel("voxflow")
            pc.addTransceiver("audio")
            with host_addresses(("127.0.0.1",)):
                await pc.setLocalDescription(await pc.createOffer())
            async with aiohttp.ClientSession() as http, http.post(
                f"http://127.0.0.1:{server.port}/offer",
                json={"type": "offer", "sdp": pc.localDescription.sdp},
                headers={"Authorization": f"Bearer {server.token}"},
            ) as response:
                assert response.status == 200
            # The answer is never applied: ICE cannot complete.
            await until_no_calls(server)
            ended = server.statistics().ended
        finally:
            await pc.close()
    assert [s.close_reason for s in ended] == ["ICE/DTLS did not connect within 1 s"]


async def test_a_caller_killed_mid_reply_is_detected_from_the_transport_not_the_audio_timeout(
    engines: VoiceEngines, tmp_path: Path,
) -> None:
    speech = np.concatenate([np.asarray(s.samples, np.float32)
                             for s in engines.tts.synthesize("Hello there!")])
    wav = tmp_path / "hello.wav"
    write_wav(wav, AudioChunk.from_float(speech, engines.tts.sample_rate))
    async with serving(engines) as server:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voxflow_adapters.webrtc.client",
            f"http://127.0.0.1:{server.port}", str(wav), stdout=asyncio.subprocess.PIPE,
            env={**os.environ, CALLER_TOKEN_ENV: server.token},
        )
        try:
            assert child.stdout is not None
            async with asyncio.timeout(120):
                line = await child.stdout.readline()
            assert line == b"hearing\n"
            peer = server.peers()[0]
            assert peer.statistics().outbound.reply_frames > 0  # mid-reply
            killed = time.monotonic()
            os.kill(child.pid, signal.SIGKILL)
            await peer.wait_closed()
            detected = time.monotonic() - killed
            await until_no_calls(server)
        finally:
            if child.returncode is None:
                child.kill()
            await child.wait()
        ended = server.statistics().ended
    print(f"vanished caller detected after {detected:.2f} s "
          f"(load {os.getloadavg()[0]:.2f})")
    assert ended[0].close_reason == "the peer vanished: nothing received for 4 s"


async def test_offers_are_refused_while_answers_are_slower_than_the_target_and_load_says_so(
    engines: VoiceEngines,
) -> None:
    """The slowness decides alone: the cost meter runs on a machine that stays idle (a
    prior of 10 % of a core, 7 slots on 70 % of its one core, above the cap of 4), so
    the CPU other processes take while the test runs cannot move the idle headroom."""
    machine = MeasuredMachine()
    meter = CallCostMeter(CostSettings(prior_call_cost=0.1), cores=1,
                          cpu_time=machine.cpu_time, machine_time=lambda: None,
                          clock=machine.clock)
    admission = AdmissionController(AdmissionSettings(max_calls=4, p95_target_ms=800.0),
                                    clock=machine.clock, meter=meter)
    settings = ServerSettings(port=0, peer=PeerSettings(ice_host_addresses=("127.0.0.1",)),
                              max_calls=4, p95_target_ms=800.0)
    async with WebRtcServer(assistant_call_factory(), engines, settings=settings,
                            admission=admission) as server:
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/load") as response:
                no_token = response.status
            headers = {"Authorization": f"Bearer {server.token}"}
            async with http.get(f"{base}/load", headers=headers) as response:
                idle = await response.json()
            for _ in range(12):  # the process's recent turns answered in 1.5 s
                server.admission.record(1500.0)
            slow = await rejected(LoopbackCaller(base, server.token))
            async with http.get(f"{base}/load", headers=headers) as response:
                loaded = await response.json()
        stats = server.statistics()
    assert no_token == 401
    assert (idle["accepting"], idle["headroom"], idle["max_calls"]) == (True, 4, 4)
    assert idle["p95_ms"] is None and idle["active_calls"] == 0
    assert slow.status == 503 and "1,500 ms" in slow.reason and "800 ms" in slow.reason
    assert (loaded["accepting"], loaded["headroom"], loaded["p95_ms"]) == (False, 0, 1500.0)
    assert "too busy" in loaded["reason"]
    assert stats.rejected == {"busy": 1, "token": 1} and stats.accepted == 0


async def test_the_server_listens_only_once_litellm_is_loaded(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No call runs while litellm's import holds the GIL on its thread (every session
    starts that import; with calls running it made their outbound frames late)."""
    from voxflow_adapters.webrtc import server as server_module
    from voxflow_adapters.webrtc.signaling import SignalingServer

    order: list[str] = []
    loaded = server_module.preload

    async def preload() -> Any:
        result = await loaded()
        order.append("litellm loaded")
        return result

    listen = SignalingServer.start

    async def start(self: SignalingServer) -> str:
        order.append("listening")
        return await listen(self)

    monkeypatch.setattr(server_module, "preload", preload)
    monkeypatch.setattr(SignalingServer, "start", start)
    async with serving(engines):
        pass
    assert order == ["litellm loaded", "listening"]


async def test_litellm_loaded_by_start_is_not_the_servers_idle_cpu(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The admission's meter is made with the server, before start() loads litellm
    (seconds of CPU): taken as the idle cost, it was subtracted from every call's, the
    cost per call walked towards 0 and the slots past what the cores hold."""
    from voxflow_adapters.webrtc import server as server_module

    now, cpu = [0.0], [0.0]  # the meter's clock and the process's CPU seconds
    meter = CallCostMeter(CostSettings(window_seconds=2.0, smoothing=1.0), cores=2,
                          cpu_time=lambda: cpu[0], machine_time=lambda: None,
                          clock=lambda: now[0])
    loaded = server_module.preload

    async def preload() -> Any:
        result = await loaded()
        now[0] += 4.9  # litellm's import: 3.4 s of CPU in 4.9 s
        cpu[0] += 3.4
        return result

    monkeypatch.setattr(server_module, "preload", preload)
    settings = ServerSettings(port=0, peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    async with WebRtcServer(assistant_call_factory(), engines, settings=settings,
                            admission=AdmissionController(meter=meter)):
        now[0] += 2.0  # a window with no call, and no CPU
        idle = meter.cost().idle
    assert idle == 0.0
