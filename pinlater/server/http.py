"""The HTTP side door on the metrics port: `/metrics` (Prometheus text) and `/health` (JSON).

`/health` answers 200 while at least one shard can take enqueues
(`ShardedBackend.enqueue_candidates()` is not empty) and 503 otherwise, with the shards
(healthy, dequeue_only), the version and the uptime, so a load balancer or an orchestrator can
use it as a readiness probe. Both are read from memory: a scrape never touches storage.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pinlater import __version__

log = logging.getLogger(__name__)


def health_report(store, started: float) -> tuple[int, dict]:
    """(HTTP status, JSON body) for /health."""
    enqueue = set(store.enqueue_candidates())
    shards = [
        {
            "name": spec.name,
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


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    #: socket timeout per request: a slow client cannot hold a thread for long
    timeout = 10

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(self.server.registry))
        elif path == "/health":
            status, body = self.server.health()
            self._send(status, "application/json", json.dumps(body).encode())
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /health\n")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - base class signature
        log.debug("metrics http %s: " + format, self.address_string(), *args)


class MetricsServer(ThreadingHTTPServer):
    """Serves on an already bound, listening socket (`pinlater.server.listen.bind`) in a daemon
    thread; `close()` stops it and frees the port."""

    daemon_threads = True

    def __init__(
        self, sock: socket.socket, registry, health: Callable[[], tuple[int, dict]]
    ) -> None:
        super().__init__(sock.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()  # the unbound default socket of socketserver
        self.socket = sock
        self.address_family = sock.family
        self.server_address = sock.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]
        self.registry = registry
        self.health = health
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="metrics-http",
            daemon=True,
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self.shutdown()
            self._thread.join(5)
        self.server_close()
