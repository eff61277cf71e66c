"""worker_sdk wire conversions: dequeue responses to DequeuedJob values, acks to wire structs."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

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


def test_dequeued_jobs_flatten_the_response_into_frozen_values():
    for claim in ("0123456789abcdef01234567:host", None):
        got = dequeued_jobs(_response(claim))
        assert [
            (j.descriptor, j.body, j.attempts_allowed, j.attempts_remaining, j.claim) for j in got
        ] == [("q:s1:p1:7", b"\x00body", 3, 2, claim), ("q:s1:p2:8", b"", None, None, None)]
        assert got[0] == DequeuedJob("q:s1:p1:7", b"\x00body", 3, 2, claim) != got[1]
        with_hash = {job: job.descriptor for job in got}  # frozen: hashable, immutable
        assert len(with_hash) == 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            got[0].body = b"x"  # type: ignore[misc]
        assert dataclasses.replace(got[0], claim="other").claim == "other"
    assert dequeued_jobs(wire.PinLaterDequeueResponse()) == []


def test_the_hand_written_init_takes_every_field_in_order():
    """A field added to DequeuedJob must be added to its `__init__` too."""
    names = [f.name for f in dataclasses.fields(DequeuedJob)]
    assert list(inspect.signature(DequeuedJob.__init__).parameters)[1:] == names
    job = DequeuedJob(**{name: name for name in names})
    assert [getattr(job, name) for name in names] == names


def test_every_ack_input_becomes_the_same_wire_struct():
    for claim in ("0123456789abcdef01234567:host", None):
        job = DequeuedJob("q:s1:p1:7", b"b", 2, 2, claim)
        expected = wire.PinLaterJobAckInfo(
            jobDescriptor="q:s1:p1:7", appendCustomStatus="", retryDelayMillis=0
        )
        if claim is not None:
            expected.claimDescriptor = claim
        assert ack_to_wire(job) == AckInfo(job.descriptor, claim=claim).to_wire() == expected
    assert ack_to_wire("q:s1:p1:7") == AckInfo("q:s1:p1:7").to_wire()
    assert ack_to_wire("q:s1:p1:7").claimDescriptor is None
    full = AckInfo("q:s1:p1:7", claim="c", append_status="done", retry_delay_ms=5).to_wire()
    assert (full.claimDescriptor, full.appendCustomStatus, full.retryDelayMillis) == (
        "c",
        "done",
        5,
    )
    with pytest.raises(TypeError):
        ack_to_wire(7)  # type: ignore[arg-type]


def test_load_mode_acks_every_job_at_100_percent_and_splits_otherwise():
    jobs = [DequeuedJob(f"q:s1:p1:{i}", b"", 1, 1, "c") for i in range(50)]
    assert _decide(jobs, 100).succeeded == tuple(jobs) and _decide(jobs, 100).failed == ()
    assert _decide(jobs, 0).failed == tuple(jobs)
    mixed = _decide(jobs, 50)
    assert sorted(mixed.succeeded + mixed.failed, key=lambda j: j.descriptor) == sorted(
        jobs, key=lambda j: j.descriptor
    )
