"""Checkpoint: every field applied, the claim extended, run_after now unless given, and
move_to_pending; stale claims do nothing."""

from __future__ import annotations

from pinlater.storage.claims import new_claim
from pinlater.storage.models import Checkpoint, ClaimMatch
from pinlater.storage.shard_kit.kit import (
    HOUR_MS,
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SOURCE,
    Kit,
    by_source,
    held,
)
from pinlater.storage.shard_kit.registry import check


@check(rule=("T-checkpoint", "B-status-cap"))
def checkpoint_applies_every_field_and_extends_the_claim(kit: Kit) -> None:
    kit.enqueue(b"old", attempts_allowed=2, custom_status="0123456789")
    (job,) = kit.dequeue()
    kit.advance(40_000)
    later = kit.shard.now_ms() + HOUR_MS
    cp = Checkpoint(
        1,
        1,
        held(job),
        new_body=b"\xffnew",
        run_after_ms=later,
        attempts_allowed=7,
        prepend_status="abcdefghijklmno",
    )
    with kit.timed() as window:
        assert kit.checkpoint(cp) == 1
    record = kit.record(1)
    assert (
        record.state,
        record.body,
        record.run_after_ms,
        record.attempts_allowed,
        record.attempts_remaining,
        record.claim,
    ) == (IN_PROGRESS, b"\xffnew", later, 7, 7, job.claim)
    assert window.holds(record.updated_at_ms)
    assert record.custom_status == "abcdefghijklmno01234"
    kit.advance(30_000)  # 70 s after the dequeue, 30 s after the checkpoint
    assert kit.shard.reclaim_expired(QUEUE, 1, 60_000, 10).retried == 0  # claim extended
    assert kit.count(IN_PROGRESS, future=True) == 1  # its run_after is in the future now
    assert kit.count(IN_PROGRESS) == 0


@check(rule="T-checkpoint")
def checkpoint_without_fields_keeps_them_and_sets_run_after_now(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"body", attempts_allowed=4, run_after_ms=now - 50, custom_status="st")
    kit.dequeue()
    kit.advance(10)
    with kit.timed() as window:
        assert kit.checkpoint(Checkpoint(1, 1, by_source())) == 1
    record = kit.record(1)
    assert (record.body, record.attempts_allowed, record.attempts_remaining) == (b"body", 4, 4)
    assert (record.state, record.custom_status) == (IN_PROGRESS, "st")
    assert window.holds(record.run_after_ms) and window.holds(record.updated_at_ms)


@check(rule=("T-checkpoint-to-pending", "T-no-op", "C-claim-fences"))
def checkpoint_move_to_pending_clears_the_claim_and_stale_claims_do_nothing(kit: Kit) -> None:
    kit.enqueue(b"a")
    (job,) = kit.dequeue()
    stale = [
        Checkpoint(1, 1, ClaimMatch(SOURCE, new_claim(SOURCE))),
        Checkpoint(1, 1, by_source("worker")),
    ]
    assert kit.checkpoint(*stale) == 0
    assert kit.checkpoint(Checkpoint(1, 1, held(job), move_to_pending=True)) == 1
    record = kit.record(1)
    assert (record.state, record.claim) == (PENDING, None)
    assert kit.checkpoint(Checkpoint(1, 1, by_source())) == 0  # not IN_PROGRESS any more
    assert [j.local_id for j in kit.dequeue()] == [1]
