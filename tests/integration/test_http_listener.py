"""The HTTP listener cannot be held hostage: a bounded pool of threads, a bounded wait, one
overall deadline per request (a trickling client is cut off, not served forever), a cap per
client address; and HTTPS when server.tls is configured. Real sockets on loopback."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time

import pytest

from pinlater.common.passwords import hash_password
from pinlater.common.tls import client_context, server_context
from pinlater.config import TlsConfig
from pinlater.server.http import MAX_BODY_BYTES, HttpListener, Response
from pinlater.server.listen import bind
from tests.fuzz.certs import OPENSSL, make_certs
from tests.support.admin_http import AdminHttp
from tests.support.operating import OperatingServer


class Listener:
    """An HttpListener answering every request with its path, and the refusals it counted."""

    def __init__(self, **kwargs):
        self.refused: list[str] = []
        self.lock = threading.Lock()
        self.http = HttpListener(
            bind("127.0.0.1", 0),
            lambda request: Response.text(200, request.path),
            on_refused=self._refused,
            **kwargs,
        ).start()
        self.port = self.http.address[1]

    def _refused(self, reason: str) -> None:
        with self.lock:
            self.refused.append(reason)

    def get(self, path: str = "/ok", timeout: float = 5.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def silent(self) -> socket.socket:
        """A connection that never sends anything."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)


@pytest.fixture
def make_listener():
    made: list[Listener] = []

    def make(**kwargs) -> Listener:
        made.append(Listener(**kwargs))
        return made[-1]

    yield make
    for listener in made:
        listener.http.close()


def test_silent_clients_hold_a_thread_only_until_the_deadline(make_listener):
    listener = make_listener(threads=2, max_waiting=1, request_timeout=0.5)
    silent = [listener.silent() for _ in range(2)]
    time.sleep(0.1)  # both threads are now waiting on them
    started = time.monotonic()
    assert listener.get("/served") == (200, b"/served")
    waited = time.monotonic() - started
    assert 0.2 < waited < 2.0, f"queued behind the silent ones until their deadline: {waited}"
    for sock in silent:
        assert sock.recv(100) == b"", "closed by the server"
        sock.close()
    assert listener.refused.count("timeout") == 2


def test_connections_beyond_the_pool_and_its_waiting_room_are_refused_at_once(make_listener):
    listener = make_listener(threads=1, max_waiting=1, request_timeout=2.0)
    held = [listener.silent() for _ in range(2)]  # one in the thread, one waiting
    time.sleep(0.1)
    started = time.monotonic()
    status, body = listener.get("/over", timeout=5)
    assert (status, body) == (503, b"server busy\n")
    assert time.monotonic() - started < 0.5, "refused at once, not queued"
    assert "busy" in listener.refused
    for sock in held:
        sock.close()


def test_one_client_address_holds_a_bounded_number_of_connections(make_listener):
    listener = make_listener(threads=4, max_waiting=4, connections_per_client=2)
    held = [listener.silent() for _ in range(2)]
    time.sleep(0.1)
    status, body = listener.get()
    assert status == 503 and b"too many connections" in body
    assert "per_client" in listener.refused
    for sock in held:
        sock.close()
    time.sleep(0.2)
    assert listener.get() == (200, b"/ok"), "free again once they are gone"


def test_a_trickling_client_is_cut_off_at_the_overall_deadline(make_listener):
    listener = make_listener(threads=2, request_timeout=1.0)
    sock = socket.create_connection(("127.0.0.1", listener.port), timeout=5)
    started = time.monotonic()
    sock.sendall(b"GET /slow HTTP/1.0\r\n")
    closed_after = None
    for _ in range(40):  # one header byte every 0.1 s: each read comes well within any timeout
        try:
            sock.sendall(b"X")
        except OSError:
            closed_after = time.monotonic() - started
            break
        time.sleep(0.1)
        sock.settimeout(0.001)
        try:
            if sock.recv(100) == b"":
                closed_after = time.monotonic() - started
                break
        except (TimeoutError, BlockingIOError):
            pass
        except OSError:
            closed_after = time.monotonic() - started
            break
    sock.close()
    assert closed_after is not None and closed_after < 2.0, closed_after
    assert "timeout" in listener.refused


def test_bodies_are_capped(make_listener):
    listener = make_listener()
    conn = http.client.HTTPConnection("127.0.0.1", listener.port, timeout=5)
    conn.putrequest("POST", "/big")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()


def test_close_returns_while_clients_are_silent(make_listener):
    listener = make_listener(threads=2, request_timeout=1.0)
    held = [listener.silent() for _ in range(3)]
    time.sleep(0.1)
    started = time.monotonic()
    listener.http.close()
    assert time.monotonic() - started < 3.0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", listener.port), timeout=1).recv(1)
    for sock in held:
        sock.close()


# ---------------------------------------------------------------- TLS

needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command line")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@needs_openssl
def test_with_server_tls_the_listener_speaks_https_and_the_cookie_is_secure(tmp_path, certs):
    password = "tls-admin"
    config = {
        "admin": {"password_hash": hash_password(password, iterations=1000)},
        "server": {
            "tls": TlsConfig(
                enabled=True, cert_file=certs.server_cert, key_file=certs.server_key
            ).__dict__
        },
    }
    with OperatingServer(tmp_path, config) as server:
        port = server.app.metrics_server.address[1]
        api = AdminHttp(f"https://127.0.0.1:{port}", context=client_context(certs.ca))
        status, body, headers = api.login(password)
        assert status == 200 and body["csrf_token"] and "; Secure" in headers["set-cookie"]
        assert api.get("/api/v1/server")[1]["tls"] is True
        assert api.get("/metrics")[0] == 200
        plain = socket.create_connection(("127.0.0.1", port), timeout=5)
        plain.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        answer = b""
        try:
            while chunk := plain.recv(4096):
                answer += chunk
        except OSError:
            pass
        plain.close()
        assert b"pinlater_" not in answer, "no metrics over plain HTTP"
        with pytest.raises(ssl.SSLError):
            AdminHttp(f"https://127.0.0.1:{port}", context=ssl.create_default_context()).get(
                "/health"
            )  # an unknown CA is refused: the listener presents the server certificate


@needs_openssl
def test_a_silent_tls_client_is_cut_off_at_the_deadline(make_listener, certs):
    listener = make_listener(
        threads=1,
        request_timeout=0.5,
        ssl_context=server_context(certs.server_cert, certs.server_key),
    )
    silent = listener.silent()
    started = time.monotonic()
    assert silent.recv(100) == b"", "closed without a handshake"
    assert time.monotonic() - started < 2.0
    silent.close()
    assert listener.refused == ["tls"]
    conn = http.client.HTTPSConnection(
        "127.0.0.1", listener.port, timeout=5, context=client_context(certs.ca)
    )
    conn.request("GET", "/after")
    assert conn.getresponse().read() == b"/after", "the one thread serves again"
    conn.close()
