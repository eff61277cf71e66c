"""Per-queue dequeue rate limits, hot reload, ServerSet share and admission caps on a real
server (App + accept loop, SQLite shards), over real sockets."""

from __future__ import annotations

import threading
import time

import pytest

from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.operating import OperatingServer, sample

CTX = RequestContext(source="limits-test")
RATE_LIMITED = 429


def fill(client, queue: str, n: int) -> None:
    client.createQueue(CTX, queue)
    for start in range(0, n, 500):
        client.enqueueJobs(
            CTX,
            T.PinLaterEnqueueRequest(
                queueName=queue, jobs=[T.PinLaterJob(body=b"j") for _ in range(min(500, n - start))]
            ),
        )


def dequeue(client, queue: str, limit: int, **kwargs):
    return client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=limit, **kwargs))


def drain_for(srv, queue: str, seconds: float, threads: int = 2) -> tuple[int, int]:
    """Greedy consumers for `seconds`; (jobs handed out, DEQUEUE_RATE_LIMITED refusals)."""
    totals = {"jobs": 0, "refused": 0}
    lock = threading.Lock()
    clients = [srv.client() for _ in range(threads)]
    deadline = time.monotonic() + seconds

    def consume(client):
        while time.monotonic() < deadline:
            try:
                n = len(dequeue(client, queue, 50).jobs or {})
                key = "jobs"
            except PinLaterException as exc:
                assert exc.errorCode == RATE_LIMITED, exc
                n, key = 1, "refused"
                time.sleep(0.005)
            with lock:
                totals[key] += n

    workers = [threading.Thread(target=consume, args=(c,)) for c in clients]
    for w in workers:
        w.start()
    for w in workers:
        w.join(seconds + 10)
    return totals["jobs"], totals["refused"]


