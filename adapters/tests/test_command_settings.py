"""``voxflow chat --voice`` and ``voxflow serve`` honour the ``VOXFLOW_*`` settings: the
turn-taking times and speculative replies reach every session, the voice reaches the engines."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from voxflow_adapters.hosting.calls import (
    PHONE_HISS_RISE,
    WEBRTC_VOICE_SETTINGS,
    phone_voice_settings,
    webrtc_voice_settings,
)
from voxflow_adapters.local import LocalAudioSettings, StreamKind
from voxflow_adapters.local.chat import ChatView, VoiceChat, chat_voice_settings
from voxflow_adapters.phone import command as phone_command
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.simulated import SimulatedClient
from voxflow_adapters.webrtc.command import build_call_factory, run_serve
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.session import VoiceSettings

from voxflow.cli import main
from voxflow.clock import VirtualClock
from voxflow.settings import Settings
from voxflow.turns import TurnRunner

pytestmark = pytest.mark.models

TUNED = Settings().with_options(end_of_turn_silence=1.1, min_barge_in=0.15,
                                speculative_replies=False)


def _assert_tuned(voice: VoiceSettings) -> None:
    assert voice.turn_detection.end_of_turn_silence == 1.1
    assert voice.turn_detection.min_barge_in == 0.15
    assert voice.speculative_replies is False


@pytest.mark.parametrize("flow", [None, "voxflow_adapters.testkit.flows:Teller"])
async def test_serve_calls_get_the_settings_with_the_echo_gate_off(
    engines: VoiceEngines, flow: str | None,
) -> None:
    factory = build_call_factory(flow=flow, settings=TUNED)
    clock = VirtualClock()
    call = await factory(SimulatedClient(CallScript(), clock=clock), engines, clock,
                         lambda event: None)
    try:
        _assert_tuned(call.session.settings)
        assert call.session.settings.echo_gate is False
        assert call.session.echo_gate is None
    finally:
        await call.aclose()


@pytest.mark.parametrize("flow", [None, "voxflow_adapters.testkit.flows:Teller"])
async def test_phone_calls_get_the_settings_with_the_hiss_cue_on_the_telephone_band(
    engines: VoiceEngines, flow: str | None,
) -> None:
    """``voxflow phone``'s calls: the settings, the echo gate off (the carrier cancels the
    echo) and the hiss cue on the telephone band (an 8 kHz line has nothing over 4 kHz)."""
    factory = phone_command._factory(flow, None, TUNED)
    clock = VirtualClock()
    call = await factory(SimulatedClient(CallScript(), clock=clock), engines, clock,
                         lambda event: None)
    try:
        _assert_tuned(call.session.settings)
        assert call.session.settings.echo_gate is False
        assert call.session.settings.turn_detection.hiss_band == "telephone"
    finally:
        await call.aclose()
    browser = webrtc_voice_settings(TUNED)
    assert phone_voice_settings(TUNED) == browser.model_copy(update={
        "turn_detection": browser.turn_detection.model_copy(
            update={"hiss_band": "telephone", "hiss_rise": PHONE_HISS_RISE})})


def test_serve_defaults_are_the_webrtc_defaults() -> None:
    assert webrtc_voice_settings() == WEBRTC_VOICE_SETTINGS == VoiceSettings(echo_gate=False)
    with pytest.raises(TypeError, match="settings must be voxflow Settings"):
        build_call_factory(flow=None, settings=VoiceSettings())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="settings must be voxflow Settings"):
        run_serve(flow=None, host="127.0.0.1", port=8080, token=None,
                  settings={"voice": "x"})  # type: ignore[arg-type]


def test_voxflow_serve_loads_the_voice_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """VOXFLOW_TTS reaches the engines, and --tts over it: a missing voice fails before
    anything listens."""
    missing = tmp_path / "nobody.onnx"
    monkeypatch.setenv("VOXFLOW_TTS", f"piper:{missing}")
    assert main(["serve", "--port", "8765"]) == 1
    err = capsys.readouterr().err
    assert "piper voice file not found" in err and str(missing) in err
    other = tmp_path / "other.onnx"
    assert main(["serve", "--port", "8765", "--tts", f"piper:voice={other}"]) == 1
    assert str(other) in capsys.readouterr().err


class _Stream:
    def __init__(self, samplerate: float) -> None:
        self.samplerate, self.active = samplerate, False

    def start(self) -> None:
        self.active = True

    def close(self, ignore_errors: bool = True) -> None:
        self.active = False


class _SilentCard:
    """Streams that never call back: the session opens and waits."""

    def open(self, kind: StreamKind, *, device: object, samplerate: int | None,
             block: float, latency: object, callback: object) -> _Stream:
        return _Stream(float(samplerate or 16_000))

    def refresh(self) -> None:
        pass


def test_chat_voice_settings_map_the_settings_and_headphones() -> None:
    _assert_tuned(chat_voice_settings(TUNED))
    assert chat_voice_settings(TUNED).echo_gate is True  # speakers
    assert chat_voice_settings(TUNED, headphones=True).echo_gate is False
    assert chat_voice_settings() == VoiceSettings()
    with pytest.raises(TypeError, match="settings must be voxflow Settings"):
        chat_voice_settings("tiny.en")  # type: ignore[arg-type]


async def test_chat_sessions_get_the_settings(engines: VoiceEngines) -> None:
    clock = VirtualClock(autojump=True)
    chat = VoiceChat(TurnRunner(Teller()), engines, ChatView(),
                     audio_settings=LocalAudioSettings(), backend=_SilentCard(), clock=clock,
                     voice_settings=chat_voice_settings(TUNED, headphones=True))
    async with clock:
        task = asyncio.create_task(chat.run())
        for _ in range(5):
            await asyncio.sleep(0)
        assert chat.session is not None and chat.sessions == 1
        _assert_tuned(chat.session.settings)
        assert chat.session.echo_gate is None  # headphones
        chat.on_key("q")
        await task


async def test_entry_points_given_no_settings_take_the_environments(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not given settings, chat, serve (and its workers' factories) read the ``VOXFLOW_*``
    variables as the CLI does (issue 32: one place for every entry point)."""
    monkeypatch.setenv("VOXFLOW_END_OF_TURN_SILENCE", "1.1")
    monkeypatch.setenv("VOXFLOW_MIN_BARGE_IN", "0.15")
    monkeypatch.setenv("VOXFLOW_SPECULATIVE_REPLIES", "false")
    _assert_tuned(chat_voice_settings())
    _assert_tuned(webrtc_voice_settings())
    _assert_tuned(VoiceSettings.from_environment())
    assert webrtc_voice_settings() == VoiceSettings.from_environment(echo_gate=False)
    assert VoiceSettings(echo_gate=False) == WEBRTC_VOICE_SETTINGS  # the defaults, unread
    factory = build_call_factory(flow=None, model=None, settings=None)
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript(), clock=clock)
    call = await factory(client, engines, clock, lambda event: None)
    try:
        _assert_tuned(call.session.settings)
        assert call.session.settings.echo_gate is False
    finally:
        await call.aclose()
