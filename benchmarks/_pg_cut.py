"""A TCP proxy on loopback in front of a PostgreSQL server that breaks a
connection at its next ``COMMIT``: before the server sees it (nothing is written) or
after the server committed it, its answer never delivered (the write made, the client
left not knowing). What a network cut or a server crash at the worst moment does, made
exact: ``pg_terminate_backend`` cannot pick the instant between a commit and its answer.

The COMMIT cut may also wait for a given statement: the one whose server answer holds
given bytes (:meth:`CommitCut.arm_after_answer`), its transaction's COMMIT made and its
answer dropped.

Connections through it go unencrypted (``sslmode=disable``) so it can read the
statements it forwards.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.parse
from typing import Literal

__all__ = ["CommitCut"]

Mode = Literal["before", "after"]


class CommitCut:
    """The proxy (a context manager: it listens from ``__enter__`` to ``__exit__``).

    Args:
        url: the PostgreSQL URL to put the proxy in front of.

    Attributes:
        url: the same database through the proxy.
        cuts: connections broken so far.
    """

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{port}"
        joined = f"{netloc[0]}@{host}" if len(netloc) == 2 else host
        query = f"{parts.query}&sslmode=disable" if parts.query else "sslmode=disable"
        self.url = urllib.parse.urlunsplit(parts._replace(netloc=joined, query=query))
        self.cuts = 0
        self._lock = threading.Lock()
        self._armed: Mode | None = None
        self._refusing = False
        self._cut = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self._refuse_after = False
        self._server_unaware = False
        # the server sockets whose next COMMIT answer is dropped (and the connection cut)
        self._after: set[socket.socket] = set()
        # the bytes a server answer must hold (each) for its connection's next COMMIT
        # answer to be dropped (and the connection cut)
        self._answer: tuple[bytes, ...] = ()

    def arm(self, mode: Mode, *, then_refuse: bool = False, server_unaware: bool = False
            ) -> None:
        """Break the next connection that sends a ``COMMIT``: ``before`` it reaches the
        server, or ``after`` the server answered it (the answer dropped). With
        ``then_refuse``, new connections are refused from the cut on (as a server that
        went away), until :meth:`accept`. With ``server_unaware`` (``before`` only), the
        server's side of the connection stays open, as when a network drops packets
        rather than connections: its transaction goes on, in progress."""
        with self._lock:
            self._armed = mode
            self._refuse_after = then_refuse
            self._server_unaware = server_unaware
            self._cut.clear()

    def arm_after_answer(self, *holding: bytes) -> None:
        """Break the next connection whose server answer (one read of it) holds every one
        of ``holding`` at its next ``COMMIT``, after the server made it (its answer
        dropped)."""
        if not holding:
            raise ValueError("arm_after_answer needs the bytes the answer holds")
        with self._lock:
            self._answer = holding
            self._cut.clear()

    def accept(self) -> None:
        """Accept new connections again."""
        with self._lock:
            self._refusing = False

    def wait_cut(self, seconds: float = 30.0) -> bool:
        """Whether the armed cut happened (waiting up to ``seconds``)."""
        return self._cut.wait(seconds)

    def __enter__(self) -> CommitCut:
        thread = threading.Thread(target=self._serve, daemon=True, name="pg-cut")
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        with self._lock:
            for sock in list(self._open):
                _close(sock)

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                _close(client)
                continue
            try:
                server = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
            for source, sink, upstream in ((client, server, True), (server, client, False)):
                thread = threading.Thread(target=self._pump, args=(source, sink, upstream),
                                          daemon=True, name="pg-cut.pump")
                thread.start()

    def _pump(self, source: socket.socket, sink: socket.socket, upstream: bool) -> None:
        """Forward ``source`` to ``sink``; ``upstream``: client → server."""
        pair = [source, sink]
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if upstream and b"COMMIT" in data:
                    with self._lock:
                        mode, self._armed = self._armed, None
                    if mode == "before":
                        self._broke()
                        if self._server_unaware:  # (its server side left open)
                            pair.remove(sink)
                        break
                    if mode == "after":
                        self._after.add(sink)
                if not upstream and self._answer and all(b in data for b in self._answer):
                    with self._lock:
                        holding, self._answer = self._answer, ()
                    if holding:
                        self._after.add(source)
                if not upstream and source in self._after and b"COMMIT\x00" in data:
                    self._after.discard(source)
                    self._broke()
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                for sock in pair:
                    self._open.discard(sock)
            for sock in pair:
                _close(sock)

    def _broke(self) -> None:
        with self._lock:
            self.cuts += 1
            if self._refuse_after:
                self._refusing = True
        self._cut.set()


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
