"""pinlater/common/wire_size.py against thriftpy2's own encoding of the same replies."""

from __future__ import annotations

import pytest

from pinlater.common import wire_size
from pinlater.idl import PinLater
from pinlater.idl import pinlater_thrift as t
from pinlater.server.transport import encode_reply

FRAME = 16 * 1024 * 1024


def encoded(method: str, success) -> int:
    result = getattr(PinLater, f"{method}_result")(success=success)
    return len(encode_reply(method, 7, result))


def descriptor(queue: str, shard: str, priority: int, local_id: int) -> str:
    return f"{queue}:s{shard}:p{priority}:{local_id}"


@pytest.mark.parametrize("claim", ["0" * 24 + ":worker:h1", "0" * 24 + ":wörker-\U0001f600", None])
def test_a_dequeue_reply_of_longest_descriptors_is_exactly_the_room_it_was_given(claim):
    queue, shard, levels = "emails_Q", "x" * 7, 12
    claim_bytes = None if claim is None else len(claim.encode())
    room = wire_size.dequeue_room(FRAME, queue, len(shard), levels, claim_bytes)
    bodies = [b"", b"a", b"\xff" * 1000, b"b" * 70_000]
    jobs = {descriptor(queue, shard, levels, 2**63 - 1 - i): body for i, body in enumerate(bodies)}
    meta = t.PinLaterDequeueMetadata(attemptsAllowed=3, attemptsRemaining=2, claimDescriptor=claim)
    response = t.PinLaterDequeueResponse(jobs=jobs, jobMetadata=dict.fromkeys(jobs, meta))
    fixed = FRAME - room.jobs_bytes
    assert encoded("dequeueJobs", response) == fixed + sum(len(b) + room.per_job for b in bodies)


def test_shorter_descriptors_take_less_than_the_room():
    room = wire_size.dequeue_room(FRAME, "q", 1, 3, 40)
    jobs = {descriptor("q", "1", 1, 5): b"body"}
    meta = t.PinLaterDequeueMetadata(
        attemptsAllowed=1, attemptsRemaining=1, claimDescriptor="c" * 40
    )
    response = t.PinLaterDequeueResponse(jobs=jobs, jobMetadata=dict.fromkeys(jobs, meta))
    assert encoded("dequeueJobs", response) < FRAME - room.jobs_bytes + 4 + room.per_job


def job_info(text: str, status: str, claim: str | None, body: bytes | None) -> t.PinLaterJobInfo:
    info = t.PinLaterJobInfo(
        jobDescriptor=text,
        jobState=1,
        attemptsAllowed=3,
        attemptsRemaining=1,
        customStatus=status,
        createdAtTimestampMillis=1,
        runAfterTimestampMillis=2,
        updatedAtTimestampMillis=3,
    )
    if claim is not None:
        info.claimDescriptor = claim
    if body is not None:
        info.body = body
    return info


ENTRIES = [
    ("q:s1:p1:1", "", None, None),
    ("q:s1:p1:0002", "ünïcode \U0001f600 status", "tok:worker", b"body"),
    ("other:s22:p3:9", "s" * 5000, None, b""),
    ("q:s1:p2:7", "", "c", None),
]


def test_a_lookup_reply_is_the_sum_of_its_entries():
    reply = {text: job_info(text, *rest) for text, *rest in ENTRIES}
    size = wire_size.lookup_reply_fixed() + sum(
        wire_size.lookup_entry_bytes(
            text,
            wire_size.job_info_bytes(text, status, claim, None if body is None else len(body)),
        )
        for text, status, claim, body in ENTRIES
    )
    assert encoded("lookupJobs", reply) == size
    assert encoded("lookupJobs", {}) == wire_size.lookup_reply_fixed()


@pytest.mark.parametrize("continuation", ["-1", "1700000000000:s1:1:42"])
def test_a_scan_reply_is_its_fixed_part_and_its_jobs(continuation):
    infos = [job_info(text, status, claim, None) for text, status, claim, _ in ENTRIES]
    response = t.PinLaterScanJobsResponse(scannedJobs=infos, continuation=continuation)
    sizes = [
        wire_size.job_info_bytes(i.jobDescriptor, i.customStatus, i.claimDescriptor, None)
        for i in infos
    ]
    assert encoded("scanJobs", response) == wire_size.scan_reply_fixed(continuation) + sum(sizes)


def test_the_largest_single_job_reply_bounds_a_lookup_at_every_cap():
    queue, body_cap, status_cap = "q" * 100, 4096, 300
    text = descriptor(queue, "s" * wire_size.MAX_SHARD_NAME, 100, 2**63 - 1)
    claim = "0" * 24 + ":" + "\U0001f600" * 200
    reply = {text: job_info(text, "\U0001f600" * status_cap, claim, b"x" * body_cap)}
    bound = wire_size.largest_single_job_reply(body_cap, status_cap, 100, 100, 225)
    assert encoded("lookupJobs", reply) <= bound < encoded("lookupJobs", reply) + 1000


def test_the_enqueue_reply_bound_is_exact_for_the_longest_descriptors():
    text = descriptor("q" * 30, "s" * 5, 3, 2**63 - 1)
    response = t.PinLaterEnqueueResponse(jobDescriptors=[text] * 250)
    assert encoded("enqueueJobs", response) == wire_size.enqueue_reply_bound(250, "q" * 30, 5, 3)
