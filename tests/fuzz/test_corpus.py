"""Regression corpus of hostile frames against a real server subprocess.

Each entry must be answered (a reply frame) or closed within 1 s (the slowloris entry: within
the frame deadline), while a concurrent healthy client keeps getting answers within 200 ms and
the server's RSS grows by less than 50 MB. Rejections must show up in
pinlater_frames_rejected_total by reason.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request

import pytest
from thriftpy2.thrift import TApplicationException, TMessageType

from pinlater.idl import RequestContext
from tests.fuzz.client import exchange, internal_errors, rss_bytes
from tests.fuzz.conftest import FRAME_DEADLINE, MAX_FRAME
from tests.fuzz.wire import (
    LIST,
    MAP,
    STRING,
    STRUCT,
    call,
    field,
    frame,
    header,
    i32,
    list_,
    request,
    string,
    struct_,
)
from tests.support.server_process import encode_call

CLOSE, PROTOCOL_ERROR, UNKNOWN_METHOD, DECLARED = "close", "protocol", "unknown", "declared"


def nested_structs(depth: int) -> bytes:
    inner = b"\x00"
    for _ in range(depth):
        inner = field(STRUCT, 1, inner) + b"\x00"
    return inner


def nested_lists(depth: int) -> bytes:
    inner = list_(STRING, [])
    for _ in range(depth):
        inner = list_(LIST, [inner])
    return inner


def non_strict_header(method: str) -> bytes:
    return string(method) + b"\x01" + i32(1)  # old-style: name, type byte, seqid


CORPUS = [
    ("length-0", i32(0), CLOSE),
    ("length-minus-1", i32(-1), CLOSE),
    ("length-2^31-1", i32(2**31 - 1) + b"\x80\x01", CLOSE),
    ("length-2^30", i32(2**30) + b"\x80\x01\x00\x01" + b"x" * 4096, CLOSE),
    ("length-max+1", i32(MAX_FRAME + 1) + b"\x80\x01\x00\x01", CLOSE),
    ("http", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", CLOSE),
    ("bad-version", frame(b"\x80\x02\x00\x01" + call("getQueueNames")[4:]), CLOSE),
    ("non-strict-header", frame(non_strict_header("getQueueNames") + b"\x00"), CLOSE),
    ("unframed-strict", call("getQueueNames"), CLOSE),
    ("reply-type", frame(b"\x80\x01\x00\x02" + call("getQueueNames")[4:]), CLOSE),
    (
        "string-length-minus-5",
        frame(header("createQueue") + field(STRING, 2, i32(-5)) + b"abc\x00"),
        PROTOCOL_ERROR,
    ),
    (
        "string-length-2^30",
        frame(header("createQueue") + field(STRING, 2, i32(2**30)) + b"abc\x00"),
        PROTOCOL_ERROR,
    ),
    (
        "unknown-map-2^31-1",
        frame(header("getQueueNames") + field(MAP, 9, b"\x01\x01" + i32(2**31 - 1)) + b"\x00"),
        PROTOCOL_ERROR,
    ),
    (
        "unknown-list-2^31-1",
        frame(header("getQueueNames") + field(LIST, 9, b"\x01" + i32(2**31 - 1)) + b"\x00"),
        PROTOCOL_ERROR,
    ),
    (
        "unknown-list-of-structs-2^31-1",
        frame(header("getQueueNames") + field(LIST, 9, b"\x0c" + i32(2**31 - 1)) + b"\x00"),
        PROTOCOL_ERROR,
    ),
    (
        "200-deep-unknown-structs",
        frame(header("getQueueNames") + nested_structs(200)),
        PROTOCOL_ERROR,
    ),
    (
        "100-deep-lists",
        frame(header("getQueueNames") + field(LIST, 9, nested_lists(100)) + b"\x00"),
        PROTOCOL_ERROR,
    ),
    (
        "invalid-utf8-queue-name",
        frame(
            call(
                "enqueueJobs",
                request(
                    field(STRING, 1, string(b"\xff\xfeq")),
                    field(LIST, 2, list_(STRUCT, [struct_(field(STRING, 1, string(b"body")))])),
                ),
            )
        ),
        PROTOCOL_ERROR,
    ),
    ("missing-required-fields", frame(call("enqueueJobs", request())), DECLARED),
    ("missing-context", frame(call("dequeueJobs", with_context=False)), DECLARED),
    ("finagle-probe", frame(encode_call("__can__finagle__trace__v3__", seqid=0)), UNKNOWN_METHOD),
    (
        "truncated-args",
        frame(call("createQueue", field(STRING, 2, string("abc")))[:-4]),
        PROTOCOL_ERROR,
    ),
]


def check_outcome(case_id: str, outcome, expect: str) -> None:
    assert outcome.closed or outcome.replies, f"{case_id}: neither reply nor close in time"
    assert not internal_errors(outcome), internal_errors(outcome)
    if expect == CLOSE:
        assert outcome.closed and not outcome.replies, (case_id, outcome)
        return
    assert outcome.replies, f"{case_id}: closed without a reply"
    name, msg_type, _, body = outcome.decoded()[0]
    if expect == PROTOCOL_ERROR:
        assert msg_type == TMessageType.EXCEPTION, (case_id, body)
        assert body.type == TApplicationException.PROTOCOL_ERROR, (case_id, body)
    elif expect == UNKNOWN_METHOD:
        assert (name, msg_type) == ("__can__finagle__trace__v3__", TMessageType.EXCEPTION)
        assert body.type == TApplicationException.UNKNOWN_METHOD
    else:  # a declared PinLaterException in a REPLY
        assert msg_type == TMessageType.REPLY, (case_id, body)
        assert body.startswith(b"\x0c\x00\x01"), (case_id, body)  # field 1: PinLaterException


class HealthyCaller(threading.Thread):
    """Calls getQueueNames every 10 ms on its own connection and records each latency."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.client = server.client(timeout=5)
        self.latencies: list[float] = []
        self.errors: list[Exception] = []
        self.stop = threading.Event()

    def run(self) -> None:
        ctx = RequestContext(source="healthy")
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                self.client.getQueueNames(ctx)
            except Exception as exc:  # noqa: BLE001 - asserted empty by the test
                self.errors.append(exc)
                return
            self.latencies.append(time.perf_counter() - started)
            self.stop.wait(0.01)

    def finish(self) -> None:
        self.stop.set()
        self.join(10)
        self.client.close()


