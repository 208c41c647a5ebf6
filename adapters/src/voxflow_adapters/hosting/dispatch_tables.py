"""The dispatch tables: their schema, the rows read from them, and the error when the
database cannot be used.

``voxflow_call_workers`` holds one row per call worker (:class:`WorkerRow`: its kind, its
slots and the slots it holds, its headroom and the rest of the load its heartbeat
reports, :class:`WorkerReport`, its heartbeat), ``voxflow_call_offers`` one row
per request a front door waits on (:class:`ClaimedOffer` once a worker claimed it,
:class:`OfferResult` what became of it), ``voxflow_deployment`` one random id, written by
the first process to open the tables: the deployment they make (its hash is what a
front door's ``GET /health`` shows, :meth:`~voxflow_adapters.hosting.dispatch.
DispatchStore.deployment`). What front doors and call workers do with them,
the claim, the answer, the heartbeat, is :class:`~voxflow_adapters.hosting.dispatch.
DispatchStore`'s; this module imports no driver, so what only reads rows or reports the
database unusable (``voxflow status``, the command line's checks) does not load the store.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from voxflow.errors import VoxflowError
from voxflow.pg_url import redact_url
from voxflow.settings import DATABASE_URL_VARIABLE

__all__ = [
    "CALL_KINDS",
    "CLAIMABLE_SQL",
    "CORE_COLUMNS",
    "REPORT_COLUMNS",
    "SCHEMA_SQL",
    "UNCAPPED_SLOTS",
    "ClaimedOffer",
    "DispatchUnavailableError",
    "OfferResult",
    "WorkerReport",
    "WorkerRow",
    "check_dispatch_database",
    "dispatch_unavailable",
    "free_slots",
    "worker_row",
]

logger = logging.getLogger(__name__)

UNCAPPED_SLOTS = 10_000
"""The slots a call worker with no ``--max-calls`` registers (the admission's ceiling,
:data:`~voxflow_adapters.hosting.admission.UNBOUNDED_CALLS`): its measured headroom, not
its slots, says what it takes (:func:`free_slots`)."""

CALL_KINDS = ("webrtc", "phone")
"""The kinds of call a front door dispatches and a worker answers."""

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS voxflow_call_workers (
    worker_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    slots integer NOT NULL CHECK (slots >= 1),
    used integer NOT NULL DEFAULT 0 CHECK (used >= 0 AND used <= slots),
    headroom double precision,
    draining boolean NOT NULL DEFAULT false,
    started_at double precision NOT NULL,
    heartbeat_at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS voxflow_call_offers (
    offer_id text PRIMARY KEY,
    sdp text NOT NULL,
    resume text,
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'claimed', 'answered', 'failed')),
    created_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    worker_id text,
    answer_sdp text,
    call_id text,
    status integer,
    error text
);
CREATE INDEX IF NOT EXISTS voxflow_call_offers_pending
    ON voxflow_call_offers (created_at) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS voxflow_deployment (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    deployment_id text NOT NULL
);
ALTER TABLE voxflow_call_offers ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'webrtc';
ALTER TABLE voxflow_call_offers ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'webrtc';
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS measured_slots integer;
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS call_cost double precision;
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS prior_call_cost double precision;
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS cost_source text;
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS model_rtf jsonb;
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS p95_ms double precision;
ALTER TABLE voxflow_call_workers ADD COLUMN IF NOT EXISTS refusal text;
"""
"""The tables, created when one is missing, and the columns later versions added, added
to a table an older version made when one of them is missing
(:func:`~voxflow.pg_schema.ensure_tables`): a process of this version opening the tables
of an older deployment migrates them."""

_FIX = (f"check {DATABASE_URL_VARIABLE} (postgresql://user[:password]@host[:port]/database) "
        "and that the server is running")


class DispatchUnavailableError(VoxflowError):
    """The dispatch database cannot be used (unreachable, refused, psycopg missing); the
    message says the fix and never shows a password."""


def check_dispatch_database(url: str, *, connect_timeout: float = 10.0) -> None:
    """Connect to ``url`` once (no pool, no retry): a server that refuses, a database or
    role that does not exist, a wrong password fail at once with the driver's reason.

    Raises:
        DispatchUnavailableError: psycopg is missing, or the connection failed (the
            message names the cause and the fix, never the password).
    """
    try:
        import psycopg  # the optional voxflow[postgres] extra
    except ImportError:
        raise DispatchUnavailableError(
            "dispatch through PostgreSQL needs psycopg: pip install 'voxflow[postgres]'"
        ) from None
    try:
        psycopg.connect(url, connect_timeout=max(1, int(connect_timeout))).close()
    except psycopg.Error as exc:
        raise dispatch_unavailable(url, exc) from None


