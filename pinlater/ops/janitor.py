"""The janitor: reclaims expired claims and purges finished jobs after their TTL.

Two steps per (shard, queue, priority), each in bounded batches, both idempotent and safe to
run from every server at once (each transition is a guarded statement in the storage), after
freeing what an interrupted deleteQueue left on the shard (`Shard.finish_deletes`):
- reclaim: IN_PROGRESS jobs whose updated_at is older than the claim timeout go back to PENDING
  with one attempt used, or to FAILED when none is left (a dead worker's job comes back);
- purge: SUCCEEDED / FAILED jobs whose updated_at is older than their TTL are deleted;
then, per (shard, queue), the unique-key records whose window has ended (`Shard.purge_keys`)
and the ledger's journal rows folded into one (`Shard.fold_ledger`, MySQL).
`run_once()` does one pass and returns counts, so tests drive it directly instead of sleeping;
the server runs it every `janitor.interval_seconds` in a `pinlater.ops.periodic.Periodic`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pinlater.config import JanitorConfig
from pinlater.errors import PinLaterError, QueueContended, QueueNotFound
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
    purged_keys: int = 0
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
                self._finish_deletes(name)
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
        if any(vars(counts).values()):
            log.info("janitor: %s", counts)
        return counts

    def _finish_deletes(self, name: str) -> None:
        """Free what interrupted deleteQueues left on the shard (Shard.finish_deletes); a
        failure here costs the shard's reclaim and purge nothing."""
        try:
            finished = self.store.call(name, lambda s: s.finish_deletes())
        except PinLaterError as exc:
            log.warning("janitor: shard %s: interrupted deletes not finished: %s", name, exc)
            return
        if finished:
            log.info("janitor: shard %s: finished %d interrupted queue deletes", name, finished)

    def _clean_queue(self, name: str, queue: str, counts: JanitorCounts) -> None:
        timeout = (
            self._claim_timeout_for(queue)
            if self._claim_timeout_for
            else self.config.claim_timeout_seconds
        )
        ttls = (
            (JobState.SUCCEEDED, self.config.succeeded_ttl_seconds),
            (JobState.FAILED, self.config.failed_ttl_seconds),
        )
        try:
            for priority in range(1, self.store.num_priorities + 1):
                self._reclaim(name, queue, priority, int(1000 * timeout), counts)
                for state, ttl in ttls:
                    self._purge(name, queue, priority, state, int(ttl * 1000), counts)
            self._purge_keys(name, queue, counts)
            self._fold_ledger(name, queue)
        except QueueNotFound:
            return  # deleted while we were cleaning it
        except QueueContended as exc:  # busy with its own DDL: the shard's other queues go on
            log.warning("janitor: queue %s on shard %s skipped this pass: %s", queue, name, exc)

    def _reclaim(
        self, name: str, queue: str, priority: int, timeout_ms: int, counts: JanitorCounts
    ) -> None:
        """Expired claims back to PENDING (or FAILED), batch by batch until a short batch."""
        batch = self.config.batch_size
        for _ in range(self._max_batches):
            step = self.store.call(
                name, lambda s: s.reclaim_expired(queue, priority, timeout_ms, batch)
            )
            counts.reclaimed_to_pending += step.retried
            counts.reclaimed_to_failed += step.failed
            if step.retried + step.failed < batch:
                return

    def _purge_keys(self, name: str, queue: str, counts: JanitorCounts) -> None:
        """Expired unique-key records deleted, batch by batch."""
        batch = self.config.batch_size
        for _ in range(self._max_batches):
            purged = self.store.call(name, lambda s: s.purge_keys(queue, batch))
            counts.purged_keys += purged
            if purged < batch:
                return

    def _fold_ledger(self, name: str, queue: str) -> None:
        """The ledger's journal rows folded into one, batch by batch (the books unchanged)."""
        batch = max(self.config.batch_size, 2)
        for _ in range(self._max_batches):
            if self.store.call(name, lambda s: s.fold_ledger(queue, batch)) < batch - 1:
                return

    def _purge(
        self,
        name: str,
        queue: str,
        priority: int,
        state: JobState,
        ttl_ms: int,
        counts: JanitorCounts,
    ) -> None:
        """Finished jobs of `state` older than `ttl_ms` deleted, batch by batch."""
        batch = self.config.batch_size
        for _ in range(self._max_batches):
            purged = self.store.call(name, lambda s: s.purge(queue, priority, state, ttl_ms, batch))
            if state is JobState.SUCCEEDED:
                counts.purged_succeeded += purged
            else:
                counts.purged_failed += purged
            if purged < batch:
                return
