"""voxflow.monitoring: /metrics, /health and /ready of a long-running process, over real
HTTP from another thread (as Prometheus and a probe reach them)."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request

import pytest

from voxflow.monitoring import Monitor, MonitoringError, check_metrics_bind

pytestmark = pytest.mark.unit

TOKEN = "a-metrics-token-of-24-chars"


def get(url: str, token: str | None = None, accept: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of a GET (blocking: run it in a thread)."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if accept is not None:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


async def test_metrics_are_prometheus_text_with_the_loop_lag_and_the_process() -> None:
    async with Monitor("serve") as monitor:
        await asyncio.sleep(0.6)  # two looks at the loop's lag
        status, kind, body = await asyncio.to_thread(get, f"{monitor.url}/metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    assert 'voxflow_process_info{role="serve",version="' in body
    count = next(line for line in body.splitlines()
                 if line.startswith("voxflow_event_loop_lag_seconds_count "))
    assert float(count.split()[1]) >= 2
    assert "process_cpu_seconds_total" in body


async def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    async with Monitor("serve") as monitor:
        status, kind, body = await asyncio.to_thread(
            get, f"{monitor.url}/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and kind.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")


async def test_ready_only_once_set_and_while_every_check_passes() -> None:
    failing: list[str] = []
    async with Monitor("call-worker") as monitor:
        monitor.add_readiness(lambda: failing[0] if failing else None)
        url = f"{monitor.url}/ready"
        assert await asyncio.to_thread(get, url) == (
            503, "application/json", '{"status": "unavailable", "reason": "starting"}\n')
        monitor.set_ready()
        assert (await asyncio.to_thread(get, url))[0] == 200
        failing.append("its heartbeat cannot be written")
        status, _, body = await asyncio.to_thread(get, url)
        assert status == 503 and "heartbeat cannot be written" in body
        failing.clear()
        monitor.set_unready("draining")
        status, _, body = await asyncio.to_thread(get, url)
        assert status == 503 and '"draining"' in body


async def test_a_broken_readiness_check_answers_503_naming_no_traceback() -> None:
    async with Monitor("serve") as monitor:
        monitor.set_ready()
        monitor.add_readiness(lambda: str(1 / 0))
        status, _, body = await asyncio.to_thread(get, f"{monitor.url}/ready")
    assert status == 503 and "ZeroDivisionError" in body and "Traceback" not in body


async def test_health_fails_while_the_event_loop_is_blocked() -> None:
    async with Monitor("jobs-worker", stall_seconds=0.5, lag_interval=0.1) as monitor:
        url = f"{monitor.url}/health"
        assert await asyncio.to_thread(get, url) == (
            200, "application/json", '{"status": "ok"}\n')
        answers: list[tuple[int, str, str]] = []

        def probe() -> None:
            time.sleep(0.8)  # while the loop is blocked below
            answers.append(get(url))

        prober = asyncio.get_running_loop().run_in_executor(None, probe)
        # a job blocking the event loop (the probe answers meanwhile)
        time.sleep(1.5)  # noqa: ASYNC251  (the block is the point)
        await prober
        assert answers[0][0] == 503
        assert "the event loop has not run for" in answers[0][2]
        await asyncio.sleep(0.3)  # the loop turns again: live again
        assert (await asyncio.to_thread(get, url))[0] == 200
        lag = await asyncio.to_thread(get, f"{monitor.url}/metrics")
    # the block shows in the lag histogram: one wake-up came over a second late
    over = next(line for line in lag[2].splitlines()
                if line.startswith('voxflow_event_loop_lag_seconds_bucket{le="1.0"}'))
    total = next(line for line in lag[2].splitlines()
                 if line.startswith("voxflow_event_loop_lag_seconds_count "))
    assert float(total.split()[1]) - float(over.split()[1]) >= 1


async def test_the_token_guards_metrics_but_not_the_probes() -> None:
    async with Monitor("front-door", token=TOKEN) as monitor:
        monitor.set_ready()
        refused = await asyncio.to_thread(get, f"{monitor.url}/metrics")
        wrong = await asyncio.to_thread(get, f"{monitor.url}/metrics", token=TOKEN + "x")
        given = await asyncio.to_thread(get, f"{monitor.url}/metrics", token=TOKEN)
        probes = [await asyncio.to_thread(get, f"{monitor.url}{p}") for p in ("/health",
                                                                               "/ready")]
    assert refused[0] == 401 and "Authorization: Bearer" in refused[2]
    assert TOKEN not in refused[2]
    assert wrong[0] == 401
    assert given[0] == 200 and "voxflow_process_info" in given[2]
    assert [p[0] for p in probes] == [200, 200]


async def test_other_paths_are_404() -> None:
    async with Monitor("serve") as monitor:
        for path in ("/", "/statusx", "/metrics/x", "/offer"):
            status, _, body = await asyncio.to_thread(get, f"{monitor.url}{path}")
            assert status == 404 and "/metrics" in body


def test_beyond_loopback_needs_the_token() -> None:
    with pytest.raises(MonitoringError, match="VOXFLOW_METRICS_TOKEN"):
        check_metrics_bind("0.0.0.0", None)
    with pytest.raises(MonitoringError, match="VOXFLOW_METRICS_TOKEN"):
        Monitor("serve", host="192.0.2.7")
    check_metrics_bind("0.0.0.0", TOKEN)
    check_metrics_bind("127.0.0.1", None)
    check_metrics_bind("::1", None)
    check_metrics_bind("localhost", None)


async def test_a_taken_port_is_one_error_naming_the_option() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monitor = Monitor("serve", port=taken.getsockname()[1])
        with pytest.raises(MonitoringError, match="choose another --metrics-port"):
            await monitor.__aenter__()
        await monitor.aclose()


async def test_closing_stops_answering() -> None:
    monitor = Monitor("serve")
    async with monitor:
        url = f"{monitor.url}/health"
        assert (await asyncio.to_thread(get, url))[0] == 200
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(get, url)
    await monitor.aclose()  # idempotent


async def test_status_is_a_page_of_the_same_figures_behind_the_same_token() -> None:
    async with Monitor("front-door", token=TOKEN) as monitor:
        await asyncio.sleep(0.3)
        refused = await asyncio.to_thread(get, f"{monitor.url}/status")
        status, kind, page = await asyncio.to_thread(get, f"{monitor.url}/status", TOKEN)
    assert refused[0] == 401
    assert status == 200 and kind == "text/html; charset=utf-8"
    assert "<th>process</th><td>front-door (voxflow " in page
    assert "<th>ready</th><td>no: starting</td>" in page
    assert "<th>event loop lag (since start)</th><td>median " in page


def test_quantile_is_prometheus_histogram_quantile() -> None:
    from voxflow.status_page import quantile

    buckets = {0.5: 0.0, 0.6: 1.0, 0.7: 3.0, 1.0: 4.0, float("inf"): 4.0}
    assert quantile(0.5, buckets) == pytest.approx(0.65)  # rank 2: half way in (0.6, 0.7]
    assert quantile(1.0, buckets) == pytest.approx(1.0)
    assert quantile(0.5, {0.5: 0.0, float("inf"): 0.0}) is None
    assert quantile(0.5, {0.5: 0.0, float("inf"): 2.0}) == 0.5  # all past the last edge
