"""Direct tests of the Redis shard primitives the sharded layer relies on, against throwaway
redis-server processes (never the system Redis). Time is moved with the shard's clock offset."""

from __future__ import annotations

import os
import signal
import threading
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest

from backends import redis_keys
from backends.redis_backend import RedisBackend, RedisShardSpec
from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from pinlater.errors import PinLaterError, QueueNotFound
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import StorageLimits
from pinlater.storage.errors import ShardError, StorageFull
from pinlater.storage.models import Ack, Checkpoint, ClaimMatch, JobState, NewJob, ScanBound
from tests.support import redis_env

SOURCE = "worker:host1"
REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with redis_env.running_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def backend():
    backend = RedisBackend({}, StorageLimits(num_priorities=3, status_cap=20))
    yield backend
    backend.close()


def open_shard(backend, server, name="s1"):
    return backend.open_shard(RedisShardSpec(name=name, port=server.port))


@pytest.fixture
def shard(backend, server, request):
    # a fresh shard name per test: tests never see each other's keys
    name = "t%d" % zlib.crc32(request.node.name.encode())
    shard = open_shard(backend, server, name)
    shard.create_queue("q")
    yield shard
    shard.delete_queue("q")
    shard.close()


def enqueue(shard, *bodies, queue="q", **fields):
    return shard.enqueue(queue, [NewJob(body=b, **fields) for b in bodies])


def dequeue(shard, limit=10, priority=1, source=SOURCE, queue="q"):
    return shard.dequeue(queue, priority, limit, new_claim(source))


def record(shard, local_id, priority=1, queue="q"):
    return shard.lookup(queue, [(priority, local_id)], True)[0]


def keys_of(server, pattern):
    with server.client() as client:
        return sorted(client.scan_iter(match=pattern, count=1000))


# ---------------------------------------------------------------- config


def test_shard_list_is_parsed_with_types_and_ranges():
    specs = RedisBackend.parse_shards(
        [{"name": "a", "port": "6380", "db": 2, "tls": "yes", "password": "pw"}], {}, "b.shards"
    )
    assert specs == [RedisShardSpec(name="a", port=6380, db=2, tls=True, password="pw")]
    with pytest.raises(ConfigError) as err:
        RedisBackend.parse_shards([{"name": "a", "port": 70000, "hostt": "x"}], {}, "b.shards")
    assert any("b.shards[0].port" in p for p in err.value.problems)
    assert any("b.shards[0].hostt" in p for p in err.value.problems)


def test_shipped_local_config_loads():
    config = load_config(REPO / "configs" / "redis.local.yaml", env={})
    assert config.backend.kind == "redis"
    assert [s.name for s in config.backend.shards] == ["r1", "r2"]
    assert config.backend.shards[1].port == 6379


def test_unknown_backend_option_is_rejected():
    with pytest.raises(ConfigError):
        RedisBackend.parse_options({"pool_size": 3}, "backend")
    assert RedisBackend.parse_options({"data_dir": "x"}, "backend") == {"data_dir": "x"}


def test_key_builder_refuses_names_that_could_escape_the_key_space():
    for bad in ("a:b", "*", "a{b}", "é", "a\n", ""):
        with pytest.raises(ValueError):
            redis_keys.queue_prefix("s1", bad)
    with pytest.raises(ValueError):
        redis_keys.registry_key("s_1")


# ---------------------------------------------------------------- queues


