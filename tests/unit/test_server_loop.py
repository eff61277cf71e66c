"""Server-loop pieces that need no socket: the worker slots."""

from __future__ import annotations

import threading
import time

import pytest

from pinlater.server import loop as server_loop
from pinlater.server.loop import worker_slots


def test_worker_slots_admit_at_most_count_holders_like_a_semaphore():
    slots = worker_slots(2)
    slots.get()
    slots.get()
    got = threading.Event()
    waiter = threading.Thread(target=lambda: (slots.get(), got.set()))
    waiter.start()
    assert not got.wait(0.2)  # both taken: the third caller waits
    slots.put(None)
    assert got.wait(2.0)
    waiter.join(2.0)
    assert slots.qsize() == 0


class _Dispatcher:
    def __init__(self, slots, fail=False):
        self.slots, self.fail, self.free_during_call = slots, fail, None

    def dispatch(self, payload, reply_later=None, peer_alive=None):
        self.free_during_call = self.slots.qsize()
        if self.fail:
            raise RuntimeError("handler bug")
        return "method", b"reply to " + payload


class _Server:
    def __init__(self, fail=False):
        self.worker_slots = worker_slots(3)
        self.enqueue_slots = None  # enqueues share the worker slots
        self.dispatcher = _Dispatcher(self.worker_slots, fail)


@pytest.mark.parametrize("fail", [False, True])
def test_a_dispatch_holds_one_slot_and_always_gives_it_back(fail):
    server = _Server(fail)
    conn = server_loop.Connection.__new__(server_loop.Connection)
    conn.server = server
    if fail:
        with pytest.raises(RuntimeError):
            conn._dispatch(b"x")
    else:
        assert conn._dispatch(b"x") == b"reply to x"
    assert server.dispatcher.free_during_call == 2
    assert server.worker_slots.qsize() == 3


def test_many_threads_never_exceed_the_slot_count():
    slots, lock = worker_slots(3), threading.Lock()
    running, peak = [0], [0]

    def work():
        for _ in range(20):
            slots.get()
            try:
                with lock:
                    running[0] += 1
                    peak[0] = max(peak[0], running[0])
                time.sleep(0.001)
                with lock:
                    running[0] -= 1
            finally:
                slots.put(None)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert peak[0] == 3 and slots.qsize() == 3


def _wait_until(predicate, timeout=2.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def test_a_freed_slot_goes_to_the_oldest_waiter_not_to_a_newcomer():
    slots = worker_slots(1)
    slots.get()
    order: list[int] = []
    waiters = []
    for i in range(5):  # queue up one after the other: 0 waits longest
        thread = threading.Thread(target=lambda i=i: (slots.get(), order.append(i)))
        thread.start()
        waiters.append(thread)
        _wait_until(lambda n=i + 1: slots.waiting() == n)
    for served in range(1, 6):
        # the slot goes straight to the oldest waiter: a caller arriving now finds none free
        slots.put(None)
        assert slots.qsize() == 0
        _wait_until(lambda n=served: len(order) == n)
    for thread in waiters:
        thread.join(2.0)
    assert order == [0, 1, 2, 3, 4]
    slots.put(None)
    assert slots.qsize() == 1 and slots.waiting() == 0
