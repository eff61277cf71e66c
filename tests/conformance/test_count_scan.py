"""getJobCount and scanJobs: filters, future jobs, body regex, ordering and pagination."""

import dataclasses
import time

import pytest

from pinlater.idl import ErrorCode as E


def enqueue_numbered(api, queue, n, prefix="job_body_", **job):
    return api.enqueue(queue, *[{"body": f"{prefix}{i}".encode(), **job} for i in range(n)])


@pytest.mark.rule("N-count")
def test_count_by_state_and_priority(api, queue):
    api.enqueue(queue, *[{"body": b"x", "priority": 1}] * 3, *[{"body": b"y", "priority": 2}] * 2)
    assert api.count(queue, 0) == 5
    assert api.count(queue, 0, priority=1) == 3
    assert api.count(queue, 0, priority=2) == 2
    assert api.count(queue, 0, priority=3) == 0
    api.dequeue(queue, 4)
    assert api.count(queue, 1) == 4 and api.count(queue, 0) == 1


@pytest.mark.rule("N-count")
def test_count_future_jobs_only_when_asked(api, queue):
    api.enqueue(queue, b"now", {"body": b"later", "runAfterTimestampMillis": api.now() + 60_000})
    assert api.count(queue, 0) == 1
    assert api.count(queue, 0, countFutureJobs=True) == 1
    api.advance(61_000)
    assert api.count(queue, 0) == 2
    assert api.count(queue, 0, countFutureJobs=True) == 0


@pytest.mark.rule("B-body-regex")
def test_count_with_body_regex_searches_the_body(api, queue):
    enqueue_numbered(api, queue, 20)
    assert api.count(queue, 0, bodyRegexToMatch="job_body_1.*") == 11
    assert api.count(queue, 0, bodyRegexToMatch="job_body_*") == 20
    assert api.count(queue, 0, bodyRegexToMatch=r"^job_body_1\d$") == 10
    assert api.count(queue, 0, bodyRegexToMatch="x' OR '1'='1") == 0


@pytest.mark.rule("E-bad-regex")
def test_invalid_regex_is_a_clear_error(api, queue):
    with api.raises(E.UNKNOWN, match="bodyRegexToMatch"):
        api.count(queue, 0, bodyRegexToMatch="(unclosed")


@pytest.mark.rule("E-bad-job-state")
def test_invalid_job_state_is_a_clear_error(api, queue):
    with api.raises(E.UNKNOWN, match="jobState"):
        api.count(queue, 7)


@pytest.mark.rule("E-priority-not-supported")
def test_priority_out_of_range_in_count_is_not_supported(api, queue):
    with api.raises(E.PRIORITY_NOT_SUPPORTED):
        api.count(queue, 0, priority=4)


@pytest.mark.rule("N-scan-order")
def test_scan_returns_fields_newest_run_after_first(api, queue):
    now = api.now()
    ds = api.enqueue(
        queue, *[{"body": b"x", "runAfterTimestampMillis": now - 1000 * i} for i in range(10)]
    )
    response = api.scan(queue, 0, priority=1)
    jobs = response.scannedJobs
    assert [j.jobDescriptor for j in jobs] == ds
    assert all(j.body is None and j.claimDescriptor is None for j in jobs)
    assert all(j.attemptsAllowed == 2 and j.jobState == 0 for j in jobs)
    assert response.continuation == "-1"


@pytest.mark.rule("N-scan-order", "B-body-regex")
def test_scan_future_jobs_and_regex(api, queue):
    now = api.now()
    api.enqueue(
        queue,
        *[
            {"body": f"job_body_{i}".encode(), "runAfterTimestampMillis": now + 60_000 + i}
            for i in range(30)
        ],
    )
    api.enqueue(queue, b"current")
    future = api.scan(queue, 0, scanFutureJobs=True, limit=20).scannedJobs
    assert len(future) == 20
    runs = [j.runAfterTimestampMillis for j in future]
    assert runs == sorted(runs, reverse=True) and min(runs) > now
    matched = api.scan(
        queue, 0, scanFutureJobs=True, bodyRegexToMatch="job_body_2.*", limit=5
    ).scannedJobs
    assert len(matched) == 5
    assert len(api.scan(queue, 0).scannedJobs) == 1


