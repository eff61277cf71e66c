"""ParkedDequeues (pinlater/handler/longpoll.py) on its own: a signal between a waiter's check
and its parking is never lost, waiters wake oldest first and as many as the signal names, a
full batch wakes the next, a wait that ends answers empty, and a shutdown answers everyone."""

from __future__ import annotations

import threading
import time

from pinlater.handler.longpoll import Deferred, ParkedDequeues, Waiter
from pinlater.storage.signals import QueueSignals

EMPTY = "empty"


class Queue:
    """A stand-in job queue: `take(n)` hands out up to n of its jobs (what an attempt does)."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.lock = threading.Lock()

    def attempt(self, limit: int):
        with self.lock:
            got, self.jobs = self.jobs[:limit], self.jobs[limit:]
        return (got or EMPTY), len(got)


def waiter(queue: Queue, limit: int = 1, wait: float = 10.0) -> Waiter:
    return Waiter("q", limit, lambda: queue.attempt(limit), time.monotonic() + wait, lambda: EMPTY)


def result(deferred: Deferred, timeout: float = 10.0):
    done = threading.Event()
    out: list = []
    deferred.add_callback(lambda value, error: (out.append(error or value), done.set()))
    assert done.wait(timeout), "never answered"
    return out[0]


def test_a_signal_between_the_check_and_the_park_is_not_lost():
    signals, queue = QueueSignals(), Queue()
    parking = ParkedDequeues(signals)
    try:
        generation = signals.generation("q")  # the waiter's check begins (and finds nothing)
        queue.jobs.append("job")
        signals.changed("q", 1)  # an enqueue lands before the waiter parks: nobody to wake
        deferred = parking.park(waiter(queue, wait=60), generation)
        assert result(deferred) == ["job"], "it looked again at once"
    finally:
        parking.close()


def test_waiters_wake_oldest_first_and_as_many_as_the_signal_names():
    signals, queue = QueueSignals(), Queue()
    parking = ParkedDequeues(signals)
    try:
        waiters = [parking.park(waiter(queue), signals.generation("q")) for _ in range(3)]
        assert parking.parked() == 3
        queue.jobs += ["a", "b"]
        signals.changed("q", 2)
        assert [result(d) for d in waiters[:2]] == [["a"], ["b"]]
        # the full batches each wake one more: the third looks, finds nothing, parks again
        deadline = time.monotonic() + 5
        while parking.parked() != 1:
            assert time.monotonic() < deadline, "the third keeps waiting, parked"
            time.sleep(0.01)
    finally:
        parking.close()
    assert result(waiters[2]) == EMPTY, "a shutdown answers it, empty"


def test_a_full_batch_wakes_the_next_waiter():
    signals, queue = QueueSignals(), Queue()
    parking = ParkedDequeues(signals)
    try:
        first, second = (parking.park(waiter(queue), signals.generation("q")) for _ in range(2))
        queue.jobs += ["a", "b"]
        signals.changed("q")  # an unknown number of jobs: one waiter is woken
        assert result(first) == ["a"]
        assert result(second) == ["b"], "woken by the first, whose batch was full"
    finally:
        parking.close()


def test_a_wait_that_ends_answers_empty_and_a_woken_waiter_with_nothing_parks_again():
    signals, queue = QueueSignals(), Queue()
    parking = ParkedDequeues(signals)
    try:
        started = time.monotonic()
        deferred = parking.park(waiter(queue, wait=0.3), signals.generation("q"))
        signals.changed("q")  # woken, finds nothing, parks again
        assert result(deferred) == EMPTY
        assert time.monotonic() - started >= 0.29
        assert parking.parked() == 0
    finally:
        parking.close()


def test_an_attempt_error_is_the_answer():
    signals = QueueSignals()
    parking = ParkedDequeues(signals)

    def failing():
        raise RuntimeError("storage down")

    try:
        w = Waiter("q", 1, failing, time.monotonic() + 10, lambda: EMPTY)
        deferred = parking.park(w, signals.generation("q"))
        signals.changed("q")
        error = result(deferred)
        assert isinstance(error, RuntimeError) and "storage down" in str(error)
    finally:
        parking.close()
