"""Runtime queue settings are shared through the storage: two real server processes on one
storage (SQLite files, one Redis, one MariaDB) each see a pause made through the other's admin
API within 5 s, and a restarted server still has it."""

from __future__ import annotations

import contextlib
import time

import pytest

from pinlater.common.passwords import hash_password
from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.admin_http import AdminHttp
from tests.support.server_process import ServerProcess, free_port
from tests.support.storage import KINDS, backend_section

PASSWORD = "shared-settings"
CTX = RequestContext(source="settings-test")
#: what the issue asks: every server applies a change within this long
WITHIN_SECONDS = 5.0


def server(tmp_path, backend: dict, name: str) -> ServerProcess:
    return ServerProcess(
        {
            "backend": backend,
            "janitor": {"enabled": False},
            "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
            "metrics": {"port": free_port()},
        },
        tmp_path,
        name=name,
    )


def api(proc: ServerProcess) -> AdminHttp:
    return AdminHttp(f"http://127.0.0.1:{proc.config['metrics']['port']}", basic=PASSWORD)


def refuses(proc: ServerProcess, queue: str) -> bool:
    """Whether the server refuses a dequeue of `queue` as rate limited (a dry run: it takes
    nothing when allowed)."""
    client = proc.client()
    try:
        client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=1, dryRun=True))
        return False
    except PinLaterException as exc:
        assert exc.errorCode == T.ErrorCode.DEQUEUE_RATE_LIMITED, exc
        return True
    finally:
        client.close()


def seconds_until(predicate, limit: float = WITHIN_SECONDS + 5) -> float:
    """How long until `predicate()` holds (polled every 50 ms); fails after `limit`."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < limit, "never happened"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.parametrize("kind", KINDS)
def test_a_pause_through_either_server_reaches_the_other_and_survives_restarts(tmp_path, kind):
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(backend_section(kind, tmp_path))
        a = stack.enter_context(server(tmp_path, backend, "a"))
        b = stack.enter_context(server(tmp_path, backend, "b"))
        client = a.client()
        client.createQueue(CTX, "shared")
        client.enqueueJobs(
            CTX, T.PinLaterEnqueueRequest(queueName="shared", jobs=[T.PinLaterJob(body=b"x")])
        )
        client.close()
        assert not refuses(a, "shared") and not refuses(b, "shared")

        status, body, _ = api(a).post("/api/v1/queues/shared/pause", {})
        assert status == 200 and body["settings"]["paused"]["value"] is True
        assert refuses(a, "shared"), "the server that took the change applies it at once"
        took = seconds_until(lambda: refuses(b, "shared"))
        print(f"{kind}: the other server refused dequeues {took:.2f} s after the pause")
        assert took < WITHIN_SECONDS, f"{kind}: b saw the pause after {took:.2f} s"
        seen = api(b).get("/api/v1/queues/shared")[1]["settings"]["paused"]
        assert seen == {"value": True, "source": "stored"}

        status, _, _ = api(b).post("/api/v1/queues/shared/resume", {})
        assert status == 200 and not refuses(b, "shared")
        took = seconds_until(lambda: not refuses(a, "shared"))
        print(f"{kind}: the other server served dequeues {took:.2f} s after the resume")
        assert took < WITHIN_SECONDS, f"{kind}: a saw the resume after {took:.2f} s"

        status, _, _ = api(b).post(
            "/api/v1/queues/shared/settings", {"max_jobs_per_second": 4, "claim_timeout_seconds": 9}
        )
        assert status == 200
        api(b).post("/api/v1/queues/shared/pause", {})
        b.stop()
        a.stop()
        again = stack.enter_context(server(tmp_path, backend, "a-again"))
        assert refuses(again, "shared"), "paused from the first request after a restart"
        settings = api(again).get("/api/v1/queues/shared")[1]["settings"]
        assert settings["paused"]["source"] == "stored"
        assert settings["max_jobs_per_second"]["value"] == 4
        assert settings["claim_timeout_seconds"] == {
            "value": 9,
            "source": "stored",
            "stored": 9,
            "file": None,
        }
