"""voxflow_adapters.hosting.metrics: a real call's session events (real models, virtual
clock) into the Prometheus metrics, checked against the call's own latency summary."""

from __future__ import annotations

import asyncio
import bisect
import math
import re
from typing import Any, Literal

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
from voxflow_adapters.hosting.metrics import LATENCY_BUCKETS, CallMetrics, HostCounts
from voxflow_adapters.hosting.ownership import SessionOwnership
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.rates import ModelRates
from voxflow_voice.events import (
    BargeIn,
    BargeInResumed,
    ReplyInterrupted,
    SessionEvent,
    SpeechEnded,
    TurnCommitted,
    TurnMetrics,
)

from voxflow import persist
from voxflow.errors import FencedWriteError, PersistenceUnavailableError
from voxflow.examples.assistant import Assistant
from voxflow.testing import Acknowledger
from voxflow.turns import TurnState


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``registry`` as Prometheus would scrape it, by name and labels."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def bucket_counts(values: list[float]) -> dict[str, float]:
    """The cumulative ``le`` counts a histogram with LATENCY_BUCKETS gives ``values`` (s)."""
    edges = [*LATENCY_BUCKETS, float("inf")]
    counts = {f"{e}" if e != float("inf") else "+Inf": 0.0 for e in edges}
    for value in values:
        for edge in edges[bisect.bisect_left(edges, value):]:
            counts[f"{edge}" if edge != float("inf") else "+Inf"] += 1
    return counts


@pytest.mark.models
async def test_a_calls_events_become_the_metrics_its_summary_agrees_with(
    engines: VoiceEngines, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="voxflow_voice.session")
    registry = CollectorRegistry()
    metrics = CallMetrics(registry)
    observed: list[SessionEvent] = []
    observe = metrics.call()

    def on_event(event: SessionEvent) -> None:
        observed.append(event)
        observe(event)

    script = (CallScript().user_says(0.3, "Where is my order?")
              .user_says(10.0, "Tell me a story.").user_says(14.0, "Stop, thanks.")
              .until(20.0))
    call = await run_call(Assistant(), script, engines, on_event=on_event)
    assert observed == call.events
    got = samples(registry)
    turns = [e for e in call.events if isinstance(e, TurnMetrics)]
    summary = call.session.summary()
    assert got[("voxflow_turns_total", ())] == summary.turns == len(turns) >= 3
    # voice to voice: the very values of the summary, bucket by bucket
    v2v = [m.voice_to_voice_ms / 1000.0 for m in turns if m.voice_to_voice_ms is not None]
    assert len(v2v) == summary.voice_to_voice.count
    for le, count in bucket_counts(v2v).items():
        assert got[("voxflow_voice_to_voice_seconds_bucket", (("le", le),))] == count, le
    assert got[("voxflow_voice_to_voice_seconds_sum", ())] == pytest.approx(sum(v2v))
    assert (got[("voxflow_llm_first_text_seconds_count", ())]
            == summary.transcript_to_first_text.count)
    assert (got[("voxflow_tts_first_audio_seconds_count", ())]
            == summary.first_text_to_first_audio.count)
    # end of turn then STT: together the summary's "speech end → transcript final"
    ends = [e for e in call.events if isinstance(e, SpeechEnded)]
    assert got[("voxflow_end_of_turn_wait_seconds_count", ())] == len(ends)
    committed = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert got[("voxflow_stt_wait_seconds_count", ())] == len(committed)
    # the barge-in: counted, and its stop in the histogram
    cuts = [e for e in call.events if isinstance(e, ReplyInterrupted)]
    assert got[("voxflow_barge_ins_total", ())] == sum(
        isinstance(e, BargeIn) for e in call.events) >= 1
    assert got[("voxflow_barge_in_stop_seconds_count", ())] == summary.barge_in_stop.count
    assert summary.barge_in_stop.count == len([c for c in cuts if c.stop_latency_ms]) >= 1
    resumed = [e for e in call.events if isinstance(e, BargeInResumed)]
    assert sum(v for (name, _), v in got.items()
               if name == "voxflow_barge_in_resumed_total") == len(resumed)
    # the order lookup: queued, waited for the floor, announced whole
    assert got[("voxflow_announcements_queued_total", ())] == 1
    assert got[("voxflow_announcement_wait_seconds_count", ())] == 1
    assert got[("voxflow_announcements_settled_total", (("status", "completed"),))] == 1
    # and logged: queued (naming its job) and how it settled, with its delivery id
    [queued] = [e for e in call.events if e.kind == "announcement_queued"]
    said = [(r.getMessage(), getattr(r, "delivery_id", None), getattr(r, "job_ids", None))
            for r in caplog.records if r.getMessage().startswith("announcement")]
    assert said == [("announcement queued", queued.delivery_id, queued.job_ids[0]),
                    ("announcement completed", queued.delivery_id, None)]
    assert got[("voxflow_fenced_chunks_total", ())] == summary.fenced_chunks
    assert got[("voxflow_stale_samples_total", ())] == 0 == call.stale_samples()
    # no label carries an identity of the call
    ids = {str(call.session.session_id), *(m.turn_id for m in turns)}
    assert not any(value in ids for _, labels in got for _, value in labels)


