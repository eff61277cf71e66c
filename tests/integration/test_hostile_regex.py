"""A body regex request is bounded, on every backend (hostile load, items 6 and 7).

A real server over a socket on SQLite, Redis (two shards) and MariaDB (three shards); each
backend pages bodies to the filter its own way, so each one runs the lot:
- `(.*a){5}x` over 1,000 bodies that each cost ~20 ms of CPU: getJobCount, scanJobs and
  deleteJobs answer a budget error within the request budget (31-48 s before, each body under
  the per-body budget), and deleteJobs deleted nothing;
- 8 clients sending `zzz` over 1 KiB bodies while others run the expensive pattern never see
  a failure (up to 25% of such requests failed with the wall-clock per-body budget);
- `limits.regex_scan_cap` bodies are examined and no more.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from pinlater.idl import ErrorCode, PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support.server_process import ServerProcess
from tests.support.storage import KINDS, backend_section

CTX = RequestContext(source="hostile-regex")
SLOW = "(.*a){5}x"
#: ~20 ms of CPU per body for SLOW (on the 2-core CI machine), under the 50 ms per-body budget
SLOW_BODY = b"a" * 125
TRIVIAL_BODY = bytes(range(97, 122)) * 41  # 1,025 bytes without "zzz"
REQUEST_CPU_SECONDS = 1.0
REQUEST_SECONDS = 5.0
SCAN_CAP = 1500
#: wall-clock slack for a loaded machine (the budget error itself comes at REQUEST_SECONDS)
SLACK_SECONDS = 3.0


@pytest.fixture(scope="module", params=KINDS)
def server(request, tmp_path_factory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(f"regex-{request.param}")
    config = {
        "janitor": {"enabled": False},
        "limits": {
            "regex_request_cpu_seconds": REQUEST_CPU_SECONDS,
            "regex_request_seconds": REQUEST_SECONDS,
            "regex_scan_cap": SCAN_CAP,
        },
    }
    with backend_section(request.param, tmp) as backend:
        with ServerProcess({**config, "backend": backend}, tmp) as running:
            with contextlib.closing(running.client()) as client:
                fill(client, "slow", SLOW_BODY, 1000)
                fill(client, "trivial", TRIVIAL_BODY, 300)
                fill(client, "at_cap", b"hay", SCAN_CAP)
                fill(client, "over_cap", b"hay", SCAN_CAP + 1)
            yield running
            assert "Traceback" not in running.log()


def fill(client, queue: str, body: bytes, count: int) -> None:
    client.createQueue(CTX, queue)
    for start in range(0, count, 500):
        jobs = [t.PinLaterJob(body=body) for _ in range(min(500, count - start))]
        client.enqueueJobs(CTX, t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))


def count(client, queue: str, pattern: str | None = None) -> int:
    request = t.PinLaterGetJobCountRequest(queueName=queue, jobState=0, bodyRegexToMatch=pattern)
    return client.getJobCount(CTX, request)


def budget_error(call) -> tuple[str, float]:
    """The message of the UNKNOWN error `call` answers, and how long it took."""
    started = time.monotonic()
    with pytest.raises(PinLaterException) as refused:
        call()
    took = time.monotonic() - started
    assert refused.value.errorCode == ErrorCode.UNKNOWN, refused.value.message
    return refused.value.message, took


def is_budget_refusal(message: str) -> bool:
    """The request stopped at its CPU or wall-clock budget, or (when load left a body's thread
    too little CPU to finish its ~20 ms in one 50 ms window, three budgets running) at the
    per-body budget: both say what was scanned."""
    return message.startswith(
        (
            "bodyRegexToMatch: body regex scan stopped after",
            "bodyRegexToMatch: one body needed more than 0.05 s of CPU",
        )
    ) and ("regex_request_" in message or "regex_timeout_seconds" in message)


def test_an_expensive_pattern_over_many_bodies_stops_at_the_request_budget(server):
    with contextlib.closing(server.client(timeout=60)) as client:
        _assert_stopped_at_the_request_budget(client)


def _assert_stopped_at_the_request_budget(client) -> None:
    calls = {
        "getJobCount": lambda: count(client, "slow", SLOW),
        "scanJobs": lambda: client.scanJobs(
            CTX, t.PinLaterScanJobsRequest(queueName="slow", jobState=0, bodyRegexToMatch=SLOW)
        ),
        "deleteJobs": lambda: delete(client, "slow", SLOW, 1000),
    }
    for name, call in calls.items():
        message, took = budget_error(call)
        assert is_budget_refusal(message), (name, message)
        assert took < REQUEST_SECONDS + SLACK_SECONDS, (name, took, message)
    assert count(client, "slow") == 1000  # deleteJobs stopped before deleting anything
    assert count(client, "slow", "^a+$") == 1000  # a cheap pattern over the same bodies works


def test_a_trivial_pattern_never_fails_under_concurrency(server):
    deadline = time.monotonic() + 4.0
    outcomes: dict[str, list[str]] = {"trivial": [], "slow": []}
    lock = threading.Lock()

    def run(kind: str, queue: str, pattern: str) -> None:
        client = server.client(timeout=60)
        try:
            while time.monotonic() < deadline:
                try:
                    assert count(client, queue, pattern) == 0
                    outcome = "ok"
                except PinLaterException as exc:
                    outcome = exc.message
                with lock:
                    outcomes[kind].append(outcome)
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=("trivial", "trivial", "zzz")) for _ in range(8)]
    threads += [threading.Thread(target=run, args=("slow", "slow", SLOW)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    trivial = outcomes["trivial"]
    assert len(trivial) >= 8, outcomes
    assert [o for o in trivial if o != "ok"] == []
    assert outcomes["slow"] and all(map(is_budget_refusal, outcomes["slow"])), outcomes


def test_the_scan_cap_bounds_the_bodies_one_request_examines(server):
    with contextlib.closing(server.client(timeout=60)) as client:
        _assert_the_scan_cap_bounds(client)


def _assert_the_scan_cap_bounds(client) -> None:
    assert count(client, "at_cap", "needle") == 0
    message, _ = budget_error(lambda: count(client, "over_cap", "needle"))
    assert f"{SCAN_CAP:,} bodies" in message and "limits.regex_scan_cap" in message, message
    message, _ = budget_error(lambda: delete(client, "over_cap", "needle", 10))
    assert "limits.regex_scan_cap" in message, message
    assert delete(client, "over_cap", "hay", 10) == 10  # stops scanning once it has enough
    assert count(client, "over_cap") == SCAN_CAP + 1 - 10


def delete(client, queue: str, pattern: str, limit: int) -> int:
    request = t.PinLaterDeleteJobsRequest(
        queueName=queue, jobState=0, bodyRegexToMatch=pattern, limit=limit
    )
    return client.deleteJobs(CTX, request)