def write_config(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_rate_limit_holds_within_tolerance_over_a_few_seconds(tmp_path):
    qc = write_config(tmp_path / "q.yaml", "queues: {limited: {max_jobs_per_second: 40}}")
    with OperatingServer(tmp_path, {"queue_config": qc}) as srv:
        fill(srv.client(), "limited", 1000)
        fill(srv.client(), "free", 300)
        jobs, refused = drain_for(srv, "limited", 3.0)
        # 40/s x 3 s plus the initial full bucket (40) plus at most one allowance per
        # concurrent consumer overdrawn; and no less than 80% of the rate
        assert 0.8 * 120 <= jobs <= 120 + 40 + 2 * 40, jobs
        assert refused > 0
        assert len(dequeue(srv.client(), "free", 300).jobs) == 300  # other queues unaffected
        f = srv.scrape()
        assert sample(f, "pinlater_dequeue_refused", queue="limited", reason="rate") == refused
        assert sample(f, "pinlater_dequeue_rate_limit_jobs_per_second", queue="limited") == 40


def test_paused_queue_refuses_but_still_applies_piggy_backed_acks(tmp_path):
    qc = write_config(tmp_path / "q.yaml", "queues: {paused: {max_jobs_per_second: 5}}")
    with OperatingServer(tmp_path, {"queue_config": qc}) as srv:
        c = srv.client()
        fill(c, "paused", 3)
        taken = dequeue(c, "paused", 1).jobs
        write_config(tmp_path / "q.yaml", "queues: {paused: {max_jobs_per_second: 0}}")
        assert srv.app.queue_config.check()
        with pytest.raises(PinLaterException) as info:
            dequeue(
                c,
                "paused",
                1,
                jobAckRequest=T.PinLaterJobAckRequest(
                    queueName="paused",
                    jobsSucceeded=[T.PinLaterJobAckInfo(jobDescriptor=d) for d in taken],
                ),
            )
        assert info.value.errorCode == RATE_LIMITED
        assert info.value.message == (
            "Dequeue rate limit exceeded for queue: paused (the queue is paused)"
        )
        assert (
            c.getJobCount(CTX, T.PinLaterGetJobCountRequest(queueName="paused", jobState=2)) == 1
        )  # the ack went through
        assert (
            sample(srv.scrape(), "pinlater_dequeue_refused", queue="paused", reason="paused") == 1
        )


def test_reload_picks_up_a_changed_file_by_itself_and_survives_a_broken_one(tmp_path):
    qc = write_config(tmp_path / "q.yaml", "queues: {r: {max_jobs_per_second: 0}}")
    with OperatingServer(tmp_path, {"queue_config": qc}) as srv:
        c = srv.client()
        fill(c, "r", 10)
        with pytest.raises(PinLaterException):
            dequeue(c, "r", 1)
        write_config(tmp_path / "q.yaml", "queues: {r: {max_jobs_per_second: 1000}}")
        deadline = time.monotonic() + 10
        while srv.app.limiter.paused("r") and time.monotonic() < deadline:
            time.sleep(0.05)  # the watcher thread polls every second
        assert len(dequeue(c, "r", 5).jobs) == 5
        write_config(tmp_path / "q.yaml", "queues: {r: {max_jobs_per_second: [broken")
        deadline = time.monotonic() + 10
        while (
            sample(srv.scrape(), "pinlater_config_reload_errors", file="queue_config") is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert sample(srv.scrape(), "pinlater_config_reload_errors", file="queue_config") == 1
        assert len(dequeue(c, "r", 5).jobs) == 5  # old config (1000/s) still in force


def test_server_set_share_changes_the_per_server_rate(tmp_path):
    qc = write_config(tmp_path / "q.yaml", "queues: {shared: {max_jobs_per_second: 60}}")
    servers = write_config(tmp_path / "servers", "127.0.0.1:9010\n")
    with OperatingServer(tmp_path, {"queue_config": qc, "server_set_file": servers}) as srv:
        fill(srv.client(), "shared", 1000)
        assert srv.app.limiter.shares() == {"shared": 60}
        write_config(
            tmp_path / "servers",
            "127.0.0.1:9010\n127.0.0.1:9011\n127.0.0.1:9012\n"
            "127.0.0.1:9013\n127.0.0.1:9014\n127.0.0.1:9015\n",
        )
        assert srv.app.queue_config.check()
        assert srv.app.limiter.shares() == {"shared": 10}
        assert (
            sample(srv.scrape(), "pinlater_dequeue_rate_limit_jobs_per_second", queue="shared")
            == 10
        )
        time.sleep(1.0)  # let the (clipped) bucket refill to its new capacity
        jobs, _ = drain_for(srv, "shared", 2.0)
        assert 0.8 * 20 <= jobs <= 20 + 10 + 2 * 10, jobs  # 10/s now, not 60/s


def slow_dequeues(srv, seconds: float) -> None:
    """Make every store dequeue take `seconds` (latency injected above the real SQLite)."""
    real = srv.app.store.dequeue

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    srv.app.store.dequeue = slow


def test_admission_caps_answer_a_dequeue_burst_at_once_and_enqueues_still_pass(tmp_path):
    config = {
        "server": {"worker_threads": 4},
        "admission": {"max_concurrent_dequeues": 2, "max_concurrent_requests": 50},
    }
    with OperatingServer(tmp_path, config) as srv:
        fill(srv.client(), "burst", 100)
        slow_dequeues(srv, 2.0)
        results: list[tuple[str, float]] = []
        lock = threading.Lock()
        clients = [srv.client() for _ in range(12)]

        def one(client):
            start = time.monotonic()
            try:
                dequeue(client, "burst", 1)
                outcome = "ok"
            except PinLaterException as exc:
                outcome = str(exc.errorCode)
            with lock:
                results.append((outcome, time.monotonic() - start))

        threads = [threading.Thread(target=one, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        time.sleep(0.3)
        start = time.monotonic()
        srv.client().enqueueJobs(
            CTX,
            T.PinLaterEnqueueRequest(
                queueName="burst", jobs=[T.PinLaterJob(body=b"during the storm")]
            ),
        )
        enqueue_seconds = time.monotonic() - start
        for t in threads:
            t.join(10)
        ok = [s for o, s in results if o == "ok"]
        refused = [s for o, s in results if o == str(RATE_LIMITED)]
        assert len(ok) == 2 and len(refused) == 10, results
        assert max(refused) < 0.5  # answered at once, not after the slow ones
        assert enqueue_seconds < 0.5  # a worker was free for the enqueue
        f = srv.scrape()
        assert sample(f, "pinlater_admission_refused", kind="dequeues") == 10


def test_per_queue_dequeue_cap_leaves_room_for_other_queues(tmp_path):
    config = {
        "server": {"worker_threads": 8},
        "admission": {"max_concurrent_dequeues": 6, "max_concurrent_dequeues_per_queue": 2},
    }
    with OperatingServer(tmp_path, config) as srv:
        fill(srv.client(), "hot", 50)
        fill(srv.client(), "cold", 5)
        slow_dequeues(srv, 2.0)
        outcomes: list[str] = []
        lock = threading.Lock()

        def one(client, queue):
            try:
                dequeue(client, queue, 1)
                outcome = f"{queue}:ok"
            except PinLaterException as exc:
                outcome = f"{queue}:{exc.errorCode}"
            with lock:
                outcomes.append(outcome)

        threads = [threading.Thread(target=one, args=(srv.client(), "hot")) for _ in range(5)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        cold = threading.Thread(target=one, args=(srv.client(), "cold"))
        cold.start()
        for t in threads + [cold]:
            t.join(10)
        assert sorted(outcomes) == [
            "cold:ok",
            "hot:429",
            "hot:429",
            "hot:429",
            "hot:ok",
            "hot:ok",
        ], outcomes
        assert (
            sample(srv.scrape(), "pinlater_dequeue_refused", queue="hot", reason="concurrency") == 3
        )
