"""dequeueJobs: eligibility, order, claims, metadata, dry runs, coverage and limits."""

import pytest

from pinlater.idl import ErrorCode as E
from pinlater.idl import pinlater_thrift as t
from tests.conformance.api import WORKER
from tests.conformance.faults import intercepted, local_id, shard_of, shift_clocks


@pytest.mark.rule("T-dequeue", "C-claim-returned")
def test_dequeue_claims_jobs_and_moves_them_in_progress(api, queue):
    ds = api.enqueue(queue, b"a", b"b")
    before = api.job(ds[0]).updatedAtTimestampMillis
    api.advance(10)
    response = api.dequeue(queue, 10)
    assert sorted(response.jobs) == sorted(ds)
    for d in ds:
        info = api.job(d)
        assert info.jobState == 1
        assert info.claimDescriptor == response.jobMetadata[d].claimDescriptor
        assert info.claimDescriptor.endswith(":" + WORKER)
        assert info.updatedAtTimestampMillis > before
        assert (info.attemptsAllowed, info.attemptsRemaining) == (2, 2)
    assert api.dequeue(queue, 10).jobs is None


@pytest.mark.rule("T-dequeue")
def test_metadata_reports_stored_attempts(api, queue):
    [d] = api.enqueue(queue, {"body": b"x", "numAttemptsAllowed": 3})
    meta = api.dequeue(queue, 1).jobMetadata[d]
    assert (meta.attemptsAllowed, meta.attemptsRemaining) == (3, 3)
    api.ack(queue, failed=[d])
    meta = api.dequeue(queue, 1, dryRun=True).jobMetadata[d]
    assert (meta.attemptsAllowed, meta.attemptsRemaining) == (3, 2)
    assert api.dequeue(queue, 1).jobMetadata[d].attemptsRemaining == 2


@pytest.mark.rule("D-empty-unset")
def test_empty_result_leaves_both_maps_unset(api, queue):
    response = api.dequeue(queue, 5)
    assert response.jobs is None and response.jobMetadata is None


@pytest.mark.rule("T-dequeue")
def test_future_jobs_are_not_dequeued_until_their_time(api, queue):
    [d] = api.enqueue(queue, {"body": b"later", "runAfterTimestampMillis": api.now() + 60_000})
    assert api.dequeue_ids(queue) == []
    api.advance(61_000)
    assert api.dequeue_ids(queue) == [d]


@pytest.mark.rule("D-priority-order")
def test_higher_priority_first_across_the_batch(api, queue):
    p3, p2, p1 = api.enqueue(
        queue,
        {"body": b"3", "priority": 3},
        {"body": b"2", "priority": 2},
        {"body": b"1", "priority": 1},
    )
    assert api.dequeue_ids(queue, 1) == [p1]
    assert api.dequeue_ids(queue, 1) == [p2]
    assert api.dequeue_ids(queue, 1) == [p3]


@pytest.mark.rule("D-run-after-order")
def test_within_a_priority_oldest_run_after_first(api, queue):
    now = api.now()
    late, early, middle = api.enqueue(
        queue,
        {"body": b"l", "runAfterTimestampMillis": now - 1_000},
        {"body": b"e", "runAfterTimestampMillis": now - 3_000},
        {"body": b"m", "runAfterTimestampMillis": now - 2_000},
    )
    got = [api.dequeue_ids(queue, 1)[0] for _ in range(3)]
    assert got == [early, middle, late]


@pytest.mark.rule("D-limit")
def test_dequeue_hands_out_at_most_limit_jobs(api, queue):
    api.enqueue(queue, *[b"x"] * 7)
    assert len(api.dequeue_ids(queue, 3)) == 3
    assert len(api.dequeue_ids(queue, 10)) == 4


@pytest.mark.rule("D-dry-run", "C-claim-returned")
def test_dry_run_returns_jobs_without_claiming_them(api, queue):
    [d] = api.enqueue(queue, b"peek")
    response = api.dequeue(queue, 5, dryRun=True)
    assert response.jobs == {d: b"peek"}
    assert response.jobMetadata[d].claimDescriptor is None
    info = api.job(d)
    assert info.jobState == 0 and info.claimDescriptor is None
    assert api.dequeue_ids(queue) == [d]


