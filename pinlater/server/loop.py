"""The Thrift server: composition of the selector thread, the connection thread pool and the
request handling, plus graceful drain.

Concurrency model (see pinlater.server.connection for who owns a connection when):

- one selector thread (pinlater.server.reactor) accepts, enforces the connection limits
  (per peer, total, eviction of the idlest near the cap, slow connections), and holds every
  connection that is idle, half-way through a frame or a TLS handshake, or slow to take a reply;
- a pool of at most `connection_threads` threads (pinlater.server.pool) serves connections with
  a whole request in: each reads, runs and answers requests with plain blocking I/O and lingers
  `thread_linger_seconds` for the next one before giving the connection back. Idle connections
  thus cost no thread, and a half-sent frame never holds one;
- handler calls additionally take one of `worker_threads` slots, so storage never sees more
  concurrent requests than that however many clients are connected.

TLS (`settings.tls.enabled`): the handshake runs in non-blocking steps under one total
deadline (pinlater.server.tls); the selector waits for the peer, a pool thread does the crypto.

Hostile input: a bad frame length, a frame that arrives too slowly, an unreadable message
header or a failed handshake closes that connection; arguments that fail the wire check get a
PROTOCOL_ERROR reply (pinlater.server.transport). Every such rejection goes through `Rejections`:
counted by reason (pinlater_frames_rejected_total) and logged at most once per reason per 5 s;
so are refused and evicted connections (pinlater_connections_refused_total).

Shutdown (`request_shutdown`, safe to call from a signal handler): the accept loop stops and the
listening socket is closed; idle connections are closed right away; a connection with a request
in flight finishes it, writes the reply and then closes. `serve_forever` returns after every
connection is gone or `shutdown_grace_seconds` passed (True only in the first case).
"""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pinlater.config import ServerConfig
from pinlater.handler import context
from pinlater.server import tls
from pinlater.server.connection import Connection, current_connection
from pinlater.server.pool import ThreadPool
from pinlater.server.reactor import CONNECTION_REFUSAL_REASONS, Reactor
from pinlater.server.slots import FairSlots
from pinlater.server.transport import Dispatcher
from pinlater.server.wirecheck import REASONS as WIRE_REASONS

if TYPE_CHECKING:
    from pinlater.server.admission import Admission

__all__ = [
    "CONNECTION_REFUSAL_REASONS",
    "REJECT_REASONS",
    "Connection",
    "RateLimitedLog",
    "Rejections",
    "Server",
    "current_connection",
    "worker_slots",
]

log = logging.getLogger("pinlater.server")


class RateLimitedLog:
    """Logs a warning at most once per `interval` seconds per key, counting what it skipped."""

    def __init__(self, interval: float = 5.0):
        self._interval = interval
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -self._interval) < self._interval:
                self._skipped[key] = self._skipped.get(key, 0) + 1
                return
            self._last[key] = now
            skipped = self._skipped.pop(key, 0)
        suffix = f" ({skipped} similar messages suppressed)" if skipped else ""
        log.warning(msg + suffix, *args)


#: label values of pinlater_frames_rejected_total
REJECT_REASONS = (
    "frame_length",
    "frame_timeout",
    "malformed",
    "tls_handshake",
    "decode_error",
    "write_timeout",
) + WIRE_REASONS


class Rejections:
    """Where rejected input is reported: `count(reason)` (a metric) and a rate-limited log."""

    def __init__(
        self,
        count: Callable[[str], None] | None = None,
        warnings: RateLimitedLog | None = None,
        count_refused: Callable[[str], None] | None = None,
    ):
        """`count(reason)` counts rejected frames (REJECT_REASONS), `count_refused(reason)`
        refused or evicted connections (CONNECTION_REFUSAL_REASONS)."""
        self._count = count
        self._count_refused = count_refused
        self._warnings = warnings or RateLimitedLog()

    def reject(self, reason: str, peer: str, detail: object, closing: bool = True) -> None:
        if self._count is not None:
            self._count(reason)
        self._warnings.warning(
            f"reject:{reason}",
            "%s from %s (%s): %s",
            "closing connection" if closing else "rejected request",
            peer,
            reason,
            detail,
        )

    def refuse_connection(self, reason: str, peer: str, detail: str) -> None:
        """A connection refused at accept, or closed to make room (`reason` in
        CONNECTION_REFUSAL_REASONS)."""
        if self._count_refused is not None:
            self._count_refused(reason)
        verb = "refused" if reason in ("per_peer", "max_connections") else "closed"
        self._warnings.warning(f"refuse:{reason}", "connection from %s %s: %s", peer, verb, detail)

    def from_dispatcher(self, reason: str, detail: str) -> None:
        """The Dispatcher's `on_reject` hook (runs in the connection thread, which set the peer);
        the request is answered and the connection kept."""
        self.reject(reason, context.current_peer() or "?", detail, closing=False)


