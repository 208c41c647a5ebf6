"""WebRTC browser calls: ``voxflow serve``.

A person opens the page, clicks *Connect*, and talks to a voxflow assistant with
barge-in, over WebRTC (aiortc on the server, the browser's own WebRTC on the page).

* :class:`WebRtcServer` / :func:`serve`: the aiohttp app (page + ``POST /offer``);
* :class:`WebRtcPeer`: one call's ``RTCPeerConnection``, an ``AudioTransport``;
* :mod:`~voxflow_adapters.webrtc.protocol`: the versioned data-channel messages, read by
  the strict :mod:`~voxflow_adapters.hosting.wire` reader (also the ``/offer`` body);
* :mod:`~voxflow_adapters.hosting.tls`: HTTPS certificates (given or self-signed);
* :func:`assistant_call_factory` / :func:`flow_call_factory`: what each call runs;
* :mod:`~voxflow_adapters.hosting.ownership` / :mod:`~voxflow_adapters.hosting.resume`: a
  call's lease on its session, and resuming it after a drop (:class:`CallSession`).
"""

from ..hosting.calls import WEBRTC_VOICE_SETTINGS as WEBRTC_VOICE_SETTINGS
from ..hosting.calls import Call as Call
from ..hosting.calls import CallFactory as CallFactory
from ..hosting.calls import CallSession as CallSession
from ..hosting.calls import assistant_call_factory as assistant_call_factory
from ..hosting.calls import flow_call_factory as flow_call_factory
from ._ice import host_addresses as host_addresses
from ._ice_url import IceUrlError as IceUrlError
from ._ice_url import check_ice_url as check_ice_url
from .outbound import OutboundAudio as OutboundAudio
from .outbound import OutboundStatistics as OutboundStatistics
from .outbound import ReplyTrack as ReplyTrack
from .peer import DEFAULT_PEER_SETTINGS as DEFAULT_PEER_SETTINGS
from .peer import IceServer as IceServer
from .peer import PeerSettings as PeerSettings
from .peer import PeerStatistics as PeerStatistics
from .peer import WebRtcPeer as WebRtcPeer
from .protocol import PROTOCOL_VERSION as PROTOCOL_VERSION
from .server import DEFAULT_SERVER_SETTINGS as DEFAULT_SERVER_SETTINGS
from .server import ServerSettings as ServerSettings
from .server import ServerStatistics as ServerStatistics
from .server import WebRtcServer as WebRtcServer
from .server import serve as serve

__all__ = [
    "DEFAULT_PEER_SETTINGS",
    "DEFAULT_SERVER_SETTINGS",
    "PROTOCOL_VERSION",
    "WEBRTC_VOICE_SETTINGS",
    "Call",
    "CallFactory",
    "CallSession",
    "IceServer",
    "IceUrlError",
    "OutboundAudio",
    "OutboundStatistics",
    "PeerSettings",
    "PeerStatistics",
    "ReplyTrack",
    "ServerSettings",
    "ServerStatistics",
    "WebRtcPeer",
    "WebRtcServer",
    "assistant_call_factory",
    "check_ice_url",
    "flow_call_factory",
    "host_addresses",
    "serve",
]
