"""The janitor primitives through Janitor.run_once: reclaim expired claims, purge by TTL."""

import pytest

from tests.conformance.faults import intercepted


@pytest.mark.rule("T-claim-expiry")
def test_expired_claims_come_back_or_fail_by_attempts_left(api, queue):
    once = api.enqueue(queue, *[{"body": b"1", "numAttemptsAllowed": 1}] * 5)
    twice = api.enqueue(queue, *[{"body": b"2", "numAttemptsAllowed": 2}] * 5)
    api.dequeue(queue, 10)
    api.advance(30_000)
    counts = api.janitor(claim_timeout_seconds=60)
    assert api.count(queue, 1) == 10  # not expired yet
    api.advance(31_000)
    counts = api.janitor(claim_timeout_seconds=60)
    assert counts.reclaimed_to_failed >= 5 and counts.reclaimed_to_pending >= 5
    assert {api.state(d) for d in once} == {3}
    assert {api.state(d) for d in twice} == {0}
    info = api.job(twice[0])
    assert info.attemptsRemaining == 1 and info.claimDescriptor is None
    assert api.job(once[0]).attemptsRemaining == 0
    assert sorted(api.dequeue_ids(queue, 10)) == sorted(twice)


@pytest.mark.rule("J-batches")
def test_reclaim_is_bounded_by_batch_size_but_finishes_in_one_pass(api, queue):
    api.enqueue(queue, *[b"x"] * 25)
    api.dequeue(queue, 25)
    api.advance(61_000)
    with intercepted(api.store, "reclaim_expired") as calls:
        counts = api.janitor(claim_timeout_seconds=60, batch_size=4)
    assert counts.reclaimed_to_pending >= 25
    assert api.count(queue, 0) == 25
    assert max(step.retried + step.failed for step in calls.results) <= 4


@pytest.mark.rule("J-batches")
def test_purge_is_bounded_by_batch_size_but_finishes_in_one_pass(api, queue):
    ds = api.enqueue(queue, *[b"x"] * 25)
    api.dequeue(queue, 25)
    api.ack(queue, succeeded=ds)
    api.advance(3_601_000)
    with intercepted(api.store, "purge") as calls:
        counts = api.janitor(succeeded_ttl_seconds=3600, batch_size=4)
    assert counts.purged_succeeded >= 25
    assert api.lookup(ds) == {}
    assert max(calls.results) <= 4 and sum(calls.results) >= 25


@pytest.mark.rule("T-purge")
def test_purge_uses_updated_at_not_run_after(api, queue):
    [old_run_after] = api.enqueue(queue, {"body": b"x", "runAfterTimestampMillis": 1_000})
    api.dequeue(queue)
    api.ack(queue, succeeded=[old_run_after])
    api.janitor(succeeded_ttl_seconds=3600)
    assert api.state(old_run_after) == 2  # finished just now: kept
    api.advance(3_601_000)
    api.janitor(succeeded_ttl_seconds=3600, claim_timeout_seconds=10**6)
    assert api.state(old_run_after) is None


@pytest.mark.rule("T-purge")
def test_purge_removes_only_the_expired_terminal_state(api, queue):
    ok = api.enqueue(queue, *[{"body": b"ok", "numAttemptsAllowed": 1}] * 3)
    bad = api.enqueue(queue, *[{"body": b"bad", "numAttemptsAllowed": 1}] * 3)
    api.dequeue(queue, 6)
    api.ack(queue, succeeded=ok, failed=bad)
    [waiting] = api.enqueue(queue, b"waiting")
    api.advance(2_000_000)
    counts = api.janitor(
        succeeded_ttl_seconds=1000, failed_ttl_seconds=10**6, claim_timeout_seconds=10**6
    )
    assert counts.purged_succeeded >= 3
    assert all(api.state(d) is None for d in ok)
    assert {api.state(d) for d in bad} == {3}
    assert api.state(waiting) == 0


@pytest.mark.rule("T-claim-expiry")
def test_janitor_leaves_healthy_claims_alone(api, queue):
    [d] = api.enqueue(queue, b"x")
    api.dequeue(queue)
    api.advance(59_000)
    api.janitor(claim_timeout_seconds=60)
    assert api.state(d) == 1
