"""Unique keys (`enqueue_keyed`, `purge_keys`): a held key stores nothing and reports its
holder, whatever became of the job; a key frees itself when its window ends; repeats within a
batch; keys per queue, byte-wise, freed with the queue; concurrent enqueues of one key from many
handles store one job."""

from __future__ import annotations

import functools
import threading

from pinlater.storage.models import Enqueued, NewJob
from pinlater.storage.shard_kit.kit import HOUR_MS, PENDING, QUEUE, Kit
from pinlater.storage.shard_kit.races import retried, run_threads
from pinlater.storage.shard_kit.registry import check

WINDOW = HOUR_MS


def keyed(kit: Kit, *jobs: NewJob, window: int = WINDOW, queue: str = QUEUE) -> list[Enqueued]:
    return kit.shard.enqueue_keyed(queue, list(jobs), window)


def job(body: bytes, key: str | None, priority: int = 1) -> NewJob:
    return NewJob(body, priority=priority, unique_key=key)


@check(rule=("U-key-dedup", "U-key-batch"))
def unique_held_key_stores_nothing_and_reports_its_holder(kit: Kit) -> None:
    first = keyed(kit, job(b"a", "k1"), job(b"b", "k2"))
    assert first == [Enqueued(1, 1, True), Enqueued(1, 2, True)]
    again = keyed(kit, job(b"a2", "k1"), job(b"plain", None), job(b"c", "k3"))
    assert again == [Enqueued(1, 1, False), Enqueued(1, 3, True), Enqueued(1, 4, True)]
    assert [r.body for r in kit.shard.lookup(QUEUE, [(1, 1)], True)] == [b"a"]
    assert kit.count() == 4


@check(rule="U-key-batch")
def unique_key_repeated_in_a_batch_stores_its_first_job(kit: Kit) -> None:
    result = keyed(kit, job(b"a", "k"), job(b"b", None), job(b"c", "k", priority=2))
    assert result == [Enqueued(1, 1, True), Enqueued(1, 2, True), Enqueued(1, 1, False)]
    assert kit.count(priorities=(1, 2)) == 2
    held = keyed(kit, job(b"d", "k", priority=3), job(b"e", "k"))
    assert held == [Enqueued(1, 1, False), Enqueued(1, 1, False)]


@check(rule="U-key-dedup")
def unique_holder_keeps_its_own_priority(kit: Kit) -> None:
    assert keyed(kit, job(b"a", "k", priority=2)) == [Enqueued(2, 1, True)]
    assert keyed(kit, job(b"b", "k", priority=1)) == [Enqueued(2, 1, False)]
    assert kit.count(priorities=(1,)) == 0


@check(rule="U-key-window")
def unique_key_outlives_its_job(kit: Kit) -> None:
    ((_, local_id, _),) = keyed(kit, job(b"a", "k"))
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10, None) == 1
    assert keyed(kit, job(b"b", "k")) == [Enqueued(1, local_id, False)]
    assert kit.count() == 0


@check(rule="U-key-window")
def unique_key_frees_itself_when_its_window_ends(kit: Kit) -> None:
    assert keyed(kit, job(b"a", "k"), window=60_000) == [Enqueued(1, 1, True)]
    kit.advance(59_000)
    assert keyed(kit, job(b"b", "k"), window=1) == [Enqueued(1, 1, False)]
    kit.advance(2_000)
    # the old job is still there; the key now belongs to the new one, with the new window
    assert keyed(kit, job(b"c", "k"), window=10_000) == [Enqueued(1, 2, True)]
    assert keyed(kit, job(b"d", "k")) == [Enqueued(1, 2, False)]
    assert kit.count() == 2


@check(rule="U-key-window", needs_frozen_clock=True)
def unique_key_expires_exactly_at_its_window(kit: Kit) -> None:
    keyed(kit, job(b"a", "k"), window=1000)
    kit.advance(999)
    assert keyed(kit, job(b"b", "k")) == [Enqueued(1, 1, False)]
    kit.advance(1)
    assert keyed(kit, job(b"c", "k")) == [Enqueued(1, 2, True)]


@check(rule="U-key-valid")
def unique_keys_are_per_queue_and_byte_wise(kit: Kit) -> None:
    kit.shard.create_queue("q2")
    assert keyed(kit, job(b"a", "Key"), job(b"b", "key")) == [
        Enqueued(1, 1, True),
        Enqueued(1, 2, True),
    ]
    assert keyed(kit, job(b"c", "Key"), queue="q2") == [Enqueued(1, 1, True)]
    assert keyed(kit, job(b"d", "key ~!|:%_*")) == [Enqueued(1, 3, True)]
    assert keyed(kit, job(b"e", "key ~!|:%_*")) == [Enqueued(1, 3, False)]


@check(rule="U-key-valid")
def unique_keys_go_with_their_queue(kit: Kit) -> None:
    keyed(kit, job(b"a", "k"))
    kit.shard.delete_queue(QUEUE)
    kit.shard.create_queue(QUEUE)
    assert keyed(kit, job(b"b", "k")) == [Enqueued(1, 1, True)]


@check(rule="J-purge-keys")
def unique_purge_keys_removes_only_expired_records(kit: Kit) -> None:
    keyed(kit, job(b"a", "short1"), job(b"b", "short2"), job(b"c", "short3"), window=1000)
    keyed(kit, job(b"d", "long"), window=10 * WINDOW)
    assert kit.shard.purge_keys(QUEUE, 10) == 0
    kit.advance(2 * WINDOW)
    assert kit.shard.purge_keys(QUEUE, 2) == 2
    assert kit.shard.purge_keys(QUEUE, 2) == 1
    assert kit.shard.purge_keys(QUEUE, 2) == 0
    assert keyed(kit, job(b"e", "long")) == [Enqueued(1, 4, False)]
    assert keyed(kit, job(b"f", "short1")) == [Enqueued(1, 5, True)]


@check(rule=("X-key-once", "U-key-dedup"))
def unique_concurrent_enqueues_of_one_key_store_one_job(kit: Kit) -> None:
    handles = [kit.open() for _ in range(6)]
    results: list[Enqueued] = []
    lock = threading.Lock()

    def enqueuer(n: int) -> None:
        shard = handles[n]
        for i in range(15):
            jobs = [job(b"%d-%d" % (n, i), f"k{i % 5}"), job(b"x", f"own-{n}-{i}")]
            got = retried(functools.partial(shard.enqueue_keyed, QUEUE, jobs, WINDOW))
            with lock:
                results.append(got[0])

    run_threads([functools.partial(enqueuer, n) for n in range(len(handles))])
    holders = {(r.priority, r.local_id) for r in results}
    assert len(holders) == 5, holders
    assert sum(r.stored for r in results) == 5
    assert kit.count(cap=10_000) == 5 + 6 * 15
