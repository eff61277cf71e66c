"""Worker loop logic against a scripted stand-in for PinLaterClient (no server, no database):
slot-bounded dequeues and prefetch, piggy-backed acks, ack retry on failure, rate limiting,
FailJob, stop."""

from __future__ import annotations

import collections
import logging
import threading
import time

import pytest

from tests.integration.worker_handlers import wait_for
from worker_sdk import DequeuedJob, FailJob, RetryJob, Worker
from worker_sdk.errors import DequeueRateLimited, PinLaterTransportError, QueueNotFound


class ScriptedClient:
    """dequeue hands out `jobs` in order; `errors[method]` holds what the next calls of that
    method raise (None: nothing). Every call is recorded as (time, method, *args, error)."""

    def __init__(self, jobs=(), queues=("q",)):
        self.pending = collections.deque(jobs)
        self.queues = set(queues)
        self.errors: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self.calls: list[tuple] = []
        self.lock = threading.Lock()

    def _record(self, *call):
        with self.lock:
            error = self.errors[call[0]].popleft() if self.errors[call[0]] else None
            self.calls.append((time.monotonic(), *call, error))
        if error is not None:
            raise error

    def queue_names(self):
        self._record("queue_names")
        with self.lock:
            return sorted(self.queues)

    def dequeue(self, queue, limit, acks=None, wait_ms=0):
        self._record("dequeue", limit, acks)
        with self.lock:
            return [self.pending.popleft() for _ in range(min(limit, len(self.pending)))]

    def ack(self, queue, succeeded=(), failed=()):
        self._record("ack", list(succeeded), list(failed))

    def checkpoint(self, queue, requests):
        self._record("checkpoint", list(requests))

    def delivered(self):
        """(succeeded, failed) AckInfos the server would have applied: those of calls that did
        not raise, and of rate-limited dequeues (the server applies their acks)."""
        ok, failed = [], []
        with self.lock:
            calls = [
                c for c in self.calls if c[-1] is None or isinstance(c[-1], DequeueRateLimited)
            ]
        for call in calls:
            if call[1] == "dequeue" and call[3] is not None:
                ok += call[3].succeeded
                failed += call[3].failed
            elif call[1] == "ack":
                ok += call[2]
                failed += call[3]
        return ok, failed

    def of(self, method):
        with self.lock:
            return [c for c in self.calls if c[1] == method]


def jobs(n, remaining=2):
    return [DequeuedJob(f"q:s1:p1:{i}", b"body", 2, remaining, f"claim{i}") for i in range(n)]


def run_until(worker, predicate, timeout=10):
    thread = worker.start()
    try:
        wait_for(predicate, timeout)
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()


def fast(client, handler, **options):
    defaults = dict(idle_backoff=(0.01, 0.02), error_backoff=(0.01, 0.02), ack_delay=0.01)
    return Worker(client, "q", handler, **{**defaults, **options})


def test_without_prefetch_never_asks_for_more_jobs_than_free_threads():
    client = ScriptedClient(jobs(10))
    gate = threading.Semaphore(0)
    active, peak = [0], [0]
    lock = threading.Lock()

    def handler(job):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        gate.acquire(timeout=5)
        with lock:
            active[0] -= 1

    worker = fast(client, handler, concurrency=3, max_prefetch=0)
    thread = worker.start()
    wait_for(lambda: active[0] == 3, 5)
    time.sleep(0.1)
    busy_limits = [c[2] for c in client.of("dequeue")]
    assert busy_limits[0] == 3 and len(busy_limits) == 1  # full: no dequeue at all
    for _ in range(10):
        gate.release()
    wait_for(lambda: worker.stats().succeeded == 10, 5)
    worker.stop()
    thread.join(10)
    assert peak[0] == 3 and all(1 <= c[2] <= 3 for c in client.of("dequeue"))


def test_acks_ride_on_the_next_dequeue_with_the_servers_claims():
    client = ScriptedClient(jobs(3))
    worker = fast(client, lambda job: None, idle_backoff=(5, 5))  # idle: acks go on their own
    run_until(worker, lambda: worker.stats().acks_sent == 3)
    ok, failed = client.delivered()
    assert sorted((a.descriptor, a.claim) for a in ok) == [
        (f"q:s1:p1:{i}", f"claim{i}") for i in range(3)
    ]
    assert failed == []