@pytest.mark.rule("D-coverage")
def test_coverage_still_finds_jobs_with_one_shard_examined(api, queue):
    api.enqueue(queue, *[b"x"] * 3)
    total = 0
    for _ in range(40):
        total += len(api.dequeue_ids(queue, 10, coverage=0.01))
        if total == 3:
            break
    assert total == 3


@pytest.mark.rule("D-coverage")
@pytest.mark.parametrize("coverage", [0.0, -0.5, 1.5, float("nan")])
def test_coverage_outside_zero_to_one_is_rejected(api, queue, coverage):
    with api.raises(E.UNKNOWN, match="coverage"):
        api.dequeue(queue, 1, coverage=coverage)


@pytest.mark.rule("E-limit-invalid")
@pytest.mark.parametrize("limit", [0, -1])
def test_limit_must_be_positive(api, queue, limit):
    with api.raises(E.UNKNOWN, match="limit"):
        api.dequeue(queue, limit)


@pytest.mark.rule("E-limit-invalid")
def test_limit_over_the_cap_is_rejected(api, queue):
    with api.raises(E.UNKNOWN, match="limit"):
        api.dequeue(queue, api.app.config.limits.max_dequeue_limit + 1)


@pytest.mark.rule("D-acks-first")
def test_piggybacked_acks_apply_before_the_dequeue(api, queue):
    ds = api.enqueue(queue, *[b"x"] * 5)
    first = api.dequeue_ids(queue, 2)
    second = api.dequeue(queue, 2, ack=api.ack_request(queue, succeeded=first))
    assert len(second.jobs) == 2
    assert api.count(queue, 2) == 2
    third = api.dequeue(queue, 2, ack=api.ack_request(queue, succeeded=list(second.jobs)))
    assert len(third.jobs) == 1
    api.dequeue(queue, 2, ack=api.ack_request(queue, succeeded=list(third.jobs)))
    assert api.count(queue, 2) == 5 and len(ds) == 5


@pytest.mark.rule("D-acks-first")
def test_job_failed_in_the_same_request_returns_only_after_its_delay(api, queue):
    [d] = api.enqueue(queue, {"body": b"x", "numAttemptsAllowed": 3})
    api.dequeue(queue, 1)
    again = api.dequeue(queue, 1, ack=api.ack_request(queue, failed=[d]))
    assert list(again.jobs) == [d]
    delayed = api.ack_request(queue, failed=[(d, {"retryDelayMillis": 60_000})])
    assert api.dequeue(queue, 1, ack=delayed).jobs is None
    assert api.state(d) == 0


@pytest.mark.rule("C-claim-returned")
def test_one_new_claim_per_dequeue_travels_in_optional_field_100(api, queue):
    for struct in (t.PinLaterDequeueMetadata, t.PinLaterJobAckInfo, t.PinLaterCheckpointJobRequest):
        _, name, required = struct.thrift_spec[100]
        assert (name, required) == ("claimDescriptor", False), struct
    a, b, c = api.enqueue(queue, b"a", b"b", b"c")
    first = api.dequeue(queue, 2).jobMetadata
    [(d, meta)] = api.dequeue(queue, 2).jobMetadata.items()
    claims = {m.claimDescriptor for m in first.values()}
    assert len(claims) == 1, "the jobs of one dequeue share its claim"
    assert meta.claimDescriptor not in claims, "every dequeue makes a new claim"
    assert {api.job(x).claimDescriptor for x in first} == claims
    assert sorted([*first, d]) == sorted([a, b, c])


@pytest.mark.rule("D-run-after-order")
def test_jobs_with_the_same_run_after_come_out_by_id(api, queue):
    at = api.now() - 1_000
    ds = api.enqueue(queue, *[{"body": b"x", "runAfterTimestampMillis": at}] * 5)
    got = [api.dequeue_ids(queue, 1)[0] for _ in range(5)]
    assert got == sorted(ds, key=local_id)


