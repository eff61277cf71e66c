"""Every Prometheus metric of the server, in one module and one registry.

Names follow `pinlater_<noun>_<unit>` / `_total`; label sets are fixed and the queue is always a
label, never part of a name. Label values for queues come only from `QueueLabels`, which knows
the queues that exist (refreshed from the store in the background, plus successful
createQueue calls): a request naming any other queue is counted under `queue=""`, so a client
sending random (valid or invalid) names cannot grow the number of series.

Queue depth is read by `DepthCollector` in a background thread at an interval with the
store's capped counts, never on the request path; a scrape only copies the last snapshot.

A deleted queue leaves no series behind: `Metrics.forget_queue` removes every label child of
every metric with a `queue` label (found from the metrics themselves, so a metric added later
is covered) and tells the per-queue collectors (`on_forget`). It runs when this server deletes a
queue and when the depth refresh finds a queue gone (deleted through another server).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

#: label value for requests whose queue is absent or not a known queue
NO_QUEUE = ""
#: label value of the known queues past `metrics.max_queues` (not a valid queue name)
OTHER_QUEUES = "(other)"
#: depth gauge states: `pending` is runnable now, `pending_future` waits for its run_after
DEPTH_STATES = ("pending", "pending_future", "in_progress", "succeeded", "failed")
_REQUEST_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class QueueLabels:
    """The set of queue names allowed as label values. Thread-safe.

    With `max_queues` (0: no cap), at most that many queues get a label of their own (the
    first known, in name order, and kept while they exist); the requests and depth of the
    others are counted under OTHER_QUEUES, so /metrics stays bounded however many queues
    exist."""

    def __init__(self, max_queues: int = 0) -> None:
        self.max_queues = max_queues
        self._known: frozenset[str] = frozenset()
        self._own: frozenset[str] = frozenset()  # the known queues with a label of their own
        self._lock = threading.Lock()
        #: name -> True (added) / False (removed) since the oldest running listing began
        self._changed: dict[str, bool] = {}
        self._listings = 0

    def label(self, name: object) -> str:
        """`name` if it is a known queue with a label of its own, OTHER_QUEUES for another
        known queue, else NO_QUEUE (plain set lookups, no validation needed: only names put
        in by `add`/`replace` can come out)."""
        if not isinstance(name, str) or name not in self._known:
            return NO_QUEUE
        return name if name in self._own else OTHER_QUEUES

    def known(self, name: str) -> bool:
        return name in self._known

    def add(self, name: str) -> None:
        with self._lock:
            self._set(self._known | {name})
            if self._listings:
                self._changed[name] = True

    def remove(self, name: str) -> None:
        with self._lock:
            self._set(self._known - {name})
            if self._listings:
                self._changed[name] = False

    @contextlib.contextmanager
    def listing(self) -> Iterator[Callable[[Iterable[str]], frozenset[str]]]:
        """`with labels.listing() as replace: replace(store.queue_names())`: `replace(names)`
        makes `names`, plus the adds and removes made since the block began, the known
        queues, and returns the ones that were known and are not now. (A listing is a picture
        of when it was read: before, a queue created as the depth collector listed was
        forgotten again, its requests counted under `queue=""` until the next sweep, and one
        deleted meanwhile came back.)"""
        with self._lock:
            self._listings += 1

        def replace(names: Iterable[str]) -> frozenset[str]:
            with self._lock:
                target = set(names)
                for name, added in self._changed.items():
                    (target.add if added else target.discard)(name)
                known = frozenset(target)
                gone = self._known - known
                self._set(known)
            return gone

        try:
            yield replace
        finally:
            with self._lock:
                self._listings -= 1
                if not self._listings:
                    self._changed.clear()

    def replace(self, names: Iterable[str]) -> frozenset[str]:
        """Make `names` the known queues; return the ones that were known and are not now."""
        with self.listing() as replace:
            return replace(names)

    def _set(self, known: frozenset[str]) -> None:
        own = self._own & known
        if not self.max_queues:
            own = known
        elif len(own) < self.max_queues:
            room = self.max_queues - len(own)
            own |= frozenset(sorted(known - own)[:room])
        self._own, self._known = own, known


class Metrics:
    """The registry and every metric object; callers use the small record methods."""

    def __init__(self, max_queues: int = 0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.queues = QueueLabels(max_queues)
        r = self.registry
        self.requests = Counter(
            "pinlater_requests",
            "RPC requests by method, queue and outcome (error code or ok)",
            ["method", "queue", "outcome"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "pinlater_request_duration_seconds",
            "RPC latency in the handler",
            ["method", "queue", "outcome"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.jobs_enqueued = Counter(
            "pinlater_jobs_enqueued", "jobs enqueued", ["queue"], registry=r
        )
        self.schedule_slots = Counter(
            "pinlater_schedule_slots",
            "slots of periodic jobs this server tried to enqueue, by outcome (enqueued, "
            "deduplicated: another server was first, failed: tried again next pass)",
            ["queue", "outcome"],
            registry=r,
        )
        self.jobs_deduplicated = Counter(
            "pinlater_jobs_deduplicated",
            "jobs of enqueueJobs that stored nothing: their unique key was held",
            ["queue"],
            registry=r,
        )
        self.jobs_dequeued = Counter(
            "pinlater_jobs_dequeued",
            "jobs handed out by dequeueJobs (dry runs excluded)",
            ["queue"],
            registry=r,
        )
        self.acks = Counter(
            "pinlater_acks",
            "acks received (ackDequeuedJobs and piggy-backed), by result",
            ["queue", "result"],
            registry=r,
        )
        self.jobs_retried = Counter(
            "pinlater_jobs_retried",
            "FAILED jobs moved back to PENDING by retryFailedJobs",
            ["queue"],
            registry=r,
        )
        self.jobs_deleted = Counter(
            "pinlater_jobs_deleted", "jobs deleted by deleteJobs", ["queue"], registry=r
        )
        self.jobs_reclaimed = Counter(
            "pinlater_jobs_reclaimed",
            "expired claims reclaimed by the janitor, by new state",
            ["queue", "to"],
            registry=r,
        )
        self.jobs_purged = Counter(
            "pinlater_jobs_purged",
            "finished jobs purged by the janitor, by state",
            ["queue", "state"],
            registry=r,
        )
        self.rate_limited = Counter(
            "pinlater_dequeue_refused",
            "dequeueJobs refused, by reason (rate, paused, concurrency)",
            ["queue", "reason"],
            registry=r,
        )
        self.admission_refused = Counter(
            "pinlater_admission_refused",
            "requests refused at once by a server-wide cap",
            ["kind"],
            registry=r,
        )
        self.shard_seconds = Histogram(
            "pinlater_shard_call_duration_seconds",
            "storage call latency by shard and result",
            ["shard", "result"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.reload_errors = Counter(
            "pinlater_config_reload_errors",
            "queue-config / ServerSet / shard map files not applied (old one kept); a shard map "
            "is counted at every retry",
            ["file"],
            registry=r,
        )
        self.shard_retire_refused = Counter(
            "pinlater_shard_retire_refused",
            "shard map reloads refused because they dropped this shard while it could hold "
            "unfinished jobs (counted at every retry)",
            ["shard"],
            registry=r,
        )
        self.frames_rejected = Counter(
            "pinlater_frames_rejected",
            "frames or connections refused before reaching the handler, by reason (fixed set: "
            "pinlater.server.loop.REJECT_REASONS)",
            ["reason"],
            registry=r,
        )
        self.connections_refused = Counter(
            "pinlater_connections_refused",
            "connections refused at accept or closed to make room, by reason (fixed set: "
            "pinlater.server.reactor.CONNECTION_REFUSAL_REASONS)",
            ["reason"],
            registry=r,
        )
        self.password_refused = Counter(
            "pinlater_admin_password_refused",
            "admin passwords refused, by reason (wrong, client_limit, server_limit, busy)",
            ["reason"],
            registry=r,
        )
        self.http_refused = Counter(
            "pinlater_http_refused",
            "HTTP listener connections closed unserved, by reason (busy, per_client, timeout, tls)",
            ["reason"],
            registry=r,
        )
        self.admin_logins = Counter(
            "pinlater_admin_logins",
            "admin API logins (password or basic auth checks), by outcome (ok, wrong, "
            "client_limit, server_limit, busy)",
            ["outcome"],
            registry=r,
        )
        self.background_failures = Counter(
            "pinlater_background_failures",
            "background passes that raised, by task (janitor, queue-depth, shard-maintenance, "
            "queue-config-watcher)",
            ["task"],
            registry=r,
        )
        #: (metric, label values) -> child, see `_child`
        self._children: dict[tuple, object] = {}
        #: told the name of every queue forgotten (collectors keeping per-queue state)
        self.on_forget: list[Callable[[str], None]] = []
        #: {metric: position of its `queue` label} for every metric above that has one:
        #: derived, not listed, so a metric added above is forgotten like the rest
        self.per_queue: dict[MetricWrapperBase, int] = {
            metric: metric._labelnames.index("queue")
            for metric in vars(self).values()
            if isinstance(metric, MetricWrapperBase) and "queue" in metric._labelnames
        }

    def forget_queue(self, name: str) -> None:
        """Remove every series of queue `name` (deleted): from then on requests naming it are
        counted under `queue=""` until it is created again. Idempotent."""
        if name in (NO_QUEUE, OTHER_QUEUES):
            return
        self.queues.remove(name)
        for metric in self.per_queue:
            labelnames = metric._labelnames
            children = {
                tuple(sample.labels[n] for n in labelnames)
                for family in metric.collect()
                for sample in family.samples
                if sample.labels.get("queue") == name
            }
            for values in children:
                metric.remove(*values)
        for key in list(self._children):
            position = self.per_queue.get(key[0])
            if position is not None and key[1][position] == name:
                self._children.pop(key, None)
        for forget in list(self.on_forget):
            forget(name)

    def _child(self, metric, *values: str):
        """`metric.labels(*values)`, remembered: labels() validates and takes a lock on every
        call, and the request path records several per request. Bounded like the series
        themselves (queue labels via QueueLabels, the rest from fixed sets)."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
            self._drop_if_forgotten(metric, values)
        return child

    def _drop_if_forgotten(self, metric, values: tuple[str, ...]) -> None:
        """A child made for a queue that `forget_queue` removed meanwhile (the label was chosen
        before the forget, the child made after it) is removed again, so no series of a
        deleted queue outlives the race; the caller's one increment is lost with it."""
        position = self.per_queue.get(metric)
        if position is None or values[position] in (NO_QUEUE, OTHER_QUEUES):
            return
        if not self.queues.known(values[position]):
            metric.remove(*values)
            self._children.pop((metric, values), None)

    # ---- record methods (names bounded by QueueLabels) ----

    def request(self, method: str, queue: object, outcome: str, seconds: float) -> None:
        label = self.queues.label(queue)
        self._child(self.requests, method, label, outcome).inc()
        self._child(self.request_seconds, method, label, outcome).observe(seconds)

    def jobs(self, event: str, queue: str, count: int) -> None:
        """Count `count` jobs of `event` (enqueued, deduplicated, dequeued, acked_succeeded,
        acked_failed, retried, deleted) on `queue`."""
        if count <= 0:
            return
        label = self.queues.label(queue)
        if event == "acked_succeeded":
            self._child(self.acks, label, "succeeded").inc(count)
        elif event == "acked_failed":
            self._child(self.acks, label, "failed").inc(count)
        else:
            self._child(getattr(self, f"jobs_{event}"), label).inc(count)

    def schedule_queue(self, queue: str, enqueued: int, deduplicated: int, failed: int) -> None:
        """What one schedules pass did for `queue`."""
        label = self.queues.label(queue)
        for outcome, count in (
            ("enqueued", enqueued),
            ("deduplicated", deduplicated),
            ("failed", failed),
        ):
            if count:
                self._child(self.schedule_slots, label, outcome).inc(count)

    def janitor_queue(
        self,
        queue: str,
        reclaimed_pending: int,
        reclaimed_failed: int,
        purged_succeeded: int,
        purged_failed: int,
    ) -> None:
        label = self.queues.label(queue)
        for counter, extra, value in (
            (self.jobs_reclaimed, "pending", reclaimed_pending),
            (self.jobs_reclaimed, "failed", reclaimed_failed),
            (self.jobs_purged, "succeeded", purged_succeeded),
            (self.jobs_purged, "failed", purged_failed),
        ):
            if value:
                self._child(counter, label, extra).inc(value)

    def dequeue_refused(self, queue: str, reason: str) -> None:
        self._child(self.rate_limited, self.queues.label(queue), reason).inc()

    def background_failed(self, task: str) -> None:
        self._child(self.background_failures, task).inc()

    def frame_rejected(self, reason: str) -> None:
        self._child(self.frames_rejected, reason).inc()

    def connection_refused(self, reason: str) -> None:
        self._child(self.connections_refused, reason).inc()

    def shard_call(self, shard: str, seconds: float, ok: bool) -> None:
        self._child(self.shard_seconds, shard, "ok" if ok else "error").observe(seconds)


