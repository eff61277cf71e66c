"""The HTTP listener on the metrics port: `/metrics` (Prometheus text), `/health` (JSON) and,
when an admin password is configured, the admin API under `/api/v1/`
(`pinlater.server.admin_api`) and the dashboard under `/ui/` (`pinlater.server.dashboard`).

`/health` answers 200 while at least one shard can take enqueues
(`ShardedBackend.enqueue_candidates()` is not empty) and 503 otherwise, with the shards
(healthy, dequeue_only), the version and the uptime, so a load balancer or an orchestrator can
use it as a readiness probe. Both are read from memory: a scrape never touches storage.

Why not `ThreadingHTTPServer`: it starts one thread per connection without bound, and its
per-recv socket timeout lets a client that sends one header byte every few seconds hold its
thread for minutes. Here:
- a fixed pool of `metrics.http_threads` threads serves connections; at most
  `metrics.http_max_waiting` more wait for one, and a connection beyond that is answered 503
  and closed by the accept loop at once (`pinlater_http_refused_total{reason="busy"}`);
- one client address holds at most `metrics.http_connections_per_client` connections;
- each connection serves one request (HTTP/1.0 style), and the TLS handshake, the request line,
  headers and body must all arrive, and the answer be sent, within
  `metrics.http_request_timeout_seconds` in total (a deadline, not a per-read timeout), so a
  trickling client holds a thread for at most that long;
- request bodies are capped (MAX_BODY_BYTES), headers by `http.server`'s own limits.
With `server.tls` enabled the listener speaks HTTPS with the same certificate (client
certificates are not asked for here: the admin API has its own login); the handshake runs in
the pool thread under the same deadline, never in the accept loop.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pinlater import __version__
from pinlater.server import tls

log = logging.getLogger(__name__)

#: largest request body read (admin API actions are small JSON objects)
MAX_BODY_BYTES = 64 * 1024
#: headers of every answer: nothing is cached, sniffed, framed or sent as a referrer
COMMON_HEADERS = (
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
)


def health_report(store, started: float) -> tuple[int, dict]:
    """(HTTP status, JSON body) for /health."""
    enqueue = set(store.enqueue_candidates())
    shards = [
        {
            "name": spec.name,
            "cluster": store.cluster_of_shard(spec.name),
            "healthy": store.health.is_healthy(spec.name),
            "dequeue_only": bool(spec.dequeue_only),
            "takes_enqueues": spec.name in enqueue,
        }
        for spec in store.shard_specs()
    ]
    status = 200 if enqueue else 503
    return status, {
        "status": "ok" if enqueue else "unavailable",
        "version": __version__,
        "uptime_seconds": round(time.monotonic() - started, 3),
        "priorities": store.num_priorities,
        "shards": shards,
    }


@dataclass
class Request:
    """One parsed HTTP request."""

    method: str
    path: str
    query: str
    headers: Message
    body: bytes
    #: the client as "ip:port"
    peer: str
    #: the connection is TLS
    secure: bool


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def json(cls, status: int, data: object, headers=()) -> Response:
        return cls(status, json.dumps(data).encode() + b"\n", headers=list(headers))

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status, text.encode(), "text/plain; charset=utf-8")


#: the admin API's entry point: a Request in, a Response out (never raises)
ApiHandler = Callable[[Request], Response]


class Routes:
    """What the listener serves: /metrics, /health and the admin API under /api/."""

    def __init__(
        self,
        registry,
        health: Callable[[], tuple[int, dict]],
        api: ApiHandler | None = None,
        dashboard: ApiHandler | None = None,
    ):
        self.registry = registry
        self.health = health
        self.api = api
        self.dashboard = dashboard

    def __call__(self, request: Request) -> Response:
        if request.path == "/api" or request.path.startswith("/api/"):
            if self.api is None:
                return Response.json(
                    404,
                    {
                        "error": {
                            "code": "admin_api_disabled",
                            "message": "the admin API is off until admin.password_hash is "
                            "configured (see `pinlater hash-password`)",
                        }
                    },
                )
            return self.api(request)
        if request.path in ("/", "/ui") or request.path.startswith("/ui/"):
            if self.dashboard is None:
                return Response.text(
                    404,
                    "the dashboard is off until admin.password_hash is configured "
                    "(see `pinlater hash-password`); try /metrics or /health\n",
                )
            return self.dashboard(request)
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"GET or HEAD\n", "text/plain", [("Allow", "GET, HEAD")])
        if request.path == "/metrics":
            return Response(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        if request.path == "/health":
            status, body = self.health()
            return Response.json(status, body)
        return Response.text(404, "not found: try /metrics, /health or /api/v1/\n")


class _DeadlineReader(io.RawIOBase):
    """Reads from a socket, each recv bounded by what is left of one overall deadline."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock = sock
        self._deadline = deadline
        self.timed_out = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self._deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("request deadline passed")
            self._sock.settimeout(left)
            return self._sock.recv_into(buffer)
        except TimeoutError:
            self.timed_out = True  # http.server swallows it; the listener counts it
            raise


