"""Thrift framed transport + strict binary protocol, done by hand on a plain socket.

Two pieces, both free of threads and server state so they are easy to test:

- `FrameReader` reads one length-prefixed frame at a time. The 4-byte big-endian length is
  checked (1..max_frame_bytes) BEFORE anything is allocated, and a frame's payload is kept as the
  pieces that arrived (never preallocated from the header: a 4-byte header claiming 16 MiB costs
  4 bytes, not 16 MiB). The first byte of a frame is awaited under the idle timeout, and the rest
  must arrive within one frame deadline (the slowloris bound). A bad length raises `FrameError`;
  the caller closes that connection only. The reader keeps a started frame across calls, so a
  pool thread can give up on a slow frame after a short `hold` (`FrameIncomplete`) and the
  server's selector thread can finish it with `read_available` (non-blocking).
  Socket timeouts are changed only when they differ (`set_timeout`: each change is a syscall):
  the idle wait runs in steps of the frame timeout, so a request that arrives in one piece
  changes no timeout at all.
- `Dispatcher` turns one request frame into one reply frame: it decodes with thriftpy2's Cython
  binary protocol from memory, calls the handler method named in the message, and encodes the
  reply into memory. Because each request is decoded from and encoded into its own buffer, a
  half-written reply is simply thrown away and replaced by an exception reply.

Why not thriftpy2's TCyMemoryBuffer for decoding: reading past its end silently yields short
data (a string length of 2**31-1 in a 30-byte frame would make the decoder build a 2 GiB
string). We feed the frame through TCyBufferedTransport over a source that reports end of data,
so a length field pointing past the frame raises instead.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType, TType
from thriftpy2.transport import TCyBufferedTransport, TCyMemoryBuffer

from pinlater.common import heap
from pinlater.handler import context as handler_context
from pinlater.handler.longpoll import Deferred
from pinlater.server.wirecheck import WireError, WireLimits, check_args

log = logging.getLogger("pinlater.transport")

_HEADER = struct.Struct("!i")
_RECV_CHUNK = 65536
#: the largest recv of a long frame's payload (recv allocates its whole size up front)
_PAYLOAD_CHUNK = 256 * 1024
#: the smallest read buffer thriftpy2's buffered transport accepts
_MIN_DECODE_BUFFER = 4096
#: a non-blocking socket has nothing to read (plain or TLS) or TLS must write first
WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class FrameError(Exception):
    """The peer sent something that is not a valid frame; close its connection."""


class PeerClosed(Exception):
    """The peer closed the connection in the middle of a frame."""


class FrameTimeout(Exception):
    """A started frame did not arrive completely within the frame deadline."""


class FrameIncomplete(Exception):
    """A started frame is not complete after the caller's `hold` (its frame deadline has not
    passed). The bytes so far stay in the reader; reading can resume later."""


class FrameReader:
    """Reads length-prefixed frames from a connected socket.

    `on_frame_start` is called when the first byte of a frame has arrived (the connection stops
    being idle); the server uses it to tell idle connections from ones with a request in flight.
    `closed` becomes True when the peer closed the connection between frames.
    """

    def __init__(
        self,
        sock: socket.socket,
        max_frame_bytes: int,
        on_frame_start: Callable[[], None] | None = None,
    ):
        self._sock = sock
        self._max = max_frame_bytes
        #: bytes after the last frame handed out: a header, or whole frames, or a frame's start
        self._pending = bytearray()
        #: the payload pieces of a frame longer than what `_pending` held; None between frames
        self._chunks: list[bytes] | None = None
        #: payload bytes that frame still misses
        self._need = 0
        #: a complete frame that `read_available` assembled, handed out by `read_frame`
        self._ready: bytes | None = None
        #: when the started frame must be complete (monotonic); None when no frame is started
        self.frame_deadline: float | None = None
        self.closed = False
        self._on_frame_start = on_frame_start

    @property
    def in_frame(self) -> bool:
        """Some bytes of a frame that is not complete yet have arrived."""
        return bool(self._pending) or self._chunks is not None

    @property
    def has_frame(self) -> bool:
        """A complete frame is buffered (`read_frame` returns it without any I/O)."""
        return self._ready is not None

    def start_deadline(self, frame_timeout: float) -> float:
        """The started frame's deadline, set now if it has none yet."""
        if self.frame_deadline is None:
            self.frame_deadline = time.monotonic() + frame_timeout
        return self.frame_deadline

    def read_frame(
        self, idle_timeout: float, frame_timeout: float, hold: float | None = None
    ) -> bytes | None:
        """The next frame's payload; None on a clean close (then `closed` is set) or when no
        frame started within `idle_timeout`.

        With `hold`, a started frame is awaited at most that long in this call (FrameIncomplete
        after it, the frame kept). Raises FrameError (bad length), FrameTimeout, PeerClosed,
        FrameIncomplete or OSError.
        """
        if self._ready is None and not self._pending and self._chunks is None:
            chunk = self._wait_first_bytes(idle_timeout, frame_timeout)
            if not chunk:
                return None
            payload = self._whole_frame(chunk)
            if payload is not None:  # the usual request: one recv, exactly one frame
                if self._on_frame_start is not None:
                    self._on_frame_start()
                return payload
            self._pending += chunk
        else:
            frame = self.take_buffered()
            if frame is not None:
                return frame
        if self._on_frame_start is not None:
            self._on_frame_start()
        deadline = self.start_deadline(frame_timeout)
        limit = deadline if hold is None else min(deadline, time.monotonic() + hold)
        while True:
            frame = self._advance()
            if frame is not None:
                return frame
            self._recv_more(limit, deadline)

    def take_buffered(self) -> bytes | None:
        """A complete frame that is already buffered (pipelined behind the last one, or
        assembled by `read_available`), without any I/O; None when there is none."""
        frame = self._ready
        if frame is not None:
            self._ready = None
        elif self._pending or self._chunks is not None:
            frame = self._advance()
            if frame is None:
                return None
        else:
            return None
        if self._on_frame_start is not None:
            self._on_frame_start()
        return frame

    def read_available(self, frame_timeout: float) -> bool:
        """Read what has arrived on a NON-BLOCKING socket, without waiting; True once a
        complete frame is buffered (`read_frame` hands it out). A frame started here gets its
        deadline now. At a clean close between frames `closed` is set; raises PeerClosed (close
        inside a frame), FrameError or OSError."""
        while self._ready is None:
            frame = self._advance()
            if frame is not None:
                self._ready = frame
                break
            try:
                chunk = self._sock.recv(self._chunk_size())
            except WOULD_BLOCK:
                return False
            if not chunk:
                if self.in_frame:
                    raise PeerClosed("peer closed the connection inside a frame")
                self.closed = True
                return False
            self.start_deadline(frame_timeout)
            self._append(chunk)
        return True

    def _whole_frame(self, chunk: bytes) -> bytes | None:
        """The payload when `chunk` is exactly one frame of a valid length, else None (the
        general path then checks the length and reads the rest)."""
        if len(chunk) < 4:
            return None
        (size,) = _HEADER.unpack_from(chunk)
        if 0 < size <= self._max and len(chunk) == 4 + size:
            return chunk[4:]
        return None

    def _advance(self) -> bytes | None:
        """The next frame if the bytes buffered complete it; checks a header as soon as it is
        whole. A frame longer than what arrived moves from `_pending` to `_chunks`."""
        if self._chunks is not None:
            if self._need:
                return None
            frame = b"".join(self._chunks)
            self._chunks = None
            self.frame_deadline = None
            return frame
        pending = self._pending
        if len(pending) < 4:
            return None
        (size,) = _HEADER.unpack_from(pending)
        if size <= 0 or size > self._max:
            raise FrameError(describe_bad_length(size, bytes(pending[:4]), self._max))
        end = 4 + size
        if len(pending) >= end:
            frame = bytes(pending[4:end])
            del pending[:end]
            self.frame_deadline = None
            return frame
        self._chunks = [bytes(pending[4:])]
        self._need = end - len(pending)
        pending.clear()
        return None

    def _chunk_size(self) -> int:
        return min(self._need, _PAYLOAD_CHUNK) if self._chunks is not None else _RECV_CHUNK

    def _append(self, chunk: bytes) -> None:
        if self._chunks is not None:
            self._chunks.append(chunk)
            self._need -= len(chunk)
        else:
            self._pending += chunk

    def _wait_first_bytes(self, idle_timeout: float, step: float) -> bytes:
        """The first bytes to arrive within `idle_timeout` (b"" on idle timeout or close),
        waiting in steps of at most `step` (the frame timeout): the socket usually has that
        timeout already, so no settimeout between requests."""
        deadline = time.monotonic() + idle_timeout
        wait = min(step, idle_timeout)
        while True:
            set_timeout(self._sock, wait)
            try:
                chunk = self._sock.recv(_RECV_CHUNK)
                break
            except TimeoutError:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return b""
        if not chunk:
            self.closed = True
        return chunk

    def _recv_more(self, limit: float, deadline: float) -> None:
        """One recv of the started frame, waiting until `limit` at most: FrameTimeout when
        `limit` is the frame deadline, FrameIncomplete when it is the caller's hold."""
        remaining = limit - time.monotonic()
        if remaining <= 0:
            raise self._timeout(limit, deadline)
        set_timeout(self._sock, remaining)
        try:
            chunk = self._sock.recv(self._chunk_size())
        except TimeoutError:
            raise self._timeout(limit, deadline) from None
        if not chunk:
            raise PeerClosed("peer closed the connection inside a frame")
        self._append(chunk)

    @staticmethod
    def _timeout(limit: float, deadline: float) -> Exception:
        if limit < deadline:
            return FrameIncomplete("frame not complete yet")
        return FrameTimeout("frame not complete within the frame read timeout")


