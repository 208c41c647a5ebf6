"""Create voxflow's PostgreSQL tables without locking the ones already there.

Every process opening a store (the session store, the job inbox, the call dispatch)
makes sure its tables exist. ``CREATE INDEX IF NOT EXISTS`` takes a SHARE lock on its
table *before* it finds the index there, so a process starting while others write
waited behind their open transactions, and two tables locked in opposite orders were a
deadlock: PostgreSQL aborted one side, the starting process's setup or a running
worker's save. :func:`ensure_tables` runs the DDL only when one of its relations is
missing (first start, or an upgrade that adds one) or one of the columns it adds
(``ALTER TABLE t ADD COLUMN IF NOT EXISTS c ...``: an upgrade that adds a column to a
table an older version made), under the schema's advisory lock, with a bound on any
lock wait (the DDL's own locks are taken only then); when all are there it reads the
catalog and locks nothing.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["aensure_tables", "columns_of", "ensure_tables", "relations_of"]

_NAMED = re.compile(r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)",
                    re.IGNORECASE)
_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '30s'"  # a lock never comes: an error, not a hang
_ADVISORY = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_PRESENT = ("SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s)")
_COLUMNS = ("SELECT count(*) FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c "
            "ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND NOT a.attisdropped AND a.attnum > 0 "
            "AND c.relname || '.' || a.attname = ANY(%s)")
_ADDED = re.compile(r"ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+IF\s+NOT\s+EXISTS\s+(\w+)",
                    re.IGNORECASE)
_ALTER = re.compile(r"\bALTER\s", re.IGNORECASE)
_ADD = re.compile(r"\bADD\s", re.IGNORECASE)


_CREATE = re.compile(r"\bCREATE\s", re.IGNORECASE)


def relations_of(ddl: str) -> tuple[str, ...]:
    """The tables and indexes ``ddl`` creates (``CREATE TABLE|INDEX IF NOT EXISTS name``),
    lower-cased as PostgreSQL folds an unquoted name.

    Raises:
        ValueError: a ``CREATE`` this cannot name (another kind, a quoted or qualified
            name, no ``IF NOT EXISTS``), or none at all: the check would pass forever
            and the DDL never run.
    """
    names = _NAMED.findall(ddl)
    unnamed = len(_CREATE.findall(ddl)) - len(names)
    if not names or unnamed or any(ddl[m.end()] == "." for m in _NAMED.finditer(ddl)):
        raise ValueError("schema DDL must be CREATE TABLE|INDEX IF NOT EXISTS <plain name>; "
                         "statements: " + " | ".join(_CREATE.split(ddl)[1:]).strip()[:200])
    return tuple(dict.fromkeys(name.lower() for name in names))


def columns_of(ddl: str) -> tuple[str, ...]:
    """The columns ``ddl`` adds (``ALTER TABLE t ADD COLUMN IF NOT EXISTS c ...``), as
    ``"t.c"``, lower-cased as PostgreSQL folds an unquoted name.

    Raises:
        ValueError: an ``ALTER`` this cannot name (another kind, a quoted or qualified
            name, no ``IF NOT EXISTS``, a second ``ADD`` in one statement): the check
            would not see it missing.
    """
    found = _ADDED.findall(ddl)
    if not len(_ALTER.findall(ddl)) == len(_ADD.findall(ddl)) == len(found):
        raise ValueError("schema DDL may ALTER only as ALTER TABLE <plain name> ADD COLUMN IF "
                         "NOT EXISTS <plain name>; statements: "
                         + " | ".join(_ALTER.split(ddl)[1:]).strip()[:200])
    return tuple(dict.fromkeys(f"{table}.{column}".lower() for table, column in found))


def _complete(relations: Any, columns: Any, names: list[str], added: list[str]) -> bool:
    return (relations is not None and relations[0] == len(names)
            and (not added or (columns is not None and columns[0] == len(added))))


def ensure_tables(conn: Any, schema: str, ddl: str) -> bool:
    """Run ``ddl`` (create its tables, add its columns) in ``schema`` through the psycopg
    connection ``conn``, in the transaction the caller opened, only if a relation it
    creates or one of the columns it adds is missing.

    Returns:
        Whether ``ddl`` ran.
    """
    conn.execute(_LOCK_TIMEOUT)
    conn.execute(_ADVISORY, (f"voxflow-schema:{schema}",))
    names, added = list(relations_of(ddl)), list(columns_of(ddl))
    row = conn.execute(_PRESENT, (schema, names)).fetchone()
    columns = conn.execute(_COLUMNS, (schema, added)).fetchone() if added else None
    if _complete(row, columns, names, added):
        return False
    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    conn.execute(ddl)
    return True


async def aensure_tables(conn: Any, schema: str, ddl: str) -> bool:
    """:func:`ensure_tables` through a psycopg ``AsyncConnection``."""
    await conn.execute(_LOCK_TIMEOUT)
    await conn.execute(_ADVISORY, (f"voxflow-schema:{schema}",))
    names, added = list(relations_of(ddl)), list(columns_of(ddl))
    row = await (await conn.execute(_PRESENT, (schema, names))).fetchone()
    columns = (await (await conn.execute(_COLUMNS, (schema, added))).fetchone() if added
               else None)
    if _complete(row, columns, names, added):
        return False
    await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    await conn.execute(ddl)
    return True
