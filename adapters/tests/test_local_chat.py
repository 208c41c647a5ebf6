"""``voxflow chat --voice``: the terminal view of a call, and the command's options.

The view is driven by a real scripted call (simulated client, real models, virtual
time) with a barge-in, so what it shows is what a session really reports.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass, field
from typing import Any

import pytest
from rich.console import Console
from voxflow_adapters.local import LocalAudioSettings, LocalAudioStatus, StreamKind
from voxflow_adapters.local.chat import ChatView, VoiceChat, parse_device
from voxflow_adapters.local.errors import AudioDeviceError
from voxflow_adapters.testkit.flows import SHORT_STORY, Teller
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

from voxflow.cli import main
from voxflow.clock import VirtualClock
from voxflow.ids import new_turn_id
from voxflow.turns import TurnRunner


def render(view: ChatView) -> str:
    console = Console(file=io.StringIO(), width=100, record=True, color_system=None)
    console.print(view)
    return console.export_text()


@pytest.mark.models
async def test_the_view_follows_a_call_with_a_barge_in(engines: VoiceEngines) -> None:
    view = ChatView("voxflow · Teller")
    script = (CallScript().user_says(0.3, "Tell me a story.")
              .user_says(5.0, "Stop, please.").with_echo(0.3, 0.05))
    turns = TurnRunner(Teller(story=SHORT_STORY))
    call = await run_call(turns, script, engines, on_event=view.on_event)
    assert len(call.replies()) == 2
    assert [line.who for line in view.lines] == ["you", "assistant", "you", "assistant"]
    assert view.lines[0].text == "Tell me a story."
    heard = call.of_kind("reply_interrupted")[0].heard_text
    assert view.lines[1].text == heard and view.lines[1].note.startswith("interrupted after")
    assert view.lines[3].text == "Okay." and view.lines[3].note.endswith(" ms")
    assert view.interruptions == 1
    # State: hearing the user, thinking, speaking, cut by the user, ... back to listening.
    assert view.states[:4] == ["listening", "hearing you", "thinking", "speaking"]
    assert view.states[4] == "hearing you" and view.state == "listening"
    metrics = call.metrics()
    expected = [(m.first_audio - m.speech_end) * 1000 for m in metrics if m.first_audio]
    assert view.latencies_ms == pytest.approx(expected)
    text = render(view)
    assert "Tell me a story." in text and "Okay." in text
    assert "interruptions 1" in text and "speakers (echo gate on)" in text


def test_mute_and_device_status_show() -> None:
    view = ChatView(headphones=True)
    view.on_status(LocalAudioStatus("open", "microphone at 48000 Hz", 0.0))
    view.on_status(LocalAudioStatus("stalled", "the input stopped: reopening", 1.0))
    assert view.states[-1:] == ["reconnecting"]
    view.on_status(LocalAudioStatus("reopened", "audio devices reopened (try 1)", 2.0))
    assert view.states[-1:] == ["listening"]
    assert [line.text for line in view.lines] == [
        "the input stopped: reopening", "audio devices reopened (try 1)"]
    text = render(view)
    assert "microphone at 48000 Hz" in text and "headphones (echo gate off)" in text


def test_device_arguments() -> None:
    assert parse_device(None) is None
    assert parse_device("3") == 3
    assert parse_device("USB Mic") == "USB Mic"
    with pytest.raises(ValueError, match="device"):
        parse_device(" ")


def test_voice_options_need_voice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--headphones"]) == 2
    assert "need --voice" in capsys.readouterr().err
    assert main(["chat", "--voice", "--input-device", " "]) == 2
    assert "device" in capsys.readouterr().err


@dataclass
class _Stream:
    samplerate: float
    active: bool = False
    closed: bool = False

    def start(self) -> None:
        self.active = True

    def close(self, ignore_errors: bool = True) -> None:
        self.active, self.closed = False, True


@dataclass
class _Driver:
    """Streams that never call back (a silent, then unplugged, sound card)."""

    missing: set[str] = field(default_factory=set)
    opened: int = 0

    def open(self, kind: StreamKind, *, device: Any, samplerate: int | None, block: float,
             latency: Any, callback: Any) -> _Stream:
        if kind in self.missing:
            raise AudioDeviceError(f"no {kind} device", device=device, kind=kind)
        self.opened += 1
        return _Stream(float(samplerate or 16_000))

    def refresh(self) -> None:
        pass


@pytest.mark.models
async def test_a_lost_device_keeps_the_conversation_and_reconnect_goes_on(
    engines: VoiceEngines,
) -> None:
    turns = TurnRunner(Teller(story=SHORT_STORY))
    async for _ in turns.astream_turn("Tell me a story.", turn_id=new_turn_id()):
        pass  # one turn of conversation before the devices go
    before = [m.content for m in turns.flow.state.messages]
    assert before == ["Tell me a story.", SHORT_STORY]
    driver, view, clock = _Driver(), ChatView(), VirtualClock(autojump=True)
    settings = LocalAudioSettings(stall_timeout=1.0, reopen_attempts=1, reopen_backoff=0.1)
    chat = VoiceChat(turns, engines, view, audio_settings=settings, backend=driver, clock=clock)
    async with clock:
        task = asyncio.create_task(chat.run())
        for _ in range(5):
            await asyncio.sleep(0)
        assert chat.sessions == 1
        driver.missing = {"input"}  # unplugged: the stall's reopen fails
        await clock.sleep(5.0)
        assert not task.done()  # the chat waits for r or q
        assert view.lines[-1].who == "system"
        assert view.lines[-1].text.endswith("Press r to reconnect, q to quit.")
        driver.missing = set()  # plugged back in
        chat.on_key("r")
        await clock.sleep(0.5)
        assert chat.sessions == 2 and chat.audio is not None and chat.audio.error is None
        chat.on_key("q")
        await task
    assert [m.content for m in turns.flow.state.messages] == before  # nothing was lost


@pytest.mark.models
async def test_a_cancelled_voice_chat_leaves_no_session_running(engines: VoiceEngines) -> None:
    # Ctrl-C (the chat's task cancelled) ends the session task with it: its owner waits
    # for it, and nothing of the call is left on the loop.
    driver, view, clock = _Driver(), ChatView(), VirtualClock(autojump=True)
    chat = VoiceChat(TurnRunner(Teller(story=SHORT_STORY)), engines, view,
                     audio_settings=LocalAudioSettings(stall_timeout=60.0),
                     backend=driver, clock=clock)
    async with clock:
        task = asyncio.create_task(chat.run())
        for _ in range(5):
            await asyncio.sleep(0)
        assert chat.sessions == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("voice")]
        assert left == []
