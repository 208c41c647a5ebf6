"""The Prometheus metrics of a process that hosts calls, read from what it already reports.

:class:`CallMetrics` registers the call metrics on a registry (a
:class:`~voxflow.monitoring.Monitor`'s) and is fed by the host:

* every :data:`~voxflow_voice.events.SessionEvent` of every call, through the observer
  :meth:`CallMetrics.call` gives each call (its turns' latency marks, barge-ins,
  announcements): the same events the call's own latency summary
  (:func:`~voxflow_voice.session.metrics.summarize`) is made of, so the histogram and
  the summary agree;
* the admission controller's :class:`~voxflow_adapters.hosting.admission.Load` and the
  host's counts, read when Prometheus scrapes (:meth:`CallMetrics.watch`);
* the end of each call (:meth:`CallMetrics.call_ended`: its duration, stale samples) and
  the session store's refusals and failures (:meth:`CallMetrics.write_refused`,
  :meth:`CallMetrics.store_failed`), lease takeovers (:meth:`CallMetrics.lease_acquired`).

Names follow Prometheus's conventions: the unit in the name (``_seconds``, ``_ratio``),
``_total`` for counters, and label values from small fixed sets (a refusal's reason key,
a settle status): never a call, session or delivery id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from voxflow_voice.events import (
    AnnouncementQueued,
    BargeIn,
    BargeInResumed,
    DeliverySettled,
    ReplyInterrupted,
    ReplyStarted,
    SessionEvent,
    SpeculativeReplyDiscarded,
    SpeechEnded,
    TranscriptDiscarded,
    TurnCommitted,
    TurnMetrics,
    TurnRevoked,
)

from .admission import Load

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

__all__ = ["LATENCY_BUCKETS", "CallMetrics", "HostCounts", "watch_host"]

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0,
                   2.5, 3.0, 5.0, 10.0)
"""Buckets (s) of the per-turn latency histograms: 100 ms steps where voice to voice
lives (0.3 to 1 s), so a p95 read from them is within 0.1 s."""

_STOP_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
_CALL_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
_RESUME_REASONS = frozenset({"false_alarm", "unconfirmed", "backchannel", "noise"})
_WRITE_REFUSALS = frozenset({"taken over", "expired", "released", "unfenced"})


@dataclass(frozen=True, slots=True)
class HostCounts:
    """What a call host counted so far (read at each scrape).

    Attributes:
        admitted: calls started.
        refused: offers refused, by reason key (``busy``, ``sdp``, ``token``, ...).
    """

    admitted: int
    refused: Mapping[str, int]


class CallMetrics:
    """The call metrics of one process, registered on ``registry``.

    Args:
        registry: a ``prometheus_client`` registry (a
            :class:`~voxflow.monitoring.Monitor`'s).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Histogram  # the optional [metrics] extra

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, buckets=buckets, registry=registry)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        self._registry = registry
        self.voice_to_voice = histogram(
            "voxflow_voice_to_voice_seconds", "per answered turn: the user's last speech "
            "sample to the first reply sample played", LATENCY_BUCKETS)
        self.end_of_turn = histogram(
            "voxflow_end_of_turn_wait_seconds", "the user's last speech sample to the end "
            "of their turn decided (the silence waited, or the end-of-turn model)",
            LATENCY_BUCKETS)
        self.stt = histogram(
            "voxflow_stt_wait_seconds", "per committed turn: the end of the turn to its "
            "transcript (the part of speech recognition the user waits for)", LATENCY_BUCKETS)
        self.first_text = histogram(
            "voxflow_llm_first_text_seconds", "per answered turn: the transcript to the "
            "flow's first reply text (the LLM's time to first token)", LATENCY_BUCKETS)
        self.first_audio = histogram(
            "voxflow_tts_first_audio_seconds", "per answered turn: the first reply text to "
            "its first sample played (speech synthesis and playout)", LATENCY_BUCKETS)
        self.turns = counter("voxflow_turns_total", "foreground turns answered (or cut)")
        self.barge_ins = counter("voxflow_barge_ins_total",
                                 "user speech over a reply long enough to interrupt it")
        self.barge_in_stop = histogram(
            "voxflow_barge_in_stop_seconds", "a barge-in's speech onset to the last sample "
            "of the cut reply played", _STOP_BUCKETS)
        self.resumed = counter(
            "voxflow_barge_in_resumed_total", "replies paused by user sound that played on "
            "(false pauses), by reason", ("reason",))
        self.fenced_chunks = counter(
            "voxflow_fenced_chunks_total", "reply chunks the fence dropped, never played")
        self.stale_samples = counter(
            "voxflow_stale_samples_total", "reply samples played after their reply was cut "
            "(always 0: anything else is a bug)")
        self.revoked = counter("voxflow_turns_revoked_total",
                               "committed turns taken back: the user went on speaking")
        self.continued = counter(
            "voxflow_turns_continued_total",
            "unfinished turns the user went on with after their reply began (the reply cut, "
            "the turn answered again with all its words)")
        self.speculative_discarded = counter(
            "voxflow_speculative_replies_discarded_total",
            "replies prepared in the user's pause and dropped unheard")
        self.transcripts_discarded = counter(
            "voxflow_transcripts_discarded_total", "utterances that gave no turn (no words, "
            "a backchannel)")
        self.announcements = counter("voxflow_announcements_queued_total",
                                     "background job results queued to be announced")
        self.announcement_wait = histogram(
            "voxflow_announcement_wait_seconds", "an announcement queued to its reply "
            "started (the floor was busy meanwhile)", _WAIT_BUCKETS)
        self.announcements_settled = counter(
            "voxflow_announcements_settled_total", "announcements settled, by status",
            ("status",))
        self.calls_ended = counter("voxflow_calls_ended_total", "calls ended")
        self.call_duration = histogram("voxflow_call_duration_seconds",
                                       "how long the ended calls lasted", _CALL_BUCKETS)
        self.takeovers = counter(
            "voxflow_lease_takeovers_total", "sessions whose lease this process took from "
            "another owner (a worker that died or went silent)")
        self.writes_refused = counter(
            "voxflow_session_writes_refused_total", "session writes the lease's fence "
            "refused, by reason", ("reason",))
        self.store_errors = counter(
            "voxflow_persistence_errors_total", "session store calls that failed (the "
            "database unreachable, a conflict), by operation", ("operation",))

    # -- fed by the host --------------------------------------------------------------

    def call(self) -> Callable[[SessionEvent], None]:
        """An observer for one call's session events (its own small state: when each
        announcement was queued, when the latest turn ended)."""
        return _CallObserver(self).observe

    def call_ended(self, *, seconds: float, stale_samples: int = 0) -> None:
        """A call ended after ``seconds``; ``stale_samples``: its transport's count."""
        self.calls_ended.inc()
        self.call_duration.observe(max(0.0, seconds))
        if stale_samples > 0:
            self.stale_samples.inc(stale_samples)

    def lease_acquired(self, *, taken_over: bool) -> None:
        """A call's session lease was acquired (``taken_over``: from another owner)."""
        if taken_over:
            self.takeovers.inc()

    def write_refused(self, reason: str) -> None:
        """The fence refused a session write (``reason``: ``FencedWriteError.reason``)."""
        self.writes_refused.labels(reason if reason in _WRITE_REFUSALS else "other").inc()

    def store_failed(self, operation: str) -> None:
        """A session store call failed (``operation``: the store's method name)."""
        self.store_errors.labels(operation if operation.isidentifier() else "other").inc()

    def watch(self, load: Callable[[], Load], counts: Callable[[], HostCounts]) -> None:
        """Read the host's ``load()`` and ``counts()`` at each scrape (:func:`watch_host`)."""
        watch_host(self._registry, counts, load)


