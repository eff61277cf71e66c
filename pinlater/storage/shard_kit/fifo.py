"""FIFO dequeue (`Shard.dequeue_fifo`, docs/semantics.md `F-...`): heads in id order per
priority, the in-flight cap over every priority, a head not due blocking its priority only,
failed, reclaimed, checkpointed and retried jobs back at the head, dry runs, budgets, and
concurrent callers never passing the cap."""

from __future__ import annotations

import threading

from pinlater.storage.claims import new_claim
from pinlater.storage.contract import ByteBudget
from pinlater.storage.errors import QueueBusy, QueueNotFound
from pinlater.storage.models import Ack, Checkpoint, DequeuedJob, JobState
from pinlater.storage.shard_kit.kit import (
    HOUR_MS,
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SOURCE,
    Kit,
    held,
    raises,
)
from pinlater.storage.shard_kit.registry import check


def take(kit: Kit, limit: int = 10, cap: int = 1, queue: str = QUEUE) -> list[DequeuedJob]:
    """A claiming FIFO dequeue; QueueBusy (a MySQL named lock wait) is tried again."""
    for _ in range(20):
        try:
            return kit.shard.dequeue_fifo(queue, limit, cap, new_claim(SOURCE))
        except QueueBusy:
            continue
    raise AssertionError("dequeue_fifo stayed busy")


def ids(jobs: list[DequeuedJob]) -> list[tuple[int, int]]:
    return [(job.priority, job.local_id) for job in jobs]


def done(kit: Kit, *jobs: DequeuedJob) -> None:
    assert kit.ack(succeeded=[Ack(j.priority, j.local_id, held(j)) for j in jobs]) == len(jobs)


@check(rule=("F-order", "F-in-flight"))
def fifo_hands_out_heads_in_enqueue_order_under_the_cap(kit: Kit) -> None:
    kit.enqueue(*[b"j%d" % i for i in range(1, 8)])
    first = take(kit)
    assert ids(first) == [(1, 1)] and first[0].body == b"j1" and first[0].claim
    assert take(kit) == []  # the cap: one in flight
    done(kit, *first)
    assert ids(take(kit, cap=3)) == [(1, 2), (1, 3), (1, 4)]
    assert take(kit, cap=3) == []
    assert ids(take(kit, limit=2, cap=6)) == [(1, 5), (1, 6)]
    assert kit.count(IN_PROGRESS) == 5


@check(rule="F-order")
def fifo_takes_priority_one_first_and_a_blocked_head_blocks_only_its_priority(kit: Kit) -> None:
    later = kit.shard.now_ms() + HOUR_MS
    kit.enqueue(b"low1", b"low2", priority=2)
    kit.enqueue(b"delayed", run_after_ms=later)
    kit.enqueue(b"behind")
    jobs = take(kit, cap=3)
    assert ids(jobs) == [(2, 1), (2, 2)]  # priority 1 waits behind its delayed head
    done(kit, *jobs)
    kit.advance(HOUR_MS)
    assert ids(take(kit, cap=3)) == [(1, 1), (1, 2)]


@check(rule="F-in-flight")
def fifo_in_flight_counts_every_priority(kit: Kit) -> None:
    kit.enqueue(b"a", priority=3)
    kit.enqueue(b"b")
    (job,) = take(kit, limit=1, cap=2)
    assert ids([job]) == [(1, 1)]
    assert ids(take(kit, cap=2)) == [(3, 1)]
    assert take(kit, cap=2) == []


@check(rule="F-retry-head")
def fifo_failed_head_comes_back_first_after_its_delay(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=3)
    (job,) = take(kit)
    ack = Ack(1, job.local_id, held(job), retry_delay_ms=60_000)
    assert kit.ack(failed=[ack]) == 1
    assert take(kit) == []  # the head waits for its delay, nothing passes it
    kit.advance(60_000)
    again = take(kit)
    assert ids(again) == [(1, 1)] and again[0].attempts_remaining == 2
    done(kit, *again)
    assert ids(take(kit)) == [(1, 2)]


