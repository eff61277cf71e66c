"""The Worker with every option at its default against a real server on every backend: a fast
handler is fed in big batches (few calls for many jobs), a slow one runs on exactly the default
threads and holds no more jobs than them. What the defaults promise is in the README ("How many
jobs a worker holds"); the throughput they reach is scripts/bench_ceilings.py's worker line."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from tests.integration.worker_handlers import CountingClient, wait_for
from tests.support.server_process import ServerProcess
from tests.support.storage import KINDS, backend_section
from worker_sdk import JobState, Worker

DEFAULT_THREADS = 4
_names = itertools.count()


@pytest.fixture(scope="module", params=KINDS)
def server(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"worker_defaults_{request.param}")
    with (
        backend_section(request.param, tmp) as backend,
        ServerProcess({"janitor": {"enabled": False}, "backend": backend}, tmp) as running,
    ):
        yield running


@pytest.fixture
def client(server):
    with CountingClient([f"{server.host}:{server.port}"], source="defaults-test") as c:
        yield c


def _queue(client, jobs: int) -> str:
    name = f"dq{next(_names)}"
    client.create_queue(name)
    for start in range(0, jobs, 1000):
        client.enqueue(name, [b"x"] * min(1000, jobs - start))
    return name


def _drain(worker: Worker, until, timeout: float = 60.0) -> None:
    thread = worker.start()
    try:
        wait_for(until, timeout, what="the queue drained")
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_defaults_feed_a_no_op_handler_in_big_batches(client):
    queue = _queue(client, 5000)
    worker = Worker(client, queue, lambda job: None)
    _drain(worker, lambda: client.count(queue, JobState.SUCCEEDED) == 5000)
    assert client.asked[0] == DEFAULT_THREADS  # nothing measured yet: one job per thread
    assert max(client.asked) >= 500
    assert len(client.asked) < 60  # not 1250 calls of 4
    stats = worker.stats()
    assert (stats.succeeded, stats.acks_sent, stats.in_flight) == (5000, 5000, 0)


def test_defaults_run_a_slow_handler_on_exactly_the_default_threads(client):
    queue = _queue(client, 12)
    running, peak, lock = [0], [0], threading.Lock()
    held: list[int] = []  # jobs IN_PROGRESS on the server, sampled while it drains

    def handler(job):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)  # slower than threads x prefetch_wait (0.2 s): nothing prefetched
        with lock:
            running[0] -= 1

    def drained() -> bool:
        held.append(client.count(queue, JobState.IN_PROGRESS))
        return client.count(queue, JobState.SUCCEEDED) == 12

    _drain(Worker(client, queue, handler), drained)
    assert peak[0] == DEFAULT_THREADS
    assert max(held) <= DEFAULT_THREADS
    assert all(1 <= n <= DEFAULT_THREADS for n in client.asked)
