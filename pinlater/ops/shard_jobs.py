"""Jobs held by each shard, by state, counted in the background for the admin API's shards view
(is a dequeue_only shard drained yet?), never on a request.

One refresh costs, per healthy shard, one queue listing plus 8 capped counts per queue (each
state, runnable and future, all priorities in one call): a twelfth of the queue-depth refresh
with 3 priorities, and it runs every `dashboard.shard_counts_interval_seconds` (60 s), only
while the admin API is on. A shard that fails keeps its last counts (with their time).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pinlater.errors import QueueNotFound
from pinlater.ops.job_view import STATE_NAMES
from pinlater.storage.models import JobState

log = logging.getLogger(__name__)


class ShardJobCounts:
    def __init__(self, store, cap: int, clock: Callable[[], float] = time.time):
        self.store = store
        self.cap = cap
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[str, dict] = {}

    def refresh(self) -> None:
        for name in self.store.shard_names():
            if not self.store.health.is_healthy(name):
                continue
            try:
                counts = self._count_shard(name)
            except Exception as exc:  # noqa: BLE001 - one shard must not stop the others
                log.debug("jobs held by shard %s not counted: %s", name, exc)
                continue
            with self._lock:
                self._counts[name] = {"jobs": counts, "counted_at_ms": int(self._clock() * 1000)}
        known = set(self.store.shard_names())
        with self._lock:
            for name in [n for n in self._counts if n not in known]:
                del self._counts[name]

    def _count_shard(self, name: str) -> dict[str, int]:
        priorities = list(range(1, self.store.num_priorities + 1))
        counts = dict.fromkeys(STATE_NAMES.values(), 0)
        for queue in sorted(self.store.call(name, lambda s: s.queue_names())):
            for state in JobState:
                for future in (False, True):
                    counts[STATE_NAMES[state]] += self._count(
                        name, queue, state, priorities, future
                    )
        counts["total"] = sum(counts.values())
        return counts

    def _count(self, name: str, queue: str, state, priorities, future: bool) -> int:
        try:
            return self.store.call(
                name, lambda s: s.count(queue, state, priorities, future, self.cap, None)
            )
        except QueueNotFound:  # deleted meanwhile
            return 0

    def get(self, shard: str) -> dict | None:
        """{"jobs": {state: n, "total": n}, "counted_at_ms": ms}, or None before the first
        count of that shard."""
        with self._lock:
            return self._counts.get(shard)
