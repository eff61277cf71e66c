"""Throwaway redis-server processes for the test suites (never the system Redis).

`start(tmp_dir)` yields a BackendUnderTest with two shards, each on its own redis-server
(appendonly yes, appendfsync always, loopback, free port, temp data dir), stopped by PID
afterwards. `RedisServer` is also what the fault tests use to kill -9 and restart a server on
the same data dir.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support import BackendUnderTest, unavailable
from tests.support.storage_process import StorageProcess, free_port  # noqa: F401 (re-export)

#: seconds a redis-server start may go without doing any work (see tests/support/storage_process)
STARTUP_TIMEOUT_SECONDS = 10.0


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


class RedisServer(StorageProcess):
    """One redis-server on 127.0.0.1 with its own data dir; restartable on the same dir/port."""

    name = "redis-server"
    startup_timeout = STARTUP_TIMEOUT_SECONDS

    def __init__(
        self,
        data_dir: Path,
        *,
        appendonly: bool = True,
        appendfsync: str = "always",
        maxmemory: str | None = None,
        extra: Sequence[str] = (),
        config_file: Path | None = None,
    ):
        """With `config_file`, only the port, bind address, data dir and log file are added to
        it (so the file's own durability settings are what runs)."""
        super().__init__()
        self.config_file = config_file
        self.data_dir = Path(data_dir)
        self.log_file = self.data_dir / "redis.log"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.appendonly, self.appendfsync = appendonly, appendfsync
        self.maxmemory, self.extra = maxmemory, list(extra)

    def args(self) -> list[str]:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        args = [binary] + ([str(self.config_file)] if self.config_file else [])
        args += [
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        if self.config_file:
            return args + self.extra
        args += [
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.appendfsync,
            "--maxmemory-policy",
            "noeviction",
            "--protected-mode",
            "yes",
        ]
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory]
        return args + self.extra

    def _answers(self) -> bool:
        """This redis-server serves on the port (its pid answers: a redis another session runs
        on a port taken in between is not ours) and has loaded its data (PING answers LOADING,
        a starting error, until then; INFO answers while loading)."""
        assert self.proc is not None
        with self.client(socket_timeout=1, retry=Retry(NoBackoff(), 0)) as client:
            return int(client.info("server")["process_id"]) == self.proc.pid and client.ping()

    def _starting_errors(self):
        return (redis.exceptions.RedisError,)

    def client(self, **kwargs) -> redis.Redis:
        options = {"socket_timeout": 5, "socket_connect_timeout": 1, **kwargs}
        return redis.Redis(host="127.0.0.1", port=self.port, **options)

    def shard(self, name: str) -> dict:
        """The YAML shard entry for a shard on this server."""
        return {
            "name": name,
            "host": "127.0.0.1",
            "port": self.port,
            "socket_connect_timeout_seconds": 1.0,
            "socket_timeout_seconds": 5.0,
        }


def require_redis_server() -> None:
    if redis_server_binary() is None:
        unavailable("redis-server binary not found on PATH")


@contextlib.contextmanager
def running_server(data_dir: Path, **kwargs) -> Iterator[RedisServer]:
    """A started RedisServer that is stopped (by PID) on exit, whatever happens."""
    require_redis_server()
    server = RedisServer(data_dir, **kwargs)
    try:
        server.start_on_a_free_port()
        yield server
    finally:
        server.kill()


@contextlib.contextmanager
def start(tmp_dir: Path) -> Iterator[BackendUnderTest]:
    """Two shards ('r1', 'r2'), each on its own durable throwaway redis-server."""
    tmp_dir = Path(tmp_dir)
    with running_server(tmp_dir / "redis1") as one, running_server(tmp_dir / "redis2") as two:
        yield BackendUnderTest(kind="redis", shards=[one.shard("r1"), two.shard("r2")])
