"""Continuations merged into their turn (issue 32, item 2), through the session.

Run: ``uv run python benchmarks/continuations.py [--pauses 0.7 0.9] [--voices en+f2 ...]``

A caller (espeak-ng voices, not the bundled one) says a request with a pause after an
unfinished first half ("I want to reserve a table for" *(pause)* "four people at eight
tonight."). At the default voice settings (the 0.6 s silence timer, speculative replies)
the timer commits the first half inside the pause and its reply starts playing before
the user goes on. Each utterance is one ``run_call`` (real Silero VAD, Whisper tiny.en,
Piper; virtual time, so the figures do not depend on the machine's load), with
``continue_within`` 0 (off: the continuation is a barge-in and a new turn) and 1.0 s
(the default).

Printed per arm: utterances answered as one turn (one user message in the history) and
split (two or more), answers played whole per utterance, first replies cut with a part
of them heard, and stale samples (played after their reply was fenced: must be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import numpy as np
from _espeak import espeak
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import ReplyInterrupted, ReplyStarted, TurnCommitted
from voxflow_voice.listen.turn_detection import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow.turns import TurnRunner

SENTENCES = (
    ("I want to reserve a table for", "four people at eight tonight."),
    ("Please book a table for", "two people tomorrow evening."),
    ("Can you send the invoice to", "my office address in Boston?"),
)
ANSWER = "Of course. Let me see what I can do."


async def one(engines: VoiceEngines, audio: AudioChunk, window: float) -> dict[str, int]:
    turns = TurnRunner(Teller(story=ANSWER, trigger=None))
    settings = VoiceSettings(turn_detection=TurnDetection(continue_within=window))
    call = await run_call(turns, CallScript().user_says(0.5, audio=audio).until(12.0),
                          engines, settings=settings)
    users = [m for m in turns.flow.state.messages if m.role == "user"]
    cut = [e for e in call.events if isinstance(e, ReplyInterrupted) and e.heard_seconds > 0]
    whole = [e for e in call.events if isinstance(e, ReplyStarted)
             and call.settled(e.delivery_id) == "completed"]
    if len(users) > 1 and window > 0:
        first = next(e for e in call.events if isinstance(e, TurnCommitted))
        print(f"  split: first half heard as {first.text!r}")
    return {"one turn": int(len(users) == 1), "split": int(len(users) > 1),
            "answers": len(whole), "cut, heard": len(cut), "stale": call.stale_samples()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pauses", type=float, nargs="+", default=[0.7, 0.9])
    parser.add_argument("--voices", nargs="+", default=["en+f2", "en-us+f3", "en+m1"])
    args = parser.parse_args()
    engines = VoiceEngines.load()
    totals = {0.0: dict.fromkeys(("one turn", "split", "answers", "cut, heard", "stale"), 0),
              1.0: dict.fromkeys(("one turn", "split", "answers", "cut, heard", "stale"), 0)}
    count = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for voice in args.voices:
            for first, second in SENTENCES:
                halves = espeak(folder, first, voice), espeak(folder, second, voice)
                for pause in args.pauses:
                    gap = np.zeros(round(pause * STT_SAMPLE_RATE), np.float32)
                    audio = AudioChunk.from_float(
                        np.concatenate([halves[0], gap, halves[1]]).astype(np.float32),
                        STT_SAMPLE_RATE)
                    count += 1
                    for window, total in totals.items():
                        for key, value in (await one(engines, audio, window)).items():
                            total[key] += value
    print(f"{count} utterances ({len(args.voices)} voices x {len(SENTENCES)} sentences x "
          f"pauses {args.pauses} s), default voice settings")
    for window, total in totals.items():
        print(f"continue_within={window:.1f} s: one turn {total['one turn']}/{count}, "
              f"split {total['split']}/{count}, answers played whole {total['answers']} "
              f"({total['answers'] / count:.2f} per utterance), first replies cut with a "
              f"part heard {total['cut, heard']}, stale samples {total['stale']}")


if __name__ == "__main__":
    asyncio.run(main())
