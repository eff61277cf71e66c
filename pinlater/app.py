"""Composition root: builds the backend, the sharded store, the handler and background threads
from one validated Config. The only place that picks a backend by name.
"""

from __future__ import annotations

import logging

from backends import backend_class
from pinlater.config import Config
from pinlater.janitor import Janitor, JanitorThread
from pinlater.maintenance import MaintenanceThread, ShardMapWatcher
from pinlater.service import PinLaterHandler, RequestObserver
from pinlater.sharded import ShardedBackend

log = logging.getLogger(__name__)


class App:
    """Everything a server process runs besides the network loop."""

    def __init__(self, config: Config, observer: RequestObserver | None = None):
        self.config = config
        backend_cls = backend_class(config.backend.kind)
        self.backend = backend_cls(config.backend.options, config.storage_limits())
        self.store = ShardedBackend(
            self.backend, config.backend.shards, num_priorities=config.priorities.levels,
            retries=config.sharding.retries,
            unhealthy_after_failures=config.sharding.unhealthy_after_failures)
        self.handler = PinLaterHandler(self.store, config, observer)
        self.janitor = Janitor(self.store, config.janitor)
        self._threads: list = []

    def start_background(self) -> None:
        """Start the janitor and shard maintenance threads; log durability warnings."""
        for name in self.store.shard_names():
            for warning in self.store.shard(name).durability_warnings():
                log.warning("DURABILITY: shard %s: %s", name, warning)
        if self.config.janitor.enabled:
            self._threads.append(JanitorThread(self.janitor, self.config.janitor.interval_seconds))
        watcher = None
        if self.config.backend.shard_map_file and self.backend.supports_shard_reload:
            watcher = ShardMapWatcher(self.store, self.config.backend.shard_map_file,
                                      self.config.backend.options)
        elif self.config.backend.shard_map_file:
            log.warning("backend %s cannot reload its shard map; changes to %s need a restart",
                        self.backend.kind, self.config.backend.shard_map_file)
        self._threads.append(MaintenanceThread(
            self.store, self.config.sharding.probe_interval_seconds, watcher))
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """Stop background threads, then close storage. Idempotent."""
        for thread in self._threads:
            thread.stop()
        self._threads.clear()
        self.store.close()
