"""Direct tests of the SQLite shard primitives the sharded layer relies on (real files, a fake
clock injected through the backend options)."""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from pathlib import Path

import pytest

from backends.sql_base import QueryBook, SQLDialect, parse_named_queries
from backends.sqlite import SQLITE, SQLiteBackend, SQLiteShardSpec
from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from pinlater.errors import InvalidRequest, QueueNotFound
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import StorageLimits
from pinlater.storage.errors import ShardError
from pinlater.storage.models import Ack, Checkpoint, ClaimMatch, JobState, NewJob, ScanBound

T0 = 1_700_000_000.0
T0_MS = int(T0 * 1000)
SOURCE = "worker:host1"
REPO = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms / 1000


def open_shard(
    data_dir: Path,
    clock: FakeClock,
    *,
    levels: int = 3,
    status_cap: int = 20,
    name: str = "1",
    **options,
):
    opts = SQLiteBackend.parse_options(
        {"data_dir": str(data_dir), "clock": clock, **options}, "backend"
    )
    backend = SQLiteBackend(opts, StorageLimits(num_priorities=levels, status_cap=status_cap))
    return backend.open_shard(SQLiteShardSpec(name=name))


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


def dequeue(shard, limit=10, priority=1, source=SOURCE, queue="q"):
    return shard.dequeue(queue, priority, limit, new_claim(source))


def state_of(shard, local_id, priority=1, queue="q"):
    return shard.lookup(queue, [(priority, local_id)], True)[0]


# ---------------------------------------------------------------- queues


def test_queue_names_are_case_sensitive_and_create_is_idempotent(shard):
    shard.create_queue("Foo")
    shard.create_queue("foo")
    shard.create_queue("foo")
    enqueue(shard, b"upper", queue="Foo")
    assert shard.queue_names() == {"q", "Foo", "foo"}
    assert shard.count("foo", JobState.PENDING, [1], False, 10, None) == 0
    assert shard.count("Foo", JobState.PENDING, [1], False, 10, None) == 1


def test_delete_queue_removes_every_job_and_is_idempotent(shard):
    enqueue(shard, b"a", b"b")
    dequeue(shard, limit=1)
    shard.delete_queue("q")
    shard.delete_queue("q")
    assert "q" not in shard.queue_names()
    shard.create_queue("q")
    assert shard.count("q", JobState.PENDING, [1], False, 10, None) == 0
    assert shard.count("q", JobState.IN_PROGRESS, [1], False, 10, None) == 0


PRIMITIVES = {
    "enqueue": lambda s: s.enqueue("nope", [NewJob(b"x")]),
    "dequeue": lambda s: s.dequeue("nope", 1, 1, new_claim(SOURCE)),
    "dry_run": lambda s: s.dequeue("nope", 1, 1, None),
    "ack": lambda s: s.ack("nope", [Ack(1, 1, ClaimMatch(SOURCE))], []),
    "checkpoint": lambda s: s.checkpoint("nope", [Checkpoint(1, 1, ClaimMatch(SOURCE))]),
    "lookup": lambda s: s.lookup("nope", [(1, 1)], False),
    "count": lambda s: s.count("nope", JobState.PENDING, [1], False, 10, None),
    "scan": lambda s: s.scan("nope", JobState.PENDING, {1: None}, False, 10, None),
    "retry_failed": lambda s: s.retry_failed("nope", 1, 1, None, 10),
    "delete_jobs": lambda s: s.delete_jobs("nope", JobState.PENDING, 1, 10, None),
    "reclaim_expired": lambda s: s.reclaim_expired("nope", 1, 1000, 10),
    "purge": lambda s: s.purge("nope", 1, JobState.SUCCEEDED, 1000, 10),
    "empty_enqueue": lambda s: s.enqueue("nope", []),
    "empty_ack": lambda s: s.ack("nope", [], []),
    "empty_checkpoint": lambda s: s.checkpoint("nope", []),
    "empty_lookup": lambda s: s.lookup("nope", [], True),
    "capped_count": lambda s: s.count("nope", JobState.PENDING, [1], False, 0, None),
    "empty_scan": lambda s: s.scan("nope", JobState.PENDING, {}, False, 10, None),
}


