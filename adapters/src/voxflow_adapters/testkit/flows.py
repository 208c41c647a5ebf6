"""Flows and helpers for testing voice apps against the simulated adapter.

A voice test needs a flow that answers at once (so the timeline is the pipeline's, not
an LLM's) and a reply long enough to talk over. This module holds the one such flow that
voxflow's own adapter tests and benchmarks use, and the helpers they check calls with:

* :class:`Teller`: a rule-based ``Flow[TurnState]`` that tells a story when asked (a
  turn whose text contains ``"story"``) and acknowledges anything else with ``"Okay."``;
  the story, the acknowledgement and the trigger word are constructor options.
* :data:`STORY`: the default story, three sentences (about 12 s with the bundled
  voice); :data:`SHORT_STORY`: its first two sentences (about 8 s).
* :func:`words`: a text's lower-cased words, for comparing transcripts and replies
  without punctuation.
* :func:`played_words`: the words of a reply that the simulated client really played,
  from its receipts and a fresh synthesis of each segment.
* :func:`gate_frames`: a microphone signal through an
  :class:`~voxflow_voice.listen.echo.EchoGate` while a reply plays, frame by frame, with the
  sends and receipts a session would give it.
* :func:`serve_process`: a server subprocess (``voxflow serve``, or a script that
  serves), started and waited for until it says it listens, stopped on exit; with
  :func:`free_port` to give it a port. For tests and benchmarks that kill (``-9``) or
  pause (``SIGSTOP``) a server under a :class:`~voxflow_adapters.webrtc.client.LoopbackCaller`
  or a browser; :func:`serve_processes` starts several at once (:class:`ServeCommand`
  each), their start-ups overlapping.

Example::

    from voxflow_adapters.testkit.scenario import run_call
    from voxflow_adapters.testkit.script import CallScript
    from voxflow_adapters.testkit.flows import STORY, Teller

    script = CallScript().user_says(0.3, "Tell me a story.").user_says(8.0, "Stop, please.")
    call = await run_call(TurnRunner(Teller()), script, engines)
    story, okay = call.replies()

This module imports only voxflow's core at import time; the engines and calls it reads
are passed in (:func:`gate_frames` imports the voice package when called).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from voxflow import ConversationConfig, Flow, listen
from voxflow.conversation import RouterContext
from voxflow.turns import TurnState

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from voxflow_voice.audio import AudioChunk
    from voxflow_voice.engines import VoiceEngines
    from voxflow_voice.listen.echo import EchoGate

    from voxflow.ids import DeliveryId
    from voxflow_adapters.testkit.result import CallResult

__all__ = [
    "ACKNOWLEDGEMENT",
    "SHORT_STORY",
    "STORY",
    "ServeCommand",
    "ServeStartError",
    "Teller",
    "free_port",
    "gate_frames",
    "played_words",
    "serve_process",
    "serve_processes",
    "words",
    "words_within",
]

SHORT_STORY: Final[str] = (
    "Once upon a time, in a small harbour town, there lived a lighthouse keeper named Ada. "
    "Every night she climbed one hundred and twelve steps to light the great lamp."
)
"""The first two sentences of :data:`STORY` (segments 1 to 3 of the reply)."""

STORY: Final[str] = (
    f"{SHORT_STORY} "
    "One stormy evening, the lamp went dark, and a fishing boat was still out at sea."
)
"""The default story: three sentences, about 12 s with the bundled voice."""

ACKNOWLEDGEMENT: Final[str] = "Okay."
"""What :class:`Teller` says to any turn that does not ask for the story."""

_WORD = re.compile(r"[a-z']+")


def _text(value: object, name: str) -> str:
    """``value`` if it is a string with some non-space text, else a typed error naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must not be empty")
    return value


