"""The client address of the request being handled, per thread.

The network loop runs each request on the connection's thread and calls `set_peer` once per
connection; observers (request logs, rejections) read it back with `current_peer`.
"""

from __future__ import annotations

import threading

_local = threading.local()


def set_peer(peer: str | None) -> None:
    """Record the current thread's client address (`host:port`)."""
    _local.peer = peer


def current_peer() -> str | None:
    return getattr(_local, "peer", None)
