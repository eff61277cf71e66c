"""The SQLite shard: the shard contract through the kit (one file per shard, a frozen injected
clock, so the exact-boundary checks run too), then what only SQLite has: the injected clock,
WAL and the writer lock, file layout, options and the named-query files."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

import pytest

from backends.sql_base import QueryBook, SQLDialect, parse_named_queries
from backends.sqlite import FREE_STEP, SQLITE, SQLiteBackend, SQLiteShardSpec
from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from pinlater.storage.contract import StorageLimits
from pinlater.storage.errors import QueueNotFound, ShardError
from pinlater.storage.leases import LEASE_FORGOTTEN_AFTER_MS, LEASES_FORGOTTEN_PER_CALL
from pinlater.storage.models import JobState, NewJob
from pinlater.storage.shard_kit import Capabilities, Storage, exercise

pytestmark = pytest.mark.backend("sqlite")

T0 = 1_700_000_000.0
T0_MS = int(T0 * 1000)
REPO = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def sqlite_storage(tmp_path):
    """Shards are files in the test's temp dir; the clock stands still at T0."""
    options = SQLiteBackend.parse_options(
        {"data_dir": str(tmp_path), "clock": FakeClock()}, "backend"
    )
    yield Storage(
        new_backend=lambda limits: SQLiteBackend(options, limits),
        spec=lambda name: SQLiteShardSpec(name=name),
    )


test_shard_contract = exercise(sqlite_storage, Capabilities(frozen_clock=True))


