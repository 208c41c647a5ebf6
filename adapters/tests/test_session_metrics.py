"""voxflow_voice.session.metrics: latency summaries from hand-made per-turn marks and barge-ins."""

from __future__ import annotations

import pytest
from voxflow_voice.events import ReplyInterrupted, TurnCommitted, TurnMetrics
from voxflow_voice.session.metrics import Distribution, LatencySummary, percentile, summarize

from voxflow.ids import DeliveryId, SessionId, TurnId

pytestmark = pytest.mark.unit

SESSION = SessionId("s-1")


def marks(
    n: int,
    *,
    speech_end: float,
    stt: float,
    flow: float | None,
    tts: float | None,
    interrupted: bool = False,
    fenced: int = 0,
) -> TurnMetrics:
    """One turn's marks, given the duration (s) of each stage after the speech end."""
    transcript = speech_end + stt
    first_text = None if flow is None else transcript + flow
    first_audio = None if first_text is None or tts is None else first_text + tts
    return TurnMetrics(
        session_id=SESSION,
        at=speech_end + 10.0,
        turn_id=TurnId(f"t-{n}"),
        delivery_id=DeliveryId(f"d-{n}"),
        speech_end=speech_end,
        transcript_final=transcript,
        first_text=first_text,
        first_audio=first_audio,
        playback_end=None,
        interrupted=interrupted,
        fenced_chunks=fenced,
    )


def cut(n: int, stop_ms: float | None) -> ReplyInterrupted:
    return ReplyInterrupted(
        session_id=SESSION,
        at=float(n),
        turn_id=TurnId(f"t-{n}"),
        delivery_id=DeliveryId(f"d-{n}"),
        heard_text="Once upon",
        full_text="Once upon a time.",
        heard_seconds=0.8,
        stop_latency_ms=stop_ms,
    )


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([3.0], 90) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([10.0, 0.0, 5.0], 50) == 5.0  # unsorted input
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 10.0


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="values must not be empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q must be within"):
        percentile([1.0], 101)
    with pytest.raises(ValueError, match="q must be within"):
        percentile([1.0], float("nan"))


def test_summary_of_hand_made_turns_gives_median_and_p90_of_each_part() -> None:
    # Five turns: STT 0.6 s + {0.1..0.5} s, the flow 10 ms, TTS+playout {60..100} ms.
    metrics = [
        marks(i, speech_end=10.0 * i, stt=0.6 + 0.1 * (i + 1), flow=0.01, tts=0.06 + 0.01 * i)
        for i in range(5)
    ]
    summary = summarize(metrics)
    assert summary.turns == 5 and summary.interrupted == 0
    stt = summary.speech_end_to_transcript
    assert stt.count == 5
    assert stt.median_ms == pytest.approx(900.0)
    assert stt.p90_ms == pytest.approx(1060.0)  # between 1000 and 1100 at rank 3.6
    assert stt.max_ms == pytest.approx(1100.0)
    assert summary.transcript_to_first_text.median_ms == pytest.approx(10.0)
    assert summary.first_text_to_first_audio.median_ms == pytest.approx(80.0)
    assert summary.voice_to_voice.median_ms == pytest.approx(900.0 + 10.0 + 80.0)
    assert summary.barge_in_stop == Distribution(count=0)
    assert summary.fenced_chunks == 0


def test_turns_missing_a_mark_only_leave_that_figure() -> None:
    metrics = [
        marks(1, speech_end=1.0, stt=0.7, flow=0.02, tts=0.1),
        marks(2, speech_end=5.0, stt=0.8, flow=None, tts=None),  # the reply failed
        marks(3, speech_end=9.0, stt=0.9, flow=0.03, tts=None, interrupted=True, fenced=4),
    ]
    summary = summarize(metrics, [cut(3, 312.0)])
    assert summary.speech_end_to_transcript.count == 3
    assert summary.transcript_to_first_text.count == 2
    assert summary.first_text_to_first_audio.count == 1
    assert summary.voice_to_voice.count == 1
    assert summary.voice_to_voice.median_ms == pytest.approx(820.0)
    assert summary.interrupted == 1
    assert summary.fenced_chunks == 4
    assert summary.barge_in_stop.count == 1 and summary.barge_in_stop.median_ms == 312.0


def test_barge_in_stops_without_audio_are_left_out() -> None:
    stops = [cut(1, 300.0), cut(2, None), cut(3, 340.0), cut(4, 320.0)]
    summary = summarize([], stops)
    assert summary.turns == 0
    assert summary.voice_to_voice.count == 0 and summary.voice_to_voice.median_ms is None
    assert summary.barge_in_stop.count == 3
    assert summary.barge_in_stop.median_ms == 320.0
    assert summary.barge_in_stop.p90_ms == pytest.approx(336.0)


def test_summary_prints_every_figure_and_round_trips() -> None:
    summary = summarize([marks(1, speech_end=0.0, stt=0.5, flow=0.0, tts=0.1)], [cut(1, 250.0)])
    rows = dict(summary.rows())
    assert rows["voice to voice (speech end → first audio)"] == "median 600 ms, p90 600 ms (n=1)"
    assert rows["barge-in stop (onset → last sample played)"].startswith("median 250 ms")
    assert str(Distribution(count=0)) == "n/a"
    assert LatencySummary.model_validate_json(summary.model_dump_json()) == summary


def test_summarize_rejects_other_events() -> None:
    committed = TurnCommitted(
        session_id=SESSION, at=1.0, turn_id=TurnId("t"), text="hi", speech_end_at=0.5
    )
    with pytest.raises(TypeError, match=r"metrics\[0\] must be a TurnMetrics"):
        summarize([committed])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"interrupts\[0\] must be a ReplyInterrupted"):
        summarize([], [committed])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="NaN"):
        Distribution.of([1.0, float("nan")])
