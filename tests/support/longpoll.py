"""Raw long-poll dequeues for tests and benchmarks: many connections, each with one
`dequeueJobs` parked on a server, without a thread per connection."""

from __future__ import annotations

import selectors
import socket
import struct
import time

from pinlater.idl import ErrorCode, PinLater, RequestContext
from pinlater.idl import pinlater_thrift as wire
from tests.support.server_process import decode_reply, encode_call, recv_exact


def park_dequeues(server, queue: str, count: int, wait_ms: int) -> list:
    """`count` raw connections, each with a long-poll dequeue parked. The server's admission
    caps dequeues in flight (a parked one no longer counts): one refused for that is sent
    again, as a client would after its back-off."""
    request = wire.PinLaterDequeueRequest(queueName=queue, limit=1, waitMillis=wait_ms)
    args = PinLater.dequeueJobs_args(context=RequestContext(source="parked"), request=request)
    payload = encode_call("dequeueJobs", args)
    frame = struct.pack("!i", len(payload)) + payload
    sockets = []
    for i in range(count):
        sock = socket.create_connection((server.host, server.port), timeout=10)
        sock.sendall(frame)
        sockets.append(sock)
        if i % 16 == 15:
            time.sleep(0.01)
    for _ in range(20):
        early = read_answers(sockets, timeout=0.5)
        if not early:
            return sockets
        for i, (jobs, error) in early.items():
            assert error is not None and error.errorCode == ErrorCode.DEQUEUE_RATE_LIMITED, (
                jobs,
                error,
            )
            sockets[i].sendall(frame)
    raise AssertionError("dequeues kept being refused instead of parked")


def read_answers(sockets: list, timeout: float, want: int | None = None) -> dict:
    """socket index -> (jobs, error) of the dequeue replies that arrived within `timeout`
    (until `want` replies came)."""
    answers: dict = {}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:  # epoll: more than 1,024 descriptors
        for i, sock in enumerate(sockets):
            selector.register(sock, selectors.EVENT_READ, i)
        while True:
            ready = selector.select(max(deadline - time.monotonic(), 0))
            for key, _ in ready:
                sock = key.fileobj
                size = struct.unpack("!i", recv_exact(sock, 4))[0]
                _, _, _, result = decode_reply(recv_exact(sock, size), PinLater.dequeueJobs_result)
                jobs = None if result.success is None else result.success.jobs or {}
                answers[key.data] = (jobs, result.e)
                selector.unregister(sock)
            if not ready or (want is not None and len(answers) >= want):
                return answers
