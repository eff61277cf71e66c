"""The handler's fast paths for the per-job work of a 100-job request (enqueued jobs, acks):
whatever they accept they convert exactly as the checked paths do; the rest they leave to them."""

from __future__ import annotations

import itertools

import pytest

from pinlater.app import load_config
from pinlater.errors import PinLaterError
from pinlater.handler import validation
from pinlater.handler.handler import PinLaterHandler, _PlainAcks
from pinlater.idl import pinlater_thrift as T

SOURCE = "worker:host1"


class _Store:
    class backend:  # noqa: N801 - mimics ShardedBackend.backend
        @staticmethod
        def queue_name_limit(names):
            return None

    @staticmethod
    def shard_names():
        return ["r1"]


@pytest.fixture(scope="module")
def handler() -> PinLaterHandler:
    config = load_config(
        env={},
        overrides={
            "backend": {"kind": "sqlite", "shards": [{"name": "r1", "path": "/nonexistent.db"}]}
        },
    )
    return PinLaterHandler(_Store(), config)


def _checked(convert, *args):
    try:
        return convert(*args)
    except PinLaterError as exc:
        return type(exc), exc.message


def test_plain_jobs_convert_as_the_checked_path_does(handler):
    levels, limits = handler.levels, handler.limits
    long_status = "é" * (limits.custom_status_max_chars + 5)
    plain = 0
    for body, priority, attempts, run_after, status in itertools.product(
        [b"x", b"", "text", bytearray(b"x"), None, 5, b"x" * (limits.body_max_bytes + 1)],
        [None, 0, 1, levels, levels + 1, True, 1.0],
        [None, 0, 1, limits.max_attempts, limits.max_attempts + 1, False],
        [None, -1, 0, validation.MAX_TIMESTAMP_MS, validation.MAX_TIMESTAMP_MS + 1, True],
        [None, "", "ok", long_status, b"x", 5],
    ):
        job = T.PinLaterJob(
            body=body,
            priority=priority,
            numAttemptsAllowed=attempts,
            runAfterTimestampMillis=run_after,
            customStatus=status,
        )
        fast = handler._plain_new_job(job)
        if fast is not None:
            plain += 1
            assert fast == handler._new_job(job, "jobs[0]"), job
    assert plain > 100
    assert handler._plain_new_job(None) is None
    assert handler._plain_new_job(T.PinLaterJob(body=b"x")) is not None


def test_plain_acks_convert_as_the_checked_path_does(handler):
    levels = handler.levels
    plain = 0
    for descriptor, claim, status, delay in itertools.product(
        [
            "q:sr1:p1:5",
            f"q:sr1:p{levels}:5",
            f"q:sr1:p{levels + 1}:5",
            "q:sr1:p0:5",
            "other:sr1:p1:5",
            "q:sx:p1:9223372036854775807",
            "q:sr1:p1:9223372036854775808",
            "q:sr1:p1:x",
            "q:sr1:p1:١",
            "q:sr1:p01:007",
            "é:sr1:p1:5",
            None,
            b"q:sr1:p1:5",
        ],
        [None, "", "abc:" + SOURCE, b"abc", 5],
        [None, "", "done", b"x"],
        [None, 0, -5, 1000, 10**18, True, 1.5],
    ):
        info = T.PinLaterJobAckInfo(
            jobDescriptor=descriptor,
            claimDescriptor=claim,
            appendCustomStatus=status,
            retryDelayMillis=delay,
        )
        fast = _PlainAcks("q", SOURCE, levels).convert(info)
        if fast is not None:
            plain += 1
            assert fast == handler._checked_ack("q", info, SOURCE, "acks[0]"), info
    assert plain > 50
    assert _PlainAcks("q", SOURCE, levels).convert(None) is None


def test_acks_of_one_request_share_prefix_checks_and_claim_matches(handler):
    plain = _PlainAcks("q", SOURCE, handler.levels)
    first = plain.convert(T.PinLaterJobAckInfo(jobDescriptor="q:sr1:p1:5", claimDescriptor="c"))
    second = plain.convert(T.PinLaterJobAckInfo(jobDescriptor="q:sr1:p1:6", claimDescriptor="c"))
    assert first[1].match is second[1].match
    assert (first[1].local_id, second[1].local_id) == (5, 6)
    assert plain.convert(T.PinLaterJobAckInfo(jobDescriptor="q:sr1:p1:x")) is None
    assert list(plain.prefixes) == ["q:sr1:p1"]
