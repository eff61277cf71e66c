"""FrameReader's socket timeouts: the idle wait, the whole-frame deadline, and no settimeout
syscall for a request that arrives in one piece."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from pinlater.transport import FrameReader, FrameTimeout, frame, set_timeout


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
