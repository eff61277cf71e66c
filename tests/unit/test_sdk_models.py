"""worker_sdk wire conversions: the fast paths build exactly what the plain constructors do."""

from __future__ import annotations

import dataclasses

from pinlater.cli.load import _decide
from pinlater.idl import pinlater_thrift as wire
from worker_sdk.models import AckInfo, DequeuedJob, ack_to_wire, dequeued_jobs


def _response(claim):
    meta = wire.PinLaterDequeueMetadata(attemptsAllowed=3, attemptsRemaining=2)
    if claim is not None:
        meta.claimDescriptor = claim
    return wire.PinLaterDequeueResponse(
        jobs={"q:s1:p1:7": b"\x00body", "q:s1:p2:8": b""}, jobMetadata={"q:s1:p1:7": meta}
    )


def test_dequeued_jobs_equal_the_dataclass_built_the_plain_way():
    for claim in ("0123456789abcdef01234567:host", None):
        got = dequeued_jobs(_response(claim))
        assert got == [
            DequeuedJob("q:s1:p1:7", b"\x00body", 3, 2, claim),
            DequeuedJob("q:s1:p2:8", b"", None, None, None),
        ]
        assert all(type(job) is DequeuedJob for job in got)
        with_hash = {job: job.descriptor for job in got}  # frozen: hashable, immutable
        assert len(with_hash) == 2
        try:
            got[0].body = b"x"
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise AssertionError("DequeuedJob must stay immutable")
    assert dequeued_jobs(wire.PinLaterDequeueResponse()) == []


def test_a_dequeued_job_acks_exactly_like_an_ack_info_with_its_claim():
    for claim in ("0123456789abcdef01234567:host", None):
        job = DequeuedJob("q:s1:p1:7", b"b", 2, 2, claim)
        assert ack_to_wire(job) == AckInfo(job.descriptor, claim=claim).to_wire()


def test_load_mode_acks_every_job_at_100_percent_and_splits_otherwise():
    jobs = [DequeuedJob(f"q:s1:p1:{i}", b"", 1, 1, "c") for i in range(50)]
    assert _decide(jobs, 100).succeeded == tuple(jobs) and _decide(jobs, 100).failed == ()
    assert _decide(jobs, 0).failed == tuple(jobs)
    mixed = _decide(jobs, 50)
    assert sorted(mixed.succeeded + mixed.failed, key=lambda j: j.descriptor) == sorted(
        jobs, key=lambda j: j.descriptor
    )
