"""Throwaway MariaDB servers for the test suites (never the system MariaDB).

`start(tmp_dir)` yields a BackendUnderTest with two instances, each its own `mariadbd` (fresh
datadir from `mariadb-install-db`, loopback, free port, innodb_flush_log_at_trx_commit=1,
small buffer pool and redo log), stopped by PID afterwards. Instance "1" serves two databases
per queue, so the suites run on three logical shards ("1", "1d1", "2"), two of them sharing a
pool. `MariaDBServer` is also what the fault tests and the benchmark use to kill -9 and restart
a server on the same datadir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pymysql

from tests.support import BackendUnderTest, unavailable
from tests.support.storage_process import StorageProcess, free_port  # noqa: F401 (re-export)

#: seconds a mariadbd start may go without doing any work (see tests/support/storage_process)
STARTUP_TIMEOUT_SECONDS = 60.0
_SERVER_BINARIES = ("mariadbd", "mysqld")
_INSTALL_BINARIES = ("mariadb-install-db", "mysql_install_db")
_SMALL = ("--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M")


def _which(names: Sequence[str]) -> str | None:
    for name in names:
        for folder in (None, "/usr/sbin", "/usr/local/sbin"):
            found = shutil.which(name, path=folder) if folder else shutil.which(name)
            if found:
                return found
    return None


def require_mariadb() -> None:
    if _which(_SERVER_BINARIES) is None:
        unavailable("mariadbd (or mysqld) binary not found")
    if _which(_INSTALL_BINARIES) is None:
        unavailable("mariadb-install-db (or mysql_install_db) not found")


#: mariadb-install-db once failed on a heavily loaded machine with its log gone with the tmp dir;
#: it is retried on a fresh datadir, and the last attempt's log goes into the error
INSTALL_ATTEMPTS = 3


class MariaDBServer(StorageProcess):
    """One mariadbd on 127.0.0.1 with its own datadir; restartable on the same dir and port."""

    name = "mariadbd"
    startup_timeout = STARTUP_TIMEOUT_SECONDS

    def __init__(
        self, base_dir: Path, *, flush_log_at_trx_commit: int = 1, extra: Sequence[str] = ()
    ):
        super().__init__()
        self.base_dir = Path(base_dir)
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "mariadbd.err"
        # unix socket paths are limited to ~107 bytes: keep it out of deep pytest tmp dirs
        self.socket_dir = Path(tempfile.mkdtemp(prefix="plmy-"))
        self.flush_log_at_trx_commit = flush_log_at_trx_commit
        self.extra = list(extra)

    def install(self) -> MariaDBServer:
        """Create the system tables in a fresh datadir (root@localhost, empty password)."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        args = [
            _which(_INSTALL_BINARIES),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
            *_SMALL,
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        log_path = self.base_dir / "install.log"
        for _ in range(INSTALL_ATTEMPTS):
            # a failed attempt's half-made datadir would fail the next one: start afresh
            shutil.rmtree(self.data_dir, ignore_errors=True)
            with open(log_path, "wb") as log:
                done = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, timeout=600)
            if done.returncode == 0:
                return self
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"mariadb-install-db failed {INSTALL_ATTEMPTS} times; last log:\n{tail}")

    def args(self) -> list[str]:
        args = [
            _which(_SERVER_BINARIES),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            f"--socket={self.socket_dir / 'mysqld.sock'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--innodb-flush-log-at-trx-commit={self.flush_log_at_trx_commit}",
            f"--log-error={self.log_file}",
            f"--pid-file={self.base_dir / 'mariadbd.pid'}",
            "--max-connections=400",
            "--max-allowed-packet=64M",
            *_SMALL,
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        return args + self.extra

    def start(self) -> MariaDBServer:
        if not self.data_dir.exists():
            self.install()
        return super().start()

    def _answers(self) -> bool:
        """This mariadbd serves on the port: the server answering there has our socket path (a
        server another session runs on a port taken in between is not ours), and a peer that
        never greets cannot hold the wait (bounded reads)."""
        conn = self.connect(connect_timeout=1, read_timeout=2, write_timeout=2)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@socket")
                return cur.fetchone()[0] == str(self.socket_dir / "mysqld.sock")
        finally:
            conn.close()

    def _starting_errors(self):
        return (pymysql.err.Error,)

    def connect(self, **kwargs) -> pymysql.Connection:
        options = {"autocommit": True, "connect_timeout": 2, **kwargs}
        return pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", password="", **options
        )

    def query(self, sql: str, args=None) -> list[tuple]:
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def shard(self, name: str, **overrides) -> dict:
        """The YAML instance entry for this server."""
        return {
            "name": name,
            "host": "127.0.0.1",
            "port": self.port,
            "user": "root",
            "connect_timeout_seconds": 1.0,
            "read_timeout_seconds": 10.0,
            "write_timeout_seconds": 10.0,
            **overrides,
        }

    def cleanup(self) -> None:
        self.kill()
        shutil.rmtree(self.socket_dir, ignore_errors=True)


@contextlib.contextmanager
def running_server(base_dir: Path, **kwargs) -> Iterator[MariaDBServer]:
    """A started MariaDBServer that is killed (by PID) on exit, whatever happens."""
    require_mariadb()
    server = MariaDBServer(base_dir, **kwargs)
    try:
        server.start_on_a_free_port()
        yield server
    finally:
        server.cleanup()


@contextlib.contextmanager
def start(tmp_dir: Path) -> Iterator[BackendUnderTest]:
    """Two instances: "1" (two databases per queue: shards "1", "1d1") and "2"."""
    tmp_dir = Path(tmp_dir)
    with running_server(tmp_dir / "mariadb1") as one, running_server(tmp_dir / "mariadb2") as two:
        yield BackendUnderTest(
            kind="mysql", shards=[one.shard("1", databases_per_queue=2), two.shard("2")]
        )