def dispatch_unavailable(url: str, exc: BaseException) -> DispatchUnavailableError:
    """The error that says the database at ``url`` cannot be used, from the driver's
    ``exc``: its first line (the password never shown) and the fix."""
    text = str(exc).replace(url, redact_url(url)).strip().splitlines()
    reason = text[0] if text else type(exc).__name__
    return DispatchUnavailableError(
        f"cannot use the dispatch database at {redact_url(url)}: {reason}; {_FIX}")


def free_slots(slots: int, used: int, headroom: float | None,
               measured_slots: int | None = None) -> int:
    """The calls a worker with ``slots``, ``used`` of them held, can still be handed, as
    of its last heartbeat: for a worker with a cap (``--max-calls``: ``slots``), its
    cap or, when its heartbeat reported fewer ``measured_slots`` (the slots its
    measured cost allows), those, less its calls; for a worker with no cap (``slots``
    at :data:`UNCAPPED_SLOTS`), at most the ``headroom`` it reported (rounded up). What
    the worker itself claims (:meth:`~voxflow_adapters.hosting.worker.CallWorker.
    can_take`), up to a beat old; one function for what a front door counts
    (:meth:`~voxflow_adapters.hosting.dispatch.DispatchStore.free_slots`), what a claim
    allows (:data:`CLAIMABLE_SQL`) and what ``voxflow status`` shows
    (:attr:`WorkerRow.free`), so they cannot disagree. A negative ``measured_slots``
    (no count: another version's value, or one written by hand) is not reported, as
    :func:`worker_row` reads it and as :data:`CLAIMABLE_SQL` tests it."""
    free = slots - used
    if slots >= UNCAPPED_SLOTS:
        if headroom is not None and math.isfinite(headroom):
            free = min(free, math.ceil(headroom))
    elif measured_slots is not None and measured_slots >= 0:
        free = min(free, measured_slots - used)
    return max(0, free)


CLAIMABLE_SQL = (f"used < slots AND (slots >= {UNCAPPED_SLOTS} OR measured_slots IS NULL "
                 "OR measured_slots < 0 OR used < measured_slots)")
"""A ``voxflow_call_workers`` row may take one more call (the claim's condition): a free
slot by :func:`free_slots` but for an uncapped worker's headroom, which counts the
worker's own claims under way (the worker claims only as far as its measured slots go)."""


class _ReportFields(BaseModel):
    """The fields of what a call worker's heartbeat reports of its load, defined once:
    :class:`WorkerReport` (what the heartbeat writes) and :class:`WorkerRow` (what a
    row read back holds) are both made of them, so a field added here is written,
    read (:data:`REPORT_COLUMNS`) and shown. None: not known."""

    model_config = ConfigDict(frozen=True)

    headroom: float | None = None
    """Calls it would take now (its measured slots less the calls it holds and claims;
    0 while it refuses)."""
    measured_slots: int | None = Field(None, ge=0)
    """The calls its cores hold at the measured cost per call, at most ``--max-calls``."""
    call_cost: float | None = Field(None, ge=0, le=64)
    """Share of a core one call costs there (0.13: 13 %)."""
    prior_call_cost: float | None = Field(None, ge=0, le=64)
    """The cost of a call before one was measured."""
    cost_source: str | None = None
    """``measured``, ``models`` (derived from the models' warm-up) or ``prior``."""
    model_rtf: dict[str, float] = Field(default_factory=dict)
    """Each model's recent real-time factor (``stt``, ``tts``, ``vad``: wall seconds per
    second of audio; rises when its jobs wait for a core)."""
    p95_ms: float | None = Field(None, ge=0)
    """The recent voice-to-voice p95 of its turns."""
    refusal: str | None = None
    """Why it refuses calls now (None: it takes them)."""


class WorkerReport(_ReportFields):
    """What a call worker's heartbeat reports of its load (its admission's
    :class:`~voxflow_adapters.hosting.admission.Load`): what a front door counts (the
    headroom) and what an operator reads in ``voxflow status`` (what a call costs, where
    that figure comes from, why the worker refuses calls): the fields of
    :class:`_ReportFields`, checked (no NaN, no field of another version)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @classmethod
    def leniently(cls, fields: Mapping[str, Any]) -> tuple[WorkerReport, list[str]]:
        """A report of ``fields``, each one checked alone: one that fails its validation
        (a NaN, a negative cost, a shape this version does not read) is left out, not
        reported, and the others kept; with the names of those left out."""
        kept: dict[str, Any] = {}
        dropped: list[str] = []
        for name, value in fields.items():
            if value is None:
                continue
            try:
                kept[name] = getattr(cls.model_validate({name: value}), name)
            except ValidationError:
                dropped.append(name)
        return cls(**kept), dropped

    def params(self) -> dict[str, Any]:
        """The heartbeat statement's named parameters (``model_rtf`` as JSON text)."""
        values = self.model_dump()
        values["model_rtf"] = json.dumps(self.model_rtf) if self.model_rtf else None
        return values


