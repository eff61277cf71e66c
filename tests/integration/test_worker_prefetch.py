"""The Worker's prefetch against a real server (SQLite): fast handlers are fed in big batches,
slow handlers never hold more jobs than their threads (plus what they start within
prefetch_wait), and the threads stay the configured ones."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.worker_handlers import CountingClient, wait_for
from tests.support.server_process import ServerProcess
from worker_sdk import JobState, Worker
from worker_sdk.slots import MAX_DEQUEUES

pytestmark = pytest.mark.backend("sqlite")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("worker_prefetch")
    with ServerProcess({"janitor": {"enabled": False}}, tmp) as running:
        yield running


@pytest.fixture
def client(server):
    with CountingClient([f"{server.host}:{server.port}"], source="prefetch-test") as c:
        yield c


def _drain(worker: Worker, until, timeout: float = 60.0) -> None:
    thread = worker.start()
    try:
        wait_for(until, timeout)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_fast_handler_is_fed_in_batches_far_bigger_than_its_threads(client):
    client.create_queue("fast")
    for _ in range(3):
        client.enqueue("fast", [b"x"] * 1000)
    worker = Worker(client, "fast", lambda job: None, concurrency=2, idle_backoff=(0.01, 0.05))
    _drain(worker, lambda: client.count("fast", JobState.SUCCEEDED) == 3000)
    assert client.asked[0] == 2  # nothing measured yet: one job per thread
    assert max(client.asked) >= 100
    assert len(client.asked) < 200  # not 1500 calls of 2


def test_a_slow_handler_holds_no_more_jobs_than_its_threads(client):
    client.create_queue("slow")
    client.enqueue("slow", [b"x"] * 12)
    threads_before = threading.active_count()
    seen: list[tuple[int, int]] = []  # (jobs IN_PROGRESS on the server, worker threads)

    def handler(job):
        time.sleep(0.2)  # 3 threads start 0.75 jobs in 50 ms: nothing is prefetched

    worker = Worker(client, "slow", handler, concurrency=3, idle_backoff=(0.01, 0.05))

    def done() -> bool:
        seen.append(
            (client.count("slow", JobState.IN_PROGRESS), threading.active_count() - threads_before)
        )
        return client.count("slow", JobState.SUCCEEDED) == 12

    _drain(worker, done)
    assert max(in_progress for in_progress, _ in seen) == 3
    assert all(1 <= n <= 3 for n in client.asked)
    assert client.most_at_once == 1  # slow handlers: one dequeue call at a time
    # the handler threads, the loop and the dequeue call threads (one call at a time here)
    assert max(threads for _, threads in seen) <= 3 + 1 + MAX_DEQUEUES


def test_batches_capped_at_the_threads_still_overlap_calls_on_a_backlog(client):
    """max_batch = concurrency (a full call is then no bigger than the threads): a backlog
    still gets overlapping calls once the worker prefetches."""
    client.create_queue("capped")
    client.enqueue("capped", [b"x"] * 1000)
    worker = Worker(client, "capped", lambda job: None, concurrency=8, max_batch=8)
    _drain(worker, lambda: client.count("capped", JobState.SUCCEEDED) == 1000)
    assert max(client.asked) == 8
    assert client.most_at_once >= 2
