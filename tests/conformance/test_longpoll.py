"""Long-poll dequeue (waitMillis) and the empty-partition map, on every backend.

A parked request is answered from another thread: here the in-process wire waits for it in the
calling thread (`Deferred.wait`), so each parked dequeue runs in a thread of its own with its
own loopback client. "Another server" is a second App over the same storage: its enqueues reach
the first server only through storage (the due watcher's checks).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from pinlater.app import App
from pinlater.idl import ErrorCode as E
from tests.conformance.api import Api
from tests.conformance.faults import intercepted
from tests.conformance.wire import loopback_client

#: long enough that only a wake-up (not the wait ending) can explain an answer within it
LONG_WAIT_MS = 15_000


class Parked:
    """A dequeue running in a thread of its own; `result()` joins it."""

    def __init__(self, api: Api, call: Callable[[Api], object]):
        self._api = Api(loopback_client(api.app.handler), api.app)
        self.started = time.monotonic()
        self.elapsed: float | None = None
        self._outcome: dict = {}
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call) -> None:
        try:
            self._outcome["value"] = call(self._api)
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self._outcome["error"] = exc
        self.elapsed = time.monotonic() - self.started

    def result(self, timeout: float = 30.0):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the parked dequeue never answered"
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["value"]


def wait_parked(api: Api, count: int = 1, timeout: float = 10.0) -> None:
    """Until `count` requests are parked on the server (fails after `timeout`)."""
    deadline = time.monotonic() + timeout
    while api.app.handler.longpoll.parked() < count:
        assert time.monotonic() < deadline, "the dequeue did not park"
        time.sleep(0.005)


@contextlib.contextmanager
def other_server(api: Api) -> Iterator[Api]:
    """A second server (App) over the same storage."""
    app = App(api.app.config)
    try:
        yield Api(loopback_client(app.handler), app)
    finally:
        app.close()


@pytest.mark.rule("W-wait-for-job")
def test_a_parked_dequeue_gets_a_job_enqueued_through_the_same_server(api, queue):
    parked = Parked(api, lambda a: a.dequeue(queue, 5, waitMillis=LONG_WAIT_MS))
    wait_parked(api)
    [d] = api.enqueue(queue, b"wake")
    response = parked.result()
    assert list(response.jobs) == [d] and response.jobs[d] == b"wake"
    assert parked.elapsed < LONG_WAIT_MS / 1000 / 2, "woken, not timed out"
    assert api.state(d) == 1


@pytest.mark.rule("W-wait-for-job")
def test_a_parked_dequeue_gets_a_job_enqueued_through_another_server(api, queue):
    with other_server(api) as other:
        parked = Parked(api, lambda a: a.dequeue(queue, 5, waitMillis=LONG_WAIT_MS))
        wait_parked(api)
        [d] = other.enqueue(queue, b"elsewhere")
        response = parked.result()
    assert list(response.jobs) == [d]
    assert parked.elapsed < LONG_WAIT_MS / 1000 / 2, "woken by the check, not timed out"


@pytest.mark.rule("W-wait-for-job")
def test_a_parked_dequeue_gets_a_delayed_job_when_it_comes_due(api, queue):
    [d] = api.enqueue(queue, {"body": b"soon", "runAfterTimestampMillis": api.now() + 400})
    parked = Parked(api, lambda a: a.dequeue(queue, 5, waitMillis=LONG_WAIT_MS))
    assert list(parked.result().jobs) == [d]
    assert parked.elapsed < LONG_WAIT_MS / 1000 / 2, "woken when due, not timed out"


@pytest.mark.rule("W-wait-for-job")
def test_one_job_wakes_one_of_many_parked_dequeues_and_the_rest_keep_waiting(api, queue):
    parked = [Parked(api, lambda a: a.dequeue(queue, 1, waitMillis=1500)) for _ in range(4)]
    wait_parked(api, 4)
    [d] = api.enqueue(queue, b"one")
    answers = [p.result() for p in parked]
    got = [r.jobs for r in answers if r.jobs]
    assert got == [{d: b"one"}], "exactly one dequeue got the job"


@pytest.mark.rule("W-wait-for-job", "D-empty-unset")
def test_without_wait_a_dequeue_answers_at_once(api, queue):
    started = time.monotonic()
    for wait in (None, 0):
        response = api.dequeue(queue, 5, waitMillis=wait)
        assert response.jobs is None and response.jobMetadata is None
    assert api.app.handler.longpoll.parked() == 0
    assert time.monotonic() - started < 5


@pytest.mark.rule("W-wait-timeout", "D-empty-unset")
def test_a_wait_that_ends_with_no_job_answers_empty(api, queue):
    parked = Parked(api, lambda a: a.dequeue(queue, 5, waitMillis=300))
    response = parked.result()
    assert response.jobs is None and response.jobMetadata is None
    assert parked.elapsed >= 0.29
    assert api.app.handler.longpoll.parked() == 0


@pytest.mark.rule("W-wait-timeout")
def test_a_wait_over_the_cap_is_capped(api, queue, monkeypatch):
    monkeypatch.setattr(api.app.handler, "max_wait_ms", 300)
    parked = Parked(api, lambda a: a.dequeue(queue, 5, waitMillis=2**31 - 1))
    assert parked.result().jobs is None
    assert 0.29 <= parked.elapsed < 10


@pytest.mark.rule("W-wait-timeout")
def test_a_negative_wait_is_rejected_and_a_dry_run_never_waits(api, queue):
    with api.raises(E.UNKNOWN, match="waitMillis"):
        api.dequeue(queue, 5, waitMillis=-1)
    started = time.monotonic()
    assert api.dequeue(queue, 5, dryRun=True, waitMillis=LONG_WAIT_MS).jobs is None
    assert time.monotonic() - started < LONG_WAIT_MS / 1000 / 2


@pytest.mark.rule("W-wait-acks-first", "D-acks-first")
def test_piggy_backed_acks_are_applied_before_parking(api, queue):
    done, failed = api.enqueue(queue, b"done", {"body": b"failed", "numAttemptsAllowed": 3})
    assert sorted(api.dequeue_ids(queue, 2)) == sorted([done, failed])
    ack = api.ack_request(
        queue, succeeded=[done], failed=[(failed, {"retryDelayMillis": 3_600_000})]
    )
    parked = Parked(api, lambda a: a.dequeue(queue, 5, ack=ack, waitMillis=LONG_WAIT_MS))
    wait_parked(api)
    assert api.state(done) == 2, "applied while the request is parked"
    assert (api.state(failed), api.job(failed).attemptsRemaining) == (0, 2)
    [d] = api.enqueue(queue, b"next")
    assert list(parked.result().jobs) == [d]


@pytest.mark.rule("W-empty-partitions")
def test_a_partition_found_empty_is_skipped_until_an_enqueue_through_this_server(api, queue):
    store = api.store
    assert store.empty.enabled
    assert api.dequeue(queue, 5).jobs is None
    with intercepted(store, "dequeue") as calls:
        assert api.dequeue(queue, 5).jobs is None
    assert not calls.count, "every partition is known empty"
    [d] = api.enqueue(queue, {"body": b"x", "priority": 2})
    assert api.dequeue_ids(queue, 5) == [d]


@pytest.mark.rule("W-empty-partitions")
def test_the_map_hides_a_job_enqueued_elsewhere_no_longer_than_its_ttl(api, queue, monkeypatch):
    monkeypatch.setattr(api.store.empty, "ttl", 0.5)
    assert api.dequeue(queue, 5).jobs is None  # every partition known empty here
    with other_server(api) as other:
        [d] = other.enqueue(queue, b"elsewhere")
    started = time.monotonic()
    while not (got := api.dequeue_ids(queue, 5)):
        assert time.monotonic() - started < 5, "the job stayed hidden"
        time.sleep(0.02)
    assert got == [d]
    assert time.monotonic() - started <= 0.5 + 1.5  # the TTL, and slack for a loaded machine