class Server:
    """Serves framed Thrift requests from a bound, listening socket until shut down."""

    def __init__(
        self,
        sock: socket.socket,
        settings: ServerConfig,
        dispatcher: Dispatcher,
        admission: Admission | None = None,
        rejections: Rejections | None = None,
    ):
        """`admission` (pinlater.server.admission) refuses requests over its caps at once. TLS is
        set up from `settings.tls` (raises OSError/ssl.SSLError if its files do not load)."""
        self.settings = settings
        self.dispatcher = dispatcher
        self.admission = admission
        self.worker_slots = worker_slots(settings.worker_threads)
        #: slots of enqueueJobs alone (None: enqueues share worker_slots)
        self.enqueue_slots = (
            worker_slots(settings.enqueue_worker_threads)
            if settings.enqueue_worker_threads and settings.role == "all"
            else None
        )
        self.warnings = RateLimitedLog()
        self.rejections = rejections or Rejections(warnings=self.warnings)
        self.tls_context = tls.server_context_from(settings.tls)
        #: how long a pool thread waits for a connection's next request before parking it
        self.linger = min(settings.thread_linger_seconds, settings.idle_timeout_seconds)
        self.pool = ThreadPool(settings.connection_threads)
        self._sock = sock
        self._sock.setblocking(False)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[Connection] = set()
        self._per_peer: dict[str, int] = {}
        #: called by the selector thread when the drain begins (answer parked requests)
        self.drain_hooks: list[Callable[[], None]] = []
        self.reactor = Reactor(self, sock)
        raise_fd_limit(settings.max_connections + settings.connection_threads + 256)

    @property
    def address(self) -> tuple[str, int]:
        return self._sock.getsockname()[:2]

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def request_shutdown(self) -> None:
        """Begin a graceful shutdown. Async-signal-safe enough: sets a flag and writes a pipe."""
        self._stopping.set()
        self.reactor.wake()

    def serve_forever(self) -> bool:
        """Serve until shutdown is requested, then drain. True if nothing was abandoned."""
        try:
            return self.reactor.run()
        finally:
            self._sock.close()
            self.pool.close()

    # ---- the connection table (any thread) ----

    def connection_count(self) -> int:
        with self._lock:
            return len(self._conns)

    def peer_connections(self, ip: str) -> int:
        with self._lock:
            return self._per_peer.get(ip, 0)

    def connections(self) -> list[Connection]:
        with self._lock:
            return list(self._conns)

    def stats(self) -> dict[str, int]:
        """Connections open, parked idle, slow; pool threads (for tests and benchmarks)."""
        return {"connections": self.connection_count(), **self.reactor.stats(), **self.pool.stats()}

    def add(self, conn: Connection) -> None:
        with self._lock:
            self._conns.add(conn)
            self._per_peer[conn.ip] = self._per_peer.get(conn.ip, 0) + 1

    def forget(self, conn: Connection) -> None:
        with self._lock:
            if conn not in self._conns:
                return
            self._conns.discard(conn)
            left = self._per_peer[conn.ip] - 1
            if left:
                self._per_peer[conn.ip] = left
            else:
                del self._per_peer[conn.ip]
        if self.stopping:
            self.reactor.wake()  # the drain waits for the last connection


def worker_slots(count: int) -> FairSlots:
    """`count` slots: get() one to run a handler call (blocks while none is left, served in
    arrival order), put() it back after (pinlater.server.slots)."""
    return FairSlots(count)


def raise_fd_limit(needed: int) -> None:
    """Raise the soft open-file limit towards `needed` (each connection is a descriptor);
    warn when the hard limit does not allow it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
        return
    if target < needed:
        log.warning(
            "open-file limit %d (hard) is below what server.max_connections needs (%d)",
            target,
            needed,
        )
