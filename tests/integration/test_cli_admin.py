"""`pinlater pause`, `pinlater resume` and `pinlater stats` with the admin password, against a
real server through its admin API: what they print, and their exit codes when the password is
wrong or missing, the API is off or the port is closed."""

from __future__ import annotations

import io

import pytest

from pinlater.cli.main import main
from pinlater.common.passwords import hash_password
from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.operating import OperatingServer
from tests.support.server_process import free_port

PASSWORD = "cli-admin"
CTX = RequestContext(source="cli-admin-test")
ADMIN = {"admin": {"password_hash": hash_password(PASSWORD, iterations=1000)}}


def run(srv, *argv, env_password: str | None = None, monkeypatch=None):
    if monkeypatch is not None:
        if env_password is None:
            monkeypatch.delenv("PINLATER_ADMIN_PASSWORD", raising=False)
        else:
            monkeypatch.setenv("PINLATER_ADMIN_PASSWORD", env_password)
    out, err = io.StringIO(), io.StringIO()
    port = srv.app.metrics_server.address[1]
    code = main(
        ["--port", str(srv.port), argv[0], "--metrics-port", str(port), *argv[1:]], out, err
    )
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with OperatingServer(tmp_path_factory.mktemp("cli-admin"), ADMIN) as server:
        for queue in ("cli_q", "limited"):
            server.client().createQueue(CTX, queue)
        yield server


def refused(srv, queue: str) -> bool:
    try:
        srv.client().dequeueJobs(
            CTX, T.PinLaterDequeueRequest(queueName=queue, limit=1, dryRun=True)
        )
        return False
    except PinLaterException as exc:
        assert exc.errorCode == T.ErrorCode.DEQUEUE_RATE_LIMITED, exc
        return True


def test_pause_and_resume(srv, monkeypatch):
    code, out, err = run(srv, "pause", "--queue", "cli_q", "--password", PASSWORD)
    assert (code, out, err) == (0, "Paused queue: cli_q\n", "")
    assert refused(srv, "cli_q")
    code, out, _ = run(
        srv, "resume", "--queue", "cli_q", env_password=PASSWORD, monkeypatch=monkeypatch
    )
    assert (code, out) == (0, "Resumed queue: cli_q\n")
    assert not refused(srv, "cli_q")
    code, out, _ = run(srv, "pause", "--json", "--queue", "cli_q", "--password", PASSWORD)
    assert code == 0 and '"paused": {' in out and '"source": "stored"' in out
    run(srv, "resume", "--queue", "cli_q", "--password", PASSWORD)


def test_pause_errors(srv, monkeypatch):
    code, _, err = run(srv, "pause", "--queue", "cli_q", "--password", "wrong")
    assert code == 1 and err.startswith("pinlater: server error: unauthorized: ")
    code, _, err = run(srv, "pause", "--queue", "nosuch", "--password", PASSWORD)
    assert (code, err) == (1, "pinlater: server error: queue_not_found: Queue not found: nosuch\n")
    code, _, err = run(srv, "pause", "--queue", "cli_q", monkeypatch=monkeypatch)
    assert code == 2 and "no password" in err, "stdin is not a terminal here: no prompt"
    out, err_io = io.StringIO(), io.StringIO()
    code = main(
        ["pause", "--queue", "q", "--metrics-port", str(free_port()), "--password", "x"],
        out,
        err_io,
    )
    assert code == 3 and "connection failed" in err_io.getvalue()
    assert not refused(srv, "cli_q")


def test_pause_when_the_api_is_off(tmp_path):
    with OperatingServer(tmp_path) as server:
        code, _, err = run(server, "pause", "--queue", "q", "--password", "x")
        assert code == 1 and "admin_api_disabled" in err


def test_stats_names_paused_and_limited_queues_with_the_password(srv, monkeypatch):
    run(srv, "pause", "--queue", "cli_q", "--password", PASSWORD)
    srv.app.settings.change("limited", {"max_jobs_per_second": 2.5}, "test")
    try:
        code, out, err = run(
            srv, "stats", "--rate-window", "0", env_password=PASSWORD, monkeypatch=monkeypatch
        )
        assert code == 0, err
        assert "settings: cli_q paused (stored), limited 2.5/s (stored)" in out.splitlines()
        code, out, _ = run(srv, "stats", "--rate-window", "0", monkeypatch=monkeypatch)
        assert code == 0 and "settings:" not in out, "without the password: as before"
        code, out, _ = run(
            srv, "stats", "--rate-window", "0", env_password="wrong", monkeypatch=monkeypatch
        )
        assert code == 0 and "settings: - (unauthorized: " in out
    finally:
        run(srv, "resume", "--queue", "cli_q", "--password", PASSWORD)
        srv.app.settings.change("limited", {"max_jobs_per_second": None}, "test")
