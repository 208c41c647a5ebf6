"""Loading litellm: on first use, quietly, never fetching anything at import.

Its own module so that the LLM client (:mod:`voxflow.llm`), its policy
(:mod:`voxflow.llm.policy`), file parts and the test kit share one loader without
importing each other.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from voxflow import _loops

__all__ = ["load_litellm"]


def load_litellm() -> Any:
    """Import litellm on first use, quietly and without fetching the cost map.

    Also defaults ``MAX_BASE64_LENGTH_FOR_LOGGING`` to 0: litellm otherwise walks and
    copies the whole message list after every call to shorten base64 payloads for its
    logging callbacks (voxflow registers none), a cost that grows with the conversation.
    Set the variable yourself before the first call to keep litellm's behaviour.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")
    import litellm  # here: litellm costs ~1 s to import; `import voxflow` never loads it

    _loops.shut_down_first_at_exit()  # before litellm's own exit flush
    logging.getLogger("LiteLLM").addFilter(_quiet_loop_change)
    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


def _quiet_loop_change(record: logging.LogRecord) -> bool:
    """Drop litellm's warning that its logging worker moved to another event loop.

    Every sync entry point runs on its thread's cached loop, and ``stream_turn`` on a
    thread of its own, so a program using both moves the worker from loop to loop;
    litellm carries its queued logging over each time (nothing is lost) and said so on
    stderr, around the program's own output.
    """
    return not str(record.msg).startswith("LoggingWorker: event loop changed")