def test_acks_that_fail_to_send_are_retried_not_dropped():
    client = ScriptedClient(jobs(4))
    for _ in range(3):
        client.errors["ack"].append(PinLaterTransportError("down"))
    client.errors["dequeue"].extend([None] + [PinLaterTransportError("down")] * 3)

    def handler(job):
        if job.descriptor.endswith("3"):
            raise RetryJob(delay=2)

    worker = fast(client, handler, concurrency=4)
    run_until(worker, lambda: worker.stats().acks_sent == 4)
    ok, failed = client.delivered()
    assert sorted(a.descriptor for a in ok) == [f"q:s1:p1:{i}" for i in range(3)]
    assert [(a.descriptor, a.retry_delay_ms) for a in failed] == [("q:s1:p1:3", 2000)]
    assert worker.stats().rpc_errors >= 3


def test_rate_limited_dequeue_counts_its_acks_as_applied_and_backs_off():
    client = ScriptedClient(jobs(2))
    worker = fast(client, lambda job: None, idle_backoff=(0.2, 0.2), concurrency=2)
    client.errors["dequeue"].extend([None, DequeueRateLimited("slow down")])
    # the second dequeue carries acks and is refused; the server applied them anyway
    worker.ack_delay = 5  # keep the acks for the piggy-back
    run_until(worker, lambda: worker.stats().acks_sent == 2 and len(client.of("dequeue")) >= 3)
    calls = client.of("dequeue")
    assert isinstance(calls[1][-1], DequeueRateLimited) and calls[1][3].succeeded
    ok, _ = client.delivered()
    assert collections.Counter(a.descriptor for a in ok) == {"q:s1:p1:0": 1, "q:s1:p1:1": 1}
    assert calls[2][0] - calls[1][0] >= 0.09  # backed off (0.2 s with jitter down to half)


def test_empty_queue_backs_off_up_to_the_cap():
    client = ScriptedClient()
    worker = fast(client, lambda job: None, idle_backoff=(0.02, 0.2))
    thread = worker.start()
    time.sleep(1.0)
    worker.stop()
    thread.join(5)
    n = len(client.of("dequeue"))
    assert 4 <= n <= 15  # not a busy loop, but still polling


def test_acks_of_a_deleted_queue_are_dropped_with_an_error(caplog):
    client = ScriptedClient(jobs(1))
    client.errors["ack"].append(QueueNotFound("gone"))

    def handler(job):  # finish after the empty dequeue: the ack then goes in an ack call
        wait_for(lambda: len(client.of("dequeue")) >= 2, 5)

    worker = fast(client, handler, idle_backoff=(5, 5))
    with caplog.at_level(logging.ERROR, logger="worker_sdk.worker"):
        run_until(worker, lambda: client.of("ack"))
        time.sleep(0.1)
    assert len(client.of("ack")) == 1 and worker.stats().acks_pending == 0
    assert "dropping 1 acks (q:s1:p1:0)" in caplog.text


def test_fail_job_checkpoints_one_attempt_then_acks_failure_unless_already_last():
    client = ScriptedClient(jobs(1, remaining=2) + [DequeuedJob("q:s1:p1:9", b"b", 2, 1, "claim9")])

    def handler(job):
        raise FailJob("no")

    worker = fast(client, handler, retry=60)
    run_until(worker, lambda: worker.stats().acks_sent == 2)
    [checkpoint] = client.of("checkpoint")
    [request] = checkpoint[2]
    assert (request.descriptor, request.claim, request.attempts_allowed) == (
        "q:s1:p1:0",
        "claim0",
        1,
    )
    _, failed = client.delivered()
    assert sorted((a.descriptor, a.retry_delay_ms) for a in failed) == [
        ("q:s1:p1:0", 0),
        ("q:s1:p1:9", 0),
    ]
    assert sorted(a.append_status for a in failed) == [
        "attempt 1: FailJob: no; ",
        "attempt 2: FailJob: no; ",
    ]


