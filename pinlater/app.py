"""Composition root: builds the backend, the sharded store, the handler and background threads
from one validated Config. The only module that resolves a backend by name (`load_config` hands
the registry to the config loader, so the backend validates its own section).
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from collections.abc import Callable

from backends import backend_class
from pinlater import config as config_module
from pinlater.common.tls import server_context
from pinlater.config import BackendConfig, Config
from pinlater.handler.handler import PinLaterHandler
from pinlater.handler.observer import RequestObserver
from pinlater.idl import PinLater
from pinlater.ops import schedules as schedule_ops
from pinlater.ops.admin_actions import AdminActions
from pinlater.ops.admin_reads import AdminContext, AdminReads
from pinlater.ops.cluster_view import cluster_gauges
from pinlater.ops.depth import DepthCollector
from pinlater.ops.drain import DrainProgress
from pinlater.ops.janitor import Janitor
from pinlater.ops.janitor_activity import JanitorActivity
from pinlater.ops.ledger_audit import LedgerAudit
from pinlater.ops.maintenance import ShardMaintenance, ShardMapWatcher
from pinlater.ops.metrics import Metrics, dequeue_path_metrics, drain_gauges, live_gauges
from pinlater.ops.observer import OperatingObserver
from pinlater.ops.partition_owner import PartitionOwner, new_server_id
from pinlater.ops.periodic import Periodic
from pinlater.ops.placement_check import PlacementCheck
from pinlater.ops.queue_settings import CHECK_INTERVAL_SECONDS, QueueConfigWatcher, check_files
from pinlater.ops.queue_slots import QueueSlots
from pinlater.ops.rate_limiter import QueueRateLimiter
from pinlater.ops.rates import JobRates
from pinlater.ops.request_log import RequestLog
from pinlater.ops.retire import RetireGuard
from pinlater.ops.runtime_settings import RuntimeSettings, SettingsHome
from pinlater.ops.shard_jobs import ShardJobCounts
from pinlater.ops.shard_stats import ShardStats
from pinlater.server.admin_api import AdminApi
from pinlater.server.admin_auth import AdminAuth
from pinlater.server.admission import Admission
from pinlater.server.dashboard import Dashboard
from pinlater.server.http import HttpListener, Routes, health_report
from pinlater.server.listen import bind
from pinlater.storage.broker.broker import Broker
from pinlater.storage.clusters import ClusterRouter
from pinlater.storage.contract import Shard
from pinlater.storage.empty_partitions import EmptyPartitions
from pinlater.storage.sharded import ShardedBackend
from pinlater.storage.signals import QueueSignals

log = logging.getLogger(__name__)


def _check_queue_files(config: Config) -> list[str]:
    """The per-queue settings and ServerSet files, read once so a bad one is reported before
    the port is bound."""
    if not (config.queue_config or config.server_set_file):
        return []
    return check_files(config.queue_config, config.server_set_file, list(config.clusters))


#: `pinlater.config.load_config` with the backend registry and the operating checks
load_config = functools.partial(
    config_module.load_config, resolve_backend=backend_class, checks=(_check_queue_files,)
)


class NotDurable(Exception):
    """`backend.require_durable` is set and some shard could lose accepted jobs."""

    def __init__(self, warnings: list[str]):
        super().__init__(
            f"backend.require_durable is set and {len(warnings)} durability problem(s) were found"
        )
        self.warnings = warnings


def _cluster_store(
    backend: BackendConfig,
    config: Config,
    cluster: str | None = None,
    shared: tuple[QueueSignals, EmptyPartitions] | None = None,
) -> ShardedBackend:
    """The sharded store of one backend section (with clusters: one cluster's)."""
    backend_cls = backend_class(backend.kind)
    storage = backend_cls(backend.options, config.storage_limits())
    enqueue_backend = None
    if config.server.role == "all" and backend_cls.isolates_connections:
        # enqueues get storage connections of their own (a dequeue storm cannot hold them)
        enqueue_backend = backend_cls(backend.options, config.storage_limits())
    signals, empty = shared or (None, None)
    return ShardedBackend(
        storage,
        backend.shards,
        num_priorities=config.priorities.levels,
        retries=config.sharding.retries,
        unhealthy_after_failures=config.sharding.unhealthy_after_failures,
        empty_partition_ttl=config.sharding.empty_partition_ttl_seconds,
        enqueue_backend=enqueue_backend,
        retired=backend.retired_shards,
        cluster=cluster,
        signals=signals,
        empty=empty,
    )


def build_store(config: Config) -> ShardedBackend:
    """The store the handler uses: the one backend's, or a ClusterRouter over `clusters:`."""
    if not config.clusters:
        return _cluster_store(config.backend, config)
    shared = (QueueSignals(), EmptyPartitions(config.sharding.empty_partition_ttl_seconds))
    stores: dict[str, ShardedBackend] = {}
    try:
        for name, section in config.clusters.items():
            stores[name] = _cluster_store(section, config, name, shared)
    except BaseException:
        for store in stores.values():
            store.close()
        raise
    return ClusterRouter(stores, config.default_cluster or next(iter(stores)))


class App:
    """Everything a server process runs besides the network loop."""

    def __init__(self, config: Config, observer: RequestObserver | None = None):
        self.config = config
        self.store = build_store(config)
        self.backend = self.store.backend
        self.started = time.monotonic()
        self.started_at = time.time()
        #: the admin API is served (a password is configured and the HTTP listener is on)
        self.admin_enabled = bool(config.admin.password_hash) and config.metrics.port != 0
        try:
            self._build_operating(config)
        except BaseException:
            self.store.close()
            raise
        self.handler = PinLaterHandler(
            self.store,
            config,
            observer
            or OperatingObserver(
                self.metrics,
                self.limiter,
                QueueSlots(config.admission.dequeue_cap_per_queue(config.server.worker_threads)),
                RequestLog(config.request_log.max_warnings_per_peer_per_minute),
                self.rates if self.admin_enabled else None,
            ),
            # late-bound: a re-read queue config replaces `config`
            unique_window_for=lambda q: self.queue_config.config.unique_window_seconds(q),  # noqa: PLW0108
            schedules=self.schedules.views,
        )
        self.metrics.registry.register(dequeue_path_metrics(self.store, self.handler.longpoll))
        self.partition_owner = self._build_broker(config)
        self.janitor = Janitor(
            self.store,
            config.janitor,
            on_queue_counts=self._janitor_counts,
            claim_timeout_for=self.settings.claim_timeout_for,
        )
        self.janitor_activity = JanitorActivity(self.janitor.run_tick)
        self.metrics_server: HttpListener | None = None
        self._threads: list[Periodic] = []

    def _build_broker(self, config: Config) -> PartitionOwner | None:
        """The prefetching broker (`store.broker`) and the lease keeper that tells it which
        partitions are its own; None when this server answers no dequeue or the backend has
        no prefetch primitives."""
        if config.server.role == "enqueue" or not _has_prefetch(self.store):
            return None
        if config.clusters:  # not yet: each cluster's dequeue would need the broker
            log.info("the prefetching broker is off: it does not serve clusters yet")
            return None
        settings, broker_config = self.settings, config.broker
        server_id = new_server_id()
        broker = Broker(
            self.store,
            server_id=server_id,
            prefetch_for=settings.prefetch_for,
            hold_ms=int(broker_config.hold_seconds * 1000),
            idle_seconds=broker_config.idle_seconds,
            write_behind_seconds=broker_config.write_behind_ms / 1000,
            low_water=broker_config.low_water,
            max_limit=broker_config.max_limit,
        )
        owner = PartitionOwner(
            self.store,
            broker,
            server_id=server_id,
            lease_ms=int(broker_config.lease_seconds * 1000),
            interval=broker_config.renew_seconds,
            queues=lambda: [q for q in broker.demanded() if settings.prefetch_for(q) > 0],
        )
        broker.on_new_demand = owner.wake
        self.store.broker = broker
        return owner

    def start_broker(self) -> None:
        """Start the broker's lease passes (part of `start_background`)."""
        if self.partition_owner is not None:
            self.partition_owner.start()

    def release_broker(self) -> None:
        """Stop buffering: every buffered job back to PENDING and every lease given up at
        once (the server's drain on SIGTERM, and `close`)."""
        if self.partition_owner is not None:
            self.partition_owner.close()

    def _build_operating(self, config: Config) -> None:
        """Metrics, per-queue rate limits (queue config + ServerSet) and admission caps."""
        self.metrics = Metrics(config.metrics.max_queues)
        self.shard_stats = ShardStats()
        self.store.call_observer = self.metrics.shard_call
        if self.admin_enabled:  # the admin API's shard view: recent latencies and errors
            self.store.call_observer = self._observe_call
            self.store.failure_observer = self.shard_stats.failure
        self.limiter = QueueRateLimiter()
        self.settings_home = SettingsHome(self.store)
        self.settings = RuntimeSettings(
            self.settings_home,
            self.limiter,
            config.janitor.claim_timeout_seconds,
            default_prefetch=config.broker.default_prefetch,
        )
        self.queue_config = QueueConfigWatcher(
            config.queue_config,
            config.server_set_file,
            on_change=self._queue_config_changed,
            on_error=lambda kind: self.metrics.reload_errors.labels(kind).inc(),
            clusters=list(config.clusters),
        )
        self.rates = JobRates(config.dashboard.rate_sample_seconds, config.dashboard.rate_samples)
        self.shard_jobs = ShardJobCounts(self.store, config.metrics.depth_count_cap)
        self.drain = DrainProgress(self.store, config.metrics.depth_count_cap)
        self.placement_check = PlacementCheck(self.store)
        #: one per shard map file (with clusters: per cluster that has one)
        self.shard_map_watchers = self._shard_map_watchers()
        self.admission = Admission(
            config.admission.max_concurrent_requests,
            config.admission.dequeue_cap(config.server.worker_threads),
            PinLater,
            on_refused=lambda kind: self.metrics.admission_refused.labels(kind).inc(),
        )
        self.depth = DepthCollector(
            self.store,
            self.metrics,
            cap=config.metrics.depth_count_cap,
            queues_per_tick=config.metrics.depth_queues_per_tick,
            interval=config.metrics.depth_interval_seconds,
        )
        self.ledger_audit = LedgerAudit(
            self.store, self.metrics, per_pass=config.metrics.ledger_audits_per_pass
        )
        self.schedules = schedule_ops.ScheduleRunner(
            self.store,
            # late-bound: a re-read queue config replaces `config`
            lambda: self.queue_config.config.schedule_list(),  # noqa: PLW0108
            on_counts=lambda queue, c: self.metrics.schedule_queue(
                queue, c.enqueued, c.deduplicated, c.failed
            ),
        )
        self._server_stats = self.admission.stats
        self.metrics.registry.register(
            # late-bound: attach_server replaces _server_stats after the gauges exist
            live_gauges(self.store, lambda: self._server_stats(), self.limiter.shares),  # noqa: PLW0108
        )
        if isinstance(self.store, ClusterRouter):
            self.metrics.registry.register(cluster_gauges(self.store, config.metrics.max_queues))
        watchers = self.shard_map_watchers
        self.metrics.registry.register(
            drain_gauges(
                lambda: {name: c.jobs for name, c in self.drain.snapshot().items()},
                lambda: any(watcher.pending for watcher in watchers),
            )
        )

    def _queue_config_changed(self, config, servers: int) -> None:
        if isinstance(self.store, ClusterRouter):  # before the partitions: they follow it
            self.store.configure(config.clusters())
        self.store.placement.configure(config.partitions())
        self.store.fifo.configure(config.fifo())
        self.settings.file_changed(config, servers)

    def _observe_call(self, shard: str, seconds: float, ok: bool) -> None:
        self.metrics.shard_call(shard, seconds, ok)
        self.shard_stats.call(shard, seconds, ok)

    def attach_server(self, server) -> None:
        """Let the gauges read the network loop's connection count."""
        self._server_stats = lambda: {
            "connections": server.connection_count(),
            **self.admission.stats(),
        }

    def health(self) -> tuple[int, dict]:
        return health_report(self.store, self.started)

    def _janitor_counts(self, queue: str, counts) -> None:
        self.janitor_activity.queue_counts(queue, counts)
        self.metrics.janitor_queue(
            queue,
            counts.reclaimed_to_pending,
            counts.reclaimed_to_failed,
            counts.purged_succeeded,
            counts.purged_failed,
        )

    def start_background(self, metrics_socket: socket.socket | None = None) -> None:
        """Start the background duties (janitor, shard maintenance, queue-config watcher,
        schedules, queue depth), each a `Periodic`, and the metrics endpoint (on
        `metrics_socket` when the caller bound it already, as pinlater-server does); log
        durability warnings. Raises NotDurable (before starting anything) when
        `backend.require_durable` is set and any shard reported a warning."""
        problems = []
        for name in self.store.shard_names():
            for warning in self.store.shard(name).durability_warnings():
                log.warning("DURABILITY: %s", warning)  # each warning names its shard
                if self._requires_durable(name):
                    problems.append(warning)
        if problems:
            raise NotDurable(problems)
        self.settings.poll()  # stored pauses and limits hold before the first request
        if isinstance(self.store, ClusterRouter):  # where each queue lives, before serving
            self.store.discover()
            self._every(
                "cluster-queues",
                self.config.sharding.placement_check_seconds,
                self.store.discover,
            )
        self._every("queue-settings", self.config.admin.settings_poll_seconds, self.settings.poll)
        if self.config.janitor.enabled:
            # ticks of `queues_per_tick` queues, spaced so a sweep of all takes the interval
            self._every("janitor", self.janitor.sweep.wait_seconds, self.janitor_activity.run)
        self._every(
            "shard-maintenance",
            self.config.sharding.probe_interval_seconds,
            ShardMaintenance(self.store, *self.shard_map_watchers).run_once,
        )
        self._every(
            "placement-check",
            self.config.sharding.placement_check_seconds,
            self.placement_check.run_once,
            at_start=True,
        )
        self._every(
            "shard-drain",
            self.config.sharding.drain_count_interval_seconds,
            self.drain.refresh,
            at_start=True,
        )
        if self.config.queue_config or self.config.server_set_file:
            self._every("queue-config-watcher", CHECK_INTERVAL_SECONDS, self.queue_config.check)
        if self.config.queue_config:  # schedules live there (and may appear when it changes)
            self._every(
                "schedules",
                schedule_ops.INTERVAL_SECONDS,
                lambda: self.schedules.run_once(time.time()),
            )
        if self.config.metrics.port:
            self._start_http(metrics_socket)
        for thread in self._threads:
            thread.start()
        self.start_broker()

    def _requires_durable(self, shard: str) -> bool:
        """`require_durable` of the backend section (with clusters: the cluster) of `shard`."""
        cluster = self.store.cluster_of_shard(shard)
        section = self.config.backend if cluster is None else self.config.clusters[cluster]
        return section.require_durable

    def _start_http(self, sock: socket.socket | None) -> None:
        """The HTTP listener (/metrics, /health, and /api/v1 when the admin API is on) on
        `sock` (bound here when None) and the background duties that feed it."""
        config, metrics = self.config, self.config.metrics
        tls = config.server.tls
        ssl_context = None
        if tls.enabled and tls.cert_file:  # validated: enabled TLS has a certificate
            ssl_context = server_context(tls.cert_file, tls.key_file)
        self.metrics_server = HttpListener(
            sock or bind(metrics.host, metrics.port),
            Routes(self.metrics.registry, self.health, *self._admin_web()),
            threads=metrics.http_threads,
            max_waiting=metrics.http_max_waiting,
            request_timeout=metrics.http_request_timeout_seconds,
            connections_per_client=metrics.http_connections_per_client,
            ssl_context=ssl_context,
            on_refused=lambda reason: self.metrics.http_refused.labels(reason).inc(),
        ).start()
        scheme = "https" if ssl_context else "http"
        log.info(
            "metrics on %s://%s:%d/metrics (health: /health%s)",
            scheme,
            *self.metrics_server.address,
            ", admin API: /api/v1/, dashboard: /ui/" if self.admin_enabled else "",
        )
        self._every(
            "ledger-audit",
            metrics.ledger_audit_interval_seconds,
            self.ledger_audit.run_once,
            at_start=True,
        )
        self._every("queue-depth", self.depth.sweep.wait_seconds, self.depth.tick, at_start=True)
        if self.admin_enabled:
            dashboard = config.dashboard
            self._every("job-rates", dashboard.rate_sample_seconds, self._sample_rates)
            self._every(
                "shard-job-counts",
                dashboard.shard_counts_interval_seconds,
                self.shard_jobs.refresh,
                at_start=True,
            )

    def _admin_web(self) -> tuple[AdminApi | None, Dashboard | None]:
        """The admin API and the dashboard over it (one session store, one password guard),
        or (None, None) when the admin password is not configured."""
        if not self.admin_enabled or self.handler.passwords is None:
            return None, None
        config = self.config
        ctx = AdminContext(
            config=config,
            store=self.store,
            settings=self.settings,
            settings_home=self.settings_home,
            rates=self.rates,
            depth=self.depth,
            shard_stats=self.shard_stats,
            shard_jobs=self.shard_jobs,
            drain=self.drain,
            janitor=self.janitor_activity,
            max_queue_name=self.handler.max_queue_name,
            started=self.started,
            started_at=self.started_at,
        )
        auth = AdminAuth(
            self.handler.passwords,
            config.admin,
            on_check=lambda outcome: self.metrics.admin_logins.labels(outcome).inc(),
        )
        reads = AdminReads(ctx)
        actions = AdminActions(ctx, self.handler.passwords, self.metrics)
        read_only = config.dashboard.read_only
        return (
            AdminApi(reads, actions, auth, read_only=read_only),
            Dashboard(reads, actions, auth, read_only=read_only),
        )

    def _sample_rates(self) -> None:
        snapshot, refreshed_at = self.depth.snapshot()
        known = {queue for queue, _, _ in snapshot} if refreshed_at else None
        self.rates.sample(known)

    def _every(
        self, name: str, interval: float | Callable[[], float], duty, at_start: bool = False
    ) -> None:
        self._threads.append(
            Periodic(
                name,
                interval,
                duty,
                run_at_start=at_start,
                on_failure=self.metrics.background_failed,
            )
        )

    def _shard_map_watchers(self) -> list[ShardMapWatcher]:
        """The shard map files' watchers: of `backend:`, or of each cluster that has one."""
        if isinstance(self.store, ClusterRouter):
            return [
                watcher
                for name, store in self.store.clusters.items()
                if (watcher := self._shard_map_watcher(store, self.config.clusters[name]))
            ]
        watcher = self._shard_map_watcher(self.store, self.config.backend)
        return [] if watcher is None else [watcher]

    def _shard_map_watcher(
        self, store: ShardedBackend, section: BackendConfig
    ) -> ShardMapWatcher | None:
        """The watcher of `section`'s shard map file, when it has one and its kind can
        reload."""
        path = section.shard_map_file
        if path and store.backend.supports_shard_reload:
            return ShardMapWatcher(
                store,
                path,
                section.options,
                RetireGuard(store, self.drain),
                retry_seconds=self.config.sharding.shard_map_retry_seconds,
                on_rejected=self._shard_map_rejected,
                on_applied=self.drain.prune,
            )
        if path:
            log.warning(
                "backend %s cannot reload its shard map; changes to %s need a restart",
                store.backend.kind,
                path,
            )
        return None

    def _shard_map_rejected(self, refused: list[str]) -> None:
        self.metrics.reload_errors.labels("shard_map").inc()
        for shard in refused:
            self.metrics.shard_retire_refused.labels(shard).inc()

    def close(self) -> None:
        """Stop background threads, then close storage. Idempotent."""
        for thread in self._threads:
            thread.stop()
        self._threads.clear()
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None
        self.handler.close()
        self.release_broker()
        self.store.close()


def _has_prefetch(store: ShardedBackend) -> bool:
    """Whether every shard implements the broker's storage primitives."""
    return all(
        type(store.shard(name)).prefetch is not Shard.prefetch for name in store.shard_names()
    )