def watch_host(registry: CollectorRegistry, counts: Callable[[], HostCounts],
               load: Callable[[], Load] | None = None) -> None:
    """Register a host's calls admitted and refused (``counts()``) and, for a host that
    runs calls, its load (``load()``: active calls, slots, headroom, utilization), read at
    each scrape, on the scraper's thread: both must be thread-safe.

    A front door (no call of its own, no ``load``) reports the offers its workers
    answered as admitted.
    """
    registry.register(_HostCollector(counts, load))


class _CallObserver:
    """One call's events into the process's metrics."""

    __slots__ = ("_metrics", "_queued", "_turn_end")

    def __init__(self, metrics: CallMetrics) -> None:
        self._metrics = metrics
        self._queued: dict[str, float] = {}  # delivery id -> queued at (announcements)
        self._turn_end: float | None = None  # the latest end of turn (clock)

    def observe(self, event: SessionEvent) -> None:
        m = self._metrics
        if isinstance(event, TurnMetrics):
            m.turns.inc()
            if (v2v := event.voice_to_voice_ms) is not None:
                m.voice_to_voice.observe(max(0.0, v2v / 1000.0))
            if event.first_text is not None:
                m.first_text.observe(max(0.0, event.first_text - event.transcript_final))
                if event.first_audio is not None:
                    m.first_audio.observe(max(0.0, event.first_audio - event.first_text))
            if event.fenced_chunks:
                m.fenced_chunks.inc(event.fenced_chunks)
        elif isinstance(event, SpeechEnded):
            self._turn_end = event.at
            m.end_of_turn.observe(max(0.0, event.at - event.end_at))
        elif isinstance(event, TurnCommitted):
            if self._turn_end is not None:
                m.stt.observe(max(0.0, event.at - self._turn_end))
            if event.input_revision > 1:
                m.continued.inc()
        elif isinstance(event, BargeIn):
            m.barge_ins.inc()
        elif isinstance(event, ReplyInterrupted):
            if event.stop_latency_ms is not None:
                m.barge_in_stop.observe(max(0.0, event.stop_latency_ms / 1000.0))
        elif isinstance(event, BargeInResumed):
            m.resumed.labels(event.reason if event.reason in _RESUME_REASONS
                             else "other").inc()
        elif isinstance(event, AnnouncementQueued):
            m.announcements.inc()
            self._queued[event.delivery_id] = event.at
        elif isinstance(event, ReplyStarted):
            queued = self._queued.pop(event.delivery_id, None)
            if queued is not None:
                m.announcement_wait.observe(max(0.0, event.at - queued))
        elif isinstance(event, DeliverySettled):
            self._queued.pop(event.delivery_id, None)  # settled unsaid
            m.announcements_settled.labels(event.status).inc()
        elif isinstance(event, TurnRevoked):
            m.revoked.inc()
        elif isinstance(event, SpeculativeReplyDiscarded):
            m.speculative_discarded.inc()
        elif isinstance(event, TranscriptDiscarded):
            m.transcripts_discarded.inc()


