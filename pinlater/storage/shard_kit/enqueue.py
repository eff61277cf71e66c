"""Enqueue: ids in input order, per priority, never reused while the queue exists, and the
fields a new job starts with."""

from __future__ import annotations

from pinlater.storage.models import NewJob
from pinlater.storage.shard_kit.kit import PENDING, QUEUE, Kit
from pinlater.storage.shard_kit.registry import check


@check(rule=("I-format", "I-ids-not-reused"))
def enqueue_returns_ids_in_input_order_across_priorities(kit: Kit) -> None:
    jobs = [NewJob(b"a", 1), NewJob(b"b", 2), NewJob(b"c", 1), NewJob(b"d", 2), NewJob(b"e", 3)]
    assert kit.shard.enqueue(QUEUE, jobs) == [1, 1, 2, 2, 1]
    assert kit.shard.enqueue(QUEUE, [NewJob(b"f", priority=2)]) == [3]
    found = kit.shard.lookup(QUEUE, [(2, 1), (2, 2), (2, 3), (3, 1)], True)
    assert [r.body for r in found] == [b"b", b"d", b"f", b"e"]


@check(rule=("T-enqueue", "B-status-cap"))
def enqueue_stores_state_attempts_times_and_a_truncated_status(kit: Kit) -> None:
    with kit.timed() as window:
        (local_id,) = kit.enqueue(b"x", attempts_allowed=5, custom_status="s" * 30)
    record = kit.record(local_id)
    assert (record.state, record.attempts_allowed, record.attempts_remaining) == (PENDING, 5, 5)
    assert record.created_at_ms == record.updated_at_ms == record.run_after_ms
    assert window.holds(record.created_at_ms)
    assert record.custom_status == "s" * 20
    assert record.claim is None


@check(rule="I-ids-not-reused")
def enqueue_ids_are_not_reused_while_the_queue_exists(kit: Kit) -> None:
    assert kit.enqueue(b"a", b"b", b"c") == [1, 2, 3]
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10, None) == 3
    assert kit.enqueue(b"d") == [4]
