"""A streamed completion: :class:`LLMStream`, what :meth:`voxflow.llm.LLM.astream` returns.

It emits the call's events (:mod:`voxflow.llm.events`) as it goes, retries a transient
failure before the first token with the call's :class:`~voxflow.llm._attempts.Attempts`,
and always closes the provider stream (on exhaustion, an early exit or a cancel).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

from voxflow.errors import ProviderError
from voxflow.llm._attempts import Attempts, cause_of
from voxflow.llm._litellm import aload_litellm
from voxflow.llm._tracing import LLMSpan
from voxflow.llm.events import LLMEvent, current_agent, emit_llm_event, new_call_id
from voxflow.llm.messages import LLMResponse, ToolCall, parse_response

__all__ = ["LLMStream"]


class LLMStream:
    """An in-flight streamed completion; an async iterator of text deltas.

    Use it as an async context manager so the provider stream is always closed. A
    transient failure before the first token is retried (:mod:`voxflow.llm.policy`); one
    after it ends the stream with :class:`~voxflow.errors.ProviderError`.
    """

    def __init__(
        self, model: str, make_kwargs: Callable[[], dict[str, Any]], *, has_tools: bool,
        attempts: Attempts,
    ) -> None:
        self._model = model
        self._make_kwargs = make_kwargs
        self._kwargs = make_kwargs()
        self._attempts = attempts
        self._has_tools = has_tools
        self._provider: Any = None
        self._iter: AsyncIterator[str] | None = None
        self.call_id = new_call_id()
        self.response: LLMResponse | None = None
        """the whole answer, set once the stream is exhausted"""
        self.chunks_received = 0
        """provider chunks read so far (a closed-early stream stops counting)"""
        self.closed = False

    async def __aenter__(self) -> LLMStream:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[str]:
        if self._iter is None:
            self._iter = self._run()
        return self._iter

    async def aclose(self) -> None:
        """Close the provider stream now, without draining it. Idempotent."""
        if self._iter is not None:
            closer = getattr(self._iter, "aclose", None)
            if closer is not None:
                await closer()
        await self._close_provider()

    async def _close_provider(self) -> None:
        if self.closed:
            return
        self.closed = True
        provider, self._provider = self._provider, None
        if provider is not None and hasattr(provider, "aclose"):
            await provider.aclose()

    async def _retry(self, exc: Exception) -> ProviderError | None:
        """Before the first token: close this attempt's stream, then the error to raise,
        or None once the backoff has passed and the next attempt is ready."""
        await self._close_provider()
        error = await self._attempts.failed(exc)
        if error is None:
            self.closed = False
            self.chunks_received = 0
            self._kwargs = self._make_kwargs()
        return error

    async def _run(self) -> AsyncIterator[str]:
        agent = current_agent()
        emit_llm_event(
            LLMEvent(
                "llm_call_started",
                self.call_id,
                self._model,
                has_tools=self._has_tools,
                agent_name=agent,
            )
        )
        span = LLMSpan(self._model, self._kwargs, self.call_id, agent, self._has_tools)
        litellm = await aload_litellm()
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        try:
            while True:
                try:
                    self._attempts.check_credentials(self._kwargs)
                    self._provider = await litellm.acompletion(**self._kwargs)
                    async for chunk in self._provider:
                        self.chunks_received += 1
                        span.response(chunk)
                        delta = chunk.choices[0].delta if chunk.choices else None
                        if delta is None:
                            continue
                        for tc in getattr(delta, "tool_calls", None) or ():
                            slot = calls.setdefault(
                                tc.index or 0, {"id": "", "name": "", "arguments": ""}
                            )
                            slot["id"] = tc.id or slot["id"]
                            if tc.function is not None:
                                slot["name"] += tc.function.name or ""
                                slot["arguments"] += tc.function.arguments or ""
                        piece = delta.content
                        if piece:
                            text.append(piece)
                            emit_llm_event(
                                LLMEvent(
                                    "llm_stream_chunk",
                                    self.call_id,
                                    self._model,
                                    piece,
                                    self._has_tools,
                                    agent,
                                )
                            )
                            yield piece
                        # A checkpoint per chunk: listeners (TurnRunner, TTS) see text live
                        # and a cancel lands between chunks even when the provider's
                        # iterator never suspends (mock streams, SDKs that buffer a whole
                        # response).
                        await asyncio.sleep(0)
                    break
                except (asyncio.CancelledError, GeneratorExit) as exc:
                    span.failed(exc)
                    raise
                except Exception as exc:
                    # Tokens are out (spoken, shown): never stream a second answer.
                    error = (self._attempts.final(exc) if text or calls
                             else await self._retry(exc))
                    if error is not None:
                        span.failed(error)
                        emit_llm_event(LLMEvent("llm_call_failed", self.call_id, self._model,
                                       agent_name=agent))
                        raise error from cause_of(exc)
        finally:
            # Shielded so a cancelled consumer still releases the provider connection.
            await asyncio.shield(self._close_provider())
        content = "".join(text) if text else None
        self.response = LLMResponse(
            content=content,
            tool_calls=tuple(
                ToolCall(
                    id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}"
                )
                for i, c in sorted(calls.items())
            ),
            parsed=parse_response(content, self._kwargs.get("response_format")),
            model=self._model,
            call_id=self.call_id,
        )
        span.done(content, self.response.tool_calls)
        emit_llm_event(
            LLMEvent(
                "llm_call_completed",
                self.call_id,
                self._model,
                content or "",
                self._has_tools,
                agent,
            )
        )
