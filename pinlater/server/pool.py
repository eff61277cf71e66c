"""The bounded pool of threads that serve active connections.

A thread is started only when a task finds no idle one (up to `max_threads`), waits for tasks
while idle and retires after `keepalive` seconds without work, so a quiet server holds few
threads and a burst never starts one thread per connection. Tasks beyond what the threads can
take wait in FIFO order.

Also here: the linger budget. A thread that has answered a request may keep its connection for
a short linger (the next request then costs no hand-off), but at most `max_threads // 2` threads
linger at once (none in a one-thread pool), so lingering never takes the threads that queued
connections need.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("pinlater.server")


class ThreadPool:
    """Runs `fn(arg)` tasks on at most `max_threads` daemon threads."""

    def __init__(self, max_threads: int, name: str = "conn", keepalive: float = 60.0):
        self.max_threads = max_threads
        self._name = name
        self._keepalive = keepalive
        self._cond = threading.Condition(threading.Lock())
        self._tasks: collections.deque[tuple[Callable[[Any], None], Any]] = collections.deque()
        self._threads = 0
        self._idle = 0
        self._started = 0
        self._closed = False
        self._lingering: set[object] = set()
        self._linger_budget = max_threads // 2

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        with self._cond:
            self._tasks.append((fn, arg))
            if self._idle >= len(self._tasks):
                self._cond.notify()
                return
            if self._threads >= self.max_threads:
                return  # a busy thread takes it when done
            self._threads += 1
            self._started += 1
            number = self._started
        try:
            threading.Thread(target=self._work, name=f"{self._name}-{number}", daemon=True).start()
        except RuntimeError as exc:  # out of threads: the running ones take the task later
            log.warning("cannot start a connection thread: %s", exc)
            with self._cond:
                self._threads -= 1

    def close(self) -> None:
        """Idle threads exit; busy ones exit after their task. Queued tasks still run."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {
                "threads": self._threads,
                "idle_threads": self._idle,
                "queued": len(self._tasks),
            }

    def try_linger(self, who: object) -> bool:
        """Take a linger slot for `who` (True) unless half the threads already linger;
        `end_linger(who)` gives it back. Lock-free (set operations are atomic): a race may
        let a thread or two more linger for a moment, but the count never drifts."""
        if len(self._lingering) >= self._linger_budget:
            return False
        self._lingering.add(who)
        return True

    def end_linger(self, who: object) -> None:
        self._lingering.discard(who)

    def _work(self) -> None:
        while True:
            task = self._next_task()
            if task is None:
                return
            fn, arg = task
            try:
                fn(arg)
            except Exception:  # a task must not kill its thread
                log.exception("unexpected error in a connection task")

    def _next_task(self) -> tuple[Callable[[Any], None], Any] | None:
        with self._cond:
            while not self._tasks:
                if self._closed:
                    self._threads -= 1
                    return None
                self._idle += 1
                woken = self._cond.wait(self._keepalive)
                self._idle -= 1
                if not woken and not self._tasks:
                    self._threads -= 1
                    return None
            return self._tasks.popleft()
