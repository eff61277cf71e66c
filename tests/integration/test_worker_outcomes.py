"""The Worker against a real `pinlater-server` on every backend: handler outcome -> ack, retry
delays, FailJob, checkpoints and heartbeats past the claim timeout, graceful stop.

The server's janitor runs every 0.2 s with a 2 s claim timeout, so claim expiry is observable
in a few seconds. Workers run in this process on their own thread; every wait is bounded.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from contextlib import contextmanager

import pytest

from tests.integration.worker_handlers import wait_for
from tests.support.server_process import ServerProcess
from tests.support.storage import KINDS, backend_section
from worker_sdk import (
    ConstantRetry,
    FailJob,
    Job,
    JobState,
    PinLaterClient,
    RetryJob,
    Worker,
)

CLAIM_TIMEOUT = 2.0
CONFIG = {"janitor": {"interval_seconds": 0.2, "claim_timeout_seconds": CLAIM_TIMEOUT}}
_names = itertools.count()


@pytest.fixture(scope="module", params=KINDS)
def server(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"worker_outcomes_{request.param}")
    with (
        backend_section(request.param, tmp) as backend,
        ServerProcess({**CONFIG, "backend": backend}, tmp) as running,
    ):
        yield running


@pytest.fixture
def client(server):
    with PinLaterClient([f"{server.host}:{server.port}"], source="worker-test") as c:
        yield c


@pytest.fixture
def queue(client):
    name = f"wq{next(_names)}"
    client.create_queue(name)
    return name


class Runs:
    """Thread-safe record of handler calls: (descriptor, attempt, body)."""

    def __init__(self):
        self.calls: list[tuple[str, int, bytes]] = []
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0

    def enter(self, job):
        with self.lock:
            self.calls.append((job.descriptor, job.attempt, job.body))
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def leave(self):
        with self.lock:
            self.active -= 1

    def count(self, descriptor=None) -> int:
        with self.lock:
            return sum(1 for c in self.calls if descriptor in (None, c[0]))


@contextmanager
def running(worker: Worker):
    thread = worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


def state_of(client, descriptor):
    return client.lookup([descriptor])[descriptor]


def test_returning_handler_acks_success_once_per_job(client, queue):
    ids = set(client.enqueue(queue, [f"job{i}".encode() for i in range(30)]))
    runs = Runs()

    def handler(job):
        runs.enter(job)
        time.sleep(0.01)
        runs.leave()
        return f"done {job.body.decode()}"

    with running(Worker(client, queue, handler, concurrency=4)) as worker:
        wait_for(lambda: client.count(queue, JobState.SUCCEEDED) == 30, 20, what="30 succeeded")
        wait_for(lambda: worker.stats().acks_pending == 0, 5, what="acks flushed")
    assert collections.Counter(d for d, _, _ in runs.calls) == {d: 1 for d in ids}
    assert runs.max_active <= 4
    stats = worker.stats()
    assert (stats.succeeded, stats.failed, stats.in_flight) == (30, 0, 0)
    some = sorted(ids)[0]
    assert state_of(client, some).custom_status.startswith("done job")


def test_dequeues_no_more_jobs_than_free_slots(client, queue):
    client.enqueue(queue, [b"slow"] * 8)
    seen_in_progress = []

    def handler(job):
        time.sleep(0.3)

    with running(Worker(client, queue, handler, concurrency=2, idle_backoff=(0.01, 0.05))):
        deadline = time.monotonic() + 20
        while client.count(queue, JobState.SUCCEEDED) < 8 and time.monotonic() < deadline:
            seen_in_progress.append(client.count(queue, JobState.IN_PROGRESS))
            time.sleep(0.02)
    assert client.count(queue, JobState.SUCCEEDED) == 8
    assert max(seen_in_progress) == 2  # claimed jobs never wait in a local buffer


def test_exception_fails_the_attempt_with_the_policy_delay_and_a_truncated_status(client, queue):
    [job_id] = client.enqueue(queue, [Job(b"x", attempts=3)])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        raise ValueError("boom " + "x" * 5000)

    with running(Worker(client, queue, handler, retry=ConstantRetry(30), status_max_chars=200)):
        wait_for(
            lambda: state_of(client, job_id).state is JobState.PENDING and runs.count() == 1,
            10,
            what="failure ack",
        )
    info = state_of(client, job_id)
    assert info.attempts_remaining == 2
    assert 29_000 <= info.run_after_ms - info.updated_at_ms <= 30_500
    assert info.custom_status.startswith("attempt 1: ValueError: boom xxx")
    assert len(info.custom_status) == 200 and info.custom_status.endswith("...")
    assert runs.count() == 1  # not run again before its retry delay


def test_retry_job_delay_overrides_the_policy(client, queue):
    [job_id] = client.enqueue(queue, [Job(b"x", attempts=3)])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        if job.attempt == 1:
            raise RetryJob("not yet", delay=0.5)

    started = time.monotonic()
    with running(Worker(client, queue, handler, retry=ConstantRetry(60), idle_backoff=(0.05, 0.1))):
        wait_for(
            lambda: state_of(client, job_id).state is JobState.SUCCEEDED,
            10,
            what="success on the retry",
        )
    assert time.monotonic() - started >= 0.5
    assert [a for _, a, _ in runs.calls] == [1, 2]
    info = state_of(client, job_id)
    assert info.attempts_remaining == 2 and "attempt 1: RetryJob: not yet" in info.custom_status


def test_failure_on_the_last_attempt_is_final(client, queue):
    [job_id] = client.enqueue(queue, [Job(b"x", attempts=2)])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        raise RuntimeError(f"bad {job.attempt}")

    with running(Worker(client, queue, handler, retry=0, idle_backoff=(0.05, 0.1))):
        wait_for(lambda: state_of(client, job_id).state is JobState.FAILED, 10, what="FAILED")
        time.sleep(0.3)
    assert [a for _, a, _ in runs.calls] == [1, 2]
    status = state_of(client, job_id).custom_status
    assert "attempt 1: RuntimeError: bad 1" in status and "attempt 2: RuntimeError: bad 2" in status


def test_fail_job_fails_at_once_whatever_attempts_remain(client, queue):
    [job_id] = client.enqueue(queue, [Job(b"x", attempts=5)])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        raise FailJob("cannot ever work")

    with running(Worker(client, queue, handler, retry=0, idle_backoff=(0.05, 0.1))):
        wait_for(lambda: state_of(client, job_id).state is JobState.FAILED, 10, what="FAILED")
        time.sleep(0.3)
    info = state_of(client, job_id)
    assert runs.count() == 1
    assert (info.attempts_allowed, info.attempts_remaining) == (1, 0)
    assert "FailJob: cannot ever work" in info.custom_status


def test_without_heartbeat_a_long_job_is_reclaimed_and_the_stale_ack_is_fenced(client, queue):
    """The control for the heartbeat tests: past the claim timeout the job runs again."""
    [job_id] = client.enqueue(queue, [Job(b"long", attempts=3)])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        if job.attempt == 1:
            time.sleep(CLAIM_TIMEOUT + 2)
            return "first run"
        for _ in range(10):  # still running (and keeping its claim) when the first run acks
            time.sleep(0.5)
            job.checkpoint()
        return "second run"

    with running(Worker(client, queue, handler, concurrency=2, idle_backoff=(0.05, 0.1))):
        wait_for(lambda: runs.count() == 2, 15, what="the job to run again")
        second_claim = wait_for(lambda: state_of(client, job_id).claim, 5)
        time.sleep(2.5)  # the first run has finished and its ack was sent
        info = state_of(client, job_id)
        assert info.state is JobState.IN_PROGRESS and info.claim == second_claim
        wait_for(lambda: state_of(client, job_id).state is JobState.SUCCEEDED, 10)
    assert "second run" in state_of(client, job_id).custom_status
    assert "first run" not in state_of(client, job_id).custom_status


def test_automatic_heartbeat_keeps_a_job_past_the_claim_timeout(client, queue):
    [job_id] = client.enqueue(queue, [Job(b"long", attempts=3)])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        time.sleep(CLAIM_TIMEOUT * 2 + 0.5)

    with running(Worker(client, queue, handler, concurrency=2, heartbeat=0.5)):
        wait_for(lambda: state_of(client, job_id).state is JobState.SUCCEEDED, 15)
    assert runs.count() == 1
    assert state_of(client, job_id).attempts_remaining == 3


def test_manual_checkpoints_keep_a_job_past_the_claim_timeout(client, queue):
    [job_id] = client.enqueue(queue, [b"long"])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        for _ in range(5):
            time.sleep(1)
            job.checkpoint()

    with running(Worker(client, queue, handler, concurrency=2)):
        wait_for(lambda: state_of(client, job_id).state is JobState.SUCCEEDED, 15)
    assert runs.count() == 1


def test_reschedule_with_a_new_body_keeps_attempts_and_is_not_acked(client, queue):
    [job_id] = client.enqueue(queue, [Job(b"step1", attempts=2)])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        if job.body == b"step1":
            job.checkpoint(new_body=b"step2", reschedule=True, delay=0.3, status="half; ")
            return "ignored: the job was given back"
        return "step2 done; "

    with running(Worker(client, queue, handler, idle_backoff=(0.05, 0.1))) as worker:
        wait_for(lambda: state_of(client, job_id).state is JobState.SUCCEEDED, 10)
    assert [(a, b) for _, a, b in runs.calls] == [(1, b"step1"), (1, b"step2")]
    info = state_of(client, job_id)
    assert info.attempts_remaining == 2
    assert "half; " in info.custom_status and "step2 done" in info.custom_status
    assert "ignored" not in info.custom_status
    assert (worker.stats().rescheduled, worker.stats().succeeded) == (1, 1)


def test_stop_lets_running_handlers_finish_and_acks_them(client, queue):
    ids = client.enqueue(queue, [b"a", b"b", b"c", b"d", b"e"])
    runs = Runs()

    def handler(job):
        runs.enter(job)
        time.sleep(1.0)

    worker = Worker(client, queue, handler, concurrency=3)
    thread = worker.start()
    wait_for(lambda: runs.count() == 3, 10, what="3 running")
    worker.stop()
    thread.join(15)
    assert not thread.is_alive()
    states = collections.Counter(i.state for i in client.lookup(ids).values())
    assert states == {JobState.SUCCEEDED: 3, JobState.PENDING: 2}
    assert runs.count() == 3


def test_shutdown_deadline_leaves_a_stuck_job_for_the_claim_timeout(client, queue):
    [job_id] = client.enqueue(queue, [b"stuck"])
    release = threading.Event()
    started = threading.Event()

    def handler(job):
        started.set()
        release.wait(20)

    worker = Worker(client, queue, handler, shutdown_timeout=0.5)
    result = {}
    thread = threading.Thread(target=lambda: result.update(clean=worker.run(handle_signals=False)))
    thread.start()
    try:
        assert started.wait(10)
        begun = time.monotonic()
        worker.stop()
        thread.join(10)
        assert time.monotonic() - begun < 3 and result == {"clean": False}
        assert state_of(client, job_id).state is JobState.IN_PROGRESS
        wait_for(
            lambda: state_of(client, job_id).state is JobState.PENDING,
            10,
            what="the janitor to reclaim it",
        )
    finally:
        release.set()
