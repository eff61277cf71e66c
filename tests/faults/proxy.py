"""A small TCP fault proxy on loopback, controlled from the test (a Toxiproxy stand-in).

    proxy = FaultProxy(("127.0.0.1", redis_port)).start()
    shard_entry["port"] = proxy.port          # the server now talks to Redis through it
    proxy.cut_after(200)                      # every connection dies 200 reply bytes from now
    proxy.heal()

Why threads and not asyncio: each connection is two blocking pump threads, which makes a fault
a plain check in the pump loop and needs no event loop living beside pytest. Faults act on the
bytes flowing from the moment they are set, on existing and new connections alike:

* `delay(ms)`: every chunk waits that long before it is forwarded;
* `trickle(bytes_per_second)`: chunks are forwarded in small timed pieces;
* `blackhole()`: connections are accepted, bytes in both directions are read and dropped;
* `half_open(direction)`: bytes in one direction ("up": client -> upstream, "down": upstream
  -> client) are read and dropped, the other direction still flows;
* `cut_after(n, direction)`: each connection is reset (RST) once n more bytes have passed in
  that direction; the first n are forwarded, so a reply can be cut in the middle;
* `reset_all()`: reset (SO_LINGER 0, i.e. RST) every open connection once.

`heal()` returns to pass-through and resets connections that dropped bytes (their streams are
out of step, so keeping them would hand a client a corrupt stream rather than a clean error).
`faults` counts what was injected, by kind, for the ledger.
"""

from __future__ import annotations

import collections
import socket
import struct
import threading
import time
from dataclasses import dataclass

DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class Mode:
    kind: str = "pass"  # pass | delay | trickle | blackhole | half_open | cut_after
    value: float = 0.0
    direction: str = "both"
    generation: int = 0


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST instead of an orderly FIN. SHUT_RD first
    wakes a pump thread blocked in recv() on it (and sends nothing), so the close is not held
    back by that call."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Link:
    """One proxied connection: client socket, upstream socket and per-mode byte budgets."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket):
        self.proxy, self.client, self.upstream = proxy, client, upstream
        self.tainted = False  # bytes were dropped: the stream is no longer trustworthy
        self.closed = False
        self.ended: set[str] = set()  # directions that saw an orderly EOF
        self.passed = {d: 0 for d in DIRECTIONS}  # bytes forwarded since `generation`
        self.generation = -1
        self.lock = threading.Lock()

    def start(self) -> None:
        for direction, src, dst in (
            ("up", self.client, self.upstream),
            ("down", self.upstream, self.client),
        ):
            threading.Thread(
                target=self._pump,
                args=(direction, src, dst),
                daemon=True,
                name=f"proxy-{self.proxy.name}-{direction}",
            ).start()

    def reset(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.upstream):
            _reset(sock)
        self.proxy._forget(self)

    def _pump(self, direction: str, src: socket.socket, dst: socket.socket) -> None:
        while not self.closed:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                if self.closed:  # woken by reset(): pass no FIN on
                    return
                try:
                    dst.shutdown(socket.SHUT_WR)  # pass the orderly close on
                except OSError:
                    pass
                with self.lock:
                    self.ended.add(direction)
                    both_done = len(self.ended) == 2
                if not both_done:
                    return
                break
            if not self._forward(direction, data, dst):
                break
        self.reset()

    def _forward(self, direction: str, data: bytes, dst: socket.socket) -> bool:
        """Apply the current mode to one chunk; False means the link must be reset."""
        mode = self.proxy.mode
        if mode.generation != self.generation:
            self.generation, self.passed = mode.generation, {d: 0 for d in DIRECTIONS}
        applies = mode.direction in ("both", direction)
        try:
            if mode.kind == "blackhole" or (mode.kind == "half_open" and applies):
                self.tainted = True
                self.proxy._count("dropped_bytes", len(data))
                return True
            if mode.kind == "delay":
                time.sleep(mode.value / 1000)
            if mode.kind == "cut_after" and applies:
                room = int(mode.value) - self.passed[direction]
                if room < len(data):
                    if room > 0:
                        dst.sendall(data[:room])
                    self.proxy._count("cut")
                    return False
            if mode.kind == "trickle":
                self._trickle(data, dst, mode.value)
            else:
                dst.sendall(data)
            self.passed[direction] += len(data)
            return True
        except OSError:
            return False

    def _trickle(self, data: bytes, dst: socket.socket, bytes_per_second: float) -> None:
        step = max(1, int(bytes_per_second / 20))
        for i in range(0, len(data), step):
            if self.closed:
                return
            dst.sendall(data[i : i + step])
            time.sleep(len(data[i : i + step]) / bytes_per_second)


class FaultProxy:
    """Listens on 127.0.0.1:<free port> and forwards to `upstream` (changeable at run time)."""

    def __init__(self, upstream: tuple[str, int], name: str = "proxy"):
        if upstream[0] not in ("127.0.0.1", "localhost"):
            raise ValueError("the fault proxy only forwards to loopback")
        self.upstream = upstream
        self.name = name
        self.mode = Mode()
        self.faults: collections.Counter = collections.Counter()
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._accept_loop, daemon=True, name=f"proxy-{name}-accept"
        )

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ---- controls ----

    def _set(self, kind: str, value: float = 0.0, direction: str = "both") -> None:
        if direction not in ("both", *DIRECTIONS):
            raise ValueError(f"direction must be up, down or both, not {direction!r}")
        with self._lock:
            self.mode = Mode(kind, value, direction, self.mode.generation + 1)
        if kind != "pass":
            self._count(kind)

    def delay(self, ms: float) -> None:
        self._set("delay", ms)

    def trickle(self, bytes_per_second: float) -> None:
        self._set("trickle", bytes_per_second)

    def blackhole(self) -> None:
        self._set("blackhole")

    def half_open(self, direction: str = "down") -> None:
        self._set("half_open", direction=direction)

    def cut_after(self, n_bytes: int, direction: str = "down") -> None:
        self._set("cut_after", n_bytes, direction)

    def reset_all(self) -> int:
        """RST every open connection now; returns how many."""
        links = self._snapshot()
        for link in links:
            link.reset()
        self._count("reset", len(links))
        return len(links)

    def heal(self) -> None:
        """Back to pass-through; connections that lost bytes are reset."""
        self._set("pass")
        for link in self._snapshot():
            if link.tainted:
                link.reset()

    def set_upstream(self, port: int) -> None:
        """New connections go to `port` (e.g. a server restarted on another port)."""
        self.upstream = (self.upstream[0], port)

    def open_connections(self) -> int:
        return len(self._snapshot())

    def close(self) -> None:
        self._stopped.set()
        try:
            self._listener.close()
        except OSError:
            pass
        for link in self._snapshot():
            link.reset()
        self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ---- internals ----

    def _count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.faults[kind] += n

    def _snapshot(self) -> list[_Link]:
        with self._lock:
            return list(self._links)

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.upstream, timeout=2)
                upstream.settimeout(None)
            except OSError:
                _reset(client)  # upstream down: the client sees a reset, as it would directly
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client, upstream)
            with self._lock:
                self._links.add(link)
            link.start()
