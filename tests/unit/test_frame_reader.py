"""FrameReader's socket timeouts: the idle wait, the whole-frame deadline, and no settimeout
syscall for a request that arrives in one piece; a started frame kept across calls (the pool
thread's hold, the selector's non-blocking reads) and never preallocated from its header."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from pinlater.server.transport import (
    FrameError,
    FrameIncomplete,
    FrameReader,
    FrameTimeout,
    PeerClosed,
    frame,
    set_timeout,
)


class CountingSocket:
    """A socket that counts settimeout calls (each one is a syscall)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.settimeouts: list[float | None] = []

    def settimeout(self, value):
        self.settimeouts.append(value)
        self.sock.settimeout(value)

    def __getattr__(self, name):
        return getattr(self.sock, name)


@pytest.fixture
def pair():
    client, server = socket.socketpair()
    yield client, server
    client.close()
    server.close()


def test_set_timeout_leaves_the_socket_as_settimeout_would(pair):
    _, server = pair
    counting = CountingSocket(server)
    for value in (None, 0.3, 0.3, 10.0, 10.0, 0.0, None, None):
        set_timeout(counting, value)
        assert server.gettimeout() == value
    assert counting.settimeouts == [0.3, 10.0, 0.0, None]


def test_requests_arriving_whole_change_no_timeout_after_the_first(pair):
    client, server = pair
    counting = CountingSocket(server)
    reader = FrameReader(counting, 1 << 20)
    for i in range(5):
        client.sendall(frame(b"request %d" % i))
        assert reader.read_frame(300.0, 10.0) == b"request %d" % i
        set_timeout(counting, 10.0)  # what the server does before sending the reply
        counting.sendall(frame(b"reply"))
        assert client.recv(100) == frame(b"reply")
    assert counting.settimeouts == [10.0]


def test_idle_timeout_longer_than_the_frame_timeout_still_waits_it_out(pair):
    client, server = pair
    reader = FrameReader(server, 1 << 20)
    late = threading.Timer(0.35, lambda: client.sendall(frame(b"late but not idle")))
    late.start()
    try:
        assert reader.read_frame(1.5, 0.1) == b"late but not idle"
    finally:
        late.join()
    started = time.monotonic()
    assert reader.read_frame(0.5, 0.1) is None
    assert 0.45 <= time.monotonic() - started < 1.5


def test_idle_timeout_shorter_than_the_frame_timeout(pair):
    _, server = pair
    started = time.monotonic()
    assert FrameReader(server, 1 << 20).read_frame(0.2, 10.0) is None
    assert 0.15 <= time.monotonic() - started < 1.5


def test_a_frame_started_after_a_long_idle_wait_still_has_one_frame_deadline(pair):
    client, server = pair
    reader = FrameReader(server, 1 << 20)
    dribble = threading.Timer(0.3, lambda: client.sendall(struct.pack("!i", 100) + b"x"))
    dribble.start()
    started = time.monotonic()
    try:
        with pytest.raises(FrameTimeout):
            reader.read_frame(5.0, 0.2)
    finally:
        dribble.join()
    assert 0.45 <= time.monotonic() - started < 1.5


def test_shutdown_of_an_idle_socket_ends_the_wait_at_once(pair):
    _, server = pair
    reader = FrameReader(server, 1 << 20)
    threading.Timer(0.2, lambda: server.shutdown(socket.SHUT_RDWR)).start()
    started = time.monotonic()
    assert reader.read_frame(30.0, 5.0) is None
    assert time.monotonic() - started < 2.0


class ScriptedSocket:
    """Hands out fixed recv chunks, then end of stream."""

    def __init__(self, chunks):
        self.chunks = list(chunks)
        self.timeout = None

    def gettimeout(self):
        return self.timeout

    def settimeout(self, value):
        self.timeout = value

    def recv(self, n):
        return self.chunks.pop(0) if self.chunks else b""

    def recv_into(self, view):
        data = self.recv(len(view))
        view[: len(data)] = data
        return len(data)


def _read_all(chunks, whole_frame_fast_path):
    starts = []
    reader = FrameReader(ScriptedSocket(chunks), 64, lambda: starts.append(1))
    if not whole_frame_fast_path:
        reader._whole_frame = lambda chunk: None
    out = []
    try:
        while (payload := reader.read_frame(5.0, 5.0)) is not None:
            out.append(payload)
    except Exception as exc:  # noqa: BLE001 - the outcome is compared, whatever it is
        out.append(type(exc))
    return out, len(starts)


