"""Hosting calls: what every transport that answers calls shares, WebRTC or the next one.

A call and its session (:mod:`.calls`), admission by measured headroom
(:mod:`.admission`) from what a call costs on this machine (:mod:`.call_cost`), the
session lease and its fencing (:mod:`.ownership`), a call's saves held back while its
store is unreachable (:mod:`.deferred_saves`), resuming a call on another worker
(:mod:`.resume`), handing offers through the database (:mod:`.dispatch`, its tables
:mod:`.dispatch_tables`) to call workers (:mod:`.worker`, their heartbeat
:mod:`.heartbeat`), a hosting process's lifetime (:mod:`.process`: its stop signals, a
worker's store and engines), the wire format of requests (:mod:`.wire`) and TLS
(:mod:`.tls`). Nothing here imports a transport; every transport may import it.
"""

__all__: list[str] = []
