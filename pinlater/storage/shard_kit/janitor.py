"""What the janitor calls: reclaim_expired (expired claims back to PENDING or to FAILED, by the
attempts left) and purge (terminal jobs past their TTL, measured from updated_at); both take
only what is strictly older than the cutoff, and at most the limit."""

from __future__ import annotations

from pinlater.storage.models import ReclaimCounts
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

# ---------------------------------------------------------------- reclaim_expired


@check(rule="T-claim-expiry")
def reclaim_retries_or_fails_expired_claims_by_attempts_left(kit: Kit) -> None:
    kit.enqueue(b"retry", attempts_allowed=3)
    kit.enqueue(b"last", attempts_allowed=1)
    kit.enqueue(b"fresh")
    kit.dequeue(2)
    counts = kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10)
    assert (counts.retried, counts.failed) == (0, 0)
    kit.advance(60_000)
    kit.dequeue()
    with kit.timed() as window:
        counts = kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10)
    assert (counts.retried, counts.failed) == (1, 1)
    retried, failed, fresh = (kit.record(i) for i in (1, 2, 3))
    assert (retried.state, retried.attempts_remaining, retried.claim) == (PENDING, 2, None)
    assert window.holds(retried.run_after_ms) and window.holds(retried.updated_at_ms)
    assert (failed.state, failed.attempts_remaining) == (FAILED, 0)
    assert window.holds(failed.updated_at_ms)
    assert fresh.state == IN_PROGRESS
    assert [j.local_id for j in kit.dequeue()] == [1]


@check(needs_frozen_clock=True, rule="T-claim-expiry")
def reclaim_expiry_is_strictly_older_than_the_timeout(kit: Kit) -> None:
    kit.enqueue(b"x", attempts_allowed=2)
    kit.dequeue()
    kit.advance(5000)
    assert kit.shard.reclaim_expired(QUEUE, 1, 5000, 10).retried == 0  # updated_at == cutoff
    kit.advance(1)
    assert kit.shard.reclaim_expired(QUEUE, 1, 5000, 10).retried == 1
    assert kit.record(1).run_after_ms == kit.shard.now_ms()


@check(rule="J-batches")
def reclaim_stops_at_the_limit(kit: Kit) -> None:
    kit.enqueue(*[b"x"] * 5)
    kit.dequeue()
    kit.advance(10_000)
    counts = kit.shard.reclaim_expired(QUEUE, 1, 1000, 3)
    assert counts.retried + counts.failed == 3
    assert kit.count(IN_PROGRESS) == 2
    assert kit.shard.reclaim_expired(QUEUE, 2, 1000, 3) == ReclaimCounts(0, 0)


# ---------------------------------------------------------------- purge


@check(rule="T-purge")
def purge_measures_the_ttl_from_updated_at_not_run_after(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"old", b"young", run_after_ms=now - 10 * HOUR_MS)
    kit.enqueue(b"delayed", run_after_ms=now + 10 * HOUR_MS)
    (old,) = kit.dequeue(1)
    kit.ack_jobs([old])
    assert kit.shard.purge(QUEUE, 1, SUCCEEDED, 60_000, 10) == 0  # run_after is 10 hours ago
    kit.advance(120_000)
    (young,) = kit.dequeue(1)
    kit.ack_jobs([young])
    assert kit.shard.purge(QUEUE, 1, FAILED, 60_000, 10) == 0  # only the given state
    assert kit.shard.purge(QUEUE, 1, SUCCEEDED, 60_000, 10) == 1
    assert [r.local_id for r in kit.records([1, 2, 3])] == [2, 3]
    assert kit.count(future=True) == 1


@check(needs_frozen_clock=True, rule=("T-purge", "J-batches"))
def purge_ttl_is_strictly_older_and_stops_at_the_limit(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=1)
    kit.fail_for_good(kit.dequeue())
    kit.advance(1000)
    assert kit.shard.purge(QUEUE, 1, FAILED, 1000, 10) == 0  # updated_at == cutoff
    kit.advance(1)
    assert kit.shard.purge(QUEUE, 1, FAILED, 1000, 2) == 2
    assert kit.count(FAILED) == 1
