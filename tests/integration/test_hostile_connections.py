"""Hostile connections (issue 12, item 3): idle-socket floods, slowloris crowds, slow readers.

Black-box over real loopback sockets against the real network loop (pinlater.server.loop) in
front of the stand-in handler; 127.0.0.2, 127.0.0.3 ... are loopback addresses too, so a test
models several peers by binding its client sockets to them. Each flood test asserts only that a
normal client is served (within a generous bound) and that the limits were applied and counted;
`scripts/bench_hostile.py` prints the latency figures.
"""

from __future__ import annotations

import collections
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from thriftpy2.thrift import TMessageType

from pinlater.config import ServerConfig, TlsConfig
from pinlater.idl import PinLater, RequestContext
from pinlater.main import bind
from pinlater.server.loop import Rejections, Server, current_connection
from pinlater.server.transport import Dispatcher
from tests.integration.conftest import StubHandler
from tests.support.server_process import (
    RawFrameClient,
    ServerProcess,
    decode_reply,
    encode_call,
    free_port,
    recv_exact,
)

CTX = RequestContext(source="hostile-connections")
#: how long one call of the normal client may take while a flood runs (generous: shared CI)
SERVED_WITHIN = 2.0


class Counts(collections.Counter):
    """A thread-safe counter by reason, used as the Rejections callbacks."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def __call__(self, reason: str) -> None:
        with self._lock:
            self[reason] += 1


@contextmanager
def serve(dispatcher=None, **settings) -> Iterator[SimpleNamespace]:
    """The real network loop on 127.0.0.1:0 with ServerConfig(**settings), counting rejected
    frames and refused connections by reason."""
    handler = StubHandler()
    config = ServerConfig(**{"port": 0, "shutdown_grace_seconds": 5.0, **settings})
    refused, rejected = Counts(), Counts()
    server = Server(
        bind("127.0.0.1", 0),
        config,
        dispatcher or Dispatcher(PinLater, handler),
        rejections=Rejections(rejected, count_refused=refused),
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.address
    try:
        yield SimpleNamespace(
            server=server, host=host, port=port, handler=handler, refused=refused, rejected=rejected
        )
    finally:
        server.request_shutdown()
        thread.join(15)
        assert not thread.is_alive(), "server thread did not stop"


def create_queue_call(name: str, seqid: int = 1) -> bytes:
    return encode_call("createQueue", PinLater.createQueue_args(context=CTX, name=name), seqid)


def framed(payload: bytes) -> bytes:
    return struct.pack("!i", len(payload)) + payload


def half_frame() -> bytes:
    """The first bytes of a frame that claims 1000 bytes."""
    return struct.pack("!i", 1000) + create_queue_call("slow")[:6]


def connect_from(s, source: str, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection((s.host, s.port), timeout=timeout, source_address=(source, 0))


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        sock.settimeout(remaining)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def call_from(s, source: str, name: str) -> socket.socket:
    """A connection from `source` that has had one createQueue answered."""
    sock = connect_from(s, source)
    sock.sendall(framed(create_queue_call(name)))
    (size,) = struct.unpack("!i", recv_exact(sock, 4))
    assert decode_reply(recv_exact(sock, size))[1] == TMessageType.REPLY
    return sock


def assert_normal_client_served(s, calls: int = 10) -> float:
    """`calls` createQueue calls from 127.0.0.1, each on a new connection, each answered within
    SERVED_WITHIN seconds; returns the slowest."""
    worst = 0.0
    for i in range(calls):
        started = time.monotonic()
        with RawFrameClient(s.host, s.port, timeout=SERVED_WITHIN + 3) as raw:
            reply = decode_reply(raw.call(create_queue_call(f"normal_{i}")))
        assert reply[1] == TMessageType.REPLY
        worst = max(worst, time.monotonic() - started)
    assert worst < SERVED_WITHIN, f"a normal call took {worst:.2f}s"
    return worst


def _eventually(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def close_all(socks) -> None:
    for sock in socks:
        sock.close()


# ---- floods ----


def test_an_idle_socket_flood_from_one_peer_leaves_a_normal_client_served():
    with serve(max_connections_per_peer=50, connection_threads=8) as s:
        # more than the per-peer cap and than the old total cap (256): each idle
        flood = [connect_from(s, "127.0.0.2") for _ in range(300)]
        try:
            assert _eventually(lambda: s.refused["per_peer"] == 250)
            assert s.server.peer_connections("127.0.0.2") == 50
            assert_normal_client_served(s)
            stats = s.server.stats()
            assert stats["threads"] <= 8, stats
        finally:
            close_all(flood)


def test_idle_connections_cost_no_thread():
    with serve(connection_threads=4, thread_linger_seconds=0.05) as s:
        idle = [call_from(s, "127.0.0.2", f"idle_{i}") for i in range(100)]
        try:
            assert _eventually(lambda: s.server.stats()["idle"] == 100)
            assert s.server.stats()["threads"] <= 4
            assert_normal_client_served(s)
            for i, sock in enumerate(idle[:10]):  # parked connections still serve requests
                sock.sendall(framed(create_queue_call(f"again_{i}")))
                (size,) = struct.unpack("!i", recv_exact(sock, 4))
                assert decode_reply(recv_exact(sock, size))[1] == TMessageType.REPLY
        finally:
            close_all(idle)


def test_a_slowloris_crowd_leaves_a_normal_client_served():
    settings = {
        "connection_threads": 4,
        "max_slow_connections": 100,
        "max_slow_connections_per_peer": 30,
        "frame_read_timeout_seconds": 20,
    }
    with serve(**settings) as s:
        crowd = []
        for i in range(200):  # 50 from each of 4 peers, every one half a frame
            sock = connect_from(s, f"127.0.0.{3 + i // 50}")
            sock.sendall(half_frame())
            crowd.append(sock)
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.2):
                for sock in crowd:
                    try:
                        sock.send(b"\0")
                    except OSError:
                        pass

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        try:
            # at most 30 of each peer's 50 and 100 in all stay: 100 or more closed
            assert _eventually(lambda: s.refused["slow_per_peer"] + s.refused["slow_total"] >= 100)
            assert s.refused["slow_per_peer"] >= 60 and s.refused["slow_total"] >= 1, s.refused
            assert_normal_client_served(s)
            stats = s.server.stats()
            assert stats["slow"] <= 100 and stats["threads"] <= 4, stats
            assert not any(name.startswith("slow") for name in s.handler.queues)
        finally:
            stop.set()
            trickler.join(5)
            close_all(crowd)


def _fourth_half_frame_closes_the_oldest(s, peers: list[str], refused: str) -> None:
    """Half frames from `peers` in turn against a cap of 3 slow connections: the fourth
    closes the first, the others stay open, counted as refused for `refused`."""
    socks = []
    for peer in peers:
        sock = connect_from(s, peer)
        sock.sendall(half_frame())
        socks.append(sock)
        expected = min(len(socks), 3)
        assert _eventually(lambda: s.server.stats()["slow"] == expected)  # noqa: B023
    try:
        assert closed_by_server(socks[0], 2.0)
        assert not any(closed_by_server(sock, 0.1) for sock in socks[1:])
        assert s.refused == {refused: 1}
    finally:
        close_all(socks)


def test_half_frames_from_one_peer_beyond_its_cap_close_its_oldest():
    with serve(max_slow_connections_per_peer=3, frame_read_timeout_seconds=30) as s:
        _fourth_half_frame_closes_the_oldest(s, ["127.0.0.7"] * 4, "slow_per_peer")


def test_half_frames_beyond_the_server_cap_close_the_oldest_of_any_peer():
    with serve(max_slow_connections=3, frame_read_timeout_seconds=30) as s:
        peers = [f"127.0.0.{11 + i}" for i in range(4)]
        _fourth_half_frame_closes_the_oldest(s, peers, "slow_total")


# ---- per-peer cap, eviction near the cap ----


def test_a_peer_beyond_its_cap_is_refused_and_others_are_not():
    with serve(max_connections_per_peer=3) as s:
        three = [call_from(s, "127.0.0.5", f"p{i}") for i in range(3)]
        fourth = connect_from(s, "127.0.0.5")
        try:
            assert closed_by_server(fourth, 2.0)
            other = call_from(s, "127.0.0.6", "other_peer")
            other.close()
            assert s.refused == {"per_peer": 1}
        finally:
            close_all([*three, fourth])


def test_near_the_cap_a_new_connection_evicts_the_connection_idle_the_longest():
    settings = {
        "max_connections": 10,
        "connections_high_water": 0.5,
        "evict_idle_min_seconds": 0.3,
        "thread_linger_seconds": 0.05,
    }
    with serve(**settings) as s:
        olds = []
        for i in range(5):
            olds.append(call_from(s, "127.0.0.1", f"old_{i}"))
            time.sleep(0.1)  # parked in this order
        time.sleep(0.4)
        try:
            newcomer = call_from(s, "127.0.0.1", "newcomer")
            assert closed_by_server(olds[0], 2.0)
            assert not any(closed_by_server(sock, 0.1) for sock in olds[1:])
            assert s.refused == {"evicted_idle": 1}
            newcomer.close()
        finally:
            close_all(olds)


def test_connections_in_use_are_never_evicted_and_a_full_server_refuses():
    settings = {"max_connections": 3, "evict_idle_min_seconds": 5.0}
    with serve(**settings) as s:
        busy = [call_from(s, "127.0.0.1", f"busy_{i}") for i in range(3)]
        refused = connect_from(s, "127.0.0.1")
        try:
            assert closed_by_server(refused, 2.0)
            assert not any(closed_by_server(sock, 0.1) for sock in busy)
            assert s.refused == {"max_connections": 1}
        finally:
            close_all([*busy, refused])


def test_near_the_cap_idle_connections_time_out_sooner():
    settings = {
        "max_connections": 10,
        "connections_high_water": 0.3,  # 3 connections
        "idle_timeout_seconds": 60,
        "idle_timeout_near_cap_seconds": 0.5,
        "thread_linger_seconds": 0.05,
    }
    with serve(**settings) as s:
        first, second = (call_from(s, "127.0.0.1", name) for name in ("a", "b"))
        try:
            assert not closed_by_server(first, 1.0)  # below the mark: the long idle timeout
            third = call_from(s, "127.0.0.1", "c")
            started = time.monotonic()
            assert closed_by_server(first, 3.0) and closed_by_server(second, 3.0)
            assert time.monotonic() - started < 2.0
            third.close()
        finally:
            close_all([first, second])


# ---- replies the peer does not take ----


def test_a_reply_the_peer_does_not_read_holds_no_thread_and_arrives_when_read():
    with serve(connection_threads=1, frame_read_timeout_seconds=30) as s:
        for i in range(3):
            with RawFrameClient(s.host, s.port) as raw:
                raw.call(create_queue_call(f"{i}" * 3_000_000))  # a 9 MB getQueueNames reply
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect((s.host, s.port))
        try:
            slow.sendall(framed(encode_call("getQueueNames", seqid=5)))
            assert _eventually(lambda: s.server.stats()["slow"] == 1)  # the selector writes it
            assert_normal_client_served(s, calls=3)
            slow.settimeout(10)
            (size,) = struct.unpack("!i", recv_exact(slow, 4))
            _, msg_type, seqid, result = decode_reply(
                recv_exact(slow, size), PinLater.getQueueNames_result
            )
            assert (msg_type, seqid) == (TMessageType.REPLY, 5)
            assert len(result.success) == 3 and size > 9_000_000  # computed before the others
        finally:
            slow.close()


def test_a_reply_never_read_is_dropped_after_the_frame_timeout():
    with serve(frame_read_timeout_seconds=0.5) as s:
        with RawFrameClient(s.host, s.port) as raw:
            raw.call(create_queue_call("x" * 5_000_000))
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect((s.host, s.port))
        try:
            slow.sendall(framed(encode_call("getQueueNames")))
            assert _eventually(lambda: s.rejected["write_timeout"] == 1, 5.0)
            assert _eventually(lambda: s.server.connection_count() == 0)
        finally:
            slow.close()


# ---- the seam for parked requests (a reply delivered later, from another thread) ----


class DeferringDispatcher:
    """createQueue("defer_*") gets no reply from its dispatch: the reply is kept and delivered
    by `release` (from the test's thread) through Connection.send_reply; `early` delivers it
    from another thread while the dispatch is still running."""

    def __init__(self, handler) -> None:
        self.real = Dispatcher(PinLater, handler)
        self.held: list = []

    def dispatch(self, payload: bytes, reply_later=None, peer_alive=None):
        name, reply = self.real.dispatch(payload)
        if b"defer_" not in payload:
            return name, reply
        conn = current_connection()
        if b"defer_early" in payload:
            sender = threading.Thread(target=conn.send_reply, args=(reply,))
            sender.start()
            sender.join()
        else:
            self.held.append((conn, reply))
        return name, None

    def release(self) -> None:
        for conn, reply in self.held:
            conn.send_reply(reply)


def test_deferred_replies_hold_no_thread_and_keep_request_order():
    handler = StubHandler()
    dispatcher = DeferringDispatcher(handler)
    with serve(dispatcher, connection_threads=2) as s:
        waiting = [RawFrameClient(s.host, s.port) for _ in range(6)]  # more than the threads
        try:
            for i, raw in enumerate(waiting):
                raw.send_frame(create_queue_call(f"defer_{i}", seqid=100 + i))
            # a request pipelined behind a deferred one is answered after it
            waiting[0].send_frame(create_queue_call("behind", seqid=200))
            assert _eventually(lambda: len(dispatcher.held) == 6)
            assert_normal_client_served(s, calls=3)  # no thread is held by the 6
            assert "behind" not in handler.queues
            dispatcher.release()
            for i, raw in enumerate(waiting):
                assert decode_reply(raw.read_frame())[1:3] == (TMessageType.REPLY, 100 + i)
            assert decode_reply(waiting[0].read_frame())[1:3] == (TMessageType.REPLY, 200)
            waiting[1].send_frame(create_queue_call("after", seqid=300))  # still usable
            assert decode_reply(waiting[1].read_frame())[1:3] == (TMessageType.REPLY, 300)
            # a reply delivered before the request's thread let go is sent all the same
            waiting[2].send_frame(create_queue_call("defer_early", seqid=400))
            assert decode_reply(waiting[2].read_frame())[1:3] == (TMessageType.REPLY, 400)
        finally:
            close_all(raw.sock for raw in waiting)
    assert {"behind", "after", "defer_early"} <= handler.queues


# ---- TLS ----


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from tests.fuzz.certs import OPENSSL, make_certs

    if OPENSSL is None:
        pytest.skip("needs the openssl command line")
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_settings(certs, **settings) -> dict:
    tls = TlsConfig(
        enabled=True,
        cert_file=certs.server_cert,
        key_file=certs.server_key,
        handshake_timeout_seconds=30,
    )
    return {"tls": tls, **settings}


def test_silent_tls_connections_hold_no_thread(certs):
    from pinlater.common.tls import client_context
    from worker_sdk.client import PinLaterClient

    with serve(**tls_settings(certs, connection_threads=2)) as s:
        silent = [connect_from(s, "127.0.0.2") for _ in range(40)]
        try:
            assert _eventually(lambda: s.server.stats()["slow"] == 40)
            started = time.monotonic()
            with PinLaterClient(
                [f"127.0.0.1:{s.port}"], source="t", tls=client_context(certs.ca), retries=0
            ) as client:
                client.create_queue("over_tls")
            assert time.monotonic() - started < SERVED_WITHIN
            assert s.server.stats()["threads"] <= 2
        finally:
            close_all(silent)


def tls_call(conn, payload: bytes, result_cls=None):
    conn.sendall(framed(payload))
    (size,) = struct.unpack("!i", recv_exact(conn, 4))
    return decode_reply(recv_exact(conn, size), result_cls)


def test_tls_connections_parked_between_requests_and_slow_tls_readers(certs):
    import ssl

    context = ssl.create_default_context(cafile=certs.ca)
    with serve(**tls_settings(certs, thread_linger_seconds=0.05, connection_threads=2)) as s:
        plain = socket.socket()
        plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        plain.settimeout(10)
        plain.connect((s.host, s.port))
        conn = context.wrap_socket(plain, server_hostname="127.0.0.1")
        try:
            for i in range(3):  # each request reaches a parked connection: the selector reads it
                assert tls_call(conn, create_queue_call("q" * 2_000_000 + str(i)))[1] == 2
                time.sleep(0.2)
            assert _eventually(lambda: s.server.stats()["idle"] == 1)
            # pipelined in one TLS write: both answered, in order
            conn.sendall(framed(create_queue_call("a", 7)) + framed(create_queue_call("b", 8)))
            for seqid in (7, 8):
                (size,) = struct.unpack("!i", recv_exact(conn, 4))
                assert decode_reply(recv_exact(conn, size))[2] == seqid
            # a 6 MB reply the client does not read yet: the selector writes it (TLS records)
            conn.sendall(framed(encode_call("getQueueNames", seqid=9)))
            assert _eventually(lambda: s.server.stats()["slow"] == 1)  # WRITING, no thread
            (size,) = struct.unpack("!i", recv_exact(conn, 4))
            _, msg_type, seqid, result = decode_reply(
                recv_exact(conn, size), PinLater.getQueueNames_result
            )
            assert (msg_type, seqid, len(result.success)) == (TMessageType.REPLY, 9, 5)
        finally:
            conn.close()


# ---- the metric, through a whole server process ----


def test_refused_connections_are_exported_by_reason(tmp_path):
    import urllib.request

    metrics_port = free_port()
    config = {
        "janitor": {"enabled": False},
        "metrics": {"port": metrics_port},
        "server": {"max_connections_per_peer": 2},
    }
    with ServerProcess(config, tmp_path) as server:
        socks = [
            socket.create_connection((server.host, server.port), source_address=("127.0.0.9", 0))
            for _ in range(3)
        ]
        try:
            assert closed_by_server(socks[2], 2.0)
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as reply:
                text = reply.read().decode()
            assert 'pinlater_connections_refused_total{reason="per_peer"} 1.0' in text
        finally:
            close_all(socks)
        assert "max_connections_per_peer (2) reached" in server.log()


def test_connection_limit_settings_are_validated_with_their_key_paths():
    from pinlater.app import load_config
    from pinlater.common.sections import ConfigError

    bad = {
        "max_connections_per_peer": 0,
        "connections_high_water": 1.5,
        "max_slow_connections": 0,
        "thread_linger_seconds": -1,
        "connection_threads": 0,
    }
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"server": bad}, env={})
    problems = "\n".join(info.value.problems)
    for key in bad:
        assert f"server.{key}" in problems
    config = load_config(overrides={"server": {"max_connections_per_peer": "5"}}, env={})
    assert config.server.max_connections_per_peer == 5
