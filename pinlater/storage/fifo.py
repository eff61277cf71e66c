"""Which queues are FIFO queues (queue setting `fifo: true`) and their in-flight caps: the
sharded layer sends their dequeues to `Shard.dequeue_fifo` (docs/semantics.md `F-...`).
A FIFO queue is also placed on one shard (`QueueConfig.partitions` gives it 1), so its order
is one shard's order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from pinlater.errors import NoHealthyShards, QueueNotFound, ShardConnectionFailed
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import ByteBudget, Shard
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import DequeuedJob


class FifoQueues:
    """Thread-safe queue -> in-flight cap of the FIFO queues; replaced whole on a config change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._caps: dict[str, int] = {}

    def configure(self, caps: Mapping[str, int]) -> None:
        """Set every FIFO queue's cap (queues not named are not FIFO)."""
        with self._lock:
            self._caps = dict(caps)

    def cap(self, queue: str) -> int | None:
        """The queue's in-flight cap, or None when it is not a FIFO queue."""
        return self._caps.get(queue)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._caps)


def dequeue_fifo(
    store: Any,
    queue: str,
    limit: int,
    source: str,
    dry_run: bool,
    cap: int,
    acks: Any,
    budget: ByteBudget | None,
) -> list[tuple[JobDescriptor, DequeuedJob]]:
    """A FIFO queue's dequeue over `store` (a ShardedBackend): its piggy-backed `acks` first
    (riding with the first call when they all belong to its shard, as `ShardedBackend.dequeue`
    does), then `Shard.dequeue_fifo` on each healthy shard that may hold its open jobs, in
    shard map order (normally one, its placement; more only while jobs from before it was FIFO
    are drained), each in its own order and under its own cap. Coverage and the
    empty-partition map do not apply (a FIFO head is known only to the storage). Raises
    QueueNotFound when no shard holds the queue, and a shard's failure when nothing was handed
    out."""
    healthy = _healthy(store, queue)
    run = _FifoRun(store, queue, limit, cap, None if dry_run else new_claim(source), budget)
    lead = store._piggyback_lead(queue, acks, healthy, run.claim)
    if lead is not None:
        jobs = _lead_dequeue(store, queue, lead, acks, limit, cap, run.claim, budget)
        if jobs is not None:
            run.add(lead, jobs)
            healthy.remove(lead)
    for name in healthy:
        if run.got and len(run.got) >= limit:
            break
        run.step(name)
    return run.result()


class _FifoRun:
    """One FIFO dequeue's progress over its shards: the jobs so far, the reply room left, how
    many shards answered and how many do not hold the queue, the last failure."""

    def __init__(
        self,
        store: Any,
        queue: str,
        limit: int,
        cap: int,
        claim: str | None,
        budget: ByteBudget | None,
    ):
        self.store, self.queue, self.limit, self.cap, self.claim = store, queue, limit, cap, claim
        self.budget = budget
        self.got: list[tuple[JobDescriptor, DequeuedJob]] = []
        self.answered = 0
        self.missing = 0
        self.failure: ShardConnectionFailed | None = None

    def add(self, name: str, jobs: list[DequeuedJob]) -> None:
        self.answered += 1
        self.got += [(JobDescriptor(self.queue, name, j.priority, j.local_id), j) for j in jobs]
        if self.budget is not None:
            self.budget = self.budget.spent(len(jobs), sum(len(j.body) for j in jobs))

    def step(self, name: str) -> None:
        call = _fifo_call(self.queue, self.limit - len(self.got), self.cap, self.claim, self.budget)
        try:
            self.add(name, self.store.call(name, call))
        except QueueNotFound:
            self.missing += 1
        except ShardConnectionFailed as exc:
            self.failure = exc

    def result(self) -> list[tuple[JobDescriptor, DequeuedJob]]:
        if self.got:
            return self.got
        if self.failure is not None:
            raise self.failure
        if self.missing and not self.answered:
            raise QueueNotFound(self.queue)
        return self.got


def _lead_dequeue(
    store: Any,
    queue: str,
    name: str,
    acks: Any,
    limit: int,
    cap: int,
    claim: Any,
    budget: ByteBudget | None,
) -> list[DequeuedJob] | None:
    """The acks and shard `name`'s FIFO dequeue in one call (`Shard.ack_and_dequeue_fifo`);
    None when that failed and the acks were applied on their own instead (the shard is then
    asked again as any other). Parked dequeues are woken only for room this one left: it took
    what its acks freed unless it got its whole limit (waking every parked request after each
    ack made them all look for a job the acker had just taken)."""
    succeeded = [ack for _, ack in acks[0]]
    failed = [ack for _, ack in acks[1]]
    try:
        jobs = store.call(
            name,
            lambda s: s.ack_and_dequeue_fifo(queue, succeeded, failed, limit, cap, claim, budget),
        )[1]
    except (QueueNotFound, ShardConnectionFailed):
        store.ack(queue, *acks)  # a repeated ack is a no-op; it wakes parked requests itself
        return None
    freed = len(succeeded) + len(failed) - len(jobs)
    if len(jobs) >= limit and freed > 0:
        store.signals.changed(queue, freed)
    return jobs


def _healthy(store: Any, queue: str) -> list[str]:
    """The healthy shards that may hold the queue's open jobs; NoHealthyShards when none."""
    names = store.placement.dequeue_shards(queue) or store.shard_names()
    healthy = [name for name in names if store.health.is_healthy(name)]
    if not healthy:
        raise NoHealthyShards(f"no healthy shard to dequeue from (examined {list(names)})")
    return healthy


def _fifo_call(
    queue: str, limit: int, cap: int, claim: str | None, budget: ByteBudget | None
) -> Callable[[Shard], list[DequeuedJob]]:
    return lambda shard: shard.dequeue_fifo(queue, limit, cap, claim, budget)
