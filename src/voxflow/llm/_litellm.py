"""Loading litellm: off the event loop, quietly, never fetching anything at import.

Its own module so that the LLM client (:mod:`voxflow.llm`), its policy
(:mod:`voxflow.llm.policy`), file parts and the test kit share one loader without
importing each other.

Importing litellm takes seconds of CPU, and its first call imports as much again (its
providers' modules, the tokenizer, the streaming code): done on the event loop, that
stalled every call the process was running. :func:`start_preload` does both once per
process on a thread of its own; every entry point starts it when it starts (the servers
and ``run_call`` wait for it with :func:`preload` before their first call), and an async
call that comes first waits for it (:func:`aload_litellm`) without blocking the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from typing import Any

from voxflow import _loops

__all__ = ["aload_litellm", "load_litellm", "preload", "start_preload"]

logger = logging.getLogger("voxflow.llm")

_preload_lock = threading.Lock()
_preloaded: concurrent.futures.Future[Any] | None = None


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


def start_preload() -> concurrent.futures.Future[Any]:
    """Import litellm and run one mock call of each kind (streamed and not) on a thread of
    its own, once per process; the future of the litellm module.

    The mock calls import what a process's first real call would otherwise import on the
    event loop (the provider's request and streaming code, the tokenizer): together with
    the import itself, seconds of CPU. They reach no network and report nothing (no
    voxflow LLM events, and litellm's ``no-log``: a user's litellm callbacks are not told
    of them, only litellm's pre-call hook runs). A mock call that
    fails is logged at debug level and costs only the warm-up; an import that fails is
    the future's exception, raised by the first call as before.
    """
    global _preloaded
    with _preload_lock:
        if _preloaded is None:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_running_or_notify_cancel()
            # not a daemon: a daemon thread killed at exit mid-import could hold an import
            # lock that an exit handler then waits for
            threading.Thread(target=_preload, args=(future,), name="voxflow.llm.preload",
                             daemon=False).start()
            _preloaded = future
        return _preloaded


def _preload(future: concurrent.futures.Future[Any]) -> None:
    try:
        litellm = load_litellm()
    except BaseException as exc:
        future.set_exception(exc)
        return
    try:
        _warm_up(litellm)
    except Exception as exc:  # a warm-up only: the real call says what is wrong
        logger.debug("litellm's warm-up call failed: %s", exc)
    future.set_result(litellm)


def _warm_up(litellm: Any) -> None:
    messages = [{"role": "user", "content": "warm-up"}]
    model = "openai/gpt-4o-mini"
    # litellm's "no-log": a user's own litellm callbacks (cost tracking, tracing) are
    # not told of these calls' success or failure (its pre-call hook still runs)
    quiet = {"mock_response": "ok", "no-log": True}
    for chunk in litellm.completion(model=model, messages=messages, stream=True, **quiet):
        del chunk
    litellm.completion(model=model, messages=messages, **quiet)

    async def streamed() -> None:  # the async path's own modules (anyio's backend...)
        stream = await litellm.acompletion(model=model, messages=messages, stream=True,
                                           **quiet)
        async for chunk in stream:
            del chunk

    # a loop of its own, closed after: its pending tasks (litellm's logging worker) are
    # cancelled and awaited, where a cached loop left at the thread's end would drop them
    asyncio.run(streamed())


async def aload_litellm() -> Any:
    """litellm, for async code: imported off the event loop (:func:`preload`, awaited)
    when it was not yet, so no call running on the loop pays for the import."""
    future = start_preload()
    if future.done():
        return future.result()
    return await asyncio.wrap_future(future)


async def preload() -> None:
    """Load litellm (and what its first call imports) on a thread of its own, once per
    process, and wait for it without blocking the event loop.

    Every entry point does this before its first call (``voxflow serve``, its call
    workers, ``voxflow phone``, ``run_call``; the others start it with the call's
    :class:`~voxflow.wiring.AssistantWiring`), so no turn of a live call waits for the
    seconds it takes. Run it with other start-up work (``asyncio.gather``). It never
    raises: a litellm that cannot be imported is reported by the first call, as before.
    """
    try:
        await aload_litellm()
    except Exception as exc:
        logger.debug("litellm could not be preloaded: %s", exc)
