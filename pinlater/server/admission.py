"""Admission control: an overloaded server answers at once instead of queueing without bound.

Two server-wide caps, checked by the network loop as soon as a request frame has been read
(before it waits for a worker thread), from the method name in the message header alone:

- dequeueJobs calls in flight: at most `admission.max_concurrent_dequeues`, kept below
  `server.worker_threads`, so however many dequeues arrive, the other requests (enqueue, ack,
  checkpoint ...) always find a worker: a dequeue storm cannot block submissions. Refused with
  DEQUEUE_RATE_LIMITED (workers already back off on it, and it tells them to come back later).
- every other request in flight: at most `admission.max_concurrent_requests`. Refused with
  UNKNOWN and the message "Server busy: ...". Dequeues have their own budget, so they never
  use up this one.

Refusals are domain errors (`pinlater.errors`) translated to the wire by the handler's one
boundary (`pinlater.handler.boundary.wire_error`), written as the method's normal reply.

A third cap is per queue (`pinlater.ops.queue_slots`, taken by the request observer after the
queue name is validated), so one hot queue cannot take every dequeue slot.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any

from pinlater.errors import DequeueRateLimited, PinLaterError, ServerBusy
from pinlater.handler.boundary import wire_error
from pinlater.server.transport import encode_reply

DEQUEUE = "dequeueJobs"
_HEADER = struct.Struct("!iI")
#: name length + name of a dequeueJobs header (after the 4-byte version)
_DEQUEUE_NAME = struct.pack("!I", len(DEQUEUE)) + DEQUEUE.encode("ascii")
#: the shortest header naming dequeueJobs that `method_and_seqid` reads (seqid included)
_DEQUEUE_HEADER_BYTES = 4 + len(_DEQUEUE_NAME) + 4


def method_and_seqid(payload: bytes) -> tuple[str, int] | None:
    """(method, seqid) from a strict binary message header; None when unreadable."""
    try:
        _, length = _HEADER.unpack_from(payload, 0)
        if length > 256:
            return None
        name = payload[8 : 8 + length].decode("ascii")
        (seqid,) = struct.unpack_from("!i", payload, 8 + length)
    except (struct.error, UnicodeDecodeError):
        return None
    return name, seqid


def is_dequeue(payload: bytes) -> bool:
    """`method_and_seqid(payload)` names dequeueJobs, by comparing bytes: the common path
    needs only this, the header is parsed only for a refusal reply."""
    return (
        payload[4 : 4 + len(_DEQUEUE_NAME)] == _DEQUEUE_NAME
        and len(payload) >= _DEQUEUE_HEADER_BYTES
    )


ENQUEUE = "enqueueJobs"
_ENQUEUE_NAME = struct.pack("!I", len(ENQUEUE)) + ENQUEUE.encode("ascii")


def is_enqueue(payload: bytes) -> bool:
    """The message header names enqueueJobs (bytes compared, as `is_dequeue`)."""
    return payload[4 : 4 + len(_ENQUEUE_NAME)] == _ENQUEUE_NAME


class Admission:
    """Server-wide caps. `serve(payload, run)` runs `run()` (which waits for a worker and
    dispatches) or returns a refusal reply at once."""

    def __init__(
        self,
        max_requests: int,
        max_dequeues: int,
        service: Any,
        on_refused: Callable[[str], None] | None = None,
    ):
        self.max_requests = max_requests
        self.max_dequeues = max_dequeues
        self._service = service
        self._on_refused = on_refused or (lambda kind: None)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.in_flight_dequeues = 0
        #: the two refusals, built once (their messages depend only on the caps)
        self._too_many_dequeues = DequeueRateLimited(
            f"Too many concurrent dequeues on this server (cap {max_dequeues}); retry later"
        )
        self._busy = ServerBusy(f"Server busy: {max_requests} requests in flight; retry later")

    def serve(self, payload: bytes, run: Callable[[], bytes]) -> bytes:
        dequeue = is_dequeue(payload)
        refusal = self._enter(dequeue)
        if refusal is not None:
            header = method_and_seqid(payload)
            if header is not None and header[0] in self._service.thrift_services:
                self._on_refused("dequeues" if dequeue else "requests")
                return self._refusal_reply(header[0], header[1], refusal)
            with self._lock:  # unreadable header or unknown method: the dispatcher answers
                self.in_flight += 1
        try:
            return run()
        finally:
            with self._lock:
                self.in_flight -= 1
                if dequeue and refusal is None:
                    self.in_flight_dequeues -= 1

    def _enter(self, dequeue: bool) -> PinLaterError | None:
        with self._lock:
            if dequeue:
                if self.in_flight_dequeues >= self.max_dequeues:
                    return self._too_many_dequeues
                self.in_flight_dequeues += 1
            elif self.in_flight - self.in_flight_dequeues >= self.max_requests:
                return self._busy
            self.in_flight += 1
            return None

    def _refusal_reply(self, name: str, seqid: int, error: PinLaterError) -> bytes:
        """The method's reply carrying `error` in its declared `e` field, translated by the one
        error boundary (`wire_error`)."""
        result = getattr(self._service, name + "_result")()
        result.e = wire_error(error)
        return encode_reply(name, seqid, result)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"in_flight": self.in_flight, "in_flight_dequeues": self.in_flight_dequeues}
