"""Private storage for one fault scenario: SQLite files, redis-server or mariadbd processes.

Each scenario gets its own storage (so a kill -9 or a blackhole hits nothing else and resource
figures are the scenario's own), built from the env helpers in tests/support:

* sqlite: two shard files in the scenario's temp dir (nothing to kill or proxy);
* redis: `instances` throwaway redis-servers (appendonly yes + appendfsync always, or AOF off for
  the negative control), one shard each;
* mysql: `instances` throwaway mariadbd (innodb_flush_log_at_trx_commit=1, or 0 for the negative
  control); with one instance it serves two logical shards (databases_per_queue 2). A pristine
  datadir is installed once per session and copied, which starts an instance in ~1 s, not ~3 s.

With `proxied=True` every networked shard is reached through its own FaultProxy (`proxies[i]`),
and the timeouts in the shard entries are short so a blackholed shard fails fast.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.faults.proxy import FaultProxy
from tests.support import mysql_env, redis_env

KINDS = ("sqlite", "redis", "mysql")
_template_lock = threading.Lock()
_mysql_template: dict[str, Path] = {}


class Storage:
    """Storage processes (none for sqlite), their proxies, and the server's backend section."""

    def __init__(
        self,
        kind: str,
        tmp_dir: Path,
        *,
        instances: int = 2,
        durable: bool = True,
        proxied: bool = False,
    ):
        if kind not in KINDS:
            raise ValueError(kind)
        self.kind, self.tmp_dir = kind, Path(tmp_dir)
        self.instances, self.durable, self.proxied = instances, durable, proxied
        self.servers: list[Any] = []
        self.proxies: list[FaultProxy] = []

    @property
    def networked(self) -> bool:
        return self.kind != "sqlite"

    def start(self) -> Storage:
        try:
            for i in range(self.instances if self.networked else 0):
                server = self._start_instance(i)
                self.servers.append(server)
                if self.proxied:
                    self.proxies.append(
                        FaultProxy(("127.0.0.1", server.port), name=f"{self.kind}{i}").start()
                    )
        except BaseException:
            self.close()
            raise
        return self

    def _start_instance(self, i: int):
        base = self.tmp_dir / f"{self.kind}{i}"
        if self.kind == "redis":
            redis_env.require_redis_server()
            server = redis_env.RedisServer(base, appendonly=self.durable, appendfsync="always")
        else:
            mysql_env.require_mariadb()
            shutil.copytree(mysql_template(), base / "data")
            server = mysql_env.MariaDBServer(base, flush_log_at_trx_commit=1 if self.durable else 0)
        return server.start_on_a_free_port()

    def port(self, i: int) -> int:
        return self.proxies[i].port if self.proxied else self.servers[i].port

    def backend_section(self) -> dict[str, Any]:
        if self.kind == "sqlite":
            data_dir = self.tmp_dir / "sqlite-data"
            data_dir.mkdir(parents=True, exist_ok=True)
            return {
                "kind": "sqlite",
                "data_dir": str(data_dir),
                "shards": [{"name": "1"}, {"name": "2"}],
            }
        if self.kind == "redis":
            shards = [
                {
                    **server.shard(f"r{i + 1}"),
                    "port": self.port(i),
                    "socket_timeout_seconds": 1.0,
                    "socket_connect_timeout_seconds": 0.5,
                }
                for i, server in enumerate(self.servers)
            ]
            return {"kind": "redis", "shards": shards}
        shards = [
            server.shard(
                f"m{i + 1}",
                port=self.port(i),
                connect_timeout_seconds=0.5,
                read_timeout_seconds=2.0,
                write_timeout_seconds=2.0,
                **({"databases_per_queue": 2} if len(self.servers) == 1 else {}),
            )
            for i, server in enumerate(self.servers)
        ]
        return {"kind": "mysql", "shards": shards}

    def call_bound_seconds(self) -> float:
        """The longest one storage call to a silent shard takes to fail, from the timeouts in
        the shard entries: a new connection's handshake, then one command or statement (the
        server reopens nothing inside a failing call)."""
        shards = self.backend_section()["shards"]
        if self.kind == "redis":
            return max(
                s["socket_connect_timeout_seconds"] + s["socket_timeout_seconds"] for s in shards
            )
        if self.kind == "mysql":
            return max(
                s["connect_timeout_seconds"]
                + max(s["read_timeout_seconds"], s["write_timeout_seconds"])
                for s in shards
            )
        raise ValueError(f"{self.kind} shards have no network timeouts")

    def kill(self, i: int) -> None:
        """kill -9 instance i (by its PID)."""
        self.servers[i].kill()

    def restart(self, i: int) -> None:
        """Start instance i again on the same port and data dir."""
        self.servers[i].kill()
        self.servers[i].start()

    def stop(self, i: int) -> None:
        self.servers[i].stop()

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()
        for server in self.servers:
            if self.kind == "mysql":
                server.cleanup()
            else:
                server.kill()

    def faults(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for proxy in self.proxies:
            for kind, n in proxy.faults.items():
                if kind != "dropped_bytes":
                    total[kind] = total.get(kind, 0) + n
        return total


def mysql_template() -> Path:
    """A freshly installed MariaDB datadir, made once per process and copied per instance."""
    with _template_lock:
        if "data" not in _mysql_template:
            base = Path(tempfile.mkdtemp(prefix="plfault-mytpl-"))
            installer = mysql_env.MariaDBServer(base)
            installer.install()
            installer.cleanup()  # only removes its socket dir: it never ran
            _mysql_template["data"] = base / "data"
            _mysql_template["base"] = base
        return _mysql_template["data"]


def remove_mysql_template() -> None:
    with _template_lock:
        base = _mysql_template.pop("base", None)
        _mysql_template.pop("data", None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)
