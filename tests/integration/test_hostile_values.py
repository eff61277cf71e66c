"""Hostile field values, sent as raw frames to a real server subprocess (SQLite backend).

Every case must be answered with a clear error that names the offending field, never with the
handler's catch-all "internal error" (UNKNOWN) and never with a dropped connection. Values that
are well-formed Thrift but wrong for PinLater (missing required fields, wrong wire types that
thriftpy2 turns into None, out-of-range numbers, Unicode look-alikes in names, trailing
newlines, overflowing timestamps) get the declared PinLaterException. Invalid UTF-8 in a
`string` field cannot be decoded at all, so the wire check answers it with a
TApplicationException PROTOCOL_ERROR whose message names the field path.
"""

from __future__ import annotations

import pytest
from thriftpy2.thrift import TApplicationException, TMessageType

from pinlater.idl import PinLater
from tests.fuzz.wire import (
    BOOL,
    BYTE,
    DOUBLE,
    I32,
    I64,
    LIST,
    STRING,
    STRUCT,
    call,
    context,
    double,
    field,
    i8,
    i32,
    i64,
    list_,
    request,
    string,
    struct_,
)
from tests.support.server_process import RawFrameClient, ServerProcess, decode_reply

Q = "hostile_q"
GOOD_DESC = f"{Q}:s1:p1:1"
FULLWIDTH = "ｑｕｅｕｅ"
ARABIC_DIGIT = "q\u0665"
INVALID_UTF8 = b"\xff\xfe\xfd"
I64_MAX, I64_MIN, I32_MAX = 2**63 - 1, -(2**63), 2**31 - 1


def qn(name: bytes | str = Q, fid: int = 1) -> bytes:
    return field(STRING, fid, string(name))


def job(*fields: bytes) -> bytes:
    return struct_(*fields)


def jobs(*items: bytes) -> bytes:
    return field(LIST, 2, list_(STRUCT, list(items)))


BODY = field(STRING, 1, string(b"body"))


def ack_info(desc: bytes | str = GOOD_DESC, *extra: bytes) -> bytes:
    return struct_(field(STRING, 1, string(desc)), *extra)


def checkpoint_item(*fields: bytes, desc: str | None = GOOD_DESC) -> bytes:
    """One checkpoint request: the descriptor `desc` (None: left out), then `fields`."""
    return struct_(*([] if desc is None else [field(STRING, 1, string(desc))]), *fields)


def acks(*infos: bytes, fid: int = 2) -> bytes:
    """ackDequeuedJobs on Q with `infos` as jobsSucceeded (fid 2) or jobsFailed (fid 3)."""
    return call("ackDequeuedJobs", request(qn(), field(LIST, fid, list_(STRUCT, list(infos)))))


def checkpoints(*items: bytes) -> bytes:
    """checkpointJobs on Q with `items` as its requests."""
    return call("checkpointJobs", request(qn(), field(LIST, 2, list_(STRUCT, list(items)))))


