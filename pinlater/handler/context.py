"""The client address of the request being handled, per thread.

The network loop runs each request on the connection's thread and calls `set_peer` once per
connection; observers (request logs, rejections) read it back with `current_peer`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_local = threading.local()


def set_peer(peer: str | None) -> None:
    """Record the current thread's client address (`host:port`)."""
    _local.peer = peer


def current_peer() -> str | None:
    return getattr(_local, "peer", None)


def allow_deferred(allowed: bool, peer_alive: Callable[[], bool] | None = None) -> None:
    """The dispatcher of the current thread can send a reply later (`Deferred`): a long-poll
    dequeue then parks without holding the thread. Otherwise it waits in the thread.
    `peer_alive()` tells whether the client is still connected (a parked request whose client
    left is not served: no job is claimed for nobody)."""
    _local.deferred = allowed
    _local.peer_alive = peer_alive if allowed else None


def deferred_allowed() -> bool:
    return getattr(_local, "deferred", False)


def peer_alive_check() -> Callable[[], bool] | None:
    return getattr(_local, "peer_alive", None)
