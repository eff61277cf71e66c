"""Calls on many jobs at once: retry_failed and delete_jobs (oldest first, up to the limit, a
filter paging past the first page), a batch of 1500 jobs through every primitive, and deletes
and purges of more jobs than one step (DELETE_STEP) removes."""

from __future__ import annotations

from pinlater.storage.contract import DELETE_STEP
from pinlater.storage.models import Checkpoint
from pinlater.storage.shard_kit.kit import FAILED, IN_PROGRESS, PENDING, QUEUE, SUCCEEDED, Kit, held
from pinlater.storage.shard_kit.registry import check

# ---------------------------------------------------------------- retry_failed


@check(rule="T-retry-failed")
def retry_failed_moves_the_oldest_failed_jobs_back_to_pending(kit: Kit) -> None:
    now = kit.shard.now_ms()
    for offset in (-10, -30, -20):  # oldest run_after: job 2, then 3, then 1
        kit.enqueue(b"f", attempts_allowed=1, run_after_ms=now + offset)
    kit.fail_for_good(kit.dequeue())
    with kit.timed() as window:
        assert kit.shard.retry_failed(QUEUE, 1, 4, None, 2) == 2
    assert [r.state for r in kit.records([1, 2, 3])] == [FAILED, PENDING, PENDING]
    record = kit.record(2)
    assert (record.attempts_remaining, record.attempts_allowed, record.claim) == (4, 1, None)
    assert window.holds(record.run_after_ms) and window.holds(record.updated_at_ms)
    assert kit.shard.retry_failed(QUEUE, 1, 1, now + 10**6, 10) == 1
    assert (kit.record(1).state, kit.record(1).run_after_ms) == (PENDING, now + 10**6)
    assert kit.shard.retry_failed(QUEUE, 1, 1, None, 10) == 0
    assert kit.shard.retry_failed(QUEUE, 2, 1, None, 10) == 0


# ---------------------------------------------------------------- delete_jobs


@check(rule="T-delete-jobs")
def delete_jobs_touches_only_the_state_up_to_the_limit(kit: Kit) -> None:
    kit.enqueue(b"a1", b"b2", b"a3", b"a4", b"b5")
    kit.dequeue(1)
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 2, lambda b: b.startswith(b"a")) == 2
    assert [r.local_id for r in kit.records(range(1, 6))] == [1, 2, 5]
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10, None) == 2
    assert [r.local_id for r in kit.records(range(1, 6))] == [1]
    assert kit.shard.delete_jobs(QUEUE, SUCCEEDED, 1, 10, None) == 0
    assert kit.shard.delete_jobs(QUEUE, IN_PROGRESS, 1, 10, None) == 1


@check(rule="T-delete-jobs")
def delete_jobs_without_a_filter_takes_the_oldest_first(kit: Kit) -> None:
    kit.enqueue(*[b"a%d" % i for i in range(6)], *[b"b%d" % i for i in range(6)])
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 4, lambda b: b.startswith(b"b")) == 4
    assert kit.count() == 8
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 3, None) == 3
    left = kit.scan(limit=100)
    assert len(left) == 5 and all(r.local_id > 3 for r in left)


@check(rule="T-delete-jobs")
def delete_jobs_with_a_filter_pages_past_the_first_page(kit: Kit) -> None:
    kit.enqueue(*[b"keep"] * 150 + [b"drop"] * 60)
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 1000, lambda b: b == b"drop") == 60
    assert kit.count() == 150


# ---------------------------------------------------------------- large batches


@check
def batch_of_1500_jobs_moves_through_every_primitive(kit: Kit) -> None:
    n = 1500  # past id-list chunks (SQL) and script chunking (Redis)
    ids = kit.enqueue(*[b"%d" % i for i in range(n)], attempts_allowed=3)
    assert ids == list(range(1, n + 1))
    jobs = kit.dequeue(2 * n)
    assert [j.local_id for j in jobs] == ids
    assert (kit.count(), kit.count(IN_PROGRESS)) == (0, n)
    kit.advance(60_000)
    assert kit.shard.reclaim_expired(QUEUE, 1, 30_000, 2 * n).retried == n  # index complete
    jobs = kit.dequeue(2 * n)
    assert kit.checkpoint(*[Checkpoint(1, j.local_id, held(j)) for j in jobs]) == n
    assert kit.ack_jobs(jobs) == n
    assert len(kit.shard.lookup(QUEUE, [(1, i) for i in ids], True)) == n
    assert kit.count(SUCCEEDED) == n
    assert kit.shard.delete_jobs(QUEUE, SUCCEEDED, 1, 2 * n, None) == n


# ---------------------------------------------------------------- deletes in steps


def _enqueue_many(kit: Kit, count: int, body: bytes = b"j") -> None:
    for start in range(0, count, 1000):
        kit.enqueue(*[body] * min(1000, count - start))


@check(rule=("T-delete-jobs", "Q-delete-steps"))
def delete_jobs_past_one_step_deletes_exactly_up_to_the_limit(kit: Kit) -> None:
    _enqueue_many(kit, 2 * DELETE_STEP + 100)
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, DELETE_STEP + 7, None) == DELETE_STEP + 7
    assert kit.count() == DELETE_STEP + 93
    oldest_left = DELETE_STEP + 8
    assert [r.local_id for r in kit.records([1, oldest_left - 1, oldest_left])] == [oldest_left]
    drop = lambda body: body == b"j"  # noqa: E731 - every job matches: the ids path, in steps
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, DELETE_STEP + 1, drop) == DELETE_STEP + 1
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10**6, None) == 92
    assert kit.count() == 0


@check(rule=("T-purge", "Q-delete-steps"))
def purge_past_one_step_deletes_every_job_due(kit: Kit) -> None:
    _enqueue_many(kit, DELETE_STEP + 50)
    jobs = kit.dequeue(DELETE_STEP + 50)
    assert kit.ack_jobs(jobs) == DELETE_STEP + 50
    kit.advance(120_000)
    assert kit.shard.purge(QUEUE, 1, SUCCEEDED, 60_000, DELETE_STEP + 10) == DELETE_STEP + 10
    assert kit.shard.purge(QUEUE, 1, SUCCEEDED, 60_000, 10**6) == 40
    assert kit.count(SUCCEEDED) == 0
