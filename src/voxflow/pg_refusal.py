"""A query PostgreSQL refused on a live connection, told apart from an unreachable server.

A connection that cannot be made or broke (the driver's error with no SQLSTATE, class 08,
the server ending or refusing connections: 57P01-57P03) is an outage: check the URL and
the server, or wait. A query the server refused on a live connection is not: a statement
or lock timeout, a missing privilege or table, a read-only server, a full disk. Saying
"check VOXFLOW_DATABASE_URL" for those sends the user to the wrong place.
:func:`refused` makes the error that names what failed (the SQLSTATE, its condition, the
server's message) and the fix for that class of failure.
"""

from __future__ import annotations

import re

from voxflow.errors import DatabaseRefusedError
from voxflow.pg_url import redact_url

__all__ = ["GONE_STATES", "refused"]

GONE_STATES = ("57P01", "57P02", "57P03")
"""The server's SQLSTATEs of a connection it ends or refuses (admin shutdown, crash
shutdown, cannot connect now); class 08 is the connection exceptions."""

_FIXES = {
    "57014": "the server cancelled the query: a statement_timeout shorter than the query "
             "(the role's, the database's, or the URL's options=-c statement_timeout=...; "
             "e.g. ALTER ROLE name SET statement_timeout = '60s', or 0 for none), or "
             "pg_cancel_backend",
    "55P03": "a lock_timeout ran out: another session holds a lock on these tables (find "
             "it in pg_locks and pg_stat_activity) or lock_timeout is too short",
    "25006": "the server is read-only (a standby, or default_transaction_read_only): point "
             "the URL at the primary",
    "42501": "the URL's role lacks a privilege: GRANT it the use of the schema and its "
             "tables, or use the role that created them",
    "53100": "the database server's disk is full: free space there",
    "53200": "the database server is out of memory",
}
_CLASS_FIXES = {
    "40": "a transaction conflict (a deadlock or serialization failure is run again a "
          "few times before this error: this one recurred on every try, or is not "
          "transient): find the other transactions in pg_stat_activity; report it",
    "42": "the schema is not what this version expects (a table or function missing or "
          "changed): start the process again to create it, or migrate after an upgrade",
    "53": "the database server is out of a resource (disk, memory, connections)",
    "54": "the server's configured limits were exceeded (max_locks_per_transaction, ...)",
}
_OTHER = "an error of voxflow's query or data: report it with the SQLSTATE"


def _condition(exc: BaseException) -> str:
    """``QueryCanceled`` -> ``query_canceled`` (psycopg names its error classes after the
    server's condition names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


def refused(exc: BaseException, *, url: str, what: str) -> DatabaseRefusedError | None:
    """The error saying the server refused ``what`` (a query, e.g. "the fetch of the next
    job"), for ``exc`` (a psycopg error) refused on a live connection; None for anything
    else (no connection in time, a connection that failed or broke: an outage; not a
    psycopg error). ``url`` is shown without its password."""
    # here: psycopg is the optional voxflow[postgres] extra (``exc`` is its error)
    import psycopg

    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate
    if state is None or state.startswith("08") or state in GONE_STATES:
        return None
    lines = str(exc).replace(url, redact_url(url)).strip().splitlines()  # (no CONTEXT)
    message = " ".join(lines[0].split()) if lines else type(exc).__name__
    condition = _condition(exc)
    fix = _FIXES.get(state) or _CLASS_FIXES.get(state[:2], _OTHER)
    # here: pg_retry needs no driver (and imports nothing of this module)
    from voxflow.pg_retry import CONFLICT_TRIES, conflict_tries_spent

    tried = (f"; it recurred on all {CONFLICT_TRIES} tries" if conflict_tries_spent(exc)
             else "")
    return DatabaseRefusedError(
        f"the database refused {what}: {message[:300]} (SQLSTATE {state} {condition}; the "
        f"server is reachable{tried})", path=redact_url(url), fix=fix, sqlstate=state,
        condition=condition)
