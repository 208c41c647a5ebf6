"""``voxflow chat --voice``: talk to a flow through the microphone and speakers.

:class:`ChatView` turns :data:`~voxflow_voice.events.SessionEvent` s (and the local
adapter's status) into what a terminal shows: live transcripts of both sides, the state
(listening / hearing you / thinking / speaking / muted), interruptions (and replies
paused for a backchannel, then resumed) and each turn's
voice-to-voice latency. :func:`run_voice_chat` loads the models, opens
:class:`~voxflow_adapters.local.LocalAudio` and runs a
:class:`~voxflow_voice.session.VoiceSession` under a ``rich`` live display, with keys:
``m`` mutes/unmutes, ``q`` quits (``r`` reconnects after a lost device).

If the devices are lost for good mid-call (the adapter could not reopen them), the
session ends but the conversation does not: the same TurnRunner (the flow and its
history) answers in a new session once ``r`` is pressed.

The core CLI imports this module only when ``chat --voice`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import (
    AudioStarted,
    BargeIn,
    BargeInPaused,
    BargeInResumed,
    MuteObserved,
    ReplyFinished,
    ReplyInterrupted,
    ReplyTextStreamed,
    SessionEvent,
    SpeechEnded,
    SpeechStarted,
    TurnCommitted,
    TurnMetrics,
)
from voxflow_voice.session import VoiceSession, VoiceSettings
from voxflow_voice.session.wiring import assistant_session

from voxflow.clock import Clock
from voxflow.demo import load_example_module
from voxflow.errors import ConversationModeError, VoxflowError
from voxflow.loader import load_flow
from voxflow.settings import Settings
from voxflow.tasks import background
from voxflow.wiring import AssistantWiring

from .backend import SoundDeviceBackend, StreamBackend
from .device import LocalAudio, LocalAudioSettings, LocalAudioStatus
from .errors import AudioBackendError, AudioDeviceError

__all__ = [
    "ChatLine",
    "ChatState",
    "ChatView",
    "VoiceChat",
    "chat_voice_settings",
    "parse_device",
    "run_voice_chat",
]

logger = logging.getLogger(__name__)

ChatState = Literal["listening", "hearing you", "thinking", "speaking", "muted", "reconnecting"]
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_SHOWN_LINES = 14


@dataclass(slots=True)
class ChatLine:
    """One line of the transcript.

    Attributes:
        who: ``you``, ``assistant`` or ``system``.
        text: what was said (for the assistant: the text sent to speech so far).
        note: e.g. ``interrupted after 1.2 s`` or ``780 ms``.
    """

    who: Literal["you", "assistant", "system"]
    text: str
    note: str = ""


class ChatView:
    """The state of a voice chat as a terminal shows it; a ``rich`` renderable.

    Args:
        title: shown in the panel's title (e.g. the flow's name).
        headphones: whether the echo gate is off (shown in the footer).
    """

    def __init__(self, title: str = "voxflow voice chat", *, headphones: bool = False) -> None:
        self.title = title
        self.headphones = headphones
        self.lines: list[ChatLine] = []
        self.state: ChatState = "listening"
        self.states: list[ChatState] = ["listening"]  # every change, for tests and replays
        self.latencies_ms: list[float] = []
        self.interruptions = 0
        self.device_note = ""
        self._muted = False
        self._reply_line: dict[str, ChatLine] = {}

    # -- inputs -------------------------------------------------------------------

    def on_event(self, event: SessionEvent) -> None:
        """Update from one session event (pass as ``VoiceSession(on_event=...)``)."""
        if isinstance(event, SpeechStarted):
            self._set("hearing you")
        elif isinstance(event, SpeechEnded):
            self._set("thinking")
        elif isinstance(event, TurnCommitted):
            self.lines.append(ChatLine("you", event.text))
            self._set("thinking")
        elif isinstance(event, ReplyTextStreamed):
            line = self._reply_line.get(event.delivery_id)
            if line is None:
                line = ChatLine("assistant", event.text)
                self._reply_line[event.delivery_id] = line
                self.lines.append(line)
            else:
                line.text = f"{line.text} {event.text}"
        elif isinstance(event, AudioStarted):
            self._set("speaking")
        elif isinstance(event, BargeIn):
            self.interruptions += 1
        elif isinstance(event, BargeInPaused):
            self._set("hearing you")  # the reply holds while we find out what it was
        elif isinstance(event, BargeInResumed):
            if event.reason in ("backchannel", "noise") and event.text:
                self.lines.append(ChatLine("you", event.text, note=f"{event.reason}, kept on"))
            self._set("speaking")
        elif isinstance(event, ReplyInterrupted):
            line = self._reply_line.get(event.delivery_id)
            if line is not None:
                line.text = event.heard_text or "…"
                line.note = f"interrupted after {event.heard_seconds:.1f} s"
            self._set("hearing you")
        elif isinstance(event, ReplyFinished):
            self._set("listening")
        elif isinstance(event, TurnMetrics):
            self._on_metrics(event)
        elif isinstance(event, MuteObserved):
            self._muted = event.muted
            self._set("muted" if event.muted else "listening")

    def on_status(self, status: LocalAudioStatus) -> None:
        """Update from the local adapter's device status."""
        if status.state in ("stalled", "reopen_failed", "broken"):
            self.lines.append(ChatLine("system", status.message))
        if status.state == "stalled":
            self._set("reconnecting")
        elif status.state == "reopened":
            self.lines.append(ChatLine("system", status.message))
            self._set("listening")
        self.device_note = status.message if status.state == "open" else self.device_note

    def note(self, text: str) -> None:
        """Add a system line (e.g. how to reconnect)."""
        self.lines.append(ChatLine("system", text))

    def _on_metrics(self, metrics: TurnMetrics) -> None:
        if metrics.first_audio is not None:
            latency = (metrics.first_audio - metrics.speech_end) * 1000.0
            self.latencies_ms.append(latency)
            line = self._reply_line.get(metrics.delivery_id or "")
            if line is not None and not line.note:
                line.note = f"{latency:.0f} ms"
        if self.state not in ("hearing you", "muted"):
            self._set("listening")

    def _set(self, state: ChatState) -> None:
        if self._muted and state != "muted":
            return  # muted wins until unmuted
        if state != self.state:
            self.state = state
            self.states.append(state)

    # -- output -------------------------------------------------------------------

    def __rich__(self) -> Any:
        body = Table.grid(padding=(0, 1))
        body.add_column(justify="right", style="bold")
        body.add_column()
        body.add_column(justify="right", style="dim")
        colours = {"you": "cyan", "assistant": "green", "system": "yellow"}
        for line in self.lines[-_SHOWN_LINES:]:
            body.add_row(Text(line.who, style=colours[line.who]), Text(line.text),
                         Text(line.note))
        state_colour = {"listening": "green", "hearing you": "cyan", "thinking": "magenta",
                        "speaking": "blue", "muted": "red", "reconnecting": "yellow"}
        ordered = sorted(self.latencies_ms)
        median = ordered[len(ordered) // 2] if ordered else None
        footer = Text.assemble(
            ("● ", state_colour[self.state]), (self.state, f"bold {state_colour[self.state]}"),
            f"   turns {len(self.latencies_ms)}",
            f" · median voice-to-voice {median:.0f} ms" if median is not None else "",
            f" · interruptions {self.interruptions}",
            " · headphones (echo gate off)" if self.headphones else " · speakers (echo gate on)",
            ("\n[m] mute/unmute  [q] quit", "dim"),
        )
        grid = Table.grid()
        grid.add_row(body)
        grid.add_row(footer)
        subtitle = self.device_note or None
        return Panel(grid, title=self.title, subtitle=subtitle, border_style="dim")


@contextlib.contextmanager
def _keys(loop: asyncio.AbstractEventLoop, on_key: Callable[[str], None]) -> Iterator[bool]:
    """Single-key input from a terminal (cbreak mode); yields False when stdin is not one."""
    if not sys.stdin.isatty():
        yield False
        return
    # POSIX only: the terminal's raw mode for the keys
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read() -> None:
        key = os.read(fd, 1).decode(errors="ignore")
        if key:
            on_key(key.lower())

    loop.add_reader(fd, read)
    try:
        yield True
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class VoiceChat:
    """Sessions over the local devices for one conversation, until :meth:`quit`.

    The TurnRunner (the flow and its history) lives as long as the chat; each
    :class:`~voxflow_voice.session.VoiceSession` lives as long as its devices. When the
    devices are lost for good, the session ends, a note says so, and :meth:`reconnect`
    starts a new session on the same conversation.

    Args:
        turns: the conversation's :class:`~voxflow.wiring.AssistantWiring` (its reply
            queue, jobs and announcements: what ``voxflow chat --voice`` passes), or a
            bare TurnRunner.
        engines: the speech models.
        view: where events and device status go.
        audio_settings: the devices.
        voice_settings: the sessions' settings (``echo_gate=False`` for headphones).
        backend: opens the streams (:class:`SoundDeviceBackend` if None).
        clock: the call clock (monotonic if None).
    """

    def __init__(
        self, turns: Any, engines: Any, view: ChatView, *,
        audio_settings: LocalAudioSettings | None = None, voice_settings: Any = None,
        backend: StreamBackend | None = None, clock: Clock | None = None,
    ) -> None:
        self.wiring = turns if isinstance(turns, AssistantWiring) else None
        self.turns = turns.turns if isinstance(turns, AssistantWiring) else turns
        self.engines = engines
        self.view = view
        self.audio_settings = audio_settings or LocalAudioSettings()
        self.voice_settings = voice_settings
        self.backend = backend
        self.clock = clock
        self.audio: LocalAudio | None = None
        self.session: VoiceSession | None = None  # the current (or last) session
        self.sessions = 0
        self._quit = asyncio.Event()
        self._reconnect = asyncio.Event()

    def quit(self) -> None:
        """End the chat (the current session settles and closes)."""
        self._quit.set()

    def reconnect(self) -> None:
        """After a lost device: open the devices again and go on with the conversation."""
        self._reconnect.set()

    def toggle_mute(self) -> None:
        """Mute or unmute the microphone."""
        if self.audio is not None:
            self.audio.set_muted(not self.audio.muted)

    def on_key(self, key: str) -> None:
        """``q`` quits, ``m`` mutes/unmutes, ``r`` reconnects."""
        actions = {"q": self.quit, "m": self.toggle_mute, "r": self.reconnect}
        action = actions.get(key)
        if action is not None:
            action()

    async def run(self) -> None:
        """Run sessions until :meth:`quit` (or until a session ends on its own)."""
        while True:
            audio = LocalAudio(self.audio_settings, backend=self.backend, clock=self.clock,
                               on_status=self.view.on_status)
            await audio.open()
            self.audio = audio
            if self.wiring is not None:  # the one assistant wiring: floor, jobs, history
                session = assistant_session(self.wiring, audio, self.engines,
                                            settings=self.voice_settings,
                                            on_event=self.view.on_event)
            else:
                session = VoiceSession(self.turns, audio, self.engines,
                                       settings=self.voice_settings, clock=self.clock,
                                       on_event=self.view.on_event)
            self.session = session
            self.sessions += 1
            # the session is over when this block is (cancelled with us, never left behind)
            async with background(session.run(), name="voice-chat.session") as run:
                if await self._first(run, self._quit.wait()):
                    await audio.aclose()  # ends the input: the session settles and closes
                await run
            await audio.aclose()
            if self._quit.is_set() or audio.error is None:
                return
            self.view.note(f"{audio.error} Press r to reconnect, q to quit.")
            self._reconnect.clear()
            if await self._first(self._reconnect.wait(), self._quit.wait()):
                return

    @staticmethod
    async def _first(first: Any, second: Any) -> bool:
        """Wait for either; True if ``second`` finished first. The other is left running
        if it is a task the caller owns, else cancelled."""
        a = first if isinstance(first, asyncio.Task) else asyncio.ensure_future(first)
        b = second if isinstance(second, asyncio.Task) else asyncio.ensure_future(second)
        done, _ = await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
        for task, owned in ((a, first is a), (b, second is b)):
            if not owned and not task.done():
                task.cancel()
        return b in done and a not in done


def chat_voice_settings(
    settings: Settings | None = None, *, headphones: bool = False
) -> VoiceSettings:
    """The voice settings of ``voxflow chat --voice`` sessions: turn taking and speculative
    replies from ``settings`` (``VOXFLOW_*``; the environment's if None), the echo gate on
    for speakers and off for ``headphones``.

    Raises:
        TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`.
    """
    settings = settings if settings is not None else Settings.from_env()
    return VoiceSettings.from_settings(settings, echo_gate=not headphones)


async def _chat(flow_spec: str | None, model: str | None, audio_settings: LocalAudioSettings,
                headphones: bool, settings: Settings) -> int:
    console = Console()
    backend = SoundDeviceBackend()  # PortAudio missing: fails here, before the models load
    devices = (backend.describe("input", audio_settings.input_device),
               backend.describe("output", audio_settings.output_device))
    voice_settings = chat_voice_settings(settings, headphones=headphones)
    flow = _make_flow(flow_spec, model)
    wiring = AssistantWiring(flow)
    with console.status("loading the speech models…"):
        engines = await asyncio.to_thread(VoiceEngines.from_settings, settings)
    view = ChatView(f"voxflow · {type(flow).__name__}", headphones=headphones)
    view.note(f"microphone: {devices[0]} · speakers: {devices[1]}")
    chat = VoiceChat(wiring, engines, view, audio_settings=audio_settings,
                     voice_settings=voice_settings, backend=backend)
    loop = asyncio.get_running_loop()
    with _keys(loop, chat.on_key) as interactive, Live(view, console=console,
                                                        refresh_per_second=8):
        if not interactive:
            view.note("stdin is not a terminal: keys are off, Ctrl-C quits")
        try:
            await chat.run()
        finally:
            await wiring.aclose()
    messages = len(getattr(flow.state, "messages", []))
    console.print(f"[dim]call ended · {messages} messages in the conversation · "
                  f"{view.interruptions} interruptions[/]")
    return EXIT_OK


def _make_flow(flow_spec: str | None, model: str | None) -> Any:
    if flow_spec is None:
        return load_example_module("assistant").assistant_class(model)()

    flow = load_flow(flow_spec, model=model)  # a constructor that raises: one error line
    if not getattr(flow, "conversational", False):
        raise ConversationModeError(f"{flow_spec} is not a conversational flow")
    return flow


def run_voice_chat(
    *, flow: str | None, input_device: int | str | None = None,
    output_device: int | str | None = None, headphones: bool = False,
    model: str | None = None, settings: Settings | None = None,
) -> int:
    """Talk to ``flow`` (``path.py:Class``; the example assistant if None) until ``q``.

    ``settings`` (``VOXFLOW_*``, see :mod:`voxflow.settings`; the environment's if None)
    supplies the STT model, the voice, the turn-taking times and speculative replies.

    Returns:
        the exit code: 0 done, 1 the devices or models failed, 2 bad input.
    """
    settings = settings if settings is not None else Settings.from_env()
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be voxflow Settings, got {type(settings).__name__}")
    try:
        audio_settings = LocalAudioSettings(input_device=input_device,
                                            output_device=output_device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    try:
        return asyncio.run(_chat(flow, model, audio_settings, headphones, settings))
    except KeyboardInterrupt:
        return EXIT_OK
    except (AudioBackendError, AudioDeviceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except VoxflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED


def parse_device(value: str | None) -> int | str | None:
    """A ``--input-device``/``--output-device`` value: an index if numeric, else a name."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        raise ValueError("a device must be an index or a name, got an empty string")
    return int(text) if text.isdigit() else text