@pytest.mark.parametrize(
    "chunks",
    [
        [frame(b"one")],
        [frame(b"one"), frame(b"two")],
        [frame(b"one") + frame(b"two")],  # pipelined in one recv
        [frame(b"x" * 64)],  # exactly the cap
        [frame(b"x" * 65)],  # one over the cap
        [struct.pack("!i", 0)],
        [struct.pack("!i", -5) + b"abc"],
        [b"\x00\x00"],  # a header cut short
        [b"\x00\x00", b"\x00\x03ab", b"c"],  # header and payload in pieces
        [frame(b"abc")[:-1]],  # peer closes one byte short
        [frame(b"abc") + b"\x00"],  # a frame plus the start of the next
        [b"GET / HTTP/1.1\r\n\r\n"],
    ],
)
def test_whole_frame_fast_path_reads_exactly_what_the_general_path_reads(chunks):
    assert _read_all(chunks, True) == _read_all(chunks, False)


# ---- a frame kept across calls: the pool thread's hold, the selector's non-blocking reads ----


def test_a_frame_not_complete_after_the_hold_is_kept_and_finished_later(pair):
    client, server = pair
    reader = FrameReader(server, 1 << 20)
    client.sendall(frame(b"0123456789")[:7])
    started = time.monotonic()
    with pytest.raises(FrameIncomplete):
        reader.read_frame(5.0, 5.0, hold=0.2)
    assert 0.15 <= time.monotonic() - started < 1.5
    assert reader.in_frame and not reader.has_frame
    deadline = reader.frame_deadline
    assert deadline is not None and deadline > time.monotonic() + 4
    client.sendall(frame(b"0123456789")[7:])
    assert reader.read_frame(5.0, 5.0, hold=0.2) == b"0123456789"
    assert not reader.in_frame and reader.frame_deadline is None


def test_the_hold_never_stretches_the_frame_deadline(pair):
    client, server = pair
    reader = FrameReader(server, 1 << 20)
    client.sendall(frame(b"abc")[:5])
    with pytest.raises(FrameTimeout):
        reader.read_frame(5.0, 0.2, hold=3.0)


def test_read_available_assembles_frames_without_waiting(pair):
    client, server = pair
    server.setblocking(False)
    reader = FrameReader(server, 1 << 20)
    assert reader.read_available(5.0) is False  # nothing yet: returns at once
    assert not reader.in_frame and reader.frame_deadline is None
    payload = b"x" * 300_000  # longer than one recv
    client.sendall(frame(payload)[:1000])
    assert reader.read_available(5.0) is False
    assert reader.in_frame and reader.frame_deadline is not None
    sender = threading.Thread(target=client.sendall, args=(frame(payload)[1000:] + frame(b"next"),))
    sender.start()
    deadline = time.monotonic() + 5
    while not reader.read_available(5.0):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    sender.join(5)
    assert reader.has_frame
    assert reader.take_buffered() == payload
    server.settimeout(1.0)
    assert reader.read_frame(1.0, 1.0) == b"next"


def test_read_available_reports_a_clean_close_and_a_close_inside_a_frame(pair):
    client, server = pair
    server.setblocking(False)
    reader = FrameReader(server, 1 << 20)
    client.sendall(frame(b"whole"))
    client.shutdown(socket.SHUT_WR)
    time.sleep(0.05)
    assert reader.read_available(5.0) is True
    assert reader.take_buffered() == b"whole"
    assert reader.read_available(5.0) is False and reader.closed
    other_client, other_server = socket.socketpair()
    with other_client, other_server:
        other_server.setblocking(False)
        half = FrameReader(other_server, 1 << 20)
        other_client.sendall(frame(b"cut short")[:6])
        other_client.shutdown(socket.SHUT_WR)
        time.sleep(0.05)
        with pytest.raises(PeerClosed):
            half.read_available(5.0)


def test_a_header_claiming_a_huge_frame_costs_only_the_bytes_that_arrived(pair):
    client, server = pair
    server.setblocking(False)
    reader = FrameReader(server, 1 << 30)
    client.sendall(struct.pack("!i", (1 << 30) - 1) + b"abc")
    time.sleep(0.05)
    assert reader.read_available(5.0) is False
    held = sum(len(c) for c in reader._chunks or []) + len(reader._pending)
    assert held == 3


def test_read_available_checks_the_length_before_anything_else(pair):
    client, server = pair
    server.setblocking(False)
    reader = FrameReader(server, 64)
    client.sendall(struct.pack("!i", 65))
    time.sleep(0.05)
    with pytest.raises(FrameError):
        reader.read_available(5.0)
