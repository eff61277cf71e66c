"""Queue depth gauges, refreshed from the store in the background, never on a request.

A scrape only copies the last snapshot (`pinlater_queue_jobs`). The server runs
`DepthCollector.refresh` at start and every `metrics.depth_interval_seconds` in a
`pinlater.ops.periodic.Periodic`.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from pinlater.ops.metrics import GaugeCollector, Metrics
from pinlater.storage.models import JobState

log = logging.getLogger(__name__)


class DepthCollector:
    """Refreshes queue depth by (queue, state, priority) from the store, off the request path.

    One refresh costs 8 x priorities capped counts per queue, each one statement per shard. The
    gauges are a snapshot: a queue that disappears drops out at the next refresh; a queue whose
    counts fail keeps its last values (and `pinlater_queue_depth_errors_total` grows).
    """

    def __init__(self, store, metrics: Metrics, cap: int):
        self.store = store
        self.metrics = metrics
        self.cap = cap
        self._snapshot: dict[tuple[str, str, int], int] = {}
        self._refreshed_at = 0.0
        self.errors = Counter(
            "pinlater_queue_depth_errors",
            "queue depth refreshes that failed (values kept)",
            registry=metrics.registry,
        )
        metrics.registry.register(GaugeCollector(self._families))
        metrics.on_forget.append(self._forget)

    def refresh(self) -> None:
        """Read every existing queue's counts once; also refreshes the known queue names."""
        try:
            queues = sorted(self.store.queue_names())
        except Exception as exc:  # noqa: BLE001 - a dead shard must not stop the collector
            self.errors.inc()
            log.warning("queue depth: cannot list queues: %s", exc)
            return
        for gone in self.metrics.queues.replace(queues):  # deleted, maybe by another server
            self.metrics.forget_queue(gone)
        snapshot: dict[tuple[str, str, int], int] = {}
        for queue in queues:
            try:
                snapshot.update(self._queue_counts(queue))
            except Exception as exc:  # noqa: BLE001
                self.errors.inc()
                log.debug("queue depth of %s not refreshed: %s", queue, exc)
                snapshot.update({k: v for k, v in self._snapshot.items() if k[0] == queue})
        self._snapshot = snapshot
        self._refreshed_at = time.time()

    def _forget(self, queue: str) -> None:
        """Drop a deleted queue's gauges at once (not at the next refresh)."""
        self._snapshot = {k: v for k, v in self._snapshot.items() if k[0] != queue}

    def snapshot(self) -> tuple[dict[tuple[str, str, int], int], float]:
        """The last refresh: {(queue, state, priority): jobs} and its time (epoch s, 0 before
        the first). The admin API's queue overview reads it."""
        return self._snapshot, self._refreshed_at

    def counts_of(self, queue: str) -> dict[tuple[str, str, int], int]:
        """One queue's counts read now (the admin API's queue view); raises like the store."""
        return self._queue_counts(queue)

    def _queue_counts(self, queue: str) -> dict[tuple[str, str, int], int]:
        counts = {}
        for priority in range(1, self.store.num_priorities + 1):
            for state in JobState:
                now, future = (
                    self.store.count(queue, state, priority, flag, self.cap, None)
                    for flag in (False, True)
                )
                name = state.name.lower()
                if state is JobState.PENDING:
                    counts[(queue, "pending", priority)] = now
                    counts[(queue, "pending_future", priority)] = future
                else:
                    counts[(queue, name, priority)] = now + future
        return counts

    def _families(self) -> list[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "pinlater_queue_jobs",
            f"jobs by queue, state and priority (capped at {self.cap})",
            labels=["queue", "state", "priority"],
        )
        for (queue, state, priority), value in sorted(self._snapshot.items()):
            depth.add_metric([queue, state, str(priority)], value)
        stamp = GaugeMetricFamily(
            "pinlater_queue_jobs_refreshed_timestamp_seconds",
            "when the queue depth gauges were last refreshed",
            value=self._refreshed_at,
        )
        return [depth, stamp]