@pytest.mark.rule("N-scan-pages")
def test_scan_paginates_across_shards_and_priorities_without_gaps(api, queue):
    now = api.now()
    ds = []
    for batch in range(6):  # several requests spread jobs over shards
        ds += api.enqueue(
            queue,
            *[
                {
                    "body": b"x",
                    "priority": 1 + (i % 3),
                    "runAfterTimestampMillis": now - (i % 4) * 10,
                }
                for i in range(batch * 7, batch * 7 + 7)
            ],
        )
    seen, token, pages = [], "0", 0
    while True:
        page = api.scan(queue, 0, continuation=token, limit=5)
        seen += [j.jobDescriptor for j in page.scannedJobs]
        runs = [j.runAfterTimestampMillis for j in page.scannedJobs]
        assert runs == sorted(runs, reverse=True)
        token, pages = page.continuation, pages + 1
        if token == "-1":
            break
        assert pages < 50
    assert sorted(seen) == sorted(ds) and len(seen) == len(set(seen))


@pytest.mark.rule("E-continuation-invalid")
def test_bad_continuation_is_rejected(api, queue):
    with api.raises(E.CONTINUATION_INVALID):
        api.scan(queue, 0, continuation="INVALID_CONTINUATION")


@pytest.mark.rule("E-limit-invalid")
@pytest.mark.parametrize("limit", [0, -5, 10**7])
def test_scan_limit_must_be_in_range(api, queue, limit):
    with api.raises(E.UNKNOWN, match="limit"):
        api.scan(queue, 0, limit=limit)


@pytest.mark.rule("E-priority-not-supported")
@pytest.mark.parametrize("call", ["scan", "retry", "delete", "checkpoint", "lookup"])
def test_priority_out_of_range_is_not_supported_in_any_call(api, queue, call):
    levels = api.app.config.priorities.levels
    bad = f"{queue}:s{api.store.shard_names()[0]}:p{levels + 1}:1"
    calls = {
        "scan": lambda: api.scan(queue, 0, priority=levels + 1),
        "retry": lambda: api.retry_failed(queue, priority=0),
        "delete": lambda: api.delete_jobs(queue, 3, priority=levels + 1),
        "checkpoint": lambda: api.checkpoint(queue, bad),
        "lookup": lambda: api.lookup([bad]),
    }
    with api.raises(E.PRIORITY_NOT_SUPPORTED):
        calls[call]()


@pytest.mark.rule("N-count-cap")
def test_count_is_exact_up_to_the_cap(api, queue, monkeypatch):
    handler = api.app.handler
    monkeypatch.setattr(handler, "limits", dataclasses.replace(handler.limits, count_cap=5))
    api.enqueue(queue, *[b"x"] * 4)
    assert api.count(queue, 0) == 4
    api.enqueue(queue, *[b"x"] * 4)  # 8 jobs, possibly on several shards
    assert api.count(queue, 0) == 5
    assert api.count(queue, 0, priority=1) == 5
    assert api.delete_jobs(queue, 0, limit=3) == 3
    assert api.count(queue, 0) == 5
    assert api.delete_jobs(queue, 0, limit=1) == 1
    assert api.count(queue, 0) == 4


@pytest.mark.rule("B-body-regex-budget")
def test_a_regex_over_its_time_budget_is_a_clear_error(api, queue):
    api.enqueue(queue, b"x" * 5_000)
    started = time.monotonic()
    with api.raises(E.UNKNOWN, match="bodyRegexToMatch"):
        api.count(queue, 0, bodyRegexToMatch="(x+x+)+y")
    assert time.monotonic() - started < 5, "the budget bounds one evaluation"
    assert api.count(queue, 0, bodyRegexToMatch="x+$") == 1
