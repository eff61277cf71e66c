"""Per-queue change signals: what tells parked dequeues (long-poll) that a queue may have jobs.

Every event that can make a job eligible bumps the queue's generation and tells the listeners:
an enqueue or a failure ack through this server at once, one through another server when the
backend notices it (pinlater/storage/watch.py). A parked request records the generation before
its storage check and parks only if it is unchanged, so a signal can never fall between the
check and the wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: a listener: (queue, jobs that may be eligible now, 0 when unknown)
Listener = Callable[[str, int], None]


class QueueSignals:
    """Generation counters per queue (only queues that ever changed hold one) and listeners."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generations: dict[str, int] = {}
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def generation(self, queue: str) -> int:
        return self._generations.get(queue, 0)

    def changed(self, queue: str, jobs: int = 0) -> None:
        """`queue` may have (`jobs`, 0 = an unknown number of) newly eligible jobs."""
        with self._lock:
            self._generations[queue] = self._generations.get(queue, 0) + 1
        for listener in self._listeners:
            listener(queue, jobs)

    def changed_all(self) -> None:
        """Anything may have changed (a clock moved, a signal connection was lost)."""
        with self._lock:
            queues = list(self._generations)
        for queue in queues:
            self.changed(queue)

    def forget(self, queue: str) -> None:
        """A deleted queue: drop its counter (a parked request on it times out empty)."""
        with self._lock:
            if queue in self._generations:
                self._generations[queue] += 1  # a check in flight must not park unwoken
