"""MySQL 8 from a Docker container (testcontainers), for users who have a Docker engine.

Opt-in: `PINLATER_TEST_MYSQL8=1 ./scripts/test tests/conformance` (after
`pip install -e '.[docker]'`) adds a `mysql8` flavour to the conformance suite, run against a
throwaway `mysql:8.0` container; MySQL 8 is where the backend's no-RETURNING and
auto-increment-lock-mode code paths run for real. Without the variable the flavour does not
exist (CI has no Docker engine; the MariaDB suites cover the backend there). With the variable
but no Docker engine answering, the flavour's tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import BackendUnderTest, unavailable

IMAGE = os.environ.get("PINLATER_TEST_MYSQL8_IMAGE", "mysql:8.0")


def docker_unavailable() -> str | None:
    """Why no Docker engine answers (DOCKER_HOST or the default socket), or None."""
    try:
        import docker

        unix_reason = _unix_socket_unavailable()
        if unix_reason is not None:
            return unix_reason
        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable engine
        return str(exc) or type(exc).__name__
    return None


def _unix_socket_unavailable() -> str | None:
    """Why the engine's unix socket takes no connection, or None (also for a TCP DOCKER_HOST).
    Asked with a socket of our own: docker's unix transport leaks the socket of a failed
    connect, a ResourceWarning that pytest turns into an error."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    path = host.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(path)
        except OSError as exc:
            return f"cannot connect to {path}: {exc}"
    return None


@contextlib.contextmanager
def start(tmp_dir: Path) -> Iterator[BackendUnderTest]:
    try:
        # testcontainers >= 4.15; `testcontainers.mysql` is its deprecated alias
        from testcontainers.community.mysql import MySqlContainer
    except ImportError:
        unavailable("testcontainers>=4.15 is not installed (pip install -e '.[docker]')")
    reason = docker_unavailable()
    if reason is not None:
        pytest.skip(f"PINLATER_TEST_MYSQL8=1 but no Docker engine answers: {reason}")
    with MySqlContainer(IMAGE, username="root", password="pinlater") as mysql:
        shard = {
            "name": "1",
            "host": mysql.get_container_host_ip(),
            "port": int(mysql.get_exposed_port(3306)),
            "user": "root",
            "password": "pinlater",
            "connect_timeout_seconds": 5.0,
        }
        yield BackendUnderTest(kind="mysql", shards=[shard])