# (id, method, payload, text the error message must contain)
CASES = [
    # --- every RPC: context problems
    *[
        (f"{m}-no-context", m, call(m, *args, with_context=False), "context.source")
        for m, args in (
            ("createQueue", (qn(fid=2),)),
            ("getQueueNames", ()),
            ("enqueueJobs", (request(qn(), jobs(job(BODY))),)),
        )
    ],
    (
        "context-source-wrong-type",
        "getQueueNames",
        PinLater
        and call(
            "getQueueNames", field(STRUCT, 1, struct_(field(I32, 1, i32(5)))), with_context=False
        ),
        "context.source",
    ),
    (
        "context-missing-source",
        "getQueueNames",
        call("getQueueNames", field(STRUCT, 1, struct_()), with_context=False),
        "context.source",
    ),
    # --- createQueue / deleteQueue: names
    ("create-missing-name", "createQueue", call("createQueue"), "name"),
    ("create-name-wrong-type", "createQueue", call("createQueue", field(I32, 2, i32(7))), "name"),
    ("create-fullwidth-name", "createQueue", call("createQueue", qn(FULLWIDTH, 2)), "name"),
    ("create-unicode-digit", "createQueue", call("createQueue", qn(ARABIC_DIGIT, 2)), "name"),
    ("create-trailing-newline", "createQueue", call("createQueue", qn("abc\n", 2)), "name"),
    ("create-empty-name", "createQueue", call("createQueue", qn("", 2)), "name"),
    ("create-name-too-long", "createQueue", call("createQueue", qn("a" * 5000, 2)), "name"),
    ("create-name-with-colon", "createQueue", call("createQueue", qn("a:b", 2)), "name"),
    (
        "delete-password-wrong-type",
        "deleteQueue",
        call("deleteQueue", qn(Q, 2), field(I64, 3, i64(1))),
        "password",
    ),
    (
        "delete-name-newline",
        "deleteQueue",
        call("deleteQueue", qn("x\n", 2), field(STRING, 3, string("pw"))),
        "name",
    ),
    # --- enqueueJobs
    ("enqueue-no-request", "enqueueJobs", call("enqueueJobs"), "request"),
    (
        "enqueue-request-wrong-type",
        "enqueueJobs",
        call("enqueueJobs", field(I32, 2, i32(1))),
        "request",
    ),
    (
        "enqueue-missing-queue",
        "enqueueJobs",
        call("enqueueJobs", request(jobs(job(BODY)))),
        "queueName",
    ),
    ("enqueue-missing-jobs", "enqueueJobs", call("enqueueJobs", request(qn())), "jobs"),
    (
        "enqueue-jobs-wrong-type",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), field(I32, 2, i32(3)))),
        "jobs",
    ),
    ("enqueue-empty-jobs", "enqueueJobs", call("enqueueJobs", request(qn(), jobs())), "jobs"),
    (
        "enqueue-missing-body",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(field(BYTE, 2, i8(1)))))),
        "jobs[0].body",
    ),
    (
        "enqueue-body-wrong-type",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(field(I64, 1, i64(1)))))),
        "jobs[0].body",
    ),
    (
        "enqueue-priority-negative",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(BODY, field(BYTE, 2, i8(-128)))))),
        "jobs[0].priority",
    ),
    (
        "enqueue-priority-wrong-type",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(BODY), job(BODY, field(I32, 2, i32(2)))))),
        None,
    ),  # wrong wire type is skipped: the default priority applies, so this succeeds
    (
        "enqueue-run-after-overflow",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(BODY, field(I64, 3, i64(I64_MAX)))))),
        "jobs[0].runAfterTimestampMillis",
    ),
    (
        "enqueue-run-after-negative",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(BODY, field(I64, 3, i64(I64_MIN)))))),
        "jobs[0].runAfterTimestampMillis",
    ),
    (
        "enqueue-attempts-zero",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(BODY, field(I32, 4, i32(0)))))),
        "jobs[0].numAttemptsAllowed",
    ),
    (
        "enqueue-attempts-huge",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), jobs(job(BODY, field(I32, 4, i32(I32_MAX)))))),
        "jobs[0].numAttemptsAllowed",
    ),
    (
        "enqueue-status-wrong-type",
        "enqueueJobs",
        call(
            "enqueueJobs",
            request(qn(), jobs(job(BODY), job(BODY, field(LIST, 5, list_(STRING, [string("x")]))))),
        ),
        None,
    ),
    (
        "enqueue-fullwidth-queue",
        "enqueueJobs",
        call("enqueueJobs", request(qn(FULLWIDTH), jobs(job(BODY)))),
        "queueName",
    ),
    (
        "enqueue-queue-newline",
        "enqueueJobs",
        call("enqueueJobs", request(qn(Q + "\n"), jobs(job(BODY)))),
        "queueName",
    ),
    # --- dequeueJobs
    ("dequeue-missing-limit", "dequeueJobs", call("dequeueJobs", request(qn())), "limit"),
    (
        "dequeue-limit-negative",
        "dequeueJobs",
        call("dequeueJobs", request(qn(), field(I32, 2, i32(-1)))),
        "limit",
    ),
    (
        "dequeue-limit-huge",
        "dequeueJobs",
        call("dequeueJobs", request(qn(), field(I32, 2, i32(I32_MAX)))),
        "limit",
    ),
    (
        "dequeue-limit-wrong-type",
        "dequeueJobs",
        call("dequeueJobs", request(qn(), field(I64, 2, i64(5)))),
        "limit",
    ),
    (
        "dequeue-coverage-nan",
        "dequeueJobs",
        call(
            "dequeueJobs",
            request(qn(), field(I32, 2, i32(1)), field(DOUBLE, 5, double(float("nan")))),
        ),
        "coverage",
    ),
    (
        "dequeue-coverage-inf",
        "dequeueJobs",
        call(
            "dequeueJobs",
            request(qn(), field(I32, 2, i32(1)), field(DOUBLE, 5, double(float("inf")))),
        ),
        "coverage",
    ),
    (
        "dequeue-coverage-negative",
        "dequeueJobs",
        call("dequeueJobs", request(qn(), field(I32, 2, i32(1)), field(DOUBLE, 5, double(-1.0)))),
        "coverage",
    ),
    (
        "dequeue-ack-other-queue",
        "dequeueJobs",
        call(
            "dequeueJobs",
            request(
                qn(),
                field(I32, 2, i32(1)),
                field(
                    STRUCT,
                    3,
                    struct_(qn(), field(LIST, 2, list_(STRUCT, [ack_info("other:s1:p1:1")]))),
                ),
            ),
        ),
        "jobAckRequest.jobsSucceeded[0].jobDescriptor",
    ),
    (
        "dequeue-ack-missing-queue",
        "dequeueJobs",
        call("dequeueJobs", request(qn(), field(I32, 2, i32(1)), field(STRUCT, 3, struct_()))),
        "jobAckRequest.queueName",
    ),
    # --- ackDequeuedJobs
    ("ack-no-request", "ackDequeuedJobs", call("ackDequeuedJobs"), "request"),
    (
        "ack-descriptor-unicode-digit",
        "ackDequeuedJobs",
        acks(ack_info(f"{Q}:s1:p1:\u0665")),
        "request.jobsSucceeded[0].jobDescriptor",
    ),
    (
        "ack-descriptor-fullwidth-digit",
        "ackDequeuedJobs",
        acks(ack_info(f"{Q}:s1:p1:\uff11"), fid=3),
        "request.jobsFailed[0].jobDescriptor",
    ),
    (
        "ack-descriptor-trailing-newline",
        "ackDequeuedJobs",
        acks(ack_info(GOOD_DESC + "\n")),
        "request.jobsSucceeded[0].jobDescriptor",
    ),
    (
        "ack-descriptor-id-overflow",
        "ackDequeuedJobs",
        acks(ack_info(f"{Q}:s1:p1:{'9' * 19}")),
        "request.jobsSucceeded[0].jobDescriptor",
    ),
    (
        "ack-descriptor-priority-zero",
        "ackDequeuedJobs",
        acks(ack_info(f"{Q}:s1:p0:1")),
        "request.jobsSucceeded[0].jobDescriptor",
    ),
    (
        "ack-descriptor-missing",
        "ackDequeuedJobs",
        acks(struct_()),
        "request.jobsSucceeded[0].jobDescriptor",
    ),
    (
        "ack-list-wrong-type",
        "ackDequeuedJobs",
        call("ackDequeuedJobs", request(qn(), field(STRING, 2, string("x")))),
        None,
    ),
    (
        "ack-claim-wrong-type",
        "ackDequeuedJobs",
        acks(ack_info(GOOD_DESC, field(I32, 100, i32(1)))),
        None,
    ),
    # --- checkpointJobs
    (
        "checkpoint-missing-requests",
        "checkpointJobs",
        call("checkpointJobs", request(qn())),
        "requests",
    ),
    (
        "checkpoint-missing-descriptor",
        "checkpointJobs",
        checkpoints(checkpoint_item(desc=None)),
        "requests[0].jobDescriptor",
    ),
    (
        "checkpoint-attempts-negative",
        "checkpointJobs",
        checkpoints(checkpoint_item(field(I32, 5, i32(-3)))),
        "requests[0].numOfAttemptsAllowed",
    ),
    (
        "checkpoint-run-after-overflow",
        "checkpointJobs",
        checkpoints(checkpoint_item(field(I64, 4, i64(I64_MAX)))),
        "requests[0].runAfterTimestampMillis",
    ),
    (
        "checkpoint-move-wrong-type",
        "checkpointJobs",
        checkpoints(checkpoint_item(field(I32, 3, i32(1)))),
        None,
    ),
    # --- lookupJobs
    ("lookup-missing-descriptors", "lookupJobs", call("lookupJobs", request()), "jobDescriptors"),
    (
        "lookup-descriptor-garbage",
        "lookupJobs",
        call("lookupJobs", request(field(LIST, 1, list_(STRING, [string("a:b:c:d")])))),
        "jobDescriptors[0]",
    ),
    (
        "lookup-descriptor-fullwidth-queue",
        "lookupJobs",
        call(
            "lookupJobs", request(field(LIST, 1, list_(STRING, [string(f"{FULLWIDTH}:s1:p1:1")])))
        ),
        "jobDescriptors[0]",
    ),
    # --- getJobCount
    ("count-missing-state", "getJobCount", call("getJobCount", request(qn())), "jobState"),
    (
        "count-state-out-of-range",
        "getJobCount",
        call("getJobCount", request(qn(), field(I32, 2, i32(7)))),
        "jobState",
    ),
    (
        "count-priority-zero",
        "getJobCount",
        call("getJobCount", request(qn(), field(I32, 2, i32(0)), field(BYTE, 3, i8(0)))),
        "priority",
    ),
    (
        "count-bad-regex",
        "getJobCount",
        call("getJobCount", request(qn(), field(I32, 2, i32(0)), field(STRING, 5, string("(")))),
        "bodyRegexToMatch",
    ),
    (
        "count-regex-too-long",
        "getJobCount",
        call(
            "getJobCount",
            request(qn(), field(I32, 2, i32(0)), field(STRING, 5, string("a" * 5000))),
        ),
        "bodyRegexToMatch",
    ),
    (
        "count-future-wrong-type",
        "getJobCount",
        call("getJobCount", request(qn(), field(I32, 2, i32(0)), field(I32, 4, i32(1)))),
        None,
    ),
    # --- getQueueNames: only a context
    (
        "names-context-wrong-type",
        "getQueueNames",
        call("getQueueNames", field(STRING, 1, string("ctx")), with_context=False),
        "context.source",
    ),
    # --- getSchedules (extension)
    (
        "schedules-count-negative",
        "getSchedules",
        call("getSchedules", request(field(I32, 2, i32(-1)))),
        "count",
    ),
    (
        "schedules-queue-wrong-type",
        "getSchedules",
        call("getSchedules", request(field(I32, 1, i32(7)))),
        None,  # an optional field of the wrong type is skipped: every queue's schedules
    ),
    # --- scanJobs
    ("scan-missing-state", "scanJobs", call("scanJobs", request(qn())), "jobState"),
    (
        "scan-state-negative",
        "scanJobs",
        call("scanJobs", request(qn(), field(I32, 2, i32(-1)))),
        "jobState",
    ),
    (
        "scan-limit-zero",
        "scanJobs",
        call("scanJobs", request(qn(), field(I32, 2, i32(0)), field(I32, 6, i32(0)))),
        "limit",
    ),
    (
        "scan-limit-huge",
        "scanJobs",
        call("scanJobs", request(qn(), field(I32, 2, i32(0)), field(I32, 6, i32(I32_MAX)))),
        "limit",
    ),
    (
        "scan-continuation-garbage",
        "scanJobs",
        call("scanJobs", request(qn(), field(I32, 2, i32(0)), field(STRING, 5, string("zz\n")))),
        "continuation",
    ),
    (
        "scan-continuation-unicode-digits",
        "scanJobs",
        call(
            "scanJobs",
            request(qn(), field(I32, 2, i32(0)), field(STRING, 5, string("\u0665:1:1:1"))),
        ),
        "continuation",
    ),
    # --- retryFailedJobs
    (
        "retry-attempts-zero",
        "retryFailedJobs",
        call("retryFailedJobs", request(qn(), field(I32, 3, i32(0)))),
        "attemptsToAllow",
    ),
    (
        "retry-limit-negative",
        "retryFailedJobs",
        call("retryFailedJobs", request(qn(), field(I32, 5, i32(-1)))),
        "limit",
    ),
    (
        "retry-run-after-negative",
        "retryFailedJobs",
        call("retryFailedJobs", request(qn(), field(I64, 4, i64(-1)))),
        "runAfterTimestampMillis",
    ),
    (
        "retry-priority-huge",
        "retryFailedJobs",
        call("retryFailedJobs", request(qn(), field(BYTE, 2, i8(127)))),
        "priority",
    ),
    (
        "retry-queue-unicode-digit",
        "retryFailedJobs",
        call("retryFailedJobs", request(qn(ARABIC_DIGIT))),
        "queueName",
    ),
    # --- deleteJobs
    ("delete-missing-state", "deleteJobs", call("deleteJobs", request(qn())), "jobState"),
    (
        "delete-limit-zero",
        "deleteJobs",
        call("deleteJobs", request(qn(), field(I32, 2, i32(3)), field(I32, 5, i32(0)))),
        "limit",
    ),
    (
        "delete-priority-negative",
        "deleteJobs",
        call("deleteJobs", request(qn(), field(I32, 2, i32(3)), field(BYTE, 3, i8(-1)))),
        "priority",
    ),
    (
        "delete-state-wrong-type",
        "deleteJobs",
        call("deleteJobs", request(qn(), field(STRING, 2, string("FAILED")))),
        "jobState",
    ),
    (
        "delete-regex-wrong-type",
        "deleteJobs",
        call("deleteJobs", request(qn(), field(I32, 2, i32(3)), field(BOOL, 4, b"\x01"))),
        None,
    ),
]

