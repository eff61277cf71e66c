"""Acks: the success and failure transitions, their guard (IN_PROGRESS and a matching claim;
anything else is a no-op), fencing by claim or by exact source, and ack_and_dequeue, which
applies its acks first."""

from __future__ import annotations

from pinlater.storage.claims import new_claim
from pinlater.storage.errors import QueueNotFound
from pinlater.storage.models import Ack, Checkpoint, ClaimMatch
from pinlater.storage.shard_kit.kit import (
    FAILED,
    HOUR_MS,
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SOURCE,
    SUCCEEDED,
    Kit,
    acked,
    by_source,
    held,
    raises,
)
from pinlater.storage.shard_kit.registry import check

# ---------------------------------------------------------------- ack


@check(rule=("T-ack-success", "T-no-op", "C-claim-fences", "C-source-match"))
def ack_success_needs_in_progress_and_a_matching_claim(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", b"pending")
    jobs = kit.dequeue(3)
    wrong = [
        Ack(1, 1, ClaimMatch(SOURCE, new_claim(SOURCE))),
        Ack(1, 2, by_source("worker:host")),
        Ack(1, 4, by_source()),
    ]
    assert kit.ack(wrong) == 0
    assert {kit.record(i).state for i in (1, 2)} == {IN_PROGRESS}
    assert kit.record(4).state == PENDING
    assert kit.ack([Ack(1, 1, held(jobs[0]), "ok"), Ack(1, 2, by_source())]) == 2
    done = kit.record(1)
    assert (done.state, done.custom_status, done.claim) == (SUCCEEDED, "ok", jobs[0].claim)
    assert kit.ack([Ack(1, 1, by_source(), "again")]) == 0
    assert kit.record(1).custom_status == "ok"


@check(rule=("T-no-op", "C-claim-fences"))
def ack_stale_claim_is_a_noop(kit: Kit) -> None:
    (local_id,) = kit.enqueue(b"x")
    assert kit.ack([Ack(1, local_id, by_source())]) == 0  # PENDING: nothing to ack
    (job,) = kit.dequeue()
    assert kit.ack([Ack(1, local_id, ClaimMatch(SOURCE, new_claim(SOURCE)))]) == 0
    assert kit.ack(failed=[Ack(1, local_id, ClaimMatch(SOURCE, new_claim(SOURCE)))]) == 0
    padded = ClaimMatch(SOURCE, f"{job.claim} ")  # equality is exact, trailing spaces count
    assert kit.ack([Ack(1, local_id, padded)]) == 0
    assert kit.checkpoint(Checkpoint(1, local_id, padded)) == 0
    assert kit.record(local_id).state == IN_PROGRESS
    assert kit.ack([Ack(1, local_id, held(job))]) == 1
    assert kit.ack([Ack(1, local_id, held(job))]) == 0
    assert kit.ack(failed=[Ack(1, local_id, held(job))]) == 0
    record = kit.record(local_id)
    assert record.state == SUCCEEDED and record.claim == job.claim


@check(rule=("T-ack-failure-retry", "T-ack-failure-final"))
def ack_failure_retries_after_the_delay_then_fails_for_good(kit: Kit) -> None:
    kit.enqueue(b"a", attempts_allowed=2, custom_status="s")
    kit.dequeue()
    with kit.timed() as window:
        assert kit.ack(failed=[Ack(1, 1, by_source(), "1", retry_delay_ms=HOUR_MS)]) == 1
    record = kit.record(1)
    assert (record.state, record.attempts_remaining, record.claim, record.custom_status) == (
        PENDING,
        1,
        None,
        "s1",
    )
    assert window.holds(record.run_after_ms, plus=HOUR_MS)
    assert window.holds(record.updated_at_ms)
    assert kit.dequeue() == []
    kit.advance(HOUR_MS + 1000)
    (job,) = kit.dequeue()
    assert job.attempts_remaining == 1
    assert kit.ack(failed=[Ack(1, 1, held(job), "2", retry_delay_ms=999)]) == 1
    failed = kit.record(1)
    assert (failed.state, failed.attempts_remaining, failed.claim, failed.custom_status) == (
        FAILED,
        0,
        job.claim,
        "s12",
    )
    assert failed.run_after_ms == record.run_after_ms  # a final failure does not reschedule
    assert kit.dequeue() == []


@check(rule="T-ack-failure-retry")
def ack_failure_with_a_negative_delay_is_due_now(kit: Kit) -> None:
    kit.enqueue(b"a", attempts_allowed=3)
    kit.dequeue()
    with kit.timed() as window:
        assert kit.ack(failed=[Ack(1, 1, by_source(), retry_delay_ms=-5000)]) == 1
    assert window.holds(kit.record(1).run_after_ms)
    assert [(j.local_id, j.attempts_remaining) for j in kit.dequeue()] == [(1, 2)]


@check(rule=("T-ack-success", "T-no-op"))
def ack_batches_apply_per_job_guards_across_priorities(kit: Kit) -> None:
    ids = kit.enqueue(b"a", b"b", b"c")
    kit.enqueue(b"p2", priority=2)
    claim = new_claim(SOURCE)
    kit.shard.dequeue(QUEUE, 1, 2, claim)
    (p2,) = kit.dequeue(priority=2)
    acks = [Ack(1, i, ClaimMatch(SOURCE, claim), "done") for i in ids] + [Ack(2, 1, held(p2))]
    assert kit.ack(acks) == 3  # the third priority-1 job is PENDING: untouched
    assert kit.ack(acks) == 0  # resent acks are no-ops
    states = {r.local_id: r.state for r in kit.records(ids)}
    assert states == {ids[0]: SUCCEEDED, ids[1]: SUCCEEDED, ids[2]: PENDING}
    assert kit.record(1, priority=2).state == SUCCEEDED


# ---------------------------------------------------------------- fencing


@check(rule="C-source-match")
def fencing_a_claimless_ack_matches_the_source_exactly(kit: Kit) -> None:
    kit.enqueue(b"x")
    (job,) = kit.dequeue(source="worker:host1")
    for other in ("worker", "host1", "worker:host", "worker:host1 ", "worker:host%", "%", ""):
        assert kit.ack(failed=[Ack(1, job.local_id, by_source(other))]) == 0
        assert kit.checkpoint(Checkpoint(1, job.local_id, by_source(other))) == 0
    assert kit.ack(failed=[Ack(1, job.local_id, by_source("worker:host1"))]) == 1


@check(rule="C-claim-fences")
def fencing_a_stale_worker_cannot_touch_a_reclaimed_and_redequeued_job(kit: Kit) -> None:
    kit.enqueue(b"x", attempts_allowed=3)
    (first,) = kit.dequeue()
    kit.advance(60_000)
    assert kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10).retried == 1
    (second,) = kit.dequeue()
    assert kit.ack_jobs([first]) == 0
    assert kit.ack_jobs(failed=[first]) == 0
    assert kit.checkpoint(Checkpoint(1, first.local_id, held(first), move_to_pending=True)) == 0
    record = kit.record(second.local_id)
    assert record.state == IN_PROGRESS and record.claim == second.claim
    assert record.attempts_remaining == 2


