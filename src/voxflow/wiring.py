"""One assistant call, wired in one place: flow → TurnRunner, ReplyQueue, JobRunner and
announcer.

Every entry point builds its call here (``voxflow demo``, text ``voxflow chat``,
``chat --voice``, ``serve``, and ``voxflow_adapters.testkit.scenario.run_call`` given a flow),
so they all run the same assistant: background jobs started from handlers
(:func:`~voxflow.jobs.background_job`), their results announced once the speaking floor
is free, and each heard announcement kept in the history
(:func:`~voxflow.replies.record_announcement`).

* A voice session takes ``wiring.turns``, ``replies``, ``jobs`` and ``announcer`` and
  subscribes its ``on_job_update`` (:func:`voxflow_voice.session.wiring.assistant_session`).
* Text chat (:func:`chat_text`) runs turns with :meth:`AssistantWiring.text_turn` and,
  between turns (before each prompt, and while the user sits at it), speaks what is
  ready with :meth:`AssistantWiring.announce_ready`.

The core never names an adapter: the voice side of the wiring lives in
``voxflow_voice.session.wiring``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from voxflow.clock import Clock, MonotonicClock
from voxflow.errors import ProviderError
from voxflow.jobs import JobRecord, JobRunner, JobState, MakeWork
from voxflow.jobs.background import JobBinding, bind_jobs
from voxflow.jobs.queue import PostgresJobQueue
from voxflow.jobs.reader import InboxReader
from voxflow.jobs.results import BackgroundJob, announce_jobs
from voxflow.llm._litellm import start_preload
from voxflow.replies import DeliveryFloor, ReplyQueue, ReplyQueueState, record_announcement
from voxflow.turns import TurnRunner, TurnState

__all__ = ["AssistantState", "AssistantWiring", "chat_text"]

logger = logging.getLogger("voxflow.wiring")

Subscriber = Callable[[dict[str, Any]], Awaitable[Any]]


class AssistantState(ReplyQueueState, JobState[BackgroundJob]):
    """A session's state for an assistant with background jobs: the conversation, turn
    and reply records, the reply queue and the jobs started with ``background_job``."""


def _held_by_a_previous_call(state: ReplyQueueState) -> bool:
    """Whether ``state`` (a wiring's, before its call starts) holds a floor or a scheduled
    delivery: a call that is not running any more (its process died mid-reply) left them."""
    floor = state.delivery_floor
    return floor != DeliveryFloor(closed=floor.closed) or any(
        d.status == "scheduled" for d in state.deliveries.values())


async def _requeue(job_queue: PostgresJobQueue, jobs: Sequence[BackgroundJob]) -> None:
    """Queue again each job a restored session records as ``queued``: one its previous
    process stored but never got into the queue (a sync handler's failed submission it
    caught, a queue row lost). :meth:`~voxflow.jobs.PostgresJobQueue.enqueue` is
    idempotent by job id and revision, so a job already queued (or run) is not queued
    twice. A failure is logged and the job stays ``queued``: its next owner tries again."""
    for job in jobs:
        try:
            await asyncio.to_thread(job_queue.enqueue, job)
        except Exception as exc:
            logger.warning("restored job %s (%s) could not be queued again: %s",
                           job.job_id, job.kind, exc)


class AssistantWiring:
    """One call of a conversational flow, with its turns, reply queue and jobs.

    Args:
        flow: a conversational flow instance (one per call).
        clock: the call's clock (a ``VirtualClock`` in deterministic runs; monotonic if
            None); background jobs sleep on it.
        make_work: builds workers for your own ``JobRecord`` kinds (jobs started with
            :func:`~voxflow.jobs.background_job` need nothing).
        job_queue: run the jobs started with ``background_job`` in job-worker processes
            (``voxflow jobs worker``) instead of this process: they are queued, and an
            :class:`~voxflow.jobs.InboxReader` (``wiring.inbox_reader``) reads their
            updates into the state. None (the default): in-process, as embedded. A
            restored session's ``queued`` jobs are queued again (once: the queue keeps
            one job per job id and revision), so one its previous process never got into
            the queue still runs.
        save_jobs: with ``job_queue``, awaited after inbox rows were applied and before
            they are acknowledged (persist the state, fenced when leased); default: the
            flow's own save (``flow.asave_state``) when the flow persists.

    A reply queue is built when the state is a ``ReplyQueueState`` and a ``JobState``, a
    job runner when it is a ``JobState``. A state restored from a store (``load_session``)
    is taken over (:meth:`~voxflow.replies.ReplyQueue.take_over`) whatever the entry
    point: the speaking floor its previous process held when it died (its foreground
    turn, its client's playback and observation count) is released and the announcement
    it was playing ends interrupted, so ready announcements are not held back for good.
    Construct it inside async code (the job runner belongs to the running loop).

    Raises:
        TypeError: ``flow`` is not a conversational flow.
        RuntimeError: no event loop is running.
    """

    def __init__(
        self,
        flow: Any,
        *,
        clock: Clock | None = None,
        make_work: MakeWork | None = None,
        job_queue: PostgresJobQueue | None = None,
        save_jobs: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        if not getattr(flow, "conversational", False):
            raise TypeError(f"{type(flow).__name__} is not a conversational flow")
        # litellm and what its first call imports, on a thread of their own from now: a
        # turn that calls an LLM before they are ready waits without blocking the loop
        start_preload()
        self.flow = flow
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.turns = TurnRunner(flow, clock=self.clock)
        state = flow.state
        self.replies: ReplyQueue | None = (
            ReplyQueue(self.turns, is_relevant=self._is_relevant)
            if isinstance(state, ReplyQueueState) and isinstance(state, JobState) else None
        )
        if self.replies is not None and _held_by_a_previous_call(state):
            # a restored session: the floor its previous process held (dead, or its call
            # over) holds nothing now; released, saved with the next save
            self.replies.take_over()
        self.announcer: Callable[[Sequence[JobRecord]], str] = announce_jobs
        self._subscribers: list[Subscriber] = []
        self._warned: set[str] = set()
        self.jobs: JobRunner | None = None
        self._binding: JobBinding | None = None
        if isinstance(state, JobState):
            binding = JobBinding(clock=self.clock, current_turn=self.turns.running_turn_id,
                                 loop=asyncio.get_running_loop())
            custom = make_work

            def work(job: Any, inputs: dict[str, Any], publish: Any) -> Any:
                if custom is not None and not isinstance(job, BackgroundJob):
                    return custom(job, inputs, publish)
                return binding.make_work(job, inputs, publish)

            self.jobs = JobRunner(state, work, on_update=self._on_update)
            binding.runner = self.jobs
            binding.notify = self._on_update
            bind_jobs(flow, binding)
            self._binding = binding
        self.state_lock: asyncio.Lock = (
            self.jobs.state_lock if self.jobs is not None else asyncio.Lock()
        )
        self.inbox_reader: InboxReader | None = None
        if job_queue is not None:
            if self.jobs is None:
                raise TypeError(f"{type(state).__name__} holds no jobs: a job_queue needs a "
                                "JobState (derive it from voxflow.wiring.AssistantState)")
            binding.submit = job_queue.enqueue
            jobs = self.jobs

            async def announce() -> None:
                await self._on_update(jobs.snapshot())

            if save_jobs is None and flow.persistence_configured():
                # acknowledged rows must be in the stored session: the flow's own save
                save_jobs = functools.partial(flow.asave_state, "job_update")
            self.inbox_reader = InboxReader(job_queue.inbox, state, lock=self.state_lock,
                                            on_update=announce, save=save_jobs)
            self.inbox_reader.start()
            restored = [job for job in state.jobs.values()
                        if isinstance(job, BackgroundJob) and job.status == "queued"]
            if restored:  # drained by aclose, like the turns' own submissions
                task = asyncio.get_running_loop().create_task(
                    _requeue(job_queue, restored), name="wiring.requeue")
                binding.pending.add(task)
                task.add_done_callback(binding.pending.discard)

    # -- jobs -------------------------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> None:
        """Await ``callback(snapshot)`` after every job change (a voice session's
        ``on_job_update``)."""
        if not callable(callback):
            raise TypeError("callback must be an async callable")
        self._subscribers.append(callback)

    async def _on_update(self, snapshot: dict[str, Any]) -> None:
        self._warn_unannounceable()
        for callback in list(self._subscribers):
            await callback(snapshot)

    def _is_relevant(self, job: JobRecord) -> bool:
        """A progress announcement is dropped once its job's result is in."""
        parent_id = getattr(job, "inputs", {}).get("progress_of")
        if not job.kind.endswith(".progress") or not isinstance(parent_id, str):
            return True
        parent = getattr(self.flow.state, "jobs", {}).get(parent_id)
        return parent is None or parent.status not in ("completed", "failed")

    def _warn_unannounceable(self) -> None:
        state = self.flow.state
        for job in list(getattr(state, "jobs", {}).values()):
            if job.status != "completed" or job.job_id in self._warned:
                continue
            reason = None
            if self.replies is None:
                reason = (f"{type(state).__name__} has no reply queue (derive it from "
                          "voxflow.wiring.AssistantState)")
            elif job.origin_turn_id is None:
                reason = "its record has no origin_turn_id (the turn that asked for it)"
            elif job.origin_turn_id not in state.turns:
                reason = f"its origin turn {job.origin_turn_id} is not a turn of this session"
            if reason is not None:
                self._warned.add(job.job_id)
                logger.warning("job %s (%s) completed but cannot be announced: %s",
                               job.job_id, job.kind, reason)

    async def wait_for_jobs(self, seconds: float) -> bool:
        """Wait (on the call's clock) until no job is queued or running; False if some
        still are after ``seconds``."""
        deadline = self.clock.now() + seconds
        while any(j.status in ("queued", "running")
                  for j in getattr(self.flow.state, "jobs", {}).values()):
            if self.clock.now() >= deadline:
                return False
            await self.clock.sleep(0.05)
        return True

    # -- text turns and announcements ---------------------------------------------------

    async def text_turn(self, text: str) -> str:
        """Run one committed text turn and return the reply text (what a voice call
        would speak)."""
        parts: list[str] = []
        async with self.state_lock:
            if self.replies is not None:
                self.replies.set_foreground(True)
            try:
                async for event in self.turns.astream_turn(text):
                    if self.turns.accept_event(event) and event.type == "text" and event.text:
                        parts.append(event.text)
            finally:
                if self.replies is not None:
                    self.replies.set_foreground(False)
        return "".join(parts)

    async def announce_ready(self) -> list[str]:
        """Deliver every announcement that is ready now, as text: each is claimed,
        prepared, settled ``completed`` and recorded in the history as heard."""
        if self.replies is None:
            return []
        replies, spoken = self.replies, list[str]()
        async with self.state_lock:
            for job in list(getattr(self.flow.state, "jobs", {}).values()):
                if job.status == "completed":
                    replies.enqueue(job)
        while True:
            async with self.state_lock:
                delivery = replies.claim()
                if delivery is None:
                    return spoken
                try:
                    events = replies.prepare(delivery.delivery_id, self.announcer)
                except Exception as exc:
                    logger.warning("announcement %s failed: %s", delivery.delivery_id, exc)
                    continue
                text = "".join(e.text or "" for e in events
                               if self.turns.accept_event(e) and e.type == "text")
                if replies.settle(delivery.delivery_id, "completed") and text:
                    record_announcement(self.flow, delivery.delivery_id, heard_text=text,
                                        full_text=text, interrupted=False)
                    spoken.append(text)

    # -- lifetime -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop the call's background jobs (idempotent); queued jobs go on in their job
        workers, their updates waiting in the inbox for the session's next owner."""
        if self._binding is not None:
            await self._binding.drain()  # jobs handed to the queue from the loop
        if self.inbox_reader is not None:
            await self.inbox_reader.aclose()
        if self.jobs is not None:
            await self.jobs.aclose()

    async def __aenter__(self) -> AssistantWiring:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (f"AssistantWiring(flow={type(self.flow).__name__}, "
                f"replies={self.replies is not None}, jobs={self.jobs!r})")


async def chat_text(
    flow: Any,
    *,
    read: Callable[[str], str] = input,
    write: Callable[[str], Any] = print,
    prompt: str = "You: ",
    assistant_prefix: str = "Assistant: ",
    exit_commands: Sequence[str] = ("exit", "quit"),
    job_grace: float = 30.0,
    interject: Callable[[str], Any] | None = None,
) -> None:
    """A text chat with ``flow``, wired like a voice call: a background job's result is
    announced as soon as it is ready, while the user sits at the prompt (the floor is
    free between turns), and at the end of input the chat waits up to ``job_grace``
    seconds for running jobs and announces them.

    ``read(prompt)`` returns a line (EOFError ends the chat; it runs in a thread, so an
    announcement may come while it waits); ``write`` prints one; ``interject`` prints
    one that is ready while ``read`` waits (a terminal's: above the prompt, redrawn
    with what was typed so far; default ``write``). A
    turn whose LLM call fails (:class:`~voxflow.errors.ProviderError`) is written as
    ``(no answer: <the cause>)`` and the chat goes on, as a call does; so does a turn
    whose handler raises (its traceback is logged at DEBUG). A flow whose
    state is not a :class:`~voxflow.turns.TurnState` (the plain ``ConversationState``)
    has no turn records for jobs: its lines are plain turns, as in ``flow.chat()``.
    """
    exits = {c.strip().lower() for c in exit_commands}
    if not isinstance(getattr(flow, "state", None), TurnState):
        # A flow on the plain ConversationState (the spec's) keeps no turn records, so
        # it has no jobs to announce: each line is one turn, as in flow.chat().
        wiring: AssistantWiring | None = None
        session: list[str | None] = [None]

        async def plain_turn(line: str) -> str:
            result = await flow.ahandle_turn(line, session_id=session[0])
            session[0] = flow.flow_id
            return str(result)

        text_turn: Callable[[str], Awaitable[str]] = plain_turn
    else:
        wiring = AssistantWiring(flow)
        text_turn = wiring.text_turn
    changed = asyncio.Event()  # a job changed: maybe a result to announce
    if wiring is not None:
        async def wake(snapshot: dict[str, Any]) -> None:
            changed.set()

        wiring.subscribe(wake)
    say_now = interject if interject is not None else write
    try:
        while not getattr(flow.state, "ended", False):
            for text in await wiring.announce_ready() if wiring is not None else ():
                write(f"{assistant_prefix}{text}")
            reading = asyncio.ensure_future(asyncio.to_thread(read, prompt))
            try:
                while wiring is not None and not reading.done():  # the user at the prompt
                    waking = asyncio.ensure_future(changed.wait())
                    try:
                        await asyncio.wait({reading, waking},
                                           return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waking.cancel()
                    if changed.is_set():
                        changed.clear()
                        for text in await wiring.announce_ready():
                            say_now(f"{assistant_prefix}{text}")
                line = (await reading).strip()
            except EOFError:
                break
            if not line:
                continue
            if line.lower() in exits:
                break
            try:
                answer = await text_turn(line)
            except ProviderError as exc:  # the turn failed, not the chat (as in a call)
                write(f"(no answer: {exc})")
                continue
            except Exception as exc:  # a handler's bug: said, the chat goes on (as in a call)
                logger.debug("the turn failed", exc_info=True)
                write(f"(no answer: the turn failed: {type(exc).__name__}: {exc}; "
                      "--log-level DEBUG shows where)")
                continue
            write(f"{assistant_prefix}{answer}")
        # (an ended call announces nothing)
        if wiring is not None and not getattr(flow.state, "ended", False):
            if not await wiring.wait_for_jobs(job_grace):
                logger.warning("chat ended with background jobs still running")
            for text in await wiring.announce_ready():
                write(f"{assistant_prefix}{text}")
    finally:
        if wiring is not None:
            await wiring.aclose()
