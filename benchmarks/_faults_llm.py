"""``faults.py``'s LLM provider faults (``--only llm``): a call whose provider, on loopback
(``_llm_faults.py``), hangs, resets the connection or answers events that are not JSON
for one question.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _faults_common import Caller, OwnPostgres, serving

__all__ = ["LlmFault", "llm_fault"]


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


async def llm_fault(engines: Any, fault: str, pg: OwnPostgres | None = None) -> LlmFault:
    """The call through one LLM provider ``fault``, its sessions on SQLite, or on ``pg``."""
    from _llm_faults import ANSWER, faulty_provider
    from voxflow_adapters.hosting.calls import flow_call_factory, webrtc_voice_settings

    from voxflow import ConversationConfig, Flow
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.flow.postgres import PostgresFlowPersistence
    from voxflow.llm import LLM, preload
    from voxflow.wiring import AssistantState

    # litellm loaded before the call, as every entry point loads it at start-up (this
    # builds its server itself): the first call's turn does not wait for it
    await preload()
    result = LlmFault(fault)
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
        # no answer in the user's pause: each question's request follows its commit
        voice = webrtc_voice_settings().model_copy(update={"speculative_replies": False})
        factory = flow_call_factory(Chat, settings=voice)
        try:
            async with serving(engines, store, factory) as (server, calls):
                caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
                await caller.connect()
                caller.ask()
                await caller.answered()
                heard = caller.heard()
                provider.mode = fault
                asked = time.monotonic()
                caller.ask()  # (its turn fails: its latency message has no first audio)
                state = calls[0].flow.state
                while time.monotonic() - asked < 60:
                    turns = list(state.turns.values())
                    if len(turns) >= 2 and turns[-1].status in ("failed", "completed"):
                        result.settled_s = time.monotonic() - asked
                        result.turn_status = turns[-1].status
                        break
                    await asyncio.sleep(0.05)
                result.heard_during = caller.heard() - heard
                provider.mode = "ok"
                await caller.answered()  # its latency message: the turn is over
                if causes.errors:  # (logged as the reply ends, after the turn settled)
                    result.cause = " ".join(causes.errors[-1].split()[:12])
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
            stored = await asyncio.to_thread(store.load_state, session_id) or {}
            said = [m for m in stored.get("messages", []) if m["role"] == "assistant"
                    and str(m["content"]).strip() == ANSWER]
            result.lost = 2 - len(said)
        finally:
            store.close()
    return result