class _HostCollector:
    """The host's load and counts, as they are when Prometheus scrapes."""

    def __init__(self, counts: Callable[[], HostCounts],
                 load: Callable[[], Load] | None) -> None:
        self._load = load
        self._counts = counts

    def describe(self) -> list[Metric]:
        return []  # (the names are only known by collecting: no check at registration)

    def collect(self) -> Iterator[Metric]:
        # the optional [metrics] extra
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        counts = self._counts()
        yield CounterMetricFamily("voxflow_calls_admitted", "calls started (a front door: "
                                  "offers a call worker answered)", value=counts.admitted)
        refused = CounterMetricFamily("voxflow_calls_refused", "offers refused, by reason",
                                      labels=("reason",))
        for reason, count in sorted(counts.refused.items()):
            refused.add_metric((reason,), count)
        yield refused
        if self._load is None:
            return
        load = self._load()

        def gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, value=float("nan") if value is None else value)

        yield gauge("voxflow_calls_active", "calls admitted and not yet ended",
                    load.active_calls)
        yield gauge("voxflow_call_slots", "calls this process takes now: as many as their "
                    "measured CPU cost leaves room for, at most --max-calls", load.slots)
        yield gauge("voxflow_call_cost_ratio", "share of a core one call costs (measured "
                    "over the recent calls, the highest of the last few minutes; a prior "
                    "until then)", load.call_cost)
        yield gauge("voxflow_call_cost_recent_ratio", "share of a core one call costs now "
                    "(the EWMA of the recent windows; below voxflow_call_cost_ratio while "
                    "the calls are cheaper than within the last few minutes: a lull)",
                    load.recent_call_cost)
        yield gauge("voxflow_admission_loop_lag_seconds", "how late the event loop woke "
                    "(admission's probe, recent 90th percentile; NaN before it is probed)",
                    None if load.loop_lag_ms is None else load.loop_lag_ms / 1000.0)
        yield gauge("voxflow_call_headroom", "calls it would admit now (0 while refusing)",
                    load.headroom)
        yield gauge("voxflow_admission_accepting", "1 while the next call is admitted",
                    1.0 if load.accepting else 0.0)
        yield gauge("voxflow_model_utilization_ratio", "share of the model workers' time "
                    "spent on model work (about the last 10 s; NaN before it is measured)",
                    load.utilization)
        yield gauge("voxflow_admission_voice_to_voice_p95_seconds", "the recent voice-to-"
                    "voice p95 admission holds to its target (NaN until enough turns)",
                    None if load.p95_ms is None else load.p95_ms / 1000.0)
        yield gauge("voxflow_admission_p95_target_seconds", "the voice-to-voice p95 target",
                    load.p95_target_ms / 1000.0)
        yield gauge("voxflow_model_urgent_wait_p95_seconds", "how long urgent model work "
                    "waited for a model worker (recent p95; NaN before any)",
                    None if load.urgent_wait_p95_ms is None
                    else load.urgent_wait_p95_ms / 1000.0)
        yield gauge("voxflow_call_cost_prior_ratio", "share of a core a call is taken to "
                    "cost before one is measured (from the models' real-time factors at "
                    "warm-up)", load.prior_call_cost)
        rtf = GaugeMetricFamily("voxflow_model_real_time_factor", "seconds a model's recent "
                                "jobs took per second of their audio, by model (stt, tts, "
                                "vad; absent before its first job)", labels=("model",))
        for model, value in sorted(load.model_rtf.items()):
            rtf.add_metric((model,), value)
        yield rtf

    def __repr__(self) -> str:
        return f"_HostCollector({self._counts!r})"