def test_every_primitive_raises_queue_not_found_for_an_unknown_queue(shard):
    match = ClaimMatch(SOURCE)
    calls = [
        lambda: shard.enqueue("nope", [NewJob(body=b"x")]),
        lambda: shard.dequeue("nope", 1, 5, new_claim(SOURCE)),
        lambda: shard.dequeue("nope", 1, 5, None),
        lambda: shard.dequeue("nope", 1, 0, new_claim(SOURCE)),
        lambda: shard.ack("nope", [Ack(1, 1, match)], []),
        lambda: shard.ack("nope", [], []),
        lambda: shard.checkpoint("nope", [Checkpoint(1, 1, match)]),
        lambda: shard.lookup("nope", [(1, 1)], False),
        lambda: shard.count("nope", JobState.PENDING, [1, 2], False, 10, None),
        lambda: shard.count("nope", JobState.PENDING, [1], False, 10, lambda b: True),
        lambda: shard.scan("nope", JobState.PENDING, {1: None}, False, 10, None),
        lambda: shard.scan("nope", JobState.PENDING, {1: None}, False, 10, lambda b: True),
        lambda: shard.retry_failed("nope", 1, 1, None, 10),
        lambda: shard.delete_jobs("nope", JobState.PENDING, 1, 10, None),
        lambda: shard.delete_jobs("nope", JobState.PENDING, 1, 10, lambda b: True),
        lambda: shard.reclaim_expired("nope", 1, 1000, 10),
        lambda: shard.purge("nope", 1, JobState.SUCCEEDED, 1000, 10),
    ]
    for call in calls:
        with pytest.raises(QueueNotFound) as err:
            call()
        assert err.value.queue == "nope"


def test_create_is_idempotent_and_names_are_listed(shard):
    shard.create_queue("Foo")
    shard.create_queue("Foo")
    enqueue(shard, b"x", queue="Foo")
    shard.create_queue("Foo")
    assert shard.queue_names() == {"q", "Foo"}
    assert shard.count("Foo", JobState.PENDING, [1], False, 10, None) == 1
    shard.delete_queue("Foo")
    shard.delete_queue("Foo")
    assert shard.queue_names() == {"q"}


def test_delete_queue_removes_every_key_of_every_state(shard, server):
    shard.create_queue("big")
    ids = enqueue(shard, *[b"%d" % i for i in range(12)], queue="big", attempts_allowed=1)
    enqueue(shard, b"p3", queue="big", priority=3)
    enqueue(shard, b"later", queue="big", run_after_ms=shard.now_ms() + HOUR_MS)
    jobs = dequeue(shard, 6, queue="big")
    shard.ack(
        "big",
        [Ack(1, j.local_id, ClaimMatch(SOURCE)) for j in jobs[:2]],
        [Ack(1, j.local_id, ClaimMatch(SOURCE)) for j in jobs[2:4]],
    )
    assert len(ids) == 12
    prefix = redis_keys.queue_prefix(shard.name, "big")
    assert keys_of(server, prefix + ":*")
    shard.delete_queue("big")
    assert keys_of(server, prefix + ":*") == []
    assert "big" not in shard.queue_names()
    shard.create_queue("big")  # ids start again in a queue created anew
    assert enqueue(shard, b"again", queue="big") == [1]


def test_two_shards_on_one_instance_do_not_see_each_other(backend, server):
    a, b = open_shard(backend, server, "isoA"), open_shard(backend, server, "isoB")
    try:
        a.create_queue("same")
        with pytest.raises(QueueNotFound):
            enqueue(b, b"x", queue="same")
        b.create_queue("same")
        enqueue(a, b"a1", b"a2", queue="same")
        assert b.count("same", JobState.PENDING, [1], False, 10, None) == 0
        assert enqueue(b, b"b1", queue="same") == [1]
    finally:
        a.delete_queue("same")
        b.delete_queue("same")
        a.close()
        b.close()


# ---------------------------------------------------------------- enqueue / dequeue


def test_bodies_come_back_byte_identical(shard):
    bodies = [b"", b"\x00\xff\xfe", "é€😀".encode(), bytes(range(256)) * 40]
    ids = enqueue(shard, *bodies)
    assert [r.body for r in shard.lookup("q", [(1, i) for i in ids], True)] == bodies
    assert [j.body for j in dequeue(shard, 10)] == bodies


def test_dequeue_orders_by_run_after_then_numeric_id(shard):
    now = shard.now_ms()
    ids = enqueue(shard, *[b"%d" % i for i in range(12)], run_after_ms=now - 1000)  # ids 1..12
    late = enqueue(shard, b"older", run_after_ms=now - 5000)
    got = [j.local_id for j in dequeue(shard, 20)]
    assert got == late + ids  # 1, 2, ..., 10, 11, 12 numerically, not "1", "10", "11", "2"


def test_dequeue_skips_future_jobs_until_the_shard_clock_reaches_them(shard):
    enqueue(shard, b"later", run_after_ms=shard.now_ms() + HOUR_MS)
    assert dequeue(shard) == []
    assert shard.count("q", JobState.PENDING, [1], True, 10, None) == 1
    shard.clock_offset_ms = HOUR_MS + 1000
    assert [j.body for j in dequeue(shard)] == [b"later"]


