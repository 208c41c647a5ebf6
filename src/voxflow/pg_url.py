"""The PostgreSQL URL every voxflow store is given (``VOXFLOW_DATABASE_URL``): checked,
shown without its password, and the schema of voxflow's tables read from it.

:func:`check_database_url` says what is wrong with a URL (never echoing its password),
:func:`redact_url` hides the password for messages and logs, :func:`database_schema`
reads the first schema of the URL's ``search_path`` (where every store keeps its tables)
and :func:`connection_options` gives the libpq options a store connects with.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = [
    "check_database_url",
    "check_schema",
    "connection_options",
    "database_schema",
    "redact_url",
]


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: safe for messages and logs."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    secret_keys = ("password", "sslpassword")  # libpq also reads these from the query
    if parts.password is None and not any(k in secret_keys for k, _ in query):
        return url
    if parts.password is not None:
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{parts.netloc.rpartition('@')[2]}")
    hidden = [(k, "***" if k in secret_keys else v) for k, v in query]
    return urllib.parse.urlunsplit(
        parts._replace(query=urllib.parse.urlencode(hidden, safe="*"))
    )


def check_database_url(url: object) -> str:
    """``url`` if it is a usable PostgreSQL URL, else a ValueError saying what is wrong.

    Accepted: ``postgresql://`` or ``postgres://``, a host (or ``?host=`` for a socket
    directory), an optional port in 1..65535, an optional database name; no whitespace.
    The message never contains the password.
    """
    if not isinstance(url, str) or not url:
        raise ValueError("must be a non-empty postgresql:// URL")
    if len(url) > 2048 or any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("must be one line of at most 2048 characters, without spaces")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"is not a valid URL ({exc})") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("must start with postgresql:// (or postgres://)")
    query = urllib.parse.parse_qs(parts.query)
    if not parts.hostname and "host" not in query:
        raise ValueError("names no host (postgresql://user@host:5432/database)")
    if port is not None and not 1 <= port <= 65535:
        raise ValueError("has a port outside 1..65535")
    if parts.fragment:
        raise ValueError("must not have a #fragment")
    database_schema(url)
    return url


# -- the schema of voxflow's tables: the first of the URL's search_path -----------------

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SEARCH_PATH_FIX = ("name the schema of voxflow's tables first, e.g. "
                    "postgresql://user@host:5432/database?options=-csearch_path%3Dvoxflow")


def check_schema(schema: object) -> str:
    """``schema`` if it is a lower-case SQL identifier PostgreSQL lets us create.

    Raises:
        ValueError: it is not (or it is reserved: ``pg_*``).
    """
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError("schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*)")
    if schema.startswith("pg_"):
        raise ValueError("schema names starting with pg_ are reserved by PostgreSQL; "
                         "choose another (e.g. voxflow)")
    return schema


def _url_options(url: str) -> str:
    """The libpq ``options`` of ``url``'s query (percent-decoded as libpq does: ``+`` is
    not a space), the last one if repeated; empty when there is none."""
    found = ""
    for part in urllib.parse.urlsplit(url).query.split("&"):
        key, _, value = part.partition("=")
        if urllib.parse.unquote(key) == "options":
            found = urllib.parse.unquote(value)
    return found


def _words(options: str) -> list[str]:
    """libpq ``options`` split as the server splits them: on whitespace, a backslash
    escaping the next character."""
    words: list[str] = []
    word: list[str] = []
    escaped = started = False
    for char in options:
        if escaped:
            word.append(char)
            escaped = False
        elif char == "\\":
            escaped = started = True
        elif char.isspace():
            if started:
                words.append("".join(word))
                word, started = [], False
        else:
            word.append(char)
            started = True
    if started:
        words.append("".join(word))
    return words


def _split_search_path(options: str) -> tuple[list[str], str | None]:
    """The words of ``options`` without their ``search_path`` settings (``-c
    search_path=…``, ``-csearch_path=…``, ``--search_path=…``), and the value of the last
    one (which is the one the server applies), None when there is none."""
    words = _words(options)
    kept: list[str] = []
    path: str | None = None
    i = 0
    while i < len(words):
        word, used = words[i], 1
        setting: str | None = None
        if word == "-c" and i + 1 < len(words):
            setting, used = words[i + 1], 2
        elif word.startswith(("-c", "--")) and len(word) > 2:
            setting = word[2:]
        name, equals, value = (setting or "").partition("=")
        if equals and name.replace("-", "_").lower() == "search_path":
            path = value
        else:
            kept.extend(words[i:i + used])
        i += used
    return kept, path


def database_schema(url: str) -> str:
    """The schema every voxflow store keeps its tables in for the database ``url``: the
    first schema of the URL's ``search_path`` (``?options=-csearch_path%3Dvoxflow``),
    ``public`` when the URL sets none.

    Sessions and leases, the job queue, the job inbox and the call-dispatch tables all
    take it from here, so processes given the same URL always share their tables.

    Raises:
        ValueError: the ``search_path`` is empty, or starts with something voxflow cannot
            create its tables in (``"$user"``, an upper-case or quoted name, ``pg_*``); the
            message says the fix.
    """
    _, path = _split_search_path(_url_options(url))
    if path is None:
        return "public"
    first = path.split(",", 1)[0].strip()
    if not first:
        raise ValueError(f"sets an empty search_path: {_SEARCH_PATH_FIX}")
    if first.lower() in ("$user", '"$user"'):
        raise ValueError(f"has a search_path starting with $user, which names no one schema: "
                         f"{_SEARCH_PATH_FIX}")
    try:
        return check_schema(first)
    except ValueError as exc:
        raise ValueError(f"has a search_path starting with {first[:70]!r}: {exc}; "
                         f"{_SEARCH_PATH_FIX}") from None


def connection_options(url: str, schema: str) -> str:
    """The libpq ``options`` a voxflow store connects to ``url`` with: the URL's own
    options (``-c statement_timeout=…``, …) kept, and a ``search_path`` starting with
    ``schema`` (the URL's whole path when it starts there, else ``schema`` alone).

    A connection keyword replaces the URL's ``options`` (psycopg's ``make_conninfo``:
    keywords win), so a store passes this, never a bare ``-c search_path=``.
    """
    kept, path = _split_search_path(_url_options(url))
    if path is None or path.split(",", 1)[0].strip() != schema:
        path = schema
    words = [*kept, "-c", f"search_path={path}"]
    return " ".join(re.sub(r"([\\\s])", r"\\\1", word) for word in words)
