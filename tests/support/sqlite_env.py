"""SQLite storage for the suites: database files in the test's temp dir, nothing to start.

Two flavours, both run by the conformance suite: one shard, and three shards "1", "2", "3"
(which exercises fan-out, merging and descriptors naming several shards). `sharded_store` gives
unit tests a ShardedBackend over SQLite shards (two by default).
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

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
    shards: Sequence[str] = ("a", "b"),
    queue: str | None = "q",
    num_priorities: int = 3,
    seed: int | None = None,
    **options: Any,
):
    """A ShardedBackend over SQLite shards named `shards` (files in tmp_dir) with `queue`
    created (None: no queue), for unit tests over a real store; `seed` seeds its random
    choices, `options` go to ShardedBackend (retries, unhealthy_after_failures...). The caller
    closes it (`contextlib.closing`)."""
    import random

    from backends.sqlite import SQLiteBackend
    from pinlater.storage.contract import StorageLimits
    from pinlater.storage.sharded import ShardedBackend

    backend_options = SQLiteBackend.parse_options({"data_dir": str(tmp_dir)}, "backend")
    specs = SQLiteBackend.parse_shards([{"name": n} for n in shards], backend_options, "shards")
    rng = None if seed is None else random.Random(seed)
    store = ShardedBackend(
        SQLiteBackend(backend_options, StorageLimits()),
        specs,
        num_priorities=num_priorities,
        rng=rng,
        **options,
    )
    if queue is not None:
        store.create_queue(queue)
    return store
