"""Background upkeep of the shard set: probe unhealthy shards back and hot-reload the shard map.

The shard map file (`backend.shard_map_file`) is re-read when its content changes; a bad file
keeps the current map and logs the problems. Only backends that declare
`supports_shard_reload` get reloads. `ShardMaintenance.run_once` is one pass; the composition
root runs it in a `pinlater.ops.periodic.Periodic`.
"""

from __future__ import annotations

import logging

from pinlater.common.sections import ConfigError
from pinlater.config import read_shard_map
from pinlater.ops.watched_file import WatchedFile
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)


class ShardMapWatcher:
    """Reloads the store's shards when the shard map file's content changes."""

    def __init__(self, store: ShardedBackend, path: str, options):
        self.store = store
        self.path = path
        self.options = options
        self._file = WatchedFile(path)

    def check(self) -> bool:
        """Reload if the file changed; return True when a new map was applied."""
        if not self._file.changed():
            return False
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


class ShardMaintenance:
    """One maintenance pass: probe unhealthy shards, then check the shard map file."""

    def __init__(self, store: ShardedBackend, watcher: ShardMapWatcher | None = None):
        self.store = store
        self.watcher = watcher

    def run_once(self) -> None:
        self.store.probe_unhealthy()
        if self.watcher is not None:
            self.watcher.check()
