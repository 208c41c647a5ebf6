"""voxflow exceptions.

One tree for the whole project, so callers catch voxflow errors and never a
third-party one (``litellm.*``, ``aiortc.*``)::

    VoxflowError
    + FlowDefinitionError        bad @start/@listen/@router wiring; raised when the class is created
    + DeclarationError           a bad YAML/JSON flow declaration; .path names it (ValueError)
    + FlowRuntimeError           a run broke a rule only visible at run time (also RuntimeError)
      + UnknownRouteError          a turn was routed to a label no handler listens to
    + HumanFeedbackError         feedback could not be collapsed to an outcome (also ValueError)
    + HumanFeedbackPending       (voxflow.flow.feedback) a provider paused; kickoff returns it
    + ConversationModeError      turn APIs on a non-conversational flow (also ValueError)
    + ConversationEndedError     a turn after the conversation ended (also RuntimeError)
    + InputFileError             an input file was refused; .name names it (also ValueError)
    + UnstorableTextError        a text no store can keep (NUL, a lone surrogate, too long);
                                 .field names it (also ValueError)
    + ResourceClosedError        used after *we* closed it (also RuntimeError)
    + TurnInProgressError        a second tracked turn before the first settled (also RuntimeError)
    + TurnIdentityError          a reused turn_id or a foreign session (also ValueError)
    + TurnRestoreError           a tracked turn asked to restore state (also ValueError)
    + JobUpdateRejectedError     a job update rejected / job session closed (also RuntimeError)
    + ClientActivityError        a client observation broke the protocol (also ValueError)
    + JobNotAnnounceableError    a job started where it cannot be announced (RuntimeError)
    + ProviderError              LLM/STT/TTS failure; .retryable says whether to try again
    + EngineError                a voice engine could not be chosen by name; .kind, .available
      + EngineSpecError            a malformed engine spec (``whisper:``, ``:base``) (ValueError)
      + UnknownEngineError         no installed package registers the name (also ValueError)
      + EngineOptionsError         an option the engine does not take, or a bad value (ValueError)
    + PersistenceError           the session store refused or failed a save
      + PersistenceConflictError   a writer that is behind tried to save (nothing overwritten)
      + PersistenceUnavailableError  the store cannot be written; .path and .fix name it (OSError)
        + DatabaseRefusedError       PostgreSQL refused a query on a live connection; .sqlstate
        + StoreLockedError           another writer held the SQLite file's lock past the timeout
      + SessionLeaseError          another worker holds the session's lease
      + FencedWriteError           a write of a leased session without its live lease

The packages that raise the rest define them, on this tree: a missing model and an engine
that cannot be loaded in ``voxflow_voice.engines.errors`` (``ModelNotFoundError``,
``EngineLoadError``, an ``EngineError``), a refused call or offer in
``voxflow_adapters.hosting.errors`` (``CapacityExceededError``, ``SignalingError``), the
audio devices in ``voxflow_adapters.local.errors`` (``AudioBackendError``,
``AudioDeviceError``, ``AdapterBrokenError``). ``UnknownEngineError`` and
``EngineOptionsError`` stay here, where the README promises them.
"""

from __future__ import annotations

from .ids import SessionId

__all__ = [
    "ClientActivityError",
    "ConversationEndedError",
    "ConversationModeError",
    "DatabaseRefusedError",
    "DeclarationError",
    "EngineError",
    "EngineOptionsError",
    "EngineSpecError",
    "FencedWriteError",
    "FlowDefinitionError",
    "FlowRuntimeError",
    "HumanFeedbackError",
    "InputFileError",
    "JobNotAnnounceableError",
    "JobPayloadError",
    "JobUpdateRejectedError",
    "PersistenceConflictError",
    "PersistenceError",
    "PersistenceUnavailableError",
    "ProviderError",
    "ResourceClosedError",
    "SessionLeaseError",
    "StoreLockedError",
    "TurnIdentityError",
    "TurnInProgressError",
    "TurnRestoreError",
    "UnknownEngineError",
    "UnknownRouteError",
    "UnstorableTextError",
    "VoxflowError",
]


class VoxflowError(Exception):
    """Base class of every error voxflow raises on purpose."""


class FlowDefinitionError(VoxflowError):
    """A Flow class is wired wrongly; raised when the class is created.

    Attributes:
        flow: the class name.
        method: the offending method name, when there is one.
        label: the offending trigger or route label, when there is one.
    """

    def __init__(
        self, message: str, *, flow: str, method: str | None = None, label: str | None = None
    ) -> None:
        super().__init__(message)
        self.flow = flow
        self.method = method
        self.label = label


class DeclarationError(VoxflowError, ValueError):
    """A flow declaration (``Flow.from_declaration``) is invalid; nothing was run.

    Attributes:
        path: the dotted path of the (first) bad field, e.g. ``methods.handle.do.call``.
        errors: every ``(path, message)`` found.
    """

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        lines = [f"{path or '<root>'}: {message}" for path, message in errors]
        super().__init__("invalid flow declaration:\n  " + "\n  ".join(lines))
        self.path = errors[0][0] if errors else ""
        self.errors = list(errors)


