"""A front door (``voxflow serve --front-door``): the page and ``POST /offer``, with the
offer handed to a call worker through PostgreSQL.

The HTTP contract, the token and the Origin checks are those of ``voxflow serve``
(:class:`~voxflow_adapters.webrtc.server.SignalingServer`). A valid offer is posted to
the offers table (:mod:`~voxflow_adapters.hosting.dispatch`); a call worker with a free
slot claims it and writes its answer, whose ICE candidates are the worker's: the media
go between the caller and that worker, never through the front door. The front door
holds no call state, so any number of them can serve one database (behind any load
balancer, no sticky sessions).

Refusals are immediate when no live worker has a free slot (503, saying so; when none is
registered in this front door's schema but live ones are in another, the 503 says the
processes do not share one ``VOXFLOW_DATABASE_URL`` and the log names the schemas), and after
``offer_timeout`` seconds when no worker answered (503): the offer is then withdrawn, and
a worker that answers late ends the call it started
(:class:`~voxflow_adapters.hosting.dispatcher.Dispatcher`, shared with the phone's front
door).
"""

from __future__ import annotations

import logging

from ..hosting.dispatch import DispatchStore
from ..hosting.dispatcher import Dispatcher
from ..hosting.wire import ResumeRequest
from .signaling import (
    DEFAULT_SERVER_SETTINGS,
    OfferAnswer,
    ServerSettings,
    SignalingServer,
)

__all__ = ["FrontDoor"]

logger = logging.getLogger(__name__)


class FrontDoor(SignalingServer):
    """The page and signalling, with calls answered by call workers.

    Args:
        store: the dispatch tables.
        settings: bind address, token, Origin rules, size limits (``max_calls`` is not
            used: the workers' slots are).
        offer_timeout: how long (s) an offer waits for a worker's answer.
        poll_interval: seconds between looks at the offer's row when no ``NOTIFY`` came.
        purge_interval: seconds between purges of offers expired a minute ago (see
            :class:`~voxflow_adapters.hosting.dispatcher.Dispatcher`).
    """

    def __init__(
        self, store: DispatchStore, *, settings: ServerSettings = DEFAULT_SERVER_SETTINGS,
        offer_timeout: float = 10.0, poll_interval: float = 0.5, purge_interval: float = 60.0,
    ) -> None:
        super().__init__(settings=settings)
        self.dispatcher = Dispatcher(store, offer_timeout=offer_timeout,
                                     poll_interval=poll_interval,
                                     purge_interval=purge_interval)
        self.store = store

    @property
    def dispatched(self) -> int:
        """Offers answered by a worker so far."""
        return self.dispatcher.dispatched

    async def start(self) -> str:
        """Connect to the database, listen for answers, then serve HTTP.

        Raises:
            DispatchUnavailableError: the database cannot be used.
        """
        await self.dispatcher.start()
        return await super().start()

    async def aclose(self) -> None:
        """Stop serving and close the database connections."""
        await super().aclose()
        await self.dispatcher.aclose()

    async def answer_offer(self, sdp: str, resume: ResumeRequest | None = None) -> OfferAnswer:
        """Hand ``sdp`` (and ``resume``: the stored session it goes on with, checked by
        the worker) to a call worker and return its answer.

        Raises:
            CallRefused: 503 when no live worker has a free slot, none answered in time
                or the database is unreachable; the worker's own refusal otherwise.
        """
        result = await self.dispatcher.request(
            sdp, None if resume is None else resume.model_dump_json())
        assert result.answer_sdp is not None and result.call_id is not None
        return OfferAnswer(sdp=result.answer_sdp, call_id=result.call_id)

    def __repr__(self) -> str:
        return (f"FrontDoor({self.settings.host}:{self.port}, dispatched={self.dispatched}, "
                f"rejected={sum(self._rejected.values())})")
