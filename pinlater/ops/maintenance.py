"""Background upkeep of the shard set: probe unhealthy shards back and hot-reload the shard map.

The shard map file (`backend.shard_map_file`) is re-read when its content changes, validated as
a whole (`pinlater.storage.shard_map`) and checked not to drop a shard that holds unfinished
jobs (`pinlater.ops.retire`) before it takes effect. A map that is not applied keeps the current
one, is logged (once per new reason), counted, and retried every
`sharding.shard_map_retry_seconds`: a drain that finishes, or a new shard that comes up, lets
it apply without another edit. Only backends that declare `supports_shard_reload` get reloads.
`ShardMaintenance.run_once` is one pass; the composition root runs it in a
`pinlater.ops.periodic.Periodic`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pinlater.common.sections import ConfigError
from pinlater.config import read_shard_map
from pinlater.ops.retire import RetireGuard, RetireRefused
from pinlater.ops.watched_file import WatchedFile
from pinlater.storage.shard_map import parse_shard_map
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)


class ShardMapWatcher:
    """Applies the shard map file when its content changes, retrying a map not applied.

    `on_rejected(shards)` is told of every rejected attempt (the shards whose drop was refused,
    empty for other reasons); `on_applied()` after every applied map."""

    def __init__(
        self,
        store: ShardedBackend,
        path: str,
        options,
        guard: RetireGuard | None = None,
        *,
        retry_seconds: float = 10.0,
        on_rejected: Callable[[list[str]], None] | None = None,
        on_applied: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.path = path
        self.options = options
        self.guard = guard
        self.retry_seconds = retry_seconds
        self.on_rejected = on_rejected
        self.on_applied = on_applied
        self._clock = clock
        self._file = WatchedFile(path)
        self._retry_at: float | None = None
        self._last_problem: str | None = None

    @property
    def pending(self) -> bool:
        """The file holds a map that is not in force (it is being retried)."""
        return self._retry_at is not None

    def check(self) -> bool:
        """Apply the map if the file changed or a retry is due; True when a map was applied."""
        changed = self._file.changed()
        if not changed and (self._retry_at is None or self._clock() < self._retry_at):
            return False
        try:
            new = parse_shard_map(
                type(self.store.backend),
                read_shard_map(self.path),
                self.options,
                f"{self.path}: shards",
            )
            if self.guard is not None:
                self.guard.check(new)
            self.store.reload(new.specs, new.retired)
        except RetireRefused as exc:
            self._rejected("; ".join(exc.problems), exc.shards, changed)
            return False
        except ConfigError as exc:
            self._rejected("; ".join(exc.problems), [], changed)
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. a new shard failed to open: retried
            self._rejected(f"{type(exc).__name__}: {exc}", [], changed)
            return False
        self._retry_at = self._last_problem = None
        if self.on_applied is not None:
            self.on_applied()
        return True

    def _rejected(self, problem: str, shards: list[str], changed: bool) -> None:
        self._retry_at = self._clock() + self.retry_seconds
        key = ",".join(shards) or problem  # a drain's shrinking counts are not a new reason
        level = logging.ERROR if changed or key != self._last_problem else logging.DEBUG
        log.log(
            level,
            "shard map %s not applied (keeping the current map; retried every %gs): %s",
            self.path,
            self.retry_seconds,
            problem,
        )
        self._last_problem = key
        if self.on_rejected is not None:
            self.on_rejected(shards)


class ShardMaintenance:
    """One maintenance pass: probe unhealthy shards, then check the shard map file (with
    clusters: each cluster's that has one)."""

    def __init__(self, store: ShardedBackend, *watchers: ShardMapWatcher | None):
        self.store = store
        self.watchers = [watcher for watcher in watchers if watcher is not None]

    def run_once(self) -> None:
        self.store.probe_unhealthy()
        for watcher in self.watchers:
            watcher.check()
