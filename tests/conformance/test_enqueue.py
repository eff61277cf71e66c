"""enqueueJobs: stored state, descriptors, defaults and input validation."""

import pytest

from pinlater.idl import ErrorCode as E
from pinlater.idl import pinlater_thrift as t
from tests.conformance.faults import shard_of


@pytest.mark.rule("I-format")
def test_enqueue_returns_one_descriptor_per_job_in_order(api, queue):
    ds = api.enqueue(queue, {"body": b"a", "priority": 2}, {"body": b"b", "priority": 1})
    assert len(ds) == 2 and len(set(ds)) == 2
    assert ds[0].startswith(f"{queue}:s") and ":p2:" in ds[0]
    assert ":p1:" in ds[1]
    assert api.job(ds[0]).body == b"a" and api.job(ds[1]).body == b"b"


@pytest.mark.rule("T-enqueue")
def test_enqueued_job_is_pending_with_defaults(api, queue):
    before = api.now()
    [d] = api.enqueue(queue, b"body")
    info = api.job(d)
    assert info.jobState == 0
    assert (info.attemptsAllowed, info.attemptsRemaining) == (2, 2)
    assert info.customStatus == ""
    assert info.claimDescriptor is None
    assert before - 5 <= info.createdAtTimestampMillis <= api.now() + 5
    assert info.updatedAtTimestampMillis == info.createdAtTimestampMillis
    assert abs(info.runAfterTimestampMillis - info.createdAtTimestampMillis) <= 5


@pytest.mark.rule("T-enqueue", "B-times-ms")
def test_enqueue_stores_attempts_status_and_run_after(api, queue):
    run_after = api.now() + 60_000
    [d] = api.enqueue(
        queue,
        {
            "body": b"x",
            "numAttemptsAllowed": 5,
            "customStatus": "hello",
            "runAfterTimestampMillis": run_after,
        },
    )
    info = api.job(d)
    assert (info.attemptsAllowed, info.attemptsRemaining) == (5, 5)
    assert info.customStatus == "hello"
    assert info.runAfterTimestampMillis == run_after


@pytest.mark.rule("B-body-bytes")
def test_binary_bodies_come_back_byte_identical(api, queue):
    bodies = [bytes(range(256)), b"\xff\xfe\xfd\x00", b"", "ünïcödé".encode()]
    ds = api.enqueue(queue, *bodies)
    assert [api.job(d).body for d in ds] == bodies
    got = api.dequeue(queue, 10).jobs
    assert sorted(got.values()) == sorted(bodies)


@pytest.mark.rule("B-body-cap")
def test_body_at_the_cap_is_accepted_and_over_it_rejected(api, queue):
    cap = api.app.config.limits.body_max_bytes
    [d] = api.enqueue(queue, b"x" * cap)
    assert len(api.job(d).body) == cap
    with api.raises(E.ENQUEUE_REJECTED, match="jobs[0].body"):
        api.enqueue(queue, b"x" * (cap + 1))


@pytest.mark.rule("B-status-cap")
def test_enqueue_status_is_truncated_to_the_cap(api, queue):
    cap = api.app.config.limits.custom_status_max_chars
    [d] = api.enqueue(queue, {"body": b"x", "customStatus": "é" * (cap + 100)})
    assert api.job(d).customStatus == "é" * cap


@pytest.mark.rule("E-enqueue-all-or-nothing")
def test_failed_enqueue_stores_nothing(api, queue):
    with api.raises(E.PRIORITY_NOT_SUPPORTED):
        api.enqueue(queue, b"good", {"body": b"bad", "priority": 9})
    with api.raises(E.ENQUEUE_REJECTED):
        api.enqueue(queue, b"good", {"body": b"bad", "numAttemptsAllowed": 0})
    assert api.count(queue, 0) == 0


@pytest.mark.rule("E-priority-not-supported")
@pytest.mark.parametrize("priority", [0, 4, -1, 127])
def test_priority_outside_levels_is_not_supported(api, queue, priority):
    with api.raises(E.PRIORITY_NOT_SUPPORTED):
        api.enqueue(queue, {"body": b"x", "priority": priority})


@pytest.mark.rule("E-attempts-invalid")
@pytest.mark.parametrize("attempts", [0, -3])
def test_attempts_below_one_are_rejected(api, queue, attempts):
    with api.raises(E.ENQUEUE_REJECTED, match="numAttemptsAllowed"):
        api.enqueue(queue, {"body": b"x", "numAttemptsAllowed": attempts})


@pytest.mark.rule("E-empty-job-list")
def test_empty_job_list_is_rejected(api, queue):
    with api.raises(E.ENQUEUE_REJECTED, match="jobs"):
        api.client.enqueueJobs(api.ctx(), t.PinLaterEnqueueRequest(queueName=queue, jobs=[]))


@pytest.mark.rule("E-run-after-invalid")
@pytest.mark.parametrize("run_after", [-1, 2**62])
def test_out_of_range_run_after_is_rejected(api, queue, run_after):
    with api.raises(E.ENQUEUE_REJECTED, match="runAfterTimestampMillis"):
        api.enqueue(queue, {"body": b"x", "runAfterTimestampMillis": run_after})


@pytest.mark.rule("T-enqueue")
def test_run_after_in_the_past_is_eligible_at_once(api, queue):
    [d] = api.enqueue(queue, {"body": b"x", "runAfterTimestampMillis": 1_000})
    assert api.job(d).runAfterTimestampMillis == 1_000
    assert api.dequeue_ids(queue) == [d]


@pytest.mark.rule("I-ids-not-reused")
def test_local_ids_are_never_reused_within_a_queue(api, queue):
    first = api.enqueue(queue, *[b"x"] * 5)
    api.delete_jobs(queue, 0, limit=10)
    second = api.enqueue(queue, *[b"y"] * 5)
    assert not set(first) & set(second)


@pytest.mark.rule("E-missing-source")
def test_missing_context_source_is_a_clear_error(api, queue):
    with api.raises(E.UNKNOWN, match="context.source"):
        api.client.enqueueJobs(
            t.RequestContext(),
            t.PinLaterEnqueueRequest(queueName=queue, jobs=[t.PinLaterJob(body=b"x")]),
        )


@pytest.mark.rule("I-enqueue-one-shard")
def test_an_enqueue_request_lands_whole_on_one_random_shard(api, queue):
    homes = []
    for _ in range(40):
        ds = api.enqueue(queue, b"a", {"body": b"b", "priority": 2}, b"c")
        assert len({shard_of(d) for d in ds}) == 1, ds
        homes.append(shard_of(ds[0]))
    # 40 requests over at most 3 shards all miss one shard with probability < 1e-6
    assert set(homes) == set(api.store.shard_names())
