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
    """A FIFO queue's dequeue over `store` (a ShardedBackend): its piggy-backed `acks` first,
    then `Shard.dequeue_fifo` on each healthy shard that may hold its open jobs, in shard map
    order (normally one, its placement; more only while jobs from before it was FIFO are
    drained), each in its own order and under its own cap. Coverage and the empty-partition
    map do not apply (a FIFO head is known only to the storage). Raises QueueNotFound when no
    shard holds the queue, and a shard's failure when nothing was handed out."""
    if acks is not None:
        store.ack(queue, *acks)
    healthy = _healthy(store, queue)
    claim = None if dry_run else new_claim(source)
    got: list[tuple[JobDescriptor, DequeuedJob]] = []
    missing, failure = 0, None
    for name in healthy:
        if len(got) >= limit:
            break
        try:
            jobs = store.call(name, _fifo_call(queue, limit - len(got), cap, claim, budget))
        except QueueNotFound:
            missing += 1
            continue
        except ShardConnectionFailed as exc:
            failure = exc
            continue
        got += [(JobDescriptor(queue, name, j.priority, j.local_id), j) for j in jobs]
        budget = _spent(budget, jobs)
    if missing == len(healthy):
        raise QueueNotFound(queue)
    if not got and failure is not None:
        raise failure
    return got


def _healthy(store: Any, queue: str) -> list[str]:
    """The healthy shards that may hold the queue's open jobs; NoHealthyShards when none."""
    names = store.placement.dequeue_shards(queue) or store.shard_names()
    healthy = [name for name in names if store.health.is_healthy(name)]
    if not healthy:
        raise NoHealthyShards(f"no healthy shard to dequeue from (examined {list(names)})")
    return healthy


def _spent(budget: ByteBudget | None, jobs: list[DequeuedJob]) -> ByteBudget | None:
    return None if budget is None else budget.spent(len(jobs), sum(len(j.body) for j in jobs))


def _fifo_call(
    queue: str, limit: int, cap: int, claim: str | None, budget: ByteBudget | None
) -> Callable[[Shard], list[DequeuedJob]]:
    return lambda shard: shard.dequeue_fifo(queue, limit, cap, claim, budget)
