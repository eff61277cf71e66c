"""MySQL 8 from a Docker container (testcontainers), for users who have a Docker engine.

Opt-in: `PINLATER_TEST_MYSQL8=1 ./scripts/test tests/conformance` (after
`pip install -e '.[docker]'`) adds a `mysql8` flavour to the conformance suite, run against a
throwaway `mysql:8.0` container; MySQL 8 is where the backend's no-RETURNING and
auto-increment-lock-mode code paths run for real. Without the variable the flavour does not
exist (CI has no Docker engine; the MariaDB suites cover the backend there).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tests.support import BackendUnderTest, unavailable

ENABLED = os.environ.get("PINLATER_TEST_MYSQL8", "") == "1"
IMAGE = os.environ.get("PINLATER_TEST_MYSQL8_IMAGE", "mysql:8.0")


@contextlib.contextmanager
def start(tmp_dir: Path) -> Iterator[BackendUnderTest]:
    try:
        from testcontainers.mysql import MySqlContainer
    except ImportError:
        unavailable("testcontainers is not installed (pip install -e '.[docker]')")
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
