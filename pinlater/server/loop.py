"""The accept loop, per-connection threads and graceful drain of the Thrift server.

Concurrency model: one daemon thread per connection, at most `max_connections` of them (a
connection beyond the cap is accepted and closed at once, so the client fails fast instead of
hanging in the listen backlog). Handler calls additionally take one of `worker_threads` slots,
so storage never sees more concurrent requests than that however many clients are connected.

TLS (`settings.tls.enabled`): the accept loop never does TLS work; each connection thread wraps
its socket and completes the handshake under one total deadline (pinlater.server.tls), so a silent
client cannot stall anyone else's handshake.

Hostile input: a bad frame length, a frame that arrives too slowly, an unreadable message
header or a failed handshake closes that connection; arguments that fail the wire check get a
PROTOCOL_ERROR reply (pinlater.server.transport). Every such rejection goes through `Rejections`:
counted by reason (pinlater_frames_rejected_total) and logged at most once per reason per 5 s.

Shutdown (`request_shutdown`, safe to call from a signal handler): the accept loop stops and the
listening socket is closed; idle connections are closed right away; a connection with a request
in flight finishes it, writes the reply and then closes. `serve_forever` returns after every
connection is gone or `shutdown_grace_seconds` passed (True only in the first case).
"""

from __future__ import annotations

import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pinlater.config import ServerConfig
from pinlater.handler import context
from pinlater.server import tls
from pinlater.server.transport import (
    Dispatcher,
    FrameError,
    FrameReader,
    FrameTimeout,
    MalformedRequest,
    PeerClosed,
    frame,
    set_timeout,
)
from pinlater.server.wirecheck import REASONS as WIRE_REASONS

if TYPE_CHECKING:
    from pinlater.server.admission import Admission

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
) + WIRE_REASONS