def test_a_broken_retry_policy_still_acks_the_failure():
    client = ScriptedClient(jobs(1))

    def policy(job, error):
        raise ZeroDivisionError

    worker = fast(client, lambda job: 1 / 0, retry=policy)
    run_until(worker, lambda: worker.stats().acks_sent == 1)
    [ack] = client.delivered()[1]
    assert ack.retry_delay_ms == 0 and "ZeroDivisionError" in ack.append_status


def test_exponential_policy_delay_reaches_the_ack():
    client = ScriptedClient([DequeuedJob("q:s1:p1:0", b"b", 10, 7, "c")])  # attempt 4
    from worker_sdk import ExponentialRetry

    worker = fast(client, lambda job: 1 / 0, retry=ExponentialRetry(base=1, max=100, jitter=0))
    run_until(worker, lambda: worker.stats().acks_sent == 1)
    assert client.delivered()[1][0].retry_delay_ms == 8000


def test_stop_waits_for_handlers_then_flushes_their_acks():
    client = ScriptedClient(jobs(2))
    worker = fast(
        client, lambda job: time.sleep(0.3), concurrency=2, ack_delay=10, idle_backoff=(10, 10)
    )
    thread = worker.start()
    wait_for(lambda: worker.stats().dequeued == 2, 5)
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert len(client.delivered()[0]) == 2 and len(client.of("dequeue")) == 1


def test_run_reports_unsent_acks_as_not_clean():
    client = ScriptedClient(jobs(1))
    client.errors["ack"].extend([PinLaterTransportError("down")] * 1000)
    client.errors["dequeue"].extend([None] + [PinLaterTransportError("down")] * 1000)
    worker = fast(client, lambda job: None, ack_flush_timeout=0.3)
    result = {}
    thread = threading.Thread(target=lambda: result.update(clean=worker.run(handle_signals=False)))
    thread.start()
    wait_for(lambda: worker.stats().succeeded == 1, 5)
    worker.stop()
    thread.join(5)
    assert result == {"clean": False} and worker.stats().acks_pending == 1


@pytest.mark.parametrize("bad", [dict(concurrency=0), dict(max_batch=0), dict(heartbeat=0)])
def test_invalid_options_are_rejected(bad):
    with pytest.raises(ValueError):
        Worker(ScriptedClient(), "q", lambda job: None, **bad)


def test_a_missing_queue_is_reported_at_start():
    client = ScriptedClient(jobs(1), queues=("other",))
    worker = fast(client, lambda job: None)
    with pytest.raises(QueueNotFound):
        worker.run(handle_signals=False)
    assert client.of("dequeue") == []


def test_wait_for_queue_logs_once_and_starts_when_the_queue_appears(caplog):
    client = ScriptedClient(jobs(1), queues=())
    worker = fast(client, lambda job: None, wait_for_queue=True, queue_poll_interval=0.05)
    with caplog.at_level(logging.INFO, logger="worker_sdk.worker"):
        thread = worker.start()
        wait_for(lambda: len(client.of("queue_names")) >= 3, 5)
        assert client.of("dequeue") == []
        client.queues.add("q")
        wait_for(lambda: worker.stats().acks_sent == 1, 5)
        worker.stop()
        thread.join(10)
    messages = [r.getMessage() for r in caplog.records]
    waiting = [m for m in messages if "does not exist yet" in m]
    assert waiting == [
        "queue q does not exist yet: waiting for it to be created (checking every 0.05s)"
    ]
    assert "queue q exists now: starting" in messages


def test_stop_ends_the_wait_for_a_queue():
    client = ScriptedClient(queues=())
    worker = fast(client, lambda job: None, wait_for_queue=True, queue_poll_interval=30)
    thread = worker.start()
    wait_for(lambda: client.of("queue_names"), 5)
    started = time.monotonic()
    worker.stop()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 2