def test_dequeue_claims_and_reports_stored_attempts(shard):
    (job_id,) = enqueue(shard, b"x", attempts_allowed=3, custom_status="st")
    claim = new_claim(SOURCE)
    (job,) = shard.dequeue("q", 1, 5, claim)
    assert (job.local_id, job.attempts_allowed, job.attempts_remaining, job.claim) == (
        job_id,
        3,
        3,
        claim,
    )
    rec = record(shard, job_id)
    assert rec.state == JobState.IN_PROGRESS and rec.claim == claim
    assert rec.updated_at_ms >= rec.created_at_ms
    assert dequeue(shard) == []


def test_a_large_dequeue_moves_every_job_between_the_indexes(shard):
    ids = enqueue(shard, *[b"%d" % i for i in range(450)])  # past the script's ZADD chunk
    jobs = dequeue(shard, 1000)
    assert [j.local_id for j in jobs] == ids
    assert shard.count("q", JobState.PENDING, [1], False, 10**6, None) == 0
    assert shard.count("q", JobState.IN_PROGRESS, [1], False, 10**6, None) == 450
    shard.clock_offset_ms = 10_000
    assert shard.reclaim_expired("q", 1, 5_000, 1000).retried == 450  # ua index complete


def test_dry_run_returns_eligible_jobs_without_changing_them(shard):
    ids = enqueue(shard, b"a", b"b")
    before = shard.lookup("q", [(1, i) for i in ids], True)
    dry = shard.dequeue("q", 1, 1, None)
    assert [(j.local_id, j.body, j.claim) for j in dry] == [(ids[0], b"a", None)]
    assert shard.lookup("q", [(1, i) for i in ids], True) == before


def test_limit_zero_or_negative_touches_nothing(shard):
    enqueue(shard, b"a", b"b")
    assert shard.dequeue("q", 1, 0, new_claim(SOURCE)) == []
    assert shard.dequeue("q", 1, -1, None) == []
    assert shard.delete_jobs("q", JobState.PENDING, 1, 0, None) == 0
    assert shard.delete_jobs("q", JobState.PENDING, 1, -5, lambda b: True) == 0
    assert shard.count("q", JobState.PENDING, [1], False, 10, None) == 2


def test_ids_above_1e14_stay_exact(shard, server):
    with server.client() as client:
        client.set(redis_keys.seq_key(shard.name, "q", 1), 10**15)
    ids = enqueue(shard, b"a", b"b")
    assert ids == [10**15 + 1, 10**15 + 2]
    (job, _) = dequeue(shard, 2)
    assert job.local_id == 10**15 + 1
    assert shard.ack("q", [Ack(1, job.local_id, ClaimMatch(SOURCE))], []) == 1
    assert record(shard, 10**15 + 1).state == JobState.SUCCEEDED
    _, meta_key, _ = redis_keys.column_keys(shard.name, "q", 1)
    with server.client() as client:
        assert sorted(client.hkeys(meta_key)) == [b"0001000000000000001", b"0001000000000000002"]


def test_ids_past_two_to_the_53_are_refused_before_anything_is_stored(shard, server):
    with server.client() as client:
        client.set(redis_keys.seq_key(shard.name, "q", 1), redis_keys.MAX_LOCAL_ID - 1)
    with pytest.raises(ShardError):
        shard.enqueue("q", [NewJob(body=b"ok", priority=2), NewJob(body=b"a"), NewJob(body=b"b")])
    assert shard.count("q", JobState.PENDING, [1, 2], False, 10, None) == 0


def test_enqueue_of_many_priorities_is_one_atomic_batch(shard):
    ids = shard.enqueue(
        "q",
        [
            NewJob(body=b"1", priority=1),
            NewJob(body=b"3", priority=3),
            NewJob(body=b"1b", priority=1),
        ],
    )
    assert ids == [1, 1, 2]
    assert record(shard, 1, priority=3).body == b"3"


# ---------------------------------------------------------------- ack and fencing


