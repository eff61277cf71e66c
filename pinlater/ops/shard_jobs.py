"""Jobs held by each shard, by state, counted in the background for the admin API's shards view
(is a dequeue_only shard drained yet?), never on a request.

One refresh costs, per healthy shard, one queue listing plus one `Shard.queue_stats` read per
MAX_STATS_QUEUES queues, and it runs every `dashboard.shard_counts_interval_seconds` (60 s),
only while the admin API is on. A shard that fails keeps its last counts (with their time).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pinlater.ops.job_view import STATE_NAMES
from pinlater.storage.contract import MAX_STATS_QUEUES
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
        counts = dict.fromkeys(STATE_NAMES.values(), 0)
        queues = sorted(self.store.call(name, lambda s: s.queue_names()))
        for start in range(0, len(queues), MAX_STATS_QUEUES):
            chunk = queues[start : start + MAX_STATS_QUEUES]
            found = self.store.call(name, lambda s, c=chunk: s.queue_stats(c, self.cap))
            for stats in found.values():  # a queue deleted meanwhile is left out
                for state in JobState:
                    for future in (False, True):
                        jobs = sum(
                            n
                            for (_, st, fu), n in stats.counts.items()
                            if (st, fu) == (state, future)
                        )
                        counts[STATE_NAMES[state]] += min(jobs, self.cap)
        counts["total"] = sum(counts.values())
        return counts

    def get(self, shard: str) -> dict | None:
        """{"jobs": {state: n, "total": n}, "counted_at_ms": ms}, or None before the first
        count of that shard."""
        with self._lock:
            return self._counts.get(shard)
