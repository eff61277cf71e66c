"""Background upkeep of the shard set: probe unhealthy shards back and hot-reload the shard map.

The shard map file (`backend.shard_map_file`) is re-read when its content changes; a bad file
keeps the current map and logs the problems. Only backends that declare
`supports_shard_reload` get reloads.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

from pinlater.common.sections import ConfigError
from pinlater.config import read_shard_map
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)


class ShardMapWatcher:
    """Reloads the store's shards when the shard map file's content changes."""

    def __init__(self, store: ShardedBackend, path: str, options):
        self.store = store
        self.path = path
        self.options = options
        self._digest = self._read_digest()

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(Path(self.path).read_bytes()).hexdigest()
        except OSError:
            return None

    def check(self) -> bool:
        """Reload if the file changed; return True when a new map was applied."""
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return False
        self._digest = digest
        try:
            specs = type(self.store.backend).parse_shards(
                read_shard_map(self.path), self.options, f"{self.path}: shards"
            )
            self.store.reload(specs)
        except ConfigError as exc:
            log.error("shard map %s not applied (keeping the current map): %s", self.path, exc)
            return False
        except Exception:
            log.exception("shard map %s not applied (keeping the current map)", self.path)
            return False
        return True


class MaintenanceThread(threading.Thread):
    """Every `interval` seconds: probe unhealthy shards, then check the shard map file."""

    def __init__(
        self, store: ShardedBackend, interval_seconds: float, watcher: ShardMapWatcher | None = None
    ):
        super().__init__(name="shard-maintenance", daemon=True)
        self.store = store
        self.interval = interval_seconds
        self.watcher = watcher
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.store.probe_unhealthy()
                if self.watcher is not None:
                    self.watcher.check()
            except Exception:
                log.exception("shard maintenance pass failed")

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
