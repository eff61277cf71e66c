"""Parked dequeues (long-poll): requests that found no job wait here, holding no thread and no
storage connection, until a signal says their queue may have jobs or their wait ends.

A parked request is a `Waiter`: its queue, its limit, its deadline and `attempt`, the dequeue to
run again. Signals (`pinlater.storage.signals`: enqueues and failure acks through this server,
the due watcher's findings for the rest) wake waiters of the queue in arrival order: as many as
the signal names jobs (one when it does not know). A woken waiter runs its attempt on one of a
few threads; one that got a full batch wakes the next waiter (there may be more), one that got
nothing parks again. Each waiter records the queue's generation before its storage check and
parks only if it is unchanged, so a signal can never fall between the check and the wait. At
its deadline a waiter is answered with an empty response, exactly as a dequeue that found
nothing.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: an attempt's outcome: (the reply, how many jobs it handed out)
Outcome = tuple[Any, int]


class Deferred:
    """A reply that comes later: resolved once with a value or an error (first one wins)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Any, BaseException | None], None]] = []

    def resolve(self, value: Any = None, error: BaseException | None = None) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            self._value, self._error = value, error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(value, error)
        return True

    def add_callback(self, callback: Callable[[Any, BaseException | None], None]) -> None:
        """Call `callback(value, error)` once resolved (at once if it is)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self._value, self._error)

    def wait(self) -> Any:
        """Block until resolved; the value, or raise the error."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


@dataclass(eq=False)
class Waiter:
    queue: str
    limit: int
    #: the dequeue to run again: its outcome; raises an error to answer with
    attempt: Callable[[], Outcome]
    deadline: float
    #: what to answer when the wait ends with nothing
    empty: Callable[[], Any]
    deferred: Deferred = field(default_factory=Deferred)
    parked: bool = False
    #: its deadline is in the timer's heap (pushed once per deadline)
    timed: bool = False
    #: whether its client is still connected (None: assumed); one that left gets no attempt
    alive: Callable[[], bool] | None = None


class ParkedDequeues:
    """The parked requests of one server. `signals` is the store's QueueSignals; `watcher`
    (pinlater.storage.watch.DueWatcher, optional) is told which queues have waiters."""

    def __init__(
        self,
        signals,
        watcher=None,
        *,
        threads: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.signals = signals
        self.watcher = watcher
        self.clock = clock
        self._lock = threading.Condition()
        self._queues: dict[str, dict[Waiter, None]] = {}
        self._deadlines: list[tuple[float, int, Waiter]] = []
        self._seq = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="longpoll")
        self._closed = False
        self._timer: threading.Thread | None = None  # started by the first park
        signals.listen(self._on_signal)

    # ---- parking ----

    def park(self, waiter: Waiter, generation: int) -> Deferred:
        """Park `waiter`, whose last check began at `generation` of its queue; look again at
        once if the queue changed since."""
        with self._lock:
            if self._closed:
                waiter.deferred.resolve(waiter.empty())
                return waiter.deferred
            if self.signals.generation(waiter.queue) != generation:
                self._submit(waiter)
                return waiter.deferred
            first = waiter.queue not in self._queues
            self._queues.setdefault(waiter.queue, {})[waiter] = None
            waiter.parked = True
            if self._timer is None:
                self._timer = threading.Thread(
                    target=self._expire_loop, name="longpoll-timer", daemon=True
                )
                self._timer.start()
            if not waiter.timed:
                waiter.timed = True
                heapq.heappush(self._deadlines, (waiter.deadline, next(self._seq), waiter))
                self._lock.notify()
        if first and self.watcher is not None:
            self.watcher.watch(waiter.queue)
        return waiter.deferred

    def parked(self) -> int:
        with self._lock:
            return sum(len(waiters) for waiters in self._queues.values())

    def _unpark(self, waiter: Waiter) -> None:
        """Under the lock: take `waiter` out of its queue's list."""
        waiter.parked = False
        waiters = self._queues.get(waiter.queue)
        if waiters is None:
            return
        waiters.pop(waiter, None)
        if not waiters:
            del self._queues[waiter.queue]
            if self.watcher is not None:
                self.watcher.unwatch(waiter.queue)

    # ---- waking ----

    def _on_signal(self, queue: str, jobs: int) -> None:
        if self.watcher is not None:
            self.watcher.poke(queue)
        self.wake(queue, max(jobs, 1))

    def wake(self, queue: str, count: int) -> None:
        """Wake up to `count` waiters of `queue`, oldest first."""
        with self._lock:
            waiters = self._queues.get(queue)
            woken = list(itertools.islice(waiters, count)) if waiters else []
            for waiter in woken:
                self._unpark(waiter)
                self._submit(waiter)

    def _submit(self, waiter: Waiter) -> None:
        try:
            self._pool.submit(self._attempt, waiter)
        except RuntimeError:  # shut down
            waiter.deferred.resolve(waiter.empty())

    def _attempt(self, waiter: Waiter) -> None:
        if waiter.alive is not None and not waiter.alive():
            self._answer_empty(waiter)  # its client left: claim nothing for nobody
            self.wake(waiter.queue, 1)  # the wake-up it took goes to the next waiter
            return
        generation = self.signals.generation(waiter.queue)
        try:
            reply, handed_out = waiter.attempt()
        except BaseException as exc:  # noqa: BLE001 - the attempt raises what the client gets
            waiter.deferred.resolve(error=exc)
            return
        if handed_out:
            waiter.deferred.resolve(reply)
            if handed_out >= waiter.limit:  # a full batch: there may be more
                self.wake(waiter.queue, 1)
        elif self.clock() >= waiter.deadline:
            waiter.deferred.resolve(reply)
        else:
            self.park(waiter, generation)

    # ---- deadlines and shutdown ----

    def _expire_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = self.clock()
                expired = []
                while self._deadlines and self._deadlines[0][0] <= now:
                    waiter = heapq.heappop(self._deadlines)[2]
                    waiter.timed = False
                    if waiter.parked:
                        self._unpark(waiter)
                        expired.append(waiter)
                if not expired:
                    timeout = self._deadlines[0][0] - now if self._deadlines else None
                    self._lock.wait(timeout)
                    continue
            for waiter in expired:
                self._answer_empty(waiter)

    def _answer_empty(self, waiter: Waiter) -> None:
        try:
            waiter.deferred.resolve(waiter.empty())
        except Exception:
            log.exception("answering a parked dequeue of %s failed", waiter.queue)

    def release_all(self) -> None:
        """Answer every parked request now, with nothing (a server shutting down)."""
        with self._lock:
            waiters = [w for ws in self._queues.values() for w in ws]
            for waiter in waiters:
                self._unpark(waiter)
        for waiter in waiters:
            self._answer_empty(waiter)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self.release_all()
        self._pool.shutdown(wait=True, cancel_futures=False)
        if self._timer is not None:
            self._timer.join(timeout=5)
        if self.watcher is not None:
            self.watcher.close()
