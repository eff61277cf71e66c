"""lookupJobs: routing by descriptor, missing jobs omitted, body only when asked."""

import pytest

from pinlater.idl import ErrorCode as E


@pytest.mark.rule("L-fields")
def test_lookup_reports_every_field(api, queue):
    [d] = api.enqueue(queue, {"body": b"payload", "customStatus": "s", "numAttemptsAllowed": 4})
    info = api.lookup([d], include_body=True)[d]
    assert info.jobDescriptor == d
    assert info.body == b"payload" and info.customStatus == "s"
    assert info.attemptsAllowed == 4 and info.attemptsRemaining == 4
    assert info.createdAtTimestampMillis > 0
    assert info.runAfterTimestampMillis is not None
    assert info.updatedAtTimestampMillis is not None


@pytest.mark.rule("L-fields")
def test_lookup_without_body_leaves_it_unset(api, queue):
    [d] = api.enqueue(queue, b"payload")
    assert api.lookup([d])[d].body is None


@pytest.mark.rule("L-missing-omitted")
def test_missing_jobs_are_omitted(api, queue):
    [d] = api.enqueue(queue, b"x")
    (shard,) = {p.split(":")[1] for p in [d]}
    missing = f"{queue}:{shard}:p1:999999"
    assert set(api.lookup([d, missing])) == {d}


@pytest.mark.rule("I-request-queue")
def test_lookup_spans_queues_and_priorities(api, queue):
    other = api.new_queue()
    a = api.enqueue(queue, {"body": b"a", "priority": 3})[0]
    b = api.enqueue(other, b"b")[0]
    found = api.lookup([a, b], include_body=True)
    assert found[a].body == b"a" and found[b].body == b"b"


@pytest.mark.rule("E-malformed-descriptor")
def test_lookup_with_a_malformed_descriptor_is_a_clear_error(api, queue):
    with api.raises(E.UNKNOWN, match="jobDescriptors[0]"):
        api.lookup(["not a descriptor"])
