"""Two clusters behind one server for the suites: Redis (shards "r1", "r2" on one throwaway
redis-server) and MySQL (shards "m1", "m2" on one throwaway mariadbd), config `clusters:`.

`start_redis_default` and `start_mysql_default` differ only in the default cluster, which is
where queues without a `cluster:` setting (every conformance test's queues) are created: the
conformance suite runs once per cluster, through the router."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import mysql_env, redis_env


@dataclass(frozen=True)
class ClustersUnderTest:
    """The config sections a test config would hold: `clusters:` and `default_cluster`."""

    clusters: dict[str, dict[str, Any]]
    default: str

    def config_sections(self) -> dict[str, Any]:
        return {"clusters": self.clusters, "default_cluster": self.default}


@contextlib.contextmanager
def start(tmp_dir: Path, default: str = "hot") -> Iterator[ClustersUnderTest]:
    """Cluster "hot" (Redis) and cluster "durable" (MySQL), `default` the default one."""
    tmp_dir = Path(tmp_dir)
    with (
        redis_env.running_server(tmp_dir / "redis") as redis,
        mysql_env.running_server(tmp_dir / "mariadb") as mysql,
    ):
        yield ClustersUnderTest(
            {
                "hot": {"kind": "redis", "shards": [redis.shard("r1"), redis.shard("r2")]},
                "durable": {"kind": "mysql", "shards": [mysql.shard("m1"), mysql.shard("m2")]},
            },
            default,
        )


@contextlib.contextmanager
def start_redis_default(tmp_dir: Path) -> Iterator[ClustersUnderTest]:
    with start(tmp_dir, "hot") as env:
        yield env


@contextlib.contextmanager
def start_mysql_default(tmp_dir: Path) -> Iterator[ClustersUnderTest]:
    with start(tmp_dir, "durable") as env:
        yield env