@check(rule="F-retry-head")
def fifo_failed_for_good_head_no_longer_blocks(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", attempts_allowed=1)
    jobs = take(kit)
    kit.fail_for_good(jobs)
    assert ids(take(kit)) == [(1, 2)]


@check(rule="F-retry-head")
def fifo_reclaimed_head_comes_back_first(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", attempts_allowed=2)
    take(kit)
    kit.advance(61_000)
    assert kit.shard.reclaim_expired(QUEUE, 1, 60_000, 10).retried == 1
    assert ids(take(kit, cap=2)) == [(1, 1), (1, 2)]


@check(rule=("F-retry-head", "F-checkpoint"))
def fifo_checkpoint_keeps_the_job_in_flight_or_puts_it_back_at_the_head(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    (job,) = take(kit)
    assert kit.checkpoint(Checkpoint(1, 1, held(job))) == 1
    assert take(kit) == []  # still in flight: counts against the cap
    later = kit.shard.now_ms() + 5_000
    assert kit.checkpoint(Checkpoint(1, 1, held(job), run_after_ms=later, move_to_pending=True))
    assert take(kit) == []  # back at the head, due at its new run_after
    kit.advance(5_000)
    assert ids(take(kit)) == [(1, 1)]


@check(rule="F-retry-head")
def fifo_retried_failed_job_goes_back_to_its_place(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=1)
    kit.fail_for_good(take(kit))
    second = take(kit)
    assert ids(second) == [(1, 2)]
    done(kit, *second)
    assert kit.shard.retry_failed(QUEUE, 1, 1, None, 10) == 1
    assert ids(take(kit)) == [(1, 1)]  # ahead of job 3


@check(rule="F-dry-run")
def fifo_dry_run_shows_what_a_claim_would_take_and_changes_nothing(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c")
    peek = kit.shard.dequeue_fifo(QUEUE, 10, 2, None)
    assert ids(peek) == [(1, 1), (1, 2)] and [j.claim for j in peek] == [None, None]
    assert [j.body for j in peek] == [b"a", b"b"]
    assert kit.count(PENDING) == 3
    assert ids(take(kit, cap=2)) == ids(peek)
    assert kit.shard.dequeue_fifo(QUEUE, 10, 2, None) == []


@check(rule="F-order")
def fifo_budget_stops_at_the_first_head_that_does_not_fit(kit: Kit) -> None:
    kit.enqueue(b"x" * 10, b"y" * 100, b"z")
    budget = ByteBudget(60, per_job=5)
    jobs = kit.shard.dequeue_fifo(QUEUE, 10, 5, new_claim(SOURCE), budget)
    assert ids(jobs) == [(1, 1)]
    assert kit.count(PENDING) == 2  # job 3 would fit, but it is behind job 2


@check()
def fifo_unknown_queue_raises_queue_not_found(kit: Kit) -> None:
    raises(QueueNotFound, lambda: kit.shard.dequeue_fifo("nope", 1, 1, new_claim(SOURCE)))
    raises(QueueNotFound, lambda: kit.shard.dequeue_fifo("nope", 1, 1, None))


@check(rule="F-in-flight")
def fifo_concurrent_callers_never_pass_the_cap(kit: Kit) -> None:
    kit.enqueue(*[b"j" for _ in range(20)])
    shards = [kit.open() for _ in range(6)]
    got: list[DequeuedJob] = []
    lock = threading.Lock()

    def worker(shard) -> None:
        for _ in range(20):
            try:
                jobs = shard.dequeue_fifo(QUEUE, 2, 3, new_claim(SOURCE))
            except QueueBusy:
                continue
            with lock:
                got.extend(jobs)
            return

    threads = [threading.Thread(target=worker, args=(s,)) for s in shards]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(j.local_id for j in got) == [1, 2, 3]
    assert kit.count(JobState.IN_PROGRESS) == 3


@check(rule=("F-in-flight", "F-retry-head"))
def fifo_ack_and_dequeue_applies_the_acks_first(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=2)
    (first,) = take(kit)
    done_ack = Ack(1, first.local_id, held(first))
    applied, jobs = kit.shard.ack_and_dequeue_fifo(QUEUE, [done_ack], [], 5, 1, new_claim(SOURCE))
    assert applied == 1 and ids(jobs) == [(1, 2)]  # the success freed the room
    failed = Ack(1, 2, held(jobs[0]))
    applied, again = kit.shard.ack_and_dequeue_fifo(QUEUE, [], [failed], 5, 1, new_claim(SOURCE))
    assert applied == 1 and ids(again) == [(1, 2)]  # back at the head, due at once
