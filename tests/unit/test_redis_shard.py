"""The Redis shard: the shard contract through the kit, against a throwaway redis-server (never
the system Redis; time moves with the shard's clock offset), then what only Redis has: the key
layout and its validation, id encoding, negative limits in Lua, script reloading (NOSCRIPT),
failing or full servers, pool sharing and the durability check."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
import zlib
from pathlib import Path

import pytest

from backends import redis_keys
from backends.redis_backend import RedisBackend, RedisShardSpec
from backends.redis_scripts import SCRIPT_NAMES
from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import StorageLimits
from pinlater.storage.errors import ShardError, StorageFull
from pinlater.storage.leases import LEASE_FORGOTTEN_AFTER_MS, LEASES_FORGOTTEN_PER_CALL
from pinlater.storage.models import Ack, ClaimMatch, JobState, NewJob
from pinlater.storage.shard_kit import Capabilities, Storage, exercise
from tests.support import redis_env

pytestmark = pytest.mark.backend("redis")

SOURCE = "worker:host1"
REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000
_kit_runs = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with redis_env.running_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@contextlib.contextmanager
def redis_storage(server):
    """Shards on the module's redis-server under names no other check uses."""
    run = next(_kit_runs)
    yield Storage(
        new_backend=lambda limits: RedisBackend({}, limits),
        spec=lambda name: RedisShardSpec(name=f"kit{run}{name}", port=server.port),
    )


test_shard_contract = exercise(redis_storage, Capabilities())


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
    name = f"t{zlib.crc32(request.node.name.encode())}"
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
    assert RedisBackend.parse_options({"data_dir": "x"}, "backend") == {}  # accepted, unused


def test_key_builder_refuses_names_that_could_escape_the_key_space():
    for bad in ("a:b", "*", "a{b}", "é", "a\n", ""):
        with pytest.raises(ValueError):
            redis_keys.queue_prefix("s1", bad)
    with pytest.raises(ValueError):
        redis_keys.registry_key("s_1")


# ---------------------------------------------------------------- keys, ids and limits


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


def test_negative_limits_touch_nothing(shard):
    enqueue(shard, b"a", b"b")
    assert shard.dequeue("q", 1, -1, new_claim(SOURCE)) == []
    assert shard.dequeue("q", 1, -1, None) == []
    assert shard.delete_jobs("q", JobState.PENDING, 1, -5, None) == 0
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


def test_the_first_unknown_script_loads_every_script(shard, server):
    """After a restart or SCRIPT FLUSH the first NOSCRIPT loads them all: a later batch of acks
    then a dequeue can never find the dequeue script loaded and the ack script not (which
    would run the dequeue before the acks)."""
    enqueue(shard, b"a", b"b", b"c", attempts_allowed=3)
    held = dequeue(shard, 2)
    ok, bad = (Ack(1, j.local_id, ClaimMatch(SOURCE, j.claim)) for j in held)
    with server.client() as client:
        client.script_flush()
    assert dequeue(shard, 5, priority=2) == []  # one dequeue call after the flush, no ack
    scripts = shard._scripts
    with server.client() as client:
        shas = [getattr(scripts, name).sha for name in SCRIPT_NAMES]
        assert all(client.script_exists(*shas))
    applied, jobs = shard.ack_and_dequeue("q", [ok], [bad], 1, 5, new_claim(SOURCE))
    assert applied == 2
    assert bad.local_id in {j.local_id for j in jobs}  # the acks ran first


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
            with contextlib.suppress(StorageFull):
                stored += len(shard.enqueue("q", [NewJob(body=body)] * 5))
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


def test_a_queue_from_before_the_ledger_opens_its_books_with_its_jobs(shard):
    """A queue without a ledger hash (created by a version without the ledger): its books
    read as its jobs present enqueued, and the first write makes that the opening balance."""
    enqueue(shard, b"a", b"b")
    enqueue(shard, b"c", priority=3)
    shard._client.delete(f"{redis_keys.queue_prefix(shard.name, 'q')}:ledger")
    book = shard.ledger("q")
    assert book.counters["enqueued"] == 3 and book.present == 3 and book.balanced
    assert len(shard.dequeue("q", 1, 1, new_claim("w"))) == 1
    shard.delete_jobs("q", JobState.PENDING, 1, 10, None)
    book = shard.ledger("q")
    assert (book.counters["enqueued"], book.counters["dequeued"]) == (3, 1)
    assert book.counters["deleted"] == 1 and book.present == 2 and book.balanced


def test_only_fifo_dequeues_keep_a_mark_and_retry_failed_lowers_it(shard, server):
    """Queues that are not FIFO never get a :fh key (no script but dequeue_fifo.lua writes
    one); a FIFO dequeue keeps the mark past finished jobs, and a FAILED job retried below it
    pulls it back, so it is the head again."""
    enqueue(shard, b"a", b"b", queue="q", attempts_allowed=1)
    [job] = dequeue(shard, limit=1)
    shard.ack("q", [], [Ack(1, job.local_id, ClaimMatch(SOURCE, job.claim))])
    shard.retry_failed("q", 1, 1, None, 10)
    assert keys_of(server, f"pl:{shard.name}:*:fh") == []
    [first] = shard.dequeue_fifo("q", 1, 1, new_claim(SOURCE))
    shard.ack("q", [], [Ack(1, first.local_id, ClaimMatch(SOURCE, first.claim))])  # FAILED
    [second] = shard.dequeue_fifo("q", 1, 1, new_claim(SOURCE))
    assert (first.local_id, second.local_id) == (1, 2)
    mark = f"pl:{shard.name}:q:q:p1:fh"
    with server.client() as client:
        assert client.get(mark) == b"2"
    shard.ack("q", [Ack(1, 2, ClaimMatch(SOURCE, second.claim))], [])
    assert shard.retry_failed("q", 1, 1, None, 10) == 1
    with server.client() as client:
        assert client.get(mark) == b"1"
    assert [j.local_id for j in shard.dequeue_fifo("q", 5, 1, new_claim(SOURCE))] == [1]


def test_live_leases_forgets_leases_expired_for_a_day(shard, server):
    """Per-process heartbeats must not pile up: live_leases drops leases expired a day ago
    (at most LEASES_FORGOTTEN_PER_CALL a call) and keeps the others, expired or not."""
    for i in range(LEASES_FORGOTTEN_PER_CALL + 5):
        assert shard.acquire_lease(f"server/old{i}", f"old{i}", 1000)
    shard.clock_offset_ms += LEASE_FORGOTTEN_AFTER_MS + 2000
    assert shard.acquire_lease("server/recent-expired", "r", 1)
    assert shard.acquire_lease("server/live", "l", 60_000)
    shard.clock_offset_ms += 10
    key = redis_keys.lease_key(shard.name)
    assert shard.live_leases("server/") == {"server/live": "l"}
    with server.client() as client:
        assert client.hlen(key) == 2 + 5
    assert shard.live_leases("") == {"server/live": "l"}
    with server.client() as client:
        assert client.hlen(key) == 2