class GaugeCollector(Collector):
    """Gauges computed at scrape time from cheap in-memory state (no storage access)."""

    def __init__(self, read: Callable[[], list[GaugeMetricFamily]]):
        self._read = read

    def collect(self):
        return self._read()

    def describe(self):
        return []


def live_gauges(
    store,
    server_stats: Callable[[], dict[str, int]] | None,
    rate_limits: Callable[[], dict[str, float]] | None,
) -> GaugeCollector:
    """Shard health, connections, in-flight requests and effective rate limits, read at scrape
    time: `server_stats()` gives {"connections": n, "in_flight": n, "in_flight_dequeues": n}."""

    def read() -> list[GaugeMetricFamily]:
        healthy = GaugeMetricFamily(
            "pinlater_shard_healthy", "1 if the shard takes calls", labels=["shard", "dequeue_only"]
        )
        for spec in store.shard_specs():
            healthy.add_metric(
                [spec.name, str(bool(spec.dequeue_only)).lower()],
                1.0 if store.health.is_healthy(spec.name) else 0.0,
            )
        families = [healthy]
        stats = server_stats() if server_stats else {}
        for key, help_text in (
            ("connections", "client connections open"),
            ("in_flight", "requests read and not yet answered"),
            ("in_flight_dequeues", "dequeueJobs calls in flight"),
        ):
            families.append(
                GaugeMetricFamily(f"pinlater_{key}", help_text, value=stats.get(key, 0))
            )
        limits = GaugeMetricFamily(
            "pinlater_dequeue_rate_limit_jobs_per_second",
            "this server's share of each queue's dequeue rate limit",
            labels=["queue"],
        )
        for queue, rate in sorted((rate_limits() if rate_limits else {}).items()):
            limits.add_metric([queue], rate)
        families.append(limits)
        return families

    return GaugeCollector(read)


