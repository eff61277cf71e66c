"""The connection thread pool: bounded, started on demand, retiring when idle; the linger budget."""

from __future__ import annotations

import threading
import time

from pinlater.server.pool import ThreadPool


def _eventually(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_never_more_threads_than_the_cap_and_every_task_runs():
    pool = ThreadPool(3)
    lock, running, peak, done = threading.Lock(), [0], [0], []
    release = threading.Event()

    def task(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(5)
        with lock:
            running[0] -= 1
            done.append(i)

    for i in range(10):
        pool.submit(task, i)
    assert _eventually(lambda: running[0] == 3)
    assert pool.stats()["threads"] == 3 and pool.stats()["queued"] == 7
    release.set()
    assert _eventually(lambda: len(done) == 10)
    assert peak[0] == 3 and sorted(done) == list(range(10))
    pool.close()


def test_an_idle_thread_takes_the_next_task_instead_of_a_new_thread():
    pool = ThreadPool(8)
    names: list[str] = []
    for i in range(20):
        finished = threading.Event()
        pool.submit(
            lambda _, e=finished: (names.append(threading.current_thread().name), e.set()), i
        )
        assert finished.wait(5)
        assert _eventually(lambda: pool.stats()["idle_threads"] == 1)
    assert len(set(names)) == 1
    pool.close()


def test_a_queued_task_does_not_wait_for_a_busy_thread_while_the_pool_can_grow():
    pool = ThreadPool(4)
    busy = threading.Event()
    pool.submit(lambda _: busy.wait(5), None)
    ran = threading.Event()
    pool.submit(lambda _: ran.set(), None)
    assert ran.wait(1.0)
    busy.set()
    pool.close()


def test_idle_threads_retire_after_the_keepalive_and_on_close():
    pool = ThreadPool(4, keepalive=0.2)
    gate = threading.Event()
    for _ in range(4):
        pool.submit(lambda _: gate.wait(5), None)
    assert _eventually(lambda: pool.stats()["threads"] == 4)
    gate.set()
    assert _eventually(lambda: pool.stats()["threads"] == 0, 3.0)
    pool = ThreadPool(2)
    pool.submit(lambda _: None, None)
    assert _eventually(lambda: pool.stats()["idle_threads"] == 1)
    pool.close()
    assert _eventually(lambda: pool.stats()["threads"] == 0)


def test_a_failing_task_does_not_kill_its_thread():
    pool = ThreadPool(1)
    pool.submit(lambda _: 1 / 0, None)
    ran = threading.Event()
    pool.submit(lambda _: ran.set(), None)
    assert ran.wait(2)
    assert pool.stats()["threads"] == 1
    pool.close()


def test_at_most_half_the_threads_linger():
    pool = ThreadPool(5)
    assert [pool.try_linger(i) for i in range(4)] == [True, True, False, False]
    pool.end_linger(0)
    pool.end_linger(0)  # twice: no drift
    assert [pool.try_linger(i) for i in (5, 6)] == [True, False]
    assert ThreadPool(1).try_linger("a") is False  # a lone thread never lingers
