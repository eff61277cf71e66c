"""queue_stats: many queues' depth and ages in one read, the same numbers `count` gives one by
one; missing queues left out; cap 0 reads the ages alone; a queue deleted is gone from it."""

from __future__ import annotations

from pinlater.storage.contract import MAX_STATS_QUEUES
from pinlater.storage.models import NewJob
from pinlater.storage.shard_kit.kit import (
    FAILED,
    HOUR_MS,
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SUCCEEDED,
    Kit,
)
from pinlater.storage.shard_kit.registry import check


@check
def queue_stats_agree_with_count_for_every_priority_state_and_window(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(*[b"due"] * 4, run_after_ms=now - 10, attempts_allowed=1)
    kit.enqueue(*[b"later"] * 2, run_after_ms=now + HOUR_MS)
    kit.enqueue(*[b"p3"] * 3, priority=3, run_after_ms=now - 10)
    jobs = kit.dequeue(3)
    kit.ack_jobs(succeeded=[jobs[0]])
    kit.ack_jobs(failed=[jobs[1]])  # one attempt: FAILED
    kit.shard.create_queue("other")
    kit.enqueue(b"o", queue="other", run_after_ms=now + HOUR_MS)
    with kit.timed() as window:
        stats = kit.shard.queue_stats([QUEUE, "other", "missing"], 1000)
    assert set(stats) == {QUEUE, "other"}  # a missing queue is left out, not an error
    mine = stats[QUEUE]
    assert window.holds(mine.now_ms)
    for priority in (1, 2, 3):
        for state in (PENDING, IN_PROGRESS, SUCCEEDED, FAILED):
            for future in (False, True):
                expected = kit.count(state, (priority,), future)
                assert mine.counts[(priority, state, future)] == expected, (priority, state)
    assert mine.counts[(1, PENDING, False)] == 1 and mine.counts[(1, PENDING, True)] == 2
    assert mine.counts[(1, IN_PROGRESS, False)] == 1
    assert mine.counts[(1, SUCCEEDED, False)] == mine.counts[(1, FAILED, False)] == 1
    assert mine.counts[(3, PENDING, False)] == 3
    assert stats["other"].counts[(1, PENDING, True)] == 1
    assert sum(stats["other"].counts.values()) == 1


@check
def queue_stats_cap_each_count_and_cap_zero_reads_only_the_ages(kit: Kit) -> None:
    kit.enqueue(*[b"x"] * 7)
    (capped,) = kit.shard.queue_stats([QUEUE], 5).values()
    assert capped.counts[(1, PENDING, False)] == 5
    (ages,) = kit.shard.queue_stats([QUEUE], 0).values()
    assert set(ages.counts.values()) <= {0}


@check
def queue_stats_give_the_oldest_update_of_each_aged_state_and_the_first_key_expiry(
    kit: Kit,
) -> None:
    (empty,) = kit.shard.queue_stats([QUEUE], 10).values()
    assert empty.oldest_update == {} and empty.first_key_expiry is None
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=1)
    with kit.timed() as first:
        jobs = kit.dequeue(3)
    kit.advance(5_000)
    with kit.timed() as second:
        kit.ack_jobs(succeeded=[jobs[0]])
        kit.ack_jobs(failed=[jobs[1]])
        kit.shard.enqueue_keyed(QUEUE, [NewJob(body=b"k", unique_key="key")], 60_000)
    (stats,) = kit.shard.queue_stats([QUEUE], 10).values()
    assert first.holds(stats.oldest_update[(1, IN_PROGRESS)])
    assert second.holds(stats.oldest_update[(1, SUCCEEDED)])
    assert second.holds(stats.oldest_update[(1, FAILED)])
    assert (2, IN_PROGRESS) not in stats.oldest_update
    assert stats.first_key_expiry is not None and second.holds(stats.first_key_expiry, 60_000)


@check
def queue_stats_read_many_queues_and_leave_out_a_deleted_one(kit: Kit) -> None:
    names = [f"many{i}" for i in range(120)]  # more than one SQL statement's worth of tables
    for i, name in enumerate(names):
        kit.shard.create_queue(name)
        kit.enqueue(*[b"j"] * (i % 3), queue=name)
    kit.shard.delete_queue(names[7])
    asked = [*names, QUEUE]
    assert len(asked) <= MAX_STATS_QUEUES
    stats = kit.shard.queue_stats(asked, 100)
    assert set(stats) == set(asked) - {names[7]}
    for i, name in enumerate(names):
        if name in stats:
            assert stats[name].counts[(1, PENDING, False)] == i % 3, name
