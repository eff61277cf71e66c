"""The empty-partition map (pinlater/storage/empty_partitions.py): what it marks and forgets,
and, with several servers' stores over the same two shards of each backend (SQLite files, a
throwaway redis-server, a throwaway mariadbd: MySQL's SKIP LOCKED once let an empty answer race
a call that found jobs) and enqueues mixed across them (Hypothesis), that it never hides a job
longer than its TTL."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends import backend_class
from pinlater.storage.contract import StorageLimits
from pinlater.storage.empty_partitions import EmptyPartitions
from pinlater.storage.models import NewJob
from pinlater.storage.sharded import ShardedBackend
from tests.support.many_shards import eight_shards

TTL = 2.0
PRIORITIES = 2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_partition_found_empty_is_skipped_until_its_ttl_or_a_change():
    clock = Clock()
    empty = EmptyPartitions(TTL, clock)
    empty.observed("q", "a", 1, 0, empty.epoch("q"), clock.now)
    assert empty.skip("q", "a", 1) and not empty.skip("q", "a", 2) and not empty.skip("q", "b", 1)
    clock.now += TTL - 0.01
    assert empty.skip("q", "a", 1)
    clock.now += 0.01
    assert not empty.skip("q", "a", 1), "expired TTL after the call began"
    empty.observed("q", "a", 1, 0, empty.epoch("q"), clock.now)
    empty.forget("q", ["a"], [2])
    assert empty.skip("q", "a", 1), "a change at another priority leaves it"
    empty.forget("q", ["a"], [1])
    assert not empty.skip("q", "a", 1)
    assert (empty.calls, empty.empty_calls) == (2, 2)


def test_a_call_that_raced_a_change_marks_nothing():
    clock = Clock()
    empty = EmptyPartitions(TTL, clock)
    epoch = empty.epoch("q")  # the dequeue begins...
    empty.forget("q", ["a"], [1])  # ...an enqueue lands meanwhile...
    empty.observed("q", "a", 1, 0, epoch, clock.now)  # ...and the call saw nothing
    assert not empty.skip("q", "a", 1)
    empty.observed("q", "a", 1, 3, empty.epoch("q"), clock.now)
    assert not empty.skip("q", "a", 1), "a call that found jobs marks nothing"


def test_an_empty_answer_next_to_a_call_that_found_jobs_marks_nothing():
    """MySQL: a dequeue skips rows a concurrent one holds locked, so it can find nothing
    while jobs remain behind the other's."""
    clock = Clock()
    empty = EmptyPartitions(TTL, clock)
    started = clock.now  # a call begins...
    clock.now += 0.001
    empty.observed("q", "a", 1, 1, empty.epoch("q"), clock.now)  # ...another finds a job...
    empty.observed("q", "a", 1, 0, empty.epoch("q"), started)  # ...then the first: nothing
    assert not empty.skip("q", "a", 1)
    empty.observed("q", "a", 2, 0, empty.epoch("q"), started)
    assert empty.skip("q", "a", 2), "only the partition where jobs were found"
    empty.observed("q", "a", 1, 0, empty.epoch("q"), clock.now + 0.001)
    assert empty.skip("q", "a", 1), "a call that began after it marks as usual"
    empty.found("q", "a", 1)  # a full prefetch there: maybe more
    assert not empty.skip("q", "a", 1), "found jobs unmark the partition"


def test_ttl_zero_never_skips_but_still_counts():
    empty = EmptyPartitions(0, Clock())
    empty.observed("q", "a", 1, 0, empty.epoch("q"), 0.0)
    assert not empty.enabled and not empty.skip("q", "a", 1)
    assert empty.empty_calls == 1


@pytest.fixture(params=["sqlite", "redis", "mysql"])
def servers(request, tmp_path):
    """Three stores (three servers) over the same two shards, their maps on one fake clock."""
    with eight_shards(request.param, tmp_path, count=2) as (kind, options, entries):
        cls = backend_class(kind)
        parsed = cls.parse_options(options, "backend")
        specs = cls.parse_shards(entries, parsed, "shards")
        clock = Clock()
        stores = []
        for seed in range(3):
            store = ShardedBackend(
                cls(parsed, StorageLimits(num_priorities=PRIORITIES)),
                specs,
                num_priorities=PRIORITIES,
                rng=random.Random(seed),
            )
            store.empty = EmptyPartitions(TTL, clock)
            stores.append(store)
        yield stores, clock
        for store in stores:
            store.close()


_OPS = st.one_of(
    st.tuples(st.just("enqueue"), st.integers(0, 2), st.integers(1, PRIORITIES)),
    st.tuples(st.just("dequeue"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("advance"), st.floats(0.2, 2.5), st.just(0)),
)
_queues = itertools.count()


def test_the_map_never_hides_a_job_longer_than_its_ttl(servers):
    stores, clock = servers

    @settings(max_examples=150, deadline=None)
    @given(ops=st.lists(_OPS, min_size=1, max_size=40))
    def run(ops):
        queue = f"h{next(_queues)}"
        stores[0].create_queue(queue)
        pending: dict[tuple[str, int, int], tuple[int, float]] = {}  # job -> (server, at)
        for op, a, b in ops:
            if op == "advance":
                clock.now += a
            elif op == "enqueue":
                [d] = stores[a].enqueue(queue, [NewJob(b"x", priority=b)])
                pending[(d.shard, d.priority, d.local_id)] = (a, clock.now)
            else:
                got = stores[a].dequeue(queue, b, "w")
                for d, _ in got:
                    del pending[(d.shard, d.priority, d.local_id)]
                if len(got) < b:  # every job left must be one the map may hide from `a`
                    for job, (origin, at) in pending.items():
                        assert origin != a, f"{job} enqueued through server {a} was hidden"
                        assert clock.now - at < TTL, f"{job} hidden {clock.now - at:.2f}s"

    run()
