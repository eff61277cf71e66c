"""The shard map as a whole: `retired_with_jobs` entries, validation before it takes effect, and
the watcher that retries a map it did not apply (real SQLite shards, a real map file)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from backends.mysql import MySQLBackend
from backends.redis_backend import RedisBackend
from backends.sqlite import SQLiteBackend
from pinlater.common.sections import ConfigError
from pinlater.errors import InvalidRequest
from pinlater.ops.drain import DrainProgress
from pinlater.ops.maintenance import ShardMapWatcher
from pinlater.ops.retire import RetireGuard
from pinlater.storage.contract import StorageLimits
from pinlater.storage.models import JobState, NewJob
from pinlater.storage.shard_map import parse_shard_map
from pinlater.storage.sharded import ShardedBackend
from tests.support.readme_blocks import blocks

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_shard_map_parses_with_its_flags():
    [block] = blocks(README.read_text(), "shard-map")
    parsed = parse_shard_map(RedisBackend, yaml.safe_load(block)["shards"], {}, "shards")
    assert [(s.name, s.dequeue_only) for s in parsed.specs] == [("r1", False), ("r2", True)]
    assert parsed.retired == {"r3"}


def test_a_retired_mysql_instance_retires_every_logical_shard_it_expands_to():
    raw = [{"name": "m1"}, {"name": "m2", "databases_per_queue": 3, "retired_with_jobs": True}]
    parsed = parse_shard_map(MySQLBackend, raw, MySQLBackend.parse_options({}, "b"), "shards")
    assert parsed.names() == ["m1"]
    assert parsed.retired == {"m2", "m2d1", "m2d2"}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ([{"name": "a", "retired_with_jobs": "yes"}], "shards[0].retired_with_jobs: must be true"),
        ([{"name": "a", "retired_with_jobs": True}], "must be a non-empty list"),
        (
            [{"name": "a"}, {"name": "a", "retired_with_jobs": True}],
            "shard 'a' is both served and marked retired_with_jobs",
        ),
        ([{"name": "a"}, {"name": "b-1", "retired_with_jobs": True}], "1-32 ASCII letters"),
    ],
)
def test_bad_maps_are_refused_whole_with_the_reason(raw, problem):
    with pytest.raises(ConfigError) as raised:
        parse_shard_map(SQLiteBackend, raw, {}, "shards")
    assert any(problem in p for p in raised.value.problems), raised.value.problems


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup(tmp_path):
    options = SQLiteBackend.parse_options({"data_dir": str(tmp_path / "data")}, "backend")
    map_file = tmp_path / "shards.yaml"
    map_file.write_text(yaml.safe_dump({"shards": [{"name": "a"}, {"name": "b"}]}))
    parsed = parse_shard_map(
        SQLiteBackend, yaml.safe_load(map_file.read_text())["shards"], options, "s"
    )
    store = ShardedBackend(SQLiteBackend(options, StorageLimits()), parsed.specs, num_priorities=1)
    store.create_queue("q")
    drain = DrainProgress(store, cap=1000)
    rejected: list[list[str]] = []
    clock = Clock()
    watcher = ShardMapWatcher(
        store,
        str(map_file),
        options,
        RetireGuard(store, drain),
        retry_seconds=5,
        on_rejected=rejected.append,
        on_applied=drain.prune,
        clock=clock,
    )
    yield store, map_file, watcher, rejected, clock
    store.close()


def write(path: Path, entries) -> None:
    path.write_text(yaml.safe_dump({"shards": entries}))


def test_a_refused_map_is_retried_on_a_timer_and_applies_without_another_edit(setup):
    store, map_file, watcher, rejected, clock = setup
    store.call("b", lambda s: s.enqueue("q", [NewJob(b"x")]))
    write(map_file, [{"name": "a"}, {"name": "b", "dequeue_only": True}])
    assert watcher.check() and store.enqueue_candidates() == ["a"]
    write(map_file, [{"name": "a"}])
    assert not watcher.check() and rejected == [["b"]] and watcher.pending
    assert not watcher.check(), "retried before its time"
    clock.now += 5
    assert not watcher.check() and rejected == [["b"], ["b"]]
    store.call("b", lambda s: s.delete_jobs("q", JobState.PENDING, 1, 10, None))  # drained
    clock.now += 5
    assert watcher.check() and store.shard_names() == ["a"] and not watcher.pending
    with pytest.raises(InvalidRequest, match="unknown shard 'b'"):
        store.shard("b")


def test_an_invalid_map_is_counted_and_keeps_the_current_one(setup):
    store, map_file, watcher, rejected, _ = setup
    map_file.write_text("shards: [{name: a}, {name: a}]")
    assert not watcher.check()
    assert rejected == [[]] and store.shard_names() == ["a", "b"]


def test_retired_with_jobs_drops_a_shard_holding_jobs_and_names_it_in_errors(setup):
    store, map_file, watcher, rejected, _ = setup
    store.call("b", lambda s: s.enqueue("q", [NewJob(b"x")]))
    write(map_file, [{"name": "a"}, {"name": "b", "retired_with_jobs": True}])
    assert watcher.check() and rejected == []
    assert store.shard_names() == ["a"] and store.retired_shards() == {"b"}
    with pytest.raises(InvalidRequest, match="'b', retired with its jobs"):
        store.shard("b")