def dequeue_path_metrics(store, longpoll) -> GaugeCollector:
    """The dequeue path's storage economy, read at scrape time: storage dequeue calls (those
    that found nothing), partitions skipped as known empty, and long-poll (`longpoll`, the
    handler's ParkedDequeues, None when off): requests parked now and the due watcher's
    storage checks."""

    def read() -> list:
        empty = store.empty
        calls = CounterMetricFamily(
            "pinlater_storage_dequeues",
            "storage dequeue calls (one shard, one priority) by whether they found jobs",
            labels=["result"],
        )
        calls.add_metric(["jobs"], empty.calls - empty.empty_calls)
        calls.add_metric(["empty"], empty.empty_calls)
        skipped = CounterMetricFamily(
            "pinlater_empty_partitions_skipped",
            "storage dequeue calls not made: the partition was known empty",
            value=empty.skipped,
        )
        families: list = [calls, skipped]
        if longpoll is not None:
            families.append(
                GaugeMetricFamily(
                    "pinlater_long_poll_parked",
                    "dequeues parked waiting for a job",
                    value=longpoll.parked(),
                )
            )
            watcher = longpoll.watcher
            families.append(
                CounterMetricFamily(
                    "pinlater_long_poll_checks",
                    "storage calls checking queues with parked dequeues (one per shard)",
                    value=0 if watcher is None else watcher.polls,
                )
            )
        broker = getattr(store, "broker", None)  # set after the registration
        if broker is not None:
            families += _broker_families(broker)
        return families

    return GaugeCollector(read)


