"""The fault suite's own tools: the proxy really injects each fault, and the checker really
reports loss, phantoms, unterminated jobs, double-charged attempts and unfenced acks."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.faults import checker
from tests.faults.proxy import FaultProxy
from worker_sdk.models import JobInfo, JobState


@pytest.fixture
def echo():
    """A loopback echo server (one thread per connection, stopped at the end)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve(conn):
        with conn:
            while data := _recv(conn):
                conn.sendall(data)

    def accept():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    listener.close()


def _recv(sock):
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _connect(proxy):
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=1)


def test_proxy_passes_bytes_and_delays_them(echo):
    with FaultProxy(("127.0.0.1", echo)) as proxy, _connect(proxy) as sock:
        sock.sendall(b"hello")
        assert sock.recv(100) == b"hello"
        proxy.delay(200)
        started = time.monotonic()
        sock.sendall(b"x")
        assert sock.recv(100) == b"x"
        assert time.monotonic() - started >= 0.35  # delayed both ways


def test_proxy_cut_after_forwards_n_bytes_then_resets(echo):
    with FaultProxy(("127.0.0.1", echo)) as proxy, _connect(proxy) as sock:
        proxy.cut_after(3, "down")
        sock.sendall(b"abcdef")
        got = b""
        with pytest.raises((ConnectionResetError, AssertionError)):
            while True:
                chunk = sock.recv(100)
                assert chunk, "orderly EOF instead of a reset"
                got += chunk
        assert got == b"abc"
        assert proxy.faults["cut"] == 1


def test_proxy_blackhole_drops_everything_and_heal_resets_the_tainted_link(echo):
    with FaultProxy(("127.0.0.1", echo)) as proxy, _connect(proxy) as sock:
        proxy.blackhole()
        sock.sendall(b"lost")
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            sock.recv(100)
        proxy.heal()
        sock.settimeout(1)
        with pytest.raises(ConnectionResetError):
            sock.recv(100)
        with _connect(proxy) as fresh:
            fresh.sendall(b"ok")
            assert fresh.recv(100) == b"ok"


def test_proxy_half_open_drops_one_direction_only(echo):
    with FaultProxy(("127.0.0.1", echo)) as proxy, _connect(proxy) as sock:
        proxy.half_open("down")
        sock.sendall(b"ping")
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            sock.recv(100)
        assert proxy.faults["dropped_bytes"] == 4  # it went up and the echo was dropped


def test_proxy_reset_all_sends_rst(echo):
    with FaultProxy(("127.0.0.1", echo)) as proxy, _connect(proxy) as sock:
        sock.sendall(b"a")
        assert sock.recv(10) == b"a"
        assert proxy.reset_all() == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(10)


# ---- checker ----


def _rec(op, job, descriptor=None, claim=None, outcome="ok", t=0.0):
    return {
        "op": op,
        "job": job,
        "descriptor": descriptor,
        "claim": claim,
        "outcome": outcome,
        "invoke": t,
        "complete": t + 0.01,
        "process": "t",
    }


def _info(descriptor, state, job, claim=None, remaining=5, allowed=5):
    return JobInfo(
        descriptor=descriptor,
        state=state,
        attempts_allowed=allowed,
        attempts_remaining=remaining,
        custom_status="",
        created_at_ms=0,
        claim=claim,
        body=job.encode(),
    )


def test_checker_accepts_a_clean_history():
    records = [
        _rec("enqueue", "job:a:1", "q:s1:p1:1"),
        _rec("deliver", "job:a:1", "q:s1:p1:1", "c1", t=1),
        _rec("ack", "job:a:1", "q:s1:p1:1", "c1", t=2),
    ]
    final = {"q:s1:p1:1": _info("q:s1:p1:1", JobState.SUCCEEDED, "job:a:1", "c1")}
    report = checker.check(records, final)
    assert report.valid, report.problems()
    assert report.acked == 1 and report.max_deliveries == 1


def test_checker_reports_a_lost_job_a_phantom_and_an_undrained_job():
    records = [_rec("enqueue", "job:a:1", "q:s1:p1:1"), _rec("enqueue", "job:a:2", "q:s1:p1:2")]
    final = {
        "q:s1:p1:2": _info("q:s1:p1:2", JobState.PENDING, "job:a:2"),
        "q:s1:p1:9": _info("q:s1:p1:9", JobState.PENDING, "job:zz:9"),
    }
    report = checker.check(records, final)
    assert report.lost == ["job:a:1", "job:a:2"]
    assert report.missing_descriptors == ["q:s1:p1:1"]
    assert report.phantoms == ["q:s1:p1:9=job:zz:9"]
    assert len(report.not_drained) == 2


def test_checker_reports_an_unfenced_ack_and_a_double_charged_attempt():
    records = [
        _rec("enqueue", "job:a:1", "q:s1:p1:1"),
        _rec("deliver", "job:a:1", "q:s1:p1:1", "old", t=1),
        _rec("deliver", "job:a:1", "q:s1:p1:1", "new", t=3),
        _rec("ack", "job:a:1", "q:s1:p1:1", "old", t=4),
    ]
    # finished under the new claim, which nobody acked, and two attempts charged for one expiry
    final = {"q:s1:p1:1": _info("q:s1:p1:1", JobState.SUCCEEDED, "job:a:1", "new", remaining=3)}
    report = checker.check(records, final)
    assert any("that no ack sent" in v for v in report.violations)
    assert any("2 attempts used for 2 observed deliveries" in v for v in report.violations)


def test_checker_reports_a_redelivery_after_the_effective_ack():
    records = [
        _rec("enqueue", "job:a:1", "q:s1:p1:1"),
        _rec("deliver", "job:a:1", "q:s1:p1:1", "c1", t=1),
        _rec("ack", "job:a:1", "q:s1:p1:1", "c1", t=2),
        _rec("deliver", "job:a:1", "q:s1:p1:1", "c2", t=5),
    ]
    final = {"q:s1:p1:1": _info("q:s1:p1:1", JobState.SUCCEEDED, "job:a:1", "c1", remaining=4)}
    report = checker.check(records, final)
    assert any("began after its success ack" in v for v in report.violations)
