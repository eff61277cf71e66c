"""Thrift framed transport + strict binary protocol, done by hand on a plain socket.

Two pieces, both free of threads and server state so they are easy to test:

- `FrameReader` reads one length-prefixed frame at a time. The 4-byte big-endian length is
  checked (1..max_frame_bytes) BEFORE anything is allocated, the first byte of a frame is awaited
  under the idle timeout, and the rest of the frame must arrive within one frame deadline (the
  slowloris bound). A bad length raises `FrameError`; the caller closes that connection only.
  Socket timeouts are changed only when they differ (`set_timeout`: each change is a syscall):
  the idle wait runs in steps of the frame timeout, which the server also sends under, so a
  request that arrives in one piece changes no timeout at all.
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
import struct
import time
from collections.abc import Callable
from typing import Any

from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType, TType
from thriftpy2.transport import TCyBufferedTransport, TCyMemoryBuffer

from pinlater.server.wirecheck import WireError, WireLimits, check_args

log = logging.getLogger("pinlater.transport")

_HEADER = struct.Struct("!i")
_RECV_CHUNK = 65536
#: the smallest read buffer thriftpy2's buffered transport accepts
_MIN_DECODE_BUFFER = 4096


class FrameError(Exception):
    """The peer sent something that is not a valid frame; close its connection."""


class PeerClosed(Exception):
    """The peer closed the connection in the middle of a frame."""


class FrameTimeout(Exception):
    """A started frame did not arrive completely within the frame deadline."""


class FrameReader:
    """Reads length-prefixed frames from a connected socket.

    `on_frame_start` is called when the first byte of a frame has arrived (the connection stops
    being idle); the server uses it to tell idle connections from ones with a request in flight.
    """

    def __init__(
        self,
        sock: socket.socket,
        max_frame_bytes: int,
        on_frame_start: Callable[[], None] | None = None,
    ):
        self._sock = sock
        self._max = max_frame_bytes
        self._pending = bytearray()
        self._on_frame_start = on_frame_start

    def read_frame(self, idle_timeout: float, frame_timeout: float) -> bytes | None:
        """The next frame's payload; None on a clean close or idle timeout between frames.

        Raises FrameError (bad length), FrameTimeout, PeerClosed or OSError.
        """
        if not self._pending:
            chunk = self._wait_first_bytes(idle_timeout, frame_timeout)
            if not chunk:
                return None
            payload = self._whole_frame(chunk)
            if payload is not None:  # the usual request: one recv, exactly one frame
                if self._on_frame_start is not None:
                    self._on_frame_start()
                return payload
            self._pending += chunk
        if self._on_frame_start is not None:
            self._on_frame_start()
        deadline = time.monotonic() + frame_timeout
        while len(self._pending) < 4:
            self._recv_more(deadline)
        (size,) = _HEADER.unpack_from(self._pending)
        if size <= 0 or size > self._max:
            raise FrameError(describe_bad_length(size, bytes(self._pending[:4]), self._max))
        end = 4 + size
        if len(self._pending) >= end:
            frame = bytes(self._pending[4:end])
            del self._pending[:end]
            return frame
        return self._read_rest(size, deadline)

    def _whole_frame(self, chunk: bytes) -> bytes | None:
        """The payload when `chunk` is exactly one frame of a valid length, else None (the
        general path then checks the length and reads the rest)."""
        if len(chunk) < 4:
            return None
        (size,) = _HEADER.unpack_from(chunk)
        if 0 < size <= self._max and len(chunk) == 4 + size:
            return chunk[4:]
        return None

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
        return chunk

    def _recv_more(self, deadline: float) -> None:
        self._set_deadline(deadline)
        chunk = self._recv(self._sock.recv, _RECV_CHUNK)
        self._pending += chunk

    def _read_rest(self, size: int, deadline: float) -> bytes:
        """Allocate exactly `size` bytes (already checked against the cap) and fill them."""
        frame = bytearray(size)
        have = len(self._pending) - 4
        frame[:have] = self._pending[4:]
        self._pending.clear()
        view = memoryview(frame)
        while have < size:
            self._set_deadline(deadline)
            have += self._recv(self._sock.recv_into, view[have:])
        return bytes(frame)

    def _set_deadline(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FrameTimeout("frame not complete within the frame read timeout")
        set_timeout(self._sock, remaining)

    @staticmethod
    def _recv(fn: Callable[[Any], Any], arg: Any) -> Any:
        try:
            got = fn(arg)
        except TimeoutError:
            raise FrameTimeout("frame not complete within the frame read timeout") from None
        if not got:
            raise PeerClosed("peer closed the connection inside a frame")
        return got


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
    """

    def __init__(
        self,
        service: Any,
        handler: Any,
        *,
        wire_limits: WireLimits | None = None,
        on_reject: Callable[[str, str], None] | None = None,
    ):
        self._service = service
        self._handler = handler
        #: method name -> (args class, result class, argument names in IDL order), looked up
        #: once instead of per request
        self._methods = {name: _method_classes(service, name) for name in service.thrift_services}
        self._wire_limits = wire_limits or WireLimits()
        self._on_reject = on_reject

    def dispatch(self, payload: bytes) -> tuple[str, bytes]:
        """(method name, reply payload without frame header). Raises MalformedRequest when the
        message header cannot be read (the frame boundary is fine but the content is not
        Thrift)."""
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
        return name, self._call(name, seqid, args, result_cls(), arg_names)

    def _call(
        self, name: str, seqid: int, args: Any, result: Any, arg_names: tuple[str, ...]
    ) -> bytes:
        values = args.__dict__
        try:
            result.success = getattr(self._handler, name)(*[values[n] for n in arg_names])
        except TApplicationException as exc:
            return encode_exception(name, seqid, exc)
        except Exception as exc:
            if not _store_declared(exc, result):
                log.exception("handler %s raised an undeclared exception", name)
                return _internal_error(name, seqid, f"{type(exc).__name__} in {name}")
        try:
            return encode_reply(name, seqid, result)
        except Exception:
            log.exception("cannot encode the reply of %s", name)
            return _internal_error(name, seqid, f"cannot encode the reply of {name}")


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
