"""``faults.py``'s LLM provider faults (``--only llm``): a call whose provider, on loopback
(``_llm_faults.py``), hangs, resets the connection or answers events that are not JSON
for one question; on a WebRTC call (:func:`llm_fault`) or one through the simulated
transport (:func:`simulated_llm_fault`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _faults_common import Caller, OwnPostgres, serving

__all__ = ["LlmFault", "llm_fault", "simulated_llm_fault"]


@dataclass
class LlmFault:
    """A call through one LLM provider fault (see the module)."""

    fault: str
    lost: int = 0  # answered questions missing from the stored history
    settled_s: float | None = None  # the faulted question → its turn settled (failed)
    heard_during: int = 0  # replies the caller heard for the faulted question
    turn_status: str = "-"
    cause: str = "-"  # the error's first words
    answers_after: bool = False
    ended: str | None = None


class _Causes(logging.Handler):
    """What voxflow logged at WARNING and above: an exception's message, else the line
    (a provider's reset or garbage is said in a warning, without a traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(str(record.exc_info[1]))
        else:
            self.errors.append(record.getMessage())


@contextlib.asynccontextmanager
async def _chat(pg: OwnPostgres | None) -> AsyncIterator[tuple[Any, Any, Any, Any, _Causes]]:
    """What an LLM fault's call needs, on either transport: the chat flow whose LLM is
    the faulty provider (2 s timeout, 1 retry), its store (SQLite, or ``pg``), the
    provider, the voice settings (no speculative answer: each question's request follows
    its commit) and the session's logged errors."""
    from _llm_faults import faulty_provider
    from voxflow_adapters.hosting.calls import webrtc_voice_settings

    from voxflow import ConversationConfig, Flow
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.flow.postgres import PostgresFlowPersistence
    from voxflow.llm import LLM, preload
    from voxflow.wiring import AssistantState

    # litellm loaded before the call, as every entry point loads it at start-up (this
    # builds its server itself): the first call's turn does not wait for it
    await preload()
    causes = _Causes()  # the failed reply's error, as the session logs it
    session_log = logging.getLogger("voxflow_voice")
    session_log.addHandler(causes)
    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp, \
            faulty_provider() as provider, contextlib.ExitStack() as cleanup:
        cleanup.callback(session_log.removeHandler, causes)
        @ConversationConfig(llm=LLM(provider.llm_config(timeout=2.0, retries=1)))
        class Chat(Flow[AssistantState]):
            pass

        store = (SQLiteFlowPersistence(Path(tmp) / "calls.db") if pg is None
                 else PostgresFlowPersistence(pg.url))
        cleanup.callback(store.close)
        voice = webrtc_voice_settings().model_copy(update={"speculative_replies": False})
        yield Chat, store, provider, voice, causes


async def _settled(result: LlmFault, state: Any, since: float) -> None:
    """Wait (up to 60 s) for the faulted question, the call's second, to settle: when
    and how, in ``result``."""
    while time.monotonic() - since < 60:
        turns = list(state.turns.values())
        if len(turns) >= 2 and turns[-1].status in ("failed", "completed"):
            result.settled_s = time.monotonic() - since
            result.turn_status = turns[-1].status
            return
        await asyncio.sleep(0.05)


def _answers_lost(store: Any, session_id: str) -> int:
    """Of the two questions answered (before the fault and after it), those whose answer
    is not stored."""
    from _llm_faults import ANSWER

    stored = store.load_state(session_id) or {}
    said = [m for m in stored.get("messages", []) if m["role"] == "assistant"
            and str(m["content"]).strip() == ANSWER]
    return 2 - len(said)


def _cause(result: LlmFault, causes: _Causes) -> None:
    if causes.errors:  # (logged as the reply ends, after the turn settled)
        result.cause = " ".join(causes.errors[-1].split()[:12])


async def llm_fault(engines: Any, fault: str, pg: OwnPostgres | None = None) -> LlmFault:
    """The call through one LLM provider ``fault``, its sessions on SQLite, or on ``pg``."""
    from voxflow_adapters.hosting.calls import flow_call_factory

    result = LlmFault(fault)
    async with _chat(pg) as (chat, store, provider, voice, causes):
        factory = flow_call_factory(chat, settings=voice)
        async with serving(engines, store, factory) as (server, calls):
            caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            caller.ask()
            await caller.answered()
            heard = caller.heard()
            provider.mode = fault
            asked = time.monotonic()
            caller.ask()  # (its turn fails: its latency message has no first audio)
            await _settled(result, calls[0].flow.state, asked)
            result.heard_during = caller.heard() - heard
            provider.mode = "ok"
            await caller.answered()  # its latency message: the turn is over
            _cause(result, causes)
            caller.ask()
            result.answers_after = await caller.answered() is not None
            if os.environ.get("FAULTS_DEBUG"):
                print([(m.get("type"), m.get("text", m.get("reason", "")))
                       for m in caller.caller.messages
                       if m.get("type") not in ("receipt", "level")], flush=True)
            result.ended = caller.bye()
            session_id = str(caller.caller.session_id)
            await caller.hang_up()
            async with asyncio.timeout(30):
                await server.wait_idle()
        result.lost = await asyncio.to_thread(_answers_lost, store, session_id)
    return result


async def simulated_llm_fault(engines: Any, fault: str, pg: OwnPostgres | None = None
                              ) -> LlmFault:
    """The same call through the simulated transport (``run_call``, real time): three
    questions 12 s apart (past the faulted one's timeouts and retry), the provider
    faulted from the second's beginning until its turn settled."""
    from _faults_simulated import simulated_call

    result = LlmFault(fault)
    async with _chat(pg) as (chat, store, provider, voice, causes):
        flow = chat(persistence=store)

        async def faulted() -> None:
            provider.mode = fault
            try:
                await _settled(result, flow.state, time.monotonic())
            finally:
                provider.mode = "ok"

        _, replies = await simulated_call(
            engines, flow, store, 3, lambda n: faulted() if n == 2 else None, (2,), gap=12.0,
            settings=voice)
        result.heard_during = replies.count(2)
        result.answers_after = 3 in replies
        _cause(result, causes)
        result.lost = await asyncio.to_thread(_answers_lost, store, str(flow.state.id))
    return result
