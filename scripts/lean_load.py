"""The load client of scripts/bench_ceilings.py: pre-encoded Thrift frames over plain sockets.

Why: `pinlater enqueue` (the worker SDK client: thriftpy2's Cython protocol, one struct per
job, failover bookkeeping) spends about as much CPU per enqueued job as the server itself
(~1.7 ms per 100 jobs against the server's ~1.1 ms with Redis). On a 2-core machine that CPU
is taken from the server and the storage, so the server / ceiling ratio measured the client.
This client does for each request only what the wire needs:

* enqueue: one enqueueJobs frame (`batch` jobs with the fields the SDK sends: body, priority 1,
  2 attempts, empty custom status) is encoded once with thriftpy2's Cython binary protocol and
  sent as-is by every request (same bytes, so same server work, as distinct SDK requests). The
  reply is checked without decoding it: a REPLY message whose result is `success` holding
  exactly `batch` descriptors (the list header's count); anything else is decoded and raised.
* dequeue+ack: the dequeueJobs frame is pre-encoded; each reply is decoded with the Cython
  protocol (its descriptors and claims are needed), and the ack of every job (with its claim,
  as the SDK sends it) is encoded and sent as a separate ackDequeuedJobs call, as `pinlater
  dequeue` does; a request's latency is its dequeue plus its ack.

`clients` threads, each with its own connection, share the `calls` requests. Returns (per
request latencies in seconds, jobs handled, elapsed seconds).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TCyMemoryBuffer

from pinlater.idl import PinLater
from pinlater.idl import pinlater_thrift as wire

_HEADER = struct.Struct("!i")
_REPLY_VERSION = 0x80010000 | TMessageType.REPLY
#: success (field 0, a struct) -> jobDescriptors (field 1, a list of strings) -> its count
_ENQUEUE_SUCCESS = struct.Struct("!bhbhbi")
SOURCE = "bench-lean-load"


def encode_call(name: str, seqid: int, args: Any) -> bytes:
    """A framed CALL message of `name` with the `*_args` struct `args`."""
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf, strict_read=True, strict_write=True)
    proto.write_message_begin(name, TMessageType.CALL, seqid)
    args.write(proto)
    proto.write_message_end()
    payload = buf.getvalue()
    return _HEADER.pack(len(payload)) + payload


def enqueue_frame(queue: str, body: bytes, batch: int, request_id: str = "lean") -> bytes:
    jobs = [wire.PinLaterJob(body=body) for _ in range(batch)]
    args = PinLater.enqueueJobs_args(
        context=wire.RequestContext(source=SOURCE, requestId=request_id),
        request=wire.PinLaterEnqueueRequest(queueName=queue, jobs=jobs),
    )
    return encode_call("enqueueJobs", 1, args)


def dequeue_frame(queue: str, batch: int, request_id: str = "lean") -> bytes:
    args = PinLater.dequeueJobs_args(
        context=wire.RequestContext(source=SOURCE, requestId=request_id),
        request=wire.PinLaterDequeueRequest(queueName=queue, limit=batch),
    )
    return encode_call("dequeueJobs", 1, args)


def ack_frame(queue: str, response: Any, request_id: str = "lean") -> bytes:
    meta = response.jobMetadata or {}
    acks = []
    for descriptor in response.jobs or {}:
        info = wire.PinLaterJobAckInfo(jobDescriptor=descriptor)
        claim = getattr(meta.get(descriptor), "claimDescriptor", None)
        if claim is not None:
            info.claimDescriptor = claim
        acks.append(info)
    args = PinLater.ackDequeuedJobs_args(
        context=wire.RequestContext(source=SOURCE, requestId=request_id),
        request=wire.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks, jobsFailed=[]),
    )
    return encode_call("ackDequeuedJobs", 1, args)


class Connection:
    """One framed connection: send a frame, receive the reply payload."""

    def __init__(self, address: str, timeout: float = 60.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        (size,) = _HEADER.unpack(self._exactly(4))
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        data = self.sock.recv(n)
        if len(data) == n:
            return data
        parts = [data]
        got = len(data)
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self.sock.close()


def _result_offset(payload: bytes) -> int:
    """Where the result struct starts; raises unless the message is a REPLY."""
    if _HEADER.unpack_from(payload)[0] & 0xFFFFFFFF != _REPLY_VERSION:
        raise RuntimeError(f"not a reply: {_decode_any(payload)}")
    return 12 + _HEADER.unpack_from(payload, 4)[0]


def check_enqueued(payload: bytes, batch: int) -> int:
    """`batch` when the reply is a success with `batch` descriptors; raises otherwise."""
    pos = _result_offset(payload)
    try:
        fields = _ENQUEUE_SUCCESS.unpack_from(payload, pos)
    except struct.error:
        fields = ()
    if fields != (12, 0, 15, 1, 11, batch):
        raise RuntimeError(f"enqueue failed: {_decode_any(payload, 'enqueueJobs')}")
    return batch


def decode_result(payload: bytes, name: str) -> Any:
    """The decoded `*_result` struct of a reply; raises on an exception reply or field."""
    _result_offset(payload)
    buf = TCyMemoryBuffer(payload)
    proto = TCyBinaryProtocol(buf, strict_read=True)
    proto.read_message_begin()
    result = getattr(PinLater, name + "_result")()
    result.read(proto)
    for key, value in result.__dict__.items():
        if key != "success" and value is not None:
            raise RuntimeError(f"{name} failed: {value!r}")
    return result


def _decode_any(payload: bytes, name: str | None = None) -> str:
    try:
        if name is not None:
            return repr(decode_result(payload, name))
        return repr(payload[:200])
    except Exception as exc:  # noqa: BLE001 - only describing a failure
        return str(exc)


def _enqueue_step(conn: Connection, queue: str, body: bytes, batch: int):
    frame = enqueue_frame(queue, body, batch)
    return lambda: check_enqueued(conn.call(frame), batch)


def _dequeue_step(conn: Connection, queue: str, body: bytes, batch: int):
    frame = dequeue_frame(queue, batch)

    def step() -> int:
        response = decode_result(conn.call(frame), "dequeueJobs").success
        if not response.jobs:
            return 0
        decode_result(conn.call(ack_frame(queue, response)), "ackDequeuedJobs")
        return len(response.jobs)

    return step


STEPS = {"enqueue": _enqueue_step, "dequeue": _dequeue_step}


def run(
    address: str, mode: str, queue: str, calls: int, batch: int, body: bytes, clients: int
) -> tuple[list[float], int, float]:
    """`calls` requests of `mode` from `clients` threads: (latencies, jobs, elapsed seconds)."""
    shares = [calls // clients + (i < calls % clients) for i in range(clients)]
    conns = [Connection(address) for _ in range(clients)]
    steps = [STEPS[mode](conn, queue, body, batch) for conn in conns]
    results: list[tuple[list[float], int]] = [([], 0)] * clients
    errors: list[BaseException] = []

    def work(i: int) -> None:
        latencies, jobs, step, clock = [], 0, steps[i], time.perf_counter
        try:
            for _ in range(shares[i]):
                started = clock()
                jobs += step()
                latencies.append(clock() - started)
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)
        results[i] = (latencies, jobs)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    if errors:
        raise errors[0]
    return [x for r in results for x in r[0]], sum(r[1] for r in results), elapsed
