"""SQLite storage for the suites: database files in the test's temp dir, nothing to start.

Two flavours, both run by the conformance suite: one shard, and three shards "1", "2", "3"
(which exercises fan-out, merging and descriptors naming several shards).
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator

from tests.support import BackendUnderTest


def _env(tmp_dir: pathlib.Path, shard_names: list[str]) -> BackendUnderTest:
    data_dir = pathlib.Path(tmp_dir) / "sqlite-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    return BackendUnderTest(kind="sqlite", shards=[{"name": name} for name in shard_names],
                            options={"data_dir": str(data_dir)})


@contextlib.contextmanager
def start(tmp_dir: pathlib.Path) -> Iterator[BackendUnderTest]:
    """One shard named "1"; the files vanish with tmp_dir."""
    yield _env(tmp_dir, ["1"])


@contextlib.contextmanager
def start_sharded(tmp_dir: pathlib.Path) -> Iterator[BackendUnderTest]:
    """Three shards named "1", "2" and "3" in one data dir."""
    yield _env(tmp_dir, ["1", "2", "3"])