@ConversationConfig(system_prompt="")
class Teller(Flow[TurnState]):
    """A story on request; anything else is acknowledged. Replies at once, no LLM.

    Args:
        story: the reply to a turn that asks for the story.
        acknowledgement: the reply to any other turn.
        trigger: the word (matched case-insensitively anywhere in the user's text) that
            asks for the story; None: every turn gets the story.
        kwargs: the :class:`~voxflow.flow.runtime.Flow` constructor's options (``state``,
            ``clock``, ...).

    Raises:
        TypeError: ``story``, ``acknowledgement`` or ``trigger`` is not a string.
        ValueError: one of them is empty or blank.
    """

    def __init__(
        self,
        *,
        story: str = STORY,
        acknowledgement: str = ACKNOWLEDGEMENT,
        trigger: str | None = "story",
        **kwargs: Any,
    ) -> None:
        self.story = _text(story, "story")
        self.acknowledgement = _text(acknowledgement, "acknowledgement")
        self.trigger = None if trigger is None else _text(trigger, "trigger").lower()
        super().__init__(**kwargs)

    def route_turn(self, context: RouterContext) -> str | None:
        """``"story"`` when the turn asks for it, else ``"ok"``."""
        if self.trigger is None:
            return "story"
        text = (self.state.current_user_message or "").lower()
        return "story" if self.trigger in text else "ok"

    @listen("story")
    def handle_story(self) -> str:
        return self.story

    @listen("ok")
    def handle_ok(self) -> str:
        return self.acknowledgement


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` (letters and apostrophes), punctuation dropped.

    >>> words("Wait, stop! It's fine.")
    ['wait', 'stop', "it's", 'fine']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    return _WORD.findall(text.lower())


def played_words(call: CallResult, engines: VoiceEngines, delivery: DeliveryId) -> list[str]:
    """The words of reply ``delivery`` whose audio ends within what the client played.

    Reads the call's ``reply_text`` events (the segments handed to TTS) and the client's
    playback receipts, and times each segment's words by synthesizing it again with
    ``engines.tts`` (with a noise-free voice: the same samples), independently of the
    session's own heard-text ledger. Counting stops at the first segment not played
    to its end.

    Args:
        call: a finished scripted call (:func:`~voxflow_adapters.testkit.scenario.run_call`).
        engines: the engines the call ran on (their TTS gives the word timings).
        delivery: the reply's delivery id (one of ``call.replies()``).

    Returns:
        The played words, as :func:`words` spells them.
    """
    segments = {e.segment_id: e.text for e in call.of_kind("reply_text")
                if e.delivery_id == delivery}
    played: dict[int, int] = {}
    for r in call.tape.receipts:
        if r.delivery_id == delivery:
            played[r.segment_id] = max(played.get(r.segment_id, 0), r.start_sample + r.num_samples)
    heard: list[str] = []
    for segment_id in sorted(segments):
        timings: list[tuple[str, int]] = []
        offset = 0
        for sentence in engines.tts.synthesize(segments[segment_id]):
            timings += [(w.word, offset + w.end) for w in sentence.words]
            offset += len(sentence.samples)
        upto = played.get(segment_id, 0)
        heard += [w for w, end in timings if end <= upto]
        if upto < offset:
            break
    return words(" ".join(heard))


def words_within(engines: VoiceEngines, segments: Sequence[str], played: int,
                 rate: int) -> list[str]:
    """The words of a reply's ``segments``, said one after another, whose audio ends
    within its first ``played`` samples at ``rate`` Hz: what the caller heard of a reply
    cut there (a phone carrier's count of the samples it played, at 8 kHz), timed by
    synthesizing the segments again with ``engines.tts`` (a noise-free voice: the same
    samples).

    Returns:
        The heard words, as :func:`words` spells them.
    """
    upto = played * engines.tts.sample_rate / rate
    heard: list[str] = []
    offset = 0
    for text in segments:
        for sentence in engines.tts.synthesize(text):
            heard += [w.word for w in sentence.words if offset + w.end <= upto]
            offset += len(sentence.samples)
    return words(" ".join(heard))


def gate_frames(
    gate: EchoGate, played: NDArray[np.float32], mic: NDArray[np.float32], *,
    delivery_id: str = "played", frame: int = 320,
) -> Iterator[AudioChunk]:
    """Play ``played`` from t=0 through ``gate`` and yield its output for ``mic``.

    Both signals are 16 kHz mono on one timeline. Each ``frame`` of the reply is handed
    to the gate as sent and receipted as played at its own time (a client with no output
    latency), then the microphone frame of that time is cleaned; the cleaned frames are
    yielded in order (to a VAD, or to be joined).

    Raises:
        ValueError: ``frame`` is not positive, or a signal is not one-dimensional.
    """
    # numpy and the voice kit: only this helper; the module's flows (Teller) import light
    import numpy as np
    from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk
    from voxflow_voice.transport import PlaybackReceipt

    from voxflow.ids import DeliveryId  # (with the kit's types above)

    if frame <= 0:
        raise ValueError(f"frame must be a positive number of samples, got {frame!r}")
    if np.ndim(played) != 1 or np.ndim(mic) != 1:
        raise ValueError("played and mic must be 1-D sample arrays")
    delivery = DeliveryId(delivery_id)
    rate = STT_SAMPLE_RATE
    for start in range(0, mic.size, frame):
        if start < played.size:
            piece = played[start : start + frame]
            gate.sent(ReplyChunk.from_float(piece, rate, start_sample=start,
                                            delivery_id=delivery, segment_id=1))
            gate.played(PlaybackReceipt(delivery, 1, start, piece.size, rate, at=start / rate))
        chunk = AudioChunk.from_float(mic[start : start + frame], rate, start_sample=start)
        yield gate.process(chunk, start / rate)


class ServeStartError(RuntimeError):
    """A server process exited, or did not say it listens, before its deadline (the
    message names it and ends with its log, when it has one)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (for a server process to bind)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServeCommand:
    """A server process for :func:`serve_processes`: the arguments of :func:`serve_process`."""

    argv: Sequence[str]
    cwd: str | Path | None = None
    env: Mapping[str, str] | None = None
    log: Path | None = None
    ready: str = "listening"
    within: float = 180.0
    stop: signal.Signals = signal.SIGKILL
    name: str | None = None


@contextlib.contextmanager
def serve_process(
    argv: Sequence[str], *, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
    log: Path | None = None, ready: str = "listening", within: float = 180.0,
    stop: signal.Signals = signal.SIGKILL, name: str | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """Start the server process ``argv`` and wait until a line of its stdout contains
    ``ready`` (``voxflow serve`` and :class:`~voxflow_adapters.webrtc.WebRtcServer`
    scripts print ``listening`` once they accept offers); yield it, then stop it.

    Its stdout stays the yielded process's (read on, or leave it: a server that prints
    more than a pipe holds blocks); its stderr goes to ``log`` (a file, overwritten) or
    nowhere. On exit a process still running is continued (``SIGCONT``: a paused one would
    not act on the stop), sent ``stop`` (``SIGINT`` for a graceful stop) and killed if it
    has not ended 30 s later.

    Args:
        argv: the command (``[sys.executable, "-m", "voxflow.cli", "serve", ...]``).
        cwd, env: its working folder and environment (this process's if None).
        log: where its stderr goes.
        ready: what its stdout says when it is ready.
        within: seconds to wait for ``ready`` (model loading included).
        stop: the signal that stops it on exit.
        name: how errors name it (its command if None).

    Raises:
        ServeStartError: it exited, or said nothing with ``ready`` within ``within`` s.
    """
    command = ServeCommand(argv, cwd=cwd, env=env, log=log, ready=ready, within=within,
                           stop=stop, name=name)
    with serve_processes(command) as [proc]:
        yield proc


@contextlib.contextmanager
def serve_processes(*commands: ServeCommand) -> Iterator[list[subprocess.Popen[str]]]:
    """Start every server process of ``commands`` at once, then wait until each one said
    it is ready (their start-ups, model loading included, overlap); yield them in the
    order given, then stop each one as :func:`serve_process` does (the last one first).

    Raises:
        ServeStartError: one of them exited, or said nothing with its ``ready`` within
            its ``within`` s (the others are stopped).
    """
    with contextlib.ExitStack() as stack:
        procs = [stack.enter_context(_started(command)) for command in commands]
        for command, proc in zip(commands, procs, strict=True):
            _wait_ready(proc, command.ready, command.within, _label(command), command.log)
        yield procs


def _label(command: ServeCommand) -> str:
    return command.name if command.name is not None else " ".join(map(str, command.argv))


@contextlib.contextmanager
def _started(command: ServeCommand) -> Iterator[subprocess.Popen[str]]:
    """The process of ``command``, started; stopped on exit (continued, sent its ``stop``,
    killed if it has not ended 30 s later)."""
    env = command.env
    with contextlib.ExitStack() as files:
        log = command.log
        err: Any = files.enter_context(log.open("w")) if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(list(command.argv), cwd=command.cwd,
                                env=None if env is None else dict(env),
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.send_signal(command.stop)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _wait_ready(proc: subprocess.Popen[str], ready: str, within: float, label: str,
                log: Path | None) -> None:
    """Wait for a stdout line containing ``ready``. The lines are read in a thread that
    stops at that line (the rest of stdout stays the caller's), so a silent process
    cannot block the wait past ``within``: a blocked ``readline`` would."""
    stdout = proc.stdout
    assert stdout is not None
    said: queue.Queue[bool] = queue.Queue()

    def read() -> None:
        for line in iter(stdout.readline, ""):
            if ready in line:
                said.put(True)
                return
        said.put(False)  # end of its stdout

    threading.Thread(target=read, name=f"serve_process {label}", daemon=True).start()
    try:
        if said.get(timeout=within):
            return
    except queue.Empty:
        raise ServeStartError(f"{label} did not say {ready!r} within {within:g} s") from None
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    tail = f": {log.read_text(errors='replace')[-4000:]}" if log is not None else ""
    raise ServeStartError(f"{label} exited {proc.returncode} before it said {ready!r}{tail}")
