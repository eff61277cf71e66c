"""How far each draining (dequeue_only) shard has got: its unfinished jobs per queue, counted in
the background for the metrics, the admin API and `pinlater shards`, and remembered so that a
shard that dies once drained can still be removed from the map without asking it anything.

Unfinished means pending (runnable or future), in progress or failed: work that would be lost
with the shard. Succeeded jobs are history (the janitor purges them) and do not hold a shard.
One refresh costs, per healthy dequeue_only shard, one queue listing plus 6 capped counts per
queue; shards that take enqueues are not counted (nothing is draining).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pinlater.errors import QueueNotFound
from pinlater.storage.contract import ShardSpec
from pinlater.storage.models import JobState
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)

#: the states whose jobs a retired shard would lose
UNFINISHED_STATES = (JobState.PENDING, JobState.IN_PROGRESS, JobState.FAILED)


def unfinished_jobs(store: ShardedBackend, name: str, cap: int) -> dict[str, int]:
    """Unfinished jobs per queue on shard `name` (each state's count capped at `cap`), only
    queues holding some. Raises ShardConnectionFailed when the shard does not answer."""
    priorities = list(range(1, store.num_priorities + 1))
    held: dict[str, int] = {}
    for queue in sorted(store.call(name, lambda s: s.queue_names())):
        total = 0
        for state in UNFINISHED_STATES:
            for future in (False, True):
                try:
                    total += store.call(name, _count_call(queue, state, priorities, future, cap))
                except QueueNotFound:  # deleted meanwhile: holds nothing
                    continue
        if total:
            held[queue] = total
    return held


def _count_call(queue: str, state: JobState, priorities: list[int], future: bool, cap: int):
    """One capped count, its arguments bound now (not by the loop that builds it)."""
    return lambda shard: shard.count(queue, state, priorities, future, cap, None)


@dataclass(frozen=True)
class DrainCount:
    """One count of a draining shard: unfinished jobs per queue, when, and of which spec (a
    count stays valid only while the shard keeps that spec, still dequeue_only)."""

    jobs: dict[str, int]
    counted_at_ms: int
    spec: ShardSpec

    @property
    def total(self) -> int:
        return sum(self.jobs.values())

    def as_json(self) -> dict:
        return {"jobs": dict(self.jobs), "total": self.total, "counted_at_ms": self.counted_at_ms}


class DrainProgress:
    """Thread-safe last counts of the dequeue_only shards; `refresh()` is the periodic duty."""

    def __init__(self, store: ShardedBackend, cap: int, clock: Callable[[], float] = time.time):
        self.store = store
        self.cap = cap
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[str, DrainCount] = {}

    def refresh(self) -> None:
        """Count every healthy dequeue_only shard; a shard that fails keeps its last count."""
        self.prune()
        for spec in self.store.shard_specs():
            if not spec.dequeue_only or not self.store.health.is_healthy(spec.name):
                continue
            self.count(spec)

    def count(self, spec: ShardSpec) -> DrainCount | None:
        """Count one shard now and remember it (None when it did not answer)."""
        try:
            jobs = unfinished_jobs(self.store, spec.name, self.cap)
        except Exception as exc:  # noqa: BLE001 - one shard must not stop the others
            log.debug("draining shard %s not counted: %s", spec.name, exc)
            return None
        count = DrainCount(jobs, int(self._clock() * 1000), spec)
        with self._lock:
            self._counts[spec.name] = count
        return count

    def prune(self) -> None:
        """Forget counts of shards that left the map, take enqueues again or were repointed
        (called after every applied reload, so a stale count never vouches for a shard)."""
        current = {spec.name: spec for spec in self.store.shard_specs()}
        with self._lock:
            for name, count in list(self._counts.items()):
                spec = current.get(name)
                if spec is None or not spec.dequeue_only or spec != count.spec:
                    del self._counts[name]

    def get(self, name: str) -> DrainCount | None:
        with self._lock:
            return self._counts.get(name)

    def snapshot(self) -> dict[str, DrainCount]:
        with self._lock:
            return dict(self._counts)