@pytest.mark.rule("D-limit")
def test_one_dequeue_collects_the_jobs_of_every_shard(api, queue):
    ds = [d for _ in range(12) for d in api.enqueue(queue, b"a", b"b")]  # random shards
    assert sorted(api.dequeue_ids(queue, 100)) == sorted(ds)


@pytest.mark.rule("D-coverage")
@pytest.mark.parametrize("coverage", [0.01, 0.5, 0.75, 1.0])
def test_coverage_examines_that_share_of_the_shards(api, queue, coverage, monkeypatch):
    monkeypatch.setattr(api.store.empty, "ttl", 0)  # ask every examined partition
    names = api.store.shard_names()
    expected = max(1, int(len(names) * coverage + 0.5))
    examined = set()
    for _ in range(20):
        with intercepted(api.store, "dequeue") as calls:
            assert api.dequeue(queue, 5, coverage=coverage).jobs is None
        assert len(calls.count) == expected, (coverage, dict(calls.count))
        examined |= set(calls.count)
    assert len(examined) > expected or expected == len(names), "the share is chosen at random"


@pytest.mark.rule("E-dequeue-rate-limited")
def test_a_rate_limited_dequeue_still_applies_its_acks(api, queue):
    done, failed, waiting = api.enqueue(queue, b"done", b"failed", b"waiting")
    assert api.dequeue_ids(queue, 2) == sorted([done, failed])
    api.app.limiter.configure({queue: 0})  # a rate of 0 pauses the queue
    try:
        ack = api.ack_request(queue, succeeded=[done], failed=[failed])
        with api.raises(E.DEQUEUE_RATE_LIMITED, match=queue):
            api.dequeue(queue, 5, ack=ack)
        assert api.state(done) == 2
        assert (api.state(failed), api.job(failed).attemptsRemaining) == (0, 1)
        assert api.state(waiting) == 0, "nothing was handed out"
    finally:
        api.app.limiter.configure({})
    assert api.dequeue_ids(queue, 5) == sorted([failed, waiting])


@pytest.mark.rule("E-dequeue-rate-limited")
def test_a_queue_paused_in_the_stored_settings_refuses_and_still_applies_acks(api, queue):
    done, waiting = api.enqueue(queue, b"done", b"waiting")
    assert api.dequeue_ids(queue, 1) == [done]
    api.app.settings.change(queue, {"paused": True}, "conformance")  # what the admin API does
    try:
        ack = api.ack_request(queue, succeeded=[done])
        with api.raises(E.DEQUEUE_RATE_LIMITED, match="paused"):
            api.dequeue(queue, 5, ack=ack)
        with api.raises(E.DEQUEUE_RATE_LIMITED, match="paused"):
            api.dequeue(queue, 5, dryRun=True)
        assert api.state(done) == 2, "the piggy-backed ack was applied"
        assert api.state(waiting) == 0, "nothing was handed out"
    finally:
        api.app.settings.change(queue, {"paused": None}, "conformance")
    assert api.dequeue_ids(queue, 5) == [waiting]


@pytest.mark.rule("B-clock-per-shard")
def test_each_shard_decides_eligibility_by_its_own_clock(api, queue):
    [d] = api.enqueue(queue, {"body": b"x", "runAfterTimestampMillis": api.now() + 60_000})
    home = shard_of(d)
    others = [n for n in api.store.shard_names() if n != home]
    shift_clocks(api.store, others, 120_000)
    home_shift = 0
    try:
        assert api.dequeue_ids(queue) == [], "other shards' clocks do not decide"
        assert api.count(queue, 0) == 0 and api.count(queue, 0, countFutureJobs=True) == 1
        shift_clocks(api.store, [home], 61_000)
        home_shift = 61_000
        assert api.count(queue, 0) == 1
        assert api.dequeue_ids(queue) == [d]
    finally:
        shift_clocks(api.store, [home], 120_000 - home_shift)  # every shard agrees again