class FlowRuntimeError(VoxflowError, RuntimeError):
    """A run broke a rule that can only be seen at run time (e.g. a router label
    that equals another method's name)."""


class UnknownRouteError(FlowRuntimeError):
    """A conversational turn was routed to a label that no handler listens to: the turn
    would answer nothing. Raised when the route is chosen, before anything is said.

    Attributes:
        route: the label chosen.
        source: what chose it (``route_turn``, ``intent`` for a pre-classified intent,
            ``router`` for the LLM router's configured fallbacks).
        routes: the labels some handler listens to, sorted.
    """

    def __init__(self, message: str, *, route: str, source: str, routes: tuple[str, ...]) -> None:
        super().__init__(message)
        self.route = route
        self.source = source
        self.routes = routes


class HumanFeedbackError(VoxflowError, ValueError):
    """Human feedback could not be collapsed to one of the declared outcomes (``emit=``).

    Attributes:
        outcomes: the outcomes that were allowed.
    """

    def __init__(self, message: str, *, outcomes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.outcomes = outcomes


class ConversationModeError(VoxflowError, ValueError):
    """A conversational API was called on a flow that is not conversational."""


class ConversationEndedError(VoxflowError, RuntimeError):
    """A turn was started after the conversation ended (``state.ended`` is true)."""


class InputFileError(VoxflowError, ValueError):
    """An ``input_files`` entry was refused (missing, too large, not a file, a path
    outside the allowed folders, an unsupported type); nothing was changed.

    Attributes:
        name: the file's name (its key in ``input_files``).
        reason: what was wrong, and what to do instead.
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"input file {name!r}: {reason}")
        self.name = name
        self.reason = reason


class UnstorableTextError(VoxflowError, ValueError):
    """A text no voxflow store can keep, refused the same way on SQLite and PostgreSQL
    before anything is written (:mod:`voxflow.storable`): a NUL character (PostgreSQL's
    text and jsonb refuse it), a lone surrogate (not encodable as UTF-8), or more
    characters than its limit.

    Attributes:
        field: what the text is (``"the job's result"``, ``"sdp"``, ``"session id"``).
        problem: what is wrong with it (``"contains a NUL character (U+0000) at
            index 3"``).
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


class ResourceClosedError(VoxflowError, RuntimeError):
    """An object was used after it was closed by its owner."""





class TurnInProgressError(VoxflowError, RuntimeError):
    """A second tracked turn was started before the active one settled."""


class TurnIdentityError(VoxflowError, ValueError):
    """A turn identity was reused, or belongs to another session."""


class TurnRestoreError(VoxflowError, ValueError):
    """A tracked turn was asked to restore state (``from_checkpoint``/``restore_from_state_id``).

    Restore the state before starting the tracked turn instead.
    """


class JobUpdateRejectedError(VoxflowError, RuntimeError):
    """A job worker's update was rejected, or the job session closed; stop the work."""


class JobPayloadError(VoxflowError, ValueError):
    """A queued job's payload or a job inbox row is malformed (a missing or mistyped
    field, a kind no job function declares); the message names what was wrong. Nothing
    ran and nothing changed."""


class ClientActivityError(VoxflowError, ValueError):
    """A client observation broke the protocol (its ``seq`` jumped too far); nothing changed.

    Attributes:
        seq: the observation's sequence number.
        last_seq: the last accepted one.
    """

    def __init__(self, message: str, *, seq: int, last_seq: int) -> None:
        super().__init__(message)
        self.seq = seq
        self.last_seq = last_seq


class JobNotAnnounceableError(VoxflowError, RuntimeError):
    """A background job was started where its result could never be announced (no job
    runner or reply queue wired for the flow, or no turn running); the message says which
    and how to fix it. Nothing was started."""


class ProviderError(VoxflowError):
    """An LLM, STT or TTS provider failed.

    Attributes:
        provider: the provider or model name.
        retryable: whether the same call may succeed if tried again.
    """

    def __init__(self, message: str, *, provider: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.provider = provider
        self.retryable = retryable



class EngineError(VoxflowError):
    """A voice engine (speech to text, text to speech, voice activity, end of turn) could
    not be chosen by its spec (``whisper:base``, :mod:`voxflow.engine_spec`); the message,
    one line, names what was wrong and the fix. Nothing was loaded.

    Attributes:
        kind: ``stt``, ``tts``, ``vad`` or ``end_of_turn``.
        reason: what is wrong and the fix, without the spec: a message naming the variable
            or option that gave the spec starts with those instead.
        available: the names installed for ``kind`` when they were looked up (sorted),
            else empty.
    """

    def __init__(self, message: str, *, kind: str, reason: str = "",
                 available: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.reason = reason or message
        self.available = available


class EngineSpecError(EngineError, ValueError):
    """A malformed engine spec: no name (``:base``), nothing after ``:`` (``whisper:``),
    an empty or repeated option, a control character."""


class UnknownEngineError(EngineError, ValueError):
    """No installed package registers an engine of that kind under that name."""


class EngineOptionsError(EngineError, ValueError):
    """The spec gives an option the engine does not take, or a value it refuses."""





class PersistenceError(VoxflowError):
    """The session store refused or failed a save; the stored session is unchanged."""


class PersistenceConflictError(PersistenceError, RuntimeError):
    """A save from a writer that is behind: another writer saved the session since.

    Nothing was written. Reload the session (a turn with its ``session_id`` on a fresh
    Flow, or ``kickoff(inputs={"id": ...})``) and retry: the reload brings the other
    writer's turns in.

    Attributes:
        session_id: the session (flow id) whose save was refused.
        expected: the revision the writer built on (0: it never loaded the session).
        stored: the revision in the store.
    """

    def __init__(self, session_id: str, *, expected: int, stored: int, detail: str = "") -> None:
        what = "a session it never loaded" if expected == 0 else f"revision {expected}"
        super().__init__(
            f"session {session_id!r}: save refused, this writer built on {what} but the "
            f"store holds revision {stored} (another writer saved it since){detail}; nothing "
            "was overwritten. Reload the session (e.g. the next turn with its session_id on "
            "a fresh Flow) and retry."
        )
        self.session_id = SessionId(session_id)
        self.expected = expected
        self.stored = stored


class PersistenceUnavailableError(PersistenceError, OSError):
    """The session store cannot be opened or written; raised before any method runs.

    Attributes:
        path: the file or URL that failed (a URL is shown without its password).
        fix: what to change, e.g. set ``VOXFLOW_HOME`` to a writable directory.
    """

    def __init__(self, message: str, *, path: str, fix: str) -> None:
        super().__init__(f"{message} ({path}); {fix}")
        self.path = path
        self.fix = fix


class StoreLockedError(PersistenceUnavailableError):
    """Another connection or process held the SQLite session store's write lock past the
    store's busy timeout ("database is locked"): the store is unavailable until it lets
    go, as a database that is away. A call defers its saves and makes them once the
    lock is released (nothing is lost); ``.path`` names the file, ``.fix`` what to do.
    """


class DatabaseRefusedError(PersistenceUnavailableError):
    """PostgreSQL refused a query on a live connection (a statement or lock timeout, a
    missing privilege or table, a read-only server, a full disk): not an outage to wait
    out, and not a wrong URL. Made by :func:`voxflow.pg_refusal.refused`.

    Attributes:
        sqlstate: the server's SQLSTATE (``57014``), or ``""`` when it sent none.
        condition: its condition name (``query_canceled``).
    """

    def __init__(self, message: str, *, path: str, fix: str, sqlstate: str,
                 condition: str) -> None:
        super().__init__(message, path=path, fix=fix)
        self.sqlstate = sqlstate
        self.condition = condition


class SessionLeaseError(PersistenceError, RuntimeError):
    """Another owner holds an unexpired lease on the session.

    Attributes:
        session_id: the session asked for.
        holder: the owner holding it.
    """

    def __init__(self, message: str, *, session_id: str, holder: str) -> None:
        super().__init__(message)
        self.session_id = SessionId(session_id)
        self.holder = holder


class FencedWriteError(PersistenceError, RuntimeError):
    """A write of a leased session was refused: this writer does not hold its live lease.

    Nothing was written. ``reason`` says why: ``"taken over"`` (another owner acquired
    the session since: this writer was paused past its lease), ``"expired"`` (the lease
    ran out at the database's clock, even if nobody took it yet), ``"released"``, or
    ``"unfenced"`` (a writer without a lease saved a session whose live lease another
    owner holds: write a leased session only through ``store.fenced(lease)``). Stop
    writing the session; acquire the lease again to continue, from a fresh load.

    Attributes:
        session_id: the session.
        epoch: the epoch this writer held (None: an unfenced writer).
        current: the session's epoch now.
        reason: why the write was refused (one of the four above).
    """

    def __init__(
        self,
        session_id: str,
        *,
        epoch: int | None,
        current: int,
        reason: str = "taken over",
        detail: str = "",
    ) -> None:
        if reason == "unfenced":
            why = (
                f"an unfenced write, but the session is leased at epoch {current}{detail}; "
                "write it through store.fenced(lease)"
            )
        elif reason == "taken over":
            why = (
                f"this writer's lease epoch {epoch} was taken over "
                f"(the session is at epoch {current})"
            )
        else:
            why = f"this writer's lease epoch {epoch} was {reason}{detail}"
        super().__init__(f"session {session_id!r}: write refused, {why}; nothing was written")
        self.session_id = SessionId(session_id)
        self.epoch = epoch
        self.current = current
        self.reason = reason