def _broker_families(broker) -> list:
    """The prefetching broker (pinlater/storage/broker/): what it owns and holds now, what
    its jobs became, and how its written-behind hand-outs fared."""
    jobs = CounterMetricFamily(
        "pinlater_broker_jobs",
        "jobs the broker prefetched (reserved), served from its buffers, and released",
        labels=["event"],
    )
    for event, value in (
        ("prefetched", broker.prefetched),
        ("served", broker.served),
        ("released", broker.released),
    ):
        jobs.add_metric([event], value)
    stats = broker.handouts.stats
    handouts = CounterMetricFamily(
        "pinlater_broker_handouts",
        "hand-outs written behind: applied, refused (the reservation was gone), lost",
        labels=["result"],
    )
    for result, value in (
        ("written", stats.written),
        ("refused", stats.refused),
        ("lost", stats.lost),
    ):
        handouts.add_metric([result], value)
    return [
        GaugeMetricFamily(
            "pinlater_broker_partitions_owned",
            "(queue, shard) partitions this server's broker holds the lease of",
            value=len(broker.owned()),
        ),
        GaugeMetricFamily(
            "pinlater_broker_buffered_jobs",
            "jobs held in the broker's buffers now",
            value=broker.buffered(),
        ),
        jobs,
        handouts,
    ]


