"""Connections to PinLater servers: open, reuse while healthy, discard on any doubt.

thriftpy2's TClient does not check that a reply's sequence id matches the call, so a connection
that timed out mid-call may later deliver that old reply to the next caller. A connection is
therefore reused only after a call that completed cleanly (a result or a PinLaterException);
after anything else the caller must `discard` it. Before reuse an idle connection is also
checked: one that has been idle too long or has bytes/EOF waiting (the server closed it, e.g.
its idle timeout) is dropped instead of being handed out.

TLS: with an `ssl_context` (see pinlater.common.tls.client_context) connections use thriftpy2's
TSSLSocket with that context, so certificate and host name checks are the context's (thriftpy2's
own default context would skip the host name check).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections import deque

from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TClient
from thriftpy2.transport import TFramedTransportFactory, TSocket, TSSLSocket

from pinlater.common.serverset import Endpoint
from pinlater.idl import PinLater

_TRANSPORTS = TFramedTransportFactory()  # the Cython framed transport
_PROTOCOLS = TBinaryProtocolFactory()  # the Cython binary protocol, strict read/write


class Connection:
    """One open framed/binary connection and its TClient."""

    def __init__(
        self,
        endpoint: Endpoint,
        connect_timeout: float,
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self.endpoint = endpoint
        family = socket.AF_INET6 if ":" in endpoint[0] else socket.AF_INET
        timeouts = {"connect_timeout": _millis(connect_timeout), "socket_timeout": _millis(timeout)}
        if ssl_context is None:
            self._socket = TSocket(endpoint[0], endpoint[1], socket_family=family, **timeouts)
        else:
            self._socket = TSSLSocket(
                endpoint[0], endpoint[1], socket_family=family, ssl_context=ssl_context, **timeouts
            )
        self._transport = _TRANSPORTS.get_transport(self._socket)
        self._transport.open()
        self.client = TClient(PinLater, _PROTOCOLS.get_protocol(self._transport))
        self.last_used = time.monotonic()

    def set_timeout(self, seconds: float) -> None:
        """Bound each socket read/write of the next calls by `seconds` (a long-poll dequeue
        waits longer than an ordinary call)."""
        self._socket.socket_timeout = seconds
        if self._socket.sock is not None:
            self._socket.sock.settimeout(seconds)

    def looks_reusable(self, max_idle: float) -> bool:
        """False if idle too long, or if the server sent something (EOF) while we were idle."""
        if time.monotonic() - self.last_used > max_idle:
            return False
        sock = self._socket.sock
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        try:
            self._transport.close()
        except Exception:  # noqa: BLE001 - closing a broken socket must never raise
            pass


def _millis(seconds: float | None) -> int | None:
    return None if seconds is None else max(1, int(seconds * 1000))


class EndpointPool:
    """Idle connections to one endpoint, at most `size` kept. Thread-safe.

    More than `size` calls may run at once: extra connections are opened on demand and closed
    when returned to a full pool.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        size: int,
        connect_timeout: float,
        timeout: float,
        max_idle: float,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self.endpoint = endpoint
        self._ssl_context = ssl_context
        self.size = size
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._max_idle = max_idle
        self._idle: deque[Connection] = deque()
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> Connection:
        """An idle healthy connection, or a new one (raises on connect failure)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return Connection(
                    self.endpoint, self._connect_timeout, self._timeout, self._ssl_context
                )
            if conn.looks_reusable(self._max_idle):
                return conn
            conn.close()

    def release(self, conn: Connection) -> None:
        """Return a connection whose last call completed cleanly."""
        conn.last_used = time.monotonic()
        with self._lock:
            if not self._closed and len(self._idle) < self.size:
                self._idle.append(conn)
                return
        conn.close()

    def discard(self, conn: Connection) -> None:
        """Drop a connection after a transport error, timeout or unexpected exception."""
        conn.close()

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle), deque()
        for conn in idle:
            conn.close()
