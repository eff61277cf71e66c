"""TLS on the Thrift port: real handshakes on loopback with throwaway certificates (openssl).

Most tests run the real accept loop in-process (tests.integration.conftest.run_inproc) in front
of the stand-in handler; one runs the whole server process from a YAML config.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
import warnings

import pytest

from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from pinlater.common.tls import client_context
from pinlater.config import TlsConfig
from tests.fuzz.certs import OPENSSL, make_certs
from tests.integration.conftest import run_inproc
from tests.support.server_process import RawFrameClient, ServerProcess, encode_call
from worker_sdk.client import PinLaterClient
from worker_sdk.errors import PinLaterTransportError

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command line")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_settings(
    certs,
    *,
    mutual: bool = False,
    cert: str | None = None,
    key: str | None = None,
    handshake: float = 5.0,
) -> dict:
    return {
        "tls": TlsConfig(
            enabled=True,
            cert_file=cert or certs.server_cert,
            key_file=key or certs.server_key,
            client_ca_file=certs.ca if mutual else None,
            handshake_timeout_seconds=handshake,
        )
    }


def client(server, tls, **kwargs) -> PinLaterClient:
    return PinLaterClient(
        [f"127.0.0.1:{server.port}"],
        source="tls-test",
        tls=tls,
        retries=0,
        connect_timeout=2.0,
        timeout=5.0,
        **kwargs,
    )


def test_tls_client_round_trip(certs):
    with run_inproc(**tls_settings(certs)) as server:
        with client(server, certs.ca) as c:
            c.create_queue("over_tls")
            assert c.queue_names() == ["over_tls"]
            c.create_queue("second")  # the pooled TLS connection is reused
        assert server.handler.queues == {"over_tls", "second"}


def test_server_refuses_tls_1_1(certs):
    assert client_context(certs.ca).minimum_version == ssl.TLSVersion.TLSv1_2
    with run_inproc(**tls_settings(certs)) as server:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.set_ciphers("DEFAULT:@SECLEVEL=0")  # lets this client really offer TLS 1.1
        old.load_verify_locations(certs.ca)
        with socket.create_connection((server.host, server.port), timeout=3) as sock:
            with pytest.raises(ssl.SSLError) as info:
                old.wrap_socket(sock, server_hostname="127.0.0.1")
        assert "version" in str(info.value).lower()


def test_plain_client_on_the_tls_port_is_closed_at_once(certs):
    with run_inproc(**tls_settings(certs)) as server:
        with RawFrameClient(server.host, server.port) as raw:
            started = time.monotonic()
            raw.send_frame(encode_call("getQueueNames"))
            assert raw.wait_closed(2.0)
            assert time.monotonic() - started < 1.0
        with pytest.raises(PinLaterTransportError):
            client(server, None).queue_names()
        assert server.handler.queues == set()


def test_silent_connections_do_not_stall_another_clients_handshake(certs):
    with run_inproc(**tls_settings(certs, handshake=30.0)) as server:
        silent = [socket.create_connection((server.host, server.port)) for _ in range(5)]
        try:
            time.sleep(0.1)  # they are accepted and waiting in their handshakes
            with client(server, certs.ca) as c:
                started = time.monotonic()
                c.create_queue("not_stalled")
                elapsed = time.monotonic() - started
            print(f"TLS handshake + call with 5 silent connections open: {elapsed:.3f}s")
            assert elapsed < 1.0, f"handshake + call took {elapsed:.3f}s"
        finally:
            for sock in silent:
                sock.close()


def test_a_silent_connection_is_closed_after_the_handshake_deadline(certs):
    with run_inproc(**tls_settings(certs, handshake=0.4)) as server:
        with RawFrameClient(server.host, server.port) as raw:
            started = time.monotonic()
            assert raw.wait_closed(3.0)
            assert 0.3 <= time.monotonic() - started < 1.5


def test_a_trickling_handshake_is_cut_at_the_total_deadline(certs):
    with run_inproc(**tls_settings(certs, handshake=0.5)) as server:
        with RawFrameClient(server.host, server.port) as raw:
            started = time.monotonic()
            hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40)
            closed = threading.Event()

            def trickle() -> None:
                for byte in hello:
                    if closed.is_set():
                        return
                    try:
                        raw.sock.send(bytes([byte]))
                    except OSError:
                        return
                    time.sleep(0.1)

            sender = threading.Thread(target=trickle, daemon=True)
            sender.start()
            assert raw.wait_closed(3.0)
            closed.set()
            assert time.monotonic() - started < 1.5
            sender.join(5)


def test_mutual_tls_refuses_a_client_without_a_certificate(certs):
    with run_inproc(**tls_settings(certs, mutual=True)) as server:
        with pytest.raises(PinLaterTransportError):
            with client(server, certs.ca) as c:
                c.queue_names()
        with client(server, client_context(certs.ca, certs.client_cert, certs.client_key)) as c:
            c.create_queue("mutual")
        assert server.handler.queues == {"mutual"}


def test_client_refuses_a_server_certificate_for_another_host_name(certs):
    with run_inproc(
        **tls_settings(certs, cert=certs.other_host_cert, key=certs.other_host_key)
    ) as server:
        with pytest.raises(PinLaterTransportError) as info:
            client(server, certs.ca).queue_names()
        assert "cannot connect" in str(info.value)
        assert not info.value.maybe_applied


def test_client_refuses_a_server_signed_by_an_unknown_ca(certs):
    with run_inproc(**tls_settings(certs)) as server:
        with pytest.raises(PinLaterTransportError):
            client(server, certs.stranger_ca).queue_names()
        with pytest.raises(PinLaterTransportError):
            client(server, True).queue_names()  # system CAs do not know our test CA


def test_tls_argument_must_be_a_known_kind():
    with pytest.raises(TypeError):
        PinLaterClient(["127.0.0.1:1"], tls=42)


def test_tls_config_problems_are_reported_with_key_paths(certs, tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"server": {"tls": {"enabled": True}}})
    assert info.value.problems == ["server.tls.cert_file: required when server.tls.enabled is true"]
    with pytest.raises(ConfigError) as info:
        load_config(
            overrides={
                "server": {
                    "tls": {
                        "enabled": True,
                        "cert_file": certs.server_cert,
                        "key_file": certs.client_key,
                        "client_ca_file": str(tmp_path / "missing.pem"),
                        "handshake_timeout_seconds": 0,
                        "colour": "blue",
                    }
                }
            }
        )
    problems = "\n".join(info.value.problems)
    for key in (
        "server.tls.colour",
        "server.tls.handshake_timeout_seconds",
        "server.tls.cert_file",
        "server.tls.client_ca_file",
    ):
        assert key in problems
    config = load_config(overrides={"server": {"tls": {"enabled": "false"}}})
    assert config.server.tls == TlsConfig()


def test_server_process_serves_tls_from_its_yaml_config(certs, tmp_path):
    tls = {
        "enabled": True,
        "cert_file": certs.server_cert,
        "key_file": certs.server_key,
        "client_ca_file": certs.ca,
        "handshake_timeout_seconds": 2,
    }
    with ServerProcess({"janitor": {"enabled": False}, "server": {"tls": tls}}, tmp_path) as server:
        mutual = client_context(certs.ca, certs.client_cert, certs.client_key)
        with client(server, mutual) as c:
            c.create_queue("yaml_tls")
            assert c.queue_names() == ["yaml_tls"]
        with pytest.raises(PinLaterTransportError):
            client(server, certs.ca).queue_names()
    assert "TLS with client certificates" in server.log()
    assert "tls_handshake" in server.log()


def test_cli_talks_tls_with_a_ca_file_and_fails_clearly_without_it(certs):
    import io

    from pinlater.cli import main as cli

    with run_inproc(**tls_settings(certs)) as server:
        base = ["--port", str(server.port), "--timeout", "3", "--retries", "0"]
        out = io.StringIO()
        assert (
            cli.main(
                base + ["--tls-ca", certs.ca, "create", "--queue", "cli_tls"],
                out=out,
                err=io.StringIO(),
            )
            == 0
        )
        assert server.handler.queues == {"cli_tls"}
        err = io.StringIO()
        assert cli.main(base + ["--tls", "get_queue_names"], out=io.StringIO(), err=err) == 3
        assert err.getvalue().strip()  # one clear line: the system CAs do not know our CA
        err = io.StringIO()
        assert (
            cli.main(
                base + ["--tls-ca", "/nonexistent/ca.pem", "get_queue_names"],
                out=io.StringIO(),
                err=err,
            )
            == 2
        )
        assert "TLS" in err.getvalue()
