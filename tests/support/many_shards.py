"""Eight shards of one backend on fresh throwaway storage, for the placement tests and
scripts/bench_placement.py: SQLite files, 8 shards on one redis-server (names isolate them),
or one mariadbd instance with 8 databases per queue."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

SHARDS = 8


@contextlib.contextmanager
def eight_shards(kind: str, tmp: Path, count: int = SHARDS) -> Iterator[tuple[str, dict, list]]:
    """(kind, backend options, shard entries) of `count` (8) shards on fresh storage."""
    if kind == "sqlite":
        yield kind, {"data_dir": str(tmp / "data")}, [{"name": f"s{i}"} for i in range(count)]
        return
    if kind == "redis":
        from tests.support.redis_env import running_server

        with running_server(tmp / "redis") as server:
            yield kind, {}, [server.shard(f"s{i}") for i in range(count)]
        return
    from tests.support.mysql_env import running_server as mariadb

    with mariadb(tmp / "mariadb") as server:
        yield kind, {}, [server.shard("s", databases_per_queue=count)]
