"""Shard health: consecutive failures mark a shard unhealthy; a probe brings it back.

Unhealthy shards are skipped for enqueue and dequeue (so a dead shard costs nothing on the hot
path) and probed in the background. Only failures of the shard itself count: "queue not found",
bad input and a queue's own contention (`QueueBusy`: its createQueue/deleteQueue in progress,
lock waits between calls on it) never mark a shard down (the original let one client's typo take
shards out for 60 s; a queue deleted and re-created in a loop took MySQL shards out).
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class ShardHealth:
    """Thread-safe health state of a set of shards, keyed by shard name."""

    def __init__(self, unhealthy_after_failures: int):
        self._threshold = unhealthy_after_failures
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def is_healthy(self, shard: str) -> bool:
        return self._failures.get(shard, 0) < self._threshold

    def record_success(self, shard: str) -> None:
        if self._failures.get(shard):
            with self._lock:
                self._failures[shard] = 0

    def record_failure(self, shard: str) -> None:
        with self._lock:
            count = self._failures[shard] = self._failures.get(shard, 0) + 1
        if count == self._threshold:
            log.warning(
                "shard %s is unhealthy after %d consecutive failures; skipped for "
                "enqueue and dequeue until a probe succeeds",
                shard,
                count,
            )

    def mark_unhealthy(self, shard: str) -> None:
        with self._lock:
            was_healthy = self._failures.get(shard, 0) < self._threshold
            self._failures[shard] = max(self._failures.get(shard, 0), self._threshold)
        if was_healthy:
            log.warning("shard %s marked unhealthy", shard)

    def unhealthy(self) -> list[str]:
        return [name for name, count in list(self._failures.items()) if count >= self._threshold]

    def forget(self, shard: str) -> None:
        with self._lock:
            self._failures.pop(shard, None)
