"""A flood of wrong deleteQueue passwords cannot starve normal clients (hostile load, item 2).

Each check of the real (600,000-iteration PBKDF2) admin hash costs ~0.1 s of CPU. 32 threads
guessing as fast as the server answers; a normal client enqueueing meanwhile is served, most
guesses are refused before any hashing, and every refusal comes after the refusal delay (the
tarpit), so the flood makes one guess per connection per delay. `scripts/bench_hostile.py`
prints the latency figures; this test asserts only that the client is served and the guard
works.
"""

from __future__ import annotations

import threading
import time

from pinlater.common.passwords import hash_password
from pinlater.idl import ErrorCode, PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support.server_process import ServerProcess

CTX = RequestContext(source="flood-test")
FLOOD_THREADS = 32
FLOOD_SECONDS = 3.0
#: admin.password_refusal_delay_seconds: each connection guesses at most once per delay
REFUSAL_DELAY = 0.5


def guess_until(server: ServerProcess, deadline: float, outcomes: list[str]) -> None:
    client = server.client()
    try:
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                client.deleteQueue(CTX, "victim", "not-the-password")
            except PinLaterException as exc:
                assert exc.errorCode == ErrorCode.PASSWORD_INVALID, exc.message
                assert time.monotonic() - started >= REFUSAL_DELAY * 0.9  # answered late
                outcomes.append("refused early" if "too many" in exc.message else "hashed")
    finally:
        client.close()


def test_a_password_flood_leaves_enqueue_served(tmp_path):
    config = {
        "janitor": {"enabled": False},
        "admin": {
            "password_hash": hash_password("the-password"),
            "password_failures_per_minute": 120,  # a lock-out of the flood's address ends fast
            "password_refusal_delay_seconds": REFUSAL_DELAY,
        },
    }
    with ServerProcess(config, tmp_path) as server:
        client = server.client()
        try:
            client.createQueue(CTX, "victim")
            outcomes: list[str] = []
            latencies = _enqueue_under_flood(server, client, outcomes)
            assert len(latencies) > 20, latencies
            assert max(latencies) < 2.0, max(latencies)
            hashed = outcomes.count("hashed")
            assert hashed <= 4 * FLOOD_SECONDS + 5, (hashed, len(outcomes))  # server-wide rate
            assert outcomes.count("refused early") > 2 * hashed
            # the tarpit: one guess per connection per delay (was ~5,000 guesses a second)
            assert len(outcomes) <= FLOOD_THREADS * (FLOOD_SECONDS / REFUSAL_DELAY + 2)
            delete_with_the_right_password(client, "victim")
        finally:
            client.close()


def _enqueue_under_flood(server: ServerProcess, client, outcomes: list[str]) -> list[float]:
    """Enqueue one job at a time while FLOOD_THREADS clients guess passwords for
    FLOOD_SECONDS; returns each enqueue's latency."""
    deadline = time.monotonic() + FLOOD_SECONDS
    flood = [
        threading.Thread(target=guess_until, args=(server, deadline, outcomes))
        for _ in range(FLOOD_THREADS)
    ]
    for thread in flood:
        thread.start()
    latencies = []
    while time.monotonic() < deadline:
        started = time.monotonic()
        request = t.PinLaterEnqueueRequest(queueName="victim", jobs=[t.PinLaterJob(body=b"j")])
        assert len(client.enqueueJobs(CTX, request).jobDescriptors) == 1
        latencies.append(time.monotonic() - started)
    for thread in flood:
        thread.join(30)
    return latencies


def delete_with_the_right_password(client, queue: str) -> None:
    """The flood's address is locked out for a moment; the right password works after it."""
    give_up = time.monotonic() + 10
    while True:
        try:
            client.deleteQueue(CTX, queue, "the-password")
            return
        except PinLaterException as exc:
            assert "too many" in exc.message and time.monotonic() < give_up, exc.message
            time.sleep(0.5)
