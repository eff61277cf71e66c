"""Admission caps: refusals are immediate, well-formed PinLaterException replies; dequeues and
other requests have separate budgets; per-queue dequeue slots."""

from __future__ import annotations

import random
import struct
import threading

from pinlater.idl import PinLater, RequestContext
from pinlater.idl import pinlater_thrift as T
from pinlater.ops.queue_slots import QueueSlots
from pinlater.server.admission import DEQUEUE, Admission, is_dequeue, method_and_seqid
from tests.support.server_process import decode_reply, encode_call

CTX = RequestContext(source="admission-test")


def dequeue_call(seqid: int = 7) -> bytes:
    return encode_call(
        "dequeueJobs",
        PinLater.dequeueJobs_args(
            context=CTX, request=T.PinLaterDequeueRequest(queueName="q", limit=1)
        ),
        seqid,
    )


def enqueue_call(seqid: int = 9) -> bytes:
    return encode_call(
        "enqueueJobs",
        PinLater.enqueueJobs_args(
            context=CTX,
            request=T.PinLaterEnqueueRequest(queueName="q", jobs=[T.PinLaterJob(body=b"x")]),
        ),
        seqid,
    )


class Blocker:
    """A `run` that blocks until released, so requests stay in flight."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def __call__(self) -> bytes:
        self.entered.release()
        self.release.wait(10)
        return b"done"


def hold(admission: Admission, payload: bytes, blocker: Blocker, n: int) -> list:
    threads = [threading.Thread(target=admission.serve, args=(payload, blocker)) for _ in range(n)]
    for t in threads:
        t.start()
    for _ in range(n):
        assert blocker.entered.acquire(timeout=5)
    return threads


def refusal(payload: bytes, admission: Admission, result_cls):
    name, _msg_type, seqid, body = decode_reply(
        admission.serve(payload, lambda: b"not expected"), result_cls
    )
    return name, seqid, body.e


def test_header_is_read_without_decoding_the_arguments():
    assert method_and_seqid(dequeue_call(42)) == ("dequeueJobs", 42)
    assert method_and_seqid(b"\x80\x01") is None
    assert method_and_seqid(b"\x80\x01\x00\x01\xff\xff\xff\xff") is None


def _parsed_is_dequeue(payload: bytes) -> bool:
    header = method_and_seqid(payload)
    return header is not None and header[0] == DEQUEUE


def test_dequeue_check_by_bytes_agrees_with_the_parsed_header():
    rng = random.Random(5)
    call = dequeue_call(42)
    payloads = [call, enqueue_call(), b"", b"garbage!", call[:4] + b"\x00" * 30]
    payloads += [call[:n] for n in range(len(call))]  # every truncation, around the seqid too
    payloads += [encode_call(name, seqid=3) for name in PinLater.thrift_services]
    payloads += [
        call[:4] + struct.pack("!i", len(name)) + name + struct.pack("!i", 1)
        for name in (b"dequeueJobsX", b"dequeueJob", b"dequeuejobs", b"\xffequeueJobs")
    ]
    for _ in range(2000):  # single-byte mutations of a real dequeue header
        mutated = bytearray(call)
        mutated[rng.randrange(24)] = rng.randrange(256)
        payloads.append(bytes(mutated))
    for payload in payloads:
        assert is_dequeue(payload) == _parsed_is_dequeue(payload), payload
    assert is_dequeue(call) and not is_dequeue(enqueue_call())


def test_a_busy_server_lets_the_dispatcher_answer_an_unknown_method():
    admission = Admission(max_requests=1, max_dequeues=1, service=PinLater)
    blocker = Blocker()
    threads = hold(admission, enqueue_call(), blocker, 1)
    try:
        assert (
            admission.serve(encode_call("noSuchMethod"), lambda: b"unknown method")
            == b"unknown method"
        )
        assert admission.stats()["in_flight"] == 1
    finally:
        blocker.release.set()
        for t in threads:
            t.join(5)
    assert admission.stats() == {"in_flight": 0, "in_flight_dequeues": 0}


def test_dequeues_over_the_cap_get_dequeue_rate_limited_at_once_and_enqueues_still_run():
    refused: list[str] = []
    admission = Admission(
        max_requests=2, max_dequeues=2, service=PinLater, on_refused=refused.append
    )
    blocker = Blocker()
    threads = hold(admission, dequeue_call(), blocker, 2)
    try:
        name, seqid, error = refusal(dequeue_call(5), admission, PinLater.dequeueJobs_result)
        assert (name, seqid, error.errorCode) == ("dequeueJobs", 5, 429)
        assert "Too many concurrent dequeues" in error.message
        assert admission.serve(enqueue_call(), lambda: b"enqueued") == b"enqueued"
        assert refused == ["dequeues"]
        assert admission.stats() == {"in_flight": 2, "in_flight_dequeues": 2}
    finally:
        blocker.release.set()
        for t in threads:
            t.join(5)
    assert admission.stats() == {"in_flight": 0, "in_flight_dequeues": 0}
    assert admission.serve(dequeue_call(), lambda: b"ok") == b"ok"


def test_other_requests_over_their_cap_get_server_busy_and_dequeues_are_not_counted():
    admission = Admission(max_requests=1, max_dequeues=1, service=PinLater)
    blocker = Blocker()
    threads = hold(admission, enqueue_call(), blocker, 1)
    try:
        name, seqid, error = refusal(enqueue_call(3), admission, PinLater.enqueueJobs_result)
        assert (name, seqid, error.errorCode) == ("enqueueJobs", 3, 500)
        assert error.message.startswith("Server busy")
        assert admission.serve(dequeue_call(), lambda: b"dequeued") == b"dequeued"
    finally:
        blocker.release.set()
        for t in threads:
            t.join(5)


def test_unreadable_frames_are_left_to_the_dispatcher_even_when_busy():
    admission = Admission(max_requests=1, max_dequeues=1, service=PinLater)
    blocker = Blocker()
    threads = hold(admission, enqueue_call(), blocker, 1)
    try:
        assert admission.serve(b"garbage!", lambda: b"dispatcher answer") == b"dispatcher answer"
    finally:
        blocker.release.set()
        for t in threads:
            t.join(5)
    assert admission.stats()["in_flight"] == 0


def test_queue_slots_cap_each_queue_separately_and_forget_idle_queues():
    slots = QueueSlots(2)
    assert slots.try_acquire("a") and slots.try_acquire("a")
    assert not slots.try_acquire("a")
    assert slots.try_acquire("b")
    slots.release("a")
    assert slots.try_acquire("a")
    for queue in ("a", "a", "b"):
        slots.release(queue)
    assert slots._held == {}
