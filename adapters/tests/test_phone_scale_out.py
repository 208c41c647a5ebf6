"""Phone calls scaled out across processes: ``voxflow phone --front-door`` and two
``voxflow phone --worker`` processes on one real PostgreSQL schema (dispatch and
sessions), the example assistant on the real models, a simulated Twilio carrier that
signs its webhooks and follows the ``<Connect>`` action URL as Twilio does. A worker
killed (kill -9) in the middle of a reply: the carrier's stream ends, the front door
reconnects the call to the live worker, which restores the session of that call (the
reply cut at what the carrier's marks proved heard) and the call goes on; the caller's
hang-up is never reconnected. Skips with its reason when no PostgreSQL answers."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from voxflow_adapters.hosting.resume import CALL_ENDED_EVENT, DROPPED_MARK
from voxflow_adapters.phone.dispatch import phone_session_id
from voxflow_adapters.testkit import flows
from voxflow_adapters.testkit.flows import free_port
from voxflow_adapters.testkit.phone_carrier import SimulatedCarrier
from voxflow_voice.audio import AudioChunk, write_wav
from voxflow_voice.engines import VoiceEngines

from voxflow.flow.postgres import PostgresFlowPersistence

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
VOXFLOW = str(Path(sys.executable).with_name("voxflow"))
AUTH = "phone-scale-out-auth-token"
STALE = 2.0


def phone_process(args: list[str], ready: str, env: dict[str, str], log: Path
                  ) -> flows.ServeCommand:
    return flows.ServeCommand([VOXFLOW, "phone", "--host", "127.0.0.1", *args], cwd=ROOT,
                              env=env, log=log, ready=ready, within=240)


def speech_wav(engines: VoiceEngines, text: str, path: Path) -> Path:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    write_wav(path, AudioChunk.from_float(samples, engines.tts.sample_rate))
    return path


async def until(predicate: Callable[[], object], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {within} s")
        await asyncio.sleep(0.05)


def played_seconds(carrier: SimulatedCarrier, delivery: str) -> float:
    return carrier.played_audio(delivery).size / 8000


def logs(folder: Path) -> str:
    """The processes' last log lines, for a failure's message."""
    return "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace")
                                                       .splitlines()[-40:])
                     for log in sorted(folder.glob("*.log")))


@pytest.fixture
def sessions(pg_schema_url: str) -> Iterator[PostgresFlowPersistence]:
    store = PostgresFlowPersistence(pg_schema_url)
    yield store
    store.close()


def test_a_phone_call_goes_on_with_its_history_on_another_worker_after_a_kill_9(
    engines: VoiceEngines, pg_schema_url: str, sessions: PostgresFlowPersistence,
    tmp_path: Path,
) -> None:
    env = {**os.environ, "VOXFLOW_DATABASE_URL": pg_schema_url, "VOXFLOW_LOG_LEVEL": "INFO",
           "VOXFLOW_TWILIO_AUTH_TOKEN": AUTH}
    ports = {"a": free_port(), "b": free_port()}
    door_port = free_port()
    hours = speech_wav(engines, "What are your opening hours?", tmp_path / "hours.wav")
    story = speech_wav(engines, "Tell me a story.", tmp_path / "story.wav")
    with ExitStack() as stack:
        # (started at once: their model loading overlaps)
        *started, _ = stack.enter_context(flows.serve_processes(
            *(phone_process(["--worker", "--port", str(port), "--max-calls", "2",
                             "--stale-after", str(STALE)], "is ready", env,
                            tmp_path / f"{name}.log") for name, port in ports.items()),
            phone_process(["--front-door", "--port", str(door_port), "--stale-after",
                           str(STALE), "--offer-timeout", "15"], "front door is listening",
                          env, tmp_path / "door.log")))
        workers = dict(zip(ports, started, strict=True))

        def worker_of(carrier: SimulatedCarrier) -> str:
            port = urlsplit(carrier.stream_url).port
            return next(name for name, p in ports.items() if p == port)

        async def call() -> tuple[SimulatedCarrier, str, str]:
            carrier = SimulatedCarrier(f"http://127.0.0.1:{door_port}/voice",
                                       auth_token=AUTH)
            async with carrier:
                first = worker_of(carrier)
                carrier.say(hours)
                await until(lambda: carrier.deliveries() and played_seconds(
                    carrier, carrier.deliveries()[0]) > 1.0, 90, "answer to the hours")
                await asyncio.sleep(4.0)  # (the answer plays out: a short one)
                carrier.say(story)
                await until(lambda: len(carrier.deliveries()) >= 2 and played_seconds(
                    carrier, carrier.deliveries()[1]) > 2.0, 90, "two seconds of the story")
                session_id = phone_session_id(carrier.call_sid)
                told = carrier.deliveries()[1]

                def heard() -> bool:
                    state = sessions.load_state(session_id) or {}
                    return bool((state.get("replies", {}).get(told) or {}).get("heard_text"))

                await until(heard, 30, "words of the story saved as heard")
                workers[first].kill()  # kill -9 mid-story
                await until(lambda: carrier.reconnects, 60, "the reconnected stream")
                second = worker_of(carrier)
                assert second != first
                assert not carrier.hung_up_by_server
                carrier.say(hours)  # the call goes on, on the other worker
                await until(lambda: len(carrier.deliveries()) >= 3 and played_seconds(
                    carrier, carrier.deliveries()[2]) > 1.0, 90, "the answer after the kill")
            return carrier, session_id, told

        carrier, session_id, told = asyncio.run(call())
        assert carrier.after_hang_up is not None and "<Hangup/>" in carrier.after_hang_up
        gap = carrier.reconnects[0] - carrier.stream_ends[0]
        print(f"reconnected {gap:.2f} s after the stream ended")
        deadline = time.monotonic() + 30
        state = sessions.load_state(session_id)
        while not any(e["type"] == CALL_ENDED_EVENT for e in (state or {}).get("events", ())):
            assert time.monotonic() < deadline, "the hang-up was not saved\n" + logs(tmp_path)
            time.sleep(0.2)
            state = sessions.load_state(session_id)
    assert state is not None
    users = [m["content"] for m in state["messages"] if m["role"] == "user"]
    assert users == ["What are your opening hours?", "Tell me a story.",
                     "What are your opening hours?"]
    assert len(state["turns"]) == 3
    [cut] = [m for m in state["messages"] if m["metadata"].get("delivery_id") == told]
    assert cut["content"].endswith(DROPPED_MARK) and cut["metadata"]["dropped"]
    words, generated = cut["metadata"]["heard_text"].split(), cut["metadata"][
        "generated_text"].split()
    assert words and generated[: len(words)] == words and len(words) < len(generated)
    [ended] = [e for e in state["events"] if e["type"] == CALL_ENDED_EVENT]
    assert ended["payload"]["how"] == "hung_up"
    lease = sessions.lease_of(session_id)
    assert lease is not None and lease.epoch == 2  # taken over once, from the dead worker
