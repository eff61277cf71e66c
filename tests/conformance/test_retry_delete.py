"""retryFailedJobs and deleteJobs."""

import pytest

from pinlater.idl import ErrorCode as E


def failed_jobs(api, queue, n, priority=2):
    ds = api.enqueue(
        queue,
        *[
            {"body": f"failed_{i}".encode(), "priority": priority, "numAttemptsAllowed": 1}
            for i in range(n)
        ],
    )
    api.dequeue(queue, n)
    api.ack(queue, failed=ds)
    assert api.count(queue, 3) == n
    return ds


@pytest.mark.rule("T-retry-failed")
def test_retry_touches_only_the_requested_priority(api, queue):
    failed_jobs(api, queue, 5, priority=2)
    assert api.retry_failed(queue) == 0  # default priority 1


@pytest.mark.rule("T-retry-failed")
def test_retry_moves_failed_jobs_back_with_new_attempts(api, queue):
    ds = failed_jobs(api, queue, 20)
    later = api.now() + 30_000
    assert (
        api.retry_failed(
            queue, priority=2, attemptsToAllow=2, limit=15, runAfterTimestampMillis=later
        )
        == 15
    )
    assert api.count(queue, 3) == 5
    assert api.count(queue, 0, countFutureJobs=True) == 15
    assert api.dequeue_ids(queue, 20) == []
    api.advance(31_000)
    got = api.dequeue_ids(queue, 20)
    assert len(got) == 15 and set(got) <= set(ds)
    info = api.job(got[0])
    assert info.attemptsRemaining == 2 and info.attemptsAllowed == 1
    api.ack(queue, failed=got)
    assert api.dequeue_ids(queue, 20) and api.count(queue, 3) == 5


@pytest.mark.rule("T-retry-failed")
def test_retried_job_has_no_claim(api, queue):
    [d] = failed_jobs(api, queue, 1)
    api.retry_failed(queue, priority=2)
    assert api.job(d).claimDescriptor is None


@pytest.mark.rule("E-attempts-invalid", "E-limit-invalid")
@pytest.mark.parametrize("field,value", [("attemptsToAllow", 0), ("limit", 0), ("limit", -1)])
def test_retry_rejects_bad_numbers(api, queue, field, value):
    with api.raises(E.UNKNOWN, match=field):
        api.retry_failed(queue, priority=2, **{field: value})


@pytest.mark.rule("T-delete-jobs")
def test_delete_jobs_by_state_priority_and_limit(api, queue):
    failed_jobs(api, queue, 10)
    assert api.delete_jobs(queue, 0) == 0
    assert api.delete_jobs(queue, 3, priority=2, limit=5) == 5
    assert api.count(queue, 3) == 5


@pytest.mark.rule("T-delete-jobs", "B-body-regex")
def test_delete_jobs_matching_a_body_regex(api, queue):
    ds = api.enqueue(queue, *[{"body": f"pending_{i}".encode(), "priority": 2} for i in range(10)])
    assert api.delete_jobs(queue, 0, priority=2, bodyRegexToMatch=".*pending_1.*") == 1
    assert ds[1] not in api.lookup(ds)
    assert api.count(queue, 0) == 9


@pytest.mark.rule("T-delete-jobs")
def test_delete_in_progress_jobs(api, queue):
    api.enqueue(queue, b"a", b"b")
    api.dequeue(queue, 2)
    assert api.delete_jobs(queue, 1, limit=10) == 2
    assert api.count(queue, 1) == 0


@pytest.mark.rule("E-limit-invalid")
def test_delete_limit_must_be_positive(api, queue):
    api.enqueue(queue, b"x")
    with api.raises(E.UNKNOWN, match="limit"):
        api.delete_jobs(queue, 0, limit=0)
    assert api.count(queue, 0) == 1
