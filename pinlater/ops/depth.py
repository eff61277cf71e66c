"""Queue depth gauges, refreshed from the store in the background, never on a request.

A scrape only copies the last snapshot (`pinlater_queue_jobs`). The server runs
`DepthCollector.tick` in a `pinlater.ops.periodic.Periodic`: each tick reads the next
`metrics.depth_queues_per_tick` queues (a `pinlater.ops.sweep.Sweep`) with one
`Shard.queue_stats` call per healthy shard, and ticks are spaced so that every queue is read
once per `metrics.depth_interval_seconds`. Before, a refresh made 8 x priorities count calls
per queue, all at once: 1,000 queues took 1.26 s of storage time every interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from pinlater.errors import PinLaterError, QueueNotFound, ShardConnectionFailed
from pinlater.ops.metrics import NO_QUEUE, GaugeCollector, Metrics
from pinlater.ops.sweep import Sweep
from pinlater.storage.models import JobState, QueueStats

log = logging.getLogger(__name__)

#: queues whose depth one tick reads (one storage call per shard for all of them)
DEFAULT_QUEUES_PER_TICK = 200
Counts = dict[tuple[str, str, int], int]


def _label(state: JobState, future: bool) -> str:
    """The gauge's state label: pending splits due from future, the others add both."""
    if state is JobState.PENDING:
        return "pending_future" if future else "pending"
    return state.name.lower()


class DepthCollector:
    """Refreshes queue depth by (queue, state, priority) from the store, off the request path.

    The gauges are a snapshot: a deleted queue drops out at once when this server deletes it
    (`Metrics.forget_queue`) and at the next sweep's listing otherwise; queues whose counts
    fail (a shard down) keep their last values (and `pinlater_queue_depth_errors_total`
    grows).
    """

    def __init__(
        self,
        store,
        metrics: Metrics,
        cap: int,
        *,
        queues_per_tick: int = DEFAULT_QUEUES_PER_TICK,
        interval: float = 15.0,
    ):
        self.store = store
        self.metrics = metrics
        self.cap = cap
        self.sweep = Sweep(queues_per_tick, interval)
        self._queues: list[str] = []  # listed at the start of the current sweep
        #: the last counts by queue: a tick replaces its queues' entries, not the whole map
        self._by_queue: dict[str, Counts] = {}
        self._refreshed_at = 0.0
        self._lock = threading.Lock()
        self.errors = Counter(
            "pinlater_queue_depth_errors",
            "queue depth refreshes that failed (values kept)",
            registry=metrics.registry,
        )
        metrics.registry.register(GaugeCollector(self._families))
        metrics.on_forget.append(self._forget)

    def tick(self) -> None:
        """One slice of the sweep; at the sweep's start the queues are listed again (and the
        ones gone forgotten)."""
        if self.sweep.starting and not self._list_queues():
            return
        self._refresh(self.sweep.next_slice(self._queues))
        if self.sweep.starting:  # that slice ended the sweep
            self._refreshed_at = time.time()

    def _list_queues(self) -> bool:
        with self.metrics.queues.listing() as replace:  # keeps what this server did meanwhile
            try:
                queues = sorted(self.store.queue_names())
            except Exception as exc:  # noqa: BLE001 - a dead shard must not stop the collector
                self.errors.inc()
                log.warning("queue depth: cannot list queues: %s", exc)
                return False
            gone = replace(queues)
        for queue in gone:  # deleted, maybe by another server
            self.metrics.forget_queue(queue)
        self._queues = queues
        return True

    def _refresh(self, queues: Sequence[str]) -> None:
        if not queues:
            return
        try:
            counts = self._read(queues, strict=False)
        except PinLaterError as exc:
            self.errors.inc()
            log.debug("queue depth of %d queues not refreshed: %s", len(queues), exc)
            return
        known = self.metrics.queues.known
        with self._lock:  # a queue forgotten since the listing (deleted) gets no gauges again:
            # checked under the lock, so a forget either comes first or cleans up after this
            fresh: dict[str, Counts] = {}
            for key, value in counts.items():
                if known(key[0]):
                    fresh.setdefault(key[0], {})[key] = value
            by_queue = dict(self._by_queue)
            for queue in queues:
                by_queue.pop(queue, None)
            by_queue.update(fresh)
            self._by_queue = by_queue

    def _read(self, queues: Sequence[str], strict: bool) -> Counts:
        """Counts of `queues` summed over the shards (one queue_stats call per shard), each
        capped like getJobCount. Any shard failing (or, unless `strict`, unhealthy) raises:
        a partial sum would understate the depth."""
        per_queue: dict[str, list[QueueStats]] = {}
        for name in self.store.shard_names():
            if not strict and not self.store.health.is_healthy(name):
                raise ShardConnectionFailed(f"shard {name} is unhealthy")
            found = self.store.call(name, lambda s: s.queue_stats(queues, self.cap))
            for queue, stats in found.items():
                per_queue.setdefault(queue, []).append(stats)
        counts: Counts = {}
        levels = range(1, self.store.num_priorities + 1)
        for queue, shards in per_queue.items():
            for priority in levels:
                for state in JobState:
                    for future in (False, True):
                        key = (queue, _label(state, future), priority)
                        got = sum(s.counts.get((priority, state, future), 0) for s in shards)
                        counts[key] = min(counts.get(key, 0) + got, self.cap)
        return counts

    def _forget(self, queue: str) -> None:
        """Drop a deleted queue's gauges at once (not at the next sweep)."""
        with self._lock:
            by_queue = dict(self._by_queue)
            by_queue.pop(queue, None)
            self._by_queue = by_queue

    def snapshot(self) -> tuple[Counts, float]:
        """The last counts: {(queue, state, priority): jobs} and the time the last sweep
        ended (epoch s, 0 before the first). The admin API's queue overview reads it."""
        return self._flat(), self._refreshed_at

    def _flat(self) -> Counts:
        return {key: n for counts in self._by_queue.values() for key, n in counts.items()}

    def counts_of(self, queue: str) -> Counts:
        """One queue's counts read now (the admin API's queue view); raises like the store."""
        counts = self._read([queue], strict=True)
        if not counts:
            raise QueueNotFound(queue)
        return counts

    def _families(self) -> list[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "pinlater_queue_jobs",
            f"jobs by queue, state and priority (capped at {self.cap})",
            labels=["queue", "state", "priority"],
        )
        labelled: Counts = {}  # queues past metrics.max_queues add up under one label
        label = self.metrics.queues.label
        for (queue, state, priority), value in self._flat().items():
            name = label(queue)
            if name != NO_QUEUE:  # a queue forgotten meanwhile
                labelled[(name, state, priority)] = labelled.get((name, state, priority), 0) + value
        for (queue, state, priority), value in sorted(labelled.items()):
            depth.add_metric([queue, state, str(priority)], value)
        stamp = GaugeMetricFamily(
            "pinlater_queue_jobs_refreshed_timestamp_seconds",
            "when the queue depth gauges were last refreshed (a whole sweep of the queues)",
            value=self._refreshed_at,
        )
        return [depth, stamp]