# (id, method, payload, field path) for invalid UTF-8 in `string` fields
UTF8_CASES = [
    (
        "context-source",
        "getQueueNames",
        call("getQueueNames", context(INVALID_UTF8), with_context=False),
        "context.source",
    ),
    ("create-name", "createQueue", call("createQueue", qn(INVALID_UTF8, 2)), "name"),
    (
        "schedules-queue",
        "getSchedules",
        call("getSchedules", request(qn(INVALID_UTF8))),
        "queueName",
    ),
    (
        "delete-password",
        "deleteQueue",
        call("deleteQueue", qn(Q, 2), field(STRING, 3, string(INVALID_UTF8))),
        "password",
    ),
    (
        "enqueue-queue",
        "enqueueJobs",
        call("enqueueJobs", request(qn(INVALID_UTF8), jobs(job(BODY)))),
        "request.queueName",
    ),
    (
        "enqueue-status",
        "enqueueJobs",
        call(
            "enqueueJobs",
            request(qn(), jobs(job(BODY), job(BODY, field(STRING, 5, string(INVALID_UTF8))))),
        ),
        "request.jobs[1].customStatus",
    ),
    (
        "dequeue-queue",
        "dequeueJobs",
        call("dequeueJobs", request(qn(INVALID_UTF8), field(I32, 2, i32(1)))),
        "request.queueName",
    ),
    (
        "ack-claim",
        "ackDequeuedJobs",
        acks(ack_info(GOOD_DESC, field(STRING, 100, string(INVALID_UTF8))), fid=3),
        "request.jobsFailed[0].claimDescriptor",
    ),
    (
        "checkpoint-new-body",
        "checkpointJobs",
        checkpoints(checkpoint_item(field(STRING, 2, string(INVALID_UTF8)))),
        "request.requests[0].newBody",
    ),
    (
        "lookup-descriptor",
        "lookupJobs",
        call(
            "lookupJobs",
            request(field(LIST, 1, list_(STRING, [string("a"), string(INVALID_UTF8)]))),
        ),
        "request.jobDescriptors[1]",
    ),
    (
        "count-regex",
        "getJobCount",
        call(
            "getJobCount",
            request(qn(), field(I32, 2, i32(0)), field(STRING, 5, string(INVALID_UTF8))),
        ),
        "request.bodyRegexToMatch",
    ),
    (
        "scan-continuation",
        "scanJobs",
        call(
            "scanJobs", request(qn(), field(I32, 2, i32(0)), field(STRING, 5, string(INVALID_UTF8)))
        ),
        "request.continuation",
    ),
    (
        "retry-queue",
        "retryFailedJobs",
        call("retryFailedJobs", request(qn(INVALID_UTF8))),
        "request.queueName",
    ),
    (
        "delete-regex",
        "deleteJobs",
        call(
            "deleteJobs",
            request(qn(), field(I32, 2, i32(3)), field(STRING, 4, string(INVALID_UTF8))),
        ),
        "request.bodyRegexToMatch",
    ),
]

