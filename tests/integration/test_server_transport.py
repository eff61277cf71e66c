"""The network loop on a real loopback socket, in front of a stand-in handler.

Covers framing limits, malformed input, the Finagle probe, exception translation, timeouts,
the connection cap and graceful drain. Whole-process behaviour (real App, SQLite, signals, port
in use) is in test_server_process.py.
"""

from __future__ import annotations

import struct
import threading
import time
from functools import partial

import pytest
from thriftpy2.thrift import TApplicationException, TMessageType

from pinlater.idl import PinLater, PinLaterException, RequestContext, pinlater_thrift
from pinlater.storage.shard_kit.races import run_threads
from tests.integration.conftest import run_inproc
from tests.support.server_process import (
    RawFrameClient,
    decode_reply,
    encode_call,
    make_thrift_client,
)

CTX = RequestContext(source="transport-test")


def create_queue_call(name: str, seqid: int = 1) -> bytes:
    return encode_call("createQueue", PinLater.createQueue_args(context=CTX, name=name), seqid)


def call_header(method: str, seqid: int = 1) -> bytes:
    name = method.encode()
    return b"\x80\x01\x00\x01" + struct.pack("!i", len(name)) + name + struct.pack("!i", seqid)


def test_thrift_client_round_trip_over_framed_binary(inproc_server):
    client = make_thrift_client(inproc_server.host, inproc_server.port)
    client.createQueue(CTX, "q1")
    request = pinlater_thrift.PinLaterEnqueueRequest(
        queueName="q1", jobs=[pinlater_thrift.PinLaterJob(body=b"x")] * 3
    )
    assert client.enqueueJobs(CTX, request).jobDescriptors == [f"q1:s1:p1:{i}" for i in range(3)]
    assert set(client.getQueueNames(CTX)) == {"q1"}
    client.close()


def test_finagle_probe_gets_unknown_method_and_the_connection_keeps_working(inproc_server):
    with RawFrameClient(inproc_server.host, inproc_server.port) as raw:
        name, msg_type, seqid, exc = decode_reply(
            raw.call(encode_call("__can__finagle__trace__v3__", seqid=42))
        )
        assert (name, msg_type, seqid) == (
            "__can__finagle__trace__v3__",
            TMessageType.EXCEPTION,
            42,
        )
        assert exc.type == TApplicationException.UNKNOWN_METHOD
        name, msg_type, seqid, result = decode_reply(
            raw.call(create_queue_call("after_probe", 43)), PinLater.createQueue_result
        )
        assert (name, msg_type, seqid, result.e) == ("createQueue", TMessageType.REPLY, 43, None)
    assert "after_probe" in inproc_server.handler.queues


def test_pipelined_frames_are_answered_in_order(inproc_server):
    with RawFrameClient(inproc_server.host, inproc_server.port) as raw:
        raw.send(
            b"".join(
                struct.pack("!i", len(p)) + p
                for p in (create_queue_call("p1", 7), create_queue_call("p2", 8))
            )
        )
        assert [decode_reply(raw.read_frame())[2] for _ in range(2)] == [7, 8]


def test_oversized_frame_header_closes_only_that_connection(inproc_server):
    healthy = make_thrift_client(inproc_server.host, inproc_server.port)
    healthy.createQueue(CTX, "before")
    with RawFrameClient(inproc_server.host, inproc_server.port) as raw:
        started = time.monotonic()
        raw.send(struct.pack("!i", 1 << 30))
        assert raw.wait_closed(2.0)
        assert time.monotonic() - started < 1.0
    healthy.createQueue(CTX, "after")
    assert {"before", "after"} <= set(healthy.getQueueNames(CTX))
    healthy.close()


@pytest.mark.parametrize(
    "header",
    [
        struct.pack("!i", 0),
        struct.pack("!i", -5),
        b"GET / HTTP/1.1\r\n\r\n",
        call_header("createQueue"),
    ],
    ids=["zero", "negative", "http", "unframed"],
)
def test_invalid_frame_length_closes_the_connection(inproc_server, header):
    with RawFrameClient(inproc_server.host, inproc_server.port) as raw:
        raw.send(header)
        assert raw.wait_closed(2.0)
    client = make_thrift_client(inproc_server.host, inproc_server.port)
    assert client.getQueueNames(CTX) == []
    client.close()


@pytest.mark.parametrize(
    "payload",
    [
        b"this is not thrift at all",
        b"\x80\x02\x00\x01" + create_queue_call("v")[4:],
        call_header("createQueue")[:6],
        b"\x80\x01\x00\x02" + create_queue_call("r")[4:],
    ],
    ids=["garbage", "bad-version", "truncated-header", "reply-not-call"],
)
def test_malformed_message_closes_the_connection_and_server_keeps_serving(inproc_server, payload):
    with RawFrameClient(inproc_server.host, inproc_server.port) as raw:
        raw.send_frame(payload)
        assert raw.wait_closed(2.0)
    client = make_thrift_client(inproc_server.host, inproc_server.port)
    client.createQueue(CTX, "still_serving")
    client.close()


def test_undeclared_handler_exception_becomes_internal_error_and_connection_survives(inproc_server):
    client = make_thrift_client(inproc_server.host, inproc_server.port)
    with pytest.raises(TApplicationException) as info:
        client.createQueue(CTX, "boom")
    assert info.value.type == TApplicationException.INTERNAL_ERROR
    client.createQueue(CTX, "after_boom")  # same connection
    client.close()


def test_declared_exception_reaches_the_client(inproc_server):
    client = make_thrift_client(inproc_server.host, inproc_server.port)
    with pytest.raises(PinLaterException) as info:
        client.createQueue(CTX, "bad")
    assert (info.value.errorCode, info.value.message) == (410, "bad name")
    client.close()


