"""Hand-built binary-protocol bytes for hostile-input tests.

thriftpy2's encoder only writes well-typed values, so frames with wrong field types, invalid UTF-8,
missing required fields or absurd lengths are assembled here byte by byte. `valid_calls()` gives
one well-formed call of every RPC (the seeds the mutation fuzzer starts from).
"""

from __future__ import annotations

import struct

from pinlater.idl import PinLater, RequestContext
from pinlater.idl import pinlater_thrift as w
from tests.support.server_process import encode_call

STOP, BOOL, BYTE, DOUBLE, I16, I32, I64, STRING, STRUCT, MAP, SET, LIST = (
    0,
    2,
    3,
    4,
    6,
    8,
    10,
    11,
    12,
    13,
    14,
    15,
)
CTX = RequestContext(source="hostile-test")


def i8(v: int) -> bytes:
    return struct.pack("!b", v)


def i32(v: int) -> bytes:
    return struct.pack("!i", v)


def i64(v: int) -> bytes:
    return struct.pack("!q", v)


def double(v: float) -> bytes:
    return struct.pack("!d", v)


def string(v: bytes | str) -> bytes:
    data = v.encode() if isinstance(v, str) else v
    return i32(len(data)) + data


def field(ttype: int, fid: int, payload: bytes) -> bytes:
    return struct.pack("!bh", ttype, fid) + payload


def struct_(*fields: bytes) -> bytes:
    """A struct body: the given fields, then STOP."""
    return b"".join(fields) + b"\x00"


def list_(etype: int, items: list[bytes], count: int | None = None) -> bytes:
    return struct.pack("!bi", etype, len(items) if count is None else count) + b"".join(items)


def header(method: str, seqid: int = 1, version: bytes = b"\x80\x01\x00\x01") -> bytes:
    return version + string(method) + i32(seqid)


def context(source: bytes | str = "hostile-test") -> bytes:
    """Field 1 of every call: a RequestContext struct."""
    return field(STRUCT, 1, struct_(field(STRING, 1, string(source))))


def call(method: str, *arg_fields: bytes, seqid: int = 1, with_context: bool = True) -> bytes:
    """A CALL message whose arguments struct holds `context` (unless told not to) and
    `arg_fields`."""
    fields = ((context(),) if with_context else ()) + arg_fields
    return header(method, seqid) + struct_(*fields)


def request(*fields: bytes) -> bytes:
    """Argument 2 (`request`) as a struct of `fields`."""
    return field(STRUCT, 2, struct_(*fields))


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


def valid_calls(queue: str = "fuzzq") -> dict[str, bytes]:
    """One well-formed, decodable call of every RPC, by method name."""
    d = f"{queue}:s1:p1:1"
    ack = w.PinLaterJobAckRequest(
        queueName=queue,
        jobsSucceeded=[
            w.PinLaterJobAckInfo(
                jobDescriptor=d,
                appendCustomStatus="ok",
                retryDelayMillis=5,
                claimDescriptor="0" * 24 + ":x",
            )
        ],
    )
    calls = {
        "createQueue": PinLater.createQueue_args(context=CTX, name=queue),
        "deleteQueue": PinLater.deleteQueue_args(context=CTX, name=queue, password="pw"),
        "enqueueJobs": PinLater.enqueueJobs_args(
            context=CTX,
            request=w.PinLaterEnqueueRequest(
                queueName=queue,
                jobs=[
                    w.PinLaterJob(
                        body=b"b1",
                        priority=1,
                        runAfterTimestampMillis=1,
                        numAttemptsAllowed=3,
                        customStatus="s",
                        uniqueKey="k1",
                    )
                ],
            ),
        ),
        "dequeueJobs": PinLater.dequeueJobs_args(
            context=CTX,
            request=w.PinLaterDequeueRequest(
                queueName=queue, limit=2, jobAckRequest=ack, dryRun=False, coverage=1.0
            ),
        ),
        "ackDequeuedJobs": PinLater.ackDequeuedJobs_args(context=CTX, request=ack),
        "checkpointJobs": PinLater.checkpointJobs_args(
            context=CTX,
            request=w.PinLaterCheckpointJobsRequest(
                queueName=queue,
                requests=[
                    w.PinLaterCheckpointJobRequest(
                        jobDescriptor=d,
                        newBody="nb",
                        moveToPending=True,
                        runAfterTimestampMillis=5,
                        numOfAttemptsAllowed=2,
                        prependCustomStatus="p",
                    )
                ],
            ),
        ),
        "lookupJobs": PinLater.lookupJobs_args(
            context=CTX, request=w.PinLaterLookupJobRequest(jobDescriptors=[d], includeBody=True)
        ),
        "getJobCount": PinLater.getJobCount_args(
            context=CTX,
            request=w.PinLaterGetJobCountRequest(
                queueName=queue,
                jobState=0,
                priority=1,
                countFutureJobs=True,
                bodyRegexToMatch="b.*",
            ),
        ),
        "getQueueNames": PinLater.getQueueNames_args(context=CTX),
        "scanJobs": PinLater.scanJobs_args(
            context=CTX,
            request=w.PinLaterScanJobsRequest(
                queueName=queue,
                jobState=0,
                priority=1,
                scanFutureJobs=False,
                continuation="0",
                limit=5,
                bodyRegexToMatch="b",
            ),
        ),
        "retryFailedJobs": PinLater.retryFailedJobs_args(
            context=CTX,
            request=w.PinLaterRetryFailedJobsRequest(
                queueName=queue, priority=1, attemptsToAllow=2, runAfterTimestampMillis=1, limit=5
            ),
        ),
        "deleteJobs": PinLater.deleteJobs_args(
            context=CTX,
            request=w.PinLaterDeleteJobsRequest(
                queueName=queue, jobState=3, priority=1, bodyRegexToMatch="x", limit=5
            ),
        ),
        "getSchedules": PinLater.getSchedules_args(
            context=CTX, request=w.PinLaterGetSchedulesRequest(queueName=queue, count=3)
        ),
    }
    return {
        name: encode_call(name, args, seqid=i + 1) for i, (name, args) in enumerate(calls.items())
    }