# known list fields whose elements have another type than the IDL says: thriftpy2 would decode
# them as an empty list, silently changing the request's meaning
MISMATCH_CASES = [
    (
        "enqueue-jobs-list-of-i32",
        "enqueueJobs",
        call("enqueueJobs", request(qn(), field(LIST, 2, list_(I32, [i32(1)])))),
        "request.jobs: elements are i32, expected struct",
    ),
    (
        "lookup-descriptors-list-of-i64",
        "lookupJobs",
        call("lookupJobs", request(field(LIST, 1, list_(I64, [i64(1)])))),
        "request.jobDescriptors: elements are i64, expected string",
    ),
    (
        "ack-list-of-strings",
        "ackDequeuedJobs",
        call("ackDequeuedJobs", request(qn(), field(LIST, 3, list_(STRING, [string("x")])))),
        "request.jobsFailed: elements are string, expected struct",
    ),
]

METHODS = {case[1] for case in CASES}


def test_every_rpc_has_hostile_value_cases():
    assert set(PinLater.thrift_services) == METHODS
    assert {case[1] for case in UTF8_CASES} == set(PinLater.thrift_services)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(
        {"janitor": {"enabled": False}}, tmp_path_factory.mktemp("hostile")
    ) as running:
        client = running.client()
        client.createQueue(pinlater_context(), Q)
        client.close()
        yield running
        log = running.log()
    assert "Traceback" not in log, log[-4000:]


