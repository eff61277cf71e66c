"""The shard contract on sharded SQLite: two shards parsed from one shard list and opened from
one SQLiteBackend, the kit running on the second ("2") beside the first ("1"), on the real
clock (so the kit's time windows, not a frozen clock, carry the time checks here)."""

from __future__ import annotations

import contextlib

import pytest

from backends.sqlite import SQLiteBackend
from pinlater.storage.shard_kit import MAIN, OTHER, Capabilities, Storage, exercise

pytestmark = pytest.mark.backend("sqlite")


@contextlib.contextmanager
def two_sqlite_shards(tmp_path):
    options = SQLiteBackend.parse_options({"data_dir": str(tmp_path)}, "backend")
    first, second = SQLiteBackend.parse_shards([{"name": "1"}, {"name": "2"}], options, "shards")
    yield Storage(
        new_backend=lambda limits: SQLiteBackend(options, limits),
        spec={MAIN: second, OTHER: first}.__getitem__,
    )


test_shard_contract = exercise(two_sqlite_shards, Capabilities())