def set_timeout(sock: socket.socket, seconds: float | None) -> None:
    """`sock.settimeout(seconds)` unless it already has that timeout (gettimeout is free,
    settimeout a syscall)."""
    if sock.gettimeout() != seconds:
        sock.settimeout(seconds)


def describe_bad_length(size: int, header: bytes, max_frame_bytes: int) -> str:
    """A log-friendly reason, with a hint for the usual mistakes (HTTP, unframed Thrift)."""
    if header[:2] == b"\x80\x01":
        return (
            "unframed TBinaryProtocol message (PinLater needs TFramedTransport): "
            f"length field {size}"
        )
    if header.isalpha() or header[:4] in (b"GET ", b"POST", b"PUT ", b"HEAD"):
        return f"not Thrift (starts with {header!r}, HTTP?)"
    if size <= 0:
        return f"invalid frame length {size}"
    return f"frame length {size} exceeds max_frame_bytes {max_frame_bytes}"


def frame(payload: bytes) -> bytes:
    """Length-prefix a payload."""
    return _HEADER.pack(len(payload)) + payload


# ---- one request, one reply ----


class MalformedRequest(Exception):
    """The frame does not hold a readable Thrift message header; close the connection."""


class _FrameSource:
    """The `trans` under TCyBufferedTransport: hands out the frame once, then end of data."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes):
        self._data = data

    def read(self, n: int) -> bytes:
        data = self._data
        if len(data) <= n:
            self._data = b""
            return data
        self._data = data[n:]
        return data[:n]


def _decoder(payload: bytes) -> TCyBinaryProtocol:
    trans = TCyBufferedTransport(
        _FrameSource(payload), buf_size=max(_MIN_DECODE_BUFFER, len(payload))
    )
    return TCyBinaryProtocol(trans, strict_read=True, strict_write=True, strict_decode=True)


def _encoder() -> tuple[TCyBinaryProtocol, TCyMemoryBuffer]:
    buf = TCyMemoryBuffer()
    return TCyBinaryProtocol(buf, strict_read=True, strict_write=True), buf


class Dispatcher:
    """Decodes a request, calls `handler`, encodes the reply. Thread-safe (no shared state).

    `service` is the thriftpy2 service (pinlater.idl.PinLater). The handler may raise only the
    exceptions its IDL method declares; anything else is logged and answered with a
    TApplicationException INTERNAL_ERROR, so the client never sees its connection drop.

    Arguments that fail the wire check (pinlater.server.wirecheck, with `wire_limits`) or that
    thriftpy2 cannot decode are answered with PROTOCOL_ERROR naming the field; the frame boundary
    is intact, so the connection stays usable. `on_reject(reason, detail)` is told about each.

    A reply over `max_reply_bytes` (the handler sizes replies to fit a frame, so this is the
    last line of defence) is replaced by an INTERNAL_ERROR naming the cap; a large reply is
    followed by `heap.release_free_memory()`.
    """

    def __init__(
        self,
        service: Any,
        handler: Any,
        *,
        wire_limits: WireLimits | None = None,
        on_reject: Callable[[str, str], None] | None = None,
        max_reply_bytes: int | None = None,
    ):
        self._service = service
        self._max_reply = max_reply_bytes
        self._handler = handler
        #: method name -> (args class, result class, argument names in IDL order), looked up
        #: once instead of per request
        self._methods = {name: _method_classes(service, name) for name in service.thrift_services}
        self._wire_limits = wire_limits or WireLimits()
        self._on_reject = on_reject

    def dispatch(
        self,
        payload: bytes,
        reply_later: Callable[[bytes], None] | None = None,
        peer_alive: Callable[[], bool] | None = None,
    ) -> tuple[str, bytes | None]:
        """(method name, reply payload without frame header). Raises MalformedRequest when the
        message header cannot be read (the frame boundary is fine but the content is not
        Thrift). With `reply_later`, the handler may answer later (a parked long-poll
        dequeue returns a `Deferred`): the reply is then None here and `reply_later(payload)`
        is called with it, from whichever thread resolves it; without, it is waited for.
        `peer_alive()` tells a parked request whether its client is still there."""
        iprot = _decoder(payload)
        try:
            name, msg_type, seqid = iprot.read_message_begin()
        except Exception as exc:  # noqa: BLE001 - any decoder failure means "not a Thrift message"
            raise MalformedRequest(f"unreadable message header: {exc}") from None
        if msg_type not in (TMessageType.CALL, TMessageType.ONEWAY):
            raise MalformedRequest(f"message type {msg_type} is not a call")
        method = self._methods.get(name)
        if method is None:
            return name, encode_exception(
                name,
                seqid,
                TApplicationException(
                    TApplicationException.UNKNOWN_METHOD, f"Unknown method {name!r}"
                ),
            )
        args_cls, result_cls, arg_names = method
        args = args_cls()
        try:
            check_args(payload, _args_offset(payload), args_cls, self._wire_limits)
            args.read(iprot)
        except Exception as exc:  # noqa: BLE001 - the frame is intact, so answer and go on
            reason = exc.reason if isinstance(exc, WireError) else "decode_error"
            detail = f"cannot decode {name} arguments: {exc}"
            if self._on_reject is not None:
                self._on_reject(reason, detail)
            return name, encode_exception(
                name, seqid, TApplicationException(TApplicationException.PROTOCOL_ERROR, detail)
            )
        handler_context.allow_deferred(reply_later is not None, peer_alive)
        try:
            reply = self._call(name, seqid, args, result_cls(), arg_names, reply_later)
        finally:
            handler_context.allow_deferred(False)
        return name, None if reply is None else self._bounded(name, seqid, reply)

    def _bounded(self, name: str, seqid: int, reply: bytes) -> bytes:
        if len(reply) >= heap.TRIM_AFTER_BYTES:
            heap.release_free_memory()  # what building the reply left in the arenas
        if self._max_reply is None or len(reply) <= self._max_reply:
            return reply
        log.error("the reply of %s (%d bytes) is over max_frame_bytes", name, len(reply))
        return _internal_error(
            name, seqid, f"the reply of {name} ({len(reply)} bytes) is over max_frame_bytes"
        )

    def _call(
        self,
        name: str,
        seqid: int,
        args: Any,
        result: Any,
        arg_names: tuple[str, ...],
        reply_later: Callable[[bytes], None] | None = None,
    ) -> bytes | None:
        values = args.__dict__
        try:
            value = getattr(self._handler, name)(*[values[n] for n in arg_names])
        except TApplicationException as exc:
            return encode_exception(name, seqid, exc)
        except Exception as exc:  # noqa: BLE001 - declared ones are answered, others logged
            return self._encode(name, seqid, result, error=exc)
        if isinstance(value, Deferred):
            deliver = reply_later if reply_later is not None else _unreachable

            def later(done: Any, error: BaseException | None) -> None:
                reply = self._encode(name, seqid, result, done, error)
                deliver(self._bounded(name, seqid, reply))

            value.add_callback(later)
            return None
        return self._encode(name, seqid, result, value)

    def _encode(
        self,
        name: str,
        seqid: int,
        result: Any,
        value: Any = None,
        error: BaseException | None = None,
    ) -> bytes:
        """The reply: `value` as the result, or `error` in the result field declaring it."""
        if isinstance(error, TApplicationException):
            return encode_exception(name, seqid, error)
        if error is not None:
            if not isinstance(error, Exception) or not _store_declared(error, result):
                log.error("handler %s raised an undeclared exception", name, exc_info=error)
                return _internal_error(name, seqid, f"{type(error).__name__} in {name}")
        else:
            result.success = value
        try:
            return encode_reply(name, seqid, result)
        except Exception:
            log.exception("cannot encode the reply of %s", name)
            return _internal_error(name, seqid, f"cannot encode the reply of {name}")


def _unreachable(reply: bytes) -> None:
    raise AssertionError("a Deferred reply without a reply_later")


def _method_classes(service: Any, name: str) -> tuple[Any, Any, tuple[str, ...]]:
    args_cls = getattr(service, name + "_args")
    return (
        args_cls,
        getattr(service, name + "_result"),
        tuple(spec[1] for spec in args_cls.thrift_spec.values()),
    )


def _args_offset(payload: bytes) -> int:
    """Where the arguments struct starts: after version (4), name length (4), name, seqid (4)."""
    return 12 + _HEADER.unpack_from(payload, 4)[0]


def _store_declared(exc: Exception, result: Any) -> bool:
    """Put `exc` into the result field that declares its type; False if none does."""
    for fid in sorted(result.thrift_spec):
        spec = result.thrift_spec[fid]
        if spec[1] != "success" and spec[0] == TType.STRUCT and isinstance(exc, spec[2]):
            setattr(result, spec[1], exc)
            return True
    return False


def encode_reply(name: str, seqid: int, result: Any) -> bytes:
    oprot, buf = _encoder()
    oprot.write_message_begin(name, TMessageType.REPLY, seqid)
    result.write(oprot)
    oprot.write_message_end()
    return buf.getvalue()


def encode_exception(name: str, seqid: int, exc: TApplicationException) -> bytes:
    oprot, buf = _encoder()
    oprot.write_message_begin(name, TMessageType.EXCEPTION, seqid)
    exc.write(oprot)
    oprot.write_message_end()
    return buf.getvalue()


def _internal_error(name: str, seqid: int, message: str) -> bytes:
    return encode_exception(
        name, seqid, TApplicationException(TApplicationException.INTERNAL_ERROR, message)
    )