def _protocol_error_then_ok(server, payload: bytes) -> float:
    with RawFrameClient(server.host, server.port) as raw:
        started = time.monotonic()
        name, msg_type, seqid, exc = decode_reply(raw.call(payload))
        elapsed = time.monotonic() - started
        assert (name, msg_type, seqid) == ("createQueue", TMessageType.EXCEPTION, 9)
        assert exc.type == TApplicationException.PROTOCOL_ERROR
        assert decode_reply(raw.call(create_queue_call("ok", 10)))[1] == TMessageType.REPLY
    return elapsed


def test_invalid_utf8_in_a_string_field_gets_protocol_error(inproc_server):
    payload = (
        call_header("createQueue", 9) + b"\x0b\x00\x02" + struct.pack("!i", 2) + b"\xff\xfe\x00"
    )
    _protocol_error_then_ok(inproc_server, payload)
    assert inproc_server.handler.queues == {"ok"}


def test_string_length_past_the_frame_end_is_rejected_at_once(inproc_server):
    payload = call_header("createQueue", 9) + b"\x0b\x00\x02" + struct.pack("!i", 2**31 - 1)
    assert _protocol_error_then_ok(inproc_server, payload + b"abc") < 0.5


@pytest.mark.parametrize("elem_type", [0, 1, 19, 255])
def test_huge_container_of_zero_width_elements_is_rejected_at_once(inproc_server, elem_type):
    # thriftpy2's decoder would loop 2**31 times over elements that consume no bytes
    payload = (
        call_header("createQueue", 9)
        + b"\x0f\x00\x09"
        + bytes([elem_type])
        + struct.pack("!i", 2**31 - 1)
        + b"\x00"
    )
    assert _protocol_error_then_ok(inproc_server, payload) < 0.5


def test_idle_connection_is_closed_after_the_idle_timeout():
    with run_inproc(idle_timeout_seconds=0.3) as server:
        with RawFrameClient(server.host, server.port) as raw:
            raw.call(create_queue_call("x"))
            started = time.monotonic()
            assert raw.wait_closed(3.0)
            assert 0.25 <= time.monotonic() - started < 2.0


def test_frame_that_arrives_too_slowly_is_dropped():
    with run_inproc(frame_read_timeout_seconds=0.3, idle_timeout_seconds=30) as server:
        with RawFrameClient(server.host, server.port) as raw:
            payload = create_queue_call("slowloris")
            raw.send(struct.pack("!i", len(payload)) + payload[:5])
            started = time.monotonic()
            assert raw.wait_closed(3.0)
            assert time.monotonic() - started < 2.0
        assert "slowloris" not in server.handler.queues


def test_connections_beyond_the_cap_are_closed_immediately():
    with run_inproc(max_connections=2) as server:
        first = RawFrameClient(server.host, server.port)
        second = RawFrameClient(server.host, server.port)
        for raw in (first, second):
            assert decode_reply(raw.call(create_queue_call("c")))[1] == TMessageType.REPLY
        with RawFrameClient(server.host, server.port) as third:
            assert third.wait_closed(2.0)
        first.close()
        assert _eventually(lambda: server.server.connection_count() == 1, 3.0)
        with RawFrameClient(server.host, server.port) as fourth:
            assert decode_reply(fourth.call(create_queue_call("d")))[1] == TMessageType.REPLY
        second.close()


def test_shutdown_lets_in_flight_request_finish_and_closes_idle_connections():
    with run_inproc(shutdown_grace_seconds=5.0) as server:
        idle = RawFrameClient(server.host, server.port)
        idle.call(create_queue_call("warmup"))
        replies: list = []
        busy = RawFrameClient(server.host, server.port)
        caller = threading.Thread(
            target=lambda: replies.append(decode_reply(busy.call(create_queue_call("slow_600"))))
        )
        caller.start()
        assert server.handler.started.acquire(timeout=5)
        server.server.request_shutdown()
        assert idle.wait_closed(2.0)
        caller.join(5)
        assert replies and replies[0][1] == TMessageType.REPLY
        assert busy.wait_closed(2.0)
        server.thread.join(5)
        assert server.result == {"drained": True}
        idle.close()
        busy.close()


def test_shutdown_gives_up_on_requests_running_past_the_grace_period():
    with run_inproc(shutdown_grace_seconds=0.3) as server:
        busy = RawFrameClient(server.host, server.port)
        busy.send_frame(create_queue_call("slow_10000"))
        assert server.handler.started.acquire(timeout=5)
        started = time.monotonic()
        server.server.request_shutdown()
        server.thread.join(5)
        assert server.result == {"drained": False}
        assert time.monotonic() - started < 2.0
        server.handler.release.set()
        busy.close()


def test_many_concurrent_clients_with_few_worker_threads():
    with run_inproc(worker_threads=2) as server:

        def work(i: int) -> None:
            client = make_thrift_client(server.host, server.port)
            for j in range(50):
                client.createQueue(CTX, f"q{i}_{j}")
            client.close()

        run_threads([partial(work, i) for i in range(8)], timeout=30)
        assert len(server.handler.queues) == 400


def _eventually(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_frames_up_to_max_frame_bytes_are_served_and_larger_ones_refused():
    with run_inproc(max_frame_bytes=2048) as server:
        with RawFrameClient(server.host, server.port) as raw:
            payload = create_queue_call("a" * (2048 - len(create_queue_call(""))))
            assert len(payload) == 2048
            assert decode_reply(raw.call(payload))[1] == TMessageType.REPLY
            raw.send_frame(create_queue_call("b" * 2048))
            assert raw.wait_closed(2.0)
