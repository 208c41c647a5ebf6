"""``GET /status`` of the metrics port: a process's metrics as a page a person reads.

The same registry Prometheus scrapes, read at once and put in words: what the process
is and whether it is ready, its calls now (active, slots, headroom), the calls admitted,
refused (by reason) and ended, the turns' latency since the process started (voice to
voice and its parts, medians and p95s estimated from the histograms as Prometheus's
``histogram_quantile`` does), barge-ins and stale samples, announcements, leases and the
store, the job queue, the event loop's lag, CPU and memory. A figure the process does
not export (a front door has no turns) is left out.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["quantile", "render_status"]

Samples = Mapping[tuple[str, tuple[tuple[str, str], ...]], float]

_LATENCIES = (
    ("voice to voice", "voxflow_voice_to_voice_seconds"),
    ("  end of turn wait", "voxflow_end_of_turn_wait_seconds"),
    ("  STT wait", "voxflow_stt_wait_seconds"),
    ("  LLM first text", "voxflow_llm_first_text_seconds"),
    ("  TTS first audio", "voxflow_tts_first_audio_seconds"),
    ("barge-in stop", "voxflow_barge_in_stop_seconds"),
    ("announcement wait", "voxflow_announcement_wait_seconds"),
    ("event loop lag", "voxflow_event_loop_lag_seconds"),
)
_COUNTS = (
    ("turns answered", "voxflow_turns_total"),
    ("barge-ins", "voxflow_barge_ins_total"),
    ("false pauses resumed", "voxflow_barge_in_resumed_total"),
    ("stale samples (must stay 0)", "voxflow_stale_samples_total"),
    ("announcements queued", "voxflow_announcements_queued_total"),
    ("lease takeovers", "voxflow_lease_takeovers_total"),
    ("session writes refused", "voxflow_session_writes_refused_total"),
    ("persistence errors", "voxflow_persistence_errors_total"),
)


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """``histogram_quantile(q, ...)`` of cumulative ``buckets`` (``le`` → count), as
    Prometheus estimates it (linear within the bucket); None without observations."""
    edges = sorted(buckets)
    if not edges or buckets[edges[-1]] <= 0:
        return None
    rank = q * buckets[edges[-1]]
    below, lower = 0.0, 0.0
    for edge in edges:
        if buckets[edge] >= rank:
            if edge == float("inf"):
                return lower
            return lower + (edge - lower) * (rank - below) / max(buckets[edge] - below, 1e-12)
        below, lower = buckets[edge], edge
    return lower


def render_status(metrics: Iterable[Any], *, ready: str | None, live: str | None) -> str:
    """The page (HTML) of ``metrics`` (a registry's ``collect()``); ``ready``/``live``:
    why the process is not (None: it is)."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for metric in metrics:
        for s in metric.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    info = next((dict(labels) for name, labels in samples if name == "voxflow_process_info"),
                {})
    rows: list[tuple[str, str]] = [
        ("process", f"{info.get('role', '?')} (voxflow {info.get('version', '?')})"),
        ("ready", "yes" if ready is None else f"no: {ready}"),
        ("live", "yes" if live is None else f"no: {live}"),
    ]
    one = _one(samples)
    if "voxflow_calls_active" in one:
        rows.append(("calls now", f"{one['voxflow_calls_active']:g} of "
                     f"{one.get('voxflow_call_slots', 0):g} slots, headroom "
                     f"{one.get('voxflow_call_headroom', 0):g}"
                     + ("" if one.get("voxflow_admission_accepting", 1) else
                        " (refusing: recent answers too slow, or full)")))
    if "voxflow_calls_admitted_total" in one:
        rows.append(("calls admitted", f"{one['voxflow_calls_admitted_total']:g}"))
        refused = _by(samples, "voxflow_calls_refused_total", "reason")
        rows.append(("calls refused", f"{sum(refused.values()):g}" + (
            " (" + ", ".join(f"{k} {v:g}" for k, v in sorted(refused.items())) + ")"
            if refused else "")))
    if "voxflow_calls_ended_total" in one:
        rows.append(("calls ended", f"{one['voxflow_calls_ended_total']:g}"))
    for label, name in _COUNTS:
        total = sum(v for (n, _), v in samples.items() if n == name)
        if any(n == name for n, _ in samples):
            rows.append((label, f"{total:g}"))
    for label, name in _LATENCIES:
        buckets = {float(dict(labels)["le"]): v for (n, labels), v in samples.items()
                   if n == f"{name}_bucket"}
        count = one.get(f"{name}_count", 0.0)
        if buckets:
            p50, p95 = quantile(0.5, buckets), quantile(0.95, buckets)
            rows.append((f"{label} (since start)", "no sample yet" if p50 is None or
                         p95 is None else f"median {p50 * 1000:.0f} ms, p95 "
                         f"{p95 * 1000:.0f} ms (n={count:g})"))
    jobs = _by(samples, "voxflow_jobs", "state")
    if jobs:
        ages = _by(samples, "voxflow_job_oldest_age_seconds", "state")
        rows.append(("jobs (the queue's)", ", ".join(f"{k} {v:g}" for k, v in
                                                    sorted(jobs.items()))
                     + f"; oldest queued {ages.get('queued', 0):.1f} s"))
    if "process_cpu_seconds_total" in one:
        rows.append(("CPU, memory", f"{one['process_cpu_seconds_total']:.1f} s, "
                     f"{one.get('process_resident_memory_bytes', 0) / 2**20:.0f} MiB"))
    body = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                     for k, v in rows)
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>voxflow status"
            "</title><style>body{font:14px system-ui;margin:2em}th{text-align:left;"
            "padding-right:2em;font-weight:normal;white-space:pre}td{font-variant:"
            "tabular-nums}</style></head><body><h1>voxflow status</h1><table>\n"
            f"{body}\n</table><p>The same figures for Prometheus: <a href=\"/metrics\">"
            "/metrics</a>.</p></body></html>\n")


def _one(samples: Samples) -> dict[str, float]:
    """The samples without labels, by name."""
    return {name: value for (name, labels), value in samples.items() if not labels}


def _by(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for (n, labels), value in samples.items()
            if n == name and label in dict(labels)}