def open_shard(data_dir: Path, clock: FakeClock, *, name: str = "1", **options):
    opts = SQLiteBackend.parse_options(
        {"data_dir": str(data_dir), "clock": clock, **options}, "backend"
    )
    return SQLiteBackend(opts, StorageLimits()).open_shard(SQLiteShardSpec(name=name))


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def shard(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    shard.create_queue("q")
    yield shard
    shard.close()


def enqueue(shard, *bodies, queue="q", **fields):
    return shard.enqueue(queue, [NewJob(body=b, **fields) for b in bodies])


# ---------------------------------------------------------------- clock, locks, files


def test_now_ms_is_the_injected_clock_plus_the_offset(shard, clock):
    assert shard.now_ms() == T0_MS
    shard.clock_offset_ms = 2500
    assert shard.now_ms() == T0_MS + 2500
    [local_id] = enqueue(shard, b"x")
    assert shard.lookup("q", [(1, local_id)], False)[0].created_at_ms == T0_MS + 2500
    clock.now += 1
    assert shard.now_ms() == T0_MS + 3500


def test_a_held_write_lock_surfaces_as_a_retriable_shard_error(tmp_path, clock):
    shard = open_shard(tmp_path, clock, busy_timeout_ms=50)
    shard.create_queue("q")
    blocker = sqlite3.connect(shard.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(ShardError) as info:
            enqueue(shard, b"x")
        assert info.value.retriable
        shard.ping()  # reads still work beside the writer (WAL)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert enqueue(shard, b"x") == [1]
    shard.close()


def test_close_is_idempotent_and_later_calls_fail_cleanly(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    shard.ping()
    shard.close()
    shard.close()
    with pytest.raises(ShardError):
        shard.ping()


def test_an_unusable_data_dir_does_not_stop_opening_but_ping_fails(tmp_path, clock):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    shard = open_shard(blocked / "data", clock)
    with pytest.raises(ShardError):
        shard.ping()
    shard.close()


def test_database_files_use_wal_and_one_file_per_shard(tmp_path, clock):
    shard = open_shard(tmp_path, clock, name="7")
    shard.ping()
    assert shard.path == (tmp_path / "shard-7.db").resolve()
    assert sqlite3.connect(shard.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert shard.durability_warnings() == []
    shard.close()
    relaxed = open_shard(tmp_path, clock, name="8", synchronous="normal")
    assert "synchronous=NORMAL" in relaxed.durability_warnings()[0]
    relaxed.close()


# ---------------------------------------------------------------- deleting big queues


class Crash(BaseException):
    """Stands for the process dying between two steps of a delete."""


def job_tables(shard) -> set[str]:
    with sqlite3.connect(shard.path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for (name,) in rows if re.fullmatch(r"q[0-9]+_p[0-9]+", name)}


def fill(shard, queue: str, count: int) -> None:
    for start in range(0, count, 5000):
        enqueue(shard, *[b"x" * 100] * min(5000, count - start), queue=queue)


def test_a_delete_cut_short_between_steps_leaves_nothing_visible_and_is_finished(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    shard.create_queue("big")
    fill(shard, "big", 2 * FREE_STEP + 10)
    before = job_tables(shard)

    def crash(seconds):
        raise Crash

    shard._between_steps = crash  # the process dies after the first step
    with pytest.raises(Crash):
        shard.delete_queue("big")
    assert shard.queue_names() == set()
    with pytest.raises(QueueNotFound):
        shard.count("big", JobState.PENDING, [1], False, 10, None)
    shard.close()
    restarted = open_shard(tmp_path, clock)
    assert restarted.queue_names() == set()
    restarted.create_queue("big")  # the name is free at once: fresh tables, empty
    assert restarted.count("big", JobState.PENDING, [1, 2, 3], False, 10**6, None) == 0
    assert enqueue(restarted, b"new", queue="big") == [1]
    assert len(job_tables(restarted) & before) == 3  # the old ones, still to be freed
    assert restarted.finish_deletes() == 1  # the janitor's hook
    assert not job_tables(restarted) & before
    assert restarted.finish_deletes() == 0
    assert [j.body for j in restarted.dequeue("big", 1, 10, None)] == [b"new"]
    restarted.close()


def test_a_file_from_before_unique_keys_gets_key_tables_on_open(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    shard.create_queue("old")
    with sqlite3.connect(shard.path) as conn:
        conn.execute("DROP TABLE q1_keys")
    shard.close()
    reopened = open_shard(tmp_path, clock)
    assert reopened.enqueue_keyed("old", [NewJob(b"a", unique_key="k")], 1000)[0].stored
    reopened.delete_queue("old")  # the key table is freed with the job tables
    with sqlite3.connect(reopened.path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert not [name for (name,) in rows if re.fullmatch(r"q[0-9]+_.*", name)]
    reopened.close()


def test_a_file_from_before_the_broker_gets_reserve_columns_on_open(tmp_path, clock):
    """Job tables made before the prefetching broker lack reserved_until: the migration at
    open adds it (NULL: nothing reserved) and its partial index, and prefetch works."""
    shard = open_shard(tmp_path, clock)
    shard.create_queue("old")
    enqueue(shard, b"a", queue="old")
    shard.close()
    with sqlite3.connect(shard.path) as conn:
        for priority in (1, 2, 3):
            conn.execute(f"DROP INDEX q1_p{priority}_reserved")
            conn.execute(f"ALTER TABLE q1_p{priority} DROP COLUMN reserved_until")
    reopened = open_shard(tmp_path, clock)
    try:
        [job] = reopened.prefetch("old", 1, 10, "c" * 24 + ":broker", 5000)
        assert job.body == b"a"
        stats = reopened.queue_stats(["old"], 10)["old"]
        assert stats.first_reserve_expiry == {1: T0_MS + 5000}
        with sqlite3.connect(reopened.path) as conn:
            plan = conn.execute(
                "EXPLAIN QUERY PLAN SELECT MIN(reserved_until) FROM q1_p1 "
                "WHERE reserved_until IS NOT NULL"
            ).fetchall()
        assert "q1_p1_reserved" in str(plan), plan
    finally:
        reopened.close()


def test_freeing_a_queue_restores_the_connections_secure_delete(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    default = shard._secure_delete
    shard.create_queue("big")
    fill(shard, "big", FREE_STEP + 1)
    shard.delete_queue("big")
    with shard._read() as cur:  # the pooled connection that freed the queue
        assert cur.execute("PRAGMA secure_delete").fetchone()[0] == default
    shard.close()


def test_deleting_a_big_queue_never_holds_the_write_lock_for_long(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    shard.create_queue("big")
    fill(shard, "big", 4 * FREE_STEP)
    held: list[float] = []
    shard._between_steps = held.append  # told how long each step held the lock
    shard.delete_queue("big")
    assert len(held) >= 3, "freed in several steps"
    assert max(held) < 1.0, held  # generous: a step is ~20-50 ms
    shard.close()


# ---------------------------------------------------------------- options and config


def test_options_report_every_problem_with_its_key_path():
    with pytest.raises(ConfigError) as info:
        SQLiteBackend.parse_options(
            {"data_dir": "", "synchronous": "OFF", "busy_timeout_ms": -1, "clock": 3, "colour": 1},
            "backend",
        )
    joined = "\n".join(info.value.problems)
    for key in ("data_dir", "synchronous", "busy_timeout_ms", "clock", "colour"):
        assert f"backend.{key}" in joined


def test_shards_default_to_one_named_1_and_must_not_share_a_file(tmp_path):
    options = SQLiteBackend.parse_options({"data_dir": str(tmp_path)}, "backend")
    assert SQLiteBackend.parse_shards(None, options, "backend.shards") == [
        SQLiteShardSpec(name="1")
    ]
    with pytest.raises(ConfigError, match=r"backend.shards\[1\].path"):
        SQLiteBackend.parse_shards(
            [{"name": "a"}, {"name": "b", "path": "shard-a.db"}], options, "backend.shards"
        )


def test_the_example_config_loads_with_two_sqlite_shards():
    config = load_config(REPO / "configs" / "sqlite.yaml", env={})
    assert config.backend.kind == "sqlite"
    assert [s.name for s in config.backend.shards] == ["1", "2"]


def test_every_named_query_has_a_description_and_identifiers_are_validated():
    book = QueryBook(SQLITE)
    assert {
        "dequeue_select",
        "claim_by_ids",
        "ack_success",
        "ack_failure_retry",
        "ack_failure_final",
        "ledger_add",
        "checkpoint",
        "purge",
        "create_job_table",
    } <= set(book.queries)
    assert all(q.doc for q in book.queries.values())
    assert '"q1_p2"' in book.render("purge", table=("q1_p2",))
    with pytest.raises(ValueError):
        book.render("purge", table=('x"; DROP TABLE queues; --',))
    other = QueryBook(SQLDialect(name="common_only", param_format="%({})s", quote_char="`"))
    assert "%(claim)s" in other.render("claim_by_ids", ids=2, table=("db", "jobs_p1"))
    assert "`db`.`jobs_p1`" in other.render("claim_by_ids", ids=2, table=("db", "jobs_p1"))


def test_named_query_files_reject_blocks_without_a_description():
    with pytest.raises(ValueError):
        parse_named_queries("-- name: x\nSELECT 1\n")


def test_an_enqueue_that_fails_part_way_stores_nothing(shard):
    with pytest.raises(ShardError):
        shard.enqueue("q", [NewJob(b"ok", priority=1), NewJob(b"bad", priority=4)])
    assert shard.count("q", JobState.PENDING, [1], False, 10, None) == 0
    assert enqueue(shard, b"next") == [1]


def test_a_queue_from_before_the_ledger_opens_its_books_with_its_jobs(tmp_path, clock):
    """A file written by a version without the ledger: the migration at open gives each queue
    its ledger table, with the jobs present then as enqueued, so the books balance."""
    shard = open_shard(tmp_path, clock)
    shard.create_queue("old")
    shard.enqueue("old", [NewJob(b"a"), NewJob(b"b", priority=2), NewJob(b"c")])
    shard.close()
    conn = sqlite3.connect(shard.path)
    with conn:
        conn.execute("DROP TABLE q1_ledger")  # what the older version's file holds
    conn.close()
    again = open_shard(tmp_path, clock)
    try:
        book = again.ledger("old")
        assert book.counters["enqueued"] == 3 and book.present == 3 and book.balanced
        again.enqueue("old", [NewJob(b"d")])
        assert again.ledger("old").counters["enqueued"] == 4 and again.ledger("old").balanced
    finally:
        again.close()


def fifo_indexes(tmp_path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(tmp_path / "shard-1.db")) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%_fifo'").fetchall()
    return sorted(name for (name,) in rows)


def test_only_a_fifo_dequeue_gives_a_queue_the_fifo_index_and_its_heads_use_it(shard, tmp_path):
    """Queues that are not FIFO never maintain the (state, local_id) index; the first FIFO
    dequeue adds it to the queue's job tables, and the head select seeks it (no sort)."""
    shard.create_queue("plain")
    enqueue(shard, b"a", queue="plain")
    shard.dequeue("plain", 1, 10, "c1")
    assert fifo_indexes(tmp_path) == []
    enqueue(shard, b"a", b"b")
    assert [job.local_id for job in shard.dequeue_fifo("q", 5, 1, "c2")] == [1]
    assert fifo_indexes(tmp_path) == ["q1_p1_fifo", "q1_p2_fifo", "q1_p3_fifo"]
    sql = shard._sql("fifo_heads", ("q1_p1",))
    with contextlib.closing(sqlite3.connect(tmp_path / "shard-1.db")) as conn:
        plan = conn.execute("EXPLAIN QUERY PLAN " + sql, {"limit": 1, "inline": 9}).fetchall()
    assert "q1_p1_fifo" in str(plan) and "TEMP B-TREE" not in str(plan), plan


def test_live_leases_forgets_leases_expired_for_a_day(shard):
    """Per-process heartbeats must not pile up: live_leases drops leases expired a day ago
    (at most LEASES_FORGOTTEN_PER_CALL a call) and keeps the others, expired or not."""
    for i in range(LEASES_FORGOTTEN_PER_CALL + 5):
        assert shard.acquire_lease(f"server/old{i}", f"old{i}", 1000)
    shard.clock_offset_ms += LEASE_FORGOTTEN_AFTER_MS + 2000
    assert shard.acquire_lease("server/recent-expired", "r", 1)
    assert shard.acquire_lease("server/live", "l", 60_000)
    shard.clock_offset_ms += 10

    def rows() -> int:
        with sqlite3.connect(shard.path) as conn:
            return conn.execute("SELECT COUNT(*) FROM pinlater_leases").fetchone()[0]

    assert shard.live_leases("server/") == {"server/live": "l"}
    assert rows() == 2 + 5
    assert shard.live_leases("") == {"server/live": "l"}
    assert rows() == 2
