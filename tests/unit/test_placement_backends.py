"""Partitions per queue on real storage, 8 shards of each backend (SQLite files, 8 shards on
one throwaway redis-server, one throwaway mariadbd instance with 8 databases per queue): a
1-partition queue's requests never call the other 7 shards (every storage call counted), and
a placement change moves no job while every job stays reachable until drained."""

from __future__ import annotations

import collections
import itertools

import pytest

from backends import backend_class
from pinlater.ops.placement_check import PlacementCheck
from pinlater.storage.contract import StorageLimits
from pinlater.storage.models import Ack, ClaimMatch, JobState, NewJob
from pinlater.storage.sharded import ShardedBackend
from tests.support.many_shards import SHARDS, eight_shards

_names = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", "redis", "mysql"])
def storage(request, tmp_path_factory):
    with eight_shards(request.param, tmp_path_factory.mktemp(request.param)) as found:
        yield found


class Counted:
    """A ShardedBackend over the storage with every storage call attempt counted per shard."""

    def __init__(self, storage):
        kind, options, entries = storage
        cls = backend_class(kind)
        parsed = cls.parse_options(options, "backend")
        specs = cls.parse_shards(entries, parsed, "shards")
        assert len(specs) == SHARDS
        self.store = ShardedBackend(cls(parsed, StorageLimits()), specs, num_priorities=3)
        self.calls: collections.Counter[str] = collections.Counter()
        self.store.call_observer = lambda shard, seconds, ok: self.calls.update([shard])
        self.check = PlacementCheck(self.store)

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def counted(storage):
    c = Counted(storage)
    yield c
    c.close()


def new_queue(store: ShardedBackend, partitions: int | None) -> str:
    queue = f"pq{next(_names)}"
    store.placement.configure({queue: partitions} if partitions else {})
    store.create_queue(queue)
    return queue


def acked(descriptor, job) -> tuple[str, Ack]:
    return descriptor.shard, Ack(
        descriptor.priority, descriptor.local_id, ClaimMatch("t", job.claim)
    )


def every_request(store: ShardedBackend, queue: str) -> None:
    """Every kind of job request once or more: enqueue, dequeue with acks, count, scan,
    lookup, retry, delete, and a dequeue of an empty queue."""
    for _ in range(10):
        store.enqueue(queue, [NewJob(b"x", priority=p, attempts_allowed=1) for p in (1, 2, 3)])
    got = store.dequeue(queue, 6, "t")
    assert len(got) == 6
    ok = [acked(d, job) for d, job in got[:3]]
    failed = [acked(d, job) for d, job in got[3:]]
    store.ack(queue, ok, failed)
    assert store.count(queue, JobState.PENDING, None, False, 1000, None) == 24
    rows, _ = store.scan(queue, JobState.PENDING, None, False, "0", 100, None)
    assert len(rows) == 24
    assert len(store.lookup([d for d, _ in rows[:5]], include_body=True)) == 5
    assert (
        store.retry_failed(queue, 1, 1, None, 100)
        + store.retry_failed(queue, 2, 1, None, 100)
        + store.retry_failed(queue, 3, 1, None, 100)
        == 3
    )
    assert store.delete_jobs(queue, JobState.SUCCEEDED, 1, 100, None) >= 0
    while store.dequeue(queue, 100, "t"):
        pass
    assert store.dequeue(queue, 10, "t") == []


def test_a_one_partition_queue_never_calls_the_other_seven_shards(counted):
    store = counted.store
    queue = new_queue(store, 1)
    [placed] = store.placement.targets(queue)
    counted.check.run_once()  # the first check: no other shard holds jobs of the queue
    assert store.placement.dequeue_shards(queue) == (placed,)
    counted.calls.clear()
    every_request(store, queue)
    assert set(counted.calls) == {placed}, counted.calls


def test_a_queue_without_partitions_still_uses_every_shard(counted):
    store = counted.store
    queue = new_queue(store, None)
    counted.calls.clear()
    assert store.dequeue(queue, 10, "t") == []
    assert len(counted.calls) == SHARDS and sum(counted.calls.values()) == SHARDS * 3


def drain(store: ShardedBackend, queue: str) -> set[str]:
    """Dequeue and ack (success) until nothing comes; the descriptors handed out."""
    seen: set[str] = set()
    for _ in range(20):
        got = store.dequeue(queue, 5, "t")
        if not got:
            break
        seen |= {str(d) for d, _ in got}
        store.ack(queue, [acked(d, j) for d, j in got], [])
    return seen


def test_placement_changes_move_no_job_and_every_job_stays_reachable_until_drained(counted):
    store, check = counted.store, counted.check
    queue = new_queue(store, 3)
    check.run_once()
    first = store.placement.targets(queue)
    jobs = {str(d) for _ in range(12) for d in store.enqueue(queue, [NewJob(b"a")])}
    assert {j.split(":")[1][1:] for j in jobs} <= set(first)
    store.placement.configure({queue: 1})  # two partitions leave: their jobs stay there
    [now] = store.placement.targets(queue)
    assert now == first[0], "rendezvous keeps the first of the old placement"
    jobs |= {str(d) for d in store.enqueue(queue, [NewJob(b"b") for _ in range(4)])}
    check.run_once()
    assert store.count(queue, JobState.PENDING, None, False, 1000, None) == 16
    assert drain(store, queue) == jobs, "a job on an old partition was not handed out"
    check.run_once()
    # drained of open jobs: dequeues leave the old partitions; reads still see the history
    assert store.placement.dequeue_shards(queue) == (now,)
    assert store.count(queue, JobState.SUCCEEDED, None, False, 1000, None) == 16
    for priority in (1, 2, 3):
        store.delete_jobs(queue, JobState.SUCCEEDED, priority, 100, None)
    check.run_once()
    assert store.placement.read_shards(queue) == (now,)
