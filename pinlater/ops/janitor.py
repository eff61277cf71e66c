"""The janitor: reclaims expired claims and purges finished jobs after their TTL.

Two steps per (shard, queue, priority), each in bounded batches, both idempotent and safe to
run from every server at once (each transition is a guarded statement in the storage):
- reclaim: IN_PROGRESS jobs whose updated_at is older than the claim timeout go back to PENDING
  with one attempt used, or to FAILED when none is left (a dead worker's job comes back);
- purge: SUCCEEDED / FAILED jobs whose updated_at is older than their TTL are deleted.
`run_once()` does one pass and returns counts, so tests drive it directly instead of sleeping;
`JanitorThread` runs it at the configured interval inside the server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pinlater.config import JanitorConfig
from pinlater.errors import PinLaterError, QueueNotFound
from pinlater.storage.models import JobState
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)


@dataclass
class JanitorCounts:
    """What one pass did."""

    reclaimed_to_pending: int = 0
    reclaimed_to_failed: int = 0
    purged_succeeded: int = 0
    purged_failed: int = 0
    shard_errors: int = 0

    def add(self, other: JanitorCounts) -> None:
        for key, value in vars(other).items():
            setattr(self, key, getattr(self, key) + value)


class Janitor:
    """Reclaimer and purger over every healthy shard of a ShardedBackend."""

    def __init__(
        self,
        store: ShardedBackend,
        config: JanitorConfig,
        *,
        claim_timeout_for: Callable[[str], float] | None = None,
        on_queue_counts: Callable[[str, JanitorCounts], None] | None = None,
        max_batches_per_step: int = 100,
    ):
        """`on_queue_counts(queue, counts)` is told what was done per (shard, queue) (metrics)."""
        self.store = store
        self.config = config
        self._claim_timeout_for = claim_timeout_for
        self._on_queue_counts = on_queue_counts
        self._max_batches = max_batches_per_step

    def run_once(self) -> JanitorCounts:
        """One pass over every healthy shard, queue and priority."""
        counts = JanitorCounts()
        for name in self.store.shard_names():
            if not self.store.health.is_healthy(name):
                continue
            try:
                queues = self.store.call(name, lambda s: s.queue_names())
                for queue in sorted(queues):
                    done = JanitorCounts()
                    try:
                        self._clean_queue(name, queue, done)
                    finally:
                        counts.add(done)
                        if self._on_queue_counts is not None and any(vars(done).values()):
                            self._on_queue_counts(queue, done)
            except PinLaterError as exc:
                counts.shard_errors += 1
                log.warning("janitor: shard %s skipped this pass: %s", name, exc)
        return counts

    def _clean_queue(self, name: str, queue: str, counts: JanitorCounts) -> None:
        timeout_ms = int(
            1000
            * (
                self._claim_timeout_for(queue)
                if self._claim_timeout_for
                else self.config.claim_timeout_seconds
            )
        )
        batch = self.config.batch_size
        ttls = (
            (JobState.SUCCEEDED, self.config.succeeded_ttl_seconds),
            (JobState.FAILED, self.config.failed_ttl_seconds),
        )
        try:
            for priority in range(1, self.store.num_priorities + 1):
                for _ in range(self._max_batches):
                    step = self.store.call(
                        name, lambda s: s.reclaim_expired(queue, priority, timeout_ms, batch)
                    )
                    counts.reclaimed_to_pending += step.retried
                    counts.reclaimed_to_failed += step.failed
                    if step.retried + step.failed < batch:
                        break
                for state, ttl in ttls:
                    for _ in range(self._max_batches):
                        purged = self.store.call(
                            name, lambda s: s.purge(queue, priority, state, int(ttl * 1000), batch)
                        )
                        if state is JobState.SUCCEEDED:
                            counts.purged_succeeded += purged
                        else:
                            counts.purged_failed += purged
                        if purged < batch:
                            break
        except QueueNotFound:
            return  # deleted while we were cleaning it


class JanitorThread(threading.Thread):
    """Runs `Janitor.run_once` every `interval` seconds until stopped."""

    def __init__(self, janitor: Janitor, interval_seconds: float):
        super().__init__(name="janitor", daemon=True)
        self.janitor = janitor
        self.interval = interval_seconds
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                counts = self.janitor.run_once()
            except Exception:
                log.exception("janitor pass failed")
                continue
            if any(vars(counts).values()):
                log.info("janitor: %s", counts)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