class Rejections:
    """Where rejected input is reported: `count(reason)` (a metric) and a rate-limited log."""

    def __init__(
        self, count: Callable[[str], None] | None = None, warnings: RateLimitedLog | None = None
    ):
        self._count = count
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
        self.warnings = RateLimitedLog()
        self.rejections = rejections or Rejections(warnings=self.warnings)
        self.tls_context = tls.server_context_from(settings.tls)
        self._sock = sock
        self._sock.setblocking(False)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stopping = threading.Event()
        self._cond = threading.Condition()
        self._conns: set[Connection] = set()

    @property
    def address(self) -> tuple[str, int]:
        return self._sock.getsockname()[:2]

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def request_shutdown(self) -> None:
        """Begin a graceful shutdown. Async-signal-safe enough: sets a flag and writes a pipe."""
        self._stopping.set()
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def serve_forever(self) -> bool:
        """Accept until shutdown is requested, then drain. True if nothing was abandoned."""
        try:
            self._accept_loop()
        finally:
            self._sock.close()
        drained = self._drain(self.settings.shutdown_grace_seconds)
        os.close(self._wake_r)
        os.close(self._wake_w)
        return drained

    def connection_count(self) -> int:
        with self._cond:
            return len(self._conns)

    # ---- accepting ----
    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:  # epoll: no FD_SETSIZE limit
            selector.register(self._sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                selector.select()
                if self._stopping.is_set():
                    return
                self._accept_one()

    def _accept_one(self) -> None:
        try:
            conn, addr = self._sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:  # e.g. EMFILE: back off instead of spinning
            self.warnings.warning("accept", "accept failed: %s", exc)
            self._stopping.wait(0.05)
            return
        self._admit(conn, addr)

    def _admit(self, sock: socket.socket, addr: tuple) -> None:
        with self._cond:
            full = len(self._conns) >= self.settings.max_connections
            if not full:
                conn = Connection(self, sock, addr)
                self._conns.add(conn)
        if full:
            self.warnings.warning(
                "cap",
                "connection from %s refused: max_connections (%d) reached",
                _peer(addr),
                self.settings.max_connections,
            )
            sock.close()
            return
        thread = threading.Thread(target=conn.run, name=f"conn-{_peer(addr)}", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # out of threads: refuse this client, keep serving
            self.warnings.warning("thread", "connection from %s refused: %s", _peer(addr), exc)
            self.forget(conn)
            sock.close()

    def forget(self, conn: Connection) -> None:
        with self._cond:
            self._conns.discard(conn)
            self._cond.notify_all()

    # ---- draining ----
    def _drain(self, grace: float) -> bool:
        deadline = time.monotonic() + grace
        with self._cond:
            conns = list(self._conns)
        for conn in conns:
            conn.close_if_idle()
        with self._cond:
            while self._conns:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            left = list(self._conns)
        if left:
            log.warning(
                "shutdown grace of %.1fs passed with %d connection(s) still busy; closing them",
                grace,
                len(left),
            )
            for conn in left:
                conn.force_close()
        return not left


class Connection:
    """One client connection: read a frame, dispatch it, write the reply, repeat."""

    def __init__(self, server: Server, sock: socket.socket, addr: tuple):
        self.server = server
        self.sock = sock
        self.peer = _peer(addr)
        self._lock = threading.Lock()
        self._idle = False
        self._closed = False

    def run(self) -> None:
        settings = self.server.settings
        context.set_peer(self.peer)
        reject = self.server.rejections.reject
        try:
            self.sock.settimeout(None)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.server.tls_context is not None and not self._start_tls():
                return
            reader = FrameReader(self.sock, settings.max_frame_bytes, self._mark_busy)
            while self._mark_idle():
                payload = reader.read_frame(
                    settings.idle_timeout_seconds, settings.frame_read_timeout_seconds
                )
                if payload is None:
                    break
                self._serve_one(payload, settings.frame_read_timeout_seconds)
        except FrameError as exc:
            reject("frame_length", self.peer, exc)
        except MalformedRequest as exc:
            reject("malformed", self.peer, exc)
        except FrameTimeout as exc:
            reject("frame_timeout", self.peer, exc)
        except (PeerClosed, OSError) as exc:
            log.debug("connection from %s ended: %s", self.peer, exc)
        except Exception:
            log.exception("unexpected error on connection from %s", self.peer)
        finally:
            self._close()
            self.server.forget(self)

    def _start_tls(self) -> bool:
        """Wrap the socket and complete the handshake under its deadline (counted as idle, so
        a shutdown closes it at once). False when it failed; the caller then closes."""
        with self._lock:
            context = self.server.tls_context
            if self._closed or self.server.stopping or context is None:
                return False
            self.sock = tls.wrap_server_side(self.sock, context)
            self._idle = True
        try:
            tls.handshake(self.sock, self.server.settings.tls.handshake_timeout_seconds)
        except tls.HandshakeError as exc:
            self.server.rejections.reject("tls_handshake", self.peer, exc)
            return False
        return True

    def _serve_one(self, payload: bytes, send_timeout: float) -> None:
        admission = self.server.admission
        if admission is None:
            reply = self._dispatch(payload)
        else:
            reply = admission.serve(payload, lambda: self._dispatch(payload))
        set_timeout(self.sock, send_timeout)
        self.sock.sendall(frame(reply))

    def _dispatch(self, payload: bytes) -> bytes:
        slots = self.server.worker_slots
        slots.get()
        try:
            return self.server.dispatcher.dispatch(payload)[1]
        finally:
            slots.put(None)

    def _mark_idle(self) -> bool:
        """Called between frames; False (stop) once the server is shutting down."""
        with self._lock:
            if self.server.stopping or self._closed:
                return False
            self._idle = True
            return True

    def _mark_busy(self) -> None:
        with self._lock:
            if self._closed:
                raise PeerClosed("connection closed by server shutdown")
            self._idle = False

    def close_if_idle(self) -> None:
        """Shutdown: unblock an idle read (the thread then exits); leave busy ones alone."""
        with self._lock:
            if self._idle:
                self._shutdown_socket()

    def force_close(self) -> None:
        with self._lock:
            self._shutdown_socket()

    def _shutdown_socket(self) -> None:
        self._closed = True
        try:  # the plain socket's shutdown, also under TLS (no close_notify from this thread)
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def _close(self) -> None:
        with self._lock:
            self._closed = True
        self.sock.close()


def worker_slots(count: int) -> queue.SimpleQueue:
    """`count` tokens: get() one to run a handler call (blocks while none is left), put() it
    back after. A semaphore, but in C: threading.Semaphore costs ~2 us per request here."""
    slots: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(count):
        slots.put(None)
    return slots


def _peer(addr: tuple) -> str:
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)