class _Handler(BaseHTTPRequestHandler):
    """Parses one request with http.server's parser and answers it with the listener's
    routes; never keeps the connection open."""

    server: HttpListener  # type: ignore[assignment]
    protocol_version = "HTTP/1.0"
    server_version = "pinlater"
    sys_version = ""

    def __init__(self, sock, address, listener: HttpListener, deadline: float, secure: bool):
        self.deadline = deadline
        self.secure = secure
        super().__init__(sock, address, listener)  # type: ignore[arg-type]

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain file object: an open one would keep the socket open
        self.reader = _DeadlineReader(self.connection, self.deadline)
        self.rfile = io.BufferedReader(self.reader)

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_OPTIONS(self) -> None:  # a CORS preflight, say: answered 405, never allowed
        self._serve()

    def _serve(self) -> None:
        body = self._body()
        if body is None:
            return
        split = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=split.path,
            query=split.query,
            headers=self.headers,
            body=body,
            peer=f"{self.client_address[0]}:{self.client_address[1]}",
            secure=self.secure,
        )
        try:
            response = self.server.routes(request)
        except Exception:  # the routes never raise; this keeps a bug from dropping the reply
            log.exception("HTTP %s %s failed", self.command, split.path)
            response = Response.json(
                500, {"error": {"code": "internal", "message": "internal error"}}
            )
        self._send(response)

    def _body(self) -> bytes | None:
        """The request body (Content-Length only), or None after answering 411/413/400."""
        length_text = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            self._send(Response.text(411, "send a Content-Length, not a chunked body\n"))
            return None
        if length_text is None:
            return b""
        if not (length_text.isascii() and length_text.isdigit()):
            self._send(Response.text(400, "bad Content-Length\n"))
            return None
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self._send(Response.text(413, f"request body over {MAX_BODY_BYTES} bytes\n"))
            return None
        return self.rfile.read(length) if length else b""

    def _send(self, response: Response) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.close_connection = True
            return
        self.connection.settimeout(left)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in COMMON_HEADERS + tuple(response.headers):
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - base class signature
        log.debug("http %s: " + format, self.address_string(), *args)


class HttpListener:
    """Serves `routes` on an already bound, listening socket (`pinlater.server.listen.bind`)
    with a bounded pool of threads; `start()` then `close()` (which stops it and frees the
    port)."""

    def __init__(
        self,
        sock: socket.socket,
        routes: Callable[[Request], Response],
        *,
        threads: int = 8,
        max_waiting: int = 32,
        request_timeout: float = 10.0,
        connections_per_client: int = 16,
        ssl_context: ssl.SSLContext | None = None,
        on_refused: Callable[[str], None] | None = None,
    ):
        self.routes = routes
        self.request_timeout = request_timeout
        self.connections_per_client = connections_per_client
        self.ssl_context = ssl_context
        self._on_refused = on_refused or (lambda reason: None)
        self._sock = sock
        self._slots = threading.BoundedSemaphore(threads + max_waiting)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._clients: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="http-accept", daemon=True
        )
        self._workers = [
            threading.Thread(target=self._work, name=f"http-{i}", daemon=True)
            for i in range(threads)
        ]

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> HttpListener:
        for worker in self._workers:
            worker.start()
        self._accept_thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, let the threads finish the request they are on (bounded by the
        request deadline), close waiting connections and the listening socket."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        if self._accept_thread.is_alive():
            self._accept_thread.join(5)
        for _ in self._workers:
            self._queue.put(None)
        for worker in self._workers:
            if worker.is_alive():
                worker.join(self.request_timeout + 1)

    # ---- accept loop (never blocks on a client) ----

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, address = self._sock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.05)  # e.g. out of file descriptors: do not spin
                continue
            self._admit(conn, address)

    def _admit(self, conn: socket.socket, address) -> None:
        client = str(address[0])
        with self._lock:
            held = self._clients.get(client, 0)
            if held >= self.connections_per_client:
                reason = "per_client"
            elif not self._slots.acquire(blocking=False):
                reason = "busy"
            else:
                self._clients[client] = held + 1
                reason = ""
        if reason:
            self._on_refused(reason)
            self._refuse(conn, reason)
            return
        self._queue.put((conn, address))

    def _refuse(self, conn: socket.socket, reason: str) -> None:
        """Answer 503 without waiting (plain HTTP only: a TLS client just sees the close)."""
        if self.ssl_context is None:
            text = (
                b"too many connections from your address\n"
                if reason == "per_client"
                else (b"server busy\n")
            )
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.send(
                    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                    b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text)
                )
        conn.close()

    # ---- pool threads ----

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            conn, address = item
            try:
                if not self._stopping.is_set():
                    self._serve(conn, address)
            except Exception:  # one connection must not end the thread
                log.debug("http connection from %s failed", address, exc_info=True)
            finally:
                with contextlib.suppress(OSError):
                    conn.close()
                self._release(str(address[0]))

    def _serve(self, conn: socket.socket, address) -> None:
        deadline = time.monotonic() + self.request_timeout
        secure = self.ssl_context is not None
        if self.ssl_context is not None:
            wrapped = tls.wrap_server_side(conn, self.ssl_context)
            try:
                _handshake(wrapped, deadline)
            except tls.HandshakeError as exc:
                self._on_refused("tls")
                log.debug("http TLS handshake from %s failed: %s", address[0], exc)
                wrapped.close()
                return
            wrapped.setblocking(True)
            conn = wrapped
        try:
            handler = _Handler(conn, address, self, deadline, secure)
            if handler.reader.timed_out:
                self._on_refused("timeout")
        except TimeoutError:  # the answer could not be sent in time
            self._on_refused("timeout")
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def _release(self, client: str) -> None:
        with self._lock:
            held = self._clients.get(client, 0) - 1
            if held > 0:
                self._clients[client] = held
            else:
                self._clients.pop(client, None)
        self._slots.release()


def _handshake(tls_sock: ssl.SSLSocket, deadline: float) -> None:
    """Complete a server-side TLS handshake by the request deadline (a client trickling its
    handshake cannot stretch it); raises tls.HandshakeError."""
    tls_sock.setblocking(False)
    with selectors.DefaultSelector() as selector:
        while (event := tls.handshake_step(tls_sock)) is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise tls.HandshakeError("no TLS handshake within the request deadline")
            selector.register(tls_sock, event)
            selector.select(left)
            selector.unregister(tls_sock)
