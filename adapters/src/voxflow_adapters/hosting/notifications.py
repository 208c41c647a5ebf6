"""LISTEN on PostgreSQL for the dispatch tables: a connection of its own per channel,
made again when it breaks.

A notification only wakes its reader: the table is the truth, so a notification missed
while a connection was down costs one read of the table (``on_reconnect``), never an
offer or an answer. Channels are database-wide, so each is named per schema
(:func:`channel_name`).

Needs the ``postgres`` extra (``pip install 'voxflow[postgres]'``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = ["Listeners", "channel_name"]

# the dispatch store's log: a broken listener is one of its connections
logger = logging.getLogger("voxflow_adapters.hosting.dispatch")


def channel_name(kind: str, schema: str) -> str:
    """A NOTIFY channel per schema (channels are database-wide; identifiers <= 63)."""
    return f"voxflow_{kind}_{hashlib.sha1(schema.encode()).hexdigest()[:16]}"


class Listeners:
    """The LISTEN connections of one store, each read by a task of its own.

    Args:
        url: the database's ``postgresql://`` URL.
        connect_options: the psycopg options of each connection.
        connect_timeout: seconds to wait for the server.
        unavailable: the error raised when the first connection of a channel fails, made
            from the driver's error.
    """

    def __init__(self, url: str, *, connect_options: dict[str, Any], connect_timeout: float,
                 unavailable: Callable[[BaseException], Exception]) -> None:
        self._url = url
        self._connect_options = connect_options
        self._connect_timeout = connect_timeout
        self._unavailable = unavailable
        self._open: list[psycopg.AsyncConnection[Any]] = []

    async def listen(self, channel: str, on_notify: Callable[[str], None],
                     on_reconnect: Callable[[], None] | None = None) -> Any:
        """A task calling ``on_notify(payload)`` for every notification on ``channel``
        (its own connection, closed by :meth:`aclose`). Returns the task.

        A connection that breaks (a reset, a restarted server) is made again, after
        0.25 s, then up to every 2 s while the server is unreachable; then
        ``on_reconnect()`` is called: notifications sent meanwhile were missed (read the
        table).

        Raises:
            Exception: ``unavailable``'s error: the first connection could not be made.
        """
        # the optional voxflow[postgres] extra
        import psycopg

        conn = await self._listening(channel)
        self._open.append(conn)

        async def pump() -> None:
            nonlocal conn
            while True:
                try:
                    async for notify in conn.notifies():
                        on_notify(notify.payload)
                except psycopg.Error as exc:
                    if conn not in self._open:
                        return  # closed by aclose
                    logger.warning("dispatch: the listener on %s broke (%s); listening again",
                                   channel, type(exc).__name__)
                replaced = await self._listen_again(channel, conn)
                if replaced is None:
                    return
                conn = replaced
                if on_reconnect is not None:
                    on_reconnect()

        return asyncio.get_running_loop().create_task(pump(), name=f"listen.{channel}")

    async def aclose(self) -> None:
        """Close every listening connection (their tasks then end)."""
        listeners, self._open = self._open, []
        for conn in listeners:
            await conn.close()

    async def _listening(self, channel: str) -> psycopg.AsyncConnection[Any]:
        """A new connection listening on ``channel``."""
        # the optional voxflow[postgres] extra
        import psycopg

        try:
            return await self._connect(channel)
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None

    async def _connect(self, channel: str) -> psycopg.AsyncConnection[Any]:
        # the optional voxflow[postgres] extra
        import psycopg

        conn = await psycopg.AsyncConnection.connect(
            self._url, connect_timeout=max(1, int(self._connect_timeout)),
            **self._connect_options)
        await conn.execute(f'LISTEN "{channel}"')
        return conn

    async def _listen_again(self, channel: str, broken: psycopg.AsyncConnection[Any]
                            ) -> psycopg.AsyncConnection[Any] | None:
        """``broken``'s replacement, once the server takes one (None: closed meanwhile)."""
        # the optional voxflow[postgres] extra
        import psycopg

        delay = 0.25
        while broken in self._open:
            await asyncio.sleep(delay)
            try:
                conn = await self._connect(channel)
            except psycopg.Error:
                delay = min(delay * 2, 2.0)
                continue
            if broken not in self._open:  # closed while it connected
                await conn.close()
                return None
            self._open[self._open.index(broken)] = conn
            await broken.close()
            return conn
        return None
