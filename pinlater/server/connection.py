"""One client connection: its socket, frame reader and state, and what a pool thread does for it.

At any moment a connection is owned by exactly one party, named by its `state`:

- a pool thread (ACTIVE): reads a frame, runs it, writes the reply, and may linger for the next
  request (pinlater.server.pool decides whether it may). The socket has the linger as its
  timeout, so a request that arrives in one piece costs one poll+recv and one poll+send.
- the selector thread (pinlater.server.reactor), with a non-blocking socket: IDLE (between
  requests), READING (a frame started and not finished), WRITING (a reply the peer has not
  taken yet), HANDSHAKE (TLS, waiting on the peer). None of these holds a thread.
- nobody (DEFERRED): a request whose reply another thread delivers later with `send_reply`.
  This is the seam for long-poll dequeues (issue 15): a parked request holds no thread, and the
  reply is written from whichever thread has it, without blocking that thread.

Ownership moves only by hand-off: the selector submits `serve`/`handshake` to the pool; a thread
gives the connection back with `Reactor.park`. Whoever owns a connection closes it.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING

from pinlater.handler import context
from pinlater.server import tls
from pinlater.server.admission import is_enqueue
from pinlater.server.transport import (
    WOULD_BLOCK,
    FrameError,
    FrameIncomplete,
    FrameReader,
    FrameTimeout,
    MalformedRequest,
    PeerClosed,
    frame,
    set_timeout,
)

if TYPE_CHECKING:
    from pinlater.server.loop import Server

log = logging.getLogger("pinlater.server")

ACTIVE = "active"
IDLE = "idle"
READING = "reading"
WRITING = "writing"
HANDSHAKE = "handshake"
DEFERRED = "deferred"
CLOSED = "closed"

_current = threading.local()


def current_connection() -> Connection | None:
    """The connection whose request the calling pool thread is running (for a handler that
    defers its reply: see `Connection.send_reply`)."""
    return getattr(_current, "connection", None)


class Connection:
    """A client connection and its state; see the module docstring for who owns it when."""

    __slots__ = (
        "_early_reply",
        "_idle",
        "_lock",
        "_out",
        "_shut",
        "ip",
        "parked_at",
        "peer",
        "reader",
        "server",
        "slow_deadline",
        "slow_reason",
        "sock",
        "state",
        "want",
    )

    def __init__(self, server: Server, sock: socket.socket, addr: tuple, state: str = IDLE):
        self.server = server
        self.sock = sock
        self.peer = peer_name(addr)
        #: what per-peer limits count by: the client's IP address
        self.ip = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        self.state = state
        self.reader = FrameReader(sock, server.settings.max_frame_bytes, self._mark_busy)
        #: the selector event a HANDSHAKE connection waits for
        self.want = selectors.EVENT_READ
        #: when the selector took it as IDLE (its idle timeout counts from then)
        self.parked_at = 0.0
        #: when a slow state (HANDSHAKE, READING, WRITING) must be over, and the reason if not
        self.slow_deadline: float | None = None
        self.slow_reason = ""
        self._out: memoryview | None = None
        self._lock = threading.Lock()
        self._idle = False
        #: the socket was shut down by the server's shutdown
        self._shut = False
        #: a deferred request's reply that came before its thread had let go (see `_defer`)
        self._early_reply: bytes | None = None

    # ---- pool-thread tasks ----

    def serve(self, _: object = None) -> None:
        """Answer frames until the connection goes quiet, then give it back to the selector."""
        context.set_peer(self.peer)
        _current.connection = self
        reject = self.server.rejections.reject
        try:
            set_timeout(self.sock, self.server.linger)
            self._serve_frames()
        except FrameError as exc:
            reject("frame_length", self.peer, exc)
            self.close()
        except MalformedRequest as exc:
            reject("malformed", self.peer, exc)
            self.close()
        except FrameTimeout as exc:
            reject("frame_timeout", self.peer, exc)
            self.close()
        except (PeerClosed, OSError) as exc:
            log.debug("connection from %s ended: %s", self.peer, exc)
            self.close()
        except Exception:
            log.exception("unexpected error on connection from %s", self.peer)
            self.close()
        finally:
            _current.connection = None

    def handshake(self, _: object = None) -> None:
        """One TLS handshake step with the bytes that have arrived (the socket is
        non-blocking); serves the first request when the handshake is done."""
        try:
            want = tls.handshake_step(self.sock)  # type: ignore[arg-type]
        except tls.HandshakeError as exc:
            self.server.rejections.reject("tls_handshake", self.peer, exc)
            self.close()
            return
        if want is None:
            self.slow_deadline = None
            self.serve()
            return
        self.want = want
        self.state = HANDSHAKE
        self.server.reactor.park(self)

    def _serve_frames(self) -> None:
        while (payload := self._next_frame()) is not None:
            reply = self._serve_one(payload)
            if reply is None:
                reply = self._defer()
                if reply is None:
                    return
            if not self._send(reply):
                return

    def _next_frame(self) -> bytes | None:
        """The next request: already buffered, or arriving within the linger. None when this
        thread has let go of the connection (parked it, or closed it at a clean close or a
        shutdown). A request already in is served even during a shutdown."""
        reader = self.reader
        payload = reader.take_buffered()  # pipelined, or assembled by the selector: no I/O
        if payload is not None:
            return payload
        if not self._mark_idle():
            self.close()
            return None
        linger, pool = self.server.linger, self.server.pool
        if not (linger and pool.try_linger(self)):
            self._park()
            return None
        try:
            payload = reader.read_frame(
                linger, self.server.settings.frame_read_timeout_seconds, hold=linger
            )
        except FrameIncomplete:
            payload = None
        finally:
            pool.end_linger(self)
        if payload is None:
            if reader.closed:
                self.close()
            else:
                self._park()
        return payload

    def _serve_one(self, payload: bytes) -> bytes | None:
        """The reply to one request, or None when its reply is deferred (`send_reply`)."""
        admission = self.server.admission
        if admission is None:
            return self._dispatch(payload)
        return admission.serve(payload, lambda: self._dispatch(payload))  # type: ignore[arg-type, return-value]

    def _dispatch(self, payload: bytes) -> bytes | None:
        slots = self.server.worker_slots
        if self.server.enqueue_slots is not None and is_enqueue(payload):
            slots = self.server.enqueue_slots  # kept for enqueues: no dequeue delays them
        slots.get()
        try:
            return self.server.dispatcher.dispatch(payload, self.send_reply, self.peer_alive)[1]
        finally:
            slots.put(None)

    def _send(self, reply: bytes) -> bool:
        """Write a reply from the owning thread. True when it all went out; otherwise the
        selector writes the rest and owns the connection."""
        data = frame(reply)
        try:
            sent = self.sock.send(data)
        except (TimeoutError, *WOULD_BLOCK):
            sent = 0  # TLS: nothing counts as sent until all is; the retry sends it all again
        if sent == len(data):
            return True
        return self._send_rest(memoryview(data), sent)

    def _send_rest(self, data: memoryview, sent: int) -> bool:
        """A reply larger than the socket took at once: keep sending while the peer takes it,
        for one linger at most (each send waits up to one linger for room), then leave the
        rest to the selector."""
        give_up = time.monotonic() + self.server.linger
        while sent < len(data) and time.monotonic() < give_up:
            try:
                sent += self.sock.send(data[sent:])
            except (TimeoutError, *WOULD_BLOCK):
                break
        if sent == len(data):
            return True
        self._write_later(data[sent:])
        return False

    def _write_later(self, rest: memoryview) -> None:
        self._out = rest
        self.slow_deadline = time.monotonic() + self.server.settings.frame_read_timeout_seconds
        self.slow_reason = "write_timeout"
        self._park(WRITING)

    def _park(self, state: str | None = None) -> None:
        """Hand the connection to the selector (IDLE or READING unless `state` says)."""
        set_timeout(self.sock, 0.0)
        self.state = state or (READING if self.reader.in_frame else IDLE)
        self.server.reactor.park(self)

    def _defer(self) -> bytes | None:
        """Let go of a connection whose reply comes later; or the reply, if `send_reply` was
        called before this thread got here (the thread then sends it as usual)."""
        with self._lock:
            early, self._early_reply = self._early_reply, None
            if early is not None or self.state == CLOSED:
                return early
            set_timeout(self.sock, 0.0)
            self.state = DEFERRED
        return None

    # ---- any thread ----

    def send_reply(self, reply: bytes) -> None:
        """Deliver the reply of a deferred request (its dispatch returned None), from any
        thread, without blocking it: what the socket does not take at once, the selector writes.
        The connection then serves its next request as usual. May be called before the
        request's own thread has let go (that thread then sends it). A no-op once closed."""
        with self._lock:
            if self.state == CLOSED:
                return
            if self.state != DEFERRED:  # the request's thread has not let go yet
                if self._early_reply is not None:
                    raise RuntimeError("send_reply called twice for one request")
                self._early_reply = reply
                return
            self.state = ACTIVE
        data = frame(reply)
        try:
            sent = self.sock.send(data)
        except WOULD_BLOCK:
            sent = 0
        except OSError as exc:
            log.debug("connection from %s ended: %s", self.peer, exc)
            self.close()
            return
        if sent < len(data):
            self._write_later(memoryview(data)[sent:])
        else:
            self._park()

    def peer_alive(self) -> bool:
        """Whether the client is still connected (for a deferred request, whose socket nobody
        reads): a peek at the raw socket, non-blocking; False once it closed or failed."""
        if self.state == CLOSED:
            return False
        try:  # the plain socket's recv, also under TLS (raw bytes: b"" still means closed)
            return socket.socket.recv(self.sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False

    def hand_over(self) -> None:
        """The selector gives the connection to a pool thread (it is busy until that thread
        waits for a next request)."""
        with self._lock:
            self.state = ACTIVE
            self._idle = False

    def close(self) -> None:
        """Close the socket and forget the connection (by its owner; idempotent)."""
        with self._lock:
            if self.state == CLOSED:
                return
            self.state = CLOSED
        try:
            self.sock.close()
        except OSError:
            pass
        self.server.forget(self)

    # ---- the selector thread ----

    def write_more(self) -> bool:
        """Send what the non-blocking socket takes of the pending reply; True when done."""
        out = self._out
        if out is None:
            return True
        try:
            sent = self.sock.send(out)
        except WOULD_BLOCK:
            return False
        if sent < len(out):
            self._out = out[sent:]
            return False
        self._out = None
        self.slow_deadline = None
        return True

    # ---- shutdown ----

    def _mark_idle(self) -> bool:
        """Called between frames by the owning thread; False (stop) once the server is
        shutting down or the connection was closed under it."""
        with self._lock:
            if self.server.stopping or self._shut or self.state == CLOSED:
                return False
            self._idle = True
            return True

    def _mark_busy(self) -> None:
        with self._lock:
            if self._shut or self.state == CLOSED:
                raise PeerClosed("connection closed by server shutdown")
            self._idle = False

    def close_if_idle(self) -> None:
        """Shutdown: unblock a thread waiting for the next request (it then closes the
        connection); leave one with a request in flight alone."""
        with self._lock:
            if self._idle and self.state == ACTIVE:
                self._shutdown_socket()

    def force_close(self) -> None:
        """Shutdown grace over: unblock whatever the owner waits on."""
        with self._lock:
            self._shutdown_socket()

    def _shutdown_socket(self) -> None:
        self._shut = True
        try:  # the plain socket's shutdown, also under TLS (no close_notify from this thread)
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass


def peer_name(addr: tuple) -> str:
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)
