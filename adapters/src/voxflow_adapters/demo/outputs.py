"""The demo's files: ``call.wav``, ``events.jsonl`` and ``timeline.png``."""

from __future__ import annotations

import json
import wave
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from voxflow_voice.audio import STT_SAMPLE_RATE

from ..testkit.simulated import FRAME_SECONDS, Tape

__all__ = ["write_call_wav", "write_events", "write_timeline"]


def write_call_wav(path: Path, tape: Tape) -> None:
    """Stereo 16 kHz s16: the user on the left, the assistant as heard on the right."""
    stereo = tape.stereo()
    pcm = (np.clip(stereo, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(STT_SAMPLE_RATE)
        out.writeframes(pcm.tobytes())


def write_events(path: Path, events: list[dict[str, Any]]) -> None:
    """One JSON object per line, in order."""
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(event, ensure_ascii=False) + "\n")


def _envelope(track: NDArray[np.float32]) -> NDArray[np.float32]:
    """RMS per 20 ms frame."""
    frame = int(STT_SAMPLE_RATE * FRAME_SECONDS)
    n = track.size // frame
    if n == 0:
        return np.zeros(0, np.float32)
    frames = track[: n * frame].reshape(n, frame)
    rms: NDArray[np.float32] = np.sqrt(np.mean(frames**2, axis=1)).astype(np.float32)
    return rms


def write_timeline(path: Path, tape: Tape, events: list[dict[str, Any]]) -> None:
    """A picture of the call: both sides' speech, turns, cuts, announcements, latency."""
    # matplotlib (~0.4 s): only the timeline picture needs it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (after choosing the backend that draws to a file)

    user, heard = _envelope(tape.track("user")), _envelope(tape.track("heard"))
    t_user = np.arange(user.size) * FRAME_SECONDS
    t_heard = np.arange(heard.size) * FRAME_SECONDS
    duration = max(t_user[-1] if user.size else 0.0, t_heard[-1] if heard.size else 0.0, 1.0)
    fig, ax = plt.subplots(figsize=(14, 4.2), dpi=110)
    scale = max(float(user.max(initial=0.0)), float(heard.max(initial=0.0)), 1e-6)
    ax.fill_between(t_user, 1.0, 1.0 + 0.8 * user / scale, color="#1f77b4", lw=0, label="user")
    ax.fill_between(t_heard, 0.0, 0.8 * heard / scale, color="#2ca02c", lw=0,
                    label="assistant (as heard)")
    announced = {e["delivery_id"] for e in events
                 if e["kind"] == "reply_started" and e.get("reply_kind") == "progress"}
    mute_start: float | None = None
    first_audio: dict[str, float] = {e["delivery_id"]: e["t"] for e in events
                                     if e["kind"] == "audio_started"}
    for e in events:
        kind, t = e["kind"], e["t"]
        if kind == "turn_committed":
            ax.axvline(t, color="#1f77b4", ls=":", lw=1)
            ax.text(t, 2.05, f"“{e['text'][:22]}”", fontsize=7, rotation=20, color="#1f77b4")
        elif kind == "barge_in":
            ax.axvline(t, color="#d62728", lw=1.5)
            ax.text(t, -0.35, "barge-in", fontsize=8, color="#d62728")
        elif kind == "reply_interrupted":
            ax.text(t + 0.1, 0.85, "✂ cut", fontsize=8, color="#d62728")
        elif kind == "audio_started" and e["delivery_id"] in announced:
            ax.text(t, -0.35, "announcement", fontsize=8, color="#9467bd")
        elif kind == "mute":
            if e["muted"]:
                mute_start = t
            elif mute_start is not None:
                ax.axvspan(mute_start, t, color="#bbbbbb", alpha=0.35, lw=0)
                ax.text(mute_start + 0.1, 1.9, "muted", fontsize=8, color="#555555")
                mute_start = None
        elif kind == "turn_metrics" and e.get("delivery_id") in first_audio:
            start = e["speech_end"]
            end = first_audio[e["delivery_id"]]
            ax.annotate("", xy=(end, 0.95), xytext=(start, 0.95),
                        arrowprops={"arrowstyle": "->", "color": "#ff7f0e", "lw": 1})
            ax.text((start + end) / 2, 0.98, f"{(end - start) * 1000:.0f} ms", fontsize=7,
                    color="#ff7f0e", ha="center")
    ax.set_xlim(0, duration)
    ax.set_ylim(-0.5, 2.4)
    ax.set_yticks([0.4, 1.4], ["assistant", "user"])
    ax.set_xlabel("call time (s)")
    ax.set_title("voxflow demo call: speech, turns, barge-in, announcement, voice-to-voice latency")
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