@pytest.mark.unit
def test_the_hosts_load_and_counts_are_read_at_each_scrape() -> None:
    registry = CollectorRegistry()
    rates = ModelRates()
    admission = AdmissionController(AdmissionSettings(max_calls=3, min_turns=1), rates=rates)
    refused: dict[str, int] = {}
    admitted: list[Any] = []
    CallMetrics(registry).watch(admission.load,
                                lambda: HostCounts(admitted=len(admitted), refused=refused))
    first = samples(registry)
    assert first[("voxflow_calls_active", ())] == 0
    assert first[("voxflow_call_slots", ())] == 3
    assert first[("voxflow_call_headroom", ())] == 3
    assert first[("voxflow_call_cost_ratio", ())] == 0.28  # the prior: nothing measured
    assert first[("voxflow_call_cost_prior_ratio", ())] == 0.28  # (never warmed up)
    assert not any(name == "voxflow_model_real_time_factor" for name, _ in first)
    rates.record("tts", 0.1, 1.0)
    rates.record("stt", 0.3, 2.0)
    assert math.isnan(first[("voxflow_admission_loop_lag_seconds", ())])  # not probed
    assert first[("voxflow_calls_admitted_total", ())] == 0
    admitted += [admission.admit("call-1"), admission.admit("call-2")]
    refused["busy"] = 2
    refused["token"] = 1
    admission.record(1500.0)  # over the 1 s target: refusing
    then = samples(registry)
    assert then[("voxflow_calls_active", ())] == 2
    assert then[("voxflow_call_headroom", ())] == 0
    assert then[("voxflow_admission_accepting", ())] == 0
    assert then[("voxflow_admission_voice_to_voice_p95_seconds", ())] == 1.5
    assert then[("voxflow_calls_admitted_total", ())] == 2
    assert then[("voxflow_calls_refused_total", (("reason", "busy"),))] == 2
    assert then[("voxflow_calls_refused_total", (("reason", "token"),))] == 1
    assert then[("voxflow_model_real_time_factor", (("model", "stt"),))] == 0.15
    assert then[("voxflow_model_real_time_factor", (("model", "tts"),))] == 0.1


@pytest.mark.unit
def test_store_refusals_and_failures_have_bounded_labels() -> None:
    registry = CollectorRegistry()
    metrics = CallMetrics(registry)
    for reason in ("taken over", "expired", "a reason nobody wrote"):
        metrics.write_refused(reason)
    metrics.store_failed("save_state")
    metrics.store_failed("drop table; --")
    metrics.lease_acquired(taken_over=True)
    metrics.lease_acquired(taken_over=False)
    got = samples(registry)
    assert got[("voxflow_session_writes_refused_total", (("reason", "taken over"),))] == 1
    assert got[("voxflow_session_writes_refused_total", (("reason", "other"),))] == 1
    assert got[("voxflow_persistence_errors_total", (("operation", "save_state"),))] == 1
    assert got[("voxflow_persistence_errors_total", (("operation", "other"),))] == 1
    assert got[("voxflow_lease_takeovers_total", ())] == 1


