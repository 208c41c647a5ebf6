"""stream = True: kickoff returns a StreamSession of ordered frames, then the result."""

from __future__ import annotations

import asyncio

import pytest

from voxflow import Flow, StreamFrame, StreamSession, listen, start


class Streamed(Flow):
    stream = True

    @start()
    def begin(self) -> str:
        self.emit_frame("llm", "llm_stream_chunk", {"text": "Hel"})
        self.emit_frame("llm", "llm_stream_chunk", {"text": "lo"})
        return "Hello"

    @listen(begin)
    def shout(self, text: str) -> str:
        return text.upper()


def test_sync_stream_yields_ordered_frames_then_result() -> None:
    session = Streamed().kickoff()
    assert isinstance(session, StreamSession)
    with session:
        frames = list(session)
    assert [f.seq for f in frames] == list(range(1, len(frames) + 1))
    assert [(f.channel, f.type) for f in frames] == [
        ("flow", "flow_started"),
        ("method", "method_started"),
        ("llm", "llm_stream_chunk"),
        ("llm", "llm_stream_chunk"),
        ("method", "method_finished"),
        ("method", "method_started"),
        ("method", "method_finished"),
        ("flow", "flow_finished"),
    ]
    assert "".join(f.data["text"] for f in frames if f.channel == "llm") == "Hello"
    assert session.result == "HELLO"


async def test_async_stream() -> None:
    session = await Streamed().kickoff_async()
    frames: list[StreamFrame] = []
    async with session:
        async for frame in session:
            frames.append(frame)
    assert frames[-1].type == "flow_finished"
    assert await session.aresult() == "HELLO"


async def test_a_run_cancelled_before_it_began_ends_its_frames() -> None:
    # TurnRunner cancels a turn's run at once when its reply was cut before it began.
    session = await Streamed().kickoff_async()
    session.cancel()
    # (wait_for: before the fix the frames never ended and the test hung)
    frames = await asyncio.wait_for(_frames(session), timeout=30)
    assert session.done and frames == []
    with pytest.raises(asyncio.CancelledError):
        await session.aresult()


async def _frames(session: StreamSession) -> list[StreamFrame]:
    return [frame async for frame in session]


def test_stream_reports_failure_as_last_frame_and_raises_from_result() -> None:
    class Broken(Flow):
        stream = True

        @start()
        def begin(self) -> None:
            raise ValueError("nope")

    session = Broken().kickoff()
    frames = list(session.events)
    assert frames[-1].type == "flow_failed"
    with pytest.raises(ValueError, match="nope"):
        _ = session.result


def test_result_before_the_end_is_a_clear_error() -> None:
    import threading

    gate = threading.Event()

    class Waits(Flow):
        stream = True

        @start()
        def begin(self) -> str:
            gate.wait(timeout=10)
            return "done"

    session = Waits().kickoff()
    with pytest.raises(RuntimeError, match="still streaming"):
        _ = session.result
    gate.set()
    assert session.wait(timeout=10) == "done"
