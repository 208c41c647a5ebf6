"""``voxflow demo --fast`` runs whole, and its outputs say what happened."""

from __future__ import annotations

import json
import re
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.demo import DEMO_LINES, run_voice_demo

pytestmark = pytest.mark.models


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower().replace("where's", "where is"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("demo")
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert run_voice_demo(fast=True, json_output=True, out=out) == 0
    return out, json.loads(buffer.getvalue())


def load_events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_every_scripted_line_became_a_turn(demo: tuple[Path, dict[str, Any]]) -> None:
    out, _ = demo
    # (a turn the user went on with is committed again, all its words: the same turn)
    said = {e["turn_id"]: e["text"] for e in load_events(out) if e["kind"] == "turn_committed"}
    assert [words(s) for s in said.values()] == [words(line) for line in DEMO_LINES]


def test_the_call_shows_every_capability(demo: tuple[Path, dict[str, Any]]) -> None:
    out, report = demo
    events = load_events(out)
    kinds = [e["kind"] for e in events]
    # a background job ran, and its result was announced after the unmute only
    assert [e["status"] for e in events if e["kind"] == "job"] == ["queued", "running",
                                                                    "completed"]
    unmute = next(e["t"] for e in events if e["kind"] == "mute" and not e["muted"])
    announced = [e for e in events if e["kind"] == "reply_started"
                 and e["reply_kind"] == "progress"]
    assert len(announced) == 1 and announced[0]["t"] >= unmute
    job_done = next(e["t"] for e in events if e["kind"] == "job" and e["status"] == "completed")
    assert job_done < unmute  # it was ready during the mute, and waited
    assert [e["status"] for e in events if e["kind"] == "delivery_settled"] == ["completed"]
    # the story was cut by the barge-in, and the history keeps what was heard
    story = next(e["delivery_id"] for e in events if e["kind"] == "reply_text"
                 and e["text"].startswith("Once upon a time"))
    assert next(e["delivery_id"] for e in events if e["kind"] == "barge_in") == story
    cut = next(e for e in events if e["kind"] == "reply_interrupted")
    assert cut["heard_text"].startswith("Once upon a time")
    assert len(cut["heard_text"]) < len(cut["full_text"])
    figures = report["figures"]
    assert figures["stale_samples"] == 0
    assert figures["interruptions"] == kinds.count("reply_interrupted") >= 1
    assert figures["announcements"] == 1
    assert figures["turns"] == len(DEMO_LINES)
    # the last reply (the goodbye) was heard whole: the call waits for it
    last = [e for e in events if e["kind"] in ("reply_finished", "reply_interrupted")][-1]
    assert last["kind"] == "reply_finished" and "Goodbye" in last["text"]


def test_the_report_gives_round_figures(demo: tuple[Path, dict[str, Any]]) -> None:
    _, report = demo
    # ms to 0.1 ms and seconds to 0.01 s: a float's sum error (592.0000000000001) is noise
    long = re.findall(r"-?\d+\.\d{3,}", json.dumps(report))
    assert long == [], long
    assert all(isinstance(r["voice_to_voice_ms"], float | None) for r in report["turns"])


def test_identities_are_consistent(demo: tuple[Path, dict[str, Any]]) -> None:
    out, _ = demo
    events = load_events(out)
    assert len({e["session_id"] for e in events if "session_id" in e}) == 1
    # a turn is committed once per input revision (again when the user went on with it)
    turns = [(e["turn_id"], e["input_revision"]) for e in events
             if e["kind"] == "turn_committed"]
    assert len(set(turns)) == len(turns)
    started = {e["delivery_id"]: e for e in events if e["kind"] == "reply_started"}
    for e in events:
        if "delivery_id" in e and e["kind"] != "reply_started" and e.get("delivery_id"):
            assert e["delivery_id"] in started, e
    for e in events:
        if e["kind"] == "reply_started" and e["reply_kind"] == "answer":
            assert e["turn_id"] in {turn for turn, _ in turns}
    times = [e["t"] for e in events]
    assert times == sorted(times)


def test_call_wav_has_each_side_where_the_events_say(demo: tuple[Path, dict[str, Any]]) -> None:
    out, _ = demo
    with wave.open(str(out / "call.wav")) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (2, 2, 16_000)
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2").reshape(-1, 2) / 32768.0
    events = load_events(out)

    def rms(channel: int, start: float, end: float) -> float:
        piece = pcm[int(start * 16_000) : int(end * 16_000), channel]
        return float(np.sqrt(np.mean(piece**2))) if piece.size else 0.0

    for e in events:
        if e["kind"] == "turn_committed":  # the user spoke just before the commit
            assert rms(0, e["speech_end_at"] - 0.4, e["speech_end_at"]) > 0.01
        if e["kind"] == "audio_started":  # the assistant is heard right after
            assert rms(1, e["t"], e["t"] + 0.4) > 0.01
    mute_on = next(e["t"] for e in events if e["kind"] == "mute" and e["muted"])
    unmute = next(e["t"] for e in events if e["kind"] == "mute" and not e["muted"])
    finished = [e["t"] for e in events if e["kind"] == "reply_finished" and e["t"] > mute_on]
    silent_from = finished[0] + 0.1  # after the "checking" answer, silence until unmute
    assert rms(1, silent_from, unmute - 0.05) == 0.0


def test_timeline_is_a_png(demo: tuple[Path, dict[str, Any]]) -> None:
    out, _ = demo
    data = (out / "timeline.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 1000 and height > 300


def test_script_folder_must_hold_one_wav_per_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="folder of WAV files"):
        run_voice_demo(fast=True, out=tmp_path / "o", script=tmp_path / "missing")
    (tmp_path / "one.wav").write_bytes(b"")
    with pytest.raises(ValueError, match=f"needs {len(DEMO_LINES)} WAV files"):
        run_voice_demo(fast=True, out=tmp_path / "o", script=tmp_path)
    assert not (tmp_path / "o").exists()  # rejected before anything was written


def test_fast_latencies_are_labelled_simulated(demo: tuple[Path, dict[str, Any]]) -> None:
    assert demo[1]["mode"] == "fast" and demo[1]["latencies"] == "simulated"


def test_the_report_names_the_engines_the_call_ran_on(demo: tuple[Path, dict[str, Any]]) -> None:
    engines = demo[1]["engines"]
    assert engines == {
        "stt": {"spec": "whisper:tiny.en", "engine": "voxflow_voice.engines.stt.WhisperStt"},
        "tts": {"spec": "piper", "engine": "voxflow_voice.engines.tts.PiperTts"},
        "vad": {"spec": "silero", "engine": "voxflow_voice.engines.vad.SileroVad"},
        "end_of_turn": {"spec": "smart-turn",
                        "engine": "voxflow_voice.engines.end_of_turn.SmartTurn"},
    }  # (the end-of-turn model by default)


def test_the_fast_demo_as_a_user_runs_it_says_its_latencies_are_simulated(
    tmp_path: Path,
) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXFLOW_")}
    result = subprocess.run(
        [sys.executable, "-m", "voxflow.cli", "demo", "--fast", "--out", str(tmp_path)],
        env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "voxflow demo" in result.stdout.splitlines()[0]
    assert "SIMULATED per-turn latency" in result.stdout
    assert "simulated (--fast): voice-to-voice median" in result.stdout
    live = [line for line in result.stdout.splitlines()
            if re.match(r"\d\d:\d\d\.\d latency ", line)]
    assert live and all("simulated voice-to-voice" in line for line in live)