# ---------------------------------------------------------------- ack_and_dequeue


@check(rule="D-acks-first")
def ack_and_dequeue_applies_the_acks_first(kit: Kit) -> None:
    a, b, c = kit.enqueue(b"a", b"b", b"c", attempts_allowed=3)
    ok_job, bad_job = kit.dequeue(2)
    ok, bad = acked(ok_job), acked(bad_job)
    claim = new_claim(SOURCE)
    applied, jobs = kit.shard.ack_and_dequeue(QUEUE, [ok], [bad], 1, 5, claim)
    assert applied == 2
    # the failure-acked job (no delay) is pending again before the dequeue part runs
    assert sorted(j.local_id for j in jobs) == sorted([bad.local_id, c])
    assert {j.claim for j in jobs} == {claim}
    assert kit.record(ok.local_id).state == SUCCEEDED
    assert kit.record(bad.local_id).attempts_remaining == 2
    assert kit.count(IN_PROGRESS) == 2
    assert {a, b} == {ok.local_id, bad.local_id}


@check(rule="D-acks-first")
def ack_and_dequeue_respects_the_retry_delay(kit: Kit) -> None:
    kit.enqueue(b"a", attempts_allowed=3)
    (job,) = kit.dequeue()
    delayed = Ack(1, job.local_id, held(job), retry_delay_ms=HOUR_MS)
    applied, jobs = kit.shard.ack_and_dequeue(QUEUE, [], [delayed], 1, 5, new_claim(SOURCE))
    assert (applied, jobs) == (1, [])
    assert kit.count(future=True) == 1


@check(rule="E-queue-not-found")
def ack_and_dequeue_on_an_unknown_queue_changes_nothing(kit: Kit) -> None:
    (local_id,) = kit.enqueue(b"x")
    (job,) = kit.dequeue()
    ack = Ack(1, local_id, held(job))
    raises(
        QueueNotFound,
        lambda: kit.shard.ack_and_dequeue("nope", [ack], [], 1, 5, new_claim(SOURCE)),
    )
    assert kit.record(local_id).state == IN_PROGRESS
