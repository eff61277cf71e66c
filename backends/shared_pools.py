"""Connection pools shared by the shards that use the same connection settings.

Several logical shards can live on one storage server (MySQL databases of one instance, Redis
shards on one database): they share one pool, keyed by everything that identifies a
connection, and the last shard to close closes it. Shard-map reloads add and drop shards
freely on top of this.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
P = TypeVar("P")


class SharedPools(Generic[K, P]):
    """Pools by connection key, closed by `close_pool(pool)` with their last user.
    Thread-safe."""

    def __init__(self, close_pool: Callable[[P], None]):
        self._close_pool = close_pool
        self._lock = threading.Lock()
        self._pools: dict[K, list] = {}  # key -> [pool, users]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pools)

    def acquire(self, key: K, make: Callable[[], P]) -> P:
        """The pool of `key` (made by `make()` if there is none), with one more user. `make`
        must not block: pools connect lazily."""
        with self._lock:
            entry = self._pools.get(key)
            if entry is None:
                entry = self._pools[key] = [make(), 0]
            entry[1] += 1
            return entry[0]

    def release(self, key: K, pool: P) -> None:
        """Drop one user of `pool`; the last one closes it. A pool that `close` already closed
        is left alone."""
        with self._lock:
            entry = self._pools.get(key)
            if entry is None or entry[0] is not pool:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del self._pools[key]
        self._close_pool(pool)

    def close(self) -> None:
        """Close every pool (the backend is shutting down)."""
        with self._lock:
            pools, self._pools = [entry[0] for entry in self._pools.values()], {}
        for pool in pools:
            self._close_pool(pool)
