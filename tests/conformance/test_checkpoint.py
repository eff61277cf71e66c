"""checkpointJobs: heartbeat, new body, attempts, status, reschedule; fenced like acks."""

import pytest

from pinlater.idl import ErrorCode as E
from tests.conformance.api import WORKER


def dequeued(api, queue, body=b"x", **job):
    [d] = api.enqueue(queue, {"body": body, **job})
    claim = api.dequeue(queue, 1).jobMetadata[d].claimDescriptor
    return d, claim


@pytest.mark.rule("T-checkpoint")
def test_plain_checkpoint_extends_the_claim_and_keeps_the_job(api, queue):
    d, claim = dequeued(api, queue)
    api.advance(50_000)
    api.checkpoint(queue, d)
    info = api.job(d)
    assert info.jobState == 1 and info.body == b"x" and info.claimDescriptor == claim
    assert info.updatedAtTimestampMillis >= api.now() - 1_000
    api.advance(50_000)  # 100 s after dequeue, 50 s after the checkpoint
    api.janitor(claim_timeout_seconds=60)
    assert api.state(d) == 1


@pytest.mark.rule("T-checkpoint")
def test_checkpoint_sets_run_after_to_the_request_value_or_now(api, queue):
    d, _ = dequeued(api, queue)
    later = api.now() + 90_000
    api.checkpoint(queue, (d, {"runAfterTimestampMillis": later}))
    assert api.job(d).runAfterTimestampMillis == later
    before = api.now()
    api.checkpoint(queue, d)
    assert before <= api.job(d).runAfterTimestampMillis <= api.now()


@pytest.mark.rule("T-checkpoint")
def test_checkpoint_replaces_the_body(api, queue):
    d, _ = dequeued(api, queue)
    api.checkpoint(queue, (d, {"newBody": "step 2"}))
    info = api.job(d)
    assert info.body == b"step 2" and info.jobState == 1


@pytest.mark.rule("T-checkpoint")
def test_checkpoint_sets_both_attempt_counts(api, queue):
    d, _ = dequeued(api, queue)
    api.checkpoint(queue, (d, {"numOfAttemptsAllowed": 5}))
    info = api.job(d)
    assert (info.attemptsAllowed, info.attemptsRemaining) == (5, 5)


@pytest.mark.rule("T-checkpoint", "B-status-cap")
def test_checkpoint_prepends_status_keeping_newest_text(api, queue):
    cap = api.app.config.limits.custom_status_max_chars
    d, _ = dequeued(api, queue)
    api.checkpoint(queue, (d, {"prependCustomStatus": "one\n"}))
    api.checkpoint(queue, (d, {"prependCustomStatus": "two\n"}))
    assert api.job(d).customStatus == "two\none\n"
    api.checkpoint(queue, (d, {"prependCustomStatus": "n" * cap}))
    assert api.job(d).customStatus == "n" * cap


@pytest.mark.rule("T-checkpoint-to-pending")
def test_move_to_pending_reschedules_and_clears_the_claim(api, queue):
    d, _ = dequeued(api, queue)
    later = api.now() + 60_000
    api.checkpoint(queue, (d, {"moveToPending": True, "runAfterTimestampMillis": later}))
    info = api.job(d)
    assert info.jobState == 0 and info.claimDescriptor is None
    assert info.runAfterTimestampMillis == later and info.body == b"x"
    assert api.dequeue_ids(queue) == []
    api.advance(61_000)
    assert api.dequeue_ids(queue) == [d]


@pytest.mark.rule("T-no-op")
def test_checkpoint_of_a_pending_job_is_a_no_op(api, queue):
    [d] = api.enqueue(queue, b"x")
    before = api.job(d)
    api.checkpoint(queue, (d, {"newBody": "changed", "moveToPending": True}))
    assert api.job(d) == before


@pytest.mark.rule("C-source-match")
def test_checkpoint_by_another_source_is_a_no_op(api, queue):
    d, _ = dequeued(api, queue)
    before = api.job(d)
    api.checkpoint(
        queue, (d, {"newBody": "hijack", "moveToPending": True}), source="really_slow_worker"
    )
    api.checkpoint(queue, (d, {"newBody": "hijack"}), source=WORKER[:-1])
    assert api.job(d) == before


@pytest.mark.rule("C-claim-fences")
def test_checkpoint_with_a_stale_claim_is_a_no_op(api, queue):
    d, old = dequeued(api, queue)
    api.advance(120_000)
    api.janitor(claim_timeout_seconds=60)
    new = api.dequeue(queue, 1).jobMetadata[d].claimDescriptor
    api.checkpoint(queue, (d, {"claimDescriptor": old, "moveToPending": True}))
    info = api.job(d)
    assert info.jobState == 1 and info.claimDescriptor == new
    api.checkpoint(queue, (d, {"claimDescriptor": new, "newBody": "ok"}))
    assert api.job(d).body == b"ok"


@pytest.mark.rule("T-no-op")
def test_checkpoint_of_a_finished_job_is_a_no_op(api, queue):
    d, _ = dequeued(api, queue)
    api.ack(queue, succeeded=[d])
    before = api.job(d)
    api.checkpoint(queue, (d, {"moveToPending": True}))
    assert api.job(d) == before and before.jobState == 2


@pytest.mark.rule("I-request-queue")
def test_checkpoint_with_a_descriptor_of_another_queue_is_rejected(api, queue):
    other = api.new_queue()
    d, _ = dequeued(api, other)
    with api.raises(E.UNKNOWN, match="belongs to queue"):
        api.checkpoint(queue, (d, {"newBody": "moved", "moveToPending": True}))
    info = api.job(d)
    assert info.jobState == 1 and info.body == b"x"
