"""What the simulated calls of a persisted assistant whose session store goes away
(``test_simulated_call_store_outage.py``, ``test_simulated_call_store_locked.py``) look
at: the assistant's answer, the saves deferred, and the conversation stored."""

from __future__ import annotations

from typing import Any

import pytest

from voxflow.examples.assistant import assistant_class

__all__ = ["ANSWER", "deferred_saves", "logged", "stored_messages"]

ANSWER = "Hello! How can I help you today?"
"""The example assistant's answer to "Hello there!"."""


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every line logged (for an assertion's message)."""
    return [r.getMessage() for r in caplog.records]


def deferred_saves(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines saying a save was deferred (the session store unreachable)."""
    return [line for line in logged(caplog) if "session store is unreachable" in line]


async def stored_messages(store: Any, session_id: str) -> list[tuple[str, Any]]:
    """The conversation ``store`` holds for ``session_id``, read by a fresh assistant
    (role, content); it must be stored."""
    again = assistant_class(None)(persistence=store)
    assert await again.aload_session(session_id)
    return [(m.role, m.content) for m in again.state.messages]
