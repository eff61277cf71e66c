"""The selector thread: accepts connections, owns every connection no pool thread is serving,
and enforces the connection limits and deadlines.

A connection costs a thread only while a request is being read, run or answered (and for a
short linger after, pinlater.server.pool). Otherwise it is parked here, on one epoll selector:

- IDLE between requests: when bytes arrive, this thread reads them (non-blocking) and hands
  the connection to the pool only once a whole frame is in, so a peer that sends half a frame
  never holds a pool thread. Closed after `idle_timeout_seconds`, or after
  `idle_timeout_near_cap_seconds` while the server holds `connections_high_water` of
  `max_connections` or more.
- slow (READING a frame, WRITING a reply the peer does not take, a TLS HANDSHAKE): each has a
  deadline (`frame_read_timeout_seconds`, `tls.handshake_timeout_seconds`), and their number is
  capped per peer (`max_slow_connections_per_peer`) and in total (`max_slow_connections`): over
  a cap, the oldest slow connection (of that peer) is closed. A slowloris crowd thus costs
  memory for the bytes it sent and nothing else.

Admission of a new connection, by client IP address: beyond `max_connections_per_peer` it is
refused; at or above the high-water mark it evicts the connection idle the longest (if idle for
`evict_idle_min_seconds` at least, so connections in active use are never evicted); at
`max_connections` with nothing to evict it is refused. Refused and evicted connections are
accepted and closed at once (the client fails fast instead of hanging in the listen backlog),
counted by reason (`Rejections.refuse_connection`, CONNECTION_REFUSAL_REASONS).

Only this thread touches the selector and the idle/slow bookkeeping; other threads hand
connections over with `park` (a queue plus a wake-up pipe).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import os
import selectors
import socket
import time
from typing import TYPE_CHECKING

from pinlater.server import tls
from pinlater.server.connection import (
    CLOSED,
    HANDSHAKE,
    IDLE,
    READING,
    WRITING,
    Connection,
    peer_name,
)
from pinlater.server.transport import FrameError, PeerClosed

if TYPE_CHECKING:
    from pinlater.server.loop import Server

log = logging.getLogger("pinlater.server")

#: label values of pinlater_connections_refused_total
CONNECTION_REFUSAL_REASONS = (
    "per_peer",  # the peer already had max_connections_per_peer connections
    "max_connections",  # full, and no connection idle long enough to evict
    "evicted_idle",  # an idle connection closed to admit a new one near the cap
    "slow_per_peer",  # a slow connection closed: its peer had too many
    "slow_total",  # a slow connection closed: the server had too many
)

_LISTENER = "listener"
_WAKE = "wake"
#: connections accepted per readiness event, so a connect flood cannot starve the rest
_ACCEPT_BURST = 64
#: how long accepting pauses after accept() failed (e.g. out of file descriptors)
_ACCEPT_PAUSE = 0.05


class _SlowHeap:
    """Slow connections of one deadline class (same timeout), oldest first. Entries are
    (since, seq, conn); an entry whose `since` no longer matches the live map is stale and
    skipped (a connection may leave and re-enter, e.g. between TLS handshake steps)."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.entries: list[tuple[float, int, Connection]] = []

    def head(self, live: dict[Connection, float]) -> tuple[float, Connection] | None:
        entries = self.entries
        while entries:
            since, _, conn = entries[0]
            if live.get(conn) == since:
                return since, conn
            heapq.heappop(entries)
        return None