def test_ack_success_needs_in_progress_and_the_exact_claim(shard):
    (job_id,) = enqueue(shard, b"x")
    assert shard.ack("q", [Ack(1, job_id, ClaimMatch(SOURCE))], []) == 0  # PENDING: no-op
    (job,) = dequeue(shard)
    wrong = new_claim(SOURCE)
    assert shard.ack("q", [Ack(1, job_id, ClaimMatch(SOURCE, wrong))], []) == 0
    assert shard.ack("q", [Ack(1, job_id, ClaimMatch(SOURCE, job.claim))], []) == 1
    assert shard.ack("q", [Ack(1, job_id, ClaimMatch(SOURCE, job.claim))], []) == 0
    rec = record(shard, job_id)
    assert rec.state == JobState.SUCCEEDED and rec.claim == job.claim


def test_claimless_ack_matches_the_source_exactly_not_as_a_substring(shard):
    enqueue(shard, b"x")
    (job,) = dequeue(shard, source="worker:host1")
    for other in ("worker", "host1", "worker:host", "worker:host1 ", ""):
        assert shard.ack("q", [], [Ack(1, job.local_id, ClaimMatch(other))]) == 0
    assert shard.ack("q", [], [Ack(1, job.local_id, ClaimMatch("worker:host1"))]) == 1


def test_stale_worker_cannot_ack_a_reclaimed_and_redequeued_job(shard):
    enqueue(shard, b"x", attempts_allowed=3)
    (first,) = dequeue(shard)
    shard.clock_offset_ms = 10_000
    assert shard.reclaim_expired("q", 1, 5_000, 10).retried == 1
    (second,) = dequeue(shard)
    assert shard.ack("q", [Ack(1, first.local_id, ClaimMatch(SOURCE, first.claim))], []) == 0
    assert (
        shard.checkpoint("q", [Checkpoint(1, first.local_id, ClaimMatch(SOURCE, first.claim))]) == 0
    )
    rec = record(shard, second.local_id)
    assert rec.state == JobState.IN_PROGRESS and rec.claim == second.claim
    assert rec.attempts_remaining == 2


def test_failure_ack_retries_with_delay_then_fails(shard):
    (job_id,) = enqueue(shard, b"x", attempts_allowed=2)
    (job,) = dequeue(shard)
    assert shard.ack("q", [], [Ack(1, job_id, ClaimMatch(SOURCE), retry_delay_ms=60_000)]) == 1
    rec = record(shard, job_id)
    assert (rec.state, rec.attempts_remaining, rec.claim) == (JobState.PENDING, 1, None)
    assert rec.run_after_ms >= rec.updated_at_ms + 60_000
    assert dequeue(shard) == []
    shard.clock_offset_ms = 61_000
    (job,) = dequeue(shard)
    assert shard.ack("q", [], [Ack(1, job_id, ClaimMatch(SOURCE), retry_delay_ms=-5)]) == 1
    rec = record(shard, job_id)
    assert (rec.state, rec.attempts_remaining) == (JobState.FAILED, 0)
    assert shard.retry_failed("q", 1, 4, None, 10) == 1
    rec = record(shard, job_id)
    assert (rec.state, rec.attempts_remaining, rec.attempts_allowed) == (JobState.PENDING, 4, 2)


def test_status_cap_counts_characters_and_keeps_the_newest_text(shard):
    # status_cap is 20 characters; multi-byte characters must not be cut in half
    (job_id,) = enqueue(shard, b"x", custom_status="é" * 30)
    assert record(shard, job_id).custom_status == "é" * 20
    dequeue(shard)
    assert (
        shard.checkpoint("q", [Checkpoint(1, job_id, ClaimMatch(SOURCE), prepend_status="€😀")])
        == 1
    )
    assert record(shard, job_id).custom_status == "€😀" + "é" * 18  # prepend keeps the first
    shard.ack("q", [Ack(1, job_id, ClaimMatch(SOURCE), append_status="a😀" * 3)], [])
    assert record(shard, job_id).custom_status == "é" * 14 + "a😀" * 3  # append keeps the last


