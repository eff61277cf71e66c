"""Sending one hostile input to a server and judging the outcome, for the fuzz tests."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from thriftpy2.thrift import TApplicationException, TMessageType

from tests.support.server_process import decode_reply


@dataclass
class Outcome:
    """What came back: the reply frames read and whether the server closed the connection,
    within `seconds` of the last byte sent."""

    replies: list[bytes] = field(default_factory=list)
    closed: bool = False
    seconds: float = 0.0

    def decoded(self) -> list[tuple]:
        return [decode_reply(r) for r in self.replies]


def exchange(
    host: str, port: int, data: bytes, deadline: float, *, half_close: bool = True
) -> Outcome:
    """Send `data` on a fresh connection, optionally half-close (so a server waiting for the
    rest of a frame sees EOF), then read reply frames until the server closes or `deadline`
    seconds pass."""
    outcome = Outcome()
    with socket.create_connection((host, port), timeout=deadline) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server already closed on an early byte
            outcome.closed = True
            return outcome
        started = time.monotonic()
        buffer = b""
        while True:
            remaining = deadline - (time.monotonic() - started)
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                outcome.closed = True
                break
            except TimeoutError:
                break
            if not chunk:
                outcome.closed = True
                break
            buffer += chunk
            while len(buffer) >= 4:
                (size,) = struct.unpack_from("!i", buffer)
                if len(buffer) < 4 + size:
                    break
                outcome.replies.append(buffer[4 : 4 + size])
                buffer = buffer[4 + size :]
            if outcome.replies and not half_close:
                break
        outcome.seconds = time.monotonic() - started
    return outcome


def internal_errors(outcome: Outcome, result_classes: dict | None = None) -> list[str]:
    """Replies that are INTERNAL_ERROR application exceptions or PinLaterExceptions saying
    "internal error" (a Python traceback behind them)."""
    bad = []
    for payload in outcome.replies:
        try:
            name, msg_type, _, body = decode_reply(payload)
        except Exception as exc:  # noqa: BLE001 - an undecodable reply is a finding too
            bad.append(f"undecodable reply {payload[:40]!r}: {exc}")
            continue
        if msg_type == TMessageType.EXCEPTION:
            if body.type == TApplicationException.INTERNAL_ERROR:
                bad.append(f"{name}: INTERNAL_ERROR {body.message}")
        elif b"internal error" in payload:
            bad.append(f"{name}: {payload!r}")
    return bad


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
