"""SQLite storage for the suites: database files in the test's temp dir, nothing to start.

Two flavours, both run by the conformance suite: one shard, and three shards "1", "2", "3"
(which exercises fan-out, merging and descriptors naming several shards). `sharded_store` gives
the sharded layer's unit tests a ShardedBackend over two SQLite shards.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator

from tests.support import BackendUnderTest


def _env(tmp_dir: pathlib.Path, shard_names: list[str]) -> BackendUnderTest:
    data_dir = pathlib.Path(tmp_dir) / "sqlite-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    return BackendUnderTest(
        kind="sqlite",
        shards=[{"name": name} for name in shard_names],
        options={"data_dir": str(data_dir)},
    )


@contextlib.contextmanager
def start(tmp_dir: pathlib.Path) -> Iterator[BackendUnderTest]:
    """One shard named "1"; the files vanish with tmp_dir."""
    yield _env(tmp_dir, ["1"])


@contextlib.contextmanager
def start_sharded(tmp_dir: pathlib.Path) -> Iterator[BackendUnderTest]:
    """Three shards named "1", "2" and "3" in one data dir."""
    yield _env(tmp_dir, ["1", "2", "3"])


def sharded_store(
    tmp_dir: pathlib.Path,
    *,
    num_priorities: int,
    retries: int,
    unhealthy_after_failures: int,
    seed: int,
):
    """A ShardedBackend over SQLite shards 'a' and 'b' with queue 'q' created (unit tests of
    the sharded layer); the caller closes it."""
    import random

    from backends.sqlite import SQLiteBackend
    from pinlater.storage.contract import StorageLimits
    from pinlater.storage.sharded import ShardedBackend

    options = SQLiteBackend.parse_options({"data_dir": str(tmp_dir)}, "backend")
    specs = SQLiteBackend.parse_shards([{"name": "a"}, {"name": "b"}], options, "shards")
    store = ShardedBackend(
        SQLiteBackend(options, StorageLimits()),
        specs,
        num_priorities=num_priorities,
        retries=retries,
        unhealthy_after_failures=unhealthy_after_failures,
        rng=random.Random(seed),
    )
    store.create_queue("q")
    return store