def test_checkpoint_updates_body_attempts_run_after_and_extends_the_claim(shard):
    (job_id,) = enqueue(shard, b"old", attempts_allowed=5)
    (job,) = dequeue(shard)
    shard.clock_offset_ms = 4_000
    later = shard.now_ms() + HOUR_MS
    assert (
        shard.checkpoint(
            "q",
            [
                Checkpoint(
                    1,
                    job_id,
                    ClaimMatch(SOURCE, job.claim),
                    new_body=b"\xffnew",
                    attempts_allowed=7,
                    run_after_ms=later,
                )
            ],
        )
        == 1
    )
    rec = record(shard, job_id)
    assert (
        rec.state,
        rec.body,
        rec.attempts_allowed,
        rec.attempts_remaining,
        rec.run_after_ms,
    ) == (JobState.IN_PROGRESS, b"\xffnew", 7, 7, later)
    assert shard.reclaim_expired("q", 1, 3_000, 10).retried == 0  # updated_at moved forward
    assert shard.count("q", JobState.IN_PROGRESS, [1], True, 10, None) == 1  # re-indexed
    assert (
        shard.checkpoint("q", [Checkpoint(1, job_id, ClaimMatch(SOURCE), move_to_pending=True)])
        == 1
    )
    rec = record(shard, job_id)
    assert (rec.state, rec.claim) == (JobState.PENDING, None)
    assert shard.checkpoint("q", [Checkpoint(1, job_id, ClaimMatch(SOURCE))]) == 0


# ---------------------------------------------------------------- counts and scans


def test_count_splits_due_and_future_and_respects_the_cap(shard):
    now = shard.now_ms()
    enqueue(shard, b"a", b"b", b"c", run_after_ms=now - 10)
    enqueue(shard, b"f", run_after_ms=now + HOUR_MS, priority=2)
    assert shard.count("q", JobState.PENDING, [1, 2, 3], False, 100, None) == 3
    assert shard.count("q", JobState.PENDING, [1, 2, 3], True, 100, None) == 1
    assert shard.count("q", JobState.PENDING, [1, 2, 3], False, 2, None) == 2
    assert shard.count("q", JobState.PENDING, [1], False, 100, lambda b: b != b"b") == 2
    assert shard.count("q", JobState.PENDING, [1], False, 1, lambda b: True) == 1


def test_scan_pages_through_equal_run_afters_newest_first(shard):
    now = shard.now_ms()
    enqueue(shard, *[b"%d" % i for i in range(25)], run_after_ms=now - 100)  # one run_after
    enqueue(shard, b"newer", run_after_ms=now - 50)
    seen, bound = [], None
    for _ in range(10):
        page = shard.scan("q", JobState.PENDING, {1: bound}, False, 7, None)
        if not page:
            break
        seen += [(r.run_after_ms, r.local_id) for r in page]
        bound = ScanBound(page[-1].run_after_ms, page[-1].local_id)
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 26
    assert seen[0][1] == 26 and seen[1] == (now - 100, 25)
    assert all(r.body is None for r in shard.scan("q", JobState.PENDING, {1: None}, False, 3, None))


def test_scan_of_other_states_filters_by_run_after_and_body(shard):
    now = shard.now_ms()
    enqueue(shard, b"keep", b"drop", run_after_ms=now - 100)
    for job in dequeue(shard):
        shard.ack("q", [Ack(1, job.local_id, ClaimMatch(SOURCE))], [])
    assert shard.scan("q", JobState.SUCCEEDED, {1: None, 2: None}, True, 10, None) == []
    due = shard.scan("q", JobState.SUCCEEDED, {1: None, 2: None}, False, 10, None)
    assert [r.local_id for r in due] == [2, 1]
    filtered = shard.scan("q", JobState.SUCCEEDED, {1: None}, False, 10, lambda b: b == b"keep")
    assert [(r.local_id, r.body) for r in filtered] == [(1, None)]


def test_body_filter_errors_propagate(shard):
    enqueue(shard, b"x")

    def boom(body):
        raise PinLaterError("regex budget exceeded")

    with pytest.raises(PinLaterError):
        shard.count("q", JobState.PENDING, [1], False, 10, boom)


# ---------------------------------------------------------------- janitor, retry, delete


