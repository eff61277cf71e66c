"""An in-process server with everything the operating features need: the real App (SQLite
shards in a temp dir), the real accept loop with admission control, and the metrics HTTP
endpoint on a free loopback port. Used by tests/integration/test_operating_*.py.

    with OperatingServer(tmp_path, {"queue_config": path}) as srv:
        client = srv.client()
        families = srv.scrape()
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from pinlater.app import App, load_config
from pinlater.idl import PinLater
from pinlater.main import bind
from pinlater.server.loop import Server
from pinlater.server.transport import Dispatcher
from tests.support.server_process import free_port, make_thrift_client


def merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


class OperatingServer:
    def __init__(
        self,
        tmp_path: Path,
        config: dict[str, Any] | None = None,
        shards: tuple[str, ...] = ("1", "2"),
    ):
        base = {
            "backend": {
                "kind": "sqlite",
                "data_dir": str(tmp_path / "data"),
                "shards": [{"name": s} for s in shards],
            },
            "metrics": {"port": free_port(), "depth_interval_seconds": 0.2},
            "janitor": {"enabled": False},
            "server": {"shutdown_grace_seconds": 5.0},
        }
        self.config = load_config(env={}, overrides=merge(base, config or {}))
        self.app: App | None = None
        self.server: Server | None = None
        self._thread: threading.Thread | None = None
        self._clients: list = []

    def __enter__(self) -> OperatingServer:
        self.app = App(self.config)
        try:
            self.app.start_background()
            sock = bind("127.0.0.1", 0)
            self.server = Server(
                sock, self.config.server, Dispatcher(PinLater, self.app.handler), self.app.admission
            )
            self.app.attach_server(self.server)
            self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
            self._thread.start()
        except BaseException:
            self.app.close()
            raise
        self.host, self.port = self.server.address
        host, port = self.app.metrics_server.address
        self.metrics_url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc_info) -> None:
        for client in self._clients:
            client.close()
        if self.server is not None:
            self.server.request_shutdown()
            self._thread.join(15)
        self.app.close()

    def client(self, timeout: float = 10.0):
        client = make_thrift_client(self.host, self.port, timeout)
        self._clients.append(client)
        return client

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read()

    def health(self) -> tuple[int, dict]:
        status, body = self.get("/health")
        return status, json.loads(body)

    def scrape(self) -> dict[str, Any]:
        """{family name: family} parsed with prometheus_client's own parser."""
        status, body = self.get("/metrics")
        assert status == 200
        return {f.name: f for f in text_string_to_metric_families(body.decode())}


def sample(families: dict, family: str, name: str | None = None, **labels: str) -> float | None:
    """The value of the one sample of `family` (sample `name`, default the family's own
    name or name_total) whose labels include `labels`; None if absent."""
    fam = families.get(family)
    if fam is None:
        return None
    names = {name} if name else {family, family + "_total"}
    found = [
        s.value
        for s in fam.samples
        if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, f"{family} {labels}: several samples {found}"
    return found[0] if found else None