@pytest.mark.unit
async def test_a_takeover_and_the_zombies_refused_writes_are_counted(make_store: Any) -> None:
    store = make_store("metrics")
    registry = CollectorRegistry()
    metrics = CallMetrics(registry)
    zombie = await SessionOwnership.acquire(store, "call", "worker-a", ttl=30, watch=metrics)

    async def dead(holder: str) -> bool:  # worker-a's heartbeat stopped
        return holder == "worker-a"

    heir = await SessionOwnership.acquire(store, "call", "worker-b", ttl=30, watch=metrics,
                                          owner_dead=dead)
    assert heir.lease.taken_over and not zombie.lease.taken_over
    # persist() marks the class it is given: a subclass, so the kit's Acknowledger stays
    # unpersisted for every later test (it saved 'call' to the default store for them)
    saved = persist(type("SavedAcknowledger", (Acknowledger,), {}))
    flow = saved(persistence=zombie.persistence, state=TurnState(id="call"))
    for _ in range(2):
        with pytest.raises(FencedWriteError):
            await flow.asave_state("late")
    got = samples(registry)
    assert got[("voxflow_lease_takeovers_total", ())] == 1
    assert got[("voxflow_session_writes_refused_total", (("reason", "taken over"),))] == 2
    await heir.release()  # a released session taken again is no takeover
    third = await SessionOwnership.acquire(store, "call", "worker-c", ttl=30, watch=metrics)
    assert not third.lease.taken_over
    assert samples(registry)[("voxflow_lease_takeovers_total", ())] == 1
    await third.release()
    await zombie.release()


def _disk_full() -> PersistenceUnavailableError:
    return PersistenceUnavailableError("database or disk is full", path="test.db",
                                       fix="free space on its disk")


class _DiskFills:
    """The real store, on a disk that fills as its expired lease is reclaimed: the
    renewal fails (``at="renewal"``), or it is stored and every fenced write after it
    fails (``at="write"``)."""

    def __init__(self, store: Any, at: Literal["renewal", "write"]) -> None:
        self._store = store
        self._at = at
        self._full = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def renew_lease(self, *args: Any, **kwargs: Any) -> Any:
        if self._at == "renewal":
            raise _disk_full()
        lease = self._store.renew_lease(*args, **kwargs)
        self._full = True
        return lease

    def fenced(self, lease: Any) -> Any:
        fenced, disk = self._store.fenced(lease), self

        class Fenced:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(fenced, name)
                if not callable(attr):
                    return attr

                def call(*args: Any, **kwargs: Any) -> Any:
                    if disk._full:
                        raise _disk_full()
                    return attr(*args, **kwargs)

                return call

        return Fenced()


async def _save_after_the_lease_expired(
    make_store: Any, at: Literal["renewal", "write"],
) -> tuple[dict[str, float], SessionOwnership]:
    """A save through an ownership whose lease expired (nobody took the session) on a
    disk that fills ``at`` its reclaim; the store calls counted failed, by operation."""
    store = make_store("metrics")
    registry = CollectorRegistry()
    lease = store.acquire_lease("call", "worker-a", ttl=0.05)
    await asyncio.sleep(0.2)  # the lease expires, nobody takes the session
    ownership = SessionOwnership(_DiskFills(store, at), lease, ttl=30,
                                 watch=CallMetrics(registry))
    saved = persist(type("SavedAcknowledger", (Acknowledger,), {}))
    flow = saved(persistence=ownership.persistence, state=TurnState(id="call"))
    with pytest.raises(PersistenceUnavailableError):
        await flow.asave_state("after the outage")
    failed = {dict(labels)["operation"]: value for (name, labels), value
              in samples(registry).items() if name == "voxflow_persistence_errors_total"}
    return failed, ownership


