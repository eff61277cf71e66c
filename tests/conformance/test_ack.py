"""ackDequeuedJobs: the success/failure transitions, fencing and custom statuses."""

import pytest

from pinlater.idl import ErrorCode as E
from tests.conformance.api import WORKER


def claim_of(api, queue, limit=1):
    response = api.dequeue(queue, limit)
    return {d: m.claimDescriptor for d, m in (response.jobMetadata or {}).items()}


@pytest.mark.rule("T-ack-success")
def test_success_ack_moves_in_progress_job_to_succeeded(api, queue):
    [d] = api.enqueue(queue, b"x")
    claims = claim_of(api, queue)
    api.advance(5)
    api.ack(queue, succeeded=[d])
    info = api.job(d)
    assert info.jobState == 2
    assert (info.attemptsAllowed, info.attemptsRemaining) == (2, 2)
    assert info.claimDescriptor == claims[d]
    assert api.count(queue, 2) == 1 and api.count(queue, 1) == 0


@pytest.mark.rule("T-ack-failure-retry", "T-ack-failure-final")
def test_failure_with_attempts_left_goes_back_to_pending(api, queue):
    [d] = api.enqueue(queue, b"body")
    api.dequeue(queue)
    api.ack(queue, failed=[d])
    info = api.job(d)
    assert info.jobState == 0
    assert info.attemptsRemaining == 1
    assert info.claimDescriptor is None
    assert info.body == b"body"
    api.dequeue(queue)
    api.ack(queue, failed=[d])
    info = api.job(d)
    assert info.jobState == 3 and info.attemptsRemaining == 0


@pytest.mark.rule("T-ack-failure-retry", "B-times-ms")
def test_retry_delay_postpones_the_next_attempt(api, queue):
    [d] = api.enqueue(queue, b"x")
    api.dequeue(queue)
    now = api.now()
    api.ack(queue, failed=[(d, {"retryDelayMillis": 30_000})])
    info = api.job(d)
    assert now + 30_000 <= info.runAfterTimestampMillis <= api.now() + 30_000
    assert api.dequeue_ids(queue) == []
    api.advance(31_000)
    assert api.dequeue_ids(queue) == [d]


@pytest.mark.rule("T-ack-failure-retry")
def test_negative_retry_delay_means_now(api, queue):
    [d] = api.enqueue(queue, b"x")
    api.dequeue(queue)
    api.ack(queue, failed=[(d, {"retryDelayMillis": -50_000})])
    assert api.dequeue_ids(queue) == [d]


@pytest.mark.rule("T-no-op")
def test_acks_of_jobs_not_in_progress_change_nothing(api, queue):
    running, done, failed = api.enqueue(queue, b"r", b"d", {"body": b"f", "numAttemptsAllowed": 1})
    api.dequeue(queue, 3)
    api.ack(queue, succeeded=[done], failed=[failed])
    [fresh] = api.enqueue(queue, b"fresh")
    before = {d: api.job(d) for d in (done, failed, fresh)}
    api.advance(5)
    api.ack(queue, succeeded=[fresh, failed], failed=[done, fresh])
    assert {d: api.job(d) for d in (done, failed, fresh)} == before
    assert api.state(running) == 1


@pytest.mark.rule("T-ack-success", "B-status-cap")
def test_success_ack_appends_status_and_keeps_newest_text(api, queue):
    cap = api.app.config.limits.custom_status_max_chars
    [d] = api.enqueue(queue, {"body": b"x", "customStatus": "*"})
    api.dequeue(queue)
    api.ack(queue, succeeded=[(d, {"appendCustomStatus": "-" * cap})])
    status = api.job(d).customStatus
    assert len(status) == cap and status == "-" * cap


@pytest.mark.rule("T-ack-failure-retry")
def test_failure_ack_appends_status(api, queue):
    [d] = api.enqueue(queue, {"body": b"x", "customStatus": "start;"})
    api.dequeue(queue)
    api.ack(queue, failed=[(d, {"appendCustomStatus": "boom;"})])
    api.dequeue(queue)
    api.ack(queue, failed=[(d, {"appendCustomStatus": "again;"})])
    assert api.job(d).customStatus == "start;boom;again;"


@pytest.mark.rule("C-claim-fences")
def test_stale_claim_cannot_ack_the_next_attempt(api, queue):
    [d] = api.enqueue(queue, b"x")
    old = claim_of(api, queue)[d]
    api.advance(120_000)
    counts = api.janitor(claim_timeout_seconds=60)
    assert counts.reclaimed_to_pending >= 1
    new = claim_of(api, queue)[d]
    assert new != old
    api.ack(queue, succeeded=[(d, {"claimDescriptor": old})])
    api.ack(queue, failed=[(d, {"claimDescriptor": old})])
    info = api.job(d)
    assert info.jobState == 1 and info.claimDescriptor == new
    api.ack(queue, succeeded=[(d, {"claimDescriptor": new})])
    assert api.state(d) == 2


@pytest.mark.rule("C-source-match")
def test_ack_without_claim_matches_by_exact_source(api, queue):
    [d] = api.enqueue(queue, b"x")
    api.dequeue(queue, source="svc:host1")
    api.ack(queue, succeeded=[d], source="svc:host")  # a prefix is not the source
    api.ack(queue, succeeded=[d], source="%")  # no wildcards
    api.ack(queue, succeeded=[d], source="")  # empty matches nothing
    assert api.state(d) == 1
    api.ack(queue, succeeded=[d], source="svc:host1")
    assert api.state(d) == 2


@pytest.mark.rule("I-request-queue")
def test_ack_with_a_descriptor_of_another_queue_is_rejected(api, queue):
    other = api.new_queue()
    [d] = api.enqueue(other, b"x")
    api.dequeue(other)
    with api.raises(E.UNKNOWN, match="belongs to queue"):
        api.ack(queue, succeeded=[d])
    assert api.state(d) == 1


@pytest.mark.rule("E-malformed-descriptor")
def test_malformed_descriptor_is_a_clear_error(api, queue):
    for bad in (
        "nonsense",
        f"{queue}:s1:p1",
        f"{queue}:s1:p1:x",
        f"{queue}:s1:p1:٥",
        f"{queue}:s1:p1:-4",
    ):
        with api.raises(E.UNKNOWN, match="descriptor"):
            api.ack(queue, succeeded=[bad])


@pytest.mark.rule("E-unknown-shard")
def test_descriptor_naming_an_unknown_shard_is_a_clear_error(api, queue):
    with api.raises(E.UNKNOWN, match="unknown shard"):
        api.ack(queue, succeeded=[f"{queue}:snoshard9:p1:1"])


@pytest.mark.rule("E-priority-not-supported")
def test_priority_out_of_range_in_descriptor_is_not_supported(api, queue):
    shard = api.store.shard_names()[0]
    with api.raises(E.PRIORITY_NOT_SUPPORTED):
        api.ack(queue, succeeded=[f"{queue}:s{shard}:p9:1"])


@pytest.mark.rule("T-no-op")
def test_repeated_acks_are_harmless(api, queue):
    [d] = api.enqueue(queue, b"x")
    api.dequeue(queue)
    for _ in range(3):
        api.ack(queue, succeeded=[(d, {"appendCustomStatus": "ok"})])
    info = api.job(d)
    assert info.jobState == 2 and info.customStatus == "ok"
    assert WORKER in info.claimDescriptor
