"""Per-queue dequeue concurrency: dequeueJobs calls running on one queue, capped, so one hot
queue cannot take every dequeue slot of a server (refused with DEQUEUE_RATE_LIMITED)."""

from __future__ import annotations

import threading


class QueueSlots:
    """At most `cap` concurrent holders per queue. Entries exist only while held, so the map
    is bounded by the number of requests in flight."""

    def __init__(self, cap: int):
        self.cap = cap
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def try_acquire(self, queue: str) -> bool:
        with self._lock:
            held = self._held.get(queue, 0)
            if held >= self.cap:
                return False
            self._held[queue] = held + 1
            return True

    def release(self, queue: str) -> None:
        with self._lock:
            held = self._held.get(queue, 0) - 1
            if held > 0:
                self._held[queue] = held
            else:
                self._held.pop(queue, None)

    def held(self, queue: str) -> int:
        with self._lock:
            return self._held.get(queue, 0)