@pytest.mark.parametrize("primitive", sorted(PRIMITIVES))
def test_every_job_primitive_raises_queue_not_found_for_an_unknown_queue(shard, primitive):
    with pytest.raises(QueueNotFound) as info:
        PRIMITIVES[primitive](shard)
    assert info.value.queue == "nope"


def test_recreated_queue_is_not_reached_through_a_stale_id_from_another_process(tmp_path, clock):
    a, b = open_shard(tmp_path, clock), open_shard(tmp_path, clock)
    try:
        a.create_queue("x")
        enqueue(b, b"old", queue="x")
        a.delete_queue("x")
        a.create_queue("x")
        assert enqueue(b, b"new", queue="x") == [1]
        assert [j.body for j in b.dequeue("x", 1, 10, None)] == [b"new"]
        a.delete_queue("x")
        with pytest.raises(QueueNotFound):
            enqueue(b, b"gone", queue="x")
    finally:
        a.close()
        b.close()


def test_reopening_with_more_priority_levels_creates_the_missing_tables(tmp_path, clock):
    small = open_shard(tmp_path, clock, levels=1)
    small.create_queue("q")
    small.close()
    big = open_shard(tmp_path, clock, levels=4)
    try:
        assert enqueue(big, b"p4", priority=4) == [1]
        assert [j.body for j in big.dequeue("q", 4, 10, None)] == [b"p4"]
    finally:
        big.close()


# ---------------------------------------------------------------- enqueue / dequeue


def test_enqueue_returns_ids_in_input_order_across_priorities(shard):
    jobs = [
        NewJob(b"a", priority=1),
        NewJob(b"b", priority=2),
        NewJob(b"c", priority=1),
        NewJob(b"d", priority=2),
    ]
    assert shard.enqueue("q", jobs) == [1, 1, 2, 2]
    assert shard.enqueue("q", [NewJob(b"e", priority=2)]) == [3]
    assert [r.body for r in shard.lookup("q", [(2, 1), (2, 2), (2, 3)], True)] == [b"b", b"d", b"e"]


def test_bodies_come_back_byte_identical(shard):
    bodies = [b"", b"\x00\xff\xfe", "h\u00e9llo".encode("latin-1"), bytes(range(256)) * 40]
    ids = enqueue(shard, *bodies)
    assert [j.body for j in dequeue(shard)] == bodies
    assert [r.body for r in shard.lookup("q", [(1, i) for i in ids], True)] == bodies


def test_enqueue_stores_attempts_times_and_a_truncated_status(shard, clock):
    [local_id] = enqueue(shard, b"x", attempts_allowed=5, custom_status="s" * 30)
    record = state_of(shard, local_id)
    assert (record.state, record.attempts_allowed, record.attempts_remaining) == (
        JobState.PENDING,
        5,
        5,
    )
    assert record.created_at_ms == record.updated_at_ms == record.run_after_ms == T0_MS
    assert record.custom_status == "s" * 20
    assert record.claim is None


def test_dequeue_orders_by_run_after_then_id_and_skips_future_jobs(shard, clock):
    enqueue(shard, b"late", run_after_ms=T0_MS - 10)
    enqueue(shard, b"future", run_after_ms=T0_MS + 1)
    enqueue(shard, b"early1", b"early2", run_after_ms=T0_MS - 20)
    enqueue(shard, b"now")
    assert [j.body for j in dequeue(shard)] == [b"early1", b"early2", b"late", b"now"]
    assert dequeue(shard) == []
    clock.advance_ms(1)
    assert [j.body for j in dequeue(shard)] == [b"future"]


def test_dequeue_claims_with_updated_at_now_and_dry_run_changes_nothing(shard, clock):
    enqueue(shard, b"a", b"b", b"c", attempts_allowed=3)
    dry = shard.dequeue("q", 1, 2, None)
    assert [(j.body, j.claim, j.attempts_remaining) for j in dry] == [
        (b"a", None, 3),
        (b"b", None, 3),
    ]
    assert state_of(shard, 1).state == JobState.PENDING
    clock.advance_ms(500)
    claim = new_claim(SOURCE)
    jobs = shard.dequeue("q", 1, 2, claim)
    assert [(j.local_id, j.claim) for j in jobs] == [(1, claim), (2, claim)]
    record = state_of(shard, 1)
    assert (record.state, record.claim, record.updated_at_ms) == (
        JobState.IN_PROGRESS,
        claim,
        T0_MS + 500,
    )
    assert [j.local_id for j in dequeue(shard)] == [3]