def test_reclaim_uses_updated_at_and_attempts(shard):
    enqueue(shard, b"two", attempts_allowed=2)
    enqueue(shard, b"one", attempts_allowed=1)
    dequeue(shard)
    assert shard.reclaim_expired("q", 1, 5_000, 10).retried == 0
    shard.clock_offset_ms = 6_000
    counts = shard.reclaim_expired("q", 1, 5_000, 10)
    assert (counts.retried, counts.failed) == (1, 1)
    assert [r.state for r in shard.lookup("q", [(1, 1), (1, 2)], False)] == [
        JobState.PENDING,
        JobState.FAILED,
    ]


def test_purge_uses_updated_at_not_run_after(shard):
    now = shard.now_ms()
    enqueue(shard, b"delayed", run_after_ms=now + 10 * HOUR_MS)
    enqueue(shard, b"soon", run_after_ms=now - 1)
    (job,) = dequeue(shard)
    shard.ack("q", [Ack(1, job.local_id, ClaimMatch(SOURCE))], [])
    assert shard.purge("q", 1, JobState.SUCCEEDED, 60_000, 10) == 0
    shard.clock_offset_ms = 61_000
    assert shard.purge("q", 1, JobState.SUCCEEDED, 60_000, 10) == 1
    assert shard.lookup("q", [(1, job.local_id)], False) == []
    assert shard.count("q", JobState.PENDING, [1], True, 10, None) == 1


def test_delete_jobs_with_and_without_filter(shard):
    enqueue(shard, *[b"a%d" % i for i in range(6)], *[b"b%d" % i for i in range(6)])
    assert shard.delete_jobs("q", JobState.PENDING, 1, 4, lambda b: b.startswith(b"b")) == 4
    assert shard.count("q", JobState.PENDING, [1], False, 100, None) == 8
    assert shard.delete_jobs("q", JobState.PENDING, 1, 3, None) == 3
    assert shard.delete_jobs("q", JobState.SUCCEEDED, 1, 3, None) == 0
    left = shard.scan("q", JobState.PENDING, {1: None}, False, 100, None)
    assert len(left) == 5 and all(r.local_id > 3 for r in left)


# ---------------------------------------------------------------- concurrency


def test_four_threads_dequeuing_claim_each_job_exactly_once(shard):
    for start in range(0, 2000, 500):
        enqueue(shard, *[b"%d" % i for i in range(start, start + 500)])
    claimed: Counter = Counter()
    lock = threading.Lock()

    def worker():
        for _ in range(1000):  # bounded
            jobs = dequeue(shard, 37)
            if not jobs:
                return
            with lock:
                claimed.update(j.local_id for j in jobs)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(claimed) == 2000 and set(claimed.values()) == {1}


# ---------------------------------------------------------------- storage failures


def test_unreachable_shard_fails_fast_with_a_retriable_error(backend):
    shard = backend.open_shard(
        RedisShardSpec(name="gone", port=redis_env.free_port(), socket_connect_timeout_seconds=0.5)
    )
    started = time.monotonic()
    with pytest.raises(ShardError) as err:
        shard.ping()
    assert err.value.retriable and time.monotonic() - started < 3
    with pytest.raises(ShardError):
        enqueue(shard, b"x")
    shard.close()


def test_a_frozen_redis_times_out_instead_of_hanging(backend, tmp_path):
    with redis_env.running_server(tmp_path / "frozen") as frozen:
        shard = backend.open_shard(
            RedisShardSpec(name="frozen", port=frozen.port, socket_timeout_seconds=0.5)
        )
        shard.create_queue("q")
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(ShardError) as err:
                enqueue(shard, b"x")
            assert err.value.retriable and time.monotonic() - started < 3
        finally:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        assert enqueue(shard, b"y")  # the pool recovers once Redis answers again
        shard.close()


def test_scripts_are_reloaded_after_script_flush(shard, server):
    enqueue(shard, b"a")
    with server.client() as client:
        client.script_flush()
    assert enqueue(shard, b"b") == [2]
    with server.client() as client:
        client.script_flush()
    assert len(shard.scan("q", JobState.PENDING, {1: None, 2: None}, False, 5, None)) == 2