def test_failed_calls_are_logged_once_each_with_the_count_and_the_recovery(caplog):
    client = ScriptedClient(jobs(1))
    client.errors["queue_names"].append(PinLaterTransportError("cannot connect"))
    client.errors["dequeue"].extend([PinLaterTransportError("reset")] * 2)
    worker = fast(client, lambda job: None)
    with caplog.at_level(logging.INFO, logger="worker_sdk.worker"):
        run_until(worker, lambda: worker.stats().acks_sent == 1)
    messages = [r.getMessage() for r in caplog.records]
    failures = [m for m in messages if " failed (" in m]
    assert [m.split(";")[0] for m in failures] == [
        "queue check on queue q failed (1 in a row): TRANSPORT_ERROR: cannot connect",
        "dequeue on queue q failed (1 in a row): TRANSPORT_ERROR: reset",
        "dequeue on queue q failed (2 in a row): TRANSPORT_ERROR: reset",
    ]
    assert "queue check on queue q works again after 1 failed calls" in messages
    assert "dequeue on queue q works again after 2 failed calls" in messages


def test_each_outcome_is_logged_once_at_its_level(caplog):
    client = ScriptedClient(
        [
            DequeuedJob("q:s1:p1:1", b"ok", 2, 2, "c1"),
            DequeuedJob("q:s1:p1:2", b"fail", 2, 2, "c2"),
            DequeuedJob("q:s1:p1:3", b"retry", 2, 2, "c3"),
            DequeuedJob("q:s1:p1:4", b"retry", 2, 1, "c4"),
            DequeuedJob("q:s1:p1:5", b"boom", 3, 3, "c5"),
        ]
    )

    def handler(job):
        if job.body == b"fail":
            raise FailJob("no address")
        if job.body == b"retry":
            raise RetryJob("later", delay=30)
        if job.body == b"boom":
            raise KeyError("x")

    worker = fast(client, handler, retry=5, concurrency=5)
    with caplog.at_level(logging.DEBUG, logger="worker_sdk.worker"):
        run_until(worker, lambda: worker.stats().acks_sent == 5)
    by_job = {}
    for record in caplog.records:
        words = record.getMessage().split()
        if words[0] == "job":
            by_job.setdefault(words[1], []).append((record.levelname, record.getMessage()))
    assert by_job == {
        "q:s1:p1:1": [("DEBUG", "job q:s1:p1:1 succeeded (attempt 1)")],
        "q:s1:p1:2": [("INFO", "job q:s1:p1:2 attempt 1 gave up: FailJob: no address; FAILED now")],
        "q:s1:p1:3": [
            ("INFO", "job q:s1:p1:3 attempt 1 failed: RetryJob: later; next attempt in 30s")
        ],
        "q:s1:p1:4": [
            ("INFO", "job q:s1:p1:4 attempt 2 failed: RetryJob: later; no attempts left: FAILED")
        ],
        "q:s1:p1:5": [
            ("WARNING", "job q:s1:p1:5 attempt 1 failed: KeyError: 'x'; next attempt in 5s")
        ],
    }


class LongPollClient(ScriptedClient):
    """An empty dequeue is held for its wait (until `hang_up` is set), as a server holds it."""

    def __init__(self, jobs=()):
        super().__init__(jobs)
        self.hang_up = threading.Event()

    def dequeue(self, queue, limit, acks=None, wait_ms=0):
        found = super().dequeue(queue, limit, acks, wait_ms)
        if not found:
            self.hang_up.wait(wait_ms / 1000)
        return found


def test_fast_jobs_acks_do_not_wait_for_a_long_job_their_thread_went_on_to():
    """Handler threads record fast jobs in groups (worker_sdk.worker PUBLISH_EVERY); a thread
    that goes on to a long job leaves its unrecorded predecessors to the loop, which records
    them within PUBLISH_INTERVAL, so their acks go out while the long job runs (not after it,
    nor after the loop's 1 s wait while the dequeues in flight long-poll)."""
    client = LongPollClient(jobs(7))
    release, long_started = threading.Event(), threading.Event()

    def handler(job):
        if job.descriptor.endswith(":6"):
            long_started.set()
            release.wait(10)

    worker = fast(client, handler, concurrency=1, long_poll=3)
    thread = worker.start()
    try:
        assert long_started.wait(5)
        started = time.monotonic()
        wait_for(lambda: len(client.delivered()[0]) == 6, 5)
        assert time.monotonic() - started < 0.5
        assert worker.stats().in_flight == 1  # the long job, still running
        assert worker.stats().succeeded == 6
    finally:
        release.set()
        client.hang_up.set()
        worker.stop()
        thread.join(10)
    assert len(client.delivered()[0]) == 7