class Reactor:
    """One selector thread for the whole server; see the module docstring."""

    def __init__(self, server: Server, listener: socket.socket):
        self.server = server
        s = self.settings = server.settings
        self._listener = listener
        self._selector = selectors.DefaultSelector()  # epoll: no FD_SETSIZE limit
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._inbox: collections.deque[Connection] = collections.deque()
        self._events: dict[Connection, int] = {}
        self._idle: collections.OrderedDict[Connection, None] = collections.OrderedDict()
        self._slow: dict[Connection, float] = {}
        self._slow_by_peer: dict[str, set[Connection]] = {}
        self._frame_class = _SlowHeap(s.frame_read_timeout_seconds)
        self._handshake_class = _SlowHeap(s.tls.handshake_timeout_seconds)
        self._seq = itertools.count()
        self._high_water = max(1, int(s.max_connections * s.connections_high_water))
        self._accept_paused_until: float | None = None
        self._draining = False
        self._stopped = False

    # ---- any thread ----

    def park(self, conn: Connection) -> None:
        """Hand `conn` (state IDLE, READING, WRITING or HANDSHAKE) to the selector thread."""
        self._inbox.append(conn)
        self.wake()

    def wake(self) -> None:
        if self._stopped:
            return  # the pipe is closed (its descriptor number may be reused)
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # a full pipe wakes the selector anyway

    def stats(self) -> dict[str, int]:
        return {"idle": len(self._idle), "slow": len(self._slow)}

    # ---- the selector thread ----

    def run(self) -> bool:
        """Serve until the server stops, then drain: True if no connection was abandoned."""
        selector = self._selector
        selector.register(self._listener, selectors.EVENT_READ, _LISTENER)
        selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        try:
            while not self.server.stopping:
                self._cycle()
            return self._drain(self.server.settings.shutdown_grace_seconds)
        finally:
            self._stopped = True
            selector.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _cycle(self, limit: float | None = None) -> None:
        now = time.monotonic()
        timeout = self._next_timeout(now)
        if limit is not None:
            timeout = limit if timeout is None else min(timeout, limit)
        for key, mask in self._selector.select(timeout):
            data = key.data
            if data is _LISTENER:
                self._accept_some()
            elif data is _WAKE:
                self._drain_wake()
            elif data in self._events:  # not closed by an earlier event of this batch
                self._guarded(self._on_event, data, mask)
        while self._inbox:
            self._guarded(self._adopt, self._inbox.popleft())
        self._expire(time.monotonic())

    def _guarded(self, step, conn: Connection, *args) -> None:
        """Run one connection's step; a bug there closes that connection, not the server."""
        try:
            step(conn, *args)
        except Exception:
            log.exception("unexpected error on connection from %s", conn.peer)
            self._drop(conn)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # ---- accepting ----

    def _accept_some(self) -> None:
        for _ in range(_ACCEPT_BURST):
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # e.g. EMFILE: pause instead of spinning
                self.server.warnings.warning("accept", "accept failed: %s", exc)
                self._selector.unregister(self._listener)
                self._accept_paused_until = time.monotonic() + _ACCEPT_PAUSE
                return
            self._admit(sock, addr)

    def _admit(self, sock: socket.socket, addr: tuple) -> None:
        refusal = self._refusal(str(addr[0]), peer_name(addr))
        if refusal is not None:
            self.server.rejections.refuse_connection(refusal[0], peer_name(addr), refusal[1])
            sock.close()
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            context = self.server.tls_context
            if context is None:
                conn = Connection(self.server, sock, addr, IDLE)
            else:
                conn = Connection(self.server, tls.wrap_server_side(sock, context), addr, HANDSHAKE)
                conn.slow_deadline = time.monotonic() + self.settings.tls.handshake_timeout_seconds
                conn.slow_reason = "tls_handshake"
        except OSError as exc:
            log.debug("connection from %s lost at accept: %s", peer_name(addr), exc)
            sock.close()
            return
        self.server.add(conn)
        self._adopt(conn)

    def _refusal(self, ip: str, peer: str) -> tuple[str, str] | None:
        """(reason, detail) when a new connection from `ip` must be refused; evicts the
        idlest connection first when the server is near its cap."""
        s, server = self.settings, self.server
        if server.peer_connections(ip) >= s.max_connections_per_peer:
            return "per_peer", f"max_connections_per_peer ({s.max_connections_per_peer}) reached"
        if server.connection_count() >= self._high_water:
            self._evict_idlest(peer)
        if server.connection_count() >= s.max_connections:
            return "max_connections", f"max_connections ({s.max_connections}) reached"
        return None

    def _evict_idlest(self, newcomer: str) -> None:
        if not self._idle:
            return
        victim = next(iter(self._idle))
        idle_for = time.monotonic() - victim.parked_at
        if idle_for < self.settings.evict_idle_min_seconds:
            return
        self.server.rejections.refuse_connection(
            "evicted_idle",
            victim.peer,
            f"idle {idle_for:.1f}s, closed to admit {newcomer} "
            f"({self.server.connection_count()} of max_connections "
            f"{self.settings.max_connections} open)",
        )
        self._drop(victim)

    # ---- taking connections over ----

    def _adopt(self, conn: Connection) -> None:
        """`conn` is this thread's now: register it for what its state waits on."""
        state = conn.state
        if state == CLOSED:
            return
        if self._draining and state in (IDLE, HANDSHAKE):
            conn.close()
            return
        if state == IDLE:
            conn.parked_at = time.monotonic()
            self._idle[conn] = None
            self._register(conn, selectors.EVENT_READ)
            if conn.reader.in_frame or conn.reader.has_frame or _tls_pending(conn.sock):
                self._read(conn)
        elif state == READING:
            deadline = conn.reader.start_deadline(self.settings.frame_read_timeout_seconds)
            conn.slow_deadline, conn.slow_reason = deadline, "frame_timeout"
            self._register(conn, selectors.EVENT_READ)
            if self._enter_slow(conn):
                self._read(conn)
        elif state == WRITING:
            self._register(conn, selectors.EVENT_WRITE)
            self._enter_slow(conn)
        elif state == HANDSHAKE:
            self._register(conn, conn.want)
            self._enter_slow(conn)
        else:
            raise AssertionError(f"parked connection in state {state}")

    def _register(self, conn: Connection, events: int) -> None:
        if conn in self._events:
            self._selector.modify(conn.sock, events, conn)
        else:
            self._selector.register(conn.sock, events, conn)
        self._events[conn] = events

    def _release(self, conn: Connection) -> None:
        """Stop watching `conn` and forget its idle/slow bookkeeping."""
        if self._events.pop(conn, None) is not None:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        self._idle.pop(conn, None)
        self._leave_slow(conn)

    def _hand_to_pool(self, conn: Connection, task) -> None:
        self._release(conn)
        conn.hand_over()
        self.server.pool.submit(task, None)

    def _drop(self, conn: Connection) -> None:
        self._release(conn)
        conn.close()

    # ---- events ----

    def _on_event(self, conn: Connection, mask: int) -> None:
        state = conn.state
        if state in (IDLE, READING):
            self._read(conn)
        elif state == WRITING:
            self._write(conn)
        elif state == HANDSHAKE:
            self._hand_to_pool(conn, conn.handshake)

    def _read(self, conn: Connection) -> None:
        reader = conn.reader
        try:
            ready = reader.read_available(self.settings.frame_read_timeout_seconds)
        except FrameError as exc:
            self.server.rejections.reject("frame_length", conn.peer, exc)
            self._drop(conn)
            return
        except (PeerClosed, OSError) as exc:
            log.debug("connection from %s ended: %s", conn.peer, exc)
            self._drop(conn)
            return
        if ready:
            self._hand_to_pool(conn, conn.serve)
        elif reader.closed:
            self._drop(conn)
        elif conn.state == IDLE and reader.in_frame:
            self._idle.pop(conn, None)
            conn.state = READING
            conn.slow_deadline, conn.slow_reason = reader.frame_deadline, "frame_timeout"
            self._enter_slow(conn)

    def _write(self, conn: Connection) -> None:
        try:
            done = conn.write_more()
        except OSError as exc:
            log.debug("connection from %s ended: %s", conn.peer, exc)
            self._drop(conn)
            return
        if done:
            self._leave_slow(conn)
            conn.state = READING if conn.reader.in_frame else IDLE
            self._adopt(conn)

    # ---- slow connections ----

    def _class_of(self, conn: Connection) -> _SlowHeap:
        return self._handshake_class if conn.slow_reason == "tls_handshake" else self._frame_class

    def _enter_slow(self, conn: Connection) -> bool:
        """Count `conn` as slow (its `slow_deadline` set); over a cap, close the oldest slow
        connection of its peer or of the server. False if that was `conn` itself."""
        cls = self._class_of(conn)
        since = (conn.slow_deadline or time.monotonic()) - cls.timeout
        self._slow[conn] = since
        heapq.heappush(cls.entries, (since, next(self._seq), conn))
        peers = self._slow_by_peer.setdefault(conn.ip, set())
        peers.add(conn)
        s = self.settings
        if len(peers) > s.max_slow_connections_per_peer:
            victim = min(peers, key=self._slow.__getitem__)
            self._refuse_slow(victim, "slow_per_peer", s.max_slow_connections_per_peer)
            if victim is conn:
                return False
        if len(self._slow) > s.max_slow_connections:
            victim = self._oldest_slow()
            self._refuse_slow(victim, "slow_total", s.max_slow_connections)
            if victim is conn:
                return False
        return True

    def _oldest_slow(self) -> Connection:
        heads = [
            head
            for head in (
                self._frame_class.head(self._slow),
                self._handshake_class.head(self._slow),
            )
            if head is not None
        ]
        return min(heads, key=lambda head: head[0])[1]

    def _refuse_slow(self, victim: Connection, reason: str, cap: int) -> None:
        which = (
            "max_slow_connections_per_peer" if reason == "slow_per_peer" else "max_slow_connections"
        )
        self.server.rejections.refuse_connection(
            reason, victim.peer, f"{which} ({cap}) reached; oldest slow connection closed"
        )
        self._drop(victim)

    def _leave_slow(self, conn: Connection) -> None:
        if self._slow.pop(conn, None) is None:
            return
        peers = self._slow_by_peer.get(conn.ip)
        if peers is not None:
            peers.discard(conn)
            if not peers:
                del self._slow_by_peer[conn.ip]

    # ---- deadlines ----

    def _idle_timeout(self) -> float:
        s = self.settings
        if self.server.connection_count() >= self._high_water:
            return min(s.idle_timeout_seconds, s.idle_timeout_near_cap_seconds)
        return s.idle_timeout_seconds

    def _next_timeout(self, now: float) -> float | None:
        """Seconds until the next deadline (None: nothing pending)."""
        wakes = []
        if self._idle:
            wakes.append(next(iter(self._idle)).parked_at + self._idle_timeout())
        for cls in (self._frame_class, self._handshake_class):
            head = cls.head(self._slow)
            if head is not None:
                wakes.append(head[0] + cls.timeout)
        if self._accept_paused_until is not None:
            wakes.append(self._accept_paused_until)
        if not wakes:
            return None
        return max(0.0, min(wakes) - now)

    def _expire(self, now: float) -> None:
        idle_timeout = self._idle_timeout()
        while self._idle:
            conn = next(iter(self._idle))
            if conn.parked_at + idle_timeout > now:
                break
            log.debug("closing connection from %s: idle for %.1fs", conn.peer, idle_timeout)
            self._drop(conn)
        for cls in (self._frame_class, self._handshake_class):
            while (head := cls.head(self._slow)) is not None and head[0] + cls.timeout <= now:
                conn = head[1]
                self.server.rejections.reject(conn.slow_reason, conn.peer, _expired(conn, cls))
                self._drop(conn)
        if self._accept_paused_until is not None and now >= self._accept_paused_until:
            self._accept_paused_until = None
            if not self.server.stopping:
                self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)

    # ---- shutdown ----

    def _drain(self, grace: float) -> bool:
        """Stop accepting, answer parked requests, close idle connections, let requests in
        flight finish."""
        self._draining = True
        for hook in self.server.drain_hooks:
            try:
                hook()
            except Exception:
                log.exception("a drain hook failed")
        if self._accept_paused_until is None:
            self._selector.unregister(self._listener)
        self._accept_paused_until = None
        while self._inbox:
            self._guarded(self._adopt, self._inbox.popleft())
        for conn in list(self._events):
            if conn.state in (IDLE, HANDSHAKE):
                self._drop(conn)
        for conn in self.server.connections():
            if conn not in self._events:
                conn.close_if_idle()
        deadline = time.monotonic() + grace
        while self.server.connection_count():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._cycle(remaining)
        left = self.server.connections()
        if left:
            log.warning(
                "shutdown grace of %.1fs passed with %d connection(s) still busy; closing them",
                grace,
                len(left),
            )
            for conn in left:
                if conn in self._events:
                    self._drop(conn)
                else:
                    conn.force_close()
        return not left


def _tls_pending(sock: socket.socket) -> bool:
    """Decrypted bytes wait in the TLS layer: the selector would never report them."""
    pending = getattr(sock, "pending", None)
    return pending is not None and pending() > 0


def _expired(conn: Connection, cls: _SlowHeap) -> str:
    if conn.slow_reason == "tls_handshake":
        return f"no TLS handshake within {cls.timeout:g}s"
    if conn.slow_reason == "write_timeout":
        return f"reply not taken by the peer within {cls.timeout:g}s"
    return "frame not complete within the frame read timeout"
