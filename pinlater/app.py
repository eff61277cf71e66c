"""Composition root: builds the backend, the sharded store, the handler and background threads
from one validated Config. The only module that resolves a backend by name (`load_config` hands
the registry to the config loader, so the backend validates its own section).
"""

from __future__ import annotations

import functools
import logging
import socket
import time

from backends import backend_class
from pinlater import config as config_module
from pinlater.config import Config
from pinlater.handler.handler import PinLaterHandler
from pinlater.handler.observer import RequestObserver
from pinlater.idl import PinLater
from pinlater.ops.depth import DepthCollector
from pinlater.ops.janitor import Janitor
from pinlater.ops.maintenance import ShardMaintenance, ShardMapWatcher
from pinlater.ops.metrics import Metrics, live_gauges
from pinlater.ops.observer import OperatingObserver
from pinlater.ops.periodic import Periodic
from pinlater.ops.queue_settings import CHECK_INTERVAL_SECONDS, QueueConfigWatcher, check_files
from pinlater.ops.queue_slots import QueueSlots
from pinlater.ops.rate_limiter import QueueRateLimiter
from pinlater.ops.request_log import RequestLog
from pinlater.server.admission import Admission
from pinlater.server.http import MetricsServer, health_report
from pinlater.server.listen import bind
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)


def _check_queue_files(config: Config) -> list[str]:
    """The per-queue settings and ServerSet files, read once so a bad one is reported before
    the port is bound."""
    if not (config.queue_config or config.server_set_file):
        return []
    return check_files(config.queue_config, config.server_set_file)


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


class App:
    """Everything a server process runs besides the network loop."""

    def __init__(self, config: Config, observer: RequestObserver | None = None):
        self.config = config
        backend_cls = backend_class(config.backend.kind)
        self.backend = backend_cls(config.backend.options, config.storage_limits())
        self.store = ShardedBackend(
            self.backend,
            config.backend.shards,
            num_priorities=config.priorities.levels,
            retries=config.sharding.retries,
            unhealthy_after_failures=config.sharding.unhealthy_after_failures,
        )
        self.started = time.monotonic()
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
            ),
        )
        self.janitor = Janitor(
            self.store,
            config.janitor,
            on_queue_counts=self._janitor_counts,
            claim_timeout_for=lambda queue: self.queue_config.claim_timeout_for(
                queue, config.janitor.claim_timeout_seconds
            ),
        )
        self.metrics_server: MetricsServer | None = None
        self._threads: list[Periodic] = []

    def _build_operating(self, config: Config) -> None:
        """Metrics, per-queue rate limits (queue config + ServerSet) and admission caps."""
        self.metrics = Metrics()
        self.store.call_observer = self.metrics.shard_call
        self.limiter = QueueRateLimiter()
        self.queue_config = QueueConfigWatcher(
            config.queue_config,
            config.server_set_file,
            on_change=lambda qc, servers: self.limiter.configure(qc.rates(), servers),
            on_error=lambda kind: self.metrics.reload_errors.labels(kind).inc(),
        )
        self.admission = Admission(
            config.admission.max_concurrent_requests,
            config.admission.dequeue_cap(config.server.worker_threads),
            PinLater,
            on_refused=lambda kind: self.metrics.admission_refused.labels(kind).inc(),
        )
        self.depth = DepthCollector(self.store, self.metrics, cap=config.metrics.depth_count_cap)
        self._server_stats = self.admission.stats
        self.metrics.registry.register(
            # late-bound: attach_server replaces _server_stats after the gauges exist
            live_gauges(self.store, lambda: self._server_stats(), self.limiter.shares),  # noqa: PLW0108
        )

    def attach_server(self, server) -> None:
        """Let the gauges read the network loop's connection count."""
        self._server_stats = lambda: {
            "connections": server.connection_count(),
            **self.admission.stats(),
        }

    def health(self) -> tuple[int, dict]:
        return health_report(self.store, self.started)

    def _janitor_counts(self, queue: str, counts) -> None:
        self.metrics.janitor_queue(
            queue,
            counts.reclaimed_to_pending,
            counts.reclaimed_to_failed,
            counts.purged_succeeded,
            counts.purged_failed,
        )

    def start_background(self, metrics_socket: socket.socket | None = None) -> None:
        """Start the background duties (janitor, shard maintenance, queue-config watcher, queue
        depth), each a `Periodic`, and the metrics endpoint (on `metrics_socket` when the caller
        bound it already, as pinlater-server does); log durability warnings. Raises NotDurable
        (before starting anything) when `backend.require_durable` is set and any shard reported
        a warning."""
        problems = []
        for name in self.store.shard_names():
            for warning in self.store.shard(name).durability_warnings():
                log.warning("DURABILITY: %s", warning)  # each warning names its shard
                problems.append(warning)
        if problems and self.config.backend.require_durable:
            raise NotDurable(problems)
        if self.config.janitor.enabled:
            self._every("janitor", self.config.janitor.interval_seconds, self.janitor.run_once)
        self._every(
            "shard-maintenance",
            self.config.sharding.probe_interval_seconds,
            ShardMaintenance(self.store, self._shard_map_watcher()).run_once,
        )
        if self.config.queue_config or self.config.server_set_file:
            self._every("queue-config-watcher", CHECK_INTERVAL_SECONDS, self.queue_config.check)
        metrics = self.config.metrics
        if metrics.port:
            sock = metrics_socket or bind(metrics.host, metrics.port)
            self.metrics_server = MetricsServer(sock, self.metrics.registry, self.health).start()
            log.info(
                "metrics on http://%s:%d/metrics (health: /health)", *self.metrics_server.address
            )
            self._every(
                "queue-depth", metrics.depth_interval_seconds, self.depth.refresh, at_start=True
            )
        for thread in self._threads:
            thread.start()

    def _every(self, name: str, interval: float, duty, at_start: bool = False) -> None:
        self._threads.append(
            Periodic(
                name,
                interval,
                duty,
                run_at_start=at_start,
                on_failure=self.metrics.background_failed,
            )
        )

    def _shard_map_watcher(self) -> ShardMapWatcher | None:
        """The shard map file's watcher, when there is one and the backend can reload."""
        path = self.config.backend.shard_map_file
        if path and self.backend.supports_shard_reload:
            return ShardMapWatcher(self.store, path, self.config.backend.options)
        if path:
            log.warning(
                "backend %s cannot reload its shard map; changes to %s need a restart",
                self.backend.kind,
                path,
            )
        return None

    def close(self) -> None:
        """Stop background threads, then close storage. Idempotent."""
        for thread in self._threads:
            thread.stop()
        self._threads.clear()
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None
        self.handler.close()
        self.store.close()