@pytest.fixture(scope="module")
def raw(server):
    with RawFrameClient(server.host, server.port) as client:
        yield client


def pinlater_context():
    from pinlater.idl import RequestContext

    return RequestContext(source="hostile-test")


@pytest.mark.parametrize("case_id,method,payload,expected", CASES, ids=[case[0] for case in CASES])
def test_hostile_value_gets_a_pinlater_exception_naming_the_field(
    raw, case_id, method, payload, expected
):
    name, msg_type, seqid, result = decode_reply(
        raw.call(payload), getattr(PinLater, method + "_result")
    )
    assert (name, msg_type, seqid) == (method, TMessageType.REPLY, 1), result
    if expected is None:  # a wrong wire type on an optional field: skipped, defaults apply
        assert result.e is None or "internal error" not in result.e.message
        return
    assert result.e is not None, f"{case_id}: accepted ({result.success!r})"
    assert "internal error" not in result.e.message
    assert expected in result.e.message, result.e.message


@pytest.mark.parametrize(
    "case_id,method,payload,path", UTF8_CASES, ids=[case[0] for case in UTF8_CASES]
)
def test_invalid_utf8_is_a_protocol_error_naming_the_field_path(
    raw, case_id, method, payload, path
):
    name, msg_type, seqid, exc = decode_reply(raw.call(payload))
    assert (name, msg_type, seqid) == (method, TMessageType.EXCEPTION, 1)
    assert exc.type == TApplicationException.PROTOCOL_ERROR
    assert f"{path}: invalid UTF-8" in exc.message, exc.message


@pytest.mark.parametrize(
    "case_id,method,payload,message", MISMATCH_CASES, ids=[case[0] for case in MISMATCH_CASES]
)
def test_list_of_the_wrong_element_type_is_a_protocol_error_naming_the_field(
    raw, case_id, method, payload, message
):
    name, msg_type, seqid, exc = decode_reply(raw.call(payload))
    assert (name, msg_type, seqid) == (method, TMessageType.EXCEPTION, 1)
    assert exc.type == TApplicationException.PROTOCOL_ERROR
    assert message in exc.message, exc.message


def test_the_connection_still_serves_after_every_hostile_value(raw):
    name, msg_type, _, result = decode_reply(
        raw.call(call("getQueueNames", seqid=1)), PinLater.getQueueNames_result
    )
    assert (name, msg_type) == ("getQueueNames", TMessageType.REPLY)
    assert Q in result.success