def slowloris(server) -> float:
    """Start a frame and trickle one byte every 0.3 s; seconds until the server closes."""
    payload = frame(call("getQueueNames"))
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        started = time.monotonic()
        for byte in payload:
            try:
                sock.send(bytes([byte]))
            except OSError:
                break
            sock.settimeout(0.3)
            try:
                if sock.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
        return time.monotonic() - started


def rejected_counts(server) -> dict[str, float]:
    port = server.config["metrics"]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r'^pinlater_frames_rejected_total\{reason="([a-z_0-9]+)"\} (\S+)$', text, re.M
        )
    }


def test_every_corpus_entry_is_answered_or_closed_within_a_second(fuzz_server):
    healthy = HealthyCaller(fuzz_server)
    healthy.start()
    time.sleep(0.2)
    rss_before = rss_bytes(fuzz_server.pid)
    try:
        for _ in range(3):
            for case_id, data, expect in CORPUS:
                outcome = exchange(
                    fuzz_server.host, fuzz_server.port, data, deadline=1.0, half_close=False
                )
                check_outcome(case_id, outcome, expect)
        trickle_seconds = slowloris(fuzz_server)
    finally:
        healthy.finish()
    rss_growth = rss_bytes(fuzz_server.pid) - rss_before
    worst = max(healthy.latencies)
    print(
        f"\ncorpus x3: healthy calls {len(healthy.latencies)}, worst {worst * 1000:.1f} ms; "
        f"RSS growth {rss_growth / 2**20:.1f} MiB; slowloris closed after "
        f"{trickle_seconds:.2f} s"
    )
    assert healthy.errors == []
    assert worst < 0.2, f"a healthy call took {worst * 1000:.0f} ms"
    assert rss_growth < 50 * 2**20
    assert FRAME_DEADLINE * 0.8 <= trickle_seconds < FRAME_DEADLINE + 1.0


def test_rejections_are_counted_by_reason(fuzz_server):
    for _, data, _ in CORPUS:
        exchange(fuzz_server.host, fuzz_server.port, data, deadline=1.0, half_close=False)
    counts = rejected_counts(fuzz_server)
    for reason in (
        "frame_length",
        "malformed",
        "truncated",
        "too_deep",
        "too_many_items",
        "bad_utf8",
        "bad_type",
    ):
        assert counts.get(reason, 0) >= 1, (reason, counts)
    assert set(counts) <= set(__import__("pinlater.server.loop").server.loop.REJECT_REASONS)


@pytest.mark.parametrize("case_id,data,expect", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_entry_alone(fuzz_server, case_id, data, expect):
    started = time.monotonic()
    outcome = exchange(fuzz_server.host, fuzz_server.port, data, deadline=1.0, half_close=False)
    check_outcome(case_id, outcome, expect)
    assert time.monotonic() - started < 1.0
