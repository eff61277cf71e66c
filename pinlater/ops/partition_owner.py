"""Which server's broker buffers which (queue, shard) partition: leases kept in the storage.

Every pass (each `broker.renew_seconds`, and at once when a queue first sees demand here) a
server renews its heartbeat (a lease `server/<id>` on the first shard), reads the live servers
(`live_leases`), and splits each queue's shards among them by rendezvous hashing of (queue,
shard, server) with bounded load (`assign`): each partition's owner takes (or renews) its lease
`partition/<queue>` in that shard and buffers it; a server that is no longer the owner
releases its buffered jobs and the lease, so a joining server gets its share on the next
passes. Partitions move only when the split changes; a dead server's leases and heartbeat
expire after `broker.lease_seconds`, and the others take its partitions over then. Only
queues with demand here (dequeues within `broker.idle_seconds`) and `prefetch` > 0 count: a
server without workers holds nothing. Correctness never depends on a lease (jobs are claimed
atomically in storage); leases only keep two brokers from buffering the same partition.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Sequence

from pinlater.errors import PinLaterError
from pinlater.storage.broker.broker import Broker, Partition

log = logging.getLogger(__name__)

#: lease names as pinlater/storage/broker_store.py (the storage side) spells them
SERVER_PREFIX = "server/"
PARTITION_PREFIX = "partition/"


def new_server_id() -> str:
    """A stable id for this process: host, pid and a random part (a restarted server on the
    same pid is another server)."""
    host = "".join(c for c in socket.gethostname() if c.isalnum() or c in "-_.")[:60] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def partition_lease(queue: str) -> str:
    """A partition's lease name; it lives in the partition's own shard."""
    return f"{PARTITION_PREFIX}{queue}"


def assign(queue: str, shards: Sequence[str], servers: Iterable[str]) -> dict[str, str]:
    """shard -> the server that should own (queue, shard): rendezvous hashing with bounded
    load. Pairs are taken by weight, highest first, each shard going to the first server of
    its ranking that has fewer than ceil(shards / servers) partitions of the queue, so a
    queue's partitions split evenly (within one) and every server computes the same split
    from the same live list; a join or a leave moves about the share that must move."""
    ranked = sorted(set(servers))
    if not ranked or not shards:
        return {}
    cap = -(-len(shards) // len(ranked))
    pairs = sorted(
        ((_weight(queue, shard, server), shard, server) for shard in shards for server in ranked),
        reverse=True,
    )
    owners: dict[str, str] = {}
    load = dict.fromkeys(ranked, 0)
    for _, shard, server in pairs:
        if shard not in owners and load[server] < cap:
            owners[shard] = server
            load[server] += 1
    return owners


def _weight(queue: str, shard: str, server: str) -> bytes:
    key = f"{queue}\0{shard}\0{server}".encode("ascii", "replace")
    return hashlib.blake2b(key, digest_size=8).digest()


class PartitionOwner:
    """Heartbeat, lease taking and giving up for one server's broker."""

    def __init__(
        self,
        store,
        broker: Broker,
        *,
        server_id: str,
        lease_ms: int,
        interval: float,
        queues: Callable[[], Iterable[str]],
    ):
        """`queues()`: the queues to consider (demand here and prefetch > 0)."""
        self.store = store
        self.broker = broker
        self.server_id = server_id
        self.lease_ms = lease_ms
        self.interval = interval
        self._queues = queues
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        #: the live servers the last pass saw (this one included)
        self.servers: set[str] = {server_id}

    # ---- one pass ----

    def run_once(self) -> None:
        """One pass; costs no storage call while no queue here wants the broker."""
        queues = sorted(self._queues())
        if not queues and not self.broker.owned():
            return
        self.servers = self._heartbeat()
        wanted = self._wanted(queues, self.servers)
        for queue, shard in sorted(wanted):
            self._take(queue, shard)
        for queue, shard in self.broker.owned() - wanted:
            self._give_up(queue, shard)

    def _heartbeat(self) -> set[str]:
        """Renew this server's heartbeat; the live servers (this one at least)."""
        home = self.store.shard_names()[0]
        name = SERVER_PREFIX + self.server_id
        try:
            self.store.call(home, lambda s: s.acquire_lease(name, self.server_id, self.lease_ms))
            live = self.store.call(home, lambda s: s.live_leases(SERVER_PREFIX))
        except PinLaterError as exc:
            log.warning("broker: heartbeat on shard %s failed: %s", home, exc)
            return self.servers  # the last view holds until the home shard answers
        return set(live.values()) | {self.server_id}

    def _wanted(self, queues: Iterable[str], servers: set[str]) -> set[Partition]:
        wanted: set[Partition] = set()
        for queue in queues:
            owners = assign(queue, self._shards(queue), servers)
            wanted.update(
                (queue, shard) for shard, owner in owners.items() if owner == self.server_id
            )
        return wanted

    def _shards(self, queue: str) -> Sequence[str]:
        placed = self.store.placement.dequeue_shards(queue)
        names = self.store.shard_names() if placed is None else placed
        return [name for name in names if self.store.health.is_healthy(name)]

    def _take(self, queue: str, shard: str) -> None:
        name = partition_lease(queue)
        try:
            ours = self.store.call(
                shard, lambda s: s.acquire_lease(name, self.server_id, self.lease_ms), retries=0
            )
        except PinLaterError as exc:
            log.warning("broker: lease %s on %s not renewed: %s", name, shard, exc)
            return  # kept until a pass can tell (buffered jobs stay reserved in storage)
        if ours:
            self.broker.own(queue, shard)
        else:  # another server holds it (it has not seen us yet, or it is leaving)
            self.broker.disown(queue, shard)

    def _give_up(self, queue: str, shard: str) -> None:
        self.broker.disown(queue, shard)
        name = partition_lease(queue)
        try:
            self.store.call(shard, lambda s: s.release_lease(name, self.server_id), retries=0)
        except PinLaterError as exc:
            log.warning("broker: lease %s on %s not released (it expires): %s", name, shard, exc)

    # ---- the thread ----

    def wake(self, queue: str | None = None) -> None:
        """Run a pass now (a queue saw its first demand here)."""
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="broker-owner", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.run_once()
            except Exception:
                log.exception("broker: ownership pass failed")
            self._wake.wait(self.interval)

    def close(self) -> None:
        """Stop the passes; release the buffered jobs, every lease and the heartbeat.
        Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for queue, shard in self.broker.owned():
            self._give_up(queue, shard)
        home = self.store.shard_names()[0]
        name = SERVER_PREFIX + self.server_id
        try:
            self.store.call(home, lambda s: s.release_lease(name, self.server_id), retries=0)
        except PinLaterError as exc:
            log.warning("broker: heartbeat not released (it expires): %s", exc)
