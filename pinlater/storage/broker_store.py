"""The prefetching broker's storage, one partition (queue x shard) at a time, over the sharded
layer: the `Shard` primitives (`prefetch`, `hand_out`, `release`, leases) called through
`ShardedBackend.call` (retries, health), with descriptors for what is prefetched and the
partition marked as holding jobs again when some return to PENDING. The rules are in
docs/semantics.md (`S-...`); the broker itself (buffers, lease spreading) lives above.

Where leases live: a partition's lease in the partition's shard (`partition_lease`), so its
owner is decided where its jobs are; server heartbeats on the first shard of the map (as the
runtime settings), so one `live_servers` read lists every live server.
"""

from __future__ import annotations

from collections.abc import Sequence

from pinlater.storage.claims import new_claim
from pinlater.storage.contract import ByteBudget
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import DequeuedJob
from pinlater.storage.sharded import ShardedBackend

PARTITION_LEASE_PREFIX = "partition/"
SERVER_LEASE_PREFIX = "server/"


def partition_lease(queue: str, priority: int | None = None) -> str:
    """The lease name of a queue's partition in the shard that holds the lease (the shard is
    where the lease lives, so it is not in the name); per priority when given."""
    suffix = "" if priority is None else f"/{int(priority)}"
    return f"{PARTITION_LEASE_PREFIX}{queue}{suffix}"


class BrokerStore:
    """Partition-level calls for the broker; every method is one storage call (plus retries)."""

    def __init__(self, store: ShardedBackend):
        self.store = store

    def prefetch(
        self,
        queue: str,
        shard: str,
        priority: int,
        limit: int,
        source: str,
        hold_ms: int,
        budget: ByteBudget | None = None,
    ) -> list[tuple[JobDescriptor, DequeuedJob]]:
        """Reserve up to `limit` jobs of the partition at `priority` under a new claim made
        for `source` (the broker's own), for `hold_ms`."""
        claim = new_claim(source)
        jobs = self.store.call(
            shard, lambda s: s.prefetch(queue, priority, limit, claim, hold_ms, budget)
        )
        return [(JobDescriptor(queue, shard, job.priority, job.local_id), job) for job in jobs]

    def hand_out(
        self,
        queue: str,
        shard: str,
        priority: int,
        jobs: Sequence[tuple[int, str]],
        claim: str | None = None,
    ) -> int:
        """`Shard.hand_out` of (local_id, prefetch claim) pairs; how many were handed out."""
        if not jobs:
            return 0
        return self.store.call(shard, lambda s: s.hand_out(queue, priority, jobs, claim))

    def release(
        self, queue: str, shard: str, priority: int, jobs: Sequence[tuple[int, str]]
    ) -> int:
        """`Shard.release`; the partition holds PENDING jobs again (parked dequeues look)."""
        if not jobs:
            return 0
        released = self.store.call(shard, lambda s: s.release(queue, priority, jobs))
        if released:
            self.store.jobs_may_be_due(queue, [shard], [priority], released)
        return released

    # ---- leases ----
    def acquire_lease(self, shard: str, name: str, owner: str, ttl_ms: int) -> bool:
        return self.store.call(shard, lambda s: s.acquire_lease(name, owner, ttl_ms))

    def release_lease(self, shard: str, name: str, owner: str) -> bool:
        return self.store.call(shard, lambda s: s.release_lease(name, owner))

    def live_leases(self, shard: str, prefix: str) -> dict[str, str]:
        return self.store.call(shard, lambda s: s.live_leases(prefix))

    def heartbeat(self, server: str, ttl_ms: int) -> bool:
        """Renew this server's heartbeat lease (`server/<server>`, owned by itself) on the
        first shard of the map."""
        name = SERVER_LEASE_PREFIX + server
        return self.acquire_lease(self._first_shard(), name, server, ttl_ms)

    def live_servers(self) -> list[str]:
        """The servers whose heartbeat has not expired, sorted."""
        found = self.live_leases(self._first_shard(), SERVER_LEASE_PREFIX)
        return sorted(found.values())

    def _first_shard(self) -> str:
        return self.store.shard_names()[0]