def test_concurrent_dequeues_claim_every_job_exactly_once(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    shard.create_queue("race")
    for start in range(0, 2000, 500):
        shard.enqueue("race", [NewJob(f"{i}".encode()) for i in range(start, start + 500)])
    seen: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker():
        try:
            for _ in range(2000):  # bounded
                jobs = shard.dequeue("race", 1, 7, new_claim(SOURCE))
                if not jobs:
                    return
                with lock:
                    seen.extend(j.local_id for j in jobs)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    shard.close()
    assert errors == []
    assert len(seen) == 2000
    assert Counter(seen).most_common(1)[0][1] == 1
    assert set(seen) == set(range(1, 2001))


# ---------------------------------------------------------------- ack


def test_success_ack_needs_in_progress_and_a_matching_claim(shard):
    enqueue(shard, b"a", b"b", b"c", b"pending")
    jobs = dequeue(shard, limit=3)
    other = new_claim(SOURCE)
    assert (
        shard.ack(
            "q",
            [
                Ack(1, 1, ClaimMatch(SOURCE, claim=other)),
                Ack(1, 2, ClaimMatch("worker:host")),
                Ack(1, 4, ClaimMatch(SOURCE)),
            ],
            [],
        )
        == 0
    )
    assert {state_of(shard, i).state for i in (1, 2)} == {JobState.IN_PROGRESS}
    assert state_of(shard, 4).state == JobState.PENDING
    assert (
        shard.ack(
            "q",
            [
                Ack(1, 1, ClaimMatch(SOURCE, claim=jobs[0].claim), "ok"),
                Ack(1, 2, ClaimMatch(SOURCE)),
            ],
            [],
        )
        == 2
    )
    done = state_of(shard, 1)
    assert (done.state, done.custom_status, done.claim) == (JobState.SUCCEEDED, "ok", jobs[0].claim)
    assert shard.ack("q", [Ack(1, 1, ClaimMatch(SOURCE), "again")], []) == 0
    assert state_of(shard, 1).custom_status == "ok"


def test_ack_status_appends_and_keeps_the_newest_characters(shard):
    enqueue(shard, b"a", custom_status="0123456789")
    dequeue(shard)
    shard.ack("q", [Ack(1, 1, ClaimMatch(SOURCE), "abcdefghijklmno")], [])
    assert state_of(shard, 1).custom_status == "56789abcdefghijklmno"


def test_failure_ack_retries_with_delay_then_fails_for_good(shard, clock):
    enqueue(shard, b"a", attempts_allowed=2, custom_status="s")
    [job] = dequeue(shard)
    assert shard.ack("q", [], [Ack(1, 1, ClaimMatch(SOURCE), "1", retry_delay_ms=300)]) == 1
    record = state_of(shard, 1)
    assert (
        record.state,
        record.attempts_remaining,
        record.claim,
        record.run_after_ms,
        record.custom_status,
    ) == (JobState.PENDING, 1, None, T0_MS + 300, "s1")
    assert dequeue(shard) == []
    clock.advance_ms(300)
    [job] = dequeue(shard)
    assert (
        shard.ack("q", [], [Ack(1, 1, ClaimMatch(SOURCE, job.claim), "2", retry_delay_ms=999)]) == 1
    )
    record = state_of(shard, 1)
    assert (
        record.state,
        record.attempts_remaining,
        record.claim,
        record.run_after_ms,
        record.custom_status,
    ) == (JobState.FAILED, 0, job.claim, T0_MS + 300, "s12")


def test_failure_ack_with_negative_delay_is_due_now(shard, clock):
    enqueue(shard, b"a", attempts_allowed=3)
    dequeue(shard)
    shard.ack("q", [], [Ack(1, 1, ClaimMatch(SOURCE), retry_delay_ms=-5000)])
    assert state_of(shard, 1).run_after_ms == T0_MS
    assert [j.local_id for j in dequeue(shard)] == [1]


# ---------------------------------------------------------------- checkpoint


def test_checkpoint_applies_every_field_and_extends_the_claim(shard, clock):
    enqueue(shard, b"old", attempts_allowed=2, custom_status="0123456789")
    [job] = dequeue(shard)
    clock.advance_ms(1000)
    cp = Checkpoint(
        1,
        1,
        ClaimMatch(SOURCE, job.claim),
        new_body=b"new",
        run_after_ms=T0_MS + 99_000,
        attempts_allowed=7,
        prepend_status="abcdefghijklmno",
    )
    assert shard.checkpoint("q", [cp]) == 1
    record = state_of(shard, 1)
    assert (
        record.state,
        record.body,
        record.run_after_ms,
        record.attempts_allowed,
        record.attempts_remaining,
        record.updated_at_ms,
        record.claim,
    ) == (JobState.IN_PROGRESS, b"new", T0_MS + 99_000, 7, 7, T0_MS + 1000, job.claim)
    assert record.custom_status == "abcdefghijklmno01234"


def test_checkpoint_without_fields_keeps_them_and_sets_run_after_now(shard, clock):
    enqueue(shard, b"body", attempts_allowed=4, run_after_ms=T0_MS - 50, custom_status="st")
    dequeue(shard)
    clock.advance_ms(10)
    assert shard.checkpoint("q", [Checkpoint(1, 1, ClaimMatch(SOURCE))]) == 1
    record = state_of(shard, 1)
    assert (record.body, record.attempts_allowed, record.custom_status, record.run_after_ms) == (
        b"body",
        4,
        "st",
        T0_MS + 10,
    )


def test_checkpoint_move_to_pending_clears_the_claim_and_stale_claims_do_nothing(shard):
    enqueue(shard, b"a")
    [job] = dequeue(shard)
    assert (
        shard.checkpoint(
            "q",
            [
                Checkpoint(1, 1, ClaimMatch(SOURCE, new_claim(SOURCE))),
                Checkpoint(1, 1, ClaimMatch("worker")),
            ],
        )
        == 0
    )
    assert (
        shard.checkpoint(
            "q", [Checkpoint(1, 1, ClaimMatch(SOURCE, job.claim), move_to_pending=True)]
        )
        == 1
    )
    record = state_of(shard, 1)
    assert (record.state, record.claim) == (JobState.PENDING, None)
    assert shard.checkpoint("q", [Checkpoint(1, 1, ClaimMatch(SOURCE))]) == 0


# ---------------------------------------------------------------- lookup / count / scan


def test_lookup_omits_missing_jobs_and_leaves_out_bodies_unless_asked(shard):
    enqueue(shard, b"a", b"b")
    records = shard.lookup("q", [(1, 2), (1, 99), (2, 1), (1, 1)], False)
    assert [(r.priority, r.local_id, r.body) for r in records] == [(1, 2, None), (1, 1, None)]


def test_count_is_exact_up_to_the_cap_and_splits_current_from_future(shard):
    enqueue(shard, *[b"now"] * 5)
    enqueue(shard, *[b"later"] * 4, run_after_ms=T0_MS + 1)
    enqueue(shard, *[b"p2"] * 3, priority=2)
    assert shard.count("q", JobState.PENDING, [1], False, 100, None) == 5
    assert shard.count("q", JobState.PENDING, [1], True, 100, None) == 4
    assert shard.count("q", JobState.PENDING, [1, 2, 3], False, 100, None) == 8
    assert shard.count("q", JobState.PENDING, [1, 2], False, 6, None) == 6
    assert shard.count("q", JobState.PENDING, [1], False, 3, None) == 3
    assert shard.count("q", JobState.FAILED, [1, 2], False, 100, None) == 0


def test_count_with_a_body_filter_pages_through_more_rows_than_one_page(shard):
    enqueue(shard, *[b"hit" if i % 3 == 0 else b"miss" for i in range(250)])
    assert shard.count("q", JobState.PENDING, [1], False, 1000, lambda b: b == b"hit") == 84
    assert shard.count("q", JobState.PENDING, [1], False, 10, lambda b: b == b"hit") == 10


def test_a_body_filter_error_propagates_unchanged(shard):
    enqueue(shard, b"a")

    def bad(body):
        raise InvalidRequest("bodyRegexToMatch: too slow")

    for call in (
        lambda: shard.count("q", JobState.PENDING, [1], False, 9, bad),
        lambda: shard.scan("q", JobState.PENDING, {1: None}, False, 9, bad),
        lambda: shard.delete_jobs("q", JobState.PENDING, 1, 9, bad),
    ):
        with pytest.raises(InvalidRequest, match="too slow"):
            call()
    assert shard.count("q", JobState.PENDING, [1], False, 9, None) == 1


def test_scan_returns_newest_first_and_resumes_after_a_bound(shard):
    for offset in (-30, -10, -10, -20, 5):
        enqueue(shard, b"x", run_after_ms=T0_MS + offset)
    page = shard.scan("q", JobState.PENDING, {1: None}, False, 2, None)
    assert [(r.run_after_ms - T0_MS, r.local_id) for r in page] == [(-10, 3), (-10, 2)]
    assert all(r.body is None for r in page)
    rest = shard.scan("q", JobState.PENDING, {1: ScanBound(T0_MS - 10, 2)}, False, 10, None)
    assert [(r.run_after_ms - T0_MS, r.local_id) for r in rest] == [(-20, 4), (-30, 1)]
    future = shard.scan("q", JobState.PENDING, {1: None}, True, 10, None)
    assert [r.local_id for r in future] == [5]


def test_scan_limits_each_priority_and_filters_bodies(shard):
    enqueue(shard, *[b"keep", b"drop"] * 150)
    enqueue(shard, b"keep", b"keep", priority=2)
    found = shard.scan(
        "q", JobState.PENDING, {1: None, 2: None}, False, 120, lambda b: b == b"keep"
    )
    assert [r.priority for r in found].count(1) == 120
    assert [r.priority for r in found].count(2) == 2
    assert all(r.body is None and r.local_id % 2 == 1 for r in found if r.priority == 1)


# ---------------------------------------------------------------- retry / delete


def _fail_all(shard, n, clock, step_ms=10):
    for _ in range(n):
        enqueue(shard, b"f", attempts_allowed=1)
        clock.advance_ms(step_ms)
    jobs = dequeue(shard, limit=n)
    shard.ack("q", [], [Ack(1, j.local_id, ClaimMatch(SOURCE)) for j in jobs])


def test_retry_failed_moves_the_oldest_failed_jobs_back_to_pending(shard, clock):
    _fail_all(shard, 3, clock)
    assert shard.retry_failed("q", 1, 4, None, 2) == 2
    assert [state_of(shard, i).state for i in (1, 2, 3)] == [
        JobState.PENDING,
        JobState.PENDING,
        JobState.FAILED,
    ]
    record = state_of(shard, 1)
    assert (
        record.attempts_remaining,
        record.attempts_allowed,
        record.claim,
        record.run_after_ms,
    ) == (4, 1, None, int(clock.now * 1000))
    assert shard.retry_failed("q", 1, 1, T0_MS + 10**6, 10) == 1
    assert state_of(shard, 3).run_after_ms == T0_MS + 10**6


def test_delete_jobs_touches_only_the_state_up_to_the_limit(shard):
    enqueue(shard, b"a1", b"b2", b"a3", b"a4", b"b5")
    dequeue(shard, limit=1)
    assert shard.delete_jobs("q", JobState.PENDING, 1, 2, lambda b: b.startswith(b"a")) == 2
    assert [r.local_id for r in shard.lookup("q", [(1, i) for i in range(1, 6)], False)] == [
        1,
        2,
        5,
    ]
    assert shard.delete_jobs("q", JobState.PENDING, 1, 10, None) == 2
    assert [r.local_id for r in shard.lookup("q", [(1, i) for i in range(1, 6)], False)] == [1]


# ---------------------------------------------------------------- janitor


def test_reclaim_expired_uses_failure_arithmetic_and_the_limit(shard, clock):
    enqueue(shard, b"retry", attempts_allowed=3)
    enqueue(shard, b"last", attempts_allowed=1)
    enqueue(shard, b"fresh")
    dequeue(shard, limit=2)
    clock.advance_ms(5000)
    dequeue(shard)
    assert shard.reclaim_expired("q", 1, 5000, 10).retried == 0  # updated_at == cutoff
    clock.advance_ms(1)
    counts = shard.reclaim_expired("q", 1, 5000, 10)
    assert (counts.retried, counts.failed) == (1, 1)
    retried, failed, fresh = (state_of(shard, i) for i in (1, 2, 3))
    assert (retried.state, retried.attempts_remaining, retried.claim, retried.run_after_ms) == (
        JobState.PENDING,
        2,
        None,
        T0_MS + 5001,
    )
    assert (failed.state, failed.attempts_remaining) == (JobState.FAILED, 0)
    assert fresh.state == JobState.IN_PROGRESS


def test_reclaim_expired_stops_at_the_limit(shard, clock):
    enqueue(shard, *[b"x"] * 5)
    dequeue(shard)
    clock.advance_ms(10)
    counts = shard.reclaim_expired("q", 1, 1, 3)
    assert counts.retried + counts.failed == 3
    assert shard.count("q", JobState.IN_PROGRESS, [1], False, 10, None) == 2


def test_purge_measures_the_ttl_from_updated_at(shard, clock):
    enqueue(shard, b"old", b"young")
    enqueue(shard, b"delayed", run_after_ms=T0_MS + 10**9)
    dequeue(shard, limit=1)
    shard.ack("q", [Ack(1, 1, ClaimMatch(SOURCE))], [])
    clock.advance_ms(1000)
    dequeue(shard, limit=1)
    shard.ack("q", [Ack(1, 2, ClaimMatch(SOURCE))], [])
    assert shard.purge("q", 1, JobState.SUCCEEDED, 1000, 10) == 0
    clock.advance_ms(1)
    assert shard.purge("q", 1, JobState.SUCCEEDED, 1000, 10) == 1
    assert [r.local_id for r in shard.lookup("q", [(1, 1), (1, 2), (1, 3)], False)] == [2, 3]


# ---------------------------------------------------------------- clock, health, errors


def test_now_ms_is_the_injected_clock_plus_the_offset(shard, clock):
    assert shard.now_ms() == T0_MS
    shard.clock_offset_ms = 2500
    assert shard.now_ms() == T0_MS + 2500
    [local_id] = enqueue(shard, b"x")
    assert state_of(shard, local_id).created_at_ms == T0_MS + 2500


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
        "ack_failure",
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


# ---------------------------------------------------------------- paging, atomicity, races


def test_scan_pages_chained_by_their_last_record_visit_every_job_once(shard):
    for i in range(25):
        enqueue(shard, b"x", run_after_ms=T0_MS - (i % 4))  # many ties on run_after
    seen, bound = [], None
    for _ in range(20):  # bounded
        page = shard.scan("q", JobState.PENDING, {1: bound}, False, 4, None)
        if not page:
            break
        seen.extend((r.run_after_ms, r.local_id) for r in page)
        bound = ScanBound(page[-1].run_after_ms, page[-1].local_id)
    assert len(seen) == 25 and len(set(seen)) == 25
    assert seen == sorted(seen, reverse=True)


def test_delete_jobs_with_a_filter_pages_past_the_first_page(shard):
    enqueue(shard, *[b"keep"] * 150 + [b"drop"] * 60)
    assert shard.delete_jobs("q", JobState.PENDING, 1, 1000, lambda b: b == b"drop") == 60
    assert shard.count("q", JobState.PENDING, [1], False, 1000, None) == 150


def test_an_enqueue_that_fails_part_way_stores_nothing(shard):
    with pytest.raises(ShardError):
        shard.enqueue("q", [NewJob(b"ok", priority=1), NewJob(b"bad", priority=4)])
    assert shard.count("q", JobState.PENDING, [1], False, 10, None) == 0
    assert enqueue(shard, b"next") == [1]


def test_acks_racing_the_reclaimer_move_each_job_exactly_once(tmp_path, clock):
    shard = open_shard(tmp_path, clock)
    shard.create_queue("race")
    shard.enqueue("race", [NewJob(b"x", attempts_allowed=3) for _ in range(400)])
    jobs = shard.dequeue("race", 1, 400, new_claim(SOURCE))
    clock.advance_ms(10_000)
    acked, reclaimed = [], []

    def acker():
        for start in range(0, 400, 10):
            acked.append(
                shard.ack(
                    "race",
                    [Ack(1, j.local_id, ClaimMatch(SOURCE)) for j in jobs[start : start + 10]],
                    [],
                )
            )

    def reclaimer():
        for _ in range(100):  # bounded
            counts = shard.reclaim_expired("race", 1, 5_000, 7)
            reclaimed.append(counts.retried + counts.failed)

    threads = [threading.Thread(target=acker), threading.Thread(target=reclaimer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    succeeded = shard.count("race", JobState.SUCCEEDED, [1], False, 1000, None)
    pending = shard.count("race", JobState.PENDING, [1], False, 1000, None)
    shard.close()
    assert sum(acked) == succeeded
    assert sum(reclaimed) == pending
    assert succeeded + pending == 400