def drain_gauges(
    draining: Callable[[], dict[str, dict[str, int]]], map_pending: Callable[[], bool]
) -> GaugeCollector:
    """Drain progress read at scrape time from the last background count: `draining()` gives
    {shard: {queue: unfinished jobs}} of the dequeue_only shards counted; `map_pending()` is
    True while the shard map file holds a map that is not in force."""

    def read() -> list[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "pinlater_shard_draining_jobs",
            "unfinished jobs (pending, in progress, failed) left on a dequeue_only shard, per "
            "queue, as last counted (sharding.drain_count_interval_seconds)",
            labels=["shard", "queue"],
        )
        remaining = GaugeMetricFamily(
            "pinlater_shard_drain_remaining",
            "unfinished jobs left on a dequeue_only shard, all queues (0: drained, safe to "
            "remove from the shard map)",
            labels=["shard"],
        )
        for shard, queues in sorted(draining().items()):
            remaining.add_metric([shard], float(sum(queues.values())))
            for queue, count in sorted(queues.items()):
                jobs.add_metric([shard, queue], float(count))
        pending = GaugeMetricFamily(
            "pinlater_shard_map_pending",
            "1 while the shard map file holds a map that was not applied (it is retried)",
            value=1.0 if map_pending() else 0.0,
        )
        return [jobs, remaining, pending]

    return GaugeCollector(read)
