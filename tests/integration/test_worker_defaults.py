"""The Worker with every option at its default against a real server on every backend: a fast
handler is fed in big batches (few calls for many jobs, overlapping while there is a backlog),
a slow one runs on exactly the default threads and holds no more jobs than them, and an idle
worker keeps a single long-poll call. What the defaults promise is in the README ("How many
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
    assert client.most_at_once >= 2  # a backlog: calls overlap (worker_sdk/slots.py)
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


def test_defaults_keep_one_long_poll_on_a_queue_that_went_idle(client):
    queue = _queue(client, 2000)  # a backlog first: prefetching, calls overlapping
    worker = Worker(client, queue, lambda job: None)
    thread = worker.start()
    try:
        wait_for(lambda: client.count(queue, JobState.SUCCEEDED) == 2000, 60)
        time.sleep(1.5)  # the overlapping calls that found it empty end their long-poll (1 s)
        with client._lock:
            client.asked.clear()
            client.most_at_once = client._at_once
        time.sleep(2.5)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert client.most_at_once == 1
    assert 1 <= len(client.asked) <= 4  # one call held up to long_poll (1 s) at a time
