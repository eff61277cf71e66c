"""Dequeue: eligibility (run_after <= now, one priority), order (run_after, then id as a number),
the claim and times it records, dry runs, and a limit of 0."""

from __future__ import annotations

from pinlater.storage.claims import new_claim
from pinlater.storage.shard_kit.kit import HOUR_MS, IN_PROGRESS, PENDING, QUEUE, SOURCE, Kit
from pinlater.storage.shard_kit.registry import check


@check(rule=("T-dequeue", "D-run-after-order"))
def dequeue_orders_by_run_after_then_id_and_skips_future_jobs(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"late", run_after_ms=now - 10)
    kit.enqueue(b"future", run_after_ms=now + HOUR_MS)
    kit.enqueue(b"early1", b"early2", run_after_ms=now - 20)
    kit.enqueue(b"now")
    assert [j.body for j in kit.dequeue()] == [b"early1", b"early2", b"late", b"now"]
    assert kit.dequeue() == []
    assert kit.count(future=True) == 1
    kit.advance(HOUR_MS + 1000)
    assert [j.body for j in kit.dequeue()] == [b"future"]


@check(rule="D-run-after-order")
def dequeue_orders_ids_numerically(kit: Kit) -> None:
    now = kit.shard.now_ms()
    ids = kit.enqueue(*[b"%d" % i for i in range(12)], run_after_ms=now - 1000)
    older = kit.enqueue(b"older", run_after_ms=now - 5000)
    assert [j.local_id for j in kit.dequeue(20)] == older + ids  # 1, 2, ..., 10, not 1, 10, 2


@check(rule="D-run-after-order")
def dequeue_batches_take_the_oldest_in_order(kit: Kit) -> None:
    """Which jobs a batch takes and in what order, when the batch is a part of what is due
    and ids run against run_after (a claim that reads candidates first must keep their
    order: MySQL's claim_select)."""
    now = kit.shard.now_ms()
    offsets = [(i * 7) % 20 for i in range(20)]  # distinct, neither id nor reverse-id order
    ids = [kit.enqueue(b"%d" % o, run_after_ms=now - 1000 * (1 + o))[0] for o in offsets]
    oldest_first = [i for _, i in sorted(zip(offsets, ids, strict=True), reverse=True)]
    batches = [[j.local_id for j in kit.dequeue(5)] for _ in range(4)]
    assert batches == [oldest_first[k : k + 5] for k in range(0, 20, 5)]
    assert kit.dequeue(5) == []


@check(needs_frozen_clock=True, rule="T-dequeue")
def dequeue_eligibility_includes_run_after_equal_to_now(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"now", run_after_ms=now)
    kit.enqueue(b"next", run_after_ms=now + 1)
    assert [j.body for j in kit.dequeue()] == [b"now"]
    kit.advance(1)
    assert [j.body for j in kit.dequeue()] == [b"next"]


@check(rule=("T-dequeue", "C-claim-returned"))
def dequeue_claims_with_updated_at_now_and_reports_stored_attempts(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=3, custom_status="st")
    kit.advance(500)
    claim = new_claim(SOURCE)
    with kit.timed() as window:
        jobs = kit.shard.dequeue(QUEUE, 1, 2, claim)
    assert [(j.local_id, j.priority, j.claim) for j in jobs] == [(1, 1, claim), (2, 1, claim)]
    assert [(j.attempts_allowed, j.attempts_remaining) for j in jobs] == [(3, 3), (3, 3)]
    record = kit.record(1)
    assert (record.state, record.claim, record.attempts_remaining) == (IN_PROGRESS, claim, 3)
    assert window.holds(record.updated_at_ms)
    assert record.updated_at_ms >= record.created_at_ms + 500
    assert record.custom_status == "st"
    assert [j.local_id for j in kit.dequeue()] == [3]
    assert kit.dequeue() == []


@check(rule="D-dry-run")
def dequeue_dry_run_changes_nothing(kit: Kit) -> None:
    ids = kit.enqueue(b"a", b"b", b"c", attempts_allowed=3)
    before = kit.shard.lookup(QUEUE, [(1, i) for i in ids], True)
    dry = kit.dry_run(2)
    assert [(j.local_id, j.body, j.claim, j.attempts_remaining) for j in dry] == [
        (1, b"a", None, 3),
        (2, b"b", None, 3),
    ]
    assert kit.shard.lookup(QUEUE, [(1, i) for i in ids], True) == before
    assert [j.local_id for j in kit.dequeue(2)] == [1, 2]
    assert [j.local_id for j in kit.dry_run()] == [3]  # claimed jobs are not eligible


@check
def dequeue_takes_one_priority(kit: Kit) -> None:
    kit.enqueue(b"p1")
    kit.enqueue(b"p2", priority=2)
    assert [(j.priority, j.body) for j in kit.dequeue(priority=2)] == [(2, b"p2")]
    assert kit.dequeue(priority=3) == []
    assert [(j.priority, j.body) for j in kit.dequeue(priority=1)] == [(1, b"p1")]


@check(rule=("D-limit", "T-delete-jobs"))
def dequeue_limit_zero_touches_nothing(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    assert kit.dequeue(0) == []
    assert kit.dry_run(0) == []
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 0, None) == 0
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 0, lambda b: True) == 0
    assert kit.count() == 2


@check(rule="W-wait-for-job")
def next_due_counts_down_to_the_earliest_pending_job(kit: Kit) -> None:
    shard = kit.shard
    assert shard.next_due_ms(QUEUE) is None
    now = shard.now_ms()
    kit.enqueue(b"later", priority=3, run_after_ms=now + HOUR_MS)
    due = shard.next_due_ms(QUEUE)
    assert due is not None and HOUR_MS - 60_000 < due <= HOUR_MS
    kit.enqueue(b"sooner", priority=2, run_after_ms=now + 60_000)
    due = shard.next_due_ms(QUEUE)
    assert due is not None and 0 < due <= 60_000
    kit.advance(61_000)
    assert shard.next_due_ms(QUEUE) == 0
    assert [j.body for j in kit.dequeue(priority=2)] == [b"sooner"]
    due = shard.next_due_ms(QUEUE)  # IN_PROGRESS jobs do not count
    assert due is not None and HOUR_MS - 120_000 < due <= HOUR_MS - 61_000 + 1000
    kit.enqueue(b"now")
    assert shard.next_due_ms(QUEUE) == 0
