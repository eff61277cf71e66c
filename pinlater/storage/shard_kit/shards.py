"""The shard itself: its clock offset, ping and close, and two shards of one backend instance
keeping their own queues, jobs, ids and clocks."""

from __future__ import annotations

from pinlater.storage.claims import new_claim
from pinlater.storage.errors import QueueNotFound
from pinlater.storage.shard_kit.kit import (
    HOUR_MS,
    IN_PROGRESS,
    OTHER,
    PENDING,
    QUEUE,
    SOURCE,
    Kit,
    acked,
    raises,
)
from pinlater.storage.shard_kit.registry import check

# ---------------------------------------------------------------- clock and health


@check(rule="B-clock-per-shard")
def clock_offset_moves_now_and_the_stored_times(kit: Kit) -> None:
    before = kit.shard.now_ms()
    kit.shard.clock_offset_ms += 2500
    with kit.timed() as window:
        (local_id,) = kit.enqueue(b"x")
    assert window.lo >= before + 2500
    assert window.holds(kit.record(local_id).created_at_ms)


@check
def ping_answers_and_close_is_idempotent_per_handle(kit: Kit) -> None:
    spare = kit.open()
    spare.ping()
    spare.close()
    spare.close()
    kit.shard.ping()  # closing one handle leaves the others working
    assert kit.enqueue(b"x") == [1]


# ---------------------------------------------------------------- shard isolation


@check
def shards_of_one_backend_keep_their_own_queues(kit: Kit) -> None:
    other = kit.open(OTHER)
    assert other.queue_names() == set()
    raises(QueueNotFound, lambda: kit.enqueue(b"x", shard=other))
    other.create_queue(QUEUE)
    other.create_queue("only_other")
    assert kit.shard.queue_names() == {QUEUE}
    kit.enqueue(b"main")
    other.delete_queue(QUEUE)
    assert other.queue_names() == {"only_other"}
    assert kit.shard.queue_names() == {QUEUE} and kit.count() == 1


@check(rule=("I-ids-not-reused", "B-clock-per-shard"))
def shards_of_one_backend_keep_their_own_jobs(kit: Kit) -> None:
    other = kit.open(OTHER)
    other.create_queue(QUEUE)
    kit.enqueue(b"a1", b"a2", attempts_allowed=1)
    assert other.count(QUEUE, PENDING, [1], False, 10, None) == 0
    assert kit.enqueue(b"b1", shard=other, attempts_allowed=1) == [1]  # ids are per shard
    assert [j.body for j in other.dequeue(QUEUE, 1, 10, new_claim(SOURCE))] == [b"b1"]
    (job,) = kit.dequeue(1)
    assert other.ack(QUEUE, [acked(job)], []) == 0
    assert other.lookup(QUEUE, [(1, 2)], True) == []
    assert other.delete_jobs(QUEUE, PENDING, 1, 10, None) == 0
    other.clock_offset_ms = kit.shard.clock_offset_ms + HOUR_MS
    assert other.reclaim_expired(QUEUE, 1, 1000, 10).failed == 1  # its own job only
    assert [r.state for r in kit.records([1, 2])] == [IN_PROGRESS, PENDING]
    assert [r.body for r in kit.shard.lookup(QUEUE, [(1, 1), (1, 2)], True)] == [b"a1", b"a2"]