REPORT_COLUMNS = tuple(name for name in _ReportFields.model_fields if name != "headroom")
"""The columns of ``voxflow_call_workers`` a heartbeat writes from the worker's
:class:`WorkerReport`, besides ``headroom``: its other fields."""

CORE_COLUMNS = ("worker_id", "host", "pid", "slots", "used", "headroom", "draining",
                "heartbeat_age", "kind")
"""The fields of :class:`WorkerRow` :func:`worker_row` reads first, in this order."""

_WARNED_MOST = 4096
"""The (worker, column) pairs :func:`worker_row` remembers having warned about, the
least recently read forgotten first: a fleet whose worker ids churn (each start a new
id) cannot grow it without end; a pair forgotten and read again is warned about again."""


class _WarnedOnce:
    """A bounded, thread-safe memory of the warnings given (least recently seen out)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, key: tuple[str, str]) -> bool:
        """Whether ``key`` is new (remembered from now on); a known one is refreshed."""
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            while len(self._seen) > self.most:
                self._seen.popitem(last=False)
            return True

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def __len__(self) -> int:
        return len(self._seen)


_warned = _WarnedOnce(_WARNED_MOST)


def worker_row(values: Sequence[Any]) -> WorkerRow:
    """A :class:`WorkerRow` from the values of :data:`CORE_COLUMNS` and then, if
    selected, :data:`REPORT_COLUMNS` (NULL: not reported). A report column this version
    cannot read (another version's shape, a bad value) counts as not reported, with one
    warning naming the worker and the column (the last 4,096 such pairs
    remembered): what callers do with the row (count, sweep, show) never fails on it.

    Raises:
        DispatchUnavailableError: a core column is not what this version's table holds.
    """
    core = dict(zip(CORE_COLUMNS, values[:len(CORE_COLUMNS)], strict=True))
    report, dropped = WorkerReport.leniently(
        dict(zip(REPORT_COLUMNS, values[len(CORE_COLUMNS):], strict=False)))
    for column in dropped:
        if _warned.first((str(core["worker_id"]), column)):
            logger.warning("call worker %s's %s in voxflow_call_workers is not what this "
                           "version reads (another version's?): read as not reported",
                           core["worker_id"], column)
    try:
        return WorkerRow(**core, **report.model_dump(exclude={"headroom"}))
    except ValidationError as exc:
        fields = ", ".join(str(e["loc"][0]) for e in exc.errors() if e["loc"])
        raise DispatchUnavailableError(
            f"the voxflow_call_workers row of worker {core['worker_id']!r} cannot be read "
            f"({fields}): is a newer or older voxflow's schema in use?") from None


class WorkerRow(_ReportFields):
    """A call worker as the database sees it: its core columns and the report's fields
    (:class:`_ReportFields`, as of its last heartbeat; None before its first, or from a
    worker of an older version; :func:`worker_row` reads a malformed one as None)."""

    model_config = ConfigDict(frozen=True)

    worker_id: str
    host: str
    pid: int
    slots: int
    used: int
    headroom: float | None
    """The headroom column (a core column: a worker of any version writes it)."""
    draining: bool
    heartbeat_age: float
    """Seconds since its last heartbeat (database clock)."""
    kind: str = "webrtc"
    """The calls it answers (one of :data:`CALL_KINDS`: ``webrtc`` or ``phone``)."""

    @property
    def uncapped(self) -> bool:
        """It was started with no ``--max-calls``: its slots are the measured headroom's."""
        return self.slots >= UNCAPPED_SLOTS

    @computed_field  # type: ignore[prop-decorator]  # (in --json too)
    @property
    def free(self) -> int:
        """The calls it can still be handed (:func:`free_slots`: for a ``--max-calls``
        worker whose measured slots are fewer, those less its calls), as a front door
        counts them."""
        return free_slots(self.slots, self.used, self.headroom, self.measured_slots)


class ClaimedOffer(BaseModel):
    """An offer this worker claimed (and holds a slot for)."""

    model_config = ConfigDict(frozen=True)

    offer_id: str
    sdp: str
    resume: str | None = Field(None, repr=False)
    """The ``resume`` object of the offer (JSON), if it goes on with a stored session."""
    traceparent: str | None = Field(None, repr=False)
    """The front door's trace context (W3C ``traceparent``), when it traces: the call's
    spans continue its trace."""


class OfferResult(BaseModel):
    """What became of an offer: answered (``answer_sdp``, ``call_id``), failed
    (``status``, ``error``), or still ``pending``/``claimed`` when the front door gave up."""

    model_config = ConfigDict(frozen=True)

    state: str
    worker_id: str | None = None
    answer_sdp: str | None = None
    call_id: str | None = None
    status: int | None = None
    error: str | None = None