@pytest.mark.unit
async def test_a_reclaim_that_fails_is_counted_as_a_store_failure(make_store: Any) -> None:
    """A save refused because the lease expired reclaims the lease; a reclaim that fails
    otherwise than by the fence (the disk full) is a failed store call like any other:
    counted under its operation, renew_lease, and the save says why."""
    failed, ownership = await _save_after_the_lease_expired(make_store, "renewal")
    assert failed == {"renew_lease": 1}
    assert ownership.lost is None  # unavailable, not refused: the call defers its saves


@pytest.mark.unit
async def test_a_write_made_again_after_a_reclaim_that_fails_is_counted(
    make_store: Any,
) -> None:
    """The write made again once the lease is reclaimed fails too (the disk full): a
    failed store call, counted under its operation."""
    failed, _ = await _save_after_the_lease_expired(make_store, "write")
    assert sum(failed.values()) == 1 and "renew_lease" not in failed, failed


@pytest.mark.unit
async def test_the_status_page_reads_the_calls_figures() -> None:
    import html
    import urllib.request

    from voxflow.ids import DeliveryId, SessionId, TurnId
    from voxflow.monitoring import Monitor

    async with Monitor("serve") as monitor:
        metrics = CallMetrics(monitor.registry)
        admission = AdmissionController(AdmissionSettings(max_calls=4))
        held = admission.admit("call-1")
        metrics.watch(admission.load, lambda: HostCounts(admitted=1, refused={"busy": 2}))
        observe = metrics.call()
        for n, v2v in enumerate((0.42, 0.55, 0.61), 1):
            observe(TurnMetrics(session_id=SessionId("s"), at=9.0, turn_id=TurnId(f"t{n}"),
                                delivery_id=DeliveryId(f"d{n}"), speech_end=1.0,
                                transcript_final=1.1, first_text=1.2, first_audio=1.0 + v2v,
                                playback_end=None, interrupted=False, fenced_chunks=0))
        monitor.set_ready()
        page = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"{monitor.url}/status", timeout=10).read().decode())
        held.release()
    rows = dict(re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", html.unescape(page)))
    assert rows["ready"] == "yes"
    assert rows["calls now"] == "1 of 4 slots, headroom 3"
    assert rows["calls admitted"] == "1" and rows["calls refused"] == "2 (busy 2)"
    assert rows["turns answered"] == "3" and rows["stale samples (must stay 0)"] == "0"
    # 3 turns in (0.4, 0.5], (0.5, 0.6], (0.6, 0.7]: the median half way in (0.5, 0.6]
    assert rows["voice to voice (since start)"] == "median 550 ms, p95 685 ms (n=3)"


@pytest.mark.unit
def test_a_lull_shows_as_the_recent_cost_below_the_slots_cost() -> None:
    """voxflow_call_cost_ratio is the cost the slots are from (the horizon's highest);
    voxflow_call_cost_recent_ratio the EWMA now, which falls while the calls sit silent
    (a lull shows in Prometheus as the two apart)."""
    from voxflow_adapters.hosting.call_cost import CallCostMeter, CostSettings

    clock = {"now": 0.0, "cpu": 0.0}
    meter = CallCostMeter(CostSettings(prior_call_cost=0.2), cores=2,
                          cpu_time=lambda: clock["cpu"], machine_time=lambda: None,
                          clock=lambda: clock["now"])
    admission = AdmissionController(AdmissionSettings(), clock=lambda: clock["now"],
                                    meter=meter)
    registry = CollectorRegistry()
    CallMetrics(registry).watch(admission.load, lambda: HostCounts(admitted=0, refused={}))
    first = samples(registry)
    assert first[("voxflow_call_cost_recent_ratio", ())] == 0.2  # the prior
    calls = [admission.admit(f"call-{i}") for i in range(6)]
    for rate in [6 * 0.2] * 30 + [6 * 0.1] * 30:  # a busy minute, then a minute on hold
        clock["now"] += 2.0
        clock["cpu"] += 2.0 * rate
        meter.tick()
    lull = samples(registry)
    assert lull[("voxflow_call_cost_ratio", ())] == pytest.approx(0.2)
    assert lull[("voxflow_call_cost_recent_ratio", ())] == pytest.approx(0.1 + 0.1 * 0.9**30)
    for call in calls:
        call.release()