def test_ack_and_dequeue_applies_the_acks_first_in_one_round_trip(shard, server):
    a, b, c = enqueue(shard, b"a", b"b", b"c", attempts_allowed=3)
    held = dequeue(shard, 2)
    ok, bad = (Ack(1, j.local_id, ClaimMatch(SOURCE, j.claim)) for j in held)
    with server.client() as client:
        client.script_flush()  # both scripts come back by NOSCRIPT, each run once
    applied, jobs = shard.ack_and_dequeue("q", [ok], [bad], 1, 5, new_claim(SOURCE))
    assert applied == 2
    # the failure-acked job (no delay) is pending again before the dequeue part runs
    assert sorted(j.local_id for j in jobs) == sorted([bad.local_id, c])
    assert record(shard, ok.local_id).state == JobState.SUCCEEDED
    assert record(shard, bad.local_id).attempts_remaining == 2
    assert shard.count("q", JobState.IN_PROGRESS, [1], False, 10, None) == 2
    assert {a, b} == {ok.local_id, bad.local_id}


def test_ack_and_dequeue_on_an_unknown_queue_changes_nothing(shard):
    (job_id,) = enqueue(shard, b"x")
    (job,) = dequeue(shard)
    with pytest.raises(QueueNotFound):
        shard.ack_and_dequeue(
            "nope", [Ack(1, job_id, ClaimMatch(SOURCE, job.claim))], [], 1, 5, new_claim(SOURCE)
        )
    assert record(shard, job_id).state == JobState.IN_PROGRESS


def test_shards_on_one_connection_share_a_pool_until_the_last_closes(backend, server):
    a, b = open_shard(backend, server, "poolA"), open_shard(backend, server, "poolB")
    assert a._client.connection_pool is b._client.connection_pool
    other = backend.open_shard(RedisShardSpec(name="poolC", port=server.port, db=1))
    assert other._client.connection_pool is not a._client.connection_pool
    a.close()
    a.close()  # idempotent: does not release b's share
    b.ping()
    assert len(backend._pools) == 2
    b.close()
    other.close()
    assert len(backend._pools) == 0


def test_oom_refusal_is_storage_full_and_stores_nothing(backend, tmp_path):
    with redis_env.running_server(tmp_path / "oom", maxmemory="3mb") as small:
        shard = open_shard(backend, small, "oom")
        shard.create_queue("q")
        body = b"x" * 50_000
        stored = 0
        with pytest.raises(StorageFull):
            for _ in range(200):  # ~10 MB offered to a 3 MB server
                stored += len(shard.enqueue("q", [NewJob(body=body)] * 5))
        assert 0 < stored < 200 * 5
        for _ in range(20):  # near the limit every refused call must store nothing
            try:
                stored += len(shard.enqueue("q", [NewJob(body=body)] * 5))
            except StorageFull:
                pass
            assert shard.count("q", JobState.PENDING, [1], False, 10**6, None) == stored
            with small.client() as client:  # the id counter did not move either
                assert int(client.get(redis_keys.seq_key("oom", "q", 1))) == stored
        # reads and deletes still work, and deleting frees room for writes again
        assert len(shard.scan("q", JobState.PENDING, {1: None}, False, 5, None)) == 5
        assert shard.delete_jobs("q", JobState.PENDING, 1, stored, None) == stored
        assert len(shard.enqueue("q", [NewJob(body=body)] * 5)) == 5
        shard.close()


def test_durability_warnings_flag_aof_off_and_eviction(backend, tmp_path):
    with redis_env.running_server(
        tmp_path / "aofoff", appendonly=False, extra=["--maxmemory-policy", "allkeys-lru"]
    ) as weak:
        warnings = open_shard(backend, weak, "weak").durability_warnings()
    assert any("appendonly" in w for w in warnings)
    assert any("allkeys-lru" in w for w in warnings)


def test_shipped_redis_conf_has_no_durability_warnings(backend, tmp_path):
    conf = REPO / "configs" / "redis-queue.conf"
    with redis_env.running_server(tmp_path / "conf", config_file=conf) as shipped:
        shard = open_shard(backend, shipped, "conf")
        assert shard.durability_warnings() == []
        shard.close()


def test_durability_warnings_when_config_is_disabled(backend, tmp_path):
    with redis_env.running_server(
        tmp_path / "noconf", extra=["--rename-command", "CONFIG", ""]
    ) as locked:
        warnings = open_shard(backend, locked, "locked").durability_warnings()
    assert len(warnings) == 1 and "could not check" in warnings[0]
