"""``end_of_turn.py --v2v``: voice to voice in real time on the anchor's question, through a
whole voice session, per turn-detection configuration (the module docs of
``end_of_turn.py`` say what it measures and what it found).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _figures import figure
from eot_set import trim
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
from voxflow_voice.engines.stt import SttSettings, WhisperStt
from voxflow_voice.engines.tts import PiperTts, TtsSettings
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session.metrics import Distribution

from voxflow.ids import DeliveryId

__all__ = ["ANCHOR_TEXT", "ANCHOR_WAV", "V2V_CONFIGS", "V2V_DEFAULT", "transcript_counts",
           "voice_to_voice"]


ANCHOR_WAV = Path("/work/shared/anchors/pipecat/audio/user_q.wav")
ANCHOR_TEXT = "What is the weather going to be like in Paris tomorrow?"


_REFERENCE: dict[str, Any] = {"min_speech": 0.2, "min_barge_in": 0.2}
_SMART: dict[str, Any] = {"max_end_of_turn_silence": 1.6, "end_pad": 0.1, "resume_grace": 1.0,
                          **_REFERENCE}
# name: (label, turn detection, Smart Turn on, Whisper base settings, warm-up at onset)
V2V_CONFIGS: dict[str, tuple[str, TurnDetection, bool, dict[str, Any], bool]] = {
    "timer-0.2": ("silence timer 0.2 s (the leading framework's settings)",
                  TurnDetection(end_of_turn_silence=0.2, **_REFERENCE), False, {}, False),
    "timer-0.6": ("silence timer 0.6 s (voxflow's default timer)",
                  TurnDetection(**_REFERENCE), False, {}, False),
    "smart": ("Smart Turn + words at a 0.2 s pause, speculative STT from 0.1 s, provisional; "
              "Whisper base's window fitted to the turn (6-10 s)", TurnDetection(**_SMART),
              True, {}, False),
    "smart-1t": ("the same, Whisper on 1 thread (not 2)", TurnDetection(**_SMART), True,
                 {"cpu_threads": 1}, False),
    "smart-warm": ("the same (2 threads), a Whisper warm-up at each speech onset",
                   TurnDetection(**_SMART), True, {}, True),
    "smart-0.05": ("the same, speculative STT from a 0.05 s pause",
                   TurnDetection(**{**_SMART, "end_pad": 0.05}), True, {}, False),
    "smart-queued": ("smart, but the verdict and the speculative reply wait for the "
                     "pause's transcription in its queue (EarlyTranscriber.transcript_of: "
                     "before issue 33 item 3), not the streaming engine's pause decode",
                     TurnDetection(**_SMART), True, {}, False),
    "smart-q": ("smart, a question's words close the turn (question_closes)",
                TurnDetection(**_SMART, question_closes=True), True, {}, False),
    "smart-q-queued": ("smart-q, the verdict and the speculative reply waiting in the "
                       "queue as smart-queued", TurnDetection(**_SMART, question_closes=True),
                       True, {}, False),
}
_QUEUED = frozenset({"smart-queued", "smart-q-queued"})
V2V_DEFAULT = ("timer-0.2", "timer-0.6", "smart")


async def voice_to_voice(turns: int, wav: Path | None, names: list[str],
                         text: str = ANCHOR_TEXT, holds: tuple[float, ...] = (),
                         engine: str = "whisper:base") -> None:
    """``wav``: the utterance (None: render ``text`` as the anchor did its sentence);
    ``names``: the configurations (:data:`V2V_CONFIGS`); ``holds``: Smart Turn
    configurations holding a complete turn (``complete_silence``) after them; ``engine``:
    the STT, ``whisper:MODEL`` or ``whisper-streaming:MODEL``."""
    from _v2v_stages import (
        StampedModel,
        StampedStreamingStt,
        StampedStt,
        StampedTts,
        Stamps,
        stages,
    )
    from voice_latency import Assistant, tape_figures
    from voxflow_adapters.testkit.scenario import run_call
    from voxflow_adapters.testkit.script import CallScript
    from voxflow_voice.engines import VoiceEngines
    from voxflow_voice.engines.stt_streaming import StreamingSttSettings, StreamingWhisperStt
    from voxflow_voice.listen.early_stt import EarlyTranscriber
    from voxflow_voice.session import VoiceSettings

    from voxflow.clock import MonotonicClock
    from voxflow.turns import TurnRunner

    engines = await asyncio.to_thread(VoiceEngines.load, stt=SttSettings(model="base"),
                                      end_of_turn="smart-turn")
    assert engines.end_of_turn is not None
    if wav is not None:
        audio: AudioChunk | str = str(wav)
        source = str(wav)
    else:
        tts = PiperTts(settings=TtsSettings(noise_scale=0.0, noise_w_scale=0.0))
        parts = [np.asarray(c.samples, np.float32) for c in tts.synthesize(text)]
        speech = trim(resample(np.concatenate(parts) * 0.5, tts.sample_rate, STT_SAMPLE_RATE))
        audio = AudioChunk.from_float(speech, STT_SAMPLE_RATE)
        source = f"{text!r}, bundled Piper voice"
    async for _ in engines.tts.stream("Warming up.", delivery_id=DeliveryId("warm-up"),
                                      segment_id=1):
        pass
    print(f"voice to voice, real time: {turns} turns of {source}; Whisper base; "
          f"Smart Turn's decisions and every STT call stamped")
    configs = {key: V2V_CONFIGS[key] for key in names}
    for hold in holds:
        configs[f"smart-hold-{hold:g}"] = (
            f"Smart Turn, a complete turn held {hold} s (not a question nor a closed answer)",
            TurnDetection(complete_silence=hold, **_SMART), True, {}, False)
    for key, (name, detection, with_model, stt_options, warm_up) in configs.items():
        kind, _, model_name = engine.partition(":")
        streaming = kind == "whisper-streaming"
        stt = (StreamingWhisperStt(StreamingSttSettings(model=model_name, **stt_options))
               if streaming else WhisperStt(SttSettings(model=model_name, **stt_options)))
        await stt.transcribe(AudioChunk.from_float(np.zeros(16_000, np.float32), 16_000))
        stamps = Stamps()
        stamped = (StampedStreamingStt(stt, stamps) if streaming  # type: ignore[arg-type]
                   else StampedStt(stt, stamps))  # type: ignore[arg-type]
        script = CallScript()
        for i in range(turns):
            script.user_says(0.5 + 5.0 * i, audio=audio)
        used = VoiceEngines(
            stt=stamped, tts=StampedTts(engines.tts, stamps),
            make_vad=engines.make_vad,
            end_of_turn=StampedModel(engines.end_of_turn, stamps) if with_model else None)
        pause_words = EarlyTranscriber.pause_words
        if key in _QUEUED:  # the path before: every pause's words through the queue
            EarlyTranscriber.pause_words = EarlyTranscriber.transcript_of
        try:
            call = await run_call(TurnRunner(Assistant(suppress_flow_events=True)), script,
                                  used, clock=MonotonicClock(),
                                  settings=VoiceSettings(turn_detection=detection,
                                                         stt_warm_up=warm_up),
                                  tail=3.0)
        finally:
            EarlyTranscriber.pause_words = pause_words
        tape = tape_figures(call, [])
        v2v = Distribution.of(tape.v2v)
        decided = call.session._detector.decisions
        print(f"\n== {key}: {name}; STT {engine}")
        print(f"   voice to voice, tape (targets median <= 500, p90 <= 700 ms)  {v2v}")
        print("   stages, ms after the last speech sample (tape):")
        for label, value in stages(call, stamps):
            print(f"   {label:<40} {value}")
        print(f"   turns committed {len(call.transcripts())} of {turns}; answered in the pause "
              f"{sum(m.speculative for m in call.metrics())}; stale samples "
              f"{call.stale_samples()}; verdicts complete "
              f"{sum(v.complete for v in decided)} of {len(decided)}; transcripts "
              f"{transcript_counts(call.transcripts())}")
        print(f"   pause words read from the streaming engine's pause decode "
              f"{call.session._early.statistics().pause_words} (verdicts and speculative "
              "replies)")
        print(f"   load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
              f"(a machine shared by several engineers)")
        if v2v.median_ms is not None:
            figure(f"voice to voice on the anchor's audio, {key}", v2v.median_ms, "ms",
                   target="<= 500 (p90 <= 700)")


def transcript_counts(transcripts: list[str]) -> str:
    """How many turns were heard as each transcript, the most frequent first:
    ``'What is the weather ...?' x6, 'Pairs.' x2``."""
    return ", ".join(f"{text!r} x{n}" for text, n in Counter(transcripts).most_common())
