"""Every reply fits one frame of `server.max_frame_bytes` (16 MiB here): a dequeue hands out and
claims only what fits, a lookup that cannot fit is refused naming the cap, a scan page is cut
with a continuation. Replies are measured as encoded by the real processor."""

import pytest

from pinlater.idl import ErrorCode as E
from tests.conformance.wire import last_reply_bytes

#: a status at the 5,000-character cap in 4-byte characters: 20,000 bytes on the wire
WIDE_STATUS = "\U0001f600" * 5000


def frame_cap(api) -> int:
    return api.app.config.server.max_frame_bytes


def over_one_frame(api, queue) -> list[str]:
    """Jobs at the body cap, one more than a frame could hold bodies of (one per request)."""
    body_cap = api.app.config.limits.body_max_bytes
    count = frame_cap(api) // body_cap + 1
    return [d for i in range(count) for d in api.enqueue(queue, bytes([i]) * body_cap)]


@pytest.mark.rule("D-reply-fits")
def test_a_dequeue_hands_out_and_claims_only_what_fits_one_frame(api, queue):
    descriptors = over_one_frame(api, queue)
    first = api.dequeue(queue, len(descriptors))
    assert last_reply_bytes(api.client) <= frame_cap(api)
    got = set(first.jobs)
    assert len(got) == len(descriptors) - 2  # 15 of 17 1-MiB jobs fit 16 MiB with metadata
    for d in set(descriptors) - got:
        info = api.job(d, include_body=False)
        assert (info.jobState, info.attemptsRemaining, info.claimDescriptor) == (0, 2, None)
    second = api.dequeue(queue, len(descriptors))
    assert set(second.jobs) == set(descriptors) - got
    dry = api.dequeue(queue, 5, dryRun=True)
    assert dry.jobs is None


@pytest.mark.rule("D-reply-fits")
def test_a_dry_run_also_returns_only_what_fits(api, queue):
    descriptors = over_one_frame(api, queue)
    dry = api.dequeue(queue, len(descriptors), dryRun=True)
    assert last_reply_bytes(api.client) <= frame_cap(api)
    assert len(dry.jobs) == len(descriptors) - 2
    assert api.count(queue, 0) == len(descriptors)


@pytest.mark.rule("L-reply-fits")
def test_a_lookup_over_one_frame_is_refused_naming_the_cap(api, queue):
    descriptors = over_one_frame(api, queue)
    with api.raises(E.UNKNOWN, "server.max_frame_bytes") as refused:
        api.lookup(descriptors, include_body=True)
    message = refused.value.message
    assert str(frame_cap(api)) in message and "includeBody=false" in message
    needed = int(message.split("would take ")[1].split(" bytes")[0])
    assert needed > len(descriptors) * api.app.config.limits.body_max_bytes
    assert len(api.lookup(descriptors, include_body=False)) == len(descriptors)
    assert len(api.lookup(descriptors[:2], include_body=True)) == 2


@pytest.mark.rule("N-scan-reply-fits")
def test_a_scan_page_over_one_frame_is_cut_and_continues(api, queue):
    count = frame_cap(api) // len(WIDE_STATUS.encode()) + 20
    descriptors = []
    for start in range(0, count, 200):
        jobs = [{"body": b"s", "customStatus": WIDE_STATUS}] * min(200, count - start)
        descriptors += api.enqueue(queue, *jobs)
    first = api.scan(queue, 0, limit=1000)
    assert last_reply_bytes(api.client) <= frame_cap(api)
    assert 0 < len(first.scannedJobs) < count and first.continuation != "-1"
    rest = api.scan(queue, 0, limit=1000, continuation=first.continuation)
    seen = [j.jobDescriptor for j in first.scannedJobs + rest.scannedJobs]
    assert sorted(seen) == sorted(descriptors) and rest.continuation == "-1"
    assert {j.customStatus for j in first.scannedJobs} == {WIDE_STATUS}
